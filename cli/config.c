/* Scheduler address and token resolution for tidectl (see config.h). Reads only the files it is told
 * about; never prints a token. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xmalloc.h"

#define MAX_TOKEN_FILE 65536

static int check_port(const char *p)
{
    long v;
    char *end;

    if (!*p || !isdigit((unsigned char)*p))
        return -EINVAL;
    v = strtol(p, &end, 10);
    return (*end || v < 1 || v > 65535) ? -EINVAL : 0;
}

int tide_cli_scheduler_resolve(const char *opt, const char *env, char **out, tide_error_t *err)
{
    const char *s = (opt && *opt) ? opt : (env && *env) ? env : TIDE_CLI_DEFAULT_SCHEDULER;
    const char *port = NULL, *why = NULL;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close == s + 1)
            why = "unterminated '['";
        else if (close[1] == ':')
            port = close + 2;
        else if (close[1] != '\0')
            why = "expected ':' after ']'";
    } else {
        const char *colon = strchr(s, ':');
        if (colon && strchr(colon + 1, ':'))
            why = "IPv6 addresses need brackets, as in [::1]:7070";
        else if (colon == s)
            why = "missing host";
        else if (colon)
            port = colon + 1;
    }
    if (!why && port && check_port(port) < 0)
        why = "port must be 1-65535";
    for (const char *p = s; !why && *p; p++)
        if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
            why = "contains blanks";
    if (why) {
        tide_errprintf(err, "bad scheduler address '%.100s': %s", s, why);
        return -EINVAL;
    }
    *out = port ? tide_xstrdup(s) : tide_xasprintf("%s:%s", s, TIDE_CLI_DEFAULT_PORT);
    return 0;
}

static char *trim(const char *s, size_t n)
{
    while (n > 0 && isspace((unsigned char)*s))
        s++, n--;
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return tide_xstrndup(s, n);
}

static int read_token_file(const char *path, char **out, tide_error_t *err)
{
    char *buf = tide_xmalloc(MAX_TOKEN_FILE + 1);
    size_t len = 0;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;

    if (fd < 0) {
        rc = -errno;
        tide_errprintf(err, "cannot read token file %s: %s", path, strerror(errno));
        goto done;
    }
    while (len < MAX_TOKEN_FILE && (n = read(fd, buf + len, MAX_TOKEN_FILE - len)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            tide_errprintf(err, "cannot read token file %s: %s", path, strerror(errno));
            goto done;
        }
        len += (size_t)n;
    }
    /* A token has no NUL in it; stop there (a binary file then fails the emptiness check). */
    buf[len] = '\0';
    *out = trim(buf, strlen(buf));
    if (!**out) {
        free(*out);
        *out = NULL;
        rc = -EINVAL;
        tide_errprintf(err, "token file %s is empty", path);
    }
done:
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

int tide_cli_token_resolve(const char *token_file_opt, const char *env_token, const char *env_token_file,
                           const char *default_path, char **out, tide_error_t *err)
{
    *out = NULL;
    if (token_file_opt && *token_file_opt)
        return read_token_file(token_file_opt, out, err);
    if (env_token && *env_token) {
        *out = trim(env_token, strlen(env_token));
        if (**out)
            return 0;
        free(*out);
        *out = NULL;
    }
    if (env_token_file && *env_token_file)
        return read_token_file(env_token_file, out, err);
    if (default_path && access(default_path, R_OK) == 0)
        return read_token_file(default_path, out, err);
    return 0;
}

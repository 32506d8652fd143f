/* Token files, see token.h. A created token file is written whole with O_EXCL and mode 0600 before
 * anyone can read it. */
#include "token.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xmalloc.h"

char *tide_default_data_dir(void)
{
    const char *home = getenv("HOME");

    if (geteuid() == 0 || !home || !home[0])
        return tide_xstrdup("/var/lib/tide");
    return tide_xasprintf("%s/.local/share/tide", home);
}

static char *trim(const char *s, size_t n)
{
    while (n > 0 && isspace((unsigned char)*s))
        s++, n--;
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return tide_xstrndup(s, n);
}

int tide_token_read(const char *path, char **out, tide_error_t *err)
{
    char *buf = tide_xmalloc(TIDE_TOKEN_FILE_MAX + 1);
    size_t len = 0;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;

    *out = NULL;
    if (fd < 0) {
        rc = -errno;
        tide_errprintf(err, "cannot read token file %s: %s", path, strerror(errno));
        goto done;
    }
    while (len < TIDE_TOKEN_FILE_MAX && (n = read(fd, buf + len, TIDE_TOKEN_FILE_MAX - len)) != 0) {
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

int tide_token_generate(char **out, tide_error_t *err)
{
    unsigned char raw[32];
    char hex[2 * sizeof(raw) + 1];

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        tide_errprintf(err, "cannot make a token: getrandom: %s", strerror(errno));
        return -EIO;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    explicit_bzero(raw, sizeof(raw));
    *out = tide_xstrdup(hex);
    explicit_bzero(hex, sizeof(hex));
    return 0;
}

int tide_token_load_or_create(const char *path, char **out, tide_error_t *err)
{
    char *fresh = NULL, hex[80];
    int fd, rc = tide_token_read(path, out, err);

    if (rc != -ENOENT)
        return rc;
    if ((rc = tide_token_generate(&fresh, err)) < 0)
        return rc;
    snprintf(hex, sizeof(hex), "%s\n", fresh);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        if (rc == -EEXIST) /* created meanwhile by someone else: use theirs */
            rc = tide_token_read(path, out, err);
        else
            tide_errprintf(err, "cannot create token file %s: %s", path, strerror(-rc));
        goto done;
    }
    if (write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) || fsync(fd) < 0) {
        rc = -errno;
        close(fd);
        unlink(path);
        tide_errprintf(err, "cannot write token file %s: %s", path, strerror(-rc));
        goto done;
    }
    close(fd);
    *out = fresh;
    fresh = NULL;
    rc = 0;
done:
    if (fresh) {
        explicit_bzero(fresh, strlen(fresh));
        free(fresh);
    }
    explicit_bzero(hex, sizeof(hex));
    return rc;
}

int tide_token_resolve(const char *flag_file, const char *env_token, const char *env_token_file,
                       const char *default_path, char **out, tide_error_t *err)
{
    *out = NULL;
    if (flag_file && *flag_file)
        return tide_token_read(flag_file, out, err);
    if (env_token && *env_token) {
        *out = trim(env_token, strlen(env_token));
        if (**out)
            return 0;
        free(*out);
        *out = NULL;
    }
    if (env_token_file && *env_token_file)
        return tide_token_read(env_token_file, out, err);
    if (default_path && access(default_path, R_OK) == 0)
        return tide_token_read(default_path, out, err);
    return 0;
}

bool tide_token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);

    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

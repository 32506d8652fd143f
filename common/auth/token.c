/* Token files, see token.h. A created token file is written whole with O_EXCL and mode 0600 before
 * anyone can read it. */
#include "token.h"

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

static char *trim(char *s)
{
    char *end;

    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r'))
        *--end = '\0';
    return s;
}

int tide_token_read(const char *path, char **out, tide_error_t *err)
{
    char buf[1024];
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc;

    if (fd < 0) {
        rc = -errno;
        tide_errprintf(err, "cannot read token file %s: %s", path, strerror(errno));
        return rc;
    }
    n = read(fd, buf, sizeof(buf) - 1);
    rc = n < 0 ? -errno : 0;
    close(fd);
    if (rc < 0) {
        tide_errprintf(err, "cannot read token file %s: %s", path, strerror(-rc));
        return rc;
    }
    buf[n] = '\0';
    if (!trim(buf)[0]) {
        tide_errprintf(err, "token file %s is empty", path);
        return -EINVAL;
    }
    *out = tide_xstrdup(trim(buf));
    return 0;
}

int tide_token_load_or_create(const char *path, char **out, tide_error_t *err)
{
    unsigned char raw[32];
    char hex[2 * sizeof(raw) + 2];
    int fd, rc = tide_token_read(path, out, err);

    if (rc != -ENOENT)
        return rc;
    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
        tide_errprintf(err, "cannot make a token: getrandom: %s", strerror(errno));
        return -EIO;
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(hex + 2 * i, 3, "%02x", raw[i]);
    hex[2 * sizeof(raw)] = '\n';
    hex[2 * sizeof(raw) + 1] = '\0';
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        if (rc == -EEXIST) /* created meanwhile by someone else: use theirs */
            return tide_token_read(path, out, err);
        tide_errprintf(err, "cannot create token file %s: %s", path, strerror(errno));
        return rc;
    }
    if (write(fd, hex, strlen(hex)) != (ssize_t)strlen(hex) || fsync(fd) < 0) {
        rc = -errno;
        close(fd);
        unlink(path);
        tide_errprintf(err, "cannot write token file %s: %s", path, strerror(-rc));
        return rc;
    }
    close(fd);
    hex[2 * sizeof(raw)] = '\0';
    *out = tide_xstrdup(hex);
    return 0;
}

int tide_token_resolve(const char *flag_file, char **out, tide_error_t *err)
{
    const char *env = getenv("TIDE_TOKEN");
    const char *env_file = getenv("TIDE_TOKEN_FILE");
    char *dir, *path;
    int rc;

    *out = NULL;
    if (flag_file && flag_file[0])
        return tide_token_read(flag_file, out, err);
    if (env && env[0]) {
        char *copy = tide_xstrdup(env);
        *out = tide_xstrdup(trim(copy));
        free(copy);
        return 0;
    }
    if (env_file && env_file[0])
        return tide_token_read(env_file, out, err);
    dir = tide_default_data_dir();
    path = tide_xasprintf("%s/token", dir);
    free(dir);
    rc = access(path, R_OK) == 0 ? tide_token_read(path, out, err) : 0;
    free(path);
    return rc;
}

bool tide_token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);

    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

/* File-system helpers for the checkpoint copies (fsutil.h). Each is a thin wrapper that keeps one
 * behaviour in one place: links are never followed when removing, and directories are opened O_DIRECTORY. */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

void tide_fs_hex32(const uint8_t *d, char *hex)
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = '\0';
}

int tide_fs_sync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int rc = 0;

    if (fd < 0)
        return -errno;
    if (fsync(fd) != 0)
        rc = -errno;
    close(fd);
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

void tide_fs_remove_tree(const char *path)
{
    struct stat st;

    if (lstat(path, &st) != 0)
        return;
    if (!S_ISDIR(st.st_mode)) {
        unlink(path);
        return;
    }
    (void)nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int tide_fs_mkdir_p(const char *path, unsigned mode)
{
    char p[4096];
    size_t n = strlen(path);

    if (n == 0 || n >= sizeof(p))
        return -ENAMETOOLONG;
    memcpy(p, path, n + 1);
    for (char *q = p + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = '\0';
        if (mkdir(p, (mode_t)mode) != 0 && errno != EEXIST)
            return -errno;
        *q = '/';
    }
    return mkdir(p, (mode_t)mode) == 0 || errno == EEXIST ? 0 : -errno;
}

long tide_fs_thread_id(void)
{
    return syscall(SYS_gettid);
}

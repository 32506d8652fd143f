/* File-system helpers for the checkpoint copies (fsutil.h). Each is a thin wrapper that keeps one
 * behaviour in one place: links are never followed when removing, and directories are opened O_DIRECTORY. */
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#define REMOVE_MAX_DEPTH 128 /* deeper directories stay (each level holds a descriptor) */

/* Empties the directory open at fd (taken over and closed) without ever following a link: every entry
 * is removed relative to fd, and a subdirectory is opened relative to fd with O_NOFOLLOW before it is
 * emptied, so an entry swapped for a link meanwhile (a rank's account owns the tree being removed) is
 * at worst not removed, never followed out of the tree. */
static void empty_dir(int fd, int depth)
{
    DIR *d = fdopendir(fd);
    struct dirent *e;

    if (!d) {
        close(fd);
        return;
    }
    while ((e = readdir(d))) {
        int sub;

        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0 || errno != EISDIR || depth >= REMOVE_MAX_DEPTH)
            continue;
        sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0)
            continue;
        empty_dir(sub, depth + 1);
        (void)unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

void tide_fs_remove_tree(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0) {
        if (errno == ENOTDIR || errno == ELOOP)
            (void)unlink(path); /* a file or a link: the link itself */
        return;
    }
    empty_dir(fd, 0);
    (void)rmdir(path); /* never follows a link in its last component */
}

int tide_fs_open_regular(int dirfd, const char *path)
{
    struct stat st;
    int fd = openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), rc;

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = S_ISREG(st.st_mode) ? -errno : -EINVAL;
        close(fd);
        return rc;
    }
    return fd;
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

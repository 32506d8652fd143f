/* The durable copy of one checkpoint (see flush.h): blocking I/O for a threadpool thread; it never
 * logs and touches no global state. Invariant: the final name only ever appears through one rename
 * of a complete, fsynced and verified copy, and every error path removes the temporary file or
 * directory it made, so a reader of the durable directory sees the old copy or the new one, never a
 * part. */
#include "flush.h"
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xmalloc.h"

#define COPY_BUF           (1u << 20)
#define IOPRIO_CLASS_SHIFT 13
#define IOPRIO_CLASS_IDLE  3
#define IOPRIO_WHO_PROCESS 1
#define NICE_LOWEST        19

typedef struct copier {
    const tide_flush_copy_t *req;
    uint8_t *buf;
    uint64_t written; /* over the whole copy: fail_after counts these */
} copier_t;

void tide_flush_priority_lower(tide_flush_priority_t *saved)
{
    long tid = tide_fs_thread_id();
    long io = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);

    saved->ioprio = io < 0 ? -1 : (int)io;
    /* EPERM cannot happen for the idle class, but a kernel without CFQ/BFQ semantics may ignore it:
     * either way the copy goes on. */
    (void)syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT);
    errno = 0;
    saved->nice = getpriority(PRIO_PROCESS, (id_t)tid);
    saved->have_nice = !(saved->nice == -1 && errno != 0);
    (void)setpriority(PRIO_PROCESS, (id_t)tid, NICE_LOWEST);
}

void tide_flush_priority_restore(const tide_flush_priority_t *saved)
{
    long tid = tide_fs_thread_id();

    if (saved->ioprio >= 0)
        (void)syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, saved->ioprio);
    /* Going back up needs CAP_SYS_NICE or RLIMIT_NICE: without them the thread stays at nice 19. */
    if (saved->have_nice && saved->nice < NICE_LOWEST)
        (void)setpriority(PRIO_PROCESS, (id_t)tid, saved->nice);
}

void tide_flush_result_clear(tide_flush_result_t *res)
{
    if (!res)
        return;
    free(res->path);
    memset(res, 0, sizeof(*res));
}

static bool cancelled(const copier_t *cp)
{
    return cp->req->cancel && atomic_load(cp->req->cancel);
}

/* mkdir -p. Each directory whose parent got a new entry is appended to *sync (to fsync once the
 * copy is in place). */
static int mkdir_p(const char *dir, char ***sync, size_t *n_sync)
{
    char *p = tide_xstrdup(dir);
    size_t len = strlen(p);
    int rc = 0;

    for (size_t i = 1; i <= len; i++) {
        struct stat st;
        if (p[i] != '/' && p[i] != '\0')
            continue;
        if (p[i - 1] == '/')
            continue; /* "//" */
        p[i] = '\0';
        if (mkdir(p, 0700) == 0) {
            char *slash = strrchr(p, '/');
            *sync = tide_xrealloc(*sync, (*n_sync + 1) * sizeof(**sync));
            (*sync)[(*n_sync)++] =
                slash == p ? tide_xstrdup("/") : tide_xstrndup(p, (size_t)(slash - p));
        } else if (errno != EEXIST) {
            rc = -errno;
        } else if (stat(p, &st) != 0) {
            rc = -errno;
        } else if (!S_ISDIR(st.st_mode)) {
            rc = -ENOTDIR;
        }
        if (i < len)
            p[i] = '/';
        if (rc < 0)
            break;
    }
    free(p);
    return rc;
}

static int write_all(copier_t *cp, int fd, const uint8_t *buf, size_t len)
{
    const uint64_t fail_after = cp->req->fail_after;

    while (len > 0) {
        size_t n = len;
        ssize_t w;
        if (fail_after) {
            if (cp->written >= fail_after)
                return -EIO;
            if (n > fail_after - cp->written)
                n = (size_t)(fail_after - cp->written);
        }
        w = write(fd, buf, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        buf += w;
        len -= (size_t)w;
        cp->written += (uint64_t)w;
    }
    return 0;
}

/* Copies the regular file src to dst (which must not exist), hashing what it reads. The fd-level
 * work: on failure dst may exist (the caller removes it). */
static int copy_data(copier_t *cp, const char *src, const char *dst, char *hex, uint64_t *bytes,
                     const char *final, tide_error_t *err)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    int in = -1, out = -1, rc = 0;
    struct stat st;
    uint64_t total = 0;
    tide_fs_as_saved_t fs;

    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        rc = -ENOMEM;
        tide_errprintf(err, "%s: SHA-256 unavailable", src);
        goto done;
    }
    rc = tide_fs_as_enter(cp->req->src_as, &fs);
    if (rc == 0) {
        in = tide_fs_open_regular(AT_FDCWD, src);
        rc = in < 0 ? in : 0;
    }
    tide_fs_as_leave(&fs);
    if (rc < 0) {
        tide_errprintf(err, "checkpoint %s: %s", src,
                       rc == -EINVAL ? "not a regular file" : strerror(-rc));
        goto done;
    }
    if (fstat(in, &st) != 0) {
        rc = -errno;
        tide_errprintf(err, "checkpoint %s: %s", src, strerror(-rc));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        tide_errprintf(err, "checkpoint %s: not a regular file", src);
        goto done;
    }
    (void)posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
    out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", dst, strerror(-rc));
        goto done;
    }
    for (;;) {
        ssize_t n;
        if (cancelled(cp)) {
            rc = -ECANCELED;
            tide_errprintf(err, "copy of %s to %s: cancelled (worker stopping)", src, final);
            goto done;
        }
        n = read(in, cp->buf, COPY_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            tide_errprintf(err, "checkpoint %s: read: %s", src, strerror(-rc));
            goto done;
        }
        if (n == 0)
            break;
        if (!EVP_DigestUpdate(ctx, cp->buf, (size_t)n)) {
            rc = -EIO;
            tide_errprintf(err, "%s: SHA-256 failed", src);
            goto done;
        }
        rc = write_all(cp, out, cp->buf, (size_t)n);
        if (rc < 0) {
            tide_errprintf(err, "copy to %s: write: %s", final, strerror(-rc));
            goto done;
        }
        total += (uint64_t)n;
    }
    if (fsync(out) != 0) {
        rc = -errno;
        tide_errprintf(err, "copy to %s: fsync: %s", final, strerror(-rc));
        goto done;
    }
    /* It is on disk: keep it out of the page cache the training job uses. */
    (void)posix_fadvise(out, 0, 0, POSIX_FADV_DONTNEED);
    if (!EVP_DigestFinal_ex(ctx, digest, &dlen) || dlen != 32) {
        rc = -EIO;
        tide_errprintf(err, "%s: SHA-256 failed", src);
        goto done;
    }
    tide_fs_hex32(digest, hex);
    *bytes = total;
done:
    if (out >= 0 && close(out) != 0 && rc == 0) {
        rc = -errno;
        tide_errprintf(err, "copy to %s: close: %s", final, strerror(-rc));
    }
    if (in >= 0)
        close(in);
    EVP_MD_CTX_free(ctx);
    return rc;
}

/* rename(tmp, final), replacing whatever final is (a file, or a directory: then atomically
 * exchanged and the old one removed). */
static int replace(const char *tmp, const char *final)
{
    if (rename(tmp, final) == 0)
        return 0;
    if (errno != EISDIR && errno != ENOTDIR && errno != ENOTEMPTY && errno != EEXIST)
        return -errno;
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) != 0)
        return -errno;
    tide_fs_remove_tree(tmp); /* the previous copy, now under the temporary name */
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files directly in dir, sorted by name; listed as as (fs_as.h; NULL: the worker). */
static int list_files(const char *dir, const tide_fs_account_t *as, char ***names, size_t *n,
                      tide_error_t *err)
{
    tide_fs_as_saved_t fs;
    struct dirent *de;
    size_t cap = 0;
    DIR *d = NULL;
    int rc;

    *names = NULL;
    *n = 0;
    rc = tide_fs_as_enter(as, &fs);
    if (rc == 0 && !(d = opendir(dir)))
        rc = -errno;
    if (rc < 0) {
        tide_fs_as_leave(&fs);
        tide_errprintf(err, "checkpoint %s: %s", dir, strerror(-rc));
        return rc;
    }
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd(d), de->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            *names = tide_xrealloc(*names, cap * sizeof(**names));
        }
        (*names)[(*n)++] = tide_xstrdup(de->d_name);
    }
    closedir(d);
    tide_fs_as_leave(&fs);
    if (*n > 1)
        qsort(*names, *n, sizeof(**names), cmp_names);
    return 0;
}

static int copy_dir(copier_t *cp, const char *src, const char *tmp, const char *final,
                    tide_flush_result_t *res, tide_error_t *err)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    char **names = NULL;
    size_t n = 0;
    int rc;

    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        rc = -ENOMEM;
        tide_errprintf(err, "%s: SHA-256 unavailable", src);
        goto done;
    }
    rc = list_files(src, cp->req->src_as, &names, &n, err);
    if (rc < 0)
        goto done;
    if (mkdir(tmp, 0700) != 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", tmp, strerror(-rc));
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char *from = tide_xasprintf("%s/%s", src, names[i]);
        char *to = tide_xasprintf("%s/%s", tmp, names[i]);
        char *shown = tide_xasprintf("%s/%s", final, names[i]);
        char hex[65], *line;
        uint64_t bytes = 0;

        rc = copy_data(cp, from, to, hex, &bytes, shown, err);
        if (rc == 0) {
            /* The manifest line, as sha256sum prints it. */
            line = tide_xasprintf("%s  %s\n", hex, names[i]);
            if (!EVP_DigestUpdate(ctx, line, strlen(line))) {
                rc = -EIO;
                tide_errprintf(err, "%s: SHA-256 failed", src);
            }
            free(line);
            res->bytes += bytes;
            res->files++;
        }
        free(from);
        free(to);
        free(shown);
        if (rc < 0)
            goto done;
    }
    rc = tide_fs_sync_dir(tmp);
    if (rc < 0) {
        tide_errprintf(err, "copy to %s: fsync: %s", final, strerror(-rc));
        goto done;
    }
    if (!EVP_DigestFinal_ex(ctx, digest, &dlen) || dlen != 32) {
        rc = -EIO;
        tide_errprintf(err, "%s: SHA-256 failed", src);
        goto done;
    }
    tide_fs_hex32(digest, res->sha256);
done:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    EVP_MD_CTX_free(ctx);
    return rc;
}

/* The last component of path, without trailing slashes; NULL for "", "/", "." and "..". */
static char *base_name(const char *path)
{
    size_t end = strlen(path), start;
    char *b;

    while (end > 1 && path[end - 1] == '/')
        end--;
    start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    b = tide_xstrndup(path + start, end - start);
    if (!b[0] || strcmp(b, ".") == 0 || strcmp(b, "..") == 0 || strcmp(b, "/") == 0) {
        free(b);
        return NULL;
    }
    return b;
}

int tide_flush_copy(const tide_flush_copy_t *req, tide_flush_result_t *res, tide_error_t *err)
{
    copier_t cp = {req, NULL, 0};
    char *base = NULL, *final = NULL, *tmp = NULL;
    char **sync = NULL;
    size_t n_sync = 0;
    tide_fs_as_saved_t fs;
    struct stat st;
    int rc;

    memset(res, 0, sizeof(*res));
    base = base_name(req->src);
    if (!base) {
        rc = -EINVAL;
        tide_errprintf(err, "checkpoint path '%s' names no file", req->src);
        goto done;
    }
    rc = tide_fs_as_enter(req->src_as, &fs);
    if (rc == 0 && stat(req->src, &st) != 0)
        rc = -errno;
    tide_fs_as_leave(&fs);
    if (rc < 0) {
        tide_errprintf(err, "checkpoint %s: %s", req->src, strerror(-rc));
        goto done;
    }
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        rc = -EINVAL;
        tide_errprintf(err, "checkpoint %s: not a regular file or a directory", req->src);
        goto done;
    }
    rc = mkdir_p(req->dest_dir, &sync, &n_sync);
    if (rc < 0) {
        tide_errprintf(err, "durable directory %s: %s", req->dest_dir, strerror(-rc));
        goto done;
    }
    final = tide_xasprintf("%s/%s", req->dest_dir, base);
    tmp = tide_xasprintf("%s/.%s.tmp-%ld-%ld", req->dest_dir, base, (long)getpid(), tide_fs_thread_id());
    tide_fs_remove_tree(tmp); /* left by a crash of an earlier worker that had this pid and thread id */
    cp.buf = tide_xmalloc(COPY_BUF);
    if (S_ISREG(st.st_mode)) {
        rc = copy_data(&cp, req->src, tmp, res->sha256, &res->bytes, final, err);
        res->files = 1;
    } else {
        rc = copy_dir(&cp, req->src, tmp, final, res, err);
    }
    if (rc < 0)
        goto done;
    if (req->expect_sha256 && req->expect_sha256[0] &&
        strcasecmp(req->expect_sha256, res->sha256) != 0) {
        rc = -EBADMSG;
        tide_errprintf(err, "checkpoint %s: sha256 %s differs from the trainer's %.64s", req->src,
                       res->sha256, req->expect_sha256);
        goto done;
    }
    rc = replace(tmp, final);
    if (rc < 0) {
        tide_errprintf(err, "rename to %s: %s", final, strerror(-rc));
        goto done;
    }
    rc = tide_fs_sync_dir(req->dest_dir);
    for (size_t i = 0; rc == 0 && i < n_sync; i++)
        rc = tide_fs_sync_dir(sync[i]);
    if (rc < 0) {
        /* Renamed but perhaps not durable: report it, leave the copy (a retry replaces it). */
        tide_errprintf(err, "durable directory %s: fsync: %s", req->dest_dir, strerror(-rc));
        goto done;
    }
    res->path = final;
    final = NULL;
done:
    if (rc < 0 && tmp)
        tide_fs_remove_tree(tmp);
    if (rc < 0)
        tide_flush_result_clear(res);
    for (size_t i = 0; i < n_sync; i++)
        free(sync[i]);
    free(sync);
    free(cp.buf);
    free(base);
    free(final);
    free(tmp);
    return rc;
}

/* The checkpoint tier store (see ckpt_store.h): manifests, their verification, the search over
 * tiers and retention. Blocking I/O for a threadpool thread, no global state, never logs.
 * Invariant: a copy is only ever reported usable after every file its manifest lists was re-read
 * and matched in size and SHA-256, and a manifest only appears through one rename of a complete,
 * fsynced file. */
#include "ckpt_store.h"
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "clock.h"
#include "core.h"
#include "xmalloc.h"

#define HASH_BUF         (1u << 20)
#define MANIFEST_MAX     (16u << 20) /* 65536 files of ~200 bytes of JSON each fit */
#define MANIFEST_VERSION 1
#define MANIFEST_TMP     "." TIDE_CKPT_MANIFEST ".tmp-"
#define JSON_INT_MAX     9007199254740992.0 /* 2^53: larger integers are not exact in JSON */
#define STEP_PREFIX      "step-"
#define DELETE_MARK      ".del-"

void tide_ckpt_meta_clear(tide_ckpt_meta_t *meta)
{
    if (!meta)
        return;
    for (size_t i = 0; i < meta->n_files; i++)
        free(meta->files[i].name);
    free(meta->files);
    free(meta->job);
    memset(meta, 0, sizeof(*meta));
}

void tide_ckpt_found_clear(tide_ckpt_found_t *found)
{
    if (!found)
        return;
    free(found->path);
    tide_ckpt_meta_clear(&found->meta);
    memset(found, 0, sizeof(*found));
}

char *tide_ckpt_rank_dir(const char *tierdir, const char *job, int64_t step, int32_t rank)
{
    return tide_xasprintf("%s/%s/" STEP_PREFIX "%lld/rank-%d", tierdir, job, (long long)step,
                          (int)rank);
}

/* --- checks and hashing --- */

/* s is 64 hex digits; copies it lowercased into hex when hex is not NULL. */
static bool sha_ok(const char *s, char *hex)
{
    size_t n = strlen(s);

    if (n != 64)
        return false;
    for (size_t i = 0; i < 64; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'F')
            c = (char)(c - 'A' + 'a');
        else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
        if (hex)
            hex[i] = c;
    }
    if (hex)
        hex[64] = '\0';
    return true;
}

/* A name a manifest may list: one component, not the manifest, not a name of ours for a
 * temporary manifest. (Other dot names are allowed: torch.distributed.checkpoint writes
 * ".metadata".) */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= NAME_MAX && !strchr(s, '/') && strcmp(s, ".") != 0 &&
           strcmp(s, "..") != 0 && strcmp(s, TIDE_CKPT_MANIFEST) != 0 &&
           strncmp(s, MANIFEST_TMP, strlen(MANIFEST_TMP)) != 0;
}

static int cmp_files(const void *a, const void *b)
{
    return strcmp(((const tide_ckpt_file_t *)a)->name, ((const tide_ckpt_file_t *)b)->name);
}

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* flush_copy's directory rule over files sorted by name: SHA-256 of "HEX  NAME\n" lines. */
static int dir_rule(const tide_ckpt_file_t *files, size_t n, char *hex)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    int rc = 0;

    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        rc = -ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (!EVP_DigestUpdate(ctx, files[i].sha256, 64) || !EVP_DigestUpdate(ctx, "  ", 2) ||
            !EVP_DigestUpdate(ctx, files[i].name, strlen(files[i].name)) ||
            !EVP_DigestUpdate(ctx, "\n", 1)) {
            rc = -EIO;
            goto done;
        }
    }
    if (!EVP_DigestFinal_ex(ctx, digest, &dlen) || dlen != 32) {
        rc = -EIO;
        goto done;
    }
    tide_fs_hex32(digest, hex);
done:
    EVP_MD_CTX_free(ctx);
    return rc;
}

/* Hashes the regular file name in dirfd (not following a link). Returns 0 with *bytes and hex, or
 * -errno (-EINVAL: not a regular file) with err naming shown. */
static int hash_file(int dirfd, const char *name, const char *shown, uint8_t *buf, uint64_t *bytes,
                     char *hex, tide_error_t *err)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    uint64_t total = 0;
    struct stat st;
    int fd, rc = 0;

    fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        rc = errno == ELOOP ? -EINVAL : -errno;
        tide_errprintf(err, "%s: %s", shown,
                       rc == -EINVAL ? "a symbolic link, not a regular file" : strerror(-rc));
        goto done;
    }
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", shown, strerror(-rc));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        tide_errprintf(err, "%s: not a regular file", shown);
        goto done;
    }
    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL)) {
        rc = -ENOMEM;
        tide_errprintf(err, "%s: SHA-256 unavailable", shown);
        goto done;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (;;) {
        ssize_t n = read(fd, buf, HASH_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            tide_errprintf(err, "%s: read: %s", shown, strerror(-rc));
            goto done;
        }
        if (n == 0)
            break;
        if (!EVP_DigestUpdate(ctx, buf, (size_t)n)) {
            rc = -EIO;
            tide_errprintf(err, "%s: SHA-256 failed", shown);
            goto done;
        }
        total += (uint64_t)n;
    }
    if (!EVP_DigestFinal_ex(ctx, digest, &dlen) || dlen != 32) {
        rc = -EIO;
        tide_errprintf(err, "%s: SHA-256 failed", shown);
        goto done;
    }
    tide_fs_hex32(digest, hex);
    *bytes = total;
done:
    if (fd >= 0)
        close(fd);
    EVP_MD_CTX_free(ctx);
    return rc;
}

/* Checks meta's own rules (the ones a manifest must obey). Returns 0 or -EINVAL with err naming
 * what is wrong, prefixed by what. */
static int meta_check(const tide_ckpt_meta_t *m, const char *what, tide_error_t *err)
{
    char **names = NULL;
    int rc = -EINVAL;

    if (!m->job || !tide_worker_job_id_valid(m->job)) {
        tide_errprintf(err, "%s: job '%.64s' is not a valid job id", what, m->job ? m->job : "");
        goto done;
    }
    if (m->generation < 0 || m->rank < 0 || m->step < 0 || (double)m->step > JSON_INT_MAX ||
        m->time_ms < 0 || (double)m->time_ms > JSON_INT_MAX) {
        tide_errprintf(err, "%s: generation %d, rank %d, step %lld or time_ms %lld out of range",
                       what, (int)m->generation, (int)m->rank, (long long)m->step,
                       (long long)m->time_ms);
        goto done;
    }
    if (m->n_files < 1 || m->n_files > TIDE_CKPT_MAX_FILES || !m->files) {
        tide_errprintf(err, "%s: %zu files (1-%d)", what, m->n_files, TIDE_CKPT_MAX_FILES);
        goto done;
    }
    if (m->sha256[0] && !sha_ok(m->sha256, NULL)) {
        tide_errprintf(err, "%s: sha256 '%.64s' is not 64 hex digits", what, m->sha256);
        goto done;
    }
    names = tide_xmalloc(m->n_files * sizeof(*names));
    for (size_t i = 0; i < m->n_files; i++) {
        const tide_ckpt_file_t *f = &m->files[i];
        if (!f->name || !name_ok(f->name)) {
            tide_errprintf(err, "%s: file name '%.64s' is not a plain file name", what,
                           f->name ? f->name : "");
            goto done;
        }
        if (f->bytes > TIDE_CKPT_MAX_FILE_BYTES) {
            tide_errprintf(err, "%s: %s: absurd size %llu", what, f->name,
                           (unsigned long long)f->bytes);
            goto done;
        }
        if (!sha_ok(f->sha256, NULL)) {
            tide_errprintf(err, "%s: %s: sha256 '%.64s' is not 64 hex digits", what, f->name,
                           f->sha256);
            goto done;
        }
        names[i] = f->name;
    }
    qsort(names, m->n_files, sizeof(*names), cmp_strp);
    for (size_t i = 1; i < m->n_files; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            tide_errprintf(err, "%s: file %s listed twice", what, names[i]);
            goto done;
        }
    }
    rc = 0;
done:
    free(names);
    return rc;
}

/* --- the manifest, written --- */

int tide_ckpt_manifest_write(const char *dir, const tide_ckpt_meta_t *meta, tide_error_t *err)
{
    cJSON *root = NULL, *files;
    char *text = NULL, *tmp = NULL, *final = NULL;
    int fd = -1, rc;
    size_t len, off = 0;

    rc = meta_check(meta, "manifest", err);
    if (rc < 0)
        goto done;
    root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "version", MANIFEST_VERSION);
    cJSON_AddStringToObject(root, "job", meta->job);
    cJSON_AddNumberToObject(root, "generation", meta->generation);
    cJSON_AddNumberToObject(root, "step", (double)meta->step);
    cJSON_AddNumberToObject(root, "rank", meta->rank);
    files = cJSON_AddArrayToObject(root, "files");
    for (size_t i = 0; i < meta->n_files; i++) {
        cJSON *f = cJSON_CreateObject();
        char hex[65];
        (void)sha_ok(meta->files[i].sha256, hex);
        cJSON_AddStringToObject(f, "name", meta->files[i].name);
        cJSON_AddNumberToObject(f, "bytes", (double)meta->files[i].bytes);
        cJSON_AddStringToObject(f, "sha256", hex);
        cJSON_AddItemToArray(files, f);
    }
    {
        char hex[65] = "";
        if (meta->sha256[0])
            (void)sha_ok(meta->sha256, hex);
        cJSON_AddStringToObject(root, "sha256", hex);
    }
    cJSON_AddNumberToObject(root, "time_ms",
                            (double)(meta->time_ms ? meta->time_ms : tide_clock_wall_ms()));
    text = cJSON_Print(root);
    if (!text)
        abort(); /* cJSON fails only when out of memory */
    len = strlen(text);

    final = tide_xasprintf("%s/%s", dir, TIDE_CKPT_MANIFEST);
    tmp = tide_xasprintf("%s/%s%ld-%ld", dir, MANIFEST_TMP, (long)getpid(), tide_fs_thread_id());
    (void)unlink(tmp); /* left by a crash of an earlier worker that had this pid and thread id */
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", tmp, strerror(-rc));
        goto done;
    }
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = -errno;
            tide_errprintf(err, "%s: write: %s", final, strerror(-rc));
            goto done;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0) {
        rc = -errno;
        tide_errprintf(err, "%s: fsync: %s", final, strerror(-rc));
        goto done;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = -errno;
        tide_errprintf(err, "%s: close: %s", final, strerror(-rc));
        goto done;
    }
    fd = -1;
    if (rename(tmp, final) != 0) {
        rc = -errno;
        tide_errprintf(err, "rename to %s: %s", final, strerror(-rc));
        goto done;
    }
    free(tmp);
    tmp = NULL; /* renamed: nothing to remove any more */
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        rc = -errno;
        tide_errprintf(err, "%s: fsync: %s", dir, strerror(-rc));
        goto done;
    }
done:
    if (fd >= 0)
        close(fd);
    if (rc < 0 && tmp)
        (void)unlink(tmp);
    cJSON_Delete(root);
    free(text);
    free(tmp);
    free(final);
    return rc;
}

/* --- the manifest, read --- */

/* Reads dirfd's manifest (at most MANIFEST_MAX bytes) into *text (caller frees). */
static int read_manifest_text(int dirfd, const char *shown, char **text, tide_error_t *err)
{
    struct stat st;
    size_t len = 0;
    char *buf = NULL;
    int fd, rc = 0;

    *text = NULL;
    fd = openat(dirfd, TIDE_CKPT_MANIFEST, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        rc = errno == ELOOP ? -EINVAL : -errno;
        tide_errprintf(err, "%s: %s", shown,
                       rc == -ENOENT   ? "no manifest"
                       : rc == -EINVAL ? "a symbolic link"
                                       : strerror(-rc));
        goto done;
    }
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", shown, strerror(-rc));
        goto done;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > (off_t)MANIFEST_MAX) {
        rc = -EINVAL;
        tide_errprintf(err, "%s: not a regular file of at most %u bytes", shown, MANIFEST_MAX);
        goto done;
    }
    buf = tide_xmalloc((size_t)st.st_size + 1);
    for (;;) {
        ssize_t n = read(fd, buf + len, (size_t)st.st_size + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            tide_errprintf(err, "%s: read: %s", shown, strerror(-rc));
            goto done;
        }
        if (n == 0)
            break;
        len += (size_t)n;
        if (len > (size_t)st.st_size) {
            rc = -EINVAL; /* it grew while read: not a manifest of ours (ours are renamed in) */
            tide_errprintf(err, "%s: changed while read", shown);
            goto done;
        }
    }
    buf[len] = '\0';
    *text = buf;
    buf = NULL;
done:
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

/* An integer field in [lo, hi]. */
static int get_int(const cJSON *obj, const char *key, double lo, double hi, const char *shown,
                   double *out, tide_error_t *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (!v) {
        tide_errprintf(err, "%s: missing field %s", shown, key);
        return -EINVAL;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi || (double)(int64_t)v->valuedouble != v->valuedouble) {
        tide_errprintf(err, "%s: field %s is not an integer in %.0f..%.0f", shown, key, lo, hi);
        return -EINVAL;
    }
    *out = v->valuedouble;
    return 0;
}

static int get_str(const cJSON *obj, const char *key, const char *shown, const char **out,
                   tide_error_t *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

    if (!v) {
        tide_errprintf(err, "%s: missing field %s", shown, key);
        return -EINVAL;
    }
    if (!cJSON_IsString(v) || !v->valuestring) {
        tide_errprintf(err, "%s: field %s is not a string", shown, key);
        return -EINVAL;
    }
    *out = v->valuestring;
    return 0;
}

/* Parses the manifest text into *m (zeroed on failure; files sorted by name) and checks its rules.
 * Returns 0 or -EINVAL with err naming the problem. */
static int parse_manifest(const char *text, const char *shown, tide_ckpt_meta_t *m,
                          tide_error_t *err)
{
    cJSON *root = cJSON_Parse(text);
    const cJSON *files, *f;
    const char *s;
    double v;
    size_t i = 0;
    int rc = -EINVAL;

    memset(m, 0, sizeof(*m));
    if (!root || !cJSON_IsObject(root)) {
        tide_errprintf(err, "%s: not a JSON object", shown);
        goto done;
    }
    if (get_int(root, "version", MANIFEST_VERSION, MANIFEST_VERSION, shown, &v, err) < 0 ||
        get_str(root, "job", shown, &s, err) < 0)
        goto done;
    m->job = tide_xstrdup(s);
    if (get_int(root, "generation", 0, INT32_MAX, shown, &v, err) < 0)
        goto done;
    m->generation = (int32_t)v;
    if (get_int(root, "step", 0, JSON_INT_MAX, shown, &v, err) < 0)
        goto done;
    m->step = (int64_t)v;
    if (get_int(root, "rank", 0, INT32_MAX, shown, &v, err) < 0)
        goto done;
    m->rank = (int32_t)v;
    if (get_int(root, "time_ms", 0, JSON_INT_MAX, shown, &v, err) < 0)
        goto done;
    m->time_ms = (int64_t)v;
    if (get_str(root, "sha256", shown, &s, err) < 0)
        goto done;
    if (s[0] && !sha_ok(s, m->sha256)) {
        tide_errprintf(err, "%s: sha256 '%.64s' is not 64 hex digits", shown, s);
        goto done;
    }
    files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (!cJSON_IsArray(files)) {
        tide_errprintf(err, "%s: %s field files", shown, files ? "not an array:" : "missing");
        goto done;
    }
    m->n_files = (size_t)cJSON_GetArraySize(files);
    if (m->n_files < 1 || m->n_files > TIDE_CKPT_MAX_FILES) {
        tide_errprintf(err, "%s: %zu files (1-%d)", shown, m->n_files, TIDE_CKPT_MAX_FILES);
        goto done;
    }
    m->files = tide_xcalloc(m->n_files, sizeof(*m->files));
    cJSON_ArrayForEach(f, files)
    {
        char where[64];
        snprintf(where, sizeof(where), "files[%zu]", i);
        if (!cJSON_IsObject(f)) {
            tide_errprintf(err, "%s: %s is not an object", shown, where);
            goto done;
        }
        if (get_str(f, "name", shown, &s, err) < 0)
            goto done;
        m->files[i].name = tide_xstrdup(s);
        if (get_int(f, "bytes", 0, (double)TIDE_CKPT_MAX_FILE_BYTES, shown, &v, err) < 0)
            goto done;
        m->files[i].bytes = (uint64_t)v;
        if (get_str(f, "sha256", shown, &s, err) < 0)
            goto done;
        if (!sha_ok(s, m->files[i].sha256)) {
            tide_errprintf(err, "%s: %s: sha256 '%.64s' is not 64 hex digits", shown, where, s);
            goto done;
        }
        i++;
    }
    rc = meta_check(m, shown, err);
    if (rc < 0)
        goto done;
    qsort(m->files, m->n_files, sizeof(*m->files), cmp_files);
done:
    cJSON_Delete(root);
    if (rc < 0)
        tide_ckpt_meta_clear(m);
    return rc;
}

/* The whole sha256 (when given) is the one file's or the directory rule's over the listed files. */
static int check_whole(const tide_ckpt_meta_t *m, const char *shown, tide_error_t *err)
{
    char hex[65];
    int rc;

    if (!m->sha256[0] || (m->n_files == 1 && strcmp(m->sha256, m->files[0].sha256) == 0))
        return 0;
    rc = dir_rule(m->files, m->n_files, hex);
    if (rc < 0) {
        tide_errprintf(err, "%s: SHA-256 failed", shown);
        return rc;
    }
    if (strcmp(hex, m->sha256) != 0) {
        tide_errprintf(err, "%s: sha256 %s is neither a listed file's nor the directory's %s",
                       shown, m->sha256, hex);
        return -EBADMSG;
    }
    return 0;
}

/* Re-hashes every file m lists in dirfd; prefix + NAME names a file in err. */
static int check_files(int dirfd, const tide_ckpt_meta_t *m, const char *prefix, tide_error_t *err)
{
    uint8_t *buf = tide_xmalloc(HASH_BUF);
    int rc = 0;

    for (size_t i = 0; i < m->n_files && rc == 0; i++) {
        const tide_ckpt_file_t *f = &m->files[i];
        char *shown = tide_xasprintf("%s%s", prefix, f->name);
        struct stat st;
        uint64_t bytes = 0;
        char hex[65];

        /* The size first: a truncated file is named as such without reading it. */
        if (fstatat(dirfd, f->name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            int e = errno;
            rc = e == ENOENT ? -EBADMSG : -e;
            tide_errprintf(err, "%s: %s", shown, e == ENOENT ? "missing" : strerror(e));
        } else if (S_ISREG(st.st_mode) && (uint64_t)st.st_size != f->bytes) {
            rc = -EBADMSG;
            tide_errprintf(err, "%s: %llu bytes, manifest says %llu%s", shown,
                           (unsigned long long)st.st_size, (unsigned long long)f->bytes,
                           (uint64_t)st.st_size < f->bytes ? " (truncated)" : "");
        } else {
            rc = hash_file(dirfd, f->name, shown, buf, &bytes, hex, err);
            if (rc == -EINVAL || rc == -ENOENT)
                rc = -EBADMSG; /* not the file the manifest lists */
            if (rc == 0 && bytes != f->bytes) {
                rc = -EBADMSG;
                tide_errprintf(err, "%s: %llu bytes read, manifest says %llu", shown,
                               (unsigned long long)bytes, (unsigned long long)f->bytes);
            } else if (rc == 0 && strcmp(hex, f->sha256) != 0) {
                rc = -EBADMSG;
                tide_errprintf(err, "%s: sha256 mismatch: %s, manifest says %s", shown, hex,
                               f->sha256);
            }
        }
        free(shown);
    }
    free(buf);
    return rc;
}

/* Which copy a verification accepts beyond its checksums (NULL: any). */
typedef struct want {
    const char *job;
    int32_t rank, generation; /* generation < 0: any */
    int64_t step;
} want_t;

/* Reads and parses the manifest of the copy in dirfd, checks it is the wanted copy, then the manifest's
 * own hash and every file's size and SHA-256. shown names the manifest and prefix the files in messages.
 * Returns 0 with *m filled, or -errno (-ESTALE: another copy than wanted) with err; *m cleared then. */
static int verify_copy(int dirfd, const char *shown, const char *prefix, const want_t *w, tide_ckpt_meta_t *m,
                       tide_error_t *err)
{
    char *text = NULL;
    int rc = read_manifest_text(dirfd, shown, &text, err);

    if (rc < 0)
        goto done;
    rc = parse_manifest(text, shown, m, err);
    if (rc < 0)
        goto done;
    rc = -ESTALE;
    if (w && (strcmp(m->job, w->job) != 0 || m->rank != w->rank || m->step != w->step)) {
        tide_errprintf(err, "%s: is of job %s step %lld rank %d", shown, m->job, (long long)m->step,
                       (int)m->rank);
        goto done;
    }
    if (w && w->generation >= 0 && m->generation > w->generation) {
        tide_errprintf(err, "written by generation %d, not this lineage (generation %d)",
                       (int)m->generation, (int)w->generation);
        goto done;
    }
    rc = check_whole(m, shown, err);
    if (rc < 0)
        goto done;
    rc = check_files(dirfd, m, prefix, err);
done:
    if (rc < 0)
        tide_ckpt_meta_clear(m);
    free(text);
    return rc;
}

int tide_ckpt_verify(const char *dir, tide_ckpt_meta_t *out, tide_error_t *err)
{
    char *shown = tide_xasprintf("%s/%s", dir, TIDE_CKPT_MANIFEST);
    char *prefix = tide_xasprintf("%s/", dir);
    int dirfd, rc;

    memset(out, 0, sizeof(*out));
    dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", dir, strerror(-rc));
    } else {
        rc = verify_copy(dirfd, shown, prefix, NULL, out, err);
        close(dirfd);
    }
    free(shown);
    free(prefix);
    return rc;
}

/* --- scan --- */

int tide_ckpt_meta_scan(const char *dir, const char *job, int32_t generation, int64_t step,
                        int32_t rank, const char *trainer_sha256, tide_ckpt_meta_t *out,
                        tide_error_t *err)
{
    DIR *d = NULL;
    struct dirent *de;
    uint8_t *buf = NULL;
    size_t cap = 0;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (trainer_sha256 && trainer_sha256[0] && !sha_ok(trainer_sha256, out->sha256)) {
        rc = -EINVAL;
        tide_errprintf(err, "trainer sha256 '%.64s' is not 64 hex digits", trainer_sha256);
        goto done;
    }
    out->job = tide_xstrdup(job);
    out->generation = generation;
    out->step = step;
    out->rank = rank;
    d = opendir(dir);
    if (!d) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", dir, strerror(-rc));
        goto done;
    }
    buf = tide_xmalloc(HASH_BUF);
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        char *shown;
        tide_ckpt_file_t *f;
        if (!name_ok(de->d_name))
            continue; /* ".", "..", the manifest and its temporary names */
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (out->n_files == TIDE_CKPT_MAX_FILES) {
            rc = -EINVAL;
            tide_errprintf(err, "%s: more than %d files", dir, TIDE_CKPT_MAX_FILES);
            goto done;
        }
        if (out->n_files == cap) {
            cap = cap ? 2 * cap : 8;
            out->files = tide_xrealloc(out->files, cap * sizeof(*out->files));
        }
        f = &out->files[out->n_files];
        memset(f, 0, sizeof(*f));
        f->name = tide_xstrdup(de->d_name);
        out->n_files++;
        shown = tide_xasprintf("%s/%s", dir, de->d_name);
        rc = hash_file(dirfd(d), de->d_name, shown, buf, &f->bytes, f->sha256, err);
        free(shown);
        if (rc < 0)
            goto done;
    }
    if (out->n_files == 0) {
        rc = -ENOENT;
        tide_errprintf(err, "%s: no checkpoint files", dir);
        goto done;
    }
    qsort(out->files, out->n_files, sizeof(*out->files), cmp_files);
    if (!out->sha256[0]) {
        if (out->n_files == 1)
            memcpy(out->sha256, out->files[0].sha256, sizeof(out->sha256));
        else if ((rc = dir_rule(out->files, out->n_files, out->sha256)) < 0)
            tide_errprintf(err, "%s: SHA-256 failed", dir);
    }
    if (rc == 0) {
        rc = meta_check(out, dir, err);
        if (rc == 0)
            rc = check_whole(out, dir, err);
    }
done:
    if (d)
        closedir(d);
    free(buf);
    if (rc < 0)
        tide_ckpt_meta_clear(out);
    return rc;
}

/* --- steps of a job in a tier --- */

/* "step-N" with N canonical decimal (no sign, no leading zero) <= 2^53. */
static bool parse_step(const char *name, int64_t *step)
{
    const char *p = name + strlen(STEP_PREFIX);
    int64_t v = 0;

    if (strncmp(name, STEP_PREFIX, strlen(STEP_PREFIX)) != 0 || !*p || (p[0] == '0' && p[1]))
        return false;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (*p - '0');
        if ((double)v > JSON_INT_MAX)
            return false;
    }
    *step = v;
    return true;
}

/* The steps under jobdir, unordered. A missing jobdir has none. */
static int list_steps(const char *jobdir, int64_t **steps, size_t *n, tide_error_t *err)
{
    DIR *d = opendir(jobdir);
    struct dirent *de;
    size_t cap = 0;

    *steps = NULL;
    *n = 0;
    if (!d) {
        int rc = -errno;
        if (rc == -ENOENT)
            return 0;
        tide_errprintf(err, "%s: %s", jobdir, strerror(-rc));
        return rc;
    }
    while ((de = readdir(d)) != NULL) {
        int64_t step;
        if (de->d_name[0] == '.' || !parse_step(de->d_name, &step))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            *steps = tide_xrealloc(*steps, cap * sizeof(**steps));
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    return 0;
}

/* --- find --- */

typedef struct cand {
    int64_t step;
    size_t tier;
} cand_t;

static int cmp_cand(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;

    if (x->step != y->step)
        return x->step > y->step ? -1 : 1; /* newest first */
    return x->tier < y->tier ? -1 : x->tier > y->tier ? 1 : 0;
}

static void add_skip(const tide_ckpt_search_t *s, tide_ckpt_found_t *out, const cand_t *c, int rc,
                     const char *reason)
{
    tide_ckpt_skip_t skip = {.tier = s->tiers[c->tier].name, .step = c->step, .rc = rc};

    snprintf(skip.reason, sizeof(skip.reason), "%s", reason);
    if (s->on_skip)
        s->on_skip(s->ud, &skip);
    if (out->n_skipped < TIDE_CKPT_MAX_SKIPS)
        out->skipped[out->n_skipped] = skip;
    out->n_skipped++;
}

/* Tries one candidate: 0 with *m filled, or -errno with err saying why it is skipped. */
static int try_cand(const tide_ckpt_search_t *s, const char *path, int64_t step,
                    tide_ckpt_meta_t *m, tide_error_t *err)
{
    char *shown = tide_xasprintf("rank-%d/%s", (int)s->rank, TIDE_CKPT_MANIFEST);
    char *prefix = tide_xasprintf("rank-%d/", (int)s->rank);
    want_t w = {.job = s->job, .rank = s->rank, .generation = s->generation, .step = step};
    int dirfd, rc;

    memset(m, 0, sizeof(*m));
    dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        rc = -errno;
        if (rc == -ENOENT)
            tide_errprintf(err, "no copy of rank %d", (int)s->rank);
        else
            tide_errprintf(err, "rank-%d: %s", (int)s->rank, strerror(-rc));
    } else {
        rc = verify_copy(dirfd, shown, prefix, &w, m, err);
        close(dirfd);
    }
    free(shown);
    free(prefix);
    return rc;
}

int tide_ckpt_find(const tide_ckpt_search_t *s, tide_ckpt_found_t *out, tide_error_t *err)
{
    cand_t *cands = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (!s->job || !tide_worker_job_id_valid(s->job) || s->rank < 0 || s->resume_step < -1 ||
        s->generation < -1 || (s->n_tiers > 0 && !s->tiers)) {
        rc = -EINVAL;
        tide_errprintf(
            err, "checkpoint search: bad job '%.64s', rank %d, step %lld or generation %d",
            s->job ? s->job : "", (int)s->rank, (long long)s->resume_step, (int)s->generation);
        goto done;
    }
    for (size_t t = 0; t < s->n_tiers; t++) {
        const char *dir = s->tiers[t].dir;
        int64_t *steps = NULL;
        size_t k = 0;
        char *jobdir;
        tide_error_t lerr = {{0}};
        tide_fs_as_saved_t fs;
        if (!dir || !dir[0])
            continue;
        jobdir = tide_xasprintf("%s/%s", dir, s->job);
        rc = tide_fs_as_enter(s->tiers[t].as, &fs);
        if (rc == 0)
            rc = list_steps(jobdir, &steps, &k, &lerr);
        else
            tide_errprintf(&lerr, "%s: cannot read as uid %u: %s", jobdir,
                           (unsigned)s->tiers[t].as->uid, strerror(-rc));
        tide_fs_as_leave(&fs);
        free(jobdir);
        if (rc < 0) {
            /* An unreadable tier is passed over like a bad copy: the others may still serve. */
            cand_t c = {-1, t};
            add_skip(s, out, &c, rc, lerr.text);
            rc = 0;
            continue;
        }
        for (size_t i = 0; i < k; i++) {
            if (s->resume_step >= 0 && steps[i] > s->resume_step)
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                cands = tide_xrealloc(cands, cap * sizeof(*cands));
            }
            cands[n++] = (cand_t){steps[i], t};
        }
        free(steps);
    }
    if (n > 1)
        qsort(cands, n, sizeof(*cands), cmp_cand);
    for (size_t i = 0; i < n; i++) {
        const cand_t *c = &cands[i];
        char *path = tide_ckpt_rank_dir(s->tiers[c->tier].dir, s->job, c->step, s->rank);
        tide_error_t why = {{0}};
        tide_fs_as_saved_t fs;
        int trc = tide_fs_as_enter(s->tiers[c->tier].as, &fs);
        if (trc == 0)
            trc = try_cand(s, path, c->step, &out->meta, &why);
        else
            tide_errprintf(&why, "cannot read as uid %u: %s", (unsigned)s->tiers[c->tier].as->uid,
                           strerror(-trc));
        tide_fs_as_leave(&fs);
        if (trc == 0) {
            out->tier = c->tier;
            out->path = path;
            goto done;
        }
        add_skip(s, out, c, trc, why.text);
        free(path);
    }
    rc = -ENOENT;
    {
        char tiers[160] = "", bound[40] = "any step";
        size_t used = 0;
        if (s->resume_step >= 0)
            snprintf(bound, sizeof(bound), "step <= %lld", (long long)s->resume_step);
        for (size_t t = 0; t < s->n_tiers && used < sizeof(tiers); t++) {
            if (!s->tiers[t].dir || !s->tiers[t].dir[0])
                continue;
            used += (size_t)snprintf(tiers + used, sizeof(tiers) - used, "%s%s", used ? ", " : "",
                                     s->tiers[t].name ? s->tiers[t].name : "?");
        }
        tide_errprintf(err,
                       "no verified checkpoint of job %s rank %d at %s in %s "
                       "(%zu copies passed over)",
                       s->job, (int)s->rank, bound, tiers[0] ? tiers : "no tier", out->n_skipped);
    }
done:
    free(cands);
    return rc;
}

/* --- prune --- */

static int cmp_step_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x > y ? -1 : x < y ? 1 : 0;
}

int tide_ckpt_prune(const char *tierdir, const char *job, int keep, tide_error_t *err)
{
    char *jobdir = NULL;
    int64_t *steps = NULL;
    size_t n = 0;
    DIR *d;
    struct dirent *de;
    int rc = 0;

    if (!tierdir || !tierdir[0] || !job || !tide_worker_job_id_valid(job) || keep < 0) {
        rc = -EINVAL;
        tide_errprintf(err, "checkpoint prune: bad tier '%s', job '%.64s' or keep %d",
                       tierdir ? tierdir : "", job ? job : "", keep);
        goto done;
    }
    jobdir = tide_xasprintf("%s/%s", tierdir, job);
    rc = list_steps(jobdir, &steps, &n, err);
    if (rc < 0)
        goto done;
    if (n > 1)
        qsort(steps, n, sizeof(*steps), cmp_step_desc);
    for (size_t i = (size_t)keep; i < n; i++) {
        char *from = tide_xasprintf("%s/" STEP_PREFIX "%lld", jobdir, (long long)steps[i]);
        char *to = tide_xasprintf("%s/." STEP_PREFIX "%lld" DELETE_MARK "%ld-%ld", jobdir,
                                  (long long)steps[i], (long)getpid(), tide_fs_thread_id());
        tide_fs_remove_tree(to); /* left by a crash of an earlier worker that had this pid and thread id */
        if (rename(from, to) != 0) {
            rc = -errno;
            if (rc == -ENOENT) {
                rc = 0; /* pruned meanwhile by someone else */
            } else {
                tide_errprintf(err, "prune %s: %s", from, strerror(-rc));
            }
        } else {
            tide_fs_remove_tree(to);
        }
        free(from);
        free(to);
        if (rc < 0)
            goto done;
    }
    /* Steps whose removal a crash interrupted. */
    d = opendir(jobdir);
    if (d) {
        while ((de = readdir(d)) != NULL) {
            if (strncmp(de->d_name, "." STEP_PREFIX, strlen("." STEP_PREFIX)) == 0 &&
                strstr(de->d_name, DELETE_MARK)) {
                char *p = tide_xasprintf("%s/%s", jobdir, de->d_name);
                tide_fs_remove_tree(p);
                free(p);
            }
        }
        closedir(d);
    }
done:
    free(steps);
    free(jobdir);
    return rc;
}

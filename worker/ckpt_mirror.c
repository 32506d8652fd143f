/* The hot-tier peer mirror (see ckpt_mirror.h): WorkerCheckpoints Put/Fetch on the worker's rpc
 * server, and the client that pushes and pulls copies. Both directions share a sink (a header and
 * chunks written into TIER/JOB/.in-* then committed) and a source (a copy's files read chunk by
 * chunk on the threadpool, sent only while the connection holds less than HIGH_WATER).
 * Invariant: TIER/JOB/step-S/rank-R only ever appears by one rename of a directory whose manifest
 * was written by us and whose files tide_ckpt_verify re-read and matched; anything else is removed.
 * On a server, commits, prunes and fetch look-ups run one at a time, so a copy being fetched is
 * pinned before any later commit or prune can replace or remove it. */
#include "ckpt_mirror.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <uv.h>

#include <cjson/cJSON.h>

#include "core.h"
#include "fsutil.h"
#include "list.h"
#include "log.h"
#include "rpc_client.h"
#include "tide/v1/worker_service.pb-c.h"
#include "token.h"
#include "xmalloc.h"

#define HIGH_WATER        (4u << 20) /* queued in a call before the next read waits */
#define DEFAULT_MAX_BYTES (UINT64_C(64) << 30)
#define DEFAULT_MAX_FILES 4096u
#define DEFAULT_KEEP      2
#define DEFAULT_MAX_XFERS 16u
#define TMP_PREFIX        ".in-"  /* TIER/JOB/.in-STEP-RANK-PID-SEQ: a copy being received */
#define OLD_PREFIX        ".old-" /* TIER/JOB/step-S/.old-rank-R-...: a replaced copy */
#define MANIFEST_TMP      "." TIDE_CKPT_MANIFEST ".tmp-"
#define STEP_PREFIX       "step-"
#define MANIFEST_READ_MAX (16u << 20)

/* ------------------------------------------------------------------------------------------ */
/* small helpers (any thread) */

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

static int mkdir_ok(const char *path)
{
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -errno;
}

/* The rule ckpt_store.c applies to manifest names (kept in step with it). */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);

    return n > 0 && n <= NAME_MAX && !strchr(s, '/') && strcmp(s, ".") != 0 &&
           strcmp(s, "..") != 0 && strcmp(s, TIDE_CKPT_MANIFEST) != 0 &&
           strncmp(s, MANIFEST_TMP, strlen(MANIFEST_TMP)) != 0;
}

static bool sha_ok(const char *s)
{
    if (strlen(s) != 64)
        return false;
    for (size_t i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
              (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    return true;
}

static int cmp_strp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool parse_step(const char *name, int64_t *step)
{
    char *end;
    long long v;

    if (strncmp(name, STEP_PREFIX, strlen(STEP_PREFIX)) != 0)
        return false;
    name += strlen(STEP_PREFIX);
    if (*name < '0' || *name > '9')
        return false;
    errno = 0;
    v = strtoll(name, &end, 10);
    if (errno || *end)
        return false;
    *step = v;
    return true;
}

static void meta_copy(tide_ckpt_meta_t *dst, const tide_ckpt_meta_t *src)
{
    *dst = *src;
    dst->job = tide_xstrdup(src->job);
    dst->files = tide_xcalloc(src->n_files, sizeof(*dst->files));
    for (size_t i = 0; i < src->n_files; i++) {
        dst->files[i] = src->files[i];
        dst->files[i].name = tide_xstrdup(src->files[i].name);
    }
}

/* The generation recorded in dir's manifest, or -1 (no manifest or unreadable: not a copy). */
static int32_t manifest_generation(const char *dir)
{
    char *path = tide_xasprintf("%s/%s", dir, TIDE_CKPT_MANIFEST), *text = NULL;
    int32_t gen = -1;
    cJSON *root = NULL, *g;
    struct stat st;
    FILE *f = fopen(path, "re");

    if (!f || fstat(fileno(f), &st) != 0 || st.st_size <= 0 || st.st_size > MANIFEST_READ_MAX)
        goto done;
    text = tide_xmalloc((size_t)st.st_size + 1);
    if (fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        goto done;
    text[st.st_size] = '\0';
    root = cJSON_Parse(text);
    g = root ? cJSON_GetObjectItemCaseSensitive(root, "generation") : NULL;
    if (cJSON_IsNumber(g) && g->valuedouble >= 0 && g->valuedouble <= INT32_MAX)
        gen = (int32_t)g->valuedouble;
done:
    if (f)
        fclose(f);
    cJSON_Delete(root);
    free(text);
    free(path);
    return gen;
}

/* The highest generation of any copy of job in the tier (-1: none). */
static int32_t tier_max_generation(const char *jobdir)
{
    DIR *d = opendir(jobdir);
    struct dirent *e;
    int32_t best = -1;

    if (!d)
        return -1;
    while ((e = readdir(d))) {
        int64_t step;
        DIR *sd;
        struct dirent *re;
        char *stepdir;
        if (!parse_step(e->d_name, &step))
            continue;
        stepdir = tide_xasprintf("%s/%s", jobdir, e->d_name);
        sd = opendir(stepdir);
        while (sd && (re = readdir(sd))) {
            if (strncmp(re->d_name, "rank-", 5) == 0) {
                char *rd = tide_xasprintf("%s/%s", stepdir, re->d_name);
                int32_t g = manifest_generation(rd);
                if (g > best)
                    best = g;
                free(rd);
            }
        }
        if (sd)
            closedir(sd);
        free(stepdir);
    }
    closedir(d);
    return best;
}

/* ------------------------------------------------------------------------------------------ */
/* the sink: a copy being received into TIER/JOB/.in-... */

typedef struct sink {
    bool open;
    tide_ckpt_meta_t meta; /* from the header; owned */
    char *jobdir, *tmp, *final, *stepdir;
    uint64_t *written; /* per file */
    uint32_t cur;      /* the file being written */
    int fd;            /* its descriptor, -1 */
    uint64_t bytes;    /* declared total */
} sink_t;

/* Validates h and opens the temporary directory. Returns OK or the code with err. */
static tide_grpc_code_t sink_begin(sink_t *s, const char *tier, const Tide__V1__CheckpointHeader *h,
                                   uint64_t max_bytes, uint32_t max_files, uint64_t seq,
                                   tide_error_t *err)
{
    tide_grpc_code_t code = TIDE_GRPC_INVALID_ARGUMENT;
    char **names = NULL;
    uint64_t total = 0;
    int rc;

    memset(s, 0, sizeof(*s));
    s->fd = -1;
    if (!tide_worker_job_id_valid(h->job_id)) {
        tide_errprintf(err, "header: job_id '%.64s' is not a valid job id", h->job_id);
        goto fail;
    }
    if (h->generation < 0 || h->step < 0 || h->rank < 0) {
        tide_errprintf(err, "header: generation %d, step %lld and rank %d must be >= 0",
                       (int)h->generation, (long long)h->step, (int)h->rank);
        goto fail;
    }
    if (h->n_files < 1) {
        tide_errprintf(err, "header: no files");
        goto fail;
    }
    if (h->n_files > max_files) {
        code = TIDE_GRPC_RESOURCE_EXHAUSTED;
        tide_errprintf(err, "header: %zu files, the limit is %u", h->n_files, max_files);
        goto fail;
    }
    if (h->sha256[0] && !sha_ok(h->sha256)) {
        tide_errprintf(err, "header: sha256 '%.64s' is not 64 hex digits", h->sha256);
        goto fail;
    }
    names = tide_xmalloc(h->n_files * sizeof(*names));
    for (size_t i = 0; i < h->n_files; i++) {
        const Tide__V1__CheckpointFileInfo *f = h->files[i];
        if (!name_ok(f->name)) {
            tide_errprintf(err, "header: file name '%.64s' is not a plain file name", f->name);
            goto fail;
        }
        if (!sha_ok(f->sha256)) {
            tide_errprintf(err, "header: %.64s: sha256 is not 64 hex digits", f->name);
            goto fail;
        }
        if (f->bytes > max_bytes || total + f->bytes > max_bytes) {
            code = TIDE_GRPC_RESOURCE_EXHAUSTED;
            tide_errprintf(err, "header: the files' bytes exceed the limit of %llu",
                           (unsigned long long)max_bytes);
            goto fail;
        }
        total += f->bytes;
        names[i] = f->name;
    }
    qsort(names, h->n_files, sizeof(*names), cmp_strp);
    for (size_t i = 1; i < h->n_files; i++) {
        if (strcmp(names[i - 1], names[i]) == 0) {
            tide_errprintf(err, "header: file %.64s listed twice", names[i]);
            goto fail;
        }
    }

    s->meta.job = tide_xstrdup(h->job_id);
    s->meta.generation = h->generation;
    s->meta.step = h->step;
    s->meta.rank = h->rank;
    s->meta.n_files = h->n_files;
    s->meta.files = tide_xcalloc(h->n_files, sizeof(*s->meta.files));
    for (size_t i = 0; i < h->n_files; i++) {
        s->meta.files[i].name = tide_xstrdup(h->files[i]->name);
        s->meta.files[i].bytes = h->files[i]->bytes;
        snprintf(s->meta.files[i].sha256, sizeof(s->meta.files[i].sha256), "%s",
                 h->files[i]->sha256);
    }
    snprintf(s->meta.sha256, sizeof(s->meta.sha256), "%s", h->sha256);
    s->meta.time_ms = h->time_ms > 0 ? h->time_ms : 0;
    s->written = tide_xcalloc(h->n_files, sizeof(*s->written));
    s->bytes = total;
    s->jobdir = tide_xasprintf("%s/%s", tier, h->job_id);
    s->stepdir = tide_xasprintf("%s/" STEP_PREFIX "%lld", s->jobdir, (long long)h->step);
    s->final = tide_ckpt_rank_dir(tier, h->job_id, h->step, h->rank);
    s->tmp = tide_xasprintf("%s/" TMP_PREFIX "%lld-%d-%ld-%llu", s->jobdir, (long long)h->step,
                            (int)h->rank, (long)getpid(), (unsigned long long)seq);
    code = TIDE_GRPC_INTERNAL;
    rc = mkdir_ok(tier);
    if (rc == 0)
        rc = mkdir_ok(s->jobdir);
    if (rc < 0) {
        tide_errprintf(err, "%s: %s", s->jobdir, strerror(-rc));
        goto fail;
    }
    tide_fs_remove_tree(s->tmp); /* a crashed earlier worker with this pid may have left it */
    if (mkdir(s->tmp, 0755) != 0) {
        tide_errprintf(err, "%s: %s", s->tmp, strerror(errno));
        goto fail;
    }
    s->open = true;
    free(names);
    return TIDE_GRPC_OK;
fail:
    if (s->jobdir)
        (void)rmdir(s->jobdir); /* only when empty */
    free(names);
    tide_ckpt_meta_clear(&s->meta);
    free(s->written);
    free(s->jobdir);
    free(s->stepdir);
    free(s->final);
    free(s->tmp);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    return code;
}

/* Writes one chunk (synchronously: at most TIDE_CKPT_MIRROR_CHUNK bytes into the hot tier, so the
 * transport returns window credit only once it is written, which is the flow control). */
static tide_grpc_code_t sink_data(sink_t *s, const Tide__V1__CheckpointData *d, tide_error_t *err)
{
    const tide_ckpt_file_t *f;
    size_t off = 0;

    if (d->file_index >= s->meta.n_files) {
        tide_errprintf(err, "chunk: file_index %u out of range (%zu files)", d->file_index,
                       s->meta.n_files);
        return TIDE_GRPC_INVALID_ARGUMENT;
    }
    if (d->file_index < s->cur) {
        tide_errprintf(err, "chunk: file_index %u after file %u (files go in order)", d->file_index,
                       s->cur);
        return TIDE_GRPC_INVALID_ARGUMENT;
    }
    if (d->file_index > s->cur && s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    s->cur = d->file_index;
    f = &s->meta.files[s->cur];
    if (d->data.len == 0 || d->data.len > TIDE_CKPT_MIRROR_CHUNK) {
        tide_errprintf(err, "chunk: %zu data bytes (1-%u)", d->data.len, TIDE_CKPT_MIRROR_CHUNK);
        return TIDE_GRPC_INVALID_ARGUMENT;
    }
    if (d->offset != s->written[s->cur]) {
        tide_errprintf(err, "chunk: %s at offset %llu, expected %llu", f->name,
                       (unsigned long long)d->offset, (unsigned long long)s->written[s->cur]);
        return TIDE_GRPC_INVALID_ARGUMENT;
    }
    if (d->data.len > f->bytes - s->written[s->cur]) {
        tide_errprintf(err, "chunk: %s is longer than its %llu bytes", f->name,
                       (unsigned long long)f->bytes);
        return TIDE_GRPC_INVALID_ARGUMENT;
    }
    if (s->fd < 0) {
        char *path = tide_xasprintf("%s/%s", s->tmp, f->name);
        s->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        free(path);
        if (s->fd < 0) {
            tide_errprintf(err, "%s: %s", f->name, strerror(errno));
            return TIDE_GRPC_INTERNAL;
        }
    }
    while (off < d->data.len) {
        ssize_t w = pwrite(s->fd, d->data.data + off, d->data.len - off, (off_t)(d->offset + off));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            int e = errno;
            tide_errprintf(err, "%s: write: %s", f->name, strerror(e));
            return e == ENOSPC || e == EDQUOT ? TIDE_GRPC_RESOURCE_EXHAUSTED : TIDE_GRPC_INTERNAL;
        }
        off += (size_t)w;
    }
    s->written[s->cur] += d->data.len;
    return TIDE_GRPC_OK;
}

/* All the declared bytes arrived? Closes the open file. */
static tide_grpc_code_t sink_complete(sink_t *s, tide_error_t *err)
{
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    for (size_t i = 0; i < s->meta.n_files; i++) {
        if (s->written[i] != s->meta.files[i].bytes) {
            tide_errprintf(err, "%s: %llu of its %llu bytes arrived (truncated)",
                           s->meta.files[i].name, (unsigned long long)s->written[i],
                           (unsigned long long)s->meta.files[i].bytes);
            return TIDE_GRPC_INVALID_ARGUMENT;
        }
    }
    return TIDE_GRPC_OK;
}

typedef struct commit_opts {
    bool stale_check;  /* refuse a generation below the tier's newest copy of the job */
    bool pinned_final; /* the final path is being fetched: refuse to replace it */
    int keep;          /* > 0: prune the rank's steps to keep (pinned steps kept) */
    int64_t *pinned;   /* steps of (job, rank) being fetched; owned by the caller */
    size_t n_pinned;
} commit_opts_t;

static bool step_pinned(const commit_opts_t *o, int64_t step)
{
    for (size_t i = 0; i < o->n_pinned; i++)
        if (o->pinned[i] == step)
            return true;
    return false;
}

static int cmp_i64_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? 1 : x > y ? -1 : 0;
}

/* Keeps the newest o->keep steps that hold rank-RANK of the job; older copies of the rank are
 * renamed to a '.' name and removed, and a step directory left empty goes too. */
static void prune_rank(const sink_t *s, const commit_opts_t *o)
{
    DIR *d = opendir(s->jobdir);
    struct dirent *e;
    int64_t *steps = NULL;
    size_t n = 0, cap = 0, kept = 0;
    char rankname[32];

    if (!d)
        return;
    snprintf(rankname, sizeof(rankname), "rank-%d", (int)s->meta.rank);
    while ((e = readdir(d))) {
        int64_t step;
        struct stat st;
        char *p;
        if (!parse_step(e->d_name, &step))
            continue;
        p = tide_xasprintf("%s/%s/%s", s->jobdir, e->d_name, rankname);
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                steps = tide_xrealloc(steps, cap * sizeof(*steps));
            }
            steps[n++] = step;
        }
        free(p);
    }
    closedir(d);
    qsort(steps, n, sizeof(*steps), cmp_i64_desc);
    for (size_t i = 0; i < n; i++) {
        char *stepdir, *rd, *old;
        if (kept < (size_t)o->keep || step_pinned(o, steps[i])) {
            kept += kept < (size_t)o->keep;
            continue;
        }
        stepdir = tide_xasprintf("%s/" STEP_PREFIX "%lld", s->jobdir, (long long)steps[i]);
        rd = tide_xasprintf("%s/%s", stepdir, rankname);
        old = tide_xasprintf("%s/" OLD_PREFIX "%s-%ld", stepdir, rankname, (long)getpid());
        tide_fs_remove_tree(old);
        if (rename(rd, old) == 0)
            tide_fs_remove_tree(old);
        (void)rmdir(stepdir); /* only when no other rank is left in it */
        free(old);
        free(rd);
        free(stepdir);
    }
    free(steps);
}

/* On the threadpool: the manifest, verification, the rename into place and the prune. On failure
 * the temporary directory is gone. */
static tide_grpc_code_t sink_commit(sink_t *s, const commit_opts_t *o, uint64_t seq,
                                    tide_error_t *err)
{
    tide_grpc_code_t code = TIDE_GRPC_INTERNAL;
    tide_ckpt_meta_t v = {0};
    char *old = NULL;
    bool had_old = false;
    int rc;

    for (size_t i = 0; i < s->meta.n_files; i++) {
        char *p = tide_xasprintf("%s/%s", s->tmp, s->meta.files[i].name);
        int fd = open(p, O_RDONLY | O_CREAT | O_CLOEXEC, 0644); /* a 0-byte file got no chunk */
        free(p);
        if (fd < 0) {
            tide_errprintf(err, "%s: %s", s->meta.files[i].name, strerror(errno));
            goto fail;
        }
        (void)fsync(fd);
        close(fd);
    }
    rc = tide_ckpt_manifest_write(s->tmp, &s->meta, err);
    if (rc < 0) {
        code = rc == -EINVAL ? TIDE_GRPC_INVALID_ARGUMENT : TIDE_GRPC_INTERNAL;
        goto fail;
    }
    rc = tide_ckpt_verify(s->tmp, &v, err);
    tide_ckpt_meta_clear(&v);
    if (rc < 0) {
        code = rc == -EBADMSG  ? TIDE_GRPC_DATA_LOSS
               : rc == -EINVAL ? TIDE_GRPC_INVALID_ARGUMENT
                               : TIDE_GRPC_INTERNAL;
        goto fail;
    }
    if (o->stale_check) {
        int32_t have = tier_max_generation(s->jobdir);
        if (have > s->meta.generation) {
            code = TIDE_GRPC_FAILED_PRECONDITION;
            tide_errprintf(err, "generation %d of job %s is stale: this mirror holds generation %d",
                           (int)s->meta.generation, s->meta.job, (int)have);
            goto fail;
        }
    }
    if (o->pinned_final) {
        code = TIDE_GRPC_UNAVAILABLE;
        tide_errprintf(err, "%s is being fetched; retry later", s->final);
        goto fail;
    }
    rc = mkdir_ok(s->stepdir);
    if (rc < 0) {
        tide_errprintf(err, "%s: %s", s->stepdir, strerror(-rc));
        goto fail;
    }
    old = tide_xasprintf("%s/" OLD_PREFIX "rank-%d-%ld-%llu", s->stepdir, (int)s->meta.rank,
                         (long)getpid(), (unsigned long long)seq);
    if (rename(s->final, old) == 0)
        had_old = true;
    if (rename(s->tmp, s->final) != 0) {
        tide_errprintf(err, "rename to %s: %s", s->final, strerror(errno));
        if (had_old)
            (void)rename(old, s->final);
        (void)rmdir(s->stepdir);
        goto fail;
    }
    fsync_dir(s->stepdir);
    fsync_dir(s->jobdir);
    if (had_old)
        tide_fs_remove_tree(old);
    free(old);
    if (o->keep > 0)
        prune_rank(s, o);
    return TIDE_GRPC_OK;
fail:
    free(old);
    tide_fs_remove_tree(s->tmp);
    (void)rmdir(s->jobdir);
    return code;
}

/* Removes a copy that will not be committed (any thread). */
static void sink_discard(sink_t *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        s->fd = -1;
    }
    if (s->tmp) {
        tide_fs_remove_tree(s->tmp);
        (void)rmdir(s->jobdir);
    }
}

static void sink_clear(sink_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    tide_ckpt_meta_clear(&s->meta);
    free(s->written);
    free(s->jobdir);
    free(s->stepdir);
    free(s->final);
    free(s->tmp);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
}

/* ------------------------------------------------------------------------------------------ */
/* the source: a copy's files read one chunk at a time */

typedef struct source {
    bool open;
    char *dir;
    tide_ckpt_meta_t meta; /* owned */
    uint32_t idx;          /* the next chunk's file */
    uint64_t off;          /* and offset */
    int fd;
    uint8_t *buf; /* the chunk read */
    size_t len;   /* 0: every file sent */
    uint32_t chunk_idx;
    uint64_t chunk_off;
    bool done;
    bool has_as; /* dir is the account's: its files are opened as `as` (fs_as.h) */
    tide_fs_account_t as;
} source_t;

static void source_init(source_t *s, const char *dir, const tide_ckpt_meta_t *meta,
                        const tide_fs_account_t *as)
{
    memset(s, 0, sizeof(*s));
    s->open = true;
    s->fd = -1;
    s->dir = tide_xstrdup(dir);
    meta_copy(&s->meta, meta);
    if (as) {
        s->has_as = true;
        s->as = *as;
    }
}

/* On the threadpool: the next chunk into buf/len (len 0: all sent). Returns 0 or -errno. */
static int source_read(source_t *s, tide_error_t *err)
{
    const tide_ckpt_file_t *f;
    uint64_t want;
    ssize_t r;

    s->len = 0;
    while (s->idx < s->meta.n_files && s->off >= s->meta.files[s->idx].bytes) {
        if (s->fd >= 0) {
            close(s->fd);
            s->fd = -1;
        }
        s->idx++;
        s->off = 0;
    }
    if (s->idx >= s->meta.n_files) {
        s->done = true;
        return 0;
    }
    f = &s->meta.files[s->idx];
    if (s->fd < 0) {
        char *p = tide_xasprintf("%s/%s", s->dir, f->name);
        tide_fs_as_saved_t fs;
        int rc = tide_fs_as_enter(s->has_as ? &s->as : NULL, &fs);
        if (rc == 0 && (s->fd = tide_fs_open_regular(AT_FDCWD, p)) < 0)
            rc = s->fd;
        tide_fs_as_leave(&fs);
        if (rc < 0) {
            tide_errprintf(err, "%s: %s", p, strerror(-rc));
            free(p);
            return rc;
        }
        free(p);
    }
    if (!s->buf)
        s->buf = tide_xmalloc(TIDE_CKPT_MIRROR_CHUNK);
    want = f->bytes - s->off;
    if (want > TIDE_CKPT_MIRROR_CHUNK)
        want = TIDE_CKPT_MIRROR_CHUNK;
    do
        r = pread(s->fd, s->buf, (size_t)want, (off_t)s->off);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        int e = errno;
        tide_errprintf(err, "%s/%s: read: %s", s->dir, f->name, strerror(e));
        return -e;
    }
    if (r == 0) {
        tide_errprintf(err, "%s/%s: shorter than its manifest's %llu bytes", s->dir, f->name,
                       (unsigned long long)f->bytes);
        return -EBADMSG;
    }
    s->chunk_idx = s->idx;
    s->chunk_off = s->off;
    s->len = (size_t)r;
    s->off += (uint64_t)r;
    return 0;
}

static void source_clear(source_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    free(s->dir);
    free(s->buf);
    tide_ckpt_meta_clear(&s->meta);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
}

static void header_from_meta(const tide_ckpt_meta_t *m, Tide__V1__CheckpointHeader *h,
                             Tide__V1__CheckpointFileInfo **fps, Tide__V1__CheckpointFileInfo *fs)
{
    tide__v1__checkpoint_header__init(h);
    h->job_id = m->job;
    h->generation = m->generation;
    h->step = m->step;
    h->rank = m->rank;
    h->sha256 = (char *)m->sha256;
    h->time_ms = m->time_ms;
    for (size_t i = 0; i < m->n_files; i++) {
        tide__v1__checkpoint_file_info__init(&fs[i]);
        fs[i].name = m->files[i].name;
        fs[i].bytes = m->files[i].bytes;
        fs[i].sha256 = (char *)m->files[i].sha256;
        fps[i] = &fs[i];
    }
    h->n_files = m->n_files;
    h->files = fps;
}

/* ------------------------------------------------------------------------------------------ */
/* transfers and their owners */

typedef enum xkind { SRV_PUT, SRV_FETCH, CLI_PUT, CLI_FETCH } xkind_t;
typedef enum wkind { W_READ, W_COMMIT, W_FIND, W_DISCARD } wkind_t;

typedef struct owner owner_t;

typedef struct xfer {
    tide_list_t link;   /* owner's xfers */
    tide_list_t wait;   /* owner's waiting (pacing), or unlinked */
    tide_list_t serial; /* server's serial queue, or unlinked */
    owner_t *own;
    xkind_t kind;
    uint64_t seq;
    sink_t sink;
    source_t src;
    uv_work_t work;
    wkind_t wk;
    bool busy; /* a work is queued or running */
    int work_rc;
    tide_grpc_code_t work_code;
    tide_error_t werr;   /* the work's error */
    commit_opts_t copts; /* W_COMMIT */
    /* the outcome */
    bool failed; /* decided: code/msg hold it */
    tide_grpc_code_t code;
    char msg[512];
    /* server side */
    tide_rpc_call_t *scall; /* NULL once closed or let go */
    Tide__V1__FetchCheckpointRequest *freq;
    tide_ckpt_found_t found;
    bool pinned;
    uint64_t reserved; /* a put's declared bytes, counted in the server's receiving */
    /* client side */
    tide_rpc_client_t *rc;
    tide_rpc_client_call_t *ccall;
    tide_ckpt_mirror_done_cb cb;
    void *ud;
    char *peer;
    char *into; /* fetch: the tier to write into */
    char *want_job;             /* fetch: what was asked for; a header for anything else is refused */
    int32_t want_rank, want_generation;
    int64_t want_max_step;
    int conn_errno;
    char conn_text[256];
    bool status_seen, half_closed, reply_seen, committed;
    char *reply_path;
    uint64_t reply_bytes;
} xfer_t;

struct owner {
    uv_loop_t *loop;
    uv_check_t check;
    tide_list_t xfers;
    tide_list_t waiting;
    bool freeing, handle_closed;
    uint64_t seq;
    void (*destroy)(owner_t *o);
    void (*resume)(xfer_t *x); /* a waiting transfer may send again */
};

#define ENDED_MAX 256 /* ended jobs whose late puts are refused; job ids are never reused */

struct tide_ckpt_mirror_server {
    owner_t own; /* first */
    char *dir, *worker_id, *token;
    uint64_t max_bytes;
    uint32_t max_files, max_xfers, n_xfers;
    int keep;
    uint32_t min_free_pct;   /* see the config */
    uint64_t receiving;      /* declared bytes of the puts being received */
    char *ended[ENDED_MAX];  /* jobs that ended (tide_ckpt_mirror_server_forget), a ring; NULL: free */
    uint32_t ended_next;
    tide_ckpt_mirror_authorize_cb authorize;
    void *ud;
    const void *key; /* what tide_rpc_call_server_data returns for our calls */
    tide_list_t serial;
    bool serial_busy;
    tide_list_t reg_link;
};

struct tide_ckpt_mirror_client {
    owner_t own; /* first */
    char *worker_id, *token;
    uint64_t max_bytes;
    uint32_t max_files, connect_timeout_ms;
    int64_t timeout_ms;
    tide_tls_ctx_t *tls; /* borrowed; NULL: plaintext */
};

/* The data chunk of what the source read last (borrowing its buffer) into c and d. */
static void src_chunk(const source_t *src, Tide__V1__CheckpointChunk *c, Tide__V1__CheckpointData *d)
{
    tide__v1__checkpoint_chunk__init(c);
    tide__v1__checkpoint_data__init(d);
    d->file_index = src->chunk_idx;
    d->offset = src->chunk_off;
    d->data.data = src->buf;
    d->data.len = src->len;
    c->chunk_case = TIDE__V1__CHECKPOINT_CHUNK__CHUNK_DATA;
    c->data = d;
}

static void xfer_work(uv_work_t *w);
static void xfer_after_work(uv_work_t *w, int status);

static void owner_check_cb(uv_check_t *h)
{
    owner_t *o = h->data;
    tide_list_t now;

    /* Take the list as it is: a transfer that must wait again goes back for the next turn. */
    tide_list_init(&now);
    if (!tide_list_empty(&o->waiting)) {
        now.next = o->waiting.next;
        now.prev = o->waiting.prev;
        now.next->prev = &now;
        now.prev->next = &now;
        tide_list_init(&o->waiting);
    }
    while (!tide_list_empty(&now)) {
        xfer_t *x = tide_list_entry(tide_list_first(&now), xfer_t, wait);
        tide_list_remove(&x->wait);
        o->resume(x); /* may wait again, or end */
    }
    if (tide_list_empty(&o->waiting))
        uv_check_stop(&o->check);
}

static void owner_wait(owner_t *o, xfer_t *x)
{
    if (!tide_list_linked(&x->wait))
        tide_list_push_back(&o->waiting, &x->wait);
    uv_check_start(&o->check, owner_check_cb);
}

static void owner_init(owner_t *o, uv_loop_t *loop)
{
    o->loop = loop;
    tide_list_init(&o->xfers);
    tide_list_init(&o->waiting);
    uv_check_init(loop, &o->check);
    o->check.data = o;
}

static void owner_maybe_destroy(owner_t *o)
{
    if (o->freeing && o->handle_closed && tide_list_empty(&o->xfers))
        o->destroy(o);
}

static void owner_handle_closed(uv_handle_t *h)
{
    owner_t *o = h->data;

    o->handle_closed = true;
    owner_maybe_destroy(o);
}

static xfer_t *xfer_new(owner_t *o, xkind_t kind)
{
    xfer_t *x = tide_xcalloc(1, sizeof(*x));

    x->own = o;
    x->kind = kind;
    x->seq = ++o->seq;
    x->sink.fd = -1;
    x->src.fd = -1;
    x->work.data = x;
    tide_list_init(&x->wait);
    tide_list_init(&x->serial);
    tide_list_push_back(&o->xfers, &x->link);
    return x;
}

static void xfer_start_work(xfer_t *x, wkind_t wk)
{
    x->wk = wk;
    x->busy = true;
    tide_error_clear(&x->werr);
    if (uv_queue_work(x->own->loop, &x->work, xfer_work, xfer_after_work) != 0)
        abort(); /* only fails for a NULL callback */
}

static void xfer_fail(xfer_t *x, tide_grpc_code_t code, const char *msg)
{
    if (x->failed)
        return;
    x->failed = true;
    x->code = code;
    snprintf(x->msg, sizeof(x->msg), "%s", msg);
}

static void xfer_destroy(xfer_t *x)
{
    owner_t *o = x->own;

    tide_list_remove(&x->link);
    if (tide_list_linked(&x->wait))
        tide_list_remove(&x->wait);
    if (tide_list_linked(&x->serial))
        tide_list_remove(&x->serial);
    if (x->kind == SRV_PUT || x->kind == SRV_FETCH) {
        ((tide_ckpt_mirror_server_t *)o)->n_xfers--;
        ((tide_ckpt_mirror_server_t *)o)->receiving -= x->reserved;
    }
    sink_clear(&x->sink);
    source_clear(&x->src);
    if (x->freq)
        tide__v1__fetch_checkpoint_request__free_unpacked(x->freq, NULL);
    tide_ckpt_found_clear(&x->found);
    free(x->copts.pinned);
    free(x->peer);
    free(x->into);
    free(x->want_job);
    free(x->reply_path);
    free(x);
    owner_maybe_destroy(o);
}

static void xfer_work(uv_work_t *w)
{
    xfer_t *x = w->data;

    switch (x->wk) {
    case W_READ:
        x->work_rc = source_read(&x->src, &x->werr);
        break;
    case W_COMMIT:
        x->work_code = sink_commit(&x->sink, &x->copts, x->seq, &x->werr);
        break;
    case W_FIND: {
        tide_ckpt_mirror_server_t *ms = (tide_ckpt_mirror_server_t *)x->own;
        tide_ckpt_tier_t tier = {"mirror", ms->dir, NULL};
        tide_ckpt_search_t s = {0};
        s.tiers = &tier;
        s.n_tiers = 1;
        s.job = x->freq->job_id;
        s.rank = x->freq->rank;
        s.resume_step = x->freq->max_step < 0 ? -1 : x->freq->max_step;
        s.generation = x->freq->generation < 0 ? -1 : x->freq->generation;
        x->work_rc = tide_ckpt_find(&s, &x->found, &x->werr);
        break;
    }
    case W_DISCARD:
        sink_discard(&x->sink);
        break;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* the server: registry */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static tide_list_t reg = TIDE_LIST_INIT(reg);

static tide_ckpt_mirror_server_t *server_of(tide_rpc_call_t *call)
{
    const void *key = tide_rpc_call_server_data(call);
    tide_ckpt_mirror_server_t *found = NULL;
    tide_list_t *pos;

    pthread_mutex_lock(&reg_mu);
    tide_list_for_each(pos, &reg)
    {
        tide_ckpt_mirror_server_t *ms = tide_list_entry(pos, tide_ckpt_mirror_server_t, reg_link);
        if (ms->key == key) {
            found = ms; /* the latest bound wins: later entries override */
        }
    }
    pthread_mutex_unlock(&reg_mu);
    return found && !found->own.freeing ? found : NULL;
}

void tide_ckpt_mirror_server_bind(tide_ckpt_mirror_server_t *ms, const void *server_ud)
{
    pthread_mutex_lock(&reg_mu);
    ms->key = server_ud;
    tide_list_remove(&ms->reg_link);
    tide_list_push_back(&reg, &ms->reg_link);
    pthread_mutex_unlock(&reg_mu);
}

/* ------------------------------------------------------------------------------------------ */
/* the server: serial work (commits and look-ups, one at a time) */

/* The steps of (job, rank) that fetches in flight hold, and whether step itself is one. */
static void pins_of(tide_ckpt_mirror_server_t *ms, const char *job, int32_t rank, int64_t step,
                    commit_opts_t *o)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &ms->own.xfers)
    {
        xfer_t *f = tide_list_entry(pos, xfer_t, link);
        if (f->kind != SRV_FETCH || !f->pinned || f->found.meta.rank != rank ||
            strcmp(f->found.meta.job, job) != 0)
            continue;
        o->pinned = tide_xrealloc(o->pinned, (o->n_pinned + 1) * sizeof(*o->pinned));
        o->pinned[o->n_pinned++] = f->found.meta.step;
        if (f->found.meta.step == step)
            o->pinned_final = true;
    }
}

static void serial_next(tide_ckpt_mirror_server_t *ms)
{
    xfer_t *x;

    if (ms->serial_busy || tide_list_empty(&ms->serial))
        return;
    x = tide_list_entry(tide_list_first(&ms->serial), xfer_t, serial);
    tide_list_remove(&x->serial);
    ms->serial_busy = true;
    if (x->kind == SRV_PUT) /* the pins as of now: later ones wait for this work */
        pins_of(ms, x->sink.meta.job, x->sink.meta.rank, x->sink.meta.step, &x->copts);
    xfer_start_work(x, x->kind == SRV_PUT ? W_COMMIT : W_FIND);
}

static void serial_push(tide_ckpt_mirror_server_t *ms, xfer_t *x)
{
    x->busy = true; /* queued counts as busy: nothing else may start */
    tide_list_push_back(&ms->serial, &x->serial);
    serial_next(ms);
}

/* ------------------------------------------------------------------------------------------ */
/* the server: calls */

static bool authorised(tide_ckpt_mirror_server_t *ms, tide_rpc_call_t *call, const char *job,
                       int32_t generation, const char *credential, const char *worker_id)
{
    tide_error_t err = {{0}};
    char msg[512];

    if (ms->token) {
        const char *h = tide_rpc_call_header(call, "authorization");
        if (!h || strncmp(h, "Bearer ", 7) != 0 || !tide_token_equal(h + 7, ms->token)) {
            tide_rpc_call_finish(call, TIDE_GRPC_UNAUTHENTICATED, "missing or wrong bearer token");
            return false;
        }
    }
    if (ms->authorize && ms->authorize(ms->ud, job, generation, credential, worker_id, &err) < 0) {
        snprintf(msg, sizeof(msg), "not authorised for job %.64s generation %d: %s", job,
                 (int)generation, err.text[0] ? err.text : "refused");
        tide_warn("mirror: %s from %s refused: %s", tide_rpc_call_method(call)->path,
                  tide_rpc_call_peer(call), msg);
        tide_rpc_call_finish(call, TIDE_GRPC_PERMISSION_DENIED, msg);
        return false;
    }
    return true;
}

static bool admit(tide_ckpt_mirror_server_t *ms, tide_rpc_call_t *call)
{
    if (ms->n_xfers >= ms->max_xfers) {
        tide_rpc_call_finish(call, TIDE_GRPC_RESOURCE_EXHAUSTED,
                             "too many checkpoint transfers at once; retry later");
        return false;
    }
    return true;
}

/* The outcome of a server transfer that is over on our side: finish the call (if still there),
 * then free once nothing runs. */
static void srv_end(xfer_t *x)
{
    if (x->scall) {
        tide_rpc_call_t *call = x->scall;
        tide_rpc_call_set_data(call, NULL);
        x->scall = NULL;
        if (x->failed) {
            tide_warn("mirror: %s from %s: %s: %s", tide_rpc_call_method(call)->path,
                      tide_rpc_call_peer(call), tide_grpc_code_name(x->code), x->msg);
            tide_rpc_call_finish(call, x->code, x->msg);
        } else {
            tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
        }
    }
    xfer_destroy(x);
}

/* A put went wrong: drop the partial copy (threadpool), then answer. */
static bool ended(const tide_ckpt_mirror_server_t *ms, const char *job)
{
    for (uint32_t i = 0; i < ENDED_MAX; i++)
        if (ms->ended[i] && strcmp(ms->ended[i], job) == 0)
            return true;
    return false;
}

void tide_ckpt_mirror_server_forget(tide_ckpt_mirror_server_t *ms, const char *job)
{
    if (!ms || !job || !job[0] || ended(ms, job))
        return;
    free(ms->ended[ms->ended_next]);
    ms->ended[ms->ended_next] = tide_xstrdup(job);
    ms->ended_next = (ms->ended_next + 1) % ENDED_MAX;
}

/* Whether a put of bytes leaves min_free_pct of the mirror's filesystem free, the puts being received
 * counted in (peers' copies must not take the memory a tmpfs hot tier shares with training). */
static bool room_for(const tide_ckpt_mirror_server_t *ms, uint64_t bytes, tide_error_t *err)
{
    struct statvfs sv;
    uint64_t avail, keep;

    if (!ms->min_free_pct || statvfs(ms->dir, &sv) != 0)
        return true;
    avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    keep = (uint64_t)sv.f_blocks * sv.f_frsize / 100 * ms->min_free_pct;
    if (avail >= keep && avail - keep >= ms->receiving && avail - keep - ms->receiving >= bytes)
        return true;
    tide_errprintf(err, "no room for a %llu-byte mirror copy: %llu bytes free, %u%% of the filesystem kept free, "
                   "%llu bytes being received",
                   (unsigned long long)bytes, (unsigned long long)avail, ms->min_free_pct,
                   (unsigned long long)ms->receiving);
    return false;
}

static void srv_put_abort(xfer_t *x, tide_grpc_code_t code, const char *msg)
{
    xfer_fail(x, code, msg);
    if (x->busy)
        return; /* its work's end takes over */
    if (x->sink.open) {
        xfer_start_work(x, W_DISCARD);
        return;
    }
    srv_end(x);
}

static void put_message(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_ckpt_mirror_server_t *ms;
    xfer_t *x = tide_rpc_call_data(call);
    Tide__V1__CheckpointChunk *c;
    tide_error_t err = {{0}};
    tide_grpc_code_t code;

    if (x && x->failed)
        return; /* refused: the rest is dropped until the answer goes out */
    c = tide__v1__checkpoint_chunk__unpack(NULL, len, data);
    if (!c) {
        if (x)
            srv_put_abort(x, TIDE_GRPC_INVALID_ARGUMENT,
                          "chunk is not a valid tide.v1.CheckpointChunk");
        else
            tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                                 "chunk is not a valid tide.v1.CheckpointChunk");
        return;
    }
    if (!x) {
        const Tide__V1__CheckpointHeader *h = c->header;
        ms = server_of(call);
        if (!ms) {
            tide_rpc_call_finish(call, TIDE_GRPC_UNAVAILABLE, "no checkpoint mirror here");
            goto done;
        }
        if (c->chunk_case != TIDE__V1__CHECKPOINT_CHUNK__CHUNK_HEADER) {
            tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                                 "the first chunk must be a header");
            goto done;
        }
        if (!authorised(ms, call, h->job_id, h->generation, h->credential, h->worker_id) ||
            !admit(ms, call))
            goto done;
        if (ended(ms, h->job_id)) {
            /* a late put of a job that ended would sit in the hot tier until the TTL sweep */
            char msg[160];
            snprintf(msg, sizeof(msg), "job %.64s has ended: its checkpoints are not kept", h->job_id);
            tide_rpc_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, msg);
            goto done;
        }
        x = xfer_new(&ms->own, SRV_PUT);
        ms->n_xfers++;
        x->scall = call;
        tide_rpc_call_set_data(call, x);
        code = sink_begin(&x->sink, ms->dir, h, ms->max_bytes, ms->max_files, x->seq, &err);
        if (code == TIDE_GRPC_OK && !room_for(ms, x->sink.bytes, &err))
            code = TIDE_GRPC_RESOURCE_EXHAUSTED;
        if (code != TIDE_GRPC_OK) {
            srv_put_abort(x, code, err.text);
            goto done;
        }
        x->reserved = x->sink.bytes;
        ms->receiving += x->reserved;
        tide_debug("mirror: receiving job %s step %lld rank %d (generation %d, %zu files, %llu "
                   "bytes) from %s",
                   h->job_id, (long long)h->step, (int)h->rank, (int)h->generation, h->n_files,
                   (unsigned long long)x->sink.bytes, h->worker_id[0] ? h->worker_id : "?");
        goto done;
    }
    if (c->chunk_case != TIDE__V1__CHECKPOINT_CHUNK__CHUNK_DATA) {
        srv_put_abort(x, TIDE_GRPC_INVALID_ARGUMENT, "a second header");
        goto done;
    }
    code = sink_data(&x->sink, c->data, &err);
    if (code != TIDE_GRPC_OK)
        srv_put_abort(x, code, err.text);
done:
    tide__v1__checkpoint_chunk__free_unpacked(c, NULL);
}

static void put_half_close(tide_rpc_call_t *call)
{
    xfer_t *x = tide_rpc_call_data(call);
    tide_ckpt_mirror_server_t *ms;
    tide_error_t err = {{0}};
    tide_grpc_code_t code;

    if (!x) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "no header");
        return;
    }
    if (x->failed || x->busy)
        return;
    code = sink_complete(&x->sink, &err);
    if (code != TIDE_GRPC_OK) {
        srv_put_abort(x, code, err.text);
        return;
    }
    ms = (tide_ckpt_mirror_server_t *)x->own;
    x->copts.stale_check = true;
    x->copts.keep = ms->keep;
    serial_push(ms, x);
}

static void put_close(tide_rpc_call_t *call)
{
    xfer_t *x = tide_rpc_call_data(call);

    if (!x)
        return;
    x->scall = NULL;
    xfer_fail(x, TIDE_GRPC_CANCELLED, "the call ended");
    if (x->busy)
        return;
    if (x->sink.open && !x->committed) {
        xfer_start_work(x, W_DISCARD);
        return;
    }
    xfer_destroy(x);
}

/* Sends the next chunk of a source, or waits, or ends. */
static void srv_fetch_pump(xfer_t *x)
{
    if (x->busy || x->failed || !x->scall)
        return;
    if (x->src.done) {
        srv_end(x);
        return;
    }
    if (tide_rpc_call_queued_bytes(x->scall) >= HIGH_WATER) {
        owner_wait(x->own, x);
        return;
    }
    xfer_start_work(x, W_READ);
}

static void fetch_message(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_ckpt_mirror_server_t *ms = server_of(call);
    Tide__V1__FetchCheckpointRequest *r;
    xfer_t *x;

    if (!ms) {
        tide_rpc_call_finish(call, TIDE_GRPC_UNAVAILABLE, "no checkpoint mirror here");
        return;
    }
    r = tide__v1__fetch_checkpoint_request__unpack(NULL, len, data);
    if (!r) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             "request is not a valid tide.v1.FetchCheckpointRequest");
        return;
    }
    if (!tide_worker_job_id_valid(r->job_id) || r->rank < 0) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             !tide_worker_job_id_valid(r->job_id) ? "job_id is not a valid job id"
                                                                  : "rank must be >= 0");
        tide__v1__fetch_checkpoint_request__free_unpacked(r, NULL);
        return;
    }
    if (!authorised(ms, call, r->job_id, r->generation, r->credential, r->worker_id) ||
        !admit(ms, call)) {
        tide__v1__fetch_checkpoint_request__free_unpacked(r, NULL);
        return;
    }
    x = xfer_new(&ms->own, SRV_FETCH);
    ms->n_xfers++;
    x->freq = r;
    x->scall = call;
    tide_rpc_call_set_data(call, x);
    serial_push(ms, x);
}

static void fetch_found(xfer_t *x)
{
    Tide__V1__CheckpointChunk c = TIDE__V1__CHECKPOINT_CHUNK__INIT;
    Tide__V1__CheckpointHeader h;
    tide_ckpt_mirror_server_t *ms = (tide_ckpt_mirror_server_t *)x->own;
    Tide__V1__CheckpointFileInfo **fps, *fs;
    size_t n;

    if (x->work_rc < 0) {
        char msg[512];
        snprintf(msg, sizeof(msg), "no verified copy of job %.64s rank %d at step <= %lld: %s",
                 x->freq->job_id, (int)x->freq->rank, (long long)x->freq->max_step, x->werr.text);
        xfer_fail(x, x->work_rc == -ENOENT ? TIDE_GRPC_NOT_FOUND : TIDE_GRPC_INVALID_ARGUMENT, msg);
        srv_end(x);
        return;
    }
    x->pinned = true;
    source_init(&x->src, x->found.path, &x->found.meta, NULL);
    n = x->found.meta.n_files;
    fps = tide_xcalloc(n, sizeof(*fps));
    fs = tide_xcalloc(n, sizeof(*fs));
    header_from_meta(&x->found.meta, &h, fps, fs);
    h.worker_id = ms->worker_id;
    c.chunk_case = TIDE__V1__CHECKPOINT_CHUNK__CHUNK_HEADER;
    c.header = &h;
    (void)tide_rpc_call_send_pb(x->scall, &c.base);
    free(fps);
    free(fs);
    srv_fetch_pump(x);
}

static void fetch_close(tide_rpc_call_t *call)
{
    xfer_t *x = tide_rpc_call_data(call);

    if (!x)
        return;
    x->scall = NULL;
    xfer_fail(x, TIDE_GRPC_CANCELLED, "the call ended");
    tide_list_remove(&x->wait);
    if (!x->busy)
        xfer_destroy(x);
}

static void srv_after_work(xfer_t *x)
{
    tide_ckpt_mirror_server_t *ms = (tide_ckpt_mirror_server_t *)x->own;

    switch (x->wk) {
    case W_COMMIT:
        ms->serial_busy = false;
        serial_next(ms);
        x->committed = x->work_code == TIDE_GRPC_OK;
        if (!x->committed) {
            xfer_fail(x, x->work_code, x->werr.text);
        } else if (x->scall && !x->failed) {
            Tide__V1__PutCheckpointReply r = TIDE__V1__PUT_CHECKPOINT_REPLY__INIT;
            r.path = x->sink.final;
            r.bytes = x->sink.bytes;
            r.worker_id = ms->worker_id;
            (void)tide_rpc_call_send_pb(x->scall, &r.base);
            tide_info("mirror: stored job %s step %lld rank %d (generation %d, %llu bytes) at %s",
                      x->sink.meta.job, (long long)x->sink.meta.step, (int)x->sink.meta.rank,
                      (int)x->sink.meta.generation, (unsigned long long)x->sink.bytes,
                      x->sink.final);
        }
        x->sink.open = false; /* committed or removed by the commit */
        srv_end(x);
        return;
    case W_DISCARD:
        x->sink.open = false;
        srv_end(x);
        return;
    case W_FIND:
        ms->serial_busy = false;
        if (!x->scall || x->own->freeing) {
            serial_next(ms);
            srv_end(x);
            return;
        }
        fetch_found(x); /* pins before the next serial work starts */
        serial_next(ms);
        return;
    case W_READ:
        if (!x->scall || x->failed) {
            srv_end(x);
            return;
        }
        if (x->work_rc < 0) {
            xfer_fail(x, TIDE_GRPC_INTERNAL, x->werr.text);
            srv_end(x);
            return;
        }
        if (x->src.len) {
            Tide__V1__CheckpointChunk c;
            Tide__V1__CheckpointData d;
            src_chunk(&x->src, &c, &d);
            if (tide_rpc_call_send_pb(x->scall, &c.base) < 0) {
                xfer_fail(x, TIDE_GRPC_INTERNAL, "could not queue a chunk");
                srv_end(x);
                return;
            }
        }
        srv_fetch_pump(x);
        return;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* the client */

static int code_errno(tide_grpc_code_t code)
{
    switch (code) {
    case TIDE_GRPC_OK:
        return 0;
    case TIDE_GRPC_CANCELLED:
        return -ECANCELED;
    case TIDE_GRPC_INVALID_ARGUMENT:
        return -EINVAL;
    case TIDE_GRPC_DEADLINE_EXCEEDED:
        return -ETIMEDOUT;
    case TIDE_GRPC_NOT_FOUND:
        return -ENOENT;
    case TIDE_GRPC_PERMISSION_DENIED:
    case TIDE_GRPC_UNAUTHENTICATED:
        return -EACCES;
    case TIDE_GRPC_RESOURCE_EXHAUSTED:
        return -EFBIG;
    case TIDE_GRPC_FAILED_PRECONDITION:
        return -ESTALE;
    case TIDE_GRPC_UNAVAILABLE:
        return -ECONNREFUSED;
    case TIDE_GRPC_DATA_LOSS:
        return -EBADMSG;
    default:
        return -EIO;
    }
}

static void cli_deliver(xfer_t *x)
{
    tide_ckpt_mirror_result_t res;
    char text[700];
    tide_ckpt_mirror_done_cb cb = x->cb;

    if (!cb)
        return;
    x->cb = NULL;
    memset(&res, 0, sizeof(res));
    if (!x->failed) {
        res.code = TIDE_GRPC_OK;
        res.error = "";
        if (x->kind == CLI_PUT) {
            res.path = x->reply_path ? x->reply_path : "";
            res.bytes = x->reply_bytes;
        } else {
            res.path = x->sink.final;
            res.bytes = x->sink.bytes;
            res.meta = &x->sink.meta;
        }
    } else {
        res.code = x->code;
        res.rc = x->code == TIDE_GRPC_UNAVAILABLE && x->conn_errno < 0 ? x->conn_errno
                                                                       : code_errno(x->code);
        if (x->work_rc < 0 && x->code == TIDE_GRPC_CANCELLED && x->wk == W_READ)
            res.rc = x->work_rc;
        snprintf(text, sizeof(text), "peer %s: %s", x->peer, x->msg);
        res.error = text;
        res.path = "";
    }
    cb(x->ud, &res);
}

/* The transfer is over on our side (its call ended, or now: the client is being freed): remove a
 * partial fetch, deliver the outcome once, free what is left once no work runs. */
static void cli_end(xfer_t *x, bool now)
{
    if (x->busy && !now)
        return; /* the work's end comes back here */
    if (!now && x->kind == CLI_FETCH && x->sink.open && !x->committed) {
        xfer_start_work(x, W_DISCARD); /* nothing is left behind before the callback */
        return;
    }
    cli_deliver(x);
    if (x->rc) {
        tide_rpc_client_t *rc = x->rc;
        x->rc = NULL;
        tide_rpc_client_free(rc); /* an open call's on_status runs inline: it only drops ccall */
    }
    if (x->busy)
        return;
    if (x->kind == CLI_FETCH && x->sink.open && !x->committed) {
        xfer_start_work(x, W_DISCARD);
        return;
    }
    xfer_destroy(x);
}

static void cli_fail(xfer_t *x, tide_grpc_code_t code, const char *msg)
{
    xfer_fail(x, code, msg);
    if (x->ccall)
        tide_rpc_client_call_cancel(x->ccall); /* on_status (CANCELLED) follows */
    else
        cli_end(x, false);
}

static void cli_on_state(tide_rpc_client_t *c, int status, const char *text, void *ud)
{
    xfer_t *x = ud;

    (void)c;
    if (status < 0 && !x->conn_errno) {
        x->conn_errno = status;
        snprintf(x->conn_text, sizeof(x->conn_text), "%s", text ? text : strerror(-status));
    }
}

static void cli_put_pump(xfer_t *x)
{
    if (x->busy || x->failed || !x->ccall || x->half_closed)
        return;
    if (x->src.done) {
        x->half_closed = true;
        (void)tide_rpc_client_call_close_send(x->ccall);
        return;
    }
    if (tide_rpc_client_call_queued_bytes(x->ccall) >= HIGH_WATER) {
        owner_wait(x->own, x);
        return;
    }
    xfer_start_work(x, W_READ);
}

static void cli_on_message(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    xfer_t *x = ud;
    tide_ckpt_mirror_client_t *mc = (tide_ckpt_mirror_client_t *)x->own;
    tide_error_t err = {{0}};
    tide_grpc_code_t code;

    (void)call;
    if (x->failed)
        return;
    if (x->kind == CLI_PUT) {
        Tide__V1__PutCheckpointReply *r = tide__v1__put_checkpoint_reply__unpack(NULL, len, data);
        if (!r) {
            cli_fail(x, TIDE_GRPC_INTERNAL, "the reply is not a tide.v1.PutCheckpointReply");
            return;
        }
        free(x->reply_path);
        x->reply_path = tide_xstrdup(r->path);
        x->reply_bytes = r->bytes;
        x->reply_seen = true;
        tide__v1__put_checkpoint_reply__free_unpacked(r, NULL);
        return;
    }
    {
        Tide__V1__CheckpointChunk *c = tide__v1__checkpoint_chunk__unpack(NULL, len, data);
        if (!c) {
            cli_fail(x, TIDE_GRPC_INTERNAL, "a chunk is not a tide.v1.CheckpointChunk");
            return;
        }
        if (!x->sink.open) {
            const Tide__V1__CheckpointHeader *h = c->chunk_case == TIDE__V1__CHECKPOINT_CHUNK__CHUNK_HEADER
                                                      ? c->header : NULL;
            if (!h) {
                code = TIDE_GRPC_INTERNAL;
                tide_errprintf(&err, "the first chunk is not a header");
            } else if (x->want_job && (!h->job_id || strcmp(h->job_id, x->want_job) != 0 || h->rank != x->want_rank ||
                                       (x->want_max_step >= 0 && h->step > x->want_max_step) ||
                                       (x->want_generation >= 0 && h->generation > x->want_generation))) {
                /* A peer answering with something else must not write it here (another job's, a newer one). */
                code = TIDE_GRPC_INTERNAL;
                tide_errprintf(&err, "the peer sent job %.64s rank %d step %lld generation %d, not what was asked",
                               h->job_id ? h->job_id : "", (int)h->rank, (long long)h->step, (int)h->generation);
            } else {
                code = sink_begin(&x->sink, x->into, h, mc->max_bytes, mc->max_files, x->seq, &err);
            }
        } else if (c->chunk_case != TIDE__V1__CHECKPOINT_CHUNK__CHUNK_DATA) {
            code = TIDE_GRPC_INTERNAL;
            tide_errprintf(&err, "a second header");
        } else {
            code = sink_data(&x->sink, c->data, &err);
        }
        tide__v1__checkpoint_chunk__free_unpacked(c, NULL);
        if (code != TIDE_GRPC_OK)
            cli_fail(x, code, err.text);
    }
}

static void cli_on_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message,
                          void *ud)
{
    xfer_t *x = ud;
    tide_error_t err = {{0}};
    char msg[512];

    (void)call;
    x->ccall = NULL;
    tide_list_remove(&x->wait);
    if (!x->cb)
        return; /* inside cli_end's tide_rpc_client_free: it goes on from there */
    if (code != TIDE_GRPC_OK) {
        if (code == TIDE_GRPC_UNAVAILABLE && x->conn_errno < 0)
            snprintf(msg, sizeof(msg), "%s: %s", tide_grpc_code_name(code), x->conn_text);
        else
            snprintf(msg, sizeof(msg), "%s: %s", tide_grpc_code_name(code),
                     message && message[0] ? message : "(no message)");
        xfer_fail(x, code, msg);
        cli_end(x, false);
        return;
    }
    if (x->failed) {
        cli_end(x, false);
        return;
    }
    if (x->kind == CLI_PUT) {
        if (!x->reply_seen)
            xfer_fail(x, TIDE_GRPC_INTERNAL, "OK without a reply");
        cli_end(x, false);
        return;
    }
    if (!x->sink.open) {
        xfer_fail(x, TIDE_GRPC_INTERNAL, "OK without a header");
        cli_end(x, false);
        return;
    }
    code = sink_complete(&x->sink, &err);
    if (code != TIDE_GRPC_OK) {
        xfer_fail(x, code, err.text);
        cli_end(x, false);
        return;
    }
    xfer_start_work(x, W_COMMIT);
}

static void cli_after_work(xfer_t *x)
{
    switch (x->wk) {
    case W_READ:
        if (!x->ccall) {
            cli_end(x, false);
            return;
        }
        if (x->failed)
            return; /* its call's on_status comes */
        if (x->work_rc < 0) {
            cli_fail(x, TIDE_GRPC_CANCELLED, x->werr.text);
            return;
        }
        if (x->src.len) {
            Tide__V1__CheckpointChunk c;
            Tide__V1__CheckpointData d;
            src_chunk(&x->src, &c, &d);
            if (tide_rpc_client_call_send_pb(x->ccall, &c.base) < 0)
                return; /* its status is decided and on the way */
        }
        cli_put_pump(x);
        return;
    case W_COMMIT:
        x->committed = x->work_code == TIDE_GRPC_OK;
        x->sink.open = false;
        if (!x->committed)
            xfer_fail(x, x->work_code, x->werr.text);
        cli_end(x, false);
        return;
    case W_DISCARD:
        x->sink.open = false;
        cli_end(x, false);
        return;
    case W_FIND:
        return;
    }
}

static void xfer_after_work(uv_work_t *w, int status)
{
    xfer_t *x = w->data;

    (void)status; /* work is never cancelled */
    x->busy = false;
    if (x->kind == SRV_PUT || x->kind == SRV_FETCH)
        srv_after_work(x);
    else
        cli_after_work(x);
}

static void owner_resume(xfer_t *x)
{
    if (x->kind == SRV_FETCH)
        srv_fetch_pump(x);
    else if (x->kind == CLI_PUT)
        cli_put_pump(x);
}

/* ------------------------------------------------------------------------------------------ */
/* public: server */

static void server_destroy(owner_t *o)
{
    tide_ckpt_mirror_server_t *ms = (tide_ckpt_mirror_server_t *)o;

    free(ms->dir);
    free(ms->worker_id);
    free(ms->token);
    for (uint32_t i = 0; i < ENDED_MAX; i++)
        free(ms->ended[i]);
    free(ms);
}

int tide_ckpt_mirror_server_new(struct uv_loop_s *loop, const tide_ckpt_mirror_server_config_t *cfg,
                                tide_ckpt_mirror_server_t **out, tide_error_t *err)
{
    tide_ckpt_mirror_server_t *ms;
    int rc;

    *out = NULL;
    if (!loop || !cfg || !cfg->dir || !cfg->dir[0] || !cfg->worker_id) {
        tide_errprintf(err, "checkpoint mirror: a directory and a worker id are required");
        return -EINVAL;
    }
    rc = tide_fs_mkdir_p(cfg->dir, 0700);
    if (rc < 0) {
        tide_errprintf(err, "checkpoint mirror: %s: %s", cfg->dir, strerror(-rc));
        return rc;
    }
    ms = tide_xcalloc(1, sizeof(*ms));
    owner_init(&ms->own, loop);
    ms->own.destroy = server_destroy;
    ms->own.resume = owner_resume;
    ms->dir = tide_xstrdup(cfg->dir);
    ms->worker_id = tide_xstrdup(cfg->worker_id);
    ms->token = cfg->token && cfg->token[0] ? tide_xstrdup(cfg->token) : NULL;
    ms->max_bytes = cfg->max_bytes ? cfg->max_bytes : DEFAULT_MAX_BYTES;
    ms->min_free_pct = cfg->min_free_pct < 100 ? cfg->min_free_pct : 99;
    ms->max_files = cfg->max_files ? cfg->max_files : DEFAULT_MAX_FILES;
    if (ms->max_files > TIDE_CKPT_MAX_FILES)
        ms->max_files = TIDE_CKPT_MAX_FILES;
    ms->keep = cfg->keep > 0 ? cfg->keep : DEFAULT_KEEP;
    ms->max_xfers = cfg->max_transfers ? cfg->max_transfers : DEFAULT_MAX_XFERS;
    ms->authorize = cfg->authorize;
    ms->ud = cfg->ud;
    tide_list_init(&ms->serial);
    tide_list_init(&ms->reg_link);
    tide_ckpt_mirror_server_bind(ms, ms);
    *out = ms;
    return 0;
}

void tide_ckpt_mirror_server_free(tide_ckpt_mirror_server_t *ms)
{
    tide_list_t *pos, *tmp;

    if (!ms)
        return;
    pthread_mutex_lock(&reg_mu);
    tide_list_remove(&ms->reg_link);
    pthread_mutex_unlock(&reg_mu);
    ms->own.freeing = true;
    tide_list_for_each_safe(pos, tmp, &ms->own.xfers)
    {
        xfer_t *x = tide_list_entry(pos, xfer_t, link);
        xfer_fail(x, TIDE_GRPC_UNAVAILABLE, "the worker is shutting down");
        if (tide_list_linked(&x->serial)) { /* queued, not started: not busy after all */
            tide_list_remove(&x->serial);
            x->busy = false;
        }
        if (x->busy)
            continue; /* its work's end finishes it */
        if (x->kind == SRV_PUT)
            srv_put_abort(x, TIDE_GRPC_UNAVAILABLE, "the worker is shutting down");
        else
            srv_end(x);
    }
    uv_close((uv_handle_t *)&ms->own.check, owner_handle_closed);
}

const tide_rpc_method_t tide_ckpt_mirror_methods[] = {
    {.path = TIDE_CKPT_MIRROR_PUT_PATH,
     .kind = TIDE_RPC_CLIENT_STREAMING,
     .no_auth = true, /* the mirror checks its own token and the credential */
     .on_message = put_message,
     .on_half_close = put_half_close,
     .on_close = put_close},
    {.path = TIDE_CKPT_MIRROR_FETCH_PATH,
     .kind = TIDE_RPC_SERVER_STREAMING,
     .no_auth = true,
     .on_message = fetch_message,
     .on_close = fetch_close},
};
const size_t tide_ckpt_mirror_methods_count =
    sizeof(tide_ckpt_mirror_methods) / sizeof(tide_ckpt_mirror_methods[0]);

tide_rpc_method_t *tide_ckpt_mirror_methods_merge(const tide_rpc_method_t *base, size_t n_base,
                                                  size_t *n_out)
{
    size_t n = n_base + tide_ckpt_mirror_methods_count;
    tide_rpc_method_t *t = tide_xcalloc(n, sizeof(*t));

    if (n_base)
        memcpy(t, base, n_base * sizeof(*t));
    memcpy(t + n_base, tide_ckpt_mirror_methods, tide_ckpt_mirror_methods_count * sizeof(*t));
    *n_out = n;
    return t;
}

/* ------------------------------------------------------------------------------------------ */
/* public: client */

static void client_destroy(owner_t *o)
{
    tide_ckpt_mirror_client_t *mc = (tide_ckpt_mirror_client_t *)o;

    free(mc->worker_id);
    free(mc->token);
    free(mc);
}

int tide_ckpt_mirror_client_new(struct uv_loop_s *loop, const tide_ckpt_mirror_client_config_t *cfg,
                                tide_ckpt_mirror_client_t **out)
{
    tide_ckpt_mirror_client_t *mc;

    *out = NULL;
    if (!loop || !cfg)
        return -EINVAL;
    mc = tide_xcalloc(1, sizeof(*mc));
    owner_init(&mc->own, loop);
    mc->own.destroy = client_destroy;
    mc->own.resume = owner_resume;
    mc->worker_id = tide_xstrdup(cfg->worker_id ? cfg->worker_id : "");
    mc->token = cfg->token && cfg->token[0] ? tide_xstrdup(cfg->token) : NULL;
    mc->max_bytes = cfg->max_bytes ? cfg->max_bytes : DEFAULT_MAX_BYTES;
    mc->max_files = cfg->max_files ? cfg->max_files : DEFAULT_MAX_FILES;
    if (mc->max_files > TIDE_CKPT_MAX_FILES)
        mc->max_files = TIDE_CKPT_MAX_FILES;
    mc->connect_timeout_ms = cfg->connect_timeout_ms;
    mc->timeout_ms = cfg->timeout_ms;
    mc->tls = cfg->tls;
    *out = mc;
    return 0;
}

void tide_ckpt_mirror_client_free(tide_ckpt_mirror_client_t *c)
{
    tide_list_t *pos, *tmp;

    if (!c)
        return;
    c->own.freeing = true;
    tide_list_for_each_safe(pos, tmp, &c->own.xfers)
    {
        xfer_t *x = tide_list_entry(pos, xfer_t, link);
        xfer_fail(x, TIDE_GRPC_CANCELLED, "cancelled: the client is being freed");
        tide_list_remove(&x->wait);
        cli_end(x, true); /* may free x */
    }
    uv_close((uv_handle_t *)&c->own.check, owner_handle_closed);
}

/* Opens the connection and the call. Returns 0 or -errno (x untouched for the caller to free). */
static int cli_open(tide_ckpt_mirror_client_t *mc, xfer_t *x, const char *path)
{
    tide_rpc_client_config_t rc = {0};
    tide_rpc_client_call_cbs_t cbs = {cli_on_message, cli_on_status};
    tide_error_t err = {{0}};
    int r;

    rc.hostport = x->peer;
    rc.token = mc->token;
    rc.max_message = 2 * TIDE_CKPT_MIRROR_CHUNK + (8u << 20); /* a header of many files */
    rc.connect_timeout_ms = mc->connect_timeout_ms;
    rc.tls = mc->tls;
    rc.on_state = cli_on_state;
    rc.ud = x;
    r = tide_rpc_client_new(mc->own.loop, &rc, &x->rc, &err);
    if (r < 0)
        return r;
    r = tide_rpc_client_call_start(x->rc, path, mc->timeout_ms, &cbs, x, &x->ccall);
    if (r < 0) {
        tide_rpc_client_free(x->rc);
        x->rc = NULL;
    }
    return r;
}

int tide_ckpt_mirror_put(tide_ckpt_mirror_client_t *c, const char *peer, const char *rank_dir,
                         const tide_ckpt_meta_t *meta, const char *credential,
                         const tide_fs_account_t *as, tide_ckpt_mirror_done_cb cb, void *ud)
{
    Tide__V1__CheckpointChunk ch = TIDE__V1__CHECKPOINT_CHUNK__INIT;
    Tide__V1__CheckpointHeader h;
    Tide__V1__CheckpointFileInfo **fps, *fs;
    xfer_t *x;
    int rc;

    if (!c || c->own.freeing || !peer || !peer[0] || !rank_dir || !meta || !meta->job ||
        !meta->n_files || !meta->files || !cb)
        return -EINVAL;
    x = xfer_new(&c->own, CLI_PUT);
    x->peer = tide_xstrdup(peer);
    x->cb = cb;
    x->ud = ud;
    source_init(&x->src, rank_dir, meta, as);
    rc = cli_open(c, x, TIDE_CKPT_MIRROR_PUT_PATH);
    if (rc < 0) {
        xfer_destroy(x);
        return rc;
    }
    fps = tide_xcalloc(meta->n_files, sizeof(*fps));
    fs = tide_xcalloc(meta->n_files, sizeof(*fs));
    header_from_meta(&x->src.meta, &h, fps, fs);
    h.worker_id = c->worker_id;
    h.credential = (char *)(credential ? credential : "");
    ch.chunk_case = TIDE__V1__CHECKPOINT_CHUNK__CHUNK_HEADER;
    ch.header = &h;
    (void)tide_rpc_client_call_send_pb(x->ccall, &ch.base);
    free(fps);
    free(fs);
    cli_put_pump(x);
    return 0;
}

int tide_ckpt_mirror_fetch(tide_ckpt_mirror_client_t *c, const char *peer, const char *job,
                           int32_t rank, int64_t max_step, int32_t generation,
                           const char *credential, const char *into_dir,
                           tide_ckpt_mirror_done_cb cb, void *ud)
{
    Tide__V1__FetchCheckpointRequest r = TIDE__V1__FETCH_CHECKPOINT_REQUEST__INIT;
    xfer_t *x;
    int rc;

    if (!c || c->own.freeing || !peer || !peer[0] || !job || !tide_worker_job_id_valid(job) ||
        rank < 0 || !into_dir || !into_dir[0] || !cb)
        return -EINVAL;
    x = xfer_new(&c->own, CLI_FETCH);
    x->peer = tide_xstrdup(peer);
    x->into = tide_xstrdup(into_dir);
    x->want_job = tide_xstrdup(job);
    x->want_rank = rank;
    x->want_max_step = max_step < 0 ? -1 : max_step;
    x->want_generation = generation < 0 ? -1 : generation;
    x->cb = cb;
    x->ud = ud;
    rc = cli_open(c, x, TIDE_CKPT_MIRROR_FETCH_PATH);
    if (rc < 0) {
        xfer_destroy(x);
        return rc;
    }
    r.job_id = (char *)job;
    r.rank = rank;
    r.max_step = max_step < 0 ? -1 : max_step;
    r.generation = generation < 0 ? -1 : generation;
    r.worker_id = c->worker_id;
    r.credential = (char *)(credential ? credential : "");
    (void)tide_rpc_client_call_send_pb(x->ccall, &r.base);
    (void)tide_rpc_client_call_close_send(x->ccall);
    return 0;
}

/* The checkpoint tiers' loop side (ckpt_tiers.h): reports in the hot layout become save jobs run
 * one at a time on the threadpool (manifest in hot, verified atomic copy to warm, pruning), and
 * restore requests become searches run at once (the copy found handed to the rank's account, when
 * it runs as another one, before the answer: an answer never names what the rank cannot read).
 * Forgets and TTL sweeps of the hot tier (an ended job's HOT/JOB and HOT/mirror/JOB) run in the same
 * one-at-a-time queue as the saves. Invariants: at most one save, forget or sweep job is on the
 * threadpool (so a prune or a removal of one tier never races another, and a job's copies are never
 * removed under its own save); a job's strings are owned by the job; once tide_ckpt_tiers_free was
 * called no callback reaches the caller, and the struct goes with the last job that was on the
 * threadpool. */
#include "ckpt_tiers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "core.h"
#include "flush.h"
#include "fsutil.h"
#include "list.h"
#include "log.h"
#include "xmalloc.h"

enum job_kind { JOB_SAVE, JOB_RESTORE, JOB_FORGET, JOB_SWEEP };

#define GONE_PREFIX ".gone-" /* TIER/.gone-JOB-PID-SEQ: a job's copies being removed */
#define MIRROR_NAME "mirror" /* HOT/mirror is the mirror tier, never a job's directory */
#define RESTORED_NAME "restored" /* HOT/restored: restores handed to other accounts (hand_over) */

/* What a forget or sweep removed of one job. */
typedef struct removed {
    char *job;
    uint64_t steps, bytes;                /* HOT/JOB */
    uint64_t mirror_steps, mirror_bytes;  /* HOT/mirror/JOB */
    int64_t age_s;                        /* sweep: how old its newest file was */
} removed_t;

typedef struct job {
    tide_list_t link; /* t->saves while queued (saves, forgets and sweeps share the queue) */
    uv_work_t work;
    tide_ckpt_tiers_t *t;
    enum job_kind kind;
    char *job_id;
    int32_t generation, rank;
    int64_t step;
    /* save */
    char *path;
    bool is_dir;
    char sha256[65];
    uint64_t bytes; /* copied to warm */
    tide_ckpt_meta_t meta; /* the manifest written in hot (for the saved callback) */
    /* restore */
    int64_t resume_step;
    tide_ckpt_tier_t tiers[4];
    tide_ckpt_restore_cb cb;
    void *ud;
    uint64_t token;
    tide_ckpt_found_t found;
    bool has_as;             /* save: read and write HOT/JOB as `as`; restore: hand the copy found to it */
    tide_fs_account_t as;
    bool handover_failed;    /* found, but not handed over: rc -EACCES, err says why */
    /* forget / sweep */
    int64_t ttl_ms;
    char **keep; /* sweep: jobs with a rank running here (copied) */
    size_t n_keep;
    uint64_t seq; /* for .gone- names */
    removed_t *removed;
    size_t n_removed;
    /* result */
    int rc;
    tide_error_t err;
} job_t;

struct tide_ckpt_tiers {
    uv_loop_t *loop;
    char *hot, *warm, *cold;
    char *mirror; /* HOT/mirror: the copies peers mirrored here (worker/ckpt_mirror.c) */
    char *restored; /* HOT/restored: copies handed to ranks that run as another account (hand_over) */
    int keep_hot, keep_warm;
    tide_ckpt_saved_cb saved_cb;
    void *ud;
    tide_list_t saves; /* queued, not started */
    job_t *running_save;
    size_t running; /* jobs on the threadpool */
    uint64_t saved, failed;
    uint64_t forgotten, forgotten_bytes; /* jobs whose hot copies were removed; their bytes */
    uint64_t seq;
    bool freeing;
    /* The ranks running here and their jobs (tide_ckpt_tiers_rank_started): a removal on the threadpool
     * looks under live_mu, just before its rename, so a job that starts here meanwhile keeps its copies. */
    pthread_mutex_t live_mu;
    struct live_rank {
        uint64_t id;
        char *job;
    } *live;
    size_t n_live;
};

static void start_next_save(tide_ckpt_tiers_t *t);
static void hot_work(uv_work_t *w);
static void hot_after(uv_work_t *w, int status);

static void job_free(job_t *j)
{
    for (size_t i = 0; i < j->n_keep; i++)
        free(j->keep[i]);
    free(j->keep);
    for (size_t i = 0; i < j->n_removed; i++)
        free(j->removed[i].job);
    free(j->removed);
    tide_ckpt_meta_clear(&j->meta);
    tide_ckpt_found_clear(&j->found);
    free(j->job_id);
    free(j->path);
    free(j);
}

static void maybe_release(tide_ckpt_tiers_t *t)
{
    if (t->freeing && t->running == 0) {
        free(t->hot);
        free(t->warm);
        free(t->cold);
        free(t->mirror);
        free(t->restored);
        for (size_t i = 0; i < t->n_live; i++)
            free(t->live[i].job);
        free(t->live);
        pthread_mutex_destroy(&t->live_mu);
        free(t);
    }
}

void tide_ckpt_tiers_rank_started(tide_ckpt_tiers_t *t, uint64_t id, const char *job_id)
{
    if (!t || !job_id)
        return;
    pthread_mutex_lock(&t->live_mu);
    t->live = tide_xrealloc(t->live, (t->n_live + 1) * sizeof(*t->live));
    t->live[t->n_live].id = id;
    t->live[t->n_live].job = tide_xstrdup(job_id);
    t->n_live++;
    pthread_mutex_unlock(&t->live_mu);
}

void tide_ckpt_tiers_rank_ended(tide_ckpt_tiers_t *t, uint64_t id)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->live_mu);
    for (size_t i = 0; i < t->n_live; i++) {
        if (t->live[i].id != id)
            continue;
        free(t->live[i].job);
        t->live[i] = t->live[--t->n_live];
        break;
    }
    pthread_mutex_unlock(&t->live_mu);
}

/* Under live_mu. */
static bool job_live(const tide_ckpt_tiers_t *t, const char *job)
{
    for (size_t i = 0; i < t->n_live; i++)
        if (strcmp(t->live[i].job, job) == 0)
            return true;
    return false;
}

bool tide_ckpt_tiers_in_layout(const char *hot, const char *job, int64_t step, int32_t rank,
                               const char *path, bool *is_dir)
{
    char *dir;
    size_t n;
    bool ok = false;

    if (!hot || !hot[0] || !job || !path || step < 0 || rank < 0)
        return false;
    dir = tide_xasprintf("%s/%s/step-%" PRId64 "/rank-%d", hot, job, step, rank);
    n = strlen(dir);
    if (strncmp(path, dir, n) == 0) {
        const char *rest = path + n;
        if (rest[0] == '\0' || strcmp(rest, "/") == 0) {
            ok = true;
            if (is_dir)
                *is_dir = true;
        } else if (rest[0] == '/' && rest[1] && rest[1] != '.' && !strchr(rest + 1, '/') &&
                   strcmp(rest + 1, TIDE_CKPT_MANIFEST) != 0) {
            ok = true;
            if (is_dir)
                *is_dir = false;
        }
    }
    free(dir);
    return ok;
}

/* --- the save job (threadpool) --- */

static int sha256_file_hex(const char *path, char hex[65], tide_error_t *err)
{
    unsigned char buf[8192], md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int fd = tide_fs_open_regular(AT_FDCWD, path), rc = 0;
    ssize_t n;

    if (fd < 0 || !ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        rc = fd < 0 ? fd : -ENOMEM;
        goto done;
    }
    while ((n = read(fd, buf, sizeof(buf))) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = -errno;
            goto done;
        }
        EVP_DigestUpdate(ctx, buf, (size_t)n);
    }
    EVP_DigestFinal_ex(ctx, md, &md_len);
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
done:
    if (rc < 0)
        tide_errprintf(err, "%s: %s", path, strerror(-rc));
    if (fd >= 0)
        close(fd);
    EVP_MD_CTX_free(ctx);
    return rc;
}

typedef struct line {
    const char *name;
    const char *hex;
} line_t;

static int cmp_lines(const void *a, const void *b)
{
    return strcmp(((const line_t *)a)->name, ((const line_t *)b)->name);
}

/* flush_copy's directory rule over the manifest's files plus the manifest itself. */
static void dir_sha256(const tide_ckpt_meta_t *m, const char *manifest_hex, char hex[65])
{
    line_t *lines = tide_xcalloc(m->n_files + 1, sizeof(*lines));
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();

    for (size_t i = 0; i < m->n_files; i++)
        lines[i] = (line_t){m->files[i].name, m->files[i].sha256};
    lines[m->n_files] = (line_t){TIDE_CKPT_MANIFEST, manifest_hex};
    qsort(lines, m->n_files + 1, sizeof(*lines), cmp_lines);
    if (!ctx)
        abort();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (size_t i = 0; i <= m->n_files; i++) {
        EVP_DigestUpdate(ctx, lines[i].hex, strlen(lines[i].hex));
        EVP_DigestUpdate(ctx, "  ", 2);
        EVP_DigestUpdate(ctx, lines[i].name, strlen(lines[i].name));
        EVP_DigestUpdate(ctx, "\n", 1);
    }
    EVP_DigestFinal_ex(ctx, md, &md_len);
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(ctx);
    free(lines);
}

/* The calling thread reads and writes as the job's rank account from now on (fs_as.h); pair with
 * tide_fs_as_leave. */
static int as_enter(job_t *j, tide_fs_as_saved_t *fs, tide_error_t *err)
{
    int rc = tide_fs_as_enter(j->has_as ? &j->as : NULL, fs);

    if (rc < 0)
        tide_errprintf(err, "cannot act as uid %u: %s", (unsigned)j->as.uid, strerror(-rc));
    return rc;
}

static int do_save(job_t *j)
{
    tide_ckpt_tiers_t *t = j->t;
    char *rankdir = tide_ckpt_rank_dir(t->hot, j->job_id, j->step, j->rank);
    char *manifest = NULL, *dest = NULL;
    char mhex[65], expect[65];
    tide_ckpt_meta_t meta;
    tide_fs_as_saved_t fs;
    tide_error_t *err = &j->err;
    int rc;

    memset(&meta, 0, sizeof(meta));
    /* What is in HOT/JOB is read and written as the rank's account: the account owns that directory
     * (fs_as.h). The warm copy is written as the worker, into the worker's own directories. */
    rc = as_enter(j, &fs, err);
    if (rc == 0)
        rc = tide_ckpt_meta_scan(rankdir, j->job_id, j->generation, j->step, j->rank,
                                 j->is_dir ? j->sha256 : NULL, &meta, err);
    if (rc < 0)
        goto done;
    if (!j->is_dir && j->sha256[0]) {
        /* The trainer named one file: its sha must be what is on disk. */
        const char *base = strrchr(j->path, '/') + 1;
        bool found = false;
        for (size_t i = 0; i < meta.n_files; i++) {
            if (strcmp(meta.files[i].name, base) != 0)
                continue;
            found = true;
            if (strcasecmp(meta.files[i].sha256, j->sha256) != 0) {
                tide_errprintf(err, "%s: sha256 %s, the trainer reported %s", j->path,
                               meta.files[i].sha256, j->sha256);
                rc = -EBADMSG;
                goto done;
            }
        }
        if (!found) {
            tide_errprintf(err, "%s: not a regular file of the checkpoint", j->path);
            rc = -ENOENT;
            goto done;
        }
    }
    rc = tide_ckpt_manifest_write(rankdir, &meta, err);
    if (rc < 0)
        goto done;
    if (t->warm) {
        manifest = tide_xasprintf("%s/%s", rankdir, TIDE_CKPT_MANIFEST);
        rc = sha256_file_hex(manifest, mhex, err);
        if (rc < 0)
            goto done;
    }
    tide_fs_as_leave(&fs);
    if (t->warm) {
        tide_flush_result_t res;
        tide_flush_copy_t req;

        dir_sha256(&meta, mhex, expect);
        dest = tide_xasprintf("%s/%s/step-%" PRId64, t->warm, j->job_id, j->step);
        memset(&req, 0, sizeof(req));
        req.src = rankdir;
        req.src_as = j->has_as ? &j->as : NULL;
        req.dest_dir = dest;
        req.expect_sha256 = expect;
        rc = tide_flush_copy(&req, &res, err);
        if (rc < 0)
            goto done;
        j->bytes = res.bytes;
        tide_flush_result_clear(&res);
        rc = tide_ckpt_prune(t->warm, j->job_id, t->keep_warm, err);
        if (rc < 0)
            goto done;
    }
    rc = as_enter(j, &fs, err);
    if (rc == 0)
        rc = tide_ckpt_prune(t->hot, j->job_id, t->keep_hot, err);
    if (rc == 0) {
        j->meta = meta; /* kept for the saved callback */
        memset(&meta, 0, sizeof(meta));
    }
done:
    tide_fs_as_leave(&fs);
    tide_ckpt_meta_clear(&meta);
    free(manifest);
    free(dest);
    free(rankdir);
    return rc;
}

static void save_work(uv_work_t *w)
{
    job_t *j = w->data;
    tide_flush_priority_t saved;

    tide_flush_priority_lower(&saved);
    j->rc = do_save(j);
    tide_flush_priority_restore(&saved);
}

static void save_after(uv_work_t *w, int status)
{
    job_t *j = w->data;
    tide_ckpt_tiers_t *t = j->t;

    t->running--;
    t->running_save = NULL;
    if (status == 0 && j->rc == 0) {
        t->saved++;
        tide_info("job %s rank %d: checkpoint of step %" PRId64 " has its manifest in hot%s%s "
                  "(%llu bytes)",
                  j->job_id, j->rank, j->step, t->warm ? " and a copy in " : "",
                  t->warm ? t->warm : "", (unsigned long long)j->bytes);
        if (t->saved_cb && !t->freeing) {
            char *rankdir = tide_ckpt_rank_dir(t->hot, j->job_id, j->step, j->rank);
            t->saved_cb(t->ud, rankdir, &j->meta);
            free(rankdir);
        }
    } else {
        t->failed++;
        tide_warn("job %s rank %d: checkpoint of step %" PRId64 " not tiered: %s", j->job_id,
                  j->rank, j->step,
                  status < 0 ? uv_strerror(status) : j->err.text[0] ? j->err.text
                                                                    : strerror(-j->rc));
    }
    job_free(j);
    if (t->freeing)
        maybe_release(t);
    else
        start_next_save(t);
}

static void start_next_save(tide_ckpt_tiers_t *t)
{
    job_t *j;

    if (t->running_save || t->freeing || tide_list_empty(&t->saves))
        return;
    j = tide_list_entry(t->saves.next, job_t, link);
    tide_list_remove(&j->link);
    t->running_save = j;
    t->running++;
    j->work.data = j;
    if (uv_queue_work(t->loop, &j->work, j->kind == JOB_SAVE ? save_work : hot_work,
                      j->kind == JOB_SAVE ? save_after : hot_after) < 0) {
        t->running--;
        t->running_save = NULL;
        t->failed++;
        job_free(j);
    }
}

int tide_ckpt_tiers_saved(tide_ckpt_tiers_t *t, const char *job_id, int32_t generation,
                          int32_t rank, int64_t step, const char *path, const char *sha256,
                          const tide_fs_account_t *as)
{
    bool is_dir = false;
    job_t *j;

    if (!t || t->freeing || !tide_ckpt_tiers_in_layout(t->hot, job_id, step, rank, path, &is_dir))
        return 0;
    j = tide_xcalloc(1, sizeof(*j));
    j->t = t;
    j->kind = JOB_SAVE;
    j->job_id = tide_xstrdup(job_id);
    j->generation = generation;
    j->rank = rank;
    j->step = step;
    j->path = tide_xstrdup(path);
    j->is_dir = is_dir;
    snprintf(j->sha256, sizeof(j->sha256), "%s", sha256 ? sha256 : "");
    if (as) {
        j->has_as = true;
        j->as = *as;
    }
    tide_list_push_back(&t->saves, &j->link);
    start_next_save(t);
    return 1;
}

/* --- forget and sweep (threadpool, in the save queue) --- */

typedef struct tree_stat {
    uint64_t bytes;   /* of regular files */
    int64_t newest_s; /* newest mtime of anything in the tree, the root included */
} tree_stat_t;

/* Sums the tree at dirfd/name (never following links, at most 16 levels deep). */
static void tree_walk(int at, const char *name, int depth, tree_stat_t *ts)
{
    struct stat st;
    struct dirent *e;
    DIR *d;
    int fd;

    if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    if ((int64_t)st.st_mtim.tv_sec > ts->newest_s)
        ts->newest_s = (int64_t)st.st_mtim.tv_sec;
    if (S_ISREG(st.st_mode))
        ts->bytes += (uint64_t)st.st_size;
    if (!S_ISDIR(st.st_mode) || depth >= 16)
        return;
    fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            tree_walk(dirfd(d), e->d_name, depth + 1, ts);
    closedir(d);
}

/* Step directories (step-N) directly in dir. */
static uint64_t count_steps(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "step-", 5) == 0 && e->d_name[5] >= '0' && e->d_name[5] <= '9')
            n++;
    closedir(d);
    return n;
}

/* Removes TIER/JOB: renamed to TIER/.gone-... first, so a reader (a restore, a mirror fetch) and a
 * writer that comes later (a mirror commit, a fetch into hot) find either all of it or nothing and a
 * commit under way fails instead of landing in a half-removed tree; then removed. steps and bytes get
 * what it held. Returns 1 when something was removed, 0 when there was nothing. */
static int remove_job_dir(tide_ckpt_tiers_t *t, const char *tier, const char *job, uint64_t seq, uint64_t *steps,
                          uint64_t *bytes)
{
    char *dir = tide_xasprintf("%s/%s", tier, job);
    char *gone = tide_xasprintf("%s/" GONE_PREFIX "%s-%ld-%" PRIu64, tier, job, (long)getpid(), seq);
    tree_stat_t ts = {0, 0};
    struct stat st;
    bool moved;
    int rc = 0;

    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        goto done;
    /* A rank of the job started here since this removal was decided (a sweep's job relaunched): keep. */
    pthread_mutex_lock(&t->live_mu);
    moved = !job_live(t, job) && rename(dir, gone) == 0;
    pthread_mutex_unlock(&t->live_mu);
    if (!moved)
        goto done;
    *steps += count_steps(gone);
    tree_walk(AT_FDCWD, gone, 0, &ts);
    *bytes += ts.bytes;
    tide_fs_remove_tree(gone);
    rc = 1;
done:
    free(gone);
    free(dir);
    return rc;
}

static removed_t *removed_add(job_t *j, const char *job)
{
    removed_t *r;

    j->removed = tide_xrealloc(j->removed, (j->n_removed + 1) * sizeof(*j->removed));
    r = &j->removed[j->n_removed++];
    memset(r, 0, sizeof(*r));
    r->job = tide_xstrdup(job);
    return r;
}

/* HOT/JOB (unless JOB names the mirror tier) and HOT/mirror/JOB. */
static void forget_one(job_t *j, removed_t *r)
{
    tide_ckpt_tiers_t *t = j->t;

    uint64_t steps = 0, bytes = 0;

    if (strcmp(r->job, MIRROR_NAME) != 0 && strcmp(r->job, RESTORED_NAME) != 0)
        (void)remove_job_dir(t, t->hot, r->job, j->seq, &r->steps, &r->bytes);
    (void)remove_job_dir(t, t->mirror, r->job, j->seq, &r->mirror_steps, &r->mirror_bytes);
    (void)remove_job_dir(t, t->restored, r->job, j->seq, &steps, &bytes); /* copies made for restores */
}

static bool kept(const job_t *j, const char *job)
{
    for (size_t i = 0; i < j->n_keep; i++)
        if (strcmp(j->keep[i], job) == 0)
            return true;
    return false;
}

#define MIRROR_TTL_FACTOR 7 /* a week at the default --ckpt-hot-ttl */

static bool numeric(const char *name)
{
    if (!name[0] || strlen(name) > 20)
        return false;
    for (const char *p = name; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* The jobs in tier whose newest file is older than the TTL (and none of whose ranks runs here);
 * leftovers of an interrupted removal (".gone-" names) go at once. */
static void sweep_tier(job_t *j, const char *tier, bool is_hot, int64_t now_s)
{
    DIR *d = opendir(tier);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0;

    if (!d)
        return;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, GONE_PREFIX, strlen(GONE_PREFIX)) == 0) {
            char *p = tide_xasprintf("%s/%s", tier, e->d_name);
            tide_fs_remove_tree(p);
            free(p);
            continue;
        }
        /* Only what tide put there: job directories, named by the scheduler's job numbers (a hot tier on
         * a shared path keeps everything else). */
        if (!numeric(e->d_name) || kept(j, e->d_name))
            continue;
        names = tide_xrealloc(names, (n + 1) * sizeof(*names));
        names[n++] = tide_xstrdup(e->d_name);
    }
    closedir(d);
    for (size_t i = 0; i < n; i++) {
        tree_stat_t ts = {0, 0};
        int tfd = open(tier, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (tfd >= 0) {
            tree_walk(tfd, names[i], 0, &ts);
            close(tfd);
        }
        /* A mirror copy is of a job running elsewhere, which this worker cannot see: it goes only after
         * MIRROR_TTL_FACTOR times the TTL without a new checkpoint. */
        if (tfd >= 0 && ts.newest_s > 0 && (now_s - ts.newest_s) * 1000 > j->ttl_ms * (is_hot ? 1 : MIRROR_TTL_FACTOR)) {
            removed_t *r = NULL;
            for (size_t k = 0; k < j->n_removed; k++)
                if (strcmp(j->removed[k].job, names[i]) == 0)
                    r = &j->removed[k];
            if (!r)
                r = removed_add(j, names[i]);
            if (now_s - ts.newest_s > r->age_s)
                r->age_s = now_s - ts.newest_s;
            if (is_hot)
                (void)remove_job_dir(j->t, tier, names[i], j->seq, &r->steps, &r->bytes);
            else
                (void)remove_job_dir(j->t, tier, names[i], j->seq, &r->mirror_steps, &r->mirror_bytes);
        }
        free(names[i]);
    }
    free(names);
}

static void hot_work(uv_work_t *w)
{
    job_t *j = w->data;
    tide_flush_priority_t saved;

    tide_flush_priority_lower(&saved);
    if (j->kind == JOB_FORGET) {
        forget_one(j, removed_add(j, j->job_id));
    } else {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        sweep_tier(j, j->t->hot, true, (int64_t)now.tv_sec);
        sweep_tier(j, j->t->mirror, false, (int64_t)now.tv_sec);
        sweep_tier(j, j->t->restored, true, (int64_t)now.tv_sec);
    }
    tide_flush_priority_restore(&saved);
}

static void hot_after(uv_work_t *w, int status)
{
    job_t *j = w->data;
    tide_ckpt_tiers_t *t = j->t;

    t->running--;
    t->running_save = NULL;
    for (size_t i = 0; status == 0 && i < j->n_removed; i++) {
        const removed_t *r = &j->removed[i];
        if (j->kind == JOB_FORGET || r->steps || r->bytes || r->mirror_steps || r->mirror_bytes) {
            t->forgotten++;
            t->forgotten_bytes += r->bytes + r->mirror_bytes;
        }
        if (j->kind == JOB_FORGET)
            tide_info("job %s ended: removed its hot checkpoints (%" PRIu64 " steps, %" PRIu64
                      " bytes) and the mirrored copies kept for it (%" PRIu64 " steps, %" PRIu64
                      " bytes)",
                      r->job, r->steps, r->bytes, r->mirror_steps, r->mirror_bytes);
        else
            tide_info("job %s: removed its hot checkpoints (%" PRIu64 " steps, %" PRIu64
                      " bytes) and mirrored copies (%" PRIu64 " steps, %" PRIu64
                      " bytes): no rank of it runs here and its newest file is %" PRId64
                      " s old (--ckpt-hot-ttl %" PRId64 " s)",
                      r->job, r->steps, r->bytes, r->mirror_steps, r->mirror_bytes, r->age_s,
                      j->ttl_ms / 1000);
    }
    if (status < 0)
        tide_warn("hot tier clean-up not run: %s", uv_strerror(status));
    job_free(j);
    if (t->freeing)
        maybe_release(t);
    else
        start_next_save(t);
}

static job_t *hot_job(tide_ckpt_tiers_t *t, enum job_kind kind)
{
    job_t *j = tide_xcalloc(1, sizeof(*j));

    j->t = t;
    j->kind = kind;
    j->seq = ++t->seq;
    return j;
}

int tide_ckpt_tiers_forget(tide_ckpt_tiers_t *t, const char *job_id)
{
    job_t *j;

    if (!job_id || !tide_worker_job_id_valid(job_id))
        return -EINVAL;
    if (!t || t->freeing || !t->hot)
        return 0;
    j = hot_job(t, JOB_FORGET);
    j->job_id = tide_xstrdup(job_id);
    tide_list_push_back(&t->saves, &j->link);
    start_next_save(t);
    return 1;
}

int tide_ckpt_tiers_sweep(tide_ckpt_tiers_t *t, int64_t ttl_ms, const char *const *keep,
                          size_t n_keep)
{
    job_t *j;

    if (ttl_ms < 0)
        return -EINVAL;
    if (!t || t->freeing || !t->hot || ttl_ms == 0)
        return 0;
    j = hot_job(t, JOB_SWEEP);
    j->ttl_ms = ttl_ms;
    j->keep = tide_xcalloc(n_keep ? n_keep : 1, sizeof(*j->keep));
    for (size_t i = 0; i < n_keep; i++)
        if (keep[i])
            j->keep[j->n_keep++] = tide_xstrdup(keep[i]);
    tide_list_push_back(&t->saves, &j->link);
    start_next_save(t);
    return 1;
}

void tide_ckpt_tiers_forgotten(const tide_ckpt_tiers_t *t, uint64_t *jobs, uint64_t *bytes)
{
    if (jobs)
        *jobs = t->forgotten;
    if (bytes)
        *bytes = t->forgotten_bytes;
}

/* --- restore --- */

/* dir as a directory of the worker's own, 0711 (reachable by name, not listable): made when missing,
 * refused when not a directory of the worker's (a link, or somebody else's). */
static int own_dir(const char *dir, tide_error_t *err)
{
    struct stat st;
    int rc = 0;

    if (mkdir(dir, 0711) < 0 && errno != EEXIST)
        rc = -errno;
    else if (lstat(dir, &st) < 0)
        rc = -errno;
    else if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        rc = -ENOTDIR;
    else if ((st.st_mode & 07777) != 0711 && chmod(dir, 0711) < 0)
        rc = -errno;
    if (rc < 0)
        tide_errprintf(err, "%s: %s", dir, strerror(-rc));
    return rc;
}

/* Makes the copy at rank_dir (inside the worker's own HOT/restored) readable by as, and by nobody else:
 * its directories stay the worker's, so the account can change no entry the worker later removes — the
 * step directory 0711, the rank directory 0750 in the account's group (the account lists and reads it);
 * its regular files (0600, flush_copy's) become the account's, never through a link. Returns 0 or -errno
 * with err. */
static int give_files(const char *step_dir, const char *rank_dir, const tide_fs_account_t *as,
                      tide_error_t *err)
{
    struct dirent *e;
    DIR *d;
    int fd, sfd, rc = 0;

    sfd = open(step_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sfd < 0 || fchmod(sfd, 0711) < 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", step_dir, strerror(-rc));
        if (sfd >= 0)
            close(sfd);
        return rc;
    }
    close(sfd);
    fd = open(rank_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchown(fd, (uid_t)-1, as->gid) < 0 || fchmod(fd, 0750) < 0 ||
        !(d = fdopendir(fd))) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", rank_dir, strerror(-rc));
        if (fd >= 0)
            close(fd);
        return rc;
    }
    while (rc == 0 && (e = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = -errno;
        } else if (S_ISREG(st.st_mode) &&
                   fchownat(dirfd(d), e->d_name, as->uid, as->gid, AT_SYMLINK_NOFOLLOW) < 0) {
            rc = -errno;
        }
        if (rc < 0)
            tide_errprintf(err, "%s/%s: %s", rank_dir, e->d_name, strerror(-rc));
    }
    closedir(d);
    return rc;
}

/* The restore's copy, found in tier found.tier, handed to j->as (see tide_ckpt_tiers_restore). On
 * success j->found.path names what the account can read. A copy in hot (HOT/JOB: the rank's own) was
 * read and verified as the account by the search, so the account can read it as it is. A copy anywhere
 * else is copied, verified, into the worker's own HOT/restored/JOB/step-S/rank-R — never through a
 * directory the account owns, where a link could send a root write anywhere. */
static int hand_over(job_t *j)
{
    tide_ckpt_tiers_t *t = j->t;
    tide_ckpt_found_t *f = &j->found;
    tide_flush_result_t res;
    tide_flush_copy_t req;
    char *manifest = NULL, *dest = NULL, *jobdir = NULL;
    char mhex[65], expect[65];
    tide_error_t *err = &j->err;
    int rc;

    memset(&res, 0, sizeof(res));
    if (f->tier == 0) {
        rc = 0;
        goto done;
    }
    if (!t->hot) {
        rc = -ENOTSUP;
        tide_errprintf(err, "no hot tier (--ckpt-hot) to copy it into");
        goto done;
    }
    jobdir = tide_xasprintf("%s/%s", t->restored, j->job_id);
    if ((rc = own_dir(t->restored, err)) < 0 || (rc = own_dir(jobdir, err)) < 0)
        goto done;
    manifest = tide_xasprintf("%s/%s", f->path, TIDE_CKPT_MANIFEST);
    rc = sha256_file_hex(manifest, mhex, err);
    if (rc < 0)
        goto done;
    dir_sha256(&f->meta, mhex, expect);
    dest = tide_xasprintf("%s/step-%" PRId64, jobdir, f->meta.step);
    memset(&req, 0, sizeof(req));
    req.src = f->path;
    req.dest_dir = dest;
    req.expect_sha256 = expect;
    rc = tide_flush_copy(&req, &res, err);
    if (rc < 0)
        goto done;
    rc = give_files(dest, res.path, &j->as, err);
    if (rc < 0)
        goto done;
    free(f->path);
    f->path = res.path;
    res.path = NULL;
done:
    tide_flush_result_clear(&res);
    free(manifest);
    free(dest);
    free(jobdir);
    return rc;
}

static void restore_work(uv_work_t *w)
{
    job_t *j = w->data;
    tide_ckpt_search_t s;

    memset(&s, 0, sizeof(s));
    s.tiers = j->tiers;
    s.n_tiers = 4;
    s.job = j->job_id;
    s.rank = j->rank;
    s.resume_step = j->resume_step;
    s.generation = j->generation;
    j->rc = tide_ckpt_find(&s, &j->found, &j->err);
    if (j->rc == 0 && j->has_as) {
        tide_error_t why;

        tide_error_clear(&why);
        if (hand_over(j) < 0) {
            snprintf(why.text, sizeof(why.text), "%s", j->err.text);
            tide_errprintf(&j->err, "step %" PRId64 " (%s, %s) cannot be handed to uid %u: %s",
                           j->found.meta.step, j->tiers[j->found.tier].name, j->found.path,
                           (unsigned)j->as.uid, why.text);
            free(j->found.path);
            j->found.path = NULL;
            j->handover_failed = true;
            j->rc = -EACCES;
        }
    }
}

static void restore_after(uv_work_t *w, int status)
{
    job_t *j = w->data;
    tide_ckpt_tiers_t *t = j->t;

    t->running--;
    if (!t->freeing) {
        int rc = status < 0 ? status : j->rc;
        const char *tier = rc == 0 || j->handover_failed ? j->tiers[j->found.tier].name : "";
        const char *why = j->err.text[0] ? j->err.text : rc < 0 ? strerror(-rc) : "";
        j->cb(j->ud, j->token, rc, &j->found, tier, why);
    }
    job_free(j);
    maybe_release(t);
}

void tide_ckpt_tiers_restore(tide_ckpt_tiers_t *t, const char *job_id, int32_t generation,
                             int32_t rank, int64_t resume_step, const tide_fs_account_t *as,
                             uint64_t token, tide_ckpt_restore_cb cb, void *ud)
{
    job_t *j = tide_xcalloc(1, sizeof(*j));

    j->t = t;
    j->kind = JOB_RESTORE;
    j->job_id = tide_xstrdup(job_id);
    j->generation = generation;
    j->rank = rank;
    j->resume_step = resume_step < 0 ? -1 : resume_step;
    if (as) {
        j->has_as = true;
        j->as = *as;
    }
    /* HOT/JOB is the account's: searched as the account (fs_as.h). The other tiers are the worker's. */
    j->tiers[0] = (tide_ckpt_tier_t){"hot", t->hot, j->has_as ? &j->as : NULL};
    j->tiers[1] = (tide_ckpt_tier_t){"mirror", t->mirror, NULL};
    j->tiers[2] = (tide_ckpt_tier_t){"warm", t->warm, NULL};
    j->tiers[3] = (tide_ckpt_tier_t){"cold", t->cold, NULL};
    j->cb = cb;
    j->ud = ud;
    j->token = token;
    j->work.data = j;
    t->running++;
    if (uv_queue_work(t->loop, &j->work, restore_work, restore_after) < 0) {
        /* Cannot happen with valid arguments: the request stays unanswered (logged). */
        t->running--;
        tide_warn("job %s rank %d: cannot queue the checkpoint search", job_id, rank);
        job_free(j);
    }
}

/* --- lifetime --- */

void tide_ckpt_tiers_new(uv_loop_t *loop, const tide_ckpt_tiers_config_t *cfg,
                         tide_ckpt_tiers_t **out)
{
    tide_ckpt_tiers_t *t = tide_xcalloc(1, sizeof(*t));

    t->loop = loop;
    t->hot = cfg->hot && cfg->hot[0] ? tide_xstrdup(cfg->hot) : NULL;
    t->warm = cfg->warm && cfg->warm[0] ? tide_xstrdup(cfg->warm) : NULL;
    t->cold = cfg->cold && cfg->cold[0] ? tide_xstrdup(cfg->cold) : NULL;
    t->mirror = t->hot ? tide_xasprintf("%s/mirror", t->hot) : NULL;
    t->restored = t->hot ? tide_xasprintf("%s/restored", t->hot) : NULL;
    t->keep_hot = cfg->keep_hot > 0 ? cfg->keep_hot : 1;
    t->keep_warm = cfg->keep_warm > 0 ? cfg->keep_warm : 1;
    t->saved_cb = cfg->saved;
    t->ud = cfg->ud;
    tide_list_init(&t->saves);
    pthread_mutex_init(&t->live_mu, NULL);
    *out = t;
}

void tide_ckpt_tiers_free(tide_ckpt_tiers_t *t)
{
    tide_list_t *pos, *tmp;

    if (!t)
        return;
    t->freeing = true;
    tide_list_for_each_safe(pos, tmp, &t->saves) {
        job_t *j = tide_list_entry(pos, job_t, link);
        tide_list_remove(&j->link);
        job_free(j);
    }
    maybe_release(t);
}

size_t tide_ckpt_tiers_busy(const tide_ckpt_tiers_t *t)
{
    size_t n = t->running;
    const tide_list_t *pos;

    for (pos = t->saves.next; pos != &t->saves; pos = pos->next)
        n++;
    return n;
}

void tide_ckpt_tiers_counts(const tide_ckpt_tiers_t *t, uint64_t *saved, uint64_t *failed)
{
    if (saved)
        *saved = t->saved;
    if (failed)
        *failed = t->failed;
}

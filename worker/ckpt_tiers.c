/* The checkpoint tiers' loop side (ckpt_tiers.h): reports in the hot layout become save jobs run
 * one at a time on the threadpool (manifest in hot, verified atomic copy to warm, pruning), and
 * restore requests become searches run at once. Invariants: at most one save job is on the
 * threadpool (so two prunes of one tier never race); a job's strings are owned by the job; once
 * tide_ckpt_tiers_free was called no callback reaches the caller, and the struct goes with the
 * last job that was on the threadpool. */
#include "ckpt_tiers.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <uv.h>

#include "flush.h"
#include "list.h"
#include "log.h"
#include "xmalloc.h"

enum job_kind { JOB_SAVE, JOB_RESTORE };

typedef struct job {
    tide_list_t link; /* t->saves while queued */
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
    /* result */
    int rc;
    tide_error_t err;
} job_t;

struct tide_ckpt_tiers {
    uv_loop_t *loop;
    char *hot, *warm, *cold;
    char *mirror; /* HOT/mirror: the copies peers mirrored here (worker/ckpt_mirror.c) */
    int keep_hot, keep_warm;
    tide_ckpt_saved_cb saved_cb;
    void *ud;
    tide_list_t saves; /* queued, not started */
    job_t *running_save;
    size_t running; /* jobs on the threadpool */
    uint64_t saved, failed;
    bool freeing;
};

static void start_next_save(tide_ckpt_tiers_t *t);

static void job_free(job_t *j)
{
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
        free(t);
    }
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
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
    ssize_t n;

    if (fd < 0 || !ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        rc = fd < 0 ? -errno : -ENOMEM;
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

static int do_save(job_t *j)
{
    tide_ckpt_tiers_t *t = j->t;
    char *rankdir = tide_ckpt_rank_dir(t->hot, j->job_id, j->step, j->rank);
    char *manifest = NULL, *dest = NULL;
    char mhex[65], expect[65];
    tide_ckpt_meta_t meta;
    tide_error_t *err = &j->err;
    int rc;

    memset(&meta, 0, sizeof(meta));
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
        tide_flush_result_t res;
        tide_flush_copy_t req;

        manifest = tide_xasprintf("%s/%s", rankdir, TIDE_CKPT_MANIFEST);
        rc = sha256_file_hex(manifest, mhex, err);
        if (rc < 0)
            goto done;
        dir_sha256(&meta, mhex, expect);
        dest = tide_xasprintf("%s/%s/step-%" PRId64, t->warm, j->job_id, j->step);
        memset(&req, 0, sizeof(req));
        req.src = rankdir;
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
    rc = tide_ckpt_prune(t->hot, j->job_id, t->keep_hot, err);
    if (rc == 0) {
        j->meta = meta; /* kept for the saved callback */
        memset(&meta, 0, sizeof(meta));
    }
done:
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
    if (uv_queue_work(t->loop, &j->work, save_work, save_after) < 0) {
        t->running--;
        t->running_save = NULL;
        t->failed++;
        job_free(j);
    }
}

int tide_ckpt_tiers_saved(tide_ckpt_tiers_t *t, const char *job_id, int32_t generation,
                          int32_t rank, int64_t step, const char *path, const char *sha256)
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
    tide_list_push_back(&t->saves, &j->link);
    start_next_save(t);
    return 1;
}

/* --- restore --- */

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
}

static void restore_after(uv_work_t *w, int status)
{
    job_t *j = w->data;
    tide_ckpt_tiers_t *t = j->t;

    t->running--;
    if (!t->freeing) {
        int rc = status < 0 ? status : j->rc;
        const char *tier = rc == 0 ? j->tiers[j->found.tier].name : "";
        const char *why = j->err.text[0] ? j->err.text : rc < 0 ? strerror(-rc) : "";
        j->cb(j->ud, j->token, rc, &j->found, tier, why);
    }
    job_free(j);
    maybe_release(t);
}

void tide_ckpt_tiers_restore(tide_ckpt_tiers_t *t, const char *job_id, int32_t generation,
                             int32_t rank, int64_t resume_step, uint64_t token,
                             tide_ckpt_restore_cb cb, void *ud)
{
    job_t *j = tide_xcalloc(1, sizeof(*j));

    j->t = t;
    j->kind = JOB_RESTORE;
    j->job_id = tide_xstrdup(job_id);
    j->generation = generation;
    j->rank = rank;
    j->resume_step = resume_step < 0 ? -1 : resume_step;
    j->tiers[0] = (tide_ckpt_tier_t){"hot", t->hot};
    j->tiers[1] = (tide_ckpt_tier_t){"mirror", t->mirror};
    j->tiers[2] = (tide_ckpt_tier_t){"warm", t->warm};
    j->tiers[3] = (tide_ckpt_tier_t){"cold", t->cold};
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
    t->keep_hot = cfg->keep_hot > 0 ? cfg->keep_hot : 1;
    t->keep_warm = cfg->keep_warm > 0 ? cfg->keep_warm : 1;
    t->saved_cb = cfg->saved;
    t->ud = cfg->ud;
    tide_list_init(&t->saves);
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

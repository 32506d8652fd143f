/* The worker's durable-copy bookkeeping (see flush.h): checkpoint reports per local rank in, copies
 * on the libuv threadpool, FlushDone out. Invariants: at most one copy per (job, rank) is on the
 * threadpool at a time, the others wait in its slot's queue in arrival order; a slot with a copy
 * running or queued is never evicted; every FlushCheckpoint gets exactly one FlushDone (sent, or
 * kept until the stream is welcomed again, newest UNSENT_MAX), except after tide_flusher_free, when
 * nothing is sent. */
#include "flush.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "ckpt_tiers.h"
#include "core.h"
#include "list.h"
#include "log.h"
#include "xmalloc.h"

#define HISTORY    4  /* checkpoints remembered per rank */
#define SLOTS_MAX  64 /* ranks remembered (idle ones beyond this are forgotten, oldest first) */
#define QUEUE_MAX  8  /* copies waiting per rank */
#define UNSENT_MAX 32

typedef struct saved {
    int32_t generation;
    int64_t step;
    char *path; /* resolved against the rank's workdir; "" when the rank reported none */
    uint64_t bytes;
    char sha256[65];
    bool has_as; /* reported by a rank running as `as`: its path is read as the account */
    tide_fs_account_t as;
} saved_t;

typedef struct task task_t;

typedef struct slot {
    tide_list_t link; /* f->slots, least recently used first */
    char *job_id;
    int32_t rank;
    char *workdir;         /* of its newest start here; NULL: the default */
    saved_t hist[HISTORY]; /* newest first */
    size_t n_hist;
    task_t *running;   /* on the threadpool, or NULL */
    tide_list_t queue; /* task_t waiting, oldest first */
    size_t queued;
} slot_t;

struct task {
    tide_list_t link; /* slot->queue while waiting */
    uv_work_t work;
    tide_flusher_t *f;
    slot_t *slot; /* NULL once the flusher is freed */
    char *job_id;
    int32_t generation, rank;
    int64_t step;
    char *src, *dest_dir;
    char sha256[65];
    uint64_t fail_after;
    bool has_as; /* the source is read as `as` (saved_t) */
    tide_fs_account_t as;
    atomic_int cancel; /* set on the loop, read by the copying thread */
    /* filled on the threadpool */
    int rc;
    tide_error_t err;
    tide_flush_result_t res;
    uint64_t took_ns;
};

typedef struct unsent {
    tide_list_t link;
    Tide__V1__FlushDone done; /* strings owned */
} unsent_t;

struct tide_flusher {
    uv_loop_t *loop;
    tide_flusher_ops_t ops;
    void *ud;
    char *durable_dir, *default_workdir;
    char *hot_dir; /* NULL: none */
    uint64_t fail_after;
    tide_list_t slots;
    size_t n_slots;
    tide_list_t unsent;
    size_t n_unsent;
    size_t in_flight; /* uv_queue_work'd and not yet after_work'd */
    size_t queued;
    bool freed;
};

void tide_flusher_new(uv_loop_t *loop, const tide_flusher_config_t *cfg,
                      const tide_flusher_ops_t *ops, void *ud, tide_flusher_t **out)
{
    tide_flusher_t *f = tide_xcalloc(1, sizeof(*f));

    f->loop = loop;
    f->ops = *ops;
    f->ud = ud;
    f->durable_dir =
        cfg->durable_dir && cfg->durable_dir[0] ? tide_xstrdup(cfg->durable_dir) : NULL;
    f->default_workdir = tide_xstrdup(cfg->default_workdir ? cfg->default_workdir : ".");
    f->hot_dir = cfg->hot_dir && cfg->hot_dir[0] ? tide_xstrdup(cfg->hot_dir) : NULL;
    f->fail_after = cfg->fail_after;
    tide_list_init(&f->slots);
    tide_list_init(&f->unsent);
    *out = f;
}

static void task_free(task_t *t)
{
    free(t->job_id);
    free(t->src);
    free(t->dest_dir);
    tide_flush_result_clear(&t->res);
    free(t);
}

static void unsent_free(unsent_t *u)
{
    tide_list_remove(&u->link);
    free(u->done.job_id);
    free(u->done.durable_path);
    free(u->done.sha256);
    free(u->done.error);
    free(u);
}

static void slot_free(tide_flusher_t *f, slot_t *s)
{
    tide_list_t *pos, *tmp;

    tide_list_remove(&s->link);
    f->n_slots--;
    tide_list_for_each_safe(pos, tmp, &s->queue)
    {
        task_t *t = tide_list_entry(pos, task_t, link);
        tide_list_remove(&t->link);
        f->queued--;
        task_free(t);
    }
    if (s->running)
        s->running->slot = NULL;
    for (size_t i = 0; i < s->n_hist; i++)
        free(s->hist[i].path);
    free(s->job_id);
    free(s->workdir);
    free(s);
}

static void flusher_release(tide_flusher_t *f)
{
    free(f->durable_dir);
    free(f->default_workdir);
    free(f->hot_dir);
    free(f);
}

void tide_flusher_free(tide_flusher_t *f)
{
    tide_list_t *pos, *tmp;

    if (!f)
        return;
    f->freed = true;
    tide_list_for_each_safe(pos, tmp, &f->slots)
    {
        slot_t *s = tide_list_entry(pos, slot_t, link);
        if (s->running) {
            atomic_store(&s->running->cancel, 1);
            uv_cancel((uv_req_t *)&s->running->work); /* fails (fine) once it started */
        }
        slot_free(f, s);
    }
    tide_list_for_each_safe(pos, tmp, &f->unsent)
    {
        unsent_free(tide_list_entry(pos, unsent_t, link));
    }
    if (f->in_flight == 0)
        flusher_release(f);
}

static slot_t *slot_find(tide_flusher_t *f, const char *job_id, int32_t rank)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &f->slots)
    {
        slot_t *s = tide_list_entry(pos, slot_t, link);
        if (s->rank == rank && strcmp(s->job_id, job_id) == 0)
            return s;
    }
    return NULL;
}

/* Finds or makes the slot of (job, rank) and marks it most recently used. */
static slot_t *slot_get(tide_flusher_t *f, const char *job_id, int32_t rank)
{
    slot_t *s = slot_find(f, job_id, rank);
    tide_list_t *pos, *tmp;

    if (s) {
        tide_list_move_back(&f->slots, &s->link);
        return s;
    }
    tide_list_for_each_safe(pos, tmp, &f->slots)
    {
        slot_t *old = tide_list_entry(pos, slot_t, link);
        if (f->n_slots < SLOTS_MAX)
            break;
        if (!old->running && old->queued == 0)
            slot_free(f, old);
    }
    s = tide_xcalloc(1, sizeof(*s));
    s->job_id = tide_xstrdup(job_id);
    s->rank = rank;
    tide_list_init(&s->queue);
    tide_list_push_back(&f->slots, &s->link);
    f->n_slots++;
    return s;
}

void tide_flusher_rank_started(tide_flusher_t *f, const char *job_id, int32_t generation,
                               int32_t rank, const char *workdir)
{
    slot_t *s = slot_get(f, job_id, rank);

    (void)generation;
    free(s->workdir);
    s->workdir = workdir && workdir[0] ? tide_xstrdup(workdir) : NULL;
}

void tide_flusher_saved(tide_flusher_t *f, const char *job_id, int32_t generation, int32_t rank,
                        int64_t step, const char *path, uint64_t bytes, const char *sha256,
                        const tide_fs_account_t *as)
{
    slot_t *s = slot_get(f, job_id, rank);
    const char *wd = s->workdir ? s->workdir : f->default_workdir;
    saved_t e;
    size_t i;

    e.generation = generation;
    e.step = step;
    e.bytes = bytes;
    snprintf(e.sha256, sizeof(e.sha256), "%s", sha256 ? sha256 : "");
    e.has_as = as != NULL;
    e.as = as ? *as : (tide_fs_account_t){0, 0};
    if (!path || !path[0])
        e.path = tide_xstrdup("");
    else if (path[0] == '/')
        e.path = tide_xstrdup(path);
    else
        e.path = tide_xasprintf("%s/%s", wd, path);
    /* The same checkpoint reported again replaces its entry; otherwise the oldest goes. */
    for (i = 0; i < s->n_hist; i++)
        if (s->hist[i].generation == generation && s->hist[i].step == step)
            break;
    if (i == s->n_hist) {
        if (s->n_hist == HISTORY)
            i = HISTORY - 1;
        else
            i = s->n_hist++;
    }
    free(s->hist[i].path);
    memmove(&s->hist[1], &s->hist[0], i * sizeof(s->hist[0]));
    s->hist[0] = e;
}

/* Sends d (borrowed), or keeps a copy for the next welcomed stream. */
static void answer(tide_flusher_t *f, const Tide__V1__FlushDone *d)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    unsent_t *u;

    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE;
    m.flush_done = (Tide__V1__FlushDone *)d;
    tide_flusher_resend(f); /* older answers first */
    if (tide_list_empty(&f->unsent) && f->ops.send(f->ud, &m) == 0)
        return;
    if (f->n_unsent == UNSENT_MAX) {
        unsent_free(tide_list_entry(tide_list_first(&f->unsent), unsent_t, link));
        f->n_unsent--;
    }
    u = tide_xcalloc(1, sizeof(*u));
    u->done = *d;
    u->done.job_id = tide_xstrdup(d->job_id);
    u->done.durable_path = tide_xstrdup(d->durable_path);
    u->done.sha256 = tide_xstrdup(d->sha256);
    u->done.error = tide_xstrdup(d->error);
    tide_list_push_back(&f->unsent, &u->link);
    f->n_unsent++;
}

void tide_flusher_resend(tide_flusher_t *f)
{
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, &f->unsent)
    {
        unsent_t *u = tide_list_entry(pos, unsent_t, link);
        Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;

        m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE;
        m.flush_done = &u->done;
        if (f->ops.send(f->ud, &m) < 0)
            return;
        unsent_free(u);
        f->n_unsent--;
    }
}

static void answer_error(tide_flusher_t *f, const Tide__V1__FlushCheckpoint *req, const char *error)
{
    Tide__V1__FlushDone d = TIDE__V1__FLUSH_DONE__INIT;

    tide_warn("durable copy of job %.128s rank %d step %" PRId64 " not made: %s", req->job_id,
              req->rank, req->step, error);
    d.job_id = req->job_id;
    d.generation = req->generation;
    d.rank = req->rank;
    d.step = req->step;
    d.ok = false;
    d.error = (char *)error;
    answer(f, &d);
}

static void work_cb(uv_work_t *w)
{
    task_t *t = w->data;
    tide_flush_copy_t req = {t->src, t->dest_dir, t->sha256, &t->cancel, t->fail_after,
                             t->has_as ? &t->as : NULL};
    tide_flush_priority_t prio;
    uint64_t t0 = uv_hrtime();

    /* Low-priority work: it must not slow the training job it protects. */
    tide_flush_priority_lower(&prio);
    tide_error_clear(&t->err);
    t->rc = tide_flush_copy(&req, &t->res, &t->err);
    tide_flush_priority_restore(&prio);
    t->took_ns = uv_hrtime() - t0;
}

static void start_next(tide_flusher_t *f, slot_t *s);

static void after_work_cb(uv_work_t *w, int status)
{
    task_t *t = w->data;
    tide_flusher_t *f = t->f;
    slot_t *s = t->slot;
    Tide__V1__FlushDone d = TIDE__V1__FLUSH_DONE__INIT;

    f->in_flight--;
    if (f->freed) {
        task_free(t);
        if (f->in_flight == 0)
            flusher_release(f);
        return;
    }
    if (status == UV_ECANCELED) {
        t->rc = -ECANCELED;
        tide_errprintf(&t->err, "copy of %s cancelled", t->src);
    }
    d.job_id = t->job_id;
    d.generation = t->generation;
    d.rank = t->rank;
    d.step = t->step;
    if (t->rc == 0) {
        double secs = (double)t->took_ns / 1e9;
        tide_info("job %s rank %d: checkpoint step %" PRId64 " copied to %s (%" PRIu64
                  " bytes, sha256 %.12s..., %.2f s)",
                  t->job_id, t->rank, t->step, t->res.path, t->res.bytes, t->res.sha256, secs);
        d.ok = true;
        d.durable_path = t->res.path;
        d.bytes = t->res.bytes;
        d.sha256 = t->res.sha256;
        answer(f, &d);
    } else {
        tide_warn("job %s rank %d: durable copy of checkpoint step %" PRId64 " failed: %s",
                  t->job_id, t->rank, t->step, t->err.text);
        d.ok = false;
        d.error = t->err.text;
        answer(f, &d);
    }
    if (s) {
        s->running = NULL;
        start_next(f, s);
    }
    task_free(t);
}

static void start_next(tide_flusher_t *f, slot_t *s)
{
    task_t *t;
    int rc;

    while (!s->running && !tide_list_empty(&s->queue)) {
        t = tide_list_entry(tide_list_first(&s->queue), task_t, link);
        tide_list_remove(&t->link);
        s->queued--;
        f->queued--;
        t->work.data = t;
        rc = uv_queue_work(f->loop, &t->work, work_cb, after_work_cb);
        if (rc < 0) {
            Tide__V1__FlushCheckpoint req = TIDE__V1__FLUSH_CHECKPOINT__INIT;
            char why[128];
            req.job_id = t->job_id;
            req.generation = t->generation;
            req.rank = t->rank;
            req.step = t->step;
            snprintf(why, sizeof(why), "cannot start the copy: %s", uv_strerror(rc));
            answer_error(f, &req, why);
            task_free(t);
            continue;
        }
        s->running = t;
        f->in_flight++;
    }
}

static const saved_t *saved_find(const slot_t *s, int32_t generation, int64_t step)
{
    for (size_t i = 0; s && i < s->n_hist; i++)
        if (s->hist[i].generation == generation && s->hist[i].step == step)
            return &s->hist[i];
    return NULL;
}

static bool same_task(const task_t *t, const Tide__V1__FlushCheckpoint *req, const char *dest_dir)
{
    return t && t->generation == req->generation && t->step == req->step &&
           strcmp(t->dest_dir, dest_dir) == 0;
}

void tide_flusher_request(tide_flusher_t *f, const Tide__V1__FlushCheckpoint *req)
{
    const char *dir = f->durable_dir ? f->durable_dir : req->durable_dir;
    char why[256];
    const saved_t *e;
    slot_t *s;
    task_t *t;
    tide_list_t *pos;
    char *dest_dir;
    bool tiered;

    if (!tide_worker_job_id_valid(req->job_id) || req->generation < 0 || req->rank < 0 ||
        req->step < 0) {
        snprintf(why, sizeof(why),
                 "invalid FlushCheckpoint: job '%.64s' generation %d rank %d step %" PRId64,
                 req->job_id, req->generation, req->rank, req->step);
        answer_error(f, req, why);
        return;
    }
    if (!dir || !dir[0]) {
        answer_error(f, req,
                     "no durable directory: the scheduler named none and this worker has no "
                     "--ckpt-durable");
        return;
    }
    if (dir[0] != '/') {
        snprintf(why, sizeof(why), "durable directory '%.200s' is not an absolute path", dir);
        answer_error(f, req, why);
        return;
    }
    s = slot_find(f, req->job_id, req->rank);
    e = saved_find(s, req->generation, req->step);
    if (!e) {
        snprintf(why, sizeof(why),
                 "job %s generation %d rank %d reported no checkpoint of step %" PRId64
                 " on this worker",
                 req->job_id, req->generation, req->rank, req->step);
        answer_error(f, req, why);
        return;
    }
    if (!e->path[0]) {
        /* This rank wrote nothing for that checkpoint (in tide-mlp only rank 0 writes). */
        Tide__V1__FlushDone d = TIDE__V1__FLUSH_DONE__INIT;
        d.job_id = req->job_id;
        d.generation = req->generation;
        d.rank = req->rank;
        d.step = req->step;
        d.ok = true;
        tide_debug("job %s rank %d step %" PRId64 ": nothing to copy", req->job_id, req->rank,
                   req->step);
        answer(f, &d);
        return;
    }
    /* One directory per rank: ranks on different nodes may name their files alike. A checkpoint in the hot
     * tier's layout goes as its whole rank directory (files and manifest) to DIR/JOB/step-S/rank-R/, the
     * cold tier's layout (docs/fault-tolerance.md, "Checkpoint tiers"). */
    tiered = f->hot_dir && tide_ckpt_tiers_in_layout(f->hot_dir, req->job_id, req->step, req->rank, e->path, NULL);
    if (tiered)
        dest_dir = tide_xasprintf("%s/%s/step-%" PRId64, dir, req->job_id, req->step);
    else
        dest_dir = tide_xasprintf("%s/%s/step-%" PRId64 "/rank-%d", dir, req->job_id, req->step, req->rank);
    /* The same copy asked for again while it runs or waits: its one answer serves both. */
    if (same_task(s->running, req, dest_dir))
        goto duplicate;
    tide_list_for_each(pos, &s->queue)
    {
        if (same_task(tide_list_entry(pos, task_t, link), req, dest_dir))
            goto duplicate;
    }
    if (s->queued >= QUEUE_MAX) {
        snprintf(why, sizeof(why), "%zu copies for job %s rank %d are already waiting", s->queued,
                 req->job_id, req->rank);
        answer_error(f, req, why);
        free(dest_dir);
        return;
    }
    t = tide_xcalloc(1, sizeof(*t));
    t->f = f;
    t->slot = s;
    t->job_id = tide_xstrdup(req->job_id);
    t->generation = req->generation;
    t->rank = req->rank;
    t->step = req->step;
    t->src = tiered ? tide_ckpt_rank_dir(f->hot_dir, req->job_id, req->step, req->rank) : tide_xstrdup(e->path);
    t->dest_dir = dest_dir;
    if (tiered)
        t->sha256[0] = '\0'; /* the manifest in the directory carries each file's checksum */
    else
        memcpy(t->sha256, e->sha256, sizeof(t->sha256));
    t->fail_after = f->fail_after;
    t->has_as = e->has_as;
    t->as = e->as;
    tide_list_push_back(&s->queue, &t->link);
    s->queued++;
    f->queued++;
    tide_list_move_back(&f->slots, &s->link);
    tide_info("job %s rank %d: copying checkpoint step %" PRId64 " (%s) to %s%s", req->job_id,
              req->rank, req->step, e->path, dest_dir,
              s->running ? " after the copy running now" : "");
    start_next(f, s);
    return;
duplicate:
    tide_debug("job %s rank %d step %" PRId64 ": that copy is already under way", req->job_id,
               req->rank, req->step);
    free(dest_dir);
}

size_t tide_flusher_busy(const tide_flusher_t *f)
{
    return f->in_flight + f->queued;
}

/* Elastic scaling (docs/elastic.md): a job's membership changes only at a new generation. A resize asks
 * the ranks for a checkpoint (when they report through the SDK), stops them once it lands or the grace
 * ends, queues the job again at the front of its class with a size cap, and is done when every rank of
 * the new generation runs; its phases are timed. Invariants: a job has at most one resize in progress
 * and none while it yields to a preemption; a resize never places a job below min_workers (placement
 * takes min..cap, and the old generation stops before the new one starts: never two at once); free
 * workers a decided grow counts on are claimed (core->grow_claimed) until it is placed, so two grows
 * never count on the same GPUs. Decisions by tide itself look only at core->resizable (running jobs whose
 * size differs from their goal), after a pass that changed the capacity: never a scan of the workers. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

#define MAX_EXCLUDE 8

const char *tide_resize_reason_name(tide_resize_reason_t r)
{
    switch (r) {
    case TIDE_RESIZE_REQUESTED:
        return "requested";
    case TIDE_RESIZE_GROW:
        return "grow";
    case TIDE_RESIZE_SHRINK:
        return "shrink";
    case TIDE_RESIZE_REPLACE:
        return "replace";
    case TIDE_RESIZE_BURST:
        return "burst";
    case TIDE_RESIZE_BURST_END:
        return "burst_end";
    case TIDE_RESIZE_DRAIN:
        return "drain";
    case TIDE_RESIZE_PREDICTED:
        return "predicted_failure";
    }
    return "unknown";
}

const char *tide_resize_state_name(tide_resize_state_t s)
{
    switch (s) {
    case TIDE_RESIZE_NONE:
        return "none";
    case TIDE_RESIZE_PENDING:
        return "pending";
    case TIDE_RESIZE_CHECKPOINTING:
        return "checkpointing";
    case TIDE_RESIZE_STOPPING:
        return "stopping";
    case TIDE_RESIZE_STARTING:
        return "starting";
    case TIDE_RESIZE_DONE:
        return "done";
    }
    return "unknown";
}

bool tide__job_uses_sdk(const tide_job_t *job)
{
    return job->sdk_ranks > 0;
}

static bool in_progress(const tide_job_t *job)
{
    return job->resize.state >= TIDE_RESIZE_CHECKPOINTING && job->resize.state <= TIDE_RESIZE_STARTING;
}

bool tide__resize_in_progress(const tide_job_t *job)
{
    return in_progress(job);
}

static int32_t goal_of(const tide_job_t *job)
{
    if (job->burst_to > 0)
        return job->burst_to; /* grown for a high-load phase (lending.c): hold that size until it ends */
    return job->target_workers > 0 ? job->target_workers : job->spec.max_workers;
}

int32_t tide__job_size_cap(const tide_job_t *job)
{
    int32_t cap = goal_of(job);

    if (job->size_cap > 0 && job->size_cap < cap)
        cap = job->size_cap;
    return cap < job->spec.min_workers ? job->spec.min_workers : cap;
}

void tide__resize_track(tide_core_t *core, tide_job_t *job)
{
    /* Only jobs tide may resize: a requested size, or growing by itself (a trainer that checkpoints). */
    bool want = job->state == TIDE_JOB_RUNNING && !job->dropped && job->n_ranks != goal_of(job) &&
                (job->target_workers > 0 || (core->cfg.auto_grow && job->sdk_seen));
    bool in = tide_list_linked(&job->resize_node);

    if (want && !in) {
        tide_list_push_back(&core->resizable, &job->resize_node);
        core->resize_due = true;
    } else if (!want && in) {
        tide_list_remove(&job->resize_node);
    }
}

void tide__resize_poke(tide_core_t *core, tide_job_t *job)
{
    tide__resize_track(core, job);
    if (tide_list_linked(&job->resize_node))
        core->resize_due = core->need_schedule = true;
}

static void release_claim(tide_core_t *core, tide_job_t *job)
{
    core->grow_claimed -= job->grow_claim;
    job->grow_claim = 0;
}

static void resize_clear(tide_resize_t *r)
{
    free(r->detail);
    memset(r, 0, sizeof(*r));
}

void tide__resize_free(tide_job_t *job)
{
    resize_clear(&job->resize);
    resize_clear(&job->last_resize);
    for (int32_t i = 0; i < job->n_exclude; i++)
        free(job->exclude[i]);
    free(job->exclude);
    job->exclude = NULL;
    job->n_exclude = 0;
}

static void set_detail(tide_resize_t *r, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void set_detail(tide_resize_t *r, const char *fmt, va_list ap)
{
    free(r->detail);
    r->detail = tide_xvasprintf(fmt, ap);
}

/* Free workers the job's next generation could add to its current size now: in the domain of its
 * locality level where its rank 0 runs (its shape for ANY), within what placement allows its class
 * (the reserve), less what other grows claimed. 0 with *why when none. O(1). */
/* Free workers of the job's kind it may take (its reserve limit applied). A grow leaves GPUs queued jobs of
 * that kind wait for to them (before_queue false); a move off a GPU predicted to fail does not wait behind the
 * queue: like a recovery it goes first. */
static int32_t avail_in_shape(tide_core_t *core, const tide_job_t *job, bool before_queue, const char **why)
{
    tide_worker_t *w0 = job->n_ranks > 0 ? job->ranks[0].worker : NULL;
    tide_level_t level = tide__job_level(job);
    tide_domain_t *d;
    int32_t free_n, limit;

    if (!w0 || !w0->dom) {
        *why = "its rank 0 has no worker";
        return 0;
    }
    if (!before_queue && w0->dom->shape->blocked_pass == core->pass) {
        *why = "queued jobs wait for the same GPUs";
        return 0;
    }
    d = tide__domain_at(w0, level);
    free_n = d ? d->n_free : w0->dom->shape->n_free;
    limit = tide__reserve_limit(core, job) - core->grow_claimed;
    if (limit < free_n)
        free_n = limit;
    if (free_n <= 0) {
        *why = limit <= 0 && (d ? d->n_free : w0->dom->shape->n_free) > 0
                   ? "the free GPUs are the headroom reserve"
                   : (level == TIDE_LVL_SHAPE ? "no free GPU of its kind" : "no free GPU in its locality domain");
        return 0;
    }
    *why = NULL;
    return free_n;
}

static int32_t grow_avail(tide_core_t *core, const tide_job_t *job, const char **why)
{
    return avail_in_shape(core, job, false, why);
}

/* The resize was decided: ask for a checkpoint, or stop now when the ranks report none. */
static void begin(tide_core_t *core, tide_job_t *job, int32_t to, tide_resize_reason_t reason, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void begin(tide_core_t *core, tide_job_t *job, int32_t to, tide_resize_reason_t reason, const char *fmt, ...)
{
    tide_resize_t *r = &job->resize;
    /* Ranks that have not reported yet (just started, or adopted after a restart) of a job known to
     * checkpoint are asked too: their grace bounds the wait. */
    bool sdk = tide__job_uses_sdk(job) || job->sdk_seen;
    va_list ap;

    va_start(ap, fmt);
    set_detail(r, fmt, ap);
    va_end(ap);
    r->state = TIDE_RESIZE_CHECKPOINTING;
    r->reason = reason;
    r->from_workers = job->n_ranks;
    r->to_workers = to;
    r->workers = 0;
    r->from_generation = job->generation;
    r->to_generation = 0;
    r->decided_ms = core->now_wall;
    r->decided_mono = core->now_mono;
    r->ckpt_mono = r->stopped_mono = 0;
    r->checkpoint_s = r->stop_s = r->start_s = r->total_s = 0;
    r->done_ms = 0;
    job->size_cap = to;
    release_claim(core, job);
    if (to > job->n_ranks) {
        job->grow_claim = to - job->n_ranks;
        core->grow_claimed += job->grow_claim;
    }
    tide__event(core, "job.resizing", job, NULL, "job %s generation %d: %d -> %d workers (%s: %s); %s", job->id,
                job->generation, job->n_ranks, to, tide_resize_reason_name(reason), r->detail,
                sdk ? "checkpointing first" : "it reports no checkpoints; stopping now");
    tide__persist_job(core, job);
    if (!sdk) {
        tide__resize_go(core, job, "stopped at once");
        return;
    }
    if (!job->ckpt_request)
        tide__ckpt_request(core, job, core->cfg.resize_grace_ms);
    job->resize_at = core->now_mono + core->cfg.resize_grace_ms;
    tide__job_rearm(core, job);
}

/* Whether a resize may start now: running, fully started, not yielding, none in progress. */
static bool can_begin(const tide_job_t *job)
{
    return job->state == TIDE_JOB_RUNNING && !job->preempted_by && !in_progress(job) && job->ranks_unstarted == 0 &&
           !job->launch_deadline && job->awaiting == 0;
}

bool tide__resize_can_begin(const tide_job_t *job)
{
    return can_begin(job);
}

/* A generation that has begun to end by itself: a rank exited 0 (its work is done; its peers end too). Growing it
 * would restart the finished work on the very GPUs its own exits freed, and a job whose every generation ends so
 * is grown again at every end and never ends (seed 1071648: 600 generations). */
static bool finishing(const tide_job_t *job)
{
    return job->ranks_exited > 0;
}

static void pending(tide_core_t *core, tide_job_t *job, int32_t to, tide_resize_reason_t reason, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static void pending(tide_core_t *core, tide_job_t *job, int32_t to, tide_resize_reason_t reason, const char *fmt, ...)
{
    tide_resize_t *r = &job->resize;
    char *text;
    va_list ap;

    va_start(ap, fmt);
    text = tide_xvasprintf(fmt, ap);
    va_end(ap);
    if (r->state == TIDE_RESIZE_PENDING && r->to_workers == to && r->detail && strcmp(r->detail, text) == 0) {
        free(text);
        return; /* said already */
    }
    free(r->detail);
    r->detail = text;
    r->state = TIDE_RESIZE_PENDING;
    r->reason = reason;
    r->from_workers = job->n_ranks;
    r->to_workers = to;
    r->from_generation = job->generation;
    r->decided_ms = core->now_wall;
    r->decided_mono = core->now_mono;
    tide__event(core, "job.resize_pending", job, NULL, "job %s: %d -> %d workers accepted, pending: %s", job->id,
                job->n_ranks, to, text);
    tide__persist_job(core, job);
}

void tide__resize_stopping(tide_core_t *core, tide_job_t *job)
{
    tide_resize_t *r = &job->resize;

    if (r->state == TIDE_RESIZE_STARTING) {
        /* The generation it placed ends before every rank ran (a rollback, an eviction): it is placed
         * again. The failed start counts in the stop phase (the phases still add up to the total). */
        r->state = TIDE_RESIZE_STOPPING;
        r->stopped_mono = 0;
        return;
    }
    if (r->state != TIDE_RESIZE_CHECKPOINTING)
        return;
    r->state = TIDE_RESIZE_STOPPING;
    r->ckpt_mono = core->now_mono;
    r->checkpoint_s = (double)(core->now_mono - r->decided_mono) / 1e3;
    job->resize_at = 0;
}

void tide__resize_old_stopped(tide_core_t *core, tide_job_t *job)
{
    if (job->resize.state == TIDE_RESIZE_STOPPING && !job->resize.stopped_mono && tide_list_empty(&job->bound))
        job->resize.stopped_mono = core->now_mono;
}

bool tide__resize_room_to_move(tide_core_t *core, tide_job_t *job, const char **why)
{
    bool was = job->recovering;
    int32_t avail;

    job->recovering = true; /* a failure in waiting: the hot spares are for this */
    avail = avail_in_shape(core, job, true, why);
    job->recovering = was;
    if (avail >= 1 || job->n_ranks - 1 >= job->spec.min_workers) {
        *why = NULL;
        return true;
    }
    return false;
}

void tide__resize_go(tide_core_t *core, tide_job_t *job, const char *how)
{
    tide_resize_t *r = &job->resize;
    int32_t to = r->to_workers;

    if (r->state != TIDE_RESIZE_CHECKPOINTING || job->state != TIDE_JOB_RUNNING)
        return;
    if (r->reason == TIDE_RESIZE_PREDICTED) {
        /* Moving off a GPU predicted to fail: only when the job can run elsewhere (a spare, an idle worker, or
         * one fewer within min_workers); otherwise it stays where it is, checkpointed, until room frees. */
        const char *why = NULL;
        if (!tide__resize_room_to_move(core, job, &why)) {
            tide__resize_abort(core, job, why ? why : "no worker to move to");
            return;
        }
        job->recovering = true; /* its next placement may take the hot spares */
    } else if (to > job->n_ranks || r->reason == TIDE_RESIZE_REPLACE) {
        /* The free GPUs it counts on may have gone meanwhile (placement does not know claims): a
         * restart that would not get them is not worth it. */
        int32_t need = r->reason == TIDE_RESIZE_REPLACE ? 1 : to - job->n_ranks;
        const char *why = NULL;
        int32_t avail;
        release_claim(core, job);
        avail = grow_avail(core, job, &why);
        if (avail < need) {
            tide__resize_abort(core, job, why ? why : "the free GPUs it counted on were taken");
            return;
        }
        job->grow_claim = need;
        core->grow_claimed += need;
    }
    tide__resize_stopping(core, job);
    if (job->last_ckpt.step >= 0)
        tide__job_requeue(core, job, "job.resize_stopping",
                          "resizing %d -> %d workers (%s); %s; resumes from checkpoint step %" PRId64, r->from_workers,
                          to, tide_resize_reason_name(r->reason), how, job->last_ckpt.step);
    else
        tide__job_requeue(core, job, "job.resize_stopping",
                          "resizing %d -> %d workers (%s); %s; no checkpoint: restarts from the beginning",
                          r->from_workers, to, tide_resize_reason_name(r->reason), how);
}

void tide__resize_placed(tide_core_t *core, tide_job_t *job)
{
    tide_resize_t *r = &job->resize;

    if (r->state != TIDE_RESIZE_STOPPING && r->state != TIDE_RESIZE_STARTING)
        job->grown_from = 0; /* placed anew (not by a resize): it holds what placement gave it */

    if (r->state == TIDE_RESIZE_PENDING) {
        /* Placed anew for another reason (a lost rank, a preemption): placement took what the goal and
         * the capacity allowed; the next look decides again. */
        resize_clear(r);
        return;
    }
    release_claim(core, job);
    if (r->state != TIDE_RESIZE_STOPPING && r->state != TIDE_RESIZE_STARTING)
        return;
    if (r->reason == TIDE_RESIZE_REPLACE) {
        /* The straggler was left out of this placement; later ones may use it again (it is not cordoned,
         * and a job that needs every GPU must not wait for one it excluded). A relapse is caught again. */
        for (int32_t i = 0; i < job->n_exclude; i++)
            free(job->exclude[i]);
        job->n_exclude = 0;
    }
    if (r->state == TIDE_RESIZE_STOPPING) {
        if (!r->stopped_mono)
            r->stopped_mono = core->now_mono;
        r->stop_s = (double)(r->stopped_mono - r->ckpt_mono) / 1e3;
    }
    r->state = TIDE_RESIZE_STARTING;
    r->to_generation = job->generation;
}

void tide__resize_started(tide_core_t *core, tide_job_t *job)
{
    tide_resize_t *r = &job->resize;

    if (r->state == TIDE_RESIZE_STARTING) {
        r->state = TIDE_RESIZE_DONE;
        r->workers = job->n_ranks;
        r->to_generation = job->generation;
        r->start_s = (double)(core->now_mono - r->stopped_mono) / 1e3;
        r->total_s = (double)(core->now_mono - r->decided_mono) / 1e3;
        r->done_ms = core->now_wall;
        resize_clear(&job->last_resize);
        job->last_resize = *r;
        memset(r, 0, sizeof(*r)); /* the detail moved to last_resize */
        job->resizes++;
        job->size_cap = 0;
        /* What tide lends by growing it may take back for a queued job of its class (preemption.c). */
        if (job->last_resize.reason == TIDE_RESIZE_GROW && job->target_workers == 0)
            job->grown_from = job->grown_from > 0 && job->grown_from < job->last_resize.from_workers
                                  ? job->grown_from
                                  : job->last_resize.from_workers;
        else if (job->last_resize.reason != TIDE_RESIZE_BURST && job->last_resize.reason != TIDE_RESIZE_BURST_END)
            job->grown_from = 0; /* a burst and its end leave what tide lent by growing as it was */
        if ((unsigned)job->last_resize.reason < TIDE_RESIZE_REASONS) {
            core->resizes_done[job->last_resize.reason]++;
            core->resize_seconds[job->last_resize.reason] += job->last_resize.total_s;
        }
        r = &job->last_resize;
        tide__event(core, "job.resized", job, NULL,
                    "job %s generation %d: %d -> %d workers (%s: %s) in %.2f s (checkpoint %.2f s, stop %.2f s, "
                    "start %.2f s)",
                    job->id, job->generation, r->from_workers, r->workers, tide_resize_reason_name(r->reason), r->detail,
                    r->total_s, r->checkpoint_s, r->stop_s, r->start_s);
        tide__persist_job(core, job);
    }
    tide__resize_poke(core, job); /* a request that waited for this start is decided now (or its dwell armed) */
}

void tide__resize_abort(tide_core_t *core, tide_job_t *job, const char *why)
{
    tide_resize_t *r = &job->resize;

    if (r->state == TIDE_RESIZE_NONE)
        return;
    if (in_progress(job))
        tide__event(core, "job.resize_cancelled", job, NULL, "job %s: resize %d -> %d workers cancelled: %s", job->id,
                    r->from_workers, r->to_workers, why);
    if (r->reason == TIDE_RESIZE_REPLACE) {
        for (int32_t i = 0; i < job->n_exclude; i++)
            free(job->exclude[i]);
        job->n_exclude = 0;
    }
    if (r->reason == TIDE_RESIZE_BURST)
        tide__burst_resize_cancelled(core, job);
    release_claim(core, job);
    resize_clear(r);
    job->size_cap = 0;
    job->resize_at = 0;
    tide__persist_job(core, job);
    tide__resize_poke(core, job); /* its requested size is decided again */
}

void tide__resize_on_timer(tide_core_t *core, tide_job_t *job)
{
    if (job->resize_at && core->now_mono >= job->resize_at) {
        job->resize_at = 0;
        if (job->resize.state == TIDE_RESIZE_CHECKPOINTING && job->resize.reason == TIDE_RESIZE_REPLACE) {
            /* A straggler's replacement is worth a restart only from a checkpoint taken for it: without one
             * the job loses its progress each time, and a job replaced every generation never ends (seed
             * 1016500: 208 generations, each restarted from the beginning). */
            tide__resize_abort(core, job, "no checkpoint by the end of its grace");
            return;
        }
        tide__resize_go(core, job, "its checkpoint grace ended");
        return;
    }
    if (job->resize_check_at && core->now_mono >= job->resize_check_at) {
        job->resize_check_at = 0;
        core->resize_due = true;
        core->need_schedule = true;
    }
}

/* A running job below (or, requested, above) its goal: decide whether to resize it now. by_request:
 * the ScaleJob call itself (no dwell). */
static void reconcile(tide_core_t *core, tide_job_t *job, bool by_request)
{
    int32_t n = job->n_ranks, goal = goal_of(job), avail, gain, min_gain;
    bool pinned = job->target_workers > 0;
    const char *why = NULL;

    if (!can_begin(job) || n == goal)
        return;
    if (n > goal) {
        /* A requested size below the current one can always be had, and was asked for: no dwell. */
        begin(core, job, goal, TIDE_RESIZE_REQUESTED, "requested by ScaleJob");
        return;
    }
    if (finishing(job))
        return;
    if (!by_request && core->now_mono < job->gen_start_mono + core->cfg.resize_dwell_ms) {
        if (!job->resize_check_at) {
            job->resize_check_at = job->gen_start_mono + core->cfg.resize_dwell_ms;
            tide__job_rearm(core, job);
        }
        return;
    }
    if (!pinned && (!core->cfg.auto_grow || !tide__job_uses_sdk(job)))
        return; /* a restart loses the work since its last checkpoint: only for trainers that make them */
    avail = grow_avail(core, job, &why);
    if (pinned) {
        if (avail >= goal - n)
            begin(core, job, goal, by_request ? TIDE_RESIZE_REQUESTED : TIDE_RESIZE_GROW,
                  by_request ? "requested by ScaleJob" : "capacity freed for the requested size");
        else if (why)
            pending(core, job, goal, TIDE_RESIZE_REQUESTED, "needs %d more GPU%s; %s", goal - n,
                    goal - n == 1 ? "" : "s", why);
        else
            pending(core, job, goal, TIDE_RESIZE_REQUESTED, "needs %d more GPU%s; %d free for it", goal - n,
                    goal - n == 1 ? "" : "s", avail);
        return;
    }
    gain = goal - n < avail ? goal - n : avail;
    min_gain = (int32_t)ceil((double)n * core->cfg.grow_min_gain - 1e-9);
    if (min_gain < 1)
        min_gain = 1;
    if (gain >= min_gain)
        begin(core, job, n + gain, TIDE_RESIZE_GROW, "%d free GPU%s, nothing queued for them", avail,
              avail == 1 ? "" : "s");
}

void tide__resize_consider(tide_core_t *core)
{
    tide_list_t *pos, *tmp;

    if (tide_list_empty(&core->resizable) || (!core->resize_due && core->resize_stamp == core->alloc_stamp))
        return;
    core->resize_due = false;
    core->resize_stamp = core->alloc_stamp;
    tide_list_for_each_safe(pos, tmp, &core->resizable) {
        tide_job_t *job = tide_list_entry(pos, tide_job_t, resize_node);
        if (job->n_ranks > goal_of(job) || core->n_free - core->grow_claimed > 0)
            reconcile(core, job, false);
    }
}

int tide_core_job_scale(tide_core_t *core, const char *id, int32_t workers, bool elastic, tide_job_t **out,
                        tide_error_t *err)
{
    tide_job_t *job = tide_core_job_find(core, id);
    int32_t before;

    if (!job) {
        tide_errprintf(err, "job %s not found", id);
        return -ENOENT;
    }
    if (job->state != TIDE_JOB_PENDING && job->state != TIDE_JOB_RUNNING) {
        tide_errprintf(err, "job %s already ended: %s", id, tide_job_state_name(job->state));
        return -EALREADY;
    }
    if (elastic && workers != 0) {
        tide_errprintf(err, "workers must be 0 with elastic (got %d)", workers);
        return -EINVAL;
    }
    if (!elastic && (workers < job->spec.min_workers || workers > job->spec.max_workers)) {
        tide_errprintf(err, "workers must be in [min_workers %d, max_workers %d] of job %s; got %d",
                       job->spec.min_workers, job->spec.max_workers, id, workers);
        return -EINVAL;
    }
    before = job->target_workers;
    job->target_workers = elastic ? 0 : workers;
    if (job->target_workers > 0)
        job->grown_from = 0; /* a size asked for is not a loan */
    *out = job;
    if (before != job->target_workers) {
        tide__burst_resize_cancelled(core, job); /* a new size asked for ends a burst by resize: it is the goal */
        if (elastic)
            tide__event(core, "job.scale", job, NULL, "job %s: no requested size any more (was %d): elastic in [%d, %d]",
                        id, before, job->spec.min_workers, job->spec.max_workers);
        else
            tide__event(core, "job.scale", job, NULL, "job %s: %d workers requested (was %s)", id, workers,
                        before ? "a request" : "elastic");
        tide__persist_job(core, job);
    }
    if (job->resize.state == TIDE_RESIZE_PENDING && before != job->target_workers)
        resize_clear(&job->resize); /* decided again below, against the new goal */
    if (in_progress(job) && job->resize.state < TIDE_RESIZE_STARTING && job->resize.reason != TIDE_RESIZE_SHRINK) {
        /* A resize not placed yet takes the newest size (placement gets what it can of it; elastic: up to
         * max_workers); one being placed already is looked at again once it is done. A shrink for a
         * preemption keeps its cap: the job it makes room for is placed first anyway. */
        job->size_cap = job->target_workers;
        job->resize.to_workers = goal_of(job);
        if (job->resize.reason != TIDE_RESIZE_REPLACE) {
            release_claim(core, job);
            if (job->state == TIDE_JOB_RUNNING && job->resize.to_workers > job->n_ranks) {
                job->grow_claim = job->resize.to_workers - job->n_ranks;
                core->grow_claimed += job->grow_claim;
            }
        }
    } else if (job->state == TIDE_JOB_PENDING && job->size_cap > 0 && job->target_workers > 0 &&
               job->size_cap > job->target_workers) {
        job->size_cap = job->target_workers;
    }
    tide__persist_job(core, job);
    if (job->state == TIDE_JOB_PENDING || in_progress(job)) {
        tide__resize_track(core, job);
        return 0;
    }
    tide__resize_track(core, job);
    if (job->target_workers > 0)
        reconcile(core, job, true);
    else
        core->resize_due = core->need_schedule = true; /* no pass may come by itself */
    tide__persist_job(core, job);
    tide__schedule(core);
    return 0;
}

void tide_core_resize_stats(const tide_core_t *core, uint64_t count[TIDE_RESIZE_REASONS],
                            double seconds[TIDE_RESIZE_REASONS])
{
    memcpy(count, core->resizes_done, sizeof(core->resizes_done));
    memcpy(seconds, core->resize_seconds, sizeof(core->resize_seconds));
}

/* --- burst by resize (lending.c), drain (drain.c) --- */

int32_t tide__resize_burst_avail(tide_core_t *core, const tide_job_t *job)
{
    const char *why = NULL;
    int32_t avail, room = job->spec.max_workers - job->n_ranks;

    if (!can_begin(job) || finishing(job) || room <= 0)
        return 0;
    avail = grow_avail(core, job, &why);
    return avail < room ? avail : room;
}

void tide__resize_begin(tide_core_t *core, tide_job_t *job, int32_t to, tide_resize_reason_t reason, const char *detail)
{
    begin(core, job, to, reason, "%s", detail);
}

/* --- straggler replacement --- */

static bool excluded(const tide_job_t *job, const tide_worker_t *w)
{
    for (int32_t i = 0; i < job->n_exclude; i++)
        if (strcmp(job->exclude[i], w->id) == 0)
            return true;
    return false;
}

void tide__resize_replace(tide_core_t *core, tide_job_t *job, int32_t rank)
{
    tide_job_rank_t *slot = &job->ranks[rank];
    const char *why = NULL;

    if (!core->cfg.replace_stragglers || !slot->worker || !can_begin(job) || !tide__job_uses_sdk(job) ||
        excluded(job, slot->worker))
        return;
    if (grow_avail(core, job, &why) < 1)
        return; /* no healthy worker to swap in: stealing keeps absorbing it */
    if (job->n_exclude == MAX_EXCLUDE) {
        free(job->exclude[0]);
        memmove(job->exclude, job->exclude + 1, sizeof(*job->exclude) * (MAX_EXCLUDE - 1));
        job->n_exclude--;
    }
    if (!job->exclude)
        job->exclude = tide_xcalloc(MAX_EXCLUDE, sizeof(*job->exclude));
    job->exclude[job->n_exclude++] = tide_xstrdup(slot->worker->id);
    begin(core, job, job->n_ranks, TIDE_RESIZE_REPLACE, "rank %d on %s is a straggler (%.2fx the median time per task)",
          rank, slot->worker->id, slot->slowness);
    /* The swap needs one free worker besides the straggler's: claim it. */
    job->grow_claim = 1;
    core->grow_claimed += 1;
}

void tide__exclude_begin(tide_core_t *core, tide_job_t *job)
{
    for (int32_t i = 0; i < job->n_exclude; i++) {
        tide_worker_t *w = tide_core_worker_find(core, job->exclude[i]);
        if (w && w->dom && tide_list_linked(&w->free_node))
            tide__index_free(core, w, -1);
        else
            w = NULL;
        /* Bit i: exclude[i] was taken out of the free index and goes back at exclude_end. */
        job->exclude_taken = (job->exclude_taken & ~(1u << i)) | (w ? 1u << i : 0);
    }
}

void tide__exclude_end(tide_core_t *core, tide_job_t *job)
{
    for (int32_t i = 0; i < job->n_exclude; i++) {
        tide_worker_t *w;
        if (!(job->exclude_taken & (1u << i)))
            continue;
        w = tide_core_worker_find(core, job->exclude[i]);
        if (w && !tide_list_linked(&w->free_node))
            tide__index_free(core, w, 1);
    }
    job->exclude_taken = 0;
}

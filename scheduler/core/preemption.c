/* Preemption (docs/policies.md, "Preemption"): a job that cannot be placed may take capacity from
 * running jobs of a lower class (the class they were placed with). Victims are tried in order of class,
 * then of the work they would lose (GPU-seconds since their newest checkpoint), then newest first; the
 * first domain of the job's locality level (or shape) where the chosen victims free enough workers wins.
 * A victim that reports through the SDK is asked for a checkpoint first and yields when it lands or its
 * grace ends; then it is queued again and later resumes from that checkpoint. Invariants: a job has at
 * most one preemption round in flight, which lasts until every victim's ranks stopped (the capacity
 * it waits for is on its way, so it picks no more victims meanwhile); a victim yields to one job; a
 * search that found nothing is not repeated until the running set or the capacity changed
 * (alloc_stamp). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

typedef struct victim {
    tide_job_t *job;
    double lost; /* GPU-seconds since its newest checkpoint */
} victim_t;

static int cmp_victim(const void *a, const void *b)
{
    const victim_t *x = a, *y = b;

    if (x->job->run_priority != y->job->run_priority)
        return x->job->run_priority < y->job->run_priority ? -1 : 1;
    if (x->lost != y->lost)
        return x->lost < y->lost ? -1 : 1;
    return x->job->seq > y->job->seq ? -1 : (x->job->seq < y->job->seq ? 1 : 0);
}

static double lost_work(const tide_core_t *core, const tide_job_t *job)
{
    int64_t since = job->gen_start_ms;

    if (job->last_ckpt.step >= 0 && job->last_ckpt.generation == job->generation &&
        job->last_ckpt.time_ms > since)
        since = job->last_ckpt.time_ms;
    return core->now_wall > since ? (double)job->n_ranks * (double)(core->now_wall - since) / 1e3 : 0;
}

static tide_pscratch_t *scratch_of(tide_shape_t *s, tide_domain_t *d)
{
    return d ? &d->ps : &s->ps;
}

/* shrink_to > 0: v shrinks to that many workers (a resize, reason SHRINK) instead of being evicted. */
static void start_yield(tide_core_t *core, tide_job_t *v, tide_job_t *job, int32_t shrink_to, bool reclaim)
{
    v->preempted_by = tide_xstrdup(job->id);
    job->preempt_victims++;
    core->n_preempting++;
    if (shrink_to > 0) {
        tide_resize_t *r = &v->resize;
        free(r->detail);
        memset(r, 0, sizeof(*r));
        r->state = TIDE_RESIZE_CHECKPOINTING;
        r->reason = TIDE_RESIZE_SHRINK;
        r->from_workers = v->n_ranks;
        r->to_workers = shrink_to;
        r->from_generation = v->generation;
        r->detail = tide_xasprintf("job %s (%s) needs %d GPU%s%s", job->id, tide_prio_name(job->spec.priority),
                                   job->spec.min_workers, job->spec.min_workers == 1 ? "" : "s",
                                   reclaim ? "; giving back what it grew into" : "");
        r->decided_ms = core->now_wall;
        r->decided_mono = core->now_mono;
        v->size_cap = shrink_to;
        tide__persist_job(core, v);
        tide__event(core, "job.resizing", v, NULL, "job %s generation %d: %d -> %d workers (shrink: %s); %s", v->id,
                    v->generation, v->n_ranks, shrink_to, r->detail,
                    tide__job_uses_sdk(v) ? "checkpointing first" : "it reports no checkpoints; stopping now");
    } else
    tide__event(core, "job.preempting", v, NULL,
                "job %s (%s, %d GPU%s) yields to job %s (%s): %s", v->id, tide_prio_name(v->run_priority),
                v->n_ranks, v->n_ranks == 1 ? "" : "s", job->id, tide_prio_name(job->spec.priority),
                tide__job_uses_sdk(v) ? "checkpointing first" : "it reports no checkpoints; stopping now");
    if (tide__job_uses_sdk(v) && !v->ckpt_request) {
        tide__ckpt_request(core, v, core->cfg.preempt_grace_ms);
    }
    if (!tide__job_uses_sdk(v)) {
        tide__preempt_yield(core, v, "stopped at once");
        return;
    }
    v->preempt_at = core->now_mono + core->cfg.preempt_grace_ms;
    tide__job_rearm(core, v);
}

/* The smallest size a victim may be shrunk to: its min_workers, or when only what tide lent it by growing
 * is taken back (reclaim), the size it grew from. */
static int32_t shrink_floor(const tide_job_t *v, bool reclaim)
{
    if (reclaim && v->grown_from > v->spec.min_workers)
        return v->grown_from;
    return v->spec.min_workers;
}

/* Which victims a search may take from: every rank (an eviction), or only the ranks above a victim's
 * floor of a victim that checkpoints and runs fully started (a shrink; reclaim: the floor is the size it
 * grew from). */
typedef enum search_mode { SEARCH_EVICT, SEARCH_SHRINK, SEARCH_RECLAIM } search_mode_t;

/* Adds victims one by one in their order and, after each of their ranks, looks at the domain of the
 * job's locality level (or the shape) that rank's worker is in: the first where the free workers and
 * the ranks counted so far reach `need` wins. Returns how many victims that took (0: none found) and the
 * winning shape and domain (NULL for a shape-wide job). O(ranks of the victims looked at). */
static size_t search(tide_core_t *core, tide_job_t *job, const victim_t *vs, size_t nv, tide_level_t level,
                     int32_t need, search_mode_t mode, tide_shape_t **win_s, tide_domain_t **win_d)
{
    uint64_t stamp = ++core->scratch_stamp;

    for (size_t i = 0; i < nv; i++) {
        tide_job_t *v = vs[i].job;
        int32_t r0 = 0;
        if (mode != SEARCH_EVICT) {
            /* A restart without a checkpoint loses everything: evicting says so honestly. A generation
             * still starting cannot checkpoint yet. */
            if (!tide__job_uses_sdk(v) || v->launch_deadline)
                continue;
            r0 = shrink_floor(v, mode == SEARCH_RECLAIM);
        }
        for (int32_t r = r0; r < v->n_ranks; r++) {
            tide_worker_t *w = v->ranks[r].worker;
            tide_shape_t *s;
            tide_domain_t *d;
            tide_pscratch_t *ps;
            if (!w || !w->dom || w->job != v)
                continue;
            s = w->dom->shape;
            if (!tide__shape_matches(core, s, job) || s->n_usable < need)
                continue;
            d = tide__domain_at(w, level);
            ps = scratch_of(s, d);
            if (ps->stamp != stamp) {
                ps->stamp = stamp;
                ps->cap = 0;
            }
            ps->cap++;
            ps->last_victim = (int32_t)i;
            if ((d ? d->n_free : s->n_free) + ps->cap >= need) {
                *win_s = s;
                *win_d = d;
                return i + 1;
            }
        }
    }
    return 0;
}

/* Shrink before evict: only the victims' ranks above their floor count (the tail ranks), in the same
 * victim order and domain search as an eviction; each chosen victim gives up what the job still needs
 * in the winning domain and runs on at a smaller size. False when shrinking cannot make room. */
static bool shrink_for(tide_core_t *core, tide_job_t *job, const victim_t *vs, size_t nv, tide_level_t level,
                       int32_t need, bool reclaim)
{
    tide_shape_t *win_s = NULL;
    tide_domain_t *win_d = NULL;
    size_t win_n = search(core, job, vs, nv, level, need, reclaim ? SEARCH_RECLAIM : SEARCH_SHRINK, &win_s, &win_d);
    int32_t *take, deficit, reserve, slack;

    if (win_n == 0)
        return false;
    take = tide_xcalloc(win_n, sizeof(*take));
    deficit = need - (win_d ? win_d->n_free : win_s->n_free);
    reserve = tide__reserve_for(core, job);
    slack = core->n_free + core->low_busy - reserve - need;
    for (size_t i = 0; i < win_n && deficit > 0; i++) {
        tide_job_t *v = vs[i].job;
        int32_t k = 0;
        if (!tide__job_uses_sdk(v) || v->launch_deadline)
            continue;
        for (int32_t r = shrink_floor(v, reclaim); r < v->n_ranks; r++) {
            tide_worker_t *w = v->ranks[r].worker;
            k += w && w->dom && w->job == v && w->dom->shape == win_s &&
                 (!win_d || tide__domain_at(w, level) == win_d);
        }
        take[i] = k < deficit ? k : deficit;
        deficit -= take[i];
        if (v->run_priority != TIDE_PRIO_LOW)
            slack += take[i];
    }
    if (deficit > 0 || (reserve > 0 && slack < 0) || deficit == need - (win_d ? win_d->n_free : win_s->n_free)) {
        free(take); /* ... or no victim gives anything (the job waits for something else) */
        return false;
    }
    for (size_t i = 0; i < win_n; i++)
        if (take[i] > 0)
            start_yield(core, vs[i].job, job, vs[i].job->n_ranks - take[i], reclaim);
    free(take);
    return true;
}

/* What tide lent by growing running jobs (reason grow, no requested size) is taken back first, from any
 * class up to the waiting job's own: a grow borrows idle capacity, it does not keep a job of the same
 * class waiting. The grown jobs shrink back toward the size they grew from. */
static bool reclaim_for(tide_core_t *core, tide_job_t *job, tide_level_t level, int32_t need)
{
    victim_t *vs = NULL;
    size_t nv = 0, cap = 0;
    tide_list_t *pos;
    bool done;

    for (int p = TIDE_PRIO_LOW; p <= (int)job->eff_priority && p < TIDE_PRIO_COUNT; p++) {
        tide_list_for_each(pos, &core->running[p]) {
            tide_job_t *v = tide_list_entry(pos, tide_job_t, run_node);
            if (v->grown_from <= 0 || v->grown_from >= v->n_ranks || v->preempted_by ||
                v->resize.state == TIDE_RESIZE_CHECKPOINTING)
                continue;
            if (nv == cap) {
                cap = cap ? cap * 2 : 16;
                vs = tide_xrealloc(vs, cap * sizeof(*vs));
            }
            vs[nv].job = v;
            vs[nv].lost = lost_work(core, v);
            nv++;
        }
    }
    if (nv == 0)
        return false;
    qsort(vs, nv, sizeof(*vs), cmp_victim);
    done = shrink_for(core, job, vs, nv, level, need, true);
    free(vs);
    return done;
}

void tide__preempt_for(tide_core_t *core, tide_job_t *job, tide_wait_t why)
{
    tide_level_t level = tide__job_level(job);
    int32_t need = job->spec.min_workers;
    victim_t *vs = NULL;
    size_t nv = 0, cap = 0;
    tide_list_t *pos;
    tide_shape_t *win_s = NULL;
    tide_domain_t *win_d = NULL;
    size_t win_n = 0;
    bool *take;
    int32_t reserve, slack;

    if (job->preempt_victims > 0 || job->placed_stamp == core->alloc_stamp + 1)
        return;
    if (core->cfg.preemption && why != TIDE_WAIT_RESERVE && reclaim_for(core, job, level, need))
        return;
    if (!core->cfg.preemption || job->spec.priority == TIDE_PRIO_LOW)
        goto nothing;
    /* Only the classes below the job's: O(running jobs that could be victims). */
    for (int p = TIDE_PRIO_LOW; p < (int)job->spec.priority; p++) {
        tide_list_for_each(pos, &core->running[p]) {
            tide_job_t *v = tide_list_entry(pos, tide_job_t, run_node);
            tide_worker_t *w0 = v->n_ranks > 0 ? v->ranks[0].worker : NULL;
            if (v->run_priority >= job->spec.priority || v->preempted_by || v->n_ranks == 0 ||
                v->resize.state == TIDE_RESIZE_CHECKPOINTING)
                continue; /* a resize about to stop it: its capacity comes back by itself */
            /* Waiting only for the reserve: LOW-held GPUs count as reserve already, evicting LOW
             * work frees nothing it may use. */
            if (why == TIDE_WAIT_RESERVE && v->run_priority == TIDE_PRIO_LOW)
                continue;
            /* A gang never mixes shapes: one look at its first rank's worker. A victim in no shape
             * the job may use is only useful for the reserve. */
            if (w0 && w0->dom && !tide__shape_matches(core, w0->dom->shape, job) &&
                (v->run_priority == TIDE_PRIO_LOW || tide__reserve_for(core, job) <= 0))
                continue;
            if (nv == cap) {
                cap = cap ? cap * 2 : 16;
                vs = tide_xrealloc(vs, cap * sizeof(*vs));
            }
            vs[nv].job = v;
            vs[nv].lost = lost_work(core, v);
            nv++;
        }
    }
    if (nv == 0)
        goto nothing;
    qsort(vs, nv, sizeof(*vs), cmp_victim);
    if (shrink_for(core, job, vs, nv, level, need, false)) {
        free(vs);
        return;
    }
    win_n = search(core, job, vs, nv, level, need, SEARCH_EVICT, &win_s, &win_d);
    if (win_n == 0)
        goto nothing;
    /* Take the victims holding workers in the winning domain. The reserve: victims above LOW free
     * capacity that counts toward it (LOW-held GPUs count as reserve already); when the job would eat
     * into it, add further victims above LOW, wherever they run, until it would not. */
    take = tide_xcalloc(nv, sizeof(*take));
    reserve = tide__reserve_for(core, job);
    slack = core->n_free + core->low_busy - reserve - need;
    for (size_t i = 0; i < win_n; i++) {
        tide_job_t *v = vs[i].job;
        for (int32_t r = 0; r < v->n_ranks && !take[i]; r++) {
            tide_worker_t *w = v->ranks[r].worker;
            take[i] = w && w->dom && w->dom->shape == win_s && (!win_d || tide__domain_at(w, level) == win_d);
        }
        if (take[i] && v->run_priority != TIDE_PRIO_LOW)
            slack += v->n_ranks;
    }
    for (size_t i = 0; i < nv && reserve > 0 && slack < 0; i++) {
        if (!take[i] && vs[i].job->run_priority != TIDE_PRIO_LOW) {
            take[i] = true;
            slack += vs[i].job->n_ranks;
        }
    }
    if (reserve > 0 && slack < 0) {
        free(take);
        goto nothing;
    }
    for (size_t i = 0; i < nv; i++)
        if (take[i])
            start_yield(core, vs[i].job, job, 0, false);
    free(take);
    free(vs);
    return;
nothing:
    free(vs);
    job->placed_stamp = core->alloc_stamp + 1; /* +1: 0 never matches a fresh job */
}

/* The victim v no longer stands in for_job's way: its ranks stopped. */
static void victim_done(tide_core_t *core, tide_job_t *v)
{
    tide_job_t *for_job = tide_core_job_find(core, v->preempted_by);

    if (for_job && for_job->preempt_victims > 0)
        for_job->preempt_victims--;
    free(v->preempted_by);
    v->preempted_by = NULL;
    core->need_schedule = true;
}

void tide__preempt_stopped(tide_core_t *core, tide_job_t *v)
{
    if (v->preempted_by && v->state != TIDE_JOB_RUNNING && tide_list_empty(&v->bound))
        victim_done(core, v);
}

void tide__preempt_yield(tide_core_t *core, tide_job_t *v, const char *how)
{
    tide_job_t *for_job = v->preempted_by ? tide_core_job_find(core, v->preempted_by) : NULL;
    char *by = v->preempted_by;

    if (!by)
        return;
    if (v->state == TIDE_JOB_RUNNING && (!for_job || for_job->state != TIDE_JOB_PENDING)) {
        /* The job it was making room for was cancelled or found room elsewhere: keep running. */
        v->preempted_by = NULL;
        v->preempt_at = 0;
        core->n_preempting--;
        if (for_job && for_job->preempt_victims > 0)
            for_job->preempt_victims--;
        tide__event(core, "job.preempt_cancelled", v, NULL, "job %s keeps running: job %s %s", v->id, by,
                    for_job ? "no longer waits" : "is gone");
        if (v->resize.reason == TIDE_RESIZE_SHRINK)
            tide__resize_abort(core, v, for_job ? "the job it made room for no longer waits" : "the job it made room for is gone");
        tide__resize_poke(core, v); /* a size asked for while it yielded */
        free(by);
        tide__job_rearm(core, v);
        return;
    }
    v->preempted_by = NULL; /* not yielding any more: requeueing it below must not come back here */
    v->preempt_at = 0;
    core->n_preempting--;
    if (v->state == TIDE_JOB_RUNNING && v->resize.reason == TIDE_RESIZE_SHRINK &&
        v->resize.state == TIDE_RESIZE_CHECKPOINTING) {
        if (v->last_ckpt.step >= 0)
            tide__job_requeue(core, v, "job.resize_stopping",
                              "shrinking %d -> %d workers for job %s (%s); %s; resumes from checkpoint step %" PRId64,
                              v->resize.from_workers, v->resize.to_workers, by,
                              for_job ? tide_prio_name(for_job->spec.priority) : "?", how, v->last_ckpt.step);
        else
            tide__job_requeue(core, v, "job.resize_stopping",
                              "shrinking %d -> %d workers for job %s (%s); %s; no checkpoint: restarts from the beginning",
                              v->resize.from_workers, v->resize.to_workers, by,
                              for_job ? tide_prio_name(for_job->spec.priority) : "?", how);
    } else if (v->state == TIDE_JOB_RUNNING) {
        v->preemptions++;
        if (v->last_ckpt.step >= 0)
            tide__job_requeue(core, v, "job.preempted", "preempted by job %s (%s); %s; resumes from checkpoint step %" PRId64,
                              by, for_job ? tide_prio_name(for_job->spec.priority) : "?", how, v->last_ckpt.step);
        else
            tide__job_requeue(core, v, "job.preempted", "preempted by job %s (%s); %s; no checkpoint: restarts from the beginning",
                              by, for_job ? tide_prio_name(for_job->spec.priority) : "?", how);
    }
    /* Until its ranks stopped (tide__preempt_stopped), preempted_by says whom it makes room for. */
    v->preempted_by = by;
    tide__preempt_stopped(core, v);
}

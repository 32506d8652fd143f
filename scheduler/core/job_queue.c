/* Priority queues and the scheduling pass (docs/policies.md, "Queues"). One FIFO per class, served
 * CRITICAL first; a job waiting longer than aging_ms moves to the tail of the next class up (at most
 * HIGH), so LOW work cannot starve. A job that cannot be placed blocks the shapes it could use for the
 * rest of the pass (no later job of its class or below takes them: no backfill), may preempt lower
 * classes, and never blocks shapes it could not use; a job that could not run even on the idle cluster
 * blocks nothing. The pass stops once every shape is blocked, so it costs O(classes + jobs placed + jobs
 * tried before the cluster is full) — never a scan of the workers. */
#include <stdio.h>
#include <stdlib.h>

#include "core_private.h"
#include "xmalloc.h"

void tide__queue_push(tide_core_t *core, tide_job_t *job, bool front)
{
    tide_list_t *q;

    if ((unsigned)job->eff_priority < (unsigned)job->spec.priority || job->eff_priority >= TIDE_PRIO_COUNT)
        job->eff_priority = job->spec.priority;
    q = &core->queues[job->eff_priority];
    tide_list_remove(&job->queue_node);
    if (front)
        tide_list_push_front(q, &job->queue_node);
    else
        tide_list_push_back(q, &job->queue_node);
    job->queued_mono = core->now_mono;
    job->queued_front = front;
    job->never_stamp = 0;
    core->queue_version++;
    core->need_schedule = true;
}

void tide__queue_remove(tide_core_t *core, tide_job_t *job)
{
    core->queue_version++;
    tide_list_remove(&job->queue_node);
    job->wait = TIDE_WAIT_NONE;
}

/* Aging: LOW -> NORMAL -> HIGH, one step per aging_ms in a class. Heads are the longest waiting (a
 * job queued at the front after a rollback keeps its own queued_mono, so it is checked as well). */
static void age(tide_core_t *core)
{
    int64_t a = core->cfg.aging_ms;

    if (a <= 0)
        return;
    for (int p = TIDE_PRIO_HIGH - 1; p >= TIDE_PRIO_LOW; p--) {
        tide_list_t *q = &core->queues[p];
        tide_list_t *pos = q->next;
        while (pos != q) {
            tide_job_t *job = tide_list_entry(pos, tide_job_t, queue_node);
            pos = pos->next;
            if (core->now_mono - job->queued_mono < a) {
                /* Jobs put back at the front (requeued, rolled back) entered later than the FIFO
                 * behind them: look past them; the first young FIFO job ends the walk. */
                if (job->queued_front)
                    continue;
                break;
            }
            tide_list_remove(&job->queue_node);
            job->queued_front = false;
            job->eff_priority = (tide_prio_t)(p + 1);
            tide_list_push_back(&core->queues[p + 1], &job->queue_node);
            job->queued_mono = core->now_mono;
            job->never_stamp = 0;
            core->queue_version++;
            tide__event(core, "job.aged", job, NULL, "job %s (%s) waited %llds: now queued as %s", job->id,
                        tide_prio_name(job->spec.priority), (long long)(a / 1000),
                        tide_prio_name(job->eff_priority));
            core->need_schedule = true;
        }
    }
}

int64_t tide__queue_next_deadline(const tide_core_t *core)
{
    int64_t next = INT64_MAX;

    if (core->cfg.aging_ms <= 0)
        return next;
    for (int p = TIDE_PRIO_LOW; p < TIDE_PRIO_HIGH; p++) {
        const tide_list_t *q = &core->queues[p];
        const tide_list_t *pos;
        tide_list_for_each(pos, q) {
            const tide_job_t *job = tide_list_entry(pos, tide_job_t, queue_node);
            int64_t t = job->queued_mono + core->cfg.aging_ms;
            if (t < next)
                next = t;
            if (!job->queued_front)
                break; /* the oldest FIFO job; front-pushed ones before it are checked too */
        }
    }
    return next;
}

/* Marks the shapes job could use as blocked for this pass: those that match it and could hold it
 * were they idle (a shape too small for it is not held for it). why: what stopped it. */
static void block_shapes(tide_core_t *core, tide_job_t *job, tide_wait_t why)
{
    tide_level_t level = tide__job_level(job);
    tide_list_t *pos;

    tide_list_for_each(pos, &core->shape_list) {
        tide_shape_t *s = tide_list_entry(pos, tide_shape_t, link);
        if (s->blocked_pass == core->pass || s->n_usable == 0 ||
            !tide__shape_matches(core, s, job) ||
            tide__shape_max_usable(s, level) < job->spec.min_workers)
            continue;
        s->blocked_pass = core->pass;
        s->blocked_prio = job->eff_priority;
        s->blocked_seq = job->seq;
        s->blocked_reserve = why == TIDE_WAIT_RESERVE;
        core->n_blocked++;
        core->n_blocked_reserve += s->blocked_reserve;
    }
}

static int32_t shapes_in_use(const tide_core_t *core)
{
    int32_t n = 0;
    const tide_list_t *pos;

    tide_list_for_each(pos, &core->shape_list) n += tide_list_entry(pos, tide_shape_t, link)->n_usable > 0;
    return n;
}

/* Tries the queue of one class; false once every shape is blocked. When a job that holds a shape
 * waits only for the headroom reserve, LOW jobs may still go into the reserve (placement.c), in
 * FIFO order: the first that does not fit ends the pass. */
static bool schedule_class(tide_core_t *core, tide_list_t *q, int32_t n_shapes, tide_worker_t ***scratch,
                           size_t *cap)
{
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, q) {
        tide_job_t *job = tide_list_entry(pos, tide_job_t, queue_node);
        tide_wait_t why;
        int32_t n;
        bool all_blocked = core->n_blocked >= n_shapes;

        if (all_blocked && (job->eff_priority != TIDE_PRIO_LOW || core->n_blocked_reserve == 0))
            return false;
        job->wait_pass = core->pass;
        if (!tide_list_empty(&job->bound)) {
            /* Never two generations at once: the next starts when the last rank of the previous one
             * exited (its release queues a pass). Meanwhile it holds the shapes it could use, so lower
             * classes do not take the GPUs its old ranks free. */
            job->wait = TIDE_WAIT_STOPPING;
            if (tide__could_fit(core, job))
                block_shapes(core, job, TIDE_WAIT_CAPACITY);
            continue;
        }
        if (job->never_stamp == core->usable_stamp + 1) {
            job->wait = TIDE_WAIT_NEVER; /* nothing it depends on changed since: O(1) */
            continue;
        }
        if (!tide__could_fit(core, job)) {
            job->wait = TIDE_WAIT_NEVER; /* could not run even on the idle cluster: blocks nobody */
            job->never_stamp = core->usable_stamp + 1;
            continue;
        }
        if ((size_t)job->spec.max_workers > *cap) {
            *cap = (size_t)job->spec.max_workers;
            *scratch = tide_xrealloc(*scratch, *cap * sizeof(**scratch));
        }
        if (job->n_exclude > 0)
            tide__exclude_begin(core, job);
        n = tide__place(core, job, *scratch, &why);
        if (job->n_exclude > 0) {
            tide_wait_t why_all;
            tide__exclude_end(core, job);
            /* A straggler replacement whose healthy worker was taken (or left) after it was decided: the
             * straggler's worker rather than a wait that may never end (seed 1002677: 9 of 9 GPUs, one
             * excluded). Its placement lifts the exclusions (tide__resize_placed). */
            if (n == 0)
                n = tide__place(core, job, *scratch, &why_all);
        }
        if (n == 0) {
            job->wait = why;
            if (why == TIDE_WAIT_NO_MATCH)
                continue;
            /* What burst lent in its shape comes back first: no one is evicted for GPUs that are only
             * borrowed (docs/elastic.md, "Burst"). */
            if (why != TIDE_WAIT_BEHIND && !tide__burst_yield_for(core, job, why))
                tide__preempt_for(core, job, why);
            block_shapes(core, job, why);
            if (all_blocked)
                return false;
            continue;
        }
        tide__queue_remove(core, job);
        tide__job_start_generation(core, job, *scratch, n);
    }
    return true;
}

void tide__schedule(tide_core_t *core)
{
    tide_worker_t **scratch = NULL;
    size_t cap = 0;

    if (core->scheduling || core->restoring)
        return;
    core->scheduling = true;
    age(core);
    while (core->need_schedule) {
        int32_t n_shapes = shapes_in_use(core);
        core->need_schedule = false;
        core->pass++;
        core->n_blocked = 0;
        core->n_blocked_reserve = 0;
        for (int p = TIDE_PRIO_COUNT - 1; p >= 0; p--) {
            if (!schedule_class(core, &core->queues[p], n_shapes, &scratch, &cap))
                break;
        }
        if (!core->need_schedule) {
            tide__resize_consider(core); /* may queue a resizing job again: then one more pass */
            tide__burst_after_pass(core); /* a queued job waits: what burst lent goes back */
        }
    }
    core->scheduling = false;
    free(scratch);
}

int32_t tide_core_job_queue_position(const tide_core_t *core, const tide_job_t *job)
{
    tide_core_t *c = (tide_core_t *)core; /* a cache only */

    if (job->state != TIDE_JOB_PENDING || !tide_list_linked(&job->queue_node))
        return 0; /* not queued: running, ended, or in its restart backoff */
    if (c->pos_version != c->queue_version) {
        /* One walk numbers every queued job: a listing of the whole queue is O(queue), not O(queue^2). */
        int32_t n = 0;
        for (int p = TIDE_PRIO_COUNT - 1; p >= 0; p--) {
            tide_list_t *pos;
            tide_list_for_each(pos, &c->queues[p]) tide_list_entry(pos, tide_job_t, queue_node)->queue_pos = ++n;
        }
        c->pos_version = c->queue_version;
    }
    return job->queue_pos;
}

static const char *level_phrase(tide_topology_t t)
{
    switch (t) {
    case TIDE_TOPO_NODE:
        return " on one node";
    case TIDE_TOPO_RACK:
        return " in one rack";
    case TIDE_TOPO_SWITCH:
        return " under one switch";
    default:
        return "";
    }
}

/* "8 GPUs with >= 80 GiB in pool a, in one rack" */
static void describe_need(const tide_job_t *job, char *buf, size_t len)
{
    const tide_job_spec_t *sp = &job->spec;
    int n = snprintf(buf, len, "%d GPU%s", sp->min_workers, sp->min_workers == 1 ? "" : "s");

    if (n > 0 && (size_t)n < len && sp->device && sp->device[0])
        n += snprintf(buf + n, len - (size_t)n, " of device \"%s\"", sp->device);
    if (n > 0 && (size_t)n < len && sp->memory_per_rank)
        n += snprintf(buf + n, len - (size_t)n, " with >= %.0f GiB", (double)sp->memory_per_rank / 1073741824.0);
    if (n > 0 && (size_t)n < len && sp->pool && sp->pool[0])
        n += snprintf(buf + n, len - (size_t)n, " in pool %s", sp->pool);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "%s", level_phrase(sp->topology));
}

static const tide_shape_t *blocking_shape(const tide_core_t *core, const tide_job_t *job)
{
    const tide_list_t *pos;

    tide_list_for_each(pos, &core->shape_list) {
        const tide_shape_t *s = tide_list_entry(pos, tide_shape_t, link);
        if (s->blocked_pass == core->pass && s->blocked_seq != job->seq && s->n_usable > 0 &&
            tide__shape_matches(core, s, job))
            return s;
    }
    return NULL;
}

const char *tide_core_job_reason(const tide_core_t *core, const tide_job_t *job, char *buf, size_t len)
{
    tide_core_t *c = (tide_core_t *)core; /* lazy caches only */
    char need[160];
    const tide_shape_t *b;
    int n;

    if (job->state != TIDE_JOB_PENDING)
        return job->message ? job->message : "";
    describe_need(job, need, sizeof(need));
    if (!tide_list_empty(&job->bound)) {
        int32_t k = 0;
        const tide_list_t *pos;
        tide_list_for_each(pos, &job->bound) k++;
        n = snprintf(buf, len, "waiting for %d rank%s of generation %d to stop", k, k == 1 ? "" : "s",
                     job->generation);
    } else if (job->restart_at) {
        int64_t left = job->restart_at > core->now_mono ? job->restart_at - core->now_mono : 0;
        n = snprintf(buf, len, "restarting in %.1f s (restart %d in a row; backoff after repeated failures)",
                     (double)left / 1e3, job->restarts_in_row);
    } else if (!tide__could_fit(c, job)) {
        int32_t reserve = job->eff_priority == TIDE_PRIO_LOW || job->recovering ? 0 : core->reserve.spares;
        int32_t most = 0;
        const tide_list_t *pos;
        bool any = false;
        tide_list_for_each(pos, &core->shape_list) {
            tide_shape_t *s = tide_list_entry(pos, tide_shape_t, link);
            if (s->n_usable > 0 && tide__shape_matches(core, s, job)) {
                int32_t m = tide__shape_max_usable(s, tide__job_level(job));
                any = true;
                if (m > most)
                    most = m;
            }
        }
        if (!any)
            n = snprintf(buf, len, "waiting: needs %s; no usable worker matches", need);
        else if (most >= job->spec.min_workers && reserve > 0)
            n = snprintf(buf, len, "waiting: needs %s; %d usable, %d of them the reserve's hot spares", need,
                         core->n_usable, reserve);
        else
            n = snprintf(buf, len, "waiting: needs %s; the largest usable fit is %d", need, most);
    } else if (job->wait == TIDE_WAIT_RESERVE) {
        n = snprintf(buf, len, "waiting: needs %s; %d free but the headroom reserve keeps %d (only LOW work may use it)",
                     need, core->n_free, core->reserve.gpus);
    } else if ((b = blocking_shape(core, job)) &&
               (job->wait_pass != core->pass || job->wait == TIDE_WAIT_BEHIND)) {
        n = snprintf(buf, len, "queued behind job %llu (%s), which waits for the same GPUs",
                     (unsigned long long)b->blocked_seq, tide_prio_name(b->blocked_prio));
    } else {
        n = snprintf(buf, len, "waiting: needs %s; largest fit is %d", need, tide__largest_fit(c, job));
    }
    if (job->preempt_victims > 0 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "; %d lower-class job%s checkpointing to make room",
                 job->preempt_victims, job->preempt_victims == 1 ? "" : "s");
    return buf;
}

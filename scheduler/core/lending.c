/* Phase-aware burst, the lending half (docs/elastic.md, "Burst"): while a job with burst on is in a
 * high-load phase, tide lends it free workers that run its burst command and take its detached tasks,
 * and takes them back after; burst.c decides when. Lent workers sit in the job's slots after its ranks
 * (job->ranks[n_ranks + i]) and never change its generation, size or state. A job without detached
 * tasks that checkpoints through the SDK grows by a generation resize instead (burst_from -> burst_to)
 * and shrinks back after. Invariants: job->n_lent counts the lent slots with a worker bound and
 * job->lent_workers those of them not being taken back; a job with n_lent > 0 or a burst by resize is on
 * core->lending; a generation's end stops its lent workers with its ranks; nothing is lent into a shape
 * a queued job waits for, and what is lent in a shape a queued job could use goes back before anyone is
 * preempted for it (any shape, while a queued job waits only for the headroom reserve). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "burst.h"
#include "core_private.h"
#include "xmalloc.h"

#define RETRY_MS 1000 /* a high phase that could not be lent to yet is looked at again this often */

static void cfg_of(const tide_core_t *core, const tide_job_t *job, tide_burst_cfg_t *c)
{
    tide_burst_cfg_default(c);
    c->percent = job->spec.burst_percent;
    c->enter_ms = core->cfg.burst_enter_ms;
    c->exit_ms = core->cfg.burst_exit_ms;
    c->min_dwell_ms = core->cfg.burst_min_dwell_ms;
    c->cost_factor = core->cfg.burst_cost_factor;
}

int32_t tide__burst_slots(const tide_job_t *job, int32_t n)
{
    int64_t k;

    if (job->spec.burst_percent <= 0 || n <= 0)
        return 0;
    k = ((int64_t)n * job->spec.burst_percent + 99) / 100;
    return k < 1 ? 1 : (int32_t)k;
}

bool tide__lent_slot_of(const tide_job_t *job, const tide_worker_t *w, int32_t generation, int32_t rank)
{
    return job && job->state == TIDE_JOB_RUNNING && job->generation == generation && rank >= job->n_ranks &&
           rank < job->n_ranks + job->max_lent && job->ranks[rank].worker == w;
}

static void lending_update(tide_core_t *core, tide_job_t *job)
{
    bool in = tide_list_linked(&job->lend_node), want = job->n_lent > 0 || job->burst_to > 0;

    if (want && !in)
        tide_list_push_back(&core->lending, &job->lend_node);
    else if (!want && in)
        tide_list_remove(&job->lend_node);
}

/* The lending is over (taken back, its generation or job ended, a burst resize called off): its
 * worker-seconds count. */
static void lending_over(tide_core_t *core, tide_job_t *job)
{
    tide_burst_t *b = job->burst;

    if (!b || b->lent == 0)
        return;
    if (core->now_mono > b->lent_at)
        core->burst_stats.lent_seconds += (double)b->lent * (double)(core->now_mono - b->lent_at) / 1e3;
    core->burst_stats.reclaims++;
    tide_burst_reclaimed(b);
}

/* Free workers the job may borrow now: in rank 0's shape (pool, device, memory), never the hot spares
 * (work above LOW may use the reserve's burst part; LOW work none of the reserve), less what decided
 * grows claimed, and none while a queued job waits for that shape or for the headroom reserve (which
 * counts the free workers of every shape). */
static int32_t lend_avail(tide_core_t *core, const tide_job_t *job)
{
    tide_worker_t *w0 = job->n_ranks > 0 ? job->ranks[0].worker : NULL;
    int32_t n, limit;

    if (!w0 || !w0->dom || w0->dom->shape->blocked_pass == core->pass || core->n_blocked_reserve > 0)
        return 0;
    n = w0->dom->shape->n_free;
    if (job->run_priority == TIDE_PRIO_LOW)
        limit = core->n_free - core->reserve.gpus; /* LOW work borrows none of the reserve */
    else /* the spares, as far as the reserve (capped at half the cluster) holds them */
        limit = core->n_free - (core->reserve.spares < core->reserve.gpus ? core->reserve.spares : core->reserve.gpus);
    limit -= core->grow_claimed;
    if (limit < n)
        n = limit;
    if (job->max_lent - job->n_lent < n)
        n = job->max_lent - job->n_lent;
    return n > 0 ? n : 0;
}

static int32_t free_slot(const tide_job_t *job)
{
    for (int32_t i = 0; i < job->max_lent; i++)
        if (!job->ranks[job->n_ranks + i].worker)
            return job->n_ranks + i;
    return -1;
}

static void lend(tide_core_t *core, tide_job_t *job, int32_t k)
{
    tide_worker_t **ws = tide_xcalloc((size_t)k, sizeof(*ws));
    int32_t got = tide__place_near(core, job->ranks[0].worker, TIDE_LVL_SHAPE, k, ws), lent = 0;

    for (int32_t i = 0; i < got; i++) {
        int32_t r = free_slot(job);
        tide_job_rank_t *slot;
        tide_action_t *a;
        if (r < 0)
            break;
        slot = &job->ranks[r];
        free(slot->worker_id);
        memset(slot, 0, sizeof(*slot));
        slot->worker_id = tide_xstrdup(ws[i]->id);
        slot->worker = ws[i];
        slot->progress.step = -1;
        slot->state = TIDE_RANK_LAUNCHED;
        tide__worker_assign(core, ws[i], job, r);
        tide__tasks_slot_reset(core, job, r);
        a = tide__act(core, TIDE_ACT_LAUNCH);
        a->job = job;
        a->worker = ws[i];
        a->conn = ws[i]->conn;
        a->generation = job->generation;
        a->rank = r;
        a->master_port = job->master_port;
        job->launch_epoch = core->actions_epoch + 1; /* a stop in this same call takes it back */
        job->n_lent++;
        job->lent_workers++;
        lent++;
    }
    free(ws);
    if (lent == 0)
        return;
    lending_update(core, job);
    tide__persist_job(core, job); /* the record lists lent workers: a restarted scheduler waits for them */
    tide_burst_lent(job->burst, core->now_mono, lent);
    job->bursts++;
    job->lend_mono = core->now_mono;
    core->burst_stats.lent_total += (uint64_t)lent;
    core->burst_stats.lent_now += lent;
    core->burst_stats.bursts++;
    {
        int64_t rest = tide_burst_predicted_rest(job->burst, core->now_mono);
        tide__event(core, "job.burst_lent", job, NULL,
                    "job %s generation %d: %d burst worker(s) lent for its high-load phase (predicted %.1f s "
                    "more; %d rank(s), burst %d%%)",
                    job->id, job->generation, lent, rest > 0 ? (double)rest / 1e3 : 0.0, job->n_ranks,
                    job->spec.burst_percent);
    }
}

/* One lent slot gives its worker back at once (nothing runs there). */
static void slot_release(tide_core_t *core, tide_job_t *job, int32_t r)
{
    tide_job_rank_t *slot = &job->ranks[r];
    tide_worker_t *w = slot->worker;

    if (!slot->lent_stopping) {
        job->lent_workers--;
        core->burst_stats.lent_now--;
    }
    slot->worker = NULL;
    slot->lent_stopping = false;
    job->n_lent--;
    lending_update(core, job);
    if (slot->awaiting) {
        slot->awaiting = false;
        job->awaiting--;
        tide__job_maybe_reconciled(core, job);
    }
    if (w && w->job == job && w->rank == r)
        tide__worker_release(core, w);
}

/* Takes lent slot r back: released now when nothing runs there, else told to stop (it stays bound
 * until its exit). False when there is nothing to take back. */
static bool reclaim_slot(tide_core_t *core, tide_job_t *job, int32_t r, const char *why)
{
    tide_job_rank_t *slot = &job->ranks[r];
    tide_worker_t *w = slot->worker;

    if (!w || slot->lent_stopping)
        return false;
    if (slot->state == TIDE_RANK_LAUNCHED && tide__unlaunch(core, job, r)) {
        slot->state = TIDE_RANK_EXITED;
        slot_release(core, job, r);
        return true;
    }
    if (w->state == TIDE_WORKER_DEAD) {
        slot->state = TIDE_RANK_LOST;
        tide__tasks_rank_gone(core, job, r, true);
        slot_release(core, job, r);
        return true;
    }
    slot->lent_stopping = true;
    job->lent_workers--;
    core->burst_stats.lent_now--;
    if (w->connected) {
        tide_action_t *a = tide__act(core, TIDE_ACT_STOP);
        a->job = job;
        a->worker = w;
        a->conn = w->conn;
        a->job_id = job->id;
        a->generation = job->generation;
        a->rank = r;
        a->grace_ms = core->cfg.stop_grace_ms;
        a->text = tide__keep(core, why);
    }
    /* A worker without its stream keeps the slot until it re-registers (its hello reports the process,
     * which is stopped then) or dies. */
    return true;
}

void tide__lent_take_back(tide_core_t *core, tide_job_t *job, int32_t rank, const char *why)
{
    if (reclaim_slot(core, job, rank, why))
        tide__event(core, "job.burst_reclaimed", job, job->ranks[rank].worker,
                    "job %s generation %d: burst worker %d on %s taken back: %s", job->id, job->generation,
                    rank - job->n_ranks, job->ranks[rank].worker_id, why);
}

static void reclaim(tide_core_t *core, tide_job_t *job, const char *why)
{
    int32_t n = 0;
    double held = job->burst && job->burst->lent_at && core->now_mono > job->burst->lent_at
                      ? (double)(core->now_mono - job->burst->lent_at) / 1e3
                      : 0;

    for (int32_t r = job->n_ranks; r < job->n_ranks + job->max_lent; r++)
        n += reclaim_slot(core, job, r, why);
    lending_over(core, job);
    if (n > 0)
        tide__event(core, "job.burst_reclaimed", job, NULL,
                    "job %s generation %d: %d burst worker(s) taken back after %.1f s: %s", job->id,
                    job->generation, n, held, why);
}

/* --- a burst by resize: a job without detached tasks grows by a generation for the phase --- */

/* The latency of a resize of this job: its last one measured, else the configured guess. */
static int64_t resize_cost_ms(const tide_core_t *core, const tide_job_t *job)
{
    if (job->last_resize.state == TIDE_RESIZE_DONE && job->last_resize.total_s > 0)
        return (int64_t)llround(job->last_resize.total_s * 1e3);
    return core->cfg.burst_resize_cost_ms;
}

static void grow_for_phase(tide_core_t *core, tide_job_t *job, int32_t k)
{
    char detail[96];
    int64_t rest = tide_burst_predicted_rest(job->burst, core->now_mono);

    snprintf(detail, sizeof(detail), "high-load phase, predicted %.1f s more", rest > 0 ? (double)rest / 1e3 : 0.0);
    job->burst_from = job->n_ranks;
    job->burst_to = job->n_ranks + k;
    tide_burst_lent(job->burst, core->now_mono, k);
    job->bursts++;
    job->lend_mono = core->now_mono;
    core->burst_stats.bursts++;
    core->burst_stats.lent_total += (uint64_t)k;
    lending_update(core, job);
    tide__event(core, "job.burst_lent", job, NULL,
                "job %s generation %d: grows by %d worker(s) for its high-load phase by a resize (it has no "
                "detached tasks; %s)",
                job->id, job->generation, k, detail);
    tide__resize_begin(core, job, job->burst_to, TIDE_RESIZE_BURST, detail);
    tide__resize_track(core, job); /* its goal is burst_to now */
}

/* Back to its size before the burst; false when that must wait (a resize under way). */
static bool shrink_after_phase(tide_core_t *core, tide_job_t *job, const char *why)
{
    int32_t from = job->burst_from;

    if (tide__resize_in_progress(job) || job->state != TIDE_JOB_RUNNING || job->ranks_unstarted > 0 ||
        job->launch_deadline || job->awaiting > 0 || job->preempted_by)
        return false;
    job->burst_from = job->burst_to = 0;
    lending_over(core, job);
    lending_update(core, job);
    tide__event(core, "job.burst_reclaimed", job, NULL, "job %s generation %d: back to %d worker(s) by a resize: %s",
                job->id, job->generation, from < job->n_ranks ? from : job->n_ranks, why);
    if (from > 0 && job->n_ranks > from)
        tide__resize_begin(core, job, from, TIDE_RESIZE_BURST_END, why);
    tide__resize_poke(core, job); /* its own goal again */
    return true;
}

void tide__burst_resize_cancelled(tide_core_t *core, tide_job_t *job)
{
    if (!job->burst_to)
        return;
    job->burst_from = job->burst_to = 0;
    lending_over(core, job);
    lending_update(core, job);
    tide__resize_track(core, job);
}

/* Takes back what burst lent the job, either way. */
static void take_back(tide_core_t *core, tide_job_t *job, const char *why)
{
    if (job->burst_to > 0)
        shrink_after_phase(core, job, why);
    else
        reclaim(core, job, why);
}

/* Whether the phase it reports is this generation's (a new generation's rank 0 has not said yet). */
static bool load_fresh(const tide_job_t *job)
{
    return job->load_generation == job->generation;
}

static bool can_lend(const tide_job_t *job)
{
    return job->state == TIDE_JOB_RUNNING && job->max_lent > 0 && job->ranks_unstarted == 0 && !job->launch_deadline &&
           job->awaiting == 0 && !job->preempted_by && !tide__resize_in_progress(job) && job->detached_seen &&
           load_fresh(job);
}

/* When to decide again without a new observation: the end of the enter or exit hysteresis, the dwell,
 * or a retry while a high phase waits for capacity; 0: only on the next observation. */
static int64_t next_check(const tide_core_t *core, const tide_job_t *job, const tide_burst_cfg_t *c)
{
    const tide_burst_t *b = job->burst;
    int64_t now = core->now_mono, at;

    if (!b->observed || job->state != TIDE_JOB_RUNNING || job->max_lent <= 0)
        return 0;
    if (b->lent > 0) {
        if (b->high)
            return 0;
        if (job->burst_to > 0 && tide__resize_in_progress(job))
            return now + RETRY_MS; /* the shrink waits for the grow to finish */
        at = b->phase_since + c->exit_ms;
        if (b->lent_at + c->min_dwell_ms > at)
            at = b->lent_at + c->min_dwell_ms;
        return at > now ? at : now + RETRY_MS; /* due but it had to wait (a burst resize still starting) */
    }
    if (!b->high)
        return 0;
    if (now < b->phase_since + c->enter_ms)
        return b->phase_since + c->enter_ms;
    if (b->highs_seen == 0)
        return 0; /* nothing to predict from: this phase only teaches */
    return now + RETRY_MS;
}

static void decide(tide_core_t *core, tide_job_t *job)
{
    tide_burst_cfg_t c;
    tide_burst_action_t act;
    int32_t n = 0, avail = 0;
    int64_t cost;

    if (!job->burst)
        return;
    cfg_of(core, job, &c);
    if (job->detached_seen || job->burst_to > 0 || !tide__job_uses_sdk(job)) {
        /* Lent workers take its detached tasks: no generation change. (A job with neither detached tasks
         * nor checkpoints through the SDK is never lent to: a resize would lose its progress.) */
        if (can_lend(job))
            avail = lend_avail(core, job);
        cost = job->lend_cost_ms > 0 ? llround(job->lend_cost_ms) : core->cfg.burst_lend_cost_ms;
    } else {
        /* No detached tasks: only a generation resize adds capacity, and it pays only when the phase
         * outlasts its cost spread over what the added workers bring: cost x (n + k) / k. */
        int32_t want = tide__burst_slots(job, job->n_ranks);
        avail = job->burst->lent == 0 && load_fresh(job) ? tide__resize_burst_avail(core, job) : 0;
        if (avail > want)
            avail = want;
        cost = resize_cost_ms(core, job);
        if (avail > 0)
            cost = cost * (job->n_ranks + avail) / avail;
    }
    act = tide_burst_decide(job->burst, &c, core->now_mono, job->n_ranks, avail, cost, &n);
    if (act == TIDE_BURST_LEND && n > 0 && !job->detached_seen && tide__job_uses_sdk(job))
        grow_for_phase(core, job, n);
    else if (act == TIDE_BURST_LEND && n > 0)
        lend(core, job, n);
    else if (act == TIDE_BURST_RECLAIM)
        take_back(core, job, "its high-load phase ended");
    job->burst_check_at = next_check(core, job, &c);
    tide__job_rearm(core, job);
}

void tide_core_job_load_phase(tide_core_t *core, tide_job_t *job, bool high)
{
    tide_burst_cfg_t c;

    if (!job)
        return;
    job->high_load = high;
    if (job->state == TIDE_JOB_RUNNING)
        job->load_generation = job->generation;
    if (job->spec.burst_percent <= 0 || job->state != TIDE_JOB_RUNNING)
        return;
    if (!job->burst) {
        job->burst = tide_xcalloc(1, sizeof(*job->burst));
        tide_burst_init(job->burst);
    }
    cfg_of(core, job, &c);
    tide_burst_observe(job->burst, &c, core->now_mono, high);
    decide(core, job);
}

void tide__burst_on_timer(tide_core_t *core, tide_job_t *job)
{
    job->burst_check_at = 0;
    decide(core, job);
}

void tide__lent_started(tide_core_t *core, tide_job_t *job, int32_t rank, int32_t pid)
{
    tide_job_rank_t *slot = &job->ranks[rank];

    slot->pid = pid;
    if (slot->state == TIDE_RANK_RUNNING || slot->lent_stopping)
        return;
    slot->state = TIDE_RANK_RUNNING;
    if (core->now_mono >= job->lend_mono) {
        /* How long lending takes, for the next decision: decision to a lent process running. */
        double ms = (double)(core->now_mono - job->lend_mono);
        job->lend_cost_ms = job->lend_cost_ms > 0 ? 0.3 * ms + 0.7 * job->lend_cost_ms : (ms > 1 ? ms : 1);
    }
    tide__event(core, "job.burst_started", job, slot->worker, "job %s burst worker %d started on %s (pid %d)",
                job->id, rank - job->n_ranks, slot->worker_id, pid);
}

static void lent_gone(tide_core_t *core, tide_job_t *job, int32_t rank, tide_rank_state_t st)
{
    tide_job_rank_t *slot = &job->ranks[rank];

    slot->state = st;
    /* What it still holds goes back to the pool for a rank: its worker reported the tasks it finished
     * before its exit, so what is left was not run (or, after a crash, may run twice: detached tasks
     * are at least once when a lent process dies). */
    tide__tasks_rank_gone(core, job, rank, true);
    slot_release(core, job, rank);
    /* The lending lasts until the phase ends even when its processes left early (a burst command that
     * fails is not relaunched over and over in one phase). */
    if (job->burst && job->state == TIDE_JOB_RUNNING) {
        tide_burst_cfg_t c;
        cfg_of(core, job, &c);
        job->burst_check_at = next_check(core, job, &c);
        tide__job_rearm(core, job);
    }
}

void tide__lent_restore(tide_core_t *core, tide_job_t *job, int32_t rank, tide_worker_t *w)
{
    tide_job_rank_t *slot = &job->ranks[rank];

    free(slot->worker_id);
    memset(slot, 0, sizeof(*slot));
    slot->worker_id = tide_xstrdup(w->id);
    slot->worker = w;
    slot->progress.step = -1;
    slot->state = TIDE_RANK_RUNNING;
    slot->lent_stopping = true; /* a restart forgets the lending: its process is stopped */
    slot->awaiting = true;
    job->awaiting++;
    job->n_lent++;
    lending_update(core, job);
}

void tide__lent_exited(tide_core_t *core, tide_job_t *job, int32_t rank, int32_t exit_code, const char *error)
{
    tide_job_rank_t *slot = &job->ranks[rank];

    slot->exit_code = exit_code;
    if (!slot->lent_stopping)
        tide__event(core, "job.burst_exited", job, slot->worker,
                    "job %s burst worker %d on %s exited by itself with code %d%s%s", job->id, rank - job->n_ranks,
                    slot->worker_id, exit_code, error && error[0] ? ": " : "", error ? error : "");
    lent_gone(core, job, rank, TIDE_RANK_EXITED);
}

void tide__lent_lost(tide_core_t *core, tide_job_t *job, int32_t rank, const char *why)
{
    tide__event(core, "job.burst_lost", job, job->ranks[rank].worker, "job %s burst worker %d lost: %s", job->id,
                rank - job->n_ranks, why);
    lent_gone(core, job, rank, TIDE_RANK_LOST);
}

void tide__burst_generation_end(tide_core_t *core, tide_job_t *job)
{
    core->burst_stats.lent_now -= job->lent_workers;
    if (job->n_lent > 0)
        tide__event(core, "job.burst_reclaimed", job, NULL,
                    "job %s generation %d: %d burst worker(s) stop with the generation", job->id, job->generation,
                    job->n_lent);
    job->n_lent = 0;
    job->lent_workers = 0;
    if (!job->burst_to)
        lending_over(core, job); /* a burst by resize lives on into the next generation */
    lending_update(core, job);
    job->burst_check_at = 0;
}

void tide__burst_started(tide_core_t *core, tide_job_t *job)
{
    const tide_resize_t *lr = &job->last_resize;

    if (!job->burst)
        return;
    /* A burst resize just done paused the job: that pause is not part of its phase's length. */
    if (lr->state == TIDE_RESIZE_DONE && lr->done_ms == core->now_wall &&
        (lr->reason == TIDE_RESIZE_BURST || lr->reason == TIDE_RESIZE_BURST_END))
        tide_burst_pause(job->burst, core->now_mono, (int64_t)llround(lr->total_s * 1e3));
    decide(core, job); /* the phase may have moved on while the generation started */
}

/* The shape what burst lent the job is in: a lent worker's, else (a burst by resize) its ranks'. */
static tide_shape_t *lent_shape(const tide_job_t *job)
{
    for (int32_t r = job->n_ranks; r < job->n_ranks + job->max_lent; r++) {
        const tide_worker_t *w = job->ranks[r].worker;
        if (w && !job->ranks[r].lent_stopping && w->dom)
            return w->dom->shape;
    }
    for (int32_t r = 0; r < job->n_ranks && job->burst_to > 0; r++)
        if (job->ranks[r].worker && job->ranks[r].worker->dom)
            return job->ranks[r].worker->dom->shape;
    return NULL;
}

void tide__burst_after_pass(tide_core_t *core)
{
    tide_list_t *pos, *tmp;

    if (core->n_blocked == 0)
        return;
    tide_list_for_each_safe(pos, tmp, &core->lending) {
        tide_job_t *job = tide_list_entry(pos, tide_job_t, lend_node);
        tide_shape_t *s = lent_shape(job);
        if ((job->lent_workers > 0 || job->burst_to > 0) && s && s->blocked_pass == core->pass)
            take_back(core, job, "a queued job waits for capacity");
    }
}

bool tide__burst_yield_for(tide_core_t *core, const tide_job_t *waiter, tide_wait_t why)
{
    tide_list_t *pos, *tmp;
    bool waits = false;
    /* The headroom reserve counts the free workers of every shape: a job that waits only for it gets
     * back what is lent anywhere (seed 1001670: lent on 40 GiB GPUs, the waiter needs 60 GiB). */
    bool anywhere = why == TIDE_WAIT_RESERVE;

    tide_list_for_each_safe(pos, tmp, &core->lending) {
        tide_job_t *job = tide_list_entry(pos, tide_job_t, lend_node);
        bool here = false;
        if (job == waiter)
            continue;
        for (int32_t r = job->n_ranks; r < job->n_ranks + job->max_lent && !here; r++) {
            const tide_worker_t *w = job->ranks[r].worker;
            here = w && w->dom && (anywhere || tide__shape_matches(core, w->dom->shape, waiter));
        }
        if (here) {
            waits = true; /* lent workers (or ones stopping) of its shape come back: wait for them */
            if (job->lent_workers > 0)
                reclaim(core, job, "a queued job waits for capacity");
        } else if (job->burst_to > 0 && (job->lent_workers == 0)) {
            tide_shape_t *s = lent_shape(job);
            if (s && (anywhere || tide__shape_matches(core, s, waiter)))
                shrink_after_phase(core, job, "a queued job waits for capacity");
        }
    }
    return waits;
}

void tide__burst_job_end(tide_core_t *core, tide_job_t *job)
{
    job->burst_from = job->burst_to = 0; /* the job is off the resizable list (not running) */
    job->burst_check_at = 0;
    lending_over(core, job);
    if (tide_list_linked(&job->lend_node))
        tide_list_remove(&job->lend_node);
}

void tide__burst_free(tide_job_t *job)
{
    free(job->burst);
    job->burst = NULL;
}

void tide_core_burst_stats(const tide_core_t *core, tide_burst_stats_t *out)
{
    *out = core->burst_stats;
}

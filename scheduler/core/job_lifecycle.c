/* Job lifecycle: PENDING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED (docs/architecture.md).
 * Invariants: a PENDING job is in exactly one priority queue and has no ranks; a RUNNING job's ranks
 * each name a worker bound to it until that rank exits or is lost; a generation starts with rank 0 alone
 * and launches the others once rank 0 reported MASTER_PORT; a generation that does not fully start is
 * rolled back (its ranks stopped, the job queued again at the front of its class). Every change that must
 * survive a restart emits PERSIST_JOB. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_holders.h"
#include "core_private.h"
#include "xmalloc.h"

/* --- helpers --- */

void tide__job_set_state(tide_core_t *core, tide_job_t *job, tide_job_state_t st)
{
    tide_job_state_t old = job->state;

    if (old == st)
        return;
    core->job_counts[old]--;
    core->job_counts[st]++;
    job->state = st;
    if (old == TIDE_JOB_RUNNING) {
        tide_list_remove(&job->run_node);
        core->burst_gpus -= job->burst_share;
        job->burst_share = 0;
        tide__flush_reset(core, job);
        job->preempt_at = 0;
        job->resize_check_at = 0;
        job->burst_check_at = 0;
        job->hang_check_at = 0;
        job->ckpt_cadence_at = 0;
        if (job->preempted_by)
            tide__preempt_yield(core, job, "it stopped running"); /* not RUNNING: only forgets */
        tide__resize_track(core, job);
        tide__reserve_update(core);
    } else if (st == TIDE_JOB_RUNNING) {
        tide_list_push_back(&core->running[job->run_priority], &job->run_node);
    }
    core->alloc_stamp++;
    tide__persist_job(core, job);
}

void tide__job_set_message(tide_core_t *core, tide_job_t *job, const char *fmt, ...)
{
    char *text;
    va_list ap;

    va_start(ap, fmt);
    text = tide_xvasprintf(fmt, ap);
    va_end(ap);
    if (job->message && strcmp(job->message, text) == 0) {
        free(text);
        return;
    }
    free(job->message);
    job->message = text;
    tide__persist_job(core, job);
}

static bool is_final(tide_job_state_t st)
{
    return st == TIDE_JOB_SUCCEEDED || st == TIDE_JOB_FAILED || st == TIDE_JOB_CANCELLED;
}

/* True once no rank of the generation is still ASSIGNED or LAUNCHED. */
static bool fully_started(const tide_job_t *job)
{
    return job->ranks_unstarted == 0;
}

static bool unstarted(tide_rank_state_t st)
{
    return st == TIDE_RANK_ASSIGNED || st == TIDE_RANK_LAUNCHED;
}

void tide__slot_set(tide_core_t *core, tide_job_t *job, int32_t r, tide_rank_state_t st)
{
    tide_job_rank_t *slot = &job->ranks[r];
    tide_rank_state_t old = slot->state;

    if (old == st)
        return;
    job->ranks_unstarted += (int32_t)unstarted(st) - (int32_t)unstarted(old);
    job->ranks_running += (int32_t)(st == TIDE_RANK_RUNNING) - (int32_t)(old == TIDE_RANK_RUNNING);
    job->ranks_exited += (int32_t)(st == TIDE_RANK_EXITED) - (int32_t)(old == TIDE_RANK_EXITED);
    slot->state = st;
    tide__persist_job(core, job);
    if (st == TIDE_RANK_RUNNING && job->state == TIDE_JOB_RUNNING && job->ckpt_request)
        tide__ckpt_send(core, job, r); /* a rank that started after the request gets it too */
    if (job->state == TIDE_JOB_RUNNING && job->ranks_running + job->ranks_exited == job->n_ranks &&
        job->launch_deadline) {
        /* Every rank was confirmed (or ended) at least once: the generation has started. A lost
         * rank is not a start: the generation is rolled back, and counts toward max_rollbacks. */
        job->launch_deadline = 0;
        job->rollbacks = 0;
        tide__job_set_message(core, job, "running generation %d on %d worker(s)", job->generation,
                              job->n_ranks);
        tide__event(core, "job.running", job, NULL, "job %s: all %d rank(s) of generation %d started",
                    job->id, job->n_ranks, job->generation);
        tide__history_running(core, job);
        if (!job->stable_since)
            job->stable_since = core->now_mono; /* running again after a failure (or for the first time) */
        tide__resize_started(core, job); /* a resize is done; a job short of its goal may grow later */
        tide__burst_started(core, job);
        tide__cadence_arm(core, job); /* the next checkpoint is due an interval on (it rearms) */
    }
}

void tide__job_maybe_reconciled(tide_core_t *core, tide_job_t *job)
{
    if (job->awaiting > 0 || !job->reconcile_deadline)
        return;
    job->reconcile_deadline = 0;
    if (job->state == TIDE_JOB_RUNNING) {
        tide__event(core, "job.reconciled", job, NULL,
                    "every worker of job %s re-registered after the scheduler restart", job->id);
        tide__resize_poke(core, job); /* a requested size that waited for the workers */
    }
    tide__job_rearm(core, job);
}

/* The ended generation's ranks: where each one's newest checkpoint may be (its worker, its mirror), for the
 * next generation's restore (LaunchRank.restore_peers). */
static void keep_sources(tide_job_t *job)
{
    if (!job->ranks || job->n_ranks <= 0 || job->last_ckpt.step < 0 || job->last_ckpt.generation != job->generation)
        return; /* the newest checkpoint is an older generation's: the sources of that one stay */
    for (int32_t i = 0; i < 2 * job->n_prev_src; i++)
        free(job->prev_src[i]);
    free(job->prev_src);
    job->prev_src = tide_xcalloc(2 * (size_t)job->n_ranks, sizeof(*job->prev_src));
    job->n_prev_src = job->n_ranks;
    for (int32_t r = 0; r < job->n_ranks; r++) {
        job->prev_src[2 * r] = job->ranks[r].worker_id ? tide_xstrdup(job->ranks[r].worker_id) : NULL;
        job->prev_src[2 * r + 1] = job->ranks[r].mirror_id ? tide_xstrdup(job->ranks[r].mirror_id) : NULL;
    }
}

static void free_ranks(tide_job_t *job)
{
    tide__tasks_free(job); /* pools belong to the generation */
    tide__ckpt_collect_reset(job);
    keep_sources(job);
    for (int32_t r = 0; r < job->n_ranks + job->max_lent; r++) {
        free(job->ranks[r].worker_id);
        free(job->ranks[r].mirror_id);
    }
    free(job->ranks);
    job->ranks = NULL;
    job->n_ranks = 0;
    job->max_lent = 0;
    job->ranks_running = 0;
    job->ranks_exited = 0;
    job->ranks_unstarted = 0;
    job->awaiting = 0;
    job->sdk_ranks = 0;
}

void tide__job_free(tide_job_t *job)
{
    if (!job)
        return;
    free(job->id);
    tide_job_spec_free(&job->spec);
    free_ranks(job);
    tide__ckpt_holders_free(job);
    free(job->master_addr);
    free(job->message);
    free(job->last_ckpt.path);
    free(job->last_ckpt.sha256);
    free(job->durable_ckpt.path);
    free(job->durable_ckpt.sha256);
    for (int32_t i = 0; i < job->n_restore_stopping; i++)
        free(job->restore_stopping[i].worker_id);
    free(job->restore_stopping);
    free(job->flush_path_acc);
    free(job->flush_sha_acc);
    free(job->preempted_by);
    tide__resize_free(job);
    tide__burst_free(job);
    tide__history_free(job);
    for (int32_t i = 0; i < 2 * job->n_prev_src; i++)
        free(job->prev_src[i]);
    free(job->prev_src);
    if (tide_list_linked(&job->lend_node))
        tide_list_remove(&job->lend_node);
    free(job);
}

static tide_job_t *job_new(tide_core_t *core, uint64_t seq, const char *id,
                           const tide_job_spec_t *spec)
{
    tide_job_t *job = tide_xcalloc(1, sizeof(*job));
    tide_list_t *pos;

    job->seq = seq;
    job->id = id ? tide_xstrdup(id) : tide_xasprintf("%" PRIu64, seq);
    tide_job_spec_copy(&job->spec, spec);
    job->state = TIDE_JOB_PENDING;
    job->failed_rank = -1;
    job->last_ckpt.step = -1;
    job->durable_ckpt.step = -1;
    job->flush_step = -1;
    job->job_mfu = -1;
    job->ckpt_collect_step = -1;
    job->eff_priority = job->spec.priority;
    job->run_priority = job->spec.priority;
    tide_list_init(&job->queue_node);
    tide_list_init(&job->run_node);
    tide_list_init(&job->resize_node);
    tide_list_init(&job->lend_node);
    tide_list_init(&job->bound);
    tide_heap_node_init(&job->timer);
    HASH_ADD_KEYPTR(hh, core->jobs, job->id, strlen(job->id), job);
    /* Keep jobs_by_seq ascending; restores arrive in key order, submits at the end: O(1) usually. */
    pos = core->jobs_by_seq.prev;
    while (pos != &core->jobs_by_seq && tide_list_entry(pos, tide_job_t, all_node)->seq > seq)
        pos = pos->prev;
    tide_list__insert(&job->all_node, pos, pos->next);
    core->job_counts[TIDE_JOB_PENDING]++;
    return job;
}

void tide__job_rearm(tide_core_t *core, tide_job_t *job)
{
    int64_t at = INT64_MAX;

    if (job->state == TIDE_JOB_RUNNING) {
        if (job->time_limit_at && job->time_limit_at < at)
            at = job->time_limit_at;
        if (job->reconcile_deadline && job->reconcile_deadline < at)
            at = job->reconcile_deadline;
        if (job->launch_deadline && job->launch_deadline < at)
            at = job->launch_deadline;
        if (job->ckpt_deadline_at && job->ckpt_deadline_at < at)
            at = job->ckpt_deadline_at;
        if (job->preempt_at && job->preempt_at < at)
            at = job->preempt_at;
        if (job->flush_check_at && job->flush_check_at < at)
            at = job->flush_check_at;
        if (job->straggler_check_at && job->straggler_check_at < at)
            at = job->straggler_check_at;
        if (job->steal_park_at && job->steal_park_at < at)
            at = job->steal_park_at;
        if (job->resize_at && job->resize_at < at)
            at = job->resize_at;
        if (job->resize_check_at && job->resize_check_at < at)
            at = job->resize_check_at;
        if (job->burst_check_at && job->burst_check_at < at)
            at = job->burst_check_at;
        if (job->hang_check_at && job->hang_check_at < at)
            at = job->hang_check_at;
        if (job->ckpt_cadence_at && job->ckpt_cadence_at < at)
            at = job->ckpt_cadence_at;
    } else if (job->state == TIDE_JOB_PENDING) {
        if (job->reconcile_deadline)
            at = job->reconcile_deadline; /* restored stopping ranks whose workers have not come back */
        if (job->restart_at && job->restart_at < at)
            at = job->restart_at; /* its restart backoff ends */
    } else if (is_final(job->state) && job->prune_at) {
        at = job->prune_at;
    }
    if (at != INT64_MAX && core->ticking && at <= core->now_mono)
        at = core->now_mono + 1; /* never fire twice in one tick: a timer always makes progress */
    if (at == INT64_MAX)
        tide_heap_remove(&core->timers, &job->timer);
    else
        tide_heap_set(&core->timers, &job->timer, at);
}

static void emit_launch(tide_core_t *core, tide_job_t *job, int32_t rank)
{
    tide__ckpt_holder_add(job, job->ranks[rank].worker->id); /* its TIDE_CKPT_DIR is there from now on */
    tide__act_launch(core, job, job->ranks[rank].worker, rank);
}

static void emit_stop(tide_core_t *core, tide_job_t *job, int32_t rank, const char *why)
{
    tide_job_rank_t *slot = &job->ranks[rank];
    tide_action_t *a = tide__act(core, TIDE_ACT_STOP);

    a->job = job;
    a->worker = slot->worker;
    a->conn = slot->worker->conn;
    a->job_id = job->id;
    a->generation = job->generation;
    a->rank = rank;
    a->grace_ms = core->cfg.stop_grace_ms;
    if (job->failing && core->cfg.failure_stop_grace_ms < a->grace_ms)
        a->grace_ms = core->cfg.failure_stop_grace_ms; /* a failed generation: nothing to save, waiting costs */
    a->text = tide__keep(core, why);
}

/* Stops every live rank of the current generation, its lent (burst) slots included. Workers whose rank
 * never launched, or that are dead, are released now; the others when their rank's exit is reported. A
 * worker that lost its stream but may still run the rank stays bound too: its re-registration stops the
 * rank (it is stale by then) or reports its exit, and its death releases it — so the job never runs two
 * generations at once. */
static void stop_ranks(tide_core_t *core, tide_job_t *job, const char *why)
{
    for (int32_t r = 0; r < job->n_ranks + job->max_lent; r++) {
        tide_job_rank_t *slot = &job->ranks[r];
        tide_worker_t *w = slot->worker;
        if (!w || slot->lent_stopping)
            continue; /* a lent slot taken back was told to stop: its exit releases it */
        if (slot->state == TIDE_RANK_LAUNCHED && tide__unlaunch(core, job, r)) {
            /* Launched in this same call: the LAUNCH never left, nothing runs there; release now (a STOP
             * the worker would ignore would keep it bound, and the shell would read freed ranks). */
            slot->worker = NULL;
            if (w->job == job && w->rank == r)
                tide__worker_release(core, w);
            continue;
        }
        if (slot->state == TIDE_RANK_LAUNCHED || slot->state == TIDE_RANK_RUNNING) {
            if (w->connected) {
                emit_stop(core, job, r, why);
                continue; /* stays bound until the exit arrives */
            }
            if (w->state != TIDE_WORKER_DEAD && w->job == job && w->rank == r)
                continue;
        }
        slot->worker = NULL;
        if (w->job == job && w->rank == r)
            tide__worker_release(core, w);
    }
    tide__burst_generation_end(core, job);
}

double tide_core_job_gpu_seconds(const tide_core_t *core, const tide_job_t *job)
{
    double s = job->gpu_seconds;

    if (job->gen_start_mono && job->n_ranks > 0 && core->now_mono > job->gen_start_mono)
        s += (double)job->n_ranks * (double)(core->now_mono - job->gen_start_mono) / 1e3;
    return s;
}

static void account_generation(tide_core_t *core, tide_job_t *job)
{
    if (job->gen_start_mono && job->n_ranks > 0 && core->now_mono > job->gen_start_mono)
        job->gpu_seconds += (double)job->n_ranks * (double)(core->now_mono - job->gen_start_mono) / 1e3;
    job->gen_start_mono = 0;
}

void tide__job_finish(tide_core_t *core, tide_job_t *job, tide_job_state_t st)
{
    static const char *types[6] = {"", "", "", "job.succeeded", "job.failed", "job.cancelled"};

    if (is_final(job->state))
        return;
    if (job->state == TIDE_JOB_PENDING)
        tide__queue_remove(core, job);
    if (job->state == TIDE_JOB_RUNNING) {
        account_generation(core, job);
        stop_ranks(core, job, tide_job_state_name(st));
    }
    tide__burst_job_end(core, job);
    tide__ckpt_request_end(core, job, "the job ended");
    tide__resize_abort(core, job, "the job ended");
    tide__tasks_free(job);
    tide__history_end(core, job, NULL, job->message ? job->message : tide_job_state_name(st));
    job->restart_at = job->restart_at_ms = 0;
    tide__job_set_state(core, job, st);
    job->end_ms = core->now_wall;
    job->time_limit_at = job->launch_deadline = job->reconcile_deadline = 0;
    job->prune_at = core->now_mono + core->cfg.retention_ms;
    tide__job_rearm(core, job);
    /* After the STOPs: a worker whose rank is still stopping drops the copies once it exited. */
    tide__ckpt_holders_forget(core, job);
    tide__event(core, types[st], job, NULL, "job %s %s: %s", job->id, tide_job_state_name(st),
                job->message ? job->message : "");
    core->need_schedule = true;
}

static void rollback(tide_core_t *core, tide_job_t *job, const char *why)
{
    account_generation(core, job);
    /* A resize goes on with the next placement: one waiting for its checkpoint stops now with the
     * generation; one that was starting starts again. */
    tide__resize_stopping(core, job);
    tide__ckpt_request_end(core, job, "the generation was rolled back");
    stop_ranks(core, job, "generation rolled back");
    for (int32_t r = 0; r < job->n_ranks + job->max_lent; r++)
        job->ranks[r].worker = NULL; /* bound workers are released by their exits */
    job->rollbacks++;
    {
        char *end = tide_xasprintf("rolled back: %s", why);
        tide__history_end(core, job, "rolled_back", end);
        free(end);
    }
    if (job->rollbacks > core->cfg.max_rollbacks) {
        tide__job_set_message(core, job, "generation %d failed to start %d times; last: %s",
                              job->generation, job->rollbacks, why);
        tide__job_finish(core, job, TIDE_JOB_FAILED);
        return;
    }
    free_ranks(job);
    job->master_port = 0;
    job->time_limit_at = job->launch_deadline = job->reconcile_deadline = 0;
    tide__job_set_state(core, job, TIDE_JOB_PENDING);
    tide__job_set_message(core, job, "generation %d rolled back (%s); queued again", job->generation,
                          why);
    tide__event(core, "job.rolled_back", job, NULL, "job %s generation %d rolled back: %s", job->id,
                job->generation, why);
    tide__queue_push(core, job, true);
    tide__job_rearm(core, job);
}

static void generation_lost(tide_core_t *core, tide_job_t *job, int32_t rank, tide_worker_t *w,
                            tide_failure_kind_t kind, const char *why, bool started);

void tide__job_rank_lost(tide_core_t *core, tide_job_t *job, int32_t rank, tide_failure_kind_t kind, const char *why)
{
    tide_job_rank_t *slot = &job->ranks[rank];
    tide_worker_t *w = slot->worker;
    bool started = fully_started(job);

    tide__slot_set(core, job, rank, TIDE_RANK_LOST);
    slot->worker = NULL;
    if (w && w->job == job && w->rank == rank)
        tide__worker_release(core, w);
    tide__tasks_rank_gone(core, job, rank, true); /* orphans until the generation ends */
    generation_lost(core, job, rank, w, kind, why, started);
}

/* The generation failed with rank (lost, or collateral of a lost peer; w its worker or NULL): rolled back
 * when it had not started, else restarted within the job's policy, else the job fails. */
static void generation_lost(tide_core_t *core, tide_job_t *job, int32_t rank, tide_worker_t *w,
                            tide_failure_kind_t kind, const char *why, bool started)
{
    char *text;

    if (!started) {
        rollback(core, job, why);
        return;
    }
    text = tide_xasprintf("rank %d lost (%s)", rank, why);
    tide__restart_failure(core, job, kind, rank, w, text);
    free(text);
}

/* The cause of the generation a requeue ends, for the history: what its caller said, or its event. */
static const char *requeue_cause(const tide_job_t *job, const char *event)
{
    if (strcmp(event, "job.preempted") == 0)
        return "preempted";
    if (strcmp(event, "job.resize_stopping") == 0 && job->resize.state != TIDE_RESIZE_NONE)
        return tide__history_cause(tide_resize_reason_name(job->resize.reason));
    return "requeued";
}

void tide__job_requeue(tide_core_t *core, tide_job_t *job, const char *event, const char *fmt, ...)
{
    char *text;
    va_list ap;

    va_start(ap, fmt);
    text = tide_xvasprintf(fmt, ap);
    va_end(ap);
    tide__history_end(core, job, requeue_cause(job, event), text);
    account_generation(core, job);
    tide__resize_stopping(core, job); /* a resize waiting for its checkpoint goes ahead with this stop */
    tide__ckpt_request_end(core, job, "the job was queued again");
    stop_ranks(core, job, text);
    for (int32_t r = 0; r < job->n_ranks + job->max_lent; r++)
        job->ranks[r].worker = NULL; /* bound workers are released by their exits */
    free_ranks(job);
    job->master_port = 0;
    job->time_limit_at = job->launch_deadline = job->reconcile_deadline = 0;
    job->eff_priority = job->spec.priority;
    tide__job_set_state(core, job, TIDE_JOB_PENDING);
    free(job->message);
    job->message = text;
    tide__persist_job(core, job);
    tide__event(core, event, job, NULL, "job %s generation %d: %s", job->id, job->generation, text);
    tide__queue_push(core, job, true);
    tide__job_rearm(core, job);
}

void tide__job_start_generation(tide_core_t *core, tide_job_t *job, tide_worker_t **ws, int32_t n)
{
    int32_t group = -1, local = 0, first_of_group = 0;

    free_ranks(job);
    job->generation++;
    job->max_lent = tide__burst_slots(job, n);
    job->ranks = tide_xcalloc((size_t)n + (size_t)job->max_lent, sizeof(*job->ranks));
    job->n_ranks = n;
    for (int32_t r = 0; r < n; r++) {
        tide_job_rank_t *slot = &job->ranks[r];
        if (r == 0 || ws[r]->node != ws[r - 1]->node) {
            for (int32_t k = first_of_group; k < r; k++)
                job->ranks[k].local_world_size = local;
            group++;
            local = 0;
            first_of_group = r;
        }
        slot->worker_id = tide_xstrdup(ws[r]->id);
        slot->worker = ws[r];
        slot->group_rank = group;
        slot->local_rank = local++;
        slot->state = TIDE_RANK_ASSIGNED;
        slot->progress.step = -1;
    }
    job->ranks_unstarted = n;
    for (int32_t k = first_of_group; k < n; k++)
        job->ranks[k].local_world_size = local;
    job->run_priority = job->eff_priority;
    job->recovering = false;
    job->new_arch_ranks = 0;
    for (int32_t r = 0; r < n; r++)
        job->new_arch_ranks += ws[r]->new_arch;
    tide__flush_reset(core, job);
    tide__job_set_state(core, job, TIDE_JOB_RUNNING);
    tide__resize_placed(core, job);
    tide__resize_track(core, job);
    for (int32_t r = 0; r < n; r++)
        tide__worker_assign(core, ws[r], job, r);
    free(job->master_addr);
    job->master_addr = tide_xstrdup(ws[0]->address ? ws[0]->address : "");
    job->master_port = 0;
    if (!job->start_ms)
        job->start_ms = core->now_wall;
    job->gen_start_ms = core->now_wall;
    job->gen_start_mono = core->now_mono;
    job->time_limit_at = job->spec.time_limit_s ? core->now_mono + job->spec.time_limit_s * 1000 : 0;
    job->launch_deadline = core->now_mono + core->cfg.launch_timeout_ms;
    job->burst_share = tide__job_burst_share(core, job);
    core->burst_gpus += job->burst_share;
    tide__reserve_update(core);
    for (int32_t r = 0; r < n; r++) {
        tide_worker_t *m = tide_core_mirror_peer(core, job, r);
        job->ranks[r].mirror_id = m ? tide_xstrdup(m->id) : NULL;
        tide__ckpt_holder_add(job, job->ranks[r].mirror_id); /* keeps HOT/mirror/JOB for that rank */
    }
    tide__history_begin(core, job);
    tide__job_set_message(core, job, "starting generation %d on %d worker(s)", job->generation, n);
    tide__event(core, "job.started", job, NULL, "job %s generation %d placed on %d worker(s), rank 0 on %s",
                job->id, job->generation, n, ws[0]->id);
    emit_launch(core, job, 0);
    tide__job_rearm(core, job);
}

/* --- events --- */

/* Appends pool to the ", "-separated list in known (cap bytes) unless it is already an entry of it
 * (a whole entry: "train" is not "train-critical"). */
static void known_add(char *known, size_t cap, size_t *n, const char *pool)
{
    size_t len = strlen(pool);

    for (const char *p = known; (p = strstr(p, pool)); p++) {
        if ((p == known || p[-1] == ' ') && (p[len] == ',' || p[len] == '\0'))
            return;
    }
    if (*n < cap - 1)
        *n += (size_t)snprintf(known + *n, cap - *n, "%s%s", *n ? ", " : "", pool);
}

/* A named pool must be one the operator configured or a worker carries; a pool dedicated to a class
 * takes only that class's jobs. */
static int check_pool(const tide_core_t *core, const tide_job_spec_t *spec, tide_error_t *err)
{
    const tide_list_t *pos;
    char known[256];
    size_t n = 0;
    bool found = false;

    if (!spec->pool || !spec->pool[0])
        return 0;
    known[0] = '\0';
    for (int32_t i = 0; i < core->cfg.n_pools; i++) {
        const struct tide_pool_config *p = &core->cfg.pools[i];
        if (strcmp(p->name, spec->pool) == 0) {
            if (p->dedicated >= 0 && p->dedicated != (int32_t)spec->priority) {
                tide_errprintf(err, "pool %s is dedicated to %s jobs; this job is %s", p->name,
                               tide_prio_name((tide_prio_t)p->dedicated), tide_prio_name(spec->priority));
                return -EINVAL;
            }
            return 0;
        }
        known_add(known, sizeof(known), &n, p->name);
    }
    tide_list_for_each(pos, &core->shape_list) {
        const tide_shape_t *s = tide_list_entry(pos, tide_shape_t, link);
        if (strcmp(s->pool, spec->pool) == 0)
            found = true;
        known_add(known, sizeof(known), &n, s->pool);
    }
    if (found)
        return 0;
    tide_errprintf(err, "pool \"%s\" is unknown: no worker carries it and the scheduler names no such pool (known: %s)",
                   spec->pool, known[0] ? known : "none yet");
    return -EINVAL;
}

int tide_core_job_submit(tide_core_t *core, const tide_job_spec_t *spec, tide_job_t **out,
                         tide_error_t *err)
{
    tide_job_t *job;
    int rc = tide_job_spec_validate(spec, err);

    if (rc < 0)
        return rc;
    if ((rc = check_pool(core, spec, err)) < 0)
        return rc;
    job = job_new(core, core->next_seq++, NULL, spec);
    job->submit_ms = core->now_wall;
    tide__persist_job(core, job);
    tide__act(core, TIDE_ACT_PERSIST_META);
    tide__job_set_message(core, job, "queued");
    tide__event(core, "job.submitted", job, NULL, "job %s (%s) submitted: %d..%d workers, %s", job->id,
                job->spec.name, job->spec.min_workers, job->spec.max_workers,
                tide_prio_name(job->spec.priority));
    tide__queue_push(core, job, false);
    tide__schedule(core);
    *out = job;
    return 0;
}

int tide_core_job_cancel(tide_core_t *core, const char *id, tide_job_t **out, tide_error_t *err)
{
    tide_job_t *job = tide_core_job_find(core, id);

    if (!job) {
        tide_errprintf(err, "job %s not found", id);
        return -ENOENT;
    }
    if (is_final(job->state)) {
        tide_errprintf(err, "job %s already ended: %s", id, tide_job_state_name(job->state));
        return -EALREADY;
    }
    tide__job_set_message(core, job, "cancelled by request");
    tide__job_finish(core, job, TIDE_JOB_CANCELLED);
    tide__schedule(core);
    *out = job;
    return 0;
}

void tide__rank_started(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                        int32_t rank, int32_t pid, int32_t master_port)
{
    tide_job_t *job = tide_core_job_find(core, job_id);
    tide_job_rank_t *slot;

    if (tide__lent_slot_of(job, w, generation, rank)) {
        tide__ckpt_holder_add(job, w->id); /* a lent (burst) rank gets TIDE_CKPT_DIR too */
        tide__lent_started(core, job, rank, pid);
        return;
    }
    if (!job || job->state != TIDE_JOB_RUNNING || job->generation != generation || rank < 0 ||
        rank >= job->n_ranks || job->ranks[rank].worker != w) {
        /* A rank the core no longer wants (cancelled, rolled back, stale): make sure it stops. */
        bool stopping = job && w->job == job && w->generation == generation && w->rank == rank;
        if (!stopping)
            tide__stale_add(core, w, job_id, generation, rank, "rank unknown to the scheduler");
        return;
    }
    slot = &job->ranks[rank];
    if (slot->state == TIDE_RANK_RUNNING) {
        slot->pid = pid; /* adopted after a restart */
        return;
    }
    if (slot->state == TIDE_RANK_EXITED || slot->state == TIDE_RANK_LOST)
        return;
    if (rank == 0 && (master_port < 1 || master_port > 65535)) {
        char *why = tide_xasprintf("rank 0 on %s reported MASTER_PORT %d, not a TCP port", w->id,
                                   master_port);
        slot->pid = pid;
        tide__slot_set(core, job, rank, TIDE_RANK_RUNNING);
        rollback(core, job, why);
        free(why);
        return;
    }
    slot->pid = pid;
    tide__event(core, "rank.started", job, w, "job %s rank %d started on %s (pid %d)", job->id, rank,
                w->id, pid);
    if (rank == 0)
        job->master_port = master_port;
    tide__slot_set(core, job, rank, TIDE_RANK_RUNNING);
    if (rank == 0 && job->state == TIDE_JOB_RUNNING) {
        for (int32_t r = 1; r < job->n_ranks; r++) {
            tide_job_rank_t *s = &job->ranks[r];
            if (s->state == TIDE_RANK_ASSIGNED && s->worker && s->worker->connected && !s->awaiting)
                emit_launch(core, job, r);
        }
    }
}

/* Another rank of the generation whose worker is gone or going (lost, or its worker SUSPECT, DEAD or
 * without its stream), or -1. O(ranks): only on a failing exit. */
static int32_t peer_down(const tide_job_t *job, int32_t rank)
{
    for (int32_t r = 0; r < job->n_ranks; r++) {
        const tide_job_rank_t *s = &job->ranks[r];
        if (r == rank)
            continue;
        if (s->state == TIDE_RANK_LOST ||
            (s->worker && (s->state == TIDE_RANK_RUNNING || s->state == TIDE_RANK_LAUNCHED) &&
             (!s->worker->connected || s->worker->state == TIDE_WORKER_SUSPECT ||
              s->worker->state == TIDE_WORKER_DEAD)))
            return r;
    }
    return -1;
}

void tide__rank_exited(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                       int32_t rank, int32_t exit_code, const char *error)
{
    tide_job_t *job = tide_core_job_find(core, job_id);
    tide_job_rank_t *slot;

    if (tide__lent_slot_of(job, w, generation, rank)) {
        tide__ckpt_holder_add(job, w->id); /* one that ended before its start was reported */
        tide__lent_exited(core, job, rank, exit_code, error);
        return;
    }
    if (!job || job->state != TIDE_JOB_RUNNING || job->generation != generation || rank < 0 ||
        rank >= job->n_ranks || job->ranks[rank].worker != w) {
        /* The exit of a rank that was being stopped (ended job, rolled-back generation), or of a
         * stale one. An ended job's record keeps how its ranks ended. */
        if (job && is_final(job->state) && job->generation == generation && rank >= 0 &&
            rank < job->n_ranks && job->ranks[rank].worker_id &&
            strcmp(job->ranks[rank].worker_id, w->id) == 0 &&
            job->ranks[rank].state != TIDE_RANK_EXITED && job->ranks[rank].state != TIDE_RANK_LOST) {
            job->ranks[rank].state = TIDE_RANK_EXITED;
            job->ranks[rank].exit_code = exit_code;
            tide__persist_job(core, job);
        }
        if (w->job && job == w->job && w->generation == generation && w->rank == rank)
            tide__worker_release(core, w);
        else
            tide__stale_drop(core, w, job_id, generation, rank);
        return;
    }
    slot = &job->ranks[rank];
    if (exit_code != 0) {
        int32_t peer = peer_down(job, rank);
        if (peer >= 0) {
            /* Collateral: its collective lost a peer whose worker is gone or going (an MPI job's mpirun
             * kills every rank when one node dies, before the worker's death is even detected). The
             * generation failed with that peer: a loss, not the job's own failure. The peer's worker
             * stays bound until its death or return (never two generations at once). */
            bool started = fully_started(job);
            char *why = tide_xasprintf("rank %d exited with code %d after rank %d's worker %s was lost", rank,
                                       exit_code, peer, job->ranks[peer].worker_id);
            slot->exit_code = exit_code;
            slot->worker = NULL;
            tide__worker_release(core, w);
            tide__event(core, "rank.exited", job, w, "job %s rank %d on %s exited with code %d (its peer rank %d's "
                        "worker is lost)", job->id, rank, w->id, exit_code, peer);
            tide__tasks_rank_gone(core, job, rank, true);
            generation_lost(core, job, peer, job->ranks[peer].worker, TIDE_FAILURE_LOST, why, started);
            /* Only now: its exit must not complete the generation's start first (KB12). A generation queued
             * again or rolled back has no ranks any more; an ended job's record keeps the exit. */
            if (is_final(job->state))
                tide__slot_set(core, job, rank, TIDE_RANK_EXITED);
            free(why);
            return;
        }
    }
    slot->exit_code = exit_code;
    slot->worker = NULL;
    tide__worker_release(core, w);
    tide__event(core, "rank.exited", job, w, "job %s rank %d on %s exited with code %d%s%s", job->id,
                rank, w->id, exit_code, error && error[0] ? ": " : "", error ? error : "");
    if (exit_code != 0) {
        /* A rank on a GPU predicted to fail died with its GPU (a CUDA error after an XID): a loss, not the
         * job's own failure. */
        tide_failure_kind_t kind = w->risk_acted ? TIDE_FAILURE_LOST : TIDE_FAILURE_EXIT;
        bool started = fully_started(job);
        const char *gpu = w->risk_acted ? " (its GPU is predicted to fail)" : "";
        char *why = error && error[0]
                        ? tide_xasprintf("rank %d on %s failed: %s%s", rank, w->id, error, gpu)
                        : tide_xasprintf("rank %d on %s exited with code %d%s", rank, w->id, exit_code, gpu);
        job->exit_code = exit_code;
        if (!started && tide__restart_covers(job, kind))
            rollback(core, job, why); /* the generation never ran: a failed start */
        else
            tide__restart_failure(core, job, kind, rank, w, why);
        /* Only now: its exit must not complete the generation's start first (job.running of a generation that
         * failed); a generation queued again has no ranks any more; an ended job's record keeps the exit. */
        if (is_final(job->state))
            tide__slot_set(core, job, rank, TIDE_RANK_EXITED);
        free(why);
        return;
    }
    tide__slot_set(core, job, rank, TIDE_RANK_EXITED);
    if (rank == 0 && job->high_load)
        tide_core_job_load_phase(core, job, false); /* nobody reports the phase any more */
    if (job->ranks_exited == job->n_ranks) {
        job->exit_code = 0;
        tide__job_set_message(core, job, "all %d rank(s) exited with code 0", job->n_ranks);
        tide__job_finish(core, job, TIDE_JOB_SUCCEEDED);
        return;
    }
    tide__tasks_rank_gone(core, job, rank, false); /* it may have run what it held: no rerun */
}

void tide_core_rank_started(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                            int32_t rank, int32_t pid, int32_t master_port)
{
    tide__rank_started(core, w, job_id, generation, rank, pid, master_port);
    tide__schedule(core);
}

void tide_core_rank_exited(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                           int32_t rank, int32_t exit_code, const char *error)
{
    tide__rank_exited(core, w, job_id, generation, rank, exit_code, error);
    tide__schedule(core);
}

static void drop_job(tide_core_t *core, tide_job_t *job)
{
    tide_action_t *a;

    if (!tide_list_empty(&job->bound)) {
        /* A worker still stops one of its ranks: keep the job until that exit (or the worker's
         * death) releases it. */
        job->prune_at = core->now_mono + 60000;
        tide__job_rearm(core, job);
        return;
    }
    a = tide__act(core, TIDE_ACT_DELETE_JOB);

    a->job = job;
    a->job_id = job->id;
    job->dropped = true;
    tide_heap_remove(&core->timers, &job->timer);
    HASH_DEL(core->jobs, job);
    core->job_counts[job->state]--;
    tide_list_remove(&job->all_node);
    tide_list_push_back(&core->graveyard, &job->all_node);
}

void tide__job_on_timer(tide_core_t *core, tide_job_t *job)
{
    int64_t now = core->now_mono;

    if (is_final(job->state)) {
        if (job->prune_at && now >= job->prune_at) {
            drop_job(core, job);
            return;
        }
    } else if (job->state == TIDE_JOB_PENDING) {
        if (job->restart_at && now >= job->restart_at)
            tide__restart_due(core, job);
        if (job->reconcile_deadline && now >= job->reconcile_deadline) {
            /* Workers of an earlier generation that did not re-register after the restart are dead:
             * the ranks they ran are gone with them, and the job may start again. */
            tide_list_t *pos, *tmp;
            job->reconcile_deadline = 0;
            tide_list_for_each_safe(pos, tmp, &job->bound) {
                tide_worker_t *w = tide_list_entry(pos, tide_worker_t, bound_node);
                if (w->connected)
                    continue;
                if (w->state != TIDE_WORKER_DEAD) {
                    tide__worker_set_state(core, w, TIDE_WORKER_DEAD);
                    tide__event(core, "worker.dead", job, w,
                                "worker %s did not re-register within %llds of the scheduler restart", w->id,
                                (long long)(core->cfg.reconnect_deadline_ms / 1000));
                }
                tide__worker_release(core, w);
            }
        }
    } else if (job->state == TIDE_JOB_RUNNING) {
        if (job->time_limit_at && now >= job->time_limit_at) {
            tide__job_set_message(core, job, "time limit of %llds reached",
                                  (long long)job->spec.time_limit_s);
            tide__job_finish(core, job, TIDE_JOB_FAILED);
            return;
        }
        if (job->reconcile_deadline && now >= job->reconcile_deadline) {
            job->reconcile_deadline = 0;
            for (int32_t r = 0; r < job->n_ranks + job->max_lent && job->state == TIDE_JOB_RUNNING; r++) {
                tide_job_rank_t *slot = &job->ranks[r];
                tide_worker_t *w = slot->worker;
                char *why;
                if (!slot->awaiting)
                    continue;
                slot->awaiting = false;
                job->awaiting--;
                why = tide_xasprintf("worker %s did not re-register within %llds of the scheduler restart",
                                     slot->worker_id, (long long)(core->cfg.reconnect_deadline_ms / 1000));
                if (w && !w->connected && w->state != TIDE_WORKER_DEAD) {
                    tide__worker_set_state(core, w, TIDE_WORKER_DEAD);
                    tide__event(core, "worker.dead", job, w, "%s", why);
                }
                if (r < job->n_ranks)
                    tide__job_rank_lost(core, job, r, TIDE_FAILURE_LOST, why);
                else
                    tide__lent_lost(core, job, r, why); /* a restored lent slot (tide__lent_restore) */
                free(why);
            }
            if (job->state != TIDE_JOB_RUNNING)
                return;
            tide__resize_poke(core, job); /* only lent slots were written off: it runs on */
        }
        if (job->launch_deadline && now >= job->launch_deadline && !fully_started(job)) {
            int32_t r = 0;
            char *why;
            while (r < job->n_ranks && job->ranks[r].state != TIDE_RANK_ASSIGNED &&
                   job->ranks[r].state != TIDE_RANK_LAUNCHED)
                r++;
            why = tide_xasprintf("rank %d on %s did not start within %llds", r,
                                 r < job->n_ranks ? job->ranks[r].worker_id : "?",
                                 (long long)(core->cfg.launch_timeout_ms / 1000));
            rollback(core, job, why);
            free(why);
            return;
        }
        if (job->ckpt_deadline_at && now >= job->ckpt_deadline_at) {
            tide__cadence_missed(core, job); /* when the cadence asked: not again in this generation */
            tide__ckpt_request_end(core, job, "its deadline passed");
        }
        if (job->ckpt_cadence_at && now >= job->ckpt_cadence_at)
            tide__cadence_due(core, job); /* may ask for a checkpoint; sets the next look */
        if (job->preempt_at && now >= job->preempt_at) {
            tide__preempt_yield(core, job, "its checkpoint grace ended");
            return;
        }
        if (job->flush_check_at && now >= job->flush_check_at)
            tide__flush_check(core, job); /* sets the next check, or clears it */
        if (job->straggler_check_at && now >= job->straggler_check_at)
            tide__straggler_check(core, job); /* sets the next check */
        if (job->steal_park_at && now >= job->steal_park_at)
            tide__tasks_park_expire(core, job); /* sets the next deadline */
        if ((job->resize_at && now >= job->resize_at) || (job->resize_check_at && now >= job->resize_check_at)) {
            tide__resize_on_timer(core, job); /* may queue the job again */
            if (job->state != TIDE_JOB_RUNNING)
                return;
        }
        if (job->burst_check_at && now >= job->burst_check_at)
            tide__burst_on_timer(core, job); /* sets the next check */
        if (job->hang_check_at && now >= job->hang_check_at) {
            tide__hang_check(core, job); /* sets the next check, or stops the generation */
            if (job->state != TIDE_JOB_RUNNING)
                return;
        }
        /* A deadline that passed without cause to act is over: never re-arm at a time already past. */
        if (job->launch_deadline && now >= job->launch_deadline)
            job->launch_deadline = 0;
    }
    tide__job_rearm(core, job);
}

/* --- queries --- */

tide_job_t *tide_core_job_find(const tide_core_t *core, const char *id)
{
    tide_job_t *job;

    HASH_FIND_STR(core->jobs, id, job);
    return job;
}

tide_job_t *tide_core_job_next(const tide_core_t *core, const tide_job_t *prev)
{
    const tide_list_t *pos = prev ? prev->all_node.next : core->jobs_by_seq.next;
    return pos == &core->jobs_by_seq ? NULL : tide_list_entry(pos, tide_job_t, all_node);
}

void tide_core_job_counts(const tide_core_t *core, int counts[6])
{
    memcpy(counts, core->job_counts, sizeof(core->job_counts));
}

/* --- restore --- */

void tide_core_restore_meta(tide_core_t *core, uint64_t next_seq)
{
    if (next_seq > core->next_seq)
        core->next_seq = next_seq;
}

int tide_core_job_restore(tide_core_t *core, const tide_job_record_t *rec, tide_error_t *err)
{
    char *end = NULL;
    unsigned long long seq;
    tide_job_t *job;
    int rc;

    if (!rec->id || !rec->id[0] || (seq = strtoull(rec->id, &end, 10), *end != '\0') || seq == 0) {
        tide_errprintf(err, "job record id \"%s\" is not a job number", rec->id ? rec->id : "");
        return -EINVAL;
    }
    if (tide_core_job_find(core, rec->id)) {
        tide_errprintf(err, "job %s restored twice", rec->id);
        return -EEXIST;
    }
    if ((rc = tide_job_spec_validate(rec->spec, err)) < 0)
        return rc;
    if (rec->state < TIDE_JOB_PENDING || rec->state > TIDE_JOB_CANCELLED) {
        tide_errprintf(err, "job %s has state %d", rec->id, (int)rec->state);
        return -EINVAL;
    }
    core->restoring = true;
    job = job_new(core, seq, rec->id, rec->spec);
    if (seq >= core->next_seq)
        core->next_seq = seq + 1;
    job->generation = rec->generation;
    job->message = tide_xstrdup(rec->message ? rec->message : "");
    job->submit_ms = rec->submit_ms;
    job->start_ms = rec->start_ms;
    job->end_ms = rec->end_ms;
    job->gen_start_ms = rec->gen_start_ms;
    job->gpu_seconds = rec->gpu_seconds;
    job->exit_code = rec->exit_code;
    job->failed_rank = rec->failed_rank;
    job->master_addr = tide_xstrdup(rec->master_addr ? rec->master_addr : "");
    job->master_port = rec->master_port;
    if (rec->last_ckpt)
        tide__ckpt_copy(&job->last_ckpt, rec->last_ckpt);
    /* Progress is not kept: until its ranks report again, assume they may checkpoint (a resize by tide
     * waits up to the dwell for them to report, so it can ask for a checkpoint first). */
    job->sdk_seen = true;
    if (rec->durable_ckpt)
        tide__ckpt_copy(&job->durable_ckpt, rec->durable_ckpt);
    job->flushed_bytes = rec->flushed_bytes;
    job->flushes = rec->flushes;
    job->preemptions = rec->preemptions;
    job->resizes = rec->resizes;
    job->restarts = rec->restarts > 0 ? rec->restarts : 0;
    job->restarts_in_row = rec->restarts_in_row > 0 ? rec->restarts_in_row : 0;
    tide__history_restore(job, rec->generations, rec->n_generations);
    if (rec->n_restore_sources > 0 && rec->n_restore_sources % 2 == 0 && rec->restore_sources) {
        job->n_prev_src = rec->n_restore_sources / 2;
        job->prev_src = tide_xcalloc((size_t)rec->n_restore_sources, sizeof(*job->prev_src));
        for (int32_t i = 0; i < rec->n_restore_sources; i++)
            job->prev_src[i] = rec->restore_sources[i] && rec->restore_sources[i][0]
                                   ? tide_xstrdup(rec->restore_sources[i])
                                   : NULL;
    }
    for (int32_t i = 0; i < rec->n_ckpt_holders && rec->ckpt_holders; i++)
        tide__ckpt_holder_add(job, rec->ckpt_holders[i]);
    if (rec->state == TIDE_JOB_PENDING) {
        /* A restart keeps its place and its right to the spares, and a backoff its end (the monotonic clock
         * started again with this process: the wall-clock moment is what was kept). */
        job->recovering = rec->recovering || rec->restart_at_ms > 0;
        if (rec->restart_at_ms > 0) {
            int64_t left = rec->restart_at_ms - core->now_wall;
            job->restart_at = core->now_mono + (left > 0 ? left : 0);
            if (job->restart_at <= 0)
                job->restart_at = 1;
            job->restart_at_ms = rec->restart_at_ms;
        }
    }
    if (rec->target_workers >= rec->spec->min_workers && rec->target_workers <= rec->spec->max_workers)
        job->target_workers = rec->target_workers;
    if (rec->n_stopping > 0 && rec->stopping_workers && rec->stopping_generations && rec->stopping_ranks &&
        !is_final(rec->state)) {
        job->restore_stopping = tide_xcalloc((size_t)rec->n_stopping, sizeof(*job->restore_stopping));
        for (int32_t i = 0; i < rec->n_stopping; i++) {
            if (!rec->stopping_workers[i] || !rec->stopping_workers[i][0])
                continue;
            job->restore_stopping[job->n_restore_stopping].worker_id = tide_xstrdup(rec->stopping_workers[i]);
            job->restore_stopping[job->n_restore_stopping].generation = rec->stopping_generations[i];
            job->restore_stopping[job->n_restore_stopping].rank = rec->stopping_ranks[i];
            job->n_restore_stopping++;
        }
    }
    /* The class it runs with, or, pending, the class aging raised it to (its aging clock restarts). */
    if (rec->run_class >= 1 && rec->run_class <= TIDE_PRIO_COUNT && rec->run_class - 1 >= (int32_t)rec->spec->priority &&
        (rec->state == TIDE_JOB_RUNNING || rec->state == TIDE_JOB_PENDING))
        job->run_priority = job->eff_priority = (tide_prio_t)(rec->run_class - 1);
    core->job_counts[TIDE_JOB_PENDING]--;
    core->job_counts[rec->state]++;
    job->state = rec->state;

    if (is_final(job->state)) {
        int64_t age = core->now_wall - job->end_ms;
        job->prune_at = core->now_mono + (core->cfg.retention_ms > age ? core->cfg.retention_ms - age : 0);
    } else if (job->state == TIDE_JOB_RUNNING && rec->n_workers == 0) {
        /* A running job without ranks cannot be reconciled: queue it again. */
        core->job_counts[TIDE_JOB_RUNNING]--;
        core->job_counts[TIDE_JOB_PENDING]++;
        job->state = TIDE_JOB_PENDING;
    } else if (job->state == TIDE_JOB_RUNNING) {
        int64_t ran = core->now_wall - job->gen_start_ms;
        job->max_lent = tide__burst_slots(job, rec->n_workers);
        job->ranks = tide_xcalloc((size_t)(rec->n_workers ? rec->n_workers : 1) + (size_t)job->max_lent,
                                  sizeof(*job->ranks));
        job->n_ranks = rec->n_workers;
        job->gen_start_mono = core->now_mono - (ran > 0 ? ran : 0);
        job->stable_since = job->gen_start_mono ? job->gen_start_mono : 1; /* its generation ran since then */
        if (job->spec.time_limit_s)
            job->time_limit_at = job->gen_start_mono + job->spec.time_limit_s * 1000;
        for (int32_t r = 0; r < rec->n_workers; r++) {
            tide_job_rank_t *slot = &job->ranks[r];
            tide_rank_state_t st = rec->rank_states ? rec->rank_states[r] : TIDE_RANK_RUNNING;
            tide_worker_t *w;
            slot->progress.step = -1;
            slot->worker_id = tide_xstrdup(rec->worker_ids[r]);
            if (rec->rank_mirror_ids && rec->rank_mirror_ids[r] && rec->rank_mirror_ids[r][0])
                slot->mirror_id = tide_xstrdup(rec->rank_mirror_ids[r]);
            slot->exit_code = rec->rank_exit_codes ? rec->rank_exit_codes[r] : 0;
            if (st == TIDE_RANK_EXITED || st == TIDE_RANK_LOST) {
                slot->state = st;
                job->ranks_exited += st == TIDE_RANK_EXITED;
                continue;
            }
            w = tide__worker_get_or_add(core, slot->worker_id);
            if (w->job) {
                /* Two records claim one GPU: only the first keeps it. */
                slot->state = TIDE_RANK_LOST;
                continue;
            }
            slot->state = st;
            job->ranks_running += st == TIDE_RANK_RUNNING;
            job->ranks_unstarted += unstarted(st);
            slot->worker = w;
            slot->awaiting = true;
            job->awaiting++;
            w->job = job;
            w->rank = r;
            w->generation = job->generation;
            w->low = job->run_priority == TIDE_PRIO_LOW;
            core->low_busy += w->low;
            tide_list_push_back(&job->bound, &w->bound_node);
            tide__worker_set_state(core, w, TIDE_WORKER_SUSPECT);
        }
        for (int32_t r = 0; r < job->n_ranks; r++) {
            job->ranks[r].local_rank = rec->rank_local_ranks ? rec->rank_local_ranks[r] : 0;
            job->ranks[r].group_rank = rec->rank_group_ranks ? rec->rank_group_ranks[r] : r;
        }
        for (int32_t r = 0; r < job->n_ranks; r++) {
            int32_t same = 0;
            for (int32_t k = 0; k < job->n_ranks; k++)
                same += job->ranks[k].group_rank == job->ranks[r].group_rank;
            job->ranks[r].local_world_size = same;
        }
        if (!fully_started(job))
            job->launch_deadline = core->now_mono + core->cfg.launch_timeout_ms;
        job->reconcile_deadline = job->awaiting ? core->now_mono + core->cfg.reconnect_deadline_ms : 0;
        if (rec->ckpt_request) {
            int64_t left = rec->ckpt_deadline_ms - core->now_wall;
            job->ckpt_request = rec->ckpt_request;
            job->ckpt_deadline_ms = rec->ckpt_deadline_ms;
            job->ckpt_deadline_at = core->now_mono + (left > 0 ? left : 0);
        }
        tide_list_push_back(&core->running[job->run_priority], &job->run_node);
        job->burst_share = tide__job_burst_share(core, job);
        core->burst_gpus += job->burst_share;
        tide__resize_track(core, job);
        tide__cadence_arm(core, job); /* counts from the restart: at most one interval late */
    }
    tide__job_rearm(core, job);
    return 0;
}

/* Binds the workers a record says still stop a rank of an earlier generation, after every record's
 * running ranks claimed theirs (a worker a running job holds is not taken from it). */
static void restore_stopping(tide_core_t *core, tide_job_t *job)
{
    for (int32_t i = 0; i < job->n_restore_stopping; i++) {
        tide_stop_rec_t *st = &job->restore_stopping[i];
        tide_worker_t *w = tide__worker_get_or_add(core, st->worker_id);
        if (!w->job) {
            w->job = job;
            w->rank = st->rank;
            w->generation = st->generation;
            tide_list_push_back(&job->bound, &w->bound_node);
            if (!w->connected)
                tide__worker_set_state(core, w, TIDE_WORKER_SUSPECT);
            job->reconcile_deadline = core->now_mono + core->cfg.reconnect_deadline_ms;
            if (job->state == TIDE_JOB_RUNNING && st->generation == job->generation &&
                st->rank >= job->n_ranks && st->rank < job->n_ranks + job->max_lent &&
                !job->ranks[st->rank].worker)
                tide__lent_restore(core, job, st->rank, w); /* a lent process may still run there */
        }
        free(st->worker_id);
    }
    free(job->restore_stopping);
    job->restore_stopping = NULL;
    job->n_restore_stopping = 0;
    if (job->state == TIDE_JOB_PENDING)
        tide__job_rearm(core, job);
}

void tide_core_restore_done(tide_core_t *core)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &core->jobs_by_seq)
        restore_stopping(core, tide_list_entry(pos, tide_job_t, all_node));
    tide_list_for_each(pos, &core->jobs_by_seq) {
        tide_job_t *job = tide_list_entry(pos, tide_job_t, all_node);
        if (job->state != TIDE_JOB_PENDING)
            continue;
        if (job->restart_at && job->restart_at > core->now_mono) {
            job->queued_mono = core->now_mono;
            tide__job_rearm(core, job); /* its backoff goes on: queued by its timer (tide__restart_due) */
            continue;
        }
        job->restart_at = job->restart_at_ms = 0;
        tide__queue_push(core, job, job->recovering);
    }
    core->restoring = false;
    core->need_schedule = true;
    tide__schedule(core);
}

/* What the core knows of training progress and checkpoints: per-rank progress from heartbeats,
 * checkpoint reports collected per step until every rank of the generation has one (then it is the
 * job's last checkpoint), and CheckpointJob requests with their deadline. Invariants: reports are
 * collected for one step at a time (ckpt_collect_step), only from the current generation, and the
 * last checkpoint's step only grows within a generation. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

tide_worker_t *tide_core_mirror_peer(tide_core_t *core, const tide_job_t *job, int32_t rank)
{
    const tide_worker_t *own = rank >= 0 && rank < job->n_ranks ? job->ranks[rank].worker : NULL;
    tide_list_t *pos;
    int32_t k = 0;

    if (!own)
        return NULL;
    /* The next rank (cyclically) on another node: one node's loss never takes a rank's hot copy and its mirror. */
    for (int32_t i = 1; i < job->n_ranks; i++) {
        tide_worker_t *w = job->ranks[(rank + i) % job->n_ranks].worker;
        if (w && w->node != own->node && w->connected)
            return w;
    }
    /* One node: a live worker elsewhere (a spare), the first few of the liveness list (O(1) in practice). */
    tide_list_for_each(pos, &core->alive) {
        tide_worker_t *w = tide_list_entry(pos, tide_worker_t, live_node);
        if (w->node != own->node && w->connected && w->address && w->address[0])
            return w;
        if (++k >= 64)
            break;
    }
    return NULL;
}

#define CKPT_DEADLINE_DEFAULT_MS 60000
#define CKPT_DEADLINE_MAX_MS     (24LL * 3600 * 1000)

void tide__ckpt_collect_reset(tide_job_t *job)
{
    job->ckpt_collect_step = -1;
    job->ckpt_collect_n = 0;
    job->ckpt_collect_bytes = 0;
    free(job->ckpt_collect_path);
    free(job->ckpt_collect_sha256);
    job->ckpt_collect_path = job->ckpt_collect_sha256 = NULL;
    for (int32_t r = 0; r < job->n_ranks; r++)
        job->ranks[r].ckpt_reported = false;
}

void tide__ckpt_copy(tide_checkpoint_t *dst, const tide_checkpoint_t *src)
{
    free(dst->path);
    free(dst->sha256);
    *dst = *src;
    dst->path = tide_xstrdup(src->path ? src->path : "");
    dst->sha256 = tide_xstrdup(src->sha256 ? src->sha256 : "");
}

void tide__ckpt_request_end(tide_core_t *core, tide_job_t *job, const char *why)
{
    if (!job->ckpt_request)
        return;
    tide__event(core, "job.checkpoint_missed", job, NULL,
                "checkpoint request %" PRIu64 " of job %s got no complete checkpoint: %s",
                job->ckpt_request, job->id, why);
    job->ckpt_request = 0;
    job->ckpt_deadline_ms = 0;
    job->ckpt_deadline_at = 0;
    tide__persist_job(core, job);
    tide__job_rearm(core, job);
}

/* The rank slot (job, generation, rank) that w runs now, or NULL. */
static tide_job_rank_t *current_slot(tide_worker_t *w, const char *job_id, int32_t generation,
                                     int32_t rank)
{
    tide_job_t *job = w->job;

    if (!job || job->generation != generation || w->generation != generation ||
        w->rank != rank || rank < 0 || rank >= job->n_ranks || strcmp(job->id, job_id) != 0)
        return NULL;
    return &job->ranks[rank];
}

void tide_core_rank_progress(tide_core_t *core, tide_worker_t *w, const char *job_id,
                             int32_t generation, int32_t rank, const tide_trainer_progress_t *p)
{
    tide_job_rank_t *slot = current_slot(w, job_id, generation, rank);

    if (!slot)
        return;
    bool was_high = w->job->high_load; /* the job's last report: a new generation's rank 0 continues it */
    bool advanced = p->sdk && p->step >= 0 && (p->step != slot->progress.step || !slot->advanced_mono);

    w->job->sdk_ranks += (int32_t)p->sdk - (int32_t)slot->progress.sdk;
    slot->progress = *p;
    if (advanced)
        tide__hang_progress(core, w->job, rank); /* O(1): arms the job's hang check once */
    /* Only a report of the load counts: a rank 0 that has not said anything yet (a new generation's,
     * just started) says nothing about the phase. */
    if (rank == 0 && p->load_reported && (p->high_load != was_high || w->job->load_generation != generation))
        tide_core_job_load_phase(core, w->job, p->high_load); /* may lend or take back burst workers */
    if (p->sdk && !w->job->sdk_seen) {
        w->job->sdk_seen = true;
        tide__resize_track(core, w->job); /* it may grow by itself now: O(1), no action */
    }
    if (p->task_seconds > 0)
        tide__straggler_arm(core, w->job); /* no-op once armed */
}

static void complete(tide_core_t *core, tide_job_t *job)
{
    tide_checkpoint_t *c = &job->last_ckpt;
    bool answered;

    free(c->path);
    free(c->sha256);
    c->step = job->ckpt_collect_step;
    c->generation = job->generation;
    c->path = job->ckpt_collect_path ? job->ckpt_collect_path : tide_xstrdup("");
    c->sha256 = job->ckpt_collect_sha256 ? job->ckpt_collect_sha256 : tide_xstrdup("");
    job->ckpt_collect_path = job->ckpt_collect_sha256 = NULL;
    c->bytes = job->ckpt_collect_bytes;
    c->time_ms = core->now_wall;
    c->ranks = job->ckpt_collect_n;
    c->request_id = job->ckpt_request;
    answered = job->ckpt_request != 0;
    tide__ckpt_collect_reset(job);
    tide__event(core, "job.checkpoint", job, NULL,
                "job %s checkpoint of step %" PRId64 " complete (%d ranks, %" PRIu64 " bytes%s%s)",
                job->id, c->step, c->ranks, c->bytes, c->path[0] ? ", " : "", c->path);
    job->ckpt_request = 0;
    job->ckpt_deadline_ms = 0;
    job->ckpt_deadline_at = 0;
    tide__persist_job(core, job);
    tide__cadence_arm(core, job); /* the next one is due an interval from this one (it rearms) */
    tide__flush_on_checkpoint(core, job);
    /* A victim yields on the checkpoint it was asked for, or on any other that completes during its
     * grace (the trainer's own schedule): either bounds what it loses. */
    if (job->preempted_by && job->preempt_at)
        tide__preempt_yield(core, job, answered ? "checkpointed" : "checkpointed on its own schedule");
    else if (job->resize.state == TIDE_RESIZE_CHECKPOINTING && job->resize_at)
        tide__resize_go(core, job, answered ? "checkpointed" : "checkpointed on its own schedule");
}

void tide_core_checkpoint_saved(tide_core_t *core, tide_worker_t *w, const char *job_id,
                                int32_t generation, int32_t rank, int64_t step, const char *path,
                                uint64_t bytes, const char *sha256)
{
    tide_job_rank_t *slot = current_slot(w, job_id, generation, rank);
    tide_job_t *job = w->job;

    if (!slot || job->state != TIDE_JOB_RUNNING || step < 0)
        return;
    if (job->last_ckpt.step >= step && job->last_ckpt.generation == generation)
        return;
    if (step < job->ckpt_collect_step)
        return;
    if (step > job->ckpt_collect_step) {
        tide__ckpt_collect_reset(job);
        job->ckpt_collect_step = step;
    }
    if (slot->ckpt_reported)
        return;
    slot->ckpt_reported = true;
    job->ckpt_collect_n++;
    job->ckpt_collect_bytes += bytes;
    if (path && path[0] && (!job->ckpt_collect_path || rank == 0)) {
        free(job->ckpt_collect_path);
        free(job->ckpt_collect_sha256);
        job->ckpt_collect_path = tide_xstrdup(path);
        job->ckpt_collect_sha256 = tide_xstrdup(sha256 ? sha256 : "");
    }
    if (job->ckpt_collect_n == job->n_ranks) {
        complete(core, job);
        tide__schedule(core);
    }
}

void tide__ckpt_send(tide_core_t *core, tide_job_t *job, int32_t r)
{
    tide_job_rank_t *slot = &job->ranks[r];
    tide_action_t *a;

    if (!job->ckpt_request || !slot->worker || slot->state != TIDE_RANK_RUNNING)
        return;
    a = tide__act(core, TIDE_ACT_CHECKPOINT_NOW);
    a->worker = slot->worker;
    a->job = job;
    a->job_id = job->id;
    a->generation = job->generation;
    a->rank = r;
    a->conn = slot->worker->conn;
    a->request_id = job->ckpt_request;
    a->deadline_ms = job->ckpt_deadline_ms;
}

int tide_core_job_checkpoint(tide_core_t *core, const char *id, int64_t deadline_ms,
                             tide_job_t **out, tide_error_t *err)
{
    tide_job_t *job = tide_core_job_find(core, id);

    if (!job) {
        tide_errprintf(err, "job %s not found", id);
        return -ENOENT;
    }
    if (deadline_ms < 0 || deadline_ms > CKPT_DEADLINE_MAX_MS) {
        tide_errprintf(err, "deadline_ms must be between 0 and %lld", CKPT_DEADLINE_MAX_MS);
        return -EINVAL;
    }
    if (job->state != TIDE_JOB_RUNNING) {
        tide_errprintf(err, "job %s is %s: only a running job can checkpoint", id,
                       tide_job_state_name(job->state));
        return -EALREADY;
    }
    *out = job;
    tide__ckpt_request(core, job, deadline_ms);
    return 0;
}

void tide__ckpt_request(tide_core_t *core, tide_job_t *job, int64_t deadline_ms)
{
    if (job->ckpt_request)
        return;
    if (deadline_ms == 0)
        deadline_ms = CKPT_DEADLINE_DEFAULT_MS;
    /* Unique per job across restarts: wall-clock based, strictly above the last one. */
    job->ckpt_request = (uint64_t)(core->now_wall > 0 ? core->now_wall : 1);
    if (job->ckpt_request <= job->last_ckpt.request_id)
        job->ckpt_request = job->last_ckpt.request_id + 1;
    job->ckpt_deadline_ms = core->now_wall + deadline_ms;
    job->ckpt_deadline_at = core->now_mono + deadline_ms;
    for (int32_t r = 0; r < job->n_ranks; r++)
        tide__ckpt_send(core, job, r);
    tide__event(core, "job.checkpoint_requested", job, NULL,
                "checkpoint of job %s requested (request %" PRIu64 ", deadline in %llds)", job->id,
                job->ckpt_request, (long long)(deadline_ms / 1000));
    tide__persist_job(core, job);
    tide__job_rearm(core, job);
}

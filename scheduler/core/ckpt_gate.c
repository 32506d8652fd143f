/* The checkpoint gate (docs/policies.md, "Checkpoint gate", the article's section 4.2): copying a job's
 * newest checkpoint from the fast local tier to the durable directory is LOW work. It is released only
 * while the job's MFU is under its threshold (the copy would slow those very GPUs), or once the newest
 * durable copy is older than the job's staleness deadline (the bound on work a failure can lose).
 * Invariants: at most one copy per job is in flight, for one step of the current generation; a held copy
 * is looked at again every ckpt_gate_check_ms; a newer checkpoint replaces a held one. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

static double threshold(const tide_core_t *core, const tide_job_t *job)
{
    return job->spec.ckpt_mfu_threshold > 0 ? job->spec.ckpt_mfu_threshold : core->cfg.ckpt_mfu_threshold;
}

static int64_t deadline_ms(const tide_core_t *core, const tide_job_t *job)
{
    return job->spec.ckpt_deadline_s > 0 ? job->spec.ckpt_deadline_s * 1000 : core->cfg.ckpt_deadline_ms;
}

/* Wall time since the newest durable copy (or, without one, since the job first started). */
static int64_t staleness(const tide_core_t *core, const tide_job_t *job)
{
    int64_t since = job->durable_ckpt.step >= 0 ? job->durable_ckpt.time_ms : job->start_ms;
    return core->now_wall > since ? core->now_wall - since : 0;
}

double tide_core_job_mfu(const tide_core_t *core, const tide_job_t *job)
{
    double achieved = 0, peak = 0;

    if (job->job_mfu >= 0 && job->job_mfu_at > 0 &&
        core->now_mono - job->job_mfu_at <= 3 * core->cfg.ckpt_gate_check_ms)
        return job->job_mfu;
    if (job->state != TIDE_JOB_RUNNING)
        return -1;
    tide_core_job_flops(job, &achieved, &peak);
    return peak > 0 && achieved > 0 ? achieved / peak : -1;
}

void tide_core_job_telemetry(tide_core_t *core, tide_job_t *job, double mfu, int32_t phase)
{
    job->job_mfu = mfu;
    job->job_mfu_at = core->now_mono > 0 ? core->now_mono : 1;
    job->job_phase = phase;
}

static void release(tide_core_t *core, tide_job_t *job, const char *why)
{
    int32_t n = 0;

    /* Every rank holds a part of the checkpoint: copy only when every one can answer, or a step would
     * be called durable with a part missing. */
    for (int32_t r = 0; r < job->n_ranks; r++) {
        tide_job_rank_t *slot = &job->ranks[r];
        if (!slot->worker || slot->state != TIDE_RANK_RUNNING || !slot->worker->connected) {
            job->flush_check_at = core->now_mono + core->cfg.ckpt_gate_check_ms;
            return;
        }
    }

    for (int32_t r = 0; r < job->n_ranks; r++) {
        tide_job_rank_t *slot = &job->ranks[r];
        tide_action_t *a;
        slot->flush_done = false;
        if (!slot->worker || slot->state != TIDE_RANK_RUNNING || !slot->worker->connected)
            continue;
        a = tide__act(core, TIDE_ACT_FLUSH);
        a->worker = slot->worker;
        a->conn = slot->worker->conn;
        a->job = job;
        a->job_id = job->id;
        a->generation = job->generation;
        a->rank = r;
        a->step = job->flush_step;
        n++;
    }
    if (n == 0) {
        job->flush_check_at = core->now_mono + core->cfg.ckpt_gate_check_ms;
        return; /* no rank can copy now: look again later */
    }
    job->flush_state = TIDE_FLUSH_COPYING;
    job->flush_pending = n;
    job->flush_bytes_acc = 0;
    free(job->flush_path_acc);
    free(job->flush_sha_acc);
    job->flush_path_acc = job->flush_sha_acc = NULL;
    job->flush_since_ms = core->now_wall;
    /* A copy whose answers never come (a stream lost with them) must not hold the gate forever. */
    job->flush_check_at = core->now_mono + core->cfg.ckpt_copy_timeout_ms;
    tide__event(core, "job.checkpoint_flushing", job, NULL,
                "job %s: copying checkpoint step %" PRId64 " to durable storage on %d worker%s (%s)", job->id,
                job->flush_step, n, n == 1 ? "" : "s", why);
}

void tide__flush_check(tide_core_t *core, tide_job_t *job)
{
    double mfu, thr;
    int64_t age, dl;
    char why[160];

    if (job->state != TIDE_JOB_RUNNING)
        return;
    if (job->flush_state == TIDE_FLUSH_COPYING) {
        if (job->flush_check_at && core->now_mono >= job->flush_check_at) {
            tide__event(core, "job.checkpoint_flush_failed", job, NULL,
                        "job %s: durable copy of checkpoint step %" PRId64 " got no answer from %d worker%s within %llds; retried later",
                        job->id, job->flush_step, job->flush_pending, job->flush_pending == 1 ? "" : "s",
                        (long long)(core->cfg.ckpt_copy_timeout_ms / 1000));
            tide__flush_reset(core, job);
            job->flush_state = TIDE_FLUSH_HELD;
            job->flush_step = job->last_ckpt.step;
            job->flush_since_ms = core->now_wall;
            job->flush_check_at = core->now_mono + core->cfg.ckpt_gate_check_ms;
            tide__job_rearm(core, job);
        }
        return;
    }
    if (job->flush_state != TIDE_FLUSH_HELD)
        return;
    mfu = tide_core_job_mfu(core, job);
    thr = threshold(core, job);
    age = staleness(core, job);
    dl = deadline_ms(core, job);
    if (mfu < thr) {
        if (mfu < 0)
            snprintf(why, sizeof(why), "MFU unknown: nothing to protect");
        else
            snprintf(why, sizeof(why), "MFU %.1f%% < %.1f%%", mfu * 100, thr * 100);
        release(core, job, why);
    } else if (age >= dl) {
        snprintf(why, sizeof(why), "MFU %.1f%% >= %.1f%% but the newest durable copy is %llds old (deadline %llds)",
                 mfu * 100, thr * 100, (long long)(age / 1000), (long long)(dl / 1000));
        release(core, job, why);
    } else {
        int64_t until = dl - age, next = core->cfg.ckpt_gate_check_ms;
        job->flush_check_at = core->now_mono + (until < next ? until : next);
    }
    tide__job_rearm(core, job);
}

void tide__flush_on_checkpoint(tide_core_t *core, tide_job_t *job)
{
    if (!core->cfg.ckpt_flush || job->state != TIDE_JOB_RUNNING)
        return;
    if (job->flush_state == TIDE_FLUSH_COPYING)
        return; /* the newer one is taken once this copy ends */
    if (job->flush_state == TIDE_FLUSH_NONE) {
        double mfu = tide_core_job_mfu(core, job);
        job->flush_since_ms = core->now_wall;
        job->flush_state = TIDE_FLUSH_HELD;
        job->flush_step = job->last_ckpt.step;
        if (mfu >= threshold(core, job) && staleness(core, job) < deadline_ms(core, job))
            tide__event(core, "job.checkpoint_held", job, NULL,
                        "job %s: durable copy of checkpoint step %" PRId64 " held while MFU is %.1f%% (>= %.1f%%)",
                        job->id, job->flush_step, mfu * 100, threshold(core, job) * 100);
    }
    job->flush_step = job->last_ckpt.step;
    tide__flush_check(core, job);
}

void tide__flush_reset(tide_core_t *core, tide_job_t *job)
{
    (void)core;
    job->flush_state = TIDE_FLUSH_NONE;
    job->flush_step = -1;
    job->flush_pending = 0;
    job->flush_check_at = 0;
    free(job->flush_path_acc);
    free(job->flush_sha_acc);
    job->flush_path_acc = job->flush_sha_acc = NULL;
}

void tide_core_ckpt_flushed(tide_core_t *core, tide_worker_t *w, const char *job_id,
                            int32_t generation, int32_t rank, int64_t step, bool ok,
                            const char *durable_path, uint64_t bytes, const char *sha256,
                            const char *error)
{
    tide_job_t *job = tide_core_job_find(core, job_id);
    tide_job_rank_t *slot;

    if (!job || job->state != TIDE_JOB_RUNNING || job->generation != generation ||
        job->flush_state != TIDE_FLUSH_COPYING || job->flush_step != step || rank < 0 ||
        rank >= job->n_ranks)
        return;
    slot = &job->ranks[rank];
    if (slot->worker != w || slot->flush_done)
        return;
    if (!ok) {
        tide__event(core, "job.checkpoint_flush_failed", job, w,
                    "job %s: durable copy of checkpoint step %" PRId64 " failed on %s: %s; retried later",
                    job->id, step, w->id, error && error[0] ? error : "unknown error");
        tide__flush_reset(core, job);
        job->flush_state = TIDE_FLUSH_HELD;
        job->flush_step = job->last_ckpt.step;
        job->flush_since_ms = core->now_wall;
        job->flush_check_at = core->now_mono + 6 * core->cfg.ckpt_gate_check_ms;
        tide__job_rearm(core, job);
        return;
    }
    slot->flush_done = true;
    job->flush_bytes_acc += bytes;
    if (durable_path && durable_path[0] && (!job->flush_path_acc || rank == 0)) {
        free(job->flush_path_acc);
        free(job->flush_sha_acc);
        job->flush_path_acc = tide_xstrdup(durable_path);
        job->flush_sha_acc = tide_xstrdup(sha256 ? sha256 : "");
    }
    if (--job->flush_pending > 0)
        return;
    {
        tide_checkpoint_t *d = &job->durable_ckpt;
        int64_t took = core->now_wall - job->flush_since_ms;
        free(d->path);
        free(d->sha256);
        d->step = step;
        d->generation = generation;
        d->path = job->flush_path_acc ? job->flush_path_acc : tide_xstrdup("");
        d->sha256 = job->flush_sha_acc ? job->flush_sha_acc : tide_xstrdup("");
        job->flush_path_acc = job->flush_sha_acc = NULL;
        d->bytes = job->flush_bytes_acc;
        d->time_ms = core->now_wall;
        d->ranks = job->n_ranks;
        d->request_id = 0;
        job->flushes++;
        job->flushed_bytes += d->bytes;
        tide__event(core, "job.checkpoint_durable", job, NULL,
                    "job %s: checkpoint step %" PRId64 " is durable (%" PRIu64 " bytes in %lld ms%s%s)", job->id,
                    step, d->bytes, (long long)(took > 0 ? took : 0), d->path[0] ? ", " : "", d->path);
        tide__persist_job(core, job);
    }
    tide__flush_reset(core, job);
    if (job->last_ckpt.step > step && job->last_ckpt.generation == job->generation)
        tide__flush_on_checkpoint(core, job);
    tide__job_rearm(core, job);
}

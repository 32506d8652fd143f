/* Checkpoint cadence (docs/fault-tolerance.md, "Checkpoint cadence"): what a failure costs is mostly the
 * work since the newest checkpoint, so once a job has shown that it checkpoints (it reported a complete
 * one), tide asks its ranks for a checkpoint (checkpoint_now) whenever the newest is older than the job's
 * interval (JobSpec.checkpoint_interval_seconds, else cfg.ckpt_interval_ms). The trainer's own schedule
 * goes on beside it: any complete checkpoint restarts the count. A generation whose ranks let a cadence
 * request pass its deadline is not asked again (a trainer that saves only on its own schedule), the next
 * generation is. Invariants: at most one request in flight per job (tide__ckpt_request); a look is O(1)
 * on the job's timer, never per heartbeat; nothing is asked of a job that is starting, being preempted
 * or resized (those ask for their own checkpoint). */
#include <inttypes.h>
#include <stdio.h>

#include "core_private.h"

static int64_t interval_ms(const tide_core_t *core, const tide_job_t *job)
{
    if (job->spec.ckpt_interval_s < 0)
        return 0;
    return job->spec.ckpt_interval_s > 0 ? job->spec.ckpt_interval_s * 1000 : core->cfg.ckpt_interval_ms;
}

void tide__cadence_arm(tide_core_t *core, tide_job_t *job)
{
    int64_t iv = interval_ms(core, job);

    job->ckpt_cadence_at = 0;
    if (iv > 0 && job->state == TIDE_JOB_RUNNING && job->last_ckpt.step >= 0 &&
        job->cadence_off_gen != job->generation)
        job->ckpt_cadence_at = core->now_mono + iv;
    tide__job_rearm(core, job);
}

void tide__cadence_due(tide_core_t *core, tide_job_t *job)
{
    int64_t iv = interval_ms(core, job);

    job->ckpt_cadence_at = 0;
    if (iv <= 0 || job->state != TIDE_JOB_RUNNING || job->last_ckpt.step < 0 ||
        job->cadence_off_gen == job->generation)
        return;
    /* Busy with a checkpoint of its own kind, or not started: look again an interval on (a checkpoint
     * that completes meanwhile re-arms from its own time). */
    job->ckpt_cadence_at = core->now_mono + iv;
    if (job->ckpt_request || job->launch_deadline || job->preempted_by || job->resize.state != TIDE_RESIZE_NONE)
        return;
    /* its deadline: a minute, or half the interval when shorter (an answer later than that is late) */
    tide__ckpt_request(core, job, iv / 2 < 60000 ? iv / 2 : 60000);
    job->cadence_request = job->ckpt_request;
}

void tide__cadence_missed(tide_core_t *core, tide_job_t *job)
{
    if (!job->ckpt_request || job->ckpt_request != job->cadence_request)
        return;
    job->cadence_off_gen = job->generation;
    job->ckpt_cadence_at = 0;
    tide__event(core, "job.checkpoint_cadence_off", job, NULL,
                "job %s: generation %d did not answer the periodic checkpoint request %" PRIu64
                "; tide asks its next generation (the trainer's own checkpoints go on)",
                job->id, job->generation, job->ckpt_request);
}

/* Drain (docs/elastic.md, "Drain"): a worker is cordoned and the job whose rank runs there moves to a
 * new generation without it — a resize of the same size for reason drain, so it checkpoints first when
 * it reports through the SDK, and placement, which never uses a cordoned worker, takes a free one in its
 * place, or fewer within min_workers, or the job waits queued. Invariant: after a drain nothing new is
 * placed on the worker; what runs there stops only through its job's generation change (or its lent
 * slot's take-back), never by itself. */
#include <errno.h>
#include <stdio.h>

#include "core_private.h"

int tide_core_worker_drain(tide_core_t *core, const char *id, const char *reason, tide_worker_t **out,
                           tide_error_t *err)
{
    tide_worker_t *w;
    tide_job_t *job;
    const char *why = reason && reason[0] ? reason : "drained";
    char detail[192];
    int rc = tide_core_worker_cordon(core, id, true, &w, err);

    if (rc < 0)
        return rc;
    *out = w;
    job = w->job;
    if (!job) {
        tide__event(core, "worker.drained", NULL, w, "worker %s drained (%s): it runs no rank", w->id, why);
        return 0;
    }
    if (job->state != TIDE_JOB_RUNNING || w->generation != job->generation || w->rank < 0) {
        /* A rank of an ended generation that is stopping anyway. */
        tide__event(core, "worker.drained", job, w, "worker %s drained (%s): its rank of job %s's ended generation %d "
                    "is stopping", w->id, why, job->id, w->generation);
        return 0;
    }
    if (w->rank >= job->n_ranks) {
        tide__event(core, "worker.drained", job, w, "worker %s drained (%s): its burst process for job %s stops",
                    w->id, why, job->id);
        tide__lent_take_back(core, job, w->rank, "its worker was drained");
        tide__schedule(core);
        return 0;
    }
    snprintf(detail, sizeof(detail), "worker %s drained: %s", w->id, why);
    if (tide__resize_can_begin(job)) {
        tide__event(core, "worker.drained", job, w,
                    "worker %s drained (%s): job %s moves to a new generation without it", w->id, why, job->id);
        tide__resize_begin(core, job, job->n_ranks, TIDE_RESIZE_DRAIN, detail);
    } else if (tide__resize_in_progress(job) || job->preempted_by) {
        /* Its generation ends anyway; the next placement does not use a cordoned worker. */
        tide__event(core, "worker.drained", job, w,
                    "worker %s drained (%s): job %s is already changing generation; the next one avoids it", w->id,
                    why, job->id);
    } else {
        /* Still starting (or its workers reconnecting after a restart): little has run; queue it again at
         * once, in front of its class. */
        tide__event(core, "worker.drained", job, w, "worker %s drained (%s): job %s, still starting, is queued again",
                    w->id, why, job->id);
        tide__job_requeue(core, job, "job.requeued", "generation %d queued again: %s", job->generation, detail);
    }
    tide__schedule(core);
    return 0;
}

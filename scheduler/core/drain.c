/* Drain (docs/elastic.md, "Drain"): a worker is cordoned and the job whose rank runs there moves to a
 * new generation without it — a resize of the same size for reason drain, so it checkpoints first when
 * it reports through the SDK, and placement, which never uses a cordoned worker, takes a free one in its
 * place, or fewer within min_workers, or the job waits queued. Invariant: after a drain nothing new is
 * placed on the worker; what runs there stops only through its job's generation change (or its lent
 * slot's take-back), never by itself. */
#include <errno.h>
#include <stdio.h>

#include "core_private.h"

/* Moves the job whose rank runs on w (cordoned already) to a new generation without it, for reason
 * (drain or predicted failure); why is for the events. */
void tide__worker_move_off(tide_core_t *core, tide_worker_t *w, tide_resize_reason_t reason, const char *why)
{
    tide_job_t *job = w->job;
    const char *ev = reason == TIDE_RESIZE_DRAIN ? "worker.drained" : "worker.migrating";
    const char *verb = reason == TIDE_RESIZE_DRAIN ? "drained" : "predicted to fail";
    char detail[256];

    if (!job) {
        tide__event(core, ev, NULL, w, "worker %s %s (%s): it runs no rank", w->id, verb, why);
        return;
    }
    if (job->state != TIDE_JOB_RUNNING || w->generation != job->generation || w->rank < 0) {
        /* A rank of an ended generation that is stopping anyway. */
        tide__event(core, ev, job, w, "worker %s %s (%s): its rank of job %s's ended generation %d is stopping", w->id,
                    verb, why, job->id, w->generation);
        return;
    }
    if (w->rank >= job->n_ranks) {
        tide__event(core, ev, job, w, "worker %s %s (%s): its burst process for job %s stops", w->id, verb, why,
                    job->id);
        tide__lent_take_back(core, job, w->rank, reason == TIDE_RESIZE_DRAIN ? "its worker was drained"
                                                                             : "its worker is predicted to fail");
        tide__schedule(core);
        return;
    }
    snprintf(detail, sizeof(detail), "worker %s %s: %s", w->id, verb, why);
    if (reason == TIDE_RESIZE_PREDICTED && tide__resize_can_begin(job)) {
        /* Stopping a running job that has nowhere to go would turn a prediction into an outage: it stays, and
         * moves when room frees (prediction.c tries again). */
        const char *no = NULL;
        if (!tide__resize_room_to_move(core, job, &no)) {
            if (!w->risk_waiting)
                tide__event(core, ev, job, w, "worker %s %s (%s): job %s stays on it for now (%s); it moves when a "
                            "worker frees", w->id, verb, why, job->id, no ? no : "no worker to move to");
            w->risk_waiting = true;
            return;
        }
        w->risk_waiting = false;
    }
    if (tide__resize_can_begin(job)) {
        tide__event(core, ev, job, w, "worker %s %s (%s): job %s moves to a new generation without it", w->id, verb,
                    why, job->id);
        tide__resize_begin(core, job, job->n_ranks, reason, detail);
    } else if (tide__resize_in_progress(job) || job->preempted_by) {
        /* Its generation ends anyway; the next placement does not use a cordoned worker. */
        tide__event(core, ev, job, w,
                    "worker %s %s (%s): job %s is already changing generation; the next one avoids it", w->id, verb,
                    why, job->id);
    } else {
        /* Still starting (or its workers reconnecting after a restart): little has run; queue it again at
         * once, in front of its class. */
        tide__event(core, ev, job, w, "worker %s %s (%s): job %s, still starting, is queued again", w->id, verb, why,
                    job->id);
        tide__job_requeue(core, job, "job.requeued", "generation %d queued again: %s", job->generation, detail);
    }
    tide__schedule(core);
}

int tide_core_worker_drain(tide_core_t *core, const char *id, const char *reason, tide_worker_t **out,
                           tide_error_t *err)
{
    tide_worker_t *w = tide_core_worker_find(core, id);
    const char *why = reason && reason[0] ? reason : "drained";
    char text[256];

    if (!w) {
        tide_errprintf(err, "worker %s not found", id);
        return -ENOENT;
    }
    *out = w;
    snprintf(text, sizeof(text), "drained: %s", why);
    if (!w->cordoned)
        tide__event(core, "worker.cordoned", NULL, w, "worker %s cordoned: no new ranks", w->id);
    tide__worker_cordon(core, w, text);
    tide__worker_move_off(core, w, TIDE_RESIZE_DRAIN, why);
    tide__schedule(core);
    return 0;
}

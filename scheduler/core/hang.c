/* Hang detection by progress (docs/fault-tolerance.md, "Hangs"): a rank whose trainer reports steps
 * through the SDK and whose step has not moved for max(hang_factor x the job's median step time,
 * hang_min_ms) while its process runs is hung — a collective waiting forever on a frozen peer, a
 * deadlock — and its generation ends as a failure: restarted within the job's restart policy (restart.c),
 * resuming from the newest checkpoint, or failed. Invariants: a rank is judged only after its first step report
 * (advanced_mono > 0) and only while RUNNING; a check is O(ranks log ranks) on the job's timer, never
 * per heartbeat, at most a period apart and at the moment the quietest rank would pass the limit. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "core_private.h"

/* How often a job's ranks are looked at: a quarter of the minimum, at most every 5 s. */
static int64_t period(const tide_core_t *core)
{
    int64_t p = core->cfg.hang_min_ms / 4;
    return p > 5000 ? 5000 : p > 0 ? p : 1;
}

void tide__hang_progress(tide_core_t *core, tide_job_t *job, int32_t r)
{
    job->ranks[r].advanced_mono = core->now_mono > 0 ? core->now_mono : 1;
    if (core->cfg.hang_min_ms <= 0 || job->hang_check_at || job->state != TIDE_JOB_RUNNING)
        return;
    job->hang_check_at = core->now_mono + period(core);
    tide__job_rearm(core, job);
}

/* The limit for the job's ranks now, in ms. */
static int64_t limit_ms(tide_core_t *core, const tide_job_t *job)
{
    double median = tide__progress_median(core, job, offsetof(tide_trainer_progress_t, step_seconds));
    double by_steps = core->cfg.hang_factor * median * 1e3;
    int64_t lim = core->cfg.hang_min_ms;

    if (isfinite(by_steps) && by_steps > (double)lim)
        lim = by_steps > 1e15 ? INT64_C(1000000000000000) : (int64_t)by_steps;
    return lim;
}

void tide__hang_check(tide_core_t *core, tide_job_t *job)
{
    int64_t lim, idle, worst = 0, due = INT64_MAX;
    int32_t hung = -1, same = 0;
    char others[96] = "";

    job->hang_check_at = 0;
    if (core->cfg.hang_min_ms <= 0 || job->state != TIDE_JOB_RUNNING)
        return;
    lim = limit_ms(core, job);
    /* Ranks in lockstep stop together when one hangs: the one behind (the lowest step) is the likely
     * culprit, the others wait for it in a collective; at the same step, the one quiet the longest. */
    for (int32_t r = 0; r < job->n_ranks; r++) {
        const tide_job_rank_t *slot = &job->ranks[r];
        /* A rank still starting, exited or lost, or that never reported a step is not judged; nor
         * one that says it is checkpointing (a long write is not a hang). */
        if (!slot->advanced_mono || slot->state != TIDE_RANK_RUNNING || !slot->worker ||
            slot->progress.phase == 5 /* TRAINER_PHASE_CHECKPOINT */)
            continue;
        idle = core->now_mono - slot->advanced_mono;
        if (idle <= lim) {
            if (slot->advanced_mono + lim + 1 < due)
                due = slot->advanced_mono + lim + 1; /* when it would be hung without a report */
            continue;
        }
        if (hung < 0 || slot->progress.step < job->ranks[hung].progress.step ||
            (slot->progress.step == job->ranks[hung].progress.step && idle > worst)) {
            worst = idle;
            hung = r;
        }
    }
    if (hung < 0) {
        /* Next look: when the quietest rank would pass the limit, at the latest one period on (the limit
         * may shrink with the median meanwhile). */
        job->hang_check_at = core->now_mono + period(core);
        if (due < job->hang_check_at)
            job->hang_check_at = due > core->now_mono ? due : core->now_mono + 1;
        return;
    }
    for (int32_t r = 0; r < job->n_ranks; r++) {
        const tide_job_rank_t *slot = &job->ranks[r];
        if (r != hung && slot->advanced_mono && slot->state == TIDE_RANK_RUNNING && slot->worker &&
            slot->progress.step == job->ranks[hung].progress.step && core->now_mono - slot->advanced_mono > lim)
            same++;
    }
    if (same > 0)
        snprintf(others, sizeof(others), "; %d other rank(s) stopped at the same step: which one hangs is not known",
                 same);
    job->hangs++;
    tide__event(core, "job.hung", job, job->ranks[hung].worker,
                "job %s generation %d: rank %d on %s made no progress for %.1f s (step %" PRId64
                "; limit %.1f s: %g x the median step time, at least %.0f s)%s",
                job->id, job->generation, hung, job->ranks[hung].worker_id, (double)worst / 1e3,
                job->ranks[hung].progress.step, (double)lim / 1e3, core->cfg.hang_factor,
                (double)core->cfg.hang_min_ms / 1e3, others);
    {
        char why[200];
        snprintf(why, sizeof(why), "rank %d on %s hung (no progress for %.1f s%s)", hung, job->ranks[hung].worker_id,
                 (double)worst / 1e3, same > 0 ? ", or a peer at the same step" : "");
        /* Only a culprit that is known counts toward its worker's quarantine. */
        tide__restart_failure(core, job, TIDE_FAILURE_HUNG, hung, same > 0 ? NULL : job->ranks[hung].worker, why);
    }
}

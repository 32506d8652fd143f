/* Stragglers: every straggler_check_ms, a running job's ranks are compared by their time per task
 * (progress.task_seconds) with the job's median; a rank slower than straggler_ratio is SLOW, and
 * PERSISTENT once it stayed slow for straggler_window_ms (event worker.straggler). Invariant:
 * job->stragglers counts the PERSISTENT ranks as of the last check; a check is O(ranks log ranks)
 * and runs on the job's timer, never per heartbeat. Steals are summed into one job.steals event per
 * check. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

void tide__straggler_arm(tide_core_t *core, tide_job_t *job)
{
    if (job->state != TIDE_JOB_RUNNING || job->straggler_check_at ||
        core->cfg.straggler_check_ms <= 0)
        return;
    job->straggler_check_at = core->now_mono + core->cfg.straggler_check_ms;
    tide__job_rearm(core, job);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tide__progress_median(tide_core_t *core, const tide_job_t *job, size_t field)
{
    size_t n = 0;

    if (core->stat_cap < (size_t)job->n_ranks) {
        core->stat_cap = (size_t)job->n_ranks;
        core->stat_scratch = tide_xrealloc(core->stat_scratch, core->stat_cap * sizeof(double));
    }
    for (int32_t r = 0; r < job->n_ranks; r++) {
        double v;
        memcpy(&v, (const char *)&job->ranks[r].progress + field, sizeof(v));
        if (job->ranks[r].worker && v > 0 && isfinite(v))
            core->stat_scratch[n++] = v;
    }
    if (n == 0)
        return 0;
    qsort(core->stat_scratch, n, sizeof(double), cmp_double);
    return core->stat_scratch[(n - 1) / 2];
}

/* The lower median of the ranks' time per task (with two ranks, the faster one: a straggler does
 * not drag its own yardstick); 0 when no rank reported. */
static double median_task_seconds(tide_core_t *core, const tide_job_t *job)
{
    return tide__progress_median(core, job, offsetof(tide_trainer_progress_t, task_seconds));
}

static void check_rank(tide_core_t *core, tide_job_t *job, int32_t r, double median)
{
    const tide_core_config_t *cfg = &core->cfg;
    tide_job_rank_t *slot = &job->ranks[r];
    double ts = slot->progress.task_seconds;

    if (!slot->worker) {
        /* Exited or lost: no longer compared. */
        slot->straggler = TIDE_STRAGGLER_NONE;
        slot->slowness = 0;
        slot->slow_since_ms = slot->slow_since_mono = 0;
        return;
    }
    if (!(ts > 0 && isfinite(ts)) || median <= 0)
        return; /* nothing new to judge by */
    slot->slowness = ts / median;
    if (slot->slowness >= cfg->straggler_ratio) {
        if (slot->straggler == TIDE_STRAGGLER_NONE) {
            slot->straggler = TIDE_STRAGGLER_SLOW;
            slot->slow_since_mono = core->now_mono;
            slot->slow_since_ms = core->now_wall;
        }
        if (slot->straggler == TIDE_STRAGGLER_SLOW &&
            core->now_mono - slot->slow_since_mono >= cfg->straggler_window_ms) {
            slot->straggler = TIDE_STRAGGLER_PERSISTENT;
            tide__event(
                core, "worker.straggler", job, slot->worker,
                "rank %d on %s: %.2fx the job's median time per task (%.1f ms vs %.1f ms) for "
                "%lld s; %" PRIu64 " of its tasks stolen; %" PRIu64 " tasks run, busy %.0f%%",
                (int)r, slot->worker->id, slot->slowness, ts * 1e3, median * 1e3,
                (long long)((core->now_mono - slot->slow_since_mono) / 1000),
                tide__tasks_stolen_from(job, r), slot->progress.tasks_run,
                slot->progress.busy_fraction * 100.0);
        }
    } else if (slot->straggler != TIDE_STRAGGLER_NONE) {
        if (slot->straggler == TIDE_STRAGGLER_PERSISTENT)
            tide__event(
                core, "worker.straggler_cleared", job, slot->worker,
                "rank %d on %s is no longer a straggler: %.2fx the job's median time per task "
                "(%.1f ms vs %.1f ms)",
                (int)r, slot->worker->id, slot->slowness, ts * 1e3, median * 1e3);
        slot->straggler = TIDE_STRAGGLER_NONE;
        slot->slow_since_mono = slot->slow_since_ms = 0;
    }
}

static void report_steals(tide_core_t *core, tide_job_t *job)
{
    uint64_t stolen = job->tasks_stolen - job->steals_reported, requests = 0, most = 0;
    int32_t from = -1;
    double window_s = (double)core->cfg.straggler_check_ms / 1000.0;

    if (job->tasks_stolen <= job->steals_reported)
        return;
    tide__tasks_steal_window(job, &requests, &from, &most);
    job->steals_reported = job->tasks_stolen;
    if (from >= 0)
        tide__event(core, "job.steals", job, NULL,
                    "%" PRIu64 " tasks stolen in the last %.3g s, %" PRIu64
                    " requests; most from rank %d (%" PRIu64 ")",
                    stolen, window_s, requests, (int)from, most);
    else
        tide__event(core, "job.steals", job, NULL,
                    "%" PRIu64 " tasks stolen in the last %.3g s, %" PRIu64 " requests", stolen,
                    window_s, requests);
}

void tide__straggler_check(tide_core_t *core, tide_job_t *job)
{
    double median;
    int32_t persistent = 0;

    job->straggler_check_at = 0;
    if (job->state != TIDE_JOB_RUNNING || core->cfg.straggler_check_ms <= 0)
        return;
    median = median_task_seconds(core, job);
    for (int32_t r = 0; r < job->n_ranks; r++) {
        check_rank(core, job, r, median);
        persistent += job->ranks[r].straggler == TIDE_STRAGGLER_PERSISTENT;
    }
    job->stragglers = persistent;
    report_steals(core, job);
    job->straggler_check_at = core->now_mono + core->cfg.straggler_check_ms;
    if (persistent > 0 && core->cfg.replace_stragglers) {
        /* The slowest persistent straggler is swapped at a new generation (it only asks for a
         * checkpoint here: the ranks are not touched while this check runs). */
        int32_t worst = -1;
        for (int32_t r = 0; r < job->n_ranks; r++)
            if (job->ranks[r].straggler == TIDE_STRAGGLER_PERSISTENT &&
                (worst < 0 || job->ranks[r].slowness > job->ranks[worst].slowness))
                worst = r;
        tide__resize_replace(core, job, worst);
    }
}

const char *tide_straggler_name(tide_straggler_t s)
{
    switch (s) {
    case TIDE_STRAGGLER_NONE:
        return "none";
    case TIDE_STRAGGLER_SLOW:
        return "slow";
    case TIDE_STRAGGLER_PERSISTENT:
        return "straggler";
    }
    return "unknown";
}

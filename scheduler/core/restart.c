/* Restarts (docs/fault-tolerance.md, "Restarts"): a failure of a running job's generation — a rank lost
 * with its worker, a hung rank, a rank's own failing exit — either restarts the job at a new generation
 * (queued again at the front of its class, allowed the hot spares, resuming from its newest checkpoint)
 * within its policy, or fails it; workers where ranks keep failing are quarantined. Invariant: a job in
 * its restart backoff is PENDING, outside every queue, with restart_at set and its timer armed for it. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core_private.h"

static const char *const kind_cause[] = {"worker_lost", "hang", "rank_failed", "worker_left"};

static tide_restart_policy_t policy_of(const tide_job_t *job)
{
    return job->spec.restart_policy == TIDE_RESTART_DEFAULT ? TIDE_RESTART_ON_LOSS
                                                             : (tide_restart_policy_t)job->spec.restart_policy;
}

static int32_t max_of(const tide_core_t *core, const tide_job_t *job)
{
    return job->spec.max_restarts > 0 ? job->spec.max_restarts : core->cfg.max_restarts;
}

/* The wait before restart number k in a row (1-based): none for the first, then base, 2 x base, ... at most
 * the scheduler's cap (0: none), or the job's own base when that is longer (honoured, never doubled past). */
static int64_t backoff_of(const tide_core_t *core, const tide_job_t *job, int32_t k)
{
    int64_t base = job->spec.restart_backoff_ms > 0 ? job->spec.restart_backoff_ms : core->cfg.restart_backoff_ms;
    int64_t cap = core->cfg.restart_backoff_max_ms > 0 ? core->cfg.restart_backoff_max_ms : INT64_MAX / 4, b = base;

    if (k <= 1 || base <= 0)
        return 0;
    if (cap < base)
        cap = base;
    for (int32_t i = 2; i < k && b < cap; i++)
        b *= 2;
    return b < cap ? b : cap;
}

bool tide__restart_covers(const tide_job_t *job, tide_failure_kind_t kind)
{
    tide_restart_policy_t pol = policy_of(job);
    return pol == TIDE_RESTART_ON_FAILURE || (pol == TIDE_RESTART_ON_LOSS && kind != TIDE_FAILURE_EXIT);
}

const char *tide_restart_policy_name(int32_t p)
{
    switch (p) {
    case TIDE_RESTART_NEVER:
        return "never";
    case TIDE_RESTART_ON_FAILURE:
        return "on-failure";
    default:
        return "on-loss";
    }
}

static void fmt_duration(char *buf, size_t len, int64_t ms)
{
    if (ms % 3600000 == 0 && ms >= 3600000)
        snprintf(buf, len, "%" PRId64 " h", ms / 3600000);
    else if (ms % 60000 == 0 && ms >= 60000)
        snprintf(buf, len, "%" PRId64 " min", ms / 60000);
    else
        snprintf(buf, len, "%.1f s", (double)ms / 1e3);
}

/* A rank of w failed (lost, hung): count it, and quarantine w when it holds quarantine_failures of them
 * within the window. O(1). */
static void count_failure(tide_core_t *core, tide_worker_t *w, const char *what)
{
    int32_t k = core->cfg.quarantine_failures;
    int64_t oldest;
    char reason[256], win[32];

    if (!w || k <= 0)
        return;
    if (k > TIDE_QUARANTINE_MAX)
        k = TIDE_QUARANTINE_MAX;
    w->fail_mono[w->n_fail % k] = core->now_mono;
    w->n_fail++;
    if (w->n_fail < k || w->cordoned)
        return;
    oldest = w->fail_mono[w->n_fail % k]; /* the k-th newest */
    if (core->now_mono - oldest > core->cfg.quarantine_window_ms)
        return;
    fmt_duration(win, sizeof(win), core->cfg.quarantine_window_ms);
    snprintf(reason, sizeof(reason), "quarantined: %d failures within %s (last: %s)", k, win, what);
    tide__worker_cordon(core, w, reason);
    tide__event(core, "worker.quarantined", NULL, w, "worker %s %s", w->id, reason);
}

int32_t tide_core_worker_failures(const tide_core_t *core, const tide_worker_t *w)
{
    int32_t k = core->cfg.quarantine_failures, n = 0;

    if (k <= 0)
        return 0;
    if (k > TIDE_QUARANTINE_MAX)
        k = TIDE_QUARANTINE_MAX;
    for (int32_t i = 0; i < k && i < w->n_fail; i++)
        n += core->now_mono - w->fail_mono[i] <= core->cfg.quarantine_window_ms;
    return n;
}

void tide__restart_failure(tide_core_t *core, tide_job_t *job, tide_failure_kind_t kind, int32_t rank,
                           tide_worker_t *w, const char *why)
{
    tide_restart_policy_t pol = policy_of(job);
    int32_t max = max_of(core, job);
    bool restart = tide__restart_covers(job, kind);
    int64_t backoff;
    char resume[96], wait[64];

    if (kind != TIDE_FAILURE_EXIT && kind != TIDE_FAILURE_LEFT)
        count_failure(core, w, why);
    if (job->stable_since && core->now_mono - job->stable_since >= core->cfg.restart_window_ms)
        job->restarts_in_row = 0; /* it ran well for a while (resizes included): a new run of bad luck */
    job->stable_since = 0;        /* until a generation runs again */
    tide__history_failure(core, job, kind_cause[kind], why);
    job->failing = true; /* the generation's other ranks stop with the short grace */
    if (!restart || (kind != TIDE_FAILURE_LEFT && job->restarts_in_row >= max)) {
        job->failed_rank = rank;
        if (kind != TIDE_FAILURE_EXIT)
            job->exit_code = -1;
        if (!restart)
            tide__job_set_message(core, job, "%s; not restarted (restart policy %s)", why,
                                  tide_restart_policy_name(pol));
        else
            tide__job_set_message(core, job, "%s; restarted %d time(s) in a row, the most allowed (max_restarts %d)",
                                  why, job->restarts_in_row, max);
        tide__job_finish(core, job, TIDE_JOB_FAILED);
        job->failing = false;
        return;
    }
    if (kind != TIDE_FAILURE_LEFT)
        job->restarts_in_row++; /* a worker that left is not the job's bad luck */
    job->restarts++;
    backoff = kind == TIDE_FAILURE_LEFT ? 0 : backoff_of(core, job, job->restarts_in_row);
    if (job->last_ckpt.step >= 0)
        snprintf(resume, sizeof(resume), "resumes from checkpoint step %" PRId64, job->last_ckpt.step);
    else
        snprintf(resume, sizeof(resume), "no checkpoint: restarts from the beginning");
    wait[0] = '\0';
    if (backoff > 0)
        snprintf(wait, sizeof(wait), " after a %.1f s backoff", (double)backoff / 1e3);
    job->recovering = true; /* a failure: the hot spares are for this */
    if (kind == TIDE_FAILURE_LEFT)
        tide__job_requeue(core, job, "job.requeued", "%s; restarted (a worker that leaves does not count against "
                          "max_restarts), %s", why, resume);
    else
        tide__job_requeue(core, job, "job.requeued", "%s; restart %d of %d in a row%s, %s", why,
                          job->restarts_in_row, max, wait, resume);
    job->failing = false;
    if (backoff > 0 && job->state == TIDE_JOB_PENDING) {
        tide__queue_remove(core, job);
        job->restart_at = core->now_mono + backoff;
        job->restart_at_ms = core->now_wall + backoff;
        tide__job_rearm(core, job);
    }
}

void tide__restart_due(tide_core_t *core, tide_job_t *job)
{
    if (!job->restart_at || job->state != TIDE_JOB_PENDING || core->now_mono < job->restart_at)
        return;
    job->restart_at = job->restart_at_ms = 0;
    tide__queue_push(core, job, true);
    tide__job_rearm(core, job);
}

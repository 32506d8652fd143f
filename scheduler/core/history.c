/* A job's generation history (tidectl job, tide.v1.Generation): for each of its newest generations why
 * it started, when it ran, why it ended, and for a recovery how long it took from the failure's detection
 * to every rank running and how much work the failure lost. Invariant: at most TIDE_HISTORY_MAX entries,
 * oldest first; only the newest may be open (end_ms 0), and only while it is the current generation. */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

static tide_generation_rec_t *open_rec(tide_job_t *job)
{
    tide_generation_rec_t *g = job->n_history > 0 ? &job->history[job->n_history - 1] : NULL;
    return g && !g->end_ms ? g : NULL;
}

static void close_rec(tide_core_t *core, tide_generation_rec_t *g, const char *end)
{
    g->end_ms = core->now_wall > g->start_ms ? core->now_wall : g->start_ms;
    free(g->end);
    g->end = tide_xstrdup(end ? end : "");
}

void tide__history_end(tide_core_t *core, tide_job_t *job, const char *cause, const char *end)
{
    tide_generation_rec_t *g = open_rec(job);

    if (g)
        close_rec(core, g, end);
    if (job->next_failure_ms)
        return; /* the failure that ends it was noted first (tide__history_failure): it is the cause */
    if (g && g->failure_ms && !g->running_ms && cause) {
        /* A recovery that never ran (rolled back, drained or preempted while starting): the next generation
         * still recovers from the same failure. */
        job->next_cause = g->cause;
        free(job->next_detail);
        job->next_detail = tide_xstrdup(g->detail);
        job->next_failure_ms = g->failure_ms;
        job->next_steps_lost = g->steps_lost;
        job->next_seconds_lost = g->seconds_lost;
        return;
    }
    job->next_cause = cause;
    free(job->next_detail);
    job->next_detail = tide_xstrdup(end ? end : "");
}

void tide__history_failure(tide_core_t *core, tide_job_t *job, const char *cause, const char *why)
{
    int64_t newest = -1;
    bool known = false;

    for (int32_t r = 0; job->ranks && r < job->n_ranks; r++) {
        const tide_trainer_progress_t *p = &job->ranks[r].progress;
        if (p->sdk && p->step >= 0) {
            known = true;
            if (p->step > newest)
                newest = p->step;
        }
    }
    job->next_cause = cause;
    free(job->next_detail);
    job->next_detail = tide_xstrdup(why ? why : "");
    job->next_failure_ms = core->now_wall;
    if (known) {
        int64_t from = job->last_ckpt.step >= 0 ? job->last_ckpt.step : -1;
        double step_s = tide__progress_median(core, job, offsetof(tide_trainer_progress_t, step_seconds));
        job->next_steps_lost = newest > from ? newest - from : 0;
        job->next_seconds_lost = step_s > 0 ? (double)job->next_steps_lost * step_s : 0;
    } else {
        job->next_steps_lost = -1;
        job->next_seconds_lost = 0;
    }
}

void tide__history_begin(tide_core_t *core, tide_job_t *job)
{
    tide_generation_rec_t *g = open_rec(job);

    if (g)
        close_rec(core, g, "replaced by the next generation");
    if (job->n_history == TIDE_HISTORY_MAX) {
        free(job->history[0].detail);
        free(job->history[0].end);
        memmove(job->history, job->history + 1, sizeof(*job->history) * (TIDE_HISTORY_MAX - 1));
        job->n_history--;
    }
    if (!job->history)
        job->history = tide_xcalloc(TIDE_HISTORY_MAX, sizeof(*job->history));
    g = &job->history[job->n_history++];
    memset(g, 0, sizeof(*g));
    g->number = job->generation;
    g->workers = job->n_ranks;
    g->cause = job->next_cause ? job->next_cause : job->generation == 1 ? "submitted" : "requeued";
    g->detail = job->next_detail ? job->next_detail : tide_xstrdup("");
    g->start_ms = core->now_wall;
    g->resumed_step = job->last_ckpt.step;
    g->failure_ms = job->next_failure_ms;
    g->steps_lost = job->next_failure_ms ? job->next_steps_lost : -1;
    g->seconds_lost = job->next_failure_ms ? job->next_seconds_lost : 0;
    job->next_cause = NULL;
    job->next_detail = NULL;
    job->next_failure_ms = 0;
    job->next_steps_lost = -1;
    job->next_seconds_lost = 0;
}

void tide__history_running(tide_core_t *core, tide_job_t *job)
{
    tide_generation_rec_t *g = open_rec(job);
    char lost[96];

    if (!g || g->running_ms || g->number != job->generation)
        return;
    g->running_ms = core->now_wall > g->start_ms ? core->now_wall : g->start_ms;
    if (!g->failure_ms)
        return;
    if (g->steps_lost >= 0)
        snprintf(lost, sizeof(lost), "%" PRId64 " step(s) (%.1f s) lost since %s", g->steps_lost, g->seconds_lost,
                 g->resumed_step >= 0 ? "its checkpoint" : "the beginning");
    else
        snprintf(lost, sizeof(lost), "work lost unknown (no step reports)");
    tide__event(core, "job.recovered", job, NULL,
                "job %s generation %d running %.2f s after the failure was detected (%s); %s; resumed from %s", job->id,
                job->generation, (double)(g->running_ms - g->failure_ms) / 1e3, g->cause, lost,
                g->resumed_step >= 0 ? "its newest checkpoint" : "the beginning");
}

void tide__history_free(tide_job_t *job)
{
    for (int32_t i = 0; i < job->n_history; i++) {
        free(job->history[i].detail);
        free(job->history[i].end);
    }
    free(job->history);
    job->history = NULL;
    job->n_history = 0;
    free(job->next_detail);
    job->next_detail = NULL;
}

void tide__history_restore(tide_job_t *job, const tide_generation_rec_t *recs, int32_t n)
{
    tide__history_free(job);
    if (n <= 0)
        return;
    if (n > TIDE_HISTORY_MAX) {
        recs += n - TIDE_HISTORY_MAX;
        n = TIDE_HISTORY_MAX;
    }
    job->history = tide_xcalloc(TIDE_HISTORY_MAX, sizeof(*job->history));
    for (int32_t i = 0; i < n; i++) {
        job->history[i] = recs[i];
        job->history[i].cause = tide__history_cause(recs[i].cause);
        job->history[i].detail = tide_xstrdup(recs[i].detail ? recs[i].detail : "");
        job->history[i].end = recs[i].end_ms ? tide_xstrdup(recs[i].end ? recs[i].end : "") : NULL;
    }
    job->n_history = n;
}

const char *tide__history_cause(const char *name)
{
    static const char *const known[] = {"submitted", "worker_lost", "hang",       "rank_failed", "rolled_back",
                                        "preempted", "requeued",    "requested",  "grow",        "shrink",
                                        "replace",   "burst",       "burst_end",  "drain",       "predicted_failure", "worker_left"};
    for (size_t i = 0; name && i < sizeof(known) / sizeof(known[0]); i++)
        if (strcmp(known[i], name) == 0)
            return known[i];
    return "requeued";
}

/* The fault-tolerance part of `tidectl job` (docs/fault-tolerance.md): the Restarts line and the
 * Generations table — each generation's cause, when it started, how long its recovery took from the
 * failure's detection to every rank running, the work the failure lost, the step it resumed from, and
 * how it ended. Pure, like render.c: only what the scheduler reported, sanitized. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "render.h"
#include "table.h"

static const char *policy_word(int p)
{
    switch (p) {
    case TIDE__V1__RESTART_POLICY__RESTART_POLICY_NEVER:
        return "never";
    case TIDE__V1__RESTART_POLICY__RESTART_POLICY_ON_FAILURE:
        return "on-failure";
    default:
        return "on-loss";
    }
}

/* "12:03:04" (local, or UTC with "Z"); "-" for 0. */
static void hms(int64_t ms, bool utc, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    if (ms <= 0 || (utc ? !gmtime_r(&t, &tm) : !localtime_r(&t, &tm)) ||
        strftime(buf, size, utc ? "%H:%M:%SZ" : "%H:%M:%S", &tm) == 0)
        snprintf(buf, size, "-");
}

static void secs(double s, char *buf, size_t size)
{
    if (s < 10)
        snprintf(buf, size, "%.2fs", s);
    else if (s < 600)
        snprintf(buf, size, "%.1fs", s);
    else
        snprintf(buf, size, "%.0fm", s / 60);
}

void tide_cli_render_recovery(const Tide__V1__Job *j, int64_t now_ms, bool utc, tide_buf_t *out)
{
    static const char *const headers[] = {"GEN", "WORKERS", "STARTED", "CAUSE", "RECOVERY", "LOST", "RESUMED", "ENDED"};
    const Tide__V1__JobSpec *s = j->spec;
    tide_cli_table_t *t;
    const Tide__V1__Generation *last_fail = NULL;

    if (j->restarts > 0 || j->restart_at_ms > 0 || (s && (s->restart_policy || s->max_restarts))) {
        tide_buf_printf(out, "%-14s%d", "Restarts:", j->restarts);
        if (j->restarts_in_row > 0)
            tide_buf_printf(out, " (%d in a row", j->restarts_in_row);
        else
            tide_buf_append_str(out, " (");
        tide_buf_printf(out, "%spolicy %s", j->restarts_in_row > 0 ? "; " : "", policy_word(s ? s->restart_policy : 0));
        if (s && s->max_restarts > 0)
            tide_buf_printf(out, ", at most %d in a row", s->max_restarts);
        tide_buf_append_str(out, ")");
        if (j->restart_at_ms > 0 && j->state == TIDE__V1__JOB_STATE__JOB_STATE_PENDING) {
            char in[32];
            secs(j->restart_at_ms > now_ms ? (double)(j->restart_at_ms - now_ms) / 1e3 : 0, in, sizeof(in));
            tide_buf_printf(out, "; next in %s (backoff)", in);
        }
        tide_buf_append_str(out, "\n");
    }
    if (j->n_generations == 0)
        return;
    t = tide_cli_table_new(8, headers);
    for (size_t i = 0; i < j->n_generations; i++) {
        const Tide__V1__Generation *g = j->generations[i];
        char gen[16], workers[16], started[24], rec[24], lost[48], resumed[32], ended[24];
        const char *cells[8] = {gen, workers, started, g->cause, rec, lost, resumed, ended};

        snprintf(gen, sizeof(gen), "%d", g->number);
        snprintf(workers, sizeof(workers), "%d", g->workers);
        hms(g->start_time_ms, utc, started, sizeof(started));
        if (g->failure_time_ms > 0 && g->running_time_ms >= g->failure_time_ms)
            secs((double)(g->running_time_ms - g->failure_time_ms) / 1e3, rec, sizeof(rec));
        else if (g->failure_time_ms > 0)
            snprintf(rec, sizeof(rec), "starting");
        else
            snprintf(rec, sizeof(rec), "-");
        if (g->failure_time_ms > 0 && g->steps_lost >= 0) {
            char sl[24];
            secs(g->seconds_lost, sl, sizeof(sl));
            snprintf(lost, sizeof(lost), "%" PRId64 " step%s (%s)", g->steps_lost, g->steps_lost == 1 ? "" : "s", sl);
        } else if (g->failure_time_ms > 0) {
            snprintf(lost, sizeof(lost), "unknown");
        } else {
            snprintf(lost, sizeof(lost), "-");
        }
        if (g->resumed_step >= 0)
            snprintf(resumed, sizeof(resumed), "step %" PRId64, g->resumed_step);
        else
            snprintf(resumed, sizeof(resumed), "-");
        if (g->end_time_ms > 0)
            hms(g->end_time_ms, utc, ended, sizeof(ended));
        else
            snprintf(ended, sizeof(ended), "-");
        if (g->failure_time_ms > 0)
            last_fail = g;
        tide_cli_table_add_row(t, cells);
    }
    tide_buf_append_str(out, "Generations:\n");
    tide_cli_table_render_indented(t, "  ", out);
    if (last_fail && last_fail->detail && *last_fail->detail) {
        char *d = tide_cli_sanitize(last_fail->detail);
        tide_buf_printf(out, "%-14s%s (generation %d started for it)\n", "Last failure:", d, last_fail->number);
        free(d);
    }
    tide_cli_table_free(t);
}

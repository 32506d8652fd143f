/* The work-stealing part of tidectl's views (docs/work-stealing.md): the per-rank task table of
 * `tidectl job` (time per task, tasks run, stolen and given away, busy share, slowness against the
 * job's median, straggler state) with the job's stealing counters, and the lines `tidectl top` prints
 * for jobs that use tasks. Pure, like render.c: only what the scheduler reported, sanitized. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "render.h"
#include "table.h"
#include "xmalloc.h"

/* "12.3ms", "1.25s", or "-" for 0. */
static void task_time(double s, char *buf, size_t size)
{
    if (s <= 0)
        snprintf(buf, size, "-");
    else if (s < 0.01)
        snprintf(buf, size, "%.2fms", s * 1e3);
    else if (s < 1)
        snprintf(buf, size, "%.1fms", s * 1e3);
    else
        snprintf(buf, size, "%.2fs", s);
}

static const char *straggler_word(int s)
{
    switch (s) {
    case TIDE__V1__STRAGGLER_STATE__STRAGGLER_STATE_SLOW:
        return "slow";
    case TIDE__V1__STRAGGLER_STATE__STRAGGLER_STATE_STRAGGLER:
        return "STRAGGLER";
    default:
        return "-";
    }
}

bool tide_cli_job_uses_tasks(const Tide__V1__Job *j)
{
    for (size_t r = 0; r < j->n_ranks; r++) {
        const Tide__V1__TrainerProgress *p = j->ranks[r]->progress;
        if (p && (p->tasks_run > 0 || p->task_seconds > 0))
            return true;
    }
    return j->tasks_committed > 0 || j->steal_requests > 0;
}

void tide_cli_render_tasks(const Tide__V1__Job *j, tide_buf_t *out)
{
    static const char *const headers[] = {"RANK",  "WORKER", "STEP-TIME", "TASK-TIME", "TASKS",
                                          "STOLEN", "GIVEN", "BUSY",      "SLOWNESS",  "STATE"};
    tide_cli_table_t *t;

    if (!tide_cli_job_uses_tasks(j))
        return;
    tide_buf_printf(out, "%-14s%llu tasks stolen for %llu steal requests, %llu committed", "Stealing:",
                    (unsigned long long)j->tasks_stolen, (unsigned long long)j->steal_requests,
                    (unsigned long long)j->tasks_committed);
    if (j->spec && j->spec->no_stealing)
        tide_buf_append_str(out, " (stealing off for this job)");
    if (j->stragglers > 0)
        tide_buf_printf(out, "; %d straggler%s", j->stragglers, j->stragglers == 1 ? "" : "s");
    tide_buf_append_str(out, "\n");
    t = tide_cli_table_new(10, headers);
    for (size_t i = 0; i < j->n_ranks; i++) {
        const Tide__V1__JobRank *r = j->ranks[i];
        const Tide__V1__TrainerProgress *pr = r->progress;
        char rank[16], step[32], task[32], run[24], stolen[24], given[24], busy[16], slow[16];
        char *worker = tide_cli_sanitize(r->worker_id);
        const char *cells[10] = {rank, worker, step, task, run, stolen, given, busy, slow,
                                 straggler_word(r->straggler)};
        snprintf(rank, sizeof(rank), "%d", r->rank);
        task_time(pr ? pr->step_seconds : 0, step, sizeof(step));
        task_time(pr ? pr->task_seconds : 0, task, sizeof(task));
        snprintf(run, sizeof(run), "%llu", pr ? (unsigned long long)pr->tasks_run : 0ULL);
        snprintf(stolen, sizeof(stolen), "%llu", pr ? (unsigned long long)pr->tasks_stolen : 0ULL);
        snprintf(given, sizeof(given), "%llu", pr ? (unsigned long long)pr->tasks_given : 0ULL);
        if (pr && pr->task_seconds > 0)
            snprintf(busy, sizeof(busy), "%.0f%%", 100 * pr->busy_fraction);
        else
            snprintf(busy, sizeof(busy), "-");
        if (r->slowness > 0)
            snprintf(slow, sizeof(slow), "%.2fx", r->slowness);
        else
            snprintf(slow, sizeof(slow), "-");
        tide_cli_table_add_row(t, cells);
        free(worker);
    }
    tide_buf_append_str(out, "Tasks:\n");
    tide_cli_table_render_indented(t, "  ", out);
    tide_cli_table_free(t);
}

void tide_cli_render_top_tasks(Tide__V1__Job *const *jobs, size_t n, int64_t now_ms, tide_buf_t *out)
{
    bool any = false;

    for (size_t i = 0; i < n; i++) {
        const Tide__V1__Job *j = jobs[i];
        double lo = 0, hi = 0, sum = 0;
        int k = 0;
        char *id;
        if (!tide_cli_job_uses_tasks(j))
            continue;
        /* The spread of the ranks' busy share: what stealing evens out (the article's +-20% -> +-5%). */
        for (size_t r = 0; r < j->n_ranks; r++) {
            const Tide__V1__TrainerProgress *p = j->ranks[r]->progress;
            if (!p || p->task_seconds <= 0)
                continue;
            if (k == 0 || p->busy_fraction < lo)
                lo = p->busy_fraction;
            if (k == 0 || p->busy_fraction > hi)
                hi = p->busy_fraction;
            sum += p->busy_fraction;
            k++;
        }
        if (!any)
            tide_buf_append_str(out, "\n");
        any = true;
        id = tide_cli_sanitize(j->id);
        tide_buf_printf(out, "tasks: job %s: %llu stolen, %llu committed", id, (unsigned long long)j->tasks_stolen,
                        (unsigned long long)j->tasks_committed);
        if (k > 0 && sum > 0)
            tide_buf_printf(out, "; busy %.0f%%..%.0f%% (mean %.0f%%)", 100 * lo, 100 * hi, 100 * sum / k);
        tide_buf_append_str(out, "\n");
        for (size_t r = 0; r < j->n_ranks; r++) {
            const Tide__V1__JobRank *jr = j->ranks[r];
            const Tide__V1__TrainerProgress *p = jr->progress;
            char tt[32], since[32] = "";
            char *w;
            if (jr->straggler == TIDE__V1__STRAGGLER_STATE__STRAGGLER_STATE_NONE)
                continue;
            w = tide_cli_sanitize(jr->worker_id);
            task_time(p ? p->task_seconds : 0, tt, sizeof(tt));
            if (jr->slow_since_ms > 0 && now_ms > jr->slow_since_ms)
                snprintf(since, sizeof(since), " for %llds", (long long)((now_ms - jr->slow_since_ms) / 1000));
            tide_buf_printf(out, "  rank %d on %s: %s, %s per task (%.2fx the median)%s, %llu tasks given away\n",
                            jr->rank, w, straggler_word(jr->straggler), tt, jr->slowness, since,
                            p ? (unsigned long long)p->tasks_given : 0ULL);
            free(w);
        }
        free(id);
    }
}

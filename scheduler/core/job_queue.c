/* Priority queues and the scheduling pass. One FIFO per class, served CRITICAL first. The head of the
 * highest class that cannot be placed blocks every job behind it (strict priority, no backfill yet),
 * except a job that could not run even on an empty cluster: it waits without blocking others. The pass
 * costs O(classes + jobs placed + jobs that can never fit) — never a scan of the workers. */
#include <stdio.h>
#include <stdlib.h>

#include "core_private.h"
#include "xmalloc.h"

void tide__queue_push(tide_core_t *core, tide_job_t *job, bool front)
{
    tide_list_t *q = &core->queues[job->spec.priority];

    tide_list_remove(&job->queue_node);
    if (front)
        tide_list_push_front(q, &job->queue_node);
    else
        tide_list_push_back(q, &job->queue_node);
    core->need_schedule = true;
}

void tide__queue_remove(tide_core_t *core, tide_job_t *job)
{
    if (core->blocker == job)
        core->blocker = NULL;
    tide_list_remove(&job->queue_node);
}

/* Tries the queue of one class; returns false when its head is blocked (lower classes must wait). */
static bool schedule_class(tide_core_t *core, tide_list_t *q, tide_worker_t ***scratch, size_t *cap)
{
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, q) {
        tide_job_t *job = tide_list_entry(pos, tide_job_t, queue_node);
        int32_t n;

        if (job->spec.min_workers > core->n_usable)
            continue; /* could not run even on an idle cluster: it does not block others */
        if ((size_t)job->spec.max_workers > *cap) {
            *cap = (size_t)job->spec.max_workers;
            *scratch = tide_xrealloc(*scratch, *cap * sizeof(**scratch));
        }
        n = tide__place(core, job, *scratch);
        if (n == 0) {
            core->blocker = job;
            return false;
        }
        tide__queue_remove(core, job);
        tide__job_start_generation(core, job, *scratch, n);
    }
    return true;
}

void tide__schedule(tide_core_t *core)
{
    tide_worker_t **scratch = NULL;
    size_t cap = 0;

    if (core->scheduling || core->restoring)
        return;
    core->scheduling = true;
    while (core->need_schedule) {
        core->need_schedule = false;
        core->blocker = NULL;
        for (int p = TIDE_PRIO_COUNT - 1; p >= 0; p--) {
            if (!schedule_class(core, &core->queues[p], &scratch, &cap))
                break;
        }
    }
    core->scheduling = false;
    free(scratch);
}

const char *tide_core_job_reason(const tide_core_t *core, const tide_job_t *job, char *buf, size_t len)
{
    const tide_job_t *b = core->blocker;

    if (job->state != TIDE_JOB_PENDING)
        return job->message ? job->message : "";
    if (job->spec.min_workers > core->n_usable)
        snprintf(buf, len, "waiting: needs %d worker(s), the cluster has %d usable", job->spec.min_workers,
                 core->n_usable);
    else if (b == job)
        snprintf(buf, len, "waiting for %d free worker(s) (%d free now)", job->spec.min_workers,
                 core->n_free);
    else if (b && b->spec.priority >= job->spec.priority)
        snprintf(buf, len, "queued behind job %s (%s), which waits for %d free worker(s)", b->id,
                 tide_prio_name(b->spec.priority), b->spec.min_workers);
    else
        snprintf(buf, len, "%s", job->message && job->message[0] ? job->message : "queued");
    return buf;
}

/* The workers that may hold a job's hot checkpoints (ckpt_holders.h). Invariant: job->ckpt_holders has no
 * duplicates and every entry is in job->ckpt_holder_set, whose keys point at those same strings (the
 * array may move on growth, the strings never do). */
#include "ckpt_holders.h"

#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

struct tide_ckpt_holder {
    const char *id; /* borrowed from job->ckpt_holders */
    UT_hash_handle hh;
};

bool tide__ckpt_holder_has(const tide_job_t *job, const char *worker_id)
{
    struct tide_ckpt_holder *h = NULL;

    if (!worker_id || !worker_id[0])
        return false;
    HASH_FIND_STR(job->ckpt_holder_set, worker_id, h);
    return h != NULL;
}

bool tide__ckpt_holder_add(tide_job_t *job, const char *worker_id)
{
    struct tide_ckpt_holder *h;
    char *id;

    if (!worker_id || !worker_id[0] || tide__ckpt_holder_has(job, worker_id))
        return false;
    if (job->n_ckpt_holders == job->cap_ckpt_holders) {
        job->cap_ckpt_holders = job->cap_ckpt_holders ? 2 * job->cap_ckpt_holders : 4;
        job->ckpt_holders =
            tide_xrealloc(job->ckpt_holders, (size_t)job->cap_ckpt_holders * sizeof(*job->ckpt_holders));
    }
    id = tide_xstrdup(worker_id);
    job->ckpt_holders[job->n_ckpt_holders++] = id;
    h = tide_xcalloc(1, sizeof(*h));
    h->id = id;
    HASH_ADD_KEYPTR(hh, job->ckpt_holder_set, h->id, strlen(h->id), h);
    return true;
}

void tide__ckpt_holders_forget(tide_core_t *core, tide_job_t *job)
{
    for (int32_t i = 0; i < job->n_ckpt_holders; i++) {
        tide_action_t *a = tide__act(core, TIDE_ACT_FORGET_CKPT);
        tide_worker_t *w = tide_core_worker_find(core, job->ckpt_holders[i]);
        a->job = job;
        a->job_id = job->id;
        a->worker_id = tide__keep(core, job->ckpt_holders[i]);
        if (w && w->connected && w->conn) {
            a->worker = w;
            a->conn = w->conn;
        }
    }
}

void tide__ckpt_holders_free(tide_job_t *job)
{
    struct tide_ckpt_holder *h, *tmp;

    HASH_ITER(hh, job->ckpt_holder_set, h, tmp) {
        HASH_DEL(job->ckpt_holder_set, h);
        free(h);
    }
    for (int32_t i = 0; i < job->n_ckpt_holders; i++)
        free(job->ckpt_holders[i]);
    free(job->ckpt_holders);
    job->ckpt_holders = NULL;
    job->n_ckpt_holders = job->cap_ckpt_holders = 0;
}

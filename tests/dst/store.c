/* The fake store (see store.h). Invariant: the records change only through store_commit, one whole
 * batch at a time, so what a restart reads is exactly the state after some committed loop turn. */
#include "store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

store_t *store_new(void)
{
    return tide_xcalloc(1, sizeof(store_t));
}

void store_free(store_t *s)
{
    store_job_t *j, *jt;
    store_worker_t *w, *wt;

    if (!s)
        return;
    HASH_ITER(hh, s->jobs, j, jt) {
        HASH_DEL(s->jobs, j);
        store_job_free(j);
    }
    HASH_ITER(hh, s->workers, w, wt) {
        HASH_DEL(s->workers, w);
        free(w);
    }
    free(s);
}

static void ckpt_copy(tide_checkpoint_t *dst, const tide_checkpoint_t *src)
{
    *dst = *src;
    dst->path = tide_xstrdup(src->path ? src->path : "");
    dst->sha256 = tide_xstrdup(src->sha256 ? src->sha256 : "");
}

store_job_t *store_job_snapshot(const tide_job_t *job)
{
    store_job_t *j = tide_xcalloc(1, sizeof(*j));
    int32_t n = job->n_ranks;

    snprintf(j->id, sizeof(j->id), "%s", job->id);
    j->seq = job->seq;
    tide_job_spec_copy(&j->spec, &job->spec);
    j->state = job->state;
    j->generation = job->generation;
    j->n_workers = n;
    j->worker_ids = tide_xcalloc((size_t)n + 1, sizeof(char *));
    j->rank_states = tide_xcalloc((size_t)n + 1, sizeof(*j->rank_states));
    j->codes = tide_xcalloc((size_t)n + 1, sizeof(int32_t));
    j->local = tide_xcalloc((size_t)n + 1, sizeof(int32_t));
    j->group = tide_xcalloc((size_t)n + 1, sizeof(int32_t));
    j->mirrors = tide_xcalloc((size_t)n + 1, sizeof(char *));
    for (int32_t r = 0; r < n; r++) {
        j->worker_ids[r] = tide_xstrdup(job->ranks[r].worker_id);
        j->mirrors[r] = tide_xstrdup(job->ranks[r].mirror_id ? job->ranks[r].mirror_id : "");
        j->rank_states[r] = job->ranks[r].state;
        j->codes[r] = job->ranks[r].exit_code;
        j->local[r] = job->ranks[r].local_rank;
        j->group[r] = job->ranks[r].group_rank;
    }
    j->master_addr = tide_xstrdup(job->master_addr ? job->master_addr : "");
    j->master_port = job->master_port;
    j->message = tide_xstrdup(job->message ? job->message : "");
    j->submit_ms = job->submit_ms;
    j->start_ms = job->start_ms;
    j->end_ms = job->end_ms;
    j->gen_start_ms = job->gen_start_ms;
    j->gpu_seconds = job->gpu_seconds;
    j->exit_code = job->exit_code;
    j->failed_rank = job->failed_rank;
    if ((j->has_last = job->last_ckpt.step >= 0))
        ckpt_copy(&j->last, &job->last_ckpt);
    if ((j->has_durable = job->durable_ckpt.step >= 0))
        ckpt_copy(&j->durable, &job->durable_ckpt);
    j->ckpt_request = job->ckpt_request;
    j->ckpt_deadline_ms = job->ckpt_deadline_ms;
    j->flushed_bytes = job->flushed_bytes;
    j->flushes = job->flushes;
    j->preemptions = job->preemptions;
    j->target_workers = job->target_workers;
    j->resizes = job->resizes;
    j->run_class = (int32_t)(job->state == TIDE_JOB_PENDING ? job->eff_priority : job->run_priority) + 1;
    j->restarts = job->restarts;
    j->restarts_in_row = job->restarts_in_row;
    j->restart_at_ms = job->restart_at_ms;
    j->recovering = job->state == TIDE_JOB_PENDING && job->recovering;
    j->n_sources = 2 * job->n_prev_src;
    j->sources = tide_xcalloc((size_t)j->n_sources + 1, sizeof(char *));
    for (int32_t i = 0; i < j->n_sources; i++)
        j->sources[i] = tide_xstrdup(job->prev_src[i] ? job->prev_src[i] : "");
    j->n_gens = job->n_history;
    j->gens = tide_xcalloc((size_t)job->n_history + 1, sizeof(*j->gens));
    for (int32_t i = 0; i < job->n_history; i++) {
        j->gens[i] = job->history[i];
        j->gens[i].detail = tide_xstrdup(job->history[i].detail ? job->history[i].detail : "");
        j->gens[i].end = job->history[i].end ? tide_xstrdup(job->history[i].end) : NULL;
    }
    {
        /* As scheduler/daemon/convert.c writes them: the bound workers of an earlier generation. */
        const tide_list_t *pos;
        int32_t k = 0;
        tide_list_for_each(pos, &job->bound) k++;
        j->stopping_workers = tide_xcalloc((size_t)k + 1, sizeof(char *));
        j->stopping_gens = tide_xcalloc((size_t)k + 1, sizeof(int32_t));
        j->stopping_ranks = tide_xcalloc((size_t)k + 1, sizeof(int32_t));
        tide_list_for_each(pos, &job->bound) {
            const tide_worker_t *w = tide_list_entry(pos, tide_worker_t, bound_node);
            if (job->state == TIDE_JOB_RUNNING && w->generation == job->generation && w->rank < job->n_ranks)
                continue; /* its ranks are the record's; its lent slots' workers are listed here */
            j->stopping_workers[j->n_stopping] = tide_xstrdup(w->id);
            j->stopping_gens[j->n_stopping] = w->generation;
            j->stopping_ranks[j->n_stopping] = w->rank;
            j->n_stopping++;
        }
    }
    return j;
}

void store_job_free(store_job_t *j)
{
    if (!j)
        return;
    tide_job_spec_free(&j->spec);
    for (int32_t r = 0; r < j->n_workers; r++) {
        free(j->worker_ids[r]);
        free(j->mirrors[r]);
    }
    free(j->worker_ids);
    free(j->mirrors);
    for (int32_t i = 0; i < j->n_sources; i++)
        free(j->sources[i]);
    free(j->sources);
    for (int32_t i = 0; i < j->n_stopping; i++)
        free(j->stopping_workers[i]);
    free(j->stopping_workers);
    free(j->stopping_gens);
    free(j->stopping_ranks);
    for (int32_t i = 0; i < j->n_gens; i++) {
        free(j->gens[i].detail);
        free(j->gens[i].end);
    }
    free(j->gens);
    free(j->rank_states);
    free(j->codes);
    free(j->local);
    free(j->group);
    free(j->master_addr);
    free(j->message);
    if (j->has_last) {
        free(j->last.path);
        free(j->last.sha256);
    }
    if (j->has_durable) {
        free(j->durable.path);
        free(j->durable.sha256);
    }
    free(j);
}

static store_op_t *op_add(store_batch_t *b, store_op_kind_t kind)
{
    store_op_t *op = tide_xcalloc(1, sizeof(*op));

    op->kind = kind;
    if (b->tail)
        b->tail->next = op;
    else
        b->head = op;
    b->tail = op;
    b->n++;
    return op;
}

void store_batch_put_job(store_batch_t *b, store_job_t *j)
{
    op_add(b, SOP_PUT_JOB)->job = j;
}

void store_batch_del_job(store_batch_t *b, const char *id)
{
    store_op_t *op = op_add(b, SOP_DEL_JOB);

    snprintf(op->id, sizeof(op->id), "%s", id);
}

void store_batch_put_worker(store_batch_t *b, const char *id, bool cordoned)
{
    store_op_t *op = op_add(b, SOP_PUT_WORKER);

    snprintf(op->id, sizeof(op->id), "%s", id);
    op->cordoned = cordoned;
}

void store_batch_put_meta(store_batch_t *b, uint64_t next_seq)
{
    op_add(b, SOP_PUT_META)->next_seq = next_seq;
}

void store_batch_clear(store_batch_t *b)
{
    store_op_t *op = b->head, *next;

    for (; op; op = next) {
        next = op->next;
        store_job_free(op->job);
        free(op);
    }
    b->head = b->tail = NULL;
    b->n = 0;
}

store_job_t *store_job_find(store_t *s, const char *id)
{
    store_job_t *j;

    HASH_FIND_STR(s->jobs, id, j);
    return j;
}

void store_commit(store_t *s, store_batch_t *b)
{
    for (store_op_t *op = b->head; op; op = op->next) {
        store_job_t *old;
        store_worker_t *w;
        switch (op->kind) {
        case SOP_PUT_JOB:
            if ((old = store_job_find(s, op->job->id))) {
                HASH_DEL(s->jobs, old);
                store_job_free(old);
            }
            HASH_ADD_STR(s->jobs, id, op->job);
            op->job = NULL;
            break;
        case SOP_DEL_JOB:
            if ((old = store_job_find(s, op->id))) {
                HASH_DEL(s->jobs, old);
                store_job_free(old);
            }
            break;
        case SOP_PUT_WORKER:
            HASH_FIND_STR(s->workers, op->id, w);
            if (!w) {
                w = tide_xcalloc(1, sizeof(*w));
                snprintf(w->id, sizeof(w->id), "%s", op->id);
                HASH_ADD_STR(s->workers, id, w);
            }
            w->cordoned = op->cordoned;
            break;
        case SOP_PUT_META:
            s->next_seq = op->next_seq;
            break;
        }
    }
    if (b->n)
        s->commits++;
    store_batch_clear(b);
}

static int by_seq(const void *a, const void *b)
{
    const store_job_t *x = *(store_job_t *const *)a, *y = *(store_job_t *const *)b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int restore_job(tide_core_t *core, const store_job_t *j, tide_error_t *err)
{
    tide_job_record_t rec = {
        .id = j->id,
        .spec = &j->spec,
        .state = j->state,
        .generation = j->generation,
        .worker_ids = (const char *const *)j->worker_ids,
        .n_workers = j->n_workers,
        .rank_states = j->rank_states,
        .rank_exit_codes = j->codes,
        .rank_local_ranks = j->local,
        .rank_group_ranks = j->group,
        .master_addr = j->master_addr,
        .master_port = j->master_port,
        .message = j->message,
        .submit_ms = j->submit_ms,
        .start_ms = j->start_ms,
        .end_ms = j->end_ms,
        .gen_start_ms = j->gen_start_ms,
        .gpu_seconds = j->gpu_seconds,
        .exit_code = j->exit_code,
        .failed_rank = j->failed_rank,
        .last_ckpt = j->has_last ? &j->last : NULL,
        .ckpt_request = j->ckpt_request,
        .ckpt_deadline_ms = j->ckpt_deadline_ms,
        .durable_ckpt = j->has_durable ? &j->durable : NULL,
        .flushed_bytes = j->flushed_bytes,
        .flushes = j->flushes,
        .preemptions = j->preemptions,
        .target_workers = j->target_workers,
        .resizes = j->resizes,
        .run_class = j->run_class,
        .stopping_workers = (const char *const *)j->stopping_workers,
        .stopping_generations = j->stopping_gens,
        .stopping_ranks = j->stopping_ranks,
        .n_stopping = j->n_stopping,
        .restarts = j->restarts,
        .restarts_in_row = j->restarts_in_row,
        .generations = j->gens,
        .n_generations = j->n_gens,
        .rank_mirror_ids = (const char *const *)j->mirrors,
        .restore_sources = (const char *const *)j->sources,
        .n_restore_sources = j->n_sources,
        .restart_at_ms = j->restart_at_ms,
        .recovering = j->recovering,
    };
    return tide_core_job_restore(core, &rec, err);
}

int store_restore(store_t *s, tide_core_t *core, tide_error_t *err)
{
    size_t n = HASH_COUNT(s->jobs), i = 0;
    store_job_t **arr = tide_xcalloc(n + 1, sizeof(*arr)), *j, *jt;
    store_worker_t *w, *wt;
    int rc = 0;

    HASH_ITER(hh, s->jobs, j, jt) arr[i++] = j;
    qsort(arr, n, sizeof(*arr), by_seq);
    for (i = 0; i < n && rc == 0; i++)
        rc = restore_job(core, arr[i], err);
    free(arr);
    if (rc < 0)
        return rc;
    tide_core_restore_meta(core, s->next_seq);
    HASH_ITER(hh, s->workers, w, wt) tide_core_worker_restore(core, w->id, w->cordoned, w->cordoned ? "restored" : NULL);
    tide_core_restore_done(core);
    return 0;
}

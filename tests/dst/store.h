/* The fake store: what the scheduler shell committed, as the daemon keeps it (scheduler/daemon/
 * restore.c): job records, worker cordons and the job counter. Changes arrive as batches (the group
 * commit of one loop turn) and apply atomically; a batch not committed when the scheduler crashes is
 * lost. A restart rebuilds a fresh core from the records through tide_core_job_restore / restore_meta
 * / worker_restore / restore_done. */
#ifndef TIDE_DST_STORE_H
#define TIDE_DST_STORE_H

#include <uthash.h>

#include "core.h"
#include "dst.h"

/* A job's record: everything tide_job_record_t carries, deep-copied from the core at commit time. */
typedef struct store_job {
    char id[DST_ID_MAX];
    uint64_t seq;
    tide_job_spec_t spec;
    tide_job_state_t state;
    int32_t generation;
    int32_t n_workers;
    char **worker_ids;
    tide_rank_state_t *rank_states;
    int32_t *codes, *local, *group;
    char *master_addr;
    int32_t master_port;
    char *message;
    int64_t submit_ms, start_ms, end_ms, gen_start_ms;
    double gpu_seconds;
    int32_t exit_code, failed_rank;
    bool has_last, has_durable;
    tide_checkpoint_t last, durable;
    uint64_t ckpt_request;
    int64_t ckpt_deadline_ms;
    uint64_t flushed_bytes;
    uint32_t flushes;
    int32_t preemptions;
    int32_t target_workers;     /* ScaleJob's size; 0: none */
    int32_t resizes;
    int32_t run_class;          /* as the daemon's record: the class a RUNNING job runs with, + 1 */
    int32_t n_stopping;         /* workers still stopping a rank of an earlier generation, or lent (burst) */
    char **stopping_workers;
    int32_t *stopping_gens, *stopping_ranks;
    int32_t restarts, restarts_in_row; /* as the daemon's record (restart.c) */
    tide_generation_rec_t *gens;       /* the history, n_gens, oldest first; strings owned */
    int32_t n_gens;
    char **mirrors;                    /* n_workers: each rank's mirror peer ("": none) */
    char **sources;                    /* n_sources (even): the restore sources (tide_job_t.prev_src; "": none) */
    int32_t n_sources;
    int64_t restart_at_ms;             /* as the daemon's record */
    bool recovering;
    UT_hash_handle hh;
} store_job_t;

typedef struct store_worker {
    char id[32];
    bool cordoned;
    UT_hash_handle hh;
} store_worker_t;

typedef enum store_op_kind { SOP_PUT_JOB, SOP_DEL_JOB, SOP_PUT_WORKER, SOP_PUT_META } store_op_kind_t;

typedef struct store_op {
    store_op_kind_t kind;
    store_job_t *job; /* PUT_JOB; owned */
    char id[DST_ID_MAX > 32 ? DST_ID_MAX : 32];
    bool cordoned;
    uint64_t next_seq;
    struct store_op *next;
} store_op_t;

/* One loop turn's writes, applied in order. */
typedef struct store_batch {
    store_op_t *head, *tail;
    size_t n;
} store_batch_t;

struct store {
    store_job_t *jobs;
    store_worker_t *workers;
    uint64_t next_seq;
    uint64_t commits;
};

store_t *store_new(void);
void store_free(store_t *s);

/* A deep copy of the job's persistent fields. Caller frees with store_job_free. */
store_job_t *store_job_snapshot(const tide_job_t *job);
void store_job_free(store_job_t *j);

void store_batch_put_job(store_batch_t *b, store_job_t *j); /* takes ownership */
void store_batch_del_job(store_batch_t *b, const char *id);
void store_batch_put_worker(store_batch_t *b, const char *id, bool cordoned);
void store_batch_put_meta(store_batch_t *b, uint64_t next_seq);
/* Forgets the batch (the scheduler crashed before committing it). */
void store_batch_clear(store_batch_t *b);
/* Applies the batch atomically and empties it. */
void store_commit(store_t *s, store_batch_t *b);

store_job_t *store_job_find(store_t *s, const char *id);
/* Rebuilds core from the records, in the daemon's order (jobs by number, the counter, the workers),
 * then ends the restore (tide_core_restore_done). Returns 0 or the first restore error (err says). */
int store_restore(store_t *s, tide_core_t *core, tide_error_t *err);

#endif

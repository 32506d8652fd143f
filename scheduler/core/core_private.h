/* Internals shared by the core's files. Not for the shells. */
#ifndef TIDE_CORE_PRIVATE_H
#define TIDE_CORE_PRIVATE_H

#include "core.h"

/* Nodes are bucketed by their number of schedulable workers so placement finds the best-fitting node in
 * O(TIDE_NODE_BUCKETS) without sorting: bucket c holds nodes with exactly c free workers, the last one
 * nodes with TIDE_NODE_BUCKETS or more. */
#define TIDE_NODE_BUCKETS 64

struct tide_node {
    char *name;
    tide_list_t free;   /* schedulable workers, ordered by gpu_index */
    int32_t n_free;
    tide_list_t bucket; /* core->buckets[min(n_free, TIDE_NODE_BUCKETS)] while n_free > 0 */
    UT_hash_handle hh;
};

struct tide_core {
    tide_core_config_t cfg;
    int64_t now_mono, now_wall;
    bool restoring;
    uint64_t next_seq;

    tide_job_t *jobs;                    /* hash by id */
    tide_list_t jobs_by_seq;             /* every job, ascending seq */
    tide_list_t queues[TIDE_PRIO_COUNT]; /* PENDING jobs, FIFO per class */
    tide_heap_t timers;                  /* jobs with a deadline */
    int job_counts[6];                   /* by tide_job_state_t */

    tide_worker_t *workers;              /* hash by id */
    tide_node_t *nodes;                  /* hash by name */
    tide_list_t buckets[TIDE_NODE_BUCKETS + 1];
    int32_t n_free;                      /* schedulable workers in all nodes */
    int32_t n_usable;                    /* READY or BUSY and not cordoned: what could ever run a job */
    tide_list_t alive;                   /* READY/BUSY workers, ascending last_seen_mono */
    tide_list_t suspect;                 /* SUSPECT workers that can still come back, same order */
    int worker_counts[5];                /* by tide_worker_state_t; [0] = cordoned */

    tide_action_t *actions;
    size_t n_actions, cap_actions;
    char **strings; /* owned strings that actions point at */
    size_t n_strings, cap_strings;
    tide_list_t graveyard; /* dropped jobs, freed at actions_clear */

    bool need_schedule;
    bool scheduling;
    tide_job_t *blocker; /* the queue head the last pass could not place (it blocks the jobs behind it) */
};

/* A rank a worker reported running that belongs to no current job: it is being stopped, and its worker
 * takes no new rank until the exit arrives or a hello no longer lists it. */
typedef struct tide_stale_rank {
    char *job_id;
    int32_t generation;
    int32_t rank;
    bool seen; /* listed in the hello being reconciled */
} tide_stale_rank_t;

/* actions.c */
tide_action_t *tide__act(tide_core_t *core, tide_action_type_t type);
/* Copies s into storage that lives until actions_clear. */
const char *tide__keep(tide_core_t *core, const char *s);
void tide__event(tide_core_t *core, const char *type, tide_job_t *job, tide_worker_t *w,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void tide__persist_job(tide_core_t *core, tide_job_t *job);
void tide__persist_worker(tide_core_t *core, tide_worker_t *w);

/* job_lifecycle.c */
void tide__job_set_state(tide_core_t *core, tide_job_t *job, tide_job_state_t st);
void tide__job_set_message(tide_core_t *core, tide_job_t *job, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends a running or pending job in a final state, stopping its live ranks. */
void tide__job_finish(tide_core_t *core, tide_job_t *job, tide_job_state_t st);
void tide__job_rearm(tide_core_t *core, tide_job_t *job);
void tide__job_on_timer(tide_core_t *core, tide_job_t *job);
/* A rank of job lost its worker (dead, or forgot the rank). */
void tide__job_rank_lost(tide_core_t *core, tide_job_t *job, int32_t rank, const char *why);
/* Starts generation g+1 on the chosen workers (n of them, in rank order). */
void tide__job_start_generation(tide_core_t *core, tide_job_t *job, tide_worker_t **ws, int32_t n);
void tide__job_free(tide_job_t *job);
/* Moves rank r of job to state st, keeping the job's rank counters; notices a generation that has
 * fully started. */
void tide__slot_set(tide_core_t *core, tide_job_t *job, int32_t r, tide_rank_state_t st);
/* Emits job.reconciled once no rank of a restored job awaits its worker. */
void tide__job_maybe_reconciled(tide_core_t *core, tide_job_t *job);
/* tide_core_rank_started/exited without the scheduling pass (used while reconciling). */
void tide__rank_started(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                        int32_t rank, int32_t pid, int32_t master_port);
void tide__rank_exited(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                       int32_t rank, int32_t exit_code, const char *error);

/* job_checkpoint.c */
/* Forgets the checkpoint reports being collected (a new generation, or the job ends). */
void tide__ckpt_collect_reset(tide_job_t *job);
/* Ends the CheckpointJob request in flight, if any, unanswered (event job.checkpoint_missed). */
void tide__ckpt_request_end(tide_core_t *core, tide_job_t *job, const char *why);
/* Emits CHECKPOINT_NOW of the request in flight for rank r (running, with a worker). */
void tide__ckpt_send(tide_core_t *core, tide_job_t *job, int32_t r);
/* Deep copy into dst (whose strings are freed first). */
void tide__ckpt_copy(tide_checkpoint_t *dst, const tide_checkpoint_t *src);

/* job_queue.c */
void tide__queue_push(tide_core_t *core, tide_job_t *job, bool front);
void tide__queue_remove(tide_core_t *core, tide_job_t *job);
/* Runs a scheduling pass if one is needed and none is running. */
void tide__schedule(tide_core_t *core);

/* placement.c */
/* Picks between min and max schedulable workers for job, same node first. Returns the count (0: does
 * not fit) and fills ws (room for max entries) in rank order. */
int32_t tide__place(tide_core_t *core, const tide_job_t *job, tide_worker_t **ws);

/* worker_registry.c */
void tide__worker_set_state(tide_core_t *core, tide_worker_t *w, tide_worker_state_t st);
/* Re-evaluates whether w is schedulable and moves it in or out of its node's free list. */
void tide__worker_update_free(tide_core_t *core, tide_worker_t *w);
/* Binds w to rank r of job (BUSY) / releases it (READY if alive). */
void tide__worker_assign(tide_core_t *core, tide_worker_t *w, tide_job_t *job, int32_t rank);
void tide__worker_release(tide_core_t *core, tide_worker_t *w);
void tide__liveness_tick(tide_core_t *core);
/* The worker with that id, created as an unseen placeholder (SUSPECT, not connected) if absent. */
tide_worker_t *tide__worker_get_or_add(tide_core_t *core, const char *id);
void tide__worker_free(tide_worker_t *w);
/* Stale ranks (see tide_stale_rank_t): add (and STOP) / drop one / find one. */
void tide__stale_add(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t gen, int32_t rank,
                     const char *why);
bool tide__stale_drop(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t gen, int32_t rank);
void tide__node_free_all(tide_core_t *core);

#endif

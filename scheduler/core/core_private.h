/* Internals shared by the core's files. Not for the shells. */
#ifndef TIDE_CORE_PRIVATE_H
#define TIDE_CORE_PRIVATE_H

#include "core.h"

/* Placement index (topology_index.c). Workers that are interchangeable for placement form a shape:
 * the same pool, device and memory. Within a shape, domains nest node -> rack -> switch; each keeps its
 * count of schedulable (free) and usable workers, and sits in its shape's bucket for its free count, so
 * the best-fitting domain of a level is found in O(buckets) without sorting. A gang never mixes shapes
 * (ranks run in lockstep: the slowest GPU sets the pace). */
#define TIDE_NODE_BUCKETS 64
#define TIDE_DOMAIN_BUCKETS 1024

typedef enum tide_level {
    TIDE_LVL_NODE = 0,
    TIDE_LVL_RACK = 1,
    TIDE_LVL_SWITCH = 2,
    TIDE_LVL_SHAPE = 3, /* the whole shape (placement without a locality bound) */
} tide_level_t;
#define TIDE_LVL_DOMAINS 3

typedef struct tide_shape tide_shape_t;
typedef struct tide_domain tide_domain_t;

/* Scratch of one preemption search (preemption.c), valid while stamp matches. */
typedef struct tide_pscratch {
    uint64_t stamp;
    int32_t cap;         /* workers of the victims chosen so far inside this domain */
    int32_t last_victim; /* index of the last victim counted here */
} tide_pscratch_t;

struct tide_domain {
    char *key; /* node name, "r:" rack label or "s:" switch label; unique per shape and level */
    tide_level_t level;
    tide_shape_t *shape;
    tide_domain_t *parent; /* node -> rack -> switch; NULL for a switch */
    tide_list_t children;  /* domains one level down */
    tide_list_t child_node;
    tide_list_t free;      /* nodes: schedulable workers in gpu_index order */
    int32_t n_free;
    int32_t n_usable;
    tide_list_t bucket;    /* shape->buckets[level][min(n_free, cap)] while n_free > 0 */
    tide_pscratch_t ps;
    UT_hash_handle hh;     /* shape->domains[level] */
};

struct tide_shape {
    char *key; /* pool \x1f device \x1f memory */
    char *pool;
    char *device;
    uint64_t memory_bytes;
    int32_t dedicated; /* -1: shared; else the class whose jobs alone use it */
    int32_t n_free, n_usable;
    tide_domain_t *domains[TIDE_LVL_DOMAINS];
    tide_list_t *buckets[TIDE_LVL_DOMAINS]; /* n_buckets[level] + 1 lists each */
    int32_t max_usable[TIDE_LVL_DOMAINS];   /* largest n_usable of a domain per level (lazy) */
    bool max_dirty;
    uint64_t blocked_pass;  /* == core->pass: a job could not be placed here in this pass */
    tide_prio_t blocked_prio; /* the queue class of that job */
    bool blocked_reserve;     /* it waits only for the reserve (which LOW work may use) */
    uint64_t blocked_seq;   /* and its number */
    tide_pscratch_t ps;
    tide_list_t link;       /* core->shapes, ascending key */
    UT_hash_handle hh;
};

/* A physical node: groups ranks for LOCAL_RANK. */
struct tide_node {
    char *name;
    UT_hash_handle hh;
};

/* Why a PENDING job waits, as the last scheduling pass found it. */
typedef enum tide_wait {
    TIDE_WAIT_NONE = 0,
    TIDE_WAIT_NO_MATCH,  /* no usable worker matches its pool/device/memory */
    TIDE_WAIT_NEVER,     /* could not run even on the idle cluster (locality or size) */
    TIDE_WAIT_CAPACITY,  /* not enough free workers now */
    TIDE_WAIT_RESERVE,   /* only the headroom reserve is free */
    TIDE_WAIT_BEHIND,    /* the capacity it could use is held for an earlier job */
    TIDE_WAIT_STOPPING,  /* ranks of its previous generation are still stopping */
} tide_wait_t;

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

    /* RUNNING jobs by run_priority (job->run_node): preemption looks at the lower classes only */
    tide_list_t running[TIDE_PRIO_COUNT];
    int32_t n_preempting;                /* running jobs yielding to a higher class */

    tide_worker_t *workers;              /* hash by id */
    tide_node_t *nodes;                  /* hash by name */
    tide_shape_t *shapes;                /* hash by key */
    tide_list_t shape_list;              /* ascending key: placement tries shapes in this order */
    int32_t n_shapes;
    uint64_t pass;                       /* scheduling passes run; marks shapes blocked in this one */
    int32_t n_blocked;                   /* shapes blocked in this pass */
    int32_t n_blocked_reserve;           /* of them, by a job that waits only for the reserve */
    uint64_t alloc_stamp;                /* bumped whenever capacity or the running set changes */
    uint64_t usable_stamp;               /* bumped whenever the usable set or the reserve changes */
    uint64_t queue_version, pos_version; /* queue changes / the version queue positions were cached at */
    uint64_t scratch_stamp;              /* preemption searches */
    tide_domain_t **dscratch;            /* placement's sort scratch, used as a stack */
    size_t dscratch_cap, dscratch_used;
    int32_t n_free;                      /* schedulable workers in all nodes */
    int32_t low_busy;                    /* workers running LOW ranks (run_priority LOW) */
    int32_t n_usable;                    /* READY or BUSY and not cordoned: what could ever run a job */
    tide_list_t alive;                   /* READY/BUSY workers, ascending last_seen_mono */
    tide_list_t suspect;                 /* SUSPECT workers that can still come back, same order */
    int worker_counts[5];                /* by tide_worker_state_t; [0] = cordoned */
    int32_t n_departed;                  /* workers departed (in worker_counts[DEAD], not reported) */
    int32_t n_departed_cordoned;         /* of them, cordoned (in worker_counts[0], not reported) */

    tide_action_t *actions;
    size_t n_actions, cap_actions;
    uint64_t actions_epoch;   /* actions_clear calls so far */
    char **strings; /* owned strings that actions point at */
    size_t n_strings, cap_strings;
    tide_list_t graveyard; /* dropped jobs, freed at actions_clear */

    bool need_schedule;
    bool scheduling;
    bool ticking; /* firing timers: a timer re-armed at or before now waits for the next tick */

    /* headroom (reserve.c) */
    tide_reserve_t reserve;
    uint64_t failures;  /* usable workers that died (not a goodbye) */
    double gpu_hours;   /* usable GPU-hours observed */
    double burst_gpus;  /* sum of the running jobs' burst shares */

    /* work stealing (task_pool.c, straggler.c) */
    struct tide_id_chunk *id_chunks; /* task ids that GIVE_TASKS actions point at, until actions_clear */
    uint64_t next_release_id;        /* 0: not seeded yet */
    double *stat_scratch;            /* straggler medians */
    size_t stat_cap;

    /* elastic scaling (resize.c) */
    tide_list_t resizable;           /* RUNNING jobs whose size differs from their goal (job->resize_node) */
    uint64_t resize_stamp;           /* alloc_stamp when they were last looked at */
    bool resize_due;                 /* look at them after the next pass even if the stamp did not move */
    int32_t grow_claimed;            /* free workers decided grows count on until they are placed */
    uint64_t resizes_done[TIDE_RESIZE_REASONS]; /* completed resizes by reason, since start */
    double resize_seconds[TIDE_RESIZE_REASONS];  /* their latencies summed */

    /* phase-aware burst (lending.c) */
    tide_list_t lending;             /* jobs with lent workers bound (job->lend_node) */
    tide_burst_stats_t burst_stats;
};

/* A rank a worker reported running that belongs to no current job: it is being stopped, and its worker
 * takes no new rank until the exit arrives or a hello no longer lists it. */
typedef struct tide_stale_rank {
    char *job_id;
    int32_t generation;
    int32_t rank;
    bool seen; /* listed in the hello being reconciled */
} tide_stale_rank_t;

/* A worker stopping a rank of an earlier generation, read from a record (tide_job_record_t). */
typedef struct tide_stop_rec {
    char *worker_id;
    int32_t generation, rank;
} tide_stop_rec_t;

/* actions.c */
tide_action_t *tide__act(tide_core_t *core, tide_action_type_t type);
/* LAUNCH of rank r of the job's current generation to w (the slot moves to LAUNCHED). */
void tide__act_launch(tide_core_t *core, tide_job_t *job, tide_worker_t *w, int32_t r);
/* Takes back a LAUNCH of rank r of the job's current generation emitted in this same call (not handed
 * to the shell yet): true when there was one. O(actions of this call), and O(1) for a job that launched
 * nothing in this call. */
bool tide__unlaunch(tide_core_t *core, tide_job_t *job, int32_t r);
/* Copies s into storage that lives until actions_clear. */
const char *tide__keep(tide_core_t *core, const char *s);
void tide__event(tide_core_t *core, const char *type, tide_job_t *job, tide_worker_t *w,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void tide__persist_job(tide_core_t *core, tide_job_t *job);
void tide__persist_worker(tide_core_t *core, tide_worker_t *w);
/* Copies n task ids into storage that lives until actions_clear (NULL for none). No allocation in the
 * steady state: the storage is reused. */
const uint64_t *tide__keep_ids(tide_core_t *core, const uint64_t *ids, size_t n);
void tide__keep_ids_free(tide_core_t *core);

/* job_lifecycle.c */
void tide__job_set_state(tide_core_t *core, tide_job_t *job, tide_job_state_t st);
void tide__job_set_message(tide_core_t *core, tide_job_t *job, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends a running or pending job in a final state, stopping its live ranks. */
void tide__job_finish(tide_core_t *core, tide_job_t *job, tide_job_state_t st);
void tide__job_rearm(tide_core_t *core, tide_job_t *job);
void tide__job_on_timer(tide_core_t *core, tide_job_t *job);
/* A rank of job lost its worker (dead, or forgot the rank). */
void tide__job_rank_lost(tide_core_t *core, tide_job_t *job, int32_t rank, tide_failure_kind_t kind, const char *why);
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
/* Asks every running rank for a checkpoint now (deadline_ms from now; 0: 60 s), unless one is asked. */
void tide__ckpt_request(tide_core_t *core, tide_job_t *job, int64_t deadline_ms);
/* Deep copy into dst (whose strings are freed first). */
void tide__ckpt_copy(tide_checkpoint_t *dst, const tide_checkpoint_t *src);

/* ckpt_cadence.c */
/* The job's next cadence look, an interval from now (after a complete checkpoint, a generation's start,
 * a restore), or none when the job has no checkpoint, its cadence is off, or it is not RUNNING. Rearms. */
void tide__cadence_arm(tide_core_t *core, tide_job_t *job);
/* Its look is due: asks for a checkpoint unless one is asked or the job is busy; sets the next look. */
void tide__cadence_due(tide_core_t *core, tide_job_t *job);
/* The request in flight passed its deadline: when the cadence made it, the generation is not asked again
 * (event job.checkpoint_cadence_off). Call before tide__ckpt_request_end. */
void tide__cadence_missed(tide_core_t *core, tide_job_t *job);

/* job_queue.c */
void tide__queue_push(tide_core_t *core, tide_job_t *job, bool front);
void tide__queue_remove(tide_core_t *core, tide_job_t *job);
/* The monotonic time the next queued job ages, or INT64_MAX. */
int64_t tide__queue_next_deadline(const tide_core_t *core);
/* Runs a scheduling pass if one is needed and none is running. */
void tide__schedule(tide_core_t *core);

/* topology_index.c */
/* Puts w in the shape and domains its info and labels name (moving it if they changed). */
void tide__index_worker(tide_core_t *core, tide_worker_t *w);
/* Adds (+1) or removes (-1) w from the free / usable counts of its domains. */
void tide__index_free(tide_core_t *core, tide_worker_t *w, int delta);
void tide__index_usable(tide_core_t *core, tide_worker_t *w, int delta);
/* The domain of w at level (NULL for TIDE_LVL_SHAPE or an unindexed worker). */
tide_domain_t *tide__domain_at(const tide_worker_t *w, tide_level_t level);
/* The largest free / usable count of one domain at level in s (TIDE_LVL_SHAPE: the shape's). */
int32_t tide__shape_max_free(const tide_shape_t *s, tide_level_t level);
int32_t tide__shape_max_usable(tide_shape_t *s, tide_level_t level);
/* The smallest domain at level with at least k free workers, or NULL. */
tide_domain_t *tide__shape_best_fit(const tide_shape_t *s, tide_level_t level, int32_t k);
/* Whether a job may use shape s: pool, class, device and memory. */
bool tide__shape_matches(const tide_core_t *core, const tide_shape_t *s, const tide_job_t *job);
void tide__index_free_all(tide_core_t *core);

/* placement.c */
/* Picks between min and max schedulable workers for job in one shape that matches it, honouring its
 * topology (best-fitting node, then rack, then switch), the shapes blocked in this pass and, for work
 * above LOW, the headroom reserve. Returns the count (0: does not fit) and fills ws (room for max
 * entries) in rank order, grouped by node. *why says what stopped it when 0. */
int32_t tide__place(tide_core_t *core, tide_job_t *job, tide_worker_t **ws, tide_wait_t *why);
/* Up to k free workers near w0 (its node, then rack, switch, up to level; TIDE_LVL_SHAPE: the rest of
 * its shape), into ws (room for k). No reserve check: the caller bounds k. Returns the count. */
int32_t tide__place_near(tide_core_t *core, tide_worker_t *w0, tide_level_t level, int32_t k, tide_worker_t **ws);
/* The reserve a job must leave free: 0 for LOW work, the reserve less its hot spares for a job queued
 * again after a lost rank, else the whole reserve. */
int32_t tide__reserve_for(const tide_core_t *core, const tide_job_t *job);
/* The most free workers placement lets the job take now (the reserve kept for work above LOW). */
int32_t tide__reserve_limit(const tide_core_t *core, const tide_job_t *job);
/* The level a job's topology binds (TIDE_LVL_SHAPE for ANY). */
tide_level_t tide__job_level(const tide_job_t *job);
/* Whether the job could run on the cluster's usable workers were they all free (ignoring blocks). */
bool tide__could_fit(tide_core_t *core, const tide_job_t *job);
/* How many of the job's ranks the best single domain of its level could hold now (for reasons). */
int32_t tide__largest_fit(tide_core_t *core, const tide_job_t *job);

/* preemption.c */
/* The job could not be placed: when lower classes hold enough capacity, pick the victims that lose the
 * least work and make them checkpoint and yield. */
void tide__preempt_for(tide_core_t *core, tide_job_t *job, tide_wait_t why);
/* A victim checkpointed (or its grace ended): stop its ranks and queue it again. It keeps
 * preempted_by until its last rank stopped; so does a victim that stopped running otherwise. */
void tide__preempt_yield(tide_core_t *core, tide_job_t *job, const char *how);
/* A worker of job was released: when job yielded and its last rank stopped, the job it made room
 * for counts one victim less (and may look for others if it still does not fit). */
void tide__preempt_stopped(tide_core_t *core, tide_job_t *job);

/* ckpt_gate.c */
/* A new complete checkpoint: hold its durable copy or release it now. */
void tide__flush_on_checkpoint(tide_core_t *core, tide_job_t *job);
/* The gate's timer: look at the MFU and the deadline again. */
void tide__flush_check(tide_core_t *core, tide_job_t *job);
/* A new generation or the job's end: forget a copy in progress. */
void tide__flush_reset(tide_core_t *core, tide_job_t *job);

/* reserve.c */
void tide__reserve_update(tide_core_t *core);
/* The job's share of burst capacity (added while it runs). */
double tide__job_burst_share(const tide_core_t *core, const tide_job_t *job);

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
/* Queues a started job again (front of its class) after its ranks were stopped: preemption, a lost rank. */
void tide__job_requeue(tide_core_t *core, tide_job_t *job, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Cordons w with a reason (NULL: none) — operator, drain, quarantine, predicted failure — or, with
 * reason unchanged, only records the reason; persists and re-evaluates placement. No event. */
void tide__worker_cordon(tide_core_t *core, tide_worker_t *w, const char *reason);
/* resize.c: whether the job, moved off one of its workers (a predicted failure), would find a place: a free
 * worker of its kind (the hot spares allowed), or one fewer within min_workers. why says why not. */
bool tide__resize_room_to_move(tide_core_t *core, tide_job_t *job, const char **why);
/* drain.c: moves the job whose rank runs on the (cordoned) worker w to a new generation without it, for
 * reason TIDE_RESIZE_DRAIN or TIDE_RESIZE_PREDICTED (checkpoint first when it reports through the SDK);
 * why is for the events. */
void tide__worker_move_off(tide_core_t *core, tide_worker_t *w, tide_resize_reason_t reason, const char *why);

/* prediction.c: feeds w's newest telemetry to its risk tracker; a GPU predicted to fail is cordoned
 * and its job moved off it. O(1) but for the move. / Forgets w's trend (an operator uncordoned it). */
void tide__predict_sample(tide_core_t *core, tide_worker_t *w);
void tide__predict_reset(tide_worker_t *w);

/* restart.c (docs/fault-tolerance.md, "Restarts") */
/* A failure ended the running generation of job: rank (on w, NULL if unknown) was lost with its worker,
 * hung, or exited failing on its own (why says so). Within the job's restart policy it is queued again
 * at the front of its class (after its backoff: PENDING outside the queues until restart_at), else it
 * fails. Lost and hung ranks count toward w's quarantine. */
void tide__restart_failure(tide_core_t *core, tide_job_t *job, tide_failure_kind_t kind, int32_t rank,
                           tide_worker_t *w, const char *why);
/* Whether the job's restart policy restarts a failure of that kind. */
bool tide__restart_covers(const tide_job_t *job, tide_failure_kind_t kind);
/* The job's restart_at passed: it joins the front of its queue. */
void tide__restart_due(tide_core_t *core, tide_job_t *job);
const char *tide_restart_policy_name(int32_t policy);

/* history.c: the job's generation history */
/* The open generation ends (end: why, in words); unless a failure was noted, the next one starts for
 * cause (a static name). */
void tide__history_end(tide_core_t *core, tide_job_t *job, const char *cause, const char *end);
/* A failure ends the current generation: the next one is its recovery; notes the work lost. */
void tide__history_failure(tide_core_t *core, tide_job_t *job, const char *cause, const char *why);
/* A generation was placed (job->generation, n_ranks set) / every rank of it runs (job.recovered). */
void tide__history_begin(tide_core_t *core, tide_job_t *job);
void tide__history_running(tide_core_t *core, tide_job_t *job);
void tide__history_free(tide_job_t *job);
/* Replaces the history with copies of recs (a restored record); causes are mapped to the static names. */
void tide__history_restore(tide_job_t *job, const tide_generation_rec_t *recs, int32_t n);
const char *tide__history_cause(const char *name);

/* task_pool.c */
/* Drops the job's task pools (its generation or the job ended) and its straggler timer. No action. */
void tide__tasks_free(tide_job_t *job);
/* Rank r of the job's generation left: it is no victim and no thief any more (its steal ends, a
 * thief waiting on its release is served again). orphan: the tasks it still holds go back to the pool
 * for the next thief (it was lost with its worker); else (it exited by itself) they stay with it — it
 * may well have run them, and running them again would break exactly-once. */
void tide__tasks_rank_gone(tide_core_t *core, tide_job_t *job, int32_t r, bool orphan);
/* Lent slot r got a new worker: its place in the open pools starts afresh (not gone, no steal). */
void tide__tasks_slot_reset(tide_core_t *core, tide_job_t *job, int32_t r);
/* The job's steal_park_at passed: parked steals past their deadline are answered "none". */
void tide__tasks_park_expire(tide_core_t *core, tide_job_t *job);
/* w's stream ended (it may come back): its rank is asked for no release, and a thief waiting on its
 * outstanding release is served again (the release is re-sent, and its answer orphaned, later). */
void tide__tasks_worker_down(tide_core_t *core, tide_worker_t *w);
/* w registered: releases still outstanding to its rank are sent again (same ids); parked steals
 * retried. */
void tide__tasks_worker_up(tide_core_t *core, tide_worker_t *w);
/* Tasks thieves took from rank's deque in this generation. */
uint64_t tide__tasks_stolen_from(const tide_job_t *job, int32_t rank);
/* Steal requests since the last call, and the rank most stolen from since then (-1: none) with its
 * count; starts a new window. False when the generation opened no pool. */
bool tide__tasks_steal_window(tide_job_t *job, uint64_t *requests, int32_t *rank, uint64_t *count);

/* lending.c: phase-aware burst (docs/elastic.md, "Burst"). Lent slots are job->ranks[n_ranks ..
 * n_ranks + max_lent); a lent worker is bound to the job with w->rank = its slot. */
/* Burst slots for a generation of n ranks: ceil(n * burst_percent / 100), at least 1; 0: burst off. */
int32_t tide__burst_slots(const tide_job_t *job, int32_t n);
/* Whether rank is a lent slot of the job's current generation that w is bound to. */
bool tide__lent_slot_of(const tide_job_t *job, const tide_worker_t *w, int32_t generation, int32_t rank);
/* A lent slot's process started / exited / was lost with its worker (the slot is one that
 * tide__lent_slot_of accepts). Never changes the job's state. */
void tide__lent_started(tide_core_t *core, tide_job_t *job, int32_t rank, int32_t pid);
void tide__lent_exited(tide_core_t *core, tide_job_t *job, int32_t rank, int32_t exit_code, const char *error);
void tide__lent_lost(tide_core_t *core, tide_job_t *job, int32_t rank, const char *why);
/* A restored running job's record lists w in lent slot rank (bound to the job by the caller): the slot
 * is being taken back and awaits w's hello, which stops the process or reports its exit; the reconnect
 * deadline writes it off. */
void tide__lent_restore(tide_core_t *core, tide_job_t *job, int32_t rank, tide_worker_t *w);
/* The generation ends (its ranks, lent ones included, are being stopped): forget the lending's
 * bookkeeping; the lent workers stay bound until their exits, like the ranks'. */
void tide__burst_generation_end(tide_core_t *core, tide_job_t *job);
/* The job's burst_check_at passed. */
void tide__burst_on_timer(tide_core_t *core, tide_job_t *job);
/* After a pass: jobs queued for capacity get back what burst lent (lent workers are opportunistic). */
void tide__burst_after_pass(tide_core_t *core);
/* Frees the job's controller. */
void tide__burst_free(tide_job_t *job);
/* waiter (queued) does not fit (why): take back what burst lent in a shape it can use, or in any shape
 * when it waits only for the headroom reserve. True when lent workers of such a shape are coming back
 * (it waits for them instead of preempting anyone). O(jobs with lent workers x their lent slots). */
bool tide__burst_yield_for(tide_core_t *core, const tide_job_t *waiter, tide_wait_t why);
/* The job ended: forget any burst by resize and take it off core->lending. */
void tide__burst_job_end(tide_core_t *core, tide_job_t *job);
/* Every rank of a new generation runs: decide again (the phase may have moved on meanwhile). */
void tide__burst_started(tide_core_t *core, tide_job_t *job);
/* A burst resize (reason BURST) was called off before it was done: the lending is over. */
void tide__burst_resize_cancelled(tide_core_t *core, tide_job_t *job);

/* straggler.c: the lower median over the job's ranks (with a worker) of the progress double at byte
 * offset field (offsetof(tide_trainer_progress_t, ...)), counting values > 0; 0 when none. */
double tide__progress_median(tide_core_t *core, const tide_job_t *job, size_t field);

/* hang.c: rank r's step moved (or it reported its first): note when, and arm the job's check. */
void tide__hang_progress(tide_core_t *core, tide_job_t *job, int32_t r);
/* The job's hang_check_at passed: a hung rank stops the generation; else the next check is set. */
void tide__hang_check(tide_core_t *core, tide_job_t *job);

/* resize.c */
bool tide__job_uses_sdk(const tide_job_t *job);
bool tide__resize_in_progress(const tide_job_t *job);
/* The most workers the job's next generation may take: its goal (requested size, else max_workers),
 * lowered by a resize's cap; never below min_workers. */
int32_t tide__job_size_cap(const tide_job_t *job);
/* Puts the job in core->resizable, or takes it out, as its state and size say. */
void tide__resize_track(tide_core_t *core, tide_job_t *job);
/* What kept a resize from starting is over (a start, a cancelled yield, an abort, a reconcile): track
 * the job and, when it is off its goal, look at it after the next pass. */
void tide__resize_poke(tide_core_t *core, tide_job_t *job);
/* A worker of the job was released: when a resize is stopping and none is bound any more, the old
 * generation has stopped (the end of the stop phase). */
void tide__resize_old_stopped(tide_core_t *core, tide_job_t *job);
/* The checkpoint a resize waited for landed (how), or it cannot have one: stop the generation and queue
 * the job again with its size cap. No-op unless the resize is checkpointing. */
void tide__resize_go(tide_core_t *core, tide_job_t *job, const char *how);
/* The generation is ending (queued again): a checkpointing resize moves on to stopping. */
void tide__resize_stopping(tide_core_t *core, tide_job_t *job);
/* A new generation was placed / fully started: the resize's phases move on; done at the start. */
void tide__resize_placed(tide_core_t *core, tide_job_t *job);
void tide__resize_started(tide_core_t *core, tide_job_t *job);
/* The job ended: forget its resize (event job.resize_cancelled when one was under way). */
void tide__resize_abort(tide_core_t *core, tide_job_t *job, const char *why);
/* Its resize_at (checkpoint grace) or resize_check_at (dwell) passed. */
void tide__resize_on_timer(tide_core_t *core, tide_job_t *job);
/* After a scheduling pass: grow running jobs toward their goal when capacity freed. O(core->resizable)
 * when the capacity changed or a dwell ended, else O(1). */
void tide__resize_consider(tide_core_t *core);
/* Rank's worker is a persistent straggler: with replace_stragglers, a new generation of the same size
 * without that worker, when a free worker can take its place. */
void tide__resize_replace(tide_core_t *core, tide_job_t *job, int32_t rank);
/* Takes the job's excluded workers out of the free index for its placement, and puts them back. */
void tide__exclude_begin(tide_core_t *core, tide_job_t *job);
void tide__exclude_end(tide_core_t *core, tide_job_t *job);
void tide__resize_free(tide_job_t *job);
/* For a burst by resize (lending.c): workers a grow of the job could add now (free in its locality
 * domain within the reserve, up to max_workers; 0 while it cannot resize). */
int32_t tide__resize_burst_avail(tide_core_t *core, const tide_job_t *job);
/* Whether a resize may start now: running, fully started, not yielding, none in progress. */
bool tide__resize_can_begin(const tide_job_t *job);
/* Starts a resize of the job to `to` workers for reason (burst, burst_end, drain), detail for the
 * events; the caller checked tide__resize_can_begin. */
void tide__resize_begin(tide_core_t *core, tide_job_t *job, int32_t to, tide_resize_reason_t reason,
                        const char *detail);
/* lending.c: takes back the lent slot rank of the job now (its worker is drained). */
void tide__lent_take_back(tide_core_t *core, tide_job_t *job, int32_t rank, const char *why);

/* straggler.c */
/* Arms the job's straggler check (straggler_check_ms from now) unless armed: a rank reported a time
 * per task, or a task was stolen. */
void tide__straggler_arm(tide_core_t *core, tide_job_t *job);
/* The check itself (job timer): slowness and straggler states, job->stragglers, job.steals; re-arms
 * while the job runs. */
void tide__straggler_check(tide_core_t *core, tide_job_t *job);

#endif

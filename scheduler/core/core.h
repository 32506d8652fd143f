/* The scheduler core: a deterministic state machine, events in -> state change -> actions out
 * (design.md, "The one architectural rule"). It reads no clock, socket, file or random source: the shell
 * hands it the time (tide_core_set_time) and carries out the actions it emits. The daemon and the
 * simulator drive the same code; tests drive it with any interleaving from a seed.
 *
 * State machines are documented in docs/architecture.md ("Job states", "Worker states").
 *
 * Structs below are readable by the shells; everything in them is owned by the core and is read-only
 * outside it. Pointers to jobs and workers stay valid until the next tide_core_actions_clear() after the
 * core dropped them (a dropped object is kept until then so actions may point at it). */
#ifndef TIDE_CORE_H
#define TIDE_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uthash.h>

#include "error.h"
#include "health.h"
#include "heap.h"
#include "list.h"
#include "risk.h"

typedef enum tide_prio {
    TIDE_PRIO_LOW = 0,
    TIDE_PRIO_NORMAL = 1,
    TIDE_PRIO_HIGH = 2,
    TIDE_PRIO_CRITICAL = 3,
} tide_prio_t;
#define TIDE_PRIO_COUNT 4

/* Values match tide.v1.JobState. */
typedef enum tide_job_state {
    TIDE_JOB_PENDING = 1,
    TIDE_JOB_RUNNING = 2,
    TIDE_JOB_SUCCEEDED = 3,
    TIDE_JOB_FAILED = 4,
    TIDE_JOB_CANCELLED = 5,
} tide_job_state_t;

/* Values match tide.v1.WorkerState. */
typedef enum tide_worker_state {
    TIDE_WORKER_READY = 1,
    TIDE_WORKER_BUSY = 2,
    TIDE_WORKER_SUSPECT = 3,
    TIDE_WORKER_DEAD = 4,
} tide_worker_state_t;

typedef struct tide_kv {
    char *key;
    char *value;
} tide_kv_t;

/* Where a job's ranks must land (docs/policies.md, "Placement"). Values match tide.v1.Topology. ANY
 * still prefers one node, then one rack, then one switch; the others require it. */
typedef enum tide_topology {
    TIDE_TOPO_ANY = 0,
    TIDE_TOPO_NODE = 1,
    TIDE_TOPO_RACK = 2,
    TIDE_TOPO_SWITCH = 3,
} tide_topology_t;

/* Worker labels with a meaning to placement. A worker without a rack (switch) label is its node's own
 * rack (switch). A worker without a pool label is in TIDE_POOL_DEFAULT. */
#define TIDE_LABEL_POOL "pool"
#define TIDE_LABEL_RACK "rack"
#define TIDE_LABEL_SWITCH "switch"
#define TIDE_LABEL_NEW_ARCH "new-arch" /* any value but "false"/"0": immature hardware (docs/policies.md) */
#define TIDE_POOL_DEFAULT "default"
#define TIDE_POOL_NAME_MAX 63

/* What a job asks for. Owned by its job. */
typedef struct tide_job_spec {
    char *name;
    char **argv; /* argc entries */
    size_t argc;
    int32_t min_workers;
    int32_t max_workers;
    tide_prio_t priority;
    tide_kv_t *env; /* n_env entries */
    size_t n_env;
    char *workdir;
    int64_t time_limit_s; /* 0: none; at most TIDE_TIME_LIMIT_MAX_S */
    int32_t launcher;     /* tide.v1.Launcher: 0 unspecified (env), 1 env, 2 mpi */
    /* Policy (docs/policies.md). Zero values mean "the scheduler's default". */
    char *pool;                /* "" : any pool open to the job's class */
    uint64_t memory_per_rank;  /* bytes a rank needs on its GPU; 0: any GPU */
    tide_topology_t topology;
    char *device;              /* "" : any; else a case-insensitive substring of the worker's device */
    double ckpt_mfu_threshold; /* durable copies wait while the job's MFU is at or above this; 0: default */
    int64_t ckpt_deadline_s;   /* ... unless the newest durable copy is older than this; 0: default */
    bool adaptive_target;      /* MFU target lower early in the run, higher late */
    bool no_stealing;          /* its ranks never steal tasks from each other */
    /* Phase-aware burst (docs/elastic.md, "Burst"). */
    int32_t burst_percent;     /* 0: off; 1..100: lend up to ceil(n * this / 100) workers in high phases */
    char **burst_argv;         /* what lent workers run; n_burst_argv 0: the job's argv */
    size_t n_burst_argv;
    /* Restarts after failures (docs/fault-tolerance.md, "Restarts"). Zero values: the defaults. */
    int32_t restart_policy;     /* tide_restart_policy_t; 0: TIDE_RESTART_ON_LOSS */
    int32_t max_restarts;       /* restarts in a row before the job fails; 0: cfg.max_restarts */
    int64_t restart_backoff_ms; /* the second restart in a row waits this long, doubling; 0: the default */
    /* Checkpoint cadence (ckpt_cadence.c): once the job has a checkpoint, ask for one when the newest is
     * older than this; 0: cfg.ckpt_interval_ms; -1: never; else at least TIDE_CKPT_INTERVAL_MIN_S. */
    int64_t ckpt_interval_s;
    /* Security (docs/security.md): set by the daemon from the caller's identity, never by the request. */
    char *owner;  /* the identity that submitted it; NULL/"": the scheduler's own token (admin) */
    char *run_as; /* the Unix account its ranks run as on a root worker; NULL/"": the worker's own */
} tide_job_spec_t;

/* Which failures of a running job restart it at a new generation (values match tide.v1.RestartPolicy). */
typedef enum tide_restart_policy {
    TIDE_RESTART_DEFAULT = 0,    /* ON_LOSS */
    TIDE_RESTART_NEVER = 1,      /* any failure fails the job */
    TIDE_RESTART_ON_LOSS = 2,    /* a rank lost with its worker, or hung; a rank's failing exit fails it */
    TIDE_RESTART_ON_FAILURE = 3, /* also a rank's failing exit */
} tide_restart_policy_t;

/* What ended a generation with a failure (restart.c). */
typedef enum tide_failure_kind {
    TIDE_FAILURE_LOST = 0, /* a rank's worker died or forgot it (or a rank exited because a peer's did) */
    TIDE_FAILURE_HUNG = 1, /* a rank stopped making progress while alive */
    TIDE_FAILURE_EXIT = 2, /* a rank exited non-zero or by a signal on its own */
    TIDE_FAILURE_LEFT = 3, /* a rank's worker said goodbye and left (an allocation ended, a pod was deleted):
                              restarted like LOST, but not the job's or the GPU's bad luck: no quarantine
                              count, no restart in a row, no backoff */
} tide_failure_kind_t;

/* One generation of a job for its history (tidectl job; mirrors tide.v1.Generation). */
typedef struct tide_generation_rec {
    int32_t number;
    int32_t workers;
    const char *cause;     /* static: "submitted", "worker_lost", "hang", "rank_failed", ... */
    char *detail;          /* owned; "" when nothing more to say */
    int64_t start_ms;      /* wall: placed */
    int64_t running_ms;    /* wall: every rank confirmed running; 0: not (yet) */
    int64_t end_ms;        /* wall: 0 while current */
    char *end;             /* owned; NULL while current */
    int64_t resumed_step;  /* -1: from the beginning */
    int64_t failure_ms;    /* wall: the failure before it was detected; 0: not a recovery */
    int64_t steps_lost;    /* a recovery: steps after the resumed checkpoint the failed generation made; -1 unknown */
    double seconds_lost;   /* those steps x the median step time */
} tide_generation_rec_t;

#define TIDE_HISTORY_MAX 32 /* generations a job keeps in its history */
#define TIDE_QUARANTINE_MAX 16

/* Work stealing (docs/work-stealing.md). Values match tide.v1.TaskKind. */
typedef enum tide_task_kind {
    TIDE_TASK_MEMBER = 1,   /* micro-batches whose results join the step's collective */
    TIDE_TASK_DETACHED = 2, /* evaluation shards, preprocessing, checkpoint serialisation */
} tide_task_kind_t;

/* How a rank's speed compares with its job's (values match tide.v1.StragglerState). */
typedef enum tide_straggler {
    TIDE_STRAGGLER_NONE = 0,
    TIDE_STRAGGLER_SLOW = 1,      /* slower than the ratio, for less than the window */
    TIDE_STRAGGLER_PERSISTENT = 2 /* slower for the whole window: reported */
} tide_straggler_t;

/* Elastic scaling (docs/elastic.md). Values match tide.v1.ResizeReason / tide.v1.ResizeState. */
typedef enum tide_resize_reason {
    TIDE_RESIZE_REQUESTED = 1, /* JobService.ScaleJob */
    TIDE_RESIZE_GROW = 2,      /* capacity freed: toward max_workers or the requested size */
    TIDE_RESIZE_SHRINK = 3,    /* a higher class needed capacity: shrunk instead of evicted */
    TIDE_RESIZE_REPLACE = 4,   /* a persistent straggler swapped for a healthy worker */
    TIDE_RESIZE_BURST = 5,     /* phase-aware burst of a job without detached tasks: grown for a phase */
    TIDE_RESIZE_BURST_END = 6, /* ... and back to its size after the phase */
    TIDE_RESIZE_DRAIN = 7,     /* one of its workers was drained: a new generation without it */
    TIDE_RESIZE_PREDICTED = 8, /* one of its GPUs is predicted to fail: moved off it before it does */
} tide_resize_reason_t;
#define TIDE_RESIZE_REASONS 9

typedef enum tide_resize_state {
    TIDE_RESIZE_NONE = 0,
    TIDE_RESIZE_PENDING = 1,       /* accepted; cannot be satisfied now (detail says why) */
    TIDE_RESIZE_CHECKPOINTING = 2, /* its ranks were asked for a checkpoint */
    TIDE_RESIZE_STOPPING = 3,      /* the old generation's ranks are stopping */
    TIDE_RESIZE_STARTING = 4,      /* the new generation is placed; not every rank runs yet */
    TIDE_RESIZE_DONE = 5,          /* every rank of the new generation runs (last_resize only) */
} tide_resize_state_t;

/* A membership change: one new generation. Phases of the latency: decision -> checkpoint landed (or
 * its grace ended) -> last old rank stopped -> every rank of the new generation running. */
typedef struct tide_resize {
    tide_resize_state_t state;
    tide_resize_reason_t reason;
    int32_t from_workers, to_workers; /* to: what was asked; the new generation may get fewer (>= min) */
    int32_t workers;                  /* DONE: what the new generation got */
    int32_t from_generation, to_generation;
    char *detail;                     /* owned; never NULL once state != NONE */
    int64_t decided_ms, done_ms;      /* wall clock */
    double checkpoint_s, stop_s, start_s, total_s;
    int64_t decided_mono, ckpt_mono, stopped_mono; /* private to the core */
} tide_resize_t;

/* The durable copy of a job's last checkpoint (docs/policies.md, "Checkpoint gate"). */
#define TIDE_FLUSH_NONE 0    /* nothing to copy */
#define TIDE_FLUSH_HELD 1    /* waiting for the job's MFU to drop or its deadline */
#define TIDE_FLUSH_COPYING 2 /* FLUSH sent to the ranks' workers */

/* Values match tide.v1.Launcher. */
#define TIDE_LAUNCHER_ENV 1
#define TIDE_LAUNCHER_MPI 2

/* What a rank's trainer reported through the SDK (tide.v1.TrainerProgress). In memory only. */
typedef struct tide_trainer_progress {
    bool sdk;
    int64_t step; /* -1: none */
    int32_t phase; /* tide.v1.TrainerPhase */
    double step_flops;
    int64_t samples, tokens;
    double step_seconds;
    uint64_t steps_reported, rejected_reports;
    int64_t last_report_ms; /* wall clock */
    double flops_per_s, flops_per_s_5m, flops_per_s_life; /* achieved model FLOP/s (worker's windows) */
    double peak_flops;      /* its GPU's peak */
    double mfu;
    double hw_flops_per_s;  /* model + recomputed FLOP/s (~10 s); 0: not reported */
    double hfu;             /* hw_flops_per_s / peak_flops */
    /* Tasks (docs/work-stealing.md), over the rank's life in its generation. */
    uint64_t tasks_run, tasks_stolen, tasks_given;
    double task_seconds;       /* mean time per task over ~10 s; 0: none yet */
    double busy_fraction;      /* share of the last ~10 s spent in tasks */
    double steal_wait_seconds; /* total time its trainer waited for steals */
    bool high_load;            /* the trainer reports a high-load phase (tide_trainer_load_phase) */
    bool load_reported;        /* it reported its load at least once (else high_load means nothing) */
} tide_trainer_progress_t;

/* A checkpoint every rank of a generation reported (tide.v1.Checkpoint). */
typedef struct tide_checkpoint {
    int64_t step; /* -1: none yet */
    int32_t generation;
    char *path;   /* rank 0's, or the first rank's that named one; owned */
    uint64_t bytes;
    char *sha256; /* owned */
    int64_t time_ms;
    int32_t ranks;
    uint64_t request_id; /* the CheckpointJob request it satisfied; 0: none */
} tide_checkpoint_t;

#define TIDE_TIME_LIMIT_MAX_S (10LL * 365 * 24 * 3600)
/* The shortest checkpoint cadence a job may ask for (JobSpec.checkpoint_interval_seconds). */
#define TIDE_CKPT_INTERVAL_MIN_S 10

/* Mirrors tide.v1.Telemetry; `known` uses the same bits as TIDE_GPU_HAS_* (common/gpu/gpu.h). */
typedef struct tide_telemetry {
    double gpu_util; /* 0..1 */
    uint64_t mem_used_bytes;
    uint64_t mem_total_bytes;
    double temperature_c;
    double power_w;
    double mem_bw_util;
    uint32_t sm_clock_mhz, mem_clock_mhz;
    uint64_t throttle_reasons;
    uint64_t ecc_corrected, ecc_uncorrected;
    uint64_t xid_count;
    uint32_t last_xid;
    double net_util, storage_util; /* 0..1: the worker's node */
    uint32_t known;
} tide_telemetry_t;

typedef struct tide_node tide_node_t;
typedef struct tide_job tide_job_t;
typedef struct tide_worker tide_worker_t;

/* Where a rank of the current generation stands. Values match tide.v1.RankPhase. */
typedef enum tide_rank_state {
    TIDE_RANK_ASSIGNED = 1, /* placed; launch not sent yet (ranks > 0 wait for rank 0's port) */
    TIDE_RANK_LAUNCHED = 2, /* launch sent, start not confirmed */
    TIDE_RANK_RUNNING = 3,  /* the worker confirmed the process runs */
    TIDE_RANK_EXITED = 4,   /* exited (code in exit_code) */
    TIDE_RANK_LOST = 5,     /* its worker died or forgot it */
} tide_rank_state_t;

typedef struct tide_job_rank {
    char *worker_id;       /* kept after the worker is released, for the record */
    tide_worker_t *worker; /* NULL once released */
    int32_t local_rank;
    int32_t local_world_size;
    int32_t group_rank;
    tide_rank_state_t state;
    int32_t pid;
    int32_t exit_code;
    bool awaiting; /* restored after a scheduler restart; its worker has not re-registered yet */
    tide_trainer_progress_t progress;
    bool ckpt_reported; /* reported the checkpoint being collected (job->ckpt_collect_step) */
    bool flush_done;    /* reported the durable copy being collected (job->flush_step) */
    /* Stragglers (straggler.c): from progress.task_seconds, evaluated every straggler_check_ms. */
    tide_straggler_t straggler;
    double slowness;       /* task_seconds over the median of the job's ranks; 0: unknown */
    int64_t slow_since_ms; /* wall clock; 0: not slow */
    int64_t slow_since_mono;
    bool lent_stopping;    /* a lent (burst) slot taken back: STOP sent, the worker stays bound until the exit */
    int64_t advanced_mono; /* hang.c: when its reported step last moved; 0: it reported none */
    char *mirror_id;       /* the worker keeping its hot checkpoint mirror (tide_core_mirror_peer at placement) */
} tide_job_rank_t;

struct tide_job {
    char *id;     /* decimal job number */
    uint64_t seq; /* the same number; orders jobs */
    tide_job_spec_t spec;
    tide_job_state_t state;
    int32_t generation;
    tide_job_rank_t *ranks; /* n_ranks entries for the current generation, then max_lent burst slots:
                               ranks[n_ranks + i] is lent slot i (docs/elastic.md, "Burst") */
    int32_t n_ranks;
    int32_t ranks_running; /* ranks confirmed running in the current generation */
    int32_t ranks_exited;
    char *master_addr; /* rank 0's worker address */
    int32_t master_port;
    char *message;
    int64_t submit_ms, start_ms, end_ms; /* wall clock */
    int64_t gen_start_ms;                /* wall clock start of the current generation */
    double gpu_seconds;
    int32_t exit_code;
    int32_t failed_rank; /* -1 when none */
    int32_t rollbacks;   /* generations rolled back in a row */
    tide_checkpoint_t last_ckpt;  /* step -1 when none */
    uint64_t ckpt_request;        /* a CheckpointJob in flight; 0: none */
    int64_t ckpt_deadline_ms;     /* its deadline, wall clock */
    tide_checkpoint_t durable_ckpt; /* newest checkpoint copied to the durable directory; step -1: none */
    int32_t flush_state;          /* TIDE_FLUSH_*: the durable copy of last_ckpt */
    int64_t flush_step;           /* the step being held or copied; -1: none */
    int64_t flush_since_ms;       /* wall clock: held since / copying since */
    uint64_t flushed_bytes;       /* over the job's life */
    uint32_t flushes;             /* durable copies completed */
    tide_prio_t run_priority;     /* the class it was placed with (aging may raise it); preemption uses it */
    int32_t preemptions;          /* times it was preempted */
    char *preempted_by;           /* the job being made room for while it checkpoints and stops; NULL */
    double job_mfu;               /* job-level MFU a shell reported (tide_core_job_telemetry); -1: none */
    int32_t job_phase;            /* tide.v1.TrainerPhase from the same report */
    uint64_t tasks_stolen;        /* tasks moved between ranks' deques, over the job's life */
    uint64_t steal_requests;      /* steal requests of its ranks */
    uint64_t tasks_committed;     /* task completions committed */
    int32_t stragglers;           /* persistent stragglers among the current generation's ranks */
    int32_t target_workers;       /* the size ScaleJob asked for; 0: none (tide sizes it in [min, max]) */
    tide_resize_t resize;         /* in progress or pending; state NONE: none */
    tide_resize_t last_resize;    /* the newest completed one; state NONE: none */
    int32_t resizes;              /* completed resizes over the job's life */
    bool high_load;               /* its rank 0 reports a high-load phase (or the shell said so) */
    int32_t load_generation;      /* the generation whose rank 0 reported that (0: none yet) */
    int32_t max_lent;             /* burst slots of this generation (0: burst off) */
    int32_t lent_workers;         /* lent slots with a worker that is not being taken back */
    int32_t n_lent;               /* lent slots with a worker bound (lent, or stopping after a reclaim) */
    int32_t bursts;               /* times workers were lent to it, over its life */

    /* private to the core */
    tide_prio_t eff_priority;  /* its class in the queue: spec.priority raised by aging */
    int64_t queued_mono;       /* when it entered its current queue (aging counts from here) */
    bool queued_front;         /* put at the front of its queue (requeued), not in FIFO order */
    int64_t flush_check_at;    /* mono: next gate check of a held durable copy, 0: none */
    int64_t preempt_at;        /* mono: a preempted victim is stopped by then (checkpoint grace), 0: none */
    int32_t preempt_victims;   /* victims still yielding (or stopping their ranks) for this job */
    int32_t flush_pending;     /* ranks whose durable copy has not been reported */
    uint64_t flush_bytes_acc;
    char *flush_path_acc, *flush_sha_acc;
    uint64_t placed_stamp;     /* core->alloc_stamp when preemption was last found impossible */
    int64_t job_mfu_at;        /* mono time of job_mfu */
    int64_t gen_start_mono;
    int64_t time_limit_at;  /* mono, 0: none */
    int64_t launch_deadline; /* mono, 0: none */
    int64_t reconcile_deadline; /* mono, 0: none */
    int64_t prune_at;        /* mono, 0: none */
    int64_t ckpt_deadline_at; /* mono deadline of ckpt_request, 0: none */
    int64_t ckpt_cadence_at;  /* mono: the checkpoint cadence's next look (ckpt_cadence.c), 0: none */
    uint64_t cadence_request; /* the request the cadence made last; 0: none */
    int32_t cadence_off_gen;  /* a generation that missed a cadence request: not asked again; 0: none */
    int64_t ckpt_collect_step; /* the step whose checkpoint reports are being collected; -1: none */
    int32_t ckpt_collect_n;    /* ranks that reported it */
    uint64_t ckpt_collect_bytes;
    char *ckpt_collect_path, *ckpt_collect_sha256;
    int32_t awaiting;        /* ranks whose worker has not re-registered since a restart */
    int32_t ranks_unstarted; /* ranks of the generation still ASSIGNED or LAUNCHED */
    tide_list_t bound;       /* workers bound to this job (running or stopping one of its ranks) */
    bool dirty;              /* a PERSIST action is queued */
    bool dropped;
    tide_list_t queue_node;  /* in a priority queue while PENDING */
    tide_list_t run_node;    /* core->running[run_priority] while RUNNING */
    int32_t wait;            /* tide_wait_t: why it waited in the last pass it was tried */
    uint64_t wait_pass;      /* that pass (core->pass) */
    uint64_t never_stamp;    /* core->usable_stamp + 1 when it was found to fit nowhere, even idle */
    int32_t queue_pos;       /* cached by tide_core_job_queue_position */
    int32_t new_arch_ranks;  /* ranks of this generation on new-arch workers */
    double burst_share;      /* its part of core->burst_gpus while RUNNING */
    bool recovering;         /* queued again after a lost rank: may take the reserve's hot spares */
    struct tide_stop_rec *restore_stopping; /* from its record, bound at restore_done */
    int32_t n_restore_stopping;
    struct tide_task_pools *tasks; /* task_pool.c: the generation's pools; NULL: none */
    int64_t straggler_check_at;    /* mono: next straggler evaluation, 0: none */
    int64_t steal_park_at;         /* mono: the earliest parked steal's deadline, 0: none */
    uint64_t steals_reported;      /* tasks_stolen at the last job.steals event */
    int32_t size_cap;              /* resize.c: the next generation gets at most this many; 0: none */
    int32_t grow_claim;            /* free workers a grow decided on counts on (core->grow_claimed) */
    int64_t resize_at;             /* mono: a resizing job's checkpoint grace ends; 0: none */
    int64_t resize_check_at;       /* mono: its dwell ends and tide may resize it by itself; 0: none */
    char **exclude;                /* worker ids its next generations must not use (replaced stragglers) */
    int32_t n_exclude;
    uint32_t exclude_taken;        /* bit i: exclude[i] is out of the free index during a placement */
    tide_list_t resize_node;       /* core->resizable while RUNNING with a size other than its goal */
    int32_t grown_from;            /* the size tide grew it from by itself (reason grow); 0: not grown */
    uint64_t launch_epoch;         /* core->actions_epoch + 1 of the last call that emitted a LAUNCH for it */
    int32_t sdk_ranks;             /* ranks of this generation whose progress says they use the SDK */
    bool sdk_seen;                 /* a rank reported through the SDK (assumed after a restore) */
    struct tide_burst *burst;      /* lending.c: the phase controller (burst.h); NULL: burst off */
    int64_t burst_check_at;        /* mono: the next burst decision (hysteresis, dwell); 0: none */
    bool detached_seen;            /* a rank declared detached tasks (any generation) */
    double lend_cost_ms;           /* EWMA of a lent worker's launch-to-running time; 0: none measured */
    int64_t lend_mono;             /* when the newest lending was decided */
    int32_t burst_from, burst_to;  /* a burst by resize (no detached tasks): its size before, and during */
    tide_list_t lend_node;         /* core->lending while n_lent > 0 */
    int64_t hang_check_at;         /* hang.c: mono, next look for ranks that stopped making progress; 0: none */
    int32_t hangs;                 /* generations stopped because a rank hung, over its life */
    bool failing;                  /* restart.c: its generation is being stopped for a failure (short grace) */
    /* Restarts and history (restart.c, history.c). */
    int32_t restarts;              /* generations started again after a failure, over its life */
    int32_t restarts_in_row;       /* ... since the job last ran restart_window_ms without a failure */
    int64_t stable_since;          /* mono: running since (set when a generation first runs after a failure, or
                                      at a restore; resizes keep it); 0: not running since its last failure */
    int64_t restart_at;            /* mono: PENDING in its backoff, outside every queue until then; 0: none */
    int64_t restart_at_ms;         /* wall: the same moment, for readers */
    /* Workers that may hold its hot checkpoints (ckpt_holders.h): every worker a rank of it was launched on
     * (any generation, lent slots included) and every mirror peer chosen for a rank; ids in insertion
     * order, no duplicates. Each gets TIDE_ACT_FORGET_CKPT when the job ends. */
    char **ckpt_holders;
    int32_t n_ckpt_holders;
    int32_t cap_ckpt_holders;
    struct tide_ckpt_holder *ckpt_holder_set; /* uthash set over ckpt_holders' strings */
    char **prev_src;               /* 2 per rank of the previous generation: its worker's id, its mirror's
                                      (NULL when none): where that rank's newest checkpoint may be */
    int32_t n_prev_src;            /* ranks of prev_src */
    tide_generation_rec_t *history; /* n_history entries, oldest first, at most TIDE_HISTORY_MAX */
    int32_t n_history;
    const char *next_cause;        /* why the next generation starts (static); NULL: decided at its start */
    char *next_detail;
    int64_t next_failure_ms;       /* wall: the failure that ended the previous generation; 0: none */
    int64_t next_steps_lost;
    double next_seconds_lost;
    tide_list_t all_node;    /* core->jobs_by_seq */
    tide_heap_node_t timer;
    UT_hash_handle hh;
};

struct tide_worker {
    char *id;
    char *node_name;
    int32_t gpu_index;
    char *device;
    double peak_flops;
    uint64_t memory_bytes;
    tide_kv_t *labels;
    size_t n_labels;
    char *address;
    char *launcher_address; /* HOST:PORT of its WorkerLauncher (MPI daemons) */
    char *agent_sock;       /* its trainer socket path, on its node */
    char *version;
    tide_worker_state_t state;
    bool cordoned;
    char *cordon_reason; /* why, NULL when not cordoned or no reason was given */
    bool connected;
    /* It said goodbye and left (an allocation ended, a node was shut down): state DEAD, not connected, no
     * job. Kept (its cordon too) but hidden from listings and not in tide_core_worker_counts; registering
     * again under its id revives it. A worker that vanished without a goodbye is DEAD, not departed. */
    bool departed;
    tide_job_t *job; /* the job whose rank runs (or is stopping) here; NULL when none */
    int32_t rank;
    int32_t generation;
    tide_telemetry_t telemetry;
    int64_t last_heartbeat_ms; /* wall clock */
    void *conn;                /* the shell's handle for the worker's stream; opaque to the core */
    uint64_t boot_id;          /* the registered hello's agent process and stream (0: not told) */
    uint64_t stream_seq;

    /* private to the core */
    int64_t last_seen_mono;
    bool dirty;
    bool usable; /* counted in core->n_usable */
    tide_list_t bound_node;  /* job->bound while job is set */
    struct tide_stale_rank *stale; /* ranks of no current job still running here, being stopped */
    size_t n_stale;
    tide_node_t *node;
    struct tide_domain *dom; /* its node's domain in its shape (placement index) */
    bool new_arch;           /* labelled new-arch */
    bool low;                /* counted in core->low_busy (runs a LOW rank) */
    tide_risk_track_t risk;  /* prediction.c: its telemetry's trends (common/metrics/risk.h) */
    double risk_score;       /* the newest sample's failure risk, 0..1 */
    bool risk_acted;         /* predicted to fail and acted on; until an operator uncordons it */
    bool risk_waiting;       /* its job could not move yet (no room): said once, tried again */
    int64_t risk_retry_at;   /* mono: the next try to move its job off it */
    int64_t fail_mono[TIDE_QUARANTINE_MAX]; /* restart.c: when ranks here failed (lost, hung), a ring */
    int32_t n_fail;          /* entries of fail_mono written (the ring holds the newest quarantine_failures) */
    tide_list_t live_node; /* core->alive or core->suspect, ordered by last_seen_mono */
    tide_list_t free_node; /* dom->free while schedulable */
    UT_hash_handle hh;
};

typedef struct tide_core_config {
    int64_t heartbeat_interval_ms; /* 500 */
    int32_t suspect_after_missed;  /* 2 */
    int32_t dead_after_missed;     /* 3 */
    int64_t reconnect_deadline_ms; /* 30000: after a scheduler restart */
    int64_t launch_timeout_ms;     /* 30000: a rank not confirmed by then rolls the generation back */
    int32_t max_rollbacks;         /* 3: then the job fails */
    uint32_t stop_grace_ms;        /* 10000 */
    int64_t retention_ms;          /* 7 days: finished jobs are pruned after */

    /* Queues, pools and preemption (docs/policies.md). */
    int64_t aging_ms;              /* 30 min: a waiting job rises one class per this much wait, up to
                                      HIGH; 0: no aging */
    bool preemption;               /* true: a job may take capacity from lower classes */
    uint32_t preempt_grace_ms;     /* 30000: a victim's time to checkpoint before it is stopped */
    struct tide_pool_config {
        char name[TIDE_POOL_NAME_MAX + 1];
        int32_t dedicated; /* -1: shared; else the tide_prio_t whose jobs alone use it */
    } pools[16];
    int32_t n_pools;               /* pools named by the operator; others are shared */

    /* Checkpoint gate. */
    bool ckpt_flush;               /* false: no durable copies (no --ckpt-durable) */
    double ckpt_mfu_threshold;     /* 0.30 */
    int64_t ckpt_deadline_ms;      /* 30 min */
    int64_t ckpt_gate_check_ms;    /* 5000: how often a held copy looks at the MFU again */
    int64_t ckpt_copy_timeout_ms;  /* 30 min: a copy not answered by then is held and retried */
    int64_t ckpt_interval_ms;      /* 10 min: checkpoint cadence of a job that sets none; 0: off */

    /* Headroom reserve. */
    int32_t reserve_gpus;          /* -1: computed; else exactly this many */
    int32_t reserve_min_cluster;   /* 16: below this many usable GPUs the computed reserve is 0 */
    double failure_rate;           /* failures per GPU-hour; default 3 per 1,000 GPU-months */
    double replacement_lead_h;     /* 4 h: how long a failed GPU stays out */
    double reserve_quantile;       /* 0.99 */

    /* Restarts and quarantine (docs/fault-tolerance.md, "Restarts"). A running job's failure (a rank
     * lost with its worker, a hung rank, with restart policy ON_FAILURE a rank's failing exit) queues it
     * again at the front of its class, spares allowed, resuming from its newest checkpoint. */
    int32_t max_restarts;          /* 3: restarts in a row (a job's own max_restarts overrides), then it fails */
    uint32_t failure_stop_grace_ms; /* 1000: the surviving ranks of a failed generation get this long after
                                       SIGTERM (they are stuck in a collective or frozen: nothing to save) */
    int64_t restart_backoff_ms;    /* 1000: the first restart in a row is at once, the second waits this
                                      long, each further one twice the one before */
    int64_t restart_backoff_max_ms; /* 300000: the most a restart waits */
    int64_t restart_window_ms;     /* 600000: a generation that ran this long starts the count again */
    int32_t quarantine_failures;   /* 3 (at most TIDE_QUARANTINE_MAX): a worker where ranks failed (lost,
                                      hung) this often within the window is cordoned; 0: never */
    int64_t quarantine_window_ms;  /* 3600000 */

    /* Work stealing and stragglers (docs/work-stealing.md). */
    bool stealing;                 /* true; false: every steal request is answered with no tasks */
    int32_t max_task_pools;        /* 8: pools a job's generation may have open at once */
    uint32_t max_pool_tasks;       /* 1 << 20: tasks in one pool (TasksDeclared.total) */
    double straggler_ratio;        /* 1.25: a rank this much slower per task than the job's median is slow */
    int64_t straggler_window_ms;   /* 30000: slow this long makes it a (persistent) straggler */
    int64_t straggler_check_ms;    /* 5000: how often a job's ranks are compared */
    int64_t steal_park_ms;         /* 2000: a steal that cannot be served yet (a rank has not declared)
                                      waits at most this long, then gets "none" */

    /* Elastic scaling (docs/elastic.md). */
    bool auto_grow;                /* true: a running job that reports through the SDK grows toward
                                      max_workers when capacity frees and nothing waits for it */
    int64_t resize_dwell_ms;       /* 60000: a generation runs this long before tide resizes it by itself */
    uint32_t resize_grace_ms;      /* 30000: a resizing job's time to checkpoint before its ranks stop */
    double grow_min_gain;          /* 0.125: grow by itself only for at least max(1, ceil(n * this)) more */
    bool replace_stragglers;       /* false: a persistent straggler is reported; true: also replaced at a
                                      new generation when a healthy worker is free */
    /* Phase-aware burst (docs/elastic.md, "Burst"; burst.h has the meaning). */
    int64_t burst_enter_ms;        /* 2000: a high phase lasts this long before anything is lent */
    int64_t burst_exit_ms;         /* 2000: a normal phase lasts this long before lent workers go back */
    int64_t burst_min_dwell_ms;    /* 10000: lent workers stay at least this long */
    double burst_cost_factor;      /* 2.0: lend only when the phase's predicted rest > this x the cost */
    int64_t burst_lend_cost_ms;    /* 1000: a lent worker's start, until one was measured */
    int64_t burst_resize_cost_ms;  /* 30000: a burst resize's cost until the job's own resize was measured */

    /* Hang detection (docs/fault-tolerance.md): a rank whose trainer reports steps through the SDK and
     * whose step has not moved for max(hang_factor x the job's median step time, hang_min_ms) while its
     * process runs is hung: its generation is stopped and queued again (front of its class, spares
     * allowed), resuming from the newest checkpoint. */
    int64_t hang_min_ms;           /* 30000; 0: no hang detection */
    double hang_factor;            /* 10 */

    /* Failure prediction (docs/fault-tolerance.md, "Prediction"): each heartbeat's telemetry feeds the
     * GPU's risk tracker; a GPU predicted to fail is cordoned and its job moved off it (checkpoint, then
     * a new generation without it). */
    bool predict_failures;         /* true */
    tide_risk_cfg_t risk;          /* tide_risk_cfg_default: threshold 0.7 for 10 s, or a critical sign */
} tide_core_config_t;

/* Fills cfg with design.md's defaults. */
void tide_core_config_default(tide_core_config_t *cfg);

typedef enum tide_action_type {
    TIDE_ACT_PERSIST_JOB,    /* job: write its record */
    TIDE_ACT_DELETE_JOB,     /* job (dropped): delete its record */
    TIDE_ACT_PERSIST_WORKER, /* worker: write its record (cordon) */
    TIDE_ACT_PERSIST_META,   /* write the core's counters (next job number) */
    TIDE_ACT_WELCOME,        /* worker: its registration was accepted */
    TIDE_ACT_LAUNCH,         /* worker, job, rank: start that rank (job->ranks[rank], master_port) */
    TIDE_ACT_STOP,           /* worker, job id/generation/rank: stop that rank within grace_ms */
    TIDE_ACT_CLOSE_STREAM,   /* conn: close that worker stream (replaced by a newer one) */
    TIDE_ACT_EVENT,          /* event_type, job?, worker?, text */
    TIDE_ACT_CHECKPOINT_NOW, /* worker, job, generation, rank: relay checkpoint_now (request_id,
                                deadline_ms) to that rank's trainer */
    TIDE_ACT_FLUSH,          /* worker, job, generation, rank, step: copy the checkpoint that rank
                                reported for step to the durable directory, then report it
                                (tide_core_ckpt_flushed) */
    TIDE_ACT_RELEASE_TASKS,  /* worker (the victim), job, generation, rank, task_kind, step,
                                request_id (release id), max_tasks: ReleaseTasks */
    TIDE_ACT_GIVE_TASKS,     /* worker (the thief), job, generation, rank, task_kind, step,
                                request_id (its steal id), task_ids/n_task_ids (may be 0): GiveTasks */
    TIDE_ACT_FORGET_CKPT,    /* worker_id, job, job_id: the job ended; that worker drops the job's hot
                                checkpoints and the mirrors it keeps for it (ForgetCheckpoints). One per
                                job->ckpt_holders entry. worker and conn are set only when that worker is
                                connected now (else NULL: it missed it; its --ckpt-hot-ttl covers that) */
} tide_action_type_t;

typedef struct tide_action {
    tide_action_type_t type;
    tide_job_t *job;       /* may be NULL */
    tide_worker_t *worker; /* may be NULL */
    const char *job_id;    /* STOP, EVENT, DELETE_JOB, FORGET_CKPT: valid until actions_clear */
    const char *worker_id; /* EVENT, FORGET_CKPT */
    int32_t generation;    /* LAUNCH, STOP */
    int32_t rank;          /* LAUNCH, STOP; LAUNCH with rank >= job->n_ranks: a lent (burst) slot */
    int32_t master_port;   /* LAUNCH */
    uint32_t grace_ms;     /* STOP */
    void *conn;            /* CLOSE_STREAM, and the stream a WELCOME/LAUNCH/STOP goes to */
    const char *event_type; /* EVENT: "job.submitted" ...; static string */
    const char *text;       /* EVENT, STOP (reason): valid until actions_clear */
    uint64_t request_id;    /* CHECKPOINT_NOW */
    int64_t deadline_ms;    /* CHECKPOINT_NOW: wall clock */
    int64_t step;           /* FLUSH, RELEASE_TASKS, GIVE_TASKS */
    int32_t task_kind;      /* RELEASE_TASKS, GIVE_TASKS: tide_task_kind_t */
    uint32_t max_tasks;     /* RELEASE_TASKS */
    const uint64_t *task_ids; /* GIVE_TASKS: n_task_ids ids, valid until actions_clear */
    size_t n_task_ids;
} tide_action_t;

typedef struct tide_core tide_core_t;

/* Creates a core. cfg is copied (NULL: defaults). Never fails (aborts on OOM). */
tide_core_t *tide_core_new(const tide_core_config_t *cfg);
void tide_core_free(tide_core_t *core);
const tide_core_config_t *tide_core_config(const tide_core_t *core);

/* Sets the time for the events that follow: a monotonic clock for timers and the wall clock for
 * records. Time never goes backwards (a smaller mono is ignored). */
void tide_core_set_time(tide_core_t *core, int64_t mono_ms, int64_t wall_ms);
/* Fires every timer due at the current time (liveness, time limits, launch and reconnect deadlines,
 * retention). */
void tide_core_tick(tide_core_t *core);
/* The monotonic time of the next timer, or INT64_MAX when none: the shell may sleep until then. */
int64_t tide_core_next_deadline(const tide_core_t *core);

/* --- actions --- */
/* The actions emitted since the last clear, in order. Borrowed until tide_core_actions_clear. */
const tide_action_t *tide_core_actions(const tide_core_t *core, size_t *n);
/* Forgets the actions and frees objects the core dropped. */
void tide_core_actions_clear(tide_core_t *core);

/* --- jobs --- */
/* Checks a spec: -EINVAL with err naming the field ("min_workers must be >= 1"). */
int tide_job_spec_validate(const tide_job_spec_t *spec, tide_error_t *err);
/* Deep copy / free of a spec. */
void tide_job_spec_copy(tide_job_spec_t *dst, const tide_job_spec_t *src);
void tide_job_spec_free(tide_job_spec_t *spec);

/* Accepts a job: validates spec (-EINVAL, err names the field), copies it, queues the job and tries to
 * place it. *out is the new job (core-owned). */
int tide_core_job_submit(tide_core_t *core, const tide_job_spec_t *spec, tide_job_t **out,
                         tide_error_t *err);
/* Cancels a job: -ENOENT for an unknown id, -EALREADY when it already ended (err says its state). */
int tide_core_job_cancel(tide_core_t *core, const char *id, tide_job_t **out, tide_error_t *err);
tide_job_t *tide_core_job_find(const tide_core_t *core, const char *id);
/* Why the job is in its state, for people: a PENDING job's reason is computed now (what it waits for,
 * or which job it queues behind) into buf; other jobs' is their message. Never NULL. */
const char *tide_core_job_reason(const tide_core_t *core, const tide_job_t *job, char *buf, size_t len);
/* Every job in id order: first (NULL) then next. */
tide_job_t *tide_core_job_next(const tide_core_t *core, const tide_job_t *prev);
/* Jobs in each state. */
void tide_core_job_counts(const tide_core_t *core, int counts[6]);
/* A job's achieved model FLOP/s (~10 s) and the peak FLOP/s of its ranks' GPUs, from the progress
 * its ranks' workers report (docs/metrics.md). O(ranks). */
void tide_core_job_flops(const tide_job_t *job, double *achieved, double *peak);
/* The cluster's: every running rank's achieved FLOP/s, and the peak of every healthy (READY or BUSY)
 * GPU, idle and reserve ones included. O(jobs + workers): for status queries. */
void tide_core_cluster_flops(const tide_core_t *core, double *achieved, double *peak);
/* The utilization of each dimension (docs/metrics.md: compute is GPU utilization, then memory
 * bandwidth, network, storage I/O) as the mean over the workers that report it: for a job, the
 * workers of its running ranks (O(ranks)); for the cluster, every healthy (READY or BUSY) worker
 * (O(workers): for status queries). A dimension no worker reports is unknown (its bit clear). */
void tide_core_job_utilization(const tide_job_t *job, tide_utilization_t *out);
void tide_core_cluster_utilization(const tide_core_t *core, tide_utilization_t *out);
/* A GPU's failure risk (0..1) from its telemetry's trends (prediction.c, common/metrics/risk.h), and
 * the largest over healthy workers (O(workers)). */
double tide_core_worker_risk(const tide_worker_t *w);
void tide_core_cluster_risk(const tide_core_t *core, double *risk);

/* A job record read back from the store after a restart. Pointers are borrowed; the core copies. */
typedef struct tide_job_record {
    const char *id;
    const tide_job_spec_t *spec;
    tide_job_state_t state;
    int32_t generation;
    const char *const *worker_ids; /* n_workers, in rank order (current generation) */
    int32_t n_workers;
    const tide_rank_state_t *rank_states; /* n_workers entries */
    const int32_t *rank_exit_codes;       /* n_workers entries */
    const int32_t *rank_local_ranks;      /* n_workers entries */
    const int32_t *rank_group_ranks;      /* n_workers entries */
    const char *master_addr;
    int32_t master_port;
    const char *message;
    int64_t submit_ms, start_ms, end_ms, gen_start_ms;
    double gpu_seconds;
    int32_t exit_code;
    int32_t failed_rank;
    const tide_checkpoint_t *last_ckpt; /* NULL: none */
    uint64_t ckpt_request;
    int64_t ckpt_deadline_ms;
    const tide_checkpoint_t *durable_ckpt; /* NULL: none */
    uint64_t flushed_bytes;
    uint32_t flushes;
    int32_t preemptions;
    int32_t target_workers; /* 0: none */
    int32_t resizes;
    int32_t run_class; /* tide_prio_t + 1 (tide.v1.Priority) a RUNNING job runs with, or a PENDING one
                          is queued in, which aging may have raised; 0: its submitted class */
    /* Workers still stopping a rank of an earlier generation (n_stopping entries each): bound to the
     * job again at tide_core_restore_done, until they re-register or their reconnect deadline passes. */
    const char *const *stopping_workers;
    const int32_t *stopping_generations;
    const int32_t *stopping_ranks;
    int32_t n_stopping;
    int32_t restarts, restarts_in_row;
    const tide_generation_rec_t *generations; /* n_generations, oldest first; strings borrowed */
    int32_t n_generations;
    const char *const *rank_mirror_ids;   /* NULL or n_workers entries: each rank's mirror peer (NULL/"": none) */
    const char *const *restore_sources;   /* 2 per rank of the generation that wrote the newest checkpoint:
                                             its worker, its mirror (NULL/"": none); see tide_job_t.prev_src */
    int32_t n_restore_sources;            /* entries (even) */
    int64_t restart_at_ms;                /* PENDING in its restart backoff: when it is queued again; 0: none */
    bool recovering;                      /* PENDING to start again after a failure */
    const char *const *ckpt_holders;      /* n_ckpt_holders: tide_job_t.ckpt_holders */
    int32_t n_ckpt_holders;
} tide_job_record_t;

/* Restores a job after a restart (before workers register). A RUNNING job waits up to the reconnect
 * deadline for its workers to report its ranks. Returns -EEXIST for a duplicate id, -EINVAL for a bad
 * record. Call tide_core_restore_done() after the last one. */
int tide_core_job_restore(tide_core_t *core, const tide_job_record_t *rec, tide_error_t *err);
/* Restores the job-number counter (the next job gets at least next_seq). */
void tide_core_restore_meta(tide_core_t *core, uint64_t next_seq);
/* Restores a worker's cordon flag and its reason (NULL or "": none). A worker first known from an
 * uncordoned record is departed (hidden) until it registers: the record says nothing else about it. */
void tide_core_worker_restore(tide_core_t *core, const char *id, bool cordoned, const char *reason);
/* Ends the restore: pending jobs are queued in submission order and placement starts. */
void tide_core_restore_done(tide_core_t *core);
uint64_t tide_core_next_seq(const tide_core_t *core);

/* --- workers --- */
typedef struct tide_worker_info {
    const char *id;
    const char *node;
    int32_t gpu_index;
    const char *device;
    double peak_flops;
    uint64_t memory_bytes;
    const tide_kv_t *labels;
    size_t n_labels;
    const char *address;
    const char *launcher_address;
    const char *agent_sock;
    const char *version;
    /* Which of the agent's streams this is (WorkerHello.boot_id, stream_seq; 0: not told). A hello ordered
     * before the registered one (a lower boot_id, or the same with a lower stream_seq) is refused while
     * the worker is not DEAD: it comes from a stream the agent, or its previous process, gave up. */
    uint64_t boot_id;
    uint64_t stream_seq;
} tide_worker_info_t;

/* What a registering worker reports of a rank it runs or ran. */
typedef struct tide_rank_report {
    const char *job_id;
    int32_t generation;
    int32_t rank;
    bool running; /* false: exited with exit_code */
    int32_t exit_code;
    int32_t pid;
    int32_t master_port;
    const char *error; /* launch error text, may be NULL */
} tide_rank_report_t;

/* A worker (re)registers on stream conn with the ranks it runs and the exits it has not reported.
 * -EINVAL with err for a bad info (empty id); -ESTALE with err, and nothing changed, for a hello from an
 * older stream of the registered agent (info->boot_id, stream_seq). Emits WELCOME to conn, CLOSE_STREAM
 * for a replaced stream, STOP for ranks the core does not know, and reconciles the rest. *out is the
 * worker. */
int tide_core_worker_register(tide_core_t *core, const tide_worker_info_t *info, void *conn,
                              const tide_rank_report_t *ranks, size_t n_ranks, tide_worker_t **out,
                              tide_error_t *err);
/* A heartbeat: O(1), no allocation. */
void tide_core_worker_heartbeat(tide_core_t *core, tide_worker_t *w, const tide_telemetry_t *t);
/* The worker's stream on conn ended. goodbye: the worker said it is shutting down: its ranks are lost
 * (it stopped them), it is DEAD and departed (event worker.departed, not a failure). Without goodbye it is
 * SUSPECT, then DEAD if it does not come back. Ignored when conn is not the worker's current stream. */
void tide_core_worker_disconnected(tide_core_t *core, tide_worker_t *w, void *conn, bool goodbye);
/* A rank started (pid; rank 0 reports MASTER_PORT). Stale generations are ignored. */
void tide_core_rank_started(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                            int32_t rank, int32_t pid, int32_t master_port);
/* What rank `rank` of (job_id, generation) reported through the trainer SDK, from its worker's
 * heartbeat. O(1), no allocation, no action; ignored unless w runs that rank now. */
void tide_core_rank_progress(tide_core_t *core, tide_worker_t *w, const char *job_id,
                             int32_t generation, int32_t rank, const tide_trainer_progress_t *p);
/* A rank reported that it saved its part of a checkpoint of the state after `step`. When every
 * rank of the generation reported the same step, it becomes the job's last checkpoint (PERSIST,
 * event job.checkpoint) and ends a CheckpointJob request in flight. Reports from other
 * generations, or for steps at or below the last checkpoint, are ignored. */
void tide_core_checkpoint_saved(tide_core_t *core, tide_worker_t *w, const char *job_id,
                                int32_t generation, int32_t rank, int64_t step, const char *path,
                                uint64_t bytes, const char *sha256);
/* Scales a job (JobService.ScaleJob, docs/elastic.md): its requested size becomes `workers` (elastic:
 * none; workers must then be 0). A running job of another size resizes now when the size can be had
 * (a shrink always can), else the resize is accepted and pending with the reason in job->resize; a
 * pending job is placed with at most that many. -ENOENT unknown id, -EALREADY the job ended, -EINVAL
 * workers outside [min_workers, max_workers] (err names the bounds). *out is the job. */
int tide_core_job_scale(tide_core_t *core, const char *id, int32_t workers, bool elastic, tide_job_t **out,
                        tide_error_t *err);
const char *tide_resize_reason_name(tide_resize_reason_t r);
/* Completed resizes since this scheduler started, and the sum of their latencies in seconds, by
 * reason (index = tide_resize_reason_t; 0 unused). For /metrics. */
void tide_core_resize_stats(const tide_core_t *core, uint64_t count[TIDE_RESIZE_REASONS],
                            double seconds[TIDE_RESIZE_REASONS]);
/* Phase-aware burst (docs/elastic.md, "Burst"): the job is (high) or is not in a high-load phase, as
 * its rank 0's trainer reports (the daemon passes TrainerProgress.high_load of rank 0 here through
 * tide_core_rank_progress; the simulator calls it directly). Drives lending for a job with burst on.
 * O(1) plus the lending it decides. */
void tide_core_job_load_phase(tide_core_t *core, tide_job_t *job, bool high);
/* Burst counters since this scheduler started: workers lent, workers lent now, burst decisions that
 * lent (bursts) and lent-worker seconds. For /metrics. */
typedef struct tide_burst_stats {
    uint64_t lent_total;   /* workers lent */
    int32_t lent_now;      /* workers lent now (not being taken back) */
    uint64_t bursts;       /* lendings */
    uint64_t reclaims;     /* lendings taken back */
    double lent_seconds;   /* lent-worker seconds of completed lendings */
} tide_burst_stats_t;
void tide_core_burst_stats(const tide_core_t *core, tide_burst_stats_t *out);
const char *tide_resize_state_name(tide_resize_state_t s);
/* Asks every rank of a running job for a checkpoint now (CHECKPOINT_NOW to each running rank,
 * PERSIST). deadline_ms from now (0: 60 s; at most a day). A request already in flight is
 * returned as is. -ENOENT unknown id, -EINVAL bad deadline, -EALREADY when the job is not RUNNING
 * (err says why). *out is the job. When the deadline passes first: event job.checkpoint_missed. */
int tide_core_job_checkpoint(tide_core_t *core, const char *id, int64_t deadline_ms,
                             tide_job_t **out, tide_error_t *err);
/* A rank exited with exit_code (128+N for signal N; 127 with error when it never started). */
void tide_core_rank_exited(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                           int32_t rank, int32_t exit_code, const char *error);
/* The shell's loop was stalled for ms (it could not read heartbeats): every worker gets that much more
 * time before it is suspected, so a slow scheduler does not fail a healthy fleet. O(workers); for the
 * rare stall only. */
void tide_core_liveness_grace(tide_core_t *core, int64_t ms);
/* Drains a worker (ClusterService.DrainWorker, docs/elastic.md "Drain"): cordons it and moves the job
 * whose current-generation rank runs there to a new generation without it (a resize of the same size,
 * reason drain: checkpoint first when the job reports through the SDK; placement then takes a free
 * worker, or fewer within min_workers, or the job waits queued); a lent (burst) process there is taken
 * back. reason (NULL or "": "drained") goes into the events. -ENOENT for an unknown id. *out is the
 * worker. */
int tide_core_worker_drain(tide_core_t *core, const char *id, const char *reason, tide_worker_t **out,
                           tide_error_t *err);
/* The worker that keeps rank's hot checkpoint mirror (docs/fault-tolerance.md, "Checkpoint tiers"): the
 * next rank's on another node, else a live worker on another node, else NULL. Core-owned. */
tide_worker_t *tide_core_mirror_peer(tide_core_t *core, const tide_job_t *job, int32_t rank);
/* Failures of ranks on w (lost, hung) within the quarantine window (docs/fault-tolerance.md). */
int32_t tide_core_worker_failures(const tide_core_t *core, const tide_worker_t *w);
/* Cordons (true) or uncordons a worker (which clears its reason and its failure count): -ENOENT for an
 * unknown id. */
int tide_core_worker_cordon(tide_core_t *core, const char *id, bool cordon, tide_worker_t **out,
                            tide_error_t *err);
tide_worker_t *tide_core_worker_find(const tide_core_t *core, const char *id);
/* Every worker in id order, departed ones included (sorted on demand; O(n log n), for listings). Caller
 * frees the array. */
tide_worker_t **tide_core_workers_sorted(const tide_core_t *core, size_t *n);
/* Workers in each state (index = state), and cordoned ones in counts[0]; departed workers not counted. */
void tide_core_worker_counts(const tide_core_t *core, int counts[5]);

/* The shell knows the worker is gone (its node failed, or a fault model says so): DEAD now, its rank
 * lost. why is for the event. Ignored for an unknown or already dead worker. */
void tide_core_worker_failed(tide_core_t *core, tide_worker_t *w, const char *why);

/* --- work stealing (docs/work-stealing.md) ---
 * A pool is (job, generation, kind, step). Every call below checks that w runs `rank` of the job's
 * current generation; a report that fails a check returns an error with err naming what is wrong
 * (the shell logs and counts it) and changes nothing. Reports for an older generation return
 * -ESTALE and change nothing. Cost: O(ids in the call + log ranks) plus a bounded victim scan; the
 * declaration that opens a pool is O(ranks + total) (it sizes the pool's table once; no allocation
 * per task after that), and a rank lost with its worker costs a scan of its pools' tables. */

/* Rank `rank` declared its share (ids, n) of a pool of `total` tasks. Creates the pool at the first
 * declaration (-ENOSPC when the job has max_task_pools open ones that are not complete; the oldest
 * complete pool is dropped to make room). -EINVAL: total is 0 or above max_pool_tasks, differs
 * from the pool's, the declared ids would exceed it, an id repeats or is already in the pool.
 * -EALREADY: the rank declared this pool before (an identical repeat returns 0 and changes nothing).
 * Parked steal requests of the pool are tried again. */
int tide_core_tasks_declared(tide_core_t *core, tide_worker_t *w, const char *job_id,
                             int32_t generation, int32_t rank, tide_task_kind_t kind, int64_t step,
                             const uint64_t *ids, size_t n, uint64_t total, tide_error_t *err);
/* Rank `rank`'s trainer finished these tasks: each is committed (job->tasks_committed). A task the
 * rank does not hold, or that was never declared: -EINVAL (the others in the call still commit); one
 * already committed by this rank: a no-op. queued: what its deque still holds (victim choice). */
int tide_core_tasks_done(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                         int32_t rank, tide_task_kind_t kind, int64_t step, const uint64_t *ids,
                         size_t n, uint32_t queued, tide_error_t *err);
/* Rank `rank`'s deque is empty: picks a victim (most queued tasks, then nearest: same node, rack,
 * switch) and emits RELEASE_TASKS to it; or GIVE_TASKS at once with tasks of a dead holder, or with
 * none when no rank can have queued tasks and every rank declared (or stealing is off for the job);
 * else parks the request until a declaration. A repeated steal_id gets the same GIVE_TASKS again
 * (or nothing while it is still being served); an older one is ignored. -ENOENT: unknown pool. */
int tide_core_steal_request(tide_core_t *core, tide_worker_t *w, const char *job_id,
                            int32_t generation, int32_t rank, tide_task_kind_t kind, int64_t step,
                            uint64_t steal_id, tide_error_t *err);
/* The victim's answer to RELEASE_TASKS release_id: it removed ids from its deque. They move to the
 * thief (GIVE_TASKS; job->tasks_stolen) or, when the thief is gone, to the pool's dead-holder
 * tasks; none released: the next victim is tried. An unknown or answered release_id: a no-op;
 * ids the victim does not hold: -EINVAL (the valid ones still move). */
int tide_core_tasks_released(tide_core_t *core, tide_worker_t *w, const char *job_id,
                             int32_t generation, int32_t rank, tide_task_kind_t kind, int64_t step,
                             uint64_t release_id, const uint64_t *ids, size_t n, uint32_t queued,
                             tide_error_t *err);

/* What the core knows of a pool, for tests, the simulator and listings. */
typedef struct tide_task_pool_info {
    uint64_t total, declared, committed;
    uint64_t queued;     /* in live ranks' deques (as far as the core knows) or handed out */
    uint64_t in_flight;  /* released by a victim, not yet given */
    uint64_t orphaned;   /* of dead holders, waiting for a thief */
    int32_t steals_pending, steals_parked;
} tide_task_pool_info_t;
/* Fills *out for the pool; -ENOENT when the job has no such pool open. */
int tide_core_task_pool(const tide_core_t *core, const tide_job_t *job, tide_task_kind_t kind,
                        int64_t step, tide_task_pool_info_t *out);
/* Where task id of the pool is: >= 0 the rank holding it (queued or running), -1 committed, -2 in
 * flight, -3 orphaned (holder dead), -4 not in the pool. For invariant checks. */
int32_t tide_core_task_holder(const tide_core_t *core, const tide_job_t *job, tide_task_kind_t kind,
                              int64_t step, uint64_t id);
/* Visits every open pool of the job (kind, step); for invariant checks. */
void tide_core_task_pools_each(const tide_core_t *core, const tide_job_t *job,
                               void (*fn)(void *ud, tide_task_kind_t kind, int64_t step), void *ud);
const char *tide_task_kind_name(tide_task_kind_t k);
const char *tide_straggler_name(tide_straggler_t s);

/* --- policy (docs/policies.md) --- */
/* Names a pool a worker may carry, dedicated to a class or shared: -EINVAL for a bad name or a full
 * table. Only before workers register (the daemon's flags, a scenario). */
int tide_core_pool_add(tide_core_t *core, const char *name, int32_t dedicated, tide_error_t *err);
/* A job-level load report: its MFU (0..1; < 0 unknown) and TrainerPhase, from a shell that aggregates
 * telemetry per job (the simulator). The checkpoint gate prefers it to the ranks' progress while it is
 * fresh (3 gate-check periods). O(1), no action. */
void tide_core_job_telemetry(tide_core_t *core, tide_job_t *job, double mfu, int32_t phase);
/* The job's MFU as the checkpoint gate sees it: a fresh job-level report, else the ranks' progress
 * (O(ranks)); -1 when unknown. */
double tide_core_job_mfu(const tide_core_t *core, const tide_job_t *job);
/* GPU time the job used: its ended generations' (job->gpu_seconds) and the running one's so far. */
double tide_core_job_gpu_seconds(const tide_core_t *core, const tide_job_t *job);
/* A worker copied (ok) or failed to copy (error) its rank's checkpoint of step to the durable
 * directory. When every rank reported, the job's durable_ckpt becomes that step (PERSIST, event
 * job.checkpoint_durable). Reports of other generations or steps are ignored. */
void tide_core_ckpt_flushed(tide_core_t *core, tide_worker_t *w, const char *job_id,
                            int32_t generation, int32_t rank, int64_t step, bool ok,
                            const char *durable_path, uint64_t bytes, const char *sha256,
                            const char *error);
/* 1-based position of a PENDING job in the order the scheduler considers jobs (class, with aging,
 * high to low; FIFO within); 0 when not pending. O(queued jobs): for listings. */
int32_t tide_core_job_queue_position(const tide_core_t *core, const tide_job_t *job);
/* A job's MFU target band (docs/policies.md, "Headroom"): from its class, the cluster size, whether
 * its GPUs are new-arch, and, for an adaptive target, how far into its run it is. */
void tide_core_job_target(const tide_core_t *core, const tide_job_t *job, double *lo, double *hi);

typedef struct tide_reserve {
    int32_t gpus;             /* spares + burst, or the operator's figure */
    int32_t spares;           /* the reserve_quantile Poisson count of failures in the lead time */
    int32_t burst;            /* burst capacity from the running jobs' target bands */
    bool fixed;               /* set by the operator (reserve_gpus >= 0) */
    double failure_rate;      /* per GPU-hour used for spares */
    bool observed;            /* failure_rate was observed (enough failures seen), not configured */
    double expected_failures; /* during the lead time over the usable GPUs */
    int32_t usable, free;     /* GPUs that could run work / that are free now */
    uint64_t failures;        /* worker failures seen (a BUSY or READY worker that died) */
    double gpu_hours;         /* usable GPU-hours observed */
} tide_reserve_t;
/* The headroom reserve now. O(1) (recomputed when the cluster or the running set changes). */
void tide_core_reserve(const tide_core_t *core, tide_reserve_t *out);
/* The running jobs' MFU target bands weighted by their ranks, and the MFU of their GPUs (achieved over
 * peak of the running ranks); all 0 when no job runs. O(running ranks): for status queries. */
void tide_core_running_target(const tide_core_t *core, double *lo, double *hi, double *mfu);
/* Smallest k with P(X <= k) >= q for X ~ Poisson(lambda); 0 for lambda <= 0; INT32_MAX for
 * lambda > 2e9 (k would not fit). O(sqrt(lambda)). */
int32_t tide_poisson_quantile(double lambda, double q);
const char *tide_topology_name(tide_topology_t t);

const char *tide_job_state_name(tide_job_state_t s);
const char *tide_worker_state_name(tide_worker_state_t s);
const char *tide_prio_name(tide_prio_t p);

#endif

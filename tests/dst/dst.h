/* The deterministic simulation harness (tests/dst): the run context every module shares. One seeded
 * random stream drives the world (workers, processes, trainers), the network, the store and the
 * scheduler shell, and one virtual clock orders them, so a seed replays bit for bit. A broken invariant
 * names the seed, the step and the command that replays it. */
#ifndef TIDE_DST_H
#define TIDE_DST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DST_WALL0 1800000000000LL /* the wall clock at virtual time 0 (2027) */
#define DST_ID_MAX 24             /* job ids ("123") and "job/gen/rank" keys fit */
#define DST_TRACE_LINES 96

typedef struct dst dst_t;
typedef struct world world_t;
typedef struct net net_t;
typedef struct store store_t;
typedef struct shell shell_t;
typedef struct checker checker_t;

/* What one seed's world looks like and how hostile it is. Drawn from the seed (dst_knobs_draw), then
 * narrowed by switches from the command line. */
typedef struct dst_knobs {
    int64_t chaos_ms;        /* faults and submits for this long, then the world is left alone */
    int64_t inject_mean_ms;  /* mean time between injected actions */
    /* network */
    double p_drop;           /* a message breaks its stream */
    double p_slow;           /* a message takes 0.3..3 s */
    double p_dup;            /* a rank report or a task message is sent twice */
    double p_late;           /* a task message to the scheduler also arrives again, late and out of order */
    int64_t delay_max_ms;    /* ordinary per-message delay: 1..this */
    /* faults, as weights among injected actions */
    int w_crash, w_leave, w_join, w_hang, w_blip, w_fail, w_restart;
    /* the workload */
    int w_submit, w_cancel, w_cordon, w_ckpt, w_mfu, w_scale;
    double p_flush_fail;     /* a durable copy fails */
    bool job_telemetry;      /* the shell reports job-level MFU (tide_core_job_telemetry) */
    double p_tasks;          /* an SDK job runs its steps as tasks (docs/work-stealing.md) */
    bool stealing;           /* cfg.stealing (off in a few seeds: every steal is answered "none") */
    double p_burst;          /* a job is submitted with burst_percent (docs/elastic.md, "Burst") */
    int w_phase;             /* weight of flipping a running job's load phase */
    int max_active;          /* pending and running jobs at most (submits wait while there are as many) */
    int w_drain;             /* weight of draining a worker (or uncordoning drained ones) */
    double p_freeze;         /* a generation of a non-task SDK job freezes a while (hang detection) */
} dst_knobs_t;

#define DST_KNOWN_BUGS 12

/* Switches that turn a behaviour off for every seed (command line, --no-NAME). */
typedef struct dst_switches {
    bool no_restarts;     /* no scheduler restarts */
    bool no_net_faults;   /* no drops, slow messages or duplicates */
    bool no_preemption;   /* cfg.preemption off */
    bool no_flush;        /* cfg.ckpt_flush off */
    bool no_starvation;   /* skip the "no job waits while capacity allows" check */
    bool no_tasks;        /* no job uses tasks (work stealing) */
    bool no_burst;        /* no job has burst on, no load phases */
    /* Known core bugs the checks tolerate unless --strict or --strict-kb N (tests/dst/README.md has
     * reproductions and proposed fixes). All four are fixed and always checked (strict set by default);
     * the descriptions stay as the record of what the checks guard:
     * KB1: a worker that re-registers while it still runs a rank the core is stopping (a requeued or
     * rolled-back job's) has that rank turned into a stale one and its binding to the job released, so
     * the job's next generation may start while the old rank still runs there. Tolerated: ranks on a
     * worker whose stream the scheduler lost count as written off.
     * KB2: a restart forgets a requeued (or rolled back) job's previous generation: records keep only
     * the current generation's ranks, so the restored PENDING job holds no worker and may start again
     * while its old ranks still run (or are still being launched) on workers that have not
     * re-registered. Tolerated: ranks running at a restart, or started by a message on a stream the
     * restart cut, count as written off.
     * KB3: when the last rank of a generation that has not started is lost (its worker died), the core
     * counts the generation as started (job.running, rollbacks reset to 0) and then rolls it back, so a
     * job whose generations keep losing a rank before it starts is rolled back forever, never failing
     * after max_rollbacks. Checked only when strict.
     * KB4: a generation rolled back keeps its CheckpointJob request open while the job is PENDING (the
     * deadline timer runs only for RUNNING jobs, and rollback does not end the request as requeue
     * does): no job.checkpoint_missed until the next generation runs, which is sent the stale request.
     * Tolerated: a request's deadline is checked once the job has run its current generation a while.
     * KB5 and KB6 (work stealing) are fixed in the code; KB7 is open and never tolerated.
     * Found with elastic scaling (issue 7), fixed since (rollback moves a resize on as a requeue does,
     * and a shrink never picks a generation still starting; a LAUNCH not handed to the shell yet is taken
     * back when its generation ends in the same call): KB8 and KB9 are checked by default.
     * KB8: rollback() ignored a resize: a generation rolled back (a rank lost or the launch timeout before
     * every rank started) leaves the job PENDING with its resize STARTING (the generation a resize
     * placed) or CHECKPOINTING (a shrink chosen before the generation fully started), and a
     * CHECKPOINTING one stays so, without a timer, in the next generation. Tolerated: a resize seen in
     * that state is not checked any more.
     * KB9: a LAUNCH emitted in a core call that also ends its generation (the job is requeued or
     * preempted later in the same call, e.g. a reconciled job preempted by the pass) reaches the shell
     * with job->ranks freed: the daemon's send_launch reads job->ranks[rank] (NULL) after the call.
     * Tolerated: the shell sends it with an unknown world size (the world does not check it).
     * KB10 (fixed: a replacement's exclusions are lifted once its generation is placed): straggler
     * replacements piled up exclusions that were never lifted, and tide__resize_replace counted the
     * job's own excluded workers among the free ones it could swap in, so a job could end up needing
     * more workers than its shape had outside its exclusions and wait for good. Tolerated (only with
     * a core that has it again, unless strict): at the end, a pending job that fits only when its
     * exclusions are ignored counts as done.
     * KB11 (open, found with phase-aware burst, issue 7 part 2; tolerated unless --strict-kb 11): the core
     * lends a lent slot again (same job, generation and slot number) to the worker whose lent process in
     * that slot has just exited; the worker (worker/core.c, one entry per (job, generation, rank), exits
     * kept and repeated) answers the LaunchRank as "already exited" and starts nothing, so the slot stays
     * LAUNCHED with the worker bound; the STOP that takes it back is ignored too, and the worker is never
     * released (nor is the job's next generation placed: the worker still holds the old one). Tolerated:
     * the world's agent starts a burst LaunchRank for a slot whose process there has exited (the worker
     * side of a fix).
     * KB12 (open, found with issue 8's DST, tolerated unless --strict-kb 12): a rank that exits non-zero
     * while a peer's worker is lost (job_lifecycle.c, the peer_down branch of tide_core_rank_exited) is
     * marked EXITED through tide__slot_set, which finds every rank RUNNING or EXITED and declares the
     * generation started (job.running, rollbacks reset) just before generation_lost rolls it back (the
     * KB3 family; e.g. a restored job whose rank 0 awaits its worker after a restart). Tolerated: the KB3
     * check skips such a call (counted). */
    bool strict[DST_KNOWN_BUGS + 1]; /* [n]: KBn is checked, not tolerated (--strict: all) */
} dst_switches_t;

typedef struct dst_stats {
    uint64_t seeds, steps, core_calls, turns, commits, restarts, lossy_restarts;
    uint64_t msgs, drops, slow, dups, spawns, submits_acked, cancels_acked;
    uint64_t ev_started, ev_preempting, ev_preempted, ev_requeued, ev_rolled_back, ev_aged;
    uint64_t ev_ckpt, ev_durable, ev_flush_failed, ev_held, ev_succeeded, ev_failed, ev_cancelled;
    uint64_t hellos_refused; /* a superseded stream's hello, refused (KB7) */
    uint64_t ev_ckpt_requested, ev_cadence_off; /* checkpoint requests (CheckpointJob, cadence, ...) */
    uint64_t cadence_checks;
    uint64_t ev_worker_dead, ev_ckpt_missed, reserve_checks, placement_checks, starvation_checks;
    /* work stealing */
    uint64_t task_jobs, task_trainers, tasks_handed, task_steps, task_steps_exact, task_steps_restart,
        task_steps_restart_lost, tasks_restart_lost, task_steps_gen_cut, task_dups_gen_over;
    uint64_t steals_sent, gives, gives_ids, gives_empty, releases, task_msgs_dup, task_msgs_late;
    uint64_t task_rejected, declare_nospace, pool_checks, commit_checks, give_checks, waits;
    int64_t wait_max_ms;
    /* elastic scaling */
    uint64_t scales, scales_acked, scale_einval, scale_ealready, scale_enoent;
    uint64_t ev_resizing, ev_resize_pending, ev_resize_cancelled, ev_resized[4]; /* requested, grow, shrink, replace */
    uint64_t gens_resized, gens_resized_resumed, resize_checks, kb8_seen, kb9_seen, kb10_seen;
    /* phase-aware burst */
    uint64_t kb11_seen, kb12_seen;
    uint64_t burst_jobs, phase_flips, ev_burst_lent, ev_burst_reclaimed, ev_burst_started, ev_burst_exited,
        ev_burst_lost, burst_spawns, burst_tasks, burst_tasks_aborted, burst_tasks_lost, burst_dups_excused,
        burst_checks, burst_resizes;
    /* drain and hang detection (issue 8) */
    uint64_t drains, drains_acked, drains_enoent, drains_moved, drains_idle, drain_uncordons, drain_checks;
    uint64_t freezes, freezes_hung, ev_hung, hung_frozen, hung_failed, hang_checks;
    /* recovery (issue 8 part 7): restarts, backoffs, quarantines, resume points, histories */
    uint64_t ev_restarted, restarts_backoff, ev_quarantined, failed_policy, failed_max, resume_checks,
        resumed_ckpt, history_checks, exclusive_checks;
    int64_t sim_ms;
} dst_stats_t;

struct dst {
    uint64_t seed;
    uint64_t rng;
    int64_t now;      /* virtual monotonic ms */
    uint64_t step;    /* iterations of the event loop so far */
    bool calm;        /* the quiesce phase: no faults, a reliable network */
    int64_t calm_at;  /* when it began */
    bool changed;     /* a core call in this step emitted actions: the core checks run */
    int64_t checked_at; /* when they last ran (they run at least every DST_CHECK_EVERY_MS) */
    dst_knobs_t k;
    dst_switches_t sw;
    world_t *world;
    net_t *net;
    store_t *store;
    shell_t *shell;
    checker_t *chk;
    dst_stats_t *stats;
    /* tracing: the last lines are printed with a failure; --trace prints them all */
    bool trace_all;
    char trace[DST_TRACE_LINES][160];
    uint64_t n_trace;
    const char *replay; /* the command that replays this seed */
};

/* splitmix64: the only source of randomness. */
uint64_t dst_rand(dst_t *d);
/* Uniform in [0, n) (n >= 1). */
int64_t dst_below(dst_t *d, int64_t n);
/* Uniform in [lo, hi]. */
int64_t dst_range(dst_t *d, int64_t lo, int64_t hi);
/* True with probability p. */
bool dst_chance(dst_t *d, double p);
/* Picks an index by weight: w has n entries; -1 when all are 0. */
int dst_pick(dst_t *d, const int *w, int n);

int64_t dst_wall(const dst_t *d);

/* A line for the trace ring ("t=... " is prepended). */
void dst_trace(dst_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An invariant broke: prints the message, the seed, the step, the trace tail and the replay command,
 * then fails the running CMocka test (never returns). */
void dst_fail(dst_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

#endif

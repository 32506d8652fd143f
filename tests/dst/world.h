/* The simulated world: worker agents (one per GPU) with the rank table and reconnect logic of the real
 * worker (worker/core.c: a LaunchRank is idempotent, exits are kept and repeated in every hello, a
 * StopRank for a rank that does not run is ignored), the processes they run, and one trainer per job
 * generation whose ranks step in lockstep, save checkpoints through the SDK, answer CHECKPOINT_NOW
 * (some jobs), fail, and stall when a peer dies. Workers join, leave, crash and hang.
 *
 * Work stealing (docs/work-stealing.md): each agent holds the real worker deque (worker/task_deque.c,
 * one tide_task_deque_t per agent, its messages on the agent's stream). A task job's trainer runs
 * event-driven steps: every rank declares its share of the step's tasks, pops tasks at its own speed
 * (some ranks are slow), waits for the scheduler's give when its deque is empty, and ends its part at
 * no_task; the step ends when every rank ended its part (the collective).
 *
 * Phase-aware burst (docs/elastic.md, "Burst"): a job's load phase (high or not) is the world's, flipped
 * in a per-job cycle (and now and then by the clients' side of the harness) and reported in every rank's
 * heartbeat progress (rank 0's counts; a job without the SDK has it passed to the core directly).
 * A LaunchRank for a lent slot (rank >= WORLD_SIZE) starts a burst process: no member of the generation
 * (its exit never stalls the trainer), no checkpoints; in a detached task job it joins each step's pool
 * with an empty share and takes tasks like a rank (stolen ones), until it is told to stop (it exits after
 * the task in hand) or exits by itself. */
#ifndef TIDE_DST_WORLD_H
#define TIDE_DST_WORLD_H

#include <uthash.h>

#include "core.h"
#include "dst.h"
#include "net.h"
#include "../../worker/task_deque.h" /* not on the include path: worker/core.h would shadow core.h */

#define W_MAX_AGENTS 40
#define W_ENTRIES 24
#define W_KEEP_REPORTED 8
#define W_FLUSHES 8
#define W_MAX_RANKS 32 /* a generation's ranks and its lent slots (at most 12 + 12) */
#define W_PEAK_FLOPS 989e12
#define W_MAX_TASKS 32 /* tasks in one step of a task job */

/* How a job's trainer behaves; the client that submits it decides. */
typedef struct wjob {
    char id[DST_ID_MAX];
    bool sdk;        /* reports progress and checkpoints through the SDK */
    bool answers;    /* saves a checkpoint when asked (CHECKPOINT_NOW) */
    int64_t step_ms, total_steps, ckpt_every, peer_timeout_ms;
    double fail_p;   /* a generation loses a rank to a fault of its own */
    double mfu;      /* its MFU now (job-level telemetry and the ranks' progress) */
    int64_t resume;  /* the newest step every rank of one generation saved: where the next resumes */
    /* work stealing: a step is n_tasks tasks, ids id_base + i * id_stride, each task_ms at full speed */
    bool tasks;
    int32_t task_kind; /* TIDE_TASK_MEMBER or TIDE_TASK_DETACHED */
    int32_t n_tasks;
    uint64_t id_base, id_stride;
    int64_t task_ms;
    double p_slow_rank; /* a rank of a generation is slow (2..5x) */
    int32_t last_world; /* the size of its newest generation so far; 0: none */
    /* phase-aware burst */
    int32_t burst_percent; /* as submitted (0: off) */
    bool high;             /* its load phase now (the trainers report it in their progress) */
    bool load_said;        /* its trainers have reported a load phase (TrainerProgress.load_reported) */
    int64_t phase_at;      /* its phase flips then (a cycle of high_ms / normal_ms, +-30 %); INT64_MAX: never */
    int64_t high_ms, normal_ms;
    UT_hash_handle hh;
} wjob_t;

/* One step of a task job's generation: who was handed each task. */
typedef struct tstep {
    int8_t assign[W_MAX_TASKS];    /* the rank whose share it is */
    uint8_t count[W_MAX_TASKS];    /* times handed to a trainer */
    uint32_t handed[W_MAX_TASKS];  /* the ranks it was handed to (bit r; lent slots too) */
    uint64_t crashes;              /* scheduler crashes when the step began */
    /* burst: a lent process that ended before it finished a task it was handed gives the handing back
     * (aborted: count is what ran or runs now); one written off by the scheduler or killed with its agent
     * may have run tasks whose completions never arrived (excused: a second run is the documented "at
     * least once" of a lent process's death, not a failure) */
    uint8_t aborted[W_MAX_TASKS];
    bool excused[W_MAX_TASKS];
    bool members_done; /* every rank got no_task: the step is over for the generation */
    bool gen_over;     /* ... and the scheduler had ended the generation by then */
    bool evaluated;    /* the exactly-once check ran (once no lent process still works on the step) */
} tstep_t;

typedef enum trank_phase {
    TR_IDLE,    /* not started, or its trainer has not begun */
    TR_DECLARE, /* declares its share of the step at `due`, then asks for a task */
    TR_RUN,     /* runs task `cur` until `due`, then reports it done with the next next_task */
    TR_WAIT,    /* next_task waits for a steal's answer (the deque's give) */
    TR_END,     /* no_task: its part of the step is done */
    TR_OUT,     /* its process ended */
} trank_phase_t;

/* A rank of a task job's trainer: the next_task loop of the SDK (docs/work-stealing.md). */
typedef struct trank {
    struct trainer *tr;
    int32_t r;
    int agent;    /* where its process runs; -1: none yet */
    uint64_t rid; /* its id in that agent's deque (the process id) */
    int phase;    /* trank_phase_t */
    int64_t due;
    uint64_t cur;
    int64_t wait_since;
    double slow;  /* time per task, as a multiple of the job's task_ms */
    /* burst: a lent slot's process (not a member: it works on `step`, which may lag the trainer's) */
    bool lent;
    bool stopping; /* told to stop: it exits after the task in hand */
    int64_t step;
    int64_t first_step; /* the trainer's step when it started */
} trank_t;

/* One generation of a job: its ranks share a step clock that runs while all of them live. */
typedef struct trainer {
    char key[48]; /* "job/gen" */
    wjob_t *job;
    int32_t gen, world;
    int32_t spawned, live;
    int64_t t0;       /* every rank up: steps advance from here; -1: not yet */
    int64_t stall;    /* a rank ended: steps stop here, the others give up after the peer timeout */
    int64_t resume;   /* the step it started from */
    int64_t save_req; /* a checkpoint asked for at this step; -1: none */
    int32_t fail_rank;
    int64_t fail_after; /* ms after t0; -1: none */
    int64_t saved[W_MAX_RANKS];
    /* hang detection (docs/fault-tolerance.md, "Hangs"): the generation freezes (a deadlocked collective:
     * its processes live, its step stops) frz_after ms after t0 for frz_ms, then goes on; frz_at is
     * t0 + frz_after once t0 is known (-1: no freeze, or not yet started) */
    int64_t frz_after, frz_ms, frz_at;
    bool frz_hung; /* the scheduler declared this generation hung (job.hung) */
    /* task jobs */
    int64_t tstep;    /* the step its ranks work on */
    int64_t tstep_at; /* when it began */
    tstep_t **steps;  /* [n_steps]: the steps run so far */
    int64_t n_steps;  /* the job's total_steps + 1 when the generation began */
    bool gen_ended;   /* the scheduler was seen to end this generation */
    trank_t rk[W_MAX_RANKS];
    UT_hash_handle hh;
} trainer_t;

/* The agent's rank table entry (worker/core.c rank_entry_t) and its process. */
typedef struct wentry {
    bool used;
    char job[DST_ID_MAX];
    int32_t gen, rank;
    bool running, reported;
    int32_t code;
    uint64_t hello_stream; /* the stream whose hello carried this exit */
    int32_t pid, port;
    int64_t start, stop_at; /* stop_at: a StopRank makes it exit by then; -1: none */
    int64_t saved, sent;    /* newest checkpoint step saved / relayed; -1: none */
    bool orphaned;          /* the scheduler declared its worker dead since it started */
    uint64_t seq;
    trainer_t *tr;
    bool burst;             /* a lent (burst) process: rank >= its generation's size */
    int64_t self_exit_at;   /* burst: it exits by itself then (code self_code); -1: never */
    int32_t self_code;
} wentry_t;

typedef struct wflush {
    bool used;
    char job[DST_ID_MAX];
    int32_t gen, rank;
    int64_t step, at;
    bool ok;
} wflush_t;

typedef struct agent {
    int idx;
    char id[32], node[16], device[16], pool[16], rack[12], sw[12];
    int gpu;
    uint64_t mem;
    bool new_arch;
    tide_kv_t labels[4];
    size_t n_labels;
    bool up;
    int64_t up_at;   /* down: restarts then (INT64_MAX: when it joins) */
    bool frozen;     /* a hung agent: reads and sends nothing, its processes run on */
    int64_t thaw_at;
    uint64_t stream; /* its current stream; 0: none */
    uint64_t boot;   /* its process: counts its joins (WorkerHello.boot_id) */
    uint64_t dead_stream; /* the stream it was on when the scheduler declared it dead */
    bool welcomed;
    int64_t reconnect_at, backoff, next_hb;
    uint64_t max_epoch;
    bool fail_report; /* the fault model tells the scheduler it failed (tide_core_worker_failed) */
    int dom[3];       /* its node, rack and switch domain as small numbers (see world_add_agent) */
    UT_hash_handle hh;
    wentry_t e[W_ENTRIES];
    wflush_t fl[W_FLUSHES];
    uint64_t seq;
    int n_running;  /* entries running (a GPU runs one rank; two is what the checker looks for) */
    bool to_report; /* a save or an exit may wait to be relayed */
    int n_flushes;
    struct world *w;
    tide_task_deque_t *deque; /* the real worker's task deques (worker/task_deque.c) */
    uint64_t rm_pending[W_ENTRIES]; /* ranks that exited while it hung: removed from the deque at thaw */
    int n_rm;
} agent_t;

struct world {
    agent_t a[W_MAX_AGENTS];
    int n;
    agent_t *by_id;
    wjob_t *jobs;
    trainer_t *trainers;
    int32_t next_pid;
    int64_t stop_grace_ms, hb_ms;
    dst_t *d;
};

world_t *world_new(dst_t *d);
void world_free(world_t *w);
/* Adds an agent (down until world_join). Labels: pool/rack/switch empty means none. */
agent_t *world_add_agent(world_t *w, const char *node, int gpu, const char *device, uint64_t mem,
                         const char *pool, const char *rack, const char *sw, bool new_arch);
/* A client submitted job id with this behaviour (replaces one of a submit that was lost). */
wjob_t *world_job_set(world_t *w, const wjob_t *behaviour);
wjob_t *world_job_find(world_t *w, const char *id);
agent_t *world_agent_by_id(world_t *w, const char *id);

/* Runs the agents' and processes' own events due by d->now, then delivers the scheduler's messages
 * that are due. */
void world_run(dst_t *d);
/* Whether the agent of stream s reads nothing now (hung). */
bool world_skip_stream(void *d, net_stream_t *s);
/* The earliest time the world has something to do, or INT64_MAX. */
int64_t world_next_due(dst_t *d);

/* Faults and membership. */
void world_join(dst_t *d, agent_t *a);
void world_crash(dst_t *d, agent_t *a, int64_t down_ms); /* ranks die with it */
void world_leave(dst_t *d, agent_t *a);                  /* goodbye, ranks stopped */
void world_hang(dst_t *d, agent_t *a, int64_t ms);
void world_thaw(dst_t *d, agent_t *a);
void world_blip(dst_t *d, agent_t *a); /* its stream dies */
/* The scheduler restarted: nothing to do for agents (they notice their streams end). */

/* The scheduler declared the agent's worker dead: it gave up on the ranks running there. */
void world_orphan(world_t *w, const char *worker_id);
/* Whether lent process k on agent a was written off (world_orphan). */
bool world_lent_written_off(const agent_t *a, const trank_t *k);
/* The scheduler lost its stream to the agent: it read its end or closed it (kb 1), or restarted (kb 2).
 * Ranks running there count as written off while KB1/KB2 are tolerated (dst.h). */
void world_unreachable(dst_t *d, agent_t *a, int kb);
/* Ranks running on the agent now. */
int world_running(const agent_t *a);
/* The trainer step a rank of tr is at now. */
int64_t world_step(const dst_t *d, const trainer_t *tr);
/* The trainer of (job, generation), or NULL. */
trainer_t *world_trainer(world_t *w, const char *job, int32_t gen);
/* Task i of job j's steps, and back (-1: not a task of j). */
uint64_t world_task_id(const wjob_t *j, int i);
int world_task_index(const wjob_t *j, uint64_t id);
/* Whether tr is frozen (its step does not move) at time t. */
bool world_frozen(const trainer_t *tr, int64_t t);
/* Whether the scheduler has ended tr's generation (sticky once seen). */
bool world_gen_over(dst_t *d, trainer_t *tr);

#endif

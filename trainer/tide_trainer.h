/* tide trainer SDK for C: report steps, phases and checkpoints to the tide worker that runs this
 * process, and learn when tide wants a checkpoint now or a stop after a step. The protocol is in
 * docs/trainer-api.md (newline-delimited JSON over the Unix socket named by TIDE_AGENT_SOCK).
 *
 * Outside tide (TIDE_AGENT_SOCK unset) tide_trainer_open returns NULL and every call accepts NULL
 * and does nothing, so the same program runs anywhere. When the worker goes away the handle turns
 * into a no-op too. Calls never block for more than one write(2) of one short line (except
 * tide_trainer_next_task, which waits for the worker's answer, and the hello/checkpoint/tasks
 * lines, which wait up to 5 s to go out), never raise SIGPIPE and never exit the process. A handle
 * is used by one thread at a time.
 *
 * Depends on libc only (no cJSON, no tide libraries), so it can be linked into any trainer. */
#ifndef TIDE_TRAINER_H
#define TIDE_TRAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tide_trainer tide_trainer_t;

typedef enum tide_phase {
    TIDE_PHASE_FORWARD = 0,
    TIDE_PHASE_BACKWARD = 1,
    TIDE_PHASE_UPDATE = 2,
    TIDE_PHASE_EVAL = 3,
    TIDE_PHASE_CHECKPOINT = 4,
    TIDE_PHASE_IDLE = 5,
} tide_phase_t;

/* The protocol's name of a phase ("forward", ...); NULL for a value out of range. */
const char *tide_phase_name(tide_phase_t phase);

/* Connects to $TIDE_AGENT_SOCK and says hello with TIDE_JOB_ID, TIDE_GENERATION and TIDE_RANK (RANK
 * when unset or empty) from the environment; waits (at most 5 s) for the welcome. Returns NULL outside tide, and NULL with one
 * line on stderr ("tide_trainer: ...: running without tide") when the socket or the hello fails. */
tide_trainer_t *tide_trainer_open(void);
/* Closes the connection. NULL is fine. */
void tide_trainer_close(tide_trainer_t *t);

/* Step `step` finished: `flops` model FLOPs on this rank without recomputation, `samples` and
 * `tokens` processed by this rank; `next` is the phase entered now. Also reads commands that
 * arrived (non-blocking). */
void tide_trainer_step(tide_trainer_t *t, int64_t step, tide_phase_t next, double flops,
                       int64_t samples, int64_t tokens);
/* tide_trainer_step for a trainer that recomputes (activation checkpointing): `recompute_flops`
 * (>= 0) were run again on top of the `flops` of the model, so tide reports HFU (hardware FLOPs
 * utilization) beside MFU (docs/metrics.md). */
void tide_trainer_step_hw(tide_trainer_t *t, int64_t step, tide_phase_t next, double flops,
                          double recompute_flops, int64_t samples, int64_t tokens);
/* The rank entered `phase`. */
void tide_trainer_phase(tide_trainer_t *t, tide_phase_t phase);
/* The rank finished writing its part of a checkpoint of the state after `step`: path (may be NULL
 * or ""), size and SHA-256 as 64 lowercase hex digits (NULL or "" when bytes is 0). request is the id
 * from tide_trainer_checkpoint_requested, or 0 for a checkpoint of the trainer's own schedule. */
void tide_trainer_checkpoint(tide_trainer_t *t, int64_t step, const char *path, uint64_t bytes,
                             const char *sha256_hex, int64_t request);

/* Whether tide asked for a checkpoint that was not answered yet (reads pending commands first).
 * Fills *request (when not NULL) with its id and *deadline_unix_ms (when not NULL) with its
 * deadline. The request stays pending until tide_trainer_checkpoint names it. */
bool tide_trainer_checkpoint_requested(tide_trainer_t *t, int64_t *request,
                                       int64_t *deadline_unix_ms);
/* Whether the rank should stop now that `step` is done (tide sent stop_after_step with a value
 * <= step). Reads pending commands first. */
bool tide_trainer_should_stop(tide_trainer_t *t, int64_t step);

/* --- tasks (docs/work-stealing.md) ---
 * A step's tasks (micro-batches, evaluation shards) are declared per rank and taken one at a time;
 * under tide a rank whose share is done steals what slower ranks have not started, and every task
 * of the step still runs exactly once. Outside tide (t NULL or a no-op handle) the iterator hands
 * out the rank's own ids in order, so the same loop runs anywhere:
 *
 *     tide_task_iter_t it;
 *     uint64_t id;
 *     tide_trainer_tasks_begin(t, &it, step, TIDE_TRAINER_TASK_MEMBER, my_ids, n_mine, total);
 *     while (tide_trainer_next_task(&it, &id) == 1)
 *         run_micro_batch(id);
 *     // < 0: the worker went away mid-step; which tasks ran elsewhere is unknown: stop the run
 *
 * A worker that predates tasks answers the declaration with unknown_op; the iteration then runs the
 * rank's own ids locally (exact: that worker never held them) and says so once on stderr.
 */
typedef enum tide_trainer_task_kind {
    /* joins the step's collective; moves only among the job's ranks */
    TIDE_TRAINER_TASK_MEMBER = 1,
    /* independent work (evaluation, preprocessing, serialisation) */
    TIDE_TRAINER_TASK_DETACHED = 2,
} tide_trainer_task_kind_t;

#define TIDE_TASKS_MAX_SHARE 4096    /* ids one rank may declare per step */
#define TIDE_TASKS_MAX_TOTAL 1048576 /* tasks in one step */

/* One step's iteration. Fields are private; it lives on the caller's stack. */
typedef struct tide_task_iter {
    tide_trainer_t *t; /* NULL: local (outside tide, or declared before the connection was lost) */
    int64_t step;
    int kind;
    const uint64_t *ids; /* the rank's own share, borrowed until the iteration ends */
    size_t n, next;      /* local mode: the next index */
    uint64_t current;    /* the task handed out last (reported done by the next call) */
    bool has_current;
    bool done; /* no_task seen */
    int error; /* sticky: < 0 once the iteration failed */
} tide_task_iter_t;

/* Declares this rank's share of step's tasks (ids, n <= TIDE_TASKS_MAX_SHARE distinct values below
 * 2^53, written in one line of at most 64 KiB; total: the step's tasks over all ranks, 1 and n <=
 * total <= TIDE_TASKS_MAX_TOTAL) and starts *it. Arguments are checked the same way outside tide.
 * Returns 0, or -EINVAL for bad arguments, -ENOMEM (one line on stderr; *it then hands out nothing
 * and next_task returns the same error). ids and t are borrowed until the iteration ends. */
int tide_trainer_tasks_begin(tide_trainer_t *t, tide_task_iter_t *it, int64_t step,
                             tide_trainer_task_kind_t kind, const uint64_t *ids, size_t n,
                             uint64_t total);
/* The next task of the step for this rank (reports the one before as done). Returns 1 with *id, 0
 * when the rank's part of the step is done, or < 0 when the iteration failed (sticky): -EPIPE the
 * worker went away after the step began (tasks may have moved to other ranks; the step's result is
 * unknown), -EPROTO the worker refused a report (printed on stderr), -EINVAL a NULL argument or a
 * failed begin. Blocks, without a timeout, while a steal is being served; commands that arrive
 * meanwhile (checkpoint_now, stop_after_step) are applied as tide_trainer_poll does. */
int tide_trainer_next_task(tide_task_iter_t *it, uint64_t *id);

/* --- phase-aware burst (docs/elastic.md, "Burst") ---
 * A job with burst on (tidectl submit --burst) reports its high-load phases; while one lasts, tide may
 * lend it extra workers that run the job's burst command with TIDE_BURST=1. A lent process is not a
 * rank of the generation (no RANK/WORLD_SIZE): it joins the job's detached task pools and takes the
 * tasks the ranks have not started, then exits when tide takes the worker back (should_stop). */

/* The job entered (high true) or left a high-load phase (an update or evaluation phase with extra
 * detached work). Rank 0's report counts for the job; others are kept for display. No-op on NULL. */
void tide_trainer_load_phase(tide_trainer_t *t, bool high);
/* Whether this process runs on a worker lent to the job for a burst (TIDE_BURST=1 in the
 * environment). */
bool tide_trainer_is_burst(void);
/* Joins step's detached tasks without a share of its own (a lent process): *it hands out tasks the
 * ranks have not started, until none is left. total must equal the pool's. Outside tide it hands out
 * nothing. Returns as tide_trainer_tasks_begin. */
int tide_trainer_tasks_join(tide_trainer_t *t, tide_task_iter_t *it, int64_t step, uint64_t total);

/* --- checkpoint tiers (docs/trainer-api.md, "Checkpoint tiers") ---
 * Under a tide worker TIDE_CKPT_DIR names the job's directory in the worker's hot tier (memory).
 * A rank writes its checkpoint of step S into tide_trainer_ckpt_path(S) and reports it with
 * tide_trainer_checkpoint (path: that directory or a file in it); the worker then writes a
 * manifest, copies it to the warm tier and prunes old steps. After a restart tide_trainer_restore
 * says where the newest usable copy is (hot, warm or cold), every file checked. */

#define TIDE_TRAINER_MAX_SKIPS 8

/* A copy the worker's search passed over. */
typedef struct tide_trainer_skip {
    char tier[16];    /* "hot", "warm", "cold" */
    int64_t step;     /* -1: the whole tier could not be read */
    char reason[256]; /* e.g. "mlp-000000000300.ckpt: sha256 X, manifest says Y" */
} tide_trainer_skip_t;

/* Fills buf (len bytes) with $TIDE_CKPT_DIR/step-STEP/rank-RANK (RANK: TIDE_RANK, else RANK) and
 * creates it. t may be NULL (only the environment counts). Returns 0, -ENOENT when TIDE_CKPT_DIR is
 * unset or not absolute (not under tide), -EINVAL (step < 0, no rank), -ERANGE (buf too small), or
 * -errno from mkdir. Prints nothing. */
int tide_trainer_ckpt_path(tide_trainer_t *t, int64_t step, char *buf, size_t len);
/* Asks the worker for the newest usable checkpoint of this rank (at most the job's resume step,
 * of this job's lineage, every file verified against its manifest); blocks for the answer (at
 * most 10 minutes), applying commands that arrive meanwhile. Returns 0 with *step and path (a
 * directory to read; len bytes) filled, -ENOENT when there is none, -ENOTCONN (t NULL or the
 * connection lost before), -ENOTSUP (an older worker), -EPIPE, -ETIMEDOUT, -ERANGE (path too
 * small). Prints nothing: tide_trainer_restore_skipped / _reason / _tier tell the rest. */
int tide_trainer_restore(tide_trainer_t *t, int64_t *step, char *path, size_t len);
/* The tier of the copy the last restore returned ("hot", "warm", "cold"); "" otherwise. */
const char *tide_trainer_restore_tier(const tide_trainer_t *t);
/* Why the last restore found nothing (the worker's words); "" otherwise. */
const char *tide_trainer_restore_reason(const tide_trainer_t *t);
/* The copies the last restore's search passed over (at most TIDE_TRAINER_MAX_SKIPS, in search
 * order): *skips points into t (valid until the next restore). Returns how many. */
size_t tide_trainer_restore_skipped(const tide_trainer_t *t, const tide_trainer_skip_t **skips);

/* Reads and applies the commands that arrived, without blocking. Returns the number applied, or
 * -1 when the connection was lost (the handle is a no-op from then on). The calls above do this
 * themselves; a trainer that blocks for long periods may call it in between. */
int tide_trainer_poll(tide_trainer_t *t);

#ifdef __cplusplus
}
#endif

#endif

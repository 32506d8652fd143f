/* tide-mlp's evaluation phases as detached tide tasks (docs/tide-mlp.md, "Evaluation"): a rank's
 * phase (declare its share of the step's shards, take up to E per training step, report high load
 * while rank 0's part lasts) and the loop of a process lent to the job (TIDE_BURST=1: join each new
 * phase from its checkpoint and evaluate what it is handed until tide takes the worker back).
 *
 * The SDK is reached through an ops struct (main.c binds it to tide_trainer.h; tests use a fake),
 * so this file needs neither MPI nor the SDK. */
#ifndef TIDE_MLP_EVAL_TASKS_H
#define TIDE_MLP_EVAL_TASKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "eval.h"
#include "mlp_config.h"

/* What the phase and the burst loop need from tide. One pool is iterated at a time: begin or join
 * starts it, next walks it (reporting the shard handed out before as done). */
typedef struct tide_mlp_eval_ops {
    /* Declares this rank's share (ids, n; borrowed until the pool ends) of step's detached pool of
     * `total` shards (tide_trainer_tasks_begin). Returns 0 or a negative errno. */
    int (*begin)(void *ud, uint64_t step, const uint64_t *ids, size_t n, uint64_t total);
    /* Joins step's detached pool without a share (tide_trainer_tasks_join). 0 or -errno. */
    int (*join)(void *ud, uint64_t step, uint64_t total);
    /* The next shard of the pool: 1 with *id, 0 when this process's part is done, < 0 when the
     * iteration failed (-EPIPE: the connection to tide is lost). */
    int (*next)(void *ud, uint64_t *id);
    /* Rank 0's report that the job entered (true) or left (false) a high-load phase. */
    void (*load_phase)(void *ud, bool high);
    /* > 0 when tide asked this process to stop, 0 when not, < 0 when the connection is lost. */
    int (*stop)(void *ud);
    /* Waits about ms milliseconds (the burst loop between looks at the directory). */
    void (*wait)(void *ud, double ms);
} tide_mlp_eval_ops_t;

typedef struct tide_mlp_eval_phase tide_mlp_eval_phase_t;

/* A rank's evaluation phases for a run with options o (borrowed for the phase's life; eval_every
 * > 0 and checkpoint_dir set), rank `rank` of `world`. ops and ud are borrowed; warnings go to log
 * (may be NULL). Caller frees with tide_mlp_eval_phase_free (NULL is fine). */
tide_mlp_eval_phase_t *tide_mlp_eval_phase_new(const tide_mlp_options_t *o, uint32_t rank,
                                               uint32_t world, const tide_mlp_eval_ops_t *ops,
                                               void *ud, FILE *log);
void tide_mlp_eval_phase_free(tide_mlp_eval_phase_t *ph);

/* Opens the phase of `step` (steps done; its checkpoint is written) with a copy of params
 * (param_count doubles, borrowed for the call): first drains the phase still open, if any, then
 * declares this rank's share of the eval_tasks shards; rank 0 reports high load. *ran (may be NULL)
 * gets the shards the drain evaluated. Returns 0, or the negative errno of the declaration (said
 * on log; no phase is open then). */
int tide_mlp_eval_phase_open(tide_mlp_eval_phase_t *ph, uint64_t step, const double *params,
                             uint64_t *ran);

/* Takes up to `max` shards of the open phase and evaluates each (one eval.log line, the simulated
 * compute). When next says this rank's part is done, or fails, the phase closes and rank 0 reports
 * the high load over. *ran (may be NULL) gets the shards evaluated. Returns 0 (also with no phase
 * open) or the negative errno of a failed iteration (said on log; the phase is closed). */
int tide_mlp_eval_phase_run(tide_mlp_eval_phase_t *ph, uint64_t max, uint64_t *ran);

/* Runs the open phase to its end (tide_mlp_eval_phase_run without a limit). */
int tide_mlp_eval_phase_drain(tide_mlp_eval_phase_t *ph, uint64_t *ran);

/* Whether a phase is open, and its step (0 when none). */
bool tide_mlp_eval_phase_is_open(const tide_mlp_eval_phase_t *ph, uint64_t *step);

/* The burst loop's poll interval. */
#define TIDE_MLP_BURST_POLL_MS 50.0

/* The newest checkpoint step in dir that a lent process should join: a multiple of every (> 0),
 * above `after` (all steps when has_after is false), whose header names job `job` when job > 0 and
 * generation `generation` when generation > 0. Returns 1 with *step, 0 when there is none, or a
 * negative errno when dir cannot be read. */
int tide_mlp_burst_next_step(const char *dir, uint64_t every, uint64_t job, uint64_t generation,
                             bool has_after, uint64_t after, uint64_t *step);

/* The loop of a process lent to job `job`, generation `generation` as burst `index` (no MPI, no
 * training): repeatedly joins the newest phase (tide_mlp_burst_next_step) from its checkpoint and
 * evaluates every shard handed out, polling the directory every TIDE_MLP_BURST_POLL_MS meanwhile,
 * until ops->stop. A shard in hand is always finished and reported; one handed out after a stop
 * is not run (tide gives it to a rank). A phase that cannot be joined or loaded is skipped (said on
 * log). Returns 0 when stopped, 1 when the connection to tide was lost. */
int tide_mlp_burst_run(const tide_mlp_options_t *o, uint64_t job, uint64_t generation,
                       uint64_t index, const tide_mlp_eval_ops_t *ops, void *ud, FILE *log);

#endif

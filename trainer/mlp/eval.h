/* tide-mlp's evaluation (docs/tide-mlp.md, "Evaluation"): the loss of one step's parameters on a
 * held-out shard, a rank's share of a phase's shards, and the lines of CHECKPOINT_DIR/eval.log.
 *
 * Shard i is held-out samples i*S .. i*S + S - 1 with S = batch / micro_batches (one micro-batch's
 * size), drawn from a hash stream of their own (tide_mlp_data_fill_heldout): the same for every
 * step, and never training data. Its loss is a pure function of (config, params, i). */
#ifndef TIDE_MLP_EVAL_H
#define TIDE_MLP_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "mlp_config.h"

typedef struct tide_mlp_eval tide_mlp_eval_t;

/* Samples per held-out shard: batch / micro_batches. */
uint64_t tide_mlp_eval_shard_samples(const tide_mlp_config_t *c);

/* Data generator and scratch space for a config (copied). Caller frees with tide_mlp_eval_free
 * (NULL is fine). */
tide_mlp_eval_t *tide_mlp_eval_new(const tide_mlp_config_t *c);
void tide_mlp_eval_free(tide_mlp_eval_t *ev);

/* The mean loss (1/2 |y - target|^2 per sample) of params (tide_mlp_param_count doubles, borrowed)
 * on held-out shard `shard`. Bitwise the same for the same (config, params, shard), whoever calls.
 */
double tide_mlp_eval_shard_loss(tide_mlp_eval_t *ev, const double *params, uint64_t shard);

/* Fills ids (room for ceil(tasks / world) values) with rank's shards of a phase: rank,
 * rank + world, ... below tasks, ascending. Returns how many (0 when rank >= tasks). */
uint32_t tide_mlp_eval_share(uint32_t tasks, uint32_t rank, uint32_t world, uint64_t *ids);

/* Who evaluated a shard: a rank of the job, or a process on a worker lent to it (TIDE_BURST). */
typedef struct tide_mlp_evaluator {
    bool burst; /* false: rank `index`; true: burst `index` (TIDE_BURST_INDEX) */
    uint64_t index;
} tide_mlp_evaluator_t;

/* One line of eval.log, newline included, into buf:
 * "eval step S shard I loss %.17g by rank R\n" (or "... by burst B\n"). Returns its length, or
 * -ENOSPC when size is too small (buf then holds nothing useful). */
int tide_mlp_eval_format(char *buf, size_t size, uint64_t step, uint64_t shard, double loss,
                         const tide_mlp_evaluator_t *who);

/* Appends that line to DIR/eval.log (created 0644 if missing) with O_APPEND in one write(2), so
 * concurrent writers (ranks, lent processes) never interleave within a line. Returns 0 or a
 * negative errno with err naming the file. */
int tide_mlp_eval_log_append(const char *dir, uint64_t step, uint64_t shard, double loss,
                             const tide_mlp_evaluator_t *who, tide_error_t *err);

#endif

/* One rank's share of a training step: the micro-batches it owns, each turned into a gradient and
 * added into a fixed-point sum (fixed_point.h). The step's micro-batches are fixed by the global
 * batch — micro-batch m of step s is samples s*B + m*B/M .. s*B + (m+1)*B/M - 1 — and only their
 * owner depends on the world size, so the sum over all ranks does not. */
#ifndef TIDE_MLP_SHARD_H
#define TIDE_MLP_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "mlp_config.h"

typedef struct tide_mlp_shard tide_mlp_shard_t;

/* Scratch space, data generator and gradient buffer for a config (copied). Caller frees with
 * tide_mlp_shard_free (NULL is fine). */
tide_mlp_shard_t *tide_mlp_shard_new(const tide_mlp_config_t *c);
void tide_mlp_shard_free(tide_mlp_shard_t *sh);

/* The rank that runs micro-batch m on `world` ranks. */
uint32_t tide_mlp_microbatch_owner(uint32_t m, uint32_t world);

/* Adds micro-batch m of step `step` into acc: param_count gradient sums, then the loss sum, all
 * fixed point with the limit for micro_batches contributions. Returns 0, or -ERANGE / -EOVERFLOW
 * when a value is out of range (the step must be abandoned). */
int tide_mlp_shard_add_microbatch(tide_mlp_shard_t *sh, const double *params, uint64_t step,
                                  uint32_t m, int64_t *acc);

/* Zeroes acc (param_count + 1 values) and adds every micro-batch of `step` owned by `rank` of
 * `world`. *microbatches gets how many that was. Returns 0, -ERANGE or -EOVERFLOW. */
int tide_mlp_shard_run(tide_mlp_shard_t *sh, const double *params, uint64_t step, uint32_t rank,
                       uint32_t world, int64_t *acc, uint32_t *microbatches);

#endif

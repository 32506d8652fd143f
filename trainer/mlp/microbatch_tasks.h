/* tide-mlp's micro-batches as tide tasks (docs/work-stealing.md, docs/tide-mlp.md): the share a
 * rank declares, the exactly-once check that travels in the step's allreduce, and the simulated
 * cost of a micro-batch (--simulated-compute). Pure apart from the real sleeper; no MPI, no SDK. */
#ifndef TIDE_MLP_MICROBATCH_TASKS_H
#define TIDE_MLP_MICROBATCH_TASKS_H

#include <stdbool.h>
#include <stdint.h>

/* The most micro-batches a rank owns on `world` ranks: ceil(micro_batches / world). */
uint32_t tide_mlp_max_owned(uint32_t micro_batches, uint32_t world);

/* Fills ids (room for tide_mlp_max_owned values) with the micro-batches `rank` owns, ascending
 * (tide_mlp_microbatch_owner); returns how many. */
uint32_t tide_mlp_owned_microbatches(uint32_t micro_batches, uint32_t rank, uint32_t world,
                                     uint64_t *ids);

/* The exactly-once check: counts[m] (summed over ranks) is how many times micro-batch m ran in the
 * step. Returns true when every one of the m counts is exactly 1; otherwise false, with the first
 * micro-batch off in *bad and its count in *times (either may be NULL). */
bool tide_mlp_task_counts_ok(const int64_t *counts, uint32_t m, uint32_t *bad, int64_t *times);

/* Sleeps about ms milliseconds and returns the milliseconds that really passed (CLOCK_MONOTONIC).
 */
typedef double (*tide_mlp_sleep_fn)(void *ud, double ms);

/* The quantum a simulated micro-batch sleeps in, and the most one sleep may count for. */
#define TIDE_MLP_SIM_QUANTUM_MS    0.5
#define TIDE_MLP_SIM_MAX_CREDIT_MS (2 * TIDE_MLP_SIM_QUANTUM_MS)

/* Spends `ms` milliseconds of running time: sleeps in quanta through sleep_fn, counting each sleep
 * for at most TIDE_MLP_SIM_MAX_CREDIT_MS, so time a stopped process (SIGSTOP, a `slow`
 * perturbation) spends not running does not count, while CPU contention costs nothing. Returns the
 * number of sleeps. ms <= 0 returns 0 at once. */
unsigned tide_mlp_simulated_compute_with(double ms, tide_mlp_sleep_fn sleep_fn, void *ud);
/* The same with the real sleeper (nanosleep, measured on CLOCK_MONOTONIC). */
unsigned tide_mlp_simulated_compute(double ms);

#endif

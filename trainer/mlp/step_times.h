/* Wall times of tide-mlp's steps, for the end-of-run line "step time p50 X ms p90 Y ms max Z ms".
 * Bounded memory: up to `capacity` samples kept (all of them when the run has no more steps; else
 * a uniform reservoir sample with a fixed seed), the maximum exact. */
#ifndef TIDE_MLP_STEP_TIMES_H
#define TIDE_MLP_STEP_TIMES_H

#include <stddef.h>
#include <stdint.h>

typedef struct tide_mlp_step_times tide_mlp_step_times_t;

/* At most capacity (>= 1) samples. Caller frees with tide_mlp_step_times_free (NULL is fine). */
tide_mlp_step_times_t *tide_mlp_step_times_new(size_t capacity);
void tide_mlp_step_times_free(tide_mlp_step_times_t *st);

/* Records one step's time (ms). */
void tide_mlp_step_times_add(tide_mlp_step_times_t *st, double ms);

/* Nearest-rank percentiles 50 and 90 of the samples kept and the exact maximum (any out-pointer may
 * be NULL). Returns the number of steps recorded (0: nothing filled). */
uint64_t tide_mlp_step_times_summary(const tide_mlp_step_times_t *st, double *p50, double *p90,
                                     double *max);

#endif

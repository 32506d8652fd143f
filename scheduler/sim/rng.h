/* Seeded pseudo-random numbers for the simulator: xoshiro256** seeded through splitmix64. Each
 * concern (arrivals of a class, job attributes, faults) draws from its own stream, so changing one
 * part of a scenario does not reshuffle the others (common random numbers across policy variants).
 */
#ifndef TIDE_SIM_RNG_H
#define TIDE_SIM_RNG_H

#include <stdint.h>

typedef struct tide_rng {
    uint64_t s[4];
} tide_rng_t;

/* Seeds stream `stream` of seed `seed`. Streams of one seed are independent for practical purposes.
 */
void tide_rng_seed(tide_rng_t *r, uint64_t seed, uint64_t stream);
/* The next 64 random bits. */
uint64_t tide_rng_next(tide_rng_t *r);
/* Uniform in [0, 1). */
double tide_rng_uniform(tide_rng_t *r);
/* Uniform integer in [0, n); 0 when n == 0. Unbiased. */
uint64_t tide_rng_below(tide_rng_t *r, uint64_t n);
/* Exponential with the given mean (> 0). */
double tide_rng_exp(tide_rng_t *r, double mean);
/* Standard normal (Box-Muller, one value per call: two uniforms consumed). */
double tide_rng_normal(tide_rng_t *r);

#endif

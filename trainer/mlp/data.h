/* Synthetic training data: sample i of a run is a pure function of (seed, i), so any rank can make
 * any micro-batch and a resumed run sees exactly the samples it would have seen.
 *
 * Inputs are uniform in [-1, 1) from a counter-based hash (splitmix64) of (seed, i, feature); the
 * targets are the outputs of a fixed "teacher" ReLU network whose weights also come from the seed,
 * so the student MLP has something learnable. Only +, *, max and sqrt are used (IEEE-754 exact
 * rounding), so the data are bitwise the same on every machine. */
#ifndef TIDE_MLP_DATA_H
#define TIDE_MLP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "mlp_config.h"

#define TIDE_MLP_TEACHER_WIDTH 32

typedef struct tide_mlp_data tide_mlp_data_t;

/* One splitmix64 step: a bijective 64-bit mixer. */
uint64_t tide_mlp_splitmix64(uint64_t x);
/* A uniform double in [-1, 1) with 53 random bits, from (seed, stream, a, b). */
double tide_mlp_uniform(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b);

/* The generator for a config (reads input, output and seed). Caller frees with
 * tide_mlp_data_free (NULL is fine). */
tide_mlp_data_t *tide_mlp_data_new(const tide_mlp_config_t *c);
void tide_mlp_data_free(tide_mlp_data_t *d);

/* Samples first .. first+n-1: inputs into x (n rows of `input`), targets into t (n rows of
 * `output`), row-major. */
void tide_mlp_data_fill(const tide_mlp_data_t *d, uint64_t first, size_t n, double *x, double *t);

/* Held-out samples first .. first+n-1, as tide_mlp_data_fill: the same teacher, but inputs from
 * another hash stream, so they are not training samples (docs/tide-mlp.md, "Evaluation"). */
void tide_mlp_data_fill_heldout(const tide_mlp_data_t *d, uint64_t first, size_t n, double *x,
                                double *t);

#endif

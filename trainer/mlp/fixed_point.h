/* 64-bit fixed-point accumulation of gradients, so that the sum over micro-batches is exact and
 * therefore the same in any order and any partition across ranks (integer addition is associative).
 *
 * A value x is held as q = round-half-even(x * 2^32). With C contributions per sum, each one is
 * limited to |q| <= INT64_MAX / C, so no partial sum in any order can overflow (the MPI_SUM of
 * int64 included). A value beyond the limit, or not finite, is an error the caller must act on;
 * the limit depends only on C, never on the world size, so the error is deterministic too. */
#ifndef TIDE_MLP_FIXED_POINT_H
#define TIDE_MLP_FIXED_POINT_H

#include <stddef.h>
#include <stdint.h>

#define TIDE_MLP_FIXED_FRAC_BITS 32

/* The largest |q| one of `contributions` values may have: INT64_MAX / contributions (>= 1). */
int64_t tide_mlp_fixed_limit(uint64_t contributions);

/* Converts x to fixed point into *q. Returns 0, or -ERANGE (and leaves *q alone) when x is NaN,
 * infinite, or |q| would exceed `limit`. */
int tide_mlp_fixed_from_double(double x, int64_t limit, int64_t *q);

/* The double nearest to q / 2^32. */
double tide_mlp_fixed_to_double(int64_t q);

/* acc[i] += fixed(x[i]) for i < n. Returns 0, -ERANGE when some x[i] is out of range for `limit`,
 * or -EOVERFLOW when an addition would overflow (a caller that broke the limit discipline). On an
 * error, acc is left partly updated: the caller discards the whole step. */
int tide_mlp_fixed_accumulate(int64_t *acc, const double *x, size_t n, int64_t limit);

/* acc[i] += add[i] with overflow detection: 0 or -EOVERFLOW (acc partly updated). */
int tide_mlp_fixed_add(int64_t *acc, const int64_t *add, size_t n);

#endif

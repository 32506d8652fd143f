/* Fixed-point conversion and exact accumulation (fixed_point.h). Invariant: every value that enters
 * an accumulator is within the limit its caller chose, so sums are exact integers in any order. */
#include "fixed_point.h"

#include <errno.h>
#include <math.h>

#define SCALE     0x1p32 /* 2^TIDE_MLP_FIXED_FRAC_BITS */
#define INV_SCALE 0x1p-32

int64_t tide_mlp_fixed_limit(uint64_t contributions)
{
    if (contributions < 1)
        contributions = 1;
    return (int64_t)((uint64_t)INT64_MAX / contributions);
}

int tide_mlp_fixed_from_double(double x, int64_t limit, int64_t *q)
{
    /* Scaling by a power of two is exact (short of overflow); rint rounds half to even in the
     * default rounding mode, which nothing in this program changes. */
    double y = x * SCALE;
    int64_t v;

    if (!(fabs(y) < 0x1p63)) /* also catches NaN */
        return -ERANGE;
    v = (int64_t)rint(y);
    if (v > limit || v < -limit)
        return -ERANGE;
    *q = v;
    return 0;
}

double tide_mlp_fixed_to_double(int64_t q)
{
    return (double)q * INV_SCALE;
}

int tide_mlp_fixed_accumulate(int64_t *acc, const double *x, size_t n, int64_t limit)
{
    for (size_t i = 0; i < n; i++) {
        int64_t q;
        if (tide_mlp_fixed_from_double(x[i], limit, &q))
            return -ERANGE;
        if (__builtin_add_overflow(acc[i], q, &acc[i]))
            return -EOVERFLOW;
    }
    return 0;
}

int tide_mlp_fixed_add(int64_t *acc, const int64_t *add, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (__builtin_add_overflow(acc[i], add[i], &acc[i]))
            return -EOVERFLOW;
    return 0;
}

/* tide-mlp fixed-point accumulation: sums are bitwise the same in any order and any partition into
 * ranks (where double sums are not), conversions round as documented, and out-of-range values and
 * overflows are reported instead of wrapping. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "data.h"
#include "fixed_point.h"

#define MB  48  /* micro-batches */
#define LEN 301 /* values per micro-batch */

static uint64_t rng_state = 12345;

static uint64_t rnd(void)
{
    rng_state = tide_mlp_splitmix64(rng_state);
    return rng_state;
}

/* Values of widely different magnitudes, so that double addition is visibly not associative. */
static double wild(void)
{
    double u = tide_mlp_uniform(7, 1, rnd(), 0);
    int e = (int)(rnd() % 40) - 30; /* 2^-30 .. 2^9 */
    return ldexp(u, e);
}

static void shuffle(uint32_t *v, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rnd() % i;
        uint32_t t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

static void test_order_and_partition_independent(void **state)
{
    static double g[MB][LEN];
    int64_t ref[LEN], rank_acc[8][LEN], total[LEN];
    double dref[LEN], dsum[LEN];
    int64_t limit = tide_mlp_fixed_limit(MB);
    uint32_t order[MB];
    bool double_differs = false;
    (void)state;

    for (int m = 0; m < MB; m++)
        for (int i = 0; i < LEN; i++)
            g[m][i] = wild();
    memset(ref, 0, sizeof(ref));
    memset(dref, 0, sizeof(dref));
    for (int m = 0; m < MB; m++) {
        assert_int_equal(tide_mlp_fixed_accumulate(ref, g[m], LEN, limit), 0);
        for (int i = 0; i < LEN; i++)
            dref[i] += g[m][i];
    }
    for (int trial = 0; trial < 40; trial++) {
        uint32_t world = 1 + (uint32_t)(rnd() % 8);
        for (uint32_t m = 0; m < MB; m++)
            order[m] = m;
        shuffle(order, MB);
        memset(rank_acc, 0, sizeof(rank_acc));
        memset(dsum, 0, sizeof(dsum));
        /* each micro-batch goes to a random rank, in a random order */
        for (int k = 0; k < MB; k++) {
            uint32_t m = order[k], r = (uint32_t)(rnd() % world);
            assert_int_equal(tide_mlp_fixed_accumulate(rank_acc[r], g[m], LEN, limit), 0);
            for (int i = 0; i < LEN; i++)
                dsum[i] += g[m][i];
        }
        /* and the ranks' sums meet in yet another order (as MPI_SUM may) */
        memset(total, 0, sizeof(total));
        for (uint32_t k = 0; k < world; k++)
            order[k] = k;
        shuffle(order, world);
        for (uint32_t k = 0; k < world; k++)
            assert_int_equal(tide_mlp_fixed_add(total, rank_acc[order[k]], LEN), 0);
        assert_memory_equal(total, ref, sizeof(ref));
        if (memcmp(dsum, dref, sizeof(dref)) != 0)
            double_differs = true;
    }
    /* the reason for all this: the same sums in double depend on the order */
    assert_true(double_differs);
}

static void test_round_trip(void **state)
{
    int64_t q = 0, limit = tide_mlp_fixed_limit(1);
    (void)state;

    /* multiples of 2^-32 are exact */
    const double exact[] = {0.0, 1.0, -1.0, 0x1p-32, -0x1p-32, 12345.5, -0x1p30 + 0x1p-32};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
        assert_int_equal(tide_mlp_fixed_from_double(exact[i], limit, &q), 0);
        assert_true(tide_mlp_fixed_to_double(q) == exact[i]);
    }
    /* anything else is within half a step, ties to even */
    for (int i = 0; i < 10000; i++) {
        double x = wild();
        assert_int_equal(tide_mlp_fixed_from_double(x, limit, &q), 0);
        assert_true(fabs(tide_mlp_fixed_to_double(q) - x) <= 0x1p-33);
    }
    assert_int_equal(tide_mlp_fixed_from_double(0x1p-33, limit, &q), 0);
    assert_int_equal(q, 0);
    assert_int_equal(tide_mlp_fixed_from_double(3 * 0x1p-33, limit, &q), 0);
    assert_int_equal(q, 2);
    assert_int_equal(tide_mlp_fixed_from_double(-3 * 0x1p-33, limit, &q), 0);
    assert_int_equal(q, -2);
    assert_int_equal(tide_mlp_fixed_from_double(5 * 0x1p-33, limit, &q), 0);
    assert_int_equal(q, 2);
}

static void test_range_and_overflow(void **state)
{
    int64_t q = 99, acc[2];
    int64_t lim16 = tide_mlp_fixed_limit(16);
    double big = ldexp((double)lim16, -32); /* about 2^27 */
    (void)state;

    assert_true(tide_mlp_fixed_limit(0) == INT64_MAX);
    assert_true(tide_mlp_fixed_limit(1) == INT64_MAX);
    assert_true(lim16 == INT64_MAX / 16);
    assert_int_equal(tide_mlp_fixed_from_double(NAN, lim16, &q), -ERANGE);
    assert_int_equal(tide_mlp_fixed_from_double(INFINITY, lim16, &q), -ERANGE);
    assert_int_equal(tide_mlp_fixed_from_double(-INFINITY, lim16, &q), -ERANGE);
    assert_int_equal(tide_mlp_fixed_from_double(1e300, tide_mlp_fixed_limit(1), &q), -ERANGE);
    assert_int_equal(tide_mlp_fixed_from_double(0x1p31, tide_mlp_fixed_limit(1), &q), -ERANGE);
    assert_int_equal(q, 99); /* untouched on error */
    assert_int_equal(tide_mlp_fixed_from_double(big * 1.001, lim16, &q), -ERANGE);
    assert_int_equal(tide_mlp_fixed_from_double(-big * 1.001, lim16, &q), -ERANGE);
    assert_int_equal(tide_mlp_fixed_from_double(big * 0.999, lim16, &q), 0);

    /* 16 contributions at the limit, of either sign, never overflow */
    memset(acc, 0, sizeof(acc));
    for (int i = 0; i < 16; i++) {
        double v[2] = {big * 0.9999999, -big * 0.9999999};
        assert_int_equal(tide_mlp_fixed_accumulate(acc, v, 2, lim16), 0);
    }
    assert_true(acc[0] > 0 && acc[1] < 0);

    /* a caller that breaks the limit discipline gets -EOVERFLOW, not a wrapped sum */
    acc[0] = INT64_MAX - 5;
    assert_int_equal(tide_mlp_fixed_accumulate(acc, (double[]){1.0}, 1, INT64_MAX), -EOVERFLOW);
    acc[0] = INT64_MIN + 5;
    assert_int_equal(tide_mlp_fixed_accumulate(acc, (double[]){-1.0}, 1, INT64_MAX), -EOVERFLOW);
    acc[0] = INT64_MAX;
    assert_int_equal(tide_mlp_fixed_add(acc, (int64_t[]){1}, 1), -EOVERFLOW);
    /* a non-finite gradient is out of range */
    acc[0] = 0;
    assert_int_equal(tide_mlp_fixed_accumulate(acc, (double[]){NAN}, 1, lim16), -ERANGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_partition_independent),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_range_and_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* tide-mlp's micro-batches as tide tasks (trainer/mlp/microbatch_tasks.c, step_times.c): the share
 * a rank declares, the exactly-once check, the simulated compute's crediting (with a fake sleeper:
 * no real sleeps, no timing), and the step-time percentiles. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "microbatch_tasks.h"
#include "shard.h"
#include "step_times.h"

static void test_owned_share(void **state)
{
    uint64_t ids[16];
    bool seen[13] = {false};
    (void)state;

    assert_int_equal(tide_mlp_max_owned(13, 4), 4);
    assert_int_equal(tide_mlp_max_owned(12, 4), 3);
    assert_int_equal(tide_mlp_max_owned(2, 4), 1);
    assert_int_equal(tide_mlp_max_owned(1u << 20, 1), 1u << 20);
    /* the shares of all ranks partition the micro-batches, each ascending and owned by its rank */
    for (uint32_t r = 0; r < 4; r++) {
        uint32_t n = tide_mlp_owned_microbatches(13, r, 4, ids);
        assert_true(n <= tide_mlp_max_owned(13, 4));
        for (uint32_t i = 0; i < n; i++) {
            assert_int_equal(tide_mlp_microbatch_owner((uint32_t)ids[i], 4), r);
            assert_false(seen[ids[i]]);
            seen[ids[i]] = true;
            if (i)
                assert_true(ids[i] > ids[i - 1]);
        }
    }
    for (int m = 0; m < 13; m++)
        assert_true(seen[m]);
    /* more ranks than micro-batches: some shares are empty */
    assert_int_equal(tide_mlp_owned_microbatches(2, 3, 4, ids), 0);
    assert_int_equal(tide_mlp_owned_microbatches(2, 1, 4, ids), 1);
    assert_int_equal(ids[0], 1);
}

static void test_counts_check(void **state)
{
    int64_t c[6] = {1, 1, 1, 1, 1, 1};
    uint32_t bad = 99;
    int64_t times = 99;
    (void)state;

    assert_true(tide_mlp_task_counts_ok(c, 6, &bad, &times));
    assert_int_equal(bad, 99); /* untouched when fine */
    assert_true(tide_mlp_task_counts_ok(c, 0, NULL, NULL));
    c[4] = 2; /* ran twice */
    assert_false(tide_mlp_task_counts_ok(c, 6, &bad, &times));
    assert_int_equal(bad, 4);
    assert_int_equal(times, 2);
    c[1] = 0; /* never ran: the first one off is named */
    assert_false(tide_mlp_task_counts_ok(c, 6, &bad, &times));
    assert_int_equal(bad, 1);
    assert_int_equal(times, 0);
    assert_false(tide_mlp_task_counts_ok(c, 6, NULL, NULL));
    c[1] = 1;
    c[4] = 1;
    c[5] = -1; /* garbage is off too */
    assert_false(tide_mlp_task_counts_ok(c, 6, &bad, &times));
    assert_int_equal(bad, 5);
    assert_true(tide_mlp_task_counts_ok(c, 5, NULL, NULL));
}

/* A sleeper that returns scripted elapsed times (then `rest` forever) and records the requests. */
typedef struct fake_sleep {
    const double *took;
    size_t n, calls;
    double rest;
    double asked_total, asked_max;
} fake_sleep_t;

static double fake_sleep(void *ud, double ms)
{
    fake_sleep_t *f = ud;
    double took = f->calls < f->n ? f->took[f->calls] : f->rest;

    f->calls++;
    f->asked_total += ms;
    if (ms > f->asked_max)
        f->asked_max = ms;
    return took;
}

static void test_simulated_compute_credit(void **state)
{
    (void)state;
    /* nothing to do */
    {
        fake_sleep_t f = {.rest = 0.5};
        assert_int_equal(tide_mlp_simulated_compute_with(0, fake_sleep, &f), 0);
        assert_int_equal(tide_mlp_simulated_compute_with(-3, fake_sleep, &f), 0);
        assert_int_equal(f.calls, 0);
    }
    /* sleeps that take what they ask: 10 ms in quanta of 0.5 ms */
    {
        fake_sleep_t f = {.rest = TIDE_MLP_SIM_QUANTUM_MS};
        assert_int_equal(tide_mlp_simulated_compute_with(10, fake_sleep, &f), 20);
        assert_true(f.asked_max <= TIDE_MLP_SIM_QUANTUM_MS);
    }
    /* the last quantum asks only for the rest */
    {
        fake_sleep_t f = {.rest = 0.5};
        assert_int_equal(tide_mlp_simulated_compute_with(1.2, fake_sleep, &f), 3);
        assert_true(f.asked_total > 1.19 && f.asked_total < 1.21);
    }
    /* a process stopped for 200 ms during one sleep: that sleep counts for 1 ms only, so the
     * micro-batch still needs its running time (10 ms = 1 + 18 x 0.5) */
    {
        static const double took[] = {200.0};
        fake_sleep_t f = {.took = took, .n = 1, .rest = 0.5};
        assert_int_equal(tide_mlp_simulated_compute_with(10, fake_sleep, &f), 19);
    }
    /* sleeps that overshoot count fully up to 2 quanta (values exact in binary) */
    {
        fake_sleep_t f = {.rest = 0.75};
        assert_int_equal(tide_mlp_simulated_compute_with(6, fake_sleep, &f), 8);
        f.calls = 0;
        f.rest = TIDE_MLP_SIM_MAX_CREDIT_MS;
        assert_int_equal(tide_mlp_simulated_compute_with(8, fake_sleep, &f), 8);
        f.calls = 0;
        f.rest = 1.5; /* beyond: counts for 1 ms */
        assert_int_equal(tide_mlp_simulated_compute_with(8, fake_sleep, &f), 8);
    }
    /* a clock that does not move (or goes backwards) credits nothing: it keeps sleeping */
    {
        static const double took[] = {0, -5, 0};
        fake_sleep_t f = {.took = took, .n = 3, .rest = 0.5};
        assert_int_equal(tide_mlp_simulated_compute_with(1, fake_sleep, &f), 5);
    }
    /* the real sleeper runs (no timing asserted) */
    assert_true(tide_mlp_simulated_compute(0.2) >= 1);
}

static void test_step_times(void **state)
{
    tide_mlp_step_times_t *st = tide_mlp_step_times_new(100);
    double p50 = -1, p90 = -1, max = -1;
    (void)state;

    assert_int_equal(tide_mlp_step_times_summary(st, &p50, &p90, &max), 0);
    assert_true(p50 == -1 && max == -1);
    tide_mlp_step_times_add(st, 7);
    assert_int_equal(tide_mlp_step_times_summary(st, &p50, &p90, &max), 1);
    assert_true(p50 == 7 && p90 == 7 && max == 7);
    tide_mlp_step_times_free(st);

    /* 1..100 in a scrambled order: nearest rank p50 = 50, p90 = 90 */
    st = tide_mlp_step_times_new(100);
    for (int i = 0; i < 100; i++)
        tide_mlp_step_times_add(st, (double)((i * 37) % 100 + 1));
    assert_int_equal(tide_mlp_step_times_summary(st, &p50, &p90, &max), 100);
    assert_true(p50 == 50 && p90 == 90 && max == 100);
    assert_int_equal(tide_mlp_step_times_summary(st, NULL, NULL, NULL), 100);
    tide_mlp_step_times_free(st);

    /* more steps than kept: bounded, the maximum exact, the percentiles of a uniform sample */
    st = tide_mlp_step_times_new(1000);
    for (int i = 0; i < 100000; i++)
        tide_mlp_step_times_add(st, i == 4321 ? 1e9 : (double)(i % 100));
    assert_int_equal(tide_mlp_step_times_summary(st, &p50, &p90, &max), 100000);
    assert_true(max == 1e9);
    assert_true(p50 >= 40 && p50 <= 60);
    assert_true(p90 >= 80 && p90 <= 99);
    tide_mlp_step_times_free(st);
    tide_mlp_step_times_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_owned_share),
        cmocka_unit_test(test_counts_check),
        cmocka_unit_test(test_simulated_compute_credit),
        cmocka_unit_test(test_step_times),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* MFU windows and the health score: the article's cases (docs/metrics.md). */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "health.h"
#include "mfu.h"
#include "risk.h"

#define H100 989e12

static void assert_near(double got, double want, double rel)
{
    if (fabs(got - want) > rel * fabs(want)) {
        print_error("got %g, want %g (within %g%%)\n", got, want, rel * 100);
        fail();
    }
}

/* The article: 11 PFLOP/s achieved of 100 PFLOP/s available is 11%. */
static void test_mfu_ratio(void **state)
{
    (void)state;
    assert_near(tide_mfu(11e15, 100e15), 0.11, 1e-12);
    assert_true(tide_mfu(5e15, 0) == 0);
    assert_true(tide_mfu(-1, 1e15) == 0);
    assert_true(tide_mfu(NAN, 1e15) == 0);
}

/* A steady trainer: every window reports its rate, from the first report on. */
static void test_window_steady_rate(void **state)
{
    tide_flops_window_t w;
    double r = 0.4 * H100, fast, slow, life;
    int64_t t = 1000000;
    (void)state;
    tide_flops_window_init(&w);
    tide_flops_window_rates(&w, t, &fast, &slow, &life);
    assert_true(fast == 0 && slow == 0 && life == 0);
    for (int i = 1; i <= 30; i++) {
        t += 500;
        assert_int_equal(tide_flops_window_add(&w, t, r * 0.5, 0.5, H100), 0);
        tide_flops_window_rates(&w, t, &fast, &slow, &life);
        assert_near(fast, r, 0.002);
        assert_near(slow, r, 0.002);
        assert_near(life, r, 1e-9);
    }
    assert_near(tide_mfu(fast, H100), 0.4, 0.02);
    assert_int_equal(w.accepted, 30);
}

/* The rate changes: the 10 s window follows within seconds, the 5 min one slowly. */
static void test_window_follows_changes(void **state)
{
    tide_flops_window_t w;
    double fast, slow;
    int64_t t = 0;
    (void)state;
    tide_flops_window_init(&w);
    for (int i = 0; i < 600; i++) { /* 10 min at 40% */
        t += 1000;
        tide_flops_window_add(&w, t, 0.4 * H100, 1.0, H100);
    }
    for (int i = 0; i < 60; i++) { /* 1 min at 10% */
        t += 1000;
        tide_flops_window_add(&w, t, 0.1 * H100, 1.0, H100);
    }
    tide_flops_window_rates(&w, t, &fast, &slow, NULL);
    assert_near(tide_mfu(fast, H100), 0.1, 0.05);
    assert_true(tide_mfu(slow, H100) > 0.3 && tide_mfu(slow, H100) < 0.4);
    /* A stalled trainer: no report for a minute; its current MFU falls to ~0. */
    tide_flops_window_rates(&w, t + 60000, &fast, NULL, NULL);
    assert_true(tide_mfu(fast, H100) < 0.001);
}

/* Absurd reports are refused, counted and never folded in. */
static void test_window_rejects_absurd(void **state)
{
    tide_flops_window_t w;
    double fast1, fast2;
    (void)state;
    tide_flops_window_init(&w);
    assert_int_equal(tide_flops_window_add(&w, 1000, 0.5 * H100, 1.0, H100), 0);
    tide_flops_window_rates(&w, 1000, &fast1, NULL, NULL);
    assert_int_equal(tide_flops_window_add(&w, 1000, 2.0 * H100, 1.0, H100), -ERANGE); /* > peak */
    assert_int_equal(tide_flops_window_add(&w, 1000, -1, 1.0, H100), -ERANGE);
    assert_int_equal(tide_flops_window_add(&w, 1000, NAN, 1.0, H100), -ERANGE);
    assert_int_equal(tide_flops_window_add(&w, 1000, INFINITY, 1.0, H100), -ERANGE);
    assert_int_equal(tide_flops_window_add(&w, 1000, 1.0, -1.0, H100), -ERANGE);
    assert_int_equal(w.rejected, 5);
    assert_int_equal(w.accepted, 1);
    tide_flops_window_rates(&w, 1000, &fast2, NULL, NULL);
    assert_true(fast1 == fast2);
    /* 5% over peak is timer jitter, not a lie; unknown peak: no check. */
    assert_int_equal(tide_flops_window_add(&w, 2000, 1.04 * H100, 1.0, H100), 0);
    assert_int_equal(tide_flops_window_add(&w, 3000, 5.0 * H100, 1.0, 0), 0);
}

static tide_utilization_t util(double compute, double membw, double net, double storage)
{
    tide_utilization_t u = {{compute, membw, net, storage}, 0xf};
    return u;
}

/* The article: compute at 30% while memory bandwidth is at 100%: memory bandwidth binds, and
 * pushing MFU will not help. */
static void test_health_memory_bound(void **state)
{
    tide_health_input_t in = {.util = util(0.30, 1.00, 0.20, 0.05)};
    tide_health_t h;
    (void)state;
    tide_health_score(&in, &h);
    assert_int_equal(h.bottleneck, TIDE_DIM_MEMORY_BW);
    assert_string_equal(tide_dim_name(h.bottleneck), "memory_bandwidth");
    assert_non_null(strstr(h.status, "memory bandwidth at 100% binds while compute is at 30%"));
    assert_non_null(strstr(h.status, "pushing MFU will not help"));
    assert_true(h.headroom == 0);
    /* The same cluster with headroom on memory bandwidth scores better. */
    {
        tide_health_input_t in2 = {.util = util(0.30, 0.80, 0.20, 0.05)};
        tide_health_t h2;
        tide_health_score(&in2, &h2);
        assert_true(h2.score > h.score + 20);
    }
}

/* The article: a cluster with no reserve left scores worse than one at its headroom target. */
static void test_health_reserve(void **state)
{
    tide_health_input_t at_target = {.util = util(0.80, 0.5, 0.3, 0.1), .reserve_gpus = 4,
                                     .reserve_target_gpus = 4};
    tide_health_input_t none_left = at_target;
    tide_health_t a, b;
    (void)state;
    none_left.reserve_gpus = 0;
    tide_health_score(&at_target, &a);
    tide_health_score(&none_left, &b);
    assert_true(b.score < a.score);
    assert_near(a.score - b.score, 25, 1e-9);
    assert_non_null(strstr(b.status, "reserve 0 of 4 spare GPUs"));
    assert_null(strstr(a.status, "reserve"));
    assert_near(a.score, 100, 1e-9); /* at the target band, spares in place, no risk */
}

static void test_health_edges(void **state)
{
    tide_health_input_t in;
    tide_health_t h;
    (void)state;
    memset(&in, 0, sizeof(in));
    tide_health_score(&in, &h);
    assert_int_equal(h.bottleneck, TIDE_DIM_COUNT);
    assert_string_equal(h.status, "no utilization known yet");
    assert_string_equal(tide_dim_name(TIDE_DIM_COUNT), "none");
    /* Unknown dimensions never bind, however large their value. */
    in.util = util(0.5, 7.0, 0.2, 0.1);
    in.util.known = (1u << TIDE_DIM_COMPUTE) | (1u << TIDE_DIM_NETWORK);
    assert_int_equal(tide_bottleneck(&in.util), TIDE_DIM_COMPUTE);
    /* Compute-bound at 95%: no headroom; underused; risk costs points. */
    in.util = util(0.95, 0.4, 0.2, 0.1);
    tide_health_score(&in, &h);
    assert_non_null(strstr(h.status, "compute at 95% binds: no headroom left"));
    in.util = util(0.2, 0.1, 0.1, 0.1);
    tide_health_score(&in, &h);
    assert_non_null(strstr(h.status, "underused"));
    in.util = util(0.7, 0.4, 0.2, 0.1);
    tide_health_score(&in, &h);
    {
        double safe = h.score;
        in.failure_risk = 1.0;
        tide_health_score(&in, &h);
        assert_near(safe - h.score, 15, 1e-9);
    }
    assert_true(h.score >= 0 && h.score <= 100);
}

/* Failure risk from telemetry (risk.h): unknown inputs add nothing; each precursor raises it; the
 * health score falls with it. */
static void test_failure_risk(void **state)
{
    tide_risk_input_t in;
    tide_health_input_t h;
    tide_health_t ok, risky;

    (void)state;
    memset(&in, 0, sizeof(in));
    in.temperature_c = 99;
    in.ecc_uncorrected = 5;
    in.xid_count = 1;
    in.last_xid = 79;
    in.throttle_reasons = 0x40;
    assert_true(tide_failure_risk(&in) == 0); /* nothing known */
    in.has_temperature = true;
    in.temperature_c = 80;
    assert_true(tide_failure_risk(&in) == 0);
    in.temperature_c = 87.5;
    assert_true(fabs(tide_failure_risk(&in) - 0.3) < 1e-12);
    in.temperature_c = 120;
    assert_true(fabs(tide_failure_risk(&in) - 0.6) < 1e-12);
    in.has_ecc = true;
    assert_true(fabs(tide_failure_risk(&in) - 0.9) < 1e-12);
    memset(&in, 0, sizeof(in));
    in.has_xid = in.has_throttle = true;
    in.xid_count = 1;
    in.last_xid = 13; /* graphics engine exception: often the application */
    assert_true(fabs(tide_failure_risk(&in) - 0.3) < 1e-12);
    in.last_xid = 79; /* fallen off the bus */
    assert_true(fabs(tide_failure_risk(&in) - 0.8) < 1e-12);
    assert_true(tide_xid_critical(48) && !tide_xid_critical(13) && !tide_xid_critical(0));
    in.xid_count = 0;
    in.throttle_reasons = 0x4; /* the user's application clocks: no risk */
    assert_true(tide_failure_risk(&in) == 0);
    in.throttle_reasons = 0x40; /* hardware thermal slowdown */
    assert_true(fabs(tide_failure_risk(&in) - 0.3) < 1e-12);

    memset(&h, 0, sizeof(h));
    h.util.u[TIDE_DIM_COMPUTE] = 0.7;
    h.util.known = 1u << TIDE_DIM_COMPUTE;
    tide_health_score(&h, &ok);
    h.failure_risk = tide_failure_risk(&in);
    tide_health_score(&h, &risky);
    assert_true(risky.score < ok.score);
    assert_true(fabs(risky.reliability - 0.7) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mfu_ratio),
        cmocka_unit_test(test_window_steady_rate),
        cmocka_unit_test(test_window_follows_changes),
        cmocka_unit_test(test_window_rejects_absurd),
        cmocka_unit_test(test_health_memory_bound),
        cmocka_unit_test(test_health_reserve),
        cmocka_unit_test(test_health_edges),
        cmocka_unit_test(test_failure_risk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The burst controller (scheduler/core/burst.c) on fake times: its defaults, no lending before a
 * high phase has been seen to end, lending ceil(n x percent) after enter_ms when the predicted rest
 * outlasts the cost, the reserve's cap, reclaiming only after exit_ms of normal phase and the
 * minimum dwell, the EWMA's arithmetic, times going backwards, and flapping observations. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "burst.h"

/* Observes the phase every `step` ms over [from, to) (from included, to excluded). */
static void feed(tide_burst_t *b, const tide_burst_cfg_t *cfg, int64_t from, int64_t to,
                 int64_t step, bool high)
{
    for (int64_t t = from; t < to; t += step)
        tide_burst_observe(b, cfg, t, high);
}

/* A controller that has seen one 20 s high phase (0..20 s) and is in a normal phase since 20 s, fed
 * every 500 ms up to 40 s. */
static void one_pulse_seen(tide_burst_t *b, const tide_burst_cfg_t *cfg)
{
    tide_burst_init(b);
    feed(b, cfg, 0, 20000, 500, true);
    feed(b, cfg, 20000, 40000, 500, false);
}

static void test_defaults(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    (void)state;
    memset(&cfg, 0xff, sizeof(cfg));
    tide_burst_cfg_default(&cfg);
    assert_true(cfg.percent == 20);
    assert_int_equal(cfg.enter_ms, 2000);
    assert_int_equal(cfg.exit_ms, 2000);
    assert_int_equal(cfg.min_dwell_ms, 10000);
    assert_true(cfg.cost_factor == 2.0);
    assert_true(cfg.ewma_alpha == 0.3);
    memset(&b, 0xff, sizeof(b));
    tide_burst_init(&b);
    assert_false(b.observed);
    assert_false(b.high);
    assert_int_equal(b.lent, 0);
    assert_int_equal(b.highs_seen, 0);
    assert_int_equal(tide_burst_predicted_rest(&b, 0), -1);
}

/* A pause (a burst resize's stop and start) inside a phase is left out of its length. */
static void test_pause_left_out_of_phase(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    (void)state;
    tide_burst_cfg_default(&cfg);
    tide_burst_init(&b);
    tide_burst_pause(&b, 0, 500); /* nothing observed: no-op */
    assert_false(b.observed);
    tide_burst_observe(&b, &cfg, 0, true);
    tide_burst_pause(&b, 10000, 3000); /* paused 3 s of the first 10 s */
    tide_burst_observe(&b, &cfg, 20000, false);
    assert_int_equal(b.highs_seen, 1);
    assert_true(b.ewma_high_ms == 17000.0);
    /* Never later than now. */
    tide_burst_observe(&b, &cfg, 30000, true);
    tide_burst_pause(&b, 31000, 5000);
    assert_int_equal(b.phase_since, 31000);
}

static void test_first_high_phase_lends_nothing(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    int32_t n = -1;
    (void)state;
    tide_burst_cfg_default(&cfg);
    tide_burst_init(&b);
    /* Never observed: nothing. */
    assert_int_equal(tide_burst_decide(&b, &cfg, 0, 8, 8, 100, &n), TIDE_BURST_HOLD);
    for (int64_t t = 0; t < 60000; t += 500) {
        tide_burst_observe(&b, &cfg, t, true);
        assert_int_equal(tide_burst_predicted_rest(&b, t), -1);
        assert_int_equal(tide_burst_decide(&b, &cfg, t, 8, 8, 0, &n), TIDE_BURST_HOLD);
        assert_int_equal(n, 0);
    }
}

static void test_second_high_phase_lends_after_enter(void **state)
{
    static const struct {
        int32_t ranks, want;
    } cases[] = {{8, 2}, {3, 1}, {5, 1}, {64, 13}, {1, 1}, {10, 2}};
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    int32_t n;
    (void)state;
    tide_burst_cfg_default(&cfg);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        one_pulse_seen(&b, &cfg);
        assert_int_equal(b.highs_seen, 1);
        assert_true(b.ewma_high_ms == 20000);
        tide_burst_observe(&b, &cfg, 40000, true);
        /* Before enter_ms of high phase: hold, however long it is predicted. */
        for (int64_t t = 40000; t < 42000; t += 100) {
            n = -1;
            tide_burst_observe(&b, &cfg, t, true);
            assert_int_equal(tide_burst_decide(&b, &cfg, t, cases[i].ranks, 100, 1000, &n),
                             TIDE_BURST_HOLD);
            assert_int_equal(n, 0);
        }
        assert_int_equal(tide_burst_predicted_rest(&b, 42000), 18000);
        assert_int_equal(tide_burst_decide(&b, &cfg, 42000, cases[i].ranks, 100, 1000, &n),
                         TIDE_BURST_LEND);
        assert_int_equal(n, cases[i].want);
    }
    /* Another percent. */
    cfg.percent = 50;
    one_pulse_seen(&b, &cfg);
    tide_burst_observe(&b, &cfg, 40000, true);
    assert_int_equal(tide_burst_decide(&b, &cfg, 42500, 7, 100, 0, &n), TIDE_BURST_LEND);
    assert_int_equal(n, 4);
    /* Burst off. */
    cfg.percent = 0;
    assert_int_equal(tide_burst_decide(&b, &cfg, 42500, 7, 100, 0, &n), TIDE_BURST_HOLD);
}

static void test_rest_under_cost_holds(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    int32_t n;
    (void)state;
    tide_burst_cfg_default(&cfg);
    one_pulse_seen(&b, &cfg);
    tide_burst_observe(&b, &cfg, 40000, true);
    /* At 42 s the predicted rest is 18 s: a cost of 9 s (x2 = 18 s, not more) holds, 8.999 s
     * lends. */
    assert_int_equal(tide_burst_decide(&b, &cfg, 42000, 8, 8, 9000, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 42000, 8, 8, 8999, &n), TIDE_BURST_LEND);
    /* Later in the phase the rest shrinks below the same cost. */
    assert_int_equal(tide_burst_decide(&b, &cfg, 50000, 8, 8, 8999, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 50000, 8, 8, 4999, &n), TIDE_BURST_LEND);
    /* Past the predicted end: rest 0, nothing pays. */
    assert_int_equal(tide_burst_predicted_rest(&b, 70000), 0);
    assert_int_equal(tide_burst_decide(&b, &cfg, 70000, 8, 8, 0, &n), TIDE_BURST_HOLD);

    /* Pulses of 1.5 s against a 1 s cost never lend (they never last enter_ms either; with enter_ms
     * 0 the predicted rest is what decides). */
    cfg.enter_ms = 0;
    tide_burst_init(&b);
    for (int cycle = 0; cycle < 20; cycle++) {
        int64_t t0 = cycle * 10000;
        for (int64_t t = t0; t < t0 + 1500; t += 100) {
            tide_burst_observe(&b, &cfg, t, true);
            assert_int_equal(tide_burst_decide(&b, &cfg, t, 8, 8, 1000, &n), TIDE_BURST_HOLD);
        }
        feed(&b, &cfg, t0 + 1500, t0 + 10000, 500, false);
    }
    assert_int_equal(b.highs_seen, 20);
    /* The same pulses against a 0.5 s cost lend early in the phase (rest 1.4 s > 1 s). */
    tide_burst_observe(&b, &cfg, 200000, true);
    assert_int_equal(tide_burst_decide(&b, &cfg, 200100, 8, 8, 500, &n), TIDE_BURST_LEND);
    assert_int_equal(tide_burst_decide(&b, &cfg, 200600, 8, 8, 500, &n), TIDE_BURST_HOLD);
}

static void test_avail_caps(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    int32_t n;
    (void)state;
    tide_burst_cfg_default(&cfg);
    one_pulse_seen(&b, &cfg);
    tide_burst_observe(&b, &cfg, 40000, true);
    assert_int_equal(tide_burst_decide(&b, &cfg, 43000, 64, 5, 0, &n), TIDE_BURST_LEND);
    assert_int_equal(n, 5);
    assert_int_equal(tide_burst_decide(&b, &cfg, 43000, 64, 1, 0, &n), TIDE_BURST_LEND);
    assert_int_equal(n, 1);
    n = -1;
    assert_int_equal(tide_burst_decide(&b, &cfg, 43000, 64, 0, 0, &n), TIDE_BURST_HOLD);
    assert_int_equal(n, 0);
    assert_int_equal(tide_burst_decide(&b, &cfg, 43000, 64, -3, 0, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 43000, 0, 8, 0, &n), TIDE_BURST_HOLD);
}

/* Lends at 42 s in the second high phase (which ends at 45 s). */
static void lent_at_42(tide_burst_t *b, const tide_burst_cfg_t *cfg)
{
    int32_t n;
    one_pulse_seen(b, cfg);
    feed(b, cfg, 40000, 42001, 500, true);
    assert_int_equal(tide_burst_decide(b, cfg, 42000, 8, 8, 0, &n), TIDE_BURST_LEND);
    tide_burst_lent(b, 42000, n);
    assert_int_equal(b->lent, 2);
    assert_int_equal(b->lent_at, 42000);
    /* Still high: holds, and does not lend again. */
    assert_int_equal(tide_burst_decide(b, cfg, 44000, 8, 8, 0, &n), TIDE_BURST_HOLD);
    tide_burst_observe(b, cfg, 45000, false);
}

static void test_reclaim_after_exit_and_dwell(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    int32_t n;
    (void)state;
    tide_burst_cfg_default(&cfg);
    /* The dwell binds: normal for exit_ms at 47 s, but lent only 5 s then. */
    lent_at_42(&b, &cfg);
    for (int64_t t = 45000; t < 52000; t += 100) {
        tide_burst_observe(&b, &cfg, t, false);
        assert_int_equal(tide_burst_decide(&b, &cfg, t, 8, 8, 0, &n), TIDE_BURST_HOLD);
    }
    assert_int_equal(tide_burst_decide(&b, &cfg, 52000, 8, 8, 0, &n), TIDE_BURST_RECLAIM);
    tide_burst_reclaimed(&b);
    assert_int_equal(b.lent, 0);
    assert_int_equal(tide_burst_decide(&b, &cfg, 53000, 8, 8, 0, &n), TIDE_BURST_HOLD);

    /* The exit hysteresis binds: the dwell has passed, the normal phase began 1 s ago. */
    cfg.min_dwell_ms = 1000;
    lent_at_42(&b, &cfg);
    assert_int_equal(tide_burst_decide(&b, &cfg, 46000, 8, 8, 0, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 46999, 8, 8, 0, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 47000, 8, 8, 0, &n), TIDE_BURST_RECLAIM);
}

static void test_short_dip_keeps_lent(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    int32_t n;
    (void)state;
    tide_burst_cfg_default(&cfg);
    cfg.min_dwell_ms = 0;
    lent_at_42(&b, &cfg);
    /* A 1.5 s dip, then high again: never reclaimed, through and after it. */
    for (int64_t t = 45000; t < 46500; t += 100) {
        tide_burst_observe(&b, &cfg, t, false);
        assert_int_equal(tide_burst_decide(&b, &cfg, t, 8, 8, 0, &n), TIDE_BURST_HOLD);
    }
    for (int64_t t = 46500; t < 60000; t += 100) {
        tide_burst_observe(&b, &cfg, t, true);
        assert_int_equal(tide_burst_decide(&b, &cfg, t, 8, 8, 0, &n), TIDE_BURST_HOLD);
    }
    assert_int_equal(b.lent, 2);
    /* Then a normal phase of exit_ms reclaims. */
    tide_burst_observe(&b, &cfg, 60000, false);
    assert_int_equal(tide_burst_decide(&b, &cfg, 61999, 8, 8, 0, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 62000, 8, 8, 0, &n), TIDE_BURST_RECLAIM);
}

static void test_ewma(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    double want;
    (void)state;
    tide_burst_cfg_default(&cfg);
    tide_burst_init(&b);
    tide_burst_observe(&b, &cfg, 0, true);
    tide_burst_observe(&b, &cfg, 10000, false); /* 10 s */
    assert_true(b.ewma_high_ms == 10000);
    tide_burst_observe(&b, &cfg, 15000, true);
    tide_burst_observe(&b, &cfg, 16000, true);  /* same phase: no change */
    tide_burst_observe(&b, &cfg, 35000, false); /* 20 s */
    want = cfg.ewma_alpha * 20000 + (1 - cfg.ewma_alpha) * 10000;
    assert_true(b.ewma_high_ms == want);
    assert_int_equal(b.highs_seen, 2);
    tide_burst_observe(&b, &cfg, 40000, true);
    tide_burst_observe(&b, &cfg, 41000, false); /* 1 s */
    want = cfg.ewma_alpha * 1000 + (1 - cfg.ewma_alpha) * want;
    assert_true(b.ewma_high_ms == want);
    assert_true(fabs(want - 9400) < 1e-6);
    assert_int_equal(b.highs_seen, 3);
    /* Normal phases do not enter the EWMA; the rest is the prediction less what has passed. */
    tide_burst_observe(&b, &cfg, 50000, true);
    assert_int_equal(tide_burst_predicted_rest(&b, 50000), 9400);
    assert_int_equal(tide_burst_predicted_rest(&b, 53000), 6400);
    assert_int_equal(tide_burst_predicted_rest(&b, 60000), 0);
    tide_burst_observe(&b, &cfg, 51000, false);
    assert_int_equal(tide_burst_predicted_rest(&b, 51000), -1);
    /* alpha 1: only the newest length counts. */
    cfg.ewma_alpha = 1;
    tide_burst_observe(&b, &cfg, 52000, true);
    tide_burst_observe(&b, &cfg, 55000, false);
    assert_true(b.ewma_high_ms == 3000);
}

static void test_time_backwards_ignored(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    int32_t n;
    (void)state;
    tide_burst_cfg_default(&cfg);
    tide_burst_init(&b);
    tide_burst_observe(&b, &cfg, 10000, true);
    /* A phase change stamped before the phase began ends it at its start: length 0, not negative.
     */
    tide_burst_observe(&b, &cfg, 5000, false);
    assert_true(b.ewma_high_ms == 0);
    assert_int_equal(b.phase_since, 10000);
    tide_burst_observe(&b, &cfg, 12000, true);
    tide_burst_observe(&b, &cfg, 32000, false); /* 20 s: 0.3 x 20000 */
    assert_true(fabs(b.ewma_high_ms - 6000) < 1e-6);
    tide_burst_observe(&b, &cfg, 40000, true);
    /* Older times: as if at the phase's start. */
    assert_int_equal(tide_burst_predicted_rest(&b, 1000), 6000);
    assert_int_equal(tide_burst_decide(&b, &cfg, 1000, 8, 8, 0, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 42000, 8, 8, 0, &n), TIDE_BURST_LEND);
    tide_burst_lent(&b, 42000, n);
    tide_burst_observe(&b, &cfg, 45000, false);
    cfg.min_dwell_ms = 0;
    /* An old time never satisfies the exit hysteresis nor the dwell. */
    assert_int_equal(tide_burst_decide(&b, &cfg, 0, 8, 8, 0, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 46000, 8, 8, 0, &n), TIDE_BURST_HOLD);
    assert_int_equal(tide_burst_decide(&b, &cfg, 47000, 8, 8, 0, &n), TIDE_BURST_RECLAIM);
}

static void test_flapping_never_lends(void **state)
{
    tide_burst_cfg_t cfg;
    tide_burst_t b;
    int32_t n;
    (void)state;
    tide_burst_cfg_default(&cfg);
    tide_burst_init(&b);
    for (int64_t t = 0; t < 600000; t += 100) {
        tide_burst_observe(&b, &cfg, t, (t / 100) % 2 == 0);
        assert_int_equal(tide_burst_decide(&b, &cfg, t, 64, 64, 0, &n), TIDE_BURST_HOLD);
    }
    assert_true(b.highs_seen > 1000);
    assert_true(fabs(b.ewma_high_ms - 100) < 1e-6);
    assert_int_equal(b.lent, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_first_high_phase_lends_nothing),
        cmocka_unit_test(test_second_high_phase_lends_after_enter),
        cmocka_unit_test(test_rest_under_cost_holds),
        cmocka_unit_test(test_avail_caps),
        cmocka_unit_test(test_reclaim_after_exit_and_dwell),
        cmocka_unit_test(test_short_dip_keeps_lent),
        cmocka_unit_test(test_ewma),
        cmocka_unit_test(test_time_backwards_ignored),
        cmocka_unit_test(test_flapping_never_lends),
        cmocka_unit_test(test_pause_left_out_of_phase),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The failure-risk trend tracker (common/metrics/risk.h, docs/metrics.md "Failure risk"): scripted
 * GPUs sampled every 500 ms on a virtual clock, like the worker's --perturb scripts (heat, ecc,
 * ecc-uncorrected, xid): a GPU heating towards death is predicted before it dies, a brief spike is
 * not, and each rule, the confirmation and the counters' baselines behave as documented. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "risk.h"

#define STEP_MS      500
#define HW_THERMAL   0x40u /* NVML HW thermal slowdown */
#define SW_POWER_CAP 0x4u  /* NVML SW power cap: the user's limit, not a precursor */

typedef struct fixture {
    tide_risk_cfg_t cfg;
    tide_risk_track_t t;
    double score;
    char why[160];
} fixture_t;

static void fixture_init(fixture_t *f)
{
    memset(f, 0, sizeof(*f));
    tide_risk_cfg_default(&f->cfg);
    tide_risk_track_reset(&f->t);
}

static tide_risk_verdict_t feed(fixture_t *f, const tide_risk_input_t *in, int64_t now_ms)
{
    return tide_risk_track_update(&f->t, &f->cfg, in, now_ms, &f->score, f->why, sizeof(f->why));
}

static tide_risk_input_t temp_only(double c)
{
    return (tide_risk_input_t){.has_temperature = true, .temperature_c = c};
}

/* A healthy GPU in a steady job for an hour: whole-degree temperature noise, power and utilization
 * jitter, a power-cap throttle bit now and then, old ECC/XID totals. Never leaves OK. */
static void test_steady_healthy(void **state)
{
    fixture_t f;
    uint32_t rng = 12345;

    (void)state;
    fixture_init(&f);
    for (int64_t ms = 0; ms <= 3600 * 1000; ms += STEP_MS) {
        rng = rng * 1103515245u + 12345u;
        int noise = (int)((rng >> 16) % 3) - 1; /* -1, 0, +1 */
        tide_risk_input_t in = {
            .has_temperature = true,
            .temperature_c = 68 + noise,
            .has_power = true,
            .power_w = 300 + 5 * noise,
            .has_util = true,
            .util = 0.96 + 0.02 * noise,
            .has_throttle = true,
            .throttle_reasons = (rng >> 20) % 7 == 0 ? SW_POWER_CAP : 0,
            .has_ecc = true,
            .ecc_corrected = 4200, /* from before the worker started: history */
            .ecc_uncorrected = 2,
            .has_xid = true,
            .xid_count = 3,
            .last_xid = 79,
        };

        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
        assert_true(f.score < 0.1);
    }
    assert_string_equal(f.why, "none");
}

/* The scenario: GPU A heats at 120 C/min from 60 C (perturb "heat 120") and dies at 100 C;
 * GPU B has a harmless spike (+1200 C/min for 2 s, then -1200 C/min for 2 s). A is predicted
 * before it dies and within ~25 s; B is never predicted (a WATCH while it spikes is fine). Readings
 * are whole degrees, as NVML gives them. */
static void test_heat_then_die_vs_spike(void **state)
{
    fixture_t a, b;
    int64_t a_watch = -1, a_predicted = -1;
    double a_temp_at_prediction = 0;
    bool a_dead = false;

    (void)state;
    fixture_init(&a);
    fixture_init(&b);
    for (int64_t ms = 0; ms <= 120 * 1000; ms += STEP_MS) {
        double s = (double)ms / 1000;
        double ta = round(60 + 120 * s / 60);
        double tb = round(60 + (s < 2 ? 20 * s : s < 4 ? 40 - 20 * (s - 2) : 0));
        tide_risk_input_t ia = temp_only(ta), ib = temp_only(tb);

        if (ta >= 100)
            a_dead = true; /* it stops reporting: the prediction had to come earlier */
        if (!a_dead) {
            tide_risk_verdict_t v = feed(&a, &ia, ms);

            if (v == TIDE_RISK_WATCH && a_watch < 0)
                a_watch = ms;
            if (v == TIDE_RISK_PREDICTED && a_predicted < 0) {
                a_predicted = ms;
                a_temp_at_prediction = ta;
                assert_non_null(strstr(a.why, "temperature"));
                assert_non_null(strstr(a.why, "rising"));
            }
        }
        assert_int_not_equal(feed(&b, &ib, ms), TIDE_RISK_PREDICTED);
    }
    assert_true(a_watch >= 0);
    assert_true(a_predicted >= 0);
    assert_true(a_predicted <= 25 * 1000);
    assert_true(a_temp_at_prediction < 100);
    /* not critical: confirmed after a WATCH of confirm_ms */
    assert_true(a_predicted - a_watch >= a.cfg.confirm_ms);
    /* B ends healthy */
    assert_true(b.score == 0);
}

/* Spikes from warmer baselines, up to 118 C for a moment: WATCH at most for a few seconds. */
static void test_spikes_never_predicted(void **state)
{
    static const double base[] = {60, 70, 75, 78};

    (void)state;
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++) {
        fixture_t f;
        int64_t watched = 0;

        fixture_init(&f);
        for (int64_t ms = 0; ms <= 120 * 1000; ms += STEP_MS) {
            double s = (double)(ms % 60000) / 1000; /* one spike a minute */
            double c = base[i] + (s < 2 ? 20 * s : s < 4 ? 40 - 20 * (s - 2) : 0);
            tide_risk_input_t in = temp_only(c);
            tide_risk_verdict_t v = feed(&f, &in, ms);

            assert_int_not_equal(v, TIDE_RISK_PREDICTED);
            watched += v == TIDE_RISK_WATCH ? STEP_MS : 0;
        }
        assert_true(watched < 2 * f.cfg.confirm_ms);
    }
}

/* A slow warm-up that plateaus below hot (a job starting) is OK; a GPU that keeps heating at
 * 10 C/min is predicted (at 95 C within the horizon, and hot). */
static void test_slow_trends(void **state)
{
    fixture_t f;
    bool predicted = false;

    (void)state;
    fixture_init(&f);
    for (int64_t ms = 0; ms <= 600 * 1000; ms += STEP_MS) {
        double c = 35 + 42 * (1 - exp(-(double)ms / 30000)); /* to 77 C, 30 s time constant */
        tide_risk_input_t in = temp_only(c);

        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    }
    fixture_init(&f);
    for (int64_t ms = 0; ms <= 300 * 1000 && !predicted; ms += STEP_MS) {
        double c = 60 + 10 * (double)ms / 60000;
        tide_risk_input_t in = temp_only(c);

        predicted = feed(&f, &in, ms) == TIDE_RISK_PREDICTED;
        if (predicted)
            assert_true(c < 95);
    }
    assert_true(predicted);
}

/* Hot (0.6) and HW thermal slowdown (0.3) combine to 0.72 >= 0.7: WATCH, then PREDICTED after
 * confirm_ms; one sample without the slowdown (0.6) restarts the confirmation. */
static void test_confirmation_and_dip(void **state)
{
    fixture_t f;
    tide_risk_input_t in = temp_only(96);
    int64_t ms = 0;

    (void)state;
    fixture_init(&f);
    in.has_throttle = true;
    in.throttle_reasons = HW_THERMAL;
    for (; ms < 9000; ms += STEP_MS) {
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_WATCH);
        assert_true(fabs(f.score - 0.72) < 1e-9);
    }
    assert_string_equal(f.why, "temperature 96.0 C; HW thermal slowdown");
    in.throttle_reasons = 0; /* the dip */
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    assert_true(fabs(f.score - 0.6) < 1e-9);
    in.throttle_reasons = HW_THERMAL;
    int64_t again = ms += STEP_MS;
    for (; ms < again + f.cfg.confirm_ms; ms += STEP_MS)
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_WATCH);
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_PREDICTED);
    /* PREDICTED is sticky until reset, with the reason that made it, even once the GPU is fine */
    in = temp_only(50);
    assert_int_equal(feed(&f, &in, ms + 60000), TIDE_RISK_PREDICTED);
    assert_true(f.score == 0);
    assert_string_equal(f.why, "temperature 96.0 C; HW thermal slowdown");
}

/* Corrected ECC at 200/min (perturb "ecc 200") on top of a large startup total: predicted only
 * after confirm_ms of WATCH, within a minute. 0.5/min stays OK; 10/min settles near 0.4. */
static void test_ecc_rate(void **state)
{
    fixture_t f;
    int64_t watch = -1, predicted = -1;
    double rate;

    (void)state;
    fixture_init(&f);
    for (int64_t ms = 0; ms <= 120 * 1000 && predicted < 0; ms += STEP_MS) {
        tide_risk_input_t in = {.has_ecc = true,
                                .ecc_corrected = 100000 + (uint64_t)(200.0 * ms / 60000)};
        tide_risk_verdict_t v = feed(&f, &in, ms);

        if (ms == 0)
            assert_true(v == TIDE_RISK_OK && f.score == 0); /* the total is history */
        if (v == TIDE_RISK_WATCH && watch < 0)
            watch = ms;
        if (v == TIDE_RISK_PREDICTED)
            predicted = ms;
    }
    assert_true(watch > 0 && predicted > 0);
    assert_true(predicted - watch >= f.cfg.confirm_ms);
    assert_true(predicted <= 60000);
    assert_non_null(strstr(f.why, "corrected ECC"));

    static const double rates[] = {0.5, 10};
    for (size_t i = 0; i < 2; i++) {
        rate = rates[i];
        fixture_init(&f);
        for (int64_t ms = 0; ms <= 600 * 1000; ms += STEP_MS) {
            tide_risk_input_t in = {.has_ecc = true,
                                    .ecc_corrected = 7 + (uint64_t)(rate * ms / 60000)};

            assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
        }
        if (rate < 1)
            assert_true(f.score < 0.05); /* each lone error lifts the average to about 1/min */
        else
            assert_true(fabs(f.score - 0.4) < 0.05);
    }
}

/* One new uncorrected error: PREDICTED on that very sample, score 1. Totals at startup are not
 * new; reset() forgets, so the same total after an uncordon is history again. */
static void test_uncorrected_and_reset(void **state)
{
    fixture_t f;
    tide_risk_input_t in = {.has_temperature = true,
                            .temperature_c = 65,
                            .has_ecc = true,
                            .ecc_uncorrected = 3,
                            .ecc_corrected = 50};
    int64_t ms = 0;

    (void)state;
    fixture_init(&f);
    for (; ms < 5000; ms += STEP_MS)
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    in.ecc_uncorrected = 4;
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_PREDICTED);
    assert_true(f.score == 1);
    assert_string_equal(f.why, "1 new uncorrected ECC");
    ms += STEP_MS;
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_PREDICTED); /* sticky */

    tide_risk_track_reset(&f.t);
    for (int i = 0; i < 10; i++, ms += STEP_MS) {
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
        assert_true(f.score == 0);
    }
    assert_string_equal(f.why, "none");
}

/* A new critical XID is PREDICTED at once; a new other XID adds 0.3 that fades over a minute;
 * XIDs counted before the first sample are not new. */
static void test_xids(void **state)
{
    fixture_t f;
    tide_risk_input_t in = {.has_xid = true, .xid_count = 4, .last_xid = 79};
    int64_t ms = 0;

    (void)state;
    fixture_init(&f);
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    ms += STEP_MS;
    in.xid_count = 5;
    in.last_xid = 13; /* graphics engine exception: usually the application */
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    assert_true(fabs(f.score - 0.3) < 1e-9);
    assert_string_equal(f.why, "XID 13 0 s ago");
    assert_int_equal(feed(&f, &in, ms + 30000), TIDE_RISK_OK);
    assert_true(fabs(f.score - 0.15) < 1e-9);
    assert_int_equal(feed(&f, &in, ms + 60000), TIDE_RISK_OK);
    assert_true(f.score == 0);
    ms += 61000;
    in.xid_count = 6;
    in.last_xid = 79; /* fallen off the bus */
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_PREDICTED);
    assert_true(f.score == 1);
    assert_string_equal(f.why, "critical XID 79");
}

/* Counters that go backwards (a worker or driver restart) rebase: no negative rate, nothing new;
 * counting resumes from the new base. */
static void test_counter_reset(void **state)
{
    fixture_t f;
    tide_risk_input_t in = {.has_ecc = true,
                            .ecc_corrected = 90000,
                            .ecc_uncorrected = 2,
                            .has_xid = true,
                            .xid_count = 9,
                            .last_xid = 48};
    int64_t ms = 0;

    (void)state;
    fixture_init(&f);
    for (; ms < 5000; ms += STEP_MS)
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    in.ecc_corrected = 0;
    in.ecc_uncorrected = 0;
    in.xid_count = 0;
    in.last_xid = 0;
    for (; ms < 15000; ms += STEP_MS) {
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
        assert_true(f.score == 0);
        assert_true(f.t.ecc_rate >= 0);
    }
    in.ecc_corrected = 1; /* one corrected error: a small rate, still OK */
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    assert_true(f.t.ecc_rate > 0);
    ms += STEP_MS;
    in.ecc_uncorrected = 1; /* counted from the new base */
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_PREDICTED);
}

/* Power: a drop of more than 30% at steady utilization is an anomaly (0.3), but only once the
 * baseline has 10 s of history, only with utilization known, and not when utilization moves too. */
static void test_power_anomaly(void **state)
{
    fixture_t f;
    tide_risk_input_t in = {.has_power = true, .power_w = 300, .has_util = true, .util = 0.95};
    int64_t ms = 0;

    (void)state;
    /* before priming: nothing */
    fixture_init(&f);
    for (; ms < 5000; ms += STEP_MS)
        feed(&f, &in, ms);
    in.power_w = 150;
    for (; ms < 9000; ms += STEP_MS) {
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
        assert_true(f.score == 0);
    }

    /* primed: 20 s at 300 W, then 150 W */
    fixture_init(&f);
    in.power_w = 300;
    for (ms = 0; ms < 20000; ms += STEP_MS) {
        feed(&f, &in, ms);
        assert_true(f.score == 0);
    }
    in.power_w = 150;
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    assert_true(fabs(f.score - 0.3) < 1e-9);
    assert_string_equal(f.why, "power 150 W, -50% from 300 W");

    /* the same drop with the job ending (utilization falls): not an anomaly, then or later */
    fixture_init(&f);
    in.power_w = 300;
    in.util = 0.95;
    for (ms = 0; ms < 20000; ms += STEP_MS)
        feed(&f, &in, ms);
    in.power_w = 60;
    in.util = 0;
    for (; ms < 200000; ms += STEP_MS) {
        feed(&f, &in, ms);
        assert_true(f.score == 0);
    }

    /* without utilization there is no telling: silent */
    fixture_init(&f);
    in.has_util = false;
    in.power_w = 300;
    for (ms = 0; ms < 20000; ms += STEP_MS)
        feed(&f, &in, ms);
    in.power_w = 100;
    feed(&f, &in, ms);
    assert_true(f.score == 0);
}

/* A silence longer than gap_ms restarts the trends: no slope from one sample after the gap, and
 * the confirmation starts again. */
static void test_gap(void **state)
{
    fixture_t f;
    tide_risk_input_t in = temp_only(60);
    int64_t ms = 0;

    (void)state;
    fixture_init(&f);
    for (; ms < 10000; ms += STEP_MS)
        feed(&f, &in, ms);
    in = temp_only(90);
    ms += 45000;
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
    assert_true(fabs(f.score - 0.4) < 1e-9); /* the level only: 90 C */
    assert_true(f.t.slope_avg == 0);

    /* above the threshold for 6 s, silent for 40 s, above again: WATCH, not PREDICTED */
    fixture_init(&f);
    in = temp_only(96);
    in.has_throttle = true;
    in.throttle_reasons = HW_THERMAL;
    for (ms = 0; ms <= 6000; ms += STEP_MS)
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_WATCH);
    ms += 40000;
    assert_int_equal(feed(&f, &in, ms), TIDE_RISK_WATCH);
    assert_int_equal(feed(&f, &in, ms + f.cfg.confirm_ms), TIDE_RISK_PREDICTED);
}

/* Reset forgets the trend: after a heating GPU is predicted and reset, a cool one is OK at once. */
static void test_reset_forgets_trend(void **state)
{
    fixture_t f;
    int64_t ms = 0;
    tide_risk_verdict_t v = TIDE_RISK_OK;

    (void)state;
    fixture_init(&f);
    for (; ms < 60000 && v != TIDE_RISK_PREDICTED; ms += STEP_MS) {
        tide_risk_input_t in = temp_only(60 + 120 * (double)ms / 60000);

        v = feed(&f, &in, ms);
    }
    assert_int_equal(v, TIDE_RISK_PREDICTED);
    tide_risk_track_reset(&f.t);
    tide_risk_input_t cool = temp_only(70);
    assert_int_equal(feed(&f, &cool, ms), TIDE_RISK_OK);
    assert_true(f.score == 0);
    assert_true(f.t.slope_avg == 0);
}

/* The reason names the rules largest first; unknown inputs add nothing; score and reason are
 * optional; a short buffer truncates. */
static void test_reason_and_unknowns(void **state)
{
    fixture_t f;
    tide_risk_input_t in = {0};
    char tiny[8];

    (void)state;
    fixture_init(&f);
    /* has_* false: the values are ignored */
    in.temperature_c = 120;
    in.throttle_reasons = HW_THERMAL;
    in.ecc_uncorrected = 9;
    in.power_w = 1;
    for (int64_t ms = 0; ms < 5000; ms += STEP_MS) {
        assert_int_equal(feed(&f, &in, ms), TIDE_RISK_OK);
        assert_true(f.score == 0);
    }
    in.ecc_uncorrected = 10;
    assert_int_equal(feed(&f, &in, 5000), TIDE_RISK_OK);
    assert_string_equal(f.why, "none");

    /* corrected ECC 0.8 beats hot 0.6 beats HW slowdown 0.3 */
    fixture_init(&f);
    in = (tide_risk_input_t){.has_temperature = true,
                             .temperature_c = 97,
                             .has_throttle = true,
                             .throttle_reasons = 0x48, /* HW thermal + HW slowdown */
                             .has_ecc = true};
    for (int64_t ms = 0; ms < 60000; ms += STEP_MS) {
        in.ecc_corrected = (uint64_t)(ms / 100); /* 600/min */
        feed(&f, &in, ms);
    }
    /* the reason of the predicting sample, 10 s in */
    assert_true(strncmp(f.why, "corrected ECC ", 14) == 0);
    assert_non_null(strstr(f.why, "/min; temperature 97.0 C; HW thermal slowdown, HW slowdown"));
    assert_true(tide_risk_track_update(&f.t, &f.cfg, &in, 60000, NULL, tiny, sizeof(tiny)) ==
                TIDE_RISK_PREDICTED);
    assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
    assert_true(tide_risk_track_update(&f.t, &f.cfg, &in, 60500, NULL, NULL, 0) ==
                TIDE_RISK_PREDICTED);
    assert_string_equal(tide_risk_verdict_name(TIDE_RISK_WATCH), "watch");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_steady_healthy),
        cmocka_unit_test(test_heat_then_die_vs_spike),
        cmocka_unit_test(test_spikes_never_predicted),
        cmocka_unit_test(test_slow_trends),
        cmocka_unit_test(test_confirmation_and_dip),
        cmocka_unit_test(test_ecc_rate),
        cmocka_unit_test(test_uncorrected_and_reset),
        cmocka_unit_test(test_xids),
        cmocka_unit_test(test_counter_reset),
        cmocka_unit_test(test_power_anomaly),
        cmocka_unit_test(test_gap),
        cmocka_unit_test(test_reset_forgets_trend),
        cmocka_unit_test(test_reason_and_unknowns),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

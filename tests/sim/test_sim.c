/* tide-sim: scenario validation (errors name the key path), the event queue's order, determinism
 * (one seed, identical bytes; another seed, other bytes) and sanity checks that can fail: no
 * failures, no lost work; the gate off copies at once; preemption gets a CRITICAL job onto a full
 * cluster of LOW jobs within the grace and the stop delay; a class's effective training time is its
 * kept progress over size x wall time. Each runs the real core in-process, no I/O but the scenario
 * file. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "events.h"
#include "rng.h"
#include "scenario.h"
#include "sim.h"

#define SMALL TIDE_SIM_SCENARIOS "/small.json"

typedef struct run {
    tide_scenario_t sc;
    tide_sim_t *s;
    const tide_sim_result_t *r;
    char *json, *csv;
} run_t;

/* Runs a scenario (a file when path, else text) with overrides; the JSON summary and the CSV are
 * kept. */
static void run_sets(run_t *run, const char *path, const char *text, const char *const *sets,
                     size_t n, uint64_t seed, bool seed_set)
{
    tide_error_t err = {{0}};
    tide_sim_options_t opt = {.seed = seed, .seed_set = seed_set};
    size_t jl = 0, cl = 0;
    FILE *jf, *cf;
    int rc;

    memset(run, 0, sizeof(*run));
    rc = path ? tide_scenario_load(path, sets, n, &run->sc, &err)
              : tide_scenario_parse(text, sets, n, &run->sc, &err);
    if (rc < 0)
        fail_msg("scenario: %s", err.text);
    cf = open_memstream(&run->csv, &cl);
    assert_non_null(cf);
    opt.csv = cf;
    run->s = tide_sim_new(&run->sc, &opt);
    assert_int_equal(tide_sim_run(run->s), 0);
    fclose(cf);
    run->r = tide_sim_result(run->s);
    jf = open_memstream(&run->json, &jl);
    assert_non_null(jf);
    tide_sim_print_json(run->r, &run->sc, jf);
    fclose(jf);
}

static void run_free(run_t *run)
{
    tide_sim_free(run->s);
    tide_scenario_free(&run->sc);
    free(run->json);
    free(run->csv);
}

/* --- scenario validation --- */

#define CLUSTER "\"cluster\": {\"groups\": [{\"gpus\": 64}]}"
#define CLASS(name, prio, extra)                                                                   \
    "{\"name\": \"" name "\", \"priority\": \"" prio "\", \"gpus\": 8, \"duration_h\": 1" extra "}"

static void expect_error(const char *text, const char *const *sets, size_t n, const char *want)
{
    tide_scenario_t sc;
    tide_error_t err = {{0}};

    assert_int_equal(tide_scenario_parse(text, sets, n, &sc, &err), -EINVAL);
    if (!strstr(err.text, want))
        fail_msg("error \"%s\" does not contain \"%s\"", err.text, want);
    tide_scenario_free(&sc);
}

static void test_scenario_errors_name_the_key(void **state)
{
    static const char *good = "{" CLUSTER ", \"workload\": {\"classes\": [" CLASS(
        "a", "LOW", "") ", " CLASS("b", "NORMAL", "") ", " CLASS("c", "HIGH", "") "]}}";
    const char *bad_gpus[] = {"workload.classes[2].gpus=-3"};
    const char *bad_bool[] = {"gate.enabled=maybe"};
    const char *bad_index[] = {"workload.classes[5].gpus=8"};
    const char *ok_set[] = {"gate.enabled=false",
                            "workload.classes[1].gpus={\"dist\": \"choice\", \"values\": [8, 16]}"};
    tide_scenario_t sc;
    tide_error_t err;

    (void)state;
    assert_int_equal(tide_scenario_parse(good, NULL, 0, &sc, &err), 0);
    assert_int_equal(sc.n_classes, 3);
    assert_int_equal(sc.total_gpus, 64);
    assert_true(sc.gate);
    tide_scenario_free(&sc);
    assert_int_equal(tide_scenario_parse(good, ok_set, 2, &sc, &err), 0);
    assert_false(sc.gate);
    assert_int_equal(sc.classes[1].gpus.kind, TIDE_DIST_CHOICE);
    tide_scenario_free(&sc);

    expect_error(good, bad_gpus, 1, "workload.classes[2].gpus: expected a positive integer");
    expect_error(good, bad_bool, 1, "gate.enabled: expected true or false");
    expect_error(good, bad_index, 1, "index [5]");
    expect_error("{" CLUSTER
                 ", \"workload\": {\"classes\": [" CLASS("a", "LOW", ", \"gpuz\": 3") "]}}",
                 NULL, 0, "workload.classes[0].gpuz: unknown key");
    expect_error("{\n  \"days\": 2,\n  oops\n}", NULL, 0, "line 3");
    expect_error(
        "{\"cluster\": {\"groups\": [{\"gpus\": 12}]}, \"workload\": {\"classes\": [" CLASS(
            "a", "LOW", "") "]}}",
        NULL, 0, "cluster.groups[0].gpus: 12 is not a whole number of nodes");
    expect_error("{" CLUSTER "}", NULL, 0, "workload: required");
    expect_error("{" CLUSTER ", \"workload\": {\"classes\": [" CLASS("a", "URGENT", "") "]}}", NULL,
                 0, "workload.classes[0].priority");
    expect_error("{" CLUSTER
                 ", \"workload\": {\"classes\": [" CLASS("a", "LOW", ", \"base_load\": 1.5") "]}}",
                 NULL, 0, "workload.classes[0].base_load");
    expect_error("{" CLUSTER ", \"workload\": {\"classes\": [" CLASS(
                     "a", "LOW", ", \"checkpoint\": {\"every\": 3}") "]}}",
                 NULL, 0, "workload.classes[0].checkpoint.every: unknown key");
    expect_error("{" CLUSTER
                 ", \"faults\": {\"per_gpu_hour\": 1e-5, \"per_1000_gpu_month\": 3}, \"workload\": "
                 "{\"classes\": [" CLASS("a", "LOW", "") "]}}",
                 NULL, 0, "faults: give one of");
    expect_error("{" CLUSTER
                 ", \"pools\": [{\"name\": \"crit\", \"dedicated\": \"CRITICAL\"}], \"workload\": "
                 "{\"classes\": [" CLASS("a", "LOW", ", \"pool\": \"crit\"") "]}}",
                 NULL, 0, "workload.classes[0].pool: no cluster group carries pool \"crit\"");
    expect_error(
        "{" CLUSTER
        ", \"workload\": {\"classes\": [{\"name\": \"a\", \"priority\": \"LOW\", \"gpus\": "
        "{\"dist\": \"choice\", \"values\": [8, 2.5]}, \"duration_h\": 1}]}}",
        NULL, 0, "workload.classes[0].gpus.values[1]: expected a positive integer");
}

/* --- the event queue and the random streams --- */

static void test_event_order(void **state)
{
    tide_evq_t q;
    tide_rng_t r;
    tide_ev_t ev;
    int64_t last_t = -1;
    uint64_t last_seq = 0;

    (void)state;
    tide_evq_init(&q);
    tide_rng_seed(&r, 7, 0);
    for (int i = 0; i < 5000; i++) {
        tide_ev_t e = {.time = (int64_t)tide_rng_below(&r, 50), .a = (uint32_t)i};
        tide_evq_push(&q, &e);
    }
    for (int i = 0; i < 5000; i++) {
        assert_true(tide_evq_pop(&q, &ev));
        /* (time, seq) ascending: equal times come out in the order they were pushed */
        assert_true(ev.time > last_t || (ev.time == last_t && ev.seq > last_seq));
        assert_int_equal(ev.seq, ev.a);
        last_t = ev.time;
        last_seq = ev.seq;
    }
    assert_false(tide_evq_pop(&q, &ev));
    assert_true(tide_evq_peek_time(&q) == INT64_MAX);
    tide_evq_free(&q);
}

static void test_rng_streams(void **state)
{
    tide_rng_t a, b, c;
    double sum = 0;

    (void)state;
    tide_rng_seed(&a, 42, 3);
    tide_rng_seed(&b, 42, 3);
    tide_rng_seed(&c, 42, 4);
    for (int i = 0; i < 100; i++) {
        uint64_t x = tide_rng_next(&a);
        assert_true(x == tide_rng_next(&b));
        assert_true(x != tide_rng_next(&c));
    }
    for (int i = 0; i < 100000; i++)
        sum += tide_rng_exp(&a, 2.0);
    assert_true(sum / 100000 > 1.95 && sum / 100000 < 2.05);
    for (int i = 0; i < 1000; i++)
        assert_true(tide_rng_below(&a, 7) < 7);
}

/* --- whole runs --- */

static void test_same_seed_same_bytes(void **state)
{
    run_t a, b, c;

    (void)state;
    run_sets(&a, SMALL, NULL, NULL, 0, 0, false);
    run_sets(&b, SMALL, NULL, NULL, 0, 0, false);
    run_sets(&c, SMALL, NULL, NULL, 0, 2, true);
    assert_string_equal(a.json, b.json);
    assert_string_equal(a.csv, b.csv);
    assert_true(strlen(a.csv) > 1000);
    assert_true(strcmp(a.json, c.json) != 0);
    assert_true(strcmp(a.csv, c.csv) != 0);
    /* It did something: jobs of every class finished, the gate held copies, the cluster was used.
     */
    for (size_t i = 0; i < a.r->n_classes; i++)
        assert_true(a.r->classes[i].finished > 0);
    assert_true(a.r->goodput > 0.3 && a.r->goodput <= 1.0);
    assert_true(a.r->retained_gpu_h <= a.r->cluster_gpu_h);
    assert_true(a.r->mfu_mean > 0.1 && a.r->mfu_mean < 1.0);
    assert_true(a.r->checkpoints > 0 && a.r->copies > 0);
    run_free(&a);
    run_free(&b);
    run_free(&c);
}

static void test_no_failures_no_lost_work(void **state)
{
    const char *off[] = {"faults.per_1000_gpu_month=0"};
    const char *many[] = {"faults.per_1000_gpu_month=2000"};
    run_t a, b;

    (void)state;
    run_sets(&a, SMALL, NULL, off, 1, 0, false);
    assert_int_equal(a.r->failures, 0);
    assert_int_equal(a.r->requeues, 0);
    assert_true(a.r->lost_gpu_h == 0.0);
    assert_true(a.r->preemptions >
                0); /* preempted jobs checkpoint first: they lose nothing either */
    /* The same workload with failures does lose work: the check above can fail. */
    run_sets(&b, SMALL, NULL, many, 1, 0, false);
    assert_true(b.r->failures_busy > 0);
    assert_true(b.r->lost_failure_gpu_h > 0);
    assert_true(b.r->durable_age_mean_s > 0);
    run_free(&a);
    run_free(&b);
}

static void test_what_survives_a_failure(void **state)
{
    /* A long staleness deadline keeps durable copies well behind the local checkpoints. */
    const char *plain[] = {"faults.per_1000_gpu_month=2000", "gate.deadline_min=240",
                           "storage.mirrored_hot_tier=false"};
    const char *mirrored[] = {"faults.per_1000_gpu_month=2000", "gate.deadline_min=240",
                              "storage.mirrored_hot_tier=true"};
    const char *no_durable[] = {"faults.per_1000_gpu_month=2000", "gate.deadline_min=240",
                                "storage.durable=false"};
    run_t a, b, c;

    (void)state;
    run_sets(&a, SMALL, NULL, plain, 3, 0, false);
    run_sets(&b, SMALL, NULL, mirrored, 3, 0, false);
    run_sets(&c, SMALL, NULL, no_durable, 3, 0, false);
    /* A mirrored hot tier keeps the newest local checkpoint: failures lose less than with the
     * durable copy alone, and without durable copies (nothing survives) they lose the most. */
    assert_true(a.r->failures_busy > 3);
    assert_true(b.r->lost_failure_gpu_h < a.r->lost_failure_gpu_h);
    assert_true(c.r->lost_failure_gpu_h > a.r->lost_failure_gpu_h);
    assert_int_equal(c.r->copies, 0);
    assert_true(c.r->durable_bytes == 0.0);
    run_free(&a);
    run_free(&b);
    run_free(&c);
}

static void test_gate_off_copies_at_once(void **state)
{
    const char *off[] = {"gate.enabled=false", "policy.preemption=false",
                         "faults.per_1000_gpu_month=0"};
    const char *on[] = {"gate.enabled=true", "policy.preemption=false",
                        "faults.per_1000_gpu_month=0"};
    run_t a, b;

    (void)state;
    run_sets(&a, SMALL, NULL, off, 3, 0, false);
    assert_true(a.r->copies > 100);
    assert_int_equal(a.r->copies_held, 0);
    assert_true(a.r->copy_wait_max_s == 0.0);
    /* With the gate the same copies wait while the jobs' MFU is above the threshold. */
    run_sets(&b, SMALL, NULL, on, 3, 0, false);
    assert_true(b.r->copies_held > 100);
    assert_true(b.r->copy_wait_mean_s > 60);
    assert_true(b.r->copy_wait_max_s <= 30 * 60 + 60); /* the deadline, plus one gate check */
    assert_true(b.r->copies < a.r->copies);
    run_free(&a);
    run_free(&b);
}

static const char *preempt_scenario =
    "{\"name\": \"preempt\", \"days\": 0.25, " CLUSTER ", \"faults\": {\"per_gpu_hour\": 0},"
    " \"timing\": {\"start_delay_s\": 20, \"stop_delay_s\": 5}, \"policy\": {\"preempt_grace_s\": "
    "30},"
    " \"workload\": {\"classes\": ["
    "  {\"name\": \"low\", \"priority\": \"LOW\", \"initial\": 8, \"gpus\": 8, \"duration_h\": 100,"
    "   \"checkpoint\": {\"every_min\": 30, \"write_s\": 10}},"
    "  {\"name\": \"crit\", \"priority\": \"CRITICAL\", \"at_h\": [1.0], \"gpus\": 16, "
    "\"duration_h\": 1}]}}";

static void test_critical_preempts_low(void **state)
{
    const char *off[] = {"policy.preemption=false"};
    run_t a, b;

    (void)state;
    run_sets(&a, NULL, preempt_scenario, NULL, 0, 0, false);
    /* The cluster was full of LOW jobs; two of them checkpoint (10 s), stop (5 s), and the CRITICAL
     * job is placed: within the grace (30 s) and the stop delay. */
    assert_int_equal(a.r->classes[1].started, 1);
    assert_true(a.r->classes[1].delay_max_s > 0);
    assert_true(a.r->classes[1].delay_max_s <= 30 + 5);
    assert_int_equal(a.r->classes[0].preemptions, 2);
    assert_true(a.r->lost_preempt_gpu_h == 0.0); /* they checkpointed first */
    assert_int_equal(a.r->classes[1].finished, 1);
    /* Without preemption it waits for LOW jobs that run for days. */
    run_sets(&b, NULL, preempt_scenario, off, 1, 0, false);
    assert_int_equal(b.r->classes[1].started, 0);
    assert_int_equal(b.r->classes[1].waiting_at_end, 1);
    run_free(&a);
    run_free(&b);
}

/* Effective training time: one 8-GPU job that outlasts a 2-day run on a 64-GPU cluster, alone; no
 * durable copies (no copy interference), the local checkpoint survives failures; the trainer's own
 * checkpoints only (tide's cadence off). */
static const char ett_scenario[] =
    "{\"days\": 2, \"cluster\": {\"groups\": [{\"gpus\": 64}]}, \"policy\": {\"checkpoint_interval_min\": 0}, "
    "\"faults\": {\"per_1000_gpu_month\": 0}, \"timing\": {\"start_delay_s\": 60}, "
    "\"storage\": {\"durable\": false, \"mirrored_hot_tier\": true}, "
    "\"workload\": {\"classes\": ["
    "  {\"name\": \"long\", \"priority\": \"CRITICAL\", \"initial\": 1, \"gpus\": 8, "
    "\"duration_h\": 1000, \"checkpoint\": {\"every_min\": 0}}]}}";

static void test_effective_training_time(void **state)
{
    const char *saves[] = {"workload.classes[0].checkpoint={\"every_min\": 30, \"write_s\": 18}"};
    const char *fails[] = {"workload.classes[0].checkpoint={\"every_min\": 30, \"write_s\": 18}",
                           "faults.per_1000_gpu_month=20000"};
    const char *cadence[] = {"workload.classes[0].checkpoint={\"every_min\": 30, \"write_s\": 18}",
                             "policy.checkpoint_interval_min=10"};
    double wall_s = 2 * 86400.0, a_ett, b_ett, c_ett, d_ett;
    run_t a, b, c, d;

    (void)state;
    /* Nothing but its start (two start delays: rank 0, then the others): 120 s of 2 days. */
    run_sets(&a, NULL, ett_scenario, NULL, 0, 0, false);
    a_ett = a.r->classes[0].effective_training_time;
    assert_true(fabs(a_ett - (1 - 120 / wall_s)) < 1e-4);
    /* A local save of 18 s after each 30 minutes of training: 18 / 1818 s less. */
    run_sets(&b, NULL, ett_scenario, saves, 1, 0, false);
    b_ett = b.r->classes[0].effective_training_time;
    assert_true(fabs((a_ett - b_ett) - 18 / 1818.0) < 1e-3);
    /* Failures cost restarts and the work since the newest surviving checkpoint; the share is the
     * kept progress over the job's size x the whole run. */
    run_sets(&c, NULL, ett_scenario, fails, 2, 0, false);
    c_ett = c.r->classes[0].effective_training_time;
    assert_true(c.r->classes[0].requeues > 0);
    assert_true(c_ett < b_ett - 0.005 && c_ett > 0.1);
    assert_true(fabs(c_ett - c.r->classes[0].retained_gpu_h / (8 * wall_s / 3600)) < 1e-9);
    assert_non_null(strstr(c.json, "\"effective_training_time\": "));
    /* tide's cadence asks for a checkpoint 10 minutes after the newest: a save per 10 minutes of
     * training, 18 / 618 s less than without any. */
    run_sets(&d, NULL, ett_scenario, cadence, 2, 0, false);
    d_ett = d.r->classes[0].effective_training_time;
    print_message("ETT %.6f no saves, %.6f every 30 min, %.6f with the cadence (%.6f less)\n", a_ett, b_ett, d_ett,
                  a_ett - d_ett);
    assert_true(fabs((a_ett - d_ett) - 18 / 618.0) < 2e-3);
    run_free(&a);
    run_free(&b);
    run_free(&c);
    run_free(&d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scenario_errors_name_the_key),
        cmocka_unit_test(test_event_order),
        cmocka_unit_test(test_rng_streams),
        cmocka_unit_test(test_same_seed_same_bytes),
        cmocka_unit_test(test_no_failures_no_lost_work),
        cmocka_unit_test(test_what_survives_a_failure),
        cmocka_unit_test(test_gate_off_copies_at_once),
        cmocka_unit_test(test_critical_preempts_low),
        cmocka_unit_test(test_effective_training_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Burst by resize in the scheduler core (docs/elastic.md, "Burst"): a job with burst on whose ranks
 * declared no detached tasks but checkpoint through the SDK grows by a generation (reason burst) for a
 * high-load phase predicted to outlast cost x (n + k) / k, and goes back to its size after (reason
 * burst_end); never without the SDK, beyond max_workers, for a short phase, or on a stale report; a
 * ScaleJob to a new size ends it; a job that ends while grown leaves nothing behind. Invariants are
 * checked after each step. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("\"%s\" does not contain \"%s\"", s ? s : "(null)", part);
}

/* Short hysteresis, a known resize cost, no auto-grow (the burst is the only thing that resizes). */
static tide_core_config_t config(int64_t resize_cost_ms)
{
    tide_core_config_t cfg;
    h_config(&cfg);
    cfg.auto_grow = false;
    cfg.burst_enter_ms = 100;
    cfg.burst_exit_ms = 100;
    cfg.burst_min_dwell_ms = 1000;
    cfg.burst_resize_cost_ms = resize_cost_ms;
    return cfg;
}

/* A running min..max job with burst_percent pct on `expect` workers; sdk: its ranks report through the
 * SDK. */
static tide_job_t *run(h_t *h, int min, int max, int pct, bool sdk, int expect)
{
    tide_job_spec_t spec = h_spec(min, max, TIDE_PRIO_NORMAL);
    tide_job_t *job;

    spec.burst_percent = pct;
    job = h_submit_spec(h, &spec);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->n_ranks, expect);
    h_start_all(h);
    if (sdk)
        h_sdk(h, job, 0.4);
    h_clear(h);
    h_check_invariants(h);
    return job;
}

/* One high phase of ms, then a normal one of 5 s: the controller learns the length. */
static void teach(h_t *h, tide_job_t *job, int64_t ms)
{
    tide_core_job_load_phase(h->core, job, true);
    h_jump(h, ms);
    tide_core_job_load_phase(h->core, job, false);
    h_jump(h, 5000);
    h_check_invariants(h);
}

/* Carries a resize of job through: checkpoint, stop, start. */
static void resize_through(h_t *h, tide_job_t *job, int64_t step)
{
    assert_int_equal(job->resize.state, TIDE_RESIZE_CHECKPOINTING);
    h_clear(h);
    h_jump(h, 200);
    h_ckpt(h, job, step);
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    h_jump(h, 200);
    h_stop_all(h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_start_keep(h);
    h_sdk(h, job, 0.4);
    h_check_invariants(h);
}

static void test_grows_for_the_phase_and_back(void **state)
{
    tide_core_config_t cfg = config(500);
    tide_burst_stats_t st;
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 1, 4, 50, true, 4);
    /* 4 ranks at max: no room to grow (max_workers bounds a burst by resize). */
    teach(&h, job, 10000);
    tide_core_job_load_phase(h.core, job, true);
    h_jump(&h, 300);
    assert_int_equal(job->resize.state, TIDE_RESIZE_NONE);
    assert_int_equal(job->burst_to, 0);
    tide_core_job_load_phase(h.core, job, false);
    h_fini(&h);

    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    {
        tide_job_spec_t spec = h_spec(2, 4, TIDE_PRIO_NORMAL);
        spec.burst_percent = 50;
        job = h_submit_spec(&h, &spec);
        /* placement gives it all 4: pin it at 2 first */
    }
    h_start_all(&h);
    h_sdk(&h, job, 0.4);
    h_clear(&h);
    {
        tide_job_t *out;
        tide_error_t err;
        assert_int_equal(tide_core_job_scale(h.core, job->id, 2, false, &out, &err), 0);
    }
    resize_through(&h, job, 5);
    assert_int_equal(job->n_ranks, 2);
    h_clear(&h);

    /* The first high phase only teaches. */
    tide_core_job_load_phase(h.core, job, true);
    h_jump(&h, 300);
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 0);
    h_jump(&h, 9700);
    tide_core_job_load_phase(h.core, job, false);
    h_jump(&h, 5000);
    h_clear(&h);

    /* The second: after enter_ms its predicted rest (~9.9 s) is over 2 x 0.5 s x (2 + 1) / 1 = 3 s. */
    tide_core_job_load_phase(h.core, job, true);
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 0);
    h_jump(&h, 150);
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 1);
    assert_contains(h_event_text(&h, "job.burst_lent", 0), "grows by 1 worker(s)");
    assert_int_equal(job->burst_from, 2);
    assert_int_equal(job->burst_to, 3);
    assert_int_equal(job->resize.reason, TIDE_RESIZE_BURST);
    assert_int_equal(job->resize.to_workers, 3);
    assert_int_equal(job->bursts, 1);
    resize_through(&h, job, 20);
    assert_int_equal(job->n_ranks, 3);
    assert_int_equal(job->last_resize.reason, TIDE_RESIZE_BURST);
    assert_int_equal(job->target_workers, 2); /* the request is untouched */
    h_clear(&h);

    /* The new generation's rank 0 has said nothing yet: nothing is decided on the old report. */
    h_jump(&h, 2000);
    assert_int_equal(job->resize.state, TIDE_RESIZE_NONE);
    assert_int_equal(job->n_ranks, 3);
    /* Its report ends the phase: back to 2 after exit_ms (the dwell passed meanwhile). */
    tide_core_job_load_phase(h.core, job, false);
    h_jump(&h, 50);
    assert_int_equal(job->resize.state, TIDE_RESIZE_NONE);
    h_jump(&h, 100);
    assert_int_equal(h_count_event(&h, "job.burst_reclaimed"), 1);
    assert_int_equal(job->resize.reason, TIDE_RESIZE_BURST_END);
    assert_int_equal(job->resize.to_workers, 2);
    assert_int_equal(job->burst_to, 0);
    resize_through(&h, job, 30);
    assert_int_equal(job->n_ranks, 2);
    assert_int_equal(job->last_resize.reason, TIDE_RESIZE_BURST_END);
    tide_core_burst_stats(h.core, &st);
    assert_int_equal(st.bursts, 1);
    assert_int_equal(st.lent_total, 1);
    assert_int_equal(st.reclaims, 1);
    assert_int_equal(st.lent_now, 0);
    {
        uint64_t n[TIDE_RESIZE_REASONS];
        double sec[TIDE_RESIZE_REASONS];
        tide_core_resize_stats(h.core, n, sec);
        assert_int_equal(n[TIDE_RESIZE_BURST], 1);
        assert_int_equal(n[TIDE_RESIZE_BURST_END], 1);
    }
    /* Pinned at 2 and no longer bursting: it stays at 2. */
    h_clear(&h);
    h_jump(&h, 120000);
    assert_int_equal(job->n_ranks, 2);
    assert_int_equal(h_count_event(&h, "job.resizing"), 0);
    h_check_invariants(&h);
    h_fini(&h);
}

/* Pinned at 2 on 4 GPUs, after one taught phase of phase_ms; returns the job. */
static tide_job_t *pinned(h_t *h, bool sdk, int64_t phase_ms)
{
    tide_job_spec_t spec = h_spec(2, 4, TIDE_PRIO_NORMAL);
    tide_job_t *job, *out;
    tide_error_t err;

    h_node(h, "n1", 4, NULL, 0, NULL);
    spec.burst_percent = 50;
    job = h_submit_spec(h, &spec);
    h_start_all(h);
    if (sdk)
        h_sdk(h, job, 0.4);
    h_clear(h);
    assert_int_equal(tide_core_job_scale(h->core, job->id, 2, false, &out, &err), 0);
    if (sdk) {
        resize_through(h, job, 5);
    } else {
        h_jump(h, 100);
        h_stop_all(h);
        h_start_all(h);
    }
    assert_int_equal(job->n_ranks, 2);
    h_clear(h);
    teach(h, job, phase_ms);
    h_clear(h);
    return job;
}

/* A phase predicted shorter than 2 x cost x (n + k) / k is not worth a resize; the cost is the job's own
 * measured resize (the pin's: 0.4 s on the fake clock) once it has one, not the configured guess. */
static void test_short_phase_against_the_cost(void **state)
{
    tide_core_config_t cfg = config(600000);
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    job = pinned(&h, true, 2000); /* learned: 2 s phases */
    assert_true(job->last_resize.total_s > 0.39 && job->last_resize.total_s < 0.41);
    /* 2 x 0.4 s x (2 + 1) / 1 = 2.4 s > the ~1.9 s predicted rest: no resize. */
    tide_core_job_load_phase(h.core, job, true);
    h_jump(&h, 1500);
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 0);
    assert_int_equal(job->resize.state, TIDE_RESIZE_NONE);
    tide_core_job_load_phase(h.core, job, false);
    h_jump(&h, 5000);
    /* A long phase raises the prediction (EWMA 0.3): 0.3 x 20 s + 0.7 x 1.85 s = 7.3 s. */
    tide_core_job_load_phase(h.core, job, true);
    h_jump(&h, 20000);
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 0); /* it was not predicted long */
    tide_core_job_load_phase(h.core, job, false);
    h_jump(&h, 5000);
    h_clear(&h);
    tide_core_job_load_phase(h.core, job, true);
    h_jump(&h, 150);
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 1);
    assert_int_equal(job->resize.reason, TIDE_RESIZE_BURST);
    h_check_invariants(&h);
    h_fini(&h);
}

/* No SDK: a resize would lose its progress; never. */
static void test_never_without_the_sdk(void **state)
{
    tide_core_config_t cfg = config(100);
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    job = pinned(&h, false, 10000);
    tide_core_job_load_phase(h.core, job, true);
    h_jump(&h, 3000);
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 0);
    assert_int_equal(job->resize.state, TIDE_RESIZE_NONE);
    assert_int_equal(job->n_ranks, 2);
    h_fini(&h);
}

/* A new size asked for ends the burst: that size is the goal. */
static void test_scale_ends_the_burst(void **state)
{
    tide_core_config_t cfg = config(100);
    h_t h;
    tide_job_t *job, *out;
    tide_error_t err;
    (void)state;

    h_init(&h, &cfg);
    job = pinned(&h, true, 10000);
    tide_core_job_load_phase(h.core, job, true);
    h_jump(&h, 150);
    assert_int_equal(job->burst_to, 3);
    resize_through(&h, job, 20);
    assert_int_equal(job->n_ranks, 3);
    h_clear(&h);
    /* The same size again changes nothing. */
    assert_int_equal(tide_core_job_scale(h.core, job->id, 2, false, &out, &err), 0);
    assert_int_equal(job->burst_to, 3);
    /* A new one: the burst is over, 4 is the goal. */
    assert_int_equal(tide_core_job_scale(h.core, job->id, 4, false, &out, &err), 0);
    assert_int_equal(job->burst_to, 0);
    assert_int_equal(job->resize.to_workers, 4);
    assert_int_equal(job->resize.reason, TIDE_RESIZE_REQUESTED);
    resize_through(&h, job, 30);
    assert_int_equal(job->n_ranks, 4);
    /* The phase's end later shrinks nothing. */
    h_clear(&h);
    tide_core_job_load_phase(h.core, job, false);
    h_jump(&h, 3000);
    assert_int_equal(job->n_ranks, 4);
    assert_int_equal(h_count_event(&h, "job.resizing"), 0);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A job cancelled while grown leaves nothing on the lending list: later passes with a blocked shape
 * after it was dropped touch nothing freed (ASan). */
static void test_job_end_while_grown(void **state)
{
    tide_core_config_t cfg = config(100);
    h_t h;
    tide_job_t *job, *out, *full, *wait;
    tide_error_t err;
    tide_burst_stats_t st;
    char job_id[32];
    (void)state;

    cfg.retention_ms = 1000;
    h_init(&h, &cfg);
    job = pinned(&h, true, 10000);
    tide_core_job_load_phase(h.core, job, true);
    h_jump(&h, 150);
    resize_through(&h, job, 20);
    assert_int_equal(job->n_ranks, 3);
    snprintf(job_id, sizeof(job_id), "%s", job->id);
    assert_int_equal(tide_core_job_cancel(h.core, job->id, &out, &err), 0);
    h_stop_all(&h);
    h_jump(&h, 5000); /* pruned */
    assert_null(tide_core_job_find(h.core, job_id));
    h_clear(&h);
    /* A job that takes every GPU, then one that waits: passes with a blocked shape walk the lending
     * list. */
    full = h_submit(&h, 4, 4, TIDE_PRIO_NORMAL);
    assert_int_equal(full->state, TIDE_JOB_RUNNING);
    h_start_all(&h);
    wait = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    assert_int_equal(wait->state, TIDE_JOB_PENDING);
    h_jump(&h, 1000);
    tide_core_burst_stats(h.core, &st);
    assert_int_equal(st.lent_now, 0);
    h_check_invariants(&h);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_for_the_phase_and_back),
        cmocka_unit_test(test_short_phase_against_the_cost),
        cmocka_unit_test(test_never_without_the_sdk),
        cmocka_unit_test(test_scale_ends_the_burst),
        cmocka_unit_test(test_job_end_while_grown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

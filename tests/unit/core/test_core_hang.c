/* Hang detection in the scheduler core (docs/fault-tolerance.md, "Hangs"): nothing before a rank's first
 * step report; a rank whose step stops moving for max(10 x the median step time, the minimum) is hung —
 * not a moment before — and its generation is queued again (event job.hung, resumes from the newest
 * checkpoint); a rank that says it is checkpointing is not judged; more hangs in a row than max_restarts fail
 * the job; hang_min_ms 0 turns it off. Invariants are checked after each step. */
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("\"%s\" does not contain \"%s\"", s ? s : "(null)", part);
}

static tide_core_config_t config(int64_t min_ms, int32_t restarts)
{
    tide_core_config_t cfg;
    tide_core_config_default(&cfg);
    cfg.hang_min_ms = min_ms;
    cfg.max_restarts = restarts;
    return cfg;
}

/* Rank r of job reports step (through the SDK) with step_s seconds per step, phase (0: none). */
static void report(h_t *h, tide_job_t *job, int32_t r, int64_t step, double step_s, int32_t phase)
{
    tide_trainer_progress_t p = {.sdk = true, .step = step, .step_seconds = step_s, .phase = phase};
    tide_core_rank_progress(h->core, job->ranks[r].worker, job->id, job->generation, r, &p);
}

static tide_job_t *run2(h_t *h)
{
    tide_job_t *job;

    h_node(h, "n1", 2, NULL, 0, NULL);
    job = h_submit(h, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(h);
    h_clear(h);
    return job;
}

/* Both ranks step every second up to `until` ms from now, except rank `frozen` after its step `at`. */
static void steps(h_t *h, tide_job_t *job, int64_t *step, int64_t ms, int32_t frozen, int64_t at)
{
    for (int64_t t = 0; t < ms; t += 1000) {
        (*step)++;
        for (int32_t r = 0; r < job->n_ranks; r++)
            if (r != frozen || *step <= at)
                report(h, job, r, *step, 1.0, 0);
        h_jump(h, 1000);
    }
}

static void test_not_before_the_first_report(void **state)
{
    tide_core_config_t cfg = config(30000, 3);
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    job = run2(&h);
    h_jump(&h, 300000); /* no SDK: never judged */
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 1);
    assert_int_equal(job->hang_check_at, 0);
    assert_int_equal(h_count_event(&h, "job.hung"), 0);
    h_fini(&h);
}

static void test_frozen_rank_is_hung_after_the_minimum(void **state)
{
    tide_core_config_t cfg = config(30000, 3);
    h_t h;
    tide_job_t *job;
    int64_t step = 0;
    (void)state;

    h_init(&h, &cfg);
    job = run2(&h);
    steps(&h, job, &step, 10000, -1, 0);
    h_ckpt(&h, job, 8);
    /* Rank 1 freezes after step 10; 10 x the 1 s median is below the 30 s minimum. */
    steps(&h, job, &step, 29000, 1, 10);
    assert_int_equal(h_count_event(&h, "job.hung"), 0);
    assert_int_equal(job->generation, 1);
    steps(&h, job, &step, 6000, 1, 10);
    assert_int_equal(h_count_event(&h, "job.hung"), 1);
    assert_contains(h_event_text(&h, "job.hung", 0), "rank 1 on n1/gpu1 made no progress for");
    assert_contains(h_event_text(&h, "job.hung", 0), "(step 10; limit 30.0 s");
    assert_int_equal(job->hangs, 1);
    assert_true(job->recovering || job->state == TIDE_JOB_RUNNING);
    assert_contains(h_event_text(&h, "job.requeued", 0), "resumes from checkpoint step 8");
    /* Its ranks are stopped; the new generation starts on the freed workers. */
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    h_start_all(&h);
    assert_int_equal(job->hang_check_at, 0); /* a new generation: nothing reported yet */
    h_check_invariants(&h);
    h_fini(&h);
}

/* The hang is found when the limit passes, not at the next periodic look (every 5 s here). */
static void test_found_when_the_limit_passes(void **state)
{
    tide_core_config_t cfg = config(30000, 3);
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    job = run2(&h);
    report(&h, job, 0, 1, 1.0, 0);
    report(&h, job, 1, 1, 1.0, 0);
    for (int i = 0; i < 30; i++)
        h_jump(&h, 1000); /* the core's timer runs at each second */
    assert_int_equal(h_count_event(&h, "job.hung"), 0); /* quiet for exactly the limit */
    h_jump(&h, 1);
    assert_int_equal(h_count_event(&h, "job.hung"), 1);
    assert_contains(h_event_text(&h, "job.hung", 0), "made no progress for 30.0 s");
    h_fini(&h);
}

/* Slow steps: the limit is 10 x the median step time when that is above the minimum. */
static void test_limit_follows_the_step_time(void **state)
{
    tide_core_config_t cfg = config(30000, 3);
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    job = run2(&h);
    report(&h, job, 0, 1, 5.0, 0);
    report(&h, job, 1, 1, 5.0, 0);
    h_jump(&h, 45000); /* limit 50 s */
    assert_int_equal(h_count_event(&h, "job.hung"), 0);
    h_jump(&h, 10000);
    assert_int_equal(h_count_event(&h, "job.hung"), 1);
    assert_contains(h_event_text(&h, "job.hung", 0), "limit 50.0 s");
    h_fini(&h);
}

/* A rank that says it is checkpointing is not judged; back to work, it is again. */
static void test_checkpoint_phase_is_not_a_hang(void **state)
{
    tide_core_config_t cfg = config(30000, 3);
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    job = run2(&h);
    report(&h, job, 0, 1, 1.0, 5 /* CHECKPOINT */);
    report(&h, job, 1, 1, 1.0, 5);
    h_jump(&h, 60000);
    assert_int_equal(h_count_event(&h, "job.hung"), 0);
    report(&h, job, 0, 1, 1.0, 1 /* FORWARD */);
    h_jump(&h, 40000);
    assert_int_equal(h_count_event(&h, "job.hung"), 1);
    assert_contains(h_event_text(&h, "job.hung", 0), "rank 0");
    h_fini(&h);
}

static void test_too_many_hangs_fail_the_job(void **state)
{
    tide_core_config_t cfg = config(2000, 1);
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    job = run2(&h);
    for (int i = 0; i < 2; i++) {
        report(&h, job, 0, 1, 0.1, 0);
        report(&h, job, 1, 1, 0.1, 0);
        h_jump(&h, 3000);
        assert_int_equal(job->hangs, i + 1);
        if (i == 0) {
            h_stop_all(&h);
            h_start_all(&h);
            assert_int_equal(job->state, TIDE_JOB_RUNNING);
        }
    }
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_contains(job->message, "hung (no progress for");
    assert_contains(job->message, "restarted 1 time(s) in a row, the most allowed (max_restarts 1)");
    h_fini(&h);
}

static void test_off(void **state)
{
    tide_core_config_t cfg = config(0, 3);
    h_t h;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    job = run2(&h);
    report(&h, job, 0, 1, 1.0, 0);
    report(&h, job, 1, 1, 1.0, 0);
    h_jump(&h, 600000);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(h_count_event(&h, "job.hung"), 0);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_before_the_first_report),
        cmocka_unit_test(test_frozen_rank_is_hung_after_the_minimum),
        cmocka_unit_test(test_found_when_the_limit_passes),
        cmocka_unit_test(test_limit_follows_the_step_time),
        cmocka_unit_test(test_checkpoint_phase_is_not_a_hang),
        cmocka_unit_test(test_too_many_hangs_fail_the_job),
        cmocka_unit_test(test_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

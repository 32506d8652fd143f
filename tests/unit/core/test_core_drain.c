/* Drain in the scheduler core (docs/elastic.md, "Drain"): an unknown worker is -ENOENT and changes
 * nothing; an idle one is only cordoned; a running job's worker is replaced at a new generation of the
 * same size (checkpoint first), or the job shrinks within min_workers, or waits queued; a job still
 * starting is queued again at once; the drained worker stays cordoned and gets nothing new. Invariants
 * are checked after each step. */
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

static bool runs_on(const tide_job_t *job, const char *id)
{
    for (int32_t r = 0; r < job->n_ranks; r++)
        if (job->ranks[r].worker && strcmp(job->ranks[r].worker->id, id) == 0)
            return true;
    return false;
}

static int drain(h_t *h, const char *id, tide_worker_t **w)
{
    tide_error_t err;
    tide_worker_t *out = NULL;
    int rc = tide_core_worker_drain(h->core, id, "maintenance", &out, &err);

    if (w)
        *w = out;
    if (rc == -ENOENT)
        assert_contains(err.text, id);
    return rc;
}

/* A running SDK job of min..max on the first `n` of `gpus` workers of n1. */
static tide_job_t *run(h_t *h, int gpus, int min, int max)
{
    tide_job_t *job;

    h_node(h, "n1", gpus, NULL, 0, NULL);
    job = h_submit(h, min, max, TIDE_PRIO_NORMAL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_start_all(h);
    h_sdk(h, job, 0.4);
    h_clear(h);
    return job;
}

/* Checkpoint, stop, start of the drain's resize. */
static void carry_out(h_t *h, tide_job_t *job)
{
    assert_int_equal(job->resize.state, TIDE_RESIZE_CHECKPOINTING);
    assert_int_equal(job->resize.reason, TIDE_RESIZE_DRAIN);
    h_clear(h);
    h_jump(h, 300);
    h_ckpt(h, job, 42);
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_contains(job->message, "resumes from checkpoint step 42");
    h_jump(h, 200);
    h_stop_all(h);
    h_check_invariants(h);
}

static void test_unknown_and_idle(void **state)
{
    h_t h;
    tide_worker_t *w;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    assert_int_equal(drain(&h, "nope/gpu9", &w), -ENOENT);
    assert_int_equal(h_count_event(&h, "worker.cordoned"), 0);
    assert_int_equal(drain(&h, "n1/gpu1", &w), 0);
    assert_true(w->cordoned);
    assert_contains(h_event_text(&h, "worker.drained", 0), "runs no rank");
    /* Nothing new lands on it. */
    h_clear(&h);
    {
        tide_job_t *job = h_submit(&h, 1, 2, TIDE_PRIO_NORMAL);
        assert_int_equal(job->n_ranks, 1);
        assert_false(runs_on(job, "n1/gpu1"));
    }
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_replaced_by_a_spare(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w;
    (void)state;

    h_init(&h, NULL);
    job = run(&h, 3, 2, 2); /* 2 ranks, one spare */
    assert_true(runs_on(job, "n1/gpu1"));
    assert_int_equal(drain(&h, "n1/gpu1", &w), 0);
    assert_true(w->cordoned);
    assert_contains(h_event_text(&h, "worker.drained", 0), "moves to a new generation");
    assert_contains(h_event_text(&h, "job.resizing", 0), "2 -> 2 workers (drain: worker n1/gpu1 drained: maintenance)");
    carry_out(&h, job);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    assert_int_equal(job->n_ranks, 2);
    assert_false(runs_on(job, "n1/gpu1"));
    assert_true(runs_on(job, "n1/gpu2"));
    h_start_keep(&h);
    assert_int_equal(job->last_resize.reason, TIDE_RESIZE_DRAIN);
    assert_int_equal(job->last_resize.workers, 2);
    assert_contains(h_event_text(&h, "job.resized", 0), "2 -> 2 workers (drain");
    /* The drained worker is free of the job and stays cordoned. */
    assert_null(w->job);
    assert_true(w->cordoned);
    assert_int_equal(w->state, TIDE_WORKER_READY);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_shrinks_or_waits(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w;
    tide_error_t err;
    (void)state;

    /* No spare, but 3 > min 2: it shrinks. */
    h_init(&h, NULL);
    job = run(&h, 3, 2, 3);
    assert_int_equal(job->n_ranks, 3);
    assert_int_equal(drain(&h, "n1/gpu0", &w), 0);
    carry_out(&h, job);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->n_ranks, 2);
    assert_false(runs_on(job, "n1/gpu0"));
    h_check_invariants(&h);
    h_fini(&h);

    /* No spare and at min: it waits queued, and goes on when a worker comes. */
    h_init(&h, NULL);
    job = run(&h, 2, 2, 2);
    assert_int_equal(drain(&h, "n1/gpu0", &w), 0);
    carry_out(&h, job);
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    h_clear(&h);
    assert_int_equal(tide_core_worker_cordon(h.core, "n1/gpu0", false, &w, &err), 0);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A generation still starting has run little: it is queued again at once, without the worker. */
static void test_while_starting(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_true(runs_on(job, "n1/gpu0"));
    h_clear(&h); /* rank 0's LAUNCH went out */
    assert_int_equal(drain(&h, "n1/gpu0", &w), 0);
    assert_contains(h_event_text(&h, "worker.drained", 0), "still starting");
    assert_int_equal(h_stop_all(&h), 1);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    assert_false(runs_on(job, "n1/gpu0"));
    h_start_all(&h);
    assert_int_equal(job->ranks_running, 2);
    h_check_invariants(&h);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_and_idle),
        cmocka_unit_test(test_replaced_by_a_spare),
        cmocka_unit_test(test_shrinks_or_waits),
        cmocka_unit_test(test_while_starting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

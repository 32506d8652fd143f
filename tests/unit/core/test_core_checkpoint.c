/* Scheduler core: trainer progress from heartbeats, checkpoint reports collected until every rank
 * has one, and CheckpointJob requests with their deadline. Fake clock, no I/O. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

/* A running job of n ranks on one node. */
static tide_job_t *running_job(h_t *h, int n)
{
    char id[32];
    tide_job_t *job;

    for (int g = 0; g < n; g++) {
        snprintf(id, sizeof(id), "n1/gpu%d", g);
        h_register(h, id, "n1", g);
    }
    h_clear(h);
    job = h_submit(h, n, n, TIDE_PRIO_NORMAL);
    h_start_all(h);
    h_clear(h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->ranks_running, n);
    return job;
}

static void saved(h_t *h, tide_job_t *job, int r, int64_t step, const char *path, uint64_t bytes)
{
    tide_core_checkpoint_saved(h->core, job->ranks[r].worker, job->id, job->generation, r, step,
                               path, bytes, path[0] ? "ab" : "");
}

static void test_progress_is_kept_for_the_current_rank_only(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_trainer_progress_t p = {.sdk = true, .step = 41, .phase = 3, .step_flops = 1e12,
                                 .samples = 8, .step_seconds = 0.25, .steps_reported = 42};
    (void)state;
    h_init(&h, NULL);
    job = running_job(&h, 2);
    tide_core_rank_progress(h.core, job->ranks[1].worker, job->id, job->generation, 1, &p);
    assert_true(job->ranks[1].progress.sdk);
    assert_int_equal(job->ranks[1].progress.step, 41);
    assert_int_equal(job->ranks[0].progress.step, -1);
    /* wrong rank for that worker, stale generation, other job: ignored */
    p.step = 99;
    tide_core_rank_progress(h.core, job->ranks[1].worker, job->id, job->generation, 0, &p);
    tide_core_rank_progress(h.core, job->ranks[0].worker, job->id, job->generation - 1, 0, &p);
    tide_core_rank_progress(h.core, job->ranks[0].worker, "999", job->generation, 0, &p);
    assert_int_equal(job->ranks[0].progress.step, -1);
    assert_int_equal(job->ranks[1].progress.step, 41);
    assert_int_equal(h_count(&h, TIDE_ACT_PERSIST_JOB), 0); /* progress is never persisted */
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_checkpoint_completes_when_every_rank_reported(void **state)
{
    h_t h;
    tide_job_t *job;
    (void)state;
    h_init(&h, NULL);
    job = running_job(&h, 3);
    saved(&h, job, 0, 10, "/ckpt/10", 1000);
    saved(&h, job, 2, 10, "", 0);
    saved(&h, job, 2, 10, "", 0); /* a repeat counts once */
    assert_int_equal(job->last_ckpt.step, -1);
    assert_null(h_find_event(&h, "job.checkpoint"));
    saved(&h, job, 1, 10, "", 0);
    assert_int_equal(job->last_ckpt.step, 10);
    assert_int_equal(job->last_ckpt.ranks, 3);
    assert_int_equal(job->last_ckpt.bytes, 1000);
    assert_string_equal(job->last_ckpt.path, "/ckpt/10");
    assert_int_equal(job->last_ckpt.generation, job->generation);
    assert_int_equal(job->last_ckpt.request_id, 0);
    assert_non_null(h_find_event(&h, "job.checkpoint"));
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_JOB, NULL, -1));
    h_clear(&h);
    /* an older step, or the same one again, changes nothing */
    saved(&h, job, 0, 5, "/ckpt/5", 1);
    saved(&h, job, 0, 10, "/ckpt/10", 1);
    assert_int_equal(h_count(&h, TIDE_ACT_PERSIST_JOB), 0);
    /* a newer step restarts the collection: the half-collected one is dropped */
    saved(&h, job, 0, 20, "/ckpt/20", 7);
    saved(&h, job, 1, 30, "", 0);
    saved(&h, job, 0, 20, "/ckpt/20", 7); /* stale now */
    assert_int_equal(job->ckpt_collect_step, 30);
    assert_int_equal(job->ckpt_collect_n, 1);
    saved(&h, job, 0, 30, "/ckpt/30", 9);
    saved(&h, job, 2, 30, "", 0);
    assert_int_equal(job->last_ckpt.step, 30);
    assert_string_equal(job->last_ckpt.path, "/ckpt/30");
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_checkpoint_request_is_answered(void **state)
{
    h_t h;
    tide_job_t *job, *out;
    tide_error_t err;
    uint64_t req;
    (void)state;
    h_init(&h, NULL);
    job = running_job(&h, 2);
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, 30000, &out, &err), 0);
    assert_ptr_equal(out, job);
    req = job->ckpt_request;
    assert_true(req > 0);
    assert_int_equal(job->ckpt_deadline_ms, h.core->now_wall + 30000);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 2);
    for (int r = 0; r < 2; r++) {
        const tide_action_t *a = h_find(&h, TIDE_ACT_CHECKPOINT_NOW, NULL, r);
        assert_non_null(a);
        assert_ptr_equal(a->worker, job->ranks[r].worker);
        assert_int_equal(a->request_id, req);
        assert_int_equal(a->deadline_ms, job->ckpt_deadline_ms);
    }
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_JOB, NULL, -1));
    h_clear(&h);
    /* asking again while one is in flight returns the same request and sends nothing */
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, 0, &out, &err), 0);
    assert_int_equal(job->ckpt_request, req);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 0);
    h_advance_alive(&h, 5000, NULL);
    saved(&h, job, 1, 7, "", 0);
    saved(&h, job, 0, 7, "/c/7", 10);
    assert_int_equal(job->ckpt_request, 0);
    assert_int_equal(job->last_ckpt.request_id, req);
    assert_int_equal(job->last_ckpt.step, 7);
    /* the deadline timer is gone: nothing is missed later */
    h_clear(&h);
    h_advance_alive(&h, 40000, NULL);
    assert_null(h_find_event(&h, "job.checkpoint_missed"));
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_checkpoint_request_reaches_late_ranks(void **state)
{
    h_t h;
    tide_job_t *job, *out;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    h_register(&h, "n1/gpu0", "n1", 0);
    h_register(&h, "n1/gpu1", "n1", 1);
    h_clear(&h);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    /* only rank 0 runs yet */
    tide_core_rank_started(h.core, job->ranks[0].worker, job->id, 1, 0, 100, 29400);
    h_clear(&h);
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, 0, &out, &err), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 1);
    h_clear(&h);
    tide_core_rank_started(h.core, job->ranks[1].worker, job->id, 1, 1, 101, 0);
    assert_non_null(h_find(&h, TIDE_ACT_CHECKPOINT_NOW, NULL, 1));
    assert_int_equal(h_find(&h, TIDE_ACT_CHECKPOINT_NOW, NULL, 1)->request_id, job->ckpt_request);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_checkpoint_request_deadline(void **state)
{
    h_t h;
    tide_job_t *job, *out;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    job = running_job(&h, 2);
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, 10000, &out, &err), 0);
    h_clear(&h);
    saved(&h, job, 0, 3, "/c/3", 10); /* only one rank answers */
    h_advance_alive(&h, 9500, NULL);
    assert_true(job->ckpt_request > 0);
    h_advance_alive(&h, 1000, NULL);
    assert_int_equal(job->ckpt_request, 0);
    assert_non_null(h_find_event(&h, "job.checkpoint_missed"));
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_JOB, NULL, -1));
    assert_int_equal(job->last_ckpt.step, -1);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h);
    h_fini(&h);
}

/* Checkpoint cadence (ckpt_cadence.c): once a job has a checkpoint, tide asks for one an interval (here
 * the default, 10 minutes) after the newest; a generation that lets such a request pass its deadline is
 * not asked again; -1 turns it off; a job's own interval wins; a bad one is refused naming the field. */
static void test_checkpoint_cadence(void **state)
{
    const int64_t min = 60000;
    h_t h;
    tide_job_t *job;
    tide_job_spec_t spec = {0};
    tide_error_t err;
    char *argv[] = {"train", NULL};
    (void)state;
    h_init(&h, NULL);
    job = running_job(&h, 2);
    /* no checkpoint yet: a trainer that never checkpoints is never asked */
    h_advance_alive(&h, 11 * min, NULL);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 0);
    saved(&h, job, 0, 5, "/c/5", 10);
    saved(&h, job, 1, 5, "", 0);
    assert_int_equal(job->last_ckpt.step, 5);
    h_clear(&h);
    h_advance_alive(&h, 9 * min + 50000, NULL);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 0);
    h_advance_alive(&h, 11000, NULL);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 2);
    assert_non_null(h_find_event(&h, "job.checkpoint_requested"));
    assert_true(job->ckpt_request > 0);
    /* answered: the next one is due 10 minutes after it, not before */
    saved(&h, job, 0, 9, "/c/9", 10);
    saved(&h, job, 1, 9, "", 0);
    assert_int_equal(job->ckpt_request, 0);
    assert_int_equal(job->last_ckpt.request_id, job->cadence_request);
    h_clear(&h);
    h_advance_alive(&h, 9 * min, NULL);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 0);
    h_advance_alive(&h, min + 1000, NULL);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 2);
    /* missed: the generation is not asked again (its own checkpoints still count) */
    h_clear(&h);
    h_advance_alive(&h, min + 1000, NULL);
    assert_non_null(h_find_event(&h, "job.checkpoint_missed"));
    assert_non_null(h_find_event(&h, "job.checkpoint_cadence_off"));
    assert_int_equal(job->cadence_off_gen, job->generation);
    saved(&h, job, 0, 12, "/c/12", 10);
    saved(&h, job, 1, 12, "", 0);
    assert_int_equal(job->last_ckpt.step, 12);
    h_clear(&h);
    h_advance_alive(&h, 25 * min, NULL);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 0);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h);

    /* the job's own interval; -1: never; out of range: refused, naming the field */
    spec.argv = argv;
    spec.argc = 1;
    spec.min_workers = spec.max_workers = 1;
    spec.ckpt_interval_s = 5;
    assert_int_equal(tide_core_job_submit(h.core, &spec, &job, &err), -EINVAL);
    assert_string_equal(err.text, "checkpoint_interval_seconds must be -1 (never), 0 (the scheduler's default) "
                                  "or between 10 and 315360000 (got 5)");
    spec.ckpt_interval_s = -2;
    assert_int_equal(tide_core_job_submit(h.core, &spec, &job, &err), -EINVAL);
    h_fini(&h);
    for (int off = 0; off < 2; off++) {
        h_init(&h, NULL);
        h_register(&h, "n1/gpu0", "n1", 0);
        spec.ckpt_interval_s = off ? -1 : 30;
        job = h_submit_spec(&h, &spec);
        h_start_all(&h);
        tide_core_checkpoint_saved(h.core, job->ranks[0].worker, job->id, job->generation, 0, 1, "/c/1", 1, "ab");
        assert_int_equal(job->last_ckpt.step, 1);
        h_clear(&h);
        h_advance_alive(&h, 31000, NULL);
        assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), off ? 0 : 1);
        h_check_invariants(&h);
        h_fini(&h);
    }
}

static void test_checkpoint_request_errors(void **state)
{
    h_t h;
    tide_job_t *job, *out;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    assert_int_equal(tide_core_job_checkpoint(h.core, "42", 0, &out, &err), -ENOENT);
    job = running_job(&h, 1);
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, -1, &out, &err), -EINVAL);
    assert_non_null(strstr(err.text, "deadline_ms"));
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, 25LL * 3600 * 1000, &out, &err),
                     -EINVAL);
    assert_int_equal(job->ckpt_request, 0);
    assert_int_equal(h_count(&h, TIDE_ACT_CHECKPOINT_NOW), 0);
    /* a pending request ends with the job */
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, 0, &out, &err), 0);
    tide_core_rank_exited(h.core, job->ranks[0].worker, job->id, job->generation, 0, 0, NULL);
    assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
    assert_int_equal(job->ckpt_request, 0);
    assert_non_null(h_find_event(&h, "job.checkpoint_missed"));
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, 0, &out, &err), -EALREADY);
    assert_non_null(strstr(err.text, "SUCCEEDED"));
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_checkpoint_survives_restore(void **state)
{
    h_t h, h2;
    tide_job_t *job, *out, *j2;
    tide_error_t err;
    const char *ids[1];
    h_rec_t hr;
    (void)state;
    h_init(&h, NULL);
    job = running_job(&h, 1);
    saved(&h, job, 0, 12, "/c/12", 99);
    assert_int_equal(tide_core_job_checkpoint(h.core, job->id, 20000, &out, &err), 0);
    ids[0] = job->ranks[0].worker_id;

    h_init(&h2, NULL);
    assert_int_equal(tide_core_job_restore(h2.core, h_record_of(job, &hr), &err), 0);
    tide_core_restore_done(h2.core);
    j2 = tide_core_job_find(h2.core, job->id);
    assert_non_null(j2);
    assert_int_equal(j2->last_ckpt.step, 12);
    assert_string_equal(j2->last_ckpt.path, "/c/12");
    assert_int_equal(j2->ckpt_request, job->ckpt_request);
    /* the restored request keeps its deadline while the worker re-registers with the rank */
    {
        static int conn;
        tide_worker_info_t info = {.id = ids[0], .node = "n1", .device = "sim:h100",
                                   .address = "127.0.0.1", .version = "test"};
        tide_rank_report_t rr = {.job_id = job->id, .generation = job->generation, .rank = 0,
                                 .running = true, .pid = 100};
        tide_worker_t *w;
        assert_int_equal(tide_core_worker_register(h2.core, &info, &conn, &rr, 1, &w, &err), 0);
    }
    h_clear(&h2);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    assert_true(j2->ckpt_request > 0);
    h_advance_alive(&h2, 21000, NULL);
    assert_int_equal(j2->ckpt_request, 0);
    assert_non_null(h_find_event(&h2, "job.checkpoint_missed"));
    h_check_invariants(&h2);
    h_fini(&h2);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_progress_is_kept_for_the_current_rank_only),
        cmocka_unit_test(test_checkpoint_completes_when_every_rank_reported),
        cmocka_unit_test(test_checkpoint_request_is_answered),
        cmocka_unit_test(test_checkpoint_request_reaches_late_ranks),
        cmocka_unit_test(test_checkpoint_request_deadline),
        cmocka_unit_test(test_checkpoint_cadence),
        cmocka_unit_test(test_checkpoint_request_errors),
        cmocka_unit_test(test_checkpoint_survives_restore),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

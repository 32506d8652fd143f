/* Restarts, quarantine, failure prediction and the generation history in the scheduler core
 * (docs/fault-tolerance.md): a lost worker's job restarts on a spare at once by default, then with a
 * doubling backoff outside the queue, up to max_restarts in a row (a generation that ran the window
 * starts the count again); the restart policy decides which failures restart; a worker where ranks keep
 * failing is quarantined; a GPU whose telemetry trends predict a failure is cordoned and its job moved
 * off it; each generation's cause, recovery time and lost work are recorded. Invariants are checked
 * after each step. */
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("\"%s\" does not contain \"%s\"", s ? s : "(null)", part);
}

/* The core's defaults (restarts on), but no hang detection (the scenarios jump minutes). */
static tide_core_config_t config(void)
{
    tide_core_config_t cfg;
    tide_core_config_default(&cfg);
    cfg.hang_min_ms = 0;
    return cfg;
}

static tide_job_t *run_spec(h_t *h, tide_job_spec_t *spec)
{
    tide_job_t *job = h_submit_spec(h, spec);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_start_all(h);
    assert_int_equal(job->ranks_running, job->n_ranks);
    h_check_invariants(h);
    return job;
}

static tide_job_t *run(h_t *h, int n)
{
    tide_job_spec_t spec = h_spec(n, n, TIDE_PRIO_NORMAL);
    return run_spec(h, &spec);
}

/* Every rank of job reports step through the SDK at step_s seconds per step. */
static void steps(h_t *h, tide_job_t *job, int64_t step, double step_s)
{
    for (int32_t r = 0; r < job->n_ranks; r++) {
        tide_trainer_progress_t p = {.sdk = true, .step = step, .step_seconds = step_s};
        tide_core_rank_progress(h->core, job->ranks[r].worker, job->id, job->generation, r, &p);
    }
}

static bool on_worker(const tide_job_t *job, const tide_worker_t *w)
{
    for (int32_t r = 0; r < job->n_ranks; r++)
        if (job->ranks[r].worker == w)
            return true;
    return false;
}

static void test_lost_worker_restarts_on_a_spare_with_history(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *dead;
    const tide_generation_rec_t *g;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 2);
    assert_int_equal(job->n_history, 1);
    assert_string_equal(job->history[0].cause, "submitted");
    assert_true(job->history[0].running_ms > 0);
    h_ckpt(&h, job, 100);
    steps(&h, job, 125, 0.2);
    dead = job->ranks[1].worker;
    h_clear(&h);
    h_jump(&h, 5000);
    tide_core_worker_failed(h.core, dead, "no heartbeat for 1.5 s");
    /* The default policy restarts it at once: queued in front, resumes from step 100. */
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_int_equal(job->restart_at, 0);
    assert_contains(job->message, "rank 1 lost (worker n1/gpu1 died (no heartbeat for 1.5 s)); restart 1 of 3 in "
                                  "a row, resumes from checkpoint step 100");
    assert_int_equal(job->restarts, 1);
    assert_int_equal(job->restarts_in_row, 1);
    h_check_invariants(&h);
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    assert_false(on_worker(job, dead));
    /* The history: generation 1 ended with the loss; generation 2 is its recovery. */
    assert_int_equal(job->n_history, 2);
    assert_true(job->history[0].end_ms > 0);
    assert_contains(job->history[0].end, "rank 1 lost");
    g = &job->history[1];
    assert_string_equal(g->cause, "worker_lost");
    assert_contains(g->detail, "rank 1 lost (worker n1/gpu1 died (no heartbeat for 1.5 s))");
    assert_int_equal(g->resumed_step, 100);
    assert_int_equal(g->steps_lost, 25);
    assert_float_equal(g->seconds_lost, 5.0, 1e-9);
    assert_true(g->failure_ms > 0);
    assert_int_equal(g->running_ms, 0);
    assert_int_equal(g->end_ms, 0);
    h_jump(&h, 700);
    h_start_keep(&h);
    assert_int_equal(job->history[1].running_ms - job->history[1].failure_ms, 700);
    assert_contains(h_event_text(&h, "job.recovered", 0), "running 0.70 s after the failure was detected (worker_lost)");
    assert_contains(h_event_text(&h, "job.recovered", 0), "25 step(s) (5.0 s) lost since its checkpoint");
    h_check_invariants(&h);
    /* The job's end closes the newest record. */
    h_exit_all(&h, job);
    assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
    assert_true(job->history[1].end_ms > 0);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_backoff_budget_and_window(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    (void)state;

    cfg.max_restarts = 3;
    cfg.restart_backoff_ms = 1000;
    cfg.restart_window_ms = 60000;
    cfg.quarantine_failures = 0;
    h_init(&h, &cfg);
    h_node(&h, "n1", 16, NULL, 0, NULL);
    job = run(&h, 2);
    /* Failure 1: at once. Failure 2: 1 s of backoff. Failure 3: 2 s. */
    for (int i = 1; i <= 3; i++) {
        int64_t backoff = i == 1 ? 0 : 1000LL << (i - 2);
        tide_core_worker_failed(h.core, job->ranks[0].worker, "xid 79");
        assert_int_equal(job->state, TIDE_JOB_PENDING);
        assert_int_equal(job->restarts_in_row, i);
        h_stop_all(&h);
        if (backoff) {
            assert_int_equal(job->state, TIDE_JOB_PENDING);
            assert_int_equal(job->restart_at, h.mono + backoff);
            assert_contains(job->message, "backoff");
            {
                char buf[256];
                assert_contains(tide_core_job_reason(h.core, job, buf, sizeof(buf)), "restarting in ");
                assert_int_equal(tide_core_job_queue_position(h.core, job), 0);
            }
            h_check_invariants(&h);
            h_jump(&h, backoff - 1);
            assert_int_equal(job->state, TIDE_JOB_PENDING);
            h_jump(&h, 1);
        }
        assert_int_equal(job->state, TIDE_JOB_RUNNING);
        assert_int_equal(job->restart_at, 0);
        h_start_all(&h);
        h_check_invariants(&h);
    }
    /* Failure 4 in a row: the budget is spent. */
    tide_core_worker_failed(h.core, job->ranks[1].worker, "xid 48");
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_contains(job->message, "restarted 3 time(s) in a row, the most allowed (max_restarts 3)");
    h_check_invariants(&h);

    /* A generation that ran the window starts the count again. */
    job = run(&h, 2);
    tide_core_worker_failed(h.core, job->ranks[0].worker, "a");
    h_stop_all(&h);
    h_start_all(&h);
    tide_core_worker_failed(h.core, job->ranks[0].worker, "b");
    assert_int_equal(job->restarts_in_row, 2);
    h_stop_all(&h);
    h_jump(&h, 1000);
    h_start_all(&h);
    h_jump(&h, 60000);
    tide_core_worker_failed(h.core, job->ranks[0].worker, "c");
    assert_int_equal(job->restarts_in_row, 1);
    assert_int_equal(job->restarts, 3);
    assert_int_equal(job->restart_at, 0);
    h_stop_all(&h);
    h_start_all(&h);

    /* A cancel during a backoff ends it there. */
    tide_core_worker_failed(h.core, job->ranks[0].worker, "d");
    h_stop_all(&h);
    assert_true(job->restart_at > 0);
    {
        tide_job_t *out;
        tide_error_t err;
        assert_int_equal(tide_core_job_cancel(h.core, job->id, &out, &err), 0);
    }
    assert_int_equal(job->state, TIDE_JOB_CANCELLED);
    assert_int_equal(job->restart_at, 0);
    h_jump(&h, 5000);
    assert_int_equal(job->state, TIDE_JOB_CANCELLED);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_policies(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec;
    tide_job_t *job;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    /* never: a loss fails it. */
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.restart_policy = TIDE_RESTART_NEVER;
    job = run_spec(&h, &spec);
    tide_core_worker_failed(h.core, job->ranks[1].worker, "xid 79");
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_contains(job->message, "; not restarted (restart policy never)");
    h_stop_all(&h);
    h_check_invariants(&h);

    /* on-loss (the default): a rank's own failing exit fails it. */
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    job = run_spec(&h, &spec);
    tide_core_rank_exited(h.core, job->ranks[1].worker, job->id, job->generation, 1, 3, NULL);
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_int_equal(job->exit_code, 3);
    assert_int_equal(job->failed_rank, 1);
    assert_contains(job->message, "exited with code 3; not restarted (restart policy on-loss)");
    h_stop_all(&h);

    /* on-failure: it restarts, within its own max_restarts. */
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.restart_policy = TIDE_RESTART_ON_FAILURE;
    spec.max_restarts = 1;
    job = run_spec(&h, &spec);
    tide_core_rank_exited(h.core, job->ranks[1].worker, job->id, job->generation, 1, 139, NULL);
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_contains(job->message, "exited with code 139; restart 1 of 1 in a row");
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_string_equal(job->history[job->n_history - 1].cause, "rank_failed");
    h_start_all(&h);
    tide_core_rank_exited(h.core, job->ranks[0].worker, job->id, job->generation, 0, 1, NULL);
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_contains(job->message, "(max_restarts 1)");
    h_stop_all(&h);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_quarantine(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *bad, *w;
    (void)state;

    cfg.quarantine_failures = 2;
    cfg.quarantine_window_ms = 600000;
    cfg.restart_backoff_ms = 0;
    cfg.hang_min_ms = 2000;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    bad = job->ranks[1].worker;
    /* Hung on `bad` once: counted, not cordoned. Then again within the window: quarantined. */
    for (int32_t round = 1; round <= 2; round++) {
        steps(&h, job, 1, 0.1);
        h_clear(&h);
        for (int i = 0; i < 8 && job->state == TIDE_JOB_RUNNING; i++) {
            int32_t r = job->ranks[0].worker == bad ? 1 : 0; /* only the rank on `bad` stops moving */
            tide_trainer_progress_t p = {.sdk = true, .step = 2 + i, .step_seconds = 0.1};
            tide_core_rank_progress(h.core, job->ranks[r].worker, job->id, job->generation, r, &p);
            h_jump(&h, 500);
        }
        assert_int_equal(job->hangs, round);
        assert_int_equal(tide_core_worker_failures(h.core, bad), round);
        if (round == 1) {
            assert_false(bad->cordoned);
            h_stop_all(&h);
            h_start_all(&h);
            assert_true(on_worker(job, bad));
        }
    }
    assert_true(bad->cordoned);
    assert_contains(bad->cordon_reason, "quarantined: 2 failures within 10 min (last: rank");
    assert_non_null(h_find_event(&h, "worker.quarantined"));
    assert_int_equal(tide_core_worker_failures(h.core, bad), 2);
    h_check_invariants(&h);
    /* The job waits (one usable worker for two ranks); an operator's uncordon forgets the count. */
    h_stop_all(&h);
    assert_int_equal(tide_core_worker_cordon(h.core, bad->id, false, &w, NULL), 0);
    assert_null(bad->cordon_reason);
    assert_int_equal(tide_core_worker_failures(h.core, bad), 0);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A telemetry sample: temperature only (and utilization), as the sim backend reports it. */
static void heartbeat_temp(h_t *h, tide_worker_t *w, double temp)
{
    tide_telemetry_t t = {.gpu_util = 0.9, .temperature_c = temp, .known = 1u | 4u};
    tide_core_worker_heartbeat(h->core, w, &t);
}

static void test_prediction_moves_the_job_before_the_gpu_dies(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *hot, *spiky = NULL;
    double temp = 60, spike = 60;
    bool predicted = false;
    int64_t t0 = 0;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 2);
    h_sdk(&h, job, 0.5);
    hot = job->ranks[1].worker;
    for (size_t i = 0; i < 4; i++) {
        tide_worker_t *w = tide_core_worker_find(h.core, i == 0 ? "n1/gpu0" : i == 1 ? "n1/gpu1" : i == 2 ? "n1/gpu2" : "n1/gpu3");
        if (!on_worker(job, w) && !spiky)
            spiky = w;
    }
    assert_non_null(spiky);
    h_clear(&h);
    /* `hot` heats at 120 C/min from 60 C; `spiky` jumps by 40 C for 2 s and cools. Samples every 500 ms. */
    for (int i = 0; i < 60 && !predicted; i++) {
        temp += 1.0;
        spike = i >= 10 && i < 14 ? spike + 10 : i >= 14 && i < 18 ? spike - 10 : spike;
        heartbeat_temp(&h, hot, temp);
        heartbeat_temp(&h, spiky, spike);
        for (int32_t r = 0; r < job->n_ranks; r++)
            if (job->ranks[r].worker != hot)
                heartbeat_temp(&h, job->ranks[r].worker, 60);
        h.mono += 500;
        tide_core_set_time(h.core, h.mono, H_WALL0 + h.mono);
        tide_core_tick(h.core);
        if (hot->cordoned) {
            predicted = true;
            t0 = h.mono;
        }
    }
    assert_true(predicted);
    assert_true(temp < 100.0); /* before it would die */
    assert_false(spiky->cordoned);
    assert_true(spiky->risk_score < cfg.risk.threshold);
    assert_contains(hot->cordon_reason, "predicted failure: temperature");
    assert_contains(h_event_text(&h, "worker.failure_predicted", 0), "is predicted to fail (risk");
    /* Its job moves off it after a checkpoint: a resize for reason predicted_failure. */
    assert_int_equal(job->resize.reason, TIDE_RESIZE_PREDICTED);
    assert_int_equal(job->resize.state, TIDE_RESIZE_CHECKPOINTING);
    h_ckpt(&h, job, 40);
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_false(on_worker(job, hot));
    assert_string_equal(job->history[job->n_history - 1].cause, "predicted_failure");
    assert_int_equal(job->history[job->n_history - 1].resumed_step, 40);
    assert_int_equal(job->history[job->n_history - 1].failure_ms, 0); /* no failure: nothing lost */
    h_start_all(&h);
    h_check_invariants(&h);
    /* Acted on once; an operator's uncordon starts its trend afresh. */
    heartbeat_temp(&h, hot, temp + 1);
    assert_int_equal(h_count_event(&h, "worker.failure_predicted"), 0);
    {
        tide_worker_t *w;
        assert_int_equal(tide_core_worker_cordon(h.core, hot->id, false, &w, NULL), 0);
    }
    assert_false(hot->risk_acted);
    assert_float_equal(hot->risk_score, 0, 0);
    (void)t0;
    h_fini(&h);
}

static void test_critical_signs_act_at_once_and_prediction_can_be_off(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *w;
    tide_telemetry_t t = {.temperature_c = 60, .known = 4u | 128u, .ecc_uncorrected = 2};
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 2);
    w = job->ranks[0].worker;
    /* Totals at the first sample are history, not news. */
    tide_core_worker_heartbeat(h.core, w, &t);
    assert_false(w->cordoned);
    t.ecc_uncorrected = 3;
    tide_core_worker_heartbeat(h.core, w, &t);
    assert_true(w->cordoned);
    assert_contains(w->cordon_reason, "predicted failure:");
    assert_int_equal(job->resize.reason, TIDE_RESIZE_PREDICTED);
    h_check_invariants(&h);
    h_fini(&h);

    cfg.predict_failures = false;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 2);
    w = job->ranks[0].worker;
    t.ecc_uncorrected = 2;
    tide_core_worker_heartbeat(h.core, w, &t);
    t.ecc_uncorrected = 3;
    tide_core_worker_heartbeat(h.core, w, &t);
    assert_false(w->cordoned);
    assert_int_equal(job->resize.state, TIDE_RESIZE_NONE);
    h_fini(&h);
}

/* Review findings: resizes keep the window; a rank dying with a GPU predicted to fail is a loss; a predicted
 * move with nowhere to go leaves the job running and tries again; a rank that fails before its generation
 * started is no recovery; a job in backoff has no queue position. */
static void test_window_spans_resizes(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *w;
    (void)state;

    cfg.restart_window_ms = 60000;
    cfg.quarantine_failures = 0;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    job = run(&h, 2);
    tide_core_worker_failed(h.core, job->ranks[0].worker, "a");
    h_stop_all(&h);
    h_start_all(&h);
    assert_int_equal(job->restarts_in_row, 1);
    h_jump(&h, 40000);
    /* A drain moves it to a new generation (no SDK: at once): the job has run well all along. */
    assert_int_equal(tide_core_worker_drain(h.core, job->ranks[1].worker->id, "maintenance", &w, NULL), 0);
    h_stop_all(&h);
    h_start_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_jump(&h, 30000);
    tide_core_worker_failed(h.core, job->ranks[0].worker, "b");
    assert_int_equal(job->restarts_in_row, 1); /* 70 s since it ran again: the count started afresh */
    h_stop_all(&h);
    h_start_all(&h);
    /* A failure right after: the generation never ran the window, the count goes on. */
    tide_core_worker_failed(h.core, job->ranks[0].worker, "c");
    assert_int_equal(job->restarts_in_row, 2);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_rank_dying_with_a_predicted_gpu_is_a_loss(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *w;
    tide_telemetry_t t = {.temperature_c = 60, .known = 4u | 256u, .xid_count = 0};
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 2);
    h_sdk(&h, job, 0.5); /* it checkpoints before a move: the move waits for it */
    w = job->ranks[1].worker;
    tide_core_worker_heartbeat(h.core, w, &t);
    t.xid_count = 1, t.last_xid = 79; /* fallen off the bus */
    tide_core_worker_heartbeat(h.core, w, &t);
    assert_true(w->risk_acted);
    /* Its CUDA process dies before the move: a loss (restarted under on-loss), not the job's own failure. */
    tide_core_rank_exited(h.core, w, job->id, job->generation, 1, 1, "CUDA error: unspecified launch failure");
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_contains(job->message, "(its GPU is predicted to fail); restart 1 of 3 in a row");
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_false(on_worker(job, w));
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_predicted_move_waits_for_room(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *w;
    tide_telemetry_t t = {.temperature_c = 60, .known = 4u | 128u, .ecc_uncorrected = 0};
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    w = job->ranks[0].worker;
    h_clear(&h);
    tide_core_worker_heartbeat(h.core, w, &t);
    t.ecc_uncorrected = 1;
    tide_core_worker_heartbeat(h.core, w, &t);
    /* Cordoned, but the job has nowhere to go: it keeps running there. */
    assert_true(w->cordoned);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->resize.state, TIDE_RESIZE_NONE);
    assert_contains(h_event_text(&h, "worker.migrating", 0), "stays on it for now");
    h_check_invariants(&h);
    /* A worker joins; the next try (5 s later) moves the job. */
    h_register(&h, "n2/gpu0", "n2", 0);
    h_jump(&h, 1000);
    tide_core_worker_heartbeat(h.core, w, &t);
    assert_int_equal(job->resize.state, TIDE_RESIZE_NONE); /* not yet: at most every 5 s */
    h_jump(&h, 5000);
    tide_core_worker_heartbeat(h.core, w, &t);
    assert_int_equal(job->resize.reason, TIDE_RESIZE_PREDICTED);
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_false(on_worker(job, w));
    h_start_all(&h);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A HIGH run holding all but 2 of 20 GPUs: its burst share (18 x the band's width, 2 GPUs) is the whole
 * reserve and would hold back both free GPUs. A predicted failure under it still moves it: the share is
 * its own room (docs/goodput.md found 0 moves in 54 simulated days before). */
static void test_predicted_move_may_use_its_own_burst_room(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec;
    tide_reserve_t r;
    tide_job_t *job;
    tide_worker_t *w;
    tide_telemetry_t t = {.temperature_c = 60, .known = 4u | 128u, .ecc_uncorrected = 0};
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 10, NULL, 0, NULL);
    h_node(&h, "n2", 10, NULL, 0, NULL);
    spec = h_spec(18, 18, TIDE_PRIO_HIGH);
    job = run_spec(&h, &spec);
    tide_core_reserve(h.core, &r);
    assert_int_equal(r.burst, 2);
    assert_int_equal(r.gpus, 2);
    assert_int_equal(r.free, 2);
    w = job->ranks[0].worker;
    h_clear(&h);
    tide_core_worker_heartbeat(h.core, w, &t);
    t.ecc_uncorrected = 1;
    tide_core_worker_heartbeat(h.core, w, &t);
    assert_true(w->cordoned);
    assert_int_equal(h_count_event(&h, "worker.migrating"), 1);
    assert_null(strstr(h_event_text(&h, "worker.migrating", 0), "stays on it for now"));
    assert_int_equal(job->resize.reason, TIDE_RESIZE_PREDICTED);
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->n_ranks, 18);
    assert_false(on_worker(job, w));
    h_start_all(&h);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_failing_start_is_no_recovery(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec;
    tide_job_t *job;
    const tide_action_t *a;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.restart_policy = TIDE_RESTART_ON_FAILURE;
    job = run_spec(&h, &spec);
    tide_core_worker_failed(h.core, job->ranks[1].worker, "a");
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    /* Rank 0 of the recovery confirms; rank 1 fails before it ever ran. */
    a = h_find(&h, TIDE_ACT_LAUNCH, NULL, 0);
    assert_non_null(a);
    tide_core_rank_started(h.core, job->ranks[0].worker, job->id, job->generation, 0, 100, 29400);
    h_clear(&h);
    tide_core_rank_exited(h.core, job->ranks[1].worker, job->id, job->generation, 1, 1, "exec failed");
    assert_int_equal(h_count_event(&h, "job.running"), 0);
    assert_int_equal(h_count_event(&h, "job.recovered"), 0);
    assert_non_null(h_find_event(&h, "job.rolled_back"));
    assert_int_equal(job->history[1].running_ms, 0);
    h_stop_all(&h);
    /* The next generation still recovers from the loss. */
    if (job->state != TIDE_JOB_RUNNING)
        fail_msg("state %d: %s", job->state, job->message);
    assert_string_equal(job->history[2].cause, "worker_lost");
    assert_true(job->history[2].failure_ms > 0);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_backoff_has_no_queue_position(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job, *other;
    (void)state;

    cfg.quarantine_failures = 0;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    other = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    assert_int_equal(tide_core_job_queue_position(h.core, job), 1);
    h_exit_all(&h, other);
    h_start_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_node(&h, "n2", 2, NULL, 0, NULL);
    for (int i = 0; i < 2; i++) {
        tide_core_worker_failed(h.core, job->ranks[0].worker, "x");
        h_stop_all(&h);
        if (job->state == TIDE_JOB_RUNNING)
            h_start_all(&h);
    }
    assert_true(job->restart_at > 0);
    assert_int_equal(tide_core_job_queue_position(h.core, job), 0);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A hang in lockstep: the rank behind is blamed; at the same step nobody's worker is (the culprit is not
 * known). A failed generation's other ranks get the short stop grace. */
static void test_hang_blame_and_fast_stop(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    const tide_action_t *stop;
    (void)state;

    cfg.hang_min_ms = 2000;
    cfg.quarantine_failures = 1; /* any counted failure quarantines: shows whom it blames */
    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 2);
    /* Rank 1 is behind (it never finished step 5): it is the one. */
    {
        tide_trainer_progress_t p0 = {.sdk = true, .step = 5, .step_seconds = 0.1};
        tide_trainer_progress_t p1 = {.sdk = true, .step = 4, .step_seconds = 0.1};
        tide_core_rank_progress(h.core, job->ranks[0].worker, job->id, job->generation, 0, &p0);
        tide_core_rank_progress(h.core, job->ranks[1].worker, job->id, job->generation, 1, &p1);
    }
    {
        tide_worker_t *behind = job->ranks[1].worker, *ahead = job->ranks[0].worker;
        h_clear(&h);
        h_jump(&h, 3000);
        assert_contains(h_event_text(&h, "job.hung", 0), ": rank 1 on ");
        assert_true(behind->cordoned);
        assert_false(ahead->cordoned);
        stop = h_find(&h, TIDE_ACT_STOP, ahead->id, 0);
        assert_non_null(stop);
        assert_int_equal(stop->grace_ms, 1000); /* not the 10 s stop grace */
    }
    h_stop_all(&h);
    h_start_all(&h);
    /* Both at the same step: which one hangs is not known; no worker is blamed. */
    steps(&h, job, 7, 0.1);
    {
        tide_worker_t *w0 = job->ranks[0].worker, *w1 = job->ranks[1].worker;
        h_clear(&h);
        h_jump(&h, 3000);
        assert_contains(h_event_text(&h, "job.hung", 0), "which one hangs is not known");
        assert_int_equal(job->state, TIDE_JOB_PENDING);
        assert_false(w0->cordoned);
        assert_false(w1->cordoned);
    }
    h_stop_all(&h);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A move off a GPU predicted to fail goes before queued jobs of its kind (a grow would wait behind them). */
static void test_predicted_move_goes_before_the_queue(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job, *waiting;
    tide_worker_t *w;
    tide_telemetry_t t = {.temperature_c = 60, .known = 4u | 128u, .ecc_uncorrected = 0};
    (void)state;

    cfg.reserve_gpus = 0;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 2);
    h_sdk(&h, job, 0.5);
    waiting = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL); /* 1 GPU free: it waits */
    assert_int_equal(waiting->state, TIDE_JOB_PENDING);
    h_jump(&h, 1000);
    w = job->ranks[0].worker;
    tide_core_worker_heartbeat(h.core, w, &t);
    t.ecc_uncorrected = 1;
    tide_core_worker_heartbeat(h.core, w, &t);
    assert_int_equal(job->resize.reason, TIDE_RESIZE_PREDICTED);
    h_ckpt(&h, job, 10);
    h_stop_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_false(on_worker(job, w));
    assert_int_equal(waiting->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A scheduler restart keeps what a restart needs: a job in its backoff stays out of the queues until the
 * backoff's wall-clock end and then goes first with the spares; where its ranks' checkpoints are (each
 * rank's worker and mirror) is kept for the next generation's restore; a running job keeps its mirrors. */
static void test_restart_state_survives_a_scheduler_restart(void **state)
{
    h_t h, h2;
    tide_core_config_t cfg = config();
    tide_job_t *job, *j2, *other;
    h_rec_t hr;
    tide_error_t err;
    int64_t end_mono;
    (void)state;

    cfg.quarantine_failures = 0;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    h_node(&h, "n2", 2, NULL, 0, NULL);
    job = run(&h, 2);
    for (int i = 0; i < 2; i++) {
        h_ckpt(&h, job, 10 + i);
        tide_core_worker_failed(h.core, job->ranks[0].worker, "xid 79");
        h_stop_all(&h);
        if (job->state == TIDE_JOB_RUNNING)
            h_start_all(&h);
    }
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_true(job->restart_at > h.mono);
    assert_true(job->n_prev_src == 2 && job->prev_src[0] && job->prev_src[1]);
    end_mono = job->restart_at;

    h_init(&h2, &cfg);
    assert_int_equal(tide_core_job_restore(h2.core, h_record_of(job, &hr), &err), 0);
    tide_core_restore_done(h2.core);
    j2 = tide_core_job_find(h2.core, job->id);
    assert_non_null(j2);
    assert_int_equal(j2->n_prev_src, 2);
    for (int i = 0; i < 4; i++)
        assert_string_equal(j2->prev_src[i], job->prev_src[i]);
    assert_int_equal(j2->restart_at_ms, job->restart_at_ms);
    assert_int_equal(tide_core_job_queue_position(h2.core, j2), 0);
    h_node(&h2, "n1", 2, NULL, 0, NULL);
    h_node(&h2, "n2", 2, NULL, 0, NULL);
    other = h_submit(&h2, 1, 1, TIDE_PRIO_NORMAL); /* free GPUs do not end the backoff early */
    h_start_all(&h2);
    assert_int_equal(other->state, TIDE_JOB_RUNNING);
    h_jump(&h2, end_mono - 1 - h2.mono);
    assert_int_equal(j2->state, TIDE_JOB_PENDING);
    h_jump(&h2, 1);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    assert_true(j2->generation > job->generation);
    h_check_invariants(&h2);
    h_fini(&h2);

    /* A running job keeps each rank's mirror peer. */
    h_stop_all(&h);
    h_jump(&h, end_mono - h.mono);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_start_all(&h);
    assert_non_null(job->ranks[0].mirror_id);
    h_init(&h2, &cfg);
    assert_int_equal(tide_core_job_restore(h2.core, h_record_of(job, &hr), &err), 0);
    tide_core_restore_done(h2.core);
    j2 = tide_core_job_find(h2.core, job->id);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    for (int32_t r = 0; r < 2; r++) {
        if (job->ranks[r].mirror_id)
            assert_string_equal(j2->ranks[r].mirror_id, job->ranks[r].mirror_id);
        else
            assert_null(j2->ranks[r].mirror_id);
    }
    h_fini(&h2);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_worker_restarts_on_a_spare_with_history),
        cmocka_unit_test(test_backoff_budget_and_window),
        cmocka_unit_test(test_policies),
        cmocka_unit_test(test_quarantine),
        cmocka_unit_test(test_prediction_moves_the_job_before_the_gpu_dies),
        cmocka_unit_test(test_critical_signs_act_at_once_and_prediction_can_be_off),
        cmocka_unit_test(test_window_spans_resizes),
        cmocka_unit_test(test_rank_dying_with_a_predicted_gpu_is_a_loss),
        cmocka_unit_test(test_predicted_move_waits_for_room),
        cmocka_unit_test(test_predicted_move_may_use_its_own_burst_room),
        cmocka_unit_test(test_failing_start_is_no_recovery),
        cmocka_unit_test(test_backoff_has_no_queue_position),
        cmocka_unit_test(test_hang_blame_and_fast_stop),
        cmocka_unit_test(test_predicted_move_goes_before_the_queue),
        cmocka_unit_test(test_restart_state_survives_a_scheduler_restart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

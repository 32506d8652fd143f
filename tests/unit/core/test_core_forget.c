/* Hot-tier retention in the scheduler core (docs/fault-tolerance.md, "Checkpoint tiers"): a job keeps the
 * set of workers that may hold its hot copies (every worker a rank of it was launched on, any generation,
 * and every mirror peer chosen for a rank), and its end emits one TIDE_ACT_FORGET_CKPT per holder, once
 * each, and none while it runs. A holder that is not connected gets the action without a stream (the
 * worker's --ckpt-hot-ttl covers it). Invariants are checked after each step. */
#include <stdio.h>
#include <stdlib.h>

#include "ckpt_holders.h"
#include "core_harness.h"
#include "core_private.h"

static tide_core_config_t config(void)
{
    tide_core_config_t cfg;
    tide_core_config_default(&cfg);
    cfg.hang_min_ms = 0;
    return cfg;
}

/* The FORGET_CKPT actions for worker id in the action list. */
static size_t forgets_for(h_t *h, const char *id, const tide_action_t **last)
{
    size_t n = 0, na;
    const tide_action_t *a = tide_core_actions(h->core, &na);

    for (size_t i = 0; i < na; i++)
        if (a[i].type == TIDE_ACT_FORGET_CKPT && strcmp(a[i].worker_id, id) == 0) {
            n++;
            if (last)
                *last = &a[i];
        }
    return n;
}

/* One rank on w1 with its mirror on another node, w1 dies, the restart runs on another worker with its own
 * mirror; at the end exactly {w1, w1's mirror, the new worker, its mirror} get FORGET_CKPT, once each. */
static void test_holders_across_a_restart(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    tide_job_t *job;
    tide_worker_t *dead;
    char w1[64], m1[64], w3[64], m3[64], job_id[32];
    const char *want[4];
    size_t n_want = 0, n;
    const tide_action_t *a = NULL;
    (void)state;

    h_init(&h, &cfg);
    h_register(&h, "a/gpu0", "a", 0);
    h_register(&h, "b/gpu0", "b", 0);
    h_register(&h, "c/gpu0", "c", 0);
    h_register(&h, "d/gpu0", "d", 0);
    h_clear(&h);
    job = h_submit_spec(&h, &spec);
    snprintf(job_id, sizeof(job_id), "%s", job->id);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(h_count(&h, TIDE_ACT_FORGET_CKPT), 0);
    h_start_all(&h);
    assert_int_equal(job->ranks_running, 1);
    assert_non_null(job->ranks[0].mirror_id);
    snprintf(w1, sizeof(w1), "%s", job->ranks[0].worker->id);
    snprintf(m1, sizeof(m1), "%s", job->ranks[0].mirror_id);
    assert_string_not_equal(w1, m1);
    assert_int_equal(job->n_ckpt_holders, 2);
    assert_true(tide__ckpt_holder_has(job, w1));
    assert_true(tide__ckpt_holder_has(job, m1));
    h_ckpt(&h, job, 100);
    h_check_invariants(&h);

    /* w1 dies: generation 2 on another worker (the holders only grow; nothing is forgotten yet). */
    dead = job->ranks[0].worker;
    h_clear(&h);
    h_jump(&h, 5000);
    tide_core_worker_failed(h.core, dead, "no heartbeat for 1.5 s");
    assert_int_equal(h_count(&h, TIDE_ACT_FORGET_CKPT), 0);
    /* One rank, no peer to stop: placed again at once on a spare. */
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    h_start_all(&h);
    assert_int_equal(job->ranks_running, 1);
    snprintf(w3, sizeof(w3), "%s", job->ranks[0].worker->id);
    assert_string_not_equal(w3, w1);
    assert_non_null(job->ranks[0].mirror_id);
    snprintf(m3, sizeof(m3), "%s", job->ranks[0].mirror_id);
    assert_string_not_equal(m3, w1); /* dead: not a mirror */
    h_check_invariants(&h);
    h_clear(&h);
    h_jump(&h, 1000);
    assert_int_equal(h_count(&h, TIDE_ACT_FORGET_CKPT), 0);

    /* The end: each holder once, the dead one without a stream, live ones on theirs. */
    h_exit_all(&h, job);
    assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
    want[n_want++] = w1;
    want[n_want++] = m1;
    if (strcmp(w3, m1) != 0)
        want[n_want++] = w3;
    if (strcmp(m3, m1) != 0 && strcmp(m3, w3) != 0)
        want[n_want++] = m3;
    assert_int_equal(job->n_ckpt_holders, (int32_t)n_want);
    assert_int_equal(h_count(&h, TIDE_ACT_FORGET_CKPT), n_want);
    for (size_t i = 0; i < n_want; i++) {
        n = forgets_for(&h, want[i], &a);
        if (n != 1)
            fail_msg("%zu FORGET_CKPT for %s, expected 1", n, want[i]);
        assert_string_equal(a->job_id, job_id);
        assert_ptr_equal(a->job, job);
        if (strcmp(want[i], w1) == 0) {
            assert_null(a->conn);
            assert_null(a->worker);
        } else {
            assert_non_null(a->conn);
            assert_non_null(a->worker);
            assert_string_equal(a->worker->id, want[i]);
        }
    }
    h_check_invariants(&h);
    /* Nothing more later (the job is final; its retention drops it). */
    h_clear(&h);
    h_jump(&h, 3600 * 1000);
    assert_int_equal(h_count(&h, TIDE_ACT_FORGET_CKPT), 0);
    h_fini(&h);
}

/* A cancel: the FORGETs come after the STOPs (a worker drops the copies once its rank exited). A job
 * cancelled while PENDING that never ran has no holders. */
static void test_cancel_orders_forget_after_stop(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    tide_job_t *job, *waiting, *out = NULL;
    size_t na, first_forget = SIZE_MAX, last_stop = 0;
    const tide_action_t *a;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 1, NULL, 0, NULL);
    h_node(&h, "n2", 1, NULL, 0, NULL);
    job = h_submit_spec(&h, &spec);
    h_start_all(&h);
    assert_int_equal(job->ranks_running, 2);
    waiting = h_submit_spec(&h, &spec); /* no room: PENDING */
    assert_int_equal(waiting->state, TIDE_JOB_PENDING);
    h_clear(&h);
    assert_int_equal(tide_core_job_cancel(h.core, waiting->id, &out, NULL), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_FORGET_CKPT), 0);
    h_clear(&h);
    assert_int_equal(tide_core_job_cancel(h.core, job->id, &out, NULL), 0);
    /* Two ranks on two nodes: each is the other's mirror; holders {n1/gpu0, n2/gpu0}. */
    assert_int_equal(h_count(&h, TIDE_ACT_FORGET_CKPT), 2);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 2);
    a = tide_core_actions(h.core, &na);
    for (size_t i = 0; i < na; i++) {
        if (a[i].type == TIDE_ACT_STOP)
            last_stop = i;
        if (a[i].type == TIDE_ACT_FORGET_CKPT && first_forget == SIZE_MAX)
            first_forget = i;
    }
    assert_true(first_forget > last_stop);
    h_check_invariants(&h);
    h_fini(&h);
}

/* The set itself: insertion order, no duplicates, NULL and "" ignored, many ids. */
static void test_holder_set(void **state)
{
    tide_job_t job;
    char id[32];
    (void)state;

    memset(&job, 0, sizeof(job));
    assert_true(tide__ckpt_holder_add(&job, "w1"));
    assert_false(tide__ckpt_holder_add(&job, "w1"));
    assert_false(tide__ckpt_holder_add(&job, NULL));
    assert_false(tide__ckpt_holder_add(&job, ""));
    for (int i = 0; i < 1000; i++) {
        snprintf(id, sizeof(id), "n%d/gpu%d", i / 8, i % 8);
        assert_true(tide__ckpt_holder_add(&job, id));
        assert_false(tide__ckpt_holder_add(&job, id));
    }
    assert_int_equal(job.n_ckpt_holders, 1001);
    assert_string_equal(job.ckpt_holders[0], "w1");
    assert_string_equal(job.ckpt_holders[1000], "n124/gpu7");
    assert_true(tide__ckpt_holder_has(&job, "n3/gpu2"));
    assert_false(tide__ckpt_holder_has(&job, "n3/gpu9"));
    tide__ckpt_holders_free(&job);
    assert_int_equal(job.n_ckpt_holders, 0);
    assert_null(job.ckpt_holders);
    tide__ckpt_holders_free(&job); /* twice is fine */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holders_across_a_restart),
        cmocka_unit_test(test_cancel_orders_forget_after_stop),
        cmocka_unit_test(test_holder_set),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

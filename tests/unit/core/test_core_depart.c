/* Workers that leave (docs/slurm.md, "End of the allocation"): a goodbye makes a worker departed — DEAD,
 * hidden from the counts, never placed, its ranks lost, reported as worker.departed and not as a failure —
 * while a worker that vanishes without one is still declared dead. Cordons of departed workers are kept
 * (and counted again) when they come back; restored records of uncordoned workers stay hidden. */
#include <stdio.h>

#include "core_harness.h"

#include "core_private.h"

static void counts(h_t *h, int c[5])
{
    tide_core_worker_counts(h->core, c);
}

static void test_goodbye_departs(void **state)
{
    h_t h;
    tide_worker_t *w;
    tide_job_t *job;
    int c[5];
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    w = tide_core_worker_find(h.core, "n1/gpu1");
    tide_core_worker_disconnected(h.core, w, w->conn, true);
    assert_int_equal(w->state, TIDE_WORKER_DEAD);
    assert_true(w->departed);
    assert_false(w->connected);
    assert_non_null(h_find_event(&h, "worker.departed"));
    assert_string_equal(h_event_text(&h, "worker.departed", 0), "worker n1/gpu1 left: it shut down");
    assert_int_equal(h_count_event(&h, "worker.dead"), 0);
    assert_int_equal(h.core->failures, 0); /* a goodbye is no failure: the reserve does not grow */
    counts(&h, c);
    assert_int_equal(c[TIDE_WORKER_READY], 1);
    assert_int_equal(c[TIDE_WORKER_DEAD], 0); /* not in GetClusterStatus */
    h_check_invariants(&h);

    /* never placed: a 2-worker job waits; the departed one is still known by id */
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_ptr_equal(tide_core_worker_find(h.core, "n1/gpu1"), w);
    h_advance_alive(&h, 5000, NULL);
    assert_true(w->departed); /* the liveness tick does not touch it */
    assert_int_equal(h_count_event(&h, "worker.dead"), 0);

    /* it comes back (a new allocation on the same GPU): registered, listed, placed */
    h_clear(&h);
    assert_ptr_equal(h_register(&h, "n1/gpu1", "n1", 1), w);
    assert_false(w->departed);
    assert_int_equal(w->state, TIDE_WORKER_BUSY);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    counts(&h, c);
    assert_int_equal(c[TIDE_WORKER_BUSY], 2);
    assert_int_equal(c[TIDE_WORKER_DEAD], 0);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_goodbye_with_a_rank_loses_it(void **state)
{
    tide_core_config_t cfg;
    h_t h;
    tide_worker_t *w;
    tide_job_t *job;
    (void)state;
    h_config(&cfg);
    cfg.max_restarts = 3; /* restarts on (the harness turns them off) */
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    w = job->ranks[1].worker;
    tide_core_worker_disconnected(h.core, w, w->conn, true);
    assert_true(w->departed);
    assert_null(w->job);
    assert_int_equal(w->state, TIDE_WORKER_DEAD);
    assert_int_equal(h.core->failures, 0);
    /* the job goes on without it (restart policy on-loss: a new generation on the spare) */
    assert_non_null(h_find(&h, TIDE_ACT_STOP, NULL, 0));
    h_stop_all(&h);
    h_start_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    for (int32_t r = 0; r < job->n_ranks; r++)
        assert_string_not_equal(job->ranks[r].worker_id, w->id);
    h_check_invariants(&h);
    h_fini(&h);
}

/* Allocations that end and pods that are deleted are no bad luck: a job whose workers keep leaving is
 * restarted each time without counting against max_restarts, without backoff, and the GPU is never
 * quarantined for it; the generation's cause says so. */
static void test_leaving_is_not_a_failure(void **state)
{
    tide_core_config_t cfg;
    h_t h;
    tide_job_t *job;
    (void)state;
    h_config(&cfg);
    cfg.max_restarts = 1;
    cfg.quarantine_failures = 2;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    for (int round = 0; round < 3; round++) {
        tide_worker_t *w = job->ranks[1].worker;
        char id[32];
        snprintf(id, sizeof(id), "%s", w->id);
        tide_core_worker_disconnected(h.core, w, w->conn, true);
        assert_true(w->departed);
        h_stop_all(&h);
        assert_int_equal(job->restarts_in_row, 0);
        assert_int_equal(job->restarts, round + 1);
        assert_int_equal(job->restart_at, 0); /* no backoff */
        assert_false(w->cordoned);
        assert_ptr_equal(h_register(&h, id, "n1", w->gpu_index), w); /* the next allocation */
        h_start_all(&h);
        assert_int_equal(job->state, TIDE_JOB_RUNNING);
        assert_int_equal(job->generation, round + 2);
        assert_string_equal(job->history[job->n_history - 1].cause, "worker_left");
        assert_false(w->cordoned);
        h_check_invariants(&h);
    }
    assert_null(h_find_event(&h, "worker.quarantined"));
    h_fini(&h);
}

static void test_vanished_worker_is_dead_not_departed(void **state)
{
    h_t h;
    tide_worker_t *w;
    int c[5];
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    h_clear(&h);
    w = tide_core_worker_find(h.core, "n1/gpu0");
    tide_core_worker_disconnected(h.core, w, w->conn, false);
    assert_int_equal(w->state, TIDE_WORKER_SUSPECT);
    h_advance_alive(&h, 2000, w->id);
    assert_int_equal(w->state, TIDE_WORKER_DEAD);
    assert_false(w->departed);
    assert_non_null(h_find_event(&h, "worker.dead"));
    assert_int_equal(h_count_event(&h, "worker.departed"), 0);
    counts(&h, c);
    assert_int_equal(c[TIDE_WORKER_DEAD], 1); /* operators see the failure */
    /* a goodbye on a stream that is no longer the worker's changes nothing */
    tide_core_worker_disconnected(h.core, w, w->conn, true);
    assert_false(w->departed);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_departed_cordon_is_kept(void **state)
{
    h_t h;
    tide_worker_t *w, *out;
    tide_error_t err;
    int c[5];
    (void)state;
    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    assert_int_equal(tide_core_worker_cordon(h.core, "n1/gpu0", true, &w, &err), 0);
    tide_core_worker_disconnected(h.core, w, w->conn, true);
    assert_true(w->departed && w->cordoned);
    counts(&h, c);
    assert_int_equal(c[0], 0); /* not counted while it is away ... */
    h_check_invariants(&h);

    /* ... and cordons of departed workers can still be changed by id */
    assert_int_equal(tide_core_worker_cordon(h.core, "n1/gpu0", false, &out, &err), 0);
    assert_ptr_equal(out, w);
    assert_false(w->cordoned);
    h_check_invariants(&h);
    assert_int_equal(tide_core_worker_cordon(h.core, "n1/gpu0", true, &out, &err), 0);
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_WORKER, "n1/gpu0", -1));
    h_check_invariants(&h);

    /* back: still cordoned (no rank lands there), counted again */
    h_register(&h, "n1/gpu0", "n1", 0);
    assert_false(w->departed);
    assert_true(w->cordoned);
    counts(&h, c);
    assert_int_equal(c[0], 1);
    assert_int_equal(c[TIDE_WORKER_READY], 2);
    assert_int_equal(h_submit(&h, 2, 2, TIDE_PRIO_NORMAL)->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_restored_records(void **state)
{
    h_t h;
    tide_worker_t *gone, *cord;
    int c[5];
    (void)state;
    h_init(&h, NULL);
    /* an old uncordon's record: hidden until it registers; a cordon: shown (DEAD, cordoned) */
    tide_core_worker_restore(h.core, "n1/gpu0", false, NULL);
    tide_core_worker_restore(h.core, "n1/gpu1", true, "bad ECC");
    gone = tide_core_worker_find(h.core, "n1/gpu0");
    cord = tide_core_worker_find(h.core, "n1/gpu1");
    assert_true(gone->departed);
    assert_false(cord->departed);
    counts(&h, c);
    assert_int_equal(c[TIDE_WORKER_DEAD], 1);
    assert_int_equal(c[0], 1);
    h_check_invariants(&h);
    /* a record of a worker already known (bound by a restored job) does not hide it */
    tide_core_worker_restore(h.core, "n1/gpu1", false, NULL);
    assert_false(cord->departed);
    h_check_invariants(&h);
    tide_core_restore_done(h.core);
    h_register(&h, "n1/gpu0", "n1", 0);
    assert_false(gone->departed);
    assert_int_equal(gone->state, TIDE_WORKER_READY);
    h_check_invariants(&h);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goodbye_departs),
        cmocka_unit_test(test_goodbye_with_a_rank_loses_it),
        cmocka_unit_test(test_leaving_is_not_a_failure),
        cmocka_unit_test(test_vanished_worker_is_dead_not_departed),
        cmocka_unit_test(test_departed_cordon_is_kept),
        cmocka_unit_test(test_restored_records),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Scheduler core scenarios: placement, the job lifecycle, failure detection, restarts. Driven by
 * events on a fake clock; every test checks the core's invariants as it goes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

static void cluster(h_t *h, int nodes, int gpus)
{
    char id[32], node[16];
    for (int n = 0; n < nodes; n++) {
        for (int g = 0; g < gpus; g++) {
            snprintf(node, sizeof(node), "n%d", n + 1);
            snprintf(id, sizeof(id), "n%d/gpu%d", n + 1, g);
            h_register(h, id, node, g);
        }
    }
    h_clear(h);
}

static void test_placement_prefers_one_node(void **state)
{
    h_t h;
    tide_job_t *a, *b, *c;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 2, 4);

    a = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    assert_int_equal(a->state, TIDE_JOB_RUNNING);
    assert_string_equal(a->ranks[0].worker->node_name, a->ranks[1].worker->node_name);
    /* best fit: the node with 2 left is too small for 3, so b goes to the other node */
    b = h_submit(&h, 3, 3, TIDE_PRIO_NORMAL);
    assert_int_equal(b->state, TIDE_JOB_RUNNING);
    assert_string_not_equal(a->ranks[0].worker->node_name, b->ranks[0].worker->node_name);
    for (int r = 0; r < 3; r++) {
        assert_string_equal(b->ranks[r].worker->node_name, b->ranks[0].worker->node_name);
        assert_int_equal(b->ranks[r].local_rank, r);
        assert_int_equal(b->ranks[r].group_rank, 0);
        assert_int_equal(b->ranks[r].local_world_size, 3);
    }
    /* 3 free in total: a 4-worker job waits with a reason */
    c = h_submit(&h, 4, 4, TIDE_PRIO_NORMAL);
    assert_int_equal(c->state, TIDE_JOB_PENDING);
    {
        char buf[200];
        assert_string_equal(tide_core_job_reason(h.core, c, buf, sizeof(buf)),
                            "waiting: needs 4 GPUs; largest fit is 3");
    }
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_placement_spreads_and_takes_up_to_max(void **state)
{
    h_t h;
    tide_job_t *a;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 2, 2);
    a = h_submit(&h, 3, 8, TIDE_PRIO_NORMAL);
    assert_int_equal(a->state, TIDE_JOB_RUNNING);
    assert_int_equal(a->n_ranks, 4);
    /* grouped by node, GPUs ascending */
    assert_int_equal(a->ranks[0].group_rank, 0);
    assert_int_equal(a->ranks[1].group_rank, 0);
    assert_int_equal(a->ranks[2].group_rank, 1);
    assert_int_equal(a->ranks[3].group_rank, 1);
    assert_int_equal(a->ranks[2].local_rank, 0);
    assert_int_equal(a->ranks[3].local_rank, 1);
    assert_int_equal(a->ranks[0].worker->gpu_index, 0);
    assert_int_equal(a->ranks[1].worker->gpu_index, 1);
    assert_int_equal(a->ranks[3].local_world_size, 2);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_lifecycle_success(void **state)
{
    h_t h;
    tide_job_t *job;
    const tide_action_t *a;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 2, 2);
    job = h_submit(&h, 4, 4, TIDE_PRIO_NORMAL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 1);
    /* rank 0 alone first, with no port */
    assert_int_equal(h_count(&h, TIDE_ACT_LAUNCH), 1);
    a = h_find(&h, TIDE_ACT_LAUNCH, NULL, 0);
    assert_non_null(a);
    assert_int_equal(a->master_port, 0);
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_JOB, NULL, -1));
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_META, NULL, -1));
    assert_non_null(h_find_event(&h, "job.submitted"));
    assert_non_null(h_find_event(&h, "job.started"));
    h_clear(&h);

    tide_core_rank_started(h.core, job->ranks[0].worker, job->id, 1, 0, 100, 29400);
    assert_int_equal(h_count(&h, TIDE_ACT_LAUNCH), 3);
    for (int r = 1; r < 4; r++) {
        a = h_find(&h, TIDE_ACT_LAUNCH, NULL, r);
        assert_non_null(a);
        assert_int_equal(a->master_port, 29400);
        assert_ptr_equal(a->worker, job->ranks[r].worker);
    }
    assert_string_equal(job->master_addr, "127.0.0.1");
    h_start_all(&h);
    assert_int_equal(job->ranks_running, 4);
    assert_non_null(strstr(job->message, "running generation 1"));
    h_clear(&h);

    for (int r = 0; r < 4; r++) {
        assert_int_equal(job->state, TIDE_JOB_RUNNING);
        tide_core_rank_exited(h.core, job->ranks[r].worker, job->id, 1, r, 0, NULL);
        h_check_invariants(&h);
    }
    assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
    assert_int_equal(job->exit_code, 0);
    assert_int_equal(job->failed_rank, -1);
    assert_non_null(h_find_event(&h, "job.succeeded"));
    assert_int_equal(h.core->n_free, 4);
    h_fini(&h);
}

static void test_rank_failure_stops_the_others(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w2;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 4);
    job = h_submit(&h, 4, 4, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    w2 = job->ranks[2].worker;
    tide_core_rank_exited(h.core, w2, job->id, 1, 2, 3, NULL);
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_int_equal(job->exit_code, 3);
    assert_int_equal(job->failed_rank, 2);
    assert_non_null(strstr(job->message, "rank 2 on n1/gpu2 exited with code 3"));
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 3);
    assert_null(h_find(&h, TIDE_ACT_STOP, NULL, 2));
    /* the stopped ranks' workers stay busy until their exits arrive */
    assert_int_equal(h.core->n_free, 1);
    h_check_invariants(&h);
    for (int r = 0; r < 4; r++)
        if (r != 2)
            tide_core_rank_exited(h.core, tide_core_worker_find(h.core, job->ranks[r].worker_id),
                                  job->id, 1, r, 143, NULL);
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_int_equal(job->exit_code, 3);
    assert_int_equal(h.core->n_free, 4);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_spawn_error_fails_job_with_reason(void **state)
{
    h_t h;
    tide_job_t *job;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    tide_core_rank_exited(h.core, job->ranks[0].worker, job->id, 1, 0, 127,
                          "spawn nosuch: no such file or directory");
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_non_null(strstr(job->message, "no such file"));
    /* rank 1 was never launched: its worker is free again at once */
    assert_int_equal(h.core->n_free, 2);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_cancel(void **state)
{
    h_t h;
    tide_job_t *run, *pend, *out = NULL;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    run = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    pend = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    assert_int_equal(pend->state, TIDE_JOB_PENDING);

    assert_int_equal(tide_core_job_cancel(h.core, pend->id, &out, &err), 0);
    assert_int_equal(pend->state, TIDE_JOB_CANCELLED);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    assert_int_equal(tide_core_job_cancel(h.core, run->id, &out, &err), 0);
    assert_int_equal(run->state, TIDE_JOB_CANCELLED);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 2);
    assert_int_equal(tide_core_job_cancel(h.core, run->id, &out, &err), -EALREADY);
    assert_non_null(strstr(err.text, "already ended: CANCELLED"));
    assert_int_equal(tide_core_job_cancel(h.core, "999", &out, &err), -ENOENT);
    assert_string_equal(err.text, "job 999 not found");
    /* The stopped ranks' exits still land in the ended job's record. */
    h_clear(&h);
    tide_core_rank_exited(h.core, tide_core_worker_find(h.core, run->ranks[1].worker_id),
                          run->id, run->generation, 1, 143, NULL);
    assert_int_equal(run->ranks[1].state, TIDE_RANK_EXITED);
    assert_int_equal(run->ranks[1].exit_code, 143);
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_JOB, NULL, -1));
    assert_int_equal(run->state, TIDE_JOB_CANCELLED);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_bad_specs(void **state)
{
    h_t h;
    tide_job_t *out = NULL;
    tide_error_t err;
    char *argv[] = {"x", NULL};
    char *empty[] = {"", NULL};
    tide_job_spec_t spec = {.argv = argv, .argc = 1, .min_workers = 2, .max_workers = 1};
    (void)state;
    h_init(&h, NULL);

    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    assert_string_equal(err.text, "max_workers (1) must be >= min_workers (2)");
    spec.min_workers = 0;
    spec.max_workers = 0;
    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    assert_string_equal(err.text, "min_workers must be >= 1 (got 0)");
    spec.min_workers = 1;
    spec.argc = 0;
    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    assert_string_equal(err.text, "command must not be empty");
    spec.argv = empty;
    spec.argc = 1;
    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    spec.argv = argv;
    spec.time_limit_s = -1;
    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    assert_non_null(strstr(err.text, "time_limit_seconds"));
    spec.time_limit_s = INT64_MAX / 1000 + 1; /* would overflow in milliseconds */
    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    assert_non_null(strstr(err.text, "time_limit_seconds must be <="));
    spec.time_limit_s = 0;
    spec.workdir = "relative/dir";
    assert_int_equal(tide_core_job_submit(h.core, &spec, &out, &err), -EINVAL);
    assert_string_equal(err.text, "workdir \"relative/dir\" must be an absolute path");
    spec.workdir = NULL;
    /* nothing changed */
    assert_null(tide_core_job_next(h.core, NULL));
    assert_int_equal(tide_core_next_seq(h.core), 1);
    {
        size_t n;
        tide_core_actions(h.core, &n);
        assert_int_equal(n, 0);
    }
    h_fini(&h);
}

static void test_time_limit(void **state)
{
    h_t h;
    tide_job_t *job;
    char *argv[] = {"sleep", "100", NULL};
    tide_job_spec_t spec = {.argv = argv, .argc = 2, .min_workers = 1, .time_limit_s = 10};
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 1);
    assert_int_equal(tide_core_job_submit(h.core, &spec, &job, &err), 0);
    h_start_all(&h);
    h_advance_alive(&h, 9500, NULL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_advance_alive(&h, 500, NULL);
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_string_equal(job->message, "time limit of 10s reached");
    assert_non_null(h_find(&h, TIDE_ACT_STOP, "n1/gpu0", 0));
    assert_true(job->gpu_seconds >= 10.0 && job->gpu_seconds < 10.6);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_worker_death_fails_job(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    w = job->ranks[1].worker;

    h_advance_alive(&h, 1000, w->id);
    assert_int_equal(w->state, TIDE_WORKER_SUSPECT);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_non_null(h_find_event(&h, "worker.suspect"));
    h_advance_alive(&h, 500, w->id);
    assert_int_equal(w->state, TIDE_WORKER_DEAD);
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_int_equal(job->failed_rank, 1);
    assert_non_null(strstr(job->message, "worker n1/gpu1 died (no heartbeat for 1500ms)"));
    /* a silent but connected worker has its stream closed so that it re-registers */
    assert_non_null(h_find(&h, TIDE_ACT_CLOSE_STREAM, w->id, -1));
    assert_non_null(h_find(&h, TIDE_ACT_STOP, "n1/gpu0", 0));
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_suspect_worker_recovers(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 1);
    job = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    w = job->ranks[0].worker;
    h_advance(&h, 1200);
    assert_int_equal(w->state, TIDE_WORKER_SUSPECT);
    tide_core_worker_heartbeat(h.core, w, NULL);
    assert_int_equal(w->state, TIDE_WORKER_BUSY);
    assert_non_null(h_find_event(&h, "worker.recovered"));
    h_advance_alive(&h, 5000, NULL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_disconnect_then_reconnect_keeps_rank(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w, *w2;
    static int conn2;
    tide_worker_info_t info = {.id = "n1/gpu0", .node = "n1", .device = "sim:h100",
                               .address = "127.0.0.1"};
    tide_rank_report_t rep;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 1);
    job = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    w = job->ranks[0].worker;
    tide_core_worker_disconnected(h.core, w, w->conn, false);
    assert_int_equal(w->state, TIDE_WORKER_SUSPECT);
    h_advance(&h, 300);
    rep = (tide_rank_report_t){.job_id = job->id, .generation = 1, .rank = 0, .running = true, .pid = 1000};
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn2, &rep, 1, &w2, &err), 0);
    assert_ptr_equal(w, w2);
    assert_int_equal(w->state, TIDE_WORKER_BUSY);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_LAUNCH), 0);
    assert_non_null(h_find(&h, TIDE_ACT_WELCOME, w->id, -1));
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_reregister_without_rank_loses_it(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w, *w2;
    static int conn2;
    tide_worker_info_t info = {.id = "n1/gpu1", .node = "n1", .gpu_index = 1, .device = "sim:h100",
                               .address = "127.0.0.1"};
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    w = job->ranks[1].worker;
    /* the worker restarted (it killed its leftovers) and registers on a new stream */
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn2, NULL, 0, &w2, &err), 0);
    assert_ptr_equal(w, w2);
    assert_non_null(h_find(&h, TIDE_ACT_CLOSE_STREAM, w->id, -1));
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_non_null(strstr(job->message, "re-registered without rank 1"));
    assert_int_equal(w->state, TIDE_WORKER_READY);
    h_check_invariants(&h);
    h_fini(&h);
}

/* KB7 (tests/dst/README.md): a hello delayed on a stream the agent gave up arrives after its newer
 * stream's hello. It must change nothing: the rank started since stays the worker's. */
static void test_superseded_hello_is_refused(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w, *w2 = NULL;
    static int conn_old, conn_new, conn_restart;
    tide_worker_info_t info = {.id = "n1/gpu1", .node = "n1", .gpu_index = 1, .device = "sim:h100",
                               .address = "127.0.0.1", .boot_id = 5, .stream_seq = 3};
    tide_rank_report_t rep;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    w = job->ranks[1].worker;
    rep = (tide_rank_report_t){.job_id = job->id, .generation = 1, .rank = 1, .running = true, .pid = 1001};
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn_new, &rep, 1, &w2, &err), 0);
    assert_ptr_equal(w, w2);
    h_clear(&h);

    /* stream 2 of the same process, and stream 9 of its previous process: both older */
    info.stream_seq = 2;
    w2 = NULL;
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn_old, NULL, 0, &w2, &err), -ESTALE);
    assert_null(w2);
    assert_non_null(
        strstr(err.text, "stream_seq 2: older than the registered stream (boot_id 5 stream_seq 3)"));
    info.boot_id = 4;
    info.stream_seq = 9;
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn_old, NULL, 0, &w2, &err), -ESTALE);
    assert_int_equal(h_count(&h, TIDE_ACT_CLOSE_STREAM), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_WELCOME), 0);
    assert_ptr_equal(w->conn, &conn_new);
    assert_true(w->connected);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->ranks[1].state, TIDE_RANK_RUNNING);
    assert_ptr_equal(job->ranks[1].worker, w);

    /* a hello that does not say (an older agent) is taken as before, and so is any hello once the
     * worker is DEAD (its ranks are written off) */
    info.boot_id = 0;
    info.stream_seq = 0;
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn_old, &rep, 1, &w2, &err), 0);
    assert_ptr_equal(w->conn, &conn_old);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);

    /* the agent restarted (its ranks were killed): a later boot registers, the rank is lost */
    info.boot_id = 6;
    info.stream_seq = 1;
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn_restart, NULL, 0, &w2, &err), 0);
    assert_ptr_equal(w->conn, &conn_restart);
    assert_non_null(strstr(job->message, "re-registered without rank 1"));
    tide_core_worker_disconnected(h.core, w, w->conn, false);
    h_advance(&h, 60000);
    assert_int_equal(w->state, TIDE_WORKER_DEAD);
    info.boot_id = 5;
    info.stream_seq = 1;
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn_old, NULL, 0, &w2, &err), 0);
    assert_int_equal(w->boot_id, 5);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_unknown_rank_is_stopped(void **state)
{
    h_t h;
    tide_worker_t *w;
    static int conn;
    tide_worker_info_t info = {.id = "n1/gpu0", .node = "n1", .device = "sim:h100"};
    tide_rank_report_t rep = {.job_id = "77", .generation = 2, .rank = 0, .running = true};
    tide_error_t err;
    const tide_action_t *a;
    (void)state;
    h_init(&h, NULL);
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn, &rep, 1, &w, &err), 0);
    a = h_find(&h, TIDE_ACT_STOP, "n1/gpu0", 0);
    assert_non_null(a);
    assert_string_equal(a->job_id, "77");
    assert_int_equal(a->generation, 2);
    assert_int_equal(w->state, TIDE_WORKER_READY);
    info.id = "";
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn, NULL, 0, &w, &err), -EINVAL);
    assert_string_equal(err.text, "worker_id must not be empty");
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_launch_timeout_rolls_back(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *first;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 3);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    first = job->ranks[0].worker;
    h_clear(&h);
    h_advance_alive(&h, 30000, NULL);
    /* rolled back; never two generations at once: it waits for rank 0 of generation 1 to stop */
    assert_non_null(h_find_event(&h, "job.rolled_back"));
    assert_non_null(h_find(&h, TIDE_ACT_STOP, first->id, 0));
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_int_equal(job->rollbacks, 1);
    assert_ptr_equal(first->job, job);
    {
        char buf[200];
        assert_string_equal(tide_core_job_reason(h.core, job, buf, sizeof(buf)),
                            "waiting for 1 rank of generation 1 to stop");
    }
    h_check_invariants(&h);
    /* the old rank's exit frees its worker; generation 2 starts */
    tide_core_rank_exited(h.core, first, job->id, 1, 0, 143, NULL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, 2);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_rollbacks_are_bounded(void **state)
{
    h_t h;
    tide_job_t *job;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 1);
    job = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    for (int i = 0; i < 4 && job->state != TIDE_JOB_FAILED; i++) {
        tide_worker_t *w = tide_core_worker_find(h.core, "n1/gpu0");
        h_clear(&h); /* the shell sent the LAUNCH (one not sent yet would be taken back by a rollback) */
        h_advance_alive(&h, 30000, NULL);
        if (w->job) /* the rolled-back rank's exit frees the worker */
            tide_core_rank_exited(h.core, w, job->id, w->generation, 0, 143, NULL);
    }
    assert_int_equal(job->state, TIDE_JOB_FAILED);
    assert_non_null(strstr(job->message, "failed to start"));
    h_check_invariants(&h);
    h_fini(&h);
}

/* A LAUNCH the shell has not been handed yet (same core call) is taken back when its generation ends in
 * that call: no STOP for a rank that never ran (the worker would ignore it and stay bound), the worker is
 * free at once, and the shell never reads the freed ranks. Once handed, a STOP is due as before. */
static void test_launch_taken_back_in_the_same_call(void **state)
{
    h_t h;
    tide_job_t *job;
    tide_worker_t *w;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 1);
    w = tide_core_worker_find(h.core, "n1/gpu0");
    h_clear(&h);
    job = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    assert_int_equal(h_count(&h, TIDE_ACT_LAUNCH), 1);
    assert_int_equal(tide_core_job_cancel(h.core, job->id, &job, &err), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_LAUNCH), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    assert_null(w->job);
    assert_int_equal(w->state, TIDE_WORKER_READY);
    h_check_invariants(&h);

    h_clear(&h);
    job = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    h_clear(&h); /* handed to the shell */
    assert_int_equal(tide_core_job_cancel(h.core, job->id, &job, &err), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 1);
    assert_ptr_equal(w->job, job); /* bound until the exit */
    tide_core_rank_exited(h.core, w, job->id, job->generation, 0, 143, NULL);
    assert_null(w->job);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_priority_order(void **state)
{
    h_t h;
    tide_job_t *hold, *low, *high, *crit;
    tide_core_config_t cfg;
    (void)state;
    tide_core_config_default(&cfg);
    cfg.preemption = false; /* order alone (preemption has its own tests) */
    h_init(&h, &cfg);
    cluster(&h, 1, 1);
    hold = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    low = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    high = h_submit(&h, 1, 1, TIDE_PRIO_HIGH);
    crit = h_submit(&h, 1, 1, TIDE_PRIO_CRITICAL);
    h_start_all(&h);
    tide_core_rank_exited(h.core, hold->ranks[0].worker, hold->id, 1, 0, 0, NULL);
    assert_int_equal(crit->state, TIDE_JOB_RUNNING);
    assert_int_equal(high->state, TIDE_JOB_PENDING);
    assert_int_equal(low->state, TIDE_JOB_PENDING);
    {
        char buf[200];
        assert_string_equal(tide_core_job_reason(h.core, high, buf, sizeof(buf)),
                            "waiting: needs 1 GPU; largest fit is 0");
        assert_string_equal(tide_core_job_reason(h.core, low, buf, sizeof(buf)),
                            "queued behind job 3 (HIGH), which waits for the same GPUs");
    }
    h_start_all(&h);
    tide_core_rank_exited(h.core, crit->ranks[0].worker, crit->id, 1, 0, 0, NULL);
    assert_int_equal(high->state, TIDE_JOB_RUNNING);
    assert_int_equal(low->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_job_too_big_does_not_block(void **state)
{
    h_t h;
    tide_job_t *big, *small;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    big = h_submit(&h, 8, 8, TIDE_PRIO_CRITICAL);
    small = h_submit(&h, 1, 1, TIDE_PRIO_LOW);
    assert_int_equal(big->state, TIDE_JOB_PENDING);
    {
        char buf[200];
        assert_string_equal(tide_core_job_reason(h.core, big, buf, sizeof(buf)),
                            "waiting: needs 8 GPUs; the largest usable fit is 2");
    }
    assert_int_equal(small->state, TIDE_JOB_RUNNING);
    h_fini(&h);
}

static void test_cordon(void **state)
{
    h_t h;
    tide_worker_t *w;
    tide_job_t *job;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    assert_int_equal(tide_core_worker_cordon(h.core, "n1/gpu0", true, &w, &err), 0);
    assert_non_null(h_find(&h, TIDE_ACT_PERSIST_WORKER, "n1/gpu0", -1));
    job = h_submit(&h, 1, 2, TIDE_PRIO_NORMAL);
    assert_int_equal(job->n_ranks, 1);
    assert_string_equal(job->ranks[0].worker_id, "n1/gpu1");
    assert_int_equal(tide_core_worker_cordon(h.core, "nope", true, &w, &err), -ENOENT);
    assert_string_equal(err.text, "worker nope not found");
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_retention_prunes_finished_jobs(void **state)
{
    tide_core_config_t cfg;
    h_t h;
    tide_job_t *job;
    char id[16];
    (void)state;
    tide_core_config_default(&cfg);
    cfg.retention_ms = 60000;
    h_init(&h, &cfg);
    cluster(&h, 1, 1);
    job = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    snprintf(id, sizeof(id), "%s", job->id);
    h_start_all(&h);
    tide_core_rank_exited(h.core, job->ranks[0].worker, job->id, 1, 0, 0, NULL);
    h_clear(&h);
    h_advance_alive(&h, 59500, NULL);
    assert_non_null(tide_core_job_find(h.core, id));
    h_advance_alive(&h, 500, NULL);
    assert_null(tide_core_job_find(h.core, id));
    assert_non_null(h_find(&h, TIDE_ACT_DELETE_JOB, NULL, -1));
    assert_string_equal(h_find(&h, TIDE_ACT_DELETE_JOB, NULL, -1)->job_id, id);
    h_check_invariants(&h);
    h_fini(&h);
}

/* Restart: build records from one core's state, restore them into a second. */
static tide_job_record_t record_of(const tide_job_t *job, const char **ids, tide_rank_state_t *st,
                                   int32_t *codes, int32_t *local, int32_t *group)
{
    for (int32_t r = 0; r < job->n_ranks; r++) {
        ids[r] = job->ranks[r].worker_id;
        st[r] = job->ranks[r].state;
        codes[r] = job->ranks[r].exit_code;
        local[r] = job->ranks[r].local_rank;
        group[r] = job->ranks[r].group_rank;
    }
    return (tide_job_record_t){.id = job->id, .spec = &job->spec, .state = job->state,
                               .generation = job->generation, .worker_ids = ids,
                               .n_workers = job->n_ranks, .rank_states = st, .rank_exit_codes = codes,
                               .rank_local_ranks = local, .rank_group_ranks = group,
                               .master_addr = job->master_addr, .master_port = job->master_port,
                               .message = job->message, .submit_ms = job->submit_ms,
                               .start_ms = job->start_ms, .gen_start_ms = job->gen_start_ms,
                               .exit_code = job->exit_code, .failed_rank = job->failed_rank};
}

static void test_restart_adopts_running_ranks(void **state)
{
    h_t h1, h2;
    tide_job_t *job, *pend, *j2;
    const char *ids[4];
    tide_rank_state_t st[4];
    int32_t codes[4], local[4], group[4];
    tide_job_record_t rec;
    tide_error_t err;
    static int conns[4];
    (void)state;

    h_init(&h1, NULL);
    cluster(&h1, 2, 2);
    job = h_submit(&h1, 4, 4, TIDE_PRIO_NORMAL);
    pend = h_submit(&h1, 1, 1, TIDE_PRIO_NORMAL);
    h_start_all(&h1);

    h_init(&h2, NULL);
    rec = record_of(job, ids, st, codes, local, group);
    assert_int_equal(tide_core_job_restore(h2.core, &rec, &err), 0);
    rec = record_of(pend, ids, st, codes, local, group);
    assert_int_equal(tide_core_job_restore(h2.core, &rec, &err), 0);
    assert_int_equal(tide_core_job_restore(h2.core, &rec, &err), -EEXIST);
    tide_core_restore_done(h2.core);
    j2 = tide_core_job_find(h2.core, job->id);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    assert_int_equal(j2->awaiting, 4);
    assert_int_equal(tide_core_next_seq(h2.core), 3);
    h_check_invariants(&h2);

    for (int r = 0; r < 4; r++) {
        tide_worker_t *w;
        tide_worker_info_t info = {.id = job->ranks[r].worker_id,
                                   .node = job->ranks[r].worker->node_name,
                                   .gpu_index = job->ranks[r].worker->gpu_index, .device = "sim:h100",
                                   .address = "127.0.0.1"};
        tide_rank_report_t rep = {.job_id = job->id, .generation = 1, .rank = r, .running = true,
                                  .pid = 1000 + r, .master_port = r == 0 ? 29400 : 0};
        h_advance(&h2, 100);
        assert_int_equal(tide_core_worker_register(h2.core, &info, &conns[r], &rep, 1, &w, &err), 0);
        h_check_invariants(&h2);
    }
    assert_int_equal(h_count(&h2, TIDE_ACT_LAUNCH), 0);
    assert_int_equal(h_count(&h2, TIDE_ACT_STOP), 0);
    assert_non_null(h_find_event(&h2, "job.reconciled"));
    assert_int_equal(j2->awaiting, 0);
    assert_int_equal(j2->reconcile_deadline, 0);
    assert_int_equal(j2->ranks_running, 4);
    h_advance_alive(&h2, 40000, NULL);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h2);
    h_fini(&h1);
    h_fini(&h2);
}

static void test_restart_fails_job_when_worker_stays_away(void **state)
{
    h_t h1, h2;
    tide_job_t *job, *j2;
    const char *ids[2];
    tide_rank_state_t st[2];
    int32_t codes[2], local[2], group[2];
    tide_job_record_t rec;
    tide_error_t err;
    tide_worker_t *w;
    static int conn;
    (void)state;

    h_init(&h1, NULL);
    cluster(&h1, 1, 2);
    job = h_submit(&h1, 2, 2, TIDE_PRIO_NORMAL);
    h_start_all(&h1);
    h_init(&h2, NULL);
    rec = record_of(job, ids, st, codes, local, group);
    assert_int_equal(tide_core_job_restore(h2.core, &rec, &err), 0);
    tide_core_restore_done(h2.core);
    j2 = tide_core_job_find(h2.core, job->id);
    {
        tide_worker_info_t info = {.id = "n1/gpu0", .node = "n1", .device = "sim:h100"};
        tide_rank_report_t rep = {.job_id = job->id, .generation = 1, .rank = 0, .running = true};
        assert_int_equal(tide_core_worker_register(h2.core, &info, &conn, &rep, 1, &w, &err), 0);
    }
    h_advance_alive(&h2, 29500, NULL);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    h_advance_alive(&h2, 500, NULL);
    assert_int_equal(j2->state, TIDE_JOB_FAILED);
    assert_non_null(strstr(j2->message, "did not re-register within 30s"));
    assert_non_null(h_find(&h2, TIDE_ACT_STOP, "n1/gpu0", 0));
    assert_int_equal(tide_core_worker_find(h2.core, "n1/gpu1")->state, TIDE_WORKER_DEAD);
    h_check_invariants(&h2);
    h_fini(&h1);
    h_fini(&h2);
}

static void test_restart_mid_start_resumes_launches(void **state)
{
    h_t h1, h2;
    tide_job_t *job, *j2;
    const char *ids[2];
    tide_rank_state_t st[2];
    int32_t codes[2], local[2], group[2];
    tide_job_record_t rec;
    tide_error_t err;
    tide_worker_t *w;
    static int conns[2];
    (void)state;

    /* crash after rank 0 was launched, before it reported its port */
    h_init(&h1, NULL);
    cluster(&h1, 1, 2);
    job = h_submit(&h1, 2, 2, TIDE_PRIO_NORMAL);
    h_init(&h2, NULL);
    rec = record_of(job, ids, st, codes, local, group);
    assert_int_equal(tide_core_job_restore(h2.core, &rec, &err), 0);
    tide_core_restore_done(h2.core);
    j2 = tide_core_job_find(h2.core, job->id);
    {
        tide_worker_info_t info = {.id = "n1/gpu1", .node = "n1", .gpu_index = 1, .device = "d"};
        assert_int_equal(tide_core_worker_register(h2.core, &info, &conns[1], NULL, 0, &w, &err), 0);
        assert_int_equal(h_count(&h2, TIDE_ACT_LAUNCH), 0); /* rank 1 waits for rank 0's port */
    }
    {
        tide_worker_info_t info = {.id = "n1/gpu0", .node = "n1", .device = "d"};
        tide_rank_report_t rep = {.job_id = job->id, .generation = 1, .rank = 0, .running = true,
                                  .master_port = 29411};
        assert_int_equal(tide_core_worker_register(h2.core, &info, &conns[0], &rep, 1, &w, &err), 0);
    }
    assert_non_null(h_find(&h2, TIDE_ACT_LAUNCH, "n1/gpu1", 1));
    assert_int_equal(h_find(&h2, TIDE_ACT_LAUNCH, "n1/gpu1", 1)->master_port, 29411);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h2);
    h_fini(&h1);
    h_fini(&h2);
}

static void test_repeated_exit_reports_are_harmless(void **state)
{
    h_t h;
    tide_job_t *job, *next;
    tide_worker_t *w;
    static int conn2;
    tide_worker_info_t info = {.id = "n1/gpu0", .node = "n1", .device = "sim:h100"};
    tide_rank_report_t rep;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 1);
    job = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    tide_core_rank_exited(h.core, job->ranks[0].worker, job->id, 1, 0, 0, NULL);
    assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
    next = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    /* The worker reconnects and repeats the old exit (its RankExited may have been lost). */
    rep = (tide_rank_report_t){.job_id = job->id, .generation = 1, .rank = 0, .running = false};
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn2, &rep, 1, &w, &err), 0);
    assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
    /* ...without mentioning the rank it runs now: that one is lost, the old exit changes nothing */
    assert_int_equal(next->state, TIDE_JOB_FAILED);
    assert_non_null(strstr(next->message, "re-registered without rank 0"));
    h_check_invariants(&h);
    h_fini(&h);
}

/* A rank's RankStarted is lost; its exit arrives: the generation counts as started and the launch
 * deadline is gone (it used to stay armed in the past and spin the tick forever). */
static void test_exit_without_start_report(void **state)
{
    h_t h;
    tide_job_t *job;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    tide_core_rank_started(h.core, job->ranks[0].worker, job->id, 1, 0, 10, 29400);
    h_clear(&h);
    tide_core_rank_exited(h.core, job->ranks[1].worker, job->id, 1, 1, 0, NULL);
    assert_int_equal(job->ranks_unstarted, 0);
    assert_int_equal(job->launch_deadline, 0);
    h_advance_alive(&h, 31000, NULL); /* past the launch timeout: must return */
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_true(tide_core_next_deadline(h.core) > h.mono);
    tide_core_rank_exited(h.core, job->ranks[0].worker, job->id, 1, 0, 0, NULL);
    assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A job whose rank is still being stopped is not pruned under its worker (it used to be freed while the
 * worker pointed at it). */
static void test_prune_waits_for_stopping_ranks(void **state)
{
    tide_core_config_t cfg;
    h_t h;
    tide_job_t *job, *out;
    tide_worker_t *w;
    tide_error_t err;
    char id[16];
    (void)state;
    tide_core_config_default(&cfg);
    cfg.retention_ms = 1000;
    h_init(&h, &cfg);
    cluster(&h, 1, 1);
    job = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    snprintf(id, sizeof(id), "%s", job->id);
    h_start_all(&h);
    w = job->ranks[0].worker;
    assert_int_equal(tide_core_job_cancel(h.core, id, &out, &err), 0);
    h_advance_alive(&h, 5000, NULL); /* the rank ignores SIGTERM for a while */
    assert_non_null(tide_core_job_find(h.core, id));
    assert_ptr_equal(w->job, job);
    assert_int_equal(w->state, TIDE_WORKER_BUSY);
    h_check_invariants(&h);
    tide_core_rank_exited(h.core, w, id, 1, 0, 137, NULL);
    assert_null(w->job);
    h_advance_alive(&h, 61000, NULL);
    assert_null(tide_core_job_find(h.core, id));
    h_check_invariants(&h);
    h_fini(&h);
}

/* A worker that comes back still running a rank nobody wants is not given a new rank until that one
 * has exited (it used to be placed on at once, two ranks on one GPU). */
static void test_stale_rank_blocks_placement(void **state)
{
    h_t h;
    tide_job_t *a, *b, *out;
    tide_worker_t *w, *w2;
    static int conn2;
    tide_worker_info_t info = {.id = "n1/gpu0", .node = "n1", .device = "sim:h100"};
    tide_rank_report_t rep;
    tide_error_t err;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 1);
    a = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    h_start_all(&h);
    w = a->ranks[0].worker;
    tide_core_worker_disconnected(h.core, w, w->conn, false);
    assert_int_equal(tide_core_job_cancel(h.core, a->id, &out, &err), 0); /* released: not reachable */
    b = h_submit(&h, 1, 1, TIDE_PRIO_NORMAL);
    assert_int_equal(b->state, TIDE_JOB_PENDING);
    h_clear(&h);
    rep = (tide_rank_report_t){.job_id = a->id, .generation = 1, .rank = 0, .running = true, .pid = 5};
    assert_int_equal(tide_core_worker_register(h.core, &info, &conn2, &rep, 1, &w2, &err), 0);
    assert_non_null(h_find(&h, TIDE_ACT_STOP, "n1/gpu0", 0));
    assert_null(h_find(&h, TIDE_ACT_LAUNCH, NULL, -1));
    assert_int_equal(b->state, TIDE_JOB_PENDING);
    h_check_invariants(&h);
    tide_core_rank_exited(h.core, w2, a->id, 1, 0, 143, NULL);
    assert_int_equal(b->state, TIDE_JOB_RUNNING);
    h_check_invariants(&h);
    /* a stale rank that a later hello no longer lists is gone too */
    h_fini(&h);
}

static void test_bad_master_port_rolls_back(void **state)
{
    h_t h;
    tide_job_t *job;
    (void)state;
    h_init(&h, NULL);
    cluster(&h, 1, 2);
    job = h_submit(&h, 2, 2, TIDE_PRIO_NORMAL);
    tide_core_rank_started(h.core, job->ranks[0].worker, job->id, 1, 0, 10, 0);
    assert_non_null(h_find_event(&h, "job.rolled_back"));
    assert_non_null(strstr(h_find_event(&h, "job.rolled_back")->text, "MASTER_PORT 0, not a TCP port"));
    assert_int_equal(job->state, TIDE_JOB_PENDING); /* rank 0's worker is still stopping it */
    assert_null(h_find(&h, TIDE_ACT_LAUNCH, NULL, 1));
    h_check_invariants(&h);
    h_fini(&h);
}

static void test_liveness_grace_after_a_stall(void **state)
{
    h_t h;
    tide_worker_t *w;
    (void)state;
    h_init(&h, NULL);
    w = h_register(&h, "a/gpu0", "a", 0);
    h.mono += 5000; /* the shell was stuck for 5 s: it read no heartbeat */
    tide_core_set_time(h.core, h.mono, H_WALL0 + h.mono);
    tide_core_liveness_grace(h.core, 5000);
    tide_core_tick(h.core);
    assert_int_equal(w->state, TIDE_WORKER_READY);
    h_advance(&h, 1500);
    assert_int_equal(w->state, TIDE_WORKER_DEAD); /* still silent afterwards: dead as usual */
    h_fini(&h);
}

static void test_goodbye_is_dead_at_once(void **state)
{
    h_t h;
    tide_worker_t *w;
    (void)state;
    h_init(&h, NULL);
    w = h_register(&h, "a/gpu0", "a", 0);
    tide_core_worker_disconnected(h.core, w, w->conn, true);
    assert_int_equal(w->state, TIDE_WORKER_DEAD);
    assert_int_equal(h.core->n_free, 0);
    h_check_invariants(&h);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placement_prefers_one_node),
        cmocka_unit_test(test_placement_spreads_and_takes_up_to_max),
        cmocka_unit_test(test_lifecycle_success),
        cmocka_unit_test(test_rank_failure_stops_the_others),
        cmocka_unit_test(test_spawn_error_fails_job_with_reason),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_time_limit),
        cmocka_unit_test(test_worker_death_fails_job),
        cmocka_unit_test(test_suspect_worker_recovers),
        cmocka_unit_test(test_disconnect_then_reconnect_keeps_rank),
        cmocka_unit_test(test_reregister_without_rank_loses_it),
        cmocka_unit_test(test_superseded_hello_is_refused),
        cmocka_unit_test(test_unknown_rank_is_stopped),
        cmocka_unit_test(test_launch_timeout_rolls_back),
        cmocka_unit_test(test_rollbacks_are_bounded),
        cmocka_unit_test(test_launch_taken_back_in_the_same_call),
        cmocka_unit_test(test_priority_order),
        cmocka_unit_test(test_job_too_big_does_not_block),
        cmocka_unit_test(test_cordon),
        cmocka_unit_test(test_retention_prunes_finished_jobs),
        cmocka_unit_test(test_restart_adopts_running_ranks),
        cmocka_unit_test(test_restart_fails_job_when_worker_stays_away),
        cmocka_unit_test(test_restart_mid_start_resumes_launches),
        cmocka_unit_test(test_repeated_exit_reports_are_harmless),
        cmocka_unit_test(test_exit_without_start_report),
        cmocka_unit_test(test_prune_waits_for_stopping_ranks),
        cmocka_unit_test(test_stale_rank_blocks_placement),
        cmocka_unit_test(test_bad_master_port_rolls_back),
        cmocka_unit_test(test_liveness_grace_after_a_stall),
        cmocka_unit_test(test_goodbye_is_dead_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

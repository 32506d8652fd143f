/* Phase-aware burst lending in the scheduler core (docs/elastic.md, "Burst"; lending.c): when a job
 * with burst on reports a high-load phase, free workers are lent to it as slots after its ranks and
 * taken back after the phase. Covered: the first high phase only teaches, the enter hysteresis and
 * the cost gate, how many are lent and from where (free workers only, never the hot spares, nothing
 * into a shape a queued job waits for), no lending without detached tasks, started/exited routing
 * that never touches the job's state, the exit hysteresis and the dwell, exits releasing the
 * workers, a queued job taking them back, a generation's end (requeue, cancel, success, a resize)
 * stopping them, a lent worker's death and re-registration, lent slots in detached task pools (join
 * with no share, steal, orphans when they go, nothing more once taken back, a new process in the
 * slot starting afresh, refusals) and the counters. Every scenario checks the core's invariants and
 * the lending's bookkeeping (check()) after each step. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

#define DET    TIDE_TASK_DETACHED
#define LEN_MS 20000 /* the teaching high phase */

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("\"%s\" does not contain \"%s\"", s ? s : "(null)", part);
}

static tide_core_config_t config(void)
{
    tide_core_config_t cfg;
    tide_core_config_default(&cfg);
    cfg.burst_enter_ms = 2000;
    cfg.burst_exit_ms = 2000;
    cfg.burst_min_dwell_ms = 10000;
    cfg.burst_cost_factor = 2.0;
    cfg.burst_lend_cost_ms = 1000;
    return cfg;
}

/* The lending's bookkeeping (lending.c's invariants) on top of the core's own checks: per running
 * job, n_lent counts the lent slots with a worker and lent_workers those not being taken back, each
 * bound to its slot in the current generation; a job that is not running lends nothing; the lending
 * list holds exactly the jobs with n_lent > 0; lent_now is the sum of lent_workers; a worker bound
 * to a slot after the ranks of a running job's current generation is that slot's worker. */
static void check(h_t *h)
{
    tide_core_t *core = h->core;
    tide_job_t *job, *jtmp;
    tide_worker_t *w, *wtmp;
    int32_t lent_now = 0, lending = 0, listed = 0;
    tide_list_t *pos;

    h_check_invariants(h);
    HASH_ITER(hh, core->jobs, job, jtmp)
    {
        assert_true(job->lent_workers >= 0 && job->lent_workers <= job->n_lent);
        assert_true(job->n_lent <= job->max_lent || (job->max_lent == 0 && job->n_lent == 0));
        assert_int_equal(tide_list_linked(&job->lend_node), job->n_lent > 0 || job->burst_to > 0);
        lending += job->n_lent > 0 || job->burst_to > 0;
        lent_now += job->lent_workers;
        if (job->state != TIDE_JOB_RUNNING) {
            assert_int_equal(job->n_lent, 0);
            assert_int_equal(job->lent_workers, 0);
            continue;
        }
        assert_int_equal(job->max_lent,
                         job->spec.burst_percent > 0
                             ? (int32_t)((job->n_ranks * job->spec.burst_percent + 99) / 100)
                             : 0);
        {
            int32_t bound = 0, active = 0;
            for (int32_t r = job->n_ranks; r < job->n_ranks + job->max_lent; r++) {
                tide_job_rank_t *s = &job->ranks[r];
                if (!s->worker) {
                    assert_false(s->lent_stopping);
                    continue;
                }
                bound++;
                active += !s->lent_stopping;
                assert_ptr_equal(s->worker->job, job);
                assert_int_equal(s->worker->rank, r);
                assert_int_equal(s->worker->generation, job->generation);
                assert_true(s->state == TIDE_RANK_LAUNCHED || s->state == TIDE_RANK_RUNNING);
            }
            assert_int_equal(bound, job->n_lent);
            assert_int_equal(active, job->lent_workers);
        }
    }
    tide_list_for_each(pos, &core->lending) listed++;
    assert_int_equal(listed, lending);
    assert_int_equal(lent_now, core->burst_stats.lent_now);
    HASH_ITER(hh, core->workers, w, wtmp)
    {
        tide_job_t *j = w->job;
        if (!j || j->state != TIDE_JOB_RUNNING || w->generation != j->generation ||
            w->rank < j->n_ranks)
            continue;
        assert_true(w->rank < j->n_ranks + j->max_lent);
        assert_ptr_equal(j->ranks[w->rank].worker, w);
    }
}

static tide_job_t *run_spec(h_t *h, const tide_job_spec_t *spec)
{
    tide_job_t *job = h_submit_spec(h, spec);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_start_all(h);
    assert_int_equal(job->ranks_running, job->n_ranks);
    h_clear(h);
    check(h);
    return job;
}

/* A running job of n ranks with burst pct (0: off). */
static tide_job_t *run(h_t *h, int n, int pct)
{
    tide_job_spec_t spec = h_spec(n, n, TIDE_PRIO_NORMAL);
    spec.burst_percent = pct;
    return run_spec(h, &spec);
}

static tide_error_t err;

static int declare(h_t *h, tide_job_t *job, int r, tide_task_kind_t kind, int64_t step,
                   const uint64_t *ids, size_t n, uint64_t total)
{
    memset(&err, 0, sizeof(err));
    return tide_core_tasks_declared(h->core, job->ranks[r].worker, job->id, job->generation, r,
                                    kind, step, ids, n, total, &err);
}

static int steal(h_t *h, tide_job_t *job, int r, int64_t step, uint64_t steal_id)
{
    memset(&err, 0, sizeof(err));
    return tide_core_steal_request(h->core, job->ranks[r].worker, job->id, job->generation, r, DET,
                                   step, steal_id, &err);
}

static int done(h_t *h, tide_job_t *job, int r, int64_t step, const uint64_t *ids, size_t n,
                uint32_t queued)
{
    memset(&err, 0, sizeof(err));
    return tide_core_tasks_done(h->core, job->ranks[r].worker, job->id, job->generation, r, DET,
                                step, ids, n, queued, &err);
}

static int released(h_t *h, tide_job_t *job, int r, int64_t step, uint64_t release_id,
                    const uint64_t *ids, size_t n, uint32_t queued)
{
    memset(&err, 0, sizeof(err));
    return tide_core_tasks_released(h->core, job->ranks[r].worker, job->id, job->generation, r, DET,
                                    step, release_id, ids, n, queued, &err);
}

static int32_t holder(h_t *h, tide_job_t *job, int64_t step, uint64_t id)
{
    return tide_core_task_holder(h->core, job, DET, step, id);
}

/* Every rank declares step `step` of a detached pool: rank 0 holds ids, the others nothing. The job
 * has declared detached tasks from then on (burst may lend it workers). */
static void detached(h_t *h, tide_job_t *job, int64_t step, const uint64_t *ids, size_t n)
{
    for (int32_t r = 0; r < job->n_ranks; r++)
        assert_int_equal(declare(h, job, r, DET, step, r == 0 ? ids : NULL, r == 0 ? n : 0, n), 0);
    assert_true(job->detached_seen);
    h_clear(h);
}

/* LAUNCH actions for lent slots of job (rank >= n_ranks); each also checked for its job and
 * generation. */
static size_t lent_launches(h_t *h, const tide_job_t *job)
{
    size_t n, c = 0;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    for (size_t i = 0; i < n; i++) {
        if (a[i].type != TIDE_ACT_LAUNCH || a[i].job != job || a[i].rank < job->n_ranks)
            continue;
        assert_int_equal(a[i].generation, job->generation);
        assert_true(a[i].rank < job->n_ranks + job->max_lent);
        assert_ptr_equal(a[i].worker, job->ranks[a[i].rank].worker);
        c++;
    }
    return c;
}

/* STOP actions for job's lent slots (rank >= n_ranks; the ranks of an ended generation: any rank at
 * or after `first`). */
static size_t stops_from(h_t *h, const tide_job_t *job, int32_t first)
{
    size_t n, c = 0;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    for (size_t i = 0; i < n; i++)
        c += a[i].type == TIDE_ACT_STOP && a[i].job_id && strcmp(a[i].job_id, job->id) == 0 &&
             a[i].rank >= first;
    return c;
}

static void phase(h_t *h, tide_job_t *job, bool high)
{
    tide_core_job_load_phase(h->core, job, high);
    check(h);
}

/* The first high phase (LEN_MS long, nothing lent: it only teaches the controller how long high
 * phases last), then a normal one of gap ms. */
static void teach(h_t *h, tide_job_t *job, int64_t len, int64_t gap)
{
    phase(h, job, true);
    h_jump(h, h->core->cfg.burst_enter_ms);
    h_jump(h, len - h->core->cfg.burst_enter_ms);
    assert_int_equal(lent_launches(h, job), 0);
    assert_int_equal(job->n_lent, 0);
    phase(h, job, false);
    h_jump(h, gap);
    assert_int_equal(lent_launches(h, job), 0);
    h_clear(h);
    check(h);
}

/* teach, then a second high phase held for enter_ms: returns how many slots were launched. */
static size_t lend_now(h_t *h, tide_job_t *job)
{
    size_t n;
    teach(h, job, LEN_MS, 1000);
    phase(h, job, true);
    h_jump(h, h->core->cfg.burst_enter_ms);
    n = lent_launches(h, job);
    check(h);
    return n;
}

/* The workers of job's lent slots, in slot order, into ws (room for max_lent); returns the count.
 */
static int lent_of(const tide_job_t *job, tide_worker_t **ws)
{
    int n = 0;
    for (int32_t r = job->n_ranks; r < job->n_ranks + job->max_lent; r++)
        if (job->ranks[r].worker)
            ws[n++] = job->ranks[r].worker;
    return n;
}

static bool is_free(const tide_worker_t *w)
{
    return !w->job && w->state == TIDE_WORKER_READY && tide_list_linked(&w->free_node);
}

static int32_t n_free(h_t *h)
{
    return h->core->n_free;
}

/* --- when tide lends --- */

/* The first high phase only teaches (nothing to predict from); the second lends once it has been
 * high for enter_ms, not before; a first phase too short to pay for a lent worker's start lends
 * nothing. */
static void test_first_phase_teaches_second_lends(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[4] = {1, 2, 3, 4};
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    job = run(&h, 4, 50);
    assert_int_equal(job->max_lent, 2);
    detached(&h, job, 0, ids, 4);
    /* a long first high phase: nothing lent however long it lasts */
    phase(&h, job, true);
    assert_true(job->high_load);
    h_jump(&h, 2000);
    h_jump(&h, 30000);
    assert_int_equal(lent_launches(&h, job), 0);
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 0);
    phase(&h, job, false);
    assert_false(job->high_load);
    h_jump(&h, 5000);
    h_clear(&h);
    /* the second: not before enter_ms ... */
    phase(&h, job, true);
    h_jump(&h, 1999);
    assert_int_equal(lent_launches(&h, job), 0);
    assert_int_equal(job->n_lent, 0);
    /* ... then 2 of 4 ranks at 50 % */
    h_jump(&h, 1);
    assert_int_equal(lent_launches(&h, job), 2);
    assert_non_null(h_find(&h, TIDE_ACT_LAUNCH, NULL, 4));
    assert_non_null(h_find(&h, TIDE_ACT_LAUNCH, NULL, 5));
    assert_int_equal(h_count_event(&h, "job.burst_lent"), 1);
    assert_contains(h_event_text(&h, "job.burst_lent", 0), "2 burst worker(s) lent");
    assert_int_equal(job->n_lent, 2);
    assert_int_equal(job->lent_workers, 2);
    assert_int_equal(job->bursts, 1);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->ranks_running, 4);
    assert_int_equal(job->ranks_unstarted, 0);
    assert_int_equal(n_free(&h), 2);
    check(&h);
    /* nothing more while it stays high: the lending holds */
    h_clear(&h);
    h_jump(&h, 5000);
    assert_int_equal(lent_launches(&h, job), 0);
    assert_int_equal(job->n_lent, 2);
    h_fini(&h);

    /* a 3 s first phase predicts 1 s left after the 2 s hysteresis: under 2 x the 1 s start cost */
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 4);
    teach(&h, job, 3000, 1000);
    phase(&h, job, true);
    h_jump(&h, 2000);
    h_jump(&h, 1000);
    h_jump(&h, 10000);
    assert_int_equal(lent_launches(&h, job), 0);
    assert_int_equal(job->n_lent, 0);
    check(&h);
    h_fini(&h);
}

/* ceil(n x percent / 100) slots, at least 1; rank numbers after the ranks; only free workers. */
static void test_how_many_and_from_where(void **state)
{
    static const struct {
        int n, pct, nodes_free, want_slots, want_lent;
    } cases[] = {
        {4, 50, 4, 2, 2},  {5, 20, 4, 1, 1}, {3, 1, 4, 1, 1},  {3, 100, 1, 3, 1},
        {2, 100, 4, 2, 2}, {3, 50, 4, 2, 2}, {5, 30, 3, 2, 2},
    };
    uint64_t ids[2] = {7, 8};
    (void)state;

    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        h_t h;
        tide_core_config_t cfg = config();
        tide_job_t *job, *other;
        tide_worker_t *others[4], *lent[4];
        int n;
        h_init(&h, &cfg);
        /* the job, another job of 2 beside it, and nodes_free free workers */
        h_node(&h, "n1", cases[c].n + 2 + cases[c].nodes_free, NULL, 0, NULL);
        job = run(&h, cases[c].n, cases[c].pct);
        other = run(&h, 2, 0);
        others[0] = other->ranks[0].worker;
        others[1] = other->ranks[1].worker;
        assert_int_equal(job->max_lent, cases[c].want_slots);
        assert_int_equal(n_free(&h), cases[c].nodes_free);
        detached(&h, job, 0, ids, 2);
        assert_int_equal(lend_now(&h, job), (size_t)cases[c].want_lent);
        n = lent_of(job, lent);
        assert_int_equal(n, cases[c].want_lent);
        for (int i = 0; i < n; i++) {
            /* slot i is rank n_ranks + i, on a worker that was free: never the other job's */
            assert_ptr_equal(job->ranks[cases[c].n + i].worker, lent[i]);
            assert_ptr_equal(lent[i]->job, job);
            assert_int_equal(lent[i]->rank, cases[c].n + i);
            assert_ptr_not_equal(lent[i], others[0]);
            assert_ptr_not_equal(lent[i], others[1]);
            for (int32_t r = 0; r < cases[c].n; r++)
                assert_ptr_not_equal(lent[i], job->ranks[r].worker);
        }
        assert_ptr_equal(others[0]->job, other);
        assert_ptr_equal(others[1]->job, other);
        assert_int_equal(n_free(&h), cases[c].nodes_free - cases[c].want_lent);
        check(&h);
        h_fini(&h);
    }
}

/* The hot spares are never lent: 4 free, 2 of them spares, a job that could take 4 gets 2. */
static void test_never_the_hot_spares(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[2] = {1, 2};
    (void)state;

    cfg.reserve_gpus = 2;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    job = run(&h, 4, 100);
    assert_int_equal(h.core->reserve.spares, 2);
    assert_int_equal(job->max_lent, 4);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    assert_int_equal(job->n_lent, 2);
    assert_int_equal(n_free(&h), 2);
    /* still high: it keeps asking, and still leaves the spares */
    h_clear(&h);
    h_jump(&h, 5000);
    assert_int_equal(lent_launches(&h, job), 0);
    assert_int_equal(n_free(&h), 2);
    check(&h);
    h_fini(&h);
}

/* The same for a LOW job: LOW work may sit in the reserve when it is placed (it is preempted
 * first), but lending never takes the hot spares, whatever the class. */
static void test_never_the_hot_spares_low(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_job_spec_t spec = h_spec(4, 4, TIDE_PRIO_LOW);
    uint64_t ids[2] = {1, 2};
    (void)state;

    cfg.reserve_gpus = 2;
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    spec.burst_percent = 100;
    job = run_spec(&h, &spec);
    assert_int_equal(h.core->reserve.spares, 2);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    assert_int_equal(n_free(&h), 2);
    check(&h);
    h_fini(&h);
}

/* Nothing is lent to a job that never declared detached tasks (a job that does not use the SDK, or
 * whose tasks are member tasks), nor to a job with burst off. */
static void test_not_lent_without_detached_tasks(void **state)
{
    uint64_t ids[2] = {1, 2};
    (void)state;

    for (int c = 0; c < 3; c++) {
        h_t h;
        tide_core_config_t cfg = config();
        tide_job_t *job;
        h_init(&h, &cfg);
        h_node(&h, "n1", 8, NULL, 0, NULL);
        job = run(&h, 4, c == 2 ? 0 : 50);
        if (c == 1) {
            for (int32_t r = 0; r < 4; r++)
                assert_int_equal(declare(&h, job, r, TIDE_TASK_MEMBER, 0, r == 0 ? ids : NULL,
                                         r == 0 ? 2 : 0, 2),
                                 0);
            assert_false(job->detached_seen);
        }
        if (c == 2) {
            detached(&h, job, 0, ids, 2);
            assert_int_equal(job->max_lent, 0);
        }
        teach(&h, job, LEN_MS, 1000);
        phase(&h, job, true);
        assert_true(job->high_load);
        h_jump(&h, 2000);
        h_jump(&h, 5000);
        assert_int_equal(lent_launches(&h, job), 0);
        assert_int_equal(h_count_event(&h, "job.burst_lent"), 0);
        assert_int_equal(job->n_lent, 0);
        assert_int_equal(n_free(&h), 4);
        check(&h);
        h_fini(&h);
    }
}

/* Rank 0's progress drives the phase (through tide_core_rank_progress); another rank's does not. */
static void test_rank0_progress_drives_the_phase(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[2] = {1, 2};
    tide_trainer_progress_t hi = {.step = 1, .high_load = true, .load_reported = true},
                            lo = {.step = 2, .load_reported = true}, silent = {.step = 3};
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 2);
    /* rank 0 that has not reported a load yet says nothing about the phase (high_load false is no
     * "normal") */
    tide_core_rank_progress(h.core, job->ranks[0].worker, job->id, job->generation, 0, &silent);
    assert_null(job->burst);
    /* rank 1 says high: not the job's phase */
    tide_core_rank_progress(h.core, job->ranks[1].worker, job->id, job->generation, 1, &hi);
    assert_false(job->high_load);
    assert_null(job->burst);
    /* rank 0: a high phase, a normal one, a high one again */
    tide_core_rank_progress(h.core, job->ranks[0].worker, job->id, job->generation, 0, &hi);
    assert_true(job->high_load);
    h_jump(&h, LEN_MS);
    tide_core_rank_progress(h.core, job->ranks[0].worker, job->id, job->generation, 0, &lo);
    assert_false(job->high_load);
    h_jump(&h, 1000);
    tide_core_rank_progress(h.core, job->ranks[0].worker, job->id, job->generation, 0, &hi);
    /* the same report again changes nothing (no new phase) */
    h_jump(&h, 1000);
    tide_core_rank_progress(h.core, job->ranks[0].worker, job->id, job->generation, 0, &hi);
    assert_int_equal(lent_launches(&h, job), 0);
    h_jump(&h, 1000);
    assert_int_equal(lent_launches(&h, job), 2);
    assert_int_equal(job->n_lent, 2);
    check(&h);
    h_fini(&h);
}

/* --- lent workers while they run --- */

/* A lent slot's RankStarted / RankExited never change the job's state or its rank counts; its own
 * exit (code 1 included) does not fail the job and frees the worker; a slot that emptied is used
 * again. */
static void test_started_and_exited_routing(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job, *next;
    tide_worker_t *lent[2];
    uint64_t ids[2] = {1, 2};
    char id[16];
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    assert_int_equal(lent_of(job, lent), 2);
    assert_int_equal(job->ranks[4].state, TIDE_RANK_LAUNCHED);
    h_start_keep(&h);
    assert_int_equal(h_count_event(&h, "job.burst_started"), 2);
    assert_int_equal(h_count_event(&h, "rank.started"), 0);
    assert_int_equal(h_count_event(&h, "job.running"), 0);
    assert_int_equal(job->ranks[4].state, TIDE_RANK_RUNNING);
    assert_int_equal(job->ranks[5].state, TIDE_RANK_RUNNING);
    assert_int_equal(job->ranks[4].pid, 1004);
    assert_int_equal(job->ranks_running, 4);
    assert_int_equal(job->ranks_unstarted, 0);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_true(job->lend_cost_ms > 0);
    check(&h);
    /* a repeated RankStarted is a no-op */
    h_clear(&h);
    tide_core_rank_started(h.core, lent[0], job->id, job->generation, 4, 1004, 0);
    assert_int_equal(h_count_event(&h, "job.burst_started"), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    /* slot 4 exits by itself with code 1: the job runs on, the worker is free */
    snprintf(id, sizeof(id), "%s", job->id);
    tide_core_rank_exited(h.core, lent[0], id, job->generation, 4, 1, "burst process crashed");
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->ranks_running, 4);
    assert_int_equal(job->ranks_exited, 0);
    assert_int_equal(job->exit_code, 0);
    assert_int_equal(h_count_event(&h, "job.burst_exited"), 1);
    assert_contains(h_event_text(&h, "job.burst_exited", 0), "code 1");
    assert_int_equal(h_count_event(&h, "job.failed"), 0);
    assert_int_equal(h_count_event(&h, "rank.exited"), 0);
    assert_true(is_free(lent[0]));
    assert_null(job->ranks[4].worker);
    assert_int_equal(job->n_lent, 1);
    assert_int_equal(job->lent_workers, 1);
    assert_int_equal(h.core->burst_stats.lent_now, 1);
    check(&h);
    /* its exit reported again (a hello repeats it): a no-op */
    h_clear(&h);
    tide_core_rank_exited(h.core, lent[0], id, job->generation, 4, 1, NULL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->n_lent, 1);
    assert_true(is_free(lent[0]));
    check(&h);
    /* slot 5 exits with 0: no lent worker is left, but the lending lasts until the phase ends (a
     * burst command that fails is not launched again and again within one phase) */
    tide_core_rank_exited(h.core, lent[1], id, job->generation, 5, 0, NULL);
    assert_int_equal(job->n_lent, 0);
    assert_int_equal(h.core->burst_stats.lent_now, 0);
    assert_int_equal(n_free(&h), 2);
    check(&h);
    h_clear(&h);
    h_jump(&h, 1000);
    h_jump(&h, 5000);
    assert_int_equal(lent_launches(&h, job), 0);
    /* the phase ends (taken back: nothing to stop), the next one lends again, into slots 4 and 5 */
    phase(&h, job, false);
    h_jump(&h, 10000);
    assert_int_equal(stops_from(&h, job, 4), 0);
    assert_int_equal(h.core->burst_stats.reclaims, 1);
    phase(&h, job, true);
    h_clear(&h);
    h_jump(&h, 2000);
    assert_int_equal(lent_launches(&h, job), 2);
    assert_non_null(h_find(&h, TIDE_ACT_LAUNCH, NULL, 4));
    assert_non_null(h_find(&h, TIDE_ACT_LAUNCH, NULL, 5));
    assert_int_equal(job->bursts, 2);
    check(&h);
    h_start_all(&h);
    /* a new job of 2 can use the workers once the lent ones are gone (taken back below) */
    phase(&h, job, false);
    h_jump(&h, 10000);
    assert_int_equal(stops_from(&h, job, 4), 2);
    h_stop_all(&h);
    assert_int_equal(job->n_lent, 0);
    assert_int_equal(n_free(&h), 2);
    next = run(&h, 2, 0);
    assert_int_equal(next->state, TIDE_JOB_RUNNING);
    check(&h);
    h_fini(&h);
}

/* Taken back only when the phase has been normal for exit_ms AND the workers have been lent for the
 * dwell; a high phase again within the exit hysteresis keeps them. */
static void test_reclaim_hysteresis_and_dwell(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *lent[2];
    uint64_t ids[2] = {1, 2};
    int64_t lent_at;
    (void)state;

    /* dwell last: normal after 3 s, taken back at 10 s */
    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    lent_at = h.mono;
    h_start_all(&h);
    lent_of(job, lent);
    h_jump(&h, 3000);
    phase(&h, job, false);
    assert_int_equal(job->burst_check_at, lent_at + 10000); /* armed for the end of the dwell */
    h_jump(&h, 2000);
    h_jump(&h, 4999);
    assert_int_equal(stops_from(&h, job, 4), 0);
    assert_int_equal(job->lent_workers, 2);
    h_jump(&h, 1);
    assert_int_equal(stops_from(&h, job, 4), 2);
    assert_int_equal(stops_from(&h, job, 0), 2); /* the ranks run on */
    assert_int_equal(h_count_event(&h, "job.burst_reclaimed"), 1);
    assert_contains(h_event_text(&h, "job.burst_reclaimed", 0), "high-load phase ended");
    assert_int_equal(job->lent_workers, 0);
    assert_int_equal(job->n_lent, 2); /* bound until their exits */
    assert_true(job->ranks[4].lent_stopping);
    assert_ptr_equal(lent[0]->job, job);
    assert_int_equal(n_free(&h), 0);
    check(&h);
    /* the exits release them */
    assert_int_equal(h_stop_all(&h), 2);
    assert_int_equal(job->n_lent, 0);
    assert_true(is_free(lent[0]));
    assert_true(is_free(lent[1]));
    assert_int_equal(n_free(&h), 2);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->ranks_running, 4);
    check(&h);
    h_fini(&h);

    /* exit hysteresis last: high for 20 s, taken back 2 s after it ended; high again after 1 s of a
     * normal phase keeps them */
    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    h_jump(&h, 20000);
    phase(&h, job, false);
    assert_int_equal(job->burst_check_at,
                     h.mono + 2000); /* armed for the end of the exit hysteresis */
    h_jump(&h, 1000);
    phase(&h, job, true);
    assert_int_equal(job->burst_check_at,
                     0); /* high while lent: nothing to decide until it changes */
    h_jump(&h, 10000);
    assert_int_equal(stops_from(&h, job, 4), 0);
    assert_int_equal(job->lent_workers, 2);
    phase(&h, job, false);
    h_jump(&h, 1999);
    assert_int_equal(stops_from(&h, job, 4), 0);
    h_jump(&h, 1);
    assert_int_equal(stops_from(&h, job, 4), 2);
    assert_int_equal(job->lent_workers, 0);
    check(&h);
    /* a lent process told to stop that reports RankStarted late stays taken back */
    {
        tide_worker_t *w = job->ranks[4].worker;
        h_clear(&h);
        tide_core_rank_started(h.core, w, job->id, job->generation, 4, 77, 0);
        assert_true(job->ranks[4].lent_stopping);
        assert_int_equal(job->lent_workers, 0);
        assert_int_equal(h_count_event(&h, "job.burst_started"), 0);
        check(&h);
    }
    h_fini(&h);
}

/* A queued job that needs the shape gets the lent workers back at once; while a job waits for the
 * shape, nothing is lent into it. */
static void test_queued_job_takes_them_back(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job, *b, *c;
    tide_worker_t *lent[2];
    uint64_t ids[2] = {1, 2};
    tide_error_t e;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    lent_of(job, lent);
    assert_int_equal(n_free(&h), 0);
    /* B needs 2: queued, and the lent workers are taken back in the same call */
    {
        tide_job_spec_t spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
        b = h_submit_spec(&h, &spec);
    }
    assert_int_equal(b->state, TIDE_JOB_PENDING);
    assert_int_equal(stops_from(&h, job, 4), 2);
    assert_int_equal(h_count_event(&h, "job.burst_reclaimed"), 1);
    assert_contains(h_event_text(&h, "job.burst_reclaimed", 0), "queued job waits");
    assert_int_equal(job->lent_workers, 0);
    assert_true(job->high_load); /* still high: it is the queue that wins */
    check(&h);
    /* their exits: B runs on them */
    h_stop_all(&h);
    assert_int_equal(b->state, TIDE_JOB_RUNNING);
    assert_true(b->ranks[0].worker == lent[0] || b->ranks[0].worker == lent[1]);
    assert_true(b->ranks[1].worker == lent[0] || b->ranks[1].worker == lent[1]);
    assert_int_equal(job->n_lent, 0);
    check(&h);
    h_fini(&h);

    /* C waits for 6 of 8 (4 free): A's high phase lends nothing into the shape; once C is gone it
     * does */
    h_init(&h, &cfg);
    h_node(&h, "n1", 8, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 2);
    {
        tide_job_spec_t spec = h_spec(6, 6, TIDE_PRIO_NORMAL);
        c = h_submit_spec(&h, &spec);
    }
    assert_int_equal(c->state, TIDE_JOB_PENDING);
    h_clear(&h);
    assert_int_equal(lend_now(&h, job), 0);
    h_jump(&h, 3000);
    assert_int_equal(lent_launches(&h, job), 0);
    assert_int_equal(job->n_lent, 0);
    assert_int_equal(n_free(&h), 4);
    assert_int_equal(tide_core_job_cancel(h.core, c->id, &c, &e), 0);
    h_clear(&h);
    h_jump(&h, 1000); /* the next retry while high */
    assert_int_equal(lent_launches(&h, job), 2);
    check(&h);
    h_fini(&h);
}

/* The headroom reserve counts the free workers of every shape: a job that waits only for it gets back
 * what is lent in another shape (DST seed 1001670: lent on 40 GiB GPUs, the waiter needs 60 GiB), and
 * nothing is lent while one waits for it. 6 x 40 GiB a100 on n1, 2 x 80 GiB h100 on n2, a fixed reserve
 * of 3; A (2 ranks, a100) runs on n1; B needs 2 GPUs with >= 60 GiB (n2 only). */
static void test_reserve_waiter_takes_them_back(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job, *b;
    tide_job_spec_t spec;
    uint64_t ids[2] = {1, 2};
    tide_error_t e;
    (void)state;

    cfg.reserve_gpus = 3;
    h_init(&h, &cfg);
    h_node(&h, "n1", 6, "sim:a100", 40ULL << 30, NULL);
    h_node(&h, "n2", 2, "sim:h100", 80ULL << 30, NULL);
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.device = "a100";
    spec.burst_percent = 100;
    job = run_spec(&h, &spec);
    detached(&h, job, 0, ids, 2);
    /* 6 free, 3 kept: 2 lent on n1 */
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    assert_int_equal(n_free(&h), 4);
    /* B: n2's 2 GPUs are free, but 4 free less the reserve of 3 leaves 1: it waits for the reserve, and
     * what A borrowed on n1 comes back in the same call */
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.memory_per_rank = 60ULL << 30;
    b = h_submit_spec(&h, &spec);
    assert_int_equal(b->state, TIDE_JOB_PENDING);
    assert_int_equal(b->wait, TIDE_WAIT_RESERVE);
    assert_int_equal(stops_from(&h, job, 2), 2);
    assert_int_equal(h_count_event(&h, "job.burst_reclaimed"), 1);
    assert_int_equal(job->lent_workers, 0);
    check(&h);
    /* their exits: B runs on n2 */
    h_stop_all(&h);
    assert_int_equal(b->state, TIDE_JOB_RUNNING);
    assert_string_equal(b->ranks[0].worker->node_name, "n2");
    assert_string_equal(b->ranks[1].worker->node_name, "n2");
    assert_int_equal(job->n_lent, 0);
    check(&h);
    h_fini(&h);

    /* 4 x a100 on n1: B waits for the reserve before A's phase; A's high phase lends nothing (1 would
     * be free above the reserve), until B is gone */
    h_init(&h, &cfg);
    h_node(&h, "n1", 4, "sim:a100", 40ULL << 30, NULL);
    h_node(&h, "n2", 2, "sim:h100", 80ULL << 30, NULL);
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.device = "a100";
    spec.burst_percent = 100;
    job = run_spec(&h, &spec);
    detached(&h, job, 0, ids, 2);
    spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    spec.memory_per_rank = 60ULL << 30;
    b = h_submit_spec(&h, &spec);
    assert_int_equal(b->state, TIDE_JOB_PENDING);
    assert_int_equal(b->wait, TIDE_WAIT_RESERVE);
    h_clear(&h);
    assert_int_equal(lend_now(&h, job), 0);
    h_jump(&h, 3000);
    assert_int_equal(lent_launches(&h, job), 0);
    assert_int_equal(job->n_lent, 0);
    assert_int_equal(tide_core_job_cancel(h.core, b->id, &b, &e), 0);
    h_clear(&h);
    h_jump(&h, 1000); /* the next retry while high */
    assert_int_equal(lent_launches(&h, job), 1);
    check(&h);
    h_fini(&h);
}

/* --- a generation's end --- */

/* Requeue (a rank lost), cancel, success, a resize: lent workers are stopped with the ranks, stay
 * bound until their exits, and are free after them. */
static void test_generation_end_stops_them(void **state)
{
    uint64_t ids[2] = {1, 2};
    (void)state;

    for (int c = 0; c < 4; c++) {
        h_t h;
        tide_core_config_t cfg = config();
        tide_job_t *job;
        tide_worker_t *lent[2];
        tide_error_t e;
        tide_job_spec_t spec = h_spec(c == 3 ? 2 : 4, 4, TIDE_PRIO_NORMAL);
        int32_t gen;
        cfg.max_restarts = 1;
        h_init(&h, &cfg);
        h_node(&h, "n1", 6, NULL, 0, NULL);
        spec.burst_percent = 50;
        job = run_spec(&h, &spec);
        assert_int_equal(job->n_ranks, 4);
        detached(&h, job, 0, ids, 2);
        assert_int_equal(lend_now(&h, job), 2);
        h_start_all(&h);
        lent_of(job, lent);
        gen = job->generation;
        switch (c) {
        case 0: /* rank 1's worker fails: requeued */
            tide_core_worker_failed(h.core, job->ranks[1].worker, "test");
            assert_int_equal(job->state, TIDE_JOB_PENDING);
            assert_int_equal(h_count_event(&h, "job.requeued"), 1);
            break;
        case 1:
            assert_int_equal(tide_core_job_cancel(h.core, job->id, &job, &e), 0);
            assert_int_equal(job->state, TIDE_JOB_CANCELLED);
            break;
        case 2:
            h_exit_all(&h, job);
            assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
            break;
        default: /* a ScaleJob to 3: a new generation (no checkpoint to wait for: no SDK) */
            memset(&e, 0, sizeof(e));
            assert_int_equal(tide_core_job_scale(h.core, job->id, 3, false, &job, &e), 0);
            assert_int_equal(job->state, TIDE_JOB_PENDING);
            break;
        }
        /* every lent slot got a STOP of the generation that ends; both stay bound until their exits
         */
        {
            const tide_action_t *a4 = h_find(&h, TIDE_ACT_STOP, lent[0]->id, 4);
            const tide_action_t *a5 = h_find(&h, TIDE_ACT_STOP, lent[1]->id, 5);
            assert_non_null(a4);
            assert_non_null(a5);
            assert_int_equal(a4->generation, gen);
        }
        assert_int_equal(job->n_lent, 0);
        assert_int_equal(job->lent_workers, 0);
        assert_int_equal(h.core->burst_stats.lent_now, 0);
        assert_ptr_equal(lent[0]->job, job);
        assert_ptr_equal(lent[1]->job, job);
        assert_int_equal(lent[0]->generation, gen);
        check(&h);
        h_stop_all(&h);
        if (c == 0 || c == 3) {
            /* the next generation starts once the old ranks, lent ones included, exited */
            assert_int_equal(job->state, TIDE_JOB_RUNNING);
            assert_int_equal(job->generation, gen + 1);
            assert_int_equal(job->n_ranks, c == 3 ? 3 : 4);
            assert_int_equal(job->max_lent, 2);
            assert_int_equal(job->n_lent, 0);
            for (int i = 0; i < 2; i++)
                assert_true(is_free(lent[i]) ||
                            (lent[i]->job == job && lent[i]->rank < job->n_ranks));
            h_start_all(&h);
        } else {
            assert_true(is_free(lent[0]));
            assert_true(is_free(lent[1]));
            assert_int_equal(n_free(&h), 6);
        }
        check(&h);
        h_fini(&h);
    }
}

/* w registers again on a new stream, reporting (job, its generation, rank) running or exited (rank
 * < 0: nothing). Asserts success. */
static tide_worker_t *reregister(h_t *h, tide_worker_t *w, tide_job_t *job, int rank, bool running)
{
    static int tokens[64];
    static int next;
    tide_worker_info_t info = {.id = w->id,
                               .node = w->node_name,
                               .gpu_index = w->gpu_index,
                               .device = w->device,
                               .peak_flops = w->peak_flops,
                               .memory_bytes = w->memory_bytes,
                               .address = "127.0.0.1",
                               .version = "test"};
    tide_rank_report_t rep = {.job_id = job->id,
                              .generation = job->generation,
                              .rank = rank,
                              .running = running,
                              .pid = 1000 + rank,
                              .exit_code = running ? 0 : 143};
    tide_worker_t *out = NULL;
    tide_error_t e;
    char id[64], node[64], device[64];

    snprintf(id, sizeof(id), "%s", w->id);
    snprintf(node, sizeof(node), "%s", w->node_name);
    snprintf(device, sizeof(device), "%s", w->device);
    info.id = id;
    info.node = node;
    info.device = device;
    assert_int_equal(tide_core_worker_register(h->core, &info, &tokens[next++ % 64], &rep,
                                               rank >= 0 ? 1 : 0, &out, &e),
                     0);
    assert_ptr_equal(out, w);
    return out;
}

/* A lent worker's death frees its slot (job.burst_lost) and the job runs on; a re-registration
 * without its lent process does the same; one with it running keeps it lent; one taken back while
 * it had no stream is told to stop when it comes back. */
static void test_lent_worker_death_and_return(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_worker_t *lent[2];
    uint64_t ids[2] = {1, 2};
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    lent_of(job, lent);
    /* slot 4's worker dies */
    tide_core_worker_failed(h.core, lent[0], "test");
    assert_int_equal(h_count_event(&h, "job.burst_lost"), 1);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->ranks_running, 4);
    assert_null(job->ranks[4].worker);
    assert_null(lent[0]->job);
    assert_int_equal(job->n_lent, 1);
    assert_int_equal(job->lent_workers, 1);
    check(&h);
    /* slot 5's stream drops; it comes back with its process running: still lent */
    h_clear(&h);
    tide_core_worker_disconnected(h.core, lent[1], lent[1]->conn, false);
    assert_ptr_equal(lent[1]->job, job);
    reregister(&h, lent[1], job, 5, true);
    assert_ptr_equal(job->ranks[5].worker, lent[1]);
    assert_int_equal(job->ranks[5].state, TIDE_RANK_RUNNING);
    assert_int_equal(job->n_lent, 1);
    assert_int_equal(h_count(&h, TIDE_ACT_STOP), 0);
    check(&h);
    /* taken back while it has no stream (for less than the heartbeats' dead time): no STOP can go;
     * its return with the process running gets one */
    phase(&h, job, false);
    h_jump(&h, 9000);
    tide_core_worker_disconnected(h.core, lent[1], lent[1]->conn, false);
    h_clear(&h);
    h_jump(&h, 1000);
    assert_int_equal(h_count_event(&h, "job.burst_reclaimed"), 1);
    assert_int_equal(stops_from(&h, job, 4), 0);
    assert_true(job->ranks[5].lent_stopping);
    check(&h);
    h_clear(&h);
    reregister(&h, lent[1], job, 5, true);
    assert_int_equal(stops_from(&h, job, 4), 1);
    assert_ptr_equal(lent[1]->job, job);
    check(&h);
    /* then it comes back once more, without the process: the slot is free, the worker too */
    tide_core_worker_disconnected(h.core, lent[1], lent[1]->conn, false);
    h_clear(&h);
    reregister(&h, lent[1], job, -1, false);
    assert_null(job->ranks[5].worker);
    assert_int_equal(job->n_lent, 0);
    assert_true(is_free(lent[1]));
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    check(&h);
    h_fini(&h);
}

/* id (n1/gpu<gpu>) says hello on a new stream, reporting (job, generation, rank) running (rank < 0:
 * nothing); a worker the core knows only from a record, so the whole identity is given. */
static tide_worker_t *hello(h_t *h, int gpu, const tide_job_t *job, int32_t gen, int rank)
{
    static int tokens[16];
    static int next;
    char id[32];
    tide_worker_info_t info = {.id = id, .node = "n1", .gpu_index = gpu, .device = "sim:h100",
                               .peak_flops = 1e15, .memory_bytes = 80ULL << 30, .address = "127.0.0.1",
                               .version = "test"};
    tide_rank_report_t rep = {.job_id = job->id, .generation = gen, .rank = rank, .running = true,
                              .pid = 1000 + rank};
    tide_worker_t *out = NULL;
    tide_error_t e;

    snprintf(id, sizeof(id), "n1/gpu%d", gpu);
    assert_int_equal(tide_core_worker_register(h->core, &info, &tokens[next++ % 16], &rep, rank >= 0 ? 1 : 0,
                                               &out, &e),
                     0);
    return out;
}

/* A scheduler restart keeps a running job's lent workers (its record lists them with the stopping
 * ranks): restored, each slot is being taken back and awaits its worker. One whose hello reports the
 * process running is told to stop and stays bound, so the job's next generation waits for its exit
 * even with free workers elsewhere (DST seeds 1079262 and 1096705: a restart forgot the lending and
 * the next generation started beside the process); one that does not come back by the reconnect
 * deadline is written off. */
static void test_restart_keeps_lent_workers(void **state)
{
    h_t h, h2;
    tide_core_config_t cfg = config();
    tide_job_t *job, *j2;
    tide_worker_t *lent[2], *w4;
    tide_job_record_t rec;
    h_rec_t hr;
    const char *sw[2];
    int32_t sg[2], sr[2], gen;
    tide_error_t e;
    uint64_t ids[2] = {1, 2};
    (void)state;

    cfg.max_restarts = 1;
    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    assert_int_equal(lent_of(job, lent), 2);
    gen = job->generation;
    /* the record, as convert.c writes it: the lent slots' workers with the stopping ranks */
    rec = *h_record_of(job, &hr);
    for (int i = 0; i < 2; i++) {
        sw[i] = lent[i]->id;
        sg[i] = gen;
        sr[i] = lent[i]->rank;
    }
    rec.stopping_workers = sw;
    rec.stopping_generations = sg;
    rec.stopping_ranks = sr;
    rec.n_stopping = 2;

    h_init(&h2, &cfg);
    assert_int_equal(tide_core_job_restore(h2.core, &rec, &e), 0);
    tide_core_restore_done(h2.core);
    j2 = tide_core_job_find(h2.core, job->id);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    assert_int_equal(j2->n_lent, 2);
    assert_int_equal(j2->lent_workers, 0);
    assert_true(j2->ranks[4].lent_stopping && j2->ranks[5].lent_stopping);
    assert_int_equal(j2->awaiting, 6);
    check(&h2);
    for (int r = 0; r < 4; r++)
        hello(&h2, r, j2, gen, r);
    h_register_ex(&h2, "n1/gpu6", "n1", 6, NULL, 0, NULL); /* a free worker for the next generation */
    assert_int_equal(h_count_event(&h2, "job.reconciled"), 0);
    h_clear(&h2);
    /* slot 4's worker comes back with the process running: STOP, and it stays bound */
    w4 = hello(&h2, 4, j2, gen, 4);
    assert_int_equal(stops_from(&h2, j2, 4), 1);
    assert_ptr_equal(w4->job, j2);
    assert_ptr_equal(j2->ranks[4].worker, w4);
    assert_int_equal(j2->awaiting, 1);
    check(&h2);
    /* slot 5's worker never comes back: written off at the deadline */
    h_clear(&h2);
    h_jump(&h2, cfg.reconnect_deadline_ms);
    assert_int_equal(h_count_event(&h2, "job.burst_lost"), 1);
    assert_int_equal(h_count_event(&h2, "job.reconciled"), 0); /* not every worker came back */
    assert_int_equal(j2->awaiting, 0);
    assert_null(tide_core_worker_find(h2.core, "n1/gpu5")->job);
    assert_int_equal(j2->n_lent, 1);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    check(&h2);
    /* the generation ends (a rank's worker fails): the next one waits for slot 4's exit */
    h_clear(&h2);
    tide_core_worker_failed(h2.core, j2->ranks[1].worker, "test");
    assert_int_equal(j2->state, TIDE_JOB_PENDING);
    h_stop_all(&h2);
    assert_int_equal(j2->state, TIDE_JOB_PENDING);
    assert_ptr_equal(w4->job, j2);
    check(&h2);
    tide_core_rank_exited(h2.core, w4, j2->id, gen, 4, 143, NULL);
    assert_true(w4->job != j2 || w4->generation == gen + 1);
    assert_int_equal(j2->state, TIDE_JOB_RUNNING);
    assert_int_equal(j2->generation, gen + 1);
    check(&h2);
    h_fini(&h2);
    h_fini(&h);
}

/* --- lent slots in task pools --- */

/* A lent slot joins a detached pool with no share, steals like a rank, commits what it ran; what it
 * still holds when it exits is orphaned and goes to the next member thief first. A pool never waits
 * for a lent slot's declaration. */
static void test_lent_slot_in_a_detached_pool(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8}, first[1] = {100};
    const tide_action_t *a;
    uint64_t got[8], rid;
    size_t n;
    tide_task_pool_info_t pi;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, first, 1);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    /* step 1: rank 0 holds 8, the other ranks nothing; slot 4 joins with no share */
    detached(&h, job, 1, ids, 8);
    assert_int_equal(declare(&h, job, 4, DET, 1, NULL, 0, 8), 0);
    check(&h);
    /* slot 4 steals: rank 0 is asked to release half */
    h_clear(&h);
    assert_int_equal(steal(&h, job, 4, 1, 1), 0);
    a = h_find(&h, TIDE_ACT_RELEASE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 0);
    rid = a->request_id;
    h_clear(&h);
    {
        uint64_t rel[4] = {5, 6, 7, 8};
        assert_int_equal(released(&h, job, 0, 1, rid, rel, 4, 4), 0);
    }
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 4);
    assert_int_equal(a->n_task_ids, 4);
    n = a->n_task_ids;
    memcpy(got, a->task_ids, n * sizeof(*got));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(holder(&h, job, 1, got[i]), 4);
    /* it ran one of them */
    assert_int_equal(done(&h, job, 4, 1, got, 1, 3), 0);
    assert_int_equal(holder(&h, job, 1, got[0]), -1);
    check(&h);
    /* it is taken back: told to stop, it takes nothing more (its steal gets "none" at once) ... */
    phase(&h, job, false);
    h_jump(&h, 10000);
    assert_int_equal(stops_from(&h, job, 4), 2);
    {
        size_t na;
        const tide_action_t *all = tide_core_actions(h.core, &na);
        struct {
            tide_worker_t *w;
            int32_t rank;
        } st[4];
        size_t ns = 0;
        for (size_t i = 0; i < na && ns < 4; i++)
            if (all[i].type == TIDE_ACT_STOP) {
                st[ns].w = all[i].worker;
                st[ns].rank = all[i].rank;
                ns++;
            }
        h_clear(&h);
        assert_int_equal(steal(&h, job, 4, 1, 2), 0);
        assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
        a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
        assert_non_null(a);
        assert_int_equal(a->rank, 4);
        assert_int_equal(a->n_task_ids, 0);
        /* ... and exits: the 3 it still held are orphans */
        h_clear(&h);
        for (size_t i = 0; i < ns; i++)
            tide_core_rank_exited(h.core, st[i].w, job->id, job->generation, st[i].rank, 143, NULL);
    }
    for (size_t i = 1; i < n; i++)
        assert_int_equal(holder(&h, job, 1, got[i]), -3);
    assert_int_equal(tide_core_task_pool(h.core, job, DET, 1, &pi), 0);
    assert_int_equal(pi.orphaned, 3);
    check(&h);
    /* a member's steal gets them before any victim is asked */
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 1);
    assert_true(a->n_task_ids >= 1);
    for (size_t i = 0; i < a->n_task_ids; i++)
        assert_int_equal(holder(&h, job, 1, a->task_ids[i]), 1);
    check(&h);
    /* the next phase lends slot 4 again: its new process joins the same pool afresh and gets the
     * orphan left */
    phase(&h, job, true);
    h_clear(&h);
    h_jump(&h, 2000);
    assert_int_equal(lent_launches(&h, job), 2);
    h_start_all(&h);
    assert_int_equal(declare(&h, job, 4, DET, 1, NULL, 0, 8), 0);
    assert_int_equal(tide_core_task_pool(h.core, job, DET, 1, &pi), 0);
    assert_int_equal(pi.orphaned, 1);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 4, 1, 1),
                     0); /* steal id 1 again: a new process, a new series */
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 4);
    assert_int_equal(a->n_task_ids, 1);
    assert_int_equal(holder(&h, job, 1, a->task_ids[0]), 4);
    check(&h);
    h_fini(&h);
}

/* A lent slot's steal is pending (its victim asked to release) when the slot is taken back: the victim's
 * answer goes to the orphans, not to the slot, which would not run it (DST seed 1002403: the ranks then
 * finished the step without those tasks); the slot's steal gets "none", a member's steal the orphans. */
static void test_release_for_a_slot_taken_back(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8}, first[1] = {100}, rel[4] = {5, 6, 7, 8}, rid;
    const tide_action_t *a;
    tide_task_pool_info_t pi;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, first, 1);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    detached(&h, job, 1, ids, 8);
    assert_int_equal(declare(&h, job, 4, DET, 1, NULL, 0, 8), 0);
    /* slot 4 steals: rank 0 is asked to release */
    h_clear(&h);
    assert_int_equal(steal(&h, job, 4, 1, 1), 0);
    a = h_find(&h, TIDE_ACT_RELEASE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 0);
    rid = a->request_id;
    /* the phase ends: slots 4 and 5 are taken back before rank 0 answers */
    phase(&h, job, false);
    h_jump(&h, 10000);
    assert_int_equal(stops_from(&h, job, 4), 2);
    assert_true(job->ranks[4].lent_stopping);
    h_clear(&h);
    assert_int_equal(released(&h, job, 0, 1, rid, rel, 4, 4), 0);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 4);
    assert_int_equal(a->n_task_ids, 0);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(holder(&h, job, 1, rel[i]), -3);
    assert_int_equal(tide_core_task_pool(h.core, job, DET, 1, &pi), 0);
    assert_int_equal(pi.orphaned, 4);
    check(&h);
    /* a member's steal gets them without asking anyone */
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 1);
    assert_true(a->n_task_ids >= 1);
    for (size_t i = 0; i < a->n_task_ids; i++)
        assert_int_equal(holder(&h, job, 1, a->task_ids[i]), 1);
    check(&h);
    h_fini(&h);
}

/* A lent slot's report that predates the tasks given to it (here an answer to a release with none; in
 * DST seed 1042806 its exit's TasksDone, in 1070605 a release answered before a give lost with a
 * stream came again) says it holds nothing: a member's steal is not told "none" while the slot may
 * hold them (a lent process may end without running them), and gets them once the slot's exit makes
 * them orphans. */
static void test_lent_slot_report_before_its_give(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8}, first[1] = {100}, rel[4] = {5, 6, 7, 8}, rid;
    const tide_action_t *a;
    tide_task_pool_info_t pi;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, first, 1);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    detached(&h, job, 1, ids, 8);
    assert_int_equal(declare(&h, job, 4, DET, 1, NULL, 0, 8), 0);
    /* slot 4 steals: rank 0 releases 4, which go to slot 4 */
    h_clear(&h);
    assert_int_equal(steal(&h, job, 4, 1, 1), 0);
    rid = h_find(&h, TIDE_ACT_RELEASE_TASKS, NULL, -1)->request_id;
    h_clear(&h);
    assert_int_equal(released(&h, job, 0, 1, rid, rel, 4, 4), 0);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 4);
    assert_int_equal(a->n_task_ids, 4);
    /* rank 0 runs the rest; rank 1's steal asks slot 4, whose answer was sent before the give came */
    assert_int_equal(done(&h, job, 0, 1, ids, 4, 0), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    a = h_find(&h, TIDE_ACT_RELEASE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->rank, 4);
    rid = a->request_id;
    h_clear(&h);
    assert_int_equal(released(&h, job, 4, 1, rid, NULL, 0, 0), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0); /* not "none": rank 1 waits */
    assert_int_equal(tide_core_task_pool(h.core, job, DET, 1, &pi), 0);
    assert_int_equal(pi.steals_parked, 1);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(holder(&h, job, 1, rel[i]), 4);
    /* slot 4's process ends without running them: they are orphans, half of them for rank 1 */
    h_clear(&h);
    tide_core_rank_exited(h.core, job->ranks[4].worker, job->id, job->generation, 4, 0, NULL);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, 1);
    assert_non_null(a);
    assert_int_equal(a->n_task_ids, 2);
    assert_int_equal(tide_core_task_pool(h.core, job, DET, 1, &pi), 0);
    assert_int_equal(pi.orphaned, 2);
    assert_int_equal(pi.steals_parked, 0);
    check(&h);
    h_fini(&h);
}

/* Every member declared (fewer ids than the pool's total) and ran them all: the pool is drained,
 * and a member's steal is answered "none" at once. Neither the lent slot that joined (slot 4) nor
 * the one that did not (slot 5) holds the pool open. */
static void test_pool_never_waits_for_a_lent_slot(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t first[1] = {100}, ids[2] = {1, 2};
    const tide_action_t *a;
    tide_task_pool_info_t pi;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, first, 1);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    assert_ptr_not_equal(job->ranks[5].worker, NULL);
    for (int32_t r = 0; r < 4; r++)
        assert_int_equal(declare(&h, job, r, DET, 1, r == 0 ? ids : NULL, r == 0 ? 2 : 0, 3), 0);
    assert_int_equal(declare(&h, job, 4, DET, 1, NULL, 0, 3), 0);
    assert_int_equal(done(&h, job, 0, 1, ids, 2, 0), 0);
    assert_int_equal(tide_core_task_pool(h.core, job, DET, 1, &pi), 0);
    assert_int_equal(pi.declared, 2);
    assert_int_equal(pi.committed, 2);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 2, 1, 1), 0);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a); /* answered now, not parked for a lent slot */
    assert_int_equal(a->n_task_ids, 0);
    assert_int_equal(a->rank, 2);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 4, 1, 1), 0);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(a->n_task_ids, 0);
    assert_int_equal(a->rank, 4);
    check(&h);
    h_fini(&h);
}

/* A lent slot may not declare a member pool, nor a share of its own, nor steal member tasks. */
static void test_lent_slot_refusals(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t first[1] = {100}, mine[1] = {42};
    tide_task_pool_info_t pi;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    detached(&h, job, 0, first, 1);
    assert_int_equal(lend_now(&h, job), 2);
    h_start_all(&h);
    h_clear(&h);
    assert_int_equal(declare(&h, job, 4, TIDE_TASK_MEMBER, 3, NULL, 0, 4), -EINVAL);
    assert_contains(err.text, "kind:");
    assert_int_equal(declare(&h, job, 4, DET, 3, mine, 1, 4), -EINVAL);
    assert_contains(err.text, "task_ids:");
    assert_int_equal(tide_core_task_pool(h.core, job, DET, 3, &pi), -ENOENT); /* no pool opened */
    memset(&err, 0, sizeof(err));
    assert_int_equal(tide_core_steal_request(h.core, job->ranks[4].worker, job->id, job->generation,
                                             4, TIDE_TASK_MEMBER, 3, 9, &err),
                     -EINVAL);
    assert_contains(err.text, "kind:");
    /* a lent slot's declaration never makes the job "detached" */
    {
        size_t n;
        (void)tide_core_actions(h.core, &n);
        assert_int_equal(n, 0);
    }
    check(&h);
    h_fini(&h);
}

/* --- counters --- */

static void test_burst_stats(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    tide_burst_stats_t s;
    uint64_t ids[2] = {1, 2};
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 6, NULL, 0, NULL);
    job = run(&h, 4, 50);
    tide_core_burst_stats(h.core, &s);
    assert_int_equal(s.lent_total, 0);
    assert_int_equal(s.bursts, 0);
    detached(&h, job, 0, ids, 2);
    assert_int_equal(lend_now(&h, job), 2);
    tide_core_burst_stats(h.core, &s);
    assert_int_equal(s.lent_total, 2);
    assert_int_equal(s.lent_now, 2);
    assert_int_equal(s.bursts, 1);
    assert_int_equal(s.reclaims, 0);
    assert_true(s.lent_seconds == 0);
    h_start_all(&h);
    /* taken back after the 10 s dwell: 2 workers x 10 s */
    phase(&h, job, false);
    h_jump(&h, 10000);
    tide_core_burst_stats(h.core, &s);
    assert_int_equal(s.lent_now, 0);
    assert_int_equal(s.reclaims, 1);
    assert_true(fabs(s.lent_seconds - 20.0) < 1e-6);
    h_stop_all(&h);
    /* a second lending, ended by a cancel */
    phase(&h, job, true);
    h_jump(&h, 2000);
    assert_int_equal(lent_launches(&h, job), 2);
    tide_core_burst_stats(h.core, &s);
    assert_int_equal(s.lent_total, 4);
    assert_int_equal(s.lent_now, 2);
    assert_int_equal(s.bursts, 2);
    h_start_all(&h);
    h_jump(&h, 5000);
    {
        tide_error_t e;
        assert_int_equal(tide_core_job_cancel(h.core, job->id, &job, &e), 0);
    }
    tide_core_burst_stats(h.core, &s);
    assert_int_equal(s.lent_now, 0);
    assert_int_equal(s.reclaims, 2);
    assert_true(fabs(s.lent_seconds - 30.0) < 1e-6);
    assert_int_equal(job->bursts, 2);
    check(&h);
    h_stop_all(&h);
    check(&h);
    h_fini(&h);
}

/* burst_percent in 0..100; a burst command only with burst on. */
static void test_spec_validation(void **state)
{
    tide_job_spec_t spec = h_spec(1, 1, TIDE_PRIO_NORMAL);
    char *bargv[] = {"/bin/burst", NULL}, *empty[] = {"", NULL};
    tide_error_t e;
    (void)state;

    spec.burst_percent = 101;
    assert_int_equal(tide_job_spec_validate(&spec, &e), -EINVAL);
    assert_contains(e.text, "burst_percent");
    spec.burst_percent = -1;
    assert_int_equal(tide_job_spec_validate(&spec, &e), -EINVAL);
    spec.burst_percent = 0;
    spec.burst_argv = bargv;
    spec.n_burst_argv = 1;
    assert_int_equal(tide_job_spec_validate(&spec, &e), -EINVAL);
    assert_contains(e.text, "burst_command");
    spec.burst_percent = 100;
    assert_int_equal(tide_job_spec_validate(&spec, &e), 0);
    spec.burst_argv = empty;
    assert_int_equal(tide_job_spec_validate(&spec, &e), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_phase_teaches_second_lends),
        cmocka_unit_test(test_how_many_and_from_where),
        cmocka_unit_test(test_never_the_hot_spares),
        cmocka_unit_test(test_never_the_hot_spares_low),
        cmocka_unit_test(test_not_lent_without_detached_tasks),
        cmocka_unit_test(test_rank0_progress_drives_the_phase),
        cmocka_unit_test(test_started_and_exited_routing),
        cmocka_unit_test(test_reclaim_hysteresis_and_dwell),
        cmocka_unit_test(test_queued_job_takes_them_back),
        cmocka_unit_test(test_reserve_waiter_takes_them_back),
        cmocka_unit_test(test_generation_end_stops_them),
        cmocka_unit_test(test_lent_worker_death_and_return),
        cmocka_unit_test(test_restart_keeps_lent_workers),
        cmocka_unit_test(test_lent_slot_in_a_detached_pool),
        cmocka_unit_test(test_release_for_a_slot_taken_back),
        cmocka_unit_test(test_lent_slot_report_before_its_give),
        cmocka_unit_test(test_pool_never_waits_for_a_lent_slot),
        cmocka_unit_test(test_lent_slot_refusals),
        cmocka_unit_test(test_burst_stats),
        cmocka_unit_test(test_spec_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

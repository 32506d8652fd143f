/* Work stealing in the scheduler core (docs/work-stealing.md): declaration rules, re-declarations
 * and bad input, deque splitting, victim choice, the commit rule, replays of steal and release ids,
 * parked steals and their deadline, "none" once every rank declared, stealing switched off, orphans
 * of a lost holder and the tasks a rank that exited keeps, the pool limit, pools ending with their
 * generation, pools every rank moved on from, stragglers and the job.steals event; then a
 * randomized model of workers, trainers and a lossy stream checked after every call: each task is
 * in one place and runs at most once, and every task runs exactly once except what a rank still
 * held when it exited (in half the seeds the ranks also hold completions back and go on to the
 * next steps, so the step's pool may go before it completes and what names it is stale).
 * TIDE_STEAL_SEEDS=N runs N seeds (3000); TIDE_STEAL_SEED=N reruns one (TIDE_STEAL_TRACE=1 prints
 * its messages). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

#define MEMBER TIDE_TASK_MEMBER

static void assert_contains(const char *s, const char *part)
{
    if (!s || !strstr(s, part))
        fail_msg("\"%s\" does not contain \"%s\"", s ? s : "(null)", part);
}

static tide_core_config_t config(void)
{
    tide_core_config_t cfg;
    h_config(&cfg);
    return cfg;
}

static tide_job_t *run_spec(h_t *h, const tide_job_spec_t *spec)
{
    tide_job_t *job = h_submit_spec(h, spec);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    h_start_all(h);
    assert_int_equal(job->ranks_running, spec->min_workers);
    h_clear(h);
    return job;
}

static tide_job_t *run(h_t *h, int n)
{
    tide_job_spec_t spec = h_spec(n, n, TIDE_PRIO_NORMAL);
    return run_spec(h, &spec);
}

static tide_worker_t *W(const tide_job_t *job, int r)
{
    return job->ranks[r].worker;
}

static tide_error_t err;

static int declare(h_t *h, tide_job_t *job, int r, int64_t step, const uint64_t *ids, size_t n,
                   uint64_t total)
{
    memset(&err, 0, sizeof(err));
    return tide_core_tasks_declared(h->core, W(job, r), job->id, job->generation, r, MEMBER, step,
                                    ids, n, total, &err);
}

static int done(h_t *h, tide_job_t *job, int r, int64_t step, const uint64_t *ids, size_t n,
                uint32_t queued)
{
    memset(&err, 0, sizeof(err));
    return tide_core_tasks_done(h->core, W(job, r), job->id, job->generation, r, MEMBER, step, ids,
                                n, queued, &err);
}

static int steal(h_t *h, tide_job_t *job, int r, int64_t step, uint64_t steal_id)
{
    memset(&err, 0, sizeof(err));
    return tide_core_steal_request(h->core, W(job, r), job->id, job->generation, r, MEMBER, step,
                                   steal_id, &err);
}

static int released(h_t *h, tide_job_t *job, int r, int64_t step, uint64_t release_id,
                    const uint64_t *ids, size_t n, uint32_t queued)
{
    memset(&err, 0, sizeof(err));
    return tide_core_tasks_released(h->core, W(job, r), job->id, job->generation, r, MEMBER, step,
                                    release_id, ids, n, queued, &err);
}

static int32_t holder(h_t *h, tide_job_t *job, int64_t step, uint64_t id)
{
    return tide_core_task_holder(h->core, job, MEMBER, step, id);
}

static tide_task_pool_info_t info(h_t *h, tide_job_t *job, int64_t step)
{
    tide_task_pool_info_t i;
    memset(&i, 0, sizeof(i));
    assert_int_equal(tide_core_task_pool(h->core, job, MEMBER, step, &i), 0);
    return i;
}

static int n_actions(h_t *h)
{
    size_t n;
    (void)tide_core_actions(h->core, &n);
    return (int)n;
}

static bool has_pool(h_t *h, tide_job_t *job, tide_task_kind_t kind, int64_t step)
{
    tide_task_pool_info_t i;
    return tide_core_task_pool(h->core, job, kind, step, &i) == 0;
}

/* The only action of type in the list (asserts there is exactly one). */
static const tide_action_t *only(h_t *h, tide_action_type_t type)
{
    assert_int_equal(h_count(h, type), 1);
    return h_find(h, type, NULL, -1);
}

static void assert_ids(const tide_action_t *a, const uint64_t *want, size_t n)
{
    assert_int_equal(a->n_task_ids, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(a->task_ids[i], want[i]);
}

/* The pool's counters are the sums over the ids' places (ids: every id declared so far). */
static void assert_consistent(h_t *h, tide_job_t *job, int64_t step, const uint64_t *ids, size_t n)
{
    tide_task_pool_info_t i = info(h, job, step);
    uint64_t held = 0, committed = 0, orphaned = 0;

    for (size_t k = 0; k < n; k++) {
        int32_t where = holder(h, job, step, ids[k]);
        assert_true(where >= -3);
        held += where >= 0;
        committed += where == -1;
        orphaned += where == -3;
        assert_true(where != -2);
    }
    assert_int_equal(i.declared, n);
    assert_int_equal(i.queued, held);
    assert_int_equal(i.committed, committed);
    assert_int_equal(i.orphaned, orphaned);
    assert_int_equal(i.in_flight, 0);
    h_check_invariants(h);
}

/* --- declarations --- */

static void test_declaration_rules(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t a[4] = {0, 1, 2, 3}, b[4] = {4, 5, 6, 7}, all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    uint64_t other[4] = {0, 1, 2, 9}, dup[3] = {4, 5, 4}, clash[2] = {8, 2}, big[1] = {1ULL << 53};
    uint64_t five[5] = {10, 11, 12, 13, 14};
    tide_task_pool_info_t i;
    (void)state;

    cfg.max_pool_tasks = 1000;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);

    assert_int_equal(declare(&h, job, 0, 5, a, 4, 8), 0);
    assert_int_equal(declare(&h, job, 0, 5, a, 4, 8), 0); /* an identical repeat */
    assert_int_equal(declare(&h, job, 0, 5, other, 4, 8), -EALREADY);
    assert_contains(err.text, "already declared");
    assert_int_equal(declare(&h, job, 1, 5, b, 4, 9), -EINVAL);
    assert_contains(err.text, "total");
    assert_int_equal(declare(&h, job, 1, 5, clash, 2, 8), -EINVAL);
    assert_contains(err.text, "already in the pool");
    assert_int_equal(declare(&h, job, 1, 5, dup, 3, 8), -EINVAL);
    assert_contains(err.text, "repeats");
    assert_int_equal(declare(&h, job, 1, 5, five, 5, 8), -EINVAL);
    assert_contains(err.text, "exceed");
    assert_int_equal(declare(&h, job, 1, 6, b, 4, 0), -EINVAL);
    assert_contains(err.text, "total");
    assert_int_equal(declare(&h, job, 1, 6, b, 4, 1001), -EINVAL);
    assert_contains(err.text, "total");
    assert_int_equal(declare(&h, job, 1, 6, b, 4, 3), -EINVAL);
    assert_contains(err.text, "task_ids");
    assert_int_equal(declare(&h, job, 1, 6, big, 1, 8), -EINVAL);
    assert_contains(err.text, "2^53");
    assert_int_equal(declare(&h, job, 1, -1, b, 4, 8), -EINVAL);
    assert_contains(err.text, "step");
    /* nothing of the refused ones stayed, and no pool was opened for step 6 */
    assert_int_equal(holder(&h, job, 5, 8), -4);
    assert_int_equal(holder(&h, job, 5, 4), -4);
    assert_int_equal(holder(&h, job, 5, 2), 0);
    assert_int_equal(tide_core_task_pool(h.core, job, MEMBER, 6, &i), -ENOENT);
    assert_consistent(&h, job, 5, a, 4);

    /* who may report */
    memset(&err, 0, sizeof(err));
    assert_int_equal(
        tide_core_tasks_declared(h.core, W(job, 1), "999", 1, 1, MEMBER, 5, b, 4, 8, &err),
        -ENOENT);
    assert_contains(err.text, "999");
    assert_int_equal(tide_core_tasks_declared(h.core, W(job, 2), job->id, job->generation, 1,
                                              MEMBER, 5, b, 4, 8, &err),
                     -EINVAL);
    assert_contains(err.text, "rank");
    assert_int_equal(tide_core_tasks_declared(h.core, W(job, 1), job->id, job->generation, 7,
                                              MEMBER, 5, b, 4, 8, &err),
                     -EINVAL);
    assert_contains(err.text, "rank");
    assert_int_equal(tide_core_tasks_declared(h.core, W(job, 1), job->id, job->generation - 1, 1,
                                              MEMBER, 5, b, 4, 8, &err),
                     -ESTALE);
    assert_int_equal(tide_core_tasks_declared(h.core, W(job, 1), job->id, job->generation + 1, 1,
                                              MEMBER, 5, b, 4, 8, &err),
                     -EINVAL);
    assert_contains(err.text, "generation");
    assert_int_equal(tide_core_tasks_declared(h.core, W(job, 1), job->id, job->generation, 1,
                                              (tide_task_kind_t)7, 5, b, 4, 8, &err),
                     -EINVAL);
    assert_contains(err.text, "kind");
    /* the other calls need an open pool */
    assert_int_equal(steal(&h, job, 1, 6, 1), -ENOENT);
    assert_int_equal(done(&h, job, 1, 6, b, 1, 0), -ENOENT);
    assert_int_equal(released(&h, job, 1, 6, 1, b, 1, 0), -ENOENT);
    /* a steal before the rank declared its share */
    assert_int_equal(steal(&h, job, 1, 5, 1), -EINVAL);
    assert_contains(err.text, "declared");
    assert_int_equal(job->steal_requests, 0);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS) + h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_consistent(&h, job, 5, a, 4);

    assert_int_equal(declare(&h, job, 1, 5, b, 4, 8), 0);
    assert_int_equal(declare(&h, job, 2, 5, NULL, 0, 8), 0); /* an empty share */
    i = info(&h, job, 5);
    assert_int_equal(i.total, 8);
    assert_int_equal(i.declared, 8);
    assert_int_equal(i.queued, 8);
    assert_int_equal(declare(&h, job, 2, 5, NULL, 0, 8), 0);
    assert_consistent(&h, job, 5, all, 8);
    h_fini(&h);
}

/* What a re-declaration must leave alone: the pool's counters, the job's, and every id's place. */
typedef struct snap {
    tide_task_pool_info_t pool;
    uint64_t committed, stolen, requests;
    int32_t where[16];
} snap_t;

static snap_t snapshot(h_t *h, tide_job_t *job, int64_t step, const uint64_t *ids, size_t n)
{
    snap_t s;

    memset(&s, 0, sizeof(s));
    assert_true(n <= 16);
    s.pool = info(h, job, step);
    s.committed = job->tasks_committed;
    s.stolen = job->tasks_stolen;
    s.requests = job->steal_requests;
    for (size_t i = 0; i < n; i++)
        s.where[i] = holder(h, job, step, ids[i]);
    return s;
}

static void assert_unchanged(h_t *h, tide_job_t *job, int64_t step, const uint64_t *ids, size_t n,
                             const snap_t *before)
{
    snap_t now = snapshot(h, job, step, ids, n);

    assert_int_equal(n_actions(h), 0);
    assert_int_equal(now.pool.total, before->pool.total);
    assert_int_equal(now.pool.declared, before->pool.declared);
    assert_int_equal(now.pool.committed, before->pool.committed);
    assert_int_equal(now.pool.queued, before->pool.queued);
    assert_int_equal(now.pool.orphaned, before->pool.orphaned);
    assert_int_equal(now.pool.steals_pending, before->pool.steals_pending);
    assert_int_equal(now.pool.steals_parked, before->pool.steals_parked);
    assert_int_equal(now.committed, before->committed);
    assert_int_equal(now.stolen, before->stolen);
    assert_int_equal(now.requests, before->requests);
    for (size_t i = 0; i < n; i++)
        if (now.where[i] != before->where[i])
            fail_msg("task %" PRIu64 ": held by %d, was %d", ids[i], now.where[i],
                     before->where[i]);
    h_check_invariants(h);
}

/* A rank declares a pool again (its worker reconnected): an identical repeat, or one that names
 * only ids the pool knows (what the rank holds by then: some went to thieves, some came from
 * victims), is accepted and changes nothing; one naming an id the pool does not know is refused
 * and changes nothing either. */
static void test_redeclaration(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {7, 8}, tail[3] = {6, 5, 4}, one[1] = {1};
    uint64_t all[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t holds0[3] = {1, 2, 3}, holds1[5] = {7, 8, 6, 5, 4}, mixed[4] = {2, 3, 4, 7};
    uint64_t unknown0[3] = {2, 3, 9}, unknown1[1] = {99};
    const tide_action_t *act;
    snap_t before;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    assert_int_equal(declare(&h, job, 0, 1, a, 6, 8), 0);
    assert_int_equal(declare(&h, job, 1, 1, b, 2, 8), 0);
    assert_int_equal(done(&h, job, 1, 1, b, 2, 0), 0);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->max_tasks, 3);
    assert_int_equal(released(&h, job, 0, 1, act->request_id, tail, 3, 3), 0);
    assert_ids(only(&h, TIDE_ACT_GIVE_TASKS), tail, 3);
    assert_int_equal(done(&h, job, 0, 1, one, 1, 2), 0); /* rank 0 ran 1, has 2 and 3 queued */
    h_clear(&h);
    before = snapshot(&h, job, 1, all, 8);
    assert_int_equal(before.pool.declared, 8);
    assert_int_equal(before.pool.committed, 3);
    assert_int_equal(before.where[3], 1); /* 4 went to rank 1 */

    /* an identical repeat */
    assert_int_equal(declare(&h, job, 0, 1, a, 6, 8), 0);
    assert_int_equal(declare(&h, job, 1, 1, b, 2, 8), 0);
    assert_unchanged(&h, job, 1, all, 8, &before);
    /* what each rank holds after a reconnect: rank 0 lost 4..6 to rank 1, which ran 7 and 8 */
    assert_int_equal(declare(&h, job, 0, 1, holds0, 3, 8), 0);
    assert_unchanged(&h, job, 1, all, 8, &before);
    assert_int_equal(declare(&h, job, 1, 1, holds1, 5, 8), 0);
    assert_unchanged(&h, job, 1, all, 8, &before);
    /* ids it does not hold (4 is rank 1's, 7 committed by rank 1) or none at all: known to the
     * pool, so still a repeat: nobody's task moves */
    assert_int_equal(declare(&h, job, 0, 1, mixed, 4, 8), 0);
    assert_unchanged(&h, job, 1, all, 8, &before);
    assert_int_equal(declare(&h, job, 0, 1, NULL, 0, 8), 0);
    assert_unchanged(&h, job, 1, all, 8, &before);
    /* an id the pool does not know: refused, and it does not enter the pool */
    assert_int_equal(declare(&h, job, 0, 1, unknown0, 3, 8), -EALREADY);
    assert_contains(err.text, "already declared");
    assert_unchanged(&h, job, 1, all, 8, &before);
    assert_int_equal(declare(&h, job, 1, 1, unknown1, 1, 8), -EALREADY);
    assert_unchanged(&h, job, 1, all, 8, &before);
    assert_int_equal(holder(&h, job, 1, 9), -4);
    assert_int_equal(holder(&h, job, 1, 99), -4);
    /* nor did any of them touch what the core believes is queued: the next thief asks rank 0 for
     * half of its 2 */
    assert_int_equal(steal(&h, job, 1, 1, 2), 0);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->rank, 0);
    assert_int_equal(act->max_tasks, 1);
    assert_consistent(&h, job, 1, all, 8);
    h_fini(&h);
}

/* --- deque splitting --- */

static void test_deque_splitting(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t ids[10], tail5[5] = {109, 108, 107, 106, 105}, d[2] = {100, 101};
    const tide_action_t *a;
    uint64_t rid;
    (void)state;

    for (int i = 0; i < 10; i++)
        ids[i] = 100 + (uint64_t)i;
    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    assert_int_equal(declare(&h, job, 0, 1, ids, 10, 10), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 10), 0);
    h_clear(&h);

    /* rank 1 is empty: rank 0 is asked for half its deque, ceil(10 / 2) */
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    a = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_ptr_equal(a->worker, W(job, 0));
    assert_ptr_equal(a->conn, W(job, 0)->conn);
    assert_int_equal(a->rank, 0);
    assert_int_equal(a->step, 1);
    assert_int_equal(a->task_kind, MEMBER);
    assert_int_equal(a->generation, job->generation);
    assert_int_equal(a->max_tasks, 5);
    assert_true(a->request_id > 0);
    rid = a->request_id;
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(info(&h, job, 1).steals_pending, 1);
    /* until the victim answers, its tasks are still its own */
    assert_int_equal(holder(&h, job, 1, 109), 0);
    h_clear(&h);

    /* it answers with the tail of its deque: exactly those move, in its order */
    assert_int_equal(released(&h, job, 0, 1, rid, tail5, 5, 5), 0);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_ptr_equal(a->worker, W(job, 1));
    assert_int_equal(a->rank, 1);
    assert_int_equal(a->request_id, 1);
    assert_ids(a, tail5, 5);
    for (int i = 0; i < 10; i++)
        assert_int_equal(holder(&h, job, 1, ids[i]), i < 5 ? 0 : 1);
    assert_int_equal(job->tasks_stolen, 5);
    assert_int_equal(job->steal_requests, 1);
    assert_int_equal(info(&h, job, 1).steals_pending, 0);
    assert_consistent(&h, job, 1, ids, 10);
    h_clear(&h);

    /* rank 0 finished two and has 3 queued: the next steal asks for ceil(3 / 2) = 2 */
    assert_int_equal(done(&h, job, 0, 1, d, 2, 3), 0);
    assert_int_equal(job->tasks_committed, 2);
    assert_int_equal(steal(&h, job, 1, 1, 2), 0);
    a = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(a->rank, 0);
    assert_int_equal(a->max_tasks, 2);
    rid = a->request_id;
    h_clear(&h);
    /* an answer naming tasks the victim does not hold (committed, the thief's, never issued): an
     * error, and only the valid one moves */
    {
        uint64_t bad[4] = {104, 100, 105, 999}, moved[1] = {104};
        assert_int_equal(released(&h, job, 0, 1, rid, bad, 4, 1), -EINVAL);
        assert_contains(err.text, "does not hold");
        assert_ids(only(&h, TIDE_ACT_GIVE_TASKS), moved, 1);
        assert_int_equal(holder(&h, job, 1, 104), 1);
        assert_int_equal(holder(&h, job, 1, 100), -1);
        assert_int_equal(holder(&h, job, 1, 105), 1);
        assert_int_equal(holder(&h, job, 1, 103), 0);
        assert_int_equal(holder(&h, job, 1, 999), -4);
    }
    assert_int_equal(job->tasks_stolen, 6);
    assert_consistent(&h, job, 1, ids, 10);
    h_fini(&h);
}

/* --- victim choice --- */

typedef struct topo {
    int on_n1[3], on_n2[3], on_n3[3]; /* ranks per node */
    int k1, k2, k3;
} topo_t;

/* Ranks of a 7-rank job on n1 (rack r1), n2 (rack r1), n3 (rack r2, same switch) and n4 (another
 * switch), sorted by node. */
static tide_job_t *topo_job(h_t *h, topo_t *t, int *far)
{
    tide_job_t *job;

    h_node(h, "n1", 3, NULL, 0, "rack=r1,switch=s1");
    h_node(h, "n2", 2, NULL, 0, "rack=r1,switch=s1");
    h_node(h, "n3", 1, NULL, 0, "rack=r2,switch=s1");
    h_node(h, "n4", 1, NULL, 0, "rack=r3,switch=s2");
    job = run(h, 7);
    memset(t, 0, sizeof(*t));
    *far = -1;
    for (int r = 0; r < 7; r++) {
        const char *node = W(job, r)->node_name;
        if (strcmp(node, "n1") == 0)
            t->on_n1[t->k1++] = r;
        else if (strcmp(node, "n2") == 0)
            t->on_n2[t->k2++] = r;
        else if (strcmp(node, "n3") == 0)
            t->on_n3[t->k3++] = r;
        else
            *far = r;
    }
    assert_int_equal(t->k1, 3);
    assert_int_equal(t->k2, 2);
    assert_int_equal(t->k3, 1);
    assert_true(*far >= 0);
    return job;
}

/* Every rank declares `share[r]` tasks of a pool of step (ids r*100 + i). */
static void declare_shares(h_t *h, tide_job_t *job, int64_t step, const int *share)
{
    uint64_t total = 0, ids[100];

    for (int r = 0; r < job->n_ranks; r++)
        total += (uint64_t)share[r];
    for (int r = 0; r < job->n_ranks; r++) {
        for (int i = 0; i < share[r]; i++)
            ids[i] = (uint64_t)(r * 100 + i);
        assert_int_equal(declare(h, job, r, step, ids, (size_t)share[r], total), 0);
    }
    h_clear(h);
}

static int victim_of(h_t *h, tide_job_t *job, int thief, int64_t step, uint64_t steal_id)
{
    const tide_action_t *a;

    assert_int_equal(steal(h, job, thief, step, steal_id), 0);
    a = h_find(h, TIDE_ACT_RELEASE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_int_equal(h_count(h, TIDE_ACT_RELEASE_TASKS), 1);
    return a->rank;
}

static void test_victim_choice(void **state)
{
    h_t h;
    topo_t t;
    tide_job_t *job;
    int far, share[7], thief, near1, near2, n2a, n2b, n3;
    (void)state;

    h_init(&h, NULL);
    job = topo_job(&h, &t, &far);
    thief = t.on_n1[0];
    near1 = t.on_n1[1];
    near2 = t.on_n1[2];
    n2a = t.on_n2[0] < t.on_n2[1] ? t.on_n2[0] : t.on_n2[1];
    n2b = t.on_n2[0] < t.on_n2[1] ? t.on_n2[1] : t.on_n2[0];
    n3 = t.on_n3[0];

    /* most queued wins, however far */
    memset(share, 0, sizeof(share));
    share[far] = 12;
    share[near1] = 8;
    declare_shares(&h, job, 1, share);
    assert_int_equal(victim_of(&h, job, thief, 1, 1), far);
    h_clear(&h);

    /* among those with at least 3/4 of the most, the nearest: same node before another rack */
    memset(share, 0, sizeof(share));
    share[far] = 12;
    share[near1] = 9; /* 9 >= 3/4 of 12 */
    declare_shares(&h, job, 2, share);
    assert_int_equal(victim_of(&h, job, thief, 2, 1), near1);
    h_clear(&h);

    /* same rack before the same switch, the same switch before another */
    memset(share, 0, sizeof(share));
    share[far] = 10;
    share[n3] = 10;
    share[n2b] = 9;
    declare_shares(&h, job, 3, share);
    assert_int_equal(victim_of(&h, job, thief, 3, 1), n2b);
    h_clear(&h);
    memset(share, 0, sizeof(share));
    share[far] = 10;
    share[n3] = 10;
    declare_shares(&h, job, 4, share);
    assert_int_equal(victim_of(&h, job, thief, 4, 1), n3);
    h_clear(&h);

    /* equally near: the lowest rank */
    memset(share, 0, sizeof(share));
    share[n2a] = 8;
    share[n2b] = 10;
    declare_shares(&h, job, 5, share);
    assert_int_equal(victim_of(&h, job, thief, 5, 1), n2a);
    h_clear(&h);

    /* below 3/4 of the most, nearness does not count */
    memset(share, 0, sizeof(share));
    share[far] = 12;
    share[near1] = 8;
    share[n2a] = 8;
    declare_shares(&h, job, 6, share);
    assert_int_equal(victim_of(&h, job, thief, 6, 1), far);
    h_clear(&h);
    /* exclusions: a rank with a release pending is not asked twice; the next thief gets the next */
    assert_int_equal(victim_of(&h, job, near2, 6, 1), near1);
    h_clear(&h);
    /* ...a rank whose worker lost its stream is not asked either */
    tide_core_worker_disconnected(h.core, W(job, n2a), W(job, n2a)->conn, false);
    h_clear(&h);
    assert_int_equal(steal(&h, job, n2b, 6, 1), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(info(&h, job, 6).steals_parked, 1);
    assert_int_equal(info(&h, job, 6).steals_pending, 2);
    h_fini(&h);
}

/* The victim choice looks at a bounded top of the ranks, not at all of them, and still finds the
 * one with the most queued tasks in a big job. */
static void test_victim_choice_big_job(void **state)
{
    h_t h;
    tide_job_t *job;
    int share[64];
    uint64_t ids[64];
    (void)state;

    h_init(&h, NULL);
    for (int n = 0; n < 8; n++) {
        char node[8];
        snprintf(node, sizeof(node), "m%d", n);
        h_node(&h, node, 8, NULL, 0, NULL);
    }
    job = run(&h, 64);
    for (int r = 0; r < 64; r++)
        share[r] = r == 0 ? 0 : 1 + (r * 7) % 13; /* at most 13 */
    share[37] = 30;
    {
        uint64_t total = 0;
        for (int r = 0; r < 64; r++)
            total += (uint64_t)share[r];
        for (int r = 0; r < 64; r++) {
            for (int i = 0; i < share[r]; i++)
                ids[i] = (uint64_t)(r * 100 + i);
            assert_int_equal(declare(&h, job, r, 1, ids, (size_t)share[r], total), 0);
        }
    }
    h_clear(&h);
    assert_int_equal(victim_of(&h, job, 0, 1, 1), 37);
    assert_int_equal(h_find(&h, TIDE_ACT_RELEASE_TASKS, NULL, -1)->max_tasks, 15);
    h_fini(&h);
}

/* --- the commit rule --- */

static void test_commit_rule(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t a[3] = {1, 2, 3}, b[2] = {4, 5}, all[5] = {1, 2, 3, 4, 5};
    uint64_t one[1] = {1}, mixed[3] = {2, 77, 4}, three[1] = {3};
    tide_task_pool_info_t i;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    assert_int_equal(declare(&h, job, 0, 3, a, 3, 5), 0);
    assert_int_equal(declare(&h, job, 1, 3, b, 2, 5), 0);

    assert_int_equal(done(&h, job, 0, 3, one, 1, 2), 0);
    assert_int_equal(holder(&h, job, 3, 1), -1);
    assert_int_equal(job->tasks_committed, 1);
    assert_int_equal(done(&h, job, 0, 3, one, 1, 2), 0); /* a duplicate: no-op */
    assert_int_equal(job->tasks_committed, 1);
    assert_int_equal(done(&h, job, 1, 3, one, 1, 2), -EINVAL); /* committed by another rank */
    assert_int_equal(job->tasks_committed, 1);
    /* a task never issued and one held by another rank: errors, the valid one still commits */
    assert_int_equal(done(&h, job, 0, 3, mixed, 3, 1), -EINVAL);
    assert_contains(err.text, "77");
    assert_contains(err.text, "never declared");
    assert_int_equal(holder(&h, job, 3, 2), -1);
    assert_int_equal(holder(&h, job, 3, 4), 1);
    assert_int_equal(holder(&h, job, 3, 77), -4);
    assert_int_equal(job->tasks_committed, 2);
    assert_int_equal(done(&h, job, 1, 3, three, 1, 2), -EINVAL);
    assert_contains(err.text, "does not hold");
    assert_int_equal(holder(&h, job, 3, 3), 0);
    assert_consistent(&h, job, 3, all, 5);
    i = info(&h, job, 3);
    assert_int_equal(i.committed, 2);
    assert_int_equal(i.queued, 3);
    /* every task once: the pool is complete */
    assert_int_equal(done(&h, job, 0, 3, three, 1, 0), 0);
    assert_int_equal(done(&h, job, 1, 3, b, 2, 0), 0);
    i = info(&h, job, 3);
    assert_int_equal(i.committed, 5);
    assert_int_equal(job->tasks_committed, 5);
    assert_consistent(&h, job, 3, all, 5);
    /* a thief of a complete pool is told there is nothing left */
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 3, 1), 0);
    assert_int_equal(only(&h, TIDE_ACT_GIVE_TASKS)->n_task_ids, 0);
    h_fini(&h);
}

/* --- replays --- */

static void reregister(h_t *h, tide_worker_t *w, void *conn, tide_job_t *job, int rank)
{
    tide_kv_t kv[8];
    size_t n = w->n_labels < 8 ? w->n_labels : 8;
    char keys[8][32], vals[8][32];
    tide_worker_info_t winfo = {.id = w->id,
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
                              .running = true,
                              .pid = 1000 + rank};
    tide_worker_t *out = NULL;
    char id[64], node[64], device[64];
    tide_error_t e;

    snprintf(id, sizeof(id), "%s", w->id);
    snprintf(node, sizeof(node), "%s", w->node_name);
    snprintf(device, sizeof(device), "%s", w->device);
    winfo.id = id;
    winfo.node = node;
    winfo.device = device;
    for (size_t i = 0; i < n; i++) {
        snprintf(keys[i], sizeof(keys[i]), "%s", w->labels[i].key);
        snprintf(vals[i], sizeof(vals[i]), "%s", w->labels[i].value);
        kv[i].key = keys[i];
        kv[i].value = vals[i];
    }
    winfo.labels = kv;
    winfo.n_labels = n;
    assert_int_equal(tide_core_worker_register(h->core, &winfo, conn, &rep, 1, &out, &e), 0);
    assert_ptr_equal(out, w);
}

static char conns[1024];
static int next_conn_tok;

static void *new_conn(void)
{
    return &conns[next_conn_tok++ % 1024];
}

static void test_replays(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t ids[6] = {10, 11, 12, 13, 14, 15}, tail[3] = {15, 14, 13};
    const tide_action_t *a;
    uint64_t rid;
    void *conn;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    assert_int_equal(declare(&h, job, 0, 1, ids, 6, 6), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 6), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 7), 0);
    rid = only(&h, TIDE_ACT_RELEASE_TASKS)->request_id;
    h_clear(&h);
    /* the same steal id while it is served: nothing more */
    assert_int_equal(steal(&h, job, 1, 1, 7), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS) + h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(job->steal_requests, 1);

    /* the victim's worker re-registers on a new stream: the release is sent again, same id */
    conn = new_conn();
    reregister(&h, W(job, 0), conn, job, 0);
    a = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(a->request_id, rid);
    assert_int_equal(a->max_tasks, 3);
    assert_ptr_equal(a->conn, conn);
    h_clear(&h);

    assert_int_equal(released(&h, job, 0, 1, rid, tail, 3, 3), 0);
    assert_ids(only(&h, TIDE_ACT_GIVE_TASKS), tail, 3);
    h_clear(&h);
    /* the victim's answer again (it answered the re-sent release too): a no-op */
    assert_int_equal(released(&h, job, 0, 1, rid, tail, 3, 3), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(holder(&h, job, 1, 15), 1);
    assert_int_equal(job->tasks_stolen, 3);

    /* the thief asks again with the same id (its GiveTasks was lost): the same answer */
    assert_int_equal(steal(&h, job, 1, 1, 7), 0);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->request_id, 7);
    assert_ids(a, tail, 3);
    assert_int_equal(job->tasks_stolen, 3);
    assert_int_equal(job->steal_requests, 1);
    h_clear(&h);
    /* an older id: ignored */
    assert_int_equal(steal(&h, job, 1, 1, 6), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS) + h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
    /* an answer to a release id never issued: a no-op */
    assert_int_equal(released(&h, job, 0, 1, rid + 100, ids, 1, 2), 0);
    assert_int_equal(holder(&h, job, 1, 10), 0);
    assert_consistent(&h, job, 1, ids, 6);
    h_fini(&h);
}

/* --- parked steals --- */

static void test_parked_steals(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t ids[4] = {1, 2, 3, 4}, two[2] = {1, 2}, rid;
    const tide_action_t *a;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    /* rank 0 declares nothing of 4 and is empty: nobody else declared yet, so it waits */
    assert_int_equal(declare(&h, job, 0, 1, NULL, 0, 4), 0);
    assert_int_equal(steal(&h, job, 0, 1, 1), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS) + h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(info(&h, job, 1).steals_parked, 1);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 4), 0);
    assert_int_equal(info(&h, job, 1).steals_parked, 1); /* still 4 tasks undeclared */
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    /* the last declaration brings a victim */
    assert_int_equal(declare(&h, job, 2, 1, ids, 4, 4), 0);
    a = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(a->rank, 2);
    assert_int_equal(a->max_tasks, 2);
    assert_int_equal(info(&h, job, 1).steals_parked, 0);
    h_fini(&h);

    /* nothing to steal: the answer (none) waits for the last declaration */
    h_init(&h, NULL);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(declare(&h, job, 0, 2, two, 2, 2), 0);
    assert_int_equal(done(&h, job, 0, 2, two, 2, 0), 0);
    assert_int_equal(declare(&h, job, 1, 2, NULL, 0, 2), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 2, 1), 0);
    assert_int_equal(steal(&h, job, 0, 2, 1), 0);
    /* complete already (every task committed): nothing can come, both answered at once */
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 2);
    h_fini(&h);

    h_init(&h, NULL);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(declare(&h, job, 0, 2, two, 2, 3), 0);
    assert_int_equal(done(&h, job, 0, 2, two, 2, 0), 0);
    assert_int_equal(declare(&h, job, 1, 2, NULL, 0, 3), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 2, 1), 0);
    assert_int_equal(steal(&h, job, 0, 2, 1), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(info(&h, job, 2).steals_parked, 2);
    /* rank 2 declares the last task: it is its own (est 1), so both still wait... */
    {
        uint64_t last[1] = {3};
        assert_int_equal(declare(&h, job, 2, 2, last, 1, 3), 0);
    }
    a = only(&h, TIDE_ACT_RELEASE_TASKS); /* the first parked thief asks rank 2 */
    assert_int_equal(a->rank, 2);
    rid = a->request_id;
    h_clear(&h);
    /* ...rank 2 had already handed it to its trainer: it releases none; then everything is known:
     * no rank has queued tasks, every rank declared: both thieves are told there is none */
    assert_int_equal(released(&h, job, 2, 2, rid, NULL, 0, 0), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 2);
    assert_int_equal(h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, 1)->n_task_ids, 0);
    assert_int_equal(h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, 0)->n_task_ids, 0);
    assert_int_equal(info(&h, job, 2).steals_parked, 0);
    assert_int_equal(holder(&h, job, 2, 3), 2);
    h_fini(&h);
}

static size_t n_steal_actions(h_t *h)
{
    return h_count(h, TIDE_ACT_GIVE_TASKS) + h_count(h, TIDE_ACT_RELEASE_TASKS);
}

/* A steal that cannot be served (a rank never declares its share) is answered "none" steal_park_ms
 * after it parked, each thief at its own deadline: the job's timer re-arms for the next one, and
 * again for a thief that parks after it went idle. A replay gets the same answer; the deadline goes
 * with the pools. */
static void test_parked_steal_deadline(void **state)
{
    h_t h;
    tide_job_t *job;
    const tide_action_t *a;
    tide_job_t *out;
    int64_t t0;
    (void)state;

    h_init(&h, NULL);
    assert_int_equal(tide_core_config(h.core)->steal_park_ms, 2000);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    t0 = h.mono;
    assert_int_equal(job->steal_park_at, 0);
    /* rank 2 never declares its share */
    assert_int_equal(declare(&h, job, 0, 1, NULL, 0, 4), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 4), 0);
    assert_int_equal(steal(&h, job, 0, 1, 1), 0);
    assert_int_equal(job->steal_park_at, t0 + 2000);
    h_jump(&h, 500);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    assert_int_equal(job->steal_park_at, t0 + 2000); /* the earliest deadline */
    assert_int_equal(info(&h, job, 1).steals_parked, 2);
    assert_int_equal(n_steal_actions(&h), 0);

    h_jump(&h, 1499);
    assert_int_equal(n_steal_actions(&h), 0);
    h_jump(&h, 1); /* t0 + 2000: rank 0's deadline, not yet rank 1's */
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->rank, 0);
    assert_int_equal(a->request_id, 1);
    assert_int_equal(a->n_task_ids, 0);
    assert_int_equal(n_steal_actions(&h), 1);
    assert_int_equal(info(&h, job, 1).steals_parked, 1);
    assert_int_equal(job->steal_park_at, t0 + 2500);
    h_clear(&h);
    h_jump(&h, 499);
    assert_int_equal(n_steal_actions(&h), 0);
    h_jump(&h, 1); /* t0 + 2500 */
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->rank, 1);
    assert_int_equal(a->request_id, 1);
    assert_int_equal(a->n_task_ids, 0);
    assert_int_equal(n_steal_actions(&h), 1);
    assert_int_equal(info(&h, job, 1).steals_parked, 0);
    assert_int_equal(job->steal_park_at, 0);
    h_clear(&h);

    /* a replay of an answered steal: the same answer at once, no deadline */
    assert_int_equal(steal(&h, job, 0, 1, 1), 0);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->rank, 0);
    assert_int_equal(a->n_task_ids, 0);
    assert_int_equal(job->steal_park_at, 0);
    h_clear(&h);
    h_jump(&h, 5000);
    assert_int_equal(n_steal_actions(&h), 0);

    /* the timer is idle: a thief that parks now arms it again */
    t0 = h.mono;
    assert_int_equal(steal(&h, job, 0, 1, 2), 0);
    assert_int_equal(n_steal_actions(&h), 0);
    assert_int_equal(job->steal_park_at, t0 + 2000);
    h_jump(&h, 1999);
    assert_int_equal(n_steal_actions(&h), 0);
    h_jump(&h, 1);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->rank, 0);
    assert_int_equal(a->request_id, 2);
    assert_int_equal(a->n_task_ids, 0);
    h_clear(&h);

    /* the deadline goes with the pools */
    assert_int_equal(steal(&h, job, 1, 1, 2), 0);
    assert_int_equal(job->steal_park_at, h.mono + 2000);
    assert_int_equal(tide_core_job_cancel(h.core, job->id, &out, &err), 0);
    assert_int_equal(job->steal_park_at, 0);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A parked thief served before its deadline (a declaration brought a victim) is not answered again
 * when the deadline passes; a thief put back in the queue after a failed retry keeps its own
 * deadline. steal_park_ms comes from the config. */
static void test_parked_steal_served_first(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[4] = {1, 2, 3, 4}, tail[2] = {4, 3};
    const tide_action_t *a;
    uint64_t rid;
    int64_t t0;
    (void)state;

    cfg.steal_park_ms = 700;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    t0 = h.mono;
    assert_int_equal(declare(&h, job, 0, 1, NULL, 0, 4), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 4), 0);
    assert_int_equal(steal(&h, job, 0, 1, 1), 0); /* deadline t0 + 700 */
    h_jump(&h, 100);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0); /* deadline t0 + 800 */
    assert_int_equal(job->steal_park_at, t0 + 700);
    h_jump(&h, 200);
    /* rank 2's share arrives: the first thief's steal goes to it; the second waits for that
     * answer (rank 2 is being asked already) */
    assert_int_equal(declare(&h, job, 2, 1, ids, 4, 4), 0);
    a = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(a->rank, 2);
    assert_int_equal(a->max_tasks, 2);
    rid = a->request_id;
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(info(&h, job, 1).steals_pending, 1);
    assert_int_equal(info(&h, job, 1).steals_parked, 1);
    h_clear(&h);

    /* t0 + 700: the served thief's old deadline passes: nothing (it waits on its victim) */
    h_jump(&h, 400);
    assert_int_equal(n_steal_actions(&h), 0);
    assert_int_equal(job->steal_park_at, t0 + 800);
    h_jump(&h, 99);
    assert_int_equal(n_steal_actions(&h), 0);
    /* t0 + 800: the one still parked is told there is none, at its first deadline */
    h_jump(&h, 1);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->rank, 1);
    assert_int_equal(a->n_task_ids, 0);
    assert_int_equal(n_steal_actions(&h), 1);
    assert_int_equal(info(&h, job, 1).steals_parked, 0);
    assert_int_equal(info(&h, job, 1).steals_pending, 1);
    h_clear(&h);
    h_jump(&h, 3000);
    assert_int_equal(n_steal_actions(&h), 0);

    /* the victim answers: the first thief's one and only answer */
    assert_int_equal(released(&h, job, 2, 1, rid, tail, 2, 2), 0);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->rank, 0);
    assert_int_equal(a->request_id, 1);
    assert_ids(a, tail, 2);
    assert_int_equal(n_steal_actions(&h), 1);
    h_clear(&h);
    h_jump(&h, 3000);
    assert_int_equal(n_steal_actions(&h), 0);
    assert_consistent(&h, job, 1, ids, 4);
    h_fini(&h);
}

/* Once every rank declared, nothing is queued anywhere, no release is out and no orphan waits, a
 * thief is told there is none even though the shares add up to less than the pool's total (ids
 * nobody declared do not exist, or went with a restarted scheduler). The parked thief answered so
 * by the last declaration is not answered again at its deadline. */
static void test_drained_below_total(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t a[2] = {1, 2}, b[1] = {3}, all[3] = {1, 2, 3};
    const tide_action_t *act;
    tide_task_pool_info_t i;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 4);
    assert_int_equal(declare(&h, job, 0, 1, a, 2, 10), 0);
    assert_int_equal(done(&h, job, 0, 1, a, 2, 0), 0);
    /* rank 1's one task is in its trainer's hands: nothing queued */
    assert_int_equal(declare(&h, job, 1, 1, b, 1, 10), 0);
    assert_int_equal(done(&h, job, 1, 1, NULL, 0, 0), 0);
    assert_int_equal(declare(&h, job, 2, 1, NULL, 0, 10), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 2, 1, 1), 0);
    assert_int_equal(n_steal_actions(&h), 0); /* rank 3 has not declared */
    assert_int_equal(info(&h, job, 1).steals_parked, 1);
    /* rank 3's share is empty: 3 of 10 declared, and that is all there is */
    assert_int_equal(declare(&h, job, 3, 1, NULL, 0, 10), 0);
    act = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(act->rank, 2);
    assert_int_equal(act->request_id, 1);
    assert_int_equal(act->n_task_ids, 0);
    assert_int_equal(n_steal_actions(&h), 1);
    i = info(&h, job, 1);
    assert_int_equal(i.total, 10);
    assert_int_equal(i.declared, 3);
    assert_int_equal(i.committed, 2);
    assert_int_equal(i.steals_parked, 0);
    h_clear(&h);
    h_jump(&h, 5000);
    assert_int_equal(n_steal_actions(&h), 0);
    /* another thief: none at once */
    assert_int_equal(steal(&h, job, 0, 1, 1), 0);
    act = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(act->rank, 0);
    assert_int_equal(act->n_task_ids, 0);
    assert_int_equal(holder(&h, job, 1, 3), 1);
    assert_consistent(&h, job, 1, all, 3);
    h_fini(&h);
}

/* --- stealing off --- */

static void test_no_stealing(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_spec_t spec = h_spec(2, 2, TIDE_PRIO_NORMAL);
    tide_job_t *job;
    uint64_t ids[4] = {1, 2, 3, 4};
    const tide_action_t *a;
    (void)state;

    for (int variant = 0; variant < 2; variant++) {
        cfg.stealing = variant == 0;
        spec.no_stealing = variant == 0;
        h_init(&h, &cfg);
        h_node(&h, "n1", 2, NULL, 0, NULL);
        job = run_spec(&h, &spec);
        assert_int_equal(declare(&h, job, 0, 1, ids, 4, 4), 0);
        assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 4), 0);
        h_clear(&h);
        assert_int_equal(steal(&h, job, 1, 1, 1), 0);
        a = only(&h, TIDE_ACT_GIVE_TASKS);
        assert_int_equal(a->n_task_ids, 0);
        assert_int_equal(a->rank, 1);
        assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
        for (int i = 0; i < 4; i++)
            assert_int_equal(holder(&h, job, 1, ids[i]), 0); /* rank 0's own, untouched */
        assert_int_equal(done(&h, job, 0, 1, ids, 4, 0), 0);
        assert_int_equal(info(&h, job, 1).committed, 4);
        assert_int_equal(job->tasks_stolen, 0);
        assert_int_equal(job->steal_requests, 1);
        h_fini(&h);
    }
}

/* --- orphans --- */

static void test_orphans_of_a_gone_holder(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r2[4] = {11, 12, 13, 14};
    uint64_t all[12] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14}, six[1] = {6};
    const tide_action_t *a;
    uint64_t got[8];
    size_t n;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 4);
    assert_int_equal(declare(&h, job, 0, 1, ids, 8, 12), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 12), 0);
    assert_int_equal(declare(&h, job, 2, 1, r2, 4, 12), 0);
    assert_int_equal(declare(&h, job, 3, 1, NULL, 0, 12), 0);
    assert_int_equal(done(&h, job, 0, 1, six, 1, 6),
                     0); /* it ran 6; 7 and 8 were in its hands/deque */
    h_clear(&h);

    /* rank 0 is lost with its worker while its tasks are not done: they become orphans (the
     * generation would end with it; the pools see the loss first)... */
    tide__tasks_rank_gone(h.core, job, 0, true);
    assert_int_equal(info(&h, job, 1).orphaned, 7);
    assert_int_equal(holder(&h, job, 1, 1), -3);
    assert_int_equal(holder(&h, job, 1, 6), -1);
    assert_consistent(&h, job, 1, all, 12);
    h_clear(&h);
    /* ...given to the next thief before any victim is asked (ceil(7 / 2) of them) */
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->n_task_ids, 4);
    n = a->n_task_ids;
    memcpy(got, a->task_ids, n * sizeof(*got));
    for (size_t i = 0; i < n; i++)
        assert_int_equal(holder(&h, job, 1, got[i]), 1);
    assert_int_equal(job->tasks_stolen, 4);
    assert_int_equal(info(&h, job, 1).orphaned, 3);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 3, 1, 1), 0);
    assert_int_equal(only(&h, TIDE_ACT_GIVE_TASKS)->n_task_ids, 2);
    assert_int_equal(info(&h, job, 1).orphaned, 1);
    assert_consistent(&h, job, 1, all, 12);
    h_fini(&h);
}

static void test_orphans_of_a_dead_rank(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t ids[4] = {1, 2, 3, 4}, r1[2] = {5, 6}, all[6] = {1, 2, 3, 4, 5, 6};
    uint64_t rid;
    (void)state;

    /* A lost rank (its worker died) while the generation goes on, as an elastic job would: its
     * tasks go to the next thief; a release it was asked for is given up and its thief served
     * again. */
    h_init(&h, NULL);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(declare(&h, job, 0, 1, ids, 4, 6), 0);
    assert_int_equal(declare(&h, job, 1, 1, r1, 2, 6), 0);
    assert_int_equal(declare(&h, job, 2, 1, NULL, 0, 6), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 2, 1, 1), 0);
    assert_int_equal(only(&h, TIDE_ACT_RELEASE_TASKS)->rank, 0);
    h_clear(&h);
    tide__tasks_rank_gone(h.core, job, 0, true);
    /* the thief waiting on rank 0 gets its orphans at once */
    assert_int_equal(only(&h, TIDE_ACT_GIVE_TASKS)->n_task_ids, 2);
    assert_int_equal(only(&h, TIDE_ACT_GIVE_TASKS)->rank, 2);
    assert_int_equal(info(&h, job, 1).orphaned, 2);
    assert_consistent(&h, job, 1, all, 6);
    h_clear(&h);
    /* the thief is gone before its victim answers: what the victim released becomes orphans */
    assert_int_equal(steal(&h, job, 2, 1, 2), 0); /* orphans first */
    assert_int_equal(only(&h, TIDE_ACT_GIVE_TASKS)->n_task_ids, 1);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 2, 1, 3), 0); /* the last orphan */
    assert_int_equal(only(&h, TIDE_ACT_GIVE_TASKS)->n_task_ids, 1);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 2, 1, 4), 0); /* now rank 1 is asked */
    rid = only(&h, TIDE_ACT_RELEASE_TASKS)->request_id;
    h_clear(&h);
    tide__tasks_rank_gone(h.core, job, 2, true);
    {
        uint64_t six[1] = {6};
        assert_int_equal(released(&h, job, 1, 1, rid, six, 1, 1), 0);
    }
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(holder(&h, job, 1, 6), -3);
    assert_consistent(&h, job, 1, all, 6);
    h_fini(&h);
}

/* A rank that exits by itself (code 0) while the generation goes on may have run what it still
 * held: those tasks stay its own, never orphans, never given to a thief. It is no victim and no
 * thief; its tasks do not keep the others' steals waiting, nor the pool from being dropped once
 * the live ranks moved on. A rank lost with its worker, by contrast, orphans what it held. */
static void test_exited_rank_keeps_its_tasks(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r2[4] = {11, 12, 13, 14}, six[1] = {6};
    uint64_t all[12] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14};
    uint64_t t1[2] = {14, 13}, t3[1] = {12}, eleven[1] = {11};
    const tide_action_t *a;
    uint64_t rid;
    (void)state;

    cfg.max_task_pools = 2;
    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 4);
    assert_int_equal(declare(&h, job, 0, 1, ids, 8, 12), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 12), 0);
    assert_int_equal(declare(&h, job, 2, 1, r2, 4, 12), 0);
    assert_int_equal(declare(&h, job, 3, 1, NULL, 0, 12), 0);
    assert_int_equal(done(&h, job, 0, 1, six, 1, 6), 0);
    /* rank 3 steals from rank 0 (6 queued, rank 2 has 4)... */
    h_clear(&h);
    assert_int_equal(steal(&h, job, 3, 1, 1), 0);
    a = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(a->rank, 0);
    h_clear(&h);

    /* ...and rank 0's trainer exits (code 0) before answering */
    tide_core_rank_exited(h.core, W(job, 0), job->id, job->generation, 0, 0, NULL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(info(&h, job, 1).orphaned, 0);
    assert_int_equal(info(&h, job, 1).queued, 11);
    for (int i = 0; i < 8; i++)
        assert_int_equal(holder(&h, job, 1, ids[i]), i == 5 ? -1 : 0);
    assert_consistent(&h, job, 1, all, 12);
    /* its thief is served again: by rank 2, not with rank 0's tasks */
    a = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(a->rank, 2);
    assert_int_equal(a->max_tasks, 2);
    rid = a->request_id;
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    h_clear(&h);
    assert_int_equal(released(&h, job, 2, 1, rid, t1, 2, 2), 0);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->rank, 3);
    assert_ids(a, t1, 2);
    h_clear(&h);
    /* another thief: rank 2 again (2 queued), never rank 0 (7 held) */
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    a = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(a->rank, 2);
    assert_int_equal(a->max_tasks, 1);
    rid = a->request_id;
    h_clear(&h);
    assert_int_equal(released(&h, job, 2, 1, rid, t3, 1, 1), 0);
    assert_ids(only(&h, TIDE_ACT_GIVE_TASKS), t3, 1);
    assert_int_equal(job->tasks_stolen, 3);
    assert_consistent(&h, job, 1, all, 12);

    /* the live ranks run what they hold: then there is nothing left for them, though rank 0's
     * seven tasks are not committed */
    assert_int_equal(done(&h, job, 2, 1, eleven, 1, 0), 0);
    assert_int_equal(done(&h, job, 3, 1, t1, 2, 0), 0);
    assert_int_equal(done(&h, job, 1, 1, t3, 1, 0), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 2), 0);
    a = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(a->rank, 1);
    assert_int_equal(a->n_task_ids, 0);
    assert_int_equal(n_steal_actions(&h), 1);
    assert_int_equal(info(&h, job, 1).committed, 5);
    assert_int_equal(info(&h, job, 1).orphaned, 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(holder(&h, job, 1, ids[i]), i == 5 ? -1 : 0);
    assert_consistent(&h, job, 1, all, 12);
    h_clear(&h);

    /* the live ranks move on: step 1 goes, incomplete (rank 0 does not count) */
    assert_int_equal(declare(&h, job, 1, 2, NULL, 0, 1), 0);
    assert_int_equal(declare(&h, job, 3, 2, NULL, 0, 1), 0);
    assert_int_equal(declare(&h, job, 2, 3, NULL, 0, 1), 0);
    assert_false(has_pool(&h, job, MEMBER, 1));
    assert_true(has_pool(&h, job, MEMBER, 3));
    h_check_invariants(&h);
    h_fini(&h);

    /* The same shape, but rank 0 is lost with its worker: its tasks are orphans, and its waiting
     * thief gets them at once (the generation ends just after). */
    cfg = config();
    cfg.max_restarts = 1;
    h_init(&h, &cfg);
    h_node(&h, "n1", 4, NULL, 0, NULL);
    job = run(&h, 4);
    assert_int_equal(declare(&h, job, 0, 1, ids, 8, 12), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 12), 0);
    assert_int_equal(declare(&h, job, 2, 1, r2, 4, 12), 0);
    assert_int_equal(declare(&h, job, 3, 1, NULL, 0, 12), 0);
    assert_int_equal(done(&h, job, 0, 1, six, 1, 6), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 3, 1, 1), 0);
    assert_int_equal(only(&h, TIDE_ACT_RELEASE_TASKS)->rank, 0);
    h_clear(&h);
    tide_core_worker_failed(h.core, W(job, 0), "xid 79");
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, 3);
    assert_non_null(a);
    assert_int_equal(a->request_id, 1);
    assert_int_equal(a->n_task_ids, 4); /* ceil(7 / 2) of the orphans */
    for (size_t i = 0; i < a->n_task_ids; i++)
        assert_true(a->task_ids[i] >= 1 && a->task_ids[i] <= 8 && a->task_ids[i] != 6);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
    h_fini(&h);
}

static void test_victim_loses_its_stream(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {11, 12, 13, 14};
    uint64_t all[10] = {1, 2, 3, 4, 5, 6, 11, 12, 13, 14}, tail[3] = {6, 5, 4};
    uint64_t rid, rid2;
    tide_worker_t *v;
    void *conn;
    const tide_action_t *act;
    (void)state;

    h_init(&h, NULL);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(declare(&h, job, 0, 1, a, 6, 10), 0);
    assert_int_equal(declare(&h, job, 1, 1, b, 4, 10), 0);
    assert_int_equal(declare(&h, job, 2, 1, NULL, 0, 10), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 2, 1, 1), 0);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->rank, 0);
    rid = act->request_id;
    h_clear(&h);
    /* the victim's stream ends: the release is cancelled for the thief, which moves on */
    v = W(job, 0);
    tide_core_worker_disconnected(h.core, v, v->conn, false);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->rank, 1);
    assert_int_equal(act->max_tasks, 2);
    rid2 = act->request_id;
    h_clear(&h);
    /* it comes back: the release is sent again, same id; what it names now becomes orphans... */
    conn = new_conn();
    reregister(&h, v, conn, job, 0);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->request_id, rid);
    assert_ptr_equal(act->conn, conn);
    h_clear(&h);
    assert_int_equal(released(&h, job, 0, 1, rid, tail, 3, 3), 0);
    assert_int_equal(h_count(&h, TIDE_ACT_GIVE_TASKS), 0);
    assert_int_equal(info(&h, job, 1).orphaned, 3);
    assert_consistent(&h, job, 1, all, 10);
    /* ...the thief gets what rank 1 released, and orphans at its next steal */
    {
        uint64_t t2[2] = {14, 13};
        assert_int_equal(released(&h, job, 1, 1, rid2, t2, 2, 2), 0);
        assert_ids(only(&h, TIDE_ACT_GIVE_TASKS), t2, 2);
    }
    h_clear(&h);
    assert_int_equal(steal(&h, job, 2, 1, 2), 0);
    assert_int_equal(only(&h, TIDE_ACT_GIVE_TASKS)->n_task_ids, 2);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
    assert_consistent(&h, job, 1, all, 10);
    h_fini(&h);
}

/* The victim released tasks but its answer was lost with its stream (DST seeds 1074948, 1088481): the
 * release stays outstanding with no thief, and what it names becomes orphans when the victim, back,
 * answers it again. A thief parked meanwhile is not told "none" at its deadline (the ranks would end
 * the step without those tasks); it gets them with the answer. */
static void test_parked_steal_waits_for_a_lost_release(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t a[4] = {1, 2, 3, 4}, tail[2] = {4, 3}, rid;
    tide_worker_t *v;
    const tide_action_t *act;
    (void)state;

    cfg.steal_park_ms = 700;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(declare(&h, job, 0, 1, a, 4, 4), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 4), 0);
    assert_int_equal(declare(&h, job, 2, 1, NULL, 0, 4), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->rank, 0);
    rid = act->request_id;
    h_clear(&h);
    /* rank 0 released 2 (they left its deque); the answer dies with its stream */
    v = W(job, 0);
    tide_core_worker_disconnected(h.core, v, v->conn, false);
    assert_int_equal(n_steal_actions(&h), 0);
    assert_int_equal(info(&h, job, 1).steals_parked, 1);
    h_jump(&h, 1000); /* past the deadline */
    assert_int_equal(n_steal_actions(&h), 0);
    assert_int_equal(info(&h, job, 1).steals_parked, 1);
    /* back: the release again, answered as before; the thief gets the orphans */
    reregister(&h, v, new_conn(), job, 0);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->request_id, rid);
    h_clear(&h);
    assert_int_equal(released(&h, job, 0, 1, rid, tail, 2, 2), 0);
    act = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(act->rank, 1);
    assert_int_equal(act->n_task_ids, 1);
    assert_int_equal(info(&h, job, 1).steals_parked, 0);
    assert_consistent(&h, job, 1, a, 4);
    h_fini(&h);
}

/* --- pool limit --- */

static void test_pool_limit(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t a[2] = {1, 2};
    tide_task_pool_info_t i;
    (void)state;

    /* rank 1 declares nothing: it never moves on, so only complete pools make room */
    cfg.max_task_pools = 2;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    assert_int_equal(declare(&h, job, 0, 1, a, 2, 2), 0);
    assert_int_equal(declare(&h, job, 0, 2, a, 2, 2), 0);
    assert_int_equal(declare(&h, job, 0, 3, a, 2, 2), -ENOSPC);
    assert_contains(err.text, "none is complete");
    assert_int_equal(tide_core_task_pool(h.core, job, MEMBER, 3, &i), -ENOENT);
    assert_int_equal(info(&h, job, 1).declared, 2);
    assert_int_equal(info(&h, job, 2).declared, 2);
    /* step 2 completes: it is the one dropped for step 3 (step 1 is older but open) */
    assert_int_equal(done(&h, job, 0, 2, a, 2, 0), 0);
    assert_int_equal(declare(&h, job, 0, 3, a, 2, 2), 0);
    assert_int_equal(tide_core_task_pool(h.core, job, MEMBER, 2, &i), -ENOENT);
    assert_int_equal(info(&h, job, 1).declared, 2);
    assert_int_equal(info(&h, job, 3).declared, 2);
    /* then step 1 completes, and step 3; a new one drops the oldest complete: step 1 */
    assert_int_equal(done(&h, job, 0, 1, a, 2, 0), 0);
    assert_int_equal(done(&h, job, 0, 3, a, 2, 0), 0);
    assert_int_equal(declare(&h, job, 0, 4, a, 2, 2), 0);
    assert_int_equal(tide_core_task_pool(h.core, job, MEMBER, 1, &i), -ENOENT);
    assert_int_equal(info(&h, job, 3).committed, 2);
    /* a detached pool of the same step is another pool */
    memset(&err, 0, sizeof(err));
    assert_int_equal(tide_core_tasks_declared(h.core, W(job, 0), job->id, job->generation, 0,
                                              TIDE_TASK_DETACHED, 4, a, 2, 2, &err),
                     0);
    assert_int_equal(tide_core_task_holder(h.core, job, TIDE_TASK_DETACHED, 4, 1), 0);
    assert_int_equal(tide_core_task_pool(h.core, job, MEMBER, 3, &i), -ENOENT);
    h_fini(&h);
}

/* --- pools every rank moved on from --- */

static int declare_k(h_t *h, tide_job_t *job, int r, tide_task_kind_t kind, int64_t step,
                     const uint64_t *ids, size_t n, uint64_t total)
{
    memset(&err, 0, sizeof(err));
    return tide_core_tasks_declared(h->core, W(job, r), job->id, job->generation, r, kind, step,
                                    ids, n, total, &err);
}

static int done_k(h_t *h, tide_job_t *job, int r, tide_task_kind_t kind, int64_t step,
                  const uint64_t *ids, size_t n)
{
    memset(&err, 0, sizeof(err));
    return tide_core_tasks_done(h->core, W(job, r), job->id, job->generation, r, kind, step, ids, n,
                                0, &err);
}

/* A report for a pool that is over (-ESTALE, "is over") changes nothing: no action, the same
 * counters and the same places for the ids of the pools still open. */
static void assert_stale(h_t *h, tide_job_t *job, int rc, int64_t open_step, const uint64_t *ids,
                         size_t n)
{
    assert_int_equal(rc, -ESTALE);
    assert_contains(err.text, "is over");
    assert_int_equal(n_actions(h), 0);
    if (open_step >= 0)
        assert_consistent(h, job, open_step, ids, n);
}

/* Completions still unreported keep step 1 incomplete: it goes for step 3 once every rank declared
 * step 2, not before; what still names it afterwards is stale and changes nothing. */
static void test_superseded_pool(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t a[2] = {1, 2}, b[2] = {3, 4}, c[2] = {5, 6}, one[1] = {1}, two[1] = {2}, six[1] = {6};
    uint64_t a2[2] = {11, 12}, b2[2] = {13, 14}, c2[2] = {15, 16}, a3[1] = {21};
    uint64_t all1[6] = {1, 2, 3, 4, 5, 6}, all2[6] = {11, 12, 13, 14, 15, 16};
    uint64_t rid, committed, requests, stolen;
    const tide_action_t *act;
    (void)state;

    cfg.max_task_pools = 2;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(declare(&h, job, 0, 1, a, 2, 6), 0);
    assert_int_equal(declare(&h, job, 1, 1, b, 2, 6), 0);
    assert_int_equal(declare(&h, job, 2, 1, c, 2, 6), 0);
    assert_int_equal(done(&h, job, 0, 1, one, 1, 1), 0); /* 2 runs, its completion withheld */
    assert_int_equal(done(&h, job, 1, 1, b, 2, 0), 0);
    h_clear(&h);
    /* rank 1 steals; rank 2 (two queued) is asked, and its answer is still on the way */
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->rank, 2);
    rid = act->request_id;
    h_clear(&h);

    assert_int_equal(declare(&h, job, 0, 2, a2, 2, 6), 0);
    assert_int_equal(declare(&h, job, 1, 2, b2, 2, 6), 0);
    /* rank 2 has not declared step 2: step 1 stays, and the table is full */
    assert_int_equal(declare(&h, job, 0, 3, a3, 1, 1), -ENOSPC);
    assert_contains(err.text, "none is complete");
    assert_false(has_pool(&h, job, MEMBER, 3));
    assert_int_equal(n_actions(&h), 0);
    assert_int_equal(info(&h, job, 1).steals_pending, 1);
    assert_int_equal(holder(&h, job, 1, 2), 0);
    assert_consistent(&h, job, 1, all1, 6);
    /* nor does any other rank's declaration of step 3 make room (rank 1 counts, rank 2 not) */
    assert_int_equal(declare(&h, job, 1, 3, NULL, 0, 1), -ENOSPC);
    assert_int_equal(n_actions(&h), 0);

    /* rank 2 moves on too (its share of step 1 ran; completions withheld) */
    assert_int_equal(declare(&h, job, 2, 2, c2, 2, 6), 0);
    committed = job->tasks_committed;
    assert_int_equal(committed, 3);
    assert_int_equal(declare(&h, job, 0, 3, a3, 1, 1), 0);
    assert_false(has_pool(&h, job, MEMBER, 1));
    assert_int_equal(holder(&h, job, 1, 2), -4);
    assert_int_equal(info(&h, job, 3).declared, 1);
    assert_consistent(&h, job, 2, all2, 6);
    /* the thief waiting on it is told there is nothing left, under its steal id */
    act = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(act->rank, 1);
    assert_int_equal(act->step, 1);
    assert_int_equal(act->request_id, 1);
    assert_int_equal(act->n_task_ids, 0);
    assert_int_equal(n_actions(&h), 1);
    h_clear(&h);

    /* what still names step 1, or an older step, is stale and changes nothing */
    requests = job->steal_requests;
    stolen = job->tasks_stolen;
    assert_stale(&h, job, done(&h, job, 0, 1, two, 1, 0), 2, all2, 6);
    assert_stale(&h, job, done(&h, job, 2, 1, c, 2, 0), 2, all2, 6);
    assert_stale(&h, job, done(&h, job, 2, 0, c, 2, 0), 2, all2, 6);
    assert_stale(&h, job, steal(&h, job, 1, 1, 1), 2, all2, 6);
    assert_stale(&h, job, steal(&h, job, 1, 1, 2), 2, all2, 6);
    assert_stale(&h, job, steal(&h, job, 0, 0, 7), 2, all2, 6);
    assert_stale(&h, job, released(&h, job, 2, 1, rid, six, 1, 1), 2, all2, 6);
    assert_stale(&h, job, released(&h, job, 2, 0, rid, six, 1, 1), 2, all2, 6);
    assert_int_equal(job->tasks_committed, committed);
    assert_int_equal(job->steal_requests, requests);
    assert_int_equal(job->tasks_stolen, stolen);
    assert_int_equal(info(&h, job, 3).declared, 1);
    /* a step never seen above the dropped one is still unknown, as is step 1 of the other kind */
    assert_int_equal(steal(&h, job, 1, 4, 1), -ENOENT);
    assert_int_equal(done(&h, job, 1, 4, b2, 1, 0), -ENOENT);
    assert_int_equal(released(&h, job, 2, 4, rid, six, 1, 0), -ENOENT);
    assert_int_equal(done_k(&h, job, 0, TIDE_TASK_DETACHED, 1, two, 1), -ENOENT);
    assert_int_equal(n_actions(&h), 0);
    assert_int_equal(job->tasks_committed, committed);
    /* the open pools work as before */
    assert_int_equal(done(&h, job, 0, 2, a2, 2, 0), 0);
    assert_int_equal(job->tasks_committed, committed + 2);
    assert_consistent(&h, job, 2, all2, 6);
    h_fini(&h);
}

/* A rank that is gone does not keep a pool: neither one it was in when it went, nor one opened
 * after it went. */
static void test_superseded_pool_gone_rank(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t a[2] = {1, 2}, b[2] = {3, 4}, c[2] = {5, 6}, one[1] = {1};
    uint64_t a2[1] = {11}, a3[1] = {21}, a4[1] = {31};
    const tide_action_t *act;
    (void)state;

    cfg.max_task_pools = 2;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(declare(&h, job, 0, 1, a, 2, 6), 0);
    assert_int_equal(declare(&h, job, 1, 1, b, 2, 6), 0);
    assert_int_equal(declare(&h, job, 2, 1, c, 2, 6), 0);
    assert_int_equal(done(&h, job, 2, 1, c, 2, 0), 0);
    assert_int_equal(done(&h, job, 0, 1, one, 1, 0), 0);
    /* rank 2's trainer is done with the job: it exits (code 0), holding nothing */
    tide_core_rank_exited(h.core, W(job, 2), job->id, job->generation, 2, 0, NULL);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(info(&h, job, 1).orphaned, 0);
    h_clear(&h);

    /* the others move on; completions 2, 3 and 4 are still on their way */
    assert_int_equal(declare(&h, job, 0, 2, a2, 1, 1), 0);
    assert_int_equal(declare(&h, job, 1, 2, NULL, 0, 1), 0);
    assert_int_equal(declare(&h, job, 0, 3, a3, 1, 1), 0);
    assert_false(has_pool(&h, job, MEMBER, 1));
    assert_int_equal(info(&h, job, 2).declared, 1);
    assert_int_equal(info(&h, job, 3).declared, 1);
    assert_int_equal(n_actions(&h), 0);
    assert_int_equal(done(&h, job, 1, 1, b, 2, 0), -ESTALE);

    /* step 2 opened after rank 2 left: its empty-handed thief is told there is nothing left (rank 0
     * holds its one task in its trainer, nothing queued) rather than waiting for rank 2 */
    assert_int_equal(done(&h, job, 0, 2, NULL, 0, 0), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 2, 1), 0);
    act = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(act->rank, 1);
    assert_int_equal(act->n_task_ids, 0);
    assert_int_equal(info(&h, job, 2).steals_parked, 0);
    h_clear(&h);
    /* and it goes for step 4 once ranks 0 and 1 declared step 3, its task unreported */
    assert_int_equal(declare(&h, job, 0, 4, a4, 1, 1), -ENOSPC);
    assert_int_equal(declare(&h, job, 1, 3, NULL, 0, 1), 0);
    assert_int_equal(declare(&h, job, 0, 4, a4, 1, 1), 0);
    assert_false(has_pool(&h, job, MEMBER, 2));
    assert_true(has_pool(&h, job, MEMBER, 3));
    assert_int_equal(info(&h, job, 4).declared, 1);
    assert_int_equal(done(&h, job, 0, 2, a2, 1, 0), -ESTALE);
    h_check_invariants(&h);
    h_fini(&h);
}

/* Moving on is per kind: a rank that declared only a newer pool of the other kind still keeps
 * the older one. */
static void test_superseded_pool_per_kind(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t a[2] = {1, 2}, b[2] = {3, 4}, d[1] = {7}, m2[1] = {11}, m3[1] = {21};
    (void)state;

    cfg.max_task_pools = 3;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    assert_int_equal(declare(&h, job, 0, 1, a, 2, 4), 0);
    assert_int_equal(declare(&h, job, 1, 1, b, 2, 4), 0);
    /* rank 1 opens a detached pool of a newer step, rank 0 a member one */
    assert_int_equal(declare_k(&h, job, 1, TIDE_TASK_DETACHED, 5, d, 1, 1), 0);
    assert_int_equal(declare(&h, job, 0, 2, m2, 1, 2), 0);
    /* the table is full: member step 1 is kept (rank 1 has no newer member pool), and detached
     * step 5 too (a newer member step is not a newer detached one) */
    assert_int_equal(declare(&h, job, 0, 3, m3, 1, 1), -ENOSPC);
    assert_int_equal(declare_k(&h, job, 0, TIDE_TASK_DETACHED, 6, NULL, 0, 1), -ENOSPC);
    assert_true(has_pool(&h, job, MEMBER, 1));
    assert_true(has_pool(&h, job, TIDE_TASK_DETACHED, 5));
    assert_int_equal(n_actions(&h), 0);
    /* rank 1 declares member step 3 (skipping step 2): its own declaration counts, rank 0 is at
     * step 2, so member step 1 goes; the detached pool stays */
    assert_int_equal(declare(&h, job, 1, 3, NULL, 0, 1), 0);
    assert_false(has_pool(&h, job, MEMBER, 1));
    assert_true(has_pool(&h, job, TIDE_TASK_DETACHED, 5));
    assert_true(has_pool(&h, job, MEMBER, 2));
    assert_int_equal(declare(&h, job, 0, 3, m3, 1, 1), 0);
    assert_int_equal(info(&h, job, 3).declared, 1);
    assert_int_equal(done(&h, job, 1, 1, b, 2, 0), -ESTALE);
    /* dropping member step 1 says nothing about detached steps */
    assert_int_equal(done_k(&h, job, 1, TIDE_TASK_DETACHED, 1, d, 1), -ENOENT);
    assert_int_equal(done_k(&h, job, 1, TIDE_TASK_DETACHED, 5, d, 1), 0);
    h_check_invariants(&h);
    h_fini(&h);
}

/* A declaration for a pool that is over does not open it again: the thief of such a pool would wait
 * for shares nobody declares any more (and it would take a newer step's room). */
static void test_declaration_of_a_dropped_pool(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t a[2] = {1, 2}, a2[1] = {11}, a3[1] = {21}, a4[1] = {31};
    (void)state;

    cfg.max_task_pools = 2;
    h_init(&h, &cfg);
    h_node(&h, "n1", 2, NULL, 0, NULL);
    job = run(&h, 2);
    /* rank 1's share of step 1 is empty and its declaration late: the pool completes without it */
    assert_int_equal(declare(&h, job, 0, 1, a, 2, 2), 0);
    assert_int_equal(done(&h, job, 0, 1, a, 2, 0), 0);
    assert_int_equal(declare(&h, job, 0, 2, a2, 1, 1), 0);
    assert_int_equal(done(&h, job, 0, 2, a2, 1, 0), 0);
    assert_int_equal(declare(&h, job, 0, 3, a3, 1, 1), 0); /* step 1 (complete, oldest) goes */
    assert_false(has_pool(&h, job, MEMBER, 1));
    assert_int_equal(declare(&h, job, 0, 4, a4, 1, 1), 0); /* step 2 (complete) goes */
    assert_false(has_pool(&h, job, MEMBER, 2));
    assert_int_equal(done(&h, job, 0, 3, a3, 1, 0), 0);
    h_clear(&h);
    /* rank 1 declares step 1 now, and then steals: both stale, nothing reopened or dropped */
    assert_stale(&h, job, declare(&h, job, 1, 1, NULL, 0, 2), 3, a3, 1);
    assert_stale(&h, job, declare(&h, job, 1, 2, NULL, 0, 1), 3, a3, 1);
    assert_stale(&h, job, steal(&h, job, 1, 1, 1), 3, a3, 1);
    assert_false(has_pool(&h, job, MEMBER, 1));
    assert_true(has_pool(&h, job, MEMBER, 3));
    assert_true(has_pool(&h, job, MEMBER, 4));
    assert_int_equal(job->steal_requests, 0);
    /* a step that never had a pool above the dropped ones opens as usual */
    assert_int_equal(declare(&h, job, 1, 5, NULL, 0, 1), 0); /* step 3 (complete) goes */
    assert_true(has_pool(&h, job, MEMBER, 5));
    h_check_invariants(&h);
    h_fini(&h);
}

/* --- pools end with their generation --- */

static void count_pool(void *ud, tide_task_kind_t kind, int64_t step)
{
    (void)kind;
    (void)step;
    (*(int *)ud)++;
}

static void test_generation_change_frees_pools(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t ids[4] = {1, 2, 3, 4}, tail[2] = {4, 3}, rid;
    tide_task_pool_info_t i;
    const tide_action_t *a;
    int32_t gen;
    int pools = 0;
    tide_worker_t *w0;
    (void)state;

    cfg.max_restarts = 1;
    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 2);
    assert_int_equal(declare(&h, job, 0, 1, ids, 4, 4), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 4), 0);
    tide_core_task_pools_each(h.core, job, count_pool, &pools);
    assert_int_equal(pools, 1);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    rid = only(&h, TIDE_ACT_RELEASE_TASKS)->request_id;
    h_clear(&h);
    assert_int_equal(released(&h, job, 0, 1, rid, tail, 2, 2), 0);
    /* the GiveTasks ids outlive the pool until actions_clear (ASan checks) */
    gen = job->generation;
    w0 = W(job, 0);
    tide_core_worker_failed(h.core, W(job, 1), "xid 79");
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_int_equal(tide_core_task_pool(h.core, job, MEMBER, 1, &i), -ENOENT);
    a = h_find(&h, TIDE_ACT_GIVE_TASKS, NULL, -1);
    assert_non_null(a);
    assert_ids(a, tail, 2);
    h_stop_all(&h);
    h_start_all(&h);
    assert_int_equal(job->state, TIDE_JOB_RUNNING);
    assert_int_equal(job->generation, gen + 1);
    pools = 0;
    tide_core_task_pools_each(h.core, job, count_pool, &pools);
    assert_int_equal(pools, 0);
    /* reports of the old generation are stale */
    memset(&err, 0, sizeof(err));
    assert_int_equal(
        tide_core_tasks_declared(h.core, w0, job->id, gen, 0, MEMBER, 1, ids, 4, 4, &err), -ESTALE);
    /* the new generation starts its own pools */
    assert_int_equal(declare(&h, job, 0, 1, ids, 4, 4), 0);
    assert_int_equal(info(&h, job, 1).declared, 4);
    assert_int_equal(holder(&h, job, 1, 4), 0);
    /* the job ends: pools go with it, and late reports are stale */
    {
        tide_job_t *out;
        assert_int_equal(tide_core_job_cancel(h.core, job->id, &out, &err), 0);
    }
    assert_int_equal(tide_core_task_pool(h.core, job, MEMBER, 1, &i), -ENOENT);
    memset(&err, 0, sizeof(err));
    assert_int_equal(
        tide_core_steal_request(h.core, w0, job->id, job->generation, 0, MEMBER, 1, 1, &err),
        -ESTALE);
    h_check_invariants(&h);
    h_fini(&h);
}

/* --- stragglers --- */

static void progress(h_t *h, tide_job_t *job, int r, double task_seconds)
{
    tide_trainer_progress_t p = {.sdk = true,
                                 .step = 1,
                                 .peak_flops = 1e15,
                                 .task_seconds = task_seconds,
                                 .tasks_run = 100,
                                 .busy_fraction = 0.97};
    tide_core_rank_progress(h->core, W(job, r), job->id, job->generation, r, &p);
}

static void test_stragglers(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    const char *text;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(job->straggler_check_at, 0);
    progress(&h, job, 0, 0.0102);
    assert_int_equal(job->straggler_check_at, h.mono + 5000);
    progress(&h, job, 1, 0.0201);
    progress(&h, job, 2, 0.0100);
    h_jump(&h, 5000);
    assert_int_equal(job->ranks[1].straggler, TIDE_STRAGGLER_SLOW);
    assert_true(job->ranks[1].slowness > 1.96 && job->ranks[1].slowness < 1.98);
    assert_int_equal(job->ranks[1].slow_since_ms, H_WALL0 + h.mono);
    assert_int_equal(job->ranks[0].straggler, TIDE_STRAGGLER_NONE);
    assert_true(job->ranks[0].slowness == 1.0);
    assert_int_equal(job->stragglers, 0);
    assert_int_equal(h_count_event(&h, "worker.straggler"), 0);
    h_clear(&h);
    for (int i = 0; i < 5; i++) {
        h_jump(&h, 5000);
        assert_int_equal(job->ranks[1].straggler, TIDE_STRAGGLER_SLOW);
    }
    assert_int_equal(h_count_event(&h, "worker.straggler"), 0);
    h_jump(&h, 5000); /* slow for 30 s */
    assert_int_equal(job->ranks[1].straggler, TIDE_STRAGGLER_PERSISTENT);
    assert_int_equal(job->stragglers, 1);
    assert_int_equal(h_count_event(&h, "worker.straggler"), 1);
    text = h_event_text(&h, "worker.straggler", 0);
    assert_contains(text, "rank 1 on n1/gpu");
    assert_contains(text, "1.97x the job's median time per task (20.1 ms vs 10.2 ms) for 30 s");
    assert_contains(text, "0 of its tasks stolen");
    assert_ptr_equal(h_find_event(&h, "worker.straggler")->worker, W(job, 1));
    assert_ptr_equal(h_find_event(&h, "worker.straggler")->job, job);
    h_clear(&h);
    h_jump(&h, 5000);
    assert_int_equal(h_count_event(&h, "worker.straggler"), 0); /* reported once */
    assert_int_equal(job->stragglers, 1);
    /* it recovers */
    progress(&h, job, 1, 0.0110);
    h_jump(&h, 5000);
    assert_int_equal(job->ranks[1].straggler, TIDE_STRAGGLER_NONE);
    assert_int_equal(job->ranks[1].slow_since_ms, 0);
    assert_int_equal(job->stragglers, 0);
    assert_int_equal(h_count_event(&h, "worker.straggler_cleared"), 1);
    assert_contains(h_event_text(&h, "worker.straggler_cleared", 0), "rank 1");
    h_clear(&h);
    /* transient slowness never becomes a report */
    progress(&h, job, 2, 0.0300);
    h_jump(&h, 5000);
    assert_int_equal(job->ranks[2].straggler, TIDE_STRAGGLER_SLOW);
    progress(&h, job, 2, 0.0100);
    h_jump(&h, 5000);
    assert_int_equal(job->ranks[2].straggler, TIDE_STRAGGLER_NONE);
    assert_int_equal(
        h_count_event(&h, "worker.straggler") + h_count_event(&h, "worker.straggler_cleared"), 0);
    /* the check keeps running while the job runs, and stops with it */
    assert_true(job->straggler_check_at > h.mono);
    h_exit_all(&h, job);
    assert_int_equal(job->state, TIDE_JOB_SUCCEEDED);
    assert_int_equal(job->straggler_check_at, 0);
    h_fini(&h);
}

/* A slow rank does not steal from faster ones (it would finish their tasks later than they would);
 * it still gets tasks of a dead holder, and steals again once it is no longer slow. */
static void test_slow_ranks_do_not_steal(void **state)
{
    h_t h;
    tide_core_config_t cfg = config();
    tide_job_t *job;
    uint64_t a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {9, 10, 11, 12};
    const tide_action_t *act;
    (void)state;

    h_init(&h, &cfg);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    progress(&h, job, 0, 0.0100);
    progress(&h, job, 1, 0.0200);
    progress(&h, job, 2, 0.0100);
    h_jump(&h, 5000);
    assert_int_equal(job->ranks[1].straggler, TIDE_STRAGGLER_SLOW);
    assert_int_equal(declare(&h, job, 0, 1, a, 4, 12), 0);
    assert_int_equal(declare(&h, job, 1, 1, b, 4, 12), 0);
    assert_int_equal(declare(&h, job, 2, 1, c, 4, 12), 0);
    assert_int_equal(done(&h, job, 1, 1, b, 4, 0), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    act = only(&h, TIDE_ACT_GIVE_TASKS);
    assert_int_equal(act->n_task_ids, 0);
    assert_int_equal(h_count(&h, TIDE_ACT_RELEASE_TASKS), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(holder(&h, job, 1, a[i]), 0);
    /* a fast rank steals as usual */
    assert_int_equal(done(&h, job, 2, 1, c, 4, 0), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 2, 1, 1), 0);
    act = only(&h, TIDE_ACT_RELEASE_TASKS);
    assert_int_equal(act->rank, 0);
    h_fini(&h);
}

static void test_job_steals_event(void **state)
{
    h_t h;
    tide_job_t *job;
    uint64_t ids[10], tail[5] = {9, 8, 7, 6, 5}, rid;
    (void)state;

    for (int i = 0; i < 10; i++)
        ids[i] = (uint64_t)i;
    h_init(&h, NULL);
    h_node(&h, "n1", 3, NULL, 0, NULL);
    job = run(&h, 3);
    assert_int_equal(declare(&h, job, 0, 1, ids, 10, 10), 0);
    assert_int_equal(declare(&h, job, 1, 1, NULL, 0, 10), 0);
    assert_int_equal(declare(&h, job, 2, 1, NULL, 0, 10), 0);
    h_clear(&h);
    assert_int_equal(steal(&h, job, 1, 1, 1), 0);
    rid = only(&h, TIDE_ACT_RELEASE_TASKS)->request_id;
    assert_int_equal(steal(&h, job, 2, 1, 1), 0); /* parked: rank 0 is being asked already */
    assert_int_equal(released(&h, job, 0, 1, rid, tail, 5, 5), 0);
    /* no event per steal: one summary at the next check, armed by the steal */
    assert_int_equal(h_count_event(&h, "job.steals"), 0);
    assert_true(job->straggler_check_at > 0);
    h_clear(&h);
    h_jump(&h, 5000);
    assert_int_equal(h_count_event(&h, "job.steals"), 1);
    assert_contains(h_event_text(&h, "job.steals", 0),
                    "tasks stolen in the last 5 s, 2 requests; most from rank 0 (");
    assert_int_equal(job->steals_reported, job->tasks_stolen);
    h_clear(&h);
    h_jump(&h, 5000);
    assert_int_equal(h_count_event(&h, "job.steals"), 0); /* nothing new */
    h_fini(&h);
}

/* --- randomized: workers, trainers and a lossy stream --- */

#define RT_RANKS 6
#define RT_TASKS 40
#define RT_MSGS  256

enum { M_DECL = 1, M_DONE, M_STEAL, M_REL, M_RELEASE, M_GIVE };

typedef struct rt_msg {
    int type;
    uint64_t rid; /* steal or release id */
    uint32_t max, queued;
    uint64_t ids[RT_TASKS];
    size_t n;
} rt_msg_t;

typedef struct rt_queue {
    rt_msg_t m[RT_MSGS];
    size_t head, n;
} rt_queue_t;

typedef struct rt_rank {
    uint64_t deque[RT_TASKS];
    size_t dn;
    bool has_hand;
    uint64_t hand;
    uint64_t done_ids[RT_TASKS];
    size_t ndone, done_sent;
    uint64_t decl[RT_TASKS];
    size_t ndecl;
    bool declared, decl_delivered;
    uint64_t waiting, last_steal;
    bool finished, exited, connected;
    bool moved_any; /* it released tasks or was given some: a reconnect declares what it holds */
    int moved;      /* newer steps declared after its no_task (move-on seeds) */
    struct {
        uint64_t rid;
        uint64_t ids[RT_TASKS];
        size_t n;
    } ans[64];
    size_t nans;
    rt_msg_t last_sent;
    bool has_last;
    rt_queue_t to_core, to_worker;
} rt_rank_t;

typedef struct rt {
    h_t h;
    tide_job_t *job;
    tide_task_kind_t kind;
    int64_t step;
    int n;
    uint64_t ids[RT_TASKS];
    int total;
    int run_count[RT_TASKS];
    rt_rank_t r[RT_RANKS];
    uint64_t rng;
    uint64_t rids[512]; /* release ids seen */
    size_t n_rids;
    uint64_t given_upto[RT_RANKS]; /* the newest steal id answered per rank */
    bool none_given;               /* the core told a rank there is nothing left */
    bool move_on;                  /* ranks hold completions back and declare steps + 1 and + 2 */
    bool dropped;                  /* the step's pool went for step + 2 */
    int lost_with[RT_TASKS];       /* the exited rank that still held it (-1: none) */
    int lost_runs[RT_TASKS];       /* and how often it had run then (0, or 1 unreported) */
    int n_lost;
} rt_t;

static bool rt_trace;

/* What the randomized runs exercised, summed over seeds: the test insists on each. */
static struct {
    uint64_t stolen, orphaned_seen, release_resent, give_replayed, steals_none, exits, disconnects;
    uint64_t superseded, stale; /* pools dropped incomplete; reports refused as stale */
    uint64_t lost, lost_ran, finished_exits, redeclared; /* tasks left with exited ranks (of them
                                                            run, unreported); exits after the
                                                            rank's no_task; declarations of
                                                            holdings */
} cover;

static uint64_t rnd(rt_t *t)
{
    t->rng ^= t->rng << 13;
    t->rng ^= t->rng >> 7;
    t->rng ^= t->rng << 17;
    return t->rng;
}

static int idx_of(uint64_t id)
{
    return (int)(id & 0xff);
}

static void q_push(rt_queue_t *q, const rt_msg_t *m)
{
    assert_true(q->n < RT_MSGS);
    q->m[(q->head + q->n++) % RT_MSGS] = *m;
}

static bool q_pop(rt_queue_t *q, rt_msg_t *m)
{
    if (q->n == 0)
        return false;
    *m = q->m[q->head];
    q->head = (q->head + 1) % RT_MSGS;
    q->n--;
    return true;
}

/* Routes the core's RELEASE/GIVE actions to the workers' queues (a stream that is gone drops them).
 */
static void rt_route(rt_t *t)
{
    size_t n;
    const tide_action_t *a = tide_core_actions(t->h.core, &n);

    for (size_t i = 0; i < n; i++) {
        rt_rank_t *R;
        rt_msg_t m;
        if (a[i].type != TIDE_ACT_RELEASE_TASKS && a[i].type != TIDE_ACT_GIVE_TASKS)
            continue;
        assert_ptr_equal(a[i].job, t->job);
        assert_int_equal(a[i].step, t->step);
        assert_int_equal(a[i].task_kind, t->kind);
        assert_true(a[i].rank >= 0 && a[i].rank < t->n);
        R = &t->r[a[i].rank];
        if (R->exited)
            fail_msg("core -> rank %d, which exited: type %d", a[i].rank, (int)a[i].type);
        if (rt_trace)
            fprintf(stderr, "  core -> rank %d: %s id %" PRIu64 " max %u n %zu%s\n", a[i].rank,
                    a[i].type == TIDE_ACT_RELEASE_TASKS ? "RELEASE" : "GIVE", a[i].request_id,
                    a[i].max_tasks, a[i].n_task_ids,
                    !R->connected || R->exited ? " (dropped)" : "");
        if (a[i].type == TIDE_ACT_RELEASE_TASKS) {
            for (size_t k = 0; k < t->n_rids; k++)
                cover.release_resent += t->rids[k] == a[i].request_id;
            if (t->n_rids < sizeof(t->rids) / sizeof(t->rids[0]))
                t->rids[t->n_rids++] = a[i].request_id;
        } else {
            cover.give_replayed += a[i].request_id <= t->given_upto[a[i].rank];
            if (a[i].request_id > t->given_upto[a[i].rank])
                t->given_upto[a[i].rank] = a[i].request_id;
            cover.steals_none += a[i].n_task_ids == 0;
            t->none_given |= a[i].n_task_ids == 0;
        }
        if (!R->connected || R->exited || a[i].conn != W(t->job, a[i].rank)->conn)
            continue;
        memset(&m, 0, sizeof(m));
        m.type = a[i].type == TIDE_ACT_RELEASE_TASKS ? M_RELEASE : M_GIVE;
        m.rid = a[i].request_id;
        m.max = a[i].max_tasks;
        m.n = a[i].n_task_ids;
        assert_true(m.n <= RT_TASKS);
        if (m.n)
            memcpy(m.ids, a[i].task_ids, m.n * sizeof(uint64_t));
        q_push(&R->to_worker, &m);
    }
    tide_core_actions_clear(t->h.core);
}

static void rt_send(rt_t *t, int r, const rt_msg_t *m)
{
    rt_rank_t *R = &t->r[r];

    if (!R->connected || R->exited)
        return; /* lost: re-sent after the reconnect */
    q_push(&R->to_core, m);
    R->last_sent = *m;
    R->has_last = true;
}

static void rt_send_done(rt_t *t, int r, bool all)
{
    rt_rank_t *R = &t->r[r];
    rt_msg_t m;

    memset(&m, 0, sizeof(m));
    m.type = M_DONE;
    for (size_t i = all ? 0 : R->done_sent; i < R->ndone; i++)
        m.ids[m.n++] = R->done_ids[i];
    m.queued = (uint32_t)R->dn;
    R->done_sent = R->ndone;
    rt_send(t, r, &m);
}

static void rt_deliver_core(rt_t *t, int r, const rt_msg_t *m)
{
    if (rt_trace)
        fprintf(stderr, "core <- rank %d: type %d rid %" PRIu64 " n %zu queued %u\n", r, m->type,
                m->rid, m->n, m->queued);
    rt_rank_t *R = &t->r[r];
    tide_worker_t *w = W(t->job, r);
    tide_error_t e = {{0}};
    int rc = 0;

    switch (m->type) {
    case M_DECL:
        rc = tide_core_tasks_declared(t->h.core, w, t->job->id, t->job->generation, r, t->kind,
                                      t->step, m->ids, m->n, (uint64_t)t->total, &e);
        R->decl_delivered = true;
        break;
    case M_DONE:
        rc = tide_core_tasks_done(t->h.core, w, t->job->id, t->job->generation, r, t->kind, t->step,
                                  m->ids, m->n, m->queued, &e);
        break;
    case M_STEAL:
        rc = tide_core_steal_request(t->h.core, w, t->job->id, t->job->generation, r, t->kind,
                                     t->step, m->rid, &e);
        break;
    case M_REL:
        rc = tide_core_tasks_released(t->h.core, w, t->job->id, t->job->generation, r, t->kind,
                                      t->step, m->rid, m->ids, m->n, m->queued, &e);
        break;
    }
    if (rc == -ESTALE && t->dropped &&
        tide_core_task_pool(t->h.core, t->job, t->kind, t->step, &(tide_task_pool_info_t){0}) ==
            -ENOENT) {
        /* the step's pool is over: the report changes nothing; a steal gets "none" from the
         * daemon (svc_workers.c), as for any steal the core refuses */
        assert_int_equal(h_count(&t->h, TIDE_ACT_RELEASE_TASKS), 0);
        assert_int_equal(h_count(&t->h, TIDE_ACT_GIVE_TASKS), 0);
        cover.stale++;
        rc = 0;
        if (m->type == M_STEAL && R->connected && !R->exited) {
            rt_msg_t none;
            memset(&none, 0, sizeof(none));
            none.type = M_GIVE;
            none.rid = m->rid;
            q_push(&R->to_worker, &none);
        }
    }
    if (rc != 0)
        fail_msg("rank %d message %d refused (%d): %s", r, m->type, rc, e.text);
    rt_route(t);
}

static void rt_deliver_worker(rt_t *t, int r, const rt_msg_t *m)
{
    rt_rank_t *R = &t->r[r];

    if (m->type == M_RELEASE) {
        rt_msg_t ans;
        size_t k;
        memset(&ans, 0, sizeof(ans));
        ans.type = M_REL;
        ans.rid = m->rid;
        for (k = 0; k < R->nans && k < 64; k++)
            if (R->ans[k].rid == m->rid)
                break;
        if (k == R->nans || k == 64) {
            /* from the tail of its deque, never what its trainer holds (the newest 64 answers are
             * remembered: the core re-sends only a release still outstanding, the newest) */
            k = R->nans++ % 64;
            R->ans[k].rid = m->rid;
            R->ans[k].n = 0;
            while (R->ans[k].n < m->max && R->dn > 0)
                R->ans[k].ids[R->ans[k].n++] = R->deque[--R->dn];
            R->moved_any |= R->ans[k].n > 0;
        }
        memcpy(ans.ids, R->ans[k].ids, R->ans[k].n * sizeof(uint64_t));
        ans.n = R->ans[k].n;
        ans.queued = (uint32_t)R->dn;
        rt_send(t, r, &ans);
    } else if (m->type == M_GIVE) {
        if (m->rid != R->waiting)
            return; /* a replay of an answer it already has */
        for (size_t i = 0; i < m->n; i++)
            R->deque[R->dn++] = m->ids[i];
        R->moved_any |= m->n > 0;
        R->waiting = 0;
        if (m->n == 0)
            R->finished = true;
    }
}

/* After its no_task (move-on seeds), rank r reports completions it held back (a heartbeat), or its
 * trainer declares the next step (steps + 1, then + 2; an empty share). Two pools are allowed: step
 * + 2 finds the table full, and the step's pool goes once every live rank declared a newer step
 * (the one declaring counts), complete or not; until then the declaration is refused (-ENOSPC). */
static int rt_not_moved_on(const rt_t *t)
{
    int k = 0;
    for (int r = 0; r < t->n; r++)
        k += !t->r[r].exited && t->r[r].moved == 0;
    return k;
}

static void rt_move_on(rt_t *t, int r)
{
    rt_rank_t *R = &t->r[r];
    tide_error_t e = {{0}};
    tide_task_pool_info_t pi = {0};
    bool open, complete;
    int rc;

    if (R->done_sent < R->ndone && rnd(t) % 2) {
        rt_send_done(t, r, false);
        return;
    }
    if (R->moved == 2 || !R->connected || R->to_core.n > 0)
        return; /* a declaration now would overtake what the stream still carries */
    open = tide_core_task_pool(t->h.core, t->job, t->kind, t->step, &pi) == 0;
    complete = open && pi.committed == pi.total;
    rc = tide_core_tasks_declared(t->h.core, W(t->job, r), t->job->id, t->job->generation, r,
                                  t->kind, t->step + 1 + R->moved, NULL, 0, 1, &e);
    if (rt_trace)
        fprintf(stderr, "core <- rank %d: declares step +%d: %d\n", r, 1 + R->moved, rc);
    if (rc == -ENOSPC && R->moved == 1) {
        assert_true(open && !complete && rt_not_moved_on(t) > 0);
        assert_int_equal(h_count(&t->h, TIDE_ACT_GIVE_TASKS), 0);
        return;
    }
    if (rc != 0)
        fail_msg("rank %d: step + %d refused (%d): %s", r, 1 + R->moved, rc, e.text);
    R->moved++;
    if (open && tide_core_task_pool(t->h.core, t->job, t->kind, t->step, &pi) == -ENOENT) {
        if (!complete)
            assert_int_equal(rt_not_moved_on(t), 0); /* an incomplete one: once all moved on */
        t->dropped = true;
        cover.superseded += !complete;
    }
    rt_route(t);
}

/* One trainer move of rank r: finish the task in hand, take the next, or ask for a steal. */
static void rt_trainer(rt_t *t, int r)
{
    rt_rank_t *R = &t->r[r];

    if (R->finished && !R->exited && t->move_on)
        rt_move_on(t, r);
    if (R->exited || R->finished || !R->declared)
        return;
    if (R->has_hand) {
        int i = idx_of(R->hand);
        t->run_count[i]++;
        R->done_ids[R->ndone++] = R->hand;
        R->has_hand = false;
        if (rnd(t) % 2)
            rt_send_done(t, r, false);
    } else if (R->dn > 0) {
        R->hand = R->deque[0];
        memmove(R->deque, R->deque + 1, (R->dn - 1) * sizeof(uint64_t));
        R->dn--;
        R->has_hand = true;
    } else if (!R->waiting) {
        rt_msg_t m;
        if (!t->move_on || rnd(t) % 2)
            rt_send_done(t, r, false); /* or held back: batched */
        memset(&m, 0, sizeof(m));
        m.type = M_STEAL;
        m.rid = ++R->last_steal;
        R->waiting = m.rid;
        rt_send(t, r, &m);
    }
}

static void rt_declare(rt_t *t, int r)
{
    rt_rank_t *R = &t->r[r];
    rt_msg_t m;

    if (R->declared || R->exited)
        return;
    R->declared = true;
    memcpy(R->deque, R->decl, R->ndecl * sizeof(uint64_t));
    R->dn = R->ndecl;
    memset(&m, 0, sizeof(m));
    m.type = M_DECL;
    memcpy(m.ids, R->decl, R->ndecl * sizeof(uint64_t));
    m.n = R->ndecl;
    rt_send(t, r, &m);
}

/* The worker's stream to the scheduler comes back (or is replaced): it re-registers and sends again
 * its declaration (once tasks moved: what it holds by then, as task_deque.c does), every
 * completion and the steal it waits for. */
static void rt_reconnect(rt_t *t, int r)
{
    rt_rank_t *R = &t->r[r];

    R->to_core.n = R->to_worker.n = 0;
    reregister(&t->h, W(t->job, r), new_conn(), t->job, r);
    R->connected = true;
    rt_route(t);
    if (R->declared) {
        rt_msg_t m;
        memset(&m, 0, sizeof(m));
        m.type = M_DECL;
        if (R->moved_any) {
            /* what it ran, has in hand and has queued; not what it released */
            for (size_t i = 0; i < R->ndone; i++)
                m.ids[m.n++] = R->done_ids[i];
            if (R->has_hand)
                m.ids[m.n++] = R->hand;
            for (size_t i = 0; i < R->dn; i++)
                m.ids[m.n++] = R->deque[i];
            cover.redeclared++;
        } else {
            memcpy(m.ids, R->decl, R->ndecl * sizeof(uint64_t));
            m.n = R->ndecl;
        }
        rt_send(t, r, &m);
        rt_send_done(t, r, true);
        if (R->waiting) {
            memset(&m, 0, sizeof(m));
            m.type = M_STEAL;
            m.rid = R->waiting;
            rt_send(t, r, &m);
        }
    }
}

static void rt_disconnect(rt_t *t, int r)
{
    rt_rank_t *R = &t->r[r];
    tide_worker_t *w = W(t->job, r);

    R->to_core.n = R->to_worker.n = 0;
    R->connected = false;
    cover.disconnects++;
    tide_core_worker_disconnected(t->h.core, w, w->conn, false);
    rt_route(t);
}

/* Its trainer exits (code 0): everything it sent arrives first, but completions not sent yet may
 * never be (the exit overtakes them). What it still holds in the core (queued, in its hands, on its
 * way to it, or run and unreported) stays its own: it may have run it, so nobody else may.
 * A rank whose part is done (its no_task) may exit any time; one that exits early only while no
 * rank was told the step is done: a victim's answer that came back after its stream broke makes
 * orphans, and a rank still running takes them only while some rank steals. */
static void rt_exit(rt_t *t, int r)
{
    rt_rank_t *R = &t->r[r];
    tide_worker_t *w = W(t->job, r);
    rt_msg_t m;

    if (R->declared && rnd(t) % 2)
        rt_send_done(t, r, false);
    while (q_pop(&R->to_core, &m))
        rt_deliver_core(t, r, &m);
    if (!R->finished && t->none_given)
        return; /* what it sent made the core answer "nothing left": it stays */
    for (int i = 0; i < t->total; i++) {
        bool mine = tide_core_task_holder(t->h.core, t->job, t->kind, t->step, t->ids[i]) == r;
        for (size_t k = 0; k < R->dn; k++)
            mine |= idx_of(R->deque[k]) == i;
        mine |= R->has_hand && idx_of(R->hand) == i;
        if (!mine)
            continue;
        assert_true(t->run_count[i] <= 1);
        t->lost_with[i] = r;
        t->lost_runs[i] = t->run_count[i];
        t->n_lost++;
        cover.lost++;
        cover.lost_ran += t->run_count[i] > 0;
    }
    tide_core_rank_exited(t->h.core, w, t->job->id, t->job->generation, r, 0, NULL);
    R->exited = true;
    cover.exits++;
    cover.finished_exits += R->finished;
    R->dn = 0;
    R->has_hand = false;
    R->to_worker.n = 0;
    rt_route(t);
}

/* After every call: each task is in at most one deque or trainer, the core agrees about who holds
 * what the workers physically hold, nothing ran twice, and the pool's counters add up. */
static void rt_check(rt_t *t)
{
    int where[RT_TASKS];
    uint64_t held = 0, committed = 0, orphaned = 0, declared = 0;
    tide_task_pool_info_t pi;
    bool pool = tide_core_task_pool(t->h.core, t->job, t->kind, t->step, &pi) == 0;

    for (int i = 0; i < t->total; i++)
        where[i] = -1;
    for (int r = 0; r < t->n; r++) {
        rt_rank_t *R = &t->r[r];
        if (R->exited)
            continue;
        for (size_t k = 0; k < R->dn; k++) {
            int i = idx_of(R->deque[k]);
            if (where[i] != -1)
                fail_msg("task %d in two places (ranks %d and %d)", i, where[i], r);
            where[i] = r;
        }
        if (R->has_hand) {
            int i = idx_of(R->hand);
            if (where[i] != -1)
                fail_msg("task %d in two places (ranks %d and %d)", i, where[i], r);
            where[i] = r;
        }
    }
    for (int r = 0; r < t->n; r++)
        if (t->r[r].decl_delivered)
            declared += t->r[r].ndecl;
    for (int i = 0; i < t->total; i++) {
        int32_t h = tide_core_task_holder(t->h.core, t->job, t->kind, t->step, t->ids[i]);
        if (t->run_count[i] > 1)
            fail_msg("task %d ran %d times", i, t->run_count[i]);
        if (t->lost_with[i] >= 0 &&
            (t->run_count[i] != t->lost_runs[i] || where[i] >= 0 || (pool && h != t->lost_with[i])))
            fail_msg("task %d, left with exited rank %d: ran %d times, with rank %d, held by %d", i,
                     t->lost_with[i], t->run_count[i], where[i], h);
        if (h == -4) {
            /* not declared to the core yet: its declarer still has it */
            continue;
        }
        if (where[i] >= 0 && h != where[i])
            fail_msg("task %d is with rank %d, the core says %d", i, where[i], h);
        if (h == -1 && (t->run_count[i] != 1 || where[i] >= 0))
            fail_msg("task %d committed but ran %d times / is with rank %d", i, t->run_count[i],
                     where[i]);
        if (h == -3 && where[i] >= 0)
            fail_msg("task %d orphaned but with rank %d", i, where[i]);
        assert_true(h >= -3 && h != -2);
        held += h >= 0;
        committed += h == -1;
        orphaned += h == -3;
    }
    cover.orphaned_seen += orphaned > 0;
    if (pool) {
        assert_int_equal(pi.queued, held);
        assert_int_equal(pi.committed, committed);
        assert_int_equal(pi.orphaned, orphaned);
        assert_int_equal(pi.declared, declared);
        assert_int_equal(t->job->tasks_committed, committed);
        assert_true(pi.steals_parked >= 0 && pi.steals_pending >= 0);
    }
}

static int live_ranks(const rt_t *t)
{
    int k = 0;
    for (int r = 0; r < t->n; r++)
        k += !t->r[r].exited;
    return k;
}

static void rt_step(rt_t *t, bool faults)
{
    int r = (int)(rnd(t) % (uint64_t)t->n);
    rt_rank_t *R = &t->r[r];
    unsigned what = (unsigned)(rnd(t) % 100);
    rt_msg_t m;

    if (R->exited)
        return;
    if (rt_trace)
        fprintf(stderr, "step rank %d what %u (to_core %zu to_worker %zu connected %d)\n", r, what,
                R->to_core.n, R->to_worker.n, R->connected);
    if (what < 30) {
        rt_trainer(t, r);
    } else if (what < 36) {
        rt_declare(t, r);
    } else if (what < 64) {
        if (q_pop(&R->to_core, &m))
            rt_deliver_core(t, r, &m);
    } else if (what < 90) {
        if (q_pop(&R->to_worker, &m))
            rt_deliver_worker(t, r, &m);
    } else if (!faults) {
        return;
    } else if (what < 93) {
        if (R->has_last && R->connected)
            q_push(&R->to_core, &R->last_sent); /* a late duplicate */
    } else if (what < 96) {
        if (R->connected)
            rt_disconnect(t, r);
    } else if (what < 99) {
        rt_reconnect(t, r); /* back, or a replaced stream */
    } else if (R->connected && R->declared && (R->finished || !t->none_given) &&
               live_ranks(t) > 1) {
        /* early exits only until some rank was told the step is done (see rt_exit); a share never
         * declared could never be run by anyone; the last rank's exit would end the job */
        rt_exit(t, r);
    }
}

static bool rt_quiet(const rt_t *t)
{
    for (int r = 0; r < t->n; r++) {
        const rt_rank_t *R = &t->r[r];
        if (R->exited)
            continue;
        if (!R->finished || R->to_core.n || R->to_worker.n || R->has_hand || R->dn ||
            R->done_sent < R->ndone)
            return false;
    }
    return true;
}

static void rt_run(uint64_t seed)
{
    static rt_t t; /* big: not on the stack */
    tide_core_config_t cfg = config();
    tide_job_spec_t spec;
    int steps;

    memset(&t, 0, sizeof(t));
    t.rng = seed * 0x9E3779B97F4A7C15ULL + 1;
    t.n = 2 + (int)(rnd(&t) % (RT_RANKS - 1));
    t.total = 1 + (int)(rnd(&t) % RT_TASKS);
    t.kind = rnd(&t) % 4 ? TIDE_TASK_MEMBER : TIDE_TASK_DETACHED;
    t.step = (int64_t)(rnd(&t) % 1000);
    spec = h_spec(t.n, t.n, TIDE_PRIO_NORMAL);
    spec.no_stealing = rnd(&t) % 16 == 0;
    t.move_on = rnd(&t) % 2 == 0;
    if (t.move_on)
        cfg.max_task_pools = 2;
    h_init(&t.h, &cfg);
    h_node(&t.h, "n1", 3, NULL, 0, NULL);
    h_node(&t.h, "n2", 3, NULL, 0, NULL);
    t.job = run_spec(&t.h, &spec);
    for (int i = 0; i < t.total; i++) {
        int r = (int)(rnd(&t) % (uint64_t)t.n);
        t.ids[i] = ((rnd(&t) & ((1ULL << 44) - 1)) << 8) | (uint64_t)i;
        t.r[r].decl[t.r[r].ndecl++] = t.ids[i];
    }
    for (int r = 0; r < t.n; r++)
        t.r[r].connected = true;
    for (int i = 0; i < RT_TASKS; i++)
        t.lost_with[i] = -1;

    steps = 100 + (int)(rnd(&t) % 400);
    for (int s = 0; s < steps; s++) {
        rt_step(&t, true);
        rt_check(&t);
    }
    /* calm: every stream back, no more faults, until every rank got its no_task */
    for (int r = 0; r < t.n; r++)
        if (!t.r[r].connected && !t.r[r].exited) {
            rt_reconnect(&t, r);
            rt_check(&t);
        }
    for (int r = 0; r < t.n; r++)
        rt_declare(&t, r);
    for (int s = 0; s < 200000 && !rt_quiet(&t); s++) {
        rt_step(&t, false);
        rt_check(&t);
    }
    if (!rt_quiet(&t)) {
        tide_task_pool_info_t pi = {0};
        (void)tide_core_task_pool(t.h.core, t.job, t.kind, t.step, &pi);
        for (int r = 0; r < t.n; r++)
            fprintf(stderr,
                    "rank %d: exited %d finished %d waiting %" PRIu64
                    " dn %zu hand %d queues %zu/%zu\n",
                    r, t.r[r].exited, t.r[r].finished, t.r[r].waiting, t.r[r].dn, t.r[r].has_hand,
                    t.r[r].to_core.n, t.r[r].to_worker.n);
        fprintf(stderr,
                "pool: total %" PRIu64 " declared %" PRIu64 " committed %" PRIu64 " queued %" PRIu64
                " orphaned %" PRIu64 " pending %d parked %d\n",
                pi.total, pi.declared, pi.committed, pi.queued, pi.orphaned, pi.steals_pending,
                pi.steals_parked);
        fail_msg("seed %" PRIu64 ": the step never finished", seed);
    }
    /* every task ran exactly once, except those a rank still held when it exited: as often as
     * they had then (at most once; unknown to the core) */
    for (int i = 0; i < t.total; i++) {
        int32_t h = tide_core_task_holder(t.h.core, t.job, t.kind, t.step, t.ids[i]);
        int want = t.lost_with[i] >= 0 ? t.lost_runs[i] : 1;
        int32_t want_h = t.lost_with[i] >= 0 ? t.lost_with[i] : -1;
        if (t.run_count[i] != want || (!t.dropped && h != want_h))
            fail_msg("seed %" PRIu64 ": task %d ran %d times, holder %d (left with rank %d)", seed,
                     i, t.run_count[i], h, t.lost_with[i]);
    }
    /* a pool that went before its last completions arrived committed fewer */
    if (t.dropped)
        assert_true(t.job->tasks_committed <= (uint64_t)(t.total - t.n_lost));
    else
        assert_int_equal(t.job->tasks_committed, (uint64_t)(t.total - t.n_lost));
    cover.stolen += t.job->tasks_stolen;
    h_check_invariants(&t.h);
    h_fini(&t.h);
}

static void test_random_exactly_once(void **state)
{
    const char *env = getenv("TIDE_STEAL_SEEDS");
    uint64_t seeds = env ? strtoull(env, NULL, 10) : 3000;
    const char *one = getenv("TIDE_STEAL_SEED");
    (void)state;

    if (one) {
        rt_trace = getenv("TIDE_STEAL_TRACE") != NULL;
        rt_run(strtoull(one, NULL, 10));
        return;
    }

    memset(&cover, 0, sizeof(cover));
    for (uint64_t seed = 1; seed <= seeds; seed++)
        rt_run(seed);
    print_message(
        "%" PRIu64 " seeds: %" PRIu64 " tasks stolen, %" PRIu64 " checks with orphans, %" PRIu64
        " releases re-sent, %" PRIu64 " answers replayed, %" PRIu64 " empty answers, %" PRIu64
        " exits, %" PRIu64 " disconnects, %" PRIu64 " pools dropped incomplete, %" PRIu64
        " stale reports, %" PRIu64 " exits after no_task, %" PRIu64
        " tasks left with exited ranks (%" PRIu64 " of them run), %" PRIu64
        " declarations of holdings\n",
        seeds, cover.stolen, cover.orphaned_seen, cover.release_resent, cover.give_replayed,
        cover.steals_none, cover.exits, cover.disconnects, cover.superseded, cover.stale,
        cover.finished_exits, cover.lost, cover.lost_ran, cover.redeclared);
    if (seeds >= 200) {
        assert_true(cover.stolen > 0);
        assert_true(cover.orphaned_seen > 0);
        assert_true(cover.release_resent > 0);
        assert_true(cover.give_replayed > 0);
        assert_true(cover.exits > 0);
        assert_true(cover.superseded > 0);
        assert_true(cover.stale > 0);
        assert_true(cover.finished_exits > 0);
        assert_true(cover.lost > 0);
        assert_true(cover.lost_ran > 0);
        assert_true(cover.redeclared > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_declaration_rules),
        cmocka_unit_test(test_redeclaration),
        cmocka_unit_test(test_deque_splitting),
        cmocka_unit_test(test_victim_choice),
        cmocka_unit_test(test_victim_choice_big_job),
        cmocka_unit_test(test_commit_rule),
        cmocka_unit_test(test_replays),
        cmocka_unit_test(test_parked_steals),
        cmocka_unit_test(test_parked_steal_deadline),
        cmocka_unit_test(test_parked_steal_served_first),
        cmocka_unit_test(test_drained_below_total),
        cmocka_unit_test(test_no_stealing),
        cmocka_unit_test(test_orphans_of_a_gone_holder),
        cmocka_unit_test(test_orphans_of_a_dead_rank),
        cmocka_unit_test(test_exited_rank_keeps_its_tasks),
        cmocka_unit_test(test_victim_loses_its_stream),
        cmocka_unit_test(test_parked_steal_waits_for_a_lost_release),
        cmocka_unit_test(test_pool_limit),
        cmocka_unit_test(test_superseded_pool),
        cmocka_unit_test(test_superseded_pool_gone_rank),
        cmocka_unit_test(test_superseded_pool_per_kind),
        cmocka_unit_test(test_declaration_of_a_dropped_pool),
        cmocka_unit_test(test_generation_change_frees_pools),
        cmocka_unit_test(test_stragglers),
        cmocka_unit_test(test_slow_ranks_do_not_steal),
        cmocka_unit_test(test_job_steals_event),
        cmocka_unit_test(test_random_exactly_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

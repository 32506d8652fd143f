/* Unit tests of the worker's task deques (worker/task_deque.c) with a fake send op and a fake
 * clock: declare, pop from the head, release from the tail, give, replays of releases and gives,
 * the errors (unknown_step, unknown_task, busy, task_conflict), stream loss and welcome, replaced
 * steps, steps that only move forward, release ids that replay only for their own pool, statistics
 * (task_seconds not measured when idle), steal ahead (the steal sent as the last queued task is
 * handed or as a give hands the waiter its only task, answered before or after the trainer asks,
 * with tasks or empty, with and without a stream), the welcome's re-declarations (as declared
 * until tasks move, then exactly what the rank holds); and random sequences with a model scheduler
 * (which takes each re-declaration as a repeat) that check after every step that each task id is
 * in exactly one place and a steal is out only from an empty deque, at every welcome that each
 * rank declares exactly what it holds, and at the end that every task was done exactly once. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "task_deque.h"

#define MEMBER   TIDE__V1__TASK_KIND__TASK_KIND_MEMBER
#define DETACHED TIDE__V1__TASK_KIND__TASK_KIND_DETACHED

/* --- fake send: an outbox of decoded copies --- */

typedef struct outbox {
    Tide__V1__WorkerMessage **msg;
    size_t n, cap;
    int fail; /* -errno to return (nothing queued), 0: queue */
    size_t calls;
} outbox_t;

static int f_send(void *ud, const Tide__V1__WorkerMessage *m)
{
    outbox_t *o = ud;
    size_t len = tide__v1__worker_message__get_packed_size(m);
    uint8_t *buf;

    o->calls++;
    if (o->fail)
        return o->fail;
    buf = malloc(len + 1);
    tide__v1__worker_message__pack(m, buf);
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 16;
        o->msg = realloc(o->msg, o->cap * sizeof(*o->msg));
    }
    o->msg[o->n++] = tide__v1__worker_message__unpack(NULL, len, buf);
    assert_non_null(o->msg[o->n - 1]);
    free(buf);
    return 0;
}

static void outbox_clear(outbox_t *o)
{
    for (size_t i = 0; i < o->n; i++)
        tide__v1__worker_message__free_unpacked(o->msg[i], NULL);
    o->n = 0;
}

static void outbox_free(outbox_t *o)
{
    outbox_clear(o);
    free(o->msg);
    o->msg = NULL;
    o->cap = 0;
}

static Tide__V1__WorkerMessage *out(outbox_t *o, size_t i, Tide__V1__WorkerMessage__MsgCase mc)
{
    assert_true(i < o->n);
    assert_int_equal(o->msg[i]->msg_case, mc);
    return o->msg[i];
}

static void assert_ids(uint64_t *got, size_t n_got, const uint64_t *want, size_t n_want)
{
    assert_int_equal(n_got, n_want);
    for (size_t i = 0; i < n_want; i++)
        assert_int_equal(got[i], want[i]);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Checks that message i is a TasksDeclared of (kind, step, total) listing exactly the ids of want
 * (sorted ascending), in any order. */
static void assert_declared_set(outbox_t *o, size_t i, int kind, int64_t step, uint64_t total,
                                const uint64_t *want, size_t n_want)
{
    const Tide__V1__TasksDeclared *td =
        out(o, i, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    uint64_t *got = malloc((td->n_task_ids ? td->n_task_ids : 1) * sizeof(*got));

    assert_int_equal(td->kind, kind);
    assert_int_equal(td->step, step);
    assert_int_equal(td->total, total);
    assert_int_equal(td->n_task_ids, n_want);
    if (n_want)
        memcpy(got, td->task_ids, n_want * sizeof(*got));
    qsort(got, n_want, sizeof(*got), cmp_u64);
    for (size_t k = 0; k < n_want; k++)
        assert_int_equal(got[k], want[k]);
    free(got);
}

typedef struct fx {
    outbox_t o;
    tide_task_deque_t *d;
    int waiter[8]; /* addresses used as waiter tokens */
} fx_t;

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    tide_task_deque_ops_t ops = {f_send};

    tide_task_deque_new(&ops, &f->o, &f->d);
    tide_task_deque_rank_add(f->d, 1, "job-a", 2, 0, 0);
    tide_task_deque_rank_add(f->d, 2, "job-a", 2, 1, 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;

    tide_task_deque_free(f->d);
    outbox_free(&f->o);
    free(f);
    return 0;
}

static int release(fx_t *f, int32_t rank, int kind, int64_t step, uint64_t release_id, uint32_t max)
{
    Tide__V1__ReleaseTasks r = TIDE__V1__RELEASE_TASKS__INIT;

    r.job_id = "job-a";
    r.generation = 2;
    r.rank = rank;
    r.kind = kind;
    r.step = step;
    r.release_id = release_id;
    r.max_tasks = max;
    return tide_task_deque_release(f->d, &r);
}

static int give(fx_t *f, int32_t rank, int kind, int64_t step, uint64_t steal_id,
                const uint64_t *ids, size_t n, int64_t now, tide_task_answer_t *ans)
{
    Tide__V1__GiveTasks g = TIDE__V1__GIVE_TASKS__INIT;

    g.job_id = "job-a";
    g.generation = 2;
    g.rank = rank;
    g.kind = kind;
    g.step = step;
    g.steal_id = steal_id;
    g.task_ids = (uint64_t *)ids;
    g.n_task_ids = n;
    return tide_task_deque_give(f->d, &g, now, ans);
}

static int next(fx_t *f, uint64_t rank_id, int64_t step, int64_t done, int w, int64_t now,
                uint64_t *id)
{
    return tide_task_deque_next(f->d, rank_id, MEMBER, step, done, &f->waiter[w], now, id, NULL);
}

/* --- tests --- */

static void test_declare_pop_and_steal(void **state)
{
    fx_t *f = *state;
    static const uint64_t ids[] = {10, 11, 12};
    const Tide__V1__TasksDeclared *td;
    const Tide__V1__TasksDone *done;
    const Tide__V1__StealRequest *sr;
    uint64_t id = 0;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 7, ids, 3, 6, 0, NULL, NULL), 0);
    assert_int_equal(f->o.n, 1);
    td = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_string_equal(td->job_id, "job-a");
    assert_int_equal(td->generation, 2);
    assert_int_equal(td->rank, 0);
    assert_int_equal(td->kind, MEMBER);
    assert_int_equal(td->step, 7);
    assert_int_equal(td->total, 6);
    assert_ids(td->task_ids, td->n_task_ids, ids, 3);
    outbox_clear(&f->o);
    /* an identical repeat is ignored */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 7, ids, 3, 6, 0, NULL, NULL), 0);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 7), 3);

    assert_int_equal(next(f, 1, 7, -1, 0, 100, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 10);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 7, 10), TIDE_TASK_HANDED);
    assert_int_equal(next(f, 1, 7, 10, 0, 200, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 11);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 7, 10), TIDE_TASK_DONE);
    assert_int_equal(f->o.n, 0); /* completions wait for a steal or a heartbeat */
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 7), 0);
    /* The last queued task is handed: the steal goes out ahead, completions first, while 12
     * runs. */
    assert_int_equal(next(f, 1, 7, 11, 0, 300, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 12);
    assert_int_equal(f->o.n, 2);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, ids, 2);
    assert_int_equal(done->queued, 0);
    assert_int_equal(done->step, 7);
    sr = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request;
    assert_int_equal(sr->steal_id, 1);
    assert_int_equal(sr->step, 7);
    assert_int_equal(sr->rank, 0);
    assert_int_equal(sr->kind, MEMBER);
    assert_string_equal(sr->job_id, "job-a");
    assert_int_equal(sr->generation, 2);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 7), 1);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 7, 12), TIDE_TASK_HANDED);
    outbox_clear(&f->o);
    /* Empty: the trainer waits for that steal; no second StealRequest, its completion stays. */
    assert_int_equal(next(f, 1, 7, 12, 0, 400, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 7), 1);
    /* the heartbeat flush reports it, once */
    tide_task_deque_flush(f->d);
    assert_int_equal(f->o.n, 1);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, ids + 2, 1);
    outbox_clear(&f->o);
    tide_task_deque_flush(f->d);
    assert_int_equal(f->o.n, 0);
}

/* A rank being stopped: its trainer waiting for a steal's answer gets no_task at once (the scheduler
 * drops the generation's pools and may never answer); a late GiveTasks for that steal is ignored. */
static void test_stopping_answers_the_waiter(void **state)
{
    fx_t *f = *state;
    static const uint64_t ids[] = {10}, late[] = {20, 21};
    tide_task_answer_t owed[4], ans;
    uint64_t id = 0;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 3, ids, 1, 4, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 1, 3, -1, 0, 100, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(next(f, 1, 3, 10, 0, 200, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 3), 1);
    /* rank 2 (no waiter) and an unknown rank owe nothing */
    assert_int_equal(tide_task_deque_stopping(f->d, 2, 300, owed, 4), 0);
    assert_int_equal(tide_task_deque_stopping(f->d, 99, 300, owed, 4), 0);
    assert_int_equal(tide_task_deque_stopping(f->d, 1, 300, owed, 4), 1);
    assert_ptr_equal(owed[0].waiter, &f->waiter[0]);
    assert_false(owed[0].has_task);
    assert_int_equal(owed[0].kind, MEMBER);
    assert_int_equal(owed[0].step, 3);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 3), 0);
    assert_int_equal(tide_task_deque_stopping(f->d, 1, 400, owed, 4), 0); /* answered once */
    assert_int_equal(give(f, 0, MEMBER, 3, 1, late, 2, 500, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 3), 0);
    /* the pool is exhausted: a next_task gets no_task, no new steal */
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 3, -1, 0, 600, &id), TIDE_TASK_NEXT_NONE);
    for (size_t i = 0; i < f->o.n; i++)
        assert_int_not_equal(f->o.msg[i]->msg_case, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST);
}

/* A rank being stopped right after its last queued task was handed out: the steal went out ahead
 * with nobody waiting yet, and the scheduler drops the generation's pools without answering it. The
 * trainer's next next_task must get no_task at once, not wait for good (it-trainer's cancel of an MPI
 * job hung its ranks until the grace period ended). */
static void test_stopping_ends_a_steal_ahead(void **state)
{
    fx_t *f = *state;
    static const uint64_t ids[] = {10, 11};
    tide_task_answer_t owed[4];
    uint64_t id = 0;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 5, ids, 2, 4, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 1, 5, -1, 0, 100, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 10);
    assert_int_equal(next(f, 1, 5, 10, 0, 110, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 11);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 5), 1); /* sent ahead */
    assert_int_equal(tide_task_deque_stopping(f->d, 1, 120, owed, 4), 0);   /* nobody waits */
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 5), 0);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 5, 11, 0, 130, &id), TIDE_TASK_NEXT_NONE);
    for (size_t i = 0; i < f->o.n; i++)
        assert_int_not_equal(f->o.msg[i]->msg_case, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST);
}

static void test_errors_change_nothing(void **state)
{
    fx_t *f = *state;
    static const uint64_t ids[] = {1, 2, 3};
    static const uint64_t dup[] = {1, 2, 1};
    tide_error_t err;
    uint64_t id = 0;

    tide_error_clear(&err);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 0, ids, 3, 3, 0, NULL, &err), 0);
    /* task_conflict: another declaration of the pool, a repeated id, more ids than total */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 0, ids, 2, 3, 0, NULL, &err),
                     -EEXIST);
    assert_non_null(strstr(err.text, "differs"));
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 0, ids, 3, 4, 0, NULL, &err),
                     -EEXIST);
    assert_int_equal(tide_task_deque_declare(f->d, 1, DETACHED, 0, dup, 3, 3, 0, NULL, &err),
                     -EEXIST);
    assert_non_null(strstr(err.text, "more than once"));
    assert_int_equal(tide_task_deque_declare(f->d, 1, DETACHED, 0, ids, 3, 2, 0, NULL, &err),
                     -EEXIST);
    assert_int_equal(tide_task_deque_declare(f->d, 1, 3, 0, ids, 3, 3, 0, NULL, &err), -EINVAL);
    assert_int_equal(tide_task_deque_declare(f->d, 9, MEMBER, 0, ids, 3, 3, 0, NULL, &err), -ENXIO);
    assert_int_equal(tide_task_deque_queued(f->d, 1, DETACHED, 0), 0); /* no detached pool */
    assert_int_equal(f->o.n, 1);                                       /* the one declaration */

    /* unknown_step */
    assert_int_equal(next(f, 1, 5, -1, 0, 0, &id), -ENOENT);
    assert_int_equal(tide_task_deque_next(f->d, 1, DETACHED, 0, -1, &f->waiter[0], 0, &id, &err),
                     -ENOENT);
    assert_non_null(strstr(err.text, "not declared"));
    assert_int_equal(next(f, 9, 0, -1, 0, 0, &id), -ENXIO);
    /* unknown_task: a done never handed (queued, or not in the pool) */
    assert_int_equal(next(f, 1, 0, 2, 0, 0, &id), -EINVAL);
    assert_int_equal(next(f, 1, 0, 99, 0, 0, &id), -EINVAL);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 3);
    assert_int_equal(next(f, 1, 0, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 1);
    assert_int_equal(next(f, 1, 0, 3, 0, 0, &id), -EINVAL); /* 3 is queued, not handed */
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 0, 1), TIDE_TASK_HANDED);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 2);
    /* the next call may name it correctly; naming it again is a no-op */
    assert_int_equal(next(f, 1, 0, 1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 2);
    assert_int_equal(next(f, 1, 0, 1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 3);
    {
        tide_task_stats_t st;
        assert_int_equal(tide_task_deque_stats(f->d, 1, 0, &st), 0);
        assert_int_equal(st.tasks_run, 1);
        assert_int_equal(tide_task_deque_stats(f->d, 9, 0, &st), -ENXIO);
    }
    /* handing 3, the last queued, sent the completions and the steal ahead */
    assert_int_equal(f->o.n, 3);
    assert_ids(out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids,
               f->o.msg[1]->tasks_done->n_task_ids, ids, 1);
    assert_int_equal(
        out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    /* busy: a second next_task while one waits */
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 0, 3, 0, 0, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(next(f, 1, 0, -1, 1, 0, &id), -EBUSY);
    assert_int_equal(next(f, 1, 0, 2, 0, 0, &id), -EBUSY);
    assert_int_equal(f->o.n, 0); /* the steal out already serves the waiter: nothing more */
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 1);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 0, 3), TIDE_TASK_DONE);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 0, 2), TIDE_TASK_HANDED);
}

static void test_release_tail_and_replay(void **state)
{
    fx_t *f = *state;
    static const uint64_t ids[] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const uint64_t tail3[] = {6, 7, 8};
    static const uint64_t rest[] = {2, 3, 4, 5};
    const Tide__V1__TasksReleased *tr;
    tide_task_stats_t st;
    uint64_t id;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 3, ids, 8, 16, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 1, 3, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 1);
    outbox_clear(&f->o);
    assert_int_equal(release(f, 0, MEMBER, 3, 100, 3), 0);
    tr = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->release_id, 100);
    assert_int_equal(tr->rank, 0);
    assert_int_equal(tr->step, 3);
    assert_int_equal(tr->queued, 4);
    assert_ids(tr->task_ids, tr->n_task_ids, tail3, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 3, tail3[i]), TIDE_TASK_RELEASED);
    /* a replay gets the same ids and takes nothing more */
    assert_int_equal(release(f, 0, MEMBER, 3, 100, 3), 0);
    tr = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, tail3, 3);
    assert_int_equal(tr->queued, 4);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 3), 4);
    /* never the handed task */
    assert_int_equal(release(f, 0, MEMBER, 3, 101, 100), 0);
    tr = out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, rest, 4);
    assert_int_equal(tr->queued, 0);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 3, 1), TIDE_TASK_HANDED);
    /* an empty deque releases nothing; an unknown pool neither, but answers */
    assert_int_equal(release(f, 0, MEMBER, 3, 102, 5), 0);
    tr = out(&f->o, 3, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->n_task_ids, 0);
    assert_int_equal(release(f, 0, DETACHED, 3, 103, 5), 0);
    tr = out(&f->o, 4, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->n_task_ids, 0);
    assert_int_equal(tr->kind, DETACHED);
    assert_int_equal(tr->release_id, 103);
    /* a rank that is not here: nothing sent */
    assert_int_equal(release(f, 7, MEMBER, 3, 104, 5), -ENOENT);
    assert_int_equal(f->o.n, 5);
    /* the older replay still answers the same */
    assert_int_equal(release(f, 0, MEMBER, 3, 100, 3), 0);
    tr = out(&f->o, 5, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, tail3, 3);
    assert_int_equal(tide_task_deque_stats(f->d, 1, 0, &st), 0);
    assert_int_equal(st.tasks_given, 7);
    /* with the deque empty the handed task finishes and the rank steals */
    assert_int_equal(next(f, 1, 3, 1, 0, 10, &id), TIDE_TASK_NEXT_WAIT);
}

static void test_give_and_replays(void **state)
{
    fx_t *f = *state;
    static const uint64_t stolen[] = {5, 6, 7};
    static const uint64_t mixed[] = {6, 9, 9007199254740992ULL, 8};
    tide_task_answer_t ans;
    tide_task_stats_t st;
    uint64_t id;

    /* rank 2 declares nothing of a pool of 8 and steals at once */
    assert_int_equal(tide_task_deque_declare(f->d, 2, MEMBER, 0, NULL, 0, 8, 0, NULL, NULL), 0);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 2, 0, -1, 3, 1000, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 1); /* nothing done: StealRequest alone */
    assert_int_equal(
        out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    /* a give for another steal id, rank or step is ignored */
    assert_int_equal(give(f, 0, MEMBER, 0, 1, stolen, 3, 1100, &ans), 0); /* rank 0: no pool */
    assert_null(ans.waiter);
    assert_int_equal(give(f, 1, MEMBER, 0, 2, stolen, 3, 1100, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(give(f, 1, MEMBER, 1, 1, stolen, 3, 1100, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(give(f, 9, MEMBER, 0, 1, stolen, 3, 1100, &ans), -ENOENT);
    /* the answer: first id to the waiter, the rest queued */
    assert_int_equal(give(f, 1, MEMBER, 0, 1, stolen, 3, 1250, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[3]);
    assert_true(ans.has_task);
    assert_int_equal(ans.id, 5);
    assert_int_equal(ans.step, 0);
    assert_int_equal(ans.kind, MEMBER);
    assert_int_equal(tide_task_deque_where(f->d, 2, MEMBER, 0, 5), TIDE_TASK_HANDED);
    assert_int_equal(tide_task_deque_queued(f->d, 2, MEMBER, 0), 2);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 2, MEMBER, 0), 0);
    /* a replay of the same give changes nothing */
    assert_int_equal(give(f, 1, MEMBER, 0, 1, stolen, 3, 1300, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_queued(f->d, 2, MEMBER, 0), 2);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 2, 0, 5, 3, 1400, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 6);
    assert_int_equal(f->o.n, 0);
    /* 7 is the last queued: TasksDone [5, 6] and StealRequest 2 go out ahead */
    assert_int_equal(next(f, 2, 0, 6, 3, 1500, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 7);
    assert_int_equal(f->o.n, 2);
    assert_ids(out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids,
               f->o.msg[0]->tasks_done->n_task_ids, stolen, 2);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 2);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 2, 0, 7, 3, 1600, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 0);
    /* ids held already (6 is done here) or above 2^53 - 1 are skipped: 9 and 8 are new */
    assert_int_equal(give(f, 1, MEMBER, 0, 2, mixed, 4, 1700, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[3]);
    assert_true(ans.has_task);
    assert_int_equal(ans.id, 9);
    assert_int_equal(tide_task_deque_queued(f->d, 2, MEMBER, 0), 1);
    /* 8, the last queued: TasksDone [7, 9], StealRequest 3 */
    assert_int_equal(next(f, 2, 0, 9, 3, 1800, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 8);
    assert_int_equal(f->o.n, 2);
    {
        static const uint64_t d79[] = {7, 9};
        assert_ids(out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids,
                   f->o.msg[0]->tasks_done->n_task_ids, d79, 2);
    }
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 3);
    outbox_clear(&f->o);
    /* an empty give: nothing left anywhere, the waiter gets no_task */
    assert_int_equal(next(f, 2, 0, 8, 3, 1900, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(give(f, 1, MEMBER, 0, 3, NULL, 0, 2000, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[3]);
    assert_false(ans.has_task);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 2, MEMBER, 0), 0);
    /* the rank's part is over: its last completion (8) goes with the empty answer */
    assert_int_equal(f->o.n, 1);
    assert_int_equal(
        out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids[0], 8);
    assert_int_equal(f->o.msg[0]->tasks_done->n_task_ids, 1);
    /* the pool is exhausted: asking again is no_task at once, and nothing more is sent */
    assert_int_equal(next(f, 2, 0, 8, 3, 2000, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(next(f, 2, 0, -1, 3, 2000, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(f->o.n, 1);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 2, MEMBER, 0), 0);
    assert_int_equal(tide_task_deque_stats(f->d, 2, 2000, &st), 0);
    assert_int_equal(st.tasks_run, 5);
    assert_int_equal(st.tasks_stolen, 5);
    assert_int_equal(st.tasks_given, 0);
    /* waits: 1000..1250, 1600..1700, 1900..2000 */
    assert_true(st.steal_wait_seconds > 0.449 && st.steal_wait_seconds < 0.451);
}

/* A give beyond the pool's total is not a real task. */
static void test_give_bounded_by_total(void **state)
{
    fx_t *f = *state;
    static const uint64_t mine[] = {0};
    static const uint64_t many[] = {1, 2, 3, 4, 5};
    tide_task_answer_t ans;
    uint64_t id;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 0, mine, 1, 3, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 1, 0, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(next(f, 1, 0, 0, 0, 0, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(give(f, 0, MEMBER, 0, 1, many, 5, 0, &ans), 0);
    assert_int_equal(ans.id, 1);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 1);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 0, 3), TIDE_TASK_UNKNOWN);
}

/* With no stream an empty deque answers no_task at once; the declaration and the completions go
 * out at the next welcome, and again at every later one. */
static void test_no_stream(void **state)
{
    fx_t *f = *state;
    static const uint64_t ids[] = {4, 5};
    const Tide__V1__TasksDeclared *td;
    const Tide__V1__TasksDone *done;
    uint64_t id;

    f->o.fail = -ENOTCONN;
    assert_int_equal(tide_task_deque_declare(f->d, 1, DETACHED, 2, ids, 2, 4, 0, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_next(f->d, 1, DETACHED, 2, -1, &f->waiter[0], 0, &id, NULL),
                     TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 4);
    assert_int_equal(tide_task_deque_next(f->d, 1, DETACHED, 2, 4, &f->waiter[0], 0, &id, NULL),
                     TIDE_TASK_NEXT_TASK);
    assert_int_equal(tide_task_deque_next(f->d, 1, DETACHED, 2, 5, &f->waiter[0], 0, &id, NULL),
                     TIDE_TASK_NEXT_NONE);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, DETACHED, 2), 0);
    tide_task_deque_flush(f->d); /* fails quietly */
    assert_int_equal(f->o.n, 0);
    /* the stream comes back */
    f->o.fail = 0;
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 2);
    td = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->kind, DETACHED);
    assert_int_equal(td->total, 4);
    assert_ids(td->task_ids, td->n_task_ids, ids, 2); /* the whole share, as declared */
    done = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, ids, 2);
    outbox_clear(&f->o);
    tide_task_deque_flush(f->d); /* reported */
    assert_int_equal(f->o.n, 0);
    /* every welcome repeats the declaration (nothing moved: as declared, in order) and the
     * completions (repeats are no-ops for the scheduler) */
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 2);
    td = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->kind, DETACHED);
    assert_int_equal(td->step, 2);
    assert_int_equal(td->total, 4);
    assert_ids(td->task_ids, td->n_task_ids, ids, 2);
    done = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, ids, 2);
}

/* A steal that was sent keeps its waiter across a lost stream; welcome sends it again with the same
 * id, and its answer reaches the waiter. */
static void test_stream_loss_keeps_waiter(void **state)
{
    fx_t *f = *state;
    static const uint64_t ids[] = {1};
    static const uint64_t got[] = {30, 31};
    tide_task_answer_t ans;
    uint64_t id;

    assert_int_equal(tide_task_deque_declare(f->d, 2, MEMBER, 4, ids, 1, 10, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 2, 4, -1, 1, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(next(f, 2, 4, 1, 1, 0, &id), TIDE_TASK_NEXT_WAIT);
    outbox_clear(&f->o);
    f->o.fail = -ENOTCONN; /* stream lost */
    assert_int_equal(next(f, 2, 4, -1, 2, 0, &id), -EBUSY);
    tide_task_deque_flush(f->d);
    f->o.fail = 0;
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 3); /* the declaration again, completions, then the steal */
    assert_declared_set(&f->o, 0, MEMBER, 4, 10, ids, 1);
    assert_ids(out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids,
               f->o.msg[1]->tasks_done->n_task_ids, ids, 1);
    assert_int_equal(
        out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    assert_int_equal(give(f, 1, MEMBER, 4, 1, got, 2, 0, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[1]);
    assert_int_equal(ans.id, 30);
}

/* A waiter whose connection went away is forgotten; the steal stays out, its answer is queued, and
 * a new next_task waits on it without a second StealRequest. */
static void test_forget_waiter(void **state)
{
    fx_t *f = *state;
    static const uint64_t got[] = {40, 41};
    tide_task_answer_t ans;
    uint64_t id;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 0, NULL, 0, 2, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 1, 0, -1, 0, 0, &id), TIDE_TASK_NEXT_WAIT);
    tide_task_deque_forget_waiter(f->d, 1, &f->waiter[0], 10);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 0, -1, 1, 20, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 0);
    tide_task_deque_forget_waiter(f->d, 1, &f->waiter[1], 30);
    assert_int_equal(give(f, 0, MEMBER, 0, 1, got, 2, 40, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 2);
    assert_int_equal(next(f, 1, 0, -1, 2, 50, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 40);
}

/* A newer step replaces the rank's pool of that kind; the old one still releases and reports, and
 * only RETIRED_KEPT (2) old pools are kept. */
static void test_new_step_replaces(void **state)
{
    fx_t *f = *state;
    static const uint64_t s1[] = {1, 2, 3};
    static const uint64_t s2[] = {4};
    tide_task_answer_t cut;
    const Tide__V1__TasksReleased *tr;
    uint64_t id;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 1, s1, 3, 3, 0, &cut, NULL), 0);
    assert_null(cut.waiter);
    assert_int_equal(next(f, 1, 1, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(next(f, 1, 1, 1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    /* a detached pool is independent */
    assert_int_equal(tide_task_deque_declare(f->d, 1, DETACHED, 1, s2, 1, 1, 0, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 2, s2, 1, 1, 0, &cut, NULL), 0);
    assert_null(cut.waiter);
    assert_int_equal(next(f, 1, 1, 2, 0, 0, &id), -ENOENT);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 1, s1, 3, 3, 0, NULL, NULL), -EEXIST);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 1, 1), TIDE_TASK_DONE);
    /* its queued task can still be released, and its completion reported */
    outbox_clear(&f->o);
    assert_int_equal(release(f, 0, MEMBER, 1, 7, 5), 0);
    tr = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->n_task_ids, 1);
    assert_int_equal(tr->task_ids[0], 3);
    tide_task_deque_flush(f->d);
    assert_int_equal(out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->step, 1);
    /* the new pool serves; a waiter on it is cut short by the next step */
    assert_int_equal(next(f, 1, 2, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 4);
    assert_int_equal(next(f, 1, 2, 4, 0, 0, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 3, NULL, 0, 1, 0, &cut, NULL), 0);
    assert_ptr_equal(cut.waiter, &f->waiter[0]);
    assert_false(cut.has_task);
    assert_int_equal(cut.step, 2);
    /* step 1 is still kept (two old pools), step 4 drops it */
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 1, 1), TIDE_TASK_DONE);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 4, NULL, 0, 1, 0, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 1, 1), TIDE_TASK_UNKNOWN);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 2, 4), TIDE_TASK_DONE);
    assert_int_equal(tide_task_deque_where(f->d, 1, DETACHED, 1, 4), TIDE_TASK_QUEUED);
    /* rank removal frees everything */
    tide_task_deque_rank_remove(f->d, 1);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 2, 4), TIDE_TASK_UNKNOWN);
    assert_int_equal(next(f, 1, 4, -1, 0, 0, &id), -ENXIO);
}

/* Statistics on a fake clock. */
static void test_stats(void **state)
{
    fx_t *f = *state;
    static const uint64_t ids[] = {1, 2, 3, 4};
    tide_task_stats_t st;
    uint64_t id;

    tide_task_deque_rank_add(f->d, 5, "job-b", 0, 0, 100000);
    assert_int_equal(tide_task_deque_stats(f->d, 5, 100000, &st), 0);
    assert_true(st.task_seconds == 0 && st.busy_fraction == 0 && st.tasks_run == 0);
    assert_int_equal(tide_task_deque_declare(f->d, 5, MEMBER, 0, ids, 4, 4, 100000, NULL, NULL), 0);
    /* back to back: 1 handed at 100000, 2 at 101000, 3 at 102000 */
    assert_int_equal(tide_task_deque_next(f->d, 5, MEMBER, 0, -1, f, 100000, &id, NULL), 1);
    assert_int_equal(tide_task_deque_next(f->d, 5, MEMBER, 0, 1, f, 101000, &id, NULL), 1);
    assert_int_equal(tide_task_deque_next(f->d, 5, MEMBER, 0, 2, f, 102000, &id, NULL), 1);
    /* 3 is handed at 102000; report it done at 104000 and take 4 at 105000 */
    assert_int_equal(tide_task_deque_stats(f->d, 5, 103000, &st), 0);
    assert_true(st.busy_fraction > 0.999); /* busy the whole 3 s since the rank started */
    assert_true(st.task_seconds > 0.999 && st.task_seconds < 1.001);
    /* done reported late: the next call names it; treat 104000 as its end */
    assert_int_equal(tide_task_deque_next(f->d, 5, MEMBER, 0, 3, f, 104000, &id, NULL), 1);
    assert_int_equal(id, 4);
    assert_int_equal(tide_task_deque_stats(f->d, 5, 104000, &st), 0);
    assert_int_equal(st.tasks_run, 3);
    assert_true(st.task_seconds > 1.333 && st.task_seconds < 1.334); /* (1 + 1 + 2) / 3 */
    /* 4 runs 104000..106000, then a wait of 500 ms for a steal */
    assert_int_equal(tide_task_deque_next(f->d, 5, MEMBER, 0, 4, f, 106000, &id, NULL),
                     TIDE_TASK_NEXT_WAIT);
    assert_int_equal(tide_task_deque_stats(f->d, 5, 106500, &st), 0);
    assert_true(st.steal_wait_seconds > 0.499 && st.steal_wait_seconds < 0.501);
    /* busy 6 s of 6.5 s */
    assert_true(st.busy_fraction > 0.92 && st.busy_fraction < 0.93);
    tide_task_deque_forget_waiter(f->d, 5, f, 107000);
    /* the last task ended at 106000: it is in the window until 115999, then gone */
    assert_int_equal(tide_task_deque_stats(f->d, 5, 115999, &st), 0);
    assert_true(st.task_seconds > 1.999 && st.task_seconds < 2.001);
    /* long after: no task ended in the window and none under way (an evaluation, a checkpoint):
     * not measured, whatever the earlier tasks took; idle */
    assert_int_equal(tide_task_deque_stats(f->d, 5, 116000, &st), 0);
    assert_true(st.task_seconds == 0);
    assert_int_equal(tide_task_deque_stats(f->d, 5, 200000, &st), 0);
    assert_true(st.busy_fraction == 0);
    assert_true(st.task_seconds == 0);
    assert_int_equal(st.tasks_run, 4);
    assert_true(st.steal_wait_seconds > 0.999 && st.steal_wait_seconds < 1.001);
    /* A task under way and none ended in the window: the recent mean of the earlier ones (1, 1,
     * 2 and 2 s, weighted toward the recent: between 1 and 2 s) while it is shorter ... */
    assert_int_equal(tide_task_deque_declare(f->d, 5, MEMBER, 1, ids + 3, 1, 1, 200000, NULL, NULL),
                     0);
    assert_int_equal(tide_task_deque_next(f->d, 5, MEMBER, 1, -1, f, 200000, &id, NULL),
                     TIDE_TASK_NEXT_TASK);
    assert_int_equal(tide_task_deque_stats(f->d, 5, 200500, &st), 0);
    assert_true(st.task_seconds > 1.0 && st.task_seconds < 2.0);
    /* ... and that task's own time once it took longer (a rank stuck in one slow task is slow) */
    assert_int_equal(tide_task_deque_stats(f->d, 5, 203000, &st), 0);
    assert_true(st.task_seconds > 2.999 && st.task_seconds < 3.001);
    /* it ends at 204000: the window's mean is that task */
    assert_int_equal(tide_task_deque_next(f->d, 5, MEMBER, 1, 4, f, 204000, &id, NULL),
                     TIDE_TASK_NEXT_WAIT);
    tide_task_deque_forget_waiter(f->d, 5, f, 204000);
    assert_int_equal(tide_task_deque_stats(f->d, 5, 204500, &st), 0);
    assert_int_equal(st.tasks_run, 5);
    assert_true(st.task_seconds > 3.999 && st.task_seconds < 4.001);
    /* out of the window again with nothing under way: 0 */
    assert_int_equal(tide_task_deque_stats(f->d, 5, 214000, &st), 0);
    assert_true(st.task_seconds == 0);

    /* A task under way on a rank that never finished one: its own time from the start. */
    tide_task_deque_rank_add(f->d, 7, "job-d", 0, 0, 300000);
    assert_int_equal(tide_task_deque_declare(f->d, 7, MEMBER, 0, ids, 1, 1, 300000, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_stats(f->d, 7, 300000, &st), 0);
    assert_true(st.task_seconds == 0);
    assert_int_equal(tide_task_deque_next(f->d, 7, MEMBER, 0, -1, f, 300000, &id, NULL),
                     TIDE_TASK_NEXT_TASK);
    assert_int_equal(tide_task_deque_stats(f->d, 7, 300250, &st), 0);
    assert_true(st.task_seconds > 0.249 && st.task_seconds < 0.251);

    /* Two tasks handed at once (no done in between), busy for over 15 s, both ending in one second:
     * both count. */
    tide_task_deque_rank_add(f->d, 6, "job-c", 0, 0, 100000);
    assert_int_equal(tide_task_deque_declare(f->d, 6, MEMBER, 0, ids, 2, 4, 100000, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_next(f->d, 6, MEMBER, 0, -1, f, 100000, &id, NULL), 1);
    assert_int_equal(tide_task_deque_next(f->d, 6, MEMBER, 0, -1, f, 100000, &id, NULL), 1);
    assert_int_equal(id, 2);
    assert_int_equal(tide_task_deque_next(f->d, 6, MEMBER, 0, 2, f, 115100, &id, NULL),
                     TIDE_TASK_NEXT_WAIT);
    tide_task_deque_forget_waiter(f->d, 6, f, 115100);
    assert_int_equal(tide_task_deque_next(f->d, 6, MEMBER, 0, 1, f, 115200, &id, NULL),
                     TIDE_TASK_NEXT_WAIT);
    assert_int_equal(tide_task_deque_stats(f->d, 6, 115300, &st), 0);
    assert_int_equal(st.tasks_run, 2);
    assert_true(st.task_seconds > 15.149 && st.task_seconds < 15.151);
    assert_true(st.busy_fraction > 0.9 && st.busy_fraction < 0.99); /* 9.2 s of 9.3 s */
}

/* --- steal ahead: the steal for the next task goes out as the last queued one is handed --- */

/* The answer to a steal sent ahead lands in the deque before the trainer asks: next_task pops it at
 * once, with no wait and no new steal; the stolen tasks can be released again from the tail; the
 * next ahead steal is answered empty before the trainer asks: no_task at once, the last completions
 * go with it, and there is no further StealRequest. */
static void test_ahead_tasks_before_ask(void **state)
{
    fx_t *f = *state;
    static const uint64_t mine[] = {1, 2};
    static const uint64_t got[] = {5, 6, 7};
    static const uint64_t late[] = {9};
    static const uint64_t d25[] = {2, 5};
    static const uint64_t all[] = {1, 2, 5, 6};
    const Tide__V1__TasksReleased *tr;
    const Tide__V1__TasksDone *done;
    tide_task_answer_t ans;
    tide_task_stats_t st;
    uint64_t id;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 0, mine, 2, 8, 0, NULL, NULL), 0);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 0, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 1);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(next(f, 1, 0, 1, 0, 10, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 2);
    assert_int_equal(f->o.n, 2);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, mine, 1);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    outbox_clear(&f->o);
    /* the answer arrives while 2 runs: nobody to answer, the ids are queued in order */
    assert_int_equal(give(f, 0, MEMBER, 0, 1, got, 3, 20, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 3);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 0, got[i]), TIDE_TASK_QUEUED);
    assert_int_equal(f->o.n, 0);
    /* a replay of it changes nothing */
    assert_int_equal(give(f, 0, MEMBER, 0, 1, got, 3, 25, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 3);
    /* another thief takes the tail of what it stole */
    assert_int_equal(release(f, 0, MEMBER, 0, 40, 1), 0);
    tr = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, got + 2, 1);
    assert_int_equal(tr->queued, 2);
    outbox_clear(&f->o);
    /* the trainer asks: 5 at once, no wait, nothing sent */
    assert_int_equal(next(f, 1, 0, 2, 0, 30, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 5);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 0);
    /* 6 is the last queued: the next steal goes ahead, with the completions not yet reported */
    assert_int_equal(next(f, 1, 0, 5, 0, 40, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 6);
    assert_int_equal(f->o.n, 2);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, d25, 2);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 2);
    outbox_clear(&f->o);
    /* answered empty before the trainer asks: nobody to answer; the pool is over for this rank */
    assert_int_equal(give(f, 0, MEMBER, 0, 2, NULL, 0, 50, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 0);
    assert_int_equal(f->o.n, 0); /* 6 still runs: no completion to send */
    /* no_task at once; 6's completion goes now; no second StealRequest */
    assert_int_equal(next(f, 1, 0, 6, 0, 60, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(f->o.n, 1);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, got + 1, 1);
    assert_int_equal(done->queued, 0);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 0, 6, 0, 70, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(next(f, 1, 0, -1, 0, 70, &id), TIDE_TASK_NEXT_NONE);
    tide_task_deque_flush(f->d);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 0);
    /* late or stray answers change nothing */
    assert_int_equal(give(f, 0, MEMBER, 0, 2, late, 1, 80, &ans), 0);
    assert_int_equal(give(f, 0, MEMBER, 0, 3, late, 1, 80, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 0, 9), TIDE_TASK_UNKNOWN);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 0);
    assert_int_equal(next(f, 1, 0, -1, 0, 90, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(f->o.n, 0);
    /* nobody waited; 5 and 6 came from the thief's answer, 7 went on */
    assert_int_equal(tide_task_deque_stats(f->d, 1, 90, &st), 0);
    assert_int_equal(st.tasks_run, 4);
    assert_int_equal(st.tasks_stolen, 2);
    assert_int_equal(st.tasks_given, 1);
    assert_true(st.steal_wait_seconds == 0);
    /* a welcome declares what the rank holds now (1, 2 and the stolen 5, 6; not 7, released),
     * repeats the completions, and has no steal to send again */
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 2);
    assert_declared_set(&f->o, 0, MEMBER, 0, 8, all, 4);
    done = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, all, 4);
}

/* An empty answer to a steal sent ahead, while the stream is down when the trainer asks: no_task at
 * once all the same; the completion goes with the next heartbeat that has a stream. */
static void test_ahead_empty_then_no_stream(void **state)
{
    fx_t *f = *state;
    static const uint64_t mine[] = {3};
    tide_task_answer_t ans;
    uint64_t id;

    assert_int_equal(tide_task_deque_declare(f->d, 2, DETACHED, 1, mine, 1, 1, 0, NULL, NULL), 0);
    outbox_clear(&f->o);
    assert_int_equal(tide_task_deque_next(f->d, 2, DETACHED, 1, -1, &f->waiter[0], 0, &id, NULL),
                     TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 3);
    assert_int_equal(f->o.n, 1); /* nothing done yet: the StealRequest alone */
    assert_int_equal(
        out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->kind, DETACHED);
    outbox_clear(&f->o);
    assert_int_equal(give(f, 1, DETACHED, 1, 1, NULL, 0, 0, &ans), 0);
    assert_null(ans.waiter);
    f->o.fail = -ENOTCONN;
    assert_int_equal(tide_task_deque_next(f->d, 2, DETACHED, 1, 3, &f->waiter[0], 0, &id, NULL),
                     TIDE_TASK_NEXT_NONE);
    assert_int_equal(tide_task_deque_where(f->d, 2, DETACHED, 1, 3), TIDE_TASK_DONE);
    tide_task_deque_flush(f->d); /* fails quietly */
    f->o.fail = 0;
    tide_task_deque_flush(f->d);
    assert_int_equal(f->o.n, 1);
    assert_int_equal(
        out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids[0], 3);
    outbox_clear(&f->o);
    assert_int_equal(tide_task_deque_next(f->d, 2, DETACHED, 1, -1, &f->waiter[0], 0, &id, NULL),
                     TIDE_TASK_NEXT_NONE);
    assert_int_equal(f->o.n, 0);
}

/* Without a stream nothing goes ahead and the old rules hold: an empty deque answers no_task at
 * once. When the stream is back before the trainer asks, the empty deque steals then, as before. */
static void test_ahead_without_stream(void **state)
{
    fx_t *f = *state;
    static const uint64_t mine[] = {1, 2};
    static const uint64_t other[] = {3};
    static const uint64_t got[] = {8};
    tide_task_answer_t ans;
    uint64_t id;
    size_t calls;

    f->o.fail = -ENOTCONN;
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 5, mine, 2, 4, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 1, 5, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    calls = f->o.calls;
    assert_int_equal(next(f, 1, 5, 1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 2);
    assert_true(f->o.calls > calls); /* it tried */
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 5), 0);
    assert_int_equal(next(f, 1, 5, 2, 0, 0, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 5), 0);

    /* rank 2: its last task is handed while the stream is down; the stream is back before its
     * trainer asks */
    assert_int_equal(tide_task_deque_declare(f->d, 2, MEMBER, 5, other, 1, 4, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 2, 5, -1, 1, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 3);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 2, MEMBER, 5), 0);
    f->o.fail = 0;
    tide_task_deque_welcome(f->d);
    /* declarations of both ranks, rank 1's completions; no steal: none was out */
    assert_int_equal(f->o.n, 3);
    out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED);
    assert_ids(out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids,
               f->o.msg[1]->tasks_done->n_task_ids, mine, 2);
    assert_int_equal(
        out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared->rank, 1);
    outbox_clear(&f->o);
    /* the empty deque steals now, with the completion first, and the trainer waits */
    assert_int_equal(next(f, 2, 5, 3, 1, 10, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 2);
    assert_int_equal(
        out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids[0], 3);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    assert_int_equal(give(f, 1, MEMBER, 5, 1, got, 1, 20, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[1]);
    assert_true(ans.has_task);
    assert_int_equal(ans.id, 8);
}

/* A next_task on an empty deque waits for the steal sent ahead (no second StealRequest); a second
 * one is busy; a waiter that goes away is replaced by the next; the request survives a lost stream
 * with its id, and its answer reaches the waiter. An answer whose only task goes to the waiter
 * sends the next steal ahead at once, with the next steal id, the unreported completions first. */
static void test_ahead_waiter_attaches(void **state)
{
    fx_t *f = *state;
    static const uint64_t mine[] = {1};
    static const uint64_t got[] = {4};
    static const uint64_t got2[] = {6};
    const Tide__V1__TasksDone *done;
    const Tide__V1__StealRequest *sr;
    tide_task_answer_t ans;
    tide_task_stats_t st;
    uint64_t id;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 0, mine, 1, 4, 0, NULL, NULL), 0);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 0, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(f->o.n, 1);
    assert_int_equal(
        out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 0, 1, 0, 100, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(next(f, 1, 0, 1, 1, 100, &id), -EBUSY);
    assert_int_equal(f->o.n, 0);
    tide_task_deque_forget_waiter(f->d, 1, &f->waiter[0], 150);
    assert_int_equal(next(f, 1, 0, -1, 2, 200, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 1);
    /* the stream is lost and back: the declaration (nothing moved: as declared), completions,
     * then the same request */
    f->o.fail = -ENOTCONN;
    tide_task_deque_flush(f->d);
    f->o.fail = 0;
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 3);
    assert_declared_set(&f->o, 0, MEMBER, 0, 4, mine, 1);
    done = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, mine, 1);
    assert_int_equal(
        out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    outbox_clear(&f->o);
    /* the answer reaches the waiter that is there now */
    assert_int_equal(give(f, 0, MEMBER, 0, 1, got, 1, 300, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[2]);
    assert_true(ans.has_task);
    assert_int_equal(ans.id, 4);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 0, 4), TIDE_TASK_HANDED);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 0);
    /* 4 was the answer's only task: the next steal goes out ahead at once, while 4 runs (1's
     * completion went with the welcome: nothing is sent before it) */
    assert_int_equal(f->o.n, 1);
    sr = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request;
    assert_int_equal(sr->steal_id, 2);
    assert_int_equal(sr->step, 0);
    assert_int_equal(sr->kind, MEMBER);
    assert_int_equal(sr->rank, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 2);
    outbox_clear(&f->o);
    /* it waited 100..150 and 200..300 */
    assert_int_equal(tide_task_deque_stats(f->d, 1, 300, &st), 0);
    assert_true(st.steal_wait_seconds > 0.149 && st.steal_wait_seconds < 0.151);
    /* done with 4, the trainer waits for that steal: no second request, 4's completion stays */
    assert_int_equal(next(f, 1, 0, 4, 2, 400, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 2);
    /* its answer, again a single task, goes to the waiter: 4's completion goes first, then the
     * steal ahead with id 3 */
    assert_int_equal(give(f, 0, MEMBER, 0, 2, got2, 1, 450, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[2]);
    assert_true(ans.has_task);
    assert_int_equal(ans.id, 6);
    assert_int_equal(f->o.n, 2);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, got, 1);
    assert_int_equal(done->queued, 0);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 3);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 3);
    outbox_clear(&f->o);
    /* a replay of the answer to steal 2 changes nothing: 6 stays handed, steal 3 stays out */
    assert_int_equal(give(f, 0, MEMBER, 0, 2, got2, 1, 460, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 0, 6), TIDE_TASK_HANDED);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 0), 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 3);
    assert_int_equal(f->o.n, 0);
    /* steal 3 is answered empty while 6 runs: nobody to answer, nothing to report yet */
    assert_int_equal(give(f, 0, MEMBER, 0, 3, NULL, 0, 500, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 0), 0);
    assert_int_equal(f->o.n, 0);
    /* no_task at once, with 6's completion; no further steal */
    assert_int_equal(next(f, 1, 0, 6, 2, 600, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(f->o.n, 1);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, got2, 1);
    assert_int_equal(tide_task_deque_stats(f->d, 1, 600, &st), 0);
    assert_int_equal(st.tasks_run, 3);
    assert_int_equal(st.tasks_stolen, 2);
    /* 100..150, 200..300 and 400..450 */
    assert_true(st.steal_wait_seconds > 0.199 && st.steal_wait_seconds < 0.201);
}

/* When a give sends the next steal ahead (rule: the waiter got the answer's only task, nothing is
 * queued) and when it does not: tasks left queued, ids already held skipped, no stream (nothing
 * sent, no id used: the old rules hold), an empty answer. */
static void test_give_steals_ahead(void **state)
{
    fx_t *f = *state;
    static const uint64_t two[] = {3, 4};
    static const uint64_t held[] = {4, 5};
    static const uint64_t seven[] = {7};
    static const uint64_t d3[] = {3};
    static const uint64_t d4[] = {4};
    static const uint64_t all[] = {3, 4, 5, 7};
    const Tide__V1__TasksDone *done;
    tide_task_answer_t ans;
    uint64_t id;
    size_t calls;

    /* rank 2 declares nothing of a pool of 10 and steals at once */
    assert_int_equal(tide_task_deque_declare(f->d, 2, MEMBER, 0, NULL, 0, 10, 0, NULL, NULL), 0);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 2, 0, -1, 0, 0, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 1);
    outbox_clear(&f->o);
    /* two tasks: the waiter gets 3, 4 is queued: nothing goes ahead */
    assert_int_equal(give(f, 1, MEMBER, 0, 1, two, 2, 10, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[0]);
    assert_int_equal(ans.id, 3);
    assert_int_equal(tide_task_deque_queued(f->d, 2, MEMBER, 0), 1);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 2, MEMBER, 0), 0);
    assert_int_equal(f->o.n, 0);
    /* 4 is popped as the last queued: ahead from next_task (steal 2) */
    assert_int_equal(next(f, 2, 0, 3, 0, 20, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 4);
    assert_int_equal(f->o.n, 2);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, d3, 1);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 2);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 2, 0, 4, 0, 30, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 0);
    /* 4 is held here (done): skipped; 5 is the only task that counts, so it goes to the waiter
     * and the next steal goes ahead, 4's completion first */
    assert_int_equal(give(f, 1, MEMBER, 0, 2, held, 2, 40, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[0]);
    assert_true(ans.has_task);
    assert_int_equal(ans.id, 5);
    assert_int_equal(tide_task_deque_where(f->d, 2, MEMBER, 0, 4), TIDE_TASK_DONE);
    assert_int_equal(f->o.n, 2);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, d4, 1);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 3);
    outbox_clear(&f->o);
    /* the stream goes down: the next answer's only task reaches the waiter, nothing goes ahead
     * (it is tried, fails quietly and uses no steal id) */
    assert_int_equal(next(f, 2, 0, 5, 0, 50, &id), TIDE_TASK_NEXT_WAIT);
    f->o.fail = -ENOTCONN;
    calls = f->o.calls;
    assert_int_equal(give(f, 1, MEMBER, 0, 3, seven, 1, 60, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[0]);
    assert_int_equal(ans.id, 7);
    assert_true(f->o.calls > calls);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 2, MEMBER, 0), 0);
    /* still no stream when the trainer asks again: no_task at once, the old rule */
    assert_int_equal(next(f, 2, 0, 7, 0, 70, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(tide_task_deque_where(f->d, 2, MEMBER, 0, 7), TIDE_TASK_DONE);
    /* back: the welcome declares what the rank holds now (all stolen: it declared none), repeats
     * every completion and has no steal to send */
    f->o.fail = 0;
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 2);
    assert_declared_set(&f->o, 0, MEMBER, 0, 10, all, 4);
    done = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, all, 4);
    outbox_clear(&f->o);
    /* the empty deque steals with the next id, 4 (the failed attempt used none) */
    assert_int_equal(next(f, 2, 0, -1, 0, 80, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 1);
    assert_int_equal(
        out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 4);
    outbox_clear(&f->o);
    /* an empty answer to a waiter: no_task, and nothing goes ahead */
    assert_int_equal(give(f, 1, MEMBER, 0, 4, NULL, 0, 90, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[0]);
    assert_false(ans.has_task);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 2, MEMBER, 0), 0);
    assert_int_equal(next(f, 2, 0, -1, 0, 100, &id), TIDE_TASK_NEXT_NONE);
    assert_int_equal(f->o.n, 0);
}

/* Steps only move forward in a generation: a `tasks` for a step older than the rank's current one
 * of that kind is task_conflict, whether that older pool is kept (replaced), forgotten, or was
 * never declared; it changes nothing (no message, the current pool and its waiter stay). Kinds and
 * ranks are independent. */
static void test_steps_only_forward(void **state)
{
    fx_t *f = *state;
    static const uint64_t s5[] = {1, 2};
    static const uint64_t one[] = {9};
    tide_task_answer_t cut;
    tide_error_t err;
    uint64_t id;

    tide_error_clear(&err);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 5, s5, 2, 2, 0, NULL, &err), 0);
    outbox_clear(&f->o);
    /* never declared, older */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 3, one, 1, 1, 0, &cut, &err),
                     -EEXIST);
    assert_non_null(strstr(err.text, "only move forward"));
    assert_null(cut.waiter);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 3, 9), TIDE_TASK_UNKNOWN);
    assert_int_equal(next(f, 1, 3, -1, 0, 0, &id), -ENOENT);
    /* the current pool serves on; its waiter is not cut short by a refused declaration */
    assert_int_equal(next(f, 1, 5, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(next(f, 1, 5, 1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(next(f, 1, 5, 2, 0, 10, &id), TIDE_TASK_NEXT_WAIT);
    outbox_clear(&f->o);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 4, NULL, 0, 1, 20, &cut, &err),
                     -EEXIST);
    assert_null(cut.waiter);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(next(f, 1, 5, -1, 1, 30, &id), -EBUSY);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 5), 1);
    /* other kinds and other ranks have their own steps */
    assert_int_equal(tide_task_deque_declare(f->d, 1, DETACHED, 1, one, 1, 1, 40, NULL, &err), 0);
    assert_int_equal(tide_task_deque_declare(f->d, 2, MEMBER, 3, one, 1, 1, 40, NULL, &err), 0);
    /* a newer step is fine and cuts the waiter short */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 6, NULL, 0, 1, 50, &cut, &err), 0);
    assert_ptr_equal(cut.waiter, &f->waiter[0]);
    assert_int_equal(cut.step, 5);
    /* the replaced step, still kept: refused as replaced, even as an identical repeat */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 5, s5, 2, 2, 60, NULL, &err),
                     -EEXIST);
    assert_non_null(strstr(err.text, "replaced"));
    /* step 5 is forgotten once two newer replaced pools are kept (7, 8 declared) */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 7, NULL, 0, 1, 70, NULL, &err), 0);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 8, NULL, 0, 1, 80, NULL, &err), 0);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 5, 1), TIDE_TASK_UNKNOWN);
    outbox_clear(&f->o);
    /* forgotten, it would otherwise look new: still refused */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 5, s5, 2, 2, 90, &cut, &err),
                     -EEXIST);
    assert_non_null(strstr(err.text, "only move forward"));
    assert_null(cut.waiter);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 5, 1), TIDE_TASK_UNKNOWN);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 5), 0);
    assert_int_equal(f->o.n, 0);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 7, NULL, 0, 1, 90, NULL, &err),
                     -EEXIST);
    assert_non_null(strstr(err.text, "replaced"));
    /* the current pool (8) is untouched: it steals for its trainer */
    assert_int_equal(next(f, 1, 8, -1, 1, 100, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 1);
    assert_int_equal(
        out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->step, 8);
}

/* A release id is a replay only for the pool its kept answer names: the same id for another kind
 * or step is a new release (a new leader may reuse ids), and each pool's replay still gets its own
 * ids. */
static void test_release_id_per_pool(void **state)
{
    fx_t *f = *state;
    static const uint64_t mem[] = {1, 2, 3, 4};
    static const uint64_t det[] = {11, 12, 13};
    static const uint64_t s5[] = {20, 21};
    static const uint64_t m34[] = {3, 4};
    static const uint64_t d13[] = {13};
    const Tide__V1__TasksReleased *tr;
    tide_task_stats_t st;

    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 3, mem, 4, 8, 0, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_declare(f->d, 1, DETACHED, 3, det, 3, 3, 0, NULL, NULL), 0);
    outbox_clear(&f->o);
    assert_int_equal(release(f, 0, MEMBER, 3, 100, 2), 0);
    tr = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, m34, 2);
    /* the same id for the detached pool: a new release from that pool */
    assert_int_equal(release(f, 0, DETACHED, 3, 100, 1), 0);
    tr = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->release_id, 100);
    assert_int_equal(tr->kind, DETACHED);
    assert_ids(tr->task_ids, tr->n_task_ids, d13, 1);
    assert_int_equal(tr->queued, 2);
    assert_int_equal(tide_task_deque_where(f->d, 1, DETACHED, 3, 13), TIDE_TASK_RELEASED);
    /* and for another step of the member kind (not declared here): a new release, of none */
    assert_int_equal(release(f, 0, MEMBER, 5, 100, 2), 0);
    tr = out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->step, 5);
    assert_int_equal(tr->n_task_ids, 0);
    /* the replays of each get their own answer and take nothing more; UNSPECIFIED is member */
    assert_int_equal(release(f, 0, MEMBER, 3, 100, 2), 0);
    tr = out(&f->o, 3, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->kind, MEMBER);
    assert_int_equal(tr->step, 3);
    assert_ids(tr->task_ids, tr->n_task_ids, m34, 2);
    assert_int_equal(tr->queued, 2);
    assert_int_equal(release(f, 0, 0, 3, 100, 2), 0);
    tr = out(&f->o, 4, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, m34, 2);
    assert_int_equal(release(f, 0, DETACHED, 3, 100, 1), 0);
    tr = out(&f->o, 5, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, d13, 1);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 3), 2);
    assert_int_equal(tide_task_deque_queued(f->d, 1, DETACHED, 3), 2);
    assert_int_equal(tide_task_deque_stats(f->d, 1, 0, &st), 0);
    assert_int_equal(st.tasks_given, 3);
    /* step 5 is declared now: the replay of its empty answer is still empty (identical answers),
     * a new id releases */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 5, s5, 2, 2, 0, NULL, NULL), 0);
    outbox_clear(&f->o);
    assert_int_equal(release(f, 0, MEMBER, 5, 100, 2), 0);
    tr = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->n_task_ids, 0);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 5), 2);
    assert_int_equal(release(f, 0, MEMBER, 5, 101, 1), 0);
    tr = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, s5 + 1, 1);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 5), 1);
}

/* --- the welcome declares every pool again --- */

/* Every welcome declares each current pool again: as the trainer declared it (same ids, same
 * order) while no task of the pool moved, handed and done ones notwithstanding; once tasks moved,
 * exactly what the rank holds now (queued, handed, done; stolen ones included, released ones not,
 * a released id that came back included), with the same total. A replaced pool is declared only
 * while its declaration never went out; its completions still go. The re-declaration leaves the
 * pool's own declaration as it was: the trainer's identical repeat is still ignored. */
static void test_welcome_redeclares(void **state)
{
    fx_t *f = *state;
    static const uint64_t s2[] = {1, 2, 9};
    static const uint64_t s3[] = {17, 3, 12, 8, 21, 5};
    static const uint64_t det1[] = {50};
    static const uint64_t det2[] = {60, 61};
    static const uint64_t r2[] = {40, 41};
    static const uint64_t tail2[] = {21, 5};
    static const uint64_t got[] = {5, 33, 34};
    static const uint64_t held[] = {3, 5, 8, 12, 17, 33, 34};
    static const uint64_t done3[] = {17, 3, 12, 8};
    static const uint64_t d1[] = {1};
    static const uint64_t d17[] = {17};
    const Tide__V1__TasksDeclared *td;
    const Tide__V1__TasksDone *done;
    const Tide__V1__TasksReleased *tr;
    tide_task_answer_t ans;
    uint64_t id;

    /* member step 2: 1 done, 2 handed, 9 released; then replaced by step 3 (declaration sent) */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 2, s2, 3, 3, 0, NULL, NULL), 0);
    assert_int_equal(next(f, 1, 2, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(next(f, 1, 2, 1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 2);
    assert_int_equal(release(f, 0, MEMBER, 2, 6, 1), 0);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 2, 9), TIDE_TASK_RELEASED);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 3, s3, 6, 30, 0, NULL, NULL), 0);
    /* detached step 1 and its replacement, step 2, both declared while the stream is down */
    f->o.fail = -ENOTCONN;
    assert_int_equal(tide_task_deque_declare(f->d, 1, DETACHED, 1, det1, 1, 1, 0, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_declare(f->d, 1, DETACHED, 2, det2, 2, 2, 0, NULL, NULL), 0);
    f->o.fail = 0;
    /* member step 3: 17 done, 3 handed; nothing moved */
    assert_int_equal(next(f, 1, 3, -1, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 17);
    assert_int_equal(next(f, 1, 3, 17, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 3);
    outbox_clear(&f->o);

    /* Welcome 1, pools oldest first: member 2 (replaced, sent: its completions only), member 3 (as
     * declared, in order, then its completions), detached 1 (replaced, never sent: declared once),
     * detached 2 (as declared); no steal is out. */
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 5);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_int_equal(done->step, 2);
    assert_ids(done->task_ids, done->n_task_ids, d1, 1);
    td = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->kind, MEMBER);
    assert_int_equal(td->step, 3);
    assert_int_equal(td->total, 30);
    assert_int_equal(td->rank, 0);
    assert_ids(td->task_ids, td->n_task_ids, s3, 6);
    done = out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_int_equal(done->step, 3);
    assert_ids(done->task_ids, done->n_task_ids, d17, 1);
    td = out(&f->o, 3, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->kind, DETACHED);
    assert_int_equal(td->step, 1);
    assert_int_equal(td->total, 1);
    assert_ids(td->task_ids, td->n_task_ids, det1, 1);
    td = out(&f->o, 4, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->kind, DETACHED);
    assert_int_equal(td->step, 2);
    assert_int_equal(td->total, 2);
    assert_ids(td->task_ids, td->n_task_ids, det2, 2);
    outbox_clear(&f->o);

    /* Welcome 2: the same, less detached 1, whose declaration went out now */
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 4);
    assert_int_equal(out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->step, 2);
    td = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->step, 3);
    assert_ids(td->task_ids, td->n_task_ids, s3, 6);
    assert_int_equal(out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->step, 3);
    td = out(&f->o, 3, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->kind, DETACHED);
    assert_int_equal(td->step, 2);
    assert_ids(td->task_ids, td->n_task_ids, det2, 2);
    outbox_clear(&f->o);

    /* Tasks move in member step 3: 21 and 5 are released (the tail); 12 and 8 are handed (8 the
     * last queued: the steal goes ahead); its answer brings 5 back and 33, 34; 5 is handed. */
    assert_int_equal(release(f, 0, MEMBER, 3, 7, 2), 0);
    tr = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_ids(tr->task_ids, tr->n_task_ids, tail2, 2);
    assert_int_equal(next(f, 1, 3, 3, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 12);
    assert_int_equal(next(f, 1, 3, 12, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 8);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 3), 1);
    assert_int_equal(give(f, 0, MEMBER, 3, 1, got, 3, 0, &ans), 0);
    assert_null(ans.waiter);
    assert_int_equal(next(f, 1, 3, 8, 0, 0, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 5);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 3, 5), TIDE_TASK_HANDED);
    assert_int_equal(tide_task_deque_where(f->d, 1, MEMBER, 3, 21), TIDE_TASK_RELEASED);
    assert_int_equal(tide_task_deque_queued(f->d, 1, MEMBER, 3), 2);
    /* rank 2 declares two tasks of the same step and releases both: it holds none */
    assert_int_equal(tide_task_deque_declare(f->d, 2, MEMBER, 3, r2, 2, 30, 0, NULL, NULL), 0);
    assert_int_equal(release(f, 1, MEMBER, 3, 8, 5), 0);
    assert_int_equal(tide_task_deque_queued(f->d, 2, MEMBER, 3), 0);
    outbox_clear(&f->o);

    /* Welcome 3: member 3 is declared as what rank 0 holds now: done 17, 3, 12, 8, handed 5 (back
     * from a thief), queued 33, 34; not 21. Rank 1 declares none of its 30. */
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 5);
    assert_int_equal(out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->step, 2);
    assert_declared_set(&f->o, 1, MEMBER, 3, 30, held, 7);
    assert_int_equal(f->o.msg[1]->tasks_declared->rank, 0);
    for (size_t i = 0; i < 7; i++) {
        tide_task_state_t st = tide_task_deque_where(f->d, 1, MEMBER, 3, held[i]);
        assert_true(st == TIDE_TASK_QUEUED || st == TIDE_TASK_HANDED || st == TIDE_TASK_DONE);
    }
    done = out(&f->o, 2, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, done3, 4);
    td = out(&f->o, 3, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->kind, DETACHED);
    assert_ids(td->task_ids, td->n_task_ids, det2, 2);
    assert_declared_set(&f->o, 4, MEMBER, 3, 30, NULL, 0);
    assert_int_equal(f->o.msg[4]->tasks_declared->rank, 1);
    outbox_clear(&f->o);

    /* the pools' own declarations are unchanged: the trainers' repeats are still ignored, another
     * list is still a conflict */
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 3, s3, 6, 30, 0, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_declare(f->d, 2, MEMBER, 3, r2, 2, 30, 0, NULL, NULL), 0);
    assert_int_equal(tide_task_deque_declare(f->d, 1, MEMBER, 3, held, 7, 30, 0, NULL, NULL),
                     -EEXIST);
    assert_int_equal(f->o.n, 0);
    /* and the next welcome declares the same again */
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 5);
    assert_declared_set(&f->o, 1, MEMBER, 3, 30, held, 7);
    assert_declared_set(&f->o, 4, MEMBER, 3, 30, NULL, 0);
}

/* --- random sequences against a model scheduler --- */

/* What the random runs exercised, over all seeds. */
static struct {
    uint64_t steals, stolen, replays, lost_requests, dup_gives, no_stream_none;
    uint64_t requests;         /* StealRequests the model scheduler served */
    uint64_t ahead;            /* of those, sent as the last queued task was handed (no waiter) */
    uint64_t ahead_given;      /* sent as a give handed its only task to the waiter */
    uint64_t ahead_filled;     /* answers with tasks that landed in the deque, nobody waiting */
    uint64_t exhausted_none;   /* no_task at once after an empty answer nobody waited for */
    uint64_t redeclared;       /* TasksDeclared repeats (welcomes) the model scheduler took */
    uint64_t redeclared_moved; /* of those, listing what the rank holds after tasks moved */
    uint64_t redeclared_stale; /* ids listed that the scheduler took after the welcome */
} seen;

#define R_RANKS 3
#define R_TOTAL 48
#define R_MAXQ  64

typedef struct give_msg {
    int thief; /* index */
    uint64_t steal_id;
    uint64_t ids[R_TOTAL];
    size_t n;
    bool delivered;
} give_msg_t;

typedef struct model {
    fx_t *f;
    uint32_t rng;
    /* trainers */
    bool waiting[R_RANKS], finished[R_RANKS];
    int64_t current[R_RANKS]; /* handed and not yet reported done; -1: none */
    bool got_none[R_RANKS];   /* an empty answer reached the rank's deque: its pool is over */
    uint64_t share[R_RANKS][R_TOTAL]; /* each rank's declaration */
    size_t n_share[R_RANKS];
    /* the scheduler */
    bool declared[R_RANKS];    /* its declaration arrived */
    int holder[R_TOTAL];       /* the rank the scheduler has holding it; -1: none or in flight */
    int from[R_TOTAL];         /* in flight: the rank that released it */
    int committed_by[R_TOTAL]; /* -1: not committed */
    bool in_flight[R_TOTAL];   /* released by a victim, not yet given */
    give_msg_t gives[R_MAXQ];
    size_t n_gives;
    uint64_t parked[R_RANKS];   /* steal ids waiting for tasks to come back; 0: none */
    uint64_t answered[R_RANKS]; /* the highest steal id answered per thief */
    struct {
        int victim;
        uint64_t release_id;
        uint32_t max;
        int thief;
        uint64_t steal_id;
    } lost[R_MAXQ];
    size_t n_lost;
    uint64_t release_seq;
    bool down;      /* sends fail */
    bool done_lost; /* a TasksDone was lost with a stream since the last welcome */
    int lose;       /* the next message "sent" that is lost with the stream: LOSE_* */
    int64_t now;
} model_t;

enum { LOSE_NONE, LOSE_STEAL_REQUEST, LOSE_RELEASED, LOSE_ANY };

static uint32_t rnd(model_t *m)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 17;
    m->rng ^= m->rng << 5;
    return m->rng;
}

static void *waiter_of(model_t *m, int r)
{
    return &m->f->waiter[r];
}

static void handle_outbox(model_t *m);

/* The scheduler answers a steal: a release from the rank with the most queued, the released ids to
 * the thief; parked while tasks are in flight; none when nothing is left anywhere. */
static void serve_steal(model_t *m, int thief, uint64_t steal_id)
{
    int victim = -1;
    size_t best = 0;
    bool flying = m->n_lost > 0;

    for (int i = 0; i < R_TOTAL; i++)
        flying |= m->in_flight[i];
    for (int r = 0; r < R_RANKS; r++) {
        size_t q = tide_task_deque_queued(m->f->d, (uint64_t)r + 1, MEMBER, 0);
        if (r != thief && q > best) {
            best = q;
            victim = r;
        }
    }
    for (size_t g = 0; g < m->n_gives; g++)
        if (!m->gives[g].delivered)
            flying = true;
    if (victim < 0) {
        give_msg_t *g;
        if (flying) {
            m->parked[thief] = steal_id;
            return;
        }
        assert_true(m->n_gives < R_MAXQ);
        g = &m->gives[m->n_gives++];
        memset(g, 0, sizeof(*g));
        g->thief = thief;
        g->steal_id = steal_id;
        return;
    }
    {
        Tide__V1__ReleaseTasks req = TIDE__V1__RELEASE_TASKS__INIT;
        const Tide__V1__TasksReleased *tr;
        give_msg_t *g;
        outbox_t *o = &m->f->o;
        uint64_t rid = ++m->release_seq;
        uint32_t max = (uint32_t)(best + 1) / 2;

        req.job_id = "job-a";
        req.generation = 2;
        req.rank = victim;
        req.kind = MEMBER;
        req.step = 0;
        req.release_id = rid;
        req.max_tasks = max;
        assert_int_equal(tide_task_deque_release(m->f->d, &req), 0);
        assert_true(o->n <= 1);
        if (m->lose == LOSE_RELEASED || m->lose == LOSE_ANY || m->down || o->n == 0) {
            /* the answer is lost with the stream: asked again after the reconnect */
            m->lose = LOSE_NONE;
            outbox_clear(o);
            assert_true(m->n_lost < R_MAXQ);
            m->lost[m->n_lost].victim = victim;
            m->lost[m->n_lost].release_id = rid;
            m->lost[m->n_lost].max = max;
            m->lost[m->n_lost].thief = thief;
            m->lost[m->n_lost].steal_id = steal_id;
            m->n_lost++;
            return;
        }
        tr = o->msg[0]->tasks_released;
        assert_int_equal(tr->release_id, rid);
        assert_true(tr->n_task_ids >= 1);
        assert_true(m->n_gives < R_MAXQ);
        g = &m->gives[m->n_gives++];
        memset(g, 0, sizeof(*g));
        g->thief = thief;
        g->steal_id = steal_id;
        for (size_t i = 0; i < tr->n_task_ids; i++) {
            assert_true(tr->task_ids[i] < R_TOTAL);
            assert_false(m->in_flight[tr->task_ids[i]]);
            assert_int_equal(m->holder[tr->task_ids[i]], victim);
            m->in_flight[tr->task_ids[i]] = true;
            m->holder[tr->task_ids[i]] = -1;
            m->from[tr->task_ids[i]] = victim;
            g->ids[g->n++] = tr->task_ids[i];
        }
        outbox_clear(o);
    }
}

/* A declaration reaching the model scheduler: the first of a rank is its share, as declared; every
 * later one (each welcome sends one) is a repeat it accepts and that changes nothing: each id is
 * one the scheduler has this rank holding (a task it released is not listed, also while the
 * scheduler has not seen the release yet; one it stole is), or one the scheduler took from it
 * after the welcome composed the declaration (a StealRequest of the same welcome, served first:
 * this model releases at once). */
static void take_declared(model_t *m, const Tide__V1__TasksDeclared *td)
{
    int r = td->rank;
    bool same;

    assert_true(r >= 0 && r < R_RANKS);
    assert_int_equal(td->kind, MEMBER);
    assert_int_equal(td->step, 0);
    assert_int_equal(td->total, R_TOTAL);
    same = td->n_task_ids == m->n_share[r] &&
           (td->n_task_ids == 0 ||
            memcmp(td->task_ids, m->share[r], td->n_task_ids * sizeof(uint64_t)) == 0);
    if (!m->declared[r]) {
        assert_true(same);
        for (size_t i = 0; i < td->n_task_ids; i++) {
            assert_int_equal(m->holder[td->task_ids[i]], -1);
            m->holder[td->task_ids[i]] = r;
        }
        m->declared[r] = true;
        return;
    }
    for (size_t i = 0; i < td->n_task_ids; i++) {
        uint64_t id = td->task_ids[i];

        assert_true(id < R_TOTAL);
        if (m->holder[id] != r) {
            assert_true(m->in_flight[id]);
            assert_int_equal(m->from[id], r);
            seen.redeclared_stale++;
        }
    }
    seen.redeclared++;
    seen.redeclared_moved += !same;
}

static void take_message(model_t *m, const Tide__V1__WorkerMessage *w)
{
    switch (w->msg_case) {
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED:
        take_declared(m, w->tasks_declared);
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE:
        for (size_t i = 0; i < w->tasks_done->n_task_ids; i++) {
            uint64_t id = w->tasks_done->task_ids[i];
            assert_true(id < R_TOTAL);
            /* committed once: a repeat only from the same rank */
            if (m->committed_by[id] >= 0)
                assert_int_equal(m->committed_by[id], w->tasks_done->rank);
            m->committed_by[id] = w->tasks_done->rank;
        }
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST: {
        int thief = w->steal_request->rank;
        uint64_t sid = w->steal_request->steal_id;
        bool known = m->parked[thief] == sid || sid <= m->answered[thief];
        for (size_t g = 0; g < m->n_gives; g++)
            known |= m->gives[g].thief == thief && m->gives[g].steal_id == sid;
        for (size_t l = 0; l < m->n_lost; l++)
            known |= m->lost[l].thief == thief && m->lost[l].steal_id == sid;
        if (!known) {
            /* A new steal: only from an empty deque, never after an empty answer, and never
             * while an earlier steal of the rank is unanswered (one steal out per pool). */
            assert_true(sid > m->answered[thief]);
            assert_int_equal(tide_task_deque_queued(m->f->d, (uint64_t)thief + 1, MEMBER, 0), 0);
            assert_int_equal(tide_task_deque_pending_steal(m->f->d, (uint64_t)thief + 1, MEMBER, 0),
                             sid);
            assert_false(m->got_none[thief]);
            assert_int_equal(m->parked[thief], 0);
            for (size_t g = 0; g < m->n_gives; g++)
                if (m->gives[g].thief == thief)
                    assert_true(m->gives[g].delivered);
            for (size_t l = 0; l < m->n_lost; l++)
                assert_true(m->lost[l].thief != thief);
            seen.requests++;
            serve_steal(m, thief, sid);
        }
        break;
    }
    default:
        break;
    }
}

static void handle_outbox(model_t *m)
{
    outbox_t *o = &m->f->o;
    size_t n = o->n;
    Tide__V1__WorkerMessage **msgs = malloc((n ? n : 1) * sizeof(*msgs));

    /* take them out first: serving a steal releases (and so sends) */
    if (n)
        memcpy(msgs, o->msg, n * sizeof(*msgs));
    o->n = 0;
    for (size_t i = 0; i < n; i++) {
        if (m->lose == LOSE_ANY ||
            (m->lose == LOSE_STEAL_REQUEST &&
             msgs[i]->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)) {
            m->lose = LOSE_NONE; /* "sent" on a stream that then broke */
            m->done_lost |= msgs[i]->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE;
            seen.lost_requests += msgs[i]->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST;
        } else {
            take_message(m, msgs[i]);
            handle_outbox(m);
        }
        tide__v1__worker_message__free_unpacked(msgs[i], NULL);
    }
    free(msgs);
}

static void deliver_give(model_t *m, size_t gi)
{
    give_msg_t *g = &m->gives[gi];
    tide_task_answer_t ans;
    int t = g->thief;

    assert_int_equal(give(m->f, t, MEMBER, 0, g->steal_id, g->ids, g->n, m->now, &ans), 0);
    if (!g->delivered) {
        /* the first delivery answers the steal: its waiter if the trainer asked already, else
         * the deque (a steal sent ahead) */
        assert_int_equal(ans.waiter != NULL, m->waiting[t]);
        g->delivered = true;
        for (size_t i = 0; i < g->n; i++) {
            m->in_flight[g->ids[i]] = false;
            m->holder[g->ids[i]] = t;
        }
        if (g->steal_id > m->answered[t])
            m->answered[t] = g->steal_id;
        if (g->n == 0) {
            m->got_none[t] = true;
            /* every completion of the rank goes with the empty answer */
            if (!m->down && m->lose == LOSE_NONE && !m->done_lost) {
                handle_outbox(m);
                for (uint64_t id = 0; id < R_TOTAL; id++)
                    if (tide_task_deque_where(m->f->d, (uint64_t)t + 1, MEMBER, 0, id) ==
                        TIDE_TASK_DONE)
                        assert_int_equal(m->committed_by[id], t);
            }
        } else if (!ans.waiter)
            seen.ahead_filled++;
        if (ans.waiter && ans.has_task &&
            tide_task_deque_queued(m->f->d, (uint64_t)t + 1, MEMBER, 0) == 0 && !m->down) {
            /* the waiter was handed the answer's only task: the next steal went out ahead, with a
             * newer id (its StealRequest is in the outbox, checked as a new steal) */
            assert_true(tide_task_deque_pending_steal(m->f->d, (uint64_t)t + 1, MEMBER, 0) >
                        g->steal_id);
            seen.ahead_given++;
        } else {
            /* tasks left queued, an empty answer, nobody waiting, or no stream: none out */
            assert_int_equal(tide_task_deque_pending_steal(m->f->d, (uint64_t)t + 1, MEMBER, 0), 0);
        }
    } else {
        assert_null(ans.waiter); /* a replay changes nothing */
    }
    if (ans.waiter) {
        assert_ptr_equal(ans.waiter, waiter_of(m, t));
        m->waiting[t] = false;
        if (ans.has_task)
            m->current[t] = (int64_t)ans.id;
        else
            m->finished[t] = true;
    }
}

static void trainer_step(model_t *m, int r)
{
    uint64_t id = 0, rid = (uint64_t)r + 1, before, after;
    int rc;

    if (m->waiting[r] || m->finished[r])
        return;
    before = tide_task_deque_pending_steal(m->f->d, rid, MEMBER, 0);
    rc = tide_task_deque_next(m->f->d, rid, MEMBER, 0, m->current[r], waiter_of(m, r), m->now, &id,
                              NULL);
    assert_true(rc > 0);
    after = tide_task_deque_pending_steal(m->f->d, rid, MEMBER, 0);
    m->current[r] = -1;
    if (rc == TIDE_TASK_NEXT_TASK) {
        m->current[r] = (int64_t)id;
        assert_int_equal(before, 0); /* a steal is out only while the deque is empty */
        if (tide_task_deque_queued(m->f->d, rid, MEMBER, 0) > 0) {
            assert_int_equal(after, 0);
        } else if (!m->down && !m->got_none[r]) {
            /* the last queued task was handed: the steal went out ahead */
            assert_true(after > 0);
            seen.ahead++;
        } else {
            assert_int_equal(after, 0); /* no stream, or the pool is over: nothing sent */
        }
    } else if (rc == TIDE_TASK_NEXT_WAIT) {
        m->waiting[r] = true;
        assert_true(after > 0);
        assert_true(before == 0 || before == after); /* an ahead steal is joined, not repeated */
        assert_false(m->got_none[r]);
    } else {
        m->finished[r] = true;
        assert_int_equal(after, 0);
        assert_true(m->got_none[r] || m->down);
        if (m->got_none[r] && !m->down && m->lose == LOSE_NONE && !m->done_lost) {
            /* no_task at once after an empty answer: the last completions went with it */
            handle_outbox(m);
            for (uint64_t t = 0; t < R_TOTAL; t++)
                if (tide_task_deque_where(m->f->d, rid, MEMBER, 0, t) == TIDE_TASK_DONE)
                    assert_int_equal(m->committed_by[t], r);
        }
    }
    seen.steals += rc == TIDE_TASK_NEXT_WAIT;
    seen.no_stream_none += rc == TIDE_TASK_NEXT_NONE && m->down && !m->got_none[r];
    seen.exhausted_none += rc == TIDE_TASK_NEXT_NONE && m->got_none[r];
}

/* What a welcome sent, before any of it is taken: one TasksDeclared per rank, listing exactly
 * what the rank holds (queued, handed, done) once tasks moved, its share in order while none did;
 * it comes before the rank's completions and StealRequest. */
static void check_welcome(const model_t *m)
{
    const outbox_t *o = &m->f->o;
    int declared[R_RANKS] = {0};

    for (size_t i = 0; i < o->n; i++) {
        const Tide__V1__WorkerMessage *w = o->msg[i];
        const Tide__V1__TasksDeclared *td;
        uint64_t rid;
        tide_task_stats_t st;
        bool moved, listed[R_TOTAL] = {false};
        int r;

        if (w->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE) {
            assert_int_equal(declared[w->tasks_done->rank], 1);
            continue;
        }
        if (w->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST) {
            assert_int_equal(declared[w->steal_request->rank], 1);
            continue;
        }
        assert_int_equal(w->msg_case, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED);
        td = w->tasks_declared;
        r = td->rank;
        assert_true(r >= 0 && r < R_RANKS);
        rid = (uint64_t)r + 1;
        assert_int_equal(declared[r]++, 0);
        assert_int_equal(td->total, R_TOTAL);
        for (size_t k = 0; k < td->n_task_ids; k++) {
            tide_task_state_t s;

            assert_true(td->task_ids[k] < R_TOTAL);
            assert_false(listed[td->task_ids[k]]);
            listed[td->task_ids[k]] = true;
            s = tide_task_deque_where(m->f->d, rid, MEMBER, 0, td->task_ids[k]);
            assert_true(s == TIDE_TASK_QUEUED || s == TIDE_TASK_HANDED || s == TIDE_TASK_DONE);
        }
        /* moved: it released a task, or holds one it did not declare */
        assert_int_equal(tide_task_deque_stats(m->f->d, rid, m->now, &st), 0);
        moved = st.tasks_given > 0;
        for (uint64_t id = 0; id < R_TOTAL; id++) {
            tide_task_state_t s = tide_task_deque_where(m->f->d, rid, MEMBER, 0, id);
            bool held = s == TIDE_TASK_QUEUED || s == TIDE_TASK_HANDED || s == TIDE_TASK_DONE;
            bool mine = false;

            assert_int_equal(held, listed[id]);
            for (size_t k = 0; k < m->n_share[r]; k++)
                mine |= m->share[r][k] == id;
            moved |= held && !mine;
        }
        if (!moved)
            assert_ids(td->task_ids, td->n_task_ids, m->share[r], m->n_share[r]);
    }
    for (int r = 0; r < R_RANKS; r++)
        assert_int_equal(declared[r], 1);
}

static void reconnect(model_t *m)
{
    m->down = false;
    m->f->o.fail = 0;
    m->done_lost = false; /* the welcome sends every completion again */
    assert_int_equal(m->f->o.n, 0);
    tide_task_deque_welcome(m->f->d);
    check_welcome(m);
    handle_outbox(m);
    /* the scheduler asks again for the releases whose answers it lost */
    while (m->n_lost > 0) {
        Tide__V1__ReleaseTasks req = TIDE__V1__RELEASE_TASKS__INIT;
        const Tide__V1__TasksReleased *tr;
        give_msg_t *g;
        size_t l = --m->n_lost;

        req.job_id = "job-a";
        req.generation = 2;
        req.rank = m->lost[l].victim;
        req.kind = MEMBER;
        req.release_id = m->lost[l].release_id;
        req.max_tasks = m->lost[l].max;
        assert_int_equal(tide_task_deque_release(m->f->d, &req), 0);
        assert_int_equal(m->f->o.n, 1);
        seen.replays++;
        tr = m->f->o.msg[0]->tasks_released;
        assert_true(m->n_gives < R_MAXQ);
        g = &m->gives[m->n_gives++];
        memset(g, 0, sizeof(*g));
        g->thief = m->lost[l].thief;
        g->steal_id = m->lost[l].steal_id;
        for (size_t i = 0; i < tr->n_task_ids; i++) {
            assert_false(m->in_flight[tr->task_ids[i]]);
            assert_int_equal(m->holder[tr->task_ids[i]], m->lost[l].victim);
            m->in_flight[tr->task_ids[i]] = true;
            m->holder[tr->task_ids[i]] = -1;
            m->from[tr->task_ids[i]] = m->lost[l].victim;
            g->ids[g->n++] = tr->task_ids[i];
        }
        outbox_clear(&m->f->o);
    }
}

/* Each task id is in exactly one place: held (queued, handed or done) by one rank, or in flight;
 * and a rank has a steal out only while its deque is empty. */
static void check_places(model_t *m)
{
    for (int r = 0; r < R_RANKS; r++)
        if (tide_task_deque_pending_steal(m->f->d, (uint64_t)r + 1, MEMBER, 0))
            assert_int_equal(tide_task_deque_queued(m->f->d, (uint64_t)r + 1, MEMBER, 0), 0);
    for (uint64_t id = 0; id < R_TOTAL; id++) {
        int holders = 0;
        bool released_somewhere = false;

        for (int r = 0; r < R_RANKS; r++) {
            tide_task_state_t s = tide_task_deque_where(m->f->d, (uint64_t)r + 1, MEMBER, 0, id);
            holders += s == TIDE_TASK_QUEUED || s == TIDE_TASK_HANDED || s == TIDE_TASK_DONE;
            released_somewhere |= s == TIDE_TASK_RELEASED;
        }
        if (m->in_flight[id])
            assert_int_equal(holders, 0);
        else if (holders == 0)
            /* released, and the answer lost with the stream: the replay will carry it */
            assert_true(released_somewhere && m->n_lost > 0);
        else
            assert_int_equal(holders, 1);
    }
}

static void run_random(uint32_t seed)
{
    fx_t *f;
    model_t m;
    uint64_t run = 0, stolen = 0, given = 0;

    setup((void **)&f);
    tide_task_deque_rank_add(f->d, 3, "job-a", 2, 2, 0);
    memset(&m, 0, sizeof(m));
    m.f = f;
    m.rng = seed * 2654435761u + 1;
    for (int r = 0; r < R_RANKS; r++)
        m.current[r] = -1;
    for (int i = 0; i < R_TOTAL; i++) {
        m.committed_by[i] = -1;
        m.holder[i] = -1;
    }
    /* uneven shares, some empty */
    for (uint64_t id = 0; id < R_TOTAL; id++) {
        int r = (int)(rnd(&m) % 4);
        r = r == 3 ? 0 : r;
        m.share[r][m.n_share[r]++] = id;
    }
    for (int r = 0; r < R_RANKS; r++) {
        if (rnd(&m) % 4 == 0) { /* declared while the stream was down */
            m.down = true;
            f->o.fail = -ENOTCONN;
        }
        assert_int_equal(tide_task_deque_declare(f->d, (uint64_t)r + 1, MEMBER, 0, m.share[r],
                                                 m.n_share[r], R_TOTAL, 0, NULL, NULL),
                         0);
        handle_outbox(&m);
    }
    reconnect(&m);
    check_places(&m);
    for (int step = 0; step < 400; step++) {
        uint32_t x = rnd(&m) % 100;

        m.now += rnd(&m) % 50;
        if (x < 50) {
            trainer_step(&m, (int)(rnd(&m) % R_RANKS));
        } else if (x < 65) {
            size_t pending = 0;
            for (size_t g = 0; g < m.n_gives; g++)
                pending += !m.gives[g].delivered;
            if (pending) {
                size_t k = rnd(&m) % pending;
                for (size_t g = 0; g < m.n_gives; g++)
                    if (!m.gives[g].delivered && k-- == 0) {
                        deliver_give(&m, g);
                        break;
                    }
            }
        } else if (x < 70 && m.n_gives > 0) {
            /* a duplicate of an answer already delivered */
            size_t g = rnd(&m) % m.n_gives;
            if (m.gives[g].delivered) {
                deliver_give(&m, g);
                seen.dup_gives++;
            }
        } else if (x < 75) {
            m.down = true;
            f->o.fail = -ENOTCONN;
        } else if (x < 80) {
            m.lose = 1 + (int)(rnd(&m) % 3);
        } else if (x < 88) {
            reconnect(&m);
        } else if (x < 93) {
            if (!m.down)
                tide_task_deque_flush(f->d);
        } else {
            /* parked steals are tried again */
            for (int r = 0; r < R_RANKS; r++) {
                uint64_t sid = m.parked[r];
                if (sid && !m.down) {
                    m.parked[r] = 0;
                    serve_steal(&m, r, sid);
                }
            }
        }
        handle_outbox(&m);
        check_places(&m);
    }
    /* the end: a good stream, everything delivered, every trainer runs to no_task */
    m.lose = LOSE_NONE;
    reconnect(&m);
    for (int round = 0; round < 10000; round++) {
        bool all = true;

        for (size_t g = 0; g < m.n_gives; g++)
            if (!m.gives[g].delivered)
                deliver_give(&m, g);
        for (int r = 0; r < R_RANKS; r++) {
            uint64_t sid = m.parked[r];
            if (sid) {
                m.parked[r] = 0;
                serve_steal(&m, r, sid);
            }
            trainer_step(&m, r);
            all &= m.finished[r];
        }
        handle_outbox(&m);
        check_places(&m);
        if (all)
            break;
    }
    tide_task_deque_flush(f->d);
    handle_outbox(&m);
    for (int r = 0; r < R_RANKS; r++) {
        tide_task_stats_t st;
        assert_true(m.finished[r]);
        assert_int_equal(tide_task_deque_stats(f->d, (uint64_t)r + 1, m.now, &st), 0);
        run += st.tasks_run;
        stolen += st.tasks_stolen;
        given += st.tasks_given;
    }
    /* every task ran exactly once and was committed by the rank that ran it */
    assert_int_equal(run, R_TOTAL);
    assert_true(stolen <= given);
    seen.stolen += stolen;
    for (uint64_t id = 0; id < R_TOTAL; id++) {
        int r = m.committed_by[id];
        assert_true(r >= 0);
        assert_int_equal(tide_task_deque_where(f->d, (uint64_t)r + 1, MEMBER, 0, id),
                         TIDE_TASK_DONE);
    }
    teardown((void **)&f);
}

static void test_random_sequences(void **state)
{
    (void)state;
    memset(&seen, 0, sizeof(seen));
    for (uint32_t seed = 1; seed <= 300; seed++)
        run_random(seed);
    /* the runs did reach what they are meant to check */
    print_message("random runs: %llu waits, %llu steal requests (%llu ahead of a next_task, %llu "
                  "ahead of a give), %llu ahead answers queued, %llu no_task after an empty "
                  "answer, %llu tasks stolen, %llu release replays, %llu lost steal requests, %llu "
                  "duplicate gives, %llu no_task without a stream, %llu re-declarations (%llu "
                  "after moves, %llu ids taken since)\n",
                  (unsigned long long)seen.steals, (unsigned long long)seen.requests,
                  (unsigned long long)seen.ahead, (unsigned long long)seen.ahead_given,
                  (unsigned long long)seen.ahead_filled, (unsigned long long)seen.exhausted_none,
                  (unsigned long long)seen.stolen, (unsigned long long)seen.replays,
                  (unsigned long long)seen.lost_requests, (unsigned long long)seen.dup_gives,
                  (unsigned long long)seen.no_stream_none, (unsigned long long)seen.redeclared,
                  (unsigned long long)seen.redeclared_moved,
                  (unsigned long long)seen.redeclared_stale);
    assert_true(seen.steals > 300 && seen.stolen > 300 && seen.requests > 300);
    assert_true(seen.ahead > 300 && seen.ahead_filled > 50 && seen.exhausted_none > 10);
    assert_true(seen.ahead_given > 50);
    assert_true(seen.replays > 10 && seen.lost_requests > 10 && seen.dup_gives > 10);
    assert_true(seen.no_stream_none > 10);
    assert_true(seen.redeclared > 300 && seen.redeclared_moved > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_declare_pop_and_steal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stopping_answers_the_waiter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stopping_ends_a_steal_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_tail_and_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_give_and_replays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_give_bounded_by_total, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_loss_keeps_waiter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget_waiter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_step_replaces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ahead_tasks_before_ask, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ahead_empty_then_no_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ahead_without_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ahead_waiter_attaches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_give_steals_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_steps_only_forward, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_id_per_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_welcome_redeclares, setup, teardown),
        cmocka_unit_test(test_random_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Unit tests of the worker's task deques (worker/task_deque.c) with a fake send op and a fake
 * clock: declare, pop from the head, release from the tail, give, replays of releases and gives,
 * the errors (unknown_step, unknown_task, busy, task_conflict), stream loss and welcome, replaced
 * steps, statistics; and random sequences with a model scheduler that check after every step that
 * each task id is in exactly one place and that at the end every task was done exactly once. */
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
    assert_int_equal(next(f, 1, 7, 11, 0, 300, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 12);
    assert_int_equal(f->o.n, 0); /* completions wait for a steal or a heartbeat */
    /* Empty: TasksDone, then StealRequest; the trainer waits. */
    assert_int_equal(next(f, 1, 7, 12, 0, 400, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(f->o.n, 2);
    done = out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_ids(done->task_ids, done->n_task_ids, ids, 3);
    assert_int_equal(done->queued, 0);
    assert_int_equal(done->step, 7);
    sr = out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request;
    assert_int_equal(sr->steal_id, 1);
    assert_int_equal(sr->step, 7);
    assert_int_equal(sr->rank, 0);
    assert_int_equal(tide_task_deque_pending_steal(f->d, 1, MEMBER, 7), 1);
    outbox_clear(&f->o);
    /* the heartbeat flush has nothing left to report */
    tide_task_deque_flush(f->d);
    assert_int_equal(f->o.n, 0);
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
    /* busy: a second next_task while one waits */
    outbox_clear(&f->o);
    assert_int_equal(next(f, 1, 0, 3, 0, 0, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(next(f, 1, 0, -1, 1, 0, &id), -EBUSY);
    assert_int_equal(next(f, 1, 0, 2, 0, 0, &id), -EBUSY);
    assert_int_equal(f->o.n, 2); /* TasksDone + StealRequest, nothing more */
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
    assert_int_equal(next(f, 2, 0, 5, 3, 1400, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 6);
    assert_int_equal(next(f, 2, 0, 6, 3, 1500, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 7);
    outbox_clear(&f->o);
    assert_int_equal(next(f, 2, 0, 7, 3, 1600, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 2);
    /* ids held already (6 is done here) or above 2^53 - 1 are skipped: 9 and 8 are new */
    assert_int_equal(give(f, 1, MEMBER, 0, 2, mixed, 4, 1700, &ans), 0);
    assert_true(ans.has_task);
    assert_int_equal(ans.id, 9);
    assert_int_equal(tide_task_deque_queued(f->d, 2, MEMBER, 0), 1);
    assert_int_equal(next(f, 2, 0, 9, 3, 1800, &id), TIDE_TASK_NEXT_TASK);
    assert_int_equal(id, 8);
    /* an empty give: nothing left anywhere, the waiter gets no_task */
    assert_int_equal(next(f, 2, 0, 8, 3, 1900, &id), TIDE_TASK_NEXT_WAIT);
    assert_int_equal(give(f, 1, MEMBER, 0, 3, NULL, 0, 2000, &ans), 0);
    assert_ptr_equal(ans.waiter, &f->waiter[3]);
    assert_false(ans.has_task);
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
 * out at the next welcome. */
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
    /* every welcome repeats the completions (a repeat is a no-op for the scheduler) */
    tide_task_deque_welcome(f->d);
    assert_int_equal(f->o.n, 1);
    out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE);
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
    assert_int_equal(f->o.n, 2); /* completions, then the steal */
    out(&f->o, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE);
    assert_int_equal(
        out(&f->o, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
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
    /* long after: no task in the window, the weighted mean stands; idle */
    assert_int_equal(tide_task_deque_stats(f->d, 5, 200000, &st), 0);
    assert_true(st.busy_fraction == 0);
    assert_true(st.task_seconds > 1.0 && st.task_seconds < 2.0);
    assert_true(st.steal_wait_seconds > 0.999 && st.steal_wait_seconds < 1.001);

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

/* --- random sequences against a model scheduler --- */

/* What the random runs exercised, over all seeds. */
static struct {
    uint64_t steals, stolen, replays, lost_requests, dup_gives, no_stream_none;
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
    /* the scheduler */
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
    bool down; /* sends fail */
    int lose;  /* the next message "sent" that is lost with the stream: LOSE_* */
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
            m->in_flight[tr->task_ids[i]] = true;
            g->ids[g->n++] = tr->task_ids[i];
        }
        outbox_clear(o);
    }
}

static void take_message(model_t *m, const Tide__V1__WorkerMessage *w)
{
    switch (w->msg_case) {
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
        if (!known)
            serve_steal(m, thief, sid);
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
        g->delivered = true;
        for (size_t i = 0; i < g->n; i++)
            m->in_flight[g->ids[i]] = false;
        if (g->steal_id > m->answered[t])
            m->answered[t] = g->steal_id;
    }
    if (ans.waiter) {
        assert_ptr_equal(ans.waiter, waiter_of(m, t));
        assert_true(m->waiting[t]);
        m->waiting[t] = false;
        if (ans.has_task)
            m->current[t] = (int64_t)ans.id;
        else
            m->finished[t] = true;
    }
}

static void trainer_step(model_t *m, int r)
{
    uint64_t id = 0;
    int rc;

    if (m->waiting[r] || m->finished[r])
        return;
    rc = tide_task_deque_next(m->f->d, (uint64_t)r + 1, MEMBER, 0, m->current[r], waiter_of(m, r),
                              m->now, &id, NULL);
    assert_true(rc > 0);
    m->current[r] = -1;
    if (rc == TIDE_TASK_NEXT_TASK)
        m->current[r] = (int64_t)id;
    else if (rc == TIDE_TASK_NEXT_WAIT)
        m->waiting[r] = true;
    else
        m->finished[r] = true;
    seen.steals += rc == TIDE_TASK_NEXT_WAIT;
    seen.no_stream_none += rc == TIDE_TASK_NEXT_NONE && m->down;
}

static void reconnect(model_t *m)
{
    m->down = false;
    m->f->o.fail = 0;
    tide_task_deque_welcome(m->f->d);
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
            m->in_flight[tr->task_ids[i]] = true;
            g->ids[g->n++] = tr->task_ids[i];
        }
        outbox_clear(&m->f->o);
    }
}

/* Each task id is in exactly one place: held (queued, handed or done) by one rank, or in flight. */
static void check_places(model_t *m)
{
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
    uint64_t share[R_RANKS][R_TOTAL];
    size_t n_share[R_RANKS] = {0};
    uint64_t run = 0, stolen = 0, given = 0;

    setup((void **)&f);
    tide_task_deque_rank_add(f->d, 3, "job-a", 2, 2, 0);
    memset(&m, 0, sizeof(m));
    m.f = f;
    m.rng = seed * 2654435761u + 1;
    for (int r = 0; r < R_RANKS; r++)
        m.current[r] = -1;
    for (int i = 0; i < R_TOTAL; i++)
        m.committed_by[i] = -1;
    /* uneven shares, some empty */
    for (uint64_t id = 0; id < R_TOTAL; id++) {
        int r = (int)(rnd(&m) % 4);
        r = r == 3 ? 0 : r;
        share[r][n_share[r]++] = id;
    }
    for (int r = 0; r < R_RANKS; r++) {
        if (rnd(&m) % 4 == 0) { /* declared while the stream was down */
            m.down = true;
            f->o.fail = -ENOTCONN;
        }
        assert_int_equal(tide_task_deque_declare(f->d, (uint64_t)r + 1, MEMBER, 0, share[r],
                                                 n_share[r], R_TOTAL, 0, NULL, NULL),
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
    print_message("random runs: %llu steals, %llu tasks stolen, %llu release replays, %llu lost "
                  "steal requests, %llu duplicate gives, %llu no_task without a stream\n",
                  (unsigned long long)seen.steals, (unsigned long long)seen.stolen,
                  (unsigned long long)seen.replays, (unsigned long long)seen.lost_requests,
                  (unsigned long long)seen.dup_gives, (unsigned long long)seen.no_stream_none);
    assert_true(seen.steals > 300 && seen.stolen > 300);
    assert_true(seen.replays > 10 && seen.lost_requests > 10 && seen.dup_gives > 10);
    assert_true(seen.no_stream_none > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_declare_pop_and_steal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors_change_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_tail_and_replay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_give_and_replays, setup, teardown),
        cmocka_unit_test_setup_teardown(test_give_bounded_by_total, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_loss_keeps_waiter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget_waiter, setup, teardown),
        cmocka_unit_test_setup_teardown(test_new_step_replaces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
        cmocka_unit_test(test_random_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Task deques, worker side (task_deque.h, docs/work-stealing.md). Invariants: within a rank's pool
 * a task id has exactly one state (queued, handed, done, released), kept in one map, and the deque
 * holds exactly the queued ones; ReleaseTasks takes only queued ids, from the tail, and marks them
 * released before TasksReleased goes out; a pool has at most one steal out and at most one waiter;
 * memory is bounded: a pool knows at most `total` ids, a rank keeps its current pool and
 * RETIRED_KEPT replaced ones per kind, and RELEASES_KEPT release answers for replays. */
#include "task_deque.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "list.h"
#include "xmalloc.h"

#define ID_MAX        UINT64_C(9007199254740991) /* 2^53 - 1 */
#define EMPTY_KEY     UINT64_MAX
#define RETIRED_KEPT  2    /* replaced pools kept per kind */
#define RELEASES_KEPT 8    /* release answers kept per rank for replays */
#define DONE_CHUNK    8192 /* ids per TasksDone */
#define WINDOW_S      10   /* statistics window, in 1 s buckets */

/* --- a map id -> state (open addressing, never shrinks, no deletion: states change) --- */

typedef struct entry {
    uint64_t id; /* EMPTY_KEY: free slot */
    int64_t handed_ms;
    uint8_t state; /* tide_task_state_t */
    bool stolen;   /* arrived through GiveTasks */
} entry_t;

typedef struct map {
    entry_t *slots;
    size_t cap, n; /* cap: 0 or a power of two */
} map_t;

static size_t hash_id(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

static entry_t *map_find(const map_t *m, uint64_t id)
{
    size_t i;

    if (m->cap == 0)
        return NULL;
    for (i = hash_id(id) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->slots[i].id == id)
            return &m->slots[i];
        if (m->slots[i].id == EMPTY_KEY)
            return NULL;
    }
}

static entry_t *map_slot(entry_t *slots, size_t cap, uint64_t id)
{
    size_t i;

    for (i = hash_id(id) & (cap - 1); slots[i].id != EMPTY_KEY && slots[i].id != id;
         i = (i + 1) & (cap - 1))
        ;
    return &slots[i];
}

/* Inserts id (not present) and returns its entry. */
static entry_t *map_add(map_t *m, uint64_t id)
{
    entry_t *e;

    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16, i;
        entry_t *slots = tide_xmalloc(cap * sizeof(*slots));

        for (i = 0; i < cap; i++)
            slots[i].id = EMPTY_KEY;
        for (i = 0; i < m->cap; i++)
            if (m->slots[i].id != EMPTY_KEY)
                *map_slot(slots, cap, m->slots[i].id) = m->slots[i];
        free(m->slots);
        m->slots = slots;
        m->cap = cap;
    }
    e = map_slot(m->slots, m->cap, id);
    memset(e, 0, sizeof(*e));
    e->id = id;
    m->n++;
    return e;
}

/* --- a ring of ids: the deque --- */

typedef struct ring {
    uint64_t *buf;
    size_t cap, head, len; /* cap: 0 or a power of two */
} ring_t;

static void ring_push_back(ring_t *r, uint64_t id)
{
    if (r->len == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 16, i;
        uint64_t *buf = tide_xmalloc(cap * sizeof(*buf));

        for (i = 0; i < r->len; i++)
            buf[i] = r->buf[(r->head + i) & (r->cap - 1)];
        free(r->buf);
        r->buf = buf;
        r->cap = cap;
        r->head = 0;
    }
    r->buf[(r->head + r->len) & (r->cap - 1)] = id;
    r->len++;
}

static uint64_t ring_pop_front(ring_t *r)
{
    uint64_t id = r->buf[r->head];

    r->head = (r->head + 1) & (r->cap - 1);
    r->len--;
    return id;
}

static uint64_t ring_pop_back(ring_t *r)
{
    r->len--;
    return r->buf[(r->head + r->len) & (r->cap - 1)];
}

/* --- pools and ranks --- */

typedef struct release {
    uint64_t release_id; /* 0: unused slot */
    int kind;
    int64_t step;
    uint64_t *ids;
    size_t n;
} release_t;

typedef struct pool {
    tide_list_t link; /* rank->pools, oldest declaration first */
    int kind;
    int64_t step;
    uint64_t total;
    uint64_t *decl; /* the declaration as the trainer sent it (TasksDeclared, repeats) */
    size_t n_decl;
    bool retired;       /* replaced by a newer step of its kind */
    bool declared_sent; /* TasksDeclared went out */
    ring_t queue;
    map_t map;
    uint64_t *done; /* completions in order; done[0, n_done_sent) went out */
    size_t n_done, cap_done, n_done_sent;
    size_t n_handed;
    uint64_t steal_id; /* the steal out for this pool; 0: none */
    bool exhausted;    /* a steal was answered with none: nothing is left for this rank */
    void *waiter;      /* the next_task waiting for it; NULL: none */
    int64_t wait_since;
} pool_t;

typedef struct bucket {
    int64_t sec; /* which second (now_ms / 1000) it holds; -1: none */
    int64_t task_ms, busy_ms;
    uint32_t tasks;
} bucket_t;

typedef struct rank {
    tide_list_t link; /* d->ranks */
    uint64_t id;
    char *job_id;
    int32_t generation, rank;
    tide_list_t pools;
    uint64_t steal_seq;
    release_t releases[RELEASES_KEPT];
    unsigned next_release;
    /* statistics */
    uint64_t tasks_run, tasks_stolen, tasks_given;
    int64_t steal_wait_ms;
    int64_t added_ms;
    size_t n_handed;    /* over its pools: busy while > 0 */
    int64_t busy_since; /* when n_handed last became > 0 */
    double ewma;        /* task time, seconds, weighted toward recent tasks: when the window
                           holds none */
    bucket_t buckets[WINDOW_S];
} rank_t;

struct tide_task_deque {
    tide_task_deque_ops_t ops;
    void *ud;
    tide_list_t ranks;
};

void tide_task_deque_new(const tide_task_deque_ops_t *ops, void *ud, tide_task_deque_t **out)
{
    tide_task_deque_t *d = tide_xcalloc(1, sizeof(*d));

    d->ops = *ops;
    d->ud = ud;
    tide_list_init(&d->ranks);
    *out = d;
}

static void pool_free(pool_t *p)
{
    tide_list_remove(&p->link);
    free(p->decl);
    free(p->queue.buf);
    free(p->map.slots);
    free(p->done);
    free(p);
}

static void rank_free(rank_t *r)
{
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, &r->pools)
    {
        pool_free(tide_list_entry(pos, pool_t, link));
    }
    for (unsigned i = 0; i < RELEASES_KEPT; i++)
        free(r->releases[i].ids);
    tide_list_remove(&r->link);
    free(r->job_id);
    free(r);
}

void tide_task_deque_free(tide_task_deque_t *d)
{
    tide_list_t *pos, *tmp;

    if (!d)
        return;
    tide_list_for_each_safe(pos, tmp, &d->ranks)
    {
        rank_free(tide_list_entry(pos, rank_t, link));
    }
    free(d);
}

static rank_t *find_rank(const tide_task_deque_t *d, uint64_t rank_id)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &d->ranks)
    {
        rank_t *r = tide_list_entry(pos, rank_t, link);
        if (r->id == rank_id)
            return r;
    }
    return NULL;
}

static rank_t *find_key(const tide_task_deque_t *d, const char *job_id, int32_t generation,
                        int32_t rank)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &d->ranks)
    {
        rank_t *r = tide_list_entry(pos, rank_t, link);
        if (r->generation == generation && r->rank == rank && strcmp(r->job_id, job_id) == 0)
            return r;
    }
    return NULL;
}

/* The rank's pool (kind, step), current or replaced. */
static pool_t *find_pool(const rank_t *r, int kind, int64_t step)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &r->pools)
    {
        pool_t *p = tide_list_entry(pos, pool_t, link);
        if (p->kind == kind && p->step == step)
            return p;
    }
    return NULL;
}

static pool_t *current_pool(const rank_t *r, int kind)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &r->pools)
    {
        pool_t *p = tide_list_entry(pos, pool_t, link);
        if (p->kind == kind && !p->retired)
            return p;
    }
    return NULL;
}

/* Kind of a scheduler message: UNSPECIFIED reads as member. */
static int wire_kind(int k)
{
    return k == 0 ? TIDE__V1__TASK_KIND__TASK_KIND_MEMBER : k;
}

void tide_task_deque_rank_add(tide_task_deque_t *d, uint64_t rank_id, const char *job_id,
                              int32_t generation, int32_t rank, int64_t now_ms)
{
    rank_t *r;

    if (find_rank(d, rank_id))
        return;
    r = tide_xcalloc(1, sizeof(*r));
    r->id = rank_id;
    r->job_id = tide_xstrdup(job_id);
    r->generation = generation;
    r->rank = rank;
    r->added_ms = now_ms;
    tide_list_init(&r->pools);
    for (int i = 0; i < WINDOW_S; i++)
        r->buckets[i].sec = -1;
    tide_list_push_back(&d->ranks, &r->link);
}

void tide_task_deque_rank_remove(tide_task_deque_t *d, uint64_t rank_id)
{
    rank_t *r = find_rank(d, rank_id);

    if (r)
        rank_free(r);
}

/* --- statistics: WINDOW_S buckets of one second --- */

static bucket_t *bucket_at(rank_t *r, int64_t sec)
{
    bucket_t *b = &r->buckets[sec % WINDOW_S];

    if (b->sec != sec) {
        memset(b, 0, sizeof(*b));
        b->sec = sec;
    }
    return b;
}

/* Busy time [from, to) into the buckets it overlaps: only the WINDOW_S seconds up to to's matter,
 * and only those, so that no bucket is reused twice in one call. */
static void add_busy(rank_t *r, int64_t from, int64_t to)
{
    int64_t first = (to / 1000 - WINDOW_S + 1) * 1000;

    if (from < first)
        from = first;
    while (from < to) {
        int64_t sec = from / 1000, end = (sec + 1) * 1000;

        if (end > to)
            end = to;
        if (sec >= 0)
            bucket_at(r, sec)->busy_ms += end - from;
        from = end;
    }
}

static void busy_begin(rank_t *r, int64_t now)
{
    if (r->n_handed++ == 0)
        r->busy_since = now;
}

static void busy_end(rank_t *r, int64_t now)
{
    if (r->n_handed > 0 && --r->n_handed == 0)
        add_busy(r, r->busy_since, now);
}

static void wait_end(rank_t *r, pool_t *p, int64_t now)
{
    if (p->waiter && now > p->wait_since)
        r->steal_wait_ms += now - p->wait_since;
    p->waiter = NULL;
}

int tide_task_deque_stats(const tide_task_deque_t *d, uint64_t rank_id, int64_t now_ms,
                          tide_task_stats_t *out)
{
    const rank_t *r = find_rank(d, rank_id);
    int64_t sec = now_ms / 1000, start, task_ms = 0, busy_ms = 0, wait_ms;
    uint32_t tasks = 0;
    tide_list_t *pos;

    memset(out, 0, sizeof(*out));
    if (!r)
        return -ENXIO;
    for (int i = 0; i < WINDOW_S; i++) {
        const bucket_t *b = &r->buckets[i];
        if (b->sec < 0 || b->sec > sec || b->sec <= sec - WINDOW_S)
            continue;
        task_ms += b->task_ms;
        busy_ms += b->busy_ms;
        tasks += b->tasks;
    }
    start = (sec - WINDOW_S + 1) * 1000;
    if (start < r->added_ms)
        start = r->added_ms;
    if (r->n_handed > 0) /* the task under way counts as far as it went */
        busy_ms += now_ms - (r->busy_since > start ? r->busy_since : start);
    out->busy_fraction = now_ms > start ? (double)busy_ms / (double)(now_ms - start) : 0;
    if (out->busy_fraction > 1)
        out->busy_fraction = 1;
    if (out->busy_fraction < 0)
        out->busy_fraction = 0;
    if (tasks > 0) {
        out->task_seconds = (double)task_ms / tasks / 1000.0;
    } else if (r->n_handed > 0) {
        /* No task ended in the window but one is under way: the recent mean, or that task's time
         * when it already took longer (a rank stuck in one slow task is slow, not idle). */
        out->task_seconds = r->ewma;
        if ((double)(now_ms - r->busy_since) / 1000.0 > out->task_seconds)
            out->task_seconds = (double)(now_ms - r->busy_since) / 1000.0;
    } else {
        out->task_seconds = 0; /* no tasks lately (evaluation, a checkpoint): not measured */
    }
    wait_ms = r->steal_wait_ms;
    tide_list_for_each(pos, &r->pools)
    {
        const pool_t *p = tide_list_entry(pos, pool_t, link);
        if (p->waiter && now_ms > p->wait_since)
            wait_ms += now_ms - p->wait_since;
    }
    out->tasks_run = r->tasks_run;
    out->tasks_stolen = r->tasks_stolen;
    out->tasks_given = r->tasks_given;
    out->steal_wait_seconds = (double)wait_ms / 1000.0;
    return 0;
}

/* --- messages --- */

static int send_declared(tide_task_deque_t *d, const rank_t *r, pool_t *p)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__TasksDeclared t = TIDE__V1__TASKS_DECLARED__INIT;
    int rc;

    t.job_id = r->job_id;
    t.generation = r->generation;
    t.rank = r->rank;
    t.kind = (Tide__V1__TaskKind)p->kind;
    t.step = p->step;
    t.task_ids = p->decl;
    t.n_task_ids = p->n_decl;
    t.total = p->total;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED;
    m.tasks_declared = &t;
    rc = d->ops.send(d->ud, &m);
    if (rc == 0)
        p->declared_sent = true;
    return rc;
}

/* After a Welcome: declares again what the rank holds of the pool now — queued, handed or done, not
 * what it released — so that a declaration lost with a stream reaches the scheduler, and a new
 * scheduler (a restart, a new leader) learns where every task is, stolen ones included. For the
 * scheduler that has the pool already it is a repeat that changes nothing. */
static int send_holding(tide_task_deque_t *d, const rank_t *r, pool_t *p)
{
    uint64_t *ids, *saved = p->decl;
    size_t n = 0, saved_n = p->n_decl;
    bool moved = false;
    int rc;

    for (size_t i = 0; i < p->map.cap; i++) {
        const entry_t *e = &p->map.slots[i];
        if (e->id != EMPTY_KEY && (e->state == TIDE_TASK_RELEASED || e->stolen))
            moved = true;
    }
    if (!moved)
        return send_declared(d, r, p);
    ids = tide_xmalloc((p->map.n ? p->map.n : 1) * sizeof(*ids));
    for (size_t i = 0; i < p->map.cap; i++) {
        const entry_t *e = &p->map.slots[i];
        if (e->id != EMPTY_KEY && e->state != TIDE_TASK_RELEASED && e->state != TIDE_TASK_UNKNOWN)
            ids[n++] = e->id;
    }
    p->decl = ids;
    p->n_decl = n;
    rc = send_declared(d, r, p);
    p->decl = saved;
    p->n_decl = saved_n;
    free(ids);
    return rc;
}

/* Sends the pool's declaration when it has not gone out yet. */
static int ensure_declared(tide_task_deque_t *d, const rank_t *r, pool_t *p)
{
    return p->declared_sent ? 0 : send_declared(d, r, p);
}

/* TasksDone with done[from, n_done), in chunks; n_done_sent follows what went out. */
static int send_done(tide_task_deque_t *d, const rank_t *r, pool_t *p, size_t from)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__TasksDone t = TIDE__V1__TASKS_DONE__INIT;
    int rc = 0;

    t.job_id = r->job_id;
    t.generation = r->generation;
    t.rank = r->rank;
    t.kind = (Tide__V1__TaskKind)p->kind;
    t.step = p->step;
    t.queued = (uint32_t)p->queue.len;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE;
    m.tasks_done = &t;
    while (from < p->n_done) {
        size_t n = p->n_done - from < DONE_CHUNK ? p->n_done - from : DONE_CHUNK;

        t.task_ids = p->done + from;
        t.n_task_ids = n;
        rc = d->ops.send(d->ud, &m);
        if (rc < 0)
            break;
        from += n;
        if (from > p->n_done_sent)
            p->n_done_sent = from;
    }
    return rc;
}

static int send_steal(tide_task_deque_t *d, const rank_t *r, const pool_t *p, uint64_t steal_id)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__StealRequest s = TIDE__V1__STEAL_REQUEST__INIT;

    s.job_id = r->job_id;
    s.generation = r->generation;
    s.rank = r->rank;
    s.kind = (Tide__V1__TaskKind)p->kind;
    s.step = p->step;
    s.steal_id = steal_id;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST;
    m.steal_request = &s;
    return d->ops.send(d->ud, &m);
}

static void send_released(tide_task_deque_t *d, const rank_t *r, int kind, int64_t step,
                          uint64_t release_id, uint64_t *ids, size_t n, size_t queued)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__TasksReleased t = TIDE__V1__TASKS_RELEASED__INIT;

    t.job_id = r->job_id;
    t.generation = r->generation;
    t.rank = r->rank;
    t.kind = (Tide__V1__TaskKind)kind;
    t.step = step;
    t.release_id = release_id;
    t.task_ids = ids;
    t.n_task_ids = n;
    t.queued = (uint32_t)queued;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED;
    m.tasks_released = &t;
    /* Not sent: the scheduler asks again with the same release_id and gets the same ids. */
    (void)d->ops.send(d->ud, &m);
}

/* --- operations --- */

static bool same_declaration(const pool_t *p, const uint64_t *ids, size_t n, uint64_t total)
{
    return p->total == total && p->n_decl == n &&
           (n == 0 || memcmp(p->decl, ids, n * sizeof(*ids)) == 0);
}

/* p is replaced by a newer step of its kind: its handed tasks stop counting as busy and its
 * waiter, if any, is owed no_task. */
static void retire(rank_t *r, pool_t *p, int64_t now, tide_task_answer_t *cut)
{
    p->retired = true;
    while (p->n_handed > 0) {
        p->n_handed--;
        busy_end(r, now);
    }
    if (p->waiter && cut) {
        cut->waiter = p->waiter;
        cut->kind = p->kind;
        cut->step = p->step;
        cut->has_task = false;
    }
    wait_end(r, p, now);
}

/* Keeps at most RETIRED_KEPT replaced pools of kind: the oldest go. */
static void trim_retired(rank_t *r, int kind)
{
    tide_list_t *pos, *tmp;
    size_t n = 0;

    tide_list_for_each(pos, &r->pools)
    {
        pool_t *p = tide_list_entry(pos, pool_t, link);
        n += p->kind == kind && p->retired;
    }
    tide_list_for_each_safe(pos, tmp, &r->pools)
    {
        pool_t *p = tide_list_entry(pos, pool_t, link);
        if (n <= RETIRED_KEPT)
            break;
        if (p->kind == kind && p->retired) {
            pool_free(p);
            n--;
        }
    }
}

static const char *kind_name(int kind)
{
    return kind == TIDE__V1__TASK_KIND__TASK_KIND_DETACHED ? "detached" : "member";
}

int tide_task_deque_declare(tide_task_deque_t *d, uint64_t rank_id, int kind, int64_t step,
                            const uint64_t *ids, size_t n, uint64_t total, int64_t now_ms,
                            tide_task_answer_t *cut, tide_error_t *err)
{
    rank_t *r = find_rank(d, rank_id);
    pool_t *p, *cur;
    size_t i;

    if (cut)
        memset(cut, 0, sizeof(*cut));
    if (!r) {
        tide_errprintf(err, "this rank's tasks are not served here");
        return -ENXIO;
    }
    if (kind != TIDE__V1__TASK_KIND__TASK_KIND_MEMBER &&
        kind != TIDE__V1__TASK_KIND__TASK_KIND_DETACHED) {
        tide_errprintf(err, "kind: must be member or detached");
        return -EINVAL;
    }
    p = find_pool(r, kind, step);
    cur = current_pool(r, kind);
    if (!p && cur && step < cur->step) {
        tide_errprintf(err, "step %lld (%s) is older than step %lld, declared already: steps only move "
                       "forward in a generation", (long long)step, kind_name(kind), (long long)cur->step);
        return -EEXIST;
    }
    if (p && p->retired) {
        tide_errprintf(err, "step %lld (%s) was replaced by step %lld", (long long)step,
                       kind_name(kind), cur ? (long long)cur->step : -1LL);
        return -EEXIST;
    }
    if (p) {
        if (same_declaration(p, ids, n, total))
            return 0;
        tide_errprintf(err, "tasks: differs from this rank's declaration of step %lld (%s)",
                       (long long)step, kind_name(kind));
        return -EEXIST;
    }
    if (total == 0 || n > total) {
        tide_errprintf(err, "total: %llu is below the %zu ids declared", (unsigned long long)total,
                       n);
        return -EEXIST;
    }
    p = tide_xcalloc(1, sizeof(*p));
    tide_list_init(&p->link);
    p->kind = kind;
    p->step = step;
    p->total = total;
    p->n_decl = n;
    p->decl = tide_xmalloc((n ? n : 1) * sizeof(*p->decl));
    if (n)
        memcpy(p->decl, ids, n * sizeof(*ids));
    for (i = 0; i < n; i++) {
        entry_t *e;

        if (ids[i] > ID_MAX || map_find(&p->map, ids[i])) {
            tide_errprintf(err, "ids: %llu %s", (unsigned long long)ids[i],
                           ids[i] > ID_MAX ? "is above 2^53 - 1" : "appears more than once");
            pool_free(p);
            return -EEXIST;
        }
        e = map_add(&p->map, ids[i]);
        e->state = TIDE_TASK_QUEUED;
        ring_push_back(&p->queue, ids[i]);
    }
    cur = current_pool(r, kind);
    if (cur) {
        retire(r, cur, now_ms, cut);
        trim_retired(r, kind);
    }
    tide_list_push_back(&r->pools, &p->link);
    (void)send_declared(d, r, p); /* again on the next welcome when not sent */
    return 0;
}

static void hand(rank_t *r, pool_t *p, entry_t *e, int64_t now)
{
    e->state = TIDE_TASK_HANDED;
    e->handed_ms = now;
    p->n_handed++;
    busy_begin(r, now);
}

static void mark_done(rank_t *r, pool_t *p, entry_t *e, int64_t now)
{
    int64_t took = now > e->handed_ms ? now - e->handed_ms : 0;
    bucket_t *b;

    e->state = TIDE_TASK_DONE;
    if (p->n_done == p->cap_done) {
        p->cap_done = p->cap_done ? 2 * p->cap_done : 16;
        p->done = tide_xrealloc(p->done, p->cap_done * sizeof(*p->done));
    }
    p->done[p->n_done++] = e->id;
    if (p->n_handed > 0) {
        p->n_handed--;
        busy_end(r, now);
    }
    r->ewma =
        r->tasks_run == 0 ? (double)took / 1000.0 : 0.8 * r->ewma + 0.2 * ((double)took / 1000.0);
    r->tasks_run++;
    if (e->stolen)
        r->tasks_stolen++;
    if (now >= 0) {
        b = bucket_at(r, now / 1000);
        b->tasks++;
        b->task_ms += took;
    }
}

/* Steal ahead: the trainer was just handed the last queued task of the pool, so the steal for its
 * next one goes out now, while it runs that task, and the answer is usually there (in the deque)
 * before it asks. Without a stream nothing is sent (the trainer's next next_task decides). */
static void steal_ahead(tide_task_deque_t *d, rank_t *r, pool_t *p)
{
    uint64_t steal_id;

    if (p->queue.len > 0 || p->steal_id || p->exhausted || p->retired)
        return;
    if (ensure_declared(d, r, p) < 0)
        return;
    if (p->n_done_sent < p->n_done && send_done(d, r, p, p->n_done_sent) < 0)
        return;
    steal_id = r->steal_seq + 1;
    if (send_steal(d, r, p, steal_id) < 0)
        return;
    r->steal_seq = steal_id;
    p->steal_id = steal_id;
}

int tide_task_deque_next(tide_task_deque_t *d, uint64_t rank_id, int kind, int64_t step,
                         int64_t done, void *waiter, int64_t now_ms, uint64_t *id,
                         tide_error_t *err)
{
    rank_t *r = find_rank(d, rank_id);
    entry_t *e = NULL;
    uint64_t steal_id;
    pool_t *p;

    if (!r) {
        tide_errprintf(err, "this rank's tasks are not served here");
        return -ENXIO;
    }
    p = find_pool(r, kind, step);
    if (!p || p->retired) {
        tide_errprintf(err, "step: %lld (%s) %s", (long long)step, kind_name(kind),
                       p ? "was replaced by a newer step" : "was not declared by this rank");
        return -ENOENT;
    }
    if (p->waiter) {
        tide_errprintf(err, "next_task: another next_task of this rank waits for step %lld (%s)",
                       (long long)step, kind_name(kind));
        return -EBUSY;
    }
    if (done >= 0) {
        e = map_find(&p->map, (uint64_t)done);
        if (!e || (e->state != TIDE_TASK_HANDED && e->state != TIDE_TASK_DONE)) {
            tide_errprintf(err, "done: task %lld was not handed to this rank in step %lld (%s)",
                           (long long)done, (long long)step, kind_name(kind));
            return -EINVAL;
        }
        if (e->state == TIDE_TASK_HANDED)
            mark_done(r, p, e, now_ms);
    }
    if (p->queue.len > 0) {
        uint64_t head = ring_pop_front(&p->queue);

        hand(r, p, map_find(&p->map, head), now_ms);
        *id = head;
        if (p->queue.len == 0)
            steal_ahead(d, r, p);
        return TIDE_TASK_NEXT_TASK;
    }
    if (p->exhausted) {
        /* The rank's part of the step is over: its last completions go now, not with the next
         * heartbeat, so the scheduler sees the pool complete. */
        if (p->n_done_sent < p->n_done)
            (void)send_done(d, r, p, p->n_done_sent);
        return TIDE_TASK_NEXT_NONE;
    }
    if (p->steal_id) {
        /* A steal is out already (its waiter went away): wait for its answer. */
        p->waiter = waiter;
        p->wait_since = now_ms;
        return TIDE_TASK_NEXT_WAIT;
    }
    /* The completions go before the request, so the scheduler's view of the pool is current. An
     * unsendable request means no stream: every task is still in its owner's deque, so no_task is
     * safe. */
    if (ensure_declared(d, r, p) < 0)
        return TIDE_TASK_NEXT_NONE;
    if (p->n_done_sent < p->n_done && send_done(d, r, p, p->n_done_sent) < 0)
        return TIDE_TASK_NEXT_NONE;
    steal_id = r->steal_seq + 1;
    if (send_steal(d, r, p, steal_id) < 0)
        return TIDE_TASK_NEXT_NONE;
    r->steal_seq = steal_id;
    p->steal_id = steal_id;
    p->waiter = waiter;
    p->wait_since = now_ms;
    return TIDE_TASK_NEXT_WAIT;
}

void tide_task_deque_forget_waiter(tide_task_deque_t *d, uint64_t rank_id, void *waiter,
                                   int64_t now_ms)
{
    rank_t *r = find_rank(d, rank_id);
    tide_list_t *pos;

    if (!r || !waiter)
        return;
    tide_list_for_each(pos, &r->pools)
    {
        pool_t *p = tide_list_entry(pos, pool_t, link);
        if (p->waiter == waiter)
            wait_end(r, p, now_ms);
    }
}

/* The answer kept for a release id of the same pool (a new leader could reuse an id for another
 * pool: that one is a new release, not a replay). */
static const release_t *find_release(const rank_t *r, uint64_t release_id, int kind, int64_t step)
{
    for (unsigned i = 0; i < RELEASES_KEPT; i++) {
        const release_t *rel = &r->releases[i];
        if (rel->release_id == release_id && release_id != 0 && rel->kind == kind && rel->step == step)
            return rel;
    }
    return NULL;
}

int tide_task_deque_release(tide_task_deque_t *d, const Tide__V1__ReleaseTasks *req)
{
    rank_t *r = find_key(d, req->job_id, req->generation, req->rank);
    int kind = wire_kind(req->kind);
    const release_t *old;
    release_t *rel;
    pool_t *p;
    size_t n, i;

    if (!r)
        return -ENOENT;
    old = find_release(r, req->release_id, kind, req->step);
    p = find_pool(r, kind, req->step);
    if (old) {
        /* A replay (the answer may have been lost with a stream): the same ids again. */
        send_released(d, r, old->kind, old->step, old->release_id, old->ids, old->n,
                      p && old->kind == kind && old->step == req->step ? p->queue.len : 0);
        return 0;
    }
    n = p ? p->queue.len : 0;
    if (n > req->max_tasks)
        n = req->max_tasks;
    rel = &r->releases[r->next_release];
    r->next_release = (r->next_release + 1) % RELEASES_KEPT;
    free(rel->ids);
    rel->release_id = req->release_id;
    rel->kind = kind;
    rel->step = req->step;
    rel->n = n;
    rel->ids = tide_xmalloc((n ? n : 1) * sizeof(*rel->ids));
    /* From the tail, listed in deque order (the thief runs them in the order the owner would). */
    for (i = n; i > 0; i--) {
        uint64_t id = ring_pop_back(&p->queue);

        map_find(&p->map, id)->state = TIDE_TASK_RELEASED;
        rel->ids[i - 1] = id;
    }
    r->tasks_given += n;
    send_released(d, r, kind, req->step, req->release_id, rel->ids, n, p ? p->queue.len : 0);
    return 0;
}

int tide_task_deque_give(tide_task_deque_t *d, const Tide__V1__GiveTasks *g, int64_t now_ms,
                         tide_task_answer_t *ans)
{
    rank_t *r = find_key(d, g->job_id, g->generation, g->rank);
    int kind = wire_kind(g->kind);
    pool_t *p;

    memset(ans, 0, sizeof(*ans));
    if (!r)
        return -ENOENT;
    p = find_pool(r, kind, g->step);
    if (!p || p->steal_id == 0 || g->steal_id != p->steal_id)
        return 0; /* not the steal out: a replay already applied, or not ours */
    p->steal_id = 0;
    ans->waiter = p->waiter;
    ans->kind = kind;
    ans->step = p->step;
    wait_end(r, p, now_ms);
    if (g->n_task_ids == 0) {
        p->exhausted = true; /* the scheduler has nothing left for this rank in this pool */
        if (p->n_done_sent < p->n_done) /* and it may as well know every completion so far */
            (void)send_done(d, r, p, p->n_done_sent);
    }
    for (size_t i = 0; i < g->n_task_ids; i++) {
        uint64_t id = g->task_ids[i];
        entry_t *e;

        if (id > ID_MAX)
            continue;
        e = map_find(&p->map, id);
        if (e && e->state != TIDE_TASK_RELEASED)
            continue; /* held here already: running it twice would break exactness */
        if (!e) {
            if (p->map.n >= p->total)
                continue; /* more distinct ids than the pool has: not a real task */
            e = map_add(&p->map, id);
        }
        e->stolen = true;
        if (ans->waiter && !ans->has_task) {
            hand(r, p, e, now_ms);
            ans->has_task = true;
            ans->id = id;
        } else {
            e->state = TIDE_TASK_QUEUED;
            ring_push_back(&p->queue, id);
        }
    }
    if (ans->has_task && p->queue.len == 0)
        steal_ahead(d, r, p); /* the waiter got the only task: steal for the next one now */
    return 0;
}

size_t tide_task_deque_stopping(tide_task_deque_t *d, uint64_t rank_id, int64_t now_ms, tide_task_answer_t *out,
                                size_t max)
{
    rank_t *r = find_rank(d, rank_id);
    tide_list_t *pos;
    size_t n = 0;

    if (!r)
        return 0;
    tide_list_for_each(pos, &r->pools)
    {
        pool_t *p = tide_list_entry(pos, pool_t, link);
        if (p->waiter && n == max)
            continue; /* answered by the caller's next call */
        /* Every pool, not only those with a waiter: a steal sent ahead of the trainer's last task
         * would leave its next next_task waiting for an answer that never comes. */
        p->steal_id = 0;
        p->exhausted = true;
        if (!p->waiter)
            continue;
        memset(&out[n], 0, sizeof(out[n]));
        out[n].waiter = p->waiter;
        out[n].kind = p->kind;
        out[n].step = p->step;
        n++;
        wait_end(r, p, now_ms);
    }
    return n;
}

void tide_task_deque_welcome(tide_task_deque_t *d)
{
    tide_list_t *rpos, *pos;

    tide_list_for_each(rpos, &d->ranks)
    {
        rank_t *r = tide_list_entry(rpos, rank_t, link);
        uint64_t last = 0;

        tide_list_for_each(pos, &r->pools)
        {
            pool_t *p = tide_list_entry(pos, pool_t, link);
            int rc = p->retired ? ensure_declared(d, r, p) : send_holding(d, r, p);
            if (rc == 0 && p->n_done > 0)
                (void)send_done(d, r, p, 0);
        }
        /* Pending steals in the order they were made (steal ids increase per rank). */
        for (;;) {
            pool_t *next = NULL;

            tide_list_for_each(pos, &r->pools)
            {
                pool_t *p = tide_list_entry(pos, pool_t, link);
                if (p->steal_id > last && p->declared_sent &&
                    (!next || p->steal_id < next->steal_id))
                    next = p;
            }
            if (!next)
                break;
            last = next->steal_id;
            (void)send_steal(d, r, next, next->steal_id);
        }
    }
}

void tide_task_deque_flush(tide_task_deque_t *d)
{
    tide_list_t *rpos, *pos;

    tide_list_for_each(rpos, &d->ranks)
    {
        rank_t *r = tide_list_entry(rpos, rank_t, link);

        tide_list_for_each(pos, &r->pools)
        {
            pool_t *p = tide_list_entry(pos, pool_t, link);
            if (p->n_done_sent < p->n_done && ensure_declared(d, r, p) == 0)
                (void)send_done(d, r, p, p->n_done_sent);
        }
    }
}

tide_task_state_t tide_task_deque_where(const tide_task_deque_t *d, uint64_t rank_id, int kind,
                                        int64_t step, uint64_t id)
{
    const rank_t *r = find_rank(d, rank_id);
    const pool_t *p = r ? find_pool(r, kind, step) : NULL;
    const entry_t *e = p ? map_find(&p->map, id) : NULL;

    return e ? (tide_task_state_t)e->state : TIDE_TASK_UNKNOWN;
}

bool tide_task_deque_unsent(const tide_task_deque_t *d, uint64_t rank_id)
{
    const rank_t *r = find_rank(d, rank_id);
    const tide_list_t *pos;

    if (!r)
        return false;
    tide_list_for_each(pos, &r->pools)
    {
        const pool_t *p = tide_list_entry(pos, pool_t, link);
        if (p->n_done_sent < p->n_done)
            return true;
    }
    return false;
}

size_t tide_task_deque_queued(const tide_task_deque_t *d, uint64_t rank_id, int kind, int64_t step)
{
    const rank_t *r = find_rank(d, rank_id);
    const pool_t *p = r ? find_pool(r, kind, step) : NULL;

    return p ? p->queue.len : 0;
}

uint64_t tide_task_deque_pending_steal(const tide_task_deque_t *d, uint64_t rank_id, int kind,
                                       int64_t step)
{
    const rank_t *r = find_rank(d, rank_id);
    const pool_t *p = r ? find_pool(r, kind, step) : NULL;

    return p ? p->steal_id : 0;
}

/* Work stealing (docs/work-stealing.md): the task pools of a job's current generation, one per
 * (kind, step), and the steal protocol between thieves, victims and the scheduler. A pool has a place
 * for each rank and each lent (burst) slot of the generation; a lent slot joins detached pools only,
 * declares no share and never holds a pool open. Invariant: every
 * declared task id is in exactly one place (held by one rank: queued in its deque or handed to its
 * trainer; committed; or orphaned because its holder is gone), each pool's counters are the sums
 * over its slots, and a task leaves a victim only when the victim's answer names it. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

#define TASK_ID_MAX ((1ULL << 53) - 1)
#define VICTIM_SCAN 64 /* candidates looked at per steal, from the top of the est heap */
#define RANK_MAX    ((1 << 28) - 1) /* what a slot's owner field holds */

enum slot_state { SLOT_EMPTY = 0, SLOT_HELD, SLOT_COMMITTED, SLOT_ORPHAN };
enum steal_state { STEAL_NONE = 0, STEAL_PARKED, STEAL_PENDING, STEAL_ANSWERED };

/* One task of a pool, in an open-addressing table (linear probing) sized once at the pool's
 * creation. */
typedef struct slot {
    uint64_t id;
    int32_t holder;      /* HELD: the rank holding it; COMMITTED: the rank that committed it */
    uint32_t owner : 29; /* the rank that declared it (identical repeats) */
    uint32_t state : 3;  /* enum slot_state */
} slot_t;

typedef struct tp_rank {
    bool declared;
    bool gone; /* exited or lost: holds nothing, steals nothing */
    bool pos;  /* counted in pool->n_pos: not gone and est > 0 */
    uint64_t n_declared;
    uint64_t est;        /* last reported queued + tasks given since */
    tide_heap_node_t hn; /* in pool->victims (key -est) while it may be asked to release */
    /* as a victim: at most one release outstanding */
    uint64_t release_id;   /* 0: none */
    int32_t release_thief; /* -1: cancelled (its worker lost its stream): the answer's tasks are
                              orphans */
    uint32_t release_max;
    /* as a thief */
    uint64_t steal_id;     /* the newest steal id seen */
    int steal_state;       /* enum steal_state */
    int32_t steal_victim;  /* STEAL_PENDING: the rank asked to release */
    tide_list_t park_node; /* pool->parked while STEAL_PARKED */
    int64_t park_until;    /* mono: a parked steal is answered "none" then (steal_park_ms) */
    uint64_t *given;       /* STEAL_ANSWERED: the ids given for steal_id (replays) */
    size_t n_given, cap_given;
    bool unacked; /* a lent slot given tasks, and nothing it sent since shows it got them: its
                     est and its reports may predate them; it may leave without running them */
} tp_rank_t;

typedef struct tp_pool {
    tide_task_kind_t kind;
    int64_t step;
    uint64_t seq; /* creation order: the oldest complete pool is dropped first */
    uint64_t total, declared, committed, held, orphaned;
    int32_t ranks_declared; /* ranks that declared or are gone */
    int32_t n_pos;          /* ranks with est > 0 */
    int32_t n_releases;     /* releases outstanding (pending or cancelled) */
    int32_t steals_pending, steals_parked;
    slot_t *slots;
    size_t mask;
    uint64_t *orph; /* orphaned ids (a stack of `orphaned`) */
    size_t cap_orph;
    tp_rank_t *ranks; /* n_slots: the generation's ranks, then its lent slots */
    tide_heap_t victims;
    tide_list_t parked; /* FIFO of thieves waiting for a declaration or an answer */
} tp_pool_t;

typedef struct tide_task_pools tide_task_pools_t;

struct tide_task_pools {
    tide_job_t *job;
    int32_t n_ranks;
    int32_t n_slots; /* n_ranks + the generation's lent (burst) slots */
    tp_pool_t **pools;
    int32_t n_pools, cap_pools;
    uint64_t next_seq;
    uint64_t *stolen_recent;    /* per victim rank, since the last job.steals event */
    uint64_t *stolen_total;     /* per victim rank, this generation */
    uint64_t requests_reported; /* job->steal_requests at the last job.steals event */
    int64_t dropped_step[3];    /* per kind: the newest step whose pool was dropped (-1: none);
                                   reports for it or older ones are stale, not errors */
};

/* --- the slot table --- */

static size_t hash_id(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return (size_t)x;
}

static slot_t *slot_find(const tp_pool_t *p, uint64_t id)
{
    size_t i = hash_id(id) & p->mask;

    for (;;) {
        slot_t *s = &p->slots[i];
        if (s->state == SLOT_EMPTY)
            return NULL;
        if (s->id == id)
            return s;
        i = (i + 1) & p->mask;
    }
}

/* The slot of id, new (EMPTY, id set) or existing (*existed). The table always has a free slot:
 * it holds at most total ids in more than total slots. */
static slot_t *slot_insert(tp_pool_t *p, uint64_t id, bool *existed)
{
    size_t i = hash_id(id) & p->mask;

    for (;;) {
        slot_t *s = &p->slots[i];
        if (s->state == SLOT_EMPTY) {
            s->id = id;
            *existed = false;
            return s;
        }
        if (s->id == id) {
            *existed = true;
            return s;
        }
        i = (i + 1) & p->mask;
    }
}

/* Removes id (backward-shift deletion keeps every probe chain intact). Only to undo a declaration
 * that failed half-way: tasks never leave a pool otherwise. */
static void slot_erase(tp_pool_t *p, uint64_t id)
{
    size_t i = hash_id(id) & p->mask, j;

    while (p->slots[i].state != SLOT_EMPTY && p->slots[i].id != id)
        i = (i + 1) & p->mask;
    if (p->slots[i].state == SLOT_EMPTY)
        return;
    j = i;
    for (;;) {
        size_t k;
        j = (j + 1) & p->mask;
        if (p->slots[j].state == SLOT_EMPTY)
            break;
        k = hash_id(p->slots[j].id) & p->mask;
        /* Move j back to i unless its home k lies cyclically in (i, j]. */
        if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
            p->slots[i] = p->slots[j];
            i = j;
        }
    }
    memset(&p->slots[i], 0, sizeof(p->slots[i]));
}

/* --- pools --- */

static tp_pool_t *pool_new(const tide_job_t *job, tide_task_kind_t kind, int64_t step,
                           uint64_t total)
{
    tp_pool_t *p = tide_xcalloc(1, sizeof(*p));
    size_t cap = 16;

    while (cap < total + total / 2 + 1)
        cap *= 2;
    p->kind = kind;
    p->step = step;
    p->total = total;
    p->slots = tide_xcalloc(cap, sizeof(*p->slots));
    p->mask = cap - 1;
    p->ranks = tide_xcalloc((size_t)(job->n_ranks + job->max_lent), sizeof(*p->ranks));
    for (int32_t r = 0; r < job->n_ranks + job->max_lent; r++) {
        tide_heap_node_init(&p->ranks[r].hn);
        tide_list_init(&p->ranks[r].park_node);
        p->ranks[r].release_thief = -1;
        p->ranks[r].steal_victim = -1;
        if (r >= job->n_ranks) {
            p->ranks[r].gone = !job->ranks[r].worker || job->ranks[r].lent_stopping; /* joins when lent */
            continue;
        }
        /* A rank that left before the pool opened never declares: it must not hold it open. */
        if (job->ranks[r].state == TIDE_RANK_EXITED || job->ranks[r].state == TIDE_RANK_LOST) {
            p->ranks[r].gone = true;
            p->ranks_declared++;
        }
    }
    tide_heap_init(&p->victims);
    tide_list_init(&p->parked);
    return p;
}

static void pool_free(tp_pool_t *p, int32_t n_slots)
{
    if (!p)
        return;
    for (int32_t r = 0; r < n_slots; r++)
        free(p->ranks[r].given);
    tide_heap_free(&p->victims);
    free(p->ranks);
    free(p->slots);
    free(p->orph);
    free(p);
}

static tp_pool_t *pool_find(const tide_task_pools_t *pools, tide_task_kind_t kind, int64_t step)
{
    if (!pools)
        return NULL;
    for (int32_t i = 0; i < pools->n_pools; i++)
        if (pools->pools[i]->kind == kind && pools->pools[i]->step == step)
            return pools->pools[i];
    return NULL;
}

static bool pool_complete(const tp_pool_t *p)
{
    return p->committed == p->total;
}

void tide__tasks_free(tide_job_t *job)
{
    tide_task_pools_t *pools = job->tasks;

    job->straggler_check_at = 0;
    job->steal_park_at = 0;
    job->stragglers = 0;
    if (!pools)
        return;
    for (int32_t i = 0; i < pools->n_pools; i++)
        pool_free(pools->pools[i], pools->n_slots);
    free(pools->pools);
    free(pools->stolen_recent);
    free(pools->stolen_total);
    free(pools);
    job->tasks = NULL;
}

/* --- checks --- */

/* Whether w runs rank of job_id's current generation, and a valid kind and step. */
static int check_rank(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t generation,
                      int32_t rank, tide_task_kind_t *kind, int64_t step, tide_job_t **out,
                      tide_error_t *err)
{
    tide_job_t *job = tide_core_job_find(core, job_id ? job_id : "");

    if (!job) {
        tide_errprintf(err, "job %s not found", job_id ? job_id : "");
        return -ENOENT;
    }
    if (generation < job->generation) {
        tide_errprintf(err, "job %s generation %d is over (it is at generation %d)", job->id,
                       (int)generation, (int)job->generation);
        return -ESTALE;
    }
    if (job->state != TIDE_JOB_RUNNING) {
        tide_errprintf(err, "job %s is not running (%s)", job->id, tide_job_state_name(job->state));
        return -ESTALE;
    }
    if (generation > job->generation) {
        tide_errprintf(err, "generation: job %s has no generation %d (it runs %d)", job->id,
                       (int)generation, (int)job->generation);
        return -EINVAL;
    }
    if (rank < 0 || rank >= job->n_ranks + job->max_lent) {
        tide_errprintf(err, "rank: %d is not a rank of job %s (%d ranks)", (int)rank, job->id,
                       (int)job->n_ranks);
        return -EINVAL;
    }
    if (!w || job->ranks[rank].worker != w) {
        tide_errprintf(err, "rank: rank %d of job %s does not run on worker %s", (int)rank, job->id,
                       w ? w->id : "?");
        return -EINVAL;
    }
    if ((int)*kind == 0)
        *kind = TIDE_TASK_MEMBER; /* TASK_KIND_UNSPECIFIED reads as MEMBER */
    if (*kind != TIDE_TASK_MEMBER && *kind != TIDE_TASK_DETACHED) {
        tide_errprintf(err, "kind: %d is not a task kind", (int)*kind);
        return -EINVAL;
    }
    if (rank >= job->n_ranks && *kind != TIDE_TASK_DETACHED) {
        tide_errprintf(err, "kind: a lent (burst) worker takes detached tasks only");
        return -EINVAL;
    }
    if (step < 0) {
        tide_errprintf(err, "step: %" PRId64 " is negative", step);
        return -EINVAL;
    }
    *out = job;
    return 0;
}

static int no_pool(tide_error_t *err, const tide_job_t *job, tide_task_kind_t kind, int64_t step)
{
    const tide_task_pools_t *pools = job->tasks;

    if (pools && kind >= TIDE_TASK_MEMBER && kind <= TIDE_TASK_DETACHED &&
        step <= pools->dropped_step[kind]) {
        tide_errprintf(err, "step: the %s pool of step %" PRId64 " is over", tide_task_kind_name(kind),
                       step);
        return -ESTALE;
    }
    tide_errprintf(err, "step: job %s generation %d has no %s pool of step %" PRId64, job->id,
                   (int)job->generation, tide_task_kind_name(kind), step);
    return -ENOENT;
}

/* --- the steal machinery --- */

typedef struct ctx {
    tide_core_t *core;
    tide_job_t *job;
    tide_task_pools_t *pools;
    tp_pool_t *p;
} ctx_t;

static bool stealing_on(const ctx_t *c)
{
    return c->core->cfg.stealing && !c->job->spec.no_stealing;
}

static bool worker_can_answer(const tide_worker_t *w)
{
    return w && w->connected && (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY);
}

/* Recomputes whether rank r counts as having queued tasks and whether it may be asked to release.
 */
static void refresh(ctx_t *c, int32_t r)
{
    tp_pool_t *p = c->p;
    tp_rank_t *R = &p->ranks[r];
    const tide_worker_t *w = c->job->ranks[r].worker;
    bool pos = !R->gone && R->est > 0;
    bool eligible = pos && R->declared && R->release_id == 0 && w && w->connected;

    if (pos != R->pos) {
        p->n_pos += pos ? 1 : -1;
        R->pos = pos;
    }
    if (eligible)
        tide_heap_set(&p->victims, &R->hn, -(int64_t)R->est);
    else
        tide_heap_remove(&p->victims, &R->hn);
}

static const char *label(const tide_worker_t *w, const char *key)
{
    for (size_t i = 0; i < w->n_labels; i++)
        if (strcmp(w->labels[i].key, key) == 0 && w->labels[i].value && w->labels[i].value[0])
            return w->labels[i].value;
    return NULL;
}

static bool same_node(const tide_worker_t *a, const tide_worker_t *b)
{
    return a->node_name && b->node_name && strcmp(a->node_name, b->node_name) == 0;
}

/* A worker without a rack label is its node's own rack; without a switch label, its rack's switch.
 */
static bool same_rack(const tide_worker_t *a, const tide_worker_t *b)
{
    const char *ra = label(a, TIDE_LABEL_RACK), *rb = label(b, TIDE_LABEL_RACK);

    if (!ra && !rb)
        return same_node(a, b);
    return ra && rb && strcmp(ra, rb) == 0;
}

static bool same_switch(const tide_worker_t *a, const tide_worker_t *b)
{
    const char *sa = label(a, TIDE_LABEL_SWITCH), *sb = label(b, TIDE_LABEL_SWITCH);

    if (!sa && !sb)
        return same_rack(a, b);
    return sa && sb && strcmp(sa, sb) == 0;
}

static int distance(const tide_worker_t *a, const tide_worker_t *b)
{
    if (!a || !b)
        return 3;
    if (same_node(a, b))
        return 0;
    if (same_rack(a, b))
        return 1;
    return same_switch(a, b) ? 2 : 3;
}

/* The victim for thief t: among the ranks whose est is at least 3/4 of the largest (looking at no
 * more than VICTIM_SCAN of them, from the heap's top), the nearest to the thief, then the lowest
 * rank. O(log ranks + VICTIM_SCAN). -1: none. */
static int32_t pick_victim(ctx_t *c, int32_t t)
{
    tide_heap_t *h = &c->p->victims;
    size_t queue[2 * VICTIM_SCAN + 2], head = 0, tail = 0;
    const tide_worker_t *tw = c->job->ranks[t].worker;
    uint64_t max;
    int32_t best = -1, visited = 0;
    int best_d = 4;

    if (h->len == 0)
        return -1;
    max = (uint64_t)(-h->items[0]->key);
    queue[tail++] = 0;
    while (head < tail && visited < VICTIM_SCAN) {
        size_t i = queue[head++];
        tp_rank_t *R = tide_container_of(h->items[i], tp_rank_t, hn);
        int32_t v = (int32_t)(R - c->p->ranks);
        const tide_worker_t *vw = c->job->ranks[v].worker;
        int d;

        if (R->est * 4 < max * 3)
            continue; /* nor any of its children: the heap orders them below it */
        visited++;
        for (size_t k = 2 * i + 1; k <= 2 * i + 2 && k < h->len; k++)
            if (tail < sizeof(queue) / sizeof(queue[0]))
                queue[tail++] = k;
        if (v == t || !worker_can_answer(vw))
            continue;
        d = distance(tw, vw);
        if (d < best_d || (d == best_d && v < best)) {
            best = v;
            best_d = d;
        }
    }
    return best;
}

/* Whether a lent slot may hold tasks it was given that its reports do not show: a lent process can
 * be taken back, or end, without running them; they reach the orphans only then. O(lent slots). */
static bool lent_unacked(const ctx_t *c)
{
    for (int32_t r = c->pools->n_ranks; r < c->pools->n_slots; r++)
        if (!c->p->ranks[r].gone && c->p->ranks[r].unacked)
            return true;
    return false;
}

/* Whether "none" leaves every task with someone who runs it: no lent slot is unacked, and no
 * release is outstanding whose thief went away (its victim may have released the tasks already,
 * the answer still on its way or asked again after a lost stream: they become orphans, for a
 * thief still stealing then). O(slots): for parked steals' deadlines only. */
static bool settled(const ctx_t *c)
{
    if (lent_unacked(c))
        return false;
    for (int32_t r = 0; r < c->pools->n_slots && c->p->n_releases > 0; r++)
        if (c->p->ranks[r].release_id && c->p->ranks[r].release_thief < 0)
            return false;
    return true;
}

/* Nothing is left to steal: every rank declared (or is gone) and the pool's tasks are all declared,
 * no rank may have queued tasks, no release is outstanding, no lent slot is unacked and no orphan
 * waits; or all committed. */
static bool drained(const ctx_t *c)
{
    const tp_pool_t *p = c->p;

    if (pool_complete(p))
        return true;
    /* Every live rank declared: ids of `total` nobody declared do not exist (or were lost with a
     * restarted scheduler) and are not waited for. */
    return p->ranks_declared == c->pools->n_ranks && p->n_pos == 0 && p->n_releases == 0 &&
           p->orphaned == 0 && !lent_unacked(c);
}

/* A report of lent slot r that names an id its last answer gave it shows that it got them before it
 * sent the report (whose queued count is then current). */
static void ack_given(ctx_t *c, int32_t r, const uint64_t *ids, size_t n)
{
    tp_rank_t *R = &c->p->ranks[r];

    for (size_t i = 0; R->unacked && i < n; i++)
        for (size_t k = 0; k < R->n_given; k++)
            if (R->given[k] == ids[i]) {
                R->unacked = false;
                break;
            }
}

static void given_reserve(tp_rank_t *R, size_t n)
{
    if (R->cap_given < n) {
        R->cap_given = n < 16 ? 16 : n;
        R->given = tide_xrealloc(R->given, R->cap_given * sizeof(*R->given));
    }
}

/* An action addressed to rank r's worker about the pool. */
static tide_action_t *pool_act(ctx_t *c, tide_action_type_t type, int32_t r)
{
    tide_worker_t *w = c->job->ranks[r].worker;
    tide_action_t *a = tide__act(c->core, type);

    a->job = c->job;
    a->job_id = c->job->id;
    a->worker = w;
    a->conn = w ? w->conn : NULL;
    a->generation = c->job->generation;
    a->rank = r;
    a->task_kind = (int32_t)c->p->kind;
    a->step = c->p->step;
    return a;
}

static void emit_give(ctx_t *c, int32_t t)
{
    tp_rank_t *T = &c->p->ranks[t];
    tide_action_t *a = pool_act(c, TIDE_ACT_GIVE_TASKS, t);

    a->request_id = T->steal_id;
    a->task_ids = tide__keep_ids(c->core, T->given, T->n_given);
    a->n_task_ids = T->n_given;
}

/* Answers thief t's steal with the T->n_given ids in T->given (already moved to t; may be none). */
static void give(ctx_t *c, int32_t t)
{
    tp_rank_t *T = &c->p->ranks[t];

    T->steal_state = STEAL_ANSWERED;
    T->steal_victim = -1;
    emit_give(c, t);
    if (T->n_given > 0) {
        T->unacked = t >= c->pools->n_ranks;
        T->est += T->n_given;
        refresh(c, t);
        c->job->tasks_stolen += T->n_given;
        tide__straggler_arm(c->core, c->job); /* job.steals reports them */
    }
}

static void emit_release(ctx_t *c, int32_t v)
{
    tp_rank_t *V = &c->p->ranks[v];
    tide_action_t *a = pool_act(c, TIDE_ACT_RELEASE_TASKS, v);

    a->request_id = V->release_id;
    a->max_tasks = V->release_max;
}

/* Release ids are unique per scheduler; they start from the wall clock so that a restarted
 * scheduler does not reuse the ids a worker may still remember answers for. */
static uint64_t next_release_id(tide_core_t *core)
{
    if (core->next_release_id == 0)
        core->next_release_id = core->now_wall > 0 ? (uint64_t)core->now_wall << 10 : 1;
    return core->next_release_id++;
}

/* Serves thief t now if it can (orphans, a victim, or nothing left); false: it must wait. */
static bool try_serve(ctx_t *c, int32_t t)
{
    tp_pool_t *p = c->p;
    tp_rank_t *T = &p->ranks[t];
    int32_t v;

    T->n_given = 0;
    if (!stealing_on(c) || (t >= c->job->n_ranks && c->job->ranks[t].lent_stopping)) {
        give(c, t); /* a lent worker being taken back takes nothing more */
        return true;
    }
    if (p->orphaned > 0) {
        uint64_t k = (p->orphaned + 1) / 2;
        given_reserve(T, (size_t)k);
        for (uint64_t i = 0; i < k; i++) {
            uint64_t id = p->orph[--p->orphaned];
            slot_t *s = slot_find(p, id);
            s->state = SLOT_HELD;
            s->holder = t;
            p->held++;
            T->given[T->n_given++] = id;
        }
        give(c, t);
        return true;
    }
    /* A rank slower per task than the job's median (straggler.c) does not take work from faster
     * ranks: a stolen task would take it longer than its victim, and at the end of a step it is what
     * everyone waits for. Its own tasks still run; "none" is always safe. */
    if (t < c->job->n_ranks && c->job->ranks[t].straggler != TIDE_STRAGGLER_NONE) {
        give(c, t);
        return true;
    }
    v = pick_victim(c, t);
    if (v >= 0) {
        tp_rank_t *V = &p->ranks[v];
        uint64_t half = (V->est + 1) / 2;
        V->release_id = next_release_id(c->core);
        V->release_thief = t;
        V->release_max = half > UINT32_MAX ? UINT32_MAX : (uint32_t)half;
        p->n_releases++;
        refresh(c, v);
        T->steal_state = STEAL_PENDING;
        T->steal_victim = v;
        p->steals_pending++;
        emit_release(c, v);
        return true;
    }
    if (drained(c)) {
        give(c, t);
        return true;
    }
    return false;
}

/* A thief that cannot be served yet waits for a declaration or a release, at most steal_park_ms:
 * then it is told there is nothing left (safe once settled: every task stays with a holder that
 * runs it), so a rank that never declares its share (its trainer lost its worker, a scheduler
 * restarted) costs the others their stealing, never a hang. front: put back after a failed retry,
 * keeping its deadline. */
static void park(ctx_t *c, int32_t t, bool front)
{
    tp_rank_t *T = &c->p->ranks[t];

    T->steal_state = STEAL_PARKED;
    if (front) {
        tide_list_push_front(&c->p->parked, &T->park_node);
    } else {
        tide_list_push_back(&c->p->parked, &T->park_node);
        T->park_until = c->core->now_mono + c->core->cfg.steal_park_ms;
        if (!c->job->steal_park_at || T->park_until < c->job->steal_park_at) {
            c->job->steal_park_at = T->park_until;
            tide__job_rearm(c->core, c->job);
        }
    }
    c->p->steals_parked++;
}

static void unpark(ctx_t *c, int32_t t)
{
    tp_rank_t *T = &c->p->ranks[t];

    tide_list_remove(&T->park_node);
    c->p->steals_parked--;
    T->steal_state = STEAL_NONE;
}

/* A pending steal of thief t lost its victim: it is served again or parked. */
static void reserve_thief(ctx_t *c, int32_t t)
{
    tp_rank_t *T = &c->p->ranks[t];

    c->p->steals_pending--;
    T->steal_state = STEAL_NONE;
    T->steal_victim = -1;
    if (!try_serve(c, t))
        park(c, t, false);
}

/* Tries parked thieves in order. Thieves have nothing queued, so when one cannot be served none of
 * the others can: stop there (O(served + 1) per call). */
static void retry_parked(ctx_t *c)
{
    while (!tide_list_empty(&c->p->parked)) {
        tp_rank_t *T = tide_list_entry(c->p->parked.next, tp_rank_t, park_node);
        int32_t t = (int32_t)(T - c->p->ranks);
        unpark(c, t);
        if (!try_serve(c, t)) {
            park(c, t, true);
            break;
        }
    }
}

static void orphan_one(tp_pool_t *p, slot_t *s)
{
    if (p->orphaned == p->cap_orph) {
        p->cap_orph = p->cap_orph ? p->cap_orph * 2 : 16;
        p->orph = tide_xrealloc(p->orph, p->cap_orph * sizeof(*p->orph));
    }
    s->state = SLOT_ORPHAN;
    s->holder = -1;
    p->held--;
    p->orph[p->orphaned++] = s->id;
}

/* Moves every task rank r holds to the orphans. O(pool's table): only when a rank is gone. */
static void orphan_all(tp_pool_t *p, int32_t r)
{
    for (size_t i = 0; i <= p->mask; i++)
        if (p->slots[i].state == SLOT_HELD && p->slots[i].holder == r)
            orphan_one(p, &p->slots[i]);
}

static tide_task_pools_t *pools_get(tide_core_t *core, tide_job_t *job)
{
    tide_task_pools_t *pools = job->tasks;

    if (pools)
        return pools;
    pools = tide_xcalloc(1, sizeof(*pools));
    pools->job = job;
    pools->n_ranks = job->n_ranks;
    pools->n_slots = job->n_ranks + job->max_lent;
    pools->cap_pools = core->cfg.max_task_pools > 0 ? core->cfg.max_task_pools : 1;
    pools->pools = tide_xcalloc((size_t)pools->cap_pools, sizeof(*pools->pools));
    pools->stolen_recent = tide_xcalloc((size_t)pools->n_slots + 1, sizeof(uint64_t));
    pools->stolen_total = tide_xcalloc((size_t)pools->n_slots + 1, sizeof(uint64_t));
    pools->requests_reported = job->steal_requests;
    pools->dropped_step[0] = pools->dropped_step[1] = pools->dropped_step[2] = -1;
    job->tasks = pools;
    return pools;
}

/* Whether every rank still in the generation declared a newer step of pool i's kind (the one rank
 * declaring `step` now counts): they all finished their part of pool i, so nobody waits on it and
 * what is still unreported of it never matters again. O(pools x ranks): only when a job's pool table
 * is full. */
static bool superseded(const tide_task_pools_t *pools, int32_t i, int32_t rank, tide_task_kind_t kind,
                       int64_t step)
{
    const tp_pool_t *p = pools->pools[i];

    /* A lent worker still in it may hold its tasks: it never declares newer steps, so the pool stays
     * until it leaves (its tasks then go to the orphans) or the pool completes. */
    for (int32_t r = pools->n_ranks; r < pools->n_slots; r++)
        if (p->ranks[r].declared && !p->ranks[r].gone)
            return false;
    for (int32_t r = 0; r < pools->n_ranks; r++) {
        bool newer = r == rank && kind == p->kind && step > p->step;
        if (p->ranks[r].gone)
            continue;
        for (int32_t j = 0; !newer && j < pools->n_pools; j++) {
            const tp_pool_t *q = pools->pools[j];
            newer = q->kind == p->kind && q->step > p->step && q->ranks[r].declared;
        }
        if (!newer)
            return false;
    }
    return true;
}

/* Drops pool i (complete): thieves still waiting on it are told there is nothing left. */
static void pool_drop(tide_core_t *core, tide_task_pools_t *pools, int32_t i)
{
    ctx_t c = {core, pools->job, pools, pools->pools[i]};

    for (int32_t t = 0; t < pools->n_slots; t++) {
        tp_rank_t *T = &c.p->ranks[t];
        if (T->steal_state == STEAL_PARKED)
            unpark(&c, t);
        else if (T->steal_state == STEAL_PENDING)
            c.p->steals_pending--;
        else
            continue;
        T->n_given = 0;
        give(&c, t);
    }
    if (c.p->kind >= TIDE_TASK_MEMBER && c.p->kind <= TIDE_TASK_DETACHED &&
        c.p->step > pools->dropped_step[c.p->kind])
        pools->dropped_step[c.p->kind] = c.p->step;
    pool_free(c.p, pools->n_slots);
    pools->pools[i] = pools->pools[--pools->n_pools];
}

/* --- the API --- */

int tide_core_tasks_declared(tide_core_t *core, tide_worker_t *w, const char *job_id,
                             int32_t generation, int32_t rank, tide_task_kind_t kind, int64_t step,
                             const uint64_t *ids, size_t n, uint64_t total, tide_error_t *err)
{
    tide_job_t *job;
    tide_task_pools_t *pools;
    tp_pool_t *p;
    tp_rank_t *R;
    int32_t drop = -1;
    bool created = false;
    ctx_t c;
    int rc = check_rank(core, w, job_id, generation, rank, &kind, step, &job, err);

    if (rc < 0)
        return rc;
    if (total == 0 || total > core->cfg.max_pool_tasks) {
        tide_errprintf(err, "total: %" PRIu64 " is not in 1..%u", total, core->cfg.max_pool_tasks);
        return -EINVAL;
    }
    if (n > total) {
        tide_errprintf(err, "task_ids: %zu ids exceed the pool's total of %" PRIu64, n, total);
        return -EINVAL;
    }
    if (n > 0 && !ids) {
        tide_errprintf(err, "task_ids: missing");
        return -EINVAL;
    }
    if (job->n_ranks + job->max_lent > RANK_MAX) {
        tide_errprintf(err, "rank: job %s has more ranks than stealing supports (%d)", job->id,
                       RANK_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] > TASK_ID_MAX) {
            tide_errprintf(err, "task_ids: %" PRIu64 " is above 2^53 - 1", ids[i]);
            return -EINVAL;
        }
    }
    pools = job->tasks;
    p = pool_find(pools, kind, step);
    if (rank >= job->n_ranks && n > 0) {
        /* A lent worker joins with no share of its own; after a reconnect its worker declares what it
         * holds (stolen ids the pool knows): a repeat. */
        bool known = p && p->ranks[rank].declared;
        for (size_t i = 0; known && i < n; i++)
            known = slot_find(p, ids[i]) != NULL;
        if (known)
            return 0;
        tide_errprintf(err, "task_ids: a lent (burst) worker joins a pool with no share of its own");
        return -EINVAL;
    }
    if (p) {
        R = &p->ranks[rank];
        if (p->total != total) {
            tide_errprintf(err, "total: %" PRIu64 " differs from the pool's %" PRIu64, total,
                           p->total);
            return -EINVAL;
        }
        if (R->declared) {
            bool same = n == R->n_declared;
            for (size_t i = 0; same && i < n; i++) {
                const slot_t *s = slot_find(p, ids[i]);
                same = s && (int32_t)s->owner == rank;
            }
            if (same)
                return 0;
            /* A worker declares again after a reconnect what its rank holds by then (some ids went to
             * thieves, some came from victims): every id known to the pool means a repeat, which
             * changes nothing. */
            same = true;
            for (size_t i = 0; same && i < n; i++)
                same = slot_find(p, ids[i]) != NULL;
            if (same)
                return 0;
            tide_errprintf(err,
                           "task_ids: rank %d already declared %" PRIu64
                           " tasks of this pool (%s, step %" PRId64 ")",
                           (int)rank, R->n_declared, tide_task_kind_name(kind), step);
            return -EALREADY;
        }
        if (p->declared + n > total) {
            tide_errprintf(err,
                           "task_ids: %" PRIu64
                           " declared + %zu would exceed the pool's total of %" PRIu64,
                           p->declared, n, total);
            return -EINVAL;
        }
    } else if (pools && step <= pools->dropped_step[kind]) {
        return no_pool(err, job, kind, step); /* over: opening it again would strand its thieves */
    } else {
        if (pools && pools->n_pools >= pools->cap_pools) {
            for (int32_t i = 0; i < pools->n_pools; i++)
                if (pool_complete(pools->pools[i]) &&
                    (drop < 0 || pools->pools[i]->seq < pools->pools[drop]->seq))
                    drop = i;
            /* Completions still on their way (workers batch them) keep a finished step's pool
             * incomplete: one that every rank has moved on from goes as well. */
            for (int32_t i = 0; drop < 0 && i < pools->n_pools; i++)
                if (superseded(pools, i, rank, kind, step))
                    drop = i;
            if (drop < 0) {
                tide_errprintf(err, "step: job %s has %d task pools open and none is complete",
                               job->id, (int)pools->n_pools);
                return -ENOSPC;
            }
        }
        p = pool_new(job, kind, step, total);
        created = true;
    }
    R = &p->ranks[rank];
    for (size_t i = 0; i < n; i++) {
        bool existed;
        slot_t *s = slot_insert(p, ids[i], &existed);
        if (existed) {
            if ((int32_t)s->owner == rank && s->state == SLOT_HELD && !R->declared)
                tide_errprintf(err, "task_ids: %" PRIu64 " repeats", ids[i]);
            else
                tide_errprintf(err,
                               "task_ids: %" PRIu64 " is already in the pool (declared by rank %d)",
                               ids[i], (int)s->owner);
            for (size_t j = 0; j < i; j++)
                slot_erase(p, ids[j]);
            if (created)
                pool_free(p, job->n_ranks + job->max_lent);
            return -EINVAL;
        }
        s->state = SLOT_HELD;
        s->holder = rank;
        s->owner = (uint32_t)rank;
    }
    if (created) {
        pools = pools_get(core, job);
        if (drop >= 0)
            pool_drop(core, pools, drop);
        p->seq = ++pools->next_seq;
        pools->pools[pools->n_pools++] = p;
    }
    R->declared = true;
    R->n_declared = n;
    R->est = n;
    p->declared += n;
    p->held += n;
    if (rank < job->n_ranks)
        p->ranks_declared++; /* a lent slot joins; it never holds the pool open */
    if (kind == TIDE_TASK_DETACHED && rank < job->n_ranks)
        job->detached_seen = true; /* burst may lend it workers for these */
    c = (ctx_t){core, job, pools, p};
    refresh(&c, rank);
    retry_parked(&c);
    return 0;
}

int tide_core_tasks_done(tide_core_t *core, tide_worker_t *w, const char *job_id,
                         int32_t generation, int32_t rank, tide_task_kind_t kind, int64_t step,
                         const uint64_t *ids, size_t n, uint32_t queued, tide_error_t *err)
{
    tide_job_t *job;
    tp_pool_t *p;
    ctx_t c;
    int rc = check_rank(core, w, job_id, generation, rank, &kind, step, &job, err);

    if (rc < 0)
        return rc;
    if (!(p = pool_find(job->tasks, kind, step)))
        return no_pool(err, job, kind, step);
    if (n > 0 && !ids) {
        tide_errprintf(err, "task_ids: missing");
        return -EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        slot_t *s = slot_find(p, ids[i]);
        if (s && s->state == SLOT_HELD && s->holder == rank) {
            s->state = SLOT_COMMITTED;
            p->held--;
            p->committed++;
            job->tasks_committed++;
        } else if (s && s->state == SLOT_COMMITTED && s->holder == rank) {
            continue; /* a repeated completion */
        } else if (rc == 0) {
            rc = -EINVAL;
            if (!s)
                tide_errprintf(err, "task_ids: %" PRIu64 " was never declared in this pool",
                               ids[i]);
            else
                tide_errprintf(err, "task_ids: rank %d does not hold task %" PRIu64, (int)rank,
                               ids[i]);
        }
    }
    c = (ctx_t){core, job, job->tasks, p};
    ack_given(&c, rank, ids, n);
    /* unacked: the count may predate the tasks given last (they are on their way) */
    p->ranks[rank].est = queued + (p->ranks[rank].unacked ? p->ranks[rank].n_given : 0);
    refresh(&c, rank);
    retry_parked(&c);
    return rc;
}

int tide_core_steal_request(tide_core_t *core, tide_worker_t *w, const char *job_id,
                            int32_t generation, int32_t rank, tide_task_kind_t kind, int64_t step,
                            uint64_t steal_id, tide_error_t *err)
{
    tide_job_t *job;
    tp_pool_t *p;
    tp_rank_t *T;
    ctx_t c;
    int rc = check_rank(core, w, job_id, generation, rank, &kind, step, &job, err);

    if (rc < 0)
        return rc;
    if (!(p = pool_find(job->tasks, kind, step)))
        return no_pool(err, job, kind, step);
    T = &p->ranks[rank];
    if (!T->declared) {
        tide_errprintf(err, "rank: rank %d has not declared its share of this pool", (int)rank);
        return -EINVAL;
    }
    if (steal_id == 0) {
        tide_errprintf(err, "steal_id: must be > 0");
        return -EINVAL;
    }
    c = (ctx_t){core, job, job->tasks, p};
    if (steal_id < T->steal_id)
        return 0; /* older than one already seen: overtaken */
    if (steal_id == T->steal_id) {
        if (T->steal_state == STEAL_ANSWERED)
            emit_give(&c, rank); /* lost on the way: the same answer again */
        return 0;
    }
    job->steal_requests++;
    T->steal_id = steal_id;
    T->unacked = false; /* its deque steals again only once the last answer reached it */
    if (T->steal_state == STEAL_PARKED || T->steal_state == STEAL_PENDING)
        return 0; /* still being served: answered under the newer id */
    T->est = 0;   /* its deque is empty */
    refresh(&c, rank);
    if (!try_serve(&c, rank))
        park(&c, rank, false);
    return 0;
}

int tide_core_tasks_released(tide_core_t *core, tide_worker_t *w, const char *job_id,
                             int32_t generation, int32_t rank, tide_task_kind_t kind, int64_t step,
                             uint64_t release_id, const uint64_t *ids, size_t n, uint32_t queued,
                             tide_error_t *err)
{
    tide_job_t *job;
    tp_pool_t *p;
    tp_rank_t *V, *T = NULL;
    int32_t t;
    size_t moved = 0;
    bool keep;
    ctx_t c;
    int rc = check_rank(core, w, job_id, generation, rank, &kind, step, &job, err);

    if (rc < 0)
        return rc;
    if (!(p = pool_find(job->tasks, kind, step)))
        return no_pool(err, job, kind, step);
    V = &p->ranks[rank];
    if (release_id == 0 || release_id != V->release_id)
        return 0; /* unknown or already answered */
    if (n > 0 && !ids) {
        tide_errprintf(err, "task_ids: missing");
        return -EINVAL;
    }
    c = (ctx_t){core, job, job->tasks, p};
    ack_given(&c, rank, ids, n);
    t = V->release_thief;
    if (t >= 0) {
        T = &p->ranks[t];
        given_reserve(T, n);
        T->n_given = 0;
    }
    /* A lent worker taken back since it asked takes nothing more (as in try_serve): it would not run
     * them, and the ranks may have finished the step by the time it exits. What the victim released
     * goes to the orphans, for the next thief (seed 1002403). */
    keep = T && !(t >= job->n_ranks && job->ranks[t].lent_stopping);
    for (size_t i = 0; i < n; i++) {
        slot_t *s = slot_find(p, ids[i]);
        if (!s || s->state != SLOT_HELD || s->holder != rank) {
            if (rc == 0)
                tide_errprintf(err, "task_ids: rank %d does not hold task %" PRIu64, (int)rank,
                               ids[i]);
            rc = -EINVAL;
            continue;
        }
        moved++;
        if (keep) {
            s->holder = t;
            T->given[T->n_given++] = ids[i];
        } else {
            orphan_one(p, s);
        }
    }
    V->release_id = 0;
    V->release_thief = -1;
    p->n_releases--;
    V->est = moved ? queued : 0; /* it gave nothing: do not ask it again on a stale count */
    refresh(&c, rank);
    if (moved && keep) {
        job->tasks->stolen_recent[rank] += moved;
        job->tasks->stolen_total[rank] += moved;
    }
    if (T) {
        p->steals_pending--;
        if (moved && keep) {
            give(&c, t);
        } else {
            T->steal_state = STEAL_NONE;
            T->steal_victim = -1;
            if (!try_serve(&c, t))
                park(&c, t, false);
        }
    }
    retry_parked(&c);
    return rc;
}

/* --- the generation's other events --- */

/* The pools of the generation w runs a rank of, with that rank; NULL when none. */
static tide_task_pools_t *pools_of(tide_worker_t *w, int32_t *rank)
{
    tide_job_t *job = w->job;

    if (!job || !job->tasks || job->state != TIDE_JOB_RUNNING || w->generation != job->generation ||
        w->rank < 0 || w->rank >= job->n_ranks + job->max_lent || job->ranks[w->rank].worker != w)
        return NULL;
    *rank = w->rank;
    return job->tasks;
}

/* Parked steals whose steal_park_ms passed are answered "none" (those of a pool not settled wait
 * another steal_park_ms); the job's next park deadline is set again. O(parked thieves + slots). */
void tide__tasks_park_expire(tide_core_t *core, tide_job_t *job)
{
    tide_task_pools_t *pools = job->tasks;
    int64_t next = 0;

    job->steal_park_at = 0;
    if (!pools)
        return;
    for (int32_t i = 0; i < pools->n_pools; i++) {
        ctx_t c = {core, job, pools, pools->pools[i]};
        bool safe = settled(&c);
        tide_list_t *pos, *tmp;
        tide_list_for_each_safe(pos, tmp, &c.p->parked) {
            tp_rank_t *T = tide_list_entry(pos, tp_rank_t, park_node);
            int32_t t = (int32_t)(T - c.p->ranks);
            if (T->park_until <= core->now_mono && safe) {
                unpark(&c, t);
                T->n_given = 0;
                give(&c, t);
                continue;
            }
            if (T->park_until <= core->now_mono) /* "none" now could strand tasks: wait on */
                T->park_until = core->now_mono + core->cfg.steal_park_ms;
            if (!next || T->park_until < next)
                next = T->park_until;
        }
    }
    job->steal_park_at = next;
}

void tide__tasks_rank_gone(tide_core_t *core, tide_job_t *job, int32_t r, bool orphan)
{
    tide_task_pools_t *pools = job->tasks;

    if (!pools || r < 0 || r >= pools->n_slots)
        return;
    for (int32_t i = 0; i < pools->n_pools; i++) {
        ctx_t c = {core, job, pools, pools->pools[i]};
        tp_rank_t *R = &c.p->ranks[r];
        if (R->gone)
            continue;
        R->gone = true;
        if (!R->declared && r < pools->n_ranks)
            c.p->ranks_declared++;
        if (orphan)
            orphan_all(c.p, r);
        if (R->steal_state == STEAL_PARKED) {
            unpark(&c, r);
        } else if (R->steal_state == STEAL_PENDING) {
            c.p->ranks[R->steal_victim].release_thief = -1; /* its answer's tasks become orphans */
            c.p->steals_pending--;
            R->steal_state = STEAL_NONE;
            R->steal_victim = -1;
        }
        if (R->release_id) {
            int32_t t = R->release_thief;
            R->release_id = 0;
            R->release_thief = -1;
            c.p->n_releases--;
            if (t >= 0)
                reserve_thief(&c, t);
        }
        R->est = 0;
        refresh(&c, r);
        retry_parked(&c);
    }
}

void tide__tasks_slot_reset(tide_core_t *core, tide_job_t *job, int32_t r)
{
    tide_task_pools_t *pools = job->tasks;

    if (!pools || r < pools->n_ranks || r >= pools->n_slots)
        return;
    tide__tasks_rank_gone(core, job, r, true); /* whatever its last occupant left behind */
    for (int32_t i = 0; i < pools->n_pools; i++) {
        tp_rank_t *R = &pools->pools[i]->ranks[r];
        free(R->given);
        memset(R, 0, sizeof(*R));
        tide_heap_node_init(&R->hn);
        tide_list_init(&R->park_node);
        R->release_thief = -1;
        R->steal_victim = -1;
    }
}

void tide__tasks_worker_down(tide_core_t *core, tide_worker_t *w)
{
    int32_t r = -1;
    tide_task_pools_t *pools = pools_of(w, &r);

    if (!pools)
        return;
    for (int32_t i = 0; i < pools->n_pools; i++) {
        ctx_t c = {core, pools->job, pools, pools->pools[i]};
        tp_rank_t *R = &c.p->ranks[r];
        refresh(&c, r);
        if (R->release_id && R->release_thief >= 0) {
            /* The release stays outstanding (re-sent when the worker is back; what it names then
             * becomes orphans), but its thief does not wait for it. */
            int32_t t = R->release_thief;
            R->release_thief = -1;
            reserve_thief(&c, t);
        }
    }
}

void tide__tasks_worker_up(tide_core_t *core, tide_worker_t *w)
{
    int32_t r = -1;
    tide_task_pools_t *pools = pools_of(w, &r);

    if (!pools)
        return;
    for (int32_t i = 0; i < pools->n_pools; i++) {
        ctx_t c = {core, pools->job, pools, pools->pools[i]};
        if (c.p->ranks[r].release_id)
            emit_release(&c, r); /* the same id: the worker answers it as before, or now */
        refresh(&c, r);
        retry_parked(&c);
    }
}

uint64_t tide__tasks_stolen_from(const tide_job_t *job, int32_t rank)
{
    const tide_task_pools_t *pools = job->tasks;

    return pools && rank >= 0 && rank < pools->n_slots ? pools->stolen_total[rank] : 0;
}

bool tide__tasks_steal_window(tide_job_t *job, uint64_t *requests, int32_t *rank, uint64_t *count)
{
    tide_task_pools_t *pools = job->tasks;

    *requests = 0;
    *rank = -1;
    *count = 0;
    if (!pools)
        return false;
    *requests = job->steal_requests - pools->requests_reported;
    pools->requests_reported = job->steal_requests;
    for (int32_t r = 0; r < pools->n_slots; r++) {
        if (pools->stolen_recent[r] > *count) {
            *count = pools->stolen_recent[r];
            *rank = r;
        }
        pools->stolen_recent[r] = 0;
    }
    return true;
}

/* --- queries --- */

int tide_core_task_pool(const tide_core_t *core, const tide_job_t *job, tide_task_kind_t kind,
                        int64_t step, tide_task_pool_info_t *out)
{
    const tp_pool_t *p = pool_find(job->tasks, kind, step);

    (void)core;
    if (!p)
        return -ENOENT;
    out->total = p->total;
    out->declared = p->declared;
    out->committed = p->committed;
    out->queued = p->held;
    out->in_flight = 0; /* answers move tasks straight to their thief (or the orphans) */
    out->orphaned = p->orphaned;
    out->steals_pending = p->steals_pending;
    out->steals_parked = p->steals_parked;
    return 0;
}

int32_t tide_core_task_holder(const tide_core_t *core, const tide_job_t *job, tide_task_kind_t kind,
                              int64_t step, uint64_t id)
{
    const tp_pool_t *p = pool_find(job->tasks, kind, step);
    const slot_t *s = p ? slot_find(p, id) : NULL;

    (void)core;
    if (!s)
        return -4;
    switch (s->state) {
    case SLOT_HELD:
        return s->holder;
    case SLOT_COMMITTED:
        return -1;
    case SLOT_ORPHAN:
        return -3;
    default:
        return -4;
    }
}

void tide_core_task_pools_each(const tide_core_t *core, const tide_job_t *job,
                               void (*fn)(void *ud, tide_task_kind_t kind, int64_t step), void *ud)
{
    const tide_task_pools_t *pools = job->tasks;

    (void)core;
    if (!pools)
        return;
    for (int32_t i = 0; i < pools->n_pools; i++)
        fn(ud, pools->pools[i]->kind, pools->pools[i]->step);
}

const char *tide_task_kind_name(tide_task_kind_t k)
{
    switch (k) {
    case TIDE_TASK_MEMBER:
        return "member";
    case TIDE_TASK_DETACHED:
        return "detached";
    }
    return "unknown";
}

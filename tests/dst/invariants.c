/* The harness's invariants (see invariants.h). It reads the core's internals (core_private.h) only to
 * find its queues and bindings; what a placement may use is recomputed here from the workers' labels as
 * the world knows them, so a core that drifts from its own rules is caught. */
#include "invariants.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core_private.h"
#include "xmalloc.h"

#define DST_CHECK_EVERY_MS 250

static void check_job_pools(dst_t *d, const char *job_id);
static void check_steal_liveness(dst_t *d, bool final);
static void check_burst(dst_t *d);
static void check_one_job(dst_t *d, const agent_t *a);
static void check_recovery_event(dst_t *d, const shell_event_t *ev);

/* What the checker knows of one job number. */
typedef struct cjob {
    char id[DST_ID_MAX];
    bool acked, cancel_acked;
    int committed_state; /* 0: no committed record */
    bool committed_deleted;
    int64_t committed_durable, committed_last;
    /* the live core (reset at each restart) */
    int live_final;
    bool live_deleted;
    int64_t live_durable, live_last;
    int64_t fit_since; /* fits free capacity nobody blocks since then; -1: no */
    bool fit_seen;
    int64_t lent_fit_since; /* fits only with workers lent to a burst (not taken back yet) since; -1: no */
    bool lent_fit_seen;
    int64_t preempting_since; /* job.preempting seen (live core); -1: none */
    int64_t copying_since;    /* its durable copy is COPYING since; -1: not */
    int64_t copying_step;     /* ... of this step */
    int64_t release_due_since; /* its held durable copy may be released since; -1: not */
    bool recovering;          /* queued again after a lost or hung rank (job.requeued): may take the hot spares */
    bool started_recovering;  /* it was, when the core call being checked placed it */
    int64_t over_since;       /* settled above its requested size since; -1: not */
    int64_t kb8_at;           /* decided_mono of a resize seen in the KB8 state; -1: none */
    bool kb10;                /* counted as a KB10 case already */
    int32_t hangs;            /* job.hung seen from the live core (the core's count is not in the store) */
    /* recovery (live core): the newest checkpoint the core acknowledged (job.checkpoint) and made durable
     * (job.checkpoint_durable), -1: none seen; a restart backoff: not placed before then (mono), 0: none */
    int64_t seen_ckpt, seen_durable;
    int64_t backoff_until;
    UT_hash_handle hh;
} cjob_t;

/* Hang detection: when the step of (job, generation, rank) last moved as the live core sees it (reports
 * it accepted for that rank slot; reset at each restart, as the core's). */
typedef struct cprog {
    char key[48]; /* "job/gen/rank" */
    int64_t last_step;
    int64_t adv_at;
    bool has_adv;
    UT_hash_handle hh;
} cprog_t;

/* Drain: a worker drained and not uncordoned by a client since; the one rank it may still be bound to
 * (job "" when none): what it ran when it was drained. */
typedef struct cdrain {
    char id[32];
    char job[DST_ID_MAX];
    int32_t gen, rank;
    UT_hash_handle hh;
} cdrain_t;

/* Where (job, generation, rank) was started. */
typedef struct claunch {
    char key[48];
    char worker[32];
    UT_hash_handle hh;
} claunch_t;

/* The first answer the live core gave to a steal id, which every replay must repeat. */
typedef struct cgive {
    char key[80]; /* "job/gen/rank/kind/step/steal_id" */
    uint64_t *ids;
    size_t n;
    UT_hash_handle hh;
} cgive_t;

struct checker {
    cjob_t *jobs;
    claunch_t *launches;
    cgive_t *gives;
    char (*dead)[32]; /* workers declared dead in the open turn */
    size_t n_dead, cap_dead;
    char (*touched)[DST_ID_MAX]; /* jobs named by the open turn's events */
    size_t n_touched, cap_touched;
    int64_t unreturned_since[W_MAX_AGENTS]; /* a lent process there ended and was reported, its worker is
                                               still bound (since then; -1: not so) */
    cprog_t *progs;
    cdrain_t *drained;
};

static void progs_clear(checker_t *c)
{
    cprog_t *p, *pt;

    HASH_ITER(hh, c->progs, p, pt) {
        HASH_DEL(c->progs, p);
        free(p);
    }
}

static void gives_clear(checker_t *c)
{
    cgive_t *g, *gt;

    HASH_ITER(hh, c->gives, g, gt) {
        HASH_DEL(c->gives, g);
        free(g->ids);
        free(g);
    }
}

checker_t *chk_new(void)
{
    checker_t *c = tide_xcalloc(1, sizeof(checker_t));

    for (int i = 0; i < W_MAX_AGENTS; i++)
        c->unreturned_since[i] = -1;
    return c;
}

void chk_free(checker_t *c)
{
    cjob_t *j, *jt;
    claunch_t *l, *lt;

    if (!c)
        return;
    HASH_ITER(hh, c->jobs, j, jt) {
        HASH_DEL(c->jobs, j);
        free(j);
    }
    HASH_ITER(hh, c->launches, l, lt) {
        HASH_DEL(c->launches, l);
        free(l);
    }
    gives_clear(c);
    progs_clear(c);
    {
        cdrain_t *e, *et;
        HASH_ITER(hh, c->drained, e, et) {
            HASH_DEL(c->drained, e);
            free(e);
        }
    }
    free(c->dead);
    free(c->touched);
    free(c);
}

static cjob_t *cjob(checker_t *c, const char *id, bool create)
{
    cjob_t *j;

    HASH_FIND_STR(c->jobs, id, j);
    if (j || !create)
        return j;
    j = tide_xcalloc(1, sizeof(*j));
    snprintf(j->id, sizeof(j->id), "%s", id);
    j->committed_durable = j->committed_last = -1;
    j->live_durable = j->live_last = -1;
    j->fit_since = -1;
    j->lent_fit_since = -1;
    j->preempting_since = j->copying_since = j->release_due_since = -1;
    j->over_since = j->kb8_at = -1;
    j->seen_ckpt = j->seen_durable = -1;
    HASH_ADD_STR(c->jobs, id, j);
    return j;
}

static bool is_final(int st)
{
    return st == TIDE_JOB_SUCCEEDED || st == TIDE_JOB_FAILED || st == TIDE_JOB_CANCELLED;
}

/* --- the placement model: shapes and domains from the world's labels --- */

typedef struct mshape {
    const char *pool, *device;
    uint64_t mem;
    int32_t dedicated;
    int usable, free;
    bool blocked, blocked_reserve; /* held for a pending job (that waits only for the reserve) */
} mshape_t;

typedef struct mworker {
    const agent_t *a;
    int shape;
    bool usable, free;
} mworker_t;

typedef struct model {
    mworker_t w[W_MAX_AGENTS];
    int n;
    mshape_t s[W_MAX_AGENTS];
    int n_shapes;
    int n_usable, n_free;
    int32_t reserve, spares, low_busy;
} model_t;

static const char *pool_of(const agent_t *a)
{
    return a->pool[0] ? a->pool : TIDE_POOL_DEFAULT;
}

static int32_t dedication(const tide_core_t *core, const char *pool)
{
    const tide_core_config_t *cfg = tide_core_config(core);

    for (int32_t i = 0; i < cfg->n_pools; i++)
        if (strcmp(cfg->pools[i].name, pool) == 0)
            return cfg->pools[i].dedicated;
    return -1;
}

/* w is bound to a lent (burst) slot of a running job's current generation and not being taken back. */
static bool lent_active(const tide_worker_t *w)
{
    const tide_job_t *j = w->job;

    return j && j->state == TIDE_JOB_RUNNING && w->generation == j->generation && w->rank >= j->n_ranks &&
           w->rank < j->n_ranks + j->max_lent && j->ranks[w->rank].worker == w && !j->ranks[w->rank].lent_stopping;
}

static void model_build_ex(dst_t *d, model_t *m, bool lent_free);

static void model_build(dst_t *d, model_t *m)
{
    model_build_ex(d, m, true);
}

/* The cluster as the queue sees it; lent_free: workers lent for a burst and not being taken back count as
 * free (the core takes them back at once for a job that waits for their shape). */
static void model_build_ex(dst_t *d, model_t *m, bool lent_free)
{
    tide_core_t *core = d->shell->core;
    tide_worker_t *w, *tmp;

    tide_reserve_t r;

    tide_core_reserve(core, &r);
    memset(m, 0, sizeof(*m));
    m->reserve = r.gpus;
    m->spares = r.spares;
    m->low_busy = core->low_busy;
    HASH_ITER(hh, core->workers, w, tmp) {
        const agent_t *a = world_agent_by_id(d->world, w->id);
        mworker_t *x;
        int s;
        bool lent;
        if (!a || !w->dom || m->n >= W_MAX_AGENTS)
            continue; /* a placeholder that never registered */
        x = &m->w[m->n++];
        x->a = a;
        x->usable = w->connected && !w->cordoned &&
                    (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY);
        /* a worker lent to a job for a burst (and not being taken back yet) is free for the queue: the core
         * takes it back at once for a job that waits for its shape (docs/elastic.md, "Burst") */
        lent = lent_free && lent_active(w);
        x->free = w->connected && (w->state == TIDE_WORKER_READY || lent) && !w->cordoned && (!w->job || lent) &&
                  w->n_stale == 0;
        if (lent && w->low)
            m->low_busy--; /* counted free here, not LOW-held */
        for (s = 0; s < m->n_shapes; s++)
            if (strcmp(m->s[s].pool, pool_of(a)) == 0 && strcmp(m->s[s].device, a->device) == 0 &&
                m->s[s].mem == a->mem)
                break;
        if (s == m->n_shapes) {
            m->s[s] = (mshape_t){.pool = pool_of(a), .device = a->device, .mem = a->mem,
                                 .dedicated = dedication(core, pool_of(a))};
            m->n_shapes++;
        }
        x->shape = s;
        m->s[s].usable += x->usable;
        m->s[s].free += x->free;
        m->n_usable += x->usable;
        m->n_free += x->free;
    }
}

static bool model_matches(const mshape_t *s, const tide_job_spec_t *sp)
{
    if (sp->pool && sp->pool[0] && strcmp(sp->pool, s->pool) != 0)
        return false;
    if (s->dedicated >= 0 && s->dedicated != (int32_t)sp->priority)
        return false;
    if (sp->memory_per_rank && s->mem < sp->memory_per_rank)
        return false;
    if (sp->device && sp->device[0] && !strcasestr(s->device, sp->device))
        return false;
    return true;
}

/* The largest count of usable (or free) workers of shape s in one domain of level. */
static int model_max(const model_t *m, int s, tide_level_t level, bool free)
{
    int count[W_MAX_AGENTS] = {0}, best = 0;

    if (level == TIDE_LVL_SHAPE)
        return free ? m->s[s].free : m->s[s].usable;
    for (int i = 0; i < m->n; i++) {
        int dom = m->w[i].a->dom[level];
        if (m->w[i].shape != s || !(free ? m->w[i].free : m->w[i].usable))
            continue;
        if (++count[dom] > best)
            best = count[dom];
    }
    return best;
}

static tide_level_t level_of(const tide_job_spec_t *sp)
{
    switch (sp->topology) {
    case TIDE_TOPO_NODE:
        return TIDE_LVL_NODE;
    case TIDE_TOPO_RACK:
        return TIDE_LVL_RACK;
    case TIDE_TOPO_SWITCH:
        return TIDE_LVL_SWITCH;
    default:
        return TIDE_LVL_SHAPE;
    }
}

/* The reserve a job must leave alone (docs/policies.md, "Headroom"): none for its queue class LOW, the
 * burst part for a job queued again after a lost rank (the hot spares are there for it), all of it
 * otherwise. */
static int32_t model_reserve_for(dst_t *d, const model_t *m, const tide_job_t *job)
{
    const cjob_t *cj = cjob(d->chk, job->id, false);

    if (job->eff_priority == TIDE_PRIO_LOW)
        return 0;
    return cj && cj->recovering ? m->reserve - m->spares : m->reserve;
}

/* Could the job run on the usable workers were they all free (the core's tide__could_fit)? On the idle
 * cluster no job runs, so no burst share is held: only the hot spares are kept back, and not from LOW
 * work or a job recovering from a lost rank. */
static bool model_could_fit(dst_t *d, const model_t *m, const tide_job_t *job)
{
    const tide_job_spec_t *sp = &job->spec;
    const cjob_t *cj = cjob(d->chk, job->id, false);
    int32_t reserve = job->eff_priority == TIDE_PRIO_LOW || (cj && cj->recovering) ? 0 : m->spares;

    if (sp->min_workers > m->n_usable - reserve)
        return false;
    for (int s = 0; s < m->n_shapes; s++)
        if (m->s[s].usable >= sp->min_workers && model_matches(&m->s[s], sp) &&
            model_max(m, s, level_of(sp), false) >= sp->min_workers)
            return true;
    return false;
}

/* The most free workers a job may take: free + LOW-held must stay at or above its reserve. */
static int32_t model_limit(dst_t *d, const model_t *m, const tide_job_t *job)
{
    int32_t slack, reserve = model_reserve_for(d, m, job);

    if (reserve <= 0)
        return m->n_free;
    slack = m->n_free + m->low_busy - reserve;
    return slack < m->n_free ? (slack > 0 ? slack : 0) : m->n_free;
}

/* The model as the job sees it: its excluded workers (replaced stragglers, resize.c; the core takes
 * them out of the free index for its placement) are not free for it; usable_too: not usable either
 * (as if they were idle, could it ever run?). */
static void model_without(const model_t *m, const tide_job_t *job, bool usable_too, model_t *out)
{
    *out = *m;
    for (int i = 0; i < out->n; i++) {
        mworker_t *x = &out->w[i];
        bool ex = false;
        for (int32_t k = 0; k < job->n_exclude && !ex; k++)
            ex = strcmp(job->exclude[k], x->a->id) == 0;
        if (!ex)
            continue;
        if (x->usable && usable_too) {
            out->s[x->shape].usable--;
            out->n_usable--;
            x->usable = false;
        }
        if (x->free) {
            out->s[x->shape].free--;
            out->n_free--;
            x->free = false;
        }
    }
}

/* Does the job fit at most limit free workers of shape s now? */
static bool model_fits(const model_t *m, int s, const tide_job_spec_t *sp, int32_t limit)
{
    int32_t k = model_max(m, s, level_of(sp), true);

    if (k > sp->max_workers)
        k = sp->max_workers;
    if (k > limit)
        k = limit;
    return k >= sp->min_workers && k > 0;
}

/* --- hooks --- */

void chk_on_spawn(dst_t *d, agent_t *a, const char *job, int32_t gen, int32_t rank, bool orphaned, bool burst)
{
    checker_t *c = d->chk;
    claunch_t *l = NULL;
    char key[48];

    for (int i = 0; i < W_ENTRIES; i++) {
        const wentry_t *e = &a->e[i];
        if (e->used && e->running)
            dst_fail(d, "%s would run job %s g%d r%d while it runs job %s g%d r%d: a GPU runs two ranks",
                     a->id, job, gen, rank, e->job, e->gen, e->rank);
    }
    if (burst && !orphaned) {
        /* a lent slot is used again once its process ended, maybe elsewhere: never two processes at once
         * (one the scheduler wrote off aside: an older one, or this one, launched before its worker was
         * declared dead and read by its agent after; seed 1061809) */
        for (int i = 0; i < d->world->n; i++) {
            const agent_t *b = &d->world->a[i];
            for (int k = 0; k < W_ENTRIES; k++) {
                const wentry_t *e = &b->e[k];
                if (e->used && e->running && e->gen == gen && e->rank == rank && !e->orphaned &&
                    strcmp(e->job, job) == 0)
                    dst_fail(d, "job %s generation %d burst slot %d starts on %s while its process before still runs "
                                "on %s, which the scheduler never declared dead",
                             job, gen, rank, a->id, b->id);
            }
        }
    } else {
        snprintf(key, sizeof(key), "%s/%d/%d", job, gen, rank);
        HASH_FIND_STR(c->launches, key, l);
        if (l && strcmp(l->worker, a->id) != 0)
            dst_fail(d, "job %s generation %d rank %d started on %s and again on %s", job, gen, rank, l->worker,
                     a->id);
    }
    if (!burst && !l) {
        l = tide_xcalloc(1, sizeof(*l));
        snprintf(l->key, sizeof(l->key), "%s", key);
        snprintf(l->worker, sizeof(l->worker), "%s", a->id);
        HASH_ADD_STR(c->launches, key, l);
    }
    /* Never two generations at once, except where the scheduler wrote the old ranks off. */
    for (int i = 0; i < d->world->n && !orphaned; i++) {
        const agent_t *b = &d->world->a[i];
        for (int k = 0; k < W_ENTRIES; k++) {
            const wentry_t *e = &b->e[k];
            if (e->used && e->running && e->gen != gen && strcmp(e->job, job) == 0 && !e->orphaned)
                dst_fail(d, "job %s generation %d starts (rank %d on %s) while rank %d of generation %d still "
                            "runs on %s, which the scheduler never declared dead: two generations at once",
                         job, gen, rank, a->id, e->rank, e->gen, b->id);
        }
    }
}

/* The reserve a placement must leave alone: none for LOW-class work, the burst part for a job queued
 * again after a lost rank (the hot spares are there for it), all of it otherwise. */
static int32_t reserve_for(const tide_reserve_t *r, const tide_job_t *job, bool recovering)
{
    if (job->run_priority == TIDE_PRIO_LOW)
        return 0;
    return recovering ? r->gpus - r->spares : r->gpus;
}

/* Non-LOW work never eats into the headroom reserve at placement time: right after it is placed,
 * free + LOW-held >= its reserve. Only the state after the call is visible; placements later in the
 * same call only lower free + LOW-held (LOW ones leave it as is), so adding theirs back bounds the state
 * right after each placement from above. Releases of workers that were not LOW-held only make that
 * bound larger; LOW-held workers released while not schedulable lower it, so calls that preempt or
 * requeue are skipped. The computed reserve must not move during the call. */
static void check_reserve(dst_t *d, const shell_event_t *ev, size_t n, int32_t rb, int32_t ub)
{
    tide_core_t *core = d->shell->core;
    bool fixed = tide_core_config(core)->reserve_gpus >= 0;
    tide_reserve_t r;
    struct {
        const tide_job_t *job;
        int32_t n;
        bool counted; /* its workers do not count as LOW-held */
        bool recovering;
    } pl[64];
    size_t np = 0;

    tide_core_reserve(core, &r);
    for (size_t i = 0; i < n && np < 64; i++) {
        const tide_job_t *job;
        cjob_t *cj;
        int gen, cnt;
        if (strcmp(ev[i].type, "job.preempting") == 0 || strcmp(ev[i].type, "job.preempted") == 0 ||
            strcmp(ev[i].type, "job.requeued") == 0 || strcmp(ev[i].type, "job.rolled_back") == 0 ||
            strcmp(ev[i].type, "job.resize_stopping") == 0)
            return;
        if (strcmp(ev[i].type, "job.started") != 0)
            continue;
        job = tide_core_job_find(core, ev[i].job);
        if (!job || sscanf(ev[i].text, "job %*s generation %d placed on %d", &gen, &cnt) != 2)
            continue;
        cj = cjob(d->chk, job->id, false);
        pl[np].job = job;
        pl[np].n = cnt;
        pl[np].counted = !(job->state == TIDE_JOB_RUNNING && job->generation == gen &&
                           job->run_priority == TIDE_PRIO_LOW);
        pl[np].recovering = cj && cj->started_recovering;
        if (!fixed && job->run_priority >= TIDE_PRIO_HIGH)
            return; /* its burst share moved the computed reserve during the call */
        np++;
    }
    if (np == 0 || (!fixed && (r.gpus != rb || core->n_usable != ub)))
        return;
    for (size_t i = 0; i < np; i++) {
        int32_t bound = core->n_free + core->low_busy, reserve = reserve_for(&r, pl[i].job, pl[i].recovering);
        if (reserve <= 0)
            continue;
        for (size_t k = i + 1; k < np; k++)
            bound += pl[k].counted ? pl[k].n : 0;
        d->stats->reserve_checks++;
        if (bound < reserve) {
            char evs[512] = "";
            size_t o = 0;
            for (size_t k = 0; k < n && o < sizeof(evs) - 40; k++)
                o += (size_t)snprintf(evs + o, sizeof(evs) - o, " %s(%s)", ev[k].type, ev[k].job);
            dst_fail(d, "job %s (%s) was placed into the headroom reserve: afterwards free + LOW-held <= %d < "
                        "reserve %d%s (the call's events:%s)",
                     pl[i].job->id, tide_prio_name(pl[i].job->run_priority), bound, reserve,
                     pl[i].recovering ? " (spares excluded: it recovers from a lost rank)" : "", evs);
        }
    }
}

/* Lending never takes the hot spares (docs/elastic.md, "Burst"): after a call that lent workers (and
 * placed no job: a job recovering from a lost rank may take the spares), at least the spares the reserve
 * holds are free (the computed spares, up to the reserve's cap of half the usable GPUs). */
static void check_lending(dst_t *d, const shell_event_t *ev, size_t n)
{
    tide_core_t *core = d->shell->core;
    const shell_event_t *lent = NULL;
    const tide_job_t *job;
    tide_reserve_t r;

    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].type, "job.started") == 0 || strcmp(ev[i].type, "job.resized") == 0)
            return;
        if (strcmp(ev[i].type, "job.burst_lent") == 0 && !strstr(ev[i].text, "by a resize"))
            lent = &ev[i];
    }
    if (!lent || !d->shell->up)
        return;
    tide_core_reserve(core, &r);
    job = tide_core_job_find(core, lent->job);
    if (core->n_free < (r.spares < r.gpus ? r.spares : r.gpus))
        dst_fail(d, "burst: workers were lent into the hot spares: %d free after the call, %d spares (reserve %d; job "
                    "%s, %s: %s)",
                 core->n_free, r.spares, r.gpus, lent->job, job ? tide_prio_name(job->run_priority) : "?", lent->text);
}

static bool has_event(const shell_event_t *ev, size_t n, const char *job, const char *type)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ev[i].type, type) == 0 && strcmp(ev[i].job, job) == 0)
            return true;
    return false;
}

/* No backfill past a higher class: when a job is placed, no job of a higher class that was already
 * waiting, could run on the idle cluster and may use the same shape (one that could hold it) still
 * waits: the core holds the shapes of a job it cannot place for the rest of the pass. */
static void check_inversion(dst_t *d, const shell_event_t *ev, size_t n, int32_t reserve_before)
{
    tide_core_t *core = d->shell->core;
    model_t m;
    bool built = false;

    for (size_t i = 0; i < n; i++) {
        const tide_job_t *p;
        const agent_t *a;
        int ps = -1;
        if (strcmp(ev[i].type, "job.started") != 0 || !(p = tide_core_job_find(core, ev[i].job)) ||
            p->state != TIDE_JOB_RUNNING || p->n_ranks == 0 ||
            !(a = world_agent_by_id(d->world, p->ranks[0].worker_id)))
            continue;
        if (!built) {
            model_build(d, &m);
            built = true;
        }
        for (int s = 0; s < m.n_shapes; s++)
            if (strcmp(m.s[s].pool, pool_of(a)) == 0 && strcmp(m.s[s].device, a->device) == 0 &&
                m.s[s].mem == a->mem)
                ps = s;
        if (ps < 0)
            continue;
        for (int c = TIDE_PRIO_COUNT - 1; c > (int)p->run_priority; c--) {
            tide_list_t *pos;
            tide_list_for_each(pos, &core->queues[c]) {
                const tide_job_t *j = tide_list_entry(pos, tide_job_t, queue_node);
                char why[200];
                if (!model_matches(&m.s[ps], &j->spec) ||
                    model_max(&m, ps, level_of(&j->spec), false) < j->spec.min_workers ||
                    !model_could_fit(d, &m, j) || has_event(ev, n, j->id, "job.preempted") ||
                    has_event(ev, n, j->id, "job.requeued") || has_event(ev, n, j->id, "job.rolled_back") ||
                    has_event(ev, n, j->id, "job.resize_stopping"))
                    continue;
                /* LOW work may take the reserve's LOW-free part of a shape held for a job that waits only
                 * for the reserve (that job's share of the free GPUs is untouched). Which job held the shape
                 * in the pass that placed it is not visible from here (a call may run several passes), so
                 * a LOW placement is judged only when there is no reserve. */
                if (p->run_priority == TIDE_PRIO_LOW && (m.reserve > 0 || reserve_before > 0))
                    continue;
                dst_fail(d, "job %s (%s) was placed on %s while job %s (%s), waiting for the same kind of GPU, "
                            "still waits: a lower class went first (free %d, LOW-held %d, reserve %d; the core "
                            "says: %s)",
                         p->id, tide_prio_name(p->run_priority), a->id, j->id, tide_prio_name(j->eff_priority),
                         m.n_free, m.low_busy, m.reserve, tide_core_job_reason(core, j, why, sizeof(why)));
            }
        }
    }
}

/* The checkpoint gate holds: a durable copy is released only while the job's MFU is under its threshold
 * or its newest durable copy is older than its deadline (docs/policies.md, "Checkpoint gate"). */
static void check_gate(dst_t *d, const shell_event_t *ev, size_t n)
{
    tide_core_t *core = d->shell->core;
    const tide_core_config_t *cfg = tide_core_config(core);

    for (size_t i = 0; i < n; i++) {
        const tide_job_t *job;
        double mfu, thr;
        int64_t dl, since;
        if (strcmp(ev[i].type, "job.checkpoint_flushing") != 0 || !(job = tide_core_job_find(core, ev[i].job)))
            continue;
        mfu = tide_core_job_mfu(core, job);
        thr = job->spec.ckpt_mfu_threshold > 0 ? job->spec.ckpt_mfu_threshold : cfg->ckpt_mfu_threshold;
        dl = job->spec.ckpt_deadline_s > 0 ? job->spec.ckpt_deadline_s * 1000 : cfg->ckpt_deadline_ms;
        since = job->durable_ckpt.step >= 0 ? job->durable_ckpt.time_ms : job->start_ms;
        if (mfu >= thr && dst_wall(d) - since < dl)
            dst_fail(d, "job %s: a durable copy was released at MFU %.2f >= %.2f with the newest durable copy only "
                        "%lld ms old (deadline %lld ms)",
                     job->id, mfu, thr, (long long)(dst_wall(d) - since), (long long)dl);
    }
}

/* --- hang detection (docs/fault-tolerance.md, "Hangs") --- */

static cprog_t *prog_find(checker_t *c, const char *job, int32_t gen, int32_t rank, bool create)
{
    char key[48];
    cprog_t *p;

    snprintf(key, sizeof(key), "%s/%d/%d", job, gen, rank);
    HASH_FIND_STR(c->progs, key, p);
    if (p || !create)
        return p;
    p = tide_xcalloc(1, sizeof(*p));
    snprintf(p->key, sizeof(p->key), "%s", key);
    p->last_step = -1;
    HASH_ADD_STR(c->progs, key, p);
    return p;
}

void chk_on_progress(dst_t *d, const tide_worker_t *w, const char *job, int32_t gen, int32_t rank,
                     const tide_trainer_progress_t *p)
{
    const tide_job_t *cj = w->job;
    cprog_t *e;

    /* only a report for the rank slot the worker runs now counts (anything else the core ignores) */
    if (!cj || cj->generation != gen || w->generation != gen || w->rank != rank || rank < 0 ||
        rank >= cj->n_ranks || strcmp(cj->id, job) != 0)
        return;
    e = prog_find(d->chk, job, gen, rank, true);
    if (p->sdk && p->step >= 0 && (!e->has_adv || p->step != e->last_step)) {
        e->has_adv = true;
        e->adv_at = d->now;
    }
    e->last_step = p->step;
}

/* The hang limit of the job now: max(hang_factor x the median step time, hang_min_ms). */
static int64_t hang_limit(dst_t *d, const tide_job_t *job)
{
    const tide_core_config_t *cfg = &d->shell->cfg;
    double by_steps =
        cfg->hang_factor * tide__progress_median(d->shell->core, job, offsetof(tide_trainer_progress_t, step_seconds)) *
        1e3;

    return by_steps > (double)cfg->hang_min_ms && by_steps < 1e15 ? (int64_t)by_steps : cfg->hang_min_ms;
}

/* job.hung: the rank it names had made no progress the core could see for longer than the limit, its
 * generation ends in the same call (restarted within max_restarts in a row, or the job fails), and a job
 * fails at a hang only when its restarts in a row reached max_restarts. */
static void check_hung(dst_t *d, const shell_event_t *ev)
{
    const tide_core_config_t *cfg = &d->shell->cfg;
    const tide_job_t *job = tide_core_job_find(d->shell->core, ev->job);
    int32_t gen = -1, rank = -1;
    cprog_t *p;
    cjob_t *cj = cjob(d->chk, ev->job, true);
    trainer_t *tr;

    d->stats->ev_hung++;
    if (sscanf(ev->text, "job %*s generation %d: rank %d", &gen, &rank) != 2)
        dst_fail(d, "job.hung without generation and rank: %s", ev->text);
    p = prog_find(d->chk, ev->job, gen, rank, false);
    if (cfg->hang_min_ms <= 0)
        dst_fail(d, "job.hung with hang detection off: %s", ev->text);
    if (!p || !p->has_adv)
        dst_fail(d, "job %s generation %d rank %d declared hung, but it never reported a step to this scheduler: %s",
                 ev->job, gen, rank, ev->text);
    if (d->now - p->adv_at <= cfg->hang_min_ms)
        dst_fail(d, "job %s generation %d rank %d declared hung, but its step moved %lld ms ago (limit at least "
                    "%lld ms): %s",
                 ev->job, gen, rank, (long long)(d->now - p->adv_at), (long long)cfg->hang_min_ms, ev->text);
    if (job && job->state == TIDE_JOB_RUNNING && job->generation == gen)
        dst_fail(d, "job %s generation %d declared hung but still runs that generation", ev->job, gen);
    cj->hangs++;
    if (job) {
        int32_t max = job->spec.max_restarts > 0 ? job->spec.max_restarts : cfg->max_restarts;
        if (job->state == TIDE_JOB_FAILED) {
            d->stats->hung_failed++;
            if (job->restarts_in_row < max && job->spec.restart_policy != TIDE_RESTART_NEVER)
                dst_fail(d, "job %s failed at a hang after %d restart(s) in a row (max_restarts %d)", ev->job,
                         job->restarts_in_row, max);
        } else if (job->restarts_in_row < 1 || job->restarts_in_row > max) {
            dst_fail(d, "job %s restarted after a hang with %d restart(s) in a row (max_restarts %d)", ev->job,
                     job->restarts_in_row, max);
        }
    }
    if ((tr = world_trainer(d->world, ev->job, gen)) && tr->frz_at >= 0 && d->now >= tr->frz_at) {
        d->stats->hung_frozen++;
        if (!tr->frz_hung)
            d->stats->freezes_hung++;
        tr->frz_hung = true;
    }
}

/* Every RUNNING rank of a RUNNING job whose step has not moved (as the core saw it) for longer than the
 * limit plus one check period has been declared hung by now. */
static void check_hangs(dst_t *d)
{
    const tide_core_config_t *cfg = &d->shell->cfg;
    int64_t period = cfg->hang_min_ms / 4 > 5000 ? 5000 : cfg->hang_min_ms / 4 > 0 ? cfg->hang_min_ms / 4 : 1;
    tide_job_t *job = NULL;

    if (cfg->hang_min_ms <= 0)
        return;
    while ((job = tide_core_job_next(d->shell->core, job))) {
        int64_t lim;
        if (job->state != TIDE_JOB_RUNNING)
            continue;
        lim = hang_limit(d, job);
        d->stats->hang_checks++;
        for (int32_t r = 0; r < job->n_ranks; r++) {
            const tide_job_rank_t *slot = &job->ranks[r];
            cprog_t *p;
            if (slot->state != TIDE_RANK_RUNNING || !slot->worker || slot->progress.phase == 5)
                continue;
            p = prog_find(d->chk, job->id, job->generation, r, false);
            if (p && p->has_adv && d->now - p->adv_at > lim + period + 1)
                dst_fail(d, "job %s generation %d rank %d (on %s) has made no progress for %lld ms (step %lld; "
                            "limit %lld ms, checked every %lld ms) and was not declared hung",
                         job->id, job->generation, r, slot->worker_id, (long long)(d->now - p->adv_at),
                         (long long)p->last_step, (long long)lim, (long long)period);
        }
    }
}

/* --- drain (docs/elastic.md, "Drain") --- */

void chk_on_drain(dst_t *d, const char *id, int rc, const chk_drain_t *before, size_t n_acts)
{
    checker_t *c = d->chk;
    tide_core_t *core = d->shell->core;
    tide_worker_t *w;
    const tide_job_t *job;
    cdrain_t *e;

    d->stats->drains++;
    if (!before->exists) {
        if (rc != -ENOENT)
            dst_fail(d, "DrainWorker of unknown worker %s returned %d, not -ENOENT", id, rc);
        if (n_acts)
            dst_fail(d, "DrainWorker of unknown worker %s emitted %zu action(s)", id, n_acts);
        d->stats->drains_enoent++;
        return;
    }
    if (rc != 0)
        dst_fail(d, "DrainWorker of worker %s returned %d", id, rc);
    d->stats->drains_acked++;
    if (!(w = tide_core_worker_find(core, id)) || !w->cordoned)
        dst_fail(d, "worker %s drained but not cordoned", id);
    if (w->job && (!before->job[0] || strcmp(w->job->id, before->job) != 0 || w->generation != before->gen ||
                   w->rank != before->rank))
        dst_fail(d, "the drain of worker %s bound it to job %s generation %d rank %d (before: %s g%d r%d)", id,
                 w->job->id, w->generation, w->rank, before->job[0] ? before->job : "free", before->gen,
                 before->rank);
    if (before->current) {
        job = tide_core_job_find(core, before->job);
        if (job && job->state == TIDE_JOB_RUNNING && job->generation == before->gen &&
            !tide__resize_in_progress(job) && !job->preempted_by)
            dst_fail(d, "worker %s drained while running rank %d of job %s generation %d: the job goes on in that "
                        "generation with no change under way",
                     id, before->rank, before->job, before->gen);
        if (job && job->state == TIDE_JOB_RUNNING && job->n_ranks < job->spec.min_workers)
            dst_fail(d, "the drain of %s left job %s running with %d ranks (min %d)", id, job->id, job->n_ranks,
                     job->spec.min_workers);
        d->stats->drains_moved++;
    } else if (!before->job[0]) {
        d->stats->drains_idle++;
    }
    HASH_FIND_STR(c->drained, id, e);
    if (!e) {
        e = tide_xcalloc(1, sizeof(*e));
        snprintf(e->id, sizeof(e->id), "%s", id);
        HASH_ADD_STR(c->drained, id, e);
        /* what it runs now: the only rank it may be bound to until it is uncordoned (a drain again keeps
         * the first: nothing new was placed there since) */
        snprintf(e->job, sizeof(e->job), "%s", w->job ? w->job->id : "");
        e->gen = w->job ? w->generation : -1;
        e->rank = w->job ? w->rank : -1;
    }
}

void chk_on_uncordon(dst_t *d, const char *id)
{
    cdrain_t *e;

    HASH_FIND_STR(d->chk->drained, id, e);
    if (e) {
        HASH_DEL(d->chk->drained, e);
        free(e);
    }
}

/* A drained worker stays cordoned until a client uncordons it, and is bound to no rank but the one it
 * ran when it was drained: nothing of a generation placed after the drain (nor a lent slot) runs there. */
static void check_drained(dst_t *d)
{
    cdrain_t *e, *et;

    HASH_ITER(hh, d->chk->drained, e, et) {
        tide_worker_t *w = tide_core_worker_find(d->shell->core, e->id);
        d->stats->drain_checks++;
        if (!w)
            continue;
        if (!w->cordoned)
            dst_fail(d, "drained worker %s is not cordoned any more, and no client uncordoned it", e->id);
        if (w->job && (!e->job[0] || strcmp(w->job->id, e->job) != 0 || w->generation != e->gen || w->rank != e->rank))
            dst_fail(d, "drained worker %s runs job %s generation %d rank %d, placed after the drain (it ran %s g%d "
                        "r%d then)",
                     e->id, w->job->id, w->generation, w->rank, e->job[0] ? e->job : "nothing", e->gen, e->rank);
    }
}

/* --- recovery (docs/fault-tolerance.md, "Restarts"; issue 8 part 7) --- */

static tide_restart_policy_t policy_of(const tide_job_t *job)
{
    return job->spec.restart_policy == TIDE_RESTART_DEFAULT ? TIDE_RESTART_ON_LOSS
                                                             : (tide_restart_policy_t)job->spec.restart_policy;
}

static int32_t max_restarts_of(dst_t *d, const tide_job_t *job)
{
    return job->spec.max_restarts > 0 ? job->spec.max_restarts : tide_core_config(d->shell->core)->max_restarts;
}

/* Whether the policy restarts a failure of this cause (history cause names). */
static bool policy_restarts(const tide_job_t *job, const char *cause)
{
    tide_restart_policy_t p = policy_of(job);

    if (p == TIDE_RESTART_NEVER)
        return false;
    return strcmp(cause, "rank_failed") != 0 || p == TIDE_RESTART_ON_FAILURE;
}

static bool failure_cause(const char *cause)
{
    return cause && (strcmp(cause, "worker_lost") == 0 || strcmp(cause, "hang") == 0 || strcmp(cause, "rank_failed") == 0 ||
                     strcmp(cause, "worker_left") == 0);
}

/* The documented wait before restart k in a row (1-based): none for the first, then the job's (or the
 * scheduler's) backoff, doubling, at most restart_backoff_max_ms (or the job's own backoff when that is
 * longer). An independent model of restart.c. */
static int64_t model_backoff(dst_t *d, const tide_job_t *job, int32_t k)
{
    const tide_core_config_t *cfg = tide_core_config(d->shell->core);
    int64_t base = job->spec.restart_backoff_ms > 0 ? job->spec.restart_backoff_ms : cfg->restart_backoff_ms, b;

    if (k <= 1 || base <= 0)
        return 0;
    b = base;
    for (int32_t i = 2; i < k; i++)
        b = b > INT64_MAX / 2 ? INT64_MAX : b * 2;
    {
        /* The cap: the scheduler's, or the job's own backoff when that is longer (honoured, never doubled). */
        int64_t cap = cfg->restart_backoff_max_ms > base ? cfg->restart_backoff_max_ms : base;
        return cfg->restart_backoff_max_ms > 0 && b > cap ? cap : b;
    }
}

static const char *last_strstr(const char *hay, const char *needle)
{
    const char *p = NULL, *q = hay;

    while ((q = strstr(q, needle))) {
        p = q;
        q++;
    }
    return p;
}

/* A generation started: it resumes from (the core's last_ckpt at start_generation, kept as the history
 * entry's resumed_step) at least the newest checkpoint the core acknowledged as complete, and the newest
 * durable copy, before that start (live events, or committed records across a restart); and it is not
 * placed during a restart backoff. */
static void check_started(dst_t *d, const shell_event_t *ev)
{
    const tide_job_t *job = tide_core_job_find(d->shell->core, ev->job);
    cjob_t *j = cjob(d->chk, ev->job, false);
    const char *g = strstr(ev->text, " generation ");
    const tide_generation_rec_t *rec = NULL;
    int32_t gen;
    int64_t known, dur;

    if (!job || !j || !g)
        return;
    gen = (int32_t)strtol(g + 12, NULL, 10);
    for (int32_t i = job->n_history - 1; i >= 0 && !rec; i--)
        if (job->history[i].number == gen)
            rec = &job->history[i];
    if (!rec)
        dst_fail(d, "job %s generation %d started but its history has no entry for it (%d entries, newest %d)",
                 job->id, gen, job->n_history, job->n_history ? job->history[job->n_history - 1].number : 0);
    d->stats->resume_checks++;
    d->stats->resumed_ckpt += rec->resumed_step >= 0;
    known = j->seen_ckpt > j->committed_last ? j->seen_ckpt : j->committed_last;
    known = known > j->live_last ? known : j->live_last;
    dur = j->seen_durable > j->committed_durable ? j->seen_durable : j->committed_durable;
    if (rec->resumed_step < known)
        dst_fail(d, "job %s generation %d resumes from step %lld, but the scheduler had acknowledged a complete "
                    "checkpoint of step %lld before it started: recovery from an older checkpoint",
                 job->id, gen, (long long)rec->resumed_step, (long long)known);
    if (rec->resumed_step < dur)
        dst_fail(d, "job %s generation %d resumes from step %lld, older than its durable copy of step %lld",
                 job->id, gen, (long long)rec->resumed_step, (long long)dur);
    if (j->backoff_until && d->now < j->backoff_until)
        dst_fail(d, "job %s generation %d placed %lld ms before its restart backoff ends", job->id, gen,
                 (long long)(j->backoff_until - d->now));
    j->backoff_until = 0;
}

/* A restart ("...; restart K of M in a row"): within the job's max, and waiting the documented backoff
 * (PENDING outside every queue until restart_at) when it is not the first in a row. */
static void check_restart(dst_t *d, const shell_event_t *ev)
{
    const tide_core_t *core = d->shell->core;
    const tide_job_t *job = tide_core_job_find(core, ev->job);
    cjob_t *j = cjob(d->chk, ev->job, false);
    const char *p = last_strstr(ev->text, "; restart ");
    int k = 0, m = 0;
    int64_t b;

    if (!p || sscanf(p, "; restart %d of %d in a row", &k, &m) != 2)
        return;
    if (!job || !j)
        dst_fail(d, "job %s restarted but is unknown", ev->job);
    d->stats->ev_restarted++;
    if (m != max_restarts_of(d, job) || k < 1 || k > m)
        dst_fail(d, "job %s: restart %d of %d in a row, its max_restarts is %d (spec %d): %s", job->id, k, m,
                 max_restarts_of(d, job), job->spec.max_restarts, ev->text);
    if (policy_of(job) == TIDE_RESTART_NEVER)
        dst_fail(d, "job %s has restart policy never but was restarted: %s", job->id, ev->text);
    b = model_backoff(d, job, k);
    if (job->state != TIDE_JOB_PENDING)
        return; /* placed at once (no backoff), or ended since in the same call */
    if (b > 0) {
        d->stats->restarts_backoff++;
        j->backoff_until = d->now + b;
        if (job->restart_at != core->now_mono + b || tide_list_linked(&job->queue_node))
            dst_fail(d, "job %s: restart %d in a row should wait %lld ms outside the queues; restart_at is %lld ms "
                        "from now, %s",
                     job->id, k, (long long)b, (long long)(job->restart_at ? job->restart_at - core->now_mono : 0),
                     tide_list_linked(&job->queue_node) ? "queued" : "not queued");
    } else if (job->restart_at || !tide_list_linked(&job->queue_node)) {
        dst_fail(d, "job %s: restart %d in a row has no backoff, but restart_at is %lld and it is %s", job->id, k,
                 (long long)job->restart_at, tide_list_linked(&job->queue_node) ? "queued" : "not queued");
    }
}

/* A job failed at a failure of a running generation: only as its policy and max_restarts say (never at
 * its first failure when its policy restarts that cause and max_restarts >= 1). */
static void check_failed(dst_t *d, const shell_event_t *ev)
{
    const tide_job_t *job = tide_core_job_find(d->shell->core, ev->job);
    const char *msg = job && job->message ? job->message : "", *cause = job ? job->next_cause : NULL, *p;
    int32_t max;
    int nrow = -1, m = -1;

    if (!job)
        return;
    max = max_restarts_of(d, job);
    if (strstr(msg, "; not restarted (restart policy ")) {
        d->stats->failed_policy++;
        if (!failure_cause(cause) || policy_restarts(job, cause))
            dst_fail(d, "job %s (restart policy %s, cause %s) failed without a restart: %s", job->id,
                     tide_restart_policy_name(job->spec.restart_policy), cause ? cause : "none", msg);
    } else if ((p = strstr(msg, "; restarted ")) && strstr(p, ", the most allowed (max_restarts ")) {
        d->stats->failed_max++;
        if (sscanf(p, "; restarted %d time(s) in a row", &nrow) != 1 || !(p = strstr(p, "(max_restarts ")) ||
            sscanf(p, "(max_restarts %d)", &m) != 1)
            dst_fail(d, "job %s: failure message not understood: %s", job->id, msg);
        if (!failure_cause(cause) || !policy_restarts(job, cause))
            dst_fail(d, "job %s (restart policy %s, cause %s) failed at max_restarts although its policy does not "
                        "restart that: %s",
                     job->id, tide_restart_policy_name(job->spec.restart_policy), cause ? cause : "none", msg);
        if (m != max || nrow != job->restarts_in_row || job->restarts_in_row < max)
            dst_fail(d, "job %s failed after %d restart(s) in a row (core: %d), its max_restarts is %d (message: %d): "
                        "%s",
                     job->id, nrow, job->restarts_in_row, max, m, msg);
    }
}

/* A worker quarantined: it had quarantine_failures failed ranks within the window, and is cordoned so. */
static void check_quarantined(dst_t *d, const shell_event_t *ev)
{
    const tide_core_t *core = d->shell->core;
    const tide_worker_t *w = tide_core_worker_find((tide_core_t *)core, ev->worker);
    int32_t k = tide_core_config(core)->quarantine_failures;

    d->stats->ev_quarantined++;
    if (k > TIDE_QUARANTINE_MAX)
        k = TIDE_QUARANTINE_MAX;
    if (!w || !w->cordoned || !w->cordon_reason || strncmp(w->cordon_reason, "quarantined:", 12) != 0)
        dst_fail(d, "worker %s quarantined but %s (reason \"%s\")", ev->worker,
                 !w ? "unknown" : w->cordoned ? "cordoned" : "not cordoned",
                 w && w->cordon_reason ? w->cordon_reason : "");
    if (k <= 0 || tide_core_worker_failures(core, w) < k)
        dst_fail(d, "worker %s quarantined with %d failure(s) in the window; quarantine_failures is %d", w->id,
                 tide_core_worker_failures(core, w), k);
}

static void check_recovery_event(dst_t *d, const shell_event_t *ev)
{
    cjob_t *j = ev->job[0] ? cjob(d->chk, ev->job, false) : NULL;
    const char *p;

    if (strcmp(ev->type, "job.checkpoint") == 0 && j && (p = strstr(ev->text, "checkpoint of step "))) {
        int64_t s = strtoll(p + 19, NULL, 10);
        if (s > j->seen_ckpt)
            j->seen_ckpt = s;
    } else if (strcmp(ev->type, "job.checkpoint_durable") == 0 && j && (p = strstr(ev->text, "checkpoint step "))) {
        int64_t s = strtoll(p + 16, NULL, 10);
        if (s > j->seen_durable)
            j->seen_durable = s;
    } else if (strcmp(ev->type, "job.started") == 0) {
        check_started(d, ev);
    } else if (strcmp(ev->type, "job.requeued") == 0) {
        check_restart(d, ev);
    } else if (strcmp(ev->type, "job.failed") == 0) {
        check_failed(d, ev);
    } else if (strcmp(ev->type, "worker.quarantined") == 0) {
        check_quarantined(d, ev);
    }
}

/* Per job: restart bookkeeping (restarts_in_row within the max; a job in backoff is PENDING, in no
 * queue, and queued again once it is over) and the generation history (oldest first, numbers strictly
 * increasing, at most TIDE_HISTORY_MAX, only the newest open and only while the job runs it, times in
 * order, failures only for failure causes, failure causes only where the policy restarts them). */
static void check_job_recovery(dst_t *d, const tide_job_t *job)
{
    int32_t max = max_restarts_of(d, job);

    d->stats->history_checks++;
    if (job->restarts_in_row < 0 || job->restarts_in_row > max || job->restarts_in_row > job->restarts)
        dst_fail(d, "job %s has %d restart(s) in a row (%d over its life); its max_restarts is %d", job->id,
                 job->restarts_in_row, job->restarts, max);
    if (job->restart_at) {
        if (job->state != TIDE_JOB_PENDING || tide_list_linked(&job->queue_node))
            dst_fail(d, "job %s is in a restart backoff but %s%s", job->id, tide_job_state_name(job->state),
                     tide_list_linked(&job->queue_node) ? ", queued" : "");
        if (d->now - job->restart_at > 1000)
            dst_fail(d, "job %s: its restart backoff ended %lld ms ago and it is not queued again", job->id,
                     (long long)(d->now - job->restart_at));
    }
    if (job->n_history < 0 || job->n_history > TIDE_HISTORY_MAX)
        dst_fail(d, "job %s has %d history entries (at most %d)", job->id, job->n_history, TIDE_HISTORY_MAX);
    for (int32_t i = 0; i < job->n_history; i++) {
        const tide_generation_rec_t *g = &job->history[i];
        if (i > 0 && g->number <= job->history[i - 1].number)
            dst_fail(d, "job %s history: generation %d follows generation %d", job->id, g->number,
                     job->history[i - 1].number);
        if (g->number < 1 || g->number > job->generation)
            dst_fail(d, "job %s history has generation %d; the job is at generation %d", job->id, g->number,
                     job->generation);
        if (!g->end_ms && (i != job->n_history - 1 || job->state != TIDE_JOB_RUNNING || g->number != job->generation))
            dst_fail(d, "job %s history: generation %d (entry %d of %d) is open while the job is %s at generation %d",
                     job->id, g->number, i + 1, job->n_history, tide_job_state_name(job->state), job->generation);
        if (g->end_ms && g->end_ms < g->start_ms)
            dst_fail(d, "job %s history: generation %d ended before it started", job->id, g->number);
        if (g->running_ms && (g->running_ms < g->start_ms || (g->end_ms && g->running_ms > g->end_ms)))
            dst_fail(d, "job %s history: generation %d running at %lld, started %lld, ended %lld", job->id, g->number,
                     (long long)g->running_ms, (long long)g->start_ms, (long long)g->end_ms);
        if (g->failure_ms && !failure_cause(g->cause))
            dst_fail(d, "job %s history: generation %d has a failure time but cause %s", job->id, g->number,
                     g->cause ? g->cause : "(null)");
        if (failure_cause(g->cause) && !policy_restarts(job, g->cause))
            dst_fail(d, "job %s history: generation %d restarted after %s, which its restart policy %s does not "
                        "restart",
                     job->id, g->number, g->cause, tide_restart_policy_name(job->spec.restart_policy));
    }
}

void chk_after_call(dst_t *d, const shell_event_t *ev, size_t n, int32_t reserve_before,
                    int32_t usable_before)
{
    checker_t *c = d->chk;
    dst_stats_t *st = d->stats;

    for (size_t i = 0; i < n; i++) {
        const char *t = ev[i].type;
        st->ev_started += strcmp(t, "job.started") == 0;
        st->ev_preempting += strcmp(t, "job.preempting") == 0;
        st->ev_preempted += strcmp(t, "job.preempted") == 0;
        st->ev_requeued += strcmp(t, "job.requeued") == 0;
        st->ev_rolled_back += strcmp(t, "job.rolled_back") == 0;
        st->ev_aged += strcmp(t, "job.aged") == 0;
        st->ev_ckpt += strcmp(t, "job.checkpoint") == 0;
        st->ev_durable += strcmp(t, "job.checkpoint_durable") == 0;
        st->ev_flush_failed += strcmp(t, "job.checkpoint_flush_failed") == 0;
        st->ev_held += strcmp(t, "job.checkpoint_held") == 0;
        st->ev_succeeded += strcmp(t, "job.succeeded") == 0;
        st->ev_failed += strcmp(t, "job.failed") == 0;
        st->ev_cancelled += strcmp(t, "job.cancelled") == 0;
        st->ev_ckpt_missed += strcmp(t, "job.checkpoint_missed") == 0;
        st->ev_ckpt_requested += strcmp(t, "job.checkpoint_requested") == 0;
        st->ev_cadence_off += strcmp(t, "job.checkpoint_cadence_off") == 0;
        st->ev_resizing += strcmp(t, "job.resizing") == 0;
        st->ev_resize_pending += strcmp(t, "job.resize_pending") == 0;
        st->ev_resize_cancelled += strcmp(t, "job.resize_cancelled") == 0;
        st->ev_burst_lent += strcmp(t, "job.burst_lent") == 0;
        st->burst_resizes += strcmp(t, "job.burst_lent") == 0 && strstr(ev[i].text, "by a resize") != NULL;
        st->ev_burst_reclaimed += strcmp(t, "job.burst_reclaimed") == 0;
        st->ev_burst_started += strcmp(t, "job.burst_started") == 0;
        st->ev_burst_exited += strcmp(t, "job.burst_exited") == 0;
        st->ev_burst_lost += strcmp(t, "job.burst_lost") == 0;
        if (strcmp(t, "job.resized") == 0) {
            static const char *const reasons[] = {"(requested:", "(grow:", "(shrink:", "(replace:"};
            for (int k = 0; k < 4; k++)
                st->ev_resized[k] += strstr(ev[i].text, reasons[k]) != NULL;
        }
        /* a lost rank, or a hung one (hang.c: a failure, the hot spares are for it too), or any failure
         * restarted within the job's policy (restart.c: also a rank's own exit with on-failure) */
        if (strcmp(t, "job.requeued") == 0 && ev[i].job[0] &&
            (strstr(ev[i].text, " lost (") || strstr(ev[i].text, " hung (no progress") ||
             (strstr(ev[i].text, "; restart ") && strstr(ev[i].text, " in a row")))) {
            cjob_t *j = cjob(c, ev[i].job, false);
            if (j)
                j->recovering = true;
        }
        if (strcmp(t, "job.started") == 0 && ev[i].job[0]) {
            cjob_t *j = cjob(c, ev[i].job, false);
            if (j) {
                j->started_recovering = j->recovering;
                j->recovering = false;
            }
        }
        if (strcmp(t, "job.preempting") == 0 && ev[i].job[0]) {
            cjob_t *j = cjob(c, ev[i].job, false);
            if (j)
                j->preempting_since = d->now;
        }
        if (ev[i].job[0]) {
            bool seen = false;
            for (size_t k = 0; k < c->n_touched && !seen; k++)
                seen = strcmp(c->touched[k], ev[i].job) == 0;
            if (!seen) {
                if (c->n_touched == c->cap_touched) {
                    c->cap_touched = c->cap_touched ? c->cap_touched * 2 : 16;
                    c->touched = tide_xrealloc(c->touched, c->cap_touched * sizeof(*c->touched));
                }
                snprintf(c->touched[c->n_touched++], DST_ID_MAX, "%s", ev[i].job);
            }
        }
        if (strcmp(t, "worker.dead") == 0 && ev[i].worker[0]) {
            st->ev_worker_dead++;
            if (c->n_dead == c->cap_dead) {
                c->cap_dead = c->cap_dead ? c->cap_dead * 2 : 16;
                c->dead = tide_xrealloc(c->dead, c->cap_dead * sizeof(*c->dead));
            }
            snprintf(c->dead[c->n_dead++], 32, "%s", ev[i].worker);
        }
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(ev[i].type, "job.hung") == 0)
            check_hung(d, &ev[i]);
    for (size_t i = 0; i < n && d->shell->up; i++)
        check_recovery_event(d, &ev[i]);
    check_reserve(d, ev, n, reserve_before, usable_before);
    check_lending(d, ev, n);
    check_gate(d, ev, n);
    /* a rank that went (lost, exited, its worker dead) holds no task of a pool that is still open */
    for (size_t i = 0; i < n && d->shell->up; i++) {
        bool seen = false;
        if (!ev[i].job[0])
            continue;
        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(ev[k].job, ev[i].job) == 0;
        if (!seen)
            check_job_pools(d, ev[i].job);
    }
    /* KB3 (dst.h): a generation that rolls back never started */
    for (size_t i = 0; i < n && d->sw.strict[3]; i++)
        if (strcmp(ev[i].type, "job.running") == 0)
            for (size_t k = i + 1; k < n; k++)
                if (strcmp(ev[k].type, "job.rolled_back") == 0 && strcmp(ev[k].job, ev[i].job) == 0) {
                    /* KB12 (dst.h): a rank exiting after its peer's worker was lost completes the start */
                    if (!d->sw.strict[12] && strstr(ev[k].text, "'s worker ") && strstr(ev[k].text, " was los")) {
                        d->stats->kb12_seen++;
                        dst_trace(d, "check: KB12: job %s reported running and rolled back in one call", ev[i].job);
                        continue;
                    }
                    dst_fail(d, "job %s: a generation reported as started (job.running) was rolled back in the "
                                "same call: %s",
                             ev[i].job, ev[k].text);
                }
    if (!d->sw.no_starvation && d->shell->up)
        check_inversion(d, ev, n, reserve_before);
}

void chk_turn_committed(dst_t *d)
{
    checker_t *c = d->chk;

    /* A death is known once the turn that saw it is durable: the old ranks there are written off. */
    for (size_t i = 0; i < c->n_dead; i++)
        world_orphan(d->world, c->dead[i]);
    c->n_dead = 0;
    /* So is a generation's end: what its ranks run from now on counts for nothing (world_gen_over
     * remembers it across a crash that follows) */
    for (size_t i = 0; i < c->n_touched && d->shell->up; i++) {
        const tide_job_t *job = tide_core_job_find(d->shell->core, c->touched[i]);
        for (int32_t g = job ? job->generation : 0; g >= 1; g--) {
            trainer_t *tr = world_trainer(d->world, c->touched[i], g);
            if (tr)
                (void)world_gen_over(d, tr);
        }
    }
    c->n_touched = 0;
}

void chk_turn_lost(dst_t *d)
{
    d->chk->n_dead = 0;
    d->chk->n_touched = 0;
}

void chk_on_submit(dst_t *d, const char *id)
{
    cjob_t *j = cjob(d->chk, id, false);

    if (j && (j->acked || j->committed_state))
        dst_fail(d, "job number %s given to a new job though job %s was %s", id, id,
                 j->acked ? "acknowledged" : "committed");
    if (j) {
        /* a submit that a crash lost: its number comes back */
        HASH_DEL(d->chk->jobs, j);
        free(j);
    }
    cjob(d->chk, id, true);
}

void chk_on_delete(dst_t *d, const char *id)
{
    cjob_t *j = cjob(d->chk, id, true);

    if (!is_final(j->live_final))
        dst_fail(d, "the core dropped job %s, which it never saw end", id);
    j->live_deleted = true;
}

void chk_on_commit(dst_t *d, const store_batch_t *b)
{
    for (const store_op_t *op = b->head; op; op = op->next) {
        cjob_t *j;
        if (op->kind == SOP_PUT_JOB) {
            const store_job_t *r = op->job;
            int64_t dur = r->has_durable ? r->durable.step : -1, last = r->has_last ? r->last.step : -1;
            j = cjob(d->chk, r->id, true);
            if (j->committed_deleted)
                dst_fail(d, "job %s written to the store after its record was deleted", r->id);
            if (is_final(j->committed_state) && (int)r->state != j->committed_state)
                dst_fail(d, "job %s committed as %s after it was committed %s", r->id,
                         tide_job_state_name(r->state), tide_job_state_name(j->committed_state));
            if (dur < j->committed_durable)
                dst_fail(d, "job %s: committed durable checkpoint went from step %lld to %lld", r->id,
                         (long long)j->committed_durable, (long long)dur);
            if (last < j->committed_last)
                dst_fail(d, "job %s: committed last checkpoint went from step %lld to %lld", r->id,
                         (long long)j->committed_last, (long long)last);
            if (dur > last)
                dst_fail(d, "job %s: committed durable step %lld is beyond its last checkpoint %lld", r->id,
                         (long long)dur, (long long)last);
            j->committed_state = r->state;
            j->committed_durable = dur;
            j->committed_last = last;
        } else if (op->kind == SOP_DEL_JOB) {
            j = cjob(d->chk, op->id, true);
            if (!is_final(j->committed_state))
                dst_fail(d, "job %s deleted from the store while its committed state is %s", op->id,
                         j->committed_state ? tide_job_state_name(j->committed_state) : "none");
            j->committed_deleted = true;
        }
    }
}

void chk_on_reply(dst_t *d, shell_op_t op, const char *id, int rc, int32_t arg)
{
    cjob_t *j;
    store_job_t *r;

    if (op == OP_SUBMIT && rc == 0) {
        j = cjob(d->chk, id, true);
        if (!(r = store_job_find(d->store, id)))
            dst_fail(d, "submit of job %s acknowledged before the store had it", id);
        if (j->acked)
            dst_fail(d, "job %s acknowledged twice", id);
        j->acked = true;
        d->stats->submits_acked++;
    } else if (op == OP_CANCEL && (rc == 0 || rc == -EALREADY)) {
        j = cjob(d->chk, id, true);
        r = store_job_find(d->store, id);
        if (rc == 0 && (!r || r->state != TIDE_JOB_CANCELLED))
            dst_fail(d, "cancel of job %s acknowledged but the store says %s", id,
                     r ? tide_job_state_name(r->state) : "nothing");
        if (rc == -EALREADY && r && !is_final(r->state))
            dst_fail(d, "cancel of job %s refused as already ended but the store says %s", id,
                     tide_job_state_name(r->state));
        if (rc == 0) {
            j->cancel_acked = true;
            d->stats->cancels_acked++;
        }
    } else if (op == OP_SCALE && (rc == 0 || rc == -EALREADY)) {
        /* an acknowledged target is in the store (it survives a restart); a refused one ended there */
        r = store_job_find(d->store, id);
        if (rc == 0 && (!r || r->target_workers != arg))
            dst_fail(d, "ScaleJob of job %s to %d acknowledged but the store has %s %d", id, arg,
                     r ? "target" : "no record, target", r ? r->target_workers : 0);
        if (rc == -EALREADY && r && !is_final(r->state))
            dst_fail(d, "ScaleJob of job %s refused as already ended but the store says %s", id,
                     tide_job_state_name(r->state));
        d->stats->scales_acked += rc == 0;
    } else if (op == OP_DRAIN && rc == 0) {
        /* an acknowledged drain's cordon is in the store (it survives a restart) */
        store_worker_t *sw;
        HASH_FIND_STR(d->store->workers, id, sw);
        if (!sw || !sw->cordoned)
            dst_fail(d, "DrainWorker of %s acknowledged but the store has it %s", id,
                     sw ? "uncordoned" : "not at all");
    }
}

/* --- elastic scaling (docs/elastic.md) --- */

void chk_on_scale(dst_t *d, const char *id, int32_t workers, bool elastic, int rc, const char *err,
                  const chk_scale_t *b, size_t n_acts)
{
    const tide_job_t *job = tide_core_job_find(d->shell->core, id);
    bool invalid = b->exists && (elastic ? workers != 0 : (workers < b->min || workers > b->max));
    int want = !b->exists ? -ENOENT : is_final(b->state) ? -EALREADY : invalid ? -EINVAL : 0;
    char lo[40], hi[40];

    d->stats->scales++;
    if (rc != want)
        dst_fail(d, "ScaleJob(%s, %d%s) returned %d, expected %d (job %s, %d..%d workers): %s", id, workers,
                 elastic ? ", elastic" : "", rc, want, b->exists ? tide_job_state_name(b->state) : "unknown",
                 b->min, b->max, err);
    if (rc == -ENOENT) {
        d->stats->scale_enoent++;
        return;
    }
    if (rc != 0) {
        /* errors change nothing */
        d->stats->scale_einval += rc == -EINVAL;
        d->stats->scale_ealready += rc == -EALREADY;
        if (n_acts != 0 || !job || (int)job->state != b->state || job->target_workers != b->target ||
            (int32_t)job->resize.state != b->resize_state || job->resize.to_workers != b->resize_to ||
            job->size_cap != b->size_cap || job->generation != b->generation || job->n_ranks != b->n_ranks)
            dst_fail(d, "ScaleJob(%s, %d%s) was refused (%d: %s) but changed the job or emitted %zu action(s): "
                        "target %d -> %d, resize %s -> %s (to %d -> %d), cap %d -> %d",
                     id, workers, elastic ? ", elastic" : "", rc, err, n_acts, b->target,
                     job ? job->target_workers : -1,
                     tide_resize_state_name((tide_resize_state_t)b->resize_state),
                     job ? tide_resize_state_name(job->resize.state) : "-", b->resize_to,
                     job ? job->resize.to_workers : -1, b->size_cap, job ? job->size_cap : -1);
        snprintf(lo, sizeof(lo), "min_workers %d", b->min);
        snprintf(hi, sizeof(hi), "max_workers %d", b->max);
        if (rc == -EINVAL && !elastic && (!strstr(err, lo) || !strstr(err, hi)))
            dst_fail(d, "ScaleJob(%s, %d) refused without naming the bounds %d..%d: %s", id, workers, b->min, b->max,
                     err);
        return;
    }
    if (!job || job->target_workers != (elastic ? 0 : workers))
        dst_fail(d, "ScaleJob(%s, %d%s) accepted but the job's target is %d", id, workers, elastic ? ", elastic" : "",
                 job ? job->target_workers : -1);
    /* a shrink can always be had: it starts at once (docs/elastic.md); the same size asked again while a
     * burst by resize holds the job bigger changes nothing (a ScaleJob is idempotent; the phase's end
     * shrinks it: seeds 3005940, 3037025, 3079574) */
    if (!elastic && b->settled && b->n_ranks > workers && job->state == TIDE_JOB_RUNNING &&
        job->resize.state != TIDE_RESIZE_CHECKPOINTING && !(b->target == workers && job->burst_to > 0))
        dst_fail(d, "ScaleJob(%s, %d) asked running job of %d workers to shrink, but no resize began (resize %s)", id,
                 workers, b->n_ranks, tide_resize_state_name(job->resize.state));
}

/* Elastic scaling, after every step: the resize records are well-formed and move through their phases
 * in order (CHECKPOINTING only while its generation runs, STOPPING and STARTING only while the job is
 * PENDING resp. RUNNING, never DONE; the last one's phases add up to its latency); a running job's size
 * is within [min, max] and at most its requested size once it could shrink (docs/elastic.md: "a shrink
 * starts at once"); a checkpointing resize stops by its grace; the grow claims add up; core->resizable
 * lists exactly the running jobs off their goal. */
static void check_resize(dst_t *d)
{
    tide_core_t *core = d->shell->core;
    const tide_core_config_t *cfg = tide_core_config(core);
    tide_job_t *job = NULL;
    int32_t claimed = 0, off_goal = 0, listed = 0;
    const int64_t slack = 1000;
    tide_list_t *pos;

    while ((job = tide_core_job_next(core, job))) {
        const tide_resize_t *r = &job->resize, *l = &job->last_resize;
        /* a job grown for a high-load phase (a burst by resize, lending.c) holds that size until it ends */
        int32_t goal = job->burst_to > 0 ? job->burst_to
                       : job->target_workers > 0 ? job->target_workers : job->spec.max_workers;
        int32_t cap = job->burst_to > 0 ? job->burst_to : job->target_workers;
        bool running = job->state == TIDE_JOB_RUNNING, in_progress = tide__resize_in_progress(job), kb8;
        cjob_t *j = cjob(d->chk, job->id, false);

        d->stats->resize_checks++;
        if (job->grow_claim < 0 || (job->grow_claim > 0 && r->state != TIDE_RESIZE_CHECKPOINTING &&
                                    r->state != TIDE_RESIZE_STOPPING))
            dst_fail(d, "job %s claims %d free worker(s) for a grow with its resize %s", job->id, job->grow_claim,
                     tide_resize_state_name(r->state));
        claimed += job->grow_claim;
        if (r->state == TIDE_RESIZE_DONE)
            dst_fail(d, "job %s: its resize in progress is DONE (a done one moves to last_resize)", job->id);
        /* KB8 (dst.h): a rollback leaves a resize CHECKPOINTING or STARTING while the job is PENDING, and a
         * CHECKPOINTING one stays so in the next generation. Tolerated: that resize is not checked. */
        if (!d->sw.strict[8] && j && job->state == TIDE_JOB_PENDING &&
            (r->state == TIDE_RESIZE_STARTING || r->state == TIDE_RESIZE_CHECKPOINTING) &&
            j->kb8_at != r->decided_mono) {
            j->kb8_at = r->decided_mono;
            d->stats->kb8_seen++;
        }
        kb8 = !d->sw.strict[8] && j && r->state != TIDE_RESIZE_NONE && j->kb8_at == r->decided_mono;
        if (!kb8 && ((r->state == TIDE_RESIZE_CHECKPOINTING && (!running || r->from_generation != job->generation)) ||
                     (r->state == TIDE_RESIZE_STOPPING && running) ||
                     (r->state == TIDE_RESIZE_STARTING && job->state == TIDE_JOB_PENDING) ||
                     (r->state != TIDE_RESIZE_NONE && !running && job->state != TIDE_JOB_PENDING))) {
            dst_fail(d, "job %s is %s in generation %d with its resize %s (decided in generation %d: %d -> %d, %s: %s)",
                     job->id, tide_job_state_name(job->state), job->generation, tide_resize_state_name(r->state),
                     r->from_generation, r->from_workers, r->to_workers, tide_resize_reason_name(r->reason),
                     r->detail ? r->detail : "");
        }
        if (r->state != TIDE_RESIZE_NONE && (r->to_workers < job->spec.min_workers ||
                                             r->to_workers > job->spec.max_workers))
            dst_fail(d, "job %s (%d..%d workers) resizes to %d", job->id, job->spec.min_workers,
                     job->spec.max_workers, r->to_workers);
        if (r->state == TIDE_RESIZE_STARTING && running && job->n_ranks > r->to_workers)
            dst_fail(d, "job %s: its resize to %d workers started a generation of %d", job->id, r->to_workers,
                     job->n_ranks);
        if (l->state != TIDE_RESIZE_NONE) {
            double sum = l->checkpoint_s + l->stop_s + l->start_s;
            if (l->state != TIDE_RESIZE_DONE || l->total_s < 0 || l->checkpoint_s < 0 || l->stop_s < 0 ||
                l->start_s < 0 || sum - l->total_s > 1e-6 || l->total_s - sum > 1e-6)
                dst_fail(d, "job %s: its last resize is %s in %.6f s, phases checkpoint %.6f + stop %.6f + start "
                            "%.6f s",
                         job->id, tide_resize_state_name(l->state), l->total_s, l->checkpoint_s, l->stop_s,
                         l->start_s);
            if (l->to_generation <= l->from_generation || l->workers < job->spec.min_workers ||
                l->workers > l->to_workers || l->to_workers > job->spec.max_workers)
                dst_fail(d, "job %s: its last resize went from generation %d to %d with %d workers (asked %d, "
                            "job %d..%d)",
                         job->id, l->from_generation, l->to_generation, l->workers, l->to_workers,
                         job->spec.min_workers, job->spec.max_workers);
        }
        /* a resize waiting for its checkpoint stops by its grace (a shrink's is the preemption grace) */
        if (r->state == TIDE_RESIZE_CHECKPOINTING && !kb8) {
            int64_t grace = r->reason == TIDE_RESIZE_SHRINK ? cfg->preempt_grace_ms : cfg->resize_grace_ms;
            if (d->now - r->decided_mono > grace + slack)
                dst_fail(d, "job %s has been checkpointing for a resize (%s) for %lld ms; its grace is %lld ms",
                         job->id, tide_resize_reason_name(r->reason), (long long)(d->now - r->decided_mono),
                         (long long)grace);
        }
        if (running && (job->n_ranks < job->spec.min_workers || job->n_ranks > job->spec.max_workers))
            dst_fail(d, "job %s runs generation %d on %d workers outside its %d..%d", job->id, job->generation,
                     job->n_ranks, job->spec.min_workers, job->spec.max_workers);
        /* Above its requested size: allowed while a resize is under way (one placed before ScaleJob lowered
         * the target), while the generation starts, waits for workers to re-register after a restart, or
         * yields to a preemption (resize.c can_begin: no resize begins then); once settled it shrinks (at
         * once, or after the dwell a generation of an SDK job gets to report first). */
        if (j) {
            bool settled = running && job->ranks_unstarted == 0 && !job->launch_deadline && !job->awaiting &&
                           !job->preempted_by && !in_progress;
            if (!(settled && cap > 0 && job->n_ranks > cap))
                j->over_since = -1;
            else if (j->over_since < 0)
                j->over_since = d->now;
            else if (d->now - j->over_since > cfg->resize_dwell_ms + slack)
                dst_fail(d, "job %s has run %d workers for %lld ms since it could shrink to its requested %d (no "
                            "resize under way: %s; dwell %lld ms)",
                         job->id, job->n_ranks, (long long)(d->now - j->over_since), cap,
                         tide_resize_state_name(r->state), (long long)cfg->resize_dwell_ms);
        }
        /* tide resizes only jobs with a requested size, or growing by themselves (SDK, auto_grow) */
        if (running && !job->dropped && job->n_ranks != goal &&
            (job->target_workers > 0 || (cfg->auto_grow && job->sdk_seen))) {
            off_goal++;
            if (!tide_list_linked(&job->resize_node))
                dst_fail(d, "job %s runs %d workers, its goal is %d, but it is not in the resizable list", job->id,
                         job->n_ranks, goal);
        } else if (tide_list_linked(&job->resize_node)) {
            dst_fail(d, "job %s (%s, %d workers, goal %d) is in the resizable list", job->id,
                     tide_job_state_name(job->state), job->n_ranks, goal);
        }
    }
    tide_list_for_each(pos, &core->resizable) listed++;
    if (listed != off_goal)
        dst_fail(d, "the resizable list has %d jobs; %d running jobs are off their goal", listed, off_goal);
    if (core->grow_claimed < 0 || core->grow_claimed != claimed)
        dst_fail(d, "the core counts %d workers claimed by grows; its jobs claim %d", core->grow_claimed, claimed);
}

void chk_on_restart(dst_t *d)
{
    tide_core_t *core = d->shell->core;
    store_job_t *r, *rt;
    store_worker_t *sw, *swt;
    cjob_t *j, *jt;

    HASH_ITER(hh, d->store->jobs, r, rt) {
        tide_job_t *job = tide_core_job_find(core, r->id);
        int want = r->state == TIDE_JOB_RUNNING && r->n_workers == 0 ? TIDE_JOB_PENDING : (int)r->state;
        if (!job)
            dst_fail(d, "job %s is in the store but not in the restarted scheduler", r->id);
        /* restore_done may have moved it on already (placed, or a rank it cannot have) */
        if (is_final(want) && (int)job->state != want)
            dst_fail(d, "job %s restored as %s, its record says %s", r->id, tide_job_state_name(job->state),
                     tide_job_state_name(r->state));
        if (job->durable_ckpt.step != (r->has_durable ? r->durable.step : -1) ||
            job->last_ckpt.step != (r->has_last ? r->last.step : -1))
            dst_fail(d, "job %s restored with checkpoints %lld/%lld, its record has %lld/%lld", r->id,
                     (long long)job->last_ckpt.step, (long long)job->durable_ckpt.step,
                     (long long)(r->has_last ? r->last.step : -1),
                     (long long)(r->has_durable ? r->durable.step : -1));
        if (job->target_workers != r->target_workers || job->resizes != r->resizes)
            dst_fail(d, "job %s restored with target %d and %d resize(s), its record has %d and %d", r->id,
                     job->target_workers, job->resizes, r->target_workers, r->resizes);
        /* where the next generation looks for its checkpoints, and a restart's backoff, survive */
        if (2 * job->n_prev_src != r->n_sources)
            dst_fail(d, "job %s restored with %d restore source(s), its record has %d", r->id, 2 * job->n_prev_src,
                     r->n_sources);
        if (r->state == TIDE_JOB_PENDING && r->restart_at_ms > dst_wall(d) &&
            (job->restart_at_ms != r->restart_at_ms || tide_list_linked(&job->queue_node)))
            dst_fail(d, "job %s restored in its restart backoff until %lld: restart_at_ms %lld, %s", r->id,
                     (long long)r->restart_at_ms, (long long)job->restart_at_ms,
                     tide_list_linked(&job->queue_node) ? "queued" : "not queued");
    }
    HASH_ITER(hh, d->store->workers, sw, swt) {
        tide_worker_t *w = tide_core_worker_find(core, sw->id);
        if (!w || w->cordoned != sw->cordoned)
            dst_fail(d, "worker %s restored %s, its record says %s", sw->id,
                     !w ? "missing" : (w->cordoned ? "cordoned" : "uncordoned"),
                     sw->cordoned ? "cordoned" : "uncordoned");
    }
    gives_clear(d->chk); /* a new core: steal ids it never saw get answers of their own */
    progs_clear(d->chk); /* a new core judges progress from its first reports */
    {
        /* a drain whose batch the crash lost is forgotten with its cordon */
        cdrain_t *e, *et;
        HASH_ITER(hh, d->chk->drained, e, et) {
            tide_worker_t *w = tide_core_worker_find(core, e->id);
            if (!w || !w->cordoned) {
                HASH_DEL(d->chk->drained, e);
                free(e);
            }
        }
    }
    HASH_ITER(hh, d->chk->jobs, j, jt) {
        if (!j->committed_state && !j->acked) {
            /* a submit the crash lost: never acknowledged, so never promised */
            HASH_DEL(d->chk->jobs, j);
            free(j);
            continue;
        }
        j->live_final = is_final(j->committed_state) ? j->committed_state : 0;
        j->live_deleted = false;
        j->live_durable = j->committed_durable;
        j->live_last = j->committed_last;
        j->fit_since = -1;
        j->preempting_since = j->copying_since = j->release_due_since = -1;
        j->over_since = -1;
        j->hangs = 0; /* the core's count starts again too (it is not in the store) */
        /* what the lost turn acknowledged is forgotten; the store's records are what the core knows */
        j->seen_ckpt = j->seen_durable = -1;
        {
            /* a restart waiting for its placement keeps its right to the spares, and its backoff (both in the
             * record) */
            store_job_t *sj = store_job_find(d->store, j->id);
            bool pending = sj && sj->state == TIDE_JOB_PENDING;
            j->recovering = pending && (sj->recovering || sj->restart_at_ms > 0);
            j->backoff_until = pending && sj->restart_at_ms > 0 ? sj->restart_at_ms - (dst_wall(d) - d->now) : 0;
        }
    }
}


/* --- work stealing (docs/work-stealing.md) --- */

/* Invariant 3 (no task lost when its holder dies; the core's view is consistent): for the pool, the
 * walk of tide_core_task_holder over the job's task ids agrees with tide_core_task_pool's counts,
 * committed + held + in flight + orphaned == declared <= total, and no holder is a lost rank or one on
 * a dead worker (its tasks are orphaned, or the pool went with the generation). A rank that exited
 * normally keeps what it held: it may have run it (task_pool.c, tide__tasks_rank_gone). */
static void check_pool(dst_t *d, tide_job_t *job, const wjob_t *wj, tide_task_kind_t kind, int64_t step, bool walk)
{
    tide_core_t *core = d->shell->core;
    tide_task_pool_info_t info;
    uint64_t held = 0, committed = 0, flying = 0, orphaned = 0, declared = 0;

    if (tide_core_task_pool(core, job, kind, step, &info) < 0)
        return;
    d->stats->pool_checks++;
    if (info.committed + info.queued + info.in_flight + info.orphaned != info.declared || info.declared > info.total)
        dst_fail(d, "job %s generation %d pool (%s, step %lld): committed %llu + held %llu + in flight %llu + orphaned "
                    "%llu != declared %llu (total %llu)",
                 job->id, job->generation, tide_task_kind_name(kind), (long long)step,
                 (unsigned long long)info.committed, (unsigned long long)info.queued,
                 (unsigned long long)info.in_flight, (unsigned long long)info.orphaned,
                 (unsigned long long)info.declared, (unsigned long long)info.total);
    if (!walk || !wj || !wj->tasks)
        return;
    for (int i = 0; i < wj->n_tasks; i++) {
        uint64_t id = world_task_id(wj, i);
        int32_t h = tide_core_task_holder(core, job, kind, step, id);
        if (h == -4)
            continue;
        declared++;
        if (h == -1) {
            committed++;
        } else if (h == -2) {
            flying++;
        } else if (h == -3) {
            orphaned++;
        } else if (h >= job->n_ranks && h < job->n_ranks + job->max_lent) {
            /* a lent slot: while it holds tasks its process is known and its worker alive; when it goes,
             * what it held is orphaned */
            const tide_job_rank_t *slot = &job->ranks[h];
            held++;
            if (!slot->worker || slot->worker->state == TIDE_WORKER_DEAD || slot->state == TIDE_RANK_LOST ||
                slot->state == TIDE_RANK_EXITED)
                dst_fail(d, "no task lost when its holder dies: job %s generation %d pool (%s, step %lld): task %llu is "
                            "held by lent slot %d, which %s (its tasks should be orphaned)",
                         job->id, job->generation, tide_task_kind_name(kind), (long long)step, (unsigned long long)id,
                         h, !slot->worker ? "has no worker" : "is gone");
        } else if (h >= 0 && h < job->n_ranks) {
            const tide_job_rank_t *slot = &job->ranks[h];
            held++;
            if (slot->state == TIDE_RANK_LOST || (slot->worker && slot->worker->state == TIDE_WORKER_DEAD))
                dst_fail(d, "no task lost when its holder dies: job %s generation %d pool (%s, step %lld): task %llu is "
                            "held by rank %d, which is %s (its tasks should be orphaned)",
                         job->id, job->generation, tide_task_kind_name(kind), (long long)step, (unsigned long long)id,
                         h, slot->state == TIDE_RANK_LOST ? "lost" : "on a dead worker");
        } else {
            dst_fail(d, "job %s pool (%s, step %lld): task %llu has holder %d", job->id, tide_task_kind_name(kind),
                     (long long)step, (unsigned long long)id, h);
        }
    }
    if (declared != info.declared || committed != info.committed || held != info.queued ||
        flying != info.in_flight || orphaned != info.orphaned)
        dst_fail(d, "job %s generation %d pool (%s, step %lld): the holders say declared %llu, committed %llu, held "
                    "%llu, in flight %llu, orphaned %llu; tide_core_task_pool says %llu, %llu, %llu, %llu, %llu",
                 job->id, job->generation, tide_task_kind_name(kind), (long long)step, (unsigned long long)declared,
                 (unsigned long long)committed, (unsigned long long)held, (unsigned long long)flying,
                 (unsigned long long)orphaned, (unsigned long long)info.declared, (unsigned long long)info.committed,
                 (unsigned long long)info.queued, (unsigned long long)info.in_flight,
                 (unsigned long long)info.orphaned);
}

void chk_task_pool(dst_t *d, const char *job_id, int32_t gen, tide_task_kind_t kind, int64_t step, bool walk)
{
    tide_job_t *job;

    if (!d->shell->up || !(job = tide_core_job_find(d->shell->core, job_id)) || job->generation != gen ||
        job->state != TIDE_JOB_RUNNING)
        return;
    check_pool(d, job, world_job_find(d->world, job_id), kind, step, walk);
}

typedef struct pool_walk {
    dst_t *d;
    tide_job_t *job;
    const wjob_t *wj;
    struct {
        tide_task_kind_t kind;
        int64_t step;
    } p[64];
    int n;
} pool_walk_t;

static void collect_pool(void *ud, tide_task_kind_t kind, int64_t step)
{
    pool_walk_t *pw = ud;

    if (pw->n < 64) {
        pw->p[pw->n].kind = kind;
        pw->p[pw->n].step = step;
        pw->n++;
    }
}

static void check_job_pools(dst_t *d, const char *job_id)
{
    pool_walk_t pw = {.d = d};

    if (!(pw.job = tide_core_job_find(d->shell->core, job_id)) || pw.job->state != TIDE_JOB_RUNNING || !pw.job->tasks)
        return;
    pw.wj = world_job_find(d->world, job_id);
    tide_core_task_pools_each(d->shell->core, pw.job, collect_pool, &pw);
    for (int i = 0; i < pw.n; i++)
        check_pool(d, pw.job, pw.wj, pw.p[i].kind, pw.p[i].step, true);
}

/* A lent slot's new process has a new deque entry, whose steal ids start again from 1, and the core
 * starts the slot afresh (tide__tasks_slot_reset): the answers given to the slot's earlier processes
 * are no replays for it (seeds 1031998, 1044227). */
void chk_on_lend(dst_t *d, const tide_action_t *a)
{
    cgive_t *g, *gt;
    char prefix[80];
    size_t n;

    if (!a->job || a->rank < a->job->n_ranks)
        return;
    n = (size_t)snprintf(prefix, sizeof(prefix), "%s/%d/%d/", a->job->id, a->generation, a->rank);
    HASH_ITER(hh, d->chk->gives, g, gt) {
        if (strncmp(g->key, prefix, n) == 0) {
            HASH_DEL(d->chk->gives, g);
            free(g->ids);
            free(g);
        }
    }
}

/* Whether lent process k was written off: the scheduler declared its worker dead (in this very call,
 * maybe, before world_orphan marks it when the turn commits: seed 1042439). */
static bool lent_lost(dst_t *d, const trank_t *k)
{
    const agent_t *ag = &d->world->a[k->agent];
    const tide_worker_t *w = tide_core_worker_find(d->shell->core, ag->id);

    return !w || w->state == TIDE_WORKER_DEAD || world_lent_written_off(ag, k);
}

/* The core gives id to a thief although the step's record says it ran already: when only lent processes
 * that have ended ran it, their completion never reached the core (its TasksDone died with a stream, and
 * the agent dropped the process's deque when it exited), so the core orphaned it with what the process
 * held: the documented "at least once" of a lent process's end (docs/elastic.md, "Known weak (burst)";
 * seed 1083928). The thief's run is excused. A live process that ran it (or a rank) is no excuse. */
static void excuse_lent_lost(dst_t *d, trainer_t *tr, const tide_action_t *a, uint64_t id)
{
    tstep_t *st = a->step >= 0 && a->step < tr->n_steps ? tr->steps[a->step] : NULL;
    int i = world_task_index(tr->job, id);

    if (!st || i < 0 || st->count[i] == 0 || st->excused[i] || !st->handed[i])
        return;
    for (int r = 0; r < W_MAX_RANKS; r++) {
        const trank_t *k = &tr->rk[r];
        if (!(st->handed[i] & (1u << r)))
            continue;
        if (r < tr->world)
            return;
        if (k->lent && k->agent >= 0 && k->phase != TR_OUT &&
            tide_task_deque_where(d->world->a[k->agent].deque, k->rid, a->task_kind, a->step, id) != TIDE_TASK_UNKNOWN)
            return; /* the slot's live process has it */
    }
    st->excused[i] = true;
    dst_trace(d, "world: task %llu of job %s g%d step %lld: given again after the lent process that ran it ended "
                 "without its completion reaching the scheduler",
              (unsigned long long)id, tr->job->id, tr->gen, (long long)a->step);
}

/* Invariant 1 (at most once), the core's half: a task given to a thief is in no other live rank's
 * deque (queued or handed to its trainer): the victim released it before the thief gets it. Checked
 * after the call that gave it, unless that call ended the generation (nothing of it counts then). */
void chk_on_give(dst_t *d, const tide_action_t *a)
{
    tide_job_t *job = a->job;
    trainer_t *tr;
    cgive_t *g;
    char key[80];

    snprintf(key, sizeof(key), "%s/%d/%d/%d/%lld/%llu", a->job_id ? a->job_id : "", a->generation, a->rank,
             a->task_kind, (long long)a->step, (unsigned long long)a->request_id);
    HASH_FIND_STR(d->chk->gives, key, g);
    if (g) {
        /* a replay (the answer may have been lost): the same ids, which the thief's deque ignores when it
         * has them already; they may have moved on since */
        if (g->n != a->n_task_ids || (g->n && memcmp(g->ids, a->task_ids, g->n * sizeof(*g->ids)) != 0))
            dst_fail(d, "job %s generation %d rank %d step %lld: steal %llu was answered with %zu task(s), and again "
                        "with %zu different one(s): a repeated steal id must get the same answer",
                     a->job_id, a->generation, a->rank, (long long)a->step, (unsigned long long)a->request_id, g->n,
                     a->n_task_ids);
        return;
    }
    g = tide_xcalloc(1, sizeof(*g));
    snprintf(g->key, sizeof(g->key), "%s", key);
    g->n = a->n_task_ids;
    if (g->n) {
        g->ids = tide_xmalloc(g->n * sizeof(*g->ids));
        memcpy(g->ids, a->task_ids, g->n * sizeof(*g->ids));
    }
    HASH_ADD_STR(d->chk->gives, key, g);
    if (!job || job->state != TIDE_JOB_RUNNING || job->generation != a->generation ||
        !(tr = world_trainer(d->world, job->id, a->generation)))
        return;
    for (size_t i = 0; i < a->n_task_ids; i++) {
        uint64_t id = a->task_ids[i];
        int32_t h = tide_core_task_holder(d->shell->core, job, (tide_task_kind_t)a->task_kind, a->step, id);
        d->stats->give_checks++;
        if (h != a->rank && h != -1 && h != -4)
            dst_fail(d, "job %s generation %d step %lld: the core gives task %llu to rank %d but says rank/state %d "
                        "holds it",
                     job->id, a->generation, (long long)a->step, (unsigned long long)id, a->rank, h);
        excuse_lent_lost(d, tr, a, id);
        for (int r = 0; r < W_MAX_RANKS; r++) {
            const trank_t *k = &tr->rk[r];
            tide_task_state_t st;
            if (r == a->rank || k->agent < 0 || k->phase == TR_OUT || (r >= tr->world && !k->lent))
                continue;
            if (r >= tr->world && lent_lost(d, k))
                continue; /* its worker was declared dead: what it had is orphaned, at least once */
            st = tide_task_deque_where(d->world->a[k->agent].deque, k->rid, a->task_kind, a->step, id);
            if (st == TIDE_TASK_QUEUED || st == TIDE_TASK_HANDED)
                dst_fail(d, "at most once: job %s generation %d step %lld: the core gives task %llu to rank %d (steal "
                            "%llu) while rank %d's deque on %s still has it %s: given before the victim released it",
                         job->id, a->generation, (long long)a->step, (unsigned long long)id, a->rank,
                         (unsigned long long)a->request_id, r, d->world->a[k->agent].id,
                         st == TIDE_TASK_QUEUED ? "queued" : "handed to its trainer");
        }
    }
}

void chk_task_holders(dst_t *d, const net_msg_t *m, tide_task_kind_t kind, int32_t *before, size_t max)
{
    tide_job_t *job = tide_core_job_find(d->shell->core, m->job);

    for (size_t i = 0; i < m->n_ids && i < max; i++)
        before[i] = job && job->generation == m->gen ? tide_core_task_holder(d->shell->core, job, kind, m->step, m->ids[i])
                                                     : -4;
}

/* Invariant 1, the commit: a task the core committed for rank r was held by r and handed to r's
 * trainer in that step of that generation. */
void chk_task_committed(dst_t *d, const net_msg_t *m, tide_task_kind_t kind, const int32_t *before, size_t max)
{
    tide_job_t *job = tide_core_job_find(d->shell->core, m->job);
    trainer_t *tr;

    if (!job || job->generation != m->gen)
        return;
    tr = world_trainer(d->world, m->job, m->gen);
    for (size_t i = 0; i < m->n_ids && i < max; i++) {
        int32_t after = tide_core_task_holder(d->shell->core, job, kind, m->step, m->ids[i]);
        const tstep_t *st;
        int x;
        if (after != -1 || before[i] == -1)
            continue;
        d->stats->commit_checks++;
        if (before[i] != m->rank)
            dst_fail(d, "job %s generation %d step %lld: the core committed task %llu for rank %d, but rank/state %d "
                        "held it",
                     m->job, m->gen, (long long)m->step, (unsigned long long)m->ids[i], m->rank, before[i]);
        x = tr ? world_task_index(tr->job, m->ids[i]) : -1;
        st = tr && m->step >= 0 && m->step < tr->n_steps ? tr->steps[m->step] : NULL;
        if (x < 0 || !st || m->rank < 0 || m->rank >= W_MAX_RANKS || !(st->handed[x] & (1u << m->rank)))
            dst_fail(d, "at most once: job %s generation %d step %lld: the core committed task %llu for rank %d, whose "
                        "trainer was never handed it",
                     m->job, m->gen, (long long)m->step, (unsigned long long)m->ids[i], m->rank);
    }
}

/* Invariant 4 (liveness): once the world is quiet, a next_task of a live rank waits at most
 * DST_STEAL_LIVE_MS for its answer; at the end, none waits. */
static void check_steal_liveness(dst_t *d, bool final)
{
    world_t *w = d->world;

    for (int i = 0; i < w->n; i++) {
        const agent_t *a = &w->a[i];
        for (int x = 0, left = a->n_running; x < W_ENTRIES && left > 0; x++) {
            const wentry_t *e = &a->e[x];
            const trank_t *k;
            int64_t since;
            if (!e->used || !e->running)
                continue;
            left--;
            if (e->rank >= W_MAX_RANKS)
                continue;
            k = &e->tr->rk[e->rank];
            if (!e->tr->job->tasks || k->rid != (uint64_t)e->pid || k->phase != TR_WAIT)
                continue;
            since = k->wait_since > d->calm_at ? k->wait_since : d->calm_at;
            if (final || d->now - since > DST_STEAL_LIVE_MS)
                dst_fail(d, "liveness: job %s generation %d rank %d on %s has waited %lld ms for the answer to its "
                            "next_task (step %lld; pending steal %llu; the world has been quiet for %lld ms)",
                         e->job, e->gen, e->rank, a->id, (long long)(d->now - k->wait_since),
                         (long long)e->tr->tstep,
                         (unsigned long long)tide_task_deque_pending_steal(a->deque, k->rid, e->tr->job->task_kind,
                                                                           e->tr->tstep),
                         (long long)(d->now - d->calm_at));
        }
    }
}

/* --- after every step --- */

/* Whether every rank of the job runs on a worker the scheduler can reach (each holds a part of the
 * checkpoint, so a copy is released only then). */
static bool all_reachable(const tide_job_t *job)
{
    for (int32_t r = 0; r < job->n_ranks; r++)
        if (job->ranks[r].state != TIDE_RANK_RUNNING || !job->ranks[r].worker || !job->ranks[r].worker->connected)
            return false;
    return job->n_ranks > 0;
}

/* The core's timers fire: what it promises to do by a deadline happens by then (plus a slack for the
 * heartbeat-paced world). */
static void check_timers(dst_t *d, const tide_job_t *job, cjob_t *j)
{
    const tide_core_config_t *cfg = tide_core_config(d->shell->core);
    int64_t wall = dst_wall(d), slack = 1000;
    if (job->state == TIDE_JOB_PENDING && !job->restart_at && cfg->aging_ms > 0 && job->eff_priority < TIDE_PRIO_HIGH &&
        d->now - job->queued_mono > cfg->aging_ms + slack) { /* (a restart's backoff is outside the queues) */
        const tide_list_t *q = &d->shell->core->queues[job->eff_priority];
        const tide_job_t *first = tide_list_entry(q->next, tide_job_t, queue_node);
        dst_fail(d, "job %s has waited %lld ms as %s; aging moves it up every %lld ms (the head of its queue, "
                    "job %s, has waited %lld ms; the core's next deadline is in %lld ms)",
                 job->id, (long long)(d->now - job->queued_mono), tide_prio_name(job->eff_priority),
                 (long long)cfg->aging_ms, first->id, (long long)(d->now - first->queued_mono),
                 (long long)(tide_core_next_deadline(d->shell->core) - d->now));
    }
    /* KB4 (dst.h): unless strict, only a generation that has run a while must have ended an overdue
     * request */
    if (job->ckpt_request && job->ckpt_deadline_ms + slack < wall &&
        (d->sw.strict[4] || (job->state == TIDE_JOB_RUNNING && wall - job->gen_start_ms > slack)))
        dst_fail(d, "job %s (%s): checkpoint request %llu is %lld ms past its deadline and still open", job->id,
                 tide_job_state_name(job->state), (unsigned long long)job->ckpt_request,
                 (long long)(wall - job->ckpt_deadline_ms));
    if (job->state != TIDE_JOB_RUNNING) {
        j->preempting_since = j->copying_since = j->release_due_since = -1;
        return;
    }
    if (job->spec.time_limit_s && job->gen_start_ms + job->spec.time_limit_s * 1000 + slack < wall)
        dst_fail(d, "job %s runs past its time limit of %llds", job->id, (long long)job->spec.time_limit_s);
    /* The checkpoint cadence (ckpt_cadence.c) keeps a look armed, at most an interval ahead, for a started
     * generation of a job that has a checkpoint and did not miss a cadence request. */
    {
        int64_t iv = job->spec.ckpt_interval_s < 0  ? 0
                     : job->spec.ckpt_interval_s > 0 ? job->spec.ckpt_interval_s * 1000
                                                     : cfg->ckpt_interval_ms;
        int64_t now = d->shell->core->now_mono;
        if (iv > 0 && !job->launch_deadline && job->last_ckpt.step >= 0 && job->cadence_off_gen != job->generation &&
            (!job->ckpt_cadence_at || job->ckpt_cadence_at > now + iv))
            dst_fail(d, "job %s: its checkpoint cadence (every %lld ms) is %s (newest checkpoint: step %lld)",
                     job->id, (long long)iv, job->ckpt_cadence_at ? "armed too far ahead" : "not armed",
                     (long long)job->last_ckpt.step);
        d->stats->cadence_checks++;
    }
    if (!job->preempted_by)
        j->preempting_since = -1;
    else if (j->preempting_since >= 0 && d->now - j->preempting_since > (int64_t)cfg->preempt_grace_ms + slack)
        dst_fail(d, "job %s has yielded to job %s for %lld ms; its checkpoint grace is %u ms", job->id,
                 job->preempted_by, (long long)(d->now - j->preempting_since), cfg->preempt_grace_ms);
    /* The checkpoint gate releases a held copy once the MFU is under the threshold or the newest
     * durable copy is older than the deadline, as soon as every rank can copy: at the next gate check,
     * or 6 checks after a failed copy. */
    if (job->flush_state != TIDE_FLUSH_HELD || !all_reachable(job)) {
        j->release_due_since = -1;
    } else {
        double thr = job->spec.ckpt_mfu_threshold > 0 ? job->spec.ckpt_mfu_threshold : cfg->ckpt_mfu_threshold;
        int64_t dl = job->spec.ckpt_deadline_s > 0 ? job->spec.ckpt_deadline_s * 1000 : cfg->ckpt_deadline_ms;
        int64_t since = job->durable_ckpt.step >= 0 ? job->durable_ckpt.time_ms : job->start_ms;
        int64_t late = 6 * cfg->ckpt_gate_check_ms + slack;
        double mfu = tide_core_job_mfu(d->shell->core, job);
        if (mfu >= thr && wall - since < dl)
            j->release_due_since = -1;
        else if (j->release_due_since < 0)
            j->release_due_since = d->now;
        else if (d->now - j->release_due_since > late && wall - job->flush_since_ms > late)
            dst_fail(d, "job %s: its durable copy of step %lld is still held %lld ms after it was due (MFU %.2f, "
                        "threshold %.2f; newest durable copy %lld ms old, deadline %lld ms)",
                     job->id, (long long)job->flush_step, (long long)(d->now - j->release_due_since), mfu, thr,
                     (long long)(wall - since), (long long)dl);
    }
    if (job->flush_state != TIDE_FLUSH_COPYING) {
        j->copying_since = -1;
    } else if (j->copying_since < 0 || j->copying_step != job->flush_step) {
        j->copying_since = d->now;
        j->copying_step = job->flush_step;
    } else if (d->now - j->copying_since > cfg->ckpt_copy_timeout_ms + slack) {
        /* a copy that lost its FLUSH or an answer (a stream died) times out and is retried */
        dst_fail(d, "job %s: the durable copy of step %lld has been COPYING for %lld ms, past its %lld ms timeout "
                    "(%d of its workers have not answered)",
                 job->id, (long long)job->flush_step, (long long)(d->now - j->copying_since),
                 (long long)cfg->ckpt_copy_timeout_ms, job->flush_pending);
    }
}

static void check_jobs(dst_t *d)
{
    tide_core_t *core = d->shell->core;
    cjob_t *j, *jt;
    tide_job_t *job = NULL;

    HASH_ITER(hh, d->chk->jobs, j, jt) {
        tide_job_t *cj;
        if (j->committed_deleted)
            continue; /* gone for good: its number is remembered only so that it is never given again */
        cj = tide_core_job_find(core, j->id);
        if (!cj) {
            if (j->acked && !j->committed_deleted && !j->live_deleted)
                dst_fail(d, "acknowledged job %s is gone from the scheduler", j->id);
            continue;
        }
        if (is_final(j->committed_state) && (int)cj->state != j->committed_state)
            dst_fail(d, "job %s is %s but was committed %s", j->id, tide_job_state_name(cj->state),
                     tide_job_state_name(j->committed_state));
        if (j->live_final && (int)cj->state != j->live_final)
            dst_fail(d, "job %s went from %s to %s", j->id, tide_job_state_name(j->live_final),
                     tide_job_state_name(cj->state));
        if (j->cancel_acked && cj->state != TIDE_JOB_CANCELLED)
            dst_fail(d, "job %s was cancelled (acknowledged) but is %s", j->id, tide_job_state_name(cj->state));
        if (is_final(cj->state))
            j->live_final = cj->state;
    }
    while ((job = tide_core_job_next(core, job))) {
        int64_t dur = job->durable_ckpt.step, last = job->last_ckpt.step;
        tide_list_t *pos;
        j = cjob(d->chk, job->id, false);
        if (!j)
            dst_fail(d, "job %s is in the scheduler but no client submitted it", job->id);
        if (dur >= 0 && dur > last)
            dst_fail(d, "job %s: durable checkpoint step %lld is beyond its last checkpoint step %lld", job->id,
                     (long long)dur, (long long)last);
        if (dur < j->live_durable)
            dst_fail(d, "job %s: durable checkpoint step went from %lld to %lld", job->id,
                     (long long)j->live_durable, (long long)dur);
        if (last < j->live_last)
            dst_fail(d, "job %s: last checkpoint step went from %lld to %lld", job->id, (long long)j->live_last,
                     (long long)last);
        j->live_durable = dur;
        j->live_last = last;
        check_timers(d, job, j);
        check_job_recovery(d, job);
        if (job->state != TIDE_JOB_RUNNING)
            continue;
        /* never two generations in the core either */
        tide_list_for_each(pos, &job->bound) {
            const tide_worker_t *w = tide_list_entry(pos, tide_worker_t, bound_node);
            if (w->generation != job->generation)
                dst_fail(d, "job %s runs generation %d while %s still holds its generation %d", job->id,
                         job->generation, w->id, w->generation);
        }
    }
}

static void check_placement(dst_t *d)
{
    tide_core_t *core = d->shell->core;
    const tide_job_t *job = NULL;

    while ((job = tide_core_job_next(core, job))) {
        const tide_job_spec_t *sp = &job->spec;
        const agent_t *first = NULL;
        tide_level_t level = level_of(sp);
        if (job->state != TIDE_JOB_RUNNING)
            continue;
        for (int32_t r = 0; r < job->n_ranks; r++) {
            const tide_job_rank_t *slot = &job->ranks[r];
            const agent_t *a;
            int32_t ded;
            if (!slot->worker)
                continue;
            if (!(a = world_agent_by_id(d->world, slot->worker_id)))
                dst_fail(d, "job %s rank %d is on %s, which is no worker of this world", job->id, r,
                         slot->worker_id);
            d->stats->placement_checks++;
            ded = dedication(core, pool_of(a));
            if (sp->pool && sp->pool[0] && strcmp(sp->pool, pool_of(a)) != 0)
                dst_fail(d, "job %s asks for pool %s; rank %d runs on %s in pool %s", job->id, sp->pool, r, a->id,
                         pool_of(a));
            if (ded >= 0 && ded != (int32_t)sp->priority)
                dst_fail(d, "job %s (%s) runs rank %d on %s in pool %s, dedicated to %s", job->id,
                         tide_prio_name(sp->priority), r, a->id, pool_of(a), tide_prio_name((tide_prio_t)ded));
            if (sp->memory_per_rank && a->mem < sp->memory_per_rank)
                dst_fail(d, "job %s needs %llu bytes per rank; rank %d runs on %s with %llu", job->id,
                         (unsigned long long)sp->memory_per_rank, r, a->id, (unsigned long long)a->mem);
            if (sp->device && sp->device[0] && !strcasestr(a->device, sp->device))
                dst_fail(d, "job %s asks for device %s; rank %d runs on %s (%s)", job->id, sp->device, r, a->id,
                         a->device);
            if (!first) {
                first = a;
            } else if (strcmp(pool_of(first), pool_of(a)) != 0 || strcmp(first->device, a->device) != 0 ||
                       first->mem != a->mem) {
                dst_fail(d, "job %s mixes shapes: %s (%s, %s, %llu) and %s (%s, %s, %llu)", job->id, first->id,
                         pool_of(first), first->device, (unsigned long long)first->mem, a->id, pool_of(a),
                         a->device, (unsigned long long)a->mem);
            }
            if (level != TIDE_LVL_SHAPE && first->dom[level] != a->dom[level])
                dst_fail(d, "job %s asks for one %s; its ranks run on %s (rack %s, switch %s) and %s (rack %s, "
                            "switch %s)",
                         job->id, tide_topology_name(sp->topology), first->id, first->rack, first->sw, a->id,
                         a->rack, a->sw);
        }
    }
}

/* A job that is not placed holds the shapes that match it and could hold it were they idle. */
static void model_hold(model_t *m, const tide_job_t *job, bool why_reserve, int *n_blocked,
                       int *n_blocked_reserve)
{
    for (int s = 0; s < m->n_shapes; s++) {
        if (m->s[s].blocked || m->s[s].usable == 0 || !model_matches(&m->s[s], &job->spec) ||
            model_max(m, s, level_of(&job->spec), false) < job->spec.min_workers)
            continue;
        m->s[s].blocked = true;
        m->s[s].blocked_reserve = why_reserve;
        (*n_blocked)++;
        *n_blocked_reserve += why_reserve;
    }
}

/* The scheduling pass, replayed on the model (docs/policies.md, "Queues" and "Placement"): classes from
 * the top, FIFO within; a job that is not placed holds the shapes that match it and could hold it were
 * they idle; a job that waits only for the reserve lets LOW work into the reserve's LOW-free part of its
 * shapes; once every shape is held the pass ends (for LOW work, at its first job that does not fit). A
 * pending job the pass would place is waiting though capacity allows. */
static void check_starvation(dst_t *d)
{
    tide_core_t *core = d->shell->core;
    model_t m, mnl; /* mnl: lent workers not free */
    cjob_t *j, *jt;
    int n_shapes = 0, n_blocked = 0, n_blocked_reserve = 0;
    bool done = false;

    model_build(d, &m);
    model_build_ex(d, &mnl, false);
    for (int s = 0; s < m.n_shapes; s++)
        n_shapes += m.s[s].usable > 0;
    HASH_ITER(hh, d->chk->jobs, j, jt) j->fit_seen = j->lent_fit_seen = false;
    for (int p = TIDE_PRIO_COUNT - 1; p >= 0 && !done; p--) {
        tide_list_t *pos;
        tide_list_for_each(pos, &core->queues[p]) {
            tide_job_t *job = tide_list_entry(pos, tide_job_t, queue_node);
            const tide_job_spec_t *sp = &job->spec;
            tide_level_t level = level_of(sp);
            int32_t limit, room = m.reserve - m.low_busy, limit_nl, room_nl = mnl.reserve - mnl.low_busy;
            /* The free workers as this job sees them. A replaced straggler's worker is excluded only while
             * the job fits without it: the core then places it there rather than letting it wait (seed
             * 1002677), so exclusions never make a job wait and the model ignores them. */
            const model_t *v = &m, *vn = &mnl;
            bool all_blocked = n_blocked >= n_shapes, matched = false, free_enough = false, blocked = false;
            bool fits_unlent = false;
            bool low = job->eff_priority == TIDE_PRIO_LOW, why_reserve;
            int fits_in = -1;
            if (all_blocked && (!low || n_blocked_reserve == 0)) {
                done = true;
                break;
            }
            if (!model_could_fit(d, &m, job))
                continue; /* it could never run now: it holds nothing */
            if (!tide_list_empty(&job->bound)) {
                /* its old ranks still stop: it waits, and holds the shapes it could use meanwhile */
                model_hold(&m, job, false, &n_blocked, &n_blocked_reserve);
                continue;
            }
            limit = model_limit(d, v, job);
            limit_nl = model_limit(d, vn, job);
            for (int s = 0; s < m.n_shapes; s++) {
                int32_t lim = limit, lim_nl = limit_nl;
                if (m.s[s].usable == 0 || !model_matches(&m.s[s], sp))
                    continue;
                matched = true;
                if (m.s[s].blocked) {
                    if (!m.s[s].blocked_reserve || !low || room < sp->min_workers) {
                        blocked = true;
                        continue;
                    }
                    lim = room < lim ? room : lim;
                    lim_nl = room_nl < lim_nl ? room_nl : lim_nl;
                }
                if (model_max(v, s, level, true) >= sp->min_workers)
                    free_enough = true;
                if (fits_in < 0 && model_fits(v, s, sp, lim))
                    fits_in = s;
                fits_unlent |= model_fits(vn, s, sp, lim_nl);
            }
            if (!matched)
                continue;
            d->stats->starvation_checks++;
            if (fits_in >= 0 && (j = cjob(d->chk, job->id, false))) {
                char why[200];
                j->fit_seen = true;
                if (j->fit_since < 0)
                    j->fit_since = d->now;
                else if (d->now - j->fit_since >= DST_STARVE_MS)
                    dst_fail(d, "job %s (%s, %d..%d GPUs, %s) has waited %lld ms though %d free GPU(s) of shape "
                                "(%s, %s, %llu GiB) fit it and no earlier job of its class or above holds them "
                                "(free %d, LOW-held %d, reserve %d; the core says: %s)",
                             job->id, tide_prio_name(job->eff_priority), sp->min_workers, sp->max_workers,
                             tide_topology_name(sp->topology), (long long)(d->now - j->fit_since),
                             v->s[fits_in].free, m.s[fits_in].pool, m.s[fits_in].device,
                             (unsigned long long)(m.s[fits_in].mem >> 30), m.n_free, m.low_busy, m.reserve,
                             tide_core_job_reason(core, job, why, sizeof(why)));
            }
            /* Burst: it fits only with workers lent to a job's high-load phase: the core takes them back at
             * once (after the pass), so they are being taken back (not free for this model) soon after. */
            if (fits_in >= 0 && !fits_unlent && (j = cjob(d->chk, job->id, false))) {
                char why[200];
                j->lent_fit_seen = true;
                if (j->lent_fit_since < 0)
                    j->lent_fit_since = d->now;
                else if (d->now - j->lent_fit_since > 1000)
                    dst_fail(d, "burst: job %s (%s, %d..%d GPUs) has waited %lld ms for workers lent to a burst in "
                                "shape (%s, %s, %llu GiB): they would fit it and are not being taken back (the core "
                                "says: %s)",
                             job->id, tide_prio_name(job->eff_priority), sp->min_workers, sp->max_workers,
                             (long long)(d->now - j->lent_fit_since), m.s[fits_in].pool, m.s[fits_in].device,
                             (unsigned long long)(m.s[fits_in].mem >> 30),
                             tide_core_job_reason(core, job, why, sizeof(why)));
            }
            (void)blocked;
            why_reserve = free_enough && limit < sp->min_workers;
            model_hold(&m, job, why_reserve, &n_blocked, &n_blocked_reserve);
            if (all_blocked) {
                done = true;
                break;
            }
        }
    }
    HASH_ITER(hh, d->chk->jobs, j, jt) {
        if (!j->fit_seen)
            j->fit_since = -1;
        if (!j->lent_fit_seen)
            j->lent_fit_since = -1;
    }
}

void chk_step(dst_t *d)
{
    for (int i = 0; i < d->world->n; i++) {
        const agent_t *a = &d->world->a[i];
        if (world_running(a) > 1)
            dst_fail(d, "%s runs %d ranks at once", a->id, world_running(a));
        check_one_job(d, a);
    }
    /* When the core emitted nothing, nothing it keeps moved, but its deadlines may have passed. */
    if (!d->shell->up || (!d->changed && d->now - d->checked_at < DST_CHECK_EVERY_MS))
        return;
    d->changed = false;
    d->checked_at = d->now;
    if (d->calm)
        check_steal_liveness(d, false);
    check_resize(d);
    check_hangs(d);
    check_drained(d);
    h_check_invariants(&d->shell->h);
    check_burst(d);
    check_jobs(d);
    check_placement(d);
    if (!d->sw.no_starvation)
        check_starvation(d);
}

/* A worker never runs two jobs: from the world's side, the live processes of one worker (its ranks,
 * lent slots, ranks told to stop that have not exited) are all of one job and one generation, and the
 * agent's count of them is right. O(entries) per worker, only while it runs something. */
static void check_one_job(dst_t *d, const agent_t *a)
{
    const wentry_t *first = NULL;
    int n = 0;

    if (!a->n_running)
        return;
    d->stats->exclusive_checks++;
    for (int k = 0; k < W_ENTRIES; k++) {
        const wentry_t *e = &a->e[k];
        if (!e->used || !e->running)
            continue;
        n++;
        if (!first)
            first = e;
        else if (strcmp(first->job, e->job) != 0 || first->gen != e->gen)
            dst_fail(d, "worker %s runs job %s generation %d (%s %d) and job %s generation %d (%s %d) at once",
                     a->id, first->job, first->gen, first->burst ? "lent slot" : "rank", first->rank, e->job, e->gen,
                     e->burst ? "lent slot" : "rank", e->rank);
    }
    if (n != a->n_running)
        dst_fail(d, "worker %s counts %d running process(es), its table has %d", a->id, a->n_running, n);
}

/* Phase-aware burst (docs/elastic.md, "Burst"): burst workers always return to the reserve. The core's
 * lending bookkeeping adds up (n_lent: lent slots with a worker; lent_workers: those not being taken back;
 * 0 <= lent_workers <= n_lent <= max_lent = ceil(n x burst_percent / 100); the lending list; lent_now);
 * a job that is not RUNNING lends nothing (a generation's end stops its lent workers with its ranks); a
 * worker bound to a lent slot of a running job's current generation is that slot's worker, in rank 0's
 * shape; every other bound worker is stopping a rank, and one whose lent process ended and was reported
 * is released soon after. */
static void check_burst(dst_t *d)
{
    tide_core_t *core = d->shell->core;
    checker_t *c = d->chk;
    tide_job_t *job = NULL;
    int32_t lent_now = 0, lending = 0, listed = 0;
    const tide_list_t *pos;

    d->stats->burst_checks++;
    while ((job = tide_core_job_next(core, job))) {
        int32_t bound = 0, active = 0, want;
        const agent_t *a0;
        if (job->lent_workers < 0 || job->lent_workers > job->n_lent || job->n_lent > job->max_lent)
            dst_fail(d, "burst: job %s has lent_workers %d, n_lent %d, max_lent %d (not 0 <= lent_workers <= n_lent "
                        "<= max_lent)",
                     job->id, job->lent_workers, job->n_lent, job->max_lent);
        if (tide_list_linked(&job->lend_node) != (job->n_lent > 0 || job->burst_to > 0))
            dst_fail(d, "burst: job %s with %d lent worker(s) bound (burst by resize to %d) is %son the lending list",
                     job->id, job->n_lent, job->burst_to, tide_list_linked(&job->lend_node) ? "" : "not ");
        lending += job->n_lent > 0 || job->burst_to > 0;
        lent_now += job->lent_workers;
        if (job->state != TIDE_JOB_RUNNING) {
            if (job->n_lent || job->lent_workers)
                dst_fail(d, "burst: job %s is %s with %d lent worker(s) bound (%d not taken back): a generation's end "
                            "stops them with its ranks",
                         job->id, tide_job_state_name(job->state), job->n_lent, job->lent_workers);
            continue;
        }
        want = job->spec.burst_percent > 0 ? (int32_t)(((int64_t)job->n_ranks * job->spec.burst_percent + 99) / 100)
                                           : 0;
        if (job->max_lent != want)
            dst_fail(d, "burst: job %s (%d ranks, burst %d%%) has %d lent slot(s), not %d", job->id, job->n_ranks,
                     job->spec.burst_percent, job->max_lent, want);
        a0 = job->n_ranks > 0 ? world_agent_by_id(d->world, job->ranks[0].worker_id) : NULL;
        for (int32_t r = job->n_ranks; r < job->n_ranks + job->max_lent; r++) {
            const tide_job_rank_t *s = &job->ranks[r];
            const tide_worker_t *w = s->worker;
            const agent_t *a;
            if (!w) {
                if (s->lent_stopping)
                    dst_fail(d, "burst: job %s lent slot %d is being taken back but has no worker", job->id, r);
                continue;
            }
            bound++;
            active += !s->lent_stopping;
            if (w->job != job || w->rank != r || w->generation != job->generation)
                dst_fail(d, "burst: job %s generation %d lent slot %d names %s, which is bound to %s g%d r%d", job->id,
                         job->generation, r, w->id, w->job ? w->job->id : "nothing", w->generation, w->rank);
            if (s->state != TIDE_RANK_LAUNCHED && s->state != TIDE_RANK_RUNNING)
                dst_fail(d, "burst: job %s lent slot %d on %s is in rank state %d", job->id, r, w->id, (int)s->state);
            a = world_agent_by_id(d->world, w->id);
            if (a && a0 &&
                (strcmp(pool_of(a), pool_of(a0)) != 0 || strcmp(a->device, a0->device) != 0 || a->mem != a0->mem))
                dst_fail(d, "burst: job %s lent slot %d is on %s (%s, %s, %llu GiB), not in rank 0's shape (%s: %s, "
                            "%s, %llu GiB)",
                         job->id, r, a->id, pool_of(a), a->device, (unsigned long long)(a->mem >> 30), a0->id,
                         pool_of(a0), a0->device, (unsigned long long)(a0->mem >> 30));
        }
        if (bound != job->n_lent || active != job->lent_workers)
            dst_fail(d, "burst: job %s has %d lent slot(s) with a worker (%d not being taken back), but n_lent %d and "
                        "lent_workers %d",
                     job->id, bound, active, job->n_lent, job->lent_workers);
        if (job->ranks_running > job->n_ranks || job->ranks_unstarted > job->n_ranks)
            dst_fail(d, "burst: job %s counts %d running and %d unstarted of %d ranks", job->id, job->ranks_running,
                     job->ranks_unstarted, job->n_ranks);
    }
    tide_list_for_each(pos, &core->lending) {
        const tide_job_t *j = tide_list_entry(pos, tide_job_t, lend_node);
        if ((j->state != TIDE_JOB_RUNNING || j->n_lent <= 0) &&
            (j->burst_to <= 0 || (j->state != TIDE_JOB_RUNNING && j->state != TIDE_JOB_PENDING)))
            dst_fail(d, "burst: job %s (%s, %d lent, burst by resize to %d) is on the lending list", j->id,
                     tide_job_state_name(j->state), j->n_lent, j->burst_to);
        listed++;
    }
    if (listed != lending)
        dst_fail(d, "burst: %d job(s) on the lending list, %d with lent workers bound", listed, lending);
    if (lent_now != core->burst_stats.lent_now)
        dst_fail(d, "burst: the jobs have %d lent workers not being taken back; the counters say %d", lent_now,
                 core->burst_stats.lent_now);
    for (int i = 0; i < d->world->n; i++) {
        const agent_t *a = &d->world->a[i];
        const tide_worker_t *w = tide_core_worker_find(core, a->id);
        const tide_job_t *j = w ? w->job : NULL;
        const wentry_t *e = NULL;
        if (j && j->state == TIDE_JOB_RUNNING && w->generation == j->generation && w->rank >= j->n_ranks &&
            (w->rank >= j->n_ranks + j->max_lent || j->ranks[w->rank].worker != w))
            dst_fail(d, "burst: %s is bound to job %s generation %d slot %d, which is not its (%d ranks, %d lent "
                        "slots)",
                     w->id, j->id, w->generation, w->rank, j->n_ranks, j->max_lent);
        /* returned: a lent process that ended, and whose end the scheduler was told, frees its worker */
        for (int k = 0; j && k < W_ENTRIES && !e; k++)
            if (a->e[k].used && a->e[k].burst && a->e[k].gen == w->generation && a->e[k].rank == w->rank &&
                strcmp(a->e[k].job, j->id) == 0)
                e = &a->e[k];
        if (!e || e->running || !e->reported || !a->up || a->frozen || !a->welcomed || !w->connected) {
            c->unreturned_since[i] = -1;
            continue;
        }
        if (c->unreturned_since[i] < 0)
            c->unreturned_since[i] = d->now;
        else if (d->now - c->unreturned_since[i] > 15000)
            dst_fail(d, "burst workers always return: %s is still bound to job %s g%d burst slot %d %lld ms after its "
                        "process exited (%d) and the exit was reported",
                     a->id, j->id, w->generation, w->rank, (long long)(d->now - c->unreturned_since[i]), e->code);
    }
}

/* --- the end --- */

static bool job_done(dst_t *d, const model_t *m, const tide_job_t *job)
{
    model_t mx;
    cjob_t *j;

    if (is_final(job->state) || (job->state == TIDE_JOB_PENDING && !model_could_fit(d, m, job)))
        return true;
    if (job->state != TIDE_JOB_PENDING || job->n_exclude == 0 || d->sw.strict[10])
        return false;
    /* KB10 (dst.h): it could run were its excluded workers not excluded, never with them */
    model_without(m, job, true, &mx);
    if (model_could_fit(d, &mx, job))
        return false;
    if ((j = cjob(d->chk, job->id, false)) && !j->kb10) {
        j->kb10 = true;
        d->stats->kb10_seen++;
    }
    return true;
}

bool chk_settled(dst_t *d)
{
    tide_core_t *core;
    tide_job_t *job = NULL;
    tide_worker_t *w, *tmp;
    model_t m;

    if (!d->shell->up)
        return false;
    core = d->shell->core;
    for (int i = 0; i < d->world->n; i++) {
        const agent_t *a = &d->world->a[i];
        /* Welcomed on a stream it has not seen die yet, by a scheduler that restarted since: the new one does
         * not know it until it notices and registers again (seed 1090790). */
        if (!a->up || !a->welcomed || world_running(a) > 0 || !tide_core_worker_find(core, a->id))
            return false;
    }
    HASH_ITER(hh, core->workers, w, tmp) {
        if (!w->connected || w->state != TIDE_WORKER_READY || w->job || w->n_stale)
            return false;
    }
    model_build(d, &m);
    while ((job = tide_core_job_next(core, job)))
        if (!job_done(d, &m, job))
            return false;
    return true;
}

void chk_final(dst_t *d)
{
    tide_core_t *core;
    tide_job_t *job = NULL;
    tide_worker_t *w, *tmp;
    model_t m;
    char reason[256];

    if (!d->shell->up)
        dst_fail(d, "the scheduler is still down at the end");
    core = d->shell->core;
    h_check_invariants(&d->shell->h);
    check_burst(d);
    check_steal_liveness(d, true);
    model_build(d, &m);
    while ((job = tide_core_job_next(core, job))) {
        if (!job_done(d, &m, job))
            dst_fail(d, "job %s is still %s after the world was left alone: %s", job->id,
                     tide_job_state_name(job->state), tide_core_job_reason(core, job, reason, sizeof(reason)));
    }
    for (int i = 0; i < d->world->n; i++) {
        const agent_t *a = &d->world->a[i];
        if (world_running(a) > 0)
            dst_fail(d, "%s still runs a rank after the world was left alone", a->id);
        if (!(w = tide_core_worker_find(core, a->id)))
            dst_fail(d, "worker %s is unknown to the scheduler at the end", a->id);
    }
    HASH_ITER(hh, core->workers, w, tmp) {
        if (!w->connected || w->state != TIDE_WORKER_READY || w->job || w->n_stale)
            dst_fail(d, "worker %s is %s%s%s%s at the end, not free", w->id, tide_worker_state_name(w->state),
                     w->connected ? "" : ", disconnected", w->job ? ", bound to a job" : "",
                     w->n_stale ? ", stopping a stale rank" : "");
    }
}

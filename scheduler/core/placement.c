/* Gang placement (docs/policies.md, "Placement"): all or nothing for min_workers, up to max_workers, in
 * one shape that matches the job (pool open to its class, device, memory per rank), never in a shape a
 * higher job was refused in this pass, and for work above LOW never into the headroom reserve. Locality:
 * the best-fitting node, else rack, else switch, else the shape's domains with the most free workers
 * first; a job's topology bounds the level. Ranks come out grouped by node, GPUs ascending, so LOCAL_RANK
 * follows the GPU index. O(buckets + workers chosen + children sorted): never a scan of the fleet. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

tide_level_t tide__job_level(const tide_job_t *job)
{
    switch (job->spec.topology) {
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

static int cmp_free_desc(const void *a, const void *b)
{
    const tide_domain_t *x = *(tide_domain_t *const *)a, *y = *(tide_domain_t *const *)b;
    if (x->n_free != y->n_free)
        return x->n_free > y->n_free ? -1 : 1;
    return strcmp(x->key, y->key);
}

static tide_domain_t **scratch(tide_core_t *core, size_t n)
{
    if (n > core->dscratch_cap) {
        core->dscratch_cap = n * 2;
        core->dscratch = tide_xrealloc(core->dscratch, core->dscratch_cap * sizeof(*core->dscratch));
    }
    return core->dscratch;
}

/* Takes want workers from d (want <= d->n_free): its fullest children first. Returns the count. */
static int32_t fill(tide_core_t *core, tide_domain_t *d, int32_t want, tide_worker_t **ws, int32_t at)
{
    int32_t got = 0;
    size_t n = 0, base;
    tide_list_t *pos;
    tide_domain_t **kids;

    if (d->level == TIDE_LVL_NODE) {
        tide_list_for_each(pos, &d->free) {
            if (got == want)
                break;
            ws[at + got++] = tide_list_entry(pos, tide_worker_t, free_node);
        }
        return got;
    }
    /* The scratch is a stack: children of d sit above the entries of its callers. */
    tide_list_for_each(pos, &d->children) n++;
    base = core->dscratch_used;
    kids = scratch(core, base + n) + base;
    n = 0;
    tide_list_for_each(pos, &d->children) {
        tide_domain_t *c = tide_list_entry(pos, tide_domain_t, child_node);
        if (c->n_free > 0)
            kids[n++] = c;
    }
    qsort(kids, n, sizeof(*kids), cmp_free_desc);
    core->dscratch_used = base + n;
    for (size_t i = 0; i < n && got < want; i++) {
        tide_domain_t *c = core->dscratch[base + i];
        int32_t take = want - got < c->n_free ? want - got : c->n_free;
        got += fill(core, c, take, ws, at + got);
    }
    core->dscratch_used = base;
    return got;
}

/* Spread over the whole shape: its switches with the most free workers first. */
static int32_t fill_shape(tide_core_t *core, tide_shape_t *s, int32_t want, tide_worker_t **ws)
{
    int32_t got = 0;
    size_t n = 0;
    tide_domain_t *d, *tmp, **sw;

    HASH_ITER(hh, s->domains[TIDE_LVL_SWITCH], d, tmp) {
        if (d->n_free > 0)
            n++;
    }
    sw = scratch(core, n);
    n = 0;
    HASH_ITER(hh, s->domains[TIDE_LVL_SWITCH], d, tmp) {
        if (d->n_free > 0)
            sw[n++] = d;
    }
    qsort(sw, n, sizeof(*sw), cmp_free_desc);
    core->dscratch_used = n;
    for (size_t i = 0; i < n && got < want; i++) {
        tide_domain_t *c = core->dscratch[i];
        int32_t take = want - got < c->n_free ? want - got : c->n_free;
        got += fill(core, c, take, ws, got);
    }
    core->dscratch_used = 0;
    return got;
}

/* The most workers above LOW may take now: free ones, as long as free + LOW-held stays >= reserve. */
int32_t tide__reserve_for(const tide_core_t *core, const tide_job_t *job)
{
    if (job->eff_priority == TIDE_PRIO_LOW)
        return 0;
    /* A job queued again after a lost rank may take the hot spares: that is what they are for. And its own
     * burst room: counted in the reserve while it runs (a move off a GPU predicted to fail is weighed then),
     * gone from it once it is queued again; a large run's share otherwise holds back every free GPU it
     * could move to, and a prediction never turns into a move (docs/goodput.md). */
    if (job->recovering) {
        int32_t r = core->reserve.gpus - core->reserve.spares - (int32_t)ceil(job->burst_share - 1e-9);
        return r > 0 ? r : 0;
    }
    return core->reserve.gpus;
}

int32_t tide__reserve_limit(const tide_core_t *core, const tide_job_t *job)
{
    int32_t slack, reserve = tide__reserve_for(core, job);

    if (reserve <= 0)
        return core->n_free;
    slack = core->n_free + core->low_busy - reserve;
    return slack < core->n_free ? (slack > 0 ? slack : 0) : core->n_free;
}

static int32_t place_in_shape(tide_core_t *core, tide_shape_t *s, const tide_job_t *job, int32_t limit,
                              tide_worker_t **ws)
{
    tide_level_t level = tide__job_level(job);
    int32_t k, most;
    tide_domain_t *d;

    most = tide__shape_max_free(s, level);
    k = tide__job_size_cap(job); /* max_workers, or less: a requested size, a resize */
    if (k > most)
        k = most;
    if (k > limit)
        k = limit;
    if (k < job->spec.min_workers || k <= 0)
        return 0;
    for (int l = TIDE_LVL_NODE; l < TIDE_LVL_DOMAINS && l <= (int)level; l++) {
        if ((d = tide__shape_best_fit(s, (tide_level_t)l, k)))
            return fill(core, d, k, ws, 0);
    }
    if (level == TIDE_LVL_SHAPE)
        return fill_shape(core, s, k, ws);
    return 0; /* unreachable: most >= k means a domain of that level fits */
}

int32_t tide__place_near(tide_core_t *core, tide_worker_t *w0, tide_level_t level, int32_t k, tide_worker_t **ws)
{
    tide_domain_t *d = NULL;
    int32_t have;

    if (!w0 || !w0->dom || k <= 0)
        return 0;
    /* The nearest domain around w0 (its node, rack, switch, up to level) that has k free; else the
     * largest of them, partly. */
    for (int l = TIDE_LVL_NODE; l < TIDE_LVL_DOMAINS && l <= (int)level; l++) {
        tide_domain_t *c = tide__domain_at(w0, (tide_level_t)l);
        if (!c)
            continue;
        d = c;
        if (c->n_free >= k)
            return fill(core, c, k, ws, 0);
    }
    if (level == TIDE_LVL_SHAPE) {
        have = w0->dom->shape->n_free;
        return fill_shape(core, w0->dom->shape, k < have ? k : have, ws);
    }
    if (!d || d->n_free <= 0)
        return 0;
    return fill(core, d, d->n_free, ws, 0);
}

int32_t tide__place(tide_core_t *core, tide_job_t *job, tide_worker_t **ws, tide_wait_t *why)
{
    int32_t limit = tide__reserve_limit(core, job);
    bool matched = false, free_enough = false, blocked = false;
    tide_list_t *pos;

    tide_list_for_each(pos, &core->shape_list) {
        tide_shape_t *s = tide_list_entry(pos, tide_shape_t, link);
        int32_t n, lim = limit;
        if (s->n_usable == 0 || !tide__shape_matches(core, s, job))
            continue;
        matched = true;
        if (s->blocked_pass == core->pass && s->blocked_prio >= job->eff_priority) {
            /* Held for an earlier job. When that job waits only for the headroom reserve, LOW work
             * may still take the part of the reserve that no LOW rank holds: free + LOW-held stays
             * the same, so the earlier job's share of the free GPUs is untouched. */
            int32_t room = core->reserve.gpus - core->low_busy;
            if (!s->blocked_reserve || job->eff_priority != TIDE_PRIO_LOW ||
                room < job->spec.min_workers) {
                blocked = true;
                continue;
            }
            lim = room < lim ? room : lim;
        }
        if (tide__shape_max_free(s, tide__job_level(job)) >= job->spec.min_workers)
            free_enough = true;
        if ((n = place_in_shape(core, s, job, lim, ws)) > 0) {
            *why = TIDE_WAIT_NONE;
            return n;
        }
    }
    if (!matched)
        *why = TIDE_WAIT_NO_MATCH;
    else if (free_enough && limit < job->spec.min_workers)
        *why = TIDE_WAIT_RESERVE;
    else if (blocked && !free_enough)
        *why = TIDE_WAIT_BEHIND;
    else
        *why = TIDE_WAIT_CAPACITY;
    return 0;
}

bool tide__could_fit(tide_core_t *core, const tide_job_t *job)
{
    tide_level_t level = tide__job_level(job);
    /* On the idle cluster no job runs, so no burst share is held: only the hot spares. */
    int32_t reserve = job->eff_priority == TIDE_PRIO_LOW || job->recovering ? 0 : core->reserve.spares;
    tide_list_t *pos;

    if (job->spec.min_workers > core->n_usable - reserve)
        return false;
    tide_list_for_each(pos, &core->shape_list) {
        tide_shape_t *s = tide_list_entry(pos, tide_shape_t, link);
        if (s->n_usable >= job->spec.min_workers && tide__shape_matches(core, s, job) &&
            tide__shape_max_usable(s, level) >= job->spec.min_workers)
            return true;
    }
    return false;
}

int32_t tide__largest_fit(tide_core_t *core, const tide_job_t *job)
{
    tide_level_t level = tide__job_level(job);
    int32_t best = 0;
    tide_list_t *pos;

    tide_list_for_each(pos, &core->shape_list) {
        tide_shape_t *s = tide_list_entry(pos, tide_shape_t, link);
        int32_t m;
        if (!tide__shape_matches(core, s, job))
            continue;
        m = tide__shape_max_free(s, level);
        if (m > best)
            best = m;
    }
    return best;
}

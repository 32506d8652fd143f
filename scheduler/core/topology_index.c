/* The placement index: shapes (pool, device, memory) and, inside each, domains node -> rack -> switch
 * with their free and usable counts and free-count buckets. Invariants: a schedulable worker is in its
 * node domain's free list; every domain's n_free / n_usable is the sum over its workers; a domain with
 * n_free > 0 is in exactly one bucket of its level. Every update is O(levels), never a scan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core_private.h"
#include "xmalloc.h"

static const int32_t n_buckets[TIDE_LVL_DOMAINS] = {TIDE_NODE_BUCKETS, TIDE_DOMAIN_BUCKETS,
                                                    TIDE_DOMAIN_BUCKETS};

static const char *label(const tide_worker_t *w, const char *key)
{
    for (size_t i = 0; i < w->n_labels; i++)
        if (strcmp(w->labels[i].key, key) == 0)
            return w->labels[i].value;
    return NULL;
}

static int32_t pool_dedication(const tide_core_t *core, const char *pool)
{
    for (int32_t i = 0; i < core->cfg.n_pools; i++)
        if (strcmp(core->cfg.pools[i].name, pool) == 0)
            return core->cfg.pools[i].dedicated;
    return -1;
}

static tide_shape_t *shape_get(tide_core_t *core, const char *pool, const char *device, uint64_t mem)
{
    char *key = tide_xasprintf("%s\x1f%s\x1f%llu", pool, device, (unsigned long long)mem);
    tide_shape_t *s;
    tide_list_t *pos;

    HASH_FIND_STR(core->shapes, key, s);
    if (s) {
        free(key);
        return s;
    }
    s = tide_xcalloc(1, sizeof(*s));
    s->key = key;
    s->pool = tide_xstrdup(pool);
    s->device = tide_xstrdup(device);
    s->memory_bytes = mem;
    s->dedicated = pool_dedication(core, pool);
    for (int l = 0; l < TIDE_LVL_DOMAINS; l++) {
        s->buckets[l] = tide_xcalloc((size_t)n_buckets[l] + 1, sizeof(tide_list_t));
        for (int32_t b = 0; b <= n_buckets[l]; b++)
            tide_list_init(&s->buckets[l][b]);
    }
    HASH_ADD_KEYPTR(hh, core->shapes, s->key, strlen(s->key), s);
    /* Dedicated pools first (a job open to one uses it before shared capacity), then by key. */
    pos = core->shape_list.next;
    while (pos != &core->shape_list) {
        tide_shape_t *o = tide_list_entry(pos, tide_shape_t, link);
        bool od = o->dedicated >= 0, sd = s->dedicated >= 0;
        if ((sd && !od) || (sd == od && strcmp(o->key, s->key) > 0))
            break;
        pos = pos->next;
    }
    tide_list__insert(&s->link, pos->prev, pos);
    core->n_shapes++;
    return s;
}

static tide_domain_t *domain_get(tide_shape_t *s, tide_level_t level, const char *key, tide_domain_t *child)
{
    tide_domain_t *d;

    HASH_FIND_STR(s->domains[level], key, d);
    if (!d) {
        d = tide_xcalloc(1, sizeof(*d));
        d->key = tide_xstrdup(key);
        d->level = level;
        d->shape = s;
        tide_list_init(&d->children);
        tide_list_init(&d->child_node);
        tide_list_init(&d->free);
        tide_list_init(&d->bucket);
        HASH_ADD_KEYPTR(hh, s->domains[level], d->key, strlen(d->key), d);
    }
    if (child && !child->parent) {
        child->parent = d;
        tide_list_push_back(&d->children, &child->child_node);
    }
    return d;
}

static void rebucket(tide_domain_t *d)
{
    int32_t cap = n_buckets[d->level];

    tide_list_remove(&d->bucket);
    if (d->n_free > 0)
        tide_list_push_back(&d->shape->buckets[d->level][d->n_free < cap ? d->n_free : cap], &d->bucket);
}

void tide__index_free(tide_core_t *core, tide_worker_t *w, int delta)
{
    tide_domain_t *d = w->dom;

    if (delta > 0) {
        /* Keep the node's free list in gpu_index order: ranks on a node get ascending GPUs. */
        tide_list_t *pos = d->free.prev;
        while (pos != &d->free && tide_list_entry(pos, tide_worker_t, free_node)->gpu_index > w->gpu_index)
            pos = pos->prev;
        tide_list__insert(&w->free_node, pos, pos->next);
    } else {
        tide_list_remove(&w->free_node);
    }
    for (; d; d = d->parent) {
        d->n_free += delta;
        rebucket(d);
    }
    w->dom->shape->n_free += delta;
    core->n_free += delta;
}

void tide__index_usable(tide_core_t *core, tide_worker_t *w, int delta)
{
    core->usable_stamp++;
    for (tide_domain_t *d = w->dom; d; d = d->parent)
        d->n_usable += delta;
    w->dom->shape->n_usable += delta;
    w->dom->shape->max_dirty = true;
}

void tide__index_worker(tide_core_t *core, tide_worker_t *w)
{
    const char *pool = label(w, TIDE_LABEL_POOL), *rack = label(w, TIDE_LABEL_RACK);
    const char *sw = label(w, TIDE_LABEL_SWITCH), *na = label(w, TIDE_LABEL_NEW_ARCH);
    tide_shape_t *s;
    tide_domain_t *node, *r, *x;
    char *rkey, *skey;
    bool was_free = tide_list_linked(&w->free_node);

    w->new_arch = na && strcmp(na, "false") != 0 && strcmp(na, "0") != 0;
    s = shape_get(core, pool && pool[0] ? pool : TIDE_POOL_DEFAULT, w->device ? w->device : "",
                  w->memory_bytes);
    rkey = rack && rack[0] ? tide_xasprintf("r:%s", rack) : tide_xasprintf("n:%s", w->node_name);
    skey = sw && sw[0] ? tide_xasprintf("s:%s", sw) : tide_xstrdup(rkey);
    node = domain_get(s, TIDE_LVL_NODE, w->node_name, NULL);
    r = domain_get(s, TIDE_LVL_RACK, rkey, node);
    x = domain_get(s, TIDE_LVL_SWITCH, skey, r);
    (void)x;
    free(rkey);
    free(skey);
    if (w->dom == node)
        return;
    if (w->dom) {
        if (was_free)
            tide__index_free(core, w, -1);
        if (w->usable)
            tide__index_usable(core, w, -1);
    }
    w->dom = node;
    if (was_free)
        tide__index_free(core, w, +1);
    if (w->usable)
        tide__index_usable(core, w, +1);
}

tide_domain_t *tide__domain_at(const tide_worker_t *w, tide_level_t level)
{
    tide_domain_t *d = w->dom;

    if (level >= TIDE_LVL_DOMAINS)
        return NULL;
    for (int l = 0; d && l < (int)level; l++)
        d = d->parent;
    return d;
}

int32_t tide__shape_max_free(const tide_shape_t *s, tide_level_t level)
{
    int32_t cap, best = 0;
    tide_list_t *pos;

    if (level >= TIDE_LVL_DOMAINS)
        return s->n_free;
    cap = n_buckets[level];
    if (!tide_list_empty(&s->buckets[level][cap])) {
        tide_list_for_each(pos, &s->buckets[level][cap]) {
            tide_domain_t *d = tide_list_entry(pos, tide_domain_t, bucket);
            if (d->n_free > best)
                best = d->n_free;
        }
        return best;
    }
    for (int32_t b = cap - 1; b > 0; b--)
        if (!tide_list_empty(&s->buckets[level][b]))
            return b;
    return 0;
}

int32_t tide__shape_max_usable(tide_shape_t *s, tide_level_t level)
{
    if (level >= TIDE_LVL_DOMAINS)
        return s->n_usable;
    if (s->max_dirty) {
        /* O(domains of the shape), only after a worker came or went. */
        for (int l = 0; l < TIDE_LVL_DOMAINS; l++) {
            tide_domain_t *d, *tmp;
            s->max_usable[l] = 0;
            HASH_ITER(hh, s->domains[l], d, tmp) {
                if (d->n_usable > s->max_usable[l])
                    s->max_usable[l] = d->n_usable;
            }
        }
        s->max_dirty = false;
    }
    return s->max_usable[level];
}

tide_domain_t *tide__shape_best_fit(const tide_shape_t *s, tide_level_t level, int32_t k)
{
    int32_t cap = n_buckets[level];
    tide_domain_t *best = NULL;
    tide_list_t *pos;

    if (k < 1)
        k = 1;
    for (int32_t b = k < cap ? k : cap; b < cap; b++)
        if (!tide_list_empty(&s->buckets[level][b]))
            return tide_list_entry(s->buckets[level][b].next, tide_domain_t, bucket);
    tide_list_for_each(pos, &s->buckets[level][cap]) {
        tide_domain_t *d = tide_list_entry(pos, tide_domain_t, bucket);
        if (d->n_free >= k && (!best || d->n_free < best->n_free))
            best = d;
    }
    return best;
}

bool tide__shape_matches(const tide_core_t *core, const tide_shape_t *s, const tide_job_t *job)
{
    const tide_job_spec_t *sp = &job->spec;

    (void)core;
    if (sp->pool && sp->pool[0]) {
        if (strcmp(sp->pool, s->pool) != 0)
            return false;
    }
    if (s->dedicated >= 0 && s->dedicated != (int32_t)sp->priority)
        return false;
    if (sp->memory_per_rank && s->memory_bytes < sp->memory_per_rank)
        return false;
    if (sp->device && sp->device[0] && !strcasestr(s->device, sp->device))
        return false;
    return true;
}

static void domain_free(tide_domain_t *d)
{
    free(d->key);
    free(d);
}

void tide__index_free_all(tide_core_t *core)
{
    tide_shape_t *s, *stmp;

    HASH_ITER(hh, core->shapes, s, stmp) {
        HASH_DEL(core->shapes, s);
        for (int l = 0; l < TIDE_LVL_DOMAINS; l++) {
            tide_domain_t *d, *dtmp;
            HASH_ITER(hh, s->domains[l], d, dtmp) {
                HASH_DEL(s->domains[l], d);
                domain_free(d);
            }
            free(s->buckets[l]);
        }
        free(s->key);
        free(s->pool);
        free(s->device);
        free(s);
    }
    free(core->dscratch);
}

/* "mem:": the in-tree fake store, in memory, with the sqlite backend's semantics (revisions,
 * compares, atomic batches, deferred completion) plus fault injection for tests. Invariant: entries
 * are sorted by key bytes (strcmp order, as SQLite's BINARY collation) and every stored key has 1
 * <= create_rev <= mod_rev <= revision. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "store_private.h"
#include "xmalloc.h"

typedef struct entry {
    char *key;
    uint8_t *value; /* NULL when value_len is 0 */
    size_t value_len;
    int64_t create_rev;
    int64_t mod_rev;
} entry_t;

typedef struct mem {
    tide__store_queue_t *q;
    entry_t **v; /* sorted by key */
    size_t n, cap;
    int64_t revision;
    int fail_status; /* injected: the next fail_n commits complete with fail_status */
    int fail_n;
} mem_t;

/* The index of key, or where it would go (*found false). */
static size_t lower_bound(const mem_t *m, const char *key, bool *found)
{
    size_t lo = 0, hi = m->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(m->v[mid]->key, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (found)
        *found = lo < m->n && strcmp(m->v[lo]->key, key) == 0;
    return lo;
}

static entry_t *lookup(const mem_t *m, const char *key)
{
    bool found;
    size_t i = lower_bound(m, key, &found);

    return found ? m->v[i] : NULL;
}

static void entry_free(entry_t *e)
{
    if (!e)
        return;
    free(e->key);
    free(e->value);
    free(e);
}

static uint8_t *copy_value(const uint8_t *value, size_t len)
{
    uint8_t *p;

    if (len == 0)
        return NULL;
    p = tide_xmalloc(len);
    memcpy(p, value, len);
    return p;
}

static void put(mem_t *m, const tide__store_op_t *op, int64_t rev)
{
    bool found;
    size_t i = lower_bound(m, op->key, &found);
    entry_t *e;

    if (found) {
        e = m->v[i];
        free(e->value);
        e->value = copy_value(op->value, op->value_len);
        e->value_len = op->value_len;
        e->mod_rev = rev;
        return;
    }
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 64;
        m->v = tide_xrealloc(m->v, m->cap * sizeof(*m->v));
    }
    memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(*m->v));
    e = tide_xmalloc(sizeof(*e));
    e->key = tide_xstrdup(op->key);
    e->value = copy_value(op->value, op->value_len);
    e->value_len = op->value_len;
    e->create_rev = rev;
    e->mod_rev = rev;
    m->v[i] = e;
    m->n++;
}

static void del(mem_t *m, const char *key)
{
    bool found;
    size_t i = lower_bound(m, key, &found);

    if (!found)
        return;
    entry_free(m->v[i]);
    memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(*m->v));
    m->n--;
}

static int exec_commit(void *impl, const tide_store_batch_t *b, int64_t *revision,
                       tide_error_t *err)
{
    mem_t *m = impl;
    bool changes = false;

    *revision = m->revision;
    /* Check everything before changing anything: a batch applies whole or not at all. */
    for (size_t i = 0; i < b->ncmps; i++) {
        const entry_t *e = lookup(m, b->cmps[i].key);
        int64_t cur = e ? e->mod_rev : 0;

        if (cur != b->cmps[i].mod_rev) {
            tide_errprintf(err,
                           "compare failed: key \"%s\" has mod_rev %" PRId64 ", expected %" PRId64,
                           b->cmps[i].key, cur, b->cmps[i].mod_rev);
            return -ECANCELED;
        }
    }
    for (size_t i = 0; i < b->nops && !changes; i++)
        changes = b->ops[i].kind == TIDE__STORE_PUT || lookup(m, b->ops[i].key) != NULL;
    if (!changes)
        return 0; /* like etcd: a batch that changes nothing does not bump the revision */

    m->revision++;
    for (size_t i = 0; i < b->nops; i++) {
        if (b->ops[i].kind == TIDE__STORE_PUT)
            put(m, &b->ops[i], m->revision);
        else
            del(m, b->ops[i].key);
    }
    *revision = m->revision;
    return 0;
}

static int exec_range(void *impl, const char *prefix, tide__store_kvs_t *out, int64_t *revision,
                      tide_error_t *err)
{
    mem_t *m = impl;
    size_t plen = strlen(prefix);

    for (size_t i = lower_bound(m, prefix, NULL); i < m->n; i++) {
        const entry_t *e = m->v[i];

        if (strncmp(e->key, prefix, plen) != 0)
            break;
        tide__store_kvs_add(out, e->key, strlen(e->key), e->value, e->value_len, e->create_rev,
                            e->mod_rev);
    }
    *revision = m->revision;
    return 0;
}

static int64_t exec_revision(void *impl)
{
    return ((const mem_t *)impl)->revision;
}

static const tide__store_exec_t mem_exec = {
    .commit = exec_commit,
    .range = exec_range,
    .revision = exec_revision,
};

/* The location after "mem:" is ignored (it may name the store for the reader). */
static int mem_open(struct uv_loop_s *loop, const char *location, void **impl, tide_error_t *err)
{
    mem_t *m = tide_xcalloc(1, sizeof(*m));
    int rc;

    rc = tide__store_queue_new(loop, &mem_exec, m, &m->q);
    if (rc < 0) {
        tide_errprintf(err, "mem: store: cannot set up the completion queue (%d)", rc);
        free(m);
        return -EIO;
    }
    *impl = m;
    return 0;
}

static void mem_close(void *impl)
{
    mem_t *m = impl;

    if (!m)
        return;
    tide__store_queue_close(m->q);
    for (size_t i = 0; i < m->n; i++)
        entry_free(m->v[i]);
    free(m->v);
    free(m);
}

static int mem_range(void *impl, const char *prefix, tide_store_range_cb cb, void *ud)
{
    mem_t *m = impl;

    tide__store_queue_range(m->q, prefix, cb, ud);
    return 0;
}

static int mem_commit(void *impl, tide_store_batch_t *b, tide_store_commit_cb cb, void *ud)
{
    mem_t *m = impl;

    /* Counted when the commit is made, so "the next n commits" means the next n calls. */
    if (m->fail_n > 0) {
        m->fail_n--;
        tide__store_queue_commit(m->q, b, cb, ud, m->fail_status, "mem: injected failure");
        return 0;
    }
    tide__store_queue_commit(m->q, b, cb, ud, 0, NULL);
    return 0;
}

int tide__store_mem_inject_failure(void *impl, int status, int n)
{
    mem_t *m = impl;

    m->fail_status = status;
    m->fail_n = n;
    return 0;
}

const tide_store_ops_t tide__store_mem_ops = {
    .scheme = "mem",
    .open = mem_open,
    .close = mem_close,
    .range = mem_range,
    .commit = mem_commit,
};

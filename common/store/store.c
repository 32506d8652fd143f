/* The store front end: parses "scheme:location" URLs, dispatches to a backend's ops struct from one
 * static table, and builds batches. Invariant: a batch holds at most one op per key (the latest),
 * so every backend applies a batch as a set of independent key updates, in any order. */
#include "store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store_private.h"
#include "xmalloc.h"

struct tide_store {
    const tide_store_ops_t *ops;
    void *impl;
};

/* Every backend, by scheme. Adding one is one line here. */
static const tide_store_ops_t *const backends[] = {
    &tide__store_sqlite_ops,
    &tide__store_mem_ops,
    &tide__store_etcd_ops,
};

static const tide_store_ops_t *find_backend(const char *scheme, size_t len)
{
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        if (strlen(backends[i]->scheme) == len && memcmp(backends[i]->scheme, scheme, len) == 0)
            return backends[i];
    }
    return NULL;
}

int tide_store_open(struct uv_loop_s *loop, const char *url, tide_store_t **out, tide_error_t *err)
{
    const tide_store_ops_t *ops;
    const char *colon;
    void *impl = NULL;
    int rc;

    *out = NULL;
    if (!loop || !url) {
        tide_errprintf(err, "store: no loop or URL");
        return -EINVAL;
    }
    colon = strchr(url, ':');
    if (!colon || colon == url) {
        tide_errprintf(err, "store URL \"%s\" has no scheme (expected sqlite:PATH, mem: or %s)",
                       url, "etcd://HOST:PORT");
        return -EINVAL;
    }
    ops = find_backend(url, (size_t)(colon - url));
    if (!ops) {
        tide_errprintf(err, "store URL \"%s\": unknown scheme \"%.*s\" (expected %s)", url,
                       (int)(colon - url), url, "sqlite, mem or etcd");
        return -EINVAL;
    }
    rc = ops->open(loop, colon + 1, &impl, err);
    if (rc < 0)
        return rc;
    *out = tide_xmalloc(sizeof(**out));
    (*out)->ops = ops;
    (*out)->impl = impl;
    return 0;
}

void tide_store_close(tide_store_t *s)
{
    if (!s)
        return;
    s->ops->close(s->impl);
    free(s);
}

const char *tide_store_scheme(const tide_store_t *s)
{
    return s->ops->scheme;
}

int tide_store_range(tide_store_t *s, const char *prefix, tide_store_range_cb cb, void *ud)
{
    if (!s || !prefix || !cb)
        return -EINVAL;
    return s->ops->range(s->impl, prefix, cb, ud);
}

int tide_store_commit(tide_store_t *s, tide_store_batch_t *b, tide_store_commit_cb cb, void *ud)
{
    if (!s || !b || !cb)
        goto invalid;
    for (size_t i = 0; i < b->nops; i++) {
        if (b->ops[i].key_len == 0)
            goto invalid;
    }
    for (size_t i = 0; i < b->ncmps; i++) {
        if (b->cmps[i].key[0] == '\0' || b->cmps[i].mod_rev < 0)
            goto invalid;
    }
    return s->ops->commit(s->impl, b, cb, ud);
invalid:
    tide_store_batch_free(b);
    return -EINVAL;
}

int tide_store_mem_inject_failure(tide_store_t *s, int status, int n)
{
    if (!s || s->ops != &tide__store_mem_ops || status >= 0 || n < 0)
        return -EINVAL;
    return tide__store_mem_inject_failure(s->impl, status, n);
}

/* --- batches --- */

tide_store_batch_t *tide_store_batch_new(void)
{
    return tide_xcalloc(1, sizeof(tide_store_batch_t));
}

void tide_store_batch_free(tide_store_batch_t *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < b->nops; i++)
        free(b->ops[i].key);
    for (size_t i = 0; i < b->ncmps; i++)
        free(b->cmps[i].key);
    free(b->ops);
    free(b->cmps);
    free(b->index);
    free(b);
}

static uint32_t hash_key(const char *key, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)key[i];
        h *= 16777619u;
    }
    return h;
}

static void index_insert(tide_store_batch_t *b, size_t slot)
{
    size_t mask = b->index_cap - 1;
    size_t i = hash_key(b->ops[slot].key, b->ops[slot].key_len) & mask;

    while (b->index[i])
        i = (i + 1) & mask;
    b->index[i] = (uint32_t)(slot + 1);
}

/* Keeps the index at most half full once the batch is large enough for a linear scan to hurt. */
static void index_grow(tide_store_batch_t *b)
{
    if (b->nops < 8 || (b->index && b->nops * 2 < b->index_cap))
        return;
    free(b->index);
    b->index_cap = b->index_cap ? b->index_cap * 2 : 32;
    while (b->index_cap < b->nops * 2)
        b->index_cap *= 2;
    b->index = tide_xcalloc(b->index_cap, sizeof(*b->index));
    for (size_t slot = 0; slot < b->nops; slot++)
        index_insert(b, slot);
}

/* The slot of key's op, or -1. */
static long find_op(const tide_store_batch_t *b, const char *key, size_t len)
{
    if (!b->index) {
        for (size_t i = 0; i < b->nops; i++) {
            if (b->ops[i].key_len == len && memcmp(b->ops[i].key, key, len) == 0)
                return (long)i;
        }
        return -1;
    }
    size_t mask = b->index_cap - 1;
    for (size_t i = hash_key(key, len) & mask; b->index[i]; i = (i + 1) & mask) {
        const tide__store_op_t *op = &b->ops[b->index[i] - 1];
        if (op->key_len == len && memcmp(op->key, key, len) == 0)
            return (long)(b->index[i] - 1);
    }
    return -1;
}

static void add_op(tide_store_batch_t *b, tide__store_op_kind_t kind, const char *key,
                   const void *value, size_t len)
{
    size_t key_len = strlen(key);
    long slot = find_op(b, key, key_len);
    tide__store_op_t *op;
    char *block;

    block = tide_xmalloc(key_len + 1 + len);
    memcpy(block, key, key_len + 1);
    if (len)
        memcpy(block + key_len + 1, value, len);

    if (slot >= 0) {
        op = &b->ops[slot];
        b->bytes -= op->key_len + op->value_len;
        free(op->key);
    } else {
        if (b->nops == b->cap_ops) {
            b->cap_ops = b->cap_ops ? b->cap_ops * 2 : 8;
            b->ops = tide_xrealloc(b->ops, b->cap_ops * sizeof(*b->ops));
        }
        op = &b->ops[b->nops++];
    }
    op->kind = kind;
    op->key = block;
    op->key_len = key_len;
    op->value = (const uint8_t *)block + key_len + 1;
    op->value_len = len;
    b->bytes += key_len + len;
    if (slot < 0) {
        if (b->index && b->nops * 2 < b->index_cap)
            index_insert(b, b->nops - 1);
        else
            index_grow(b);
    }
}

void tide_store_batch_put(tide_store_batch_t *b, const char *key, const void *value, size_t len)
{
    add_op(b, TIDE__STORE_PUT, key, value, len);
}

void tide_store_batch_delete(tide_store_batch_t *b, const char *key)
{
    add_op(b, TIDE__STORE_DELETE, key, NULL, 0);
}

void tide_store_batch_compare(tide_store_batch_t *b, const char *key, int64_t mod_rev)
{
    if (b->ncmps == b->cap_cmps) {
        b->cap_cmps = b->cap_cmps ? b->cap_cmps * 2 : 4;
        b->cmps = tide_xrealloc(b->cmps, b->cap_cmps * sizeof(*b->cmps));
    }
    b->cmps[b->ncmps].key = tide_xstrdup(key);
    b->cmps[b->ncmps].mod_rev = mod_rev;
    b->ncmps++;
    b->bytes += strlen(key);
}

size_t tide_store_batch_count(const tide_store_batch_t *b)
{
    return b->nops;
}

size_t tide_store_batch_bytes(const tide_store_batch_t *b)
{
    return b->bytes;
}

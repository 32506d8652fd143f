/* The deferred completion queue of the embedded backends: requests wait in a FIFO list and one
 * uv_idle handle, active only while the list is non-empty, runs them on the next loop turn.
 * Invariants: a callback never fires inside the call that started it; requests run and complete in
 * the order they were made; once the queue is closed nothing runs and every waiting request
 * completes with -ESHUTDOWN (so that status means "not applied"). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "list.h"
#include "store_private.h"
#include "xmalloc.h"

typedef struct req {
    tide_list_t node;
    tide_store_batch_t *batch; /* commit when non-NULL, else range */
    char *prefix;
    tide_store_commit_cb commit_cb;
    tide_store_range_cb range_cb;
    void *ud;
    int fail_status;
    char *fail_text;
} req_t;

struct tide__store_queue {
    uv_idle_t idle;
    const tide__store_exec_t *exec;
    void *impl; /* NULL once closed */
    tide_list_t pending;
    tide__store_kvs_t kvs; /* reused by every range */
    bool closed;
};

/* Larger range results are not kept around for reuse. */
#define KVS_KEEP_BYTES (4u << 20)

static void req_free(req_t *r)
{
    tide_store_batch_free(r->batch);
    free(r->prefix);
    free(r->fail_text);
    free(r);
}

static void complete(tide__store_queue_t *q, req_t *r, int status, int64_t revision,
                     const char *text)
{
    if (r->batch) {
        r->commit_cb(status, revision, text, r->ud);
    } else if (status == 0) {
        r->range_cb(0, q->kvs.kvs, q->kvs.n, revision, text, r->ud);
    } else {
        r->range_cb(status, NULL, 0, revision, text, r->ud);
    }
}

static void run_one(tide__store_queue_t *q, req_t *r)
{
    tide_error_t err = {{0}};
    int64_t revision = 0;
    int status;

    if (r->batch && r->fail_status) {
        status = r->fail_status;
        tide_errprintf(&err, "%s", r->fail_text ? r->fail_text : "injected failure");
        revision = q->exec->revision(q->impl);
    } else if (r->batch) {
        status = q->exec->commit(q->impl, r->batch, &revision, &err);
    } else {
        tide__store_kvs_reset(&q->kvs);
        status = q->exec->range(q->impl, r->prefix, &q->kvs, &revision, &err);
        if (status == 0)
            tide__store_kvs_finish(&q->kvs);
    }
    complete(q, r, status, revision, status == 0 ? "" : err.text);
    if (!r->batch && q->kvs.arena.cap > KVS_KEEP_BYTES) {
        tide__store_kvs_free(&q->kvs);
        tide__store_kvs_init(&q->kvs);
    }
}

static void on_idle(uv_idle_t *h)
{
    tide__store_queue_t *q = h->data;
    /* What was queued before this turn runs now; what callbacks queue waits for the next. */
    tide_list_t *last = q->pending.prev;
    bool done = false;

    while (!done && !q->closed && !tide_list_empty(&q->pending)) {
        tide_list_t *n = q->pending.next;
        req_t *r = tide_list_entry(n, req_t, node);

        done = n == last;
        tide_list_remove(n);
        run_one(q, r);
        req_free(r);
    }
    if (!q->closed && tide_list_empty(&q->pending))
        uv_idle_stop(&q->idle);
}

static void on_closed(uv_handle_t *h)
{
    tide__store_queue_t *q = h->data;
    tide_list_t *n;

    while ((n = tide_list_first(&q->pending)) != NULL) {
        req_t *r = tide_list_entry(n, req_t, node);

        tide_list_remove(n);
        complete(q, r, -ESHUTDOWN, 0, "store closed before the operation ran");
        req_free(r);
    }
    tide__store_kvs_free(&q->kvs);
    free(q);
}

int tide__store_queue_new(struct uv_loop_s *loop, const tide__store_exec_t *exec, void *impl,
                          tide__store_queue_t **out)
{
    tide__store_queue_t *q = tide_xcalloc(1, sizeof(*q));
    int rc;

    rc = uv_idle_init(loop, &q->idle);
    if (rc < 0) {
        free(q);
        return rc;
    }
    q->idle.data = q;
    q->exec = exec;
    q->impl = impl;
    tide_list_init(&q->pending);
    tide__store_kvs_init(&q->kvs);
    *out = q;
    return 0;
}

static void enqueue(tide__store_queue_t *q, req_t *r)
{
    tide_list_push_back(&q->pending, &r->node);
    uv_idle_start(&q->idle, on_idle); /* no-op when already active */
}

void tide__store_queue_commit(tide__store_queue_t *q, tide_store_batch_t *b,
                              tide_store_commit_cb cb, void *ud, int fail_status,
                              const char *fail_text)
{
    req_t *r = tide_xcalloc(1, sizeof(*r));

    r->batch = b;
    r->commit_cb = cb;
    r->ud = ud;
    r->fail_status = fail_status;
    r->fail_text = tide_xstrdup(fail_text);
    enqueue(q, r);
}

void tide__store_queue_range(tide__store_queue_t *q, const char *prefix, tide_store_range_cb cb,
                             void *ud)
{
    req_t *r = tide_xcalloc(1, sizeof(*r));

    r->prefix = tide_xstrdup(prefix);
    r->range_cb = cb;
    r->ud = ud;
    enqueue(q, r);
}

void tide__store_queue_close(tide__store_queue_t *q)
{
    if (!q)
        return;
    q->closed = true;
    q->impl = NULL;
    uv_close((uv_handle_t *)&q->idle, on_closed);
}

/* --- range results --- */

void tide__store_kvs_init(tide__store_kvs_t *k)
{
    memset(k, 0, sizeof(*k));
    tide_buf_init(&k->arena);
}

void tide__store_kvs_reset(tide__store_kvs_t *k)
{
    k->n = 0;
    tide_buf_reset(&k->arena);
}

void tide__store_kvs_free(tide__store_kvs_t *k)
{
    free(k->kvs);
    free(k->offs);
    tide_buf_free(&k->arena);
    memset(k, 0, sizeof(*k));
}

void tide__store_kvs_add(tide__store_kvs_t *k, const char *key, size_t key_len, const void *value,
                         size_t value_len, int64_t create_rev, int64_t mod_rev)
{
    static const char nul = '\0';

    if (k->n == k->cap) {
        k->cap = k->cap ? k->cap * 2 : 16;
        k->kvs = tide_xrealloc(k->kvs, k->cap * sizeof(*k->kvs));
        k->offs = tide_xrealloc(k->offs, 2 * k->cap * sizeof(*k->offs));
    }
    k->offs[2 * k->n] = k->arena.len;
    tide_buf_append(&k->arena, key, key_len);
    tide_buf_append(&k->arena, &nul, 1);
    k->offs[2 * k->n + 1] = k->arena.len;
    tide_buf_append(&k->arena, value, value_len);
    k->kvs[k->n].value_len = value_len;
    k->kvs[k->n].create_rev = create_rev;
    k->kvs[k->n].mod_rev = mod_rev;
    k->n++;
}

void tide__store_kvs_finish(tide__store_kvs_t *k)
{
    /* The arena is non-empty whenever n > 0: every key carries its NUL. */
    for (size_t i = 0; i < k->n; i++) {
        k->kvs[i].key = (const char *)k->arena.data + k->offs[2 * i];
        k->kvs[i].value = k->arena.data + k->offs[2 * i + 1];
    }
}

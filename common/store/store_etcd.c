/* "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]": the store on etcd's v3 JSON gateway (etcd_client.h).
 * Keys live under PREFIX (default "/tide/"); a range is paged at one revision; a commit is one txn,
 * or several in order when the batch is over etcd's per-txn op or byte limits, each carrying every
 * compare of the batch. Invariant: one operation runs at a time, in the order they were started (a
 * FIFO whose head alone has an etcd call in flight), so completions keep that order and a range
 * sees every earlier commit. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "base64.h"
#include "etcd_client.h"
#include "etcd_internal.h"
#include "list.h"
#include "store_private.h"
#include "xmalloc.h"

#define PROBE_TIMEOUT_MS 3000
#define CALL_TIMEOUT_MS  5000
/* Keys per range page: 100 values at etcd's 1.5 MiB limit, base64, stay under the client's answer cap. */
#define RANGE_PAGE       100
/* What one txn may carry: etcd's request limit less room for the txn's own framing. */
#define CHUNK_BUDGET (TIDE_ETCD_MAX_REQUEST_BYTES - 16384u)
#define OP_OVERHEAD  32u

typedef struct op {
    tide_list_t node;
    tide_store_batch_t *batch; /* a commit when non-NULL, else a range */
    char *prefix;
    tide_store_commit_cb commit_cb;
    tide_store_range_cb range_cb;
    void *ud;
    /* commit: ops [chunk_start, chunk_end) are in flight; cmp_revs are the compares as of now */
    size_t chunk_start, chunk_end;
    int64_t *cmp_revs;
    int64_t revision;
    /* range: the kvs so far, the revision of the first page, where the next page starts */
    tide__store_kvs_t kvs;
    int64_t range_rev;
    uint8_t *next_key;
    size_t next_len;
} op_t;

typedef struct es {
    uv_loop_t *loop;
    tide_etcd_t *c;
    char *prefix; /* with its trailing '/' */
    size_t plen;
    tide_list_t queue;
    uv_timer_t kick; /* starts the head on the loop turn after it was queued */
    bool in_flight;
    bool closed, kick_closed;
} es_t;

static void start_ops(es_t *s);

static void op_free(op_t *op)
{
    tide_store_batch_free(op->batch);
    free(op->prefix);
    free(op->cmp_revs);
    tide__store_kvs_free(&op->kvs);
    free(op->next_key);
    free(op);
}

/* Pops the head op and calls its callback. */
static void complete(es_t *s, op_t *op, int status, int64_t revision, const char *text)
{
    tide_list_remove(&op->node);
    if (op->batch) {
        op->commit_cb(status, revision, text, op->ud);
    } else if (status == 0) {
        tide__store_kvs_finish(&op->kvs);
        op->range_cb(0, op->kvs.kvs, op->kvs.n, revision, text, op->ud);
    } else {
        op->range_cb(status, NULL, 0, revision, text, op->ud);
    }
    op_free(op);
}

static void fail(es_t *s, op_t *op, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(es_t *s, op_t *op, int status, const char *fmt, ...)
{
    va_list ap;
    char *text;

    va_start(ap, fmt);
    text = tide_xvasprintf(fmt, ap);
    va_end(ap);
    complete(s, op, status, 0, text);
    free(text);
}

static op_t *head(es_t *s)
{
    tide_list_t *n = tide_list_first(&s->queue);

    return n ? tide_list_entry(n, op_t, node) : NULL;
}

/* b64 of the store prefix + key bytes. */
static char *full_key_b64(const es_t *s, const char *key, size_t len)
{
    char *full = tide_xmalloc(s->plen + len + 1), *b;

    memcpy(full, s->prefix, s->plen);
    memcpy(full + s->plen, key, len);
    b = tide_base64_encode(full, s->plen + len);
    free(full);
    return b;
}

/* --- completion of every op still queued, once the store is closed and quiet --- */

static void finish_close(es_t *s)
{
    op_t *op;

    if (!s->closed || !s->kick_closed || s->in_flight)
        return;
    while ((op = head(s)) != NULL)
        complete(s, op, -ESHUTDOWN, 0, "store closed before the operation completed");
    free(s->prefix);
    free(s);
}

static void on_kick_closed(uv_handle_t *h)
{
    es_t *s = h->data;

    s->kick_closed = true;
    finish_close(s);
}

/* --- replies --- */

static void on_reply(int status, const cJSON *resp, const char *errtext, void *ud);

static int send_call(es_t *s, const char *path, tide_buf_t *body, bool repeatable)
{
    int rc = tide_etcd_call_ex(s->c, path, tide_buf_cstr(body), CALL_TIMEOUT_MS, repeatable, on_reply, s);

    if (rc == 0)
        s->in_flight = true;
    return rc;
}

/* --- range --- */

static void range_send(es_t *s, op_t *op)
{
    size_t plen = strlen(op->prefix), elen;
    char *full = tide_xmalloc(s->plen + plen + 1), *key, *end;
    uint8_t *e;
    tide_buf_t b = TIDE_BUF_INIT;
    int rc;

    memcpy(full, s->prefix, s->plen);
    memcpy(full + s->plen, op->prefix, plen);
    e = tide_etcd_prefix_end(full, s->plen + plen, &elen);
    key = op->next_key ? tide_base64_encode(op->next_key, op->next_len)
                       : tide_base64_encode(full, s->plen + plen);
    end = tide_base64_encode(e, elen);
    tide_buf_printf(&b, "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":\"%d\"", key, end,
                    RANGE_PAGE);
    if (op->range_rev > 0)
        tide_buf_printf(&b, ",\"revision\":\"%" PRId64 "\"", op->range_rev);
    tide_buf_append_str(&b, "}");
    rc = send_call(s, "/v3/kv/range", &b, true);
    tide_buf_free(&b);
    free(full);
    free(e);
    free(key);
    free(end);
    if (rc < 0)
        fail(s, op, -EIO, "etcd: cannot start a range (%d)", rc);
}

int tide__etcd_range_page(const cJSON *resp, const char *prefix, size_t plen, int64_t *range_rev,
                          tide__store_kvs_t *out, uint8_t **next_key, size_t *next_len, char *text,
                          size_t len)
{
    const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(resp, "kvs"), *kv;
    uint8_t *last = NULL;
    size_t last_len = 0;
    int rc = 0;

    if (*range_rev == 0 && tide_etcd_json_int64(cJSON_GetObjectItemCaseSensitive(resp, "header"),
                                                "revision", range_rev) < 0) {
        snprintf(text, len, "etcd: range answer without a revision");
        free(*next_key);
        *next_key = NULL;
        return -EIO;
    }
    cJSON_ArrayForEach(kv, kvs)
    {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(kv, "key");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
        uint8_t *key = NULL, *val = NULL;
        size_t klen = 0, vlen = 0;
        int64_t crev, mrev;

        if (!cJSON_IsString(k) || tide_etcd_unb64(k->valuestring, &key, &klen) < 0 ||
            (v && (!cJSON_IsString(v) || tide_etcd_unb64(v->valuestring, &val, &vlen) < 0)) ||
            tide_etcd_json_int64(kv, "create_revision", &crev) < 0 ||
            tide_etcd_json_int64(kv, "mod_revision", &mrev) < 0) {
            snprintf(text, len, "etcd: malformed key-value in a range answer");
            rc = -EIO;
        } else if (klen < plen || memcmp(key, prefix, plen) != 0 || memchr(key, 0, klen)) {
            snprintf(text, len,
                     "etcd: key outside the store prefix or with a NUL byte in a range answer");
            rc = -EIO;
        } else {
            tide__store_kvs_add(out, (const char *)key + plen, klen - plen, val ? val : key, vlen,
                                crev, mrev);
        }
        free(val);
        free(last);
        last = key;
        last_len = klen;
        if (rc < 0)
            break;
    }
    free(*next_key);
    *next_key = NULL;
    if (rc == 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(resp, "more")) && last) {
        /* the next page starts just after the last key */
        *next_key = tide_xmalloc(last_len + 1);
        memcpy(*next_key, last, last_len);
        (*next_key)[last_len] = 0;
        *next_len = last_len + 1;
    }
    free(last);
    return rc;
}

/* Adds one page of kvs; returns 0 or -EIO with text filled. */
static int range_page(es_t *s, op_t *op, const cJSON *resp, char *text, size_t len)
{
    return tide__etcd_range_page(resp, s->prefix, s->plen, &op->range_rev, &op->kvs, &op->next_key,
                                 &op->next_len, text, len);
}

/* --- commit --- */

static size_t op_bytes(const es_t *s, const tide__store_op_t *o)
{
    return s->plen + o->key_len + o->value_len + OP_OVERHEAD;
}

static void commit_send(es_t *s, op_t *op)
{
    const tide_store_batch_t *b = op->batch;
    size_t base = 256, bytes, i;
    tide_buf_t body = TIDE_BUF_INIT;
    int rc;

    if (b->ncmps > TIDE_ETCD_MAX_TXN_OPS) {
        fail(s, op, -EIO, "etcd: a batch with %zu compares is over etcd's %u per txn", b->ncmps,
             TIDE_ETCD_MAX_TXN_OPS);
        return;
    }
    for (i = 0; i < b->ncmps; i++)
        base += 2 * (s->plen + strlen(b->cmps[i].key) + OP_OVERHEAD); /* compare + failure read */
    /* An op that can never fit fails the batch before any of it is written. */
    for (i = 0; op->chunk_start == 0 && i < b->nops; i++) {
        if (base + op_bytes(s, &b->ops[i]) > CHUNK_BUDGET) {
            fail(s, op, -EIO, "etcd: key \"%s\" with %zu value bytes is over etcd's request limit (%u bytes)",
                 b->ops[i].key, b->ops[i].value_len, TIDE_ETCD_MAX_REQUEST_BYTES);
            return;
        }
    }
    /* This chunk: as many ops as fit, at least one. */
    bytes = base;
    for (i = op->chunk_start; i < b->nops && i - op->chunk_start < TIDE_ETCD_MAX_TXN_OPS; i++) {
        size_t ob = op_bytes(s, &b->ops[i]);
        if (bytes + ob > CHUNK_BUDGET)
            break;
        bytes += ob;
    }
    op->chunk_end = i;

    tide_buf_reserve(&body, bytes * 4 / 3 + 1024);
    tide_buf_append_str(&body, "{\"compare\":[");
    for (i = 0; i < b->ncmps; i++) {
        char *k = full_key_b64(s, b->cmps[i].key, strlen(b->cmps[i].key));
        tide_buf_printf(
            &body,
            "%s{\"key\":\"%s\",\"target\":\"MOD\",\"result\":\"EQUAL\",\"mod_revision\":\"%" PRId64
            "\"}",
            i ? "," : "", k, op->cmp_revs[i]);
        free(k);
    }
    tide_buf_append_str(&body, "],\"success\":[");
    for (i = op->chunk_start; i < op->chunk_end; i++) {
        const tide__store_op_t *o = &b->ops[i];
        char *k = full_key_b64(s, o->key, o->key_len);

        if (o->kind == TIDE__STORE_PUT) {
            char *v = tide_base64_encode(o->value, o->value_len);
            tide_buf_printf(&body, "%s{\"request_put\":{\"key\":\"%s\",\"value\":\"",
                            i > op->chunk_start ? "," : "", k);
            tide_buf_append_str(&body, v);
            tide_buf_append_str(&body, "\"}}");
            free(v);
        } else {
            tide_buf_printf(&body, "%s{\"request_delete_range\":{\"key\":\"%s\"}}",
                            i > op->chunk_start ? "," : "", k);
        }
        free(k);
    }
    /* On a failed compare, read the compared keys to say which one moved. */
    tide_buf_append_str(&body, "],\"failure\":[");
    for (i = 0; i < b->ncmps; i++) {
        char *k = full_key_b64(s, b->cmps[i].key, strlen(b->cmps[i].key));
        tide_buf_printf(&body, "%s{\"request_range\":{\"key\":\"%s\",\"keys_only\":true}}",
                        i ? "," : "", k);
        free(k);
    }
    tide_buf_append_str(&body, "]}");
    /* Never repeated: a copy held by a member that stalls may still apply after later commits (a retry
     * elsewhere would let it undo them). A write that fails this way leaves its outcome unknown. */
    rc = send_call(s, "/v3/kv/txn", &body, false);
    tide_buf_free(&body);
    if (rc < 0)
        fail(s, op, -EIO, "etcd: cannot start a txn (%d)", rc);
}

/* The text for a failed compare: the first compared key whose mod_rev differs. */
static void compare_text(const tide_store_batch_t *b, const int64_t *cmp_revs, size_t chunk_start,
                         const cJSON *resp, char *text, size_t len)
{
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(resp, "responses"), *r;
    size_t i = 0;

    snprintf(text, len, "compare failed");
    cJSON_ArrayForEach(r, rs)
    {
        const cJSON *rr = cJSON_GetObjectItemCaseSensitive(r, "response_range");
        const cJSON *kvs = cJSON_GetObjectItemCaseSensitive(rr, "kvs");
        int64_t cur = 0;

        if (i >= b->ncmps)
            break;
        if (cJSON_GetArraySize(kvs) > 0)
            tide_etcd_json_int64(cJSON_GetArrayItem(kvs, 0), "mod_revision", &cur);
        if (cur != cmp_revs[i]) {
            snprintf(text, len,
                     "compare failed: key \"%s\" has mod_rev %" PRId64 ", expected %" PRId64,
                     b->cmps[i].key, cur, cmp_revs[i]);
            break;
        }
        i++;
    }
    if (chunk_start > 0) {
        size_t n = strlen(text);
        snprintf(text + n, len - n,
                 " (after %zu of the batch's %zu ops were applied in earlier txns)",
                 chunk_start, b->nops);
    }
}

int tide__etcd_txn_answer(const cJSON *resp, const tide_store_batch_t *b, const int64_t *cmp_revs,
                          size_t chunk_start, int64_t *rev, char *text, size_t len)
{
    tide_etcd_json_int64(cJSON_GetObjectItemCaseSensitive(resp, "header"), "revision", rev);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(resp, "succeeded")))
        return 0;
    compare_text(b, cmp_revs, chunk_start, resp, text, len); /* says how many ops earlier txns applied */
    return -ECANCELED;
}

/* A chunk went through at revision rev: later chunks compare against what it wrote. */
static void chunk_applied(op_t *op, int64_t rev)
{
    const tide_store_batch_t *b = op->batch;

    for (size_t c = 0; c < b->ncmps; c++) {
        for (size_t i = op->chunk_start; i < op->chunk_end; i++) {
            if (strcmp(b->ops[i].key, b->cmps[c].key) == 0)
                op->cmp_revs[c] = b->ops[i].kind == TIDE__STORE_PUT ? rev : 0;
        }
    }
}

/* --- the queue --- */

static void on_reply(int status, const cJSON *resp, const char *errtext, void *ud)
{
    es_t *s = ud;
    op_t *op = head(s);
    char text[256];
    int64_t rev = 0;

    s->in_flight = false;
    if (s->closed) {
        finish_close(s);
        return;
    }
    if (status != 0 && op->batch && op->chunk_start > 0) {
        fail(s, op, status == -ESHUTDOWN ? -ESHUTDOWN : -EIO, "etcd: %s (after %zu of %zu ops were applied)",
             errtext, op->chunk_start, op->batch->nops);
    } else if (status != 0) {
        fail(s, op, status == -ESHUTDOWN ? -ESHUTDOWN : -EIO, "etcd: %s", errtext);
    } else if (!op->batch) {
        if (range_page(s, op, resp, text, sizeof(text)) < 0)
            fail(s, op, -EIO, "%s", text);
        else if (op->next_key)
            range_send(s, op);
        else
            complete(s, op, 0, op->range_rev, "");
    } else {
        if (tide__etcd_txn_answer(resp, op->batch, op->cmp_revs, op->chunk_start, &rev, text,
                                  sizeof(text)) < 0) {
            complete(s, op, -ECANCELED, rev, text);
        } else {
            chunk_applied(op, rev);
            op->revision = rev;
            op->chunk_start = op->chunk_end;
            if (op->chunk_start < op->batch->nops)
                commit_send(s, op);
            else
                complete(s, op, 0, rev, "");
        }
    }
    if (!s->closed)
        start_ops(s);
}

/* Starts the head unless it runs already; ops that fail before sending complete here. */
static void start_ops(es_t *s)
{
    op_t *op;

    while (!s->closed && !s->in_flight && (op = head(s)) != NULL) {
        if (op->batch)
            commit_send(s, op);
        else
            range_send(s, op);
    }
}

static void on_kick(uv_timer_t *t)
{
    start_ops(t->data);
}

static void enqueue(es_t *s, op_t *op)
{
    tide_list_push_back(&s->queue, &op->node);
    if (!s->in_flight)
        uv_timer_start(&s->kick, on_kick, 0, 0);
}

/* --- ops --- */

static int etcd_open(struct uv_loop_s *loop, const char *location, void **impl, tide_error_t *err)
{
    char *endpoints = NULL, *prefix = NULL;
    tide_error_t e = {{0}};
    tide_etcd_t *c = NULL;
    es_t *s;
    int rc;

    if ((rc = tide_etcd_parse_location(location, &endpoints, &prefix, err)) < 0)
        return rc;
    if ((rc = tide_etcd_new(loop, endpoints, &c, &e)) < 0) {
        tide_errprintf(err, "store URL \"etcd:%s\": %s", location, e.text);
        goto fail;
    }
    if ((rc = tide_etcd_probe(c, PROBE_TIMEOUT_MS, &e)) < 0) {
        tide_errprintf(err, "%s", e.text);
        rc = -EIO;
        goto fail;
    }
    s = tide_xcalloc(1, sizeof(*s));
    s->loop = loop;
    s->c = c;
    s->prefix = prefix;
    s->plen = strlen(prefix);
    tide_list_init(&s->queue);
    uv_timer_init(loop, &s->kick);
    s->kick.data = s;
    free(endpoints);
    *impl = s;
    return 0;
fail:
    tide_etcd_free(c); /* never used: frees at once */
    free(endpoints);
    free(prefix);
    return rc;
}

static void etcd_close(void *impl)
{
    es_t *s = impl;

    if (!s)
        return;
    s->closed = true;
    tide_etcd_free(s->c); /* the call in flight, if any, completes with -ESHUTDOWN from the loop */
    s->c = NULL;
    uv_close((uv_handle_t *)&s->kick, on_kick_closed);
}

static int etcd_range(void *impl, const char *prefix, tide_store_range_cb cb, void *ud)
{
    es_t *s = impl;
    op_t *op = tide_xcalloc(1, sizeof(*op));

    op->prefix = tide_xstrdup(prefix);
    op->range_cb = cb;
    op->ud = ud;
    tide__store_kvs_init(&op->kvs);
    enqueue(s, op);
    return 0;
}

static int etcd_commit(void *impl, tide_store_batch_t *b, tide_store_commit_cb cb, void *ud)
{
    es_t *s = impl;
    op_t *op = tide_xcalloc(1, sizeof(*op));

    op->batch = b;
    op->commit_cb = cb;
    op->ud = ud;
    op->cmp_revs = tide_xcalloc(b->ncmps ? b->ncmps : 1, sizeof(*op->cmp_revs));
    for (size_t i = 0; i < b->ncmps; i++)
        op->cmp_revs[i] = b->cmps[i].mod_rev;
    tide__store_kvs_init(&op->kvs);
    enqueue(s, op);
    return 0;
}

const tide_store_ops_t tide__store_etcd_ops = {
    .scheme = "etcd",
    .open = etcd_open,
    .close = etcd_close,
    .range = etcd_range,
    .commit = etcd_commit,
};

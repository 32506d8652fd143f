/* test_store_conformance URL: the semantics every store backend shares, run against the backend the
 * URL names (argument or TIDE_TEST_STORE_URL): "mem:", "sqlite:" (a fresh file in a throwaway
 * directory per test) or "etcd://HOST:PORT[,...]" (a fresh key prefix per test, revisions relative
 * to the test's start). For etcd it adds the backend's own cases; those that stop, kill or restart
 * members or compact need the wrapper tests/integration/test_store_etcd.py, which answers commands
 * on the TIDE_TEST_CTL_* pipes. Every operation is awaited by running the loop with a deadline;
 * every test ends with uv_loop_close()==0. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "etcd_client.h"
#include "store.h"

typedef enum kind { KIND_MEM, KIND_SQLITE, KIND_ETCD } kind_t;

static const char *g_url; /* as given */
static kind_t g_kind;
static const char *g_hosts; /* etcd: "HOST:PORT,..." */
static unsigned g_seq;

typedef struct fx {
    uv_loop_t loop;
    char dir[64];
    char url[512];
    tide_store_t *s;
    int64_t base; /* the store revision when the test began */
} fx_t;

#define DEADLINE_NS (15ull * 1000 * 1000 * 1000)

/* --- awaiting callbacks --- */

typedef struct commit_res {
    bool done;
    int status;
    int64_t rev;
    char text[512];
} commit_res_t;

typedef struct kv_copy {
    char *key;
    uint8_t *value;
    size_t len;
    int64_t create_rev, mod_rev;
} kv_copy_t;

typedef struct range_res {
    bool done;
    int status;
    int64_t rev;
    size_t n;
    kv_copy_t *kvs;
    char text[512];
} range_res_t;

static void on_commit(int status, int64_t revision, const char *errtext, void *ud)
{
    commit_res_t *r = ud;

    assert_false(r->done);
    assert_non_null(errtext);
    r->done = true;
    r->status = status;
    r->rev = revision;
    snprintf(r->text, sizeof(r->text), "%s", errtext);
}

static void on_range(int status, const tide_store_kv_t *kvs, size_t n, int64_t revision,
                     const char *errtext, void *ud)
{
    range_res_t *r = ud;

    assert_false(r->done);
    assert_non_null(errtext);
    r->done = true;
    r->status = status;
    r->rev = revision;
    snprintf(r->text, sizeof(r->text), "%s", errtext);
    r->n = n;
    r->kvs = calloc(n ? n : 1, sizeof(*r->kvs));
    for (size_t i = 0; i < n; i++) {
        assert_non_null(kvs[i].key);
        assert_non_null(kvs[i].value);
        r->kvs[i].key = strdup(kvs[i].key);
        r->kvs[i].value = malloc(kvs[i].value_len ? kvs[i].value_len : 1);
        memcpy(r->kvs[i].value, kvs[i].value, kvs[i].value_len);
        r->kvs[i].len = kvs[i].value_len;
        r->kvs[i].create_rev = kvs[i].create_rev;
        r->kvs[i].mod_rev = kvs[i].mod_rev;
    }
}

static void range_res_free(range_res_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->kvs[i].key);
        free(r->kvs[i].value);
    }
    free(r->kvs);
    memset(r, 0, sizeof(*r));
}

static void wait_for(fx_t *fx, const bool *flag)
{
    uint64_t deadline = uv_hrtime() + DEADLINE_NS;

    while (!*flag) {
        assert_true(uv_hrtime() < deadline);
        uv_run(&fx->loop, UV_RUN_ONCE);
    }
}

static void commit_wait(fx_t *fx, tide_store_batch_t *b, commit_res_t *res)
{
    memset(res, 0, sizeof(*res));
    assert_int_equal(tide_store_commit(fx->s, b, on_commit, res), 0);
    assert_false(res->done); /* never inline */
    wait_for(fx, &res->done);
}

static void range_wait(fx_t *fx, const char *prefix, range_res_t *res)
{
    memset(res, 0, sizeof(*res));
    assert_int_equal(tide_store_range(fx->s, prefix, on_range, res), 0);
    assert_false(res->done);
    wait_for(fx, &res->done);
    if (res->status != 0)
        fail_msg("range \"%s\": %d %s", prefix, res->status, res->text);
}

/* Puts one string value; returns the revision of the commit. */
static int64_t put1(fx_t *fx, const char *key, const char *value)
{
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t res;

    tide_store_batch_put(b, key, value, strlen(value));
    commit_wait(fx, b, &res);
    if (res.status != 0)
        fail_msg("put %s: %d %s", key, res.status, res.text);
    return res.rev;
}

static const kv_copy_t *find(const range_res_t *r, const char *key)
{
    for (size_t i = 0; i < r->n; i++) {
        if (strcmp(r->kvs[i].key, key) == 0)
            return &r->kvs[i];
    }
    return NULL;
}

static void assert_value(const range_res_t *r, const char *key, const char *value)
{
    const kv_copy_t *kv = find(r, key);

    if (!kv)
        fail_msg("key \"%s\" missing", key);
    assert_int_equal(kv->len, strlen(value));
    assert_memory_equal(kv->value, value, kv->len);
}

/* --- fixture --- */

static void open_url(fx_t *fx, const char *url)
{
    tide_error_t err = {{0}};
    int rc = tide_store_open(&fx->loop, url, &fx->s, &err);

    if (rc != 0)
        fail_msg("open %s: %d %s", url, rc, err.text);
}

static void close_store(fx_t *fx)
{
    tide_store_close(fx->s);
    fx->s = NULL;
    uv_run(&fx->loop, UV_RUN_DEFAULT);
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        char p[512];
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static int setup(void **state)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    const char *tmp = getenv("TMPDIR");
    range_res_t r;

    assert_int_equal(uv_loop_init(&fx->loop), 0);
    switch (g_kind) {
    case KIND_SQLITE:
        snprintf(fx->dir, sizeof(fx->dir), "%s/tide-conf-XXXXXX",
                 tmp && strlen(tmp) < 32 ? tmp : "/tmp");
        assert_non_null(mkdtemp(fx->dir));
        snprintf(fx->url, sizeof(fx->url), "sqlite:%s/state.db", fx->dir);
        break;
    case KIND_ETCD: /* a prefix no other test (or run) uses */
        snprintf(fx->url, sizeof(fx->url), "etcd://%s/conf-%ld-%u-%u/", g_hosts, (long)getpid(),
                 (unsigned)(uv_hrtime() % 1000000), ++g_seq);
        break;
    default:
        snprintf(fx->url, sizeof(fx->url), "mem:");
    }
    open_url(fx, fx->url);
    range_wait(fx, "", &r);
    assert_int_equal(r.n, 0);
    fx->base = r.rev;
    range_res_free(&r);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;

    close_store(fx);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    if (fx->dir[0])
        remove_dir(fx->dir);
    free(fx);
    return 0;
}

/* --- the shared semantics --- */

static void test_put_get(void **state)
{
    fx_t *fx = *state;
    int64_t b = fx->base;
    range_res_t r;

    assert_int_equal(put1(fx, "jobs/1", "hello"), b + 1);
    range_wait(fx, "jobs/1", &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.kvs[0].key, "jobs/1");
    assert_value(&r, "jobs/1", "hello");
    assert_int_equal(r.kvs[0].create_rev, b + 1);
    assert_int_equal(r.kvs[0].mod_rev, b + 1);
    assert_int_equal(r.rev, b + 1);
    range_res_free(&r);

    range_wait(fx, "jobs/2", &r); /* absent key: empty, not an error */
    assert_int_equal(r.n, 0);
    assert_int_equal(r.rev, b + 1);
    range_res_free(&r);
}

static void test_prefix_order(void **state)
{
    fx_t *fx = *state;
    static const char *const keys[] = {
        "jobs/3", "workers/a", "jobs/10", "jobsx", "meta/leader", "jobs/1",    "jobs/",
        "job",    "a\xff\xff", "a\xff",   "b",     "\xff",        "\xff\xff/x"};
    size_t nkeys = sizeof(keys) / sizeof(keys[0]);
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;

    for (size_t i = 0; i < nkeys; i++)
        tide_store_batch_put(b, keys[i], keys[i], strlen(keys[i]));
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);

    range_wait(fx, "jobs/", &r);
    assert_int_equal(r.n, 4);
    assert_string_equal(r.kvs[0].key, "jobs/");
    assert_string_equal(r.kvs[1].key, "jobs/1");
    assert_string_equal(r.kvs[2].key, "jobs/10");
    assert_string_equal(r.kvs[3].key, "jobs/3");
    range_res_free(&r);

    range_wait(fx, "", &r); /* everything, in byte order */
    assert_int_equal(r.n, nkeys);
    for (size_t i = 1; i < r.n; i++)
        assert_true(strcmp(r.kvs[i - 1].key, r.kvs[i].key) < 0);
    range_res_free(&r);

    range_wait(fx, "a\xff", &r); /* a prefix ending in 0xff */
    assert_int_equal(r.n, 2);
    assert_string_equal(r.kvs[0].key, "a\xff");
    assert_string_equal(r.kvs[1].key, "a\xff\xff");
    range_res_free(&r);
    range_wait(fx, "\xff", &r);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.kvs[1].key, "\xff\xff/x");
    range_res_free(&r);
}

static void test_revisions(void **state)
{
    fx_t *fx = *state;
    int64_t base = fx->base;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    assert_int_equal(put1(fx, "a", "1"), base + 1);
    b = tide_store_batch_new(); /* three keys, one revision */
    tide_store_batch_put(b, "b", "2", 1);
    tide_store_batch_put(b, "c", "3", 1);
    tide_store_batch_put(b, "d", "4", 1);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 2);
    assert_int_equal(put1(fx, "a", "1b"), base + 3);

    /* Changing nothing bumps nothing: an empty batch, compares only, deletes of missing keys. */
    commit_wait(fx, tide_store_batch_new(), &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "a", base + 3);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);
    b = tide_store_batch_new();
    tide_store_batch_delete(b, "nope");
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);

    range_wait(fx, "", &r);
    assert_int_equal(r.rev, base + 3);
    assert_int_equal(r.n, 4);
    assert_int_equal(find(&r, "a")->create_rev, base + 1);
    assert_int_equal(find(&r, "a")->mod_rev, base + 3);
    assert_value(&r, "a", "1b");
    assert_int_equal(find(&r, "c")->create_rev, base + 2);
    assert_int_equal(find(&r, "c")->mod_rev, base + 2);
    range_res_free(&r);
}

static void test_delete(void **state)
{
    fx_t *fx = *state;
    int64_t base = fx->base;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    put1(fx, "jobs/1", "a");
    put1(fx, "jobs/2", "b");
    b = tide_store_batch_new();
    tide_store_batch_delete(b, "jobs/1");
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);
    range_wait(fx, "jobs/", &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.kvs[0].key, "jobs/2");
    range_res_free(&r);

    /* A re-created key starts a new life. */
    assert_int_equal(put1(fx, "jobs/1", "again"), base + 4);
    range_wait(fx, "jobs/1", &r);
    assert_int_equal(r.kvs[0].create_rev, base + 4);
    range_res_free(&r);
}

static void test_compares(void **state)
{
    fx_t *fx = *state;
    int64_t base = fx->base;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    put1(fx, "jobs/1", "v1");
    put1(fx, "jobs/2", "w1");

    /* compare-and-swap on a present key plus create-if-absent */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/1", base + 1);
    tide_store_batch_compare(b, "meta/leader", 0);
    tide_store_batch_put(b, "jobs/1", "v2", 2);
    tide_store_batch_put(b, "meta/leader", "me", 2);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.text, "");
    assert_int_equal(c.rev, base + 3);

    /* A stale mod_rev: nothing of the batch is written, and the text names the key. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/2", base + 2);
    tide_store_batch_compare(b, "jobs/1", base + 1);
    tide_store_batch_put(b, "jobs/1", "v3", 2);
    tide_store_batch_put(b, "jobs/3", "new", 3);
    tide_store_batch_delete(b, "jobs/2");
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_int_equal(c.rev, base + 3);
    assert_non_null(strstr(c.text, "jobs/1"));

    /* mod_rev 0 on a present key fails; a non-zero one on a missing key fails. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/2", 0);
    tide_store_batch_put(b, "jobs/2", "w2", 2);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_non_null(strstr(c.text, "jobs/2"));
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/9", base + 1);
    tide_store_batch_put(b, "jobs/9", "x", 1);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);

    range_wait(fx, "", &r);
    assert_int_equal(r.rev, base + 3);
    assert_int_equal(r.n, 3);
    assert_value(&r, "jobs/1", "v2");
    assert_value(&r, "jobs/2", "w1");
    assert_value(&r, "meta/leader", "me");
    assert_null(find(&r, "jobs/3"));
    range_res_free(&r);
}

static void test_later_op_wins(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    put1(fx, "d", "exists");
    b = tide_store_batch_new();
    tide_store_batch_put(b, "a", "1", 1);
    tide_store_batch_put(b, "a", "22", 2);
    tide_store_batch_put(b, "b", "1", 1);
    tide_store_batch_delete(b, "b");
    tide_store_batch_delete(b, "c");
    tide_store_batch_put(b, "c", "333", 3);
    tide_store_batch_put(b, "d", "x", 1);
    tide_store_batch_delete(b, "d");
    assert_int_equal(tide_store_batch_count(b), 4);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    range_wait(fx, "", &r);
    assert_int_equal(r.n, 2);
    assert_value(&r, "a", "22");
    assert_value(&r, "c", "333");
    range_res_free(&r);
}

static void fill(uint8_t *p, size_t len, uint32_t seed)
{
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
}

static void test_big_value(void **state)
{
    fx_t *fx = *state;
    size_t len = 1u << 20;
    uint8_t *big = malloc(len);
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;

    fill(big, len, 12345);
    tide_store_batch_put(b, "ckpt/big", big, len);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    range_wait(fx, "ckpt/", &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.kvs[0].len, len);
    assert_memory_equal(r.kvs[0].value, big, len);
    range_res_free(&r);
    free(big);
}

/* 300 ops in one batch (etcd: over its 128 ops per txn), with a fence compare on another key and a
 * compare on a key the batch itself writes. */
static void test_batch_300(void **state)
{
    fx_t *fx = *state;
    int64_t base = fx->base, fence;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;
    char key[32], val[32];

    fence = put1(fx, "meta/leader", "me");
    put1(fx, "jobs/0000", "old");
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "meta/leader", fence);
    tide_store_batch_compare(b, "jobs/0000", base + 2);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "jobs/%04d", i);
        snprintf(val, sizeof(val), "v%d", i);
        tide_store_batch_put(b, key, val, strlen(val));
    }
    assert_int_equal(tide_store_batch_count(b), 300);
    commit_wait(fx, b, &c);
    if (c.status != 0)
        fail_msg("300 ops: %d %s", c.status, c.text);
    assert_true(c.rev > base + 2);
    range_wait(fx, "jobs/", &r);
    assert_int_equal(r.n, 300);
    for (size_t i = 0; i < r.n; i++) {
        snprintf(key, sizeof(key), "jobs/%04zu", i);
        snprintf(val, sizeof(val), "v%zu", i);
        assert_string_equal(r.kvs[i].key, key);
        assert_int_equal(r.kvs[i].len, strlen(val));
        assert_memory_equal(r.kvs[i].value, val, r.kvs[i].len);
        assert_true(r.kvs[i].mod_rev > base + 2 && r.kvs[i].mod_rev <= c.rev);
    }
    assert_int_equal(r.rev, c.rev);
    range_res_free(&r);

    /* The same with a failing fence: nothing is written. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "meta/leader", fence + 1000);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "new/%04d", i);
        tide_store_batch_put(b, key, "x", 1);
    }
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_non_null(strstr(c.text, "meta/leader"));
    range_wait(fx, "new/", &r);
    assert_int_equal(r.n, 0);
    range_res_free(&r);
}

static void test_unusual_keys(void **state)
{
    fx_t *fx = *state;
    static const char *const keys[] = {
        "with space",         "a/b/c//d",  "caf\xc3\xa9/\xe2\x82\xac",
        "quote\"back\\slash", "tab\tnl\n", "+/=="};
    size_t n = sizeof(keys) / sizeof(keys[0]);
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;

    for (size_t i = 0; i < n; i++)
        tide_store_batch_put(b, keys[i], keys[i], strlen(keys[i]));
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    range_wait(fx, "", &r);
    assert_int_equal(r.n, n);
    for (size_t i = 0; i < n; i++)
        assert_value(&r, keys[i], keys[i]);
    range_res_free(&r);
    range_wait(fx, "caf\xc3\xa9/", &r);
    assert_int_equal(r.n, 1);
    range_res_free(&r);
}

static void test_empty_and_binary_values(void **state)
{
    fx_t *fx = *state;
    static const uint8_t bin[] = {0x00, 0x01, 0xff, 0x00, 'a', 0x00, 0x80, 0x7f, 0x00};
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;

    tide_store_batch_put(b, "bin", bin, sizeof(bin));
    tide_store_batch_put(b, "empty", "", 0);
    tide_store_batch_put(b, "nul", "\0", 1);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    range_wait(fx, "", &r);
    assert_int_equal(r.n, 3);
    assert_int_equal(find(&r, "bin")->len, sizeof(bin));
    assert_memory_equal(find(&r, "bin")->value, bin, sizeof(bin));
    assert_int_equal(find(&r, "empty")->len, 0);
    assert_int_equal(find(&r, "empty")->mod_rev, c.rev);
    assert_int_equal(find(&r, "nul")->len, 1);
    range_res_free(&r);
}

/* Completion order: several operations started in one turn complete in that order; a range sees the
 * commits before it; a commit started from a callback does not complete inside it. */
typedef struct order {
    fx_t *fx;
    int seq;
    int got[8];
    int64_t revs[8];
    size_t range_n;
    bool in_cb, nested_done;
} order_t;

typedef struct order_slot {
    order_t *o;
    int idx;
} order_slot_t;

static void order_commit_cb(int status, int64_t revision, const char *errtext, void *ud)
{
    order_slot_t *sl = ud;

    assert_int_equal(status, 0);
    assert_false(sl->o->in_cb);
    sl->o->got[sl->idx] = ++sl->o->seq;
    sl->o->revs[sl->idx] = revision;
    if (sl->idx == 4)
        sl->o->nested_done = true;
}

static void order_range_cb(int status, const tide_store_kv_t *kvs, size_t n, int64_t revision,
                           const char *errtext, void *ud)
{
    order_slot_t *sl = ud;
    tide_store_batch_t *b = tide_store_batch_new();

    assert_int_equal(status, 0);
    sl->o->got[sl->idx] = ++sl->o->seq;
    sl->o->range_n = n;
    /* a commit from inside a callback */
    sl->o->in_cb = true;
    tide_store_batch_put(b, "nested", "n", 1);
    assert_int_equal(tide_store_commit(sl->o->fx->s, b, order_commit_cb, sl + 2), 0);
    sl->o->in_cb = false;
}

static void test_completion_order(void **state)
{
    fx_t *fx = *state;
    order_t o = {.fx = fx};
    order_slot_t sl[5];
    tide_store_batch_t *b;

    for (int i = 0; i < 5; i++)
        sl[i] = (order_slot_t){&o, i};
    for (int i = 0; i < 2; i++) {
        b = tide_store_batch_new();
        tide_store_batch_put(b, i ? "k1" : "k0", "v", 1);
        assert_int_equal(tide_store_commit(fx->s, b, order_commit_cb, &sl[i]), 0);
    }
    assert_int_equal(tide_store_range(fx->s, "", order_range_cb, &sl[2]), 0);
    b = tide_store_batch_new();
    tide_store_batch_put(b, "k3", "v", 1);
    assert_int_equal(tide_store_commit(fx->s, b, order_commit_cb, &sl[3]), 0);
    assert_int_equal(o.seq, 0);
    wait_for(fx, &o.nested_done);
    for (int i = 0; i < 5; i++)
        assert_int_equal(o.got[i], i + 1);
    assert_int_equal(o.range_n, 2); /* saw both earlier commits, not the later one */
    assert_int_equal(o.revs[0], fx->base + 1);
    assert_int_equal(o.revs[1], fx->base + 2);
    assert_int_equal(o.revs[3], fx->base + 3);
    assert_int_equal(o.revs[4], fx->base + 4);
}

static void test_close_with_pending(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c = {0};
    range_res_t r = {0};

    tide_store_batch_put(b, "after", "2", 1);
    assert_int_equal(tide_store_commit(fx->s, b, on_commit, &c), 0);
    assert_int_equal(tide_store_range(fx->s, "", on_range, &r), 0);
    tide_store_close(fx->s);
    fx->s = NULL;
    assert_false(c.done); /* not inside close */
    assert_false(r.done);
    wait_for(fx, &c.done);
    wait_for(fx, &r.done);
    assert_int_equal(c.status, -ESHUTDOWN);
    assert_int_equal(r.status, -ESHUTDOWN);
    assert_int_equal(r.n, 0);
    range_res_free(&r);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    open_url(fx, fx->url); /* teardown closes it */
}

typedef struct close_in_cb {
    fx_t *fx;
    commit_res_t first, second;
} close_in_cb_t;

static void close_first_cb(int status, int64_t revision, const char *errtext, void *ud)
{
    close_in_cb_t *t = ud;

    on_commit(status, revision, errtext, &t->first);
    tide_store_close(t->fx->s);
    t->fx->s = NULL;
    assert_false(t->second.done);
}

static void test_close_in_callback(void **state)
{
    fx_t *fx = *state;
    close_in_cb_t t = {.fx = fx};
    tide_store_batch_t *b1 = tide_store_batch_new(), *b2 = tide_store_batch_new();

    tide_store_batch_put(b1, "one", "1", 1);
    tide_store_batch_put(b2, "two", "2", 1);
    assert_int_equal(tide_store_commit(fx->s, b1, close_first_cb, &t), 0);
    assert_int_equal(tide_store_commit(fx->s, b2, on_commit, &t.second), 0);
    wait_for(fx, &t.second.done);
    assert_int_equal(t.first.status, 0);
    assert_int_equal(t.second.status, -ESHUTDOWN);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    open_url(fx, fx->url);
}

static void test_invalid_calls(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c = {0};
    range_res_t r = {0};

    b = tide_store_batch_new();
    tide_store_batch_put(b, "", "v", 1);
    assert_int_equal(tide_store_commit(fx->s, b, on_commit, &c), -EINVAL);
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "k", -1);
    assert_int_equal(tide_store_commit(fx->s, b, on_commit, &c), -EINVAL);
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "", 0);
    assert_int_equal(tide_store_commit(fx->s, b, on_commit, &c), -EINVAL);
    assert_int_equal(tide_store_commit(fx->s, tide_store_batch_new(), NULL, NULL), -EINVAL);
    assert_int_equal(tide_store_range(fx->s, NULL, on_range, &r), -EINVAL);
    assert_int_equal(tide_store_range(fx->s, "", NULL, NULL), -EINVAL);
    /* Run the loop through a real operation: the failed starts still never call back. */
    put1(fx, "k", "v");
    assert_false(c.done);
    assert_false(r.done);
}

/* --- etcd only: no member control needed --- */

static void test_etcd_bad_urls(void **state)
{
    fx_t *fx = *state;
    static const char *const bad[] = {
        "etcd:",         "etcd:127.0.0.1:2379", "etcd://",     "etcd:///tide",    "etcd://host",
        "etcd://host:0", "etcd://host:99999",   "etcd://a:1,", "etcd://a:1,,b:2", "etcd://:2379"};
    tide_store_t *s = NULL;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tide_error_t err = {{0}};
        int rc = tide_store_open(&fx->loop, bad[i], &s, &err);

        if (rc != -EINVAL)
            fail_msg("open %s: %d (%s), expected -EINVAL", bad[i], rc, err.text);
        assert_null(s);
        assert_true(strlen(err.text) > 0);
    }
}

/* A port that refuses: bound, never listening. */
static int refusing_port(int *fd)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);

    *fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*fd >= 0);
    assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(*fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

static void test_etcd_unreachable(void **state)
{
    fx_t *fx = *state;
    tide_store_t *s = NULL;
    tide_error_t err = {{0}};
    char url[128], want[64];
    int fd, port = refusing_port(&fd);

    snprintf(url, sizeof(url), "etcd://127.0.0.1:%d/x/", port);
    assert_int_equal(tide_store_open(&fx->loop, url, &s, &err), -EIO);
    assert_null(s);
    snprintf(want, sizeof(want), "etcd at 127.0.0.1:%d: connection refused", port);
    if (!strstr(err.text, want))
        fail_msg("message \"%s\" lacks \"%s\"", err.text, want);
    close(fd);
}

/* A 1.2 MiB value with other ops and a compare: too big to share a txn with the rest. */
static void test_etcd_split_big(void **state)
{
    fx_t *fx = *state;
    size_t len = 1200u * 1024u;
    uint8_t *big = malloc(len), *big2 = malloc(len);
    tide_store_batch_t *b = tide_store_batch_new();
    int64_t fence = put1(fx, "meta/leader", "me");
    commit_res_t c;
    range_res_t r;
    char key[32];

    fill(big, len, 1);
    fill(big2, len, 2);
    tide_store_batch_compare(b, "meta/leader", fence);
    tide_store_batch_put(b, "a/small", "s", 1);
    tide_store_batch_put(b, "b/big", big, len);
    tide_store_batch_put(b, "c/big2", big2, len);
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "d/%d", i);
        tide_store_batch_put(b, key, "x", 1);
    }
    commit_wait(fx, b, &c);
    if (c.status != 0)
        fail_msg("1.2 MiB values: %d %s", c.status, c.text);
    range_wait(fx, "", &r);
    assert_int_equal(r.n, 14);
    assert_int_equal(find(&r, "b/big")->len, len);
    assert_memory_equal(find(&r, "b/big")->value, big, len);
    assert_memory_equal(find(&r, "c/big2")->value, big2, len);
    assert_true(find(&r, "c/big2")->mod_rev > find(&r, "b/big")->mod_rev); /* separate txns */
    assert_int_equal(r.rev, c.rev);
    range_res_free(&r);

    /* One value over etcd's request limit cannot be stored: -EIO naming the key, nothing written.
     */
    free(big);
    big = calloc(1, 1600u * 1024u);
    b = tide_store_batch_new();
    tide_store_batch_put(b, "e/huge", big, 1600u * 1024u);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -EIO);
    assert_non_null(strstr(c.text, "e/huge"));
    range_wait(fx, "e/", &r);
    assert_int_equal(r.n, 0);
    range_res_free(&r);
    free(big);
    free(big2);
}

/* A range over several pages (1000 keys each) reads at one revision. */
static void test_etcd_paged_range(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;
    char key[32];

    for (int i = 0; i < 2500; i++) {
        snprintf(key, sizeof(key), "w/%05d", i);
        tide_store_batch_put(b, key, key, strlen(key));
    }
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    range_wait(fx, "w/", &r);
    assert_int_equal(r.n, 2500);
    for (size_t i = 0; i < r.n; i++) {
        snprintf(key, sizeof(key), "w/%05zu", i);
        assert_string_equal(r.kvs[i].key, key);
    }
    assert_int_equal(r.rev, c.rev);
    range_res_free(&r);
}

/* --- etcd_client helpers --- */

static void test_etcd_helpers(void **state)
{
    uint8_t *out;
    size_t len;
    int64_t v;
    cJSON *j;
    char *s;

    (void)state;
    for (size_t n = 0; n < 300; n++) {
        uint8_t buf[300];
        fill(buf, n, (uint32_t)n);
        s = tide_etcd_b64(buf, n);
        assert_int_equal(strlen(s), (n + 2) / 3 * 4);
        assert_int_equal(tide_etcd_unb64(s, &out, &len), 0);
        assert_int_equal(len, n);
        assert_memory_equal(out, buf, n);
        assert_int_equal(out[n], 0);
        free(out);
        free(s);
    }
    s = tide_etcd_b64("foo", 3);
    assert_string_equal(s, "Zm9v");
    free(s);
    assert_int_equal(tide_etcd_unb64("Zm9vYg", &out, &len), 0); /* unpadded */
    assert_int_equal(len, 4);
    free(out);
    assert_int_equal(tide_etcd_unb64("Zm9v!", &out, &len), -EINVAL);
    assert_null(out);
    assert_int_equal(tide_etcd_unb64("Z", &out, &len), -EINVAL);

    j = cJSON_Parse(
        "{\"id\":\"7587853340419452928\",\"neg\":\"-5\",\"num\":42,\"big\":\"9223372036854775808\","
        "\"junk\":\"12a\",\"f\":1.5,\"max\":\"9223372036854775807\",\"b\":true}");
    assert_int_equal(tide_etcd_json_int64(j, "id", &v), 0);
    assert_true(v == INT64_C(7587853340419452928)); /* above 2^53: exact */
    assert_int_equal(tide_etcd_json_int64(j, "neg", &v), 0);
    assert_int_equal(v, -5);
    assert_int_equal(tide_etcd_json_int64(j, "num", &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(tide_etcd_json_int64(j, "missing", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(tide_etcd_json_int64(j, "max", &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(tide_etcd_json_int64(j, "big", &v), -EINVAL);
    assert_int_equal(tide_etcd_json_int64(j, "junk", &v), -EINVAL);
    assert_int_equal(tide_etcd_json_int64(j, "f", &v), -EINVAL);
    assert_int_equal(tide_etcd_json_int64(j, "b", &v), -EINVAL);
    cJSON_Delete(j);

    out = tide_etcd_prefix_end("ab", 2, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(out, "ac", 2);
    free(out);
    out = tide_etcd_prefix_end("a\xff\xff", 3, &len);
    assert_int_equal(len, 1);
    assert_memory_equal(out, "b", 1);
    free(out);
    out = tide_etcd_prefix_end("", 0, &len);
    assert_int_equal(len, 1);
    assert_int_equal(out[0], 0);
    free(out);
}

/* --- etcd client calls and watches, with members stopped and compacted by the wrapper --- */

static int g_ctl_in = -1, g_ctl_out = -1; /* to and from the wrapper */
static char g_members[3][64];
static int g_nmembers;

/* Sends one command ("kill 0") to the wrapper and waits for its "ok ..." line; returns what
 * follows. */
static void ctl(const char *cmd, char *reply, size_t len)
{
    char line[512];
    size_t n = 0;

    assert_true(g_ctl_out >= 0);
    assert_int_equal(write(g_ctl_out, cmd, strlen(cmd)), (ssize_t)strlen(cmd));
    assert_int_equal(write(g_ctl_out, "\n", 1), 1);
    while (n < sizeof(line) - 1) {
        ssize_t r = read(g_ctl_in, line + n, 1);
        assert_int_equal(r, 1);
        if (line[n] == '\n')
            break;
        n++;
    }
    line[n] = '\0';
    if (strncmp(line, "ok", 2) != 0)
        fail_msg("control \"%s\": %s", cmd, line);
    if (reply)
        snprintf(reply, len, "%s", line[2] ? line + 3 : "");
}

typedef struct call_res {
    bool done;
    int status;
    char text[512];
    int64_t rev;
} call_res_t;

static void on_call(int status, const cJSON *resp, const char *errtext, void *ud)
{
    call_res_t *r = ud;

    assert_false(r->done);
    assert_non_null(errtext);
    r->done = true;
    r->status = status;
    snprintf(r->text, sizeof(r->text), "%s", errtext);
    if (status == 0)
        tide_etcd_json_int64(cJSON_GetObjectItemCaseSensitive(resp, "header"), "revision", &r->rev);
    else
        assert_null(resp);
}

static void call_wait(fx_t *fx, tide_etcd_t *c, const char *path, const char *body, call_res_t *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(tide_etcd_call(c, path, body, 5000, on_call, r), 0);
    assert_false(r->done);
    wait_for(fx, &r->done);
}

static void test_etcd_calls(void **state)
{
    fx_t *fx = *state;
    tide_etcd_t *c;
    tide_error_t err = {{0}};
    call_res_t r;

    assert_int_equal(tide_etcd_new(&fx->loop, g_hosts, &c, &err), 0);
    assert_int_equal(tide_etcd_probe(c, 3000, &err), 0);
    call_wait(fx, c, "/v3/kv/range", "{\"key\":\"AA==\",\"limit\":\"1\"}", &r);
    assert_int_equal(r.status, 0);
    assert_true(r.rev > 0);
    /* an HTTP 400: etcd's message, -EINVAL */
    call_wait(fx, c, "/v3/kv/range", "{\"key\":\"AA==\",\"revision\":\"999999999\"}", &r);
    assert_int_equal(r.status, -EINVAL);
    assert_non_null(strstr(r.text, "future revision"));
    assert_int_equal(tide_etcd_call(c, "v3/kv/range", "{}", 1000, on_call, &r), -EINVAL);
    assert_int_equal(tide_etcd_call(c, "/v3/kv/range", "{}", 0, on_call, &r), -EINVAL);
    /* pending at free: -ESHUTDOWN from the loop */
    memset(&r, 0, sizeof(r));
    assert_int_equal(tide_etcd_call(c, "/v3/kv/range", "{\"key\":\"AA==\"}", 5000, on_call, &r), 0);
    tide_etcd_free(c);
    assert_false(r.done);
    wait_for(fx, &r.done);
    assert_int_equal(r.status, -ESHUTDOWN);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
}

/* etcd restarted between two commits; then stopped: -EIO after the call timeout; then back. */
static void test_etcd_restart(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c;
    char url[256];

    close_store(fx);
    snprintf(url, sizeof(url), "etcd://%s/restart-%ld/", g_members[0], (long)getpid());
    snprintf(fx->url, sizeof(fx->url), "%s", url);
    open_url(fx, url);
    put1(fx, "a", "1");
    ctl("restart 0", NULL, 0);
    put1(fx, "b", "2"); /* the kept-alive connection died with the member: a new one */

    ctl("stop 0", NULL, 0);
    b = tide_store_batch_new();
    tide_store_batch_put(b, "c", "3", 1);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -EIO);
    if (!strstr(c.text, g_members[0]) || !strstr(c.text, "connection refused"))
        fail_msg("text: %s", c.text);
    ctl("start 0", NULL, 0);
    put1(fx, "c", "3");
}

/* A 3-member cluster with the member in use killed still serves. */
static void test_etcd_failover(void **state)
{
    fx_t *fx = *state;
    range_res_t r;

    put1(fx, "before", "1"); /* the client now prefers member 0 */
    ctl("kill 0", NULL, 0);
    put1(fx, "after", "2");
    range_wait(fx, "", &r);
    assert_int_equal(r.n, 2);
    range_res_free(&r);
    ctl("start 0", NULL, 0);
}

typedef struct wstate {
    int events, synced, compacted, ended;
    int64_t compact_rev;
    int64_t last_mod;
    char keys[16][64];
    bool dup;
} wstate_t;

static void w_event(const tide_etcd_event_t *ev, void *ud)
{
    wstate_t *w = ud;

    if (ev->mod_rev <= w->last_mod)
        w->dup = true;
    w->last_mod = ev->mod_rev;
    if (w->events < 16)
        snprintf(w->keys[w->events], sizeof(w->keys[0]), "%s%s", ev->is_delete ? "-" : "", ev->key);
    w->events++;
}

static void w_synced(int64_t rev, void *ud)
{
    ((wstate_t *)ud)->synced++;
}

static void w_compacted(int64_t rev, void *ud)
{
    wstate_t *w = ud;

    w->compacted++;
    w->compact_rev = rev;
    w->last_mod = rev - 1; /* events from rev on come again */
}

static void w_end(int status, const char *text, void *ud)
{
    ((wstate_t *)ud)->ended++;
}

static const tide_etcd_watch_cbs_t wcbs = {w_event, w_synced, w_compacted, w_end};

static void wait_count(fx_t *fx, const int *count, int want)
{
    uint64_t deadline = uv_hrtime() + DEADLINE_NS;

    while (*count < want) {
        assert_true(uv_hrtime() < deadline);
        uv_run(&fx->loop, UV_RUN_ONCE);
    }
}

static char *prefix_of(const fx_t *fx)
{
    const char *p = strchr(fx->url + strlen("etcd://"), '/');
    return strdup(p);
}

/* A watch on member 2 resumes on another member when member 2 is killed, without losing or
 * repeating. */
static void test_etcd_watch_failover(void **state)
{
    fx_t *fx = *state;
    tide_etcd_t *c;
    tide_etcd_watch_t *w;
    tide_error_t err = {{0}};
    wstate_t ws = {0};
    char eps[256], *prefix = prefix_of(fx);
    tide_store_batch_t *b;
    commit_res_t cr;

    snprintf(eps, sizeof(eps), "%s,%s,%s", g_members[2], g_members[0], g_members[1]);
    assert_int_equal(tide_etcd_new(&fx->loop, eps, &c, &err), 0);
    assert_int_equal(tide_etcd_watch(c, prefix, strlen(prefix), true, 0, &wcbs, &ws, &w), 0);
    wait_count(fx, &ws.synced, 1);
    put1(fx, "k1", "v1");
    wait_count(fx, &ws.events, 1);
    ctl("kill 2", NULL, 0);
    put1(fx, "k2", "v2");
    b = tide_store_batch_new();
    tide_store_batch_delete(b, "k1");
    commit_wait(fx, b, &cr);
    assert_int_equal(cr.status, 0);
    wait_count(fx, &ws.events, 3);
    assert_true(ws.synced >= 2);
    assert_false(ws.dup);
    assert_int_equal(ws.events, 3);
    assert_non_null(strstr(ws.keys[0], "k1"));
    assert_non_null(strstr(ws.keys[1], "k2"));
    assert_int_equal(ws.keys[2][0], '-');
    ctl("start 2", NULL, 0);
    tide_etcd_watch_cancel(w);
    tide_etcd_free(c);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_int_equal(ws.ended, 0); /* canceled: no on_end */
    free(prefix);
}

/* A watch from a compacted revision reports the compaction, then continues from the compact
 * revision. */
static void test_etcd_watch_compacted(void **state)
{
    fx_t *fx = *state;
    tide_etcd_t *c;
    tide_etcd_watch_t *w;
    tide_error_t err = {{0}};
    wstate_t ws = {0};
    char cmd[64], *prefix = prefix_of(fx);
    int64_t r1, r3;

    r1 = put1(fx, "k1", "1");
    put1(fx, "k2", "2");
    r3 = put1(fx, "k3", "3");
    snprintf(cmd, sizeof(cmd), "compact %" PRId64, r3);
    ctl(cmd, NULL, 0);
    assert_int_equal(tide_etcd_new(&fx->loop, g_hosts, &c, &err), 0);
    assert_int_equal(tide_etcd_watch(c, prefix, strlen(prefix), true, r1, &wcbs, &ws, &w), 0);
    wait_count(fx, &ws.compacted, 1);
    assert_int_equal(ws.compact_rev, r3);
    wait_count(fx, &ws.events, 1); /* k3, at the compact revision */
    assert_non_null(strstr(ws.keys[0], "k3"));
    put1(fx, "k4", "4");
    wait_count(fx, &ws.events, 2);
    assert_non_null(strstr(ws.keys[1], "k4"));
    /* Freed with the watch live: on_end(-ESHUTDOWN) from the loop. */
    tide_etcd_free(c);
    assert_int_equal(ws.ended, 0);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
    assert_int_equal(ws.ended, 1);
    free(prefix);
}

/* --- main --- */

static int parse_members(void)
{
    const char *m = getenv("TIDE_TEST_ETCD_MEMBERS");
    const char *in = getenv("TIDE_TEST_CTL_IN"), *out = getenv("TIDE_TEST_CTL_OUT");

    if (!m || !in || !out)
        return 0;
    for (const char *p = m; *p && g_nmembers < 3;) {
        size_t n = strcspn(p, ",");
        snprintf(g_members[g_nmembers++], sizeof(g_members[0]), "%.*s", (int)n, p);
        p += n;
        if (*p == ',')
            p++;
    }
    g_ctl_in = atoi(in);
    g_ctl_out = atoi(out);
    return g_nmembers;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest shared[] = {
        cmocka_unit_test_setup_teardown(test_put_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefix_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revisions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compares, setup, teardown),
        cmocka_unit_test_setup_teardown(test_later_op_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_big_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_300, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unusual_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_and_binary_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_completion_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_pending, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_in_callback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_calls, setup, teardown),
        cmocka_unit_test(test_etcd_helpers),
    };
    const struct CMUnitTest etcd[] = {
        cmocka_unit_test_setup_teardown(test_etcd_bad_urls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_etcd_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_etcd_split_big, setup, teardown),
        cmocka_unit_test_setup_teardown(test_etcd_paged_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_etcd_calls, setup, teardown),
    };
    const struct CMUnitTest etcd_ctl[] = {
        cmocka_unit_test_setup_teardown(test_etcd_watch_compacted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_etcd_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_etcd_watch_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_etcd_restart, setup, teardown),
    };
    int failed;

    g_url = argc > 1 ? argv[1] : getenv("TIDE_TEST_STORE_URL");
    if (!g_url) {
        fprintf(stderr,
                "usage: test_store_conformance URL (or TIDE_TEST_STORE_URL): mem:, sqlite: or "
                "etcd://HOST:PORT[,...]\n");
        return 2;
    }
    if (strncmp(g_url, "sqlite:", 7) == 0) {
        g_kind = KIND_SQLITE;
    } else if (strncmp(g_url, "etcd://", 7) == 0) {
        g_kind = KIND_ETCD;
        g_hosts = g_url + 7;
        if (strchr(g_hosts, '/')) {
            fprintf(stderr, "test_store_conformance: give etcd://HOSTS without a prefix\n");
            return 2;
        }
    } else if (strncmp(g_url, "mem:", 4) == 0) {
        g_kind = KIND_MEM;
    } else {
        fprintf(stderr, "test_store_conformance: unknown URL %s\n", g_url);
        return 2;
    }
    failed = _cmocka_run_group_tests(g_url, shared, sizeof(shared) / sizeof(shared[0]), NULL, NULL);
    if (g_kind == KIND_ETCD) {
        failed += cmocka_run_group_tests_name("etcd", etcd, NULL, NULL);
        if (parse_members() == 3)
            failed += cmocka_run_group_tests_name("etcd members", etcd_ctl, NULL, NULL);
        else
            fprintf(stderr,
                    "skipping the member tests: no TIDE_TEST_ETCD_MEMBERS/TIDE_TEST_CTL_*\n");
    }
    return failed ? 1 : 0;
}

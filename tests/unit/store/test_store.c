/* The store conformance suite: the same loop-driven tests run against every embedded backend (mem:,
 * and sqlite: in a throwaway directory), then a few backend-only ones. Every operation is awaited
 * by running the loop until its callback has fired, with a deadline; every helper checks the
 * callback did not fire inside the starting call. Each test ends with uv_loop_close() == 0. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>
#include <uv.h>

#include "store.h"

typedef struct backend {
    const char *name;
    bool sqlite;
} backend_t;

static const backend_t mem_backend = {"mem", false};
static const backend_t sqlite_backend = {"sqlite", true};

typedef struct fx {
    const backend_t *be;
    uv_loop_t loop;
    char dir[64];
    char path[128];
    char url[160];
    tide_store_t *s;
} fx_t;

#define DEADLINE_NS (20ull * 1000 * 1000 * 1000)

/* --- awaiting callbacks --- */

typedef struct commit_res {
    bool done;
    int status;
    int64_t rev;
    char text[256];
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
    char text[256];
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
    assert_int_equal(res->status, 0);
}

/* Puts one string value; returns the revision of the commit. */
static int64_t put1(fx_t *fx, const char *key, const char *value)
{
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t res;

    tide_store_batch_put(b, key, value, strlen(value));
    commit_wait(fx, b, &res);
    assert_int_equal(res.status, 0);
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

    assert_non_null(kv);
    assert_int_equal(kv->len, strlen(value));
    assert_memory_equal(kv->value, value, kv->len);
}

/* --- fixture --- */

static void open_store(fx_t *fx)
{
    tide_error_t err = {{0}};
    int rc = tide_store_open(&fx->loop, fx->url, &fx->s, &err);

    if (rc != 0)
        fail_msg("open %s: %d %s", fx->url, rc, err.text);
}

/* Closes the store and lets the loop deliver what close cancelled. */
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

    fx->be = *state;
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    if (fx->be->sqlite) {
        snprintf(fx->dir, sizeof(fx->dir), "%s/tide-store-XXXXXX",
                 tmp && strlen(tmp) < 32 ? tmp : "/tmp");
        assert_non_null(mkdtemp(fx->dir));
        snprintf(fx->path, sizeof(fx->path), "%s/state.db", fx->dir);
        snprintf(fx->url, sizeof(fx->url), "sqlite:%s", fx->path);
    } else {
        snprintf(fx->url, sizeof(fx->url), "mem:");
    }
    open_store(fx);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;

    close_store(fx);
    assert_int_equal(uv_loop_close(&fx->loop), 0);
    if (fx->be->sqlite)
        remove_dir(fx->dir);
    free(fx);
    return 0;
}

/* --- conformance: both backends --- */

static void test_put_get(void **state)
{
    fx_t *fx = *state;
    range_res_t r;

    assert_string_equal(tide_store_scheme(fx->s), fx->be->name);
    range_wait(fx, "", &r);
    assert_int_equal(r.n, 0);
    assert_int_equal(r.rev, 0);
    range_res_free(&r);

    assert_int_equal(put1(fx, "jobs/1", "hello"), 1);
    range_wait(fx, "jobs/1", &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.kvs[0].key, "jobs/1");
    assert_value(&r, "jobs/1", "hello");
    assert_int_equal(r.kvs[0].create_rev, 1);
    assert_int_equal(r.kvs[0].mod_rev, 1);
    assert_int_equal(r.rev, 1);
    range_res_free(&r);

    range_wait(fx, "jobs/2", &r); /* absent key: empty result, not an error */
    assert_int_equal(r.n, 0);
    assert_int_equal(r.rev, 1);
    range_res_free(&r);
}

static void test_prefix_order(void **state)
{
    fx_t *fx = *state;
    static const char *const keys[] = {
        "jobs/3", "workers/a", "jobs/10", "jobsx", "meta/leader", "jobs/1",    "jobs/",
        "job",    "a\xff\xff", "a\xff",   "b",     "\xff",        "\xff\xff/x"};
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
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
    assert_int_equal(r.n, sizeof(keys) / sizeof(keys[0]));
    for (size_t i = 1; i < r.n; i++)
        assert_true(strcmp(r.kvs[i - 1].key, r.kvs[i].key) < 0);
    range_res_free(&r);

    /* Prefixes ending in 0xff have no simple upper bound. */
    range_wait(fx, "a\xff", &r);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.kvs[0].key, "a\xff");
    assert_string_equal(r.kvs[1].key, "a\xff\xff");
    range_res_free(&r);
    range_wait(fx, "\xff", &r);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.kvs[0].key, "\xff");
    assert_string_equal(r.kvs[1].key, "\xff\xff/x");
    range_res_free(&r);

    range_wait(fx, "workers/", &r);
    assert_int_equal(r.n, 1);
    assert_value(&r, "workers/a", "workers/a");
    range_res_free(&r);
}

static void test_delete(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    put1(fx, "jobs/1", "a");
    assert_int_equal(put1(fx, "jobs/2", "b"), 2);

    b = tide_store_batch_new();
    tide_store_batch_delete(b, "jobs/1");
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, 3);

    range_wait(fx, "jobs/", &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.kvs[0].key, "jobs/2");
    assert_int_equal(r.rev, 3);
    range_res_free(&r);

    /* Deleting what is not there succeeds and changes nothing, not even the revision. */
    b = tide_store_batch_new();
    tide_store_batch_delete(b, "jobs/1");
    tide_store_batch_delete(b, "jobs/9");
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, 3);

    /* A re-created key starts a new life: create_rev is the new revision. */
    assert_int_equal(put1(fx, "jobs/1", "again"), 4);
    range_wait(fx, "jobs/1", &r);
    assert_int_equal(r.kvs[0].create_rev, 4);
    assert_int_equal(r.kvs[0].mod_rev, 4);
    range_res_free(&r);
}

static void test_revisions(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    assert_int_equal(put1(fx, "a", "1"), 1);

    b = tide_store_batch_new(); /* three keys, one revision */
    tide_store_batch_put(b, "b", "2", 1);
    tide_store_batch_put(b, "c", "3", 1);
    tide_store_batch_put(b, "d", "4", 1);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, 2);

    assert_int_equal(put1(fx, "a", "1b"), 3);

    range_wait(fx, "", &r);
    assert_int_equal(r.rev, 3);
    assert_int_equal(r.n, 4);
    assert_int_equal(find(&r, "a")->create_rev, 1);
    assert_int_equal(find(&r, "a")->mod_rev, 3);
    assert_value(&r, "a", "1b");
    for (const char *const *k = (const char *const[]){"b", "c", "d", NULL}; *k; k++) {
        assert_int_equal(find(&r, *k)->create_rev, 2);
        assert_int_equal(find(&r, *k)->mod_rev, 2);
    }
    range_res_free(&r);
}

static void test_compare_success(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    put1(fx, "jobs/1", "v1");
    /* compare-and-swap on the current mod_rev, plus create-if-absent (mod_rev 0) */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/1", 1);
    tide_store_batch_compare(b, "meta/leader", 0);
    tide_store_batch_put(b, "jobs/1", "v2", 2);
    tide_store_batch_put(b, "meta/leader", "me", 2);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_string_equal(c.text, "");
    assert_int_equal(c.rev, 2);

    range_wait(fx, "", &r);
    assert_value(&r, "jobs/1", "v2");
    assert_value(&r, "meta/leader", "me");
    range_res_free(&r);

    /* A batch of compares only succeeds without bumping the revision. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/1", 2);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, 2);
}

static void test_compare_failure(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    put1(fx, "jobs/1", "v1");
    put1(fx, "jobs/2", "w1");

    /* Wrong mod_rev: nothing of the batch is written. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/1", 7);
    tide_store_batch_put(b, "jobs/1", "v2", 2);
    tide_store_batch_put(b, "jobs/3", "new", 3);
    tide_store_batch_delete(b, "jobs/2");
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_int_equal(c.rev, 2);
    assert_non_null(strstr(c.text, "jobs/1"));

    /* mod_rev 0 on an existing key: "must not exist" fails. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/2", 0);
    tide_store_batch_put(b, "jobs/2", "w2", 2);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);

    /* A non-zero mod_rev on a missing key fails. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/9", 1);
    tide_store_batch_put(b, "jobs/9", "x", 1);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);

    range_wait(fx, "", &r);
    assert_int_equal(r.rev, 2);
    assert_int_equal(r.n, 2);
    assert_value(&r, "jobs/1", "v1");
    assert_value(&r, "jobs/2", "w1");
    assert_int_equal(find(&r, "jobs/1")->mod_rev, 1);
    range_res_free(&r);
}

static void test_batch_atomicity(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;
    char key[32];

    put1(fx, "meta/epoch", "1");
    put1(fx, "jobs/1", "old");

    /* Many ops, several compares of which only the last fails: nothing applies. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "meta/epoch", 1);
    tide_store_batch_compare(b, "jobs/1", 2);
    tide_store_batch_compare(b, "jobs/50", 1);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "jobs/%d", i);
        tide_store_batch_put(b, key, "new", 3);
    }
    tide_store_batch_delete(b, "meta/epoch");
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_non_null(strstr(c.text, "jobs/50"));

    range_wait(fx, "", &r);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.rev, 2);
    assert_value(&r, "jobs/1", "old");
    assert_value(&r, "meta/epoch", "1");
    range_res_free(&r);

    /* The same batch with true compares applies whole, at one revision. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "meta/epoch", 1);
    tide_store_batch_compare(b, "jobs/1", 2);
    tide_store_batch_compare(b, "jobs/50", 0);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "jobs/%d", i);
        tide_store_batch_put(b, key, "new", 3);
    }
    tide_store_batch_delete(b, "meta/epoch");
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, 3);
    range_wait(fx, "", &r);
    assert_int_equal(r.n, 100);
    for (size_t i = 0; i < r.n; i++) {
        assert_int_equal(r.kvs[i].mod_rev, 3);
        assert_memory_equal(r.kvs[i].value, "new", 3);
    }
    assert_int_equal(find(&r, "jobs/1")->create_rev, 2);
    assert_null(find(&r, "meta/epoch"));
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
    assert_int_equal(tide_store_batch_count(b), 0);
    assert_int_equal(tide_store_batch_bytes(b), 0);
    tide_store_batch_put(b, "a", "1", 1);
    tide_store_batch_put(b, "a", "22", 2); /* put, put: the second value */
    tide_store_batch_put(b, "b", "1", 1);
    tide_store_batch_delete(b, "b"); /* put, delete: gone */
    tide_store_batch_delete(b, "c");
    tide_store_batch_put(b, "c", "333", 3); /* delete, put: there */
    tide_store_batch_put(b, "d", "x", 1);
    tide_store_batch_delete(b, "d"); /* an existing key: put then delete deletes it */
    assert_int_equal(tide_store_batch_count(b), 4);
    /* keys a b c d + values "22" "333" */
    assert_int_equal(tide_store_batch_bytes(b), 4 + 2 + 3);
    tide_store_batch_compare(b, "zz", 0);
    assert_int_equal(tide_store_batch_bytes(b), 4 + 2 + 3 + 2);
    assert_int_equal(tide_store_batch_count(b), 4);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);

    range_wait(fx, "", &r);
    assert_int_equal(r.n, 2);
    assert_value(&r, "a", "22");
    assert_value(&r, "c", "333");
    range_res_free(&r);
}

static void test_large_batch_coalescing(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;
    char key[32], val[32];

    /* Enough keys to go past the batch's linear scan into its hash index, each written 3 times. */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 2000; i++) {
            snprintf(key, sizeof(key), "workers/%05d", i);
            snprintf(val, sizeof(val), "r%d-%d", round, i);
            if (round == 1 && i % 2)
                tide_store_batch_delete(b, key);
            else
                tide_store_batch_put(b, key, val, strlen(val));
        }
    }
    assert_int_equal(tide_store_batch_count(b), 2000);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, 1);

    range_wait(fx, "workers/", &r);
    assert_int_equal(r.n, 2000);
    for (size_t i = 0; i < r.n; i++) {
        snprintf(key, sizeof(key), "workers/%05zu", i);
        snprintf(val, sizeof(val), "r2-%zu", i);
        assert_string_equal(r.kvs[i].key, key);
        assert_int_equal(r.kvs[i].len, strlen(val));
        assert_memory_equal(r.kvs[i].value, val, strlen(val));
    }
    range_res_free(&r);
}

/* State for the callback-ordering test. */
typedef struct order {
    fx_t *fx;
    int seq;
    int commit_seq, range_seq, nested_seq;
    size_t range_n;
    commit_res_t nested;
    bool in_cb;
} order_t;

static void order_nested_cb(int status, int64_t revision, const char *errtext, void *ud)
{
    order_t *o = ud;

    assert_false(o->in_cb); /* not from inside the callback that started it */
    o->nested_seq = ++o->seq;
    on_commit(status, revision, errtext, &o->nested);
}

static void order_commit_cb(int status, int64_t revision, const char *errtext, void *ud)
{
    order_t *o = ud;
    tide_store_batch_t *b = tide_store_batch_new();

    assert_int_equal(status, 0);
    o->commit_seq = ++o->seq;
    o->in_cb = true;
    tide_store_batch_put(b, "nested", "n", 1);
    assert_int_equal(tide_store_commit(o->fx->s, b, order_nested_cb, o), 0);
    assert_false(o->nested.done);
    o->in_cb = false;
}

static void order_range_cb(int status, const tide_store_kv_t *kvs, size_t n, int64_t revision,
                           const char *errtext, void *ud)
{
    order_t *o = ud;

    assert_int_equal(status, 0);
    o->range_seq = ++o->seq;
    o->range_n = n;
}

static void test_callbacks_never_inline(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    order_t o = {.fx = fx};

    /* A commit and a range made in one turn: neither fires inside its call, both fire in call
     * order, and the range sees the commit (read-your-writes). */
    tide_store_batch_put(b, "k", "v", 1);
    assert_int_equal(tide_store_commit(fx->s, b, order_commit_cb, &o), 0);
    assert_int_equal(tide_store_range(fx->s, "", order_range_cb, &o), 0);
    assert_int_equal(o.seq, 0);
    wait_for(fx, &o.nested.done);
    assert_int_equal(o.commit_seq, 1);
    assert_int_equal(o.range_seq, 2);
    assert_int_equal(o.nested_seq, 3);
    assert_int_equal(o.range_n, 1);
    assert_int_equal(o.nested.status, 0);
    assert_int_equal(o.nested.rev, 2);
}

static void test_close_with_pending(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c = {0};
    range_res_t r = {0};

    put1(fx, "before", "1");
    tide_store_batch_put(b, "after", "2", 1);
    assert_int_equal(tide_store_commit(fx->s, b, on_commit, &c), 0);
    assert_int_equal(tide_store_range(fx->s, "", on_range, &r), 0);
    tide_store_close(fx->s);
    fx->s = NULL;
    assert_false(c.done); /* not from inside close either */
    assert_false(r.done);
    wait_for(fx, &c.done);
    wait_for(fx, &r.done);
    assert_int_equal(c.status, -ESHUTDOWN);
    assert_int_equal(r.status, -ESHUTDOWN);
    assert_int_equal(r.n, 0);
    range_res_free(&r);
    uv_run(&fx->loop, UV_RUN_DEFAULT);

    if (fx->be->sqlite) { /* -ESHUTDOWN means not applied */
        open_store(fx);
        range_wait(fx, "", &r);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.kvs[0].key, "before");
        assert_int_equal(r.rev, 1);
        range_res_free(&r);
    } else {
        open_store(fx); /* teardown closes it */
    }
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

    open_store(fx);
    if (fx->be->sqlite) {
        range_res_t r;
        range_wait(fx, "", &r);
        assert_int_equal(r.n, 1);
        assert_string_equal(r.kvs[0].key, "one");
        range_res_free(&r);
    }
}

static void test_empty_batch(void **state)
{
    fx_t *fx = *state;
    commit_res_t c;

    commit_wait(fx, tide_store_batch_new(), &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, 0);
    put1(fx, "x", "y");
    commit_wait(fx, tide_store_batch_new(), &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, 1);
}

static void test_binary_values(void **state)
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
    assert_int_equal(find(&r, "nul")->len, 1);
    assert_int_equal(find(&r, "nul")->value[0], 0);
    range_res_free(&r);
}

static void test_large_value(void **state)
{
    fx_t *fx = *state;
    size_t len = 1u << 20;
    uint8_t *big = malloc(len);
    uint32_t x = 12345;
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;

    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        big[i] = (uint8_t)(x >> 16);
    }
    tide_store_batch_put(b, "ckpt/big", big, len);
    assert_int_equal(tide_store_batch_bytes(b), strlen("ckpt/big") + len);
    commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);

    range_wait(fx, "ckpt/", &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.kvs[0].len, len);
    assert_memory_equal(r.kvs[0].value, big, len);
    range_res_free(&r);
    free(big);
}

static void test_bad_arguments(void **state)
{
    fx_t *fx = *state;
    tide_store_t *s = (tide_store_t *)0x1;
    tide_error_t err = {{0}};
    tide_store_batch_t *b;
    commit_res_t c = {0};
    range_res_t r = {0};

    assert_int_equal(tide_store_open(&fx->loop, "redis:x", &s, &err), -EINVAL);
    assert_null(s);
    assert_non_null(strstr(err.text, "redis"));
    assert_int_equal(tide_store_open(&fx->loop, "/var/lib/tide.db", &s, &err), -EINVAL);
    assert_non_null(strstr(err.text, "/var/lib/tide.db"));
    assert_int_equal(tide_store_open(&fx->loop, ":x", &s, NULL), -EINVAL);

    /* Failed starts never call back (and the batch is still freed: ASan checks). */
    b = tide_store_batch_new();
    tide_store_batch_put(b, "", "v", 1);
    assert_int_equal(tide_store_commit(fx->s, b, on_commit, &c), -EINVAL);
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "k", -1);
    assert_int_equal(tide_store_commit(fx->s, b, on_commit, &c), -EINVAL);
    assert_int_equal(tide_store_commit(fx->s, tide_store_batch_new(), NULL, NULL), -EINVAL);
    assert_int_equal(tide_store_range(fx->s, NULL, on_range, &r), -EINVAL);
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    assert_false(c.done);
    assert_false(r.done);

    tide_store_batch_free(NULL);
    tide_store_close(NULL);
}

/* --- sqlite only --- */

static void test_sqlite_persistence(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    commit_res_t c;
    range_res_t r;

    put1(fx, "jobs/1", "one");
    tide_store_batch_put(b, "jobs/2", "two\0two", 7);
    tide_store_batch_put(b, "jobs/1", "uno", 3);
    commit_wait(fx, b, &c);
    assert_int_equal(c.rev, 2);
    close_store(fx);

    open_store(fx);
    range_wait(fx, "jobs/", &r);
    assert_int_equal(r.rev, 2);
    assert_int_equal(r.n, 2);
    assert_value(&r, "jobs/1", "uno");
    assert_int_equal(find(&r, "jobs/1")->create_rev, 1);
    assert_int_equal(find(&r, "jobs/1")->mod_rev, 2);
    assert_int_equal(find(&r, "jobs/2")->len, 7);
    assert_memory_equal(find(&r, "jobs/2")->value, "two\0two", 7);
    range_res_free(&r);
    assert_int_equal(put1(fx, "jobs/3", "three"), 3); /* the revision carries on */

    /* The file is in WAL mode (persistent in the file). */
    close_store(fx);
    sqlite3 *db;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
    open_store(fx);
}

static void test_sqlite_busy(void **state)
{
    fx_t *fx = *state;
    tide_store_t *second = (tide_store_t *)0x1;
    tide_error_t err = {{0}};
    char want[64];

    assert_int_equal(tide_store_open(&fx->loop, fx->url, &second, &err), -EBUSY);
    assert_null(second);
    assert_non_null(strstr(err.text, fx->path));
    assert_non_null(strstr(err.text, "in use"));
    snprintf(want, sizeof(want), "(pid %ld)", (long)getpid());
    assert_non_null(strstr(err.text, want));

    /* Free again once the holder closes. */
    close_store(fx);
    open_store(fx);
}

static void test_sqlite_busy_other_process(void **state)
{
    fx_t *fx = *state;
    int ready[2], release[2];
    tide_error_t err = {{0}};
    tide_store_t *s = NULL;
    char want[256], byte;
    pid_t pid;
    int wstatus;

    close_store(fx);
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* child: hold the store until the parent says so */
        uv_loop_t loop;
        int code = 0;
        close(ready[0]);
        close(release[1]);
        if (uv_loop_init(&loop) != 0 || tide_store_open(&loop, fx->url, &s, NULL) != 0)
            code = 1;
        if (write(ready[1], "r", 1) != 1)
            code = 2;
        if (read(release[0], &byte, 1) < 0)
            code = 3;
        tide_store_close(s);
        uv_run(&loop, UV_RUN_DEFAULT);
        uv_loop_close(&loop);
        _exit(code);
    }
    close(ready[1]);
    close(release[0]);
    assert_int_equal(read(ready[0], &byte, 1), 1);

    assert_int_equal(tide_store_open(&fx->loop, fx->url, &s, &err), -EBUSY);
    snprintf(want, sizeof(want), "%s is in use by another process (pid %ld)", fx->path, (long)pid);
    assert_string_equal(err.text, want);

    close(release[1]);
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    close(ready[0]);
    open_store(fx); /* the lock died with its holder */
}

static void test_sqlite_bad_path(void **state)
{
    fx_t *fx = *state;
    tide_store_t *s = NULL;
    tide_error_t err = {{0}};
    char url[256], path[200];
    int rc;

    snprintf(path, sizeof(path), "%s/no/such/dir/state.db", fx->dir);
    snprintf(url, sizeof(url), "sqlite:%s", path);
    rc = tide_store_open(&fx->loop, url, &s, &err);
    assert_true(rc == -EIO || rc == -EINVAL);
    assert_null(s);
    assert_non_null(strstr(err.text, path));

    assert_int_equal(tide_store_open(&fx->loop, "sqlite:", &s, &err), -EINVAL);
    assert_non_null(strstr(err.text, "path"));

    /* A directory is not a database file. */
    snprintf(url, sizeof(url), "sqlite:%s", fx->dir);
    rc = tide_store_open(&fx->loop, url, &s, &err);
    assert_true(rc == -EIO || rc == -EINVAL);
    assert_non_null(strstr(err.text, fx->dir));
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_sqlite_not_a_store(void **state)
{
    fx_t *fx = *state;
    tide_store_t *s = NULL;
    tide_error_t err = {{0}};
    char url[256], path[200];
    sqlite3 *db;

    snprintf(path, sizeof(path), "%s/garbage.db", fx->dir);
    write_file(path,
               "this is not a SQLite file, it is long enough to have a header ............\n");
    snprintf(url, sizeof(url), "sqlite:%s", path);
    assert_int_equal(tide_store_open(&fx->loop, url, &s, &err), -EIO);
    assert_non_null(strstr(err.text, path));

    snprintf(path, sizeof(path), "%s/other.db", fx->dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE users(name TEXT)", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    snprintf(url, sizeof(url), "sqlite:%s", path);
    assert_int_equal(tide_store_open(&fx->loop, url, &s, &err), -EIO);
    assert_non_null(strstr(err.text, "not a tide store"));
}

static void test_sqlite_newer_schema(void **state)
{
    fx_t *fx = *state;
    tide_store_t *s = NULL;
    tide_error_t err = {{0}};
    sqlite3 *db;

    put1(fx, "jobs/1", "x");
    close_store(fx);
    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value = 99 WHERE name = 'schema_version'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    assert_int_equal(tide_store_open(&fx->loop, fx->url, &s, &err), -EIO);
    assert_null(s);
    assert_non_null(strstr(err.text, fx->path));
    assert_non_null(strstr(err.text, "schema version 99"));

    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "UPDATE meta SET value = 1 WHERE name = 'schema_version'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    open_store(fx);
}

static void test_sqlite_no_injection(void **state)
{
    fx_t *fx = *state;

    assert_int_equal(tide_store_mem_inject_failure(fx->s, -EIO, 1), -EINVAL);
}

/* --- mem only --- */

static void test_mem_inject_failure(void **state)
{
    fx_t *fx = *state;
    tide_store_batch_t *b;
    commit_res_t c;
    range_res_t r;

    put1(fx, "a", "1");
    assert_int_equal(tide_store_mem_inject_failure(fx->s, -EIO, 2), 0);
    for (int i = 0; i < 2; i++) {
        b = tide_store_batch_new();
        tide_store_batch_put(b, "a", "2", 1);
        tide_store_batch_put(b, "b", "2", 1);
        commit_wait(fx, b, &c);
        assert_int_equal(c.status, -EIO);
        assert_int_equal(c.rev, 1);
        assert_true(c.text[0] != '\0');
    }
    range_wait(fx, "", &r); /* reads are unaffected; nothing was written */
    assert_int_equal(r.n, 1);
    assert_value(&r, "a", "1");
    range_res_free(&r);

    assert_int_equal(put1(fx, "b", "3"), 2); /* the third commit goes through */
    assert_int_equal(tide_store_mem_inject_failure(fx->s, 1, 1), -EINVAL);
}

#define ON(be, f)                                                                                  \
    {                                                                                              \
#be "/" #f, f, setup, teardown, (void *)&be##_backend                                      \
    }
#define BOTH(f) ON(mem, f), ON(sqlite, f)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_put_get),
        BOTH(test_prefix_order),
        BOTH(test_delete),
        BOTH(test_revisions),
        BOTH(test_compare_success),
        BOTH(test_compare_failure),
        BOTH(test_batch_atomicity),
        BOTH(test_later_op_wins),
        BOTH(test_large_batch_coalescing),
        BOTH(test_callbacks_never_inline),
        BOTH(test_close_with_pending),
        BOTH(test_close_in_callback),
        BOTH(test_empty_batch),
        BOTH(test_binary_values),
        BOTH(test_large_value),
        BOTH(test_bad_arguments),
        ON(sqlite, test_sqlite_persistence),
        ON(sqlite, test_sqlite_busy),
        ON(sqlite, test_sqlite_busy_other_process),
        ON(sqlite, test_sqlite_bad_path),
        ON(sqlite, test_sqlite_not_a_store),
        ON(sqlite, test_sqlite_newer_schema),
        ON(sqlite, test_sqlite_no_injection),
        ON(mem, test_mem_inject_failure),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

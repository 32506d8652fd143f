/* test_store_conformance URL: the semantics every store backend shares, run against the backend the
 * URL names (argument or TIDE_TEST_STORE_URL): "mem:", "sqlite:" (a fresh file in a throwaway
 * directory per test) or "etcd://HOST:PORT[,...]" (a fresh key prefix per test, revisions relative
 * to the test's start). For etcd it adds the backend's own cases; those that stop, kill or restart
 * members or compact need the wrapper tests/integration/test_store_etcd.py, which answers commands
 * on the TIDE_TEST_CTL_* pipes. Every operation is awaited by running the loop with a deadline
 * (store_test_util.h, shared with test_store.c's backend-only cases); every test ends with
 * uv_loop_close()==0. */
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
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "base64.h"
#include "etcd_client.h"
#include "store.h"
#include "store_test_util.h"

typedef enum kind { KIND_MEM, KIND_SQLITE, KIND_ETCD } kind_t;
static const char *const kind_names[] = {"mem", "sqlite", "etcd"}; /* tide_store_scheme's */

static const char *g_url; /* as given */
static kind_t g_kind;
static const char *g_hosts; /* etcd: "HOST:PORT,..." */
static unsigned g_seq;

/* --- fixture --- */

static int setup(void **state)
{
    char url[512];

    if (g_kind == KIND_ETCD) /* a prefix no other test (or run) uses */
        snprintf(url, sizeof(url), "etcd://%s/conf-%ld-%u-%u/", g_hosts, (long)getpid(),
                 (unsigned)(uv_hrtime() % 1000000), ++g_seq);
    else
        snprintf(url, sizeof(url), "%s", g_kind == KIND_SQLITE ? "sqlite:" : "mem:");
    *state = st_fx_new(url);
    return 0;
}

static int teardown(void **state)
{
    st_fx_free(*state);
    return 0;
}

/* Whether a batch of nops puts and deletes gets one revision: always, except where etcd splits it
 * into several txns. */
static bool one_revision(size_t nops)
{
    return g_kind != KIND_ETCD || nops <= TIDE_ETCD_MAX_TXN_OPS;
}

/* --- the shared semantics --- */

static void test_put_get(void **state)
{
    st_fx_t *fx = *state;
    int64_t b = fx->base;
    st_range_res_t r;

    assert_string_equal(tide_store_scheme(fx->s), kind_names[g_kind]);
    if (g_kind != KIND_ETCD) /* etcd's revision is the cluster's, shared with everything in it */
        assert_int_equal(b, 0);
    assert_int_equal(st_put1(fx, "jobs/1", "hello"), b + 1);
    st_range_wait(fx, "jobs/1", &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.kvs[0].key, "jobs/1");
    st_assert_value(&r, "jobs/1", "hello");
    assert_int_equal(r.kvs[0].create_rev, b + 1);
    assert_int_equal(r.kvs[0].mod_rev, b + 1);
    assert_int_equal(r.rev, b + 1);
    st_range_res_free(&r);

    st_range_wait(fx, "jobs/2", &r); /* absent key: empty, not an error */
    assert_int_equal(r.n, 0);
    assert_int_equal(r.rev, b + 1);
    st_range_res_free(&r);
}

static void test_prefix_order(void **state)
{
    st_fx_t *fx = *state;
    static const char *const keys[] = {
        "jobs/3", "workers/a", "jobs/10", "jobsx", "meta/leader", "jobs/1",    "jobs/",
        "job",    "a\xff\xff", "a\xff",   "b",     "\xff",        "\xff\xff/x"};
    size_t nkeys = sizeof(keys) / sizeof(keys[0]);
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t c;
    st_range_res_t r;

    for (size_t i = 0; i < nkeys; i++)
        tide_store_batch_put(b, keys[i], keys[i], strlen(keys[i]));
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);

    st_range_wait(fx, "jobs/", &r);
    assert_int_equal(r.n, 4);
    assert_string_equal(r.kvs[0].key, "jobs/");
    assert_string_equal(r.kvs[1].key, "jobs/1");
    assert_string_equal(r.kvs[2].key, "jobs/10");
    assert_string_equal(r.kvs[3].key, "jobs/3");
    st_range_res_free(&r);

    st_range_wait(fx, "", &r); /* everything, in byte order */
    assert_int_equal(r.n, nkeys);
    for (size_t i = 1; i < r.n; i++)
        assert_true(strcmp(r.kvs[i - 1].key, r.kvs[i].key) < 0);
    st_range_res_free(&r);

    st_range_wait(fx, "a\xff", &r); /* a prefix ending in 0xff */
    assert_int_equal(r.n, 2);
    assert_string_equal(r.kvs[0].key, "a\xff");
    assert_string_equal(r.kvs[1].key, "a\xff\xff");
    st_range_res_free(&r);
    st_range_wait(fx, "\xff", &r);
    assert_int_equal(r.n, 2);
    assert_string_equal(r.kvs[0].key, "\xff");
    assert_string_equal(r.kvs[1].key, "\xff\xff/x");
    st_range_res_free(&r);

    st_range_wait(fx, "workers/", &r);
    assert_int_equal(r.n, 1);
    st_assert_value(&r, "workers/a", "workers/a");
    st_range_res_free(&r);
}

static void test_revisions(void **state)
{
    st_fx_t *fx = *state;
    int64_t base = fx->base;
    tide_store_batch_t *b;
    st_commit_res_t c;
    st_range_res_t r;

    st_commit_wait(fx, tide_store_batch_new(), &c); /* nothing yet, nothing bumped */
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base);
    assert_int_equal(st_put1(fx, "a", "1"), base + 1);
    b = tide_store_batch_new(); /* three keys, one revision */
    tide_store_batch_put(b, "b", "2", 1);
    tide_store_batch_put(b, "c", "3", 1);
    tide_store_batch_put(b, "d", "4", 1);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 2);
    assert_int_equal(st_put1(fx, "a", "1b"), base + 3);

    /* Changing nothing bumps nothing: an empty batch, compares only, deletes of missing keys. */
    st_commit_wait(fx, tide_store_batch_new(), &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "a", base + 3);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);
    b = tide_store_batch_new();
    tide_store_batch_delete(b, "nope");
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);

    st_range_wait(fx, "", &r);
    assert_int_equal(r.rev, base + 3);
    assert_int_equal(r.n, 4);
    assert_int_equal(st_find(&r, "a")->create_rev, base + 1);
    assert_int_equal(st_find(&r, "a")->mod_rev, base + 3);
    st_assert_value(&r, "a", "1b");
    for (const char *const *k = (const char *const[]){"b", "c", "d", NULL}; *k; k++) {
        assert_int_equal(st_find(&r, *k)->create_rev, base + 2);
        assert_int_equal(st_find(&r, *k)->mod_rev, base + 2);
    }
    st_range_res_free(&r);
}

static void test_delete(void **state)
{
    st_fx_t *fx = *state;
    int64_t base = fx->base;
    tide_store_batch_t *b;
    st_commit_res_t c;
    st_range_res_t r;

    st_put1(fx, "jobs/1", "a");
    assert_int_equal(st_put1(fx, "jobs/2", "b"), base + 2);
    b = tide_store_batch_new();
    tide_store_batch_delete(b, "jobs/1");
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);
    st_range_wait(fx, "jobs/", &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.kvs[0].key, "jobs/2");
    assert_int_equal(r.rev, base + 3);
    st_range_res_free(&r);

    /* Deleting what is not there (any more) succeeds and changes nothing, not even the revision. */
    b = tide_store_batch_new();
    tide_store_batch_delete(b, "jobs/1");
    tide_store_batch_delete(b, "jobs/9");
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);

    /* A re-created key starts a new life. */
    assert_int_equal(st_put1(fx, "jobs/1", "again"), base + 4);
    st_range_wait(fx, "jobs/1", &r);
    assert_int_equal(r.kvs[0].create_rev, base + 4);
    assert_int_equal(r.kvs[0].mod_rev, base + 4);
    st_range_res_free(&r);
}

static void test_compares(void **state)
{
    st_fx_t *fx = *state;
    int64_t base = fx->base;
    tide_store_batch_t *b;
    st_commit_res_t c;
    st_range_res_t r;

    st_put1(fx, "jobs/1", "v1");
    st_put1(fx, "jobs/2", "w1");

    /* compare-and-swap on a present key plus create-if-absent */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/1", base + 1);
    tide_store_batch_compare(b, "meta/leader", 0);
    tide_store_batch_put(b, "jobs/1", "v2", 2);
    tide_store_batch_put(b, "meta/leader", "me", 2);
    st_commit_wait(fx, b, &c);
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
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_int_equal(c.rev, base + 3);
    assert_non_null(strstr(c.text, "jobs/1"));

    /* mod_rev 0 on a present key fails; a non-zero one on a missing key fails. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/2", 0);
    tide_store_batch_put(b, "jobs/2", "w2", 2);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_non_null(strstr(c.text, "jobs/2"));
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "jobs/9", base + 1);
    tide_store_batch_put(b, "jobs/9", "x", 1);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);

    st_range_wait(fx, "", &r);
    assert_int_equal(r.rev, base + 3);
    assert_int_equal(r.n, 3);
    st_assert_value(&r, "jobs/1", "v2");
    st_assert_value(&r, "jobs/2", "w1");
    st_assert_value(&r, "meta/leader", "me");
    assert_null(st_find(&r, "jobs/3"));
    assert_int_equal(st_find(&r, "jobs/1")->mod_rev, base + 3);
    assert_int_equal(st_find(&r, "jobs/2")->mod_rev, base + 2);
    st_range_res_free(&r);
}

/* 100 puts and a delete behind three compares, the last on jobs/50 (missing) at jobs50_rev. */
static tide_store_batch_t *atomicity_batch(int64_t base, int64_t jobs50_rev)
{
    tide_store_batch_t *b = tide_store_batch_new();
    char key[32];

    tide_store_batch_compare(b, "meta/epoch", base + 1);
    tide_store_batch_compare(b, "jobs/1", base + 2);
    tide_store_batch_compare(b, "jobs/50", jobs50_rev);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "jobs/%d", i);
        tide_store_batch_put(b, key, "new", 3);
    }
    tide_store_batch_delete(b, "meta/epoch");
    return b;
}

/* A batch of many ops and several compares: one failing compare (the last) stops all of it; with
 * all compares true it applies whole, at one revision. */
static void test_batch_atomicity(void **state)
{
    st_fx_t *fx = *state;
    int64_t base = fx->base;
    tide_store_batch_t *b;
    st_commit_res_t c;
    st_range_res_t r;

    st_put1(fx, "meta/epoch", "1");
    st_put1(fx, "jobs/1", "old");

    st_commit_wait(fx, atomicity_batch(base, base + 1), &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_int_equal(c.rev, base + 2);
    assert_non_null(strstr(c.text, "jobs/50"));
    st_range_wait(fx, "", &r);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.rev, base + 2);
    st_assert_value(&r, "jobs/1", "old");
    st_assert_value(&r, "meta/epoch", "1");
    st_range_res_free(&r);

    b = atomicity_batch(base, 0);
    assert_true(one_revision(tide_store_batch_count(b)));
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.rev, base + 3);
    st_range_wait(fx, "", &r);
    assert_int_equal(r.n, 100);
    assert_int_equal(r.rev, base + 3);
    for (size_t i = 0; i < r.n; i++) {
        assert_int_equal(r.kvs[i].mod_rev, base + 3);
        assert_memory_equal(r.kvs[i].value, "new", 3);
    }
    assert_int_equal(st_find(&r, "jobs/1")->create_rev, base + 2);
    assert_int_equal(st_find(&r, "jobs/2")->create_rev, base + 3);
    assert_null(st_find(&r, "meta/epoch"));
    st_range_res_free(&r);
}

static void test_later_op_wins(void **state)
{
    st_fx_t *fx = *state;
    tide_store_batch_t *b;
    st_commit_res_t c;
    st_range_res_t r;

    st_put1(fx, "d", "exists");
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
    assert_int_equal(tide_store_batch_bytes(b), 4 + 2 + 3); /* keys a b c d, values "22" "333" */
    tide_store_batch_compare(b, "zz", 0); /* its key counts in the bytes, not in the ops */
    assert_int_equal(tide_store_batch_bytes(b), 4 + 2 + 3 + 2);
    assert_int_equal(tide_store_batch_count(b), 4);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    st_range_wait(fx, "", &r);
    assert_int_equal(r.n, 2);
    st_assert_value(&r, "a", "22");
    st_assert_value(&r, "c", "333");
    st_range_res_free(&r);
}

/* Each of 2000 keys written three times in one batch (past the batch's linear scan into its hash
 * index): only the last op per key counts, in the count, the bytes and what is written. */
static void test_large_batch_coalescing(void **state)
{
    st_fx_t *fx = *state;
    int64_t base = fx->base;
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t c;
    st_range_res_t r;
    char key[32], val[32];
    size_t bytes = 0;

    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 2000; i++) {
            snprintf(key, sizeof(key), "workers/%05d", i);
            snprintf(val, sizeof(val), "r%d-%d", round, i);
            if (round == 1 && i % 2)
                tide_store_batch_delete(b, key);
            else
                tide_store_batch_put(b, key, val, strlen(val));
            if (round == 2)
                bytes += strlen(key) + strlen(val);
        }
    }
    assert_int_equal(tide_store_batch_count(b), 2000);
    assert_int_equal(tide_store_batch_bytes(b), bytes);
    st_commit_wait(fx, b, &c);
    if (c.status != 0)
        fail_msg("2000 ops: %d %s", c.status, c.text);
    if (one_revision(2000))
        assert_int_equal(c.rev, base + 1);
    else
        assert_true(c.rev > base + 1);

    st_range_wait(fx, "workers/", &r);
    assert_int_equal(r.n, 2000);
    for (size_t i = 0; i < r.n; i++) {
        snprintf(key, sizeof(key), "workers/%05zu", i);
        snprintf(val, sizeof(val), "r2-%zu", i);
        assert_string_equal(r.kvs[i].key, key);
        assert_int_equal(r.kvs[i].len, strlen(val));
        assert_memory_equal(r.kvs[i].value, val, strlen(val));
        assert_true(r.kvs[i].mod_rev > base && r.kvs[i].mod_rev <= c.rev);
        assert_int_equal(r.kvs[i].create_rev, r.kvs[i].mod_rev); /* written once */
    }
    assert_int_equal(r.rev, c.rev);
    st_range_res_free(&r);
}

static void test_big_value(void **state)
{
    st_fx_t *fx = *state;
    size_t len = 1u << 20;
    uint8_t *big = malloc(len);
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t c;
    st_range_res_t r;

    st_fill(big, len, 12345);
    tide_store_batch_put(b, "ckpt/big", big, len);
    assert_int_equal(tide_store_batch_bytes(b), strlen("ckpt/big") + len);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    st_range_wait(fx, "ckpt/", &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.kvs[0].len, len);
    assert_memory_equal(r.kvs[0].value, big, len);
    st_range_res_free(&r);
    free(big);
}

/* 300 ops in one batch (etcd: over its 128 ops per txn), with a fence compare on another key and a
 * compare on a key the batch itself writes. */
static void test_batch_300(void **state)
{
    st_fx_t *fx = *state;
    int64_t base = fx->base, fence;
    tide_store_batch_t *b;
    st_commit_res_t c;
    st_range_res_t r;
    char key[32], val[32];

    fence = st_put1(fx, "meta/leader", "me");
    st_put1(fx, "jobs/0000", "old");
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "meta/leader", fence);
    tide_store_batch_compare(b, "jobs/0000", base + 2);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "jobs/%04d", i);
        snprintf(val, sizeof(val), "v%d", i);
        tide_store_batch_put(b, key, val, strlen(val));
    }
    assert_int_equal(tide_store_batch_count(b), 300);
    st_commit_wait(fx, b, &c);
    if (c.status != 0)
        fail_msg("300 ops: %d %s", c.status, c.text);
    assert_true(c.rev > base + 2);
    if (one_revision(300))
        assert_int_equal(c.rev, base + 3);
    st_range_wait(fx, "jobs/", &r);
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
    st_range_res_free(&r);

    /* The same with a failing fence: nothing is written. */
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "meta/leader", fence + 1000);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "new/%04d", i);
        tide_store_batch_put(b, key, "x", 1);
    }
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, -ECANCELED);
    assert_non_null(strstr(c.text, "meta/leader"));
    st_range_wait(fx, "new/", &r);
    assert_int_equal(r.n, 0);
    st_range_res_free(&r);
}

static void test_unusual_keys(void **state)
{
    st_fx_t *fx = *state;
    static const char *const keys[] = {
        "with space",         "a/b/c//d",  "caf\xc3\xa9/\xe2\x82\xac",
        "quote\"back\\slash", "tab\tnl\n", "+/=="};
    size_t n = sizeof(keys) / sizeof(keys[0]);
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t c;
    st_range_res_t r;

    for (size_t i = 0; i < n; i++)
        tide_store_batch_put(b, keys[i], keys[i], strlen(keys[i]));
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    st_range_wait(fx, "", &r);
    assert_int_equal(r.n, n);
    for (size_t i = 0; i < n; i++)
        st_assert_value(&r, keys[i], keys[i]);
    st_range_res_free(&r);
    st_range_wait(fx, "caf\xc3\xa9/", &r);
    assert_int_equal(r.n, 1);
    st_range_res_free(&r);
}

static void test_empty_and_binary_values(void **state)
{
    st_fx_t *fx = *state;
    static const uint8_t bin[] = {0x00, 0x01, 0xff, 0x00, 'a', 0x00, 0x80, 0x7f, 0x00};
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t c;
    st_range_res_t r;

    tide_store_batch_put(b, "bin", bin, sizeof(bin));
    tide_store_batch_put(b, "empty", "", 0);
    tide_store_batch_put(b, "nul", "\0", 1);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    st_range_wait(fx, "", &r);
    assert_int_equal(r.n, 3);
    assert_int_equal(st_find(&r, "bin")->len, sizeof(bin));
    assert_memory_equal(st_find(&r, "bin")->value, bin, sizeof(bin));
    assert_int_equal(st_find(&r, "empty")->len, 0);
    assert_int_equal(st_find(&r, "empty")->mod_rev, c.rev);
    assert_int_equal(st_find(&r, "nul")->len, 1);
    assert_int_equal(st_find(&r, "nul")->value[0], 0);
    st_range_res_free(&r);
}

/* Completion order: several operations started in one turn complete in that order; a range sees the
 * commits before it; a commit started from a range's or a commit's callback does not complete
 * inside it and comes after everything started before. */
typedef struct order {
    st_fx_t *fx;
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

static void order_commit_cb(int status, int64_t revision, const char *errtext, void *ud);

/* Starts a commit of key into slot sl from inside a callback. */
static void order_nested(order_slot_t *sl, const char *key)
{
    tide_store_batch_t *b = tide_store_batch_new();

    sl->o->in_cb = true;
    tide_store_batch_put(b, key, "n", 1);
    assert_int_equal(tide_store_commit(sl->o->fx->s, b, order_commit_cb, sl), 0);
    sl->o->in_cb = false;
}

static void order_commit_cb(int status, int64_t revision, const char *errtext, void *ud)
{
    order_slot_t *sl = ud;

    assert_int_equal(status, 0);
    assert_false(sl->o->in_cb);
    sl->o->got[sl->idx] = ++sl->o->seq;
    sl->o->revs[sl->idx] = revision;
    if (sl->idx == 3)
        order_nested(sl + 2, "nested2");
    if (sl->idx == 5)
        sl->o->nested_done = true;
}

static void order_range_cb(int status, const tide_store_kv_t *kvs, size_t n, int64_t revision,
                           const char *errtext, void *ud)
{
    order_slot_t *sl = ud;

    assert_int_equal(status, 0);
    sl->o->got[sl->idx] = ++sl->o->seq;
    sl->o->range_n = n;
    order_nested(sl + 2, "nested");
}

static void test_completion_order(void **state)
{
    st_fx_t *fx = *state;
    order_t o = {.fx = fx};
    order_slot_t sl[6];
    tide_store_batch_t *b;

    for (int i = 0; i < 6; i++)
        sl[i] = (order_slot_t){&o, i};
    for (int i = 0; i < 2; i++) {
        b = tide_store_batch_new();
        tide_store_batch_put(b, i ? "k1" : "k0", "v", 1);
        assert_int_equal(tide_store_commit(fx->s, b, order_commit_cb, &sl[i]), 0);
    }
    assert_int_equal(tide_store_range(fx->s, "", order_range_cb, &sl[2]), 0); /* starts 4 */
    b = tide_store_batch_new();
    tide_store_batch_put(b, "k3", "v", 1);
    assert_int_equal(tide_store_commit(fx->s, b, order_commit_cb, &sl[3]), 0); /* starts 5 */
    assert_int_equal(o.seq, 0);
    st_wait_for(fx, &o.nested_done);
    for (int i = 0; i < 6; i++)
        assert_int_equal(o.got[i], i + 1);
    assert_int_equal(o.range_n, 2); /* saw both earlier commits, not the later one */
    assert_int_equal(o.revs[0], fx->base + 1);
    assert_int_equal(o.revs[1], fx->base + 2);
    assert_int_equal(o.revs[3], fx->base + 3);
    assert_int_equal(o.revs[4], fx->base + 4);
    assert_int_equal(o.revs[5], fx->base + 5);
}

static void test_close_with_pending(void **state)
{
    st_fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t c = {0};
    st_range_res_t r = {0};
    int64_t before = st_put1(fx, "before", "1");

    tide_store_batch_put(b, "after", "2", 1);
    assert_int_equal(tide_store_commit(fx->s, b, st_on_commit, &c), 0);
    assert_int_equal(tide_store_range(fx->s, "", st_on_range, &r), 0);
    tide_store_close(fx->s);
    fx->s = NULL;
    assert_false(c.done); /* not inside close */
    assert_false(r.done);
    st_wait_for(fx, &c.done);
    st_wait_for(fx, &r.done);
    assert_int_equal(c.status, -ESHUTDOWN);
    assert_int_equal(r.status, -ESHUTDOWN);
    assert_int_equal(r.n, 0);
    st_range_res_free(&r);
    uv_run(&fx->loop, UV_RUN_DEFAULT);

    st_open(fx);              /* teardown closes it */
    if (g_kind != KIND_MEM) { /* what completed stays */
        st_range_wait(fx, "", &r);
        st_assert_value(&r, "before", "1");
        if (g_kind == KIND_SQLITE) { /* -ESHUTDOWN: not applied (etcd may have applied it) */
            assert_int_equal(r.n, 1);
            assert_int_equal(r.rev, before);
        }
        st_range_res_free(&r);
    }
}

typedef struct close_in_cb {
    st_fx_t *fx;
    st_commit_res_t first, second;
} close_in_cb_t;

static void close_first_cb(int status, int64_t revision, const char *errtext, void *ud)
{
    close_in_cb_t *t = ud;

    st_on_commit(status, revision, errtext, &t->first);
    tide_store_close(t->fx->s);
    t->fx->s = NULL;
    assert_false(t->second.done);
}

static void test_close_in_callback(void **state)
{
    st_fx_t *fx = *state;
    close_in_cb_t t = {.fx = fx};
    tide_store_batch_t *b1 = tide_store_batch_new(), *b2 = tide_store_batch_new();
    st_range_res_t r;

    tide_store_batch_put(b1, "one", "1", 1);
    tide_store_batch_put(b2, "two", "2", 1);
    assert_int_equal(tide_store_commit(fx->s, b1, close_first_cb, &t), 0);
    assert_int_equal(tide_store_commit(fx->s, b2, st_on_commit, &t.second), 0);
    st_wait_for(fx, &t.second.done);
    assert_int_equal(t.first.status, 0);
    assert_int_equal(t.second.status, -ESHUTDOWN);
    uv_run(&fx->loop, UV_RUN_DEFAULT);

    st_open(fx);
    /* The first completed, so it stays; for sqlite, -ESHUTDOWN says the second was not applied. */
    if (g_kind != KIND_MEM) {
        st_range_wait(fx, "", &r);
        st_assert_value(&r, "one", "1");
        if (g_kind == KIND_SQLITE)
            assert_int_equal(r.n, 1);
        st_range_res_free(&r);
    }
}

static void test_invalid_calls(void **state)
{
    st_fx_t *fx = *state;
    tide_store_t *s = (tide_store_t *)0x1;
    tide_error_t err = {{0}};
    tide_store_batch_t *b;
    st_commit_res_t c = {0};
    st_range_res_t r = {0};

    /* URLs no backend takes: -EINVAL naming what was given, and no store. */
    assert_int_equal(tide_store_open(&fx->loop, "redis:x", &s, &err), -EINVAL);
    assert_null(s);
    assert_non_null(strstr(err.text, "redis"));
    assert_int_equal(tide_store_open(&fx->loop, "/var/lib/tide.db", &s, &err), -EINVAL);
    assert_non_null(strstr(err.text, "/var/lib/tide.db"));
    assert_int_equal(tide_store_open(&fx->loop, ":x", &s, NULL), -EINVAL);
    tide_store_batch_free(NULL);
    tide_store_close(NULL);

    b = tide_store_batch_new();
    tide_store_batch_put(b, "", "v", 1);
    assert_int_equal(tide_store_commit(fx->s, b, st_on_commit, &c), -EINVAL);
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "k", -1);
    assert_int_equal(tide_store_commit(fx->s, b, st_on_commit, &c), -EINVAL);
    b = tide_store_batch_new();
    tide_store_batch_compare(b, "", 0);
    assert_int_equal(tide_store_commit(fx->s, b, st_on_commit, &c), -EINVAL);
    assert_int_equal(tide_store_commit(fx->s, tide_store_batch_new(), NULL, NULL), -EINVAL);
    assert_int_equal(tide_store_range(fx->s, NULL, st_on_range, &r), -EINVAL);
    assert_int_equal(tide_store_range(fx->s, "", NULL, NULL), -EINVAL);
    /* Run the loop through a real operation: the failed starts still never call back. */
    st_put1(fx, "k", "v");
    assert_false(c.done);
    assert_false(r.done);
}

/* --- etcd only: no member control needed --- */

static void test_etcd_bad_urls(void **state)
{
    st_fx_t *fx = *state;
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
    st_fx_t *fx = *state;
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
    st_fx_t *fx = *state;
    size_t len = 1200u * 1024u;
    uint8_t *big = malloc(len), *big2 = malloc(len);
    tide_store_batch_t *b = tide_store_batch_new();
    int64_t fence = st_put1(fx, "meta/leader", "me");
    st_commit_res_t c;
    st_range_res_t r;
    char key[32];

    st_fill(big, len, 1);
    st_fill(big2, len, 2);
    tide_store_batch_compare(b, "meta/leader", fence);
    tide_store_batch_put(b, "a/small", "s", 1);
    tide_store_batch_put(b, "b/big", big, len);
    tide_store_batch_put(b, "c/big2", big2, len);
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "d/%d", i);
        tide_store_batch_put(b, key, "x", 1);
    }
    st_commit_wait(fx, b, &c);
    if (c.status != 0)
        fail_msg("1.2 MiB values: %d %s", c.status, c.text);
    st_range_wait(fx, "", &r);
    assert_int_equal(r.n, 14);
    assert_int_equal(st_find(&r, "b/big")->len, len);
    assert_memory_equal(st_find(&r, "b/big")->value, big, len);
    assert_memory_equal(st_find(&r, "c/big2")->value, big2, len);
    assert_true(st_find(&r, "c/big2")->mod_rev > st_find(&r, "b/big")->mod_rev); /* separate txns */
    assert_int_equal(r.rev, c.rev);
    st_range_res_free(&r);

    /* One value over etcd's request limit cannot be stored: -EIO naming the key, nothing written.
     */
    free(big);
    big = calloc(1, 1600u * 1024u);
    b = tide_store_batch_new();
    tide_store_batch_put(b, "e/huge", big, 1600u * 1024u);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, -EIO);
    assert_non_null(strstr(c.text, "e/huge"));
    st_range_wait(fx, "e/", &r);
    assert_int_equal(r.n, 0);
    st_range_res_free(&r);
    free(big);
    free(big2);
}

/* A range over several pages (1000 keys each) reads at one revision. */
static void test_etcd_paged_range(void **state)
{
    st_fx_t *fx = *state;
    tide_store_batch_t *b = tide_store_batch_new();
    st_commit_res_t c;
    st_range_res_t r;
    char key[32];

    for (int i = 0; i < 2500; i++) {
        snprintf(key, sizeof(key), "w/%05d", i);
        tide_store_batch_put(b, key, key, strlen(key));
    }
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, 0);
    st_range_wait(fx, "w/", &r);
    assert_int_equal(r.n, 2500);
    for (size_t i = 0; i < r.n; i++) {
        snprintf(key, sizeof(key), "w/%05zu", i);
        assert_string_equal(r.kvs[i].key, key);
    }
    assert_int_equal(r.rev, c.rev);
    st_range_res_free(&r);
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
        st_fill(buf, n, (uint32_t)n);
        s = tide_base64_encode(buf, n);
        assert_int_equal(strlen(s), (n + 2) / 3 * 4);
        assert_int_equal(tide_etcd_unb64(s, &out, &len), 0);
        assert_int_equal(len, n);
        assert_memory_equal(out, buf, n);
        assert_int_equal(out[n], 0);
        free(out);
        free(s);
    }
    s = tide_base64_encode("foo", 3);
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

static void call_wait(st_fx_t *fx, tide_etcd_t *c, const char *path, const char *body,
                      call_res_t *r)
{
    memset(r, 0, sizeof(*r));
    assert_int_equal(tide_etcd_call(c, path, body, 5000, on_call, r), 0);
    assert_false(r->done);
    st_wait_for(fx, &r->done);
}

static void test_etcd_calls(void **state)
{
    st_fx_t *fx = *state;
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
    st_wait_for(fx, &r.done);
    assert_int_equal(r.status, -ESHUTDOWN);
    uv_run(&fx->loop, UV_RUN_DEFAULT);
}

/* etcd restarted between two commits; then stopped: -EIO after the call timeout; then back. */
static void test_etcd_restart(void **state)
{
    st_fx_t *fx = *state;
    tide_store_batch_t *b;
    st_commit_res_t c;
    char url[256];

    st_close(fx);
    snprintf(url, sizeof(url), "etcd://%s/restart-%ld/", g_members[0], (long)getpid());
    snprintf(fx->url, sizeof(fx->url), "%s", url);
    st_open(fx);
    st_put1(fx, "a", "1");
    ctl("restart 0", NULL, 0);
    st_put1(fx, "b", "2"); /* the kept-alive connection died with the member: a new one */

    ctl("stop 0", NULL, 0);
    b = tide_store_batch_new();
    tide_store_batch_put(b, "c", "3", 1);
    st_commit_wait(fx, b, &c);
    assert_int_equal(c.status, -EIO);
    if (!strstr(c.text, g_members[0]) || !strstr(c.text, "connection refused"))
        fail_msg("text: %s", c.text);
    ctl("start 0", NULL, 0);
    st_put1(fx, "c", "3");
}

/* A 3-member cluster with the member in use killed still serves. */
static void test_etcd_failover(void **state)
{
    st_fx_t *fx = *state;
    st_range_res_t r;

    st_put1(fx, "before", "1"); /* the client now prefers member 0 */
    ctl("kill 0", NULL, 0);
    st_put1(fx, "after", "2");
    st_range_wait(fx, "", &r);
    assert_int_equal(r.n, 2);
    st_range_res_free(&r);
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

static void wait_count(st_fx_t *fx, const int *count, int want)
{
    uint64_t deadline = uv_hrtime() + ST_DEADLINE_NS;

    while (*count < want) {
        assert_true(uv_hrtime() < deadline);
        uv_run(&fx->loop, UV_RUN_ONCE);
    }
}

static char *prefix_of(const st_fx_t *fx)
{
    const char *p = strchr(fx->url + strlen("etcd://"), '/');
    return strdup(p);
}

/* A watch on member 2 resumes on another member when member 2 is killed, without losing or
 * repeating. */
static void test_etcd_watch_failover(void **state)
{
    st_fx_t *fx = *state;
    tide_etcd_t *c;
    tide_etcd_watch_t *w;
    tide_error_t err = {{0}};
    wstate_t ws = {0};
    char eps[256], *prefix = prefix_of(fx);
    tide_store_batch_t *b;
    st_commit_res_t cr;

    snprintf(eps, sizeof(eps), "%s,%s,%s", g_members[2], g_members[0], g_members[1]);
    assert_int_equal(tide_etcd_new(&fx->loop, eps, &c, &err), 0);
    assert_int_equal(tide_etcd_watch(c, prefix, strlen(prefix), true, 0, &wcbs, &ws, &w), 0);
    wait_count(fx, &ws.synced, 1);
    st_put1(fx, "k1", "v1");
    wait_count(fx, &ws.events, 1);
    ctl("kill 2", NULL, 0);
    st_put1(fx, "k2", "v2");
    b = tide_store_batch_new();
    tide_store_batch_delete(b, "k1");
    st_commit_wait(fx, b, &cr);
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
    st_fx_t *fx = *state;
    tide_etcd_t *c;
    tide_etcd_watch_t *w;
    tide_error_t err = {{0}};
    wstate_t ws = {0};
    char cmd[64], *prefix = prefix_of(fx);
    int64_t r1, r3;

    r1 = st_put1(fx, "k1", "1");
    st_put1(fx, "k2", "2");
    r3 = st_put1(fx, "k3", "3");
    snprintf(cmd, sizeof(cmd), "compact %" PRId64, r3);
    ctl(cmd, NULL, 0);
    assert_int_equal(tide_etcd_new(&fx->loop, g_hosts, &c, &err), 0);
    assert_int_equal(tide_etcd_watch(c, prefix, strlen(prefix), true, r1, &wcbs, &ws, &w), 0);
    wait_count(fx, &ws.compacted, 1);
    assert_int_equal(ws.compact_rev, r3);
    wait_count(fx, &ws.events, 1); /* k3, at the compact revision */
    assert_non_null(strstr(ws.keys[0], "k3"));
    st_put1(fx, "k4", "4");
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
        cmocka_unit_test_setup_teardown(test_batch_atomicity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_later_op_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_batch_coalescing, setup, teardown),
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

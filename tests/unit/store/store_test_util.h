/* Helpers shared by the store's two test programs, store_conformance.c (every backend) and
 * test_store.c (what only sqlite: or mem: do): a fixture with its own loop and store, and awaiting
 * operations by running the loop with a deadline. The helpers fail the running CMocka test on any
 * surprise; every awaiting helper checks that the callback did not fire inside the call that
 * started it. */
#ifndef TIDE_STORE_TEST_UTIL_H
#define TIDE_STORE_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store.h"

/* How long one awaited operation may take before the test fails. */
#define ST_DEADLINE_NS (15ull * 1000 * 1000 * 1000)

typedef struct st_fx {
    uv_loop_t loop;
    tide_store_t *s; /* NULL while closed */
    char dir[64];    /* sqlite: the throwaway directory, removed by st_fx_free; "" otherwise */
    char path[128];  /* sqlite: the database file in dir; "" otherwise */
    char url[512];   /* what st_open opens */
    int64_t base;    /* the store revision when the fixture was made */
} st_fx_t;

/* What a commit callback reported (st_on_commit fills it). */
typedef struct st_commit_res {
    bool done;
    int status;
    int64_t rev;
    char text[512];
} st_commit_res_t;

/* One key of a range, copied. */
typedef struct st_kv {
    char *key;
    uint8_t *value;
    size_t len;
    int64_t create_rev, mod_rev;
} st_kv_t;

/* What a range callback reported (st_on_range fills it; st_range_res_free frees it). */
typedef struct st_range_res {
    bool done;
    int status;
    int64_t rev;
    size_t n;
    st_kv_t *kvs;
    char text[512];
} st_range_res_t;

/* A fixture on a new loop with the store at url open. "sqlite:" alone gets a fresh file in a new
 * throwaway directory; any other URL is opened as given. Checks the store holds no keys and records
 * its revision in base. Caller frees with st_fx_free. */
st_fx_t *st_fx_new(const char *url);
/* Closes the store (if open), runs the loop dry, checks uv_loop_close() == 0, removes the throwaway
 * directory and frees fx. Accepts NULL. */
void st_fx_free(st_fx_t *fx);
/* Opens fx->url into fx->s; fails the test with the error text if that fails. */
void st_open(st_fx_t *fx);
/* Closes fx->s and runs the loop until what the close cancelled has been delivered. */
void st_close(st_fx_t *fx);

/* Callbacks recording into the st_commit_res_t / st_range_res_t given as ud; each fails the test if
 * it fires twice or with a NULL errtext. */
void st_on_commit(int status, int64_t revision, const char *errtext, void *ud);
void st_on_range(int status, const tide_store_kv_t *kvs, size_t n, int64_t revision,
                 const char *errtext, void *ud);
/* Frees the copied kvs and zeroes r. */
void st_range_res_free(st_range_res_t *r);

/* Runs the loop until *flag is set; fails the test after ST_DEADLINE_NS. */
void st_wait_for(st_fx_t *fx, const bool *flag);
/* Commits b (ownership passes) and waits for its callback; any status is returned in res. */
void st_commit_wait(st_fx_t *fx, tide_store_batch_t *b, st_commit_res_t *res);
/* Ranges prefix and waits; fails the test unless the status is 0. res: st_range_res_free it. */
void st_range_wait(st_fx_t *fx, const char *prefix, st_range_res_t *res);
/* Puts one string value; fails the test unless that succeeds. Returns the commit's revision. */
int64_t st_put1(st_fx_t *fx, const char *key, const char *value);

/* The key in r, or NULL. Borrowed from r. */
const st_kv_t *st_find(const st_range_res_t *r, const char *key);
/* Fails the test unless r holds key with exactly the bytes of value. */
void st_assert_value(const st_range_res_t *r, const char *key, const char *value);
/* Fills p with len pseudo-random bytes that depend only on seed. */
void st_fill(uint8_t *p, size_t len, uint32_t seed);

#endif

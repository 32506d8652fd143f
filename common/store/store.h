/* The state store: everything the scheduler must not lose goes through this one interface (design.md,
 * "State and persistence"). Keys are strings ("jobs/00000017"), values bytes; every key carries the
 * store-wide revision of its creation and last change, as etcd does. Writes go in batches that apply
 * atomically, guarded by optional compares (compare-and-swap; fencing for HA later).
 *
 * Backends are ops structs behind tide_store_open(url): "sqlite:PATH" (the default; embedded),
 * "mem:" (the in-tree fake: in memory, with fault injection for tests), and
 * "etcd://HOST:PORT[,HOST:PORT...][/PREFIX]" (etcd's v3 JSON gateway; keys under PREFIX, default
 * "/tide/"; for several scheduler replicas).
 *
 * Every operation completes through its callback, called from the loop after the starting function
 * returned (never inline). If a starting function fails, its callback never fires. */
#ifndef TIDE_STORE_H
#define TIDE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct uv_loop_s;

typedef struct tide_store tide_store_t;
typedef struct tide_store_batch tide_store_batch_t;

typedef struct tide_store_kv {
    const char *key;      /* borrowed for the callback only */
    const uint8_t *value; /* borrowed for the callback only */
    size_t value_len;
    int64_t create_rev;
    int64_t mod_rev;
} tide_store_kv_t;

/* status: 0, -ECANCELED (a compare failed; nothing was written), -EIO (backend failure, text says why),
 * -ESHUTDOWN (store closed before completion; sqlite: and mem: then applied nothing; etcd: a commit
 * already sent may have been applied, like one that failed with -EIO). revision: the store
 * revision after the commit (a batch that changes nothing does not bump it). errtext: never NULL, "" on
 * success; borrowed for the callback only. */
typedef void (*tide_store_commit_cb)(int status, int64_t revision, const char *errtext, void *ud);
/* Every key with the prefix, in key order. status as above; kvs and their bytes are borrowed. */
typedef void (*tide_store_range_cb)(int status, const tide_store_kv_t *kvs, size_t n, int64_t revision,
                                    const char *errtext, void *ud);

typedef struct tide_store_ops {
    const char *scheme; /* "sqlite", "mem", ... the part of the URL before ':' */
    int (*open)(struct uv_loop_s *loop, const char *location, void **impl, tide_error_t *err);
    /* Pending callbacks fire with -ESHUTDOWN after close returns, from the loop. */
    void (*close)(void *impl);
    int (*range)(void *impl, const char *prefix, tide_store_range_cb cb, void *ud);
    /* Takes ownership of b, also on failure. */
    int (*commit)(void *impl, tide_store_batch_t *b, tide_store_commit_cb cb, void *ud);
} tide_store_ops_t;

/* Opens "sqlite:PATH" (directories are not created), "mem:", "etcd://HOST:PORT[,...][/PREFIX]" (checks
 * that a member answers within 3 s: blocking). Returns 0, -EINVAL for an unknown scheme or bad location
 * (err says which), -EBUSY when another store holds PATH, -EIO when the backend cannot open (etcd: err
 * names every member and why, e.g. "etcd at 127.0.0.1:2379: connection refused"). Every backend runs and
 * completes operations in the order they were started. */
int tide_store_open(struct uv_loop_s *loop, const char *url, tide_store_t **out, tide_error_t *err);
/* Pending operations complete with -ESHUTDOWN (from the loop). NULL is fine. */
void tide_store_close(tide_store_t *s);
/* "sqlite", "mem", "etcd" */
const char *tide_store_scheme(const tide_store_t *s);

/* Reads every key starting with prefix (copied; "" for all). Returns 0, or -EINVAL (NULL prefix or cb;
 * the callback then never fires). */
int tide_store_range(tide_store_t *s, const char *prefix, tide_store_range_cb cb, void *ud);
/* Applies b atomically if all its compares hold. Takes ownership of b, also on failure. Returns 0, or
 * -EINVAL (NULL cb, an empty key, a negative compare revision; the callback then never fires).
 * etcd: a batch over etcd's limits (128 ops per txn, 1.5 MiB per request) is applied as several txns in
 * order, each carrying every compare of the batch (a compare on a key an earlier txn wrote follows that
 * write): atomic per txn, not as a whole. It completes with the last txn's revision, or the first
 * failure (then the earlier txns stay applied; errtext says how many ops were). One value over 1.5 MiB
 * fails with -EIO. An etcd call fails with -EIO after 5 s of trying the members. A commit whose request
 * may have reached a member is never repeated on another (a member that stalls could still apply its copy
 * after later commits): it fails with -EIO, its outcome unknown; the next call starts at another member.
 * An oversized op or too many compares fail the batch before any of it is sent. */
int tide_store_commit(tide_store_t *s, tide_store_batch_t *b, tide_store_commit_cb cb, void *ud);

/* --- batches --- */
/* An empty batch; the caller owns it until tide_store_commit. Never NULL. */
tide_store_batch_t *tide_store_batch_new(void);
/* NULL is fine. */
void tide_store_batch_free(tide_store_batch_t *b);
/* Copies key and value. A later op on the same key in one batch wins. */
void tide_store_batch_put(tide_store_batch_t *b, const char *key, const void *value, size_t len);
void tide_store_batch_delete(tide_store_batch_t *b, const char *key);
/* The commit applies only if key's mod_rev equals mod_rev (0: the key must not exist). */
void tide_store_batch_compare(tide_store_batch_t *b, const char *key, int64_t mod_rev);
/* Number of puts and deletes, after later ops replaced earlier ones on the same key. */
size_t tide_store_batch_count(const tide_store_batch_t *b);
/* Bytes of keys and values, to keep a batch under a backend's request limit. */
size_t tide_store_batch_bytes(const tide_store_batch_t *b);

/* --- the mem: fake --- */
/* Makes the next n commits of a mem: store fail with status (e.g. -EIO). -EINVAL for another backend. */
int tide_store_mem_inject_failure(tide_store_t *s, int status, int n);

#endif

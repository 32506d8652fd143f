/* Internals shared by store.c and the backends (not for users of the store): the batch layout, the
 * backend ops tables, the range-result buffer and the deferred completion queue the embedded
 * backends (sqlite, mem) use to run their work from the loop. */
#ifndef TIDE_STORE_PRIVATE_H
#define TIDE_STORE_PRIVATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "error.h"
#include "store.h"

struct uv_loop_s;

/* --- batches --- */

typedef enum tide__store_op_kind {
    TIDE__STORE_PUT = 0,
    TIDE__STORE_DELETE = 1,
} tide__store_op_kind_t;

typedef struct tide__store_op {
    tide__store_op_kind_t kind;
    char *key;            /* owned; one block with value: key, NUL, value bytes */
    const uint8_t *value; /* points into key's block (never NULL, also when value_len is 0) */
    size_t value_len;
    size_t key_len;
} tide__store_op_t;

typedef struct tide__store_cmp {
    char *key; /* owned */
    int64_t mod_rev;
} tide__store_cmp_t;

/* Invariant: no two ops share a key (a later op replaces the earlier one in its slot); bytes is the
 * sum of the op keys, op values and compare keys; index, when non-NULL, maps every op key to its
 * slot. */
struct tide_store_batch {
    tide__store_op_t *ops;
    size_t nops, cap_ops;
    tide__store_cmp_t *cmps;
    size_t ncmps, cap_cmps;
    size_t bytes;
    uint32_t
        *index; /* open addressing, slot + 1 per entry, 0 = empty; built once nops grows past 8 */
    size_t index_cap;
};

/* --- backends --- */

extern const tide_store_ops_t tide__store_sqlite_ops;
extern const tide_store_ops_t tide__store_mem_ops;
extern const tide_store_ops_t tide__store_etcd_ops;

/* mem: only. Returns 0. */
int tide__store_mem_inject_failure(void *impl, int status, int n);

/* --- range results: one array of kvs whose keys and values live in one arena --- */

typedef struct tide__store_kvs {
    tide_store_kv_t *kvs; /* pointers valid after tide__store_kvs_finish */
    size_t n, cap;
    size_t *offs; /* 2 per kv while building: key offset, value offset in arena */
    tide_buf_t arena;
} tide__store_kvs_t;

void tide__store_kvs_init(tide__store_kvs_t *k);
/* Drops the contents but keeps small allocations for reuse. */
void tide__store_kvs_reset(tide__store_kvs_t *k);
void tide__store_kvs_free(tide__store_kvs_t *k);
/* Copies key (key_len bytes, no NUL needed) and value. */
void tide__store_kvs_add(tide__store_kvs_t *k, const char *key, size_t key_len, const void *value,
                         size_t value_len, int64_t create_rev, int64_t mod_rev);
/* Points every kv into the arena; call once after the last add. */
void tide__store_kvs_finish(tide__store_kvs_t *k);

/* --- the deferred completion queue of the embedded backends --- */

/* The work a backend does for one queued request, run on the loop thread from the queue's idle
 * handle. Both return 0 or -errno (-ECANCELED, -EIO, ...) with err filled, and set *revision to the
 * store's revision after the operation (also on failure). */
typedef struct tide__store_exec {
    int (*commit)(void *impl, const tide_store_batch_t *b, int64_t *revision, tide_error_t *err);
    int (*range)(void *impl, const char *prefix, tide__store_kvs_t *out, int64_t *revision,
                 tide_error_t *err);
    /* The current revision, for requests completed without running (injected failures). */
    int64_t (*revision)(void *impl);
} tide__store_exec_t;

typedef struct tide__store_queue tide__store_queue_t;

/* exec is borrowed (static tables); impl is borrowed until tide__store_queue_close. Returns 0 or
 * the -errno of uv_idle_init. */
int tide__store_queue_new(struct uv_loop_s *loop, const tide__store_exec_t *exec, void *impl,
                          tide__store_queue_t **out);
/* Queues a commit (takes ownership of b). A non-zero fail_status completes it with that status and
 * fail_text without running it (fault injection). */
void tide__store_queue_commit(tide__store_queue_t *q, tide_store_batch_t *b,
                              tide_store_commit_cb cb, void *ud, int fail_status,
                              const char *fail_text);
/* Queues a range (prefix copied). */
void tide__store_queue_range(tide__store_queue_t *q, const char *prefix, tide_store_range_cb cb,
                             void *ud);
/* Forgets impl at once; every request not yet completed completes with -ESHUTDOWN from the loop,
 * then the queue frees itself. Safe from inside a completion callback. */
void tide__store_queue_close(tide__store_queue_t *q);

#endif

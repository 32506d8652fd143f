/* A small client for etcd's v3 JSON gateway (POST /v3/...), on the caller's libuv loop: libcurl's
 * multi interface driven by uv_poll/uv_timer, HTTP/1.1 keep-alive connections reused across calls,
 * member failover (round robin from the last member that answered), and watch streams that resume
 * by themselves. Used by the etcd:// store backend and by the scheduler's leader election. http://
 * only for now.
 *
 * Every callback fires from the loop, never inside the call that started it. Keys and values travel
 * base64-encoded in the JSON; int64 fields (revisions, lease IDs) are JSON strings: use the helpers
 * below, never a double. */
#ifndef TIDE_ETCD_CLIENT_H
#define TIDE_ETCD_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "error.h"

struct uv_loop_s;

typedef struct tide_etcd tide_etcd_t;
typedef struct tide_etcd_watch tide_etcd_watch_t;

/* etcd's default --max-request-bytes: the limit on one request's protobuf size (raw key and value
 * bytes, not their base64). */
#define TIDE_ETCD_MAX_REQUEST_BYTES (1536u * 1024u)
/* etcd's default --max-txn-ops: the most compares, and the most success ops, in one txn. */
#define TIDE_ETCD_MAX_TXN_OPS 128u

/* endpoints: "HOST:PORT[,HOST:PORT...]" (copied; http only). Does NOT contact etcd. Returns 0 with
 * *out set, or -EINVAL (err names the bad endpoint) / -EIO (libcurl could not start). Free with
 * tide_etcd_free. */
int tide_etcd_new(struct uv_loop_s *loop, const char *endpoints, tide_etcd_t **out,
                  tide_error_t *err);
/* Blocking check for startup (does not run the loop): some member answers GET /health with
 * {"health":"true"} within timeout_ms. Returns 0, -ECONNREFUSED (every member refused: at once, no
 * retry) or -ETIMEDOUT (no healthy answer in time), with err naming every endpoint tried and why.
 */
int tide_etcd_probe(tide_etcd_t *c, int64_t timeout_ms, tide_error_t *err);
/* Pending calls complete with -ESHUTDOWN and watches end with on_end(-ESHUTDOWN), from the loop
 * (never inline); run the loop afterwards so the client's handles close before uv_loop_close. Safe
 * inside any of the client's callbacks. NULL is fine. */
void tide_etcd_free(tide_etcd_t *c);
/* The key prefix of an etcd:// store URL without one. */
#define TIDE_ETCD_DEFAULT_PREFIX "/tide/"
/* Splits a store URL's location, the part after "etcd:" ("//HOST:PORT[,HOST:PORT...][/PREFIX]"), into the
 * endpoint list and the key prefix, which always ends in '/' (default TIDE_ETCD_DEFAULT_PREFIX). Shared by
 * the etcd store and the leader election, so both name the same keys. Returns 0 with both set (caller
 * frees), or -EINVAL with err saying what is wrong (both NULL). */
int tide_etcd_parse_location(const char *location, char **endpoints, char **prefix, tide_error_t *err);
/* The endpoint list as given to tide_etcd_new (borrowed), for messages. */
const char *tide_etcd_endpoints(const tide_etcd_t *c);

/* status 0: resp is etcd's parsed JSON body (borrowed for the callback), errtext "". Otherwise resp
 * is NULL and errtext says why (never NULL; borrowed): -EINVAL: etcd refused the request (HTTP 4xx
 * with
 * {"error","message","code"}: errtext is its message, e.g. "etcdserver: mvcc: required revision has
 * been compacted"); -ECONNREFUSED / -ETIMEDOUT / -EIO: transport failure after trying the members
 * until the call's deadline (-EIO also for HTTP 5xx or a malformed answer); when the request had
 * been sent, the outcome of a write is unknown; -ESHUTDOWN: tide_etcd_free first. */
typedef void (*tide_etcd_cb)(int status, const cJSON *resp, const char *errtext, void *ud);
/* POSTs body (copied; JSON) to path (e.g. "/v3/kv/txn"). timeout_ms (> 0) bounds the whole call
 * including failover: a member that refuses or cannot be reached moves the call to the next one at
 * once; a request that may have reached etcd is retried elsewhere only when repeating it is
 * harmless (ranges, lease keepalives, status) or etcd said it had no leader. Returns 0 (cb fires
 * later, from the loop, exactly once), -EINVAL (NULL argument, path not starting with '/',
 * timeout <= 0) or -ESHUTDOWN (after tide_etcd_free, e.g. from one of its -ESHUTDOWN callbacks); cb
 * never fires then. */
int tide_etcd_call(tide_etcd_t *c, const char *path, const char *body, int64_t timeout_ms,
                   tide_etcd_cb cb, void *ud);
/* The same, with the caller saying whether repeating the request is harmless even when an earlier attempt
 * may have reached etcd (tide_etcd_call decides by path: reads, keepalives, lease grants and revokes). A
 * repeatable call whose member does not answer in its share of the time moves on to the next member. */
int tide_etcd_call_ex(tide_etcd_t *c, const char *path, const char *body, int64_t timeout_ms,
                      bool repeatable, tide_etcd_cb cb, void *ud);

/* --- watches --- */

/* One event of a watch; every pointer is borrowed for the callback only. */
typedef struct tide_etcd_event {
    bool is_delete;
    const char *key; /* decoded from base64 and NUL-terminated (key_len excludes the NUL) */
    size_t key_len;
    const uint8_t *value; /* decoded; never NULL (empty for deletes) */
    size_t value_len;
    int64_t create_rev; /* 0 for deletes */
    int64_t mod_rev;    /* the revision of the change (also for deletes) */
} tide_etcd_event_t;

/* Callbacks of one watch; ud is the watch's. Any may be NULL except on_event. */
typedef struct tide_etcd_watch_cbs {
    /* Each event, in revision order. */
    void (*on_event)(const tide_etcd_event_t *ev, void *ud);
    /* The stream is (again) established; revision is etcd's current one. Fires once per
     * (re)connection. */
    void (*on_synced)(int64_t revision, void *ud);
    /* Events from the revision the watch needed next were compacted away (etcdctl compact): the
     * caller should re-read; the watch continues by itself from compact_rev, so events at or after
     * compact_rev may come again (dedupe by mod_rev). */
    void (*on_compacted)(int64_t compact_rev, void *ud);
    /* The watch ended: -ESHUTDOWN after tide_etcd_free. Never after tide_etcd_watch_cancel. */
    void (*on_end)(int status, const char *errtext, void *ud);
} tide_etcd_watch_cbs_t;

/* Watches key (key_len bytes; copied), or every key starting with it when prefix is true ("" with
 * prefix: all keys), from start_rev (0: changes after now). After a connection loss the watch
 * resumes by itself from the last seen revision + 1, on another member if needed (backing off up to
 * 1 s between rounds). cbs is copied. Returns 0 with *out set, -EINVAL (NULL argument, start_rev
 * < 0) or -ESHUTDOWN (after tide_etcd_free). */
int tide_etcd_watch(tide_etcd_t *c, const char *key, size_t key_len, bool prefix, int64_t start_rev,
                    const tide_etcd_watch_cbs_t *cbs, void *ud, tide_etcd_watch_t **out);
/* Stops the watch and frees it: no callback after this returns (also when called from a callback of
 * this or another watch). NULL is fine; not after tide_etcd_free. */
void tide_etcd_watch_cancel(tide_etcd_watch_t *w);

/* --- helpers for building and reading etcd's JSON --- */

/* Keys and values go into the JSON as base64.h's tide_base64_encode. This decodes a NUL-terminated base64
 * text (padding optional; no whitespace). Returns 0 with *out (malloc'd, one extra NUL byte after the data,
 * caller frees) and *out_len, or -EINVAL for invalid text (*out NULL). */
int tide_etcd_unb64(const char *text, uint8_t **out, size_t *out_len);
/* Reads obj's int64 field name: a JSON string of decimal digits (etcd's int64 encoding; optional
 * '-') or a JSON number that is an exact integer. A missing field or JSON null reads as 0 (etcd
 * omits defaults). Returns 0, or -EINVAL (another type, junk, overflow; *out 0). */
int tide_etcd_json_int64(const cJSON *obj, const char *name, int64_t *out);
/* The range_end that selects every key starting with prefix (len bytes): prefix with its last byte
 * below 0xff incremented and the rest dropped; "\0" (every key) when prefix is empty or all 0xff.
 * Returns a malloc'd buffer (caller frees) and its length in *out_len. */
uint8_t *tide_etcd_prefix_end(const void *prefix, size_t len, size_t *out_len);

#endif

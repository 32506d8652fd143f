/* Internals of the etcd client and store (not for their users): the pure decoders of what etcd
 * answers, split out of etcd_client.c and store_etcd.c so that tests/fuzz/fuzz_etcd_answer.c can
 * feed them untrusted bytes without a loop or a socket. */
#ifndef TIDE_ETCD_INTERNAL_H
#define TIDE_ETCD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "etcd_client.h"
#include "store_private.h"

/* --- etcd_client.c --- */

/* The watch stream's splitter: the stream is concatenated JSON objects, split by a string-aware
 * brace scanner whose state survives between feeds (a message may arrive in any number of pieces).
 * Zero-initialised or tide__etcd_split_reset it is empty. */
typedef struct tide__etcd_split {
    tide_buf_t buf;
    size_t scan; /* bytes of buf already scanned */
    int depth;   /* never negative */
    bool in_str, esc;
} tide__etcd_split_t;

/* Empties s (keeps its allocation). */
void tide__etcd_split_reset(tide__etcd_split_t *s);
/* Frees s's buffer. NULL is fine. */
void tide__etcd_split_free(tide__etcd_split_t *s);
/* Appends n bytes (copied). Returns 0, or -EMSGSIZE (nothing appended) when the buffer would
 * hold more than max bytes. */
int tide__etcd_split_feed(tide__etcd_split_t *s, const void *data, size_t n, size_t max);
/* Takes the next complete top-level object (or array, or stray closer) off the front of the
 * buffer: returns 1 with *consumed its bytes (> 0, at most what was buffered) and *out its parse
 * from its first '{' (NULL when that is not JSON: the stream is corrupt; caller frees with
 * cJSON_Delete), or 0 with *out NULL and nothing consumed when no message is complete yet. */
int tide__etcd_split_next(tide__etcd_split_t *s, size_t *consumed, cJSON **out);

/* What one watch message says; pointers borrow from the message. */
typedef struct tide__etcd_watch_msg {
    bool error;          /* no "result" object ({"error":...}: the gateway lost its stream) */
    int64_t revision;    /* result.header.revision; 0 when missing or unreadable */
    bool canceled;       /* etcd ended the watch (then nothing below is read) */
    int64_t compact_rev; /* with canceled: > 0 when the needed revision was compacted */
    bool created;        /* the stream is (again) established */
    const cJSON *events; /* result.events: may be NULL or not an array (then it yields nothing) */
} tide__etcd_watch_msg_t;

/* Reads one watch message j (borrowed) into *m (always fully set). */
void tide__etcd_watch_msg_decode(const cJSON *j, tide__etcd_watch_msg_t *m);

/* Decodes one element of a watch message's events. Returns 0 with *e set (e->key and e->value
 * point into *key and *val, malloc'd, caller frees both; *val may be NULL, e->value never is), or
 * -EINVAL when it is not an event that can be read (*e zeroed, *key and *val NULL). */
int tide__etcd_event_decode(const cJSON *ev, tide_etcd_event_t *e, uint8_t **key, uint8_t **val);

/* etcd's {"error","message","code"} text of an HTTP error answer j (may be NULL), else "HTTP code".
 * Writes at most len (> 0) bytes including the NUL into out. */
void tide__etcd_http_error_text(const cJSON *j, long code, char *out, size_t len);

/* --- store_etcd.c --- */

/* Adds one page of a range answer resp (borrowed) to kvs: every key must start with prefix (plen
 * bytes) and hold no NUL byte; the prefix is dropped. *range_rev, when 0, is set from the answer's
 * header first. On success *next_key (freed and replaced) is the key the next page starts at (the
 * last key plus a NUL byte, *next_len bytes), or NULL when the answer said no "more" or had no kv.
 * Returns 0, or -EIO with text (len bytes) saying why (*next_key NULL; kvs may hold the kvs before
 * the bad one). */
int tide__etcd_range_page(const cJSON *resp, const char *prefix, size_t plen, int64_t *range_rev,
                          tide__store_kvs_t *kvs, uint8_t **next_key, size_t *next_len, char *text,
                          size_t len);

/* Reads a txn answer resp (borrowed) for the chunk of batch b that starts at op chunk_start, whose
 * compares expected cmp_revs (b->ncmps of them). *rev: the answer's header revision (0 when
 * unreadable). Returns 0 when the txn succeeded, or -ECANCELED with text (len bytes) naming the
 * first compared key that moved. */
int tide__etcd_txn_answer(const cJSON *resp, const tide_store_batch_t *b, const int64_t *cmp_revs,
                          size_t chunk_start, int64_t *rev, char *text, size_t len);

#endif

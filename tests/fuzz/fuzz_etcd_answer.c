/* libFuzzer target for what the etcd client and store read from etcd (untrusted network input,
 * common/store/etcd_internal.h): the input is both a watch stream and one call's answer.
 *  - Stream: fed to the splitter in pseudo-random chunk sizes and again at once; both must yield the
 *    same message spans (the scanner's state survives between feeds), every byte fed is either consumed
 *    by a message or still buffered, the depth never goes negative, and a feed over the cap changes
 *    nothing. Each message is decoded as a watch message and each event in it: a readable event has
 *    a NUL-terminated key, a value that is never NULL, and base64 that round-trips; an unreadable one
 *    comes back zeroed with nothing allocated.
 *  - Answer: parsed as JSON, read as an HTTP error text (NUL-terminated within its size, never
 *    empty), as a range page under "/tide/" (kvs match the JSON's keys and values with the prefix
 *    dropped, no NUL in a key, the next page's key is the last key plus a NUL, a failure says why and
 *    leaves no next key) and as a txn answer of a fixed batch (success exactly when "succeeded" is
 *    true, else a "compare failed" text within its size). Every member read as an int64 agrees with
 *    strtoll in both directions, and every string read as base64 round-trips or leaves nothing.
 *
 * Input: [selector][bytes]. The selector picks the chunk sizes, the feed cap (bit 7: 4 KiB), the
 * error text's size, the range's starting revision and the txn chunk's start. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base64.h"
#include "etcd_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define PREFIX      "/tide/"
#define MAX_WALK    4096 /* values visited per answer, so a huge input stays fast */
#define MAX_MSGS    256  /* messages compared per stream */

static uint32_t rnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* --- base64 and int64 helpers against their promises --- */

static void check_unb64(const char *text)
{
    uint8_t *out = (uint8_t *)"x", *again = NULL;
    size_t len = 99, len2 = 0;
    char *enc;

    if (tide_etcd_unb64(text, &out, &len) < 0) {
        if (out != NULL || len != 0)
            abort();
        return;
    }
    if (!out || out[len] != 0)
        abort();
    enc = tide_base64_encode(out, len);
    if (tide_etcd_unb64(enc, &again, &len2) < 0 || len2 != len || memcmp(again, out, len) != 0)
        abort();
    free(enc);
    free(again);
    free(out);
}

/* A decimal string etcd could send: optional '-', then digits only. */
static bool plain_decimal(const char *s)
{
    if (*s == '-')
        s++;
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

static void check_int64(const cJSON *obj, const cJSON *f)
{
    int64_t v = 77;
    int rc;

    if (!f->string)
        return;
    rc = tide_etcd_json_int64(obj, f->string, &v);
    if (cJSON_GetObjectItemCaseSensitive(obj, f->string) != f)
        return; /* a duplicate name: the first one was read */
    if (rc < 0) {
        if (rc != -EINVAL || v != 0)
            abort();
    } else if (rc != 0) {
        abort();
    }
    if (cJSON_IsString(f) && plain_decimal(f->valuestring)) {
        long long ref;
        char *end;

        errno = 0;
        ref = strtoll(f->valuestring, &end, 10);
        /* in range: read exactly; out of range: refused */
        if (errno == 0 ? (rc != 0 || v != ref) : rc == 0)
            abort();
    } else if (cJSON_IsString(f) && rc == 0) {
        abort(); /* junk accepted */
    } else if (cJSON_IsNull(f) && (rc != 0 || v != 0)) {
        abort();
    } else if (!cJSON_IsString(f) && !cJSON_IsNumber(f) && !cJSON_IsNull(f) && rc == 0) {
        abort(); /* another type accepted */
    } else if (cJSON_IsNumber(f) && rc == 0 && (double)v != f->valuedouble) {
        abort();
    }
}

static void walk(const cJSON *j, int *budget)
{
    const cJSON *it;

    cJSON_ArrayForEach(it, j)
    {
        if (--*budget < 0)
            return;
        if (cJSON_IsObject(j))
            check_int64(j, it);
        if (cJSON_IsString(it))
            check_unb64(it->valuestring);
        walk(it, budget);
    }
}

/* --- the watch stream --- */

static void check_event(const cJSON *ev)
{
    tide_etcd_event_t e;
    uint8_t *key = (uint8_t *)"x", *val = (uint8_t *)"x";
    static const tide_etcd_event_t zero;

    if (tide__etcd_event_decode(ev, &e, &key, &val) < 0) {
        if (key || val || memcmp(&e, &zero, sizeof(e)) != 0)
            abort();
        return;
    }
    if (!key || e.key != (const char *)key || e.key[e.key_len] != 0 || !e.value ||
        (val && e.value != val) || (!val && e.value_len != 0))
        abort();
    if (e.value_len > 0) {
        volatile uint8_t last = e.value[e.value_len - 1]; /* within bounds (ASan) */
        (void)last;
    }
    free(key);
    free(val);
}

static void check_message(const cJSON *j)
{
    tide__etcd_watch_msg_t m;
    const cJSON *ev;
    int n = 0;

    memset(&m, 0xa5, sizeof(m));
    tide__etcd_watch_msg_decode(j, &m);
    if (m.error && (m.revision || m.canceled || m.created || m.events || m.compact_rev))
        abort();
    if (m.canceled && (m.created || m.events))
        abort();
    if (!m.canceled && m.compact_rev)
        abort();
    cJSON_ArrayForEach(ev, m.events)
    {
        if (++n > MAX_WALK)
            break;
        check_event(ev);
    }
}

typedef struct msg {
    size_t used;
    cJSON *j;
} msg_t;

/* Drains s into out (up to MAX_MSGS); returns how many. */
static size_t drain(tide__etcd_split_t *s, msg_t *out, size_t have)
{
    size_t used;
    cJSON *j;

    while (have < MAX_MSGS) {
        size_t before = s->buf.len;
        int rc = tide__etcd_split_next(s, &used, &j);

        if (s->depth < 0)
            abort();
        if (rc == 0) {
            if (j || used || s->buf.len != before || s->scan != before)
                abort();
            break;
        }
        if (rc != 1 || used == 0 || used > before || s->buf.len != before - used || s->scan != 0)
            abort();
        out[have].used = used;
        out[have].j = j;
        have++;
    }
    return have;
}

static void check_stream(const uint8_t *d, size_t n, uint8_t sel)
{
    tide__etcd_split_t whole = {0}, chunked = {0};
    static msg_t a[MAX_MSGS], b[MAX_MSGS];
    size_t na, nb = 0, off = 0, max = (sel & 0x80) ? 4096 : 64u << 20, fed = 0, used = 0;
    uint32_t seed = 0x9e3779b9u ^ (uint32_t)sel * 2654435761u;

    if (tide__etcd_split_feed(&whole, d, n, max) < 0) {
        if (n <= max || whole.buf.len != 0)
            abort();
        n = max; /* compare what fits */
        if (tide__etcd_split_feed(&whole, d, n, max) < 0)
            abort();
    }
    na = drain(&whole, a, 0);
    while (off < n && nb < MAX_MSGS) {
        size_t chunk = 1 + rnd(&seed) % 97, len_before = chunked.buf.len;

        if (chunk > n - off)
            chunk = n - off;
        if (tide__etcd_split_feed(&chunked, d + off, chunk, max) < 0 || chunked.buf.len != len_before + chunk)
            abort();
        off += chunk;
        fed += chunk;
        nb = drain(&chunked, b, nb);
    }
    if (nb < MAX_MSGS && na < MAX_MSGS && na != nb)
        abort();
    /* the same spans of the same bytes (so the same parses) */
    for (size_t i = 0; i < na && i < nb; i++) {
        if (a[i].used != b[i].used || !a[i].j != !b[i].j)
            abort();
    }
    for (size_t i = 0; i < nb; i++)
        used += b[i].used;
    if (used + chunked.buf.len != fed)
        abort();
    /* a feed over the cap changes nothing */
    if (chunked.buf.len > 0 && tide__etcd_split_feed(&chunked, d, max, max) != -EMSGSIZE)
        abort();
    for (size_t i = 0; i < na; i++) {
        if (a[i].j)
            check_message(a[i].j);
        cJSON_Delete(a[i].j);
    }
    for (size_t i = 0; i < nb; i++)
        cJSON_Delete(b[i].j);
    tide__etcd_split_reset(&whole);
    if (whole.buf.len || whole.scan || whole.depth || whole.in_str || whole.esc)
        abort();
    tide__etcd_split_free(&whole);
    tide__etcd_split_free(&chunked);
}

/* --- one call's answer --- */

static void check_range(const cJSON *j, uint8_t sel)
{
    tide__store_kvs_t kvs;
    int64_t rev = (sel & 0x10) ? 42 : 0, want_rev = 0;
    uint8_t *next = malloc(3); /* a previous page's key: must be freed or replaced */
    size_t next_len = 3, added = 0;
    char text[200];
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "kvs"), *kv;
    int rc, rev_rc;

    tide__store_kvs_init(&kvs);
    memcpy(next, "ab", 3);
    text[0] = 0;
    rev_rc = tide_etcd_json_int64(cJSON_GetObjectItemCaseSensitive(j, "header"), "revision", &want_rev);
    rc = tide__etcd_range_page(j, PREFIX, strlen(PREFIX), &rev, &kvs, &next, &next_len, text,
                               sizeof(text));
    if (rc < 0) {
        if (rc != -EIO || !text[0] || strlen(text) >= sizeof(text) || next)
            abort();
        tide__store_kvs_free(&kvs);
        return;
    }
    if (rc != 0 || (sel & 0x10 ? rev != 42 : (rev_rc != 0 || rev != want_rev)))
        abort();
    tide__store_kvs_finish(&kvs);
    cJSON_ArrayForEach(kv, arr)
    {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(kv, "key");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
        uint8_t *kb, *vb = NULL;
        size_t kl, vl = 0;
        const tide_store_kv_t *o;

        if (added >= kvs.n)
            abort();
        o = &kvs.kvs[added++];
        if (!cJSON_IsString(k) || tide_etcd_unb64(k->valuestring, &kb, &kl) < 0)
            abort();
        if (v && tide_etcd_unb64(v->valuestring, &vb, &vl) < 0)
            abort();
        if (kl < strlen(PREFIX) || memcmp(kb, PREFIX, strlen(PREFIX)) != 0 ||
            strlen(o->key) != kl - strlen(PREFIX) || memcmp(o->key, kb + strlen(PREFIX), strlen(o->key)) != 0 ||
            o->value_len != vl || (vl && memcmp(o->value, vb, vl) != 0))
            abort();
        if (next && added == kvs.n && (next_len != kl + 1 || memcmp(next, kb, kl) != 0 || next[kl] != 0))
            abort();
        free(kb);
        free(vb);
    }
    if (added != kvs.n)
        abort();
    if (next && (kvs.n == 0 || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "more"))))
        abort();
    if (!next && kvs.n > 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "more")))
        abort();
    free(next);
    tide__store_kvs_free(&kvs);
}

static void check_txn(const cJSON *j, uint8_t sel)
{
    tide_store_batch_t *b = tide_store_batch_new();
    int64_t cmp_revs[2] = {5, 0}, rev = 9, want = 0;
    size_t len = 16 + (sel & 0x3f) * 4;
    char *text = malloc(len);
    int rc;

    tide_store_batch_compare(b, "jobs/1", 5);
    tide_store_batch_compare(b, "a", 0);
    tide_store_batch_put(b, "jobs/1", "x", 1);
    tide_store_batch_delete(b, "b");
    tide_etcd_json_int64(cJSON_GetObjectItemCaseSensitive(j, "header"), "revision", &want);
    rc = tide__etcd_txn_answer(j, b, cmp_revs, sel & 1, &rev, text, len);
    if (rev != want)
        abort();
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "succeeded"))) {
        if (rc != 0)
            abort();
    } else if (rc != -ECANCELED || strlen(text) >= len || strncmp(text, "compare failed", 14) != 0) {
        abort();
    }
    free(text);
    tide_store_batch_free(b);
}

static void check_answer(const uint8_t *d, size_t n, uint8_t sel)
{
    cJSON *j = cJSON_ParseWithLength((const char *)d, n);
    size_t len = 1 + (sel & 0x3f) * 3;
    char *text = malloc(len);
    int budget = MAX_WALK;

    memset(text, 'x', len);
    tide__etcd_http_error_text(j, 400 + sel, text, len);
    if (strnlen(text, len) >= len || (len > 1 && !text[0] && !(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "message")) ||
                                                               cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "error")))))
        abort();
    free(text);
    if (cJSON_IsObject(j)) {
        check_range(j, sel);
        check_txn(j, sel);
    }
    walk(j, &budget);
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    check_stream(data + 1, size - 1, data[0]);
    check_answer(data + 1, size - 1, data[0]);
    return 0;
}

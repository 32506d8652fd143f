/* The etcd v3 JSON-gateway client: libcurl's multi_socket interface driven by the libuv loop (one
 * uv_poll per socket curl watches, one uv_timer for curl's timeout), one easy handle per HTTP
 * attempt, connections kept alive in the multi's cache. Invariants: user callbacks run only from
 * our loop entry points after curl_multi_socket_action has returned (never from curl's callbacks,
 * never inside a starting call); a call's callback fires exactly once; nothing is freed while a
 * loop entry point may still reach it (frees happen in uv_close callbacks, and the client's
 * teardown waits until no entry point is on the stack). */
#include "etcd_client.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <uv.h>

#include "base64.h"
#include "buf.h"
#include "etcd_internal.h"
#include "list.h"
#include "xmalloc.h"

#define MAX_RESPONSE_BYTES   (512u << 20) /* a bigger answer is an error, not an allocation */
#define ERR_TEXT             192
#define WATCH_MAX_BACKOFF_MS 1000
#define CALL_MAX_BACKOFF_MS  500
#define ATTEMPT_MIN_MS       250 /* the least time one member gets for a call that may be repeated */

typedef struct member {
    char *hostport; /* "HOST:PORT" */
    char *url;      /* "http://HOST:PORT" */
} member_t;

/* The first member of call_t and tide_etcd_watch, so CURLOPT_PRIVATE tells them apart. */
typedef struct xfer {
    bool is_watch;
} xfer_t;

typedef struct sockctx {
    uv_poll_t poll;
    curl_socket_t fd;
    tide_etcd_t *c;
    tide_list_t node; /* in c->socks while open */
} sockctx_t;

typedef struct call {
    xfer_t x;
    tide_list_t node; /* in c->calls while pending */
    tide_etcd_t *c;
    char *path;
    char *body;
    bool idempotent;
    uint64_t deadline; /* now_ms() */
    int64_t timeout_ms;
    tide_etcd_cb cb;
    void *ud;
    uv_timer_t timer; /* retries and deferred failures */
    CURL *easy;
    tide_buf_t resp;
    char errbuf[CURL_ERROR_SIZE];
    int member;             /* the member of the current or next attempt */
    int tried;              /* attempts in the current round */
    int rounds;             /* completed rounds of every member */
    int status;             /* of the last failed attempt */
    char (*errs)[ERR_TEXT]; /* the last failure per member ("" = none) */
} call_t;

struct tide_etcd_watch {
    xfer_t x;
    tide_list_t node; /* in c->watches until its timer is closed */
    tide_etcd_t *c;
    uint8_t *key;
    size_t key_len;
    bool prefix;
    int64_t next_rev; /* 0 until the first "created" of a watch from now */
    tide_etcd_watch_cbs_t cbs;
    void *ud;
    uv_timer_t timer; /* reconnects */
    CURL *easy;
    char *req;
    char errbuf[CURL_ERROR_SIZE];
    int member;
    int fails; /* connection attempts since the last "created" */
    bool canceled;
    bool restart; /* the stream must be replaced once its data is processed */
    int restart_delay;
    tide__etcd_split_t split; /* the stream, split into its JSON messages */
};

struct tide_etcd {
    uv_loop_t *loop;
    CURLM *multi;
    uv_timer_t timer;
    member_t *members;
    int n;
    int good; /* the member that answered last */
    char *endpoints;
    struct curl_slist *headers;
    tide_list_t calls, watches, socks;
    int depth;   /* loop entry points on the stack */
    int handles; /* uv handles not yet closed */
    bool closing, torn_down;
    bool timer_ready;
};

static void teardown(tide_etcd_t *c);

/* Milliseconds on the monotonic clock: not the loop's cached time, which lags after a blocking
 * probe. */
static uint64_t now_ms(void)
{
    return uv_hrtime() / 1000000u;
}
static void dispatch(tide_etcd_t *c);
static void watch_connect(tide_etcd_watch_t *w);

/* --- helpers --- */

int tide_etcd_unb64(const char *text, uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (!text)
        return -EINVAL;
    return tide_base64_decode(text, strlen(text), out, out_len);
}

int tide_etcd_json_int64(const cJSON *obj, const char *name, int64_t *out)
{
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
    const char *s;
    bool neg = false;
    uint64_t v = 0;

    *out = 0;
    if (!f || cJSON_IsNull(f))
        return 0;
    if (cJSON_IsNumber(f)) {
        double d = f->valuedouble;
        if (d != d || d < -9007199254740992.0 || d > 9007199254740992.0 || (double)(int64_t)d != d)
            return -EINVAL;
        *out = (int64_t)d;
        return 0;
    }
    if (!cJSON_IsString(f) || !f->valuestring)
        return -EINVAL;
    s = f->valuestring;
    if (*s == '-') {
        neg = true;
        s++;
    }
    if (*s == '\0')
        return -EINVAL;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
            return -EINVAL;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
        return -EINVAL;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

uint8_t *tide_etcd_prefix_end(const void *prefix, size_t len, size_t *out_len)
{
    const uint8_t *p = prefix;
    uint8_t *end = tide_xmalloc(len + 1);

    while (len > 0 && p[len - 1] == 0xff)
        len--;
    if (len == 0) {
        end[0] = 0;
        *out_len = 1;
        return end;
    }
    memcpy(end, p, len);
    end[len - 1]++;
    *out_len = len;
    return end;
}

/* --- the decoders of what etcd sends (etcd_internal.h) --- */

void tide__etcd_split_reset(tide__etcd_split_t *s)
{
    tide_buf_reset(&s->buf);
    s->scan = 0;
    s->depth = 0;
    s->in_str = s->esc = false;
}

void tide__etcd_split_free(tide__etcd_split_t *s)
{
    if (s)
        tide_buf_free(&s->buf);
}

int tide__etcd_split_feed(tide__etcd_split_t *s, const void *data, size_t n, size_t max)
{
    if (n > max || s->buf.len > max - n)
        return -EMSGSIZE;
    tide_buf_append(&s->buf, data, n);
    return 0;
}

/* A string-aware scan for the end (exclusive) of the next complete top-level JSON value in s->buf,
 * or 0 when none is complete yet. A closer at top level ends a (corrupt) message at once: the
 * depth never goes below 0, so one stray '}' cannot stall the stream. */
static size_t next_object(tide__etcd_split_t *s)
{
    const uint8_t *d = s->buf.data;

    for (; s->scan < s->buf.len; s->scan++) {
        uint8_t ch = d[s->scan];

        if (s->in_str) {
            if (s->esc)
                s->esc = false;
            else if (ch == '\\')
                s->esc = true;
            else if (ch == '"')
                s->in_str = false;
        } else if (ch == '"') {
            s->in_str = true;
        } else if (ch == '{' || ch == '[') {
            s->depth++;
        } else if (ch == '}' || ch == ']') {
            if (s->depth <= 1) {
                s->depth = 0;
                s->scan++;
                return s->scan;
            }
            s->depth--;
        }
    }
    return 0;
}

int tide__etcd_split_next(tide__etcd_split_t *s, size_t *consumed, cJSON **out)
{
    size_t start = 0, end = next_object(s);
    const char *d = (const char *)s->buf.data;

    *out = NULL;
    *consumed = 0;
    if (end == 0)
        return 0;
    while (start < end && d[start] != '{')
        start++;
    *out = cJSON_ParseWithLength(d + start, end - start);
    tide_buf_consume(&s->buf, end);
    s->scan = 0;
    *consumed = end;
    return 1;
}

void tide__etcd_watch_msg_decode(const cJSON *j, tide__etcd_watch_msg_t *m)
{
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "result");

    memset(m, 0, sizeof(*m));
    if (!cJSON_IsObject(res)) {
        m->error = true;
        return;
    }
    tide_etcd_json_int64(cJSON_GetObjectItemCaseSensitive(res, "header"), "revision", &m->revision);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "canceled"))) {
        m->canceled = true;
        tide_etcd_json_int64(res, "compact_revision", &m->compact_rev);
        return;
    }
    m->created = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(res, "created"));
    m->events = cJSON_GetObjectItemCaseSensitive(res, "events");
}

int tide__etcd_event_decode(const cJSON *ev, tide_etcd_event_t *e, uint8_t **key, uint8_t **val)
{
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(ev, "kv");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(kv, "key");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(kv, "value");
    size_t klen = 0, vlen = 0;

    memset(e, 0, sizeof(*e));
    *key = *val = NULL;
    if (!cJSON_IsObject(kv) || !cJSON_IsString(k) || tide_etcd_unb64(k->valuestring, key, &klen) < 0)
        return -EINVAL;
    if (cJSON_IsString(v)) {
        if (tide_etcd_unb64(v->valuestring, val, &vlen) < 0) {
            free(*key);
            *key = NULL;
            return -EINVAL;
        }
    }
    e->is_delete = cJSON_IsString(type) && strcmp(type->valuestring, "DELETE") == 0;
    e->key = (const char *)*key;
    e->key_len = klen;
    e->value = *val ? *val : (const uint8_t *)"";
    e->value_len = vlen;
    tide_etcd_json_int64(kv, "create_revision", &e->create_rev);
    tide_etcd_json_int64(kv, "mod_revision", &e->mod_rev);
    return 0;
}

void tide__etcd_http_error_text(const cJSON *j, long code, char *out, size_t len)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");

    if (!cJSON_IsString(m))
        m = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsString(m) && m->valuestring)
        snprintf(out, len, "%s", m->valuestring);
    else
        snprintf(out, len, "HTTP %ld", code);
}

/* --- the curl <-> libuv glue --- */

static void on_handle_closed(uv_handle_t *h)
{
    tide_etcd_t *c = h->data;

    if (--c->handles == 0 && c->torn_down)
        free(c);
}

/* The curl timer is made on first use, so a client that never ran anything frees at once. */
static void ensure_timer(tide_etcd_t *c)
{
    if (c->timer_ready)
        return;
    uv_timer_init(c->loop, &c->timer);
    c->timer.data = c;
    c->handles++;
    c->timer_ready = true;
}

static void sock_closed(uv_handle_t *h)
{
    sockctx_t *s = (sockctx_t *)h;
    tide_etcd_t *c = s->c;

    free(s);
    if (--c->handles == 0 && c->torn_down)
        free(c);
}

static void sock_close(sockctx_t *s)
{
    tide_list_remove(&s->node);
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, sock_closed);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    sockctx_t *s = (sockctx_t *)h;
    tide_etcd_t *c = s->c;
    int flags = 0, running = 0;

    if (status < 0)
        flags = CURL_CSELECT_ERR;
    else {
        if (events & UV_READABLE)
            flags |= CURL_CSELECT_IN;
        if (events & UV_WRITABLE)
            flags |= CURL_CSELECT_OUT;
    }
    c->depth++;
    curl_multi_socket_action(c->multi, s->fd, flags, &running);
    dispatch(c);
    if (--c->depth == 0 && c->closing && !c->torn_down)
        teardown(c);
}

static int socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    tide_etcd_t *c = userp;
    sockctx_t *s = socketp;
    int events = 0;

    if (c->torn_down)
        return 0;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            sock_close(s);
            curl_multi_assign(c->multi, fd, NULL);
        }
        return 0;
    }
    if (!s) {
        s = tide_xcalloc(1, sizeof(*s));
        if (uv_poll_init_socket(c->loop, &s->poll, fd) < 0) {
            free(s);
            return -1;
        }
        s->fd = fd;
        s->c = c;
        c->handles++;
        tide_list_push_back(&c->socks, &s->node);
        curl_multi_assign(c->multi, fd, s);
    }
    if (what & CURL_POLL_IN)
        events |= UV_READABLE;
    if (what & CURL_POLL_OUT)
        events |= UV_WRITABLE;
    uv_poll_start(&s->poll, events, on_poll);
    return 0;
}

static void on_curl_timer(uv_timer_t *t)
{
    tide_etcd_t *c = t->data;
    int running = 0;

    c->depth++;
    curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    dispatch(c);
    if (--c->depth == 0 && c->closing && !c->torn_down)
        teardown(c);
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    tide_etcd_t *c = userp;

    if (c->torn_down)
        return 0;
    if (timeout_ms < 0)
        uv_timer_stop(&c->timer);
    else
        uv_timer_start(&c->timer, on_curl_timer, (uint64_t)timeout_ms, 0); /* 0: next loop turn */
    return 0;
}

static size_t call_write(char *data, size_t size, size_t nmemb, void *ud)
{
    call_t *call = ud;
    size_t n = size * nmemb;

    if (call->resp.len + n > MAX_RESPONSE_BYTES)
        return 0; /* CURLE_WRITE_ERROR */
    tide_buf_append(&call->resp, data, n);
    return n;
}

static size_t watch_write(char *data, size_t size, size_t nmemb, void *ud)
{
    tide_etcd_watch_t *w = ud;
    size_t n = size * nmemb;

    if (tide__etcd_split_feed(&w->split, data, n, MAX_RESPONSE_BYTES) < 0)
        return 0;
    return n;
}

static CURL *easy_new(tide_etcd_t *c, const char *url, const char *body, char *errbuf, void *priv)
{
    CURL *e = curl_easy_init();

    if (!e)
        return NULL;
    errbuf[0] = '\0';
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, priv);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROXY, ""); /* never an http_proxy from the environment */
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
    if (body) {
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    return e;
}

/* --- calls --- */

static bool is_idempotent(const char *path)
{
    /* Repeating these is harmless: reads, keepalives, and lease grants and revokes (a lease granted
     * twice leaves an unused one that expires by itself; a second revoke finds nothing). */
    static const char *const paths[] = {"/v3/kv/range",           "/v3/lease/keepalive",
                                        "/v3/lease/timetolive",   "/v3/lease/leases",
                                        "/v3/lease/grant",        "/v3/lease/revoke",
                                        "/v3/maintenance/status", "/v3/cluster/member/list"};

    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        if (strcmp(path, paths[i]) == 0)
            return true;
    }
    return false;
}

static void call_freed(uv_handle_t *h)
{
    call_t *call = h->data;
    tide_etcd_t *c = call->c;

    free(call->path);
    free(call->body);
    free(call->errs);
    tide_buf_free(&call->resp);
    free(call);
    if (--c->handles == 0 && c->torn_down)
        free(c);
}

static void call_detach_easy(call_t *call)
{
    if (call->easy) {
        curl_multi_remove_handle(call->c->multi, call->easy);
        curl_easy_cleanup(call->easy);
        call->easy = NULL;
    }
}

/* Completes the call (status, resp or errtext) and releases it. */
static void call_finish(call_t *call, int status, const cJSON *resp, const char *errtext)
{
    call_detach_easy(call);
    tide_list_remove(&call->node);
    uv_timer_stop(&call->timer);
    call->cb(status, resp, errtext ? errtext : "", call->ud);
    uv_close((uv_handle_t *)&call->timer, call_freed);
}

/* The failures of every member, joined. */
static void call_fail(call_t *call)
{
    tide_buf_t t = TIDE_BUF_INIT;
    int status = call->status ? call->status : -ETIMEDOUT;

    for (int i = 0; i < call->c->n; i++) {
        if (call->errs[i][0])
            tide_buf_printf(&t, "%s%s", t.len ? "; " : "", call->errs[i]);
    }
    if (t.len == 0)
        tide_buf_printf(&t, "etcd at %s: no answer within %" PRId64 " ms", call->c->endpoints,
                        call->timeout_ms);
    call_finish(call, status, NULL, tide_buf_cstr(&t));
    tide_buf_free(&t);
}

static void call_attempt(call_t *call);

static void on_call_timer(uv_timer_t *t)
{
    call_t *call = t->data;
    tide_etcd_t *c = call->c;

    c->depth++;
    if (!c->closing)
        call_attempt(call);
    if (--c->depth == 0 && c->closing && !c->torn_down)
        teardown(c);
}

static void call_attempt(call_t *call)
{
    tide_etcd_t *c = call->c;
    uint64_t now = now_ms();
    int64_t remaining = call->deadline > now ? (int64_t)(call->deadline - now) : 0;
    char *url;

    if (remaining <= 0) {
        call_fail(call);
        return;
    }
    url = tide_xasprintf("%s%s", c->members[call->member].url, call->path);
    tide_buf_reset(&call->resp);
    call->easy = easy_new(c, url, call->body, call->errbuf, call);
    free(url);
    if (!call->easy) {
        call->status = -EIO;
        snprintf(call->errs[call->member], ERR_TEXT, "libcurl cannot make a request");
        call_fail(call);
        return;
    }
    curl_easy_setopt(call->easy, CURLOPT_WRITEFUNCTION, call_write);
    curl_easy_setopt(call->easy, CURLOPT_WRITEDATA, call);
    /* A member that accepted the connection and then hangs must not hold a call that another member
     * could answer: with several members, an attempt of a call that may be repeated gets a share of the
     * time left. */
    if (c->n > 1 && call->idempotent && remaining > ATTEMPT_MIN_MS) {
        int64_t share = call->timeout_ms / c->n;
        remaining = share < ATTEMPT_MIN_MS ? ATTEMPT_MIN_MS : share < remaining ? share : remaining;
    }
    curl_easy_setopt(call->easy, CURLOPT_TIMEOUT_MS, (long)remaining);
    curl_easy_setopt(call->easy, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)(c->n > 1 && remaining > 1000 ? 1000 : remaining));
    if (curl_multi_add_handle(c->multi, call->easy) != CURLM_OK) {
        curl_easy_cleanup(call->easy);
        call->easy = NULL;
        call->status = -EIO;
        snprintf(call->errs[call->member], ERR_TEXT, "libcurl cannot start a request");
        call_fail(call);
    }
}

/* Moves the call to the next member: at once within a round, after a growing pause between rounds.
 */
static void call_retry(call_t *call)
{
    tide_etcd_t *c = call->c;
    uint64_t delay = 0;

    if (c->good == call->member)
        c->good = (call->member + 1) % c->n; /* new calls start elsewhere too */
    call->member = (call->member + 1) % c->n;
    if (++call->tried >= c->n) {
        call->tried = 0;
        call->rounds++;
        delay = 25u << (call->rounds < 5 ? call->rounds : 5);
        if (delay > CALL_MAX_BACKOFF_MS)
            delay = CALL_MAX_BACKOFF_MS;
    }
    uv_timer_start(&call->timer, on_call_timer, delay, 0);
}

/* A transport failure's status and words; *sent: the request may have reached etcd. */
static int transport_error(CURL *e, CURLcode res, const char *errbuf, int64_t timeout_ms, char *out,
                           size_t len, bool *sent)
{
    long oserr = 0, request_bytes = 0;
    curl_off_t transfer_us = 0;
    bool began;

    curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &oserr);
    /* Whether the request may have left: the transfer began, or request bytes were written. (Not the
     * connect time: it is 0 on a reused connection, where the request surely went out.) */
    curl_easy_getinfo(e, CURLINFO_PRETRANSFER_TIME_T, &transfer_us);
    curl_easy_getinfo(e, CURLINFO_REQUEST_SIZE, &request_bytes);
    began = transfer_us > 0 || request_bytes > 0;
    *sent = true;
    if (res == CURLE_COULDNT_CONNECT || res == CURLE_COULDNT_RESOLVE_HOST) {
        /* libcurl resends a request by itself on a fresh connection when a reused one died without an
         * answer: when that fresh connect fails, the first copy may still have reached etcd. */
        *sent = request_bytes > 0;
        if (oserr == ECONNREFUSED || res == CURLE_COULDNT_CONNECT) {
            snprintf(out, len, "%s",
                     oserr && oserr != ECONNREFUSED ? strerror((int)oserr) : "connection refused");
            return oserr && oserr != ECONNREFUSED ? -EIO : -ECONNREFUSED;
        }
        snprintf(out, len, "%s", errbuf[0] ? errbuf : curl_easy_strerror(res));
        return -EIO;
    }
    if (res == CURLE_OPERATION_TIMEDOUT) {
        *sent = began;
        snprintf(out, len, "%s", began ? "no answer in time" : "cannot connect in time");
        return -ETIMEDOUT;
    }
    snprintf(out, len, "%s", errbuf[0] ? errbuf : curl_easy_strerror(res));
    (void)timeout_ms;
    return -EIO;
}

static void call_done(call_t *call, CURLcode res)
{
    tide_etcd_t *c = call->c;
    const char *hp = c->members[call->member].hostport;
    char text[ERR_TEXT - 40];
    bool retry = false, sent = true;
    long code = 0;
    cJSON *j;

    curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &code);
    if (res != CURLE_OK) {
        call->status = transport_error(call->easy, res, call->errbuf, call->timeout_ms, text,
                                       sizeof(text), &sent);
        retry = !sent || call->idempotent;
        call_detach_easy(call);
        snprintf(call->errs[call->member], ERR_TEXT, "etcd at %s: %s", hp, text);
        if (retry) {
            call_retry(call);
        } else {
            if (c->good == call->member)
                c->good = (call->member + 1) % c->n; /* the next call tries another member first */
            call_fail(call);
        }
        return;
    }
    j = cJSON_ParseWithLength((const char *)call->resp.data ? (const char *)call->resp.data : "",
                              call->resp.len);
    call_detach_easy(call);
    if (code == 200 && cJSON_IsObject(j)) {
        c->good = call->member;
        call_finish(call, 0, j, "");
    } else if (code == 200) {
        char *msg = tide_xasprintf("etcd at %s: malformed answer to %s", hp, call->path);
        call_finish(call, -EIO, NULL, msg);
        free(msg);
    } else if (code >= 400 && code < 500 && code != 429) {
        tide__etcd_http_error_text(j, code, text, sizeof(text));
        c->good = call->member;
        call_finish(call, -EINVAL, NULL, text);
    } else if (code == 429) {
        /* "too many requests": refused before it was proposed, so any call may try again. */
        tide__etcd_http_error_text(j, code, text, sizeof(text));
        call->status = -EIO;
        snprintf(call->errs[call->member], ERR_TEXT, "etcd at %s: %s", hp, text);
        call_retry(call);
    } else {
        tide__etcd_http_error_text(j, code, text, sizeof(text));
        call->status = -EIO;
        snprintf(call->errs[call->member], ERR_TEXT, "etcd at %s: %s", hp, text);
        /* "no leader": the request was not proposed, so a write may go elsewhere too. Other 5xx
         * ("request timed out", "leader changed") leave a write's outcome unknown. */
        if (call->idempotent || strstr(text, "no leader"))
            call_retry(call);
        else
            call_fail(call);
    }
    cJSON_Delete(j);
}

int tide_etcd_call(tide_etcd_t *c, const char *path, const char *body, int64_t timeout_ms,
                   tide_etcd_cb cb, void *ud)
{
    return tide_etcd_call_ex(c, path, body, timeout_ms, path && is_idempotent(path), cb, ud);
}

int tide_etcd_call_ex(tide_etcd_t *c, const char *path, const char *body, int64_t timeout_ms,
                      bool repeatable, tide_etcd_cb cb, void *ud)
{
    call_t *call;

    if (!c || !path || path[0] != '/' || !body || !cb || timeout_ms <= 0)
        return -EINVAL;
    if (c->closing)
        return -ESHUTDOWN;
    call = tide_xcalloc(1, sizeof(*call));
    call->c = c;
    call->path = tide_xstrdup(path);
    call->body = tide_xstrdup(body);
    call->idempotent = repeatable;
    call->timeout_ms = timeout_ms;
    call->deadline = now_ms() + (uint64_t)timeout_ms;
    call->cb = cb;
    call->ud = ud;
    call->member = c->good;
    call->errs = tide_xcalloc((size_t)c->n, sizeof(*call->errs));
    ensure_timer(c);
    tide_buf_init(&call->resp);
    uv_timer_init(c->loop, &call->timer);
    call->timer.data = call;
    c->handles++;
    tide_list_push_back(&c->calls, &call->node);
    /* Start from the loop: curl's first callbacks and any early failure stay out of this call. */
    uv_timer_start(&call->timer, on_call_timer, 0, 0);
    return 0;
}

/* --- watches --- */

static void watch_detach_easy(tide_etcd_watch_t *w)
{
    if (w->easy) {
        curl_multi_remove_handle(w->c->multi, w->easy);
        curl_easy_cleanup(w->easy);
        w->easy = NULL;
    }
}

static void on_watch_timer(uv_timer_t *t)
{
    tide_etcd_watch_t *w = t->data;
    tide_etcd_t *c = w->c;

    c->depth++;
    if (!c->closing && !w->canceled)
        watch_connect(w);
    if (--c->depth == 0 && c->closing && !c->torn_down)
        teardown(c);
}

/* Drops the stream and connects again after delay ms, on the next member when next_member. */
static void watch_reconnect(tide_etcd_watch_t *w, bool next_member)
{
    tide_etcd_t *c = w->c;
    uint64_t delay = 0;

    watch_detach_easy(w);
    w->restart = false;
    if (next_member) {
        w->member = (w->member + 1) % c->n;
        w->fails++;
        if (w->fails > c->n) {
            delay = 50u << (w->fails - c->n < 5 ? w->fails - c->n : 5);
            if (delay > WATCH_MAX_BACKOFF_MS)
                delay = WATCH_MAX_BACKOFF_MS;
        }
    }
    uv_timer_start(&w->timer, on_watch_timer, delay, 0);
}

static void watch_connect(tide_etcd_watch_t *w)
{
    tide_etcd_t *c = w->c;
    char *key = tide_base64_encode(w->key, w->key_len), *end = NULL, *url;
    tide_buf_t b = TIDE_BUF_INIT;

    tide_buf_printf(&b, "{\"create_request\":{\"key\":\"%s\"", key);
    if (w->prefix) {
        size_t elen;
        uint8_t *e = tide_etcd_prefix_end(w->key, w->key_len, &elen);
        end = tide_base64_encode(e, elen);
        free(e);
        tide_buf_printf(&b, ",\"range_end\":\"%s\"", end);
    }
    if (w->next_rev > 0)
        tide_buf_printf(&b, ",\"start_revision\":\"%" PRId64 "\"", w->next_rev);
    tide_buf_append_str(&b, "}}");
    free(w->req);
    w->req = tide_xstrdup(tide_buf_cstr(&b));
    tide_buf_free(&b);
    free(key);
    free(end);

    tide__etcd_split_reset(&w->split);
    url = tide_xasprintf("%s/v3/watch", c->members[w->member].url);
    w->easy = easy_new(c, url, w->req, w->errbuf, w);
    free(url);
    if (!w->easy) {
        watch_reconnect(w, true);
        return;
    }
    curl_easy_setopt(w->easy, CURLOPT_WRITEFUNCTION, watch_write);
    curl_easy_setopt(w->easy, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(w->easy, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(w->easy, CURLOPT_TCP_KEEPALIVE, 1L); /* a member that vanished silently */
    curl_easy_setopt(w->easy, CURLOPT_TCP_KEEPIDLE, 5L);
    curl_easy_setopt(w->easy, CURLOPT_TCP_KEEPINTVL, 2L);
    if (curl_multi_add_handle(c->multi, w->easy) != CURLM_OK) {
        curl_easy_cleanup(w->easy);
        w->easy = NULL;
        watch_reconnect(w, true);
    }
}

/* One decoded event to the user; returns false when the user stopped the watch or the client. */
static bool watch_event(tide_etcd_watch_t *w, const cJSON *ev)
{
    tide_etcd_event_t e;
    uint8_t *key, *val;

    if (tide__etcd_event_decode(ev, &e, &key, &val) < 0)
        return true; /* not an event we can read: skip it */
    if (e.mod_rev >= w->next_rev && e.mod_rev < INT64_MAX) /* an answer's numbers are not trusted */
        w->next_rev = e.mod_rev + 1;
    w->cbs.on_event(&e, w->ud);
    free(key);
    free(val);
    return !w->canceled && !w->c->closing;
}

/* One message of the stream. */
static void watch_message(tide_etcd_watch_t *w, const cJSON *j)
{
    tide__etcd_watch_msg_t m;
    const cJSON *ev;

    tide__etcd_watch_msg_decode(j, &m);
    if (m.error) { /* {"error":...}: the gateway lost its stream */
        w->restart = true;
        w->restart_delay = 1;
        return;
    }
    if (m.canceled) {
        w->restart = true;
        if (m.compact_rev > 0) {
            w->restart_delay = 0;
            w->next_rev = m.compact_rev;
            if (w->cbs.on_compacted)
                w->cbs.on_compacted(m.compact_rev, w->ud);
        } else {
            w->restart_delay = 1;
        }
        return;
    }
    if (m.created) {
        if (w->next_rev == 0 && m.revision >= 0 && m.revision < INT64_MAX)
            w->next_rev = m.revision + 1;
        w->fails = 0;
        w->c->good = w->member;
        if (w->cbs.on_synced) {
            w->cbs.on_synced(m.revision, w->ud);
            if (w->canceled || w->c->closing)
                return;
        }
    }
    cJSON_ArrayForEach(ev, m.events)
    {
        if (!watch_event(w, ev))
            return;
    }
}

/* Parses what the stream delivered since the last call. */
static void watch_process(tide_etcd_watch_t *w)
{
    size_t used;
    cJSON *j;

    while (!w->canceled && !w->c->closing && !w->restart && tide__etcd_split_next(&w->split, &used, &j) > 0) {
        if (!j) {
            w->restart = true;
            w->restart_delay = 1;
            break;
        }
        watch_message(w, j);
        cJSON_Delete(j);
    }
    if (w->restart && !w->canceled && !w->c->closing)
        watch_reconnect(w, w->restart_delay != 0);
}

static void watch_closed(uv_handle_t *h)
{
    tide_etcd_watch_t *w = h->data;
    tide_etcd_t *c = w->c;

    tide_list_remove(&w->node);
    free(w->key);
    free(w->req);
    tide__etcd_split_free(&w->split);
    free(w);
    if (--c->handles == 0 && c->torn_down)
        free(c);
}

static void watch_shutdown_closed(uv_handle_t *h)
{
    tide_etcd_watch_t *w = h->data;

    if (w->cbs.on_end)
        w->cbs.on_end(-ESHUTDOWN, "etcd client closed", w->ud);
    watch_closed(h);
}

int tide_etcd_watch(tide_etcd_t *c, const char *key, size_t key_len, bool prefix, int64_t start_rev,
                    const tide_etcd_watch_cbs_t *cbs, void *ud, tide_etcd_watch_t **out)
{
    tide_etcd_watch_t *w;

    if (!c || !key || !cbs || !cbs->on_event || !out || start_rev < 0)
        return -EINVAL;
    if (c->closing)
        return -ESHUTDOWN;
    w = tide_xcalloc(1, sizeof(*w));
    w->x.is_watch = true;
    w->c = c;
    w->key = tide_xmalloc(key_len + 1);
    memcpy(w->key, key, key_len);
    w->key[key_len] = 0;
    w->key_len = key_len;
    w->prefix = prefix;
    w->next_rev = start_rev;
    w->cbs = *cbs;
    w->ud = ud;
    w->member = c->good;
    ensure_timer(c);
    tide_buf_init(&w->split.buf);
    uv_timer_init(c->loop, &w->timer);
    w->timer.data = w;
    c->handles++;
    tide_list_push_back(&c->watches, &w->node);
    uv_timer_start(&w->timer, on_watch_timer, 0, 0);
    *out = w;
    return 0;
}

void tide_etcd_watch_cancel(tide_etcd_watch_t *w)
{
    if (!w || w->canceled)
        return;
    w->canceled = true;
    if (w->c->torn_down)
        return;
    watch_detach_easy(w);
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, watch_closed);
}

/* --- dispatch: after curl ran, outside its callbacks --- */

static void dispatch(tide_etcd_t *c)
{
    tide_list_t *pos;
    CURLMsg *msg;
    int left;

    /* Watch data first: a stream's last events come before its end. New watches go to the back. */
    tide_list_for_each(pos, &c->watches)
    {
        tide_etcd_watch_t *w = tide_list_entry(pos, tide_etcd_watch_t, node);

        if (c->closing)
            return;
        if (!w->canceled && w->easy && w->split.buf.len > w->split.scan)
            watch_process(w);
    }
    while (!c->closing && (msg = curl_multi_info_read(c->multi, &left)) != NULL) {
        xfer_t *x = NULL;
        CURL *easy = msg->easy_handle;
        CURLcode result = msg->data.result;

        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
        if (!x)
            continue;
        if (x->is_watch) {
            tide_etcd_watch_t *w = (tide_etcd_watch_t *)x;

            if (w->canceled || w->easy != easy)
                continue;
            watch_process(w); /* msg is invalid once a reconnect removed the handle */
            if (!w->canceled && !c->closing && w->easy == easy)
                watch_reconnect(w, true); /* the stream ended: resume elsewhere */
        } else {
            call_done((call_t *)x, result);
        }
    }
}

/* --- the client --- */

static int parse_endpoints(tide_etcd_t *c, const char *endpoints, tide_error_t *err)
{
    const char *p = endpoints;

    if (!*p) {
        tide_errprintf(err, "etcd endpoints: empty list (expected HOST:PORT[,HOST:PORT...])");
        return -EINVAL;
    }
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char *hp = tide_xstrndup(p, len), *colon = strrchr(hp, ':'), *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;

        if (len == 0 || !colon || colon == hp || !end || *end || end == colon + 1 || port < 1 ||
            port > 65535 || strpbrk(hp, "/@ ?#")) {
            tide_errprintf(err, "etcd endpoint \"%s\" is not HOST:PORT", hp);
            free(hp);
            return -EINVAL;
        }
        c->members = tide_xrealloc(c->members, (size_t)(c->n + 1) * sizeof(*c->members));
        c->members[c->n].hostport = hp;
        c->members[c->n].url = tide_xasprintf("http://%s", hp);
        c->n++;
        p += len;
        if (*p == ',')
            p++;
        if (comma && !*p) {
            tide_errprintf(err, "etcd endpoints \"%s\": empty entry after ','", endpoints);
            return -EINVAL;
        }
    }
    return 0;
}

static void members_free(tide_etcd_t *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->members[i].hostport);
        free(c->members[i].url);
    }
    free(c->members);
    c->members = NULL;
}

int tide_etcd_new(struct uv_loop_s *loop, const char *endpoints, tide_etcd_t **out,
                  tide_error_t *err)
{
    static bool curl_ready;
    tide_etcd_t *c;
    int rc;

    *out = NULL;
    if (!loop || !endpoints) {
        tide_errprintf(err, "etcd: no loop or endpoints");
        return -EINVAL;
    }
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            tide_errprintf(err, "etcd: libcurl cannot start");
            return -EIO;
        }
        curl_ready = true;
    }
    c = tide_xcalloc(1, sizeof(*c));
    if ((rc = parse_endpoints(c, endpoints, err)) < 0) {
        members_free(c);
        free(c);
        return rc;
    }
    c->multi = curl_multi_init();
    if (!c->multi) {
        members_free(c);
        free(c);
        tide_errprintf(err, "etcd: libcurl cannot start");
        return -EIO;
    }
    c->loop = loop;
    c->endpoints = tide_xstrdup(endpoints);
    tide_list_init(&c->calls);
    tide_list_init(&c->watches);
    tide_list_init(&c->socks);
    c->headers = curl_slist_append(NULL, "Content-Type: application/json");
    c->headers =
        curl_slist_append(c->headers, "Expect:"); /* no 100-continue round trip for big bodies */
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
    *out = c;
    return 0;
}

int tide_etcd_parse_location(const char *location, char **endpoints, char **prefix, tide_error_t *err)
{
    const char *hosts, *slash;

    *endpoints = *prefix = NULL;
    if (strncmp(location, "//", 2) != 0) {
        tide_errprintf(err,
                       "store URL \"etcd:%s\": expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX]",
                       location);
        return -EINVAL;
    }
    hosts = location + 2;
    slash = strchr(hosts, '/');
    *endpoints = slash ? tide_xstrndup(hosts, (size_t)(slash - hosts)) : tide_xstrdup(hosts);
    if (!slash || slash[1] == '\0')
        *prefix = tide_xstrdup(slash ? "/" : TIDE_ETCD_DEFAULT_PREFIX);
    else if (slash[strlen(slash) - 1] == '/')
        *prefix = tide_xstrdup(slash);
    else
        *prefix = tide_xasprintf("%s/", slash);
    if (**endpoints == '\0') {
        tide_errprintf(err, "store URL \"etcd:%s\": no HOST:PORT", location);
        free(*endpoints);
        free(*prefix);
        *endpoints = *prefix = NULL;
        return -EINVAL;
    }
    return 0;
}

const char *tide_etcd_endpoints(const tide_etcd_t *c)
{
    return c->endpoints;
}

static void call_shutdown_closed(uv_handle_t *h)
{
    call_t *call = h->data;

    call->cb(-ESHUTDOWN, NULL, "etcd client closed", call->ud);
    call_freed(h);
}

/* Releases curl and closes every handle; completions of what was pending fire from the close
 * callbacks. */
static void teardown(tide_etcd_t *c)
{
    tide_list_t *pos, *tmp;

    c->torn_down = true;
    tide_list_for_each_safe(pos, tmp, &c->calls)
    {
        call_t *call = tide_list_entry(pos, call_t, node);

        call_detach_easy(call);
        tide_list_remove(&call->node);
        uv_timer_stop(&call->timer);
        uv_close((uv_handle_t *)&call->timer, call_shutdown_closed);
    }
    tide_list_for_each(pos, &c->watches)
    {
        tide_etcd_watch_t *w = tide_list_entry(pos, tide_etcd_watch_t, node);

        if (w->canceled)
            continue; /* already closing */
        watch_detach_easy(w);
        w->canceled = true;
        uv_timer_stop(&w->timer);
        uv_close((uv_handle_t *)&w->timer, watch_shutdown_closed);
    }
    /* Stop watching curl's sockets before curl closes them. */
    while (!tide_list_empty(&c->socks))
        sock_close(tide_list_entry(tide_list_first(&c->socks), sockctx_t, node));
    curl_multi_cleanup(c->multi);
    c->multi = NULL;
    curl_slist_free_all(c->headers);
    c->headers = NULL;
    members_free(c);
    free(c->endpoints);
    c->endpoints = NULL;
    if (c->timer_ready) {
        uv_timer_stop(&c->timer);
        uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    }
    if (c->handles == 0)
        free(c);
}

void tide_etcd_free(tide_etcd_t *c)
{
    if (!c || c->closing)
        return;
    c->closing = true;
    if (c->depth == 0)
        teardown(c);
}

/* --- probe: blocking, its own multi handle --- */

typedef struct probe {
    CURL *easy;
    tide_buf_t body;
    char errbuf[CURL_ERROR_SIZE];
    bool refused;
    char why[ERR_TEXT];
} probe_t;

static size_t probe_write(char *data, size_t size, size_t nmemb, void *ud)
{
    probe_t *p = ud;
    size_t n = size * nmemb;

    if (p->body.len + n > 65536)
        return 0;
    tide_buf_append(&p->body, data, n);
    return n;
}

int tide_etcd_probe(tide_etcd_t *c, int64_t timeout_ms, tide_error_t *err)
{
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1);
    probe_t *pr = tide_xcalloc((size_t)c->n, sizeof(*pr));
    CURLM *m = curl_multi_init();
    bool ok = false, all_refused = false;
    tide_buf_t t = TIDE_BUF_INIT;
    int rc;

    for (int i = 0; i < c->n; i++)
        tide_buf_init(&pr[i].body);
    while (!ok && m) {
        uint64_t now = now_ms();
        int64_t remaining = deadline > now ? (int64_t)(deadline - now) : 0;
        int running = 0, active = 0;
        CURLMsg *msg;
        int left;

        if (remaining <= 0)
            break;
        for (int i = 0; i < c->n; i++) {
            char *url;

            if (pr[i].refused)
                continue;
            url = tide_xasprintf("%s/health", c->members[i].url);
            tide_buf_reset(&pr[i].body);
            pr[i].easy = easy_new(c, url, NULL, pr[i].errbuf, &pr[i]);
            free(url);
            if (!pr[i].easy)
                continue;
            curl_easy_setopt(pr[i].easy, CURLOPT_WRITEFUNCTION, probe_write);
            curl_easy_setopt(pr[i].easy, CURLOPT_WRITEDATA, &pr[i]);
            curl_easy_setopt(pr[i].easy, CURLOPT_TIMEOUT_MS, (long)remaining);
            curl_multi_add_handle(m, pr[i].easy);
            active++;
        }
        if (active == 0)
            break;
        do {
            curl_multi_perform(m, &running);
            while ((msg = curl_multi_info_read(m, &left)) != NULL) {
                probe_t *p = NULL;
                long code = 0;
                bool sent;

                if (msg->msg != CURLMSG_DONE)
                    continue;
                curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&p);
                curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
                if (msg->data.result != CURLE_OK) {
                    int st = transport_error(p->easy, msg->data.result, p->errbuf, timeout_ms,
                                             p->why, sizeof(p->why), &sent);
                    p->refused = st == -ECONNREFUSED;
                    if (st == -ETIMEDOUT)
                        snprintf(p->why, sizeof(p->why), "no answer within %" PRId64 " ms",
                                 timeout_ms);
                } else if (code == 200 && strstr(tide_buf_cstr(&p->body), "\"health\":\"true\"")) {
                    ok = true;
                } else {
                    snprintf(p->why, sizeof(p->why), "unhealthy (HTTP %ld: %.80s)", code,
                             tide_buf_cstr(&p->body));
                }
                curl_multi_remove_handle(m, p->easy);
                curl_easy_cleanup(p->easy);
                p->easy = NULL;
            }
            if (running && !ok)
                curl_multi_poll(m, NULL, 0, 100, NULL);
        } while (running && !ok);
        all_refused = true;
        for (int i = 0; i < c->n; i++)
            all_refused = all_refused && pr[i].refused;
        if (!ok && !all_refused) { /* unhealthy members: ask again shortly */
            now = now_ms();
            if (now + 100 < deadline)
                curl_multi_poll(m, NULL, 0, 100, NULL);
            else
                break;
        }
        if (all_refused)
            break;
    }
    for (int i = 0; i < c->n; i++) {
        if (pr[i].easy) {
            curl_multi_remove_handle(m, pr[i].easy);
            curl_easy_cleanup(pr[i].easy);
        }
        if (!ok)
            tide_buf_printf(&t, "%setcd at %s: %s", i ? "; " : "", c->members[i].hostport,
                            pr[i].why[0] ? pr[i].why : "no answer in time");
        tide_buf_free(&pr[i].body);
    }
    if (m)
        curl_multi_cleanup(m);
    free(pr);
    if (ok)
        rc = 0;
    else {
        rc = all_refused ? -ECONNREFUSED : -ETIMEDOUT;
        tide_errprintf(err, "%s", tide_buf_cstr(&t));
    }
    tide_buf_free(&t);
    return rc;
}

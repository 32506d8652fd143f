/* In-memory tests of one server connection: HTTP/2 frames built by a real nghttp2 client session
 * (no sockets, fake clock) and HTTP/1 requests, through the same sniffing entry point the shell
 * uses. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "conn_harness.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc_percent.h"
#include "h2_server_conn.h"

/* ---- allocation counting for the hot-path test (the executable links with --wrap=malloc etc.)
 * ---- */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t s);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t s);
void *__wrap_realloc(void *p, size_t n);
static bool counting;
static int allocs;
void *__wrap_malloc(size_t n)
{
    if (counting)
        allocs++;
    return __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t s)
{
    if (counting)
        allocs++;
    return __real_calloc(n, s);
}
void *__wrap_realloc(void *p, size_t n)
{
    if (counting)
        allocs++;
    return __real_realloc(p, n);
}

/* ---- the method table under test ---- */

static int n_on_message, n_on_close, n_half_close;
static tide_rpc_call_t *held_call;
static char seen_worker[64];
static tide_rpc_identity_t seen_identity;

static void echo_unary(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    const char *w = tide_rpc_call_header(call, "x-tide-worker");
    n_on_message++;
    snprintf(seen_worker, sizeof(seen_worker), "%s", w ? w : "");
    seen_identity = *tide_rpc_call_identity(call);
    tide_rpc_call_set_note(call, "echo");
    assert_int_equal(tide_rpc_call_send(call, data, len), 0);
    assert_int_equal(tide_rpc_call_send(call, data, len), -EINVAL); /* unary: one response */
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    assert_int_equal(tide_rpc_call_send(call, data, len), -EPIPE);
    assert_true(tide_rpc_call_finished(call));
}

static void echo_bidi(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    n_on_message++;
    assert_int_equal(tide_rpc_call_send(call, data, len), 0);
}

static void bidi_half_close(tide_rpc_call_t *call)
{
    n_half_close++;
    tide_rpc_call_finish(call, TIDE_GRPC_OK, "done");
}

static void server_stream(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    int i, n = len ? data[0] : 0;
    n_on_message++;
    for (i = 0; i < n; i++) {
        uint8_t b = (uint8_t)i;
        assert_int_equal(tide_rpc_call_send(call, &b, 1), 0);
    }
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void fail_unary(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    (void)data;
    (void)len;
    n_on_message++;
    tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "bad field 'x': 100% wrong\n\xc3\xa9");
}

static void hold_unary(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    (void)data;
    (void)len;
    n_on_message++;
    held_call = call;
}

/* Sends 8 KiB messages until the transport pushes back. */
static int flood_sent, flood_rc;
static tide_rpc_call_t *flood_call;

static void flood(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    static uint8_t chunk[8192];
    (void)data;
    (void)len;
    n_on_message++;
    flood_call = call;
    flood_sent = 0;
    while ((flood_rc = tide_rpc_call_send(call, chunk, sizeof(chunk))) == 0)
        flood_sent++;
}

/* Answers with a packed HealthCheckResponse straight from the protobuf struct. */
static void health_pb(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Grpc__Health__V1__HealthCheckRequest *req =
        grpc__health__v1__health_check_request__unpack(NULL, len, data);
    Grpc__Health__V1__HealthCheckResponse rep = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    n_on_message++;
    assert_non_null(req);
    rep.status = strcmp(req->service, "") == 0
                     ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                     : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
    assert_int_equal(tide_rpc_call_send_pb(call, &rep.base), 0);
    assert_int_equal(tide_rpc_call_send_pb(call, &rep.base), -EINVAL);
    assert_ptr_equal(tide_rpc_call_method(call)->on_message, health_pb);
    tide_rpc_call_set_data(call, req);
    assert_ptr_equal(tide_rpc_call_data(call), req);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
}

static void count_close(tide_rpc_call_t *call)
{
    n_on_close++;
    if (call == flood_call)
        flood_call = NULL;
    if (call == held_call)
        held_call = NULL;
}

enum {
    M_UNARY,
    M_BIDI,
    M_SERVER,
    M_FAIL,
    M_HOLD,
    M_HEALTH,
    M_CLIENT_STREAM,
    M_FLOOD,
    M_PB,
    N_METHODS
};

static const tide_rpc_method_t methods[N_METHODS] = {
    [M_UNARY] = {"/t.S/Unary", TIDE_RPC_UNARY, false, echo_unary, NULL, count_close},
    [M_BIDI] = {"/t.S/Bidi", TIDE_RPC_BIDI_STREAMING, false, echo_bidi, bidi_half_close,
                count_close},
    [M_SERVER] = {"/t.S/Server", TIDE_RPC_SERVER_STREAMING, false, server_stream, NULL,
                  count_close},
    [M_FAIL] = {"/t.S/Fail", TIDE_RPC_UNARY, false, fail_unary, NULL, count_close},
    [M_HOLD] = {"/t.S/Hold", TIDE_RPC_UNARY, false, hold_unary, NULL, count_close},
    [M_HEALTH] = {"/t.S/Health", TIDE_RPC_UNARY, true, echo_unary, NULL, count_close},
    [M_CLIENT_STREAM] = {"/t.S/Upload", TIDE_RPC_CLIENT_STREAMING, false, echo_bidi, NULL,
                         count_close},
    [M_FLOOD] = {"/t.S/Flood", TIDE_RPC_BIDI_STREAMING, false, flood, bidi_half_close, count_close},
    [M_PB] = {"/grpc.health.v1.Health/Check", TIDE_RPC_UNARY, true, health_pb, NULL, count_close},
};

static int http_handler(const char *method, const char *path, tide_buf_t *body,
                        const char **content_type, void *ud)
{
    (void)method;
    (void)ud;
    if (strcmp(path, "/healthz") == 0) {
        tide_buf_append_str(body, "ok\n");
        return 200;
    }
    if (strcmp(path, "/big") == 0) {
        uint8_t *p = tide_buf_reserve(body, 600 << 10);
        memset(p, 'b', 600 << 10);
        body->len += 600 << 10;
        *content_type = "application/octet-stream";
        return 200;
    }
    return 404;
}

/* ---- harness ---- */

static int64_t fake_now(void *ud)
{
    return ((harness_t *)ud)->now;
}

static void notify(void *shell)
{
    ((harness_t *)shell)->notified++;
}

static h_stream_t *stream_of(harness_t *h, int32_t id)
{
    int i;
    for (i = 0; i < h->n_streams; i++)
        if (h->streams[i].id == id)
            return &h->streams[i];
    return NULL;
}

static int c_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                       const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    h_stream_t *st = stream_of(ud, f->hd.stream_id);
    (void)s;
    (void)flags;
    if (!st)
        return 0;
    if (nl == 7 && !memcmp(name, ":status", 7))
        st->http_status = atoi((const char *)value);
    else if (nl == 11 && !memcmp(name, "grpc-status", 11))
        st->grpc_status = atoi((const char *)value);
    else if (nl == 12 && !memcmp(name, "grpc-message", 12))
        snprintf(st->grpc_message, sizeof(st->grpc_message), "%.*s", (int)vl, value);
    return 0;
}

static int c_on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *ud)
{
    harness_t *h = ud;
    h_stream_t *st = stream_of(h, f->hd.stream_id);
    (void)s;
    if (f->hd.type == NGHTTP2_GOAWAY)
        h->goaway = true;
    if (f->hd.type == NGHTTP2_PING && !(f->hd.flags & NGHTTP2_FLAG_ACK))
        h->pings_seen++;
    if (!st)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS)
        st->header_frames++;
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        st->end_stream = true;
    return 0;
}

static int c_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                     void *ud)
{
    h_stream_t *st = stream_of(ud, id);
    size_t off = 0;
    (void)s;
    (void)flags;
    while (st && off < len) {
        const uint8_t *msg;
        size_t used, mlen;
        int rc = tide_grpc_decoder_feed(&st->dec, data + off, len - off, &used, &msg, &mlen);
        off += used;
        assert_true(rc >= 0);
        if (rc == TIDE_GRPC_DEC_MESSAGE) {
            st->n_msgs++;
            st->last_len = mlen;
            st->last_first = mlen ? msg[0] : 0;
            if (st->msgs.len < 4096) {
                tide_buf_printf(&st->msgs, "%zu:", mlen);
                tide_buf_append(&st->msgs, msg, mlen);
                tide_buf_append(&st->msgs, "|", 1);
            }
        }
    }
    return 0;
}

static int c_on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
    h_stream_t *st = stream_of(ud, id);
    (void)s;
    if (st) {
        st->closed = true;
        st->close_code = code;
    }
    return 0;
}

static ssize_t c_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                      nghttp2_data_source *src, void *ud)
{
    h_stream_t *st = src->ptr;
    size_t n = st->req.len - st->req_off;
    (void)s;
    (void)id;
    (void)ud;
    if (n > length)
        n = length;
    if (n)
        memcpy(buf, st->req.data + st->req_off, n);
    st->req_off += n;
    if (st->req_off == st->req.len && st->req_eof)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    else if (n == 0)
        return NGHTTP2_ERR_DEFERRED;
    return (ssize_t)n;
}

static void h_init_cfg(harness_t *h, const tide_rpc_server_config_t *cfg)
{
    nghttp2_session_callbacks *cbs;

    memset(h, 0, sizeof(*h));
    h->now = 1000;
    tide__srv_ctx_init(&h->ctx, cfg, fake_now, NULL, h);
    h->conn = tide__srv_conn_new(&h->ctx, "127.0.0.1:1", notify, h);
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(cbs, c_on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, c_on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, c_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, c_on_close);
    nghttp2_session_client_new(&h->client, cbs, h);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(h->client, NGHTTP2_FLAG_NONE, NULL, 0);
    n_on_message = n_on_close = n_half_close = 0;
    held_call = NULL;
}

static void h_init(harness_t *h, const char *token, size_t max_message)
{
    tide_rpc_server_config_t cfg = {
        .methods = methods,
        .n_methods = N_METHODS,
        .token = token,
        .max_message = max_message,
        .http_handler = http_handler,
    };
    h_init_cfg(h, &cfg);
}

static void h_fini(harness_t *h)
{
    int i;
    nghttp2_session_del(h->client);
    tide__srv_conn_free(h->conn);
    tide__srv_ctx_fini(&h->ctx);
    for (i = 0; i < h->n_streams; i++) {
        tide_grpc_decoder_free(&h->streams[i].dec);
        tide_buf_free(&h->streams[i].msgs);
        tide_buf_free(&h->streams[i].req);
    }
}

/* Server output into the client; returns bytes moved. */
static size_t h_server_to_client(harness_t *h)
{
    tide_buf_t out = TIDE_BUF_INIT;
    size_t n;

    tide__srv_conn_pull(h->conn);
    n = tide__srv_conn_take_output(h->conn, &out);
    if (n)
        assert_int_equal(nghttp2_session_mem_recv(h->client, out.data, out.len), (ssize_t)n);
    tide_buf_free(&out);
    return n;
}

/* Moves bytes both ways until neither side has anything to say. */
static void pump(harness_t *h)
{
    for (int round = 0; round < 100000; round++) {
        size_t moved = 0;
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(h->client, &p)) > 0) {
            if (tide__srv_conn_feed(h->conn, p, (size_t)n) < 0)
                h->feed_failed = true;
            moved += (size_t)n;
        }
        moved += h_server_to_client(h);
        if (!moved)
            return;
    }
    fail_msg("pump did not settle");
}

static void h_advance(harness_t *h, int64_t ms)
{
    h->now += ms;
    tide__srv_ctx_run_timers(&h->ctx, h->now);
}

/* Opens a gRPC stream. extra: NULL-terminated name/value pairs. */
static h_stream_t *h_open(harness_t *h, const char *path, const char *token, const char **extra,
                          const uint8_t *body, size_t len, bool eof)
{
    h_stream_t *st = &h->streams[h->n_streams++];
    nghttp2_nv nva[16];
    size_t n = 0;
    char auth[128];
    nghttp2_data_provider prd;

#define ADD(nm, v)                                                                                 \
    nva[n++] = (nghttp2_nv){(uint8_t *)(nm), (uint8_t *)(v), strlen(nm), strlen(v), 0}
    ADD(":method", "POST");
    ADD(":scheme", "http");
    ADD(":path", path);
    ADD(":authority", "test");
    ADD("te", "trailers");
    if (!(extra && extra[0] && !strcmp(extra[0], "content-type")))
        ADD("content-type", "application/grpc");
    if (token) {
        snprintf(auth, sizeof(auth), "Bearer %s", token);
        ADD("authorization", auth);
    }
    while (extra && extra[0]) {
        ADD(extra[0], extra[1]);
        extra += 2;
    }
#undef ADD
    memset(st, 0, sizeof(*st));
    st->grpc_status = -1;
    tide_grpc_decoder_init(&st->dec, 64 << 20);
    tide_buf_append(&st->req, body, len);
    st->req_eof = eof;
    prd.source.ptr = st;
    prd.read_callback = c_read;
    st->id = nghttp2_submit_request(h->client, NULL, nva, n, &prd, st);
    assert_true(st->id > 0);
    return st;
}

static h_stream_t *h_unary(harness_t *h, const char *path, const char *token, const char *msg)
{
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;
    tide_grpc_frame_append(&b, msg, (uint32_t)strlen(msg));
    st = h_open(h, path, token, NULL, b.data, b.len, true);
    tide_buf_free(&b);
    return st;
}

static void h_send(harness_t *h, h_stream_t *st, const void *data, size_t len, bool eof)
{
    tide_buf_append(&st->req, data, len);
    st->req_eof = eof;
    nghttp2_session_resume_data(h->client, st->id);
}

static uint64_t stat(harness_t *h, int idx, tide_grpc_code_t code)
{
    return h->ctx.stats[idx < 0 ? N_METHODS : idx][code];
}

/* ---- HTTP/2 tests ---- */

static void h2_unary_ok(void **state)
{
    harness_t h;
    const char *extra[] = {"x-tide-worker", "node1/gpu0", NULL};
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;

    (void)state;
    h_init(&h, "sekret", 0);
    tide_grpc_frame_append(&b, "hello", 5);
    st = h_open(&h, "/t.S/Unary", "sekret", extra, b.data, b.len, true);
    pump(&h);
    assert_int_equal(st->http_status, 200);
    assert_int_equal(st->grpc_status, 0);
    assert_int_equal(st->header_frames, 2); /* response headers + trailers */
    assert_string_equal(tide_buf_cstr(&st->msgs), "5:hello|");
    assert_true(st->closed);
    assert_int_equal(st->close_code, NGHTTP2_NO_ERROR);
    assert_string_equal(seen_worker, "node1/gpu0");
    assert_int_equal(n_on_message, 1);
    assert_int_equal(n_on_close, 1);
    assert_int_equal(stat(&h, M_UNARY, TIDE_GRPC_OK), 1);
    assert_int_equal(h.conn->kind, TIDE__CONN_H2);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_rejections(void **state)
{
    harness_t h;
    h_stream_t *unknown, *notoken, *badtoken, *health, *fail, *longtok;
    tide_buf_t dec = TIDE_BUF_INIT;

    (void)state;
    h_init(&h, "sekret", 0);
    unknown = h_unary(&h, "/grpc.health.v1.Health/Watch", "sekret", "x");
    notoken = h_unary(&h, "/t.S/Unary", NULL, "x");
    badtoken = h_unary(&h, "/t.S/Unary", "sekreT", "x");
    longtok = h_unary(&h, "/t.S/Unary", "sekret2", "x");
    health = h_unary(&h, "/t.S/Health", NULL, "ping");
    fail = h_unary(&h, "/t.S/Fail", "sekret", "x");
    pump(&h);
    /* Trailers-Only: a single HEADERS frame with :status 200 and the status. */
    assert_int_equal(unknown->header_frames, 1);
    assert_int_equal(unknown->http_status, 200);
    assert_int_equal(unknown->grpc_status, TIDE_GRPC_UNIMPLEMENTED);
    assert_non_null(strstr(unknown->grpc_message, "Health/Watch"));
    assert_int_equal(notoken->grpc_status, TIDE_GRPC_UNAUTHENTICATED);
    assert_int_equal(badtoken->grpc_status, TIDE_GRPC_UNAUTHENTICATED);
    assert_int_equal(longtok->grpc_status, TIDE_GRPC_UNAUTHENTICATED);
    assert_int_equal(notoken->header_frames, 1);
    assert_int_equal(health->grpc_status, TIDE_GRPC_OK);
    assert_string_equal(tide_buf_cstr(&health->msgs), "4:ping|");
    assert_int_equal(fail->grpc_status, TIDE_GRPC_INVALID_ARGUMENT);
    assert_int_equal(fail->header_frames, 1);
    tide_grpc_percent_decode(&dec, fail->grpc_message, strlen(fail->grpc_message));
    assert_string_equal(tide_buf_cstr(&dec), "bad field 'x': 100% wrong\n\xc3\xa9");
    assert_null(strchr(fail->grpc_message, '\n'));
    /* Handlers ran only for health and fail. */
    assert_int_equal(n_on_message, 2);
    assert_int_equal(n_on_close, 2);
    assert_int_equal(stat(&h, -1, TIDE_GRPC_UNIMPLEMENTED), 1);
    assert_int_equal(stat(&h, M_UNARY, TIDE_GRPC_UNAUTHENTICATED), 3);
    assert_int_equal(stat(&h, M_FAIL, TIDE_GRPC_INVALID_ARGUMENT), 1);
    tide_buf_free(&dec);
    h_fini(&h);
}

/* The authenticate hook decides instead of the token: its identity reaches the handler, its refusal
 * (code and message) reaches the client without the handler running; no_auth methods skip it. */
static int n_auth_calls;
static tide_grpc_code_t test_auth(void *ud, const char *authorization, const char *path,
                                  tide_rpc_identity_t *id, char *msg, size_t msg_size)
{
    (void)ud;
    n_auth_calls++;
    assert_string_equal(path, "/t.S/Unary");
    if (authorization && !strcmp(authorization, "Bearer alice-tok")) {
        snprintf(id->name, sizeof(id->name), "alice");
        id->role = 2;
        return TIDE_GRPC_OK;
    }
    snprintf(msg, msg_size, "token of %s expired", authorization ? "someone" : "nobody");
    return authorization ? TIDE_GRPC_PERMISSION_DENIED : TIDE_GRPC_UNAUTHENTICATED;
}

static int n_done;
static char done_log[512];
static void test_call_done(const tide_rpc_call_t *call, tide_grpc_code_t code, const char *message)
{
    size_t n = strlen(done_log);
    n_done++;
    snprintf(done_log + n, sizeof(done_log) - n, "%s/%s/%d/%s|", tide_rpc_call_identity(call)->name,
             tide_rpc_call_note(call), (int)code, message);
}

static void h2_auth_hook(void **state)
{
    harness_t h;
    h_stream_t *ok, *expired, *none, *health;
    tide_rpc_server_config_t cfg = {
        .methods = methods,
        .n_methods = N_METHODS,
        .token = "ignored-when-a-hook-is-set",
        .authenticate = test_auth,
        .on_call_done = test_call_done,
        .http_handler = http_handler,
    };

    (void)state;
    n_auth_calls = n_done = 0;
    done_log[0] = '\0';
    memset(&seen_identity, 0, sizeof(seen_identity));
    h_init_cfg(&h, &cfg);
    ok = h_unary(&h, "/t.S/Unary", "alice-tok", "x");
    pump(&h);
    assert_int_equal(ok->grpc_status, TIDE_GRPC_OK);
    assert_string_equal(seen_identity.name, "alice");
    assert_int_equal(seen_identity.role, 2);
    expired = h_unary(&h, "/t.S/Unary", "old", "x");
    none = h_unary(&h, "/t.S/Unary", NULL, "x");
    health = h_unary(&h, "/t.S/Health", NULL, "ping");
    pump(&h);
    assert_int_equal(expired->grpc_status, TIDE_GRPC_PERMISSION_DENIED);
    assert_string_equal(expired->grpc_message, "token of someone expired");
    assert_int_equal(none->grpc_status, TIDE_GRPC_UNAUTHENTICATED);
    assert_int_equal(health->grpc_status, TIDE_GRPC_OK);
    assert_int_equal(n_auth_calls, 3); /* not for the no_auth method */
    assert_int_equal(n_on_message, 2);  /* ok and health */
    /* on_call_done: once per call, with who, the note, the status and its decoded message */
    assert_int_equal(n_done, 4);
    assert_non_null(strstr(done_log, "alice/echo/0/|"));
    assert_non_null(strstr(done_log, "//7/token of someone expired|"));
    assert_non_null(strstr(done_log, "//16/token of nobody expired|"));
    h_fini(&h);
}

static void h2_http_level_rejections(void **state)
{
    harness_t h;
    const char *ct[] = {"content-type", "application/json", NULL};
    const char *ok_ct[] = {"content-type", "application/grpc+proto", NULL};
    const char *bad_timeout[] = {"grpc-timeout", "forever", NULL};
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *json, *proto, *to;

    (void)state;
    h_init(&h, NULL, 0);
    tide_grpc_frame_append(&b, "m", 1);
    json = h_open(&h, "/t.S/Unary", NULL, ct, b.data, b.len, true);
    proto = h_open(&h, "/t.S/Unary", NULL, ok_ct, b.data, b.len, true);
    to = h_open(&h, "/t.S/Unary", NULL, bad_timeout, b.data, b.len, true);
    pump(&h);
    assert_int_equal(json->http_status, 415);
    assert_int_equal(proto->http_status, 200);
    assert_int_equal(proto->grpc_status, 0);
    assert_int_equal(to->grpc_status, TIDE_GRPC_INTERNAL);
    assert_int_equal(n_on_message, 1);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_message_errors(void **state)
{
    harness_t h;
    tide_buf_t b = TIDE_BUF_INIT;
    uint8_t big[2000];
    h_stream_t *comp, *over, *zero, *two, *trunc;

    (void)state;
    h_init(&h, NULL, 1024);
    /* Compressed flag. */
    tide_grpc_frame_append(&b, "zz", 2);
    b.data[0] = 1;
    comp = h_open(&h, "/t.S/Unary", NULL, NULL, b.data, b.len, true);
    /* Over max_message (the whole message is sent: the client must be stopped). */
    b.len = 0;
    memset(big, 'x', sizeof(big));
    tide_grpc_frame_append(&b, big, sizeof(big));
    over = h_open(&h, "/t.S/Bidi", NULL, NULL, b.data, b.len, false);
    /* Unary without a message, unary with two, and a stream ending inside a message. */
    zero = h_open(&h, "/t.S/Unary", NULL, NULL, NULL, 0, true);
    b.len = 0;
    tide_grpc_frame_append(&b, "a", 1);
    tide_grpc_frame_append(&b, "b", 1);
    two = h_open(&h, "/t.S/Unary", NULL, NULL, b.data, b.len, true);
    trunc = h_open(&h, "/t.S/Bidi", NULL, NULL, b.data, 3, true);
    pump(&h);
    assert_int_equal(comp->grpc_status, TIDE_GRPC_UNIMPLEMENTED);
    assert_int_equal(over->grpc_status, TIDE_GRPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(over->grpc_message, "2000"));
    assert_true(over->closed); /* RST_STREAM(NO_ERROR) stopped the rest of the upload */
    assert_int_equal(zero->grpc_status, TIDE_GRPC_INVALID_ARGUMENT);
    assert_int_equal(two->grpc_status, TIDE_GRPC_INTERNAL);
    assert_non_null(strstr(two->grpc_message, "more than one request"));
    assert_int_equal(trunc->grpc_status, TIDE_GRPC_INTERNAL);
    assert_int_equal(n_on_message, 0);
    assert_int_equal(n_on_close, 0);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_server_streaming(void **state)
{
    harness_t h;
    uint8_t n = 200;
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;

    (void)state;
    h_init(&h, NULL, 0);
    tide_grpc_frame_append(&b, &n, 1);
    st = h_open(&h, "/t.S/Server", NULL, NULL, b.data, b.len, true);
    pump(&h);
    assert_int_equal(st->grpc_status, 0);
    assert_int_equal(st->n_msgs, 200);
    assert_int_equal(n_on_message, 1);
    assert_int_equal(n_on_close, 1);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_bidi_many_messages(void **state)
{
    harness_t h;
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;
    int i;

    (void)state;
    h_init(&h, NULL, 0);
    st = h_open(&h, "/t.S/Bidi", NULL, NULL, NULL, 0, false);
    for (i = 0; i < 3000; i++) {
        char m[32];
        int len = snprintf(m, sizeof(m), "heartbeat-%d", i);
        tide_grpc_frame_append(&b, m, (uint32_t)len);
    }
    /* Sent in odd-sized pieces so messages straddle DATA frames. */
    for (size_t off = 0; off < b.len; off += 777) {
        size_t n = b.len - off < 777 ? b.len - off : 777;
        h_send(&h, st, b.data + off, n, off + n == b.len);
        pump(&h);
    }
    assert_int_equal(st->n_msgs, 3000);
    assert_int_equal(n_on_message, 3000);
    assert_int_equal(n_half_close, 1);
    assert_int_equal(st->grpc_status, 0);
    assert_string_equal(st->grpc_message, "done");
    assert_int_equal(n_on_close, 1);
    assert_int_equal(stat(&h, M_BIDI, TIDE_GRPC_OK), 1);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_many_streams(void **state)
{
    harness_t h;
    int i;

    (void)state;
    h_init(&h, NULL, 0);
    for (i = 0; i < 400; i++) {
        char m[16];
        snprintf(m, sizeof(m), "m%d", i);
        h_unary(&h, "/t.S/Unary", NULL, m);
    }
    pump(&h);
    for (i = 0; i < 400; i++) {
        char m[16], want[48];
        snprintf(m, sizeof(m), "m%d", i);
        snprintf(want, sizeof(want), "%zu:%s|", strlen(m), m);
        assert_int_equal(h.streams[i].grpc_status, 0);
        assert_string_equal(tide_buf_cstr(&h.streams[i].msgs), want);
    }
    assert_int_equal(n_on_close, 400);
    assert_int_equal(stat(&h, M_UNARY, TIDE_GRPC_OK), 400);
    h_fini(&h);
}

static void h2_max_concurrent_streams(void **state)
{
    harness_t h;
    tide_rpc_server_config_t cfg = {
        .methods = methods, .n_methods = N_METHODS, .max_concurrent_streams = 3};
    tide_buf_t b = TIDE_BUF_INIT;
    int i;

    (void)state;
    h_init_cfg(&h, &cfg);
    pump(&h); /* the client learns the limit */
    assert_int_equal(
        nghttp2_session_get_remote_settings(h.client, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS), 3);
    tide_grpc_frame_append(&b, "x", 1);
    for (i = 0; i < 10; i++)
        h_open(&h, "/t.S/Hold", NULL, NULL, b.data, b.len, true);
    pump(&h);
    assert_int_equal(n_on_message, 3); /* the client queues the rest */
    assert_int_equal(tide__h2_open_calls(h.conn->h2), 3);
    tide_buf_free(&b);
    h_fini(&h);
    assert_int_equal(n_on_close, 3);
}

static void h2_flow_control(void **state)
{
    harness_t h;
    tide_buf_t b = TIDE_BUF_INIT;
    uint8_t payload[60000];
    h_stream_t *st;
    int32_t window0, window;

    (void)state;
    /* max_message 64 KiB: the stream window is 64 KiB + 5. */
    h_init(&h, NULL, 64 << 10);
    pump(&h);
    assert_int_equal(
        nghttp2_session_get_remote_settings(h.client, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE),
        (64 << 10) + 5);
    st = h_open(&h, "/t.S/Bidi", NULL, NULL, NULL, 0, false);
    pump(&h);
    window0 = nghttp2_session_get_stream_remote_window_size(h.client, st->id);
    assert_int_equal(window0, (64 << 10) + 5);
    memset(payload, 'f', sizeof(payload));
    tide_grpc_frame_append(&b, payload, sizeof(payload));
    /* Most of a message: no stream credit comes back while it is incomplete. */
    h_send(&h, st, b.data, 50000, false);
    pump(&h);
    window = nghttp2_session_get_stream_remote_window_size(h.client, st->id);
    assert_int_equal(window, window0 - 50000);
    assert_int_equal(n_on_message, 0);
    /* The rest: the handler runs, then the credit returns. */
    h_send(&h, st, b.data + 50000, b.len - 50000, false);
    pump(&h);
    assert_int_equal(n_on_message, 1);
    window = nghttp2_session_get_stream_remote_window_size(h.client, st->id);
    assert_int_equal(window, window0);
    /* The connection window is whole again as well. */
    assert_true(nghttp2_session_get_remote_window_size(h.client) >=
                (int32_t)h.ctx.conn_window - 65535);
    h_send(&h, st, NULL, 0, true);
    pump(&h);
    assert_int_equal(st->grpc_status, 0);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_send_queue_bound(void **state)
{
    harness_t h;
    tide_rpc_server_config_t cfg = {
        .methods = methods, .n_methods = N_METHODS, .max_queued_bytes = 64 << 10};
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;

    (void)state;
    h_init_cfg(&h, &cfg);
    tide_grpc_frame_append(&b, "go", 2);
    st = h_open(&h, "/t.S/Flood", NULL, NULL, b.data, b.len, false);
    pump(&h);
    /* Queued past max_queued_bytes: the handler is told to stop. */
    assert_int_equal(flood_rc, -ENOBUFS);
    assert_int_equal(flood_sent, (64 << 10) / (8192 + 5) + 1);
    /* Everything queued still arrives as the client's window opens. */
    assert_int_equal(st->n_msgs, flood_sent);
    h_send(&h, st, NULL, 0, true);
    pump(&h);
    assert_int_equal(st->grpc_status, 0);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_output_queue_bound(void **state)
{
    harness_t h;
    nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 64 << 20};
    tide_buf_t b = TIDE_BUF_INIT, out = TIDE_BUF_INIT;
    h_stream_t *st;
    const uint8_t *p;
    ssize_t n;
    size_t total = 0;
    int pulls = 0;

    (void)state;
    h_init(&h, NULL, 0);
    /* A client that lets the server send 64 MiB at once. */
    nghttp2_submit_settings(h.client, NGHTTP2_FLAG_NONE, &iv, 1);
    nghttp2_session_set_local_window_size(h.client, NGHTTP2_FLAG_NONE, 0, 64 << 20);
    pump(&h);
    tide_grpc_frame_append(&b, "go", 2);
    st = h_open(&h, "/t.S/Flood", NULL, NULL, b.data, b.len, false);
    while ((n = nghttp2_session_mem_send(h.client, &p)) > 0)
        tide__srv_conn_feed(h.conn, p, (size_t)n);
    assert_int_equal(flood_rc, -ENOBUFS); /* 16 MiB queued on the call */
    /* The connection pulls at most ~1 MiB of frames at a time, and stops reading meanwhile. */
    do {
        tide__srv_conn_pull(h.conn);
        out.len = 0;
        n = (ssize_t)tide__srv_conn_take_output(h.conn, &out);
        assert_true((size_t)n <= TIDE_RPC_OUT_HIGH + 16384 + 64);
        total += (size_t)n;
        if (n > 0)
            nghttp2_session_mem_recv(h.client, out.data, out.len);
        pulls++;
    } while (n > 0);
    assert_true(pulls > 16);
    assert_int_equal(st->n_msgs, flood_sent);
    assert_true(total > (size_t)flood_sent * 8192);
    tide_buf_free(&out);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_protobuf_and_big_headers(void **state)
{
    harness_t h;
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckResponse *rep;
    uint8_t packed[64];
    tide_buf_t b = TIDE_BUF_INIT;
    char *big = malloc(20001);
    const char *extra[] = {"x-big", big, NULL};
    h_stream_t *st, *over;
    const char *p;

    (void)state;
    memset(big, 'b', 20000);
    big[20000] = '\0';
    h_init(&h, "tok", 0);
    req.service = "";
    tide_grpc_frame_append(&b, packed,
                           (uint32_t)grpc__health__v1__health_check_request__pack(&req, packed));
    st = h_open(&h, "/grpc.health.v1.Health/Check", NULL, NULL, b.data, b.len, true);
    over = h_open(&h, "/grpc.health.v1.Health/Check", NULL, extra, b.data, b.len, true);
    pump(&h);
    assert_int_equal(st->grpc_status, 0);
    assert_int_equal(st->n_msgs, 1);
    p = strchr(tide_buf_cstr(&st->msgs), ':') + 1;
    rep = grpc__health__v1__health_check_response__unpack(
        NULL, (size_t)atoi(tide_buf_cstr(&st->msgs)), (const uint8_t *)p);
    assert_non_null(rep);
    assert_int_equal(rep->status, GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING);
    grpc__health__v1__health_check_response__free_unpacked(rep, NULL);
    /* 20 KB of metadata: over the 16 KiB bound, rejected without calling the handler. */
    assert_int_equal(over->grpc_status, TIDE_GRPC_RESOURCE_EXHAUSTED);
    assert_int_equal(over->header_frames, 1);
    assert_int_equal(n_on_message, 1);
    free(big);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_queue_compaction(void **state)
{
    harness_t h;
    nghttp2_settings_entry iv = {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 100 << 10};
    tide_rpc_server_config_t cfg = {
        .methods = methods, .n_methods = N_METHODS, .max_queued_bytes = 256 << 10};
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;
    size_t before;
    uint8_t tail[100];

    (void)state;
    h_init_cfg(&h, &cfg);
    nghttp2_submit_settings(h.client, NGHTTP2_FLAG_NONE, &iv, 1);
    nghttp2_session_set_local_window_size(h.client, NGHTTP2_FLAG_NONE, 0, 1 << 20);
    pump(&h);
    tide_grpc_frame_append(&b, "go", 2);
    st = h_open(&h, "/t.S/Flood", NULL, NULL, b.data, b.len, false);
    {
        const uint8_t *p;
        ssize_t n;
        while ((n = nghttp2_session_mem_send(h.client, &p)) > 0)
            tide__srv_conn_feed(h.conn, p, (size_t)n);
    }
    assert_non_null(flood_call);
    before = tide_rpc_call_queued_bytes(flood_call);
    /* The server may write one stream window (100 KiB) before the client's WINDOW_UPDATE arrives.
     */
    tide__srv_conn_pull(h.conn);
    assert_int_equal(tide_rpc_call_queued_bytes(flood_call), before - (100 << 10));
    /* Queueing now compacts what nghttp2 already took; nothing may be lost or reordered. */
    memset(tail, 't', sizeof(tail));
    assert_int_equal(tide_rpc_call_send(flood_call, tail, sizeof(tail)), 0);
    assert_int_equal(tide_rpc_call_queued_bytes(flood_call), before - (100 << 10) + 105);
    h_send(&h, st, NULL, 0, true);
    h_server_to_client(&h);
    pump(&h);
    assert_int_equal(st->grpc_status, 0);
    assert_int_equal(st->n_msgs, flood_sent + 1);
    assert_int_equal(st->last_len, sizeof(tail));
    assert_int_equal(st->last_first, 't');
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_connection_buffer_bound(void **state)
{
    harness_t h;
    tide_buf_t b = TIDE_BUF_INIT;
    uint8_t payload[1000];
    int i, exhausted = 0, open = 0, ok = 0;
    const int n = 300;

    (void)state;
    /* max_message 1 KiB: a connection may hold max(256 KiB, 8 x 1029) bytes of unfinished messages.
     */
    h_init(&h, NULL, 1024);
    assert_int_equal(h.ctx.max_buffered, 256 << 10);
    memset(payload, 'p', sizeof(payload));
    tide_grpc_frame_append(&b, payload, sizeof(payload));
    /* 300 streams each send 905 of a message's 1005 bytes: the 290th goes over 256 KiB. */
    for (i = 0; i < n; i++)
        h_open(&h, "/t.S/Bidi", NULL, NULL, b.data, 905, false);
    pump(&h);
    for (i = 0; i < n; i++) {
        if (h.streams[i].grpc_status == TIDE_GRPC_RESOURCE_EXHAUSTED)
            exhausted++;
        else if (h.streams[i].grpc_status == -1)
            open++;
    }
    assert_int_equal(exhausted, n - (256 << 10) / 905);
    assert_int_equal(open, (256 << 10) / 905);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN);
    assert_int_equal(n_on_message, 0);
    /* The held streams complete normally, and the budget comes back with them. */
    for (i = 0; i < n; i++)
        if (h.streams[i].grpc_status == -1)
            h_send(&h, &h.streams[i], b.data + 905, b.len - 905, true);
    pump(&h);
    for (i = 0; i < n; i++)
        ok += h.streams[i].grpc_status == 0;
    assert_int_equal(ok, open);
    assert_int_equal(n_on_message, open);
    for (i = 0; i < 10; i++)
        h_open(&h, "/t.S/Bidi", NULL, NULL, b.data, 905, false);
    pump(&h);
    for (i = n; i < n + 10; i++)
        assert_int_equal(h.streams[i].grpc_status, -1);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_deadline(void **state)
{
    harness_t h;
    const char *to[] = {"grpc-timeout", "100m", NULL};
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;

    (void)state;
    h_init(&h, NULL, 0);
    tide_grpc_frame_append(&b, "x", 1);
    st = h_open(&h, "/t.S/Hold", NULL, to, b.data, b.len, true);
    pump(&h);
    assert_non_null(held_call);
    h_advance(&h, 99);
    pump(&h);
    assert_int_equal(st->grpc_status, -1);
    h_advance(&h, 1);
    pump(&h);
    assert_int_equal(st->grpc_status, TIDE_GRPC_DEADLINE_EXCEEDED);
    assert_true(st->closed);
    assert_int_equal(n_on_close, 1);
    assert_null(held_call);
    assert_int_equal(stat(&h, M_HOLD, TIDE_GRPC_DEADLINE_EXCEEDED), 1);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_late_finish_and_peer_reset(void **state)
{
    harness_t h;
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *a, *r;

    (void)state;
    h_init(&h, NULL, 0);
    tide_grpc_frame_append(&b, "x", 1);
    a = h_open(&h, "/t.S/Hold", NULL, NULL, b.data, b.len, true);
    pump(&h);
    /* Finished later, outside any nghttp2 callback (as a handler answering from a timer would). */
    assert_int_equal(tide_rpc_call_send(held_call, (const uint8_t *)"late", 4), 0);
    assert_int_equal(tide_rpc_call_queued_bytes(held_call), 9);
    tide_rpc_call_finish(held_call, TIDE_GRPC_OK, NULL);
    pump(&h);
    assert_int_equal(a->grpc_status, 0);
    assert_string_equal(tide_buf_cstr(&a->msgs), "4:late|");
    assert_int_equal(n_on_close, 1);
    /* The peer cancels a held call: on_close, counted CANCELLED. */
    r = h_open(&h, "/t.S/Hold", NULL, NULL, b.data, b.len, true);
    pump(&h);
    assert_non_null(held_call);
    nghttp2_submit_rst_stream(h.client, NGHTTP2_FLAG_NONE, r->id, NGHTTP2_CANCEL);
    pump(&h);
    assert_null(held_call);
    assert_int_equal(n_on_close, 2);
    assert_int_equal(stat(&h, M_HOLD, TIDE_GRPC_CANCELLED), 1);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_goaway_in_flight(void **state)
{
    harness_t h;
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;

    (void)state;
    h_init(&h, NULL, 0);
    tide_grpc_frame_append(&b, "one", 3);
    st = h_open(&h, "/t.S/Bidi", NULL, NULL, b.data, b.len, false);
    pump(&h);
    assert_int_equal(st->n_msgs, 1);
    tide__srv_conn_shutdown(h.conn);
    pump(&h);
    assert_true(h.goaway);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN); /* a call is still in flight */
    /* The in-flight stream still works to its end. */
    b.len = 0;
    tide_grpc_frame_append(&b, "two", 3);
    h_send(&h, st, b.data, b.len, true);
    pump(&h);
    assert_int_equal(st->n_msgs, 2);
    assert_int_equal(st->grpc_status, 0);
    assert_int_equal(h.conn->state, TIDE__CONN_CLOSE_AFTER_FLUSH);
    tide_buf_free(&b);
    h_fini(&h);
}

static void h2_keepalive(void **state)
{
    harness_t h;
    tide_buf_t out = TIDE_BUF_INIT;

    (void)state;
    h_init(&h, NULL, 0);
    pump(&h);
    /* Idle past the keepalive: the server PINGs, the client acks, all is well. */
    h_advance(&h, TIDE_RPC_DEFAULT_KEEPALIVE_MS - 1);
    pump(&h);
    assert_int_equal(h.pings_seen, 0);
    h_advance(&h, 1);
    pump(&h);
    assert_int_equal(h.pings_seen, 1);
    h_advance(&h, TIDE_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS);
    pump(&h);
    assert_int_equal(h.pings_seen, 2);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN);
    /* Now the peer goes silent: the next PING is never answered. */
    h_advance(&h, TIDE_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS);
    tide__srv_conn_pull(h.conn);
    assert_true(tide__srv_conn_take_output(h.conn, &out) > 0); /* the PING, dropped */
    h_advance(&h, TIDE_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS - 1);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN);
    h_advance(&h, 1);
    assert_int_equal(h.conn->state, TIDE__CONN_ABORT);
    tide_buf_free(&out);
    h_fini(&h);
}

static void h2_bad_frames(void **state)
{
    harness_t h;
    tide_buf_t out = TIDE_BUF_INIT;
    /* Preface, then a DATA frame on stream 0: a connection error. */
    static const uint8_t bad[] = TIDE_H2_PREFACE "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                                                 "\x00\x00\x01\x00\x00\x00\x00\x00\x00x";

    (void)state;
    h_init(&h, NULL, 0);
    tide__srv_conn_feed(h.conn, bad, sizeof(bad) - 1);
    tide__srv_conn_pull(h.conn);
    assert_int_not_equal(h.conn->state, TIDE__CONN_OPEN);
    tide__srv_conn_take_output(h.conn, &out);
    /* SETTINGS then GOAWAY (type 7) went out. */
    assert_true(out.len > 9 + 9);
    assert_non_null(memchr(out.data, 0x07, out.len));
    tide_buf_free(&out);
    h_fini(&h);

    /* A preface that turns bad after the sniffer accepted it cannot happen (24 bytes decide);
     * garbage is rejected at once. */
    h_init(&h, NULL, 0);
    assert_int_equal(tide__srv_conn_feed(h.conn, (const uint8_t *)"\x16\x03\x01\x02", 4), -EPROTO);
    assert_int_equal(h.conn->state, TIDE__CONN_ABORT);
    h_fini(&h);
}

static void sniff_idle_timeout(void **state)
{
    harness_t h;

    (void)state;
    h_init(&h, NULL, 0);
    assert_int_equal(tide__srv_conn_feed(h.conn, (const uint8_t *)"PRI * HT", 8), 0);
    h_advance(&h, TIDE_RPC_IDLE_MS - 1);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN);
    h_advance(&h, 1);
    assert_int_equal(h.conn->state, TIDE__CONN_ABORT);
    h_fini(&h);
}

static void h2_hot_path_no_alloc(void **state)
{
    harness_t h;
    tide_buf_t b = TIDE_BUF_INIT;
    h_stream_t *st;
    int i;

    (void)state;
    h_init(&h, NULL, 0);
    tide_grpc_frame_append(&b, "heartbeat: gpu0 util=97 mem=71 temp=64", 38);
    st = h_open(&h, "/t.S/Bidi", NULL, NULL, NULL, 0, false);
    pump(&h);
    allocs = 0;
    /* The first 20 heartbeats warm the buffers; the next 200 must not allocate in the transport. */
    for (i = 0; i < 220; i++) {
        const uint8_t *p;
        ssize_t n;
        tide_buf_t out = TIDE_BUF_INIT;
        bool count = i >= 20;
        h_send(&h, st, b.data, b.len, false);
        n = nghttp2_session_mem_send(h.client, &p);
        assert_true(n > 0);
        counting = count;
        tide__srv_conn_feed(h.conn, p, (size_t)n);
        tide__srv_conn_pull(h.conn);
        counting = false;
        tide__srv_conn_take_output(h.conn, &out);
        nghttp2_session_mem_recv(h.client, out.data, out.len);
        counting = count;
        tide__srv_conn_take_output(h.conn, &out); /* give the storage back, as the shell does */
        counting = false;
        tide_buf_free(&out);
    }
    assert_int_equal(st->n_msgs, 220);
    assert_int_equal(allocs, 0);
    tide_buf_free(&b);
    h_fini(&h);
}

/* ---- HTTP/1 ---- */

static void h1_feed(harness_t *h, const char *s)
{
    tide__srv_conn_feed(h->conn, (const uint8_t *)s, strlen(s));
}

static char *h1_take(harness_t *h)
{
    tide_buf_t out = TIDE_BUF_INIT;
    char *s;
    tide__srv_conn_pull(h->conn);
    tide__srv_conn_take_output(h->conn, &out);
    s = strdup(tide_buf_cstr(&out));
    tide_buf_free(&out);
    return s;
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void h1_requests(void **state)
{
    harness_t h;
    char *r;
    size_t i;
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

    (void)state;
    h_init(&h, NULL, 0);
    /* Byte by byte. */
    for (i = 0; req[i]; i++)
        tide__srv_conn_feed(h.conn, (const uint8_t *)req + i, 1);
    r = h1_take(&h);
    assert_non_null(strstr(r, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(r, "Content-Length: 3\r\n"));
    assert_non_null(strstr(r, "\r\n\r\nok\n"));
    assert_null(strstr(r, "Connection: close"));
    free(r);
    assert_int_equal(h.conn->kind, TIDE__CONN_HTTP1);
    /* Keep-alive + pipelining: three requests in one read, answered in order. */
    h1_feed(&h, "GET /healthz HTTP/1.1\r\n\r\nGET /nope?x=1 HTTP/1.1\r\n\r\n"
                "POST /healthz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    r = h1_take(&h);
    assert_int_equal(count_of(r, "HTTP/1.1 "), 3);
    assert_true(strstr(r, "200 OK") < strstr(r, "404 Not Found"));
    assert_true(strstr(r, "404 Not Found") < strstr(r, "405 Method Not Allowed"));
    assert_non_null(strstr(r, "Allow: GET\r\n"));
    free(r);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN);
    /* HTTP/1.0 without keep-alive: answered, then closed. */
    h1_feed(&h, "GET /healthz HTTP/1.0\r\n\r\n");
    r = h1_take(&h);
    assert_non_null(strstr(r, "Connection: close\r\n"));
    free(r);
    assert_int_equal(h.conn->state, TIDE__CONN_CLOSE_AFTER_FLUSH);
    h_fini(&h);
}

static void h1_bad_requests(void **state)
{
    harness_t h;
    char *r;
    tide_buf_t big = TIDE_BUF_INIT;
    tide_rpc_server_config_t nohandler = {.methods = methods, .n_methods = N_METHODS};

    (void)state;
    h_init(&h, NULL, 0);
    tide_buf_append_str(&big, "GET /healthz HTTP/1.1\r\n");
    for (int i = 0; i < 200; i++)
        tide_buf_printf(&big, "X-Filler-%d: %080d\r\n", i, i);
    tide_buf_append_str(&big, "\r\n");
    assert_int_equal(tide__srv_conn_feed(h.conn, big.data, big.len), -EPROTO);
    r = h1_take(&h);
    assert_non_null(strstr(r, "431 "));
    assert_non_null(strstr(r, "Connection: close"));
    free(r);
    assert_int_equal(h.conn->state, TIDE__CONN_CLOSE_AFTER_FLUSH);
    h_fini(&h);

    h_init(&h, NULL, 0);
    assert_int_equal(
        tide__srv_conn_feed(h.conn, (const uint8_t *)"GET / HTTP/1.1\r\nBad Header\r\n\r\n", 31),
        -EPROTO);
    r = h1_take(&h);
    assert_non_null(strstr(r, "400 Bad Request"));
    free(r);
    h_fini(&h);

    h_init_cfg(&h, &nohandler);
    h1_feed(&h, "GET /healthz HTTP/1.1\r\n\r\n");
    r = h1_take(&h);
    assert_non_null(strstr(r, "404 Not Found"));
    free(r);
    h_fini(&h);
    tide_buf_free(&big);
}

static void h1_output_bound(void **state)
{
    harness_t h;
    tide_buf_t out = TIDE_BUF_INIT;
    int answered = 0, rounds = 0;
    const char *req = "GET /big HTTP/1.1\r\n\r\n";
    tide_buf_t reqs = TIDE_BUF_INIT;

    (void)state;
    h_init(&h, NULL, 0);
    for (int i = 0; i < 6; i++)
        tide_buf_append_str(&reqs, req);
    tide__srv_conn_feed(h.conn, reqs.data, reqs.len);
    /* 600 KiB per answer: the parser stops after two (over 1 MiB queued) and reading pauses. */
    assert_false(tide__srv_conn_wants_read(h.conn));
    while (answered < 6 && rounds++ < 20) {
        tide__srv_conn_pull(h.conn);
        out.len = 0;
        tide__srv_conn_take_output(h.conn, &out);
        answered += count_of(tide_buf_cstr(&out), "HTTP/1.1 200");
        assert_true(out.len <= 2 * (TIDE_RPC_OUT_HIGH + 1024));
    }
    assert_int_equal(answered, 6);
    assert_true(tide__srv_conn_wants_read(h.conn));
    /* Input that arrives while stalled queues behind what waits, and is answered in order. */
    tide__srv_conn_feed(h.conn, reqs.data, reqs.len);
    assert_false(tide__srv_conn_wants_read(h.conn));
    h1_feed(&h, "GET /healthz HTTP/1.1\r\n\r\n");
    answered = 0;
    rounds = 0;
    out.len = 0;
    while (rounds++ < 20) {
        tide__srv_conn_pull(h.conn);
        tide__srv_conn_take_output(h.conn, &out);
        answered += count_of(tide_buf_cstr(&out), "HTTP/1.1 200");
        if (strstr(tide_buf_cstr(&out), "\r\n\r\nok\n"))
            break;
        out.len = 0;
    }
    assert_int_equal(answered, 7);
    tide_buf_free(&out);
    tide_buf_free(&reqs);
    h_fini(&h);
}

static void h1_idle_timeout(void **state)
{
    harness_t h;
    char *r;

    (void)state;
    h_init(&h, NULL, 0);
    h1_feed(&h, "GET /healthz HTTP/1.1\r\n\r\n");
    r = h1_take(&h);
    free(r);
    h_advance(&h, TIDE_RPC_IDLE_MS / 2);
    h1_feed(&h, "GET /healthz HTTP/1.1\r\nX-Slow: "); /* a request that dribbles in */
    h_advance(&h, TIDE_RPC_IDLE_MS / 2 - 1);
    assert_int_equal(h.conn->state, TIDE__CONN_OPEN);
    h_advance(&h, 1);
    assert_int_equal(h.conn->state, TIDE__CONN_ABORT);
    h_fini(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(h2_unary_ok),
        cmocka_unit_test(h2_rejections),
        cmocka_unit_test(h2_auth_hook),
        cmocka_unit_test(h2_http_level_rejections),
        cmocka_unit_test(h2_message_errors),
        cmocka_unit_test(h2_server_streaming),
        cmocka_unit_test(h2_bidi_many_messages),
        cmocka_unit_test(h2_many_streams),
        cmocka_unit_test(h2_max_concurrent_streams),
        cmocka_unit_test(h2_flow_control),
        cmocka_unit_test(h2_send_queue_bound),
        cmocka_unit_test(h2_output_queue_bound),
        cmocka_unit_test(h2_protobuf_and_big_headers),
        cmocka_unit_test(h2_queue_compaction),
        cmocka_unit_test(h2_connection_buffer_bound),
        cmocka_unit_test(h2_deadline),
        cmocka_unit_test(h2_late_finish_and_peer_reset),
        cmocka_unit_test(h2_goaway_in_flight),
        cmocka_unit_test(h2_keepalive),
        cmocka_unit_test(h2_bad_frames),
        cmocka_unit_test(sniff_idle_timeout),
        cmocka_unit_test(h2_hot_path_no_alloc),
        cmocka_unit_test(h1_requests),
        cmocka_unit_test(h1_bad_requests),
        cmocka_unit_test(h1_output_bound),
        cmocka_unit_test(h1_idle_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* gRPC client over one HTTP/2 connection (nghttp2 on libuv), see rpc_client.h. Invariants:
 * on_status runs exactly once per started call, and a call is freed only after it (never while its
 * on_message is on the stack); the nghttp2 session is deleted only once every handle has closed, so
 * user callbacks may free the client from inside nghttp2 callbacks; one write is in flight at a
 * time (bytes in wbuf). With TLS (tls.c) the handshake runs between the TCP connect and the HTTP/2
 * preface, inside the connect timeout; the connection is up once it is done with ALPN h2, and every byte
 * after that passes through the TLS connection. */
#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "grpc_frame.h"
#include "grpc_percent.h"
#include "grpc_timeout.h"
#include "heap.h"
#include "list.h"
#include "rpc_client.h"
#include "tls.h"
#include "xmalloc.h"

#define OUT_HIGH            (1u << 20)
#define DEFAULT_MAX_MESSAGE (4u << 20)
#define CONN_WINDOW_MIN     (16u << 20)
#define STREAM_WINDOW_MIN   (64u << 10)

typedef struct ctimer {
    tide_heap_node_t node;
    void (*fire)(tide_rpc_client_t *c, struct ctimer *t, int64_t now);
} ctimer_t;

typedef enum cstate {
    C_CONNECTING = 0, /* resolving or connecting */
    C_UP,
    C_DOWN,
} cstate_t;

struct tide_rpc_client_call {
    tide_rpc_client_t *c;
    int32_t stream_id; /* 0 until submitted */
    tide_rpc_client_call_cbs_t cbs;
    void *ud;
    char *path;
    int64_t timeout_ms;
    tide_list_t link; /* c->calls while open, c->done while its status waits for delivery */
    tide_grpc_decoder_t dec;
    tide_buf_t out; /* framed request messages not yet taken by nghttp2 */
    size_t out_off;
    bool close_send;
    bool completed; /* status decided */
    bool busy;      /* on_message is on the stack */
    bool free_pending;
    int http_status;
    bool got_status;
    int grpc_status;
    tide_buf_t grpc_msg; /* as received (percent-encoded) */
    tide_grpc_code_t code;
    tide_buf_t message; /* the final status text (decoded), NUL-terminated */
    ctimer_t deadline;
};

struct tide_rpc_client {
    uv_loop_t *loop;
    char *hostport;
    char *host;
    char *port;
    char *auth; /* "Bearer TOKEN" or NULL */
    size_t max_message;
    uint32_t keepalive_ms, keepalive_timeout_ms, connect_timeout_ms;
    uint32_t stream_window, conn_window;
    void (*on_state)(tide_rpc_client_t *c, int status, const char *text, void *ud);
    void *ud;

    cstate_t state;
    uv_getaddrinfo_t gai;
    uv_tcp_t tcp;
    bool tcp_open;
    uv_connect_t creq;
    uv_write_t wreq;
    uv_timer_t timer;
    uv_prepare_t prepare;
    int open_handles; /* timer, prepare, tcp, pending getaddrinfo */
    nghttp2_session *session;
    tide_list_t calls;
    tide_list_t done;
    tide_heap_t timers;
    ctimer_t connect_timer;
    ctimer_t ka_timer;
    tide_buf_t out, wbuf;
    bool writing;
    bool flush_queued;
    bool goaway;
    bool freeing;
    bool gai_pending;
    int pending_err; /* a connect failure found synchronously, reported from the loop */
    int64_t last_read, ping_sent;
    bool ping_outstanding;
    char down_text[256];
    tide_tls_ctx_t *tls_ctx; /* a reference; NULL: plaintext (h2c) */
    tide_tls_conn_t *tls;    /* from the TCP connect on */
    tide_buf_t plain;        /* TLS: decrypted input, reused */
    bool got_bytes;          /* anything was read on the connection */
    uint8_t rbuf[64 << 10];
};

#define NV(n, v, vl)                                                                               \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE                  \
    }

static void schedule_flush(tide_rpc_client_t *c);
static void arm_timer(tide_rpc_client_t *c);
static void conn_down(tide_rpc_client_t *c, int status, const char *text);

static int64_t now_ms(tide_rpc_client_t *c)
{
    return (int64_t)uv_now(c->loop);
}

static void ctimer_set(tide_rpc_client_t *c, ctimer_t *t, int64_t at)
{
    tide_heap_set(&c->timers, &t->node, at);
    arm_timer(c);
}

static void ctimer_clear(tide_rpc_client_t *c, ctimer_t *t)
{
    tide_heap_remove(&c->timers, &t->node);
}

/* --- calls --- */

static void call_free(tide_rpc_client_call_t *call)
{
    tide_grpc_decoder_free(&call->dec);
    tide_buf_free(&call->out);
    tide_buf_free(&call->grpc_msg);
    tide_buf_free(&call->message);
    free(call->path);
    free(call);
}

/* Runs on_status and frees the call (later, if its on_message is still running). */
static void deliver(tide_rpc_client_call_t *call)
{
    tide_list_remove(&call->link);
    if (call->cbs.on_status)
        call->cbs.on_status(call, call->code, tide_buf_cstr(&call->message), call->ud);
    if (call->busy)
        call->free_pending = true;
    else
        call_free(call);
}

/* Decides the call's status once. The stream is detached (reset if still open); on_status runs now
 * or, when deferred, from the loop. */
static void complete(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *msg,
                     bool deferred)
{
    tide_rpc_client_t *c = call->c;

    if (call->completed)
        return;
    call->completed = true;
    call->code = code;
    call->message.len = 0;
    tide_buf_append_str(&call->message, msg ? msg : "");
    ctimer_clear(c, &call->deadline);
    if (call->stream_id > 0 && c->session) {
        nghttp2_session_set_stream_user_data(c->session, call->stream_id, NULL);
        if (nghttp2_session_get_stream_local_close(c->session, call->stream_id) == 0 ||
            nghttp2_session_get_stream_remote_close(c->session, call->stream_id) == 0) {
            nghttp2_submit_rst_stream(c->session, NGHTTP2_FLAG_NONE, call->stream_id,
                                      code == TIDE_GRPC_OK || call->got_status ? NGHTTP2_NO_ERROR
                                                                               : NGHTTP2_CANCEL);
            schedule_flush(c);
        }
    }
    tide_list_remove(&call->link);
    tide_list_push_back(&c->done, &call->link);
    if (deferred)
        arm_timer(c);
    else
        deliver(call);
}

/* The status the server's response gave (trailers or Trailers-Only). */
static void complete_from_response(tide_rpc_client_call_t *call)
{
    char text[64];

    if (call->got_status) {
        tide_buf_t msg = TIDE_BUF_INIT;
        int code = call->grpc_status;
        if (code < 0 || code >= TIDE_GRPC_CODE_COUNT)
            code = TIDE_GRPC_UNKNOWN;
        tide_grpc_percent_decode(&msg, (const char *)call->grpc_msg.data, call->grpc_msg.len);
        complete(call, (tide_grpc_code_t)code, tide_buf_cstr(&msg), false);
        tide_buf_free(&msg);
    } else if (call->http_status != 200) {
        snprintf(text, sizeof(text), "HTTP status %d without grpc-status", call->http_status);
        complete(call, tide_grpc_code_from_http(call->http_status), text, false);
    } else {
        complete(call, TIDE_GRPC_UNKNOWN, "response without grpc-status", false);
    }
}

static ssize_t read_request(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                            size_t length, uint32_t *flags, nghttp2_data_source *source, void *ud)
{
    /* Looked up through the stream, not source->ptr: a completed call is detached (and may be
     * freed) while its stream waits for the RST_STREAM that ends it. */
    tide_rpc_client_call_t *call = nghttp2_session_get_stream_user_data(session, stream_id);
    size_t avail, n;

    (void)source;
    (void)ud;
    if (!call)
        return NGHTTP2_ERR_DEFERRED;
    avail = call->out.len - call->out_off;
    n = avail < length ? avail : length;
    if (n) {
        memcpy(buf, call->out.data + call->out_off, n);
        call->out_off += n;
    }
    if (call->out_off == call->out.len) {
        call->out.len = 0;
        call->out_off = 0;
        if (call->close_send) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            return (ssize_t)n;
        }
    }
    return n ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
}

static void submit(tide_rpc_client_call_t *call)
{
    tide_rpc_client_t *c = call->c;
    char timeout[TIDE_GRPC_TIMEOUT_MAX_LEN];
    nghttp2_nv nva[10] = {
        NV(":method", "POST", 4),
        NV(":scheme", c->tls_ctx ? "https" : "http", c->tls_ctx ? 5u : 4u),
        NV(":path", call->path, strlen(call->path)),
        NV(":authority", c->hostport, strlen(c->hostport)),
        NV("content-type", "application/grpc", 16),
        NV("te", "trailers", 8),
        NV("user-agent", "tide/" TIDE_VERSION, sizeof("tide/" TIDE_VERSION) - 1),
        NV("grpc-accept-encoding", "identity", 8),
    };
    size_t n = 8;
    nghttp2_data_provider prd;
    int32_t id;

    if (c->auth) {
        nghttp2_nv a = NV("authorization", c->auth, strlen(c->auth));
        nva[n++] = a;
    }
    if (call->timeout_ms > 0) {
        /* What is left of the deadline, so a call queued while connecting does not get extra time.
         */
        int64_t left = call->deadline.node.key - now_ms(c);
        nghttp2_nv t = NV("grpc-timeout", timeout, 0);
        tide_grpc_timeout_format(left > 0 ? left : 1, timeout);
        t.valuelen = strlen(timeout);
        nva[n++] = t;
    }
    prd.source.ptr = NULL;
    prd.read_callback = read_request;
    id = nghttp2_submit_request(c->session, NULL, nva, n, &prd, call);
    if (id < 0) {
        char text[96];
        snprintf(text, sizeof(text), "cannot open a stream: %s", nghttp2_strerror(id));
        complete(call, TIDE_GRPC_UNAVAILABLE, text, true);
        return;
    }
    call->stream_id = id;
    schedule_flush(c);
}

static void deadline_fired(tide_rpc_client_t *c, ctimer_t *t, int64_t now)
{
    tide_rpc_client_call_t *call = tide_container_of(t, tide_rpc_client_call_t, deadline);

    (void)c;
    (void)now;
    complete(call, TIDE_GRPC_DEADLINE_EXCEEDED, "deadline exceeded", false);
}

int tide_rpc_client_call_start(tide_rpc_client_t *c, const char *path, int64_t timeout_ms,
                               const tide_rpc_client_call_cbs_t *cbs, void *ud,
                               tide_rpc_client_call_t **out)
{
    tide_rpc_client_call_t *call;

    if (out)
        *out = NULL;
    if (!c || c->freeing || !path || path[0] != '/' || !cbs || !cbs->on_status)
        return -EINVAL;
    call = tide_xcalloc(1, sizeof(*call));
    call->c = c;
    call->cbs = *cbs;
    call->ud = ud;
    call->path = tide_xstrdup(path);
    call->timeout_ms = timeout_ms;
    tide_grpc_decoder_init(&call->dec, c->max_message);
    tide_heap_node_init(&call->deadline.node);
    call->deadline.fire = deadline_fired;
    tide_list_push_back(&c->calls, &call->link);
    if (out)
        *out = call;
    if (timeout_ms > 0)
        ctimer_set(c, &call->deadline, now_ms(c) + timeout_ms);
    if (c->state == C_DOWN || c->goaway) {
        complete(call, TIDE_GRPC_UNAVAILABLE,
                 c->goaway ? "server is going away (GOAWAY)" : c->down_text, true);
    } else if (c->state == C_UP) {
        submit(call);
    }
    return 0;
}

static int queue_check(tide_rpc_client_call_t *call)
{
    if (!call || call->completed || call->close_send)
        return -EPIPE;
    if (call->out_off > (64u << 10) && call->out_off * 2 > call->out.len) {
        tide_buf_consume(&call->out, call->out_off);
        call->out_off = 0;
    }
    return 0;
}

static void queued(tide_rpc_client_call_t *call)
{
    if (call->stream_id > 0) {
        nghttp2_session_resume_data(call->c->session, call->stream_id);
        schedule_flush(call->c);
    }
}

int tide_rpc_client_call_send(tide_rpc_client_call_t *call, const uint8_t *data, size_t len)
{
    int rc = queue_check(call);

    if (rc)
        return rc;
    if (len > UINT32_MAX - TIDE_GRPC_PREFIX_LEN)
        return -EMSGSIZE;
    tide_grpc_frame_append(&call->out, data, (uint32_t)len);
    queued(call);
    return 0;
}

int tide_rpc_client_call_send_pb(tide_rpc_client_call_t *call, const ProtobufCMessage *msg)
{
    size_t len;
    uint8_t *p;
    int rc = queue_check(call);

    if (rc)
        return rc;
    len = protobuf_c_message_get_packed_size(msg);
    if (len > UINT32_MAX - TIDE_GRPC_PREFIX_LEN)
        return -EMSGSIZE;
    p = tide_buf_reserve(&call->out, TIDE_GRPC_PREFIX_LEN + len);
    tide_grpc_frame_prefix(p, (uint32_t)len);
    protobuf_c_message_pack(msg, p + TIDE_GRPC_PREFIX_LEN);
    call->out.len += TIDE_GRPC_PREFIX_LEN + len;
    queued(call);
    return 0;
}

int tide_rpc_client_call_close_send(tide_rpc_client_call_t *call)
{
    if (!call || call->completed || call->close_send)
        return -EPIPE;
    call->close_send = true;
    queued(call);
    return 0;
}

void tide_rpc_client_call_cancel(tide_rpc_client_call_t *call)
{
    if (!call || call->completed)
        return;
    complete(call, TIDE_GRPC_CANCELLED, "cancelled", true);
}

size_t tide_rpc_client_call_queued_bytes(const tide_rpc_client_call_t *call)
{
    return call ? call->out.len - call->out_off : 0;
}

int tide_rpc_client_unary(tide_rpc_client_t *c, const char *path, const ProtobufCMessage *req,
                          int64_t timeout_ms, const tide_rpc_client_call_cbs_t *cbs, void *ud,
                          tide_rpc_client_call_t **out)
{
    tide_rpc_client_call_t *call;
    int rc;

    if (!req)
        return -EINVAL;
    rc = tide_rpc_client_call_start(c, path, timeout_ms, cbs, ud, &call);
    if (rc)
        return rc;
    /* Neither can fail on a fresh call; a call that already failed reports through on_status. */
    (void)tide_rpc_client_call_send_pb(call, req);
    (void)tide_rpc_client_call_close_send(call);
    if (out)
        *out = call;
    return 0;
}

/* --- nghttp2 callbacks --- */

static tide_rpc_client_call_t *stream_call(tide_rpc_client_t *c, int32_t id)
{
    if (c->freeing)
        return NULL;
    return nghttp2_session_get_stream_user_data(c->session, id);
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    tide_rpc_client_call_t *call = stream_call(ud, frame->hd.stream_id);

    (void)session;
    (void)flags;
    if (!call || frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        int st = 0;
        size_t i;
        for (i = 0; i < valuelen && i < 3; i++)
            st = st * 10 + (value[i] - '0');
        call->http_status = (valuelen == 3) ? st : 0;
    } else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        int st = 0;
        size_t i;
        bool ok = valuelen > 0 && valuelen <= 3;
        for (i = 0; ok && i < valuelen; i++) {
            if (value[i] < '0' || value[i] > '9')
                ok = false;
            else
                st = st * 10 + (value[i] - '0');
        }
        call->got_status = true;
        call->grpc_status = ok ? st : TIDE_GRPC_UNKNOWN;
    } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        call->grpc_msg.len = 0;
        tide_buf_append(&call->grpc_msg, value, valuelen < 4096 ? valuelen : 4096);
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    tide_rpc_client_t *c = ud;
    tide_rpc_client_call_t *call;

    (void)session;
    if (c->freeing)
        return 0;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA:
        call = stream_call(c, frame->hd.stream_id);
        if (call && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
            complete_from_response(call);
        break;
    case NGHTTP2_GOAWAY:
        c->goaway = true;
        break;
    case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            c->ping_outstanding = false;
        break;
    default:
        break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *ud)
{
    tide_rpc_client_t *c = ud;
    tide_rpc_client_call_t *call = stream_call(c, stream_id);
    size_t off = 0, held = 0;

    (void)flags;
    while (call && !call->completed && call->http_status == 200 && off < len) {
        const uint8_t *msg = NULL;
        size_t used = 0, mlen = 0;
        int rc = tide_grpc_decoder_feed(&call->dec, data + off, len - off, &used, &msg, &mlen);

        off += used;
        held += used;
        if (rc == TIDE_GRPC_DEC_MORE)
            break;
        if (rc < 0) {
            char text[96];
            if (rc == -EMSGSIZE)
                snprintf(text, sizeof(text), "response of %u bytes exceeds the limit of %zu",
                         (unsigned)call->dec.need, c->max_message);
            else
                snprintf(text, sizeof(text), "%s",
                         rc == -EPROTONOSUPPORT ? "compressed response not supported"
                                                : "malformed response message");
            complete(call, rc == -EMSGSIZE ? TIDE_GRPC_RESOURCE_EXHAUSTED : TIDE_GRPC_INTERNAL,
                     text, false);
            break;
        }
        call->busy = true;
        if (call->cbs.on_message)
            call->cbs.on_message(call, msg, mlen, call->ud);
        call->busy = false;
        if (call->free_pending) {
            call_free(call);
            break;
        }
        /* Credit the stream only now that the message was handled. */
        if (!c->freeing)
            nghttp2_session_consume_stream(session, stream_id, held);
        held = 0;
    }
    nghttp2_session_consume_connection(session, len);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *ud)
{
    tide_rpc_client_t *c = ud;
    tide_rpc_client_call_t *call = stream_call(c, stream_id);
    char text[96];

    (void)session;
    if (!call)
        return 0;
    switch (error_code) {
    case NGHTTP2_REFUSED_STREAM:
        complete(call, TIDE_GRPC_UNAVAILABLE, "stream refused by the server", false);
        break;
    case NGHTTP2_CANCEL:
        complete(call, TIDE_GRPC_CANCELLED, "stream cancelled by the server", false);
        break;
    case NGHTTP2_NO_ERROR:
        complete_from_response(call);
        break;
    default:
        snprintf(text, sizeof(text), "stream reset by the server (%s)",
                 nghttp2_http2_strerror(error_code));
        complete(call, TIDE_GRPC_INTERNAL, text, false);
        break;
    }
    return 0;
}

/* --- connection --- */

static void deliver_done(tide_rpc_client_t *c)
{
    while (!tide_list_empty(&c->done)) {
        tide_rpc_client_call_t *call = tide_list_entry(c->done.next, tide_rpc_client_call_t, link);
        deliver(call);
    }
}

static void timer_cb(uv_timer_t *t)
{
    tide_rpc_client_t *c = t->data;
    int64_t now = now_ms(c);
    tide_heap_node_t *n;

    while (!c->freeing && (n = tide_heap_peek(&c->timers)) && n->key <= now) {
        ctimer_t *ct = tide_container_of(n, ctimer_t, node);
        tide_heap_remove(&c->timers, n);
        ct->fire(c, ct, now);
    }
    if (!c->freeing)
        deliver_done(c);
    if (!c->freeing)
        arm_timer(c);
}

static void arm_timer(tide_rpc_client_t *c)
{
    tide_heap_node_t *n;
    int64_t now, delay;

    if (c->freeing)
        return;
    if (!tide_list_empty(&c->done)) {
        uv_timer_start(&c->timer, timer_cb, 0, 0);
        return;
    }
    n = tide_heap_peek(&c->timers);
    if (!n) {
        uv_timer_stop(&c->timer);
        return;
    }
    now = now_ms(c);
    delay = n->key > now ? n->key - now : 0;
    uv_timer_start(&c->timer, timer_cb, (uint64_t)delay, 0);
}

static void write_cb(uv_write_t *req, int status);

/* Writes wbuf (not empty). Returns 0, or -1 after the connection went down. */
static int start_write(tide_rpc_client_t *c)
{
    uv_buf_t b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
    int rc;

    c->wreq.data = c;
    rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb);
    if (rc != 0) {
        c->wbuf.len = 0;
        conn_down(c, rc, "write failed");
        return -1;
    }
    c->writing = true;
    return 0;
}

static void flush(tide_rpc_client_t *c)
{
    if (c->freeing || c->writing)
        return;
    if (c->state == C_CONNECTING && c->tls && c->tcp_open) {
        /* The TLS handshake's records. */
        if (tide_tls_conn_take_output(c->tls, &c->wbuf) > 0)
            (void)start_write(c);
        return;
    }
    if (c->state != C_UP)
        return;
    while (c->out.len < OUT_HIGH) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(c->session, &p);
        if (n < 0) {
            conn_down(c, -EPROTO, "HTTP/2 session failed");
            return;
        }
        if (n == 0)
            break;
        tide_buf_append(&c->out, p, (size_t)n);
    }
    if (c->tls) {
        /* Encrypted into wbuf (both buffers stay warm; nothing is allocated once they are). */
        tide_error_t err;
        if (c->out.len > 0 && tide_tls_conn_write(c->tls, c->out.data, c->out.len, &err) < 0) {
            char text[sizeof(c->down_text)];
            c->out.len = 0;
            snprintf(text, sizeof(text), "TLS with %.80s failed: %.150s", c->hostport, err.text);
            conn_down(c, -EPROTO, text);
            return;
        }
        c->out.len = 0;
        if (tide_tls_conn_take_output(c->tls, &c->wbuf) > 0) {
            (void)start_write(c);
            return;
        }
    } else if (c->out.len > 0) {
        tide_buf_t tmp = c->wbuf;

        c->wbuf = c->out;
        c->out = tmp;
        c->out.len = 0;
        (void)start_write(c);
        return;
    }
    if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session))
        conn_down(c, -ESHUTDOWN, "connection closed by the server (GOAWAY)");
}

static void write_cb(uv_write_t *req, int status)
{
    tide_rpc_client_t *c = req->data;

    c->writing = false;
    c->wbuf.len = 0;
    if (c->freeing || c->state == C_DOWN)
        return;
    if (status < 0) {
        conn_down(c, status, uv_strerror(status));
        return;
    }
    flush(c);
}

static void prepare_cb(uv_prepare_t *p)
{
    tide_rpc_client_t *c = p->data;

    uv_prepare_stop(p);
    c->flush_queued = false;
    flush(c);
}

/* Output is written before the loop sleeps: batches frames and never re-enters nghttp2. */
static void schedule_flush(tide_rpc_client_t *c)
{
    if (c->freeing || c->flush_queued || c->state != C_UP)
        return;
    c->flush_queued = true;
    uv_prepare_start(&c->prepare, prepare_cb);
}

static void destroy(tide_rpc_client_t *c)
{
    if (c->session)
        nghttp2_session_del(c->session);
    tide_heap_free(&c->timers);
    tide_buf_free(&c->out);
    tide_buf_free(&c->wbuf);
    tide_buf_free(&c->plain);
    tide_tls_conn_free(c->tls);
    tide_tls_ctx_free(c->tls_ctx);
    free(c->hostport);
    free(c->host);
    free(c->port);
    free(c->auth);
    free(c);
}

static void handle_closed(uv_handle_t *h)
{
    tide_rpc_client_t *c = h->data;

    if (--c->open_handles == 0 && c->freeing)
        destroy(c);
}

static void close_tcp(tide_rpc_client_t *c)
{
    if (!c->tcp_open)
        return;
    c->tcp_open = false;
    uv_close((uv_handle_t *)&c->tcp, handle_closed);
}

static void fail_calls(tide_rpc_client_t *c, const char *text)
{
    while (!tide_list_empty(&c->calls)) {
        tide_rpc_client_call_t *call = tide_list_entry(c->calls.next, tide_rpc_client_call_t, link);
        complete(call, TIDE_GRPC_UNAVAILABLE, text, false);
    }
}

/* The connection failed, closed or was lost: fail every call, close the socket, tell the owner. */
static void conn_down(tide_rpc_client_t *c, int status, const char *text)
{
    if (c->state == C_DOWN || c->freeing)
        return;
    c->state = C_DOWN;
    if (text != c->down_text)
        snprintf(c->down_text, sizeof(c->down_text), "%s", text);
    ctimer_clear(c, &c->connect_timer);
    ctimer_clear(c, &c->ka_timer);
    close_tcp(c);
    fail_calls(c, c->down_text);
    if (!c->freeing && c->on_state)
        c->on_state(c, status < 0 ? status : -ECONNRESET, c->down_text, c->ud);
}

static void keepalive_fired(tide_rpc_client_t *c, ctimer_t *t, int64_t now)
{
    if (c->state != C_UP)
        return;
    if (c->ping_outstanding && c->last_read > c->ping_sent)
        c->ping_outstanding = false;
    if (c->ping_outstanding) {
        if (now - c->ping_sent >= c->keepalive_timeout_ms) {
            conn_down(c, -ETIMEDOUT, "keepalive PING not answered");
            return;
        }
        ctimer_set(c, t, c->ping_sent + c->keepalive_timeout_ms);
        return;
    }
    if (now - c->last_read >= c->keepalive_ms) {
        uint8_t opaque[8] = {'t', 'i', 'd', 'e', 'k', 'a', 0, 0};
        nghttp2_submit_ping(c->session, NGHTTP2_FLAG_NONE, opaque);
        c->ping_outstanding = true;
        c->ping_sent = now;
        schedule_flush(c);
        ctimer_set(c, t, now + c->keepalive_timeout_ms);
        return;
    }
    ctimer_set(c, t, c->last_read + c->keepalive_ms);
}

static void connect_timeout_fired(tide_rpc_client_t *c, ctimer_t *t, int64_t now)
{
    char text[160];

    (void)t;
    (void)now;
    if (c->state != C_CONNECTING)
        return;
    if (c->pending_err) {
        conn_down(c, c->pending_err, c->down_text);
        return;
    }
    if (c->tls)
        snprintf(text, sizeof(text), "TLS handshake with %s: no answer within %u ms", c->hostport,
                 c->connect_timeout_ms);
    else
        snprintf(text, sizeof(text), "connect to %s: timed out after %u ms", c->hostport,
                 c->connect_timeout_ms);
    conn_down(c, -ETIMEDOUT, text);
}

/* A failure found while starting to connect: report it from the loop, never inside a call into us.
 */
static void fail_later(tide_rpc_client_t *c, int status, const char *what, int uv_err)
{
    if (uv_err)
        snprintf(c->down_text, sizeof(c->down_text), "%s %s: %s", what, c->host,
                 uv_strerror(uv_err));
    else
        snprintf(c->down_text, sizeof(c->down_text), "%s", what);
    c->pending_err = status < 0 ? status : -EIO;
    ctimer_set(c, &c->connect_timer, now_ms(c));
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    tide_rpc_client_t *c = h->data;

    (void)suggested;
    *buf = uv_buf_init((char *)c->rbuf, sizeof(c->rbuf));
}

static void session_up(tide_rpc_client_t *c);

/* TLS: ciphertext in; the handshake's end brings the session up. Returns 0 when the plaintext (in
 * c->plain) is for nghttp2, -1 when the connection went down or is not up yet. */
static int read_tls(tide_rpc_client_t *c, const uint8_t *data, size_t len)
{
    bool was = tide_tls_conn_established(c->tls);
    tide_error_t err;
    char text[sizeof(c->down_text)];

    c->plain.len = 0;
    if (tide_tls_conn_feed(c->tls, data, len, &c->plain, &err) < 0) {
        /* Best effort: the alert tells the server why. */
        if (!c->writing && tide_tls_conn_take_output(c->tls, &c->wbuf) > 0) {
            uv_buf_t b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
            (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
            c->wbuf.len = 0;
        }
        snprintf(text, sizeof(text), "TLS %s %.80s failed: %.140s", was ? "with" : "handshake with", c->hostport,
                 err.text);
        conn_down(c, -EPROTO, text);
        return -1;
    }
    if (!was && tide_tls_conn_established(c->tls)) {
        session_up(c);
        if (!c->freeing && c->on_state)
            c->on_state(c, 0, "connected", c->ud);
        if (c->freeing || c->state != C_UP)
            return -1;
    }
    if (c->state != C_UP) {
        flush(c); /* the handshake's next records */
        return -1;
    }
    return 0;
}

static void read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    tide_rpc_client_t *c = stream->data;
    const uint8_t *data = (const uint8_t *)buf->base;
    size_t len = nread > 0 ? (size_t)nread : 0;

    if (c->freeing || c->state == C_DOWN || (c->state != C_UP && !c->tls))
        return;
    if (nread < 0) {
        char text[sizeof(c->down_text)];
        if (c->tls && c->state != C_UP)
            snprintf(text, sizeof(text), "TLS handshake with %s failed: %s (is it a TLS server?)", c->hostport,
                     nread == UV_EOF ? "the server closed the connection" : uv_strerror((int)nread));
        else if (nread == UV_EOF && !c->got_bytes)
            /* What a TLS server does to a plaintext client (docs/security.md). */
            snprintf(text, sizeof(text), "connection closed by the server before it answered");
        else
            snprintf(text, sizeof(text), "%s",
                     nread == UV_EOF ? "connection closed by the server" : uv_strerror((int)nread));
        conn_down(c, nread == UV_EOF ? -ECONNRESET : (int)nread, text);
        return;
    }
    if (nread == 0)
        return;
    c->last_read = now_ms(c);
    c->got_bytes = true;
    if (c->tls) {
        if (read_tls(c, data, len) < 0)
            return;
        data = c->plain.data;
        len = c->plain.len;
    }
    if (len > 0 && nghttp2_session_mem_recv(c->session, data, len) < 0) {
        if (!c->freeing)
            conn_down(c, -EPROTO, "HTTP/2 protocol error from the server");
        return;
    }
    if (!c->freeing)
        flush(c);
}

static void session_up(tide_rpc_client_t *c)
{
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    nghttp2_settings_entry iv[2];
    tide_list_t *pos, *tmp;

    if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
        abort();
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    if (nghttp2_session_client_new2(&c->session, cbs, c, opt) != 0)
        abort();
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    iv[0].settings_id = NGHTTP2_SETTINGS_ENABLE_PUSH;
    iv[0].value = 0;
    iv[1].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
    iv[1].value = c->stream_window;
    nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)c->conn_window);
    c->state = C_UP;
    c->last_read = now_ms(c);
    ctimer_clear(c, &c->connect_timer);
    ctimer_set(c, &c->ka_timer, c->last_read + c->keepalive_ms);
    tide_list_for_each_safe(pos, tmp, &c->calls)
    {
        tide_rpc_client_call_t *call = tide_list_entry(pos, tide_rpc_client_call_t, link);
        if (call->stream_id == 0 && !call->completed)
            submit(call);
    }
    schedule_flush(c);
}

static void connect_cb(uv_connect_t *req, int status)
{
    tide_rpc_client_t *c = req->data;
    char text[256];

    if (c->freeing || c->state != C_CONNECTING)
        return;
    if (status < 0) {
        snprintf(text, sizeof(text), "connect to %s: %s", c->hostport, uv_strerror(status));
        conn_down(c, status, text);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) != 0) {
        conn_down(c, -EIO, "cannot read from the socket");
        return;
    }
    if (c->tls_ctx) {
        tide_error_t err;
        if (tide_tls_conn_new(c->tls_ctx, c->host, &c->tls, &err) < 0 ||
            tide_tls_conn_start(c->tls, &err) < 0) {
            snprintf(text, sizeof(text), "TLS with %.80s: %.160s", c->hostport, err.text);
            conn_down(c, -EPROTO, text);
            return;
        }
        flush(c); /* the ClientHello; the session comes up when the handshake is done (read_tls) */
        return;
    }
    session_up(c);
    if (!c->freeing && c->on_state)
        c->on_state(c, 0, "connected", c->ud);
}

static void start_connect(tide_rpc_client_t *c, const struct sockaddr *sa)
{
    char text[160];
    int rc;

    uv_tcp_init(c->loop, &c->tcp);
    c->tcp.data = c;
    c->tcp_open = true;
    c->open_handles++;
    c->creq.data = c;
    rc = uv_tcp_connect(&c->creq, &c->tcp, sa, connect_cb);
    if (rc != 0) {
        snprintf(text, sizeof(text), "connect to %s: %s", c->hostport, uv_strerror(rc));
        fail_later(c, rc, text, 0);
    }
}

static void gai_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    tide_rpc_client_t *c = req->data;
    char text[160];

    c->gai_pending = false;
    if (--c->open_handles == 0 && c->freeing) {
        uv_freeaddrinfo(res);
        destroy(c);
        return;
    }
    if (c->freeing || c->state != C_CONNECTING) {
        uv_freeaddrinfo(res);
        return;
    }
    if (status < 0 || !res) {
        snprintf(text, sizeof(text), "resolve %s: %s", c->host, uv_strerror(status));
        uv_freeaddrinfo(res);
        conn_down(c, -EHOSTUNREACH, text);
        return;
    }
    start_connect(c, res->ai_addr);
    uv_freeaddrinfo(res);
}

static int split_hostport(const char *hp, char **host, char **port)
{
    const char *colon = strrchr(hp, ':');
    const char *h = hp;
    size_t n;
    char *end;
    long p;

    if (!colon || colon == hp)
        return -EINVAL;
    p = strtol(colon + 1, &end, 10);
    if (*end || p <= 0 || p > 65535)
        return -EINVAL;
    n = (size_t)(colon - hp);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n == 0)
        return -EINVAL;
    *host = tide_xstrndup(h, n);
    *port = tide_xstrdup(colon + 1);
    return 0;
}

int tide_rpc_client_new(struct uv_loop_s *loop, const tide_rpc_client_config_t *cfg,
                        tide_rpc_client_t **out, tide_error_t *err)
{
    tide_rpc_client_t *c;
    char *host = NULL, *port = NULL;
    union {
        struct sockaddr sa;
        struct sockaddr_in in4;
        struct sockaddr_in6 in6;
    } addr;
    uint64_t sw;

    *out = NULL;
    if (!loop || !cfg || !cfg->hostport || split_hostport(cfg->hostport, &host, &port) != 0) {
        tide_errprintf(err, "rpc client: bad address \"%s\" (want HOST:PORT)",
                       cfg && cfg->hostport ? cfg->hostport : "");
        return -EINVAL;
    }
    if (cfg->tls && tide_tls_ctx_is_server(cfg->tls)) {
        tide_errprintf(err, "rpc client: the TLS context is a server's");
        free(host);
        free(port);
        return -EINVAL;
    }
    c = tide_xcalloc(1, sizeof(*c));
    c->loop = loop;
    c->tls_ctx = tide_tls_ctx_ref(cfg->tls);
    c->hostport = tide_xstrdup(cfg->hostport);
    c->host = host;
    c->port = port;
    if (cfg->token && cfg->token[0])
        c->auth = tide_xasprintf("Bearer %s", cfg->token);
    c->max_message = cfg->max_message ? cfg->max_message : DEFAULT_MAX_MESSAGE;
    if (c->max_message > 0x7ffffff0u)
        c->max_message = 0x7ffffff0u;
    c->keepalive_ms = cfg->keepalive_ms ? cfg->keepalive_ms : 10000;
    c->keepalive_timeout_ms = cfg->keepalive_timeout_ms ? cfg->keepalive_timeout_ms : 20000;
    c->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : 5000;
    /* Same windows as the server: one whole response fits a stream's window, because its credit is
     * returned only after on_message ran. */
    sw = (uint64_t)c->max_message + 5;
    if (sw < STREAM_WINDOW_MIN)
        sw = STREAM_WINDOW_MIN;
    if (sw > 0x7fffffff)
        sw = 0x7fffffff;
    c->stream_window = (uint32_t)sw;
    c->conn_window =
        (uint32_t)(sw * 4 > CONN_WINDOW_MIN ? (sw * 4 > 0x7fffffff ? 0x7fffffff : sw * 4)
                                            : CONN_WINDOW_MIN);
    c->on_state = cfg->on_state;
    c->ud = cfg->ud;
    c->state = C_CONNECTING;
    tide_list_init(&c->calls);
    tide_list_init(&c->done);
    tide_heap_init(&c->timers);
    tide_heap_node_init(&c->connect_timer.node);
    c->connect_timer.fire = connect_timeout_fired;
    tide_heap_node_init(&c->ka_timer.node);
    c->ka_timer.fire = keepalive_fired;
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    uv_prepare_init(loop, &c->prepare);
    c->prepare.data = c;
    c->open_handles = 2;
    ctimer_set(c, &c->connect_timer, now_ms(c) + c->connect_timeout_ms);
    if (uv_ip4_addr(host, atoi(port), &addr.in4) == 0 ||
        uv_ip6_addr(host, atoi(port), &addr.in6) == 0) {
        start_connect(c, &addr.sa);
    } else {
        struct addrinfo hints;
        int rc;

        memset(&hints, 0, sizeof(hints));
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        c->gai.data = c;
        rc = uv_getaddrinfo(loop, &c->gai, gai_cb, host, port, &hints);
        if (rc == 0) {
            c->open_handles++;
            c->gai_pending = true;
        } else {
            fail_later(c, rc, "resolve", rc);
        }
    }
    *out = c;
    return 0;
}

void tide_rpc_client_free(tide_rpc_client_t *c)
{
    if (!c || c->freeing)
        return;
    /* From here on no new call starts and no callback re-enters the client. */
    c->freeing = true;
    fail_calls(c, "client closed");
    deliver_done(c);
    if (c->state == C_UP && c->session && !c->writing && c->tls) {
        /* GOAWAY and close_notify, encrypted, best effort. */
        nghttp2_session_terminate_session(c->session, NGHTTP2_NO_ERROR);
        c->out.len = 0;
        for (;;) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(c->session, &p);
            if (n <= 0)
                break;
            tide_buf_append(&c->out, p, (size_t)n);
        }
        (void)tide_tls_conn_write(c->tls, c->out.data, c->out.len, NULL);
        c->out.len = 0;
        tide_tls_conn_close_notify(c->tls);
        if (tide_tls_conn_take_output(c->tls, &c->wbuf) > 0) {
            uv_buf_t b = uv_buf_init((char *)c->wbuf.data, (unsigned)c->wbuf.len);
            (void)uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        }
        c->wbuf.len = 0;
    } else if (c->state == C_UP && c->session && !c->writing) {
        nghttp2_session_terminate_session(c->session, NGHTTP2_NO_ERROR);
        for (;;) {
            const uint8_t *p;
            ssize_t n = nghttp2_session_mem_send(c->session, &p);
            uv_buf_t b;
            if (n <= 0)
                break;
            b = uv_buf_init((char *)p, (unsigned)n);
            if (uv_try_write((uv_stream_t *)&c->tcp, &b, 1) != (int)n)
                break;
        }
    }
    if (c->gai_pending)
        uv_cancel((uv_req_t *)&c->gai);
    close_tcp(c);
    uv_close((uv_handle_t *)&c->timer, handle_closed);
    uv_close((uv_handle_t *)&c->prepare, handle_closed);
}

bool tide_rpc_client_connected(const tide_rpc_client_t *c)
{
    return c && c->state == C_UP && !c->goaway;
}

/* The HTTP/2 + gRPC server state machine on nghttp2 (see h2_server_conn.h, docs/transport.md). No
 * I/O: feed() runs nghttp2_session_mem_recv, pull() runs nghttp2_session_mem_send. Invariants: a
 * call lives exactly as long as its stream (freed in on_stream_close or with the connection); its
 * status is decided once (finished); stream-level window credit for a message is returned only
 * after the handler returned; every received DATA byte is credited at connection level by the end
 * of the callback that delivered it. */
#include "h2_server_conn.h"

#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_frame.h"
#include "grpc_percent.h"
#include "grpc_timeout.h"
#include "xmalloc.h"

struct tide__h2_conn {
    tide__srv_conn_t *conn;
    tide__srv_ctx_t *ctx;
    nghttp2_session *session;
    tide_list_t calls;
    size_t n_calls;
    bool ping_outstanding;
    int64_t ping_sent;
    bool goaway;
    bool deleting;
    size_t buffered; /* bytes of unfinished (or held unary) messages over all calls */
};

struct tide_rpc_call {
    tide__h2_conn_t *h2;
    int32_t stream_id;
    int method_idx; /* -1: unknown path (counted under "unknown") */
    const tide_rpc_method_t *method;
    tide_list_t link;
    tide_buf_t hdrs; /* request headers as "name\0value\0" pairs */
    size_t hdr_bytes;
    bool hdr_overflow;
    bool headers_done; /* the request HEADERS were processed */
    bool accepted;     /* validated: belongs to method */
    bool started;      /* a handler callback ran: on_close is owed */
    bool finished;     /* status decided */
    bool closed;       /* stream gone: no more work */
    bool resp_started; /* response HEADERS submitted with a data provider */
    bool have_unary;   /* the unary request, held in dec until END_STREAM */
    int http_status;   /* :status of a Trailers-Only answer */
    tide_grpc_code_t code;
    char code_str[4];
    tide_buf_t status_msg; /* grpc-message, percent-encoded */
    tide_grpc_decoder_t dec;
    const uint8_t *held_msg;
    size_t held_len;
    size_t held_bytes; /* received bytes of the current message not yet credited to the stream */
    size_t buffered;   /* this call's share of h2->buffered */
    tide__timer_t deadline;
    tide_buf_t out; /* framed response messages not yet taken by nghttp2 */
    size_t out_off;
    uint32_t n_sent;
    void *data;
    tide_rpc_identity_t identity; /* set before the handler runs */
    char note[96];                /* tide_rpc_call_set_note */
};

#define NV(n, v, vl)                                                                               \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, (vl), NGHTTP2_NV_FLAG_NONE                  \
    }

static void call_notify(tide_rpc_call_t *call)
{
    tide__srv_conn_notify(call->h2->conn);
}

/* --- headers --- */

const char *tide_rpc_call_header(const tide_rpc_call_t *call, const char *name)
{
    const char *p, *end;
    size_t nlen = strlen(name);

    if (!call || !call->hdrs.data)
        return NULL;
    p = (const char *)call->hdrs.data;
    end = p + call->hdrs.len;
    while (p < end) {
        size_t l = strlen(p);
        const char *v = p + l + 1;
        if (l == nlen && memcmp(p, name, l) == 0)
            return v;
        p = v + strlen(v) + 1;
    }
    return NULL;
}

static bool content_type_ok(const char *ct)
{
    static const char g[] = "application/grpc";

    if (!ct || strncmp(ct, g, sizeof(g) - 1) != 0)
        return false;
    ct += sizeof(g) - 1;
    return *ct == '\0' || *ct == '+' || *ct == ';';
}

/* Compares in time that depends only on the length of the expected token. */
static bool token_ok(const tide__srv_ctx_t *ctx, const char *auth)
{
    static const char bearer[] = "Bearer ";
    size_t alen, i;
    unsigned diff = 0;

    if (!auth || strncmp(auth, bearer, sizeof(bearer) - 1) != 0)
        return false;
    auth += sizeof(bearer) - 1;
    alen = strlen(auth);
    diff |= (unsigned)(alen != ctx->token_len);
    for (i = 0; i < ctx->token_len; i++)
        diff |= (unsigned char)ctx->token[i] ^ (unsigned char)(i < alen ? auth[i] : 0);
    return diff == 0;
}

/* --- response side --- */

static ssize_t read_response(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                             size_t length, uint32_t *flags, nghttp2_data_source *source, void *ud)
{
    tide_rpc_call_t *call = source->ptr;
    size_t avail = call->out.len - call->out_off;
    size_t n = avail < length ? avail : length;

    (void)ud;
    if (n) {
        memcpy(buf, call->out.data + call->out_off, n);
        call->out_off += n;
    }
    if (call->out_off == call->out.len) {
        call->out.len = 0;
        call->out_off = 0;
        if (call->finished) {
            nghttp2_nv nva[2] = {
                NV("grpc-status", call->code_str, strlen(call->code_str)),
                NV("grpc-message", call->status_msg.data, call->status_msg.len),
            };
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            if (nghttp2_submit_trailer(session, stream_id, nva, call->status_msg.len ? 2 : 1) == 0)
                *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            return (ssize_t)n;
        }
    }
    if (n == 0)
        return NGHTTP2_ERR_DEFERRED;
    return (ssize_t)n;
}

static int start_response(tide_rpc_call_t *call)
{
    nghttp2_session *s = call->h2->session;
    nghttp2_data_provider prd;
    nghttp2_nv nva[3] = {
        NV(":status", "200", 3),
        NV("content-type", "application/grpc", 16),
        NV("grpc-accept-encoding", "identity", 8),
    };

    if (call->resp_started) {
        nghttp2_session_resume_data(s, call->stream_id);
        return 0;
    }
    prd.source.ptr = call;
    prd.read_callback = read_response;
    if (nghttp2_submit_response(s, call->stream_id, nva, 3, &prd) != 0)
        return -EPIPE;
    call->resp_started = true;
    return 0;
}

static void trailers_only(tide_rpc_call_t *call)
{
    char status[4];
    nghttp2_nv nva[4] = {
        NV(":status", status, 0),
        NV("content-type", "application/grpc", 16),
        NV("grpc-status", call->code_str, strlen(call->code_str)),
        NV("grpc-message", call->status_msg.data, call->status_msg.len),
    };

    snprintf(status, sizeof(status), "%d", call->http_status);
    nva[0].valuelen = strlen(status);
    nghttp2_submit_response(call->h2->session, call->stream_id, nva, call->status_msg.len ? 4 : 3,
                            NULL);
}

void tide_rpc_call_finish(tide_rpc_call_t *call, tide_grpc_code_t code, const char *message)
{
    if (!call || call->finished)
        return;
    call->finished = true;
    if ((int)code < 0 || (int)code >= TIDE_GRPC_CODE_COUNT)
        code = TIDE_GRPC_UNKNOWN;
    call->code = code;
    snprintf(call->code_str, sizeof(call->code_str), "%d", (int)code);
    call->status_msg.len = 0;
    if (message)
        tide_grpc_percent_encode(&call->status_msg, message, strlen(message));
    tide__srv_timer_clear(call->h2->ctx, &call->deadline);
    if (call->closed || call->h2->conn->dead)
        return;
    if (call->resp_started)
        nghttp2_session_resume_data(call->h2->session, call->stream_id);
    else
        trailers_only(call);
    call_notify(call);
}

bool tide_rpc_call_finished(const tide_rpc_call_t *call)
{
    return !call || call->finished || call->closed;
}

size_t tide_rpc_call_queued_bytes(const tide_rpc_call_t *call)
{
    return call ? call->out.len - call->out_off : 0;
}

/* Checks whether one more message may be queued; compacts the queue when mostly consumed. */
static int can_send(tide_rpc_call_t *call, size_t len)
{
    if (!call || call->finished || call->closed || call->h2->conn->dead)
        return -EPIPE;
    if (call->method &&
        (call->method->kind == TIDE_RPC_UNARY || call->method->kind == TIDE_RPC_CLIENT_STREAMING) &&
        call->n_sent > 0)
        return -EINVAL;
    if (tide_rpc_call_queued_bytes(call) > call->h2->ctx->max_queued)
        return -ENOBUFS;
    if (len > UINT32_MAX - TIDE_GRPC_PREFIX_LEN)
        return -EMSGSIZE;
    if (call->out_off > (64u << 10) && call->out_off * 2 > call->out.len) {
        tide_buf_consume(&call->out, call->out_off);
        call->out_off = 0;
    }
    return 0;
}

static int queued(tide_rpc_call_t *call)
{
    call->n_sent++;
    if (start_response(call) != 0)
        return -EPIPE;
    call_notify(call);
    return 0;
}

int tide_rpc_call_send(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    int rc = can_send(call, len);

    if (rc)
        return rc;
    tide_grpc_frame_append(&call->out, data, (uint32_t)len);
    return queued(call);
}

int tide_rpc_call_send_pb(tide_rpc_call_t *call, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *p;
    int rc = can_send(call, len);

    if (rc)
        return rc;
    p = tide_buf_reserve(&call->out, TIDE_GRPC_PREFIX_LEN + len);
    tide_grpc_frame_prefix(p, (uint32_t)len);
    protobuf_c_message_pack(msg, p + TIDE_GRPC_PREFIX_LEN);
    call->out.len += TIDE_GRPC_PREFIX_LEN + len;
    return queued(call);
}

const tide_rpc_method_t *tide_rpc_call_method(const tide_rpc_call_t *call)
{
    return call->method;
}

void tide_rpc_call_set_note(tide_rpc_call_t *call, const char *note)
{
    snprintf(call->note, sizeof(call->note), "%s", note ? note : "");
}

const char *tide_rpc_call_note(const tide_rpc_call_t *call)
{
    return call->note;
}

const tide_rpc_identity_t *tide_rpc_call_identity(const tide_rpc_call_t *call)
{
    return &call->identity;
}

const char *tide_rpc_call_peer(const tide_rpc_call_t *call)
{
    return call->h2->conn->peer;
}

const char *tide_rpc_call_peer_cn(const tide_rpc_call_t *call)
{
    return call->h2->conn->peer_cn;
}

uint64_t tide_rpc_call_conn_id(const tide_rpc_call_t *call)
{
    return call->h2->conn->id;
}

void tide_rpc_call_set_data(tide_rpc_call_t *call, void *data)
{
    call->data = data;
}

void *tide_rpc_call_data(const tide_rpc_call_t *call)
{
    return call->data;
}

void *tide_rpc_call_server_data(const tide_rpc_call_t *call)
{
    return call->h2->ctx->ud;
}

/* --- call lifecycle --- */

static void deadline_fired(tide__timer_t *t, int64_t now)
{
    tide_rpc_call_t *call = tide_container_of(t, tide_rpc_call_t, deadline);

    (void)now;
    tide_rpc_call_finish(call, TIDE_GRPC_DEADLINE_EXCEEDED, "deadline exceeded");
}

static tide_rpc_call_t *call_new(tide__h2_conn_t *h, int32_t stream_id)
{
    tide_rpc_call_t *call = tide_xcalloc(1, sizeof(*call));

    call->h2 = h;
    call->stream_id = stream_id;
    call->method_idx = -1;
    call->http_status = 200;
    tide_grpc_decoder_init(&call->dec, h->ctx->max_message);
    tide__srv_timer_init(&call->deadline, deadline_fired);
    tide_list_push_back(&h->calls, &call->link);
    h->n_calls++;
    return call;
}

static void unbuffer(tide_rpc_call_t *call)
{
    call->h2->buffered -= call->buffered;
    call->buffered = 0;
}

/* The stream is gone: count, tell the handler, free. */
static void call_close(tide_rpc_call_t *call)
{
    tide__h2_conn_t *h = call->h2;

    call->closed = true;
    unbuffer(call);
    tide__srv_timer_clear(h->ctx, &call->deadline);
    if (call->headers_done)
        tide__srv_ctx_count(h->ctx, call->method_idx,
                            call->finished ? call->code : TIDE_GRPC_CANCELLED);
    if (call->headers_done && call->method && h->ctx->on_call_done) {
        tide_buf_t msg = TIDE_BUF_INIT;
        if (call->finished)
            tide_grpc_percent_decode(&msg, (const char *)call->status_msg.data, call->status_msg.len);
        h->ctx->on_call_done(call, call->finished ? call->code : TIDE_GRPC_CANCELLED, tide_buf_cstr(&msg));
        tide_buf_free(&msg);
    }
    if (call->started && call->method->on_close)
        call->method->on_close(call);
    tide_list_remove(&call->link);
    h->n_calls--;
    tide_buf_free(&call->hdrs);
    tide_buf_free(&call->status_msg);
    tide_buf_free(&call->out);
    tide_grpc_decoder_free(&call->dec);
    free(call);
}

static void reject(tide_rpc_call_t *call, int http_status, tide_grpc_code_t code, const char *msg)
{
    call->http_status = http_status;
    tide_rpc_call_finish(call, code, msg);
}

static void on_request_headers(tide__h2_conn_t *h, tide_rpc_call_t *call)
{
    tide__srv_ctx_t *ctx = h->ctx;
    const char *method = tide_rpc_call_header(call, ":method");
    const char *path = tide_rpc_call_header(call, ":path");
    const char *timeout;
    char text[160];
    int idx;

    call->headers_done = true;
    if (call->hdr_overflow) {
        snprintf(text, sizeof(text), "request headers exceed %u bytes", TIDE_RPC_MAX_HEADER_LIST);
        reject(call, 200, TIDE_GRPC_RESOURCE_EXHAUSTED, text);
        return;
    }
    idx = path ? tide__srv_ctx_find_method(ctx, path, strlen(path)) : -1;
    call->method_idx = idx;
    if (!method || strcmp(method, "POST") != 0) {
        reject(call, 405, TIDE_GRPC_INTERNAL, "gRPC requires POST");
        return;
    }
    if (!content_type_ok(tide_rpc_call_header(call, "content-type"))) {
        reject(call, 415, TIDE_GRPC_INTERNAL, "content-type must be application/grpc");
        return;
    }
    if (idx < 0) {
        snprintf(text, sizeof(text), "unknown method %.120s", path ? path : "(none)");
        reject(call, 200, TIDE_GRPC_UNIMPLEMENTED, text);
        return;
    }
    call->method = &ctx->methods[idx];
    if (ctx->authenticate && !call->method->no_auth) {
        tide_grpc_code_t code;
        text[0] = '\0';
        code = ctx->authenticate(ctx->auth_ud, tide_rpc_call_header(call, "authorization"), path,
                                 &call->identity, text, sizeof(text));
        call->identity.name[sizeof(call->identity.name) - 1] = '\0';
        if (code != TIDE_GRPC_OK) {
            reject(call, 200, code, text[0] ? text : "not authenticated");
            return;
        }
    } else if (ctx->token && !call->method->no_auth &&
               !token_ok(ctx, tide_rpc_call_header(call, "authorization"))) {
        reject(call, 200, TIDE_GRPC_UNAUTHENTICATED, "missing or invalid bearer token");
        return;
    }
    timeout = tide_rpc_call_header(call, "grpc-timeout");
    if (timeout) {
        int64_t ms;
        if (tide_grpc_timeout_parse(timeout, strlen(timeout), &ms) != 0) {
            reject(call, 200, TIDE_GRPC_INTERNAL, "malformed grpc-timeout");
            return;
        }
        tide__srv_timer_set(ctx, &call->deadline, tide__srv_ctx_now(ctx) + ms);
    }
    call->accepted = true;
}

static void dispatch(tide__h2_conn_t *h, tide_rpc_call_t *call, const uint8_t *msg, size_t len,
                     size_t bytes)
{
    unbuffer(call);
    call->started = true;
    call->method->on_message(call, msg, len);
    /* The handler has seen the message: now the sender may send as much again. */
    nghttp2_session_consume_stream(h->session, call->stream_id, bytes);
}

static void on_remote_close(tide__h2_conn_t *h, tide_rpc_call_t *call)
{
    tide_rpc_kind_t kind;

    if (call->finished || !call->accepted)
        return;
    if (call->have_unary) {
        call->have_unary = false;
        dispatch(h, call, call->held_msg, call->held_len, call->held_bytes);
        call->held_bytes = 0;
        return;
    }
    if (tide_grpc_decoder_partial(&call->dec)) {
        tide_rpc_call_finish(call, TIDE_GRPC_INTERNAL, "stream ended inside a message");
        return;
    }
    kind = call->method->kind;
    if (kind == TIDE_RPC_UNARY || kind == TIDE_RPC_SERVER_STREAMING) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             "unary call without a request message");
    } else if (call->method->on_half_close) {
        call->started = true;
        call->method->on_half_close(call);
    } else if (!call->started) {
        tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    }
}

/* --- nghttp2 callbacks --- */

static tide_rpc_call_t *stream_call(tide__h2_conn_t *h, int32_t stream_id)
{
    if (h->deleting)
        return NULL;
    return nghttp2_session_get_stream_user_data(h->session, stream_id);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    tide__h2_conn_t *h = ud;
    tide_rpc_call_t *call;

    if (h->deleting || frame->hd.type != NGHTTP2_HEADERS ||
        frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    call = call_new(h, frame->hd.stream_id);
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call);
    return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    tide_rpc_call_t *call = stream_call(ud, frame->hd.stream_id);

    (void)session;
    (void)flags;
    if (!call || frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers from the client carry nothing we use */
    call->hdr_bytes += namelen + valuelen + 32;
    if (call->hdr_bytes > TIDE_RPC_MAX_HEADER_LIST) {
        call->hdr_overflow = true;
        return 0;
    }
    /* nghttp2's HTTP messaging checks guarantee no NUL inside names or values. */
    tide_buf_append(&call->hdrs, name, namelen);
    tide_buf_append(&call->hdrs, "", 1);
    tide_buf_append(&call->hdrs, value, valuelen);
    tide_buf_append(&call->hdrs, "", 1);
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    tide__h2_conn_t *h = ud;
    tide_rpc_call_t *call;

    (void)session;
    if (h->deleting)
        return 0;
    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        call = stream_call(h, frame->hd.stream_id);
        if (!call)
            return 0;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST)
            on_request_headers(h, call);
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
            on_remote_close(h, call);
        break;
    case NGHTTP2_DATA:
        call = stream_call(h, frame->hd.stream_id);
        if (call && (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
            on_remote_close(h, call);
        break;
    case NGHTTP2_PING:
        if (frame->hd.flags & NGHTTP2_FLAG_ACK)
            h->ping_outstanding = false;
        break;
    default:
        break;
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *ud)
{
    tide__h2_conn_t *h = ud;
    tide_rpc_call_t *call = stream_call(h, stream_id);
    size_t off = 0;

    (void)flags;
    while (call && call->accepted && !call->finished && off < len) {
        const uint8_t *msg = NULL;
        size_t used = 0, mlen = 0;
        int rc;

        if (call->have_unary) {
            tide_rpc_call_finish(call, TIDE_GRPC_INTERNAL, "unary call with more than one request");
            break;
        }
        rc = tide_grpc_decoder_feed(&call->dec, data + off, len - off, &used, &msg, &mlen);
        off += used;
        call->held_bytes += used;
        if (rc == TIDE_GRPC_DEC_MORE ||
            (rc == TIDE_GRPC_DEC_MESSAGE && (call->method->kind == TIDE_RPC_UNARY ||
                                             call->method->kind == TIDE_RPC_SERVER_STREAMING))) {
            /* Bytes the transport keeps past this callback: bounded per connection. */
            call->buffered += used;
            h->buffered += used;
            if (h->buffered > h->ctx->max_buffered) {
                tide_rpc_call_finish(call, TIDE_GRPC_RESOURCE_EXHAUSTED,
                                     "too much unfinished request data on this connection");
                unbuffer(call);
                break;
            }
        }
        if (rc == TIDE_GRPC_DEC_MORE)
            break;
        if (rc < 0) {
            char text[128];
            if (rc == -EMSGSIZE) {
                snprintf(text, sizeof(text), "message of %u bytes exceeds the limit of %zu",
                         (unsigned)call->dec.need, h->ctx->max_message);
                tide_rpc_call_finish(call, TIDE_GRPC_RESOURCE_EXHAUSTED, text);
            } else if (rc == -EPROTONOSUPPORT) {
                tide_rpc_call_finish(call, TIDE_GRPC_UNIMPLEMENTED,
                                     "compressed messages are not supported");
            } else {
                tide_rpc_call_finish(call, TIDE_GRPC_INTERNAL, "malformed message prefix");
            }
            break;
        }
        if (call->method->kind == TIDE_RPC_UNARY ||
            call->method->kind == TIDE_RPC_SERVER_STREAMING) {
            call->have_unary = true;
            call->held_msg = msg;
            call->held_len = mlen;
            continue;
        }
        {
            size_t bytes = call->held_bytes;
            call->held_bytes = 0;
            dispatch(h, call, msg, mlen, bytes);
        }
    }
    /* Connection-level credit for every byte of this chunk: messages were handled above, partial
     * ones are bounded by their stream's window, and holding connection credit for them could
     * starve other streams. A finished or rejected call gets no more stream credit: its stream is
     * being reset. */
    nghttp2_session_consume_connection(session, len);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *ud)
{
    tide__h2_conn_t *h = ud;
    tide_rpc_call_t *call = stream_call(h, stream_id);

    (void)error_code;
    if (!call)
        return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    call_close(call);
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *ud)
{
    tide__h2_conn_t *h = ud;
    int32_t id = frame->hd.stream_id;

    if (h->deleting || id == 0 || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    /* Our response is complete but the client is still sending: ask it to stop (RFC 9113 8.1). */
    if (nghttp2_session_get_stream_remote_close(session, id) == 0)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
    return 0;
}

/* --- connection --- */

tide__h2_conn_t *tide__h2_new(tide__srv_conn_t *conn)
{
    tide__h2_conn_t *h = tide_xcalloc(1, sizeof(*h));
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    nghttp2_settings_entry iv[3];

    h->conn = conn;
    h->ctx = conn->ctx;
    tide_list_init(&h->calls);
    if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
        abort(); /* out of memory */
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_option_set_no_closed_streams(opt, 1);
    if (nghttp2_session_server_new2(&h->session, cbs, h, opt) != 0)
        abort();
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);

    iv[0].settings_id = NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS;
    iv[0].value = h->ctx->max_streams;
    iv[1].settings_id = NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE;
    iv[1].value = h->ctx->stream_window;
    iv[2].settings_id = NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE;
    iv[2].value = TIDE_RPC_MAX_HEADER_LIST;
    nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, iv, 3);
    nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)h->ctx->conn_window);
    return h;
}

void tide__h2_free(tide__h2_conn_t *h)
{
    if (!h)
        return;
    while (!tide_list_empty(&h->calls)) {
        tide_rpc_call_t *call = tide_list_entry(h->calls.next, tide_rpc_call_t, link);
        nghttp2_session_set_stream_user_data(h->session, call->stream_id, NULL);
        call_close(call);
    }
    h->deleting = true;
    nghttp2_session_del(h->session);
    free(h);
}

int tide__h2_feed(tide__h2_conn_t *h, const uint8_t *data, size_t len)
{
    ssize_t n = nghttp2_session_mem_recv(h->session, data, len);

    if (n < 0) {
        /* Bad preface, flood or a library failure: nghttp2 cannot go on with this peer. */
        tide__srv_conn_close(h->conn, TIDE__CONN_ABORT);
        return -EPROTO;
    }
    tide__srv_conn_notify(h->conn);
    return 0;
}

void tide__h2_pull(tide__h2_conn_t *h)
{
    tide__srv_conn_t *c = h->conn;

    while (c->out.len < TIDE_RPC_OUT_HIGH) {
        const uint8_t *p;
        ssize_t n = nghttp2_session_mem_send(h->session, &p);
        if (n < 0) {
            tide__srv_conn_close(c, TIDE__CONN_ABORT);
            return;
        }
        if (n == 0)
            break;
        tide_buf_append(&c->out, p, (size_t)n);
    }
    if (!nghttp2_session_want_read(h->session) && !nghttp2_session_want_write(h->session))
        tide__srv_conn_close(c, TIDE__CONN_CLOSE_AFTER_FLUSH);
}

void tide__h2_shutdown(tide__h2_conn_t *h)
{
    if (h->goaway)
        return;
    h->goaway = true;
    nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(h->session), NGHTTP2_NO_ERROR,
                          NULL, 0);
    tide__srv_conn_notify(h->conn);
}

int64_t tide__h2_tick(tide__h2_conn_t *h, int64_t now)
{
    tide__srv_ctx_t *ctx = h->ctx;
    tide__srv_conn_t *c = h->conn;

    if (h->ping_outstanding && c->last_read > h->ping_sent)
        h->ping_outstanding = false; /* the peer spoke: it is alive */
    if (h->ping_outstanding) {
        if (now - h->ping_sent >= ctx->keepalive_timeout_ms) {
            tide__srv_conn_close(c, TIDE__CONN_ABORT);
            return -1;
        }
        return h->ping_sent + ctx->keepalive_timeout_ms;
    }
    if (now - c->last_read >= ctx->keepalive_ms) {
        uint8_t opaque[8] = {'t', 'i', 'd', 'e', 'k', 'a', 0, 0};
        nghttp2_submit_ping(h->session, NGHTTP2_FLAG_NONE, opaque);
        h->ping_outstanding = true;
        h->ping_sent = now;
        tide__srv_conn_notify(c);
        return now + ctx->keepalive_timeout_ms;
    }
    return c->last_read + ctx->keepalive_ms;
}

size_t tide__h2_open_calls(const tide__h2_conn_t *h)
{
    return h->n_calls;
}

/* gRPC client over one HTTP/2 connection (h2c with prior knowledge, or TLS with ALPN h2) with nghttp2 on a libuv loop: unary,
 * server-streaming and bidirectional calls multiplexed on that connection. The owner reconnects by making
 * a new client. Everything runs on the loop thread.
 *
 * Safe from inside on_message, on_status and on_state: starting calls, send/close_send/cancel on any
 * call, and tide_rpc_client_free (open calls then get on_status inline; memory goes once every handle
 * has closed). No callback ever runs inside tide_rpc_client_new, call_start or cancel. */
#ifndef TIDE_RPC_CLIENT_H
#define TIDE_RPC_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "error.h"
#include "grpc_status.h"
#include "tls.h"

struct uv_loop_s;

typedef struct tide_rpc_client tide_rpc_client_t;
typedef struct tide_rpc_client_call tide_rpc_client_call_t;

typedef struct tide_rpc_client_config {
    const char *hostport;          /* "HOST:PORT"; copied */
    const char *token;             /* sent as "authorization: Bearer TOKEN" when set; copied */
    size_t max_message;            /* 0: 4 MiB; larger responses fail the call with RESOURCE_EXHAUSTED */
    uint32_t keepalive_ms;         /* 0: 10000 */
    uint32_t keepalive_timeout_ms; /* 0: 20000 */
    uint32_t connect_timeout_ms;   /* 0: 5000 */
    /* Optional: the connection is up (status 0) or failed / closed / lost (status -errno, with a text).
     * Called with 0 at most once, then once with < 0 at the end unless tide_rpc_client_free came first. */
    void (*on_state)(tide_rpc_client_t *c, int status, const char *text, void *ud);
    void *ud;
    tide_tls_ctx_t *tls;           /* a client context (tide_tls_ctx_new_client): TLS with ALPN h2, the
                                      server's certificate checked against its CA and the host of
                                      hostport; NULL: plaintext (h2c). The client keeps a reference. */
} tide_rpc_client_config_t;

typedef struct tide_rpc_client_call_cbs {
    /* One response message (borrowed for the callback only). */
    void (*on_message)(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud);
    /* The call ended: the server's status, or a local one (UNAVAILABLE when the connection failed,
     * DEADLINE_EXCEEDED, CANCELLED after tide_rpc_client_call_cancel, RESOURCE_EXHAUSTED, INTERNAL on
     * a protocol error). Exactly once per started call; the call is freed after it returns. */
    void (*on_status)(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message,
                      void *ud);
} tide_rpc_client_call_cbs_t;

/* Starts connecting. Calls may be started at once; they are sent when the connection is up. */
int tide_rpc_client_new(struct uv_loop_s *loop, const tide_rpc_client_config_t *cfg,
                        tide_rpc_client_t **out, tide_error_t *err);
/* Fails every open call (on_status UNAVAILABLE "client closed"), sends GOAWAY, closes the socket and frees
 * the client once its handles are closed. on_state is not called. NULL is fine. */
void tide_rpc_client_free(tide_rpc_client_t *c);
bool tide_rpc_client_connected(const tide_rpc_client_t *c);

/* Opens a call to path ("/tide.v1.JobService/GetJob"). timeout_ms > 0 sends grpc-timeout and fails the
 * call locally with DEADLINE_EXCEEDED when it passes. cbs is copied. Returns 0 or -errno (then no callback
 * fires). */
int tide_rpc_client_call_start(tide_rpc_client_t *c, const char *path, int64_t timeout_ms,
                               const tide_rpc_client_call_cbs_t *cbs, void *ud,
                               tide_rpc_client_call_t **out);
/* Queues one request message (copied) / packs msg. Returns 0, -EPIPE after close_send or once the
 * call's status is decided (its on_status may still be on the way). */
int tide_rpc_client_call_send(tide_rpc_client_call_t *call, const uint8_t *data, size_t len);
int tide_rpc_client_call_send_pb(tide_rpc_client_call_t *call, const ProtobufCMessage *msg);
/* Half-closes (END_STREAM after the queued messages). */
int tide_rpc_client_call_close_send(tide_rpc_client_call_t *call);
/* Resets the stream; on_status(CANCELLED) fires from the loop, not inline. */
void tide_rpc_client_call_cancel(tide_rpc_client_call_t *call);
size_t tide_rpc_client_call_queued_bytes(const tide_rpc_client_call_t *call);

/* Convenience for unary calls: start, send req, close_send. */
int tide_rpc_client_unary(tide_rpc_client_t *c, const char *path, const ProtobufCMessage *req,
                          int64_t timeout_ms, const tide_rpc_client_call_cbs_t *cbs, void *ud,
                          tide_rpc_client_call_t **out);

#endif

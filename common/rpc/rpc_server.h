/* gRPC server over HTTP/2 (h2c, prior knowledge) with nghttp2 on a libuv loop, plus HTTP/1.1 GET on the
 * same port (the first bytes of a connection tell which). Handlers are registered in a static method
 * table; each request message is delivered whole; window credit is returned only after the handler has
 * seen the message, so a slow server pushes back on its senders. Many streams share a connection.
 *
 * Threading: everything runs on the loop thread. Ownership: the server owns calls; a call pointer stays
 * valid until its method's on_close callback has returned. */
#ifndef TIDE_RPC_SERVER_H
#define TIDE_RPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "buf.h"
#include "error.h"
#include "grpc_status.h"
#include "tls.h"

struct uv_loop_s;

typedef struct tide_rpc_server tide_rpc_server_t;
typedef struct tide_rpc_call tide_rpc_call_t;

typedef enum tide_rpc_kind {
    TIDE_RPC_UNARY = 0,
    TIDE_RPC_SERVER_STREAMING = 1,
    TIDE_RPC_CLIENT_STREAMING = 2,
    TIDE_RPC_BIDI_STREAMING = 3,
} tide_rpc_kind_t;

typedef struct tide_rpc_method {
    const char *path;     /* "/tide.v1.JobService/SubmitJob" */
    tide_rpc_kind_t kind;
    bool no_auth;         /* true: callable without the bearer token (health checks) */
    /* One complete request message (gRPC framing removed; data borrowed for the call only). For UNARY and
     * SERVER_STREAMING it is called exactly once; a second message or a half-close without one is
     * answered by the transport (INTERNAL / INVALID_ARGUMENT) without calling the handler. */
    void (*on_message)(tide_rpc_call_t *call, const uint8_t *data, size_t len);
    /* Optional: the client half-closed its side (streaming kinds). */
    void (*on_half_close)(tide_rpc_call_t *call);
    /* Optional: the call is over (finished by the handler, reset by the peer, deadline exceeded,
     * connection lost, or server shut down). Called once for every call whose on_message or
     * on_half_close ran; the call is freed after it returns. A streaming call that half-closes without
     * any message and has no on_half_close is finished with OK by the transport. */
    void (*on_close)(tide_rpc_call_t *call);
} tide_rpc_method_t;

/* Who made a call, as the authenticate hook decided (docs/security.md). The transport only stores it. */
typedef struct tide_rpc_identity {
    char name[64]; /* "" when the call was not authenticated (no auth, or a no_auth method) */
    int role;      /* the application's value; 0 when not authenticated */
} tide_rpc_identity_t;

/* Authenticates one call before its handler runs: authorization is the request's "authorization"
 * header (NULL when absent), path the method's. Returns TIDE_GRPC_OK with *id filled, or the code to
 * refuse the call with (UNAUTHENTICATED, PERMISSION_DENIED ...) and msg (NUL-terminated, at most
 * msg_size bytes) as its grpc-message; a refused call keeps whatever *id the hook filled (who was refused,
 * for on_call_done; *id starts zeroed). Runs on the loop thread; must not block. */
typedef tide_grpc_code_t (*tide_rpc_auth_fn)(void *ud, const char *authorization, const char *path,
                                             tide_rpc_identity_t *id, char *msg, size_t msg_size);

/* HTTP/1.1 handler for non-gRPC requests on the same port. Fills body and *content_type (a static
 * string; NULL means text/plain) and returns the HTTP status. path is the request target without its
 * query string. Only GET reaches the handler (other methods get 405); request bodies are not read. */
typedef int (*tide_http_handler_fn)(const char *method, const char *path, tide_buf_t *body,
                                    const char **content_type, void *ud);

typedef struct tide_rpc_server_config {
    const tide_rpc_method_t *methods; /* borrowed; must outlive the server */
    size_t n_methods;
    const char *token;                /* bearer token; NULL or "" disables auth (tests only). Copied. */
    tide_rpc_auth_fn authenticate;    /* when set, decides every call but no_auth methods (token unused) */
    void *auth_ud;
    /* Optional: every call to a known method is over (once, as the stream closes): its status, or
     * CANCELLED when the client left before one was decided; message decoded, "" when none. For audit
     * logs: identity, note and peer are still readable. */
    void (*on_call_done)(const tide_rpc_call_t *call, tide_grpc_code_t code, const char *message);
    size_t max_message;               /* bytes; 0: 4 MiB. Larger messages: RESOURCE_EXHAUSTED */
    uint32_t max_concurrent_streams;  /* 0: 10000 (SETTINGS_MAX_CONCURRENT_STREAMS) */
    uint32_t keepalive_ms;            /* PING interval on idle connections; 0: 10000 */
    uint32_t keepalive_timeout_ms;    /* close a connection whose PING is not acked; 0: 20000 */
    size_t max_queued_bytes;          /* per call output bound for tide_rpc_call_send; 0: 16 MiB */
    tide_http_handler_fn http_handler; /* NULL: every HTTP/1 request gets 404 */
    void *ud;                          /* handed back by tide_rpc_call_server_data and http_handler */
    tide_tls_ctx_t *tls;               /* a server context (tide_tls_ctx_new_server): every connection is
                                          TLS, plaintext ones are closed; NULL: plaintext (h2c). The
                                          server keeps a reference. */
} tide_rpc_server_config_t;

/* Creates a server on loop; config is copied (methods borrowed). Returns 0 or -errno. */
int tide_rpc_server_new(struct uv_loop_s *loop, const tide_rpc_server_config_t *cfg,
                        tide_rpc_server_t **out, tide_error_t *err);
/* Listens on "HOST:PORT" (PORT 0 picks a free one). Returns 0 or -errno with err naming the address. */
int tide_rpc_server_listen(tide_rpc_server_t *s, const char *hostport, tide_error_t *err);
/* The bound port after listen. */
int tide_rpc_server_port(const tide_rpc_server_t *s);
/* Sends GOAWAY on every connection and stops accepting; calls in flight may finish. */
void tide_rpc_server_shutdown(tide_rpc_server_t *s);
/* Closes every connection (on_close fires for open calls) and the listener, then frees the server once
 * its handles are closed; close_cb (optional) runs then. NULL is fine. Not from inside a method
 * callback (use tide_rpc_server_shutdown there and free from the loop). */
void tide_rpc_server_free(tide_rpc_server_t *s, void (*close_cb)(void *ud), void *ud);

/* Connections closed because they did not start with a TLS record on a TLS server. */
uint64_t tide_rpc_server_plaintext_refused(const tide_rpc_server_t *s);

/* Per-method counts of finished calls by status code, for /metrics. Calls to unknown paths are
 * counted under path "unknown". fn is called once per (path, code) with a non-zero count. */
void tide_rpc_server_foreach_stat(const tide_rpc_server_t *s,
                                  void (*fn)(const char *path, tide_grpc_code_t code, uint64_t count,
                                             void *ud),
                                  void *ud);

/* --- calls --- */

/* Queues one response message (copied). Returns 0, -EPIPE when the call is finished or gone, -EINVAL for
 * a second message on a unary call, -ENOBUFS when more than max_queued_bytes are already queued. */
int tide_rpc_call_send(tide_rpc_call_t *call, const uint8_t *data, size_t len);
/* Packs msg straight into the output queue (no intermediate copy). Same returns as tide_rpc_call_send. */
int tide_rpc_call_send_pb(tide_rpc_call_t *call, const ProtobufCMessage *msg);
/* Ends the call with a status (trailers; Trailers-Only when nothing was sent). message may be NULL.
 * Idempotent: later calls are ignored. on_close follows once the stream is closed. */
void tide_rpc_call_finish(tide_rpc_call_t *call, tide_grpc_code_t code, const char *message);
bool tide_rpc_call_finished(const tide_rpc_call_t *call);
/* Bytes queued for this call and not yet written to the socket. */
size_t tide_rpc_call_queued_bytes(const tide_rpc_call_t *call);

const tide_rpc_method_t *tide_rpc_call_method(const tide_rpc_call_t *call);
/* A request header's value (lower-case name), or NULL. Borrowed for the life of the call. */
const char *tide_rpc_call_header(const tide_rpc_call_t *call, const char *name);
/* "127.0.0.1:43210" */
const char *tide_rpc_call_peer(const tide_rpc_call_t *call);
/* The subject CN of the client certificate that verified on this call's TLS connection; "" when none
 * (plaintext, no certificate). Borrowed for the life of the call. */
const char *tide_rpc_call_peer_cn(const tide_rpc_call_t *call);
/* An id for the underlying connection, unique for the server's life (several streams share one). */
uint64_t tide_rpc_call_conn_id(const tide_rpc_call_t *call);
/* A short note the handler leaves for on_call_done (what the call was about: "job 5"); copied, at most
 * 95 bytes kept. tide_rpc_call_note: "" when none. */
void tide_rpc_call_set_note(tide_rpc_call_t *call, const char *note);
const char *tide_rpc_call_note(const tide_rpc_call_t *call);
/* Who made the call (the authenticate hook's answer); name "" when not authenticated. Never NULL. */
const tide_rpc_identity_t *tide_rpc_call_identity(const tide_rpc_call_t *call);
void tide_rpc_call_set_data(tide_rpc_call_t *call, void *data);
void *tide_rpc_call_data(const tide_rpc_call_t *call);
/* The server config's ud. */
void *tide_rpc_call_server_data(const tide_rpc_call_t *call);

#endif

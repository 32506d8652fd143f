/* Internal to tide_rpc: the socket-free core of the server. A context (config, method table, stats,
 * one deadline heap for every timer) and connections that take bytes in (tide__srv_conn_feed) and
 * hand bytes out (tide__srv_conn_take_output). rpc_server.c is the libuv shell around it; unit
 * tests and the fuzz target drive it in memory. Nothing here includes uv.h. */
#ifndef TIDE_RPC_SERVER_CORE_H
#define TIDE_RPC_SERVER_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "heap.h"
#include "list.h"
#include "rpc_server.h"
#include "sniff.h"

/* Limits and timeouts (docs/transport.md). */
#define TIDE_RPC_DEFAULT_MAX_MESSAGE          (4u << 20)
#define TIDE_RPC_DEFAULT_MAX_STREAMS          10000u
#define TIDE_RPC_DEFAULT_KEEPALIVE_MS         10000u
#define TIDE_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS 20000u
#define TIDE_RPC_DEFAULT_MAX_QUEUED           (16u << 20)
#define TIDE_RPC_IDLE_MS                      10000u /* sniffing / HTTP/1 request deadline */
#define TIDE_RPC_OUT_HIGH                                                                          \
    (1u << 20) /* stop pulling frames / parsing past this much queued output */
#define TIDE_RPC_MAX_HEADER_LIST                                                                   \
    (16u << 10) /* request header bytes (RFC 7541 size: name+value+32) */
#define TIDE_RPC_CONN_WINDOW_MIN   (16u << 20) /* connection-level receive window */
#define TIDE_RPC_STREAM_WINDOW_MIN (64u << 10)
#define TIDE_RPC_BUFFERED_MIN      (256u << 10) /* max_buffered is max(this, 8 x (max_message + 5)) */

/* A timer in the context's heap; fire runs once when now >= key (re-arm by setting it again). */
typedef struct tide__timer {
    tide_heap_node_t node;
    void (*fire)(struct tide__timer *t, int64_t now);
} tide__timer_t;

typedef struct tide__srv_ctx {
    const tide_rpc_method_t *methods; /* borrowed */
    size_t n_methods;
    char *token; /* owned; NULL: no auth */
    size_t token_len;
    tide_rpc_auth_fn authenticate; /* set: decides instead of token */
    void *auth_ud;
    void (*on_call_done)(const tide_rpc_call_t *call, tide_grpc_code_t code, const char *message);
    size_t max_message;
    size_t max_queued;
    uint32_t max_streams;
    uint32_t keepalive_ms;
    uint32_t keepalive_timeout_ms;
    uint32_t idle_ms;
    uint32_t stream_window; /* SETTINGS_INITIAL_WINDOW_SIZE we announce */
    uint32_t conn_window;   /* connection-level receive window */
    size_t max_buffered;    /* bytes of unfinished request messages one connection may hold */
    tide_http_handler_fn http_handler;
    void *ud;
    uint64_t (*stats)[TIDE_GRPC_CODE_COUNT]; /* n_methods + 1 rows; the last is "unknown" */
    uint64_t next_conn_id;
    tide_heap_t timers;
    /* Supplied by the shell (or a test): the clock and a hook run when the earliest timer changed.
     */
    int64_t (*now)(void *clock_ud);
    void (*timers_changed)(void *clock_ud);
    void *clock_ud;
} tide__srv_ctx_t;

/* Copies cfg (token duplicated, methods borrowed); fills defaults. now is required. */
void tide__srv_ctx_init(tide__srv_ctx_t *ctx, const tide_rpc_server_config_t *cfg,
                        int64_t (*now)(void *), void (*timers_changed)(void *), void *clock_ud);
void tide__srv_ctx_fini(tide__srv_ctx_t *ctx);
int64_t tide__srv_ctx_now(const tide__srv_ctx_t *ctx);
/* Index of the method for path, or -1. */
int tide__srv_ctx_find_method(const tide__srv_ctx_t *ctx, const char *path, size_t len);
/* Counts one finished call; idx -1 means "unknown". */
void tide__srv_ctx_count(tide__srv_ctx_t *ctx, int idx, tide_grpc_code_t code);
void tide__srv_timer_init(tide__timer_t *t, void (*fire)(tide__timer_t *, int64_t));
void tide__srv_timer_set(tide__srv_ctx_t *ctx, tide__timer_t *t, int64_t at);
void tide__srv_timer_clear(tide__srv_ctx_t *ctx, tide__timer_t *t);
/* Fires every timer due at now. */
void tide__srv_ctx_run_timers(tide__srv_ctx_t *ctx, int64_t now);
/* The earliest timer's time, or -1 when there is none. */
int64_t tide__srv_ctx_next_timer(const tide__srv_ctx_t *ctx);

typedef enum tide__conn_kind {
    TIDE__CONN_SNIFF = 0,
    TIDE__CONN_H2,
    TIDE__CONN_HTTP1,
} tide__conn_kind_t;

typedef enum tide__conn_state {
    TIDE__CONN_OPEN = 0,
    TIDE__CONN_CLOSE_AFTER_FLUSH, /* finished cleanly: write what is queued, then close */
    TIDE__CONN_ABORT, /* close now (what is queued is written only if it goes at once) */
} tide__conn_state_t;

struct tide__h2_conn;
struct tide__http1_conn;

typedef struct tide__srv_conn {
    tide__srv_ctx_t *ctx;
    uint64_t id;
    char peer[64];
    char peer_cn[128]; /* verified client certificate's CN (TLS, set by the shell); "" when none */
    tide__conn_kind_t kind;
    tide__conn_state_t state;
    bool dead;                          /* being freed: calls refuse new work */
    uint8_t sniff[TIDE_H2_PREFACE_LEN]; /* bytes seen while sniffing */
    size_t sniff_len;
    struct tide__h2_conn *h2;
    struct tide__http1_conn *h1;
    tide_buf_t out;     /* bytes for the socket, in order */
    tide__timer_t tick; /* idle deadline / keepalive */
    int64_t last_read;
    int64_t idle_base; /* HTTP/1: when the last request was answered (or the connection opened) */
    uint64_t answered; /* HTTP/1 requests answered, as last seen */
    /* The shell's hook: output or state may have changed, flush soon. Never does work inline. */
    void (*notify)(void *shell);
    void *shell;
} tide__srv_conn_t;

/* A connection from peer ("ip:port", copied). notify may be NULL. Caller frees with
 * tide__srv_conn_free. */
tide__srv_conn_t *tide__srv_conn_new(tide__srv_ctx_t *ctx, const char *peer, void (*notify)(void *),
                                     void *shell);
/* Closes every call (on_close runs for calls whose handler ran) and frees. NULL is fine. Must not
 * be called from inside this connection's own callbacks. */
void tide__srv_conn_free(tide__srv_conn_t *c);
/* Bytes from the peer. Returns 0, or -EPROTO when the connection must be closed (state says how).
 */
int tide__srv_conn_feed(tide__srv_conn_t *c, const uint8_t *data, size_t len);
/* The peer closed its sending side. */
void tide__srv_conn_eof(tide__srv_conn_t *c);
/* Moves pending work into the output queue (frames from nghttp2, stalled HTTP/1 requests) until
 * TIDE_RPC_OUT_HIGH bytes are queued. */
void tide__srv_conn_pull(tide__srv_conn_t *c);
/* Swaps the output queue with dst, which must be empty: afterwards dst holds the bytes to write and
 * the connection keeps dst's old storage (so both buffers stay warm). Returns the number of bytes
 * taken. */
size_t tide__srv_conn_take_output(tide__srv_conn_t *c, tide_buf_t *dst);
/* False while the output queue is over its bound or HTTP/1 input is stalled: the shell stops
 * reading. */
bool tide__srv_conn_wants_read(const tide__srv_conn_t *c);
/* GOAWAY (HTTP/2), close after the current response (HTTP/1), close (still sniffing). */
void tide__srv_conn_shutdown(tide__srv_conn_t *c);
/* Marks the connection for closing and tells the shell. */
void tide__srv_conn_close(tide__srv_conn_t *c, tide__conn_state_t how);
void tide__srv_conn_notify(tide__srv_conn_t *c);

#endif

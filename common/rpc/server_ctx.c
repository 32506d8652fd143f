/* The server context shared by all connections: config with defaults, method lookup, per-method
 * status counters (fixed arrays: counting never allocates) and one timer heap for call deadlines,
 * idle deadlines and keepalives, so the shell needs a single uv timer. Invariant: timers_changed
 * runs whenever the earliest deadline changes. */
#include <stdlib.h>
#include <string.h>

#include "server_core.h"
#include "xmalloc.h"

static uint32_t clamp_window(uint64_t v)
{
    return v > 0x7fffffffu ? 0x7fffffffu : (uint32_t)v;
}

void tide__srv_ctx_init(tide__srv_ctx_t *ctx, const tide_rpc_server_config_t *cfg,
                        int64_t (*now)(void *), void (*timers_changed)(void *), void *clock_ud)
{
    uint64_t sw;

    memset(ctx, 0, sizeof(*ctx));
    ctx->methods = cfg->methods;
    ctx->n_methods = cfg->n_methods;
    if (cfg->token && cfg->token[0]) {
        ctx->token = tide_xstrdup(cfg->token);
        ctx->token_len = strlen(ctx->token);
    }
    ctx->authenticate = cfg->authenticate;
    ctx->auth_ud = cfg->auth_ud;
    ctx->on_call_done = cfg->on_call_done;
    ctx->max_message = cfg->max_message ? cfg->max_message : TIDE_RPC_DEFAULT_MAX_MESSAGE;
    if (ctx->max_message > 0x7ffffff0u)
        ctx->max_message = 0x7ffffff0u;
    ctx->max_queued = cfg->max_queued_bytes ? cfg->max_queued_bytes : TIDE_RPC_DEFAULT_MAX_QUEUED;
    ctx->max_streams =
        cfg->max_concurrent_streams ? cfg->max_concurrent_streams : TIDE_RPC_DEFAULT_MAX_STREAMS;
    ctx->keepalive_ms = cfg->keepalive_ms ? cfg->keepalive_ms : TIDE_RPC_DEFAULT_KEEPALIVE_MS;
    ctx->keepalive_timeout_ms = cfg->keepalive_timeout_ms ? cfg->keepalive_timeout_ms
                                                          : TIDE_RPC_DEFAULT_KEEPALIVE_TIMEOUT_MS;
    ctx->idle_ms = TIDE_RPC_IDLE_MS;
    /* A stream window that holds one whole message: credit for a message is returned only after its
     * handler ran, so a smaller window could never complete a large message. */
    sw = (uint64_t)ctx->max_message + 5;
    if (sw < TIDE_RPC_STREAM_WINDOW_MIN)
        sw = TIDE_RPC_STREAM_WINDOW_MIN;
    ctx->stream_window = clamp_window(sw);
    ctx->conn_window =
        clamp_window(sw * 4 > TIDE_RPC_CONN_WINDOW_MIN ? sw * 4 : TIDE_RPC_CONN_WINDOW_MIN);
    /* Connection credit for a partial message is returned at once (holding it could deadlock
     * streams against each other), so the memory a connection can pin in unfinished messages is
     * bounded here instead: past it, the stream that asks for more is failed. */
    ctx->max_buffered = 8 * ((size_t)ctx->max_message + 5);
    if (ctx->max_buffered < TIDE_RPC_BUFFERED_MIN)
        ctx->max_buffered = TIDE_RPC_BUFFERED_MIN;
    ctx->http_handler = cfg->http_handler;
    ctx->ud = cfg->ud;
    ctx->stats = tide_xcalloc(ctx->n_methods + 1, sizeof(*ctx->stats));
    ctx->next_conn_id = 1;
    tide_heap_init(&ctx->timers);
    ctx->now = now;
    ctx->timers_changed = timers_changed;
    ctx->clock_ud = clock_ud;
}

void tide__srv_ctx_fini(tide__srv_ctx_t *ctx)
{
    if (!ctx)
        return;
    free(ctx->token);
    free(ctx->stats);
    tide_heap_free(&ctx->timers);
    memset(ctx, 0, sizeof(*ctx));
}

int64_t tide__srv_ctx_now(const tide__srv_ctx_t *ctx)
{
    return ctx->now(ctx->clock_ud);
}

int tide__srv_ctx_find_method(const tide__srv_ctx_t *ctx, const char *path, size_t len)
{
    size_t i;

    for (i = 0; i < ctx->n_methods; i++) {
        const char *p = ctx->methods[i].path;
        if (p && strlen(p) == len && memcmp(p, path, len) == 0)
            return (int)i;
    }
    return -1;
}

void tide__srv_ctx_count(tide__srv_ctx_t *ctx, int idx, tide_grpc_code_t code)
{
    size_t row = idx < 0 ? ctx->n_methods : (size_t)idx;

    if ((int)code < 0 || (int)code >= TIDE_GRPC_CODE_COUNT)
        code = TIDE_GRPC_UNKNOWN;
    ctx->stats[row][code]++;
}

void tide__srv_timer_init(tide__timer_t *t, void (*fire)(tide__timer_t *, int64_t))
{
    tide_heap_node_init(&t->node);
    t->fire = fire;
}

void tide__srv_timer_set(tide__srv_ctx_t *ctx, tide__timer_t *t, int64_t at)
{
    const tide_heap_node_t *top = tide_heap_peek(&ctx->timers);
    int64_t old_key = top ? top->key : -1;

    tide_heap_set(&ctx->timers, &t->node, at);
    top = tide_heap_peek(&ctx->timers);
    if (top->key != old_key && ctx->timers_changed)
        ctx->timers_changed(ctx->clock_ud);
}

void tide__srv_timer_clear(tide__srv_ctx_t *ctx, tide__timer_t *t)
{
    const tide_heap_node_t *top;
    int64_t old_key;

    if (!tide_heap_node_queued(&t->node))
        return;
    top = tide_heap_peek(&ctx->timers);
    old_key = top->key;
    tide_heap_remove(&ctx->timers, &t->node);
    top = tide_heap_peek(&ctx->timers);
    if ((!top || top->key != old_key) && ctx->timers_changed)
        ctx->timers_changed(ctx->clock_ud);
}

void tide__srv_ctx_run_timers(tide__srv_ctx_t *ctx, int64_t now)
{
    tide_heap_node_t *n;

    while ((n = tide_heap_peek(&ctx->timers)) && n->key <= now) {
        tide__timer_t *t = tide_container_of(n, tide__timer_t, node);
        tide_heap_remove(&ctx->timers, n);
        t->fire(t, now);
    }
    if (ctx->timers_changed)
        ctx->timers_changed(ctx->clock_ud);
}

int64_t tide__srv_ctx_next_timer(const tide__srv_ctx_t *ctx)
{
    const tide_heap_node_t *n = tide_heap_peek(&ctx->timers);
    return n ? n->key : -1;
}

/* libFuzzer target: arbitrary bytes into one in-memory server connection (sniffing, then the HTTP/2
 * + gRPC path on nghttp2 or the HTTP/1 path on http-parser), fed in chunks while a fake clock
 * advances so deadlines, keepalives and idle timeouts fire too. Input: byte 0 picks the chunk size,
 * the rest is what the peer sends. Nothing may crash, leak or read out of bounds. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server_core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void echo(tide_rpc_call_t *call, const uint8_t *msg, size_t len)
{
    tide_rpc_call_send(call, msg, len);
    if (len > 0 && msg[0] == 'F')
        tide_rpc_call_finish(call, TIDE_GRPC_NOT_FOUND, "not found: \xff%");
    else if (len > 0 && msg[0] != 'H') /* 'H': hold the call open */
        tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void stream(tide_rpc_call_t *call, const uint8_t *msg, size_t len)
{
    size_t i;
    for (i = 0; i < len && i < 8; i++)
        tide_rpc_call_send(call, msg, i);
    (void)tide_rpc_call_header(call, "x-tide-worker");
    tide_rpc_call_finish(call, TIDE_GRPC_OK, "done");
}

static void bidi(tide_rpc_call_t *call, const uint8_t *msg, size_t len)
{
    tide_rpc_call_send(call, msg, len);
}

static void half_close(tide_rpc_call_t *call)
{
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static const tide_rpc_method_t methods[] = {
    {"/f.S/Unary", TIDE_RPC_UNARY, false, echo, NULL, NULL},
    {"/f.S/Open", TIDE_RPC_UNARY, true, echo, NULL, NULL},
    {"/f.S/Stream", TIDE_RPC_SERVER_STREAMING, true, stream, NULL, NULL},
    {"/f.S/Bidi", TIDE_RPC_BIDI_STREAMING, true, bidi, half_close, NULL},
    {"/f.S/Upload", TIDE_RPC_CLIENT_STREAMING, true, bidi, NULL, NULL},
};

static int http_handler(const char *method, const char *path, tide_buf_t *body,
                        const char **content_type, void *ud)
{
    (void)method;
    (void)content_type;
    (void)ud;
    if (strcmp(path, "/healthz") == 0) {
        tide_buf_append_str(body, "ok\n");
        return 200;
    }
    return 404;
}

static int64_t clock_ms;

static int64_t fake_now(void *ud)
{
    (void)ud;
    return clock_ms;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t chunks[8] = {1, 3, 9, 24, 100, 1000, 16384, 1 << 20};
    tide_rpc_server_config_t cfg = {
        .methods = methods,
        .n_methods = sizeof(methods) / sizeof(methods[0]),
        .token = "fuzz",
        .max_message = 4096,
        .max_concurrent_streams = 64,
        .max_queued_bytes = 1 << 16,
        .http_handler = http_handler,
    };
    tide__srv_ctx_t ctx;
    tide__srv_conn_t *conn;
    tide_buf_t out = TIDE_BUF_INIT;
    size_t chunk, off = 1;

    if (size == 0)
        return 0;
    chunk = chunks[data[0] & 7];
    clock_ms = 1000;
    tide__srv_ctx_init(&ctx, &cfg, fake_now, NULL, NULL);
    conn = tide__srv_conn_new(&ctx, "fuzz:1", NULL, NULL);
    while (off < size && conn->state != TIDE__CONN_ABORT) {
        size_t n = size - off < chunk ? size - off : chunk;
        tide__srv_conn_feed(conn, data + off, n);
        off += n;
        tide__srv_conn_pull(conn);
        out.len = 0;
        tide__srv_conn_take_output(conn, &out);
        /* Time moves on between reads: deadlines, keepalive PINGs and idle limits get their turn.
         */
        clock_ms += (data[0] >> 3) * 50;
        tide__srv_ctx_run_timers(&ctx, clock_ms);
    }
    tide__srv_conn_shutdown(conn);
    tide__srv_conn_pull(conn);
    out.len = 0;
    tide__srv_conn_take_output(conn, &out);
    tide__srv_conn_free(conn);
    tide__srv_ctx_fini(&ctx);
    tide_buf_free(&out);
    return 0;
}

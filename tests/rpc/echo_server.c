/* Test-only gRPC server on tide_rpc for the stock-client interop test: the tide.test.Echo service
 * plus grpc.health.v1.Health/Check (no auth). Prints its port on stdout, serves until
 * SIGTERM/SIGINT, then shuts down cleanly (GOAWAY, all handles closed). Usage: echo_server
 * [--listen HOST:PORT] [--token T] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "echo.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "rpc_server.h"
#include "xmalloc.h"

static uv_loop_t *loop;
static tide_rpc_server_t *server;
static uv_signal_t sig_term, sig_int;

static Tide__Test__EchoRequest *parse(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Tide__Test__EchoRequest *req = tide__test__echo_request__unpack(NULL, len, data);
    if (!req)
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "cannot parse EchoRequest");
    return req;
}

static void reply(tide_rpc_call_t *call, const char *text, int index, ProtobufCBinaryData payload)
{
    Tide__Test__EchoReply rep = TIDE__TEST__ECHO_REPLY__INIT;
    rep.text = (char *)text;
    rep.index = index;
    rep.payload = payload;
    tide_rpc_call_send_pb(call, &rep.base);
}

static void unary(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Tide__Test__EchoRequest *req = parse(call, data, len);
    if (!req)
        return;
    reply(call, req->text, 0, req->payload);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    tide__test__echo_request__free_unpacked(req, NULL);
}

static void server_stream(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Tide__Test__EchoRequest *req = parse(call, data, len);
    ProtobufCBinaryData none = {0, NULL};
    int i;
    if (!req)
        return;
    for (i = 0; i < req->count; i++)
        reply(call, req->text, i, none);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    tide__test__echo_request__free_unpacked(req, NULL);
}

/* ClientStream: counts the requests, answers once at half-close. */
static void client_stream(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Tide__Test__EchoRequest *req = parse(call, data, len);
    if (!req)
        return;
    tide_rpc_call_set_data(call, (void *)((uintptr_t)tide_rpc_call_data(call) + 1));
    tide__test__echo_request__free_unpacked(req, NULL);
}

static void client_stream_done(tide_rpc_call_t *call)
{
    char text[32];
    ProtobufCBinaryData none = {0, NULL};
    snprintf(text, sizeof(text), "%lu", (unsigned long)(uintptr_t)tide_rpc_call_data(call));
    reply(call, text, 0, none);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void bidi(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Tide__Test__EchoRequest *req = parse(call, data, len);
    uintptr_t n = (uintptr_t)tide_rpc_call_data(call);
    if (!req)
        return;
    reply(call, req->text, (int)n, req->payload);
    tide_rpc_call_set_data(call, (void *)(n + 1));
    tide__test__echo_request__free_unpacked(req, NULL);
}

static void bidi_done(tide_rpc_call_t *call)
{
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void fail(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Tide__Test__EchoRequest *req = parse(call, data, len);
    if (!req)
        return;
    tide_rpc_call_finish(call, (tide_grpc_code_t)req->code, req->text);
    tide__test__echo_request__free_unpacked(req, NULL);
}

/* Sleep: replies from a timer; the timer goes away with the call if the client gives up first. */
typedef struct sleeper {
    uv_timer_t timer;
    tide_rpc_call_t *call;
} sleeper_t;

static void sleeper_closed(uv_handle_t *h)
{
    free(h->data);
}

static void sleeper_fired(uv_timer_t *t)
{
    sleeper_t *s = t->data;
    ProtobufCBinaryData none = {0, NULL};
    if (s->call) {
        reply(s->call, "slept", 0, none);
        tide_rpc_call_finish(s->call, TIDE_GRPC_OK, NULL);
    }
}

static void sleep_msg(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Tide__Test__EchoRequest *req = parse(call, data, len);
    sleeper_t *s;
    if (!req)
        return;
    s = tide_xcalloc(1, sizeof(*s));
    s->call = call;
    uv_timer_init(loop, &s->timer);
    s->timer.data = s;
    uv_timer_start(&s->timer, sleeper_fired, req->delay_ms > 0 ? (uint64_t)req->delay_ms : 0, 0);
    tide_rpc_call_set_data(call, s);
    tide__test__echo_request__free_unpacked(req, NULL);
}

static void sleep_close(tide_rpc_call_t *call)
{
    sleeper_t *s = tide_rpc_call_data(call);
    if (s) {
        s->call = NULL;
        uv_close((uv_handle_t *)&s->timer, sleeper_closed);
    }
}

static void health_check(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    Grpc__Health__V1__HealthCheckRequest *req =
        grpc__health__v1__health_check_request__unpack(NULL, len, data);
    Grpc__Health__V1__HealthCheckResponse rep = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "cannot parse HealthCheckRequest");
        return;
    }
    rep.status = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    tide_rpc_call_send_pb(call, &rep.base);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
    grpc__health__v1__health_check_request__free_unpacked(req, NULL);
}

static const tide_rpc_method_t methods[] = {
    {"/tide.test.Echo/Unary", TIDE_RPC_UNARY, false, unary, NULL, NULL},
    {"/tide.test.Echo/ServerStream", TIDE_RPC_SERVER_STREAMING, false, server_stream, NULL, NULL},
    {"/tide.test.Echo/ClientStream", TIDE_RPC_CLIENT_STREAMING, false, client_stream,
     client_stream_done, NULL},
    {"/tide.test.Echo/BidiStream", TIDE_RPC_BIDI_STREAMING, false, bidi, bidi_done, NULL},
    {"/tide.test.Echo/Fail", TIDE_RPC_UNARY, false, fail, NULL, NULL},
    {"/tide.test.Echo/Sleep", TIDE_RPC_UNARY, false, sleep_msg, NULL, sleep_close},
    {"/grpc.health.v1.Health/Check", TIDE_RPC_UNARY, true, health_check, NULL, NULL},
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

static void on_signal(uv_signal_t *s, int signum)
{
    (void)s;
    (void)signum;
    tide_rpc_server_shutdown(server);
    tide_rpc_server_free(server, NULL, NULL);
    server = NULL;
    uv_close((uv_handle_t *)&sig_term, NULL);
    uv_close((uv_handle_t *)&sig_int, NULL);
}

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:0", *token = NULL;
    tide_rpc_server_config_t cfg = {
        .methods = methods,
        .n_methods = sizeof(methods) / sizeof(methods[0]),
        .http_handler = http_handler,
    };
    tide_error_t err;
    int i, rc;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--listen") == 0)
            listen = argv[i + 1];
        else if (strcmp(argv[i], "--token") == 0)
            token = argv[i + 1];
    }
    cfg.token = token;
    loop = uv_default_loop();
    if (tide_rpc_server_new(loop, &cfg, &server, &err) != 0 ||
        tide_rpc_server_listen(server, listen, &err) != 0) {
        fprintf(stderr, "echo_server: %s\n", err.text);
        return 1;
    }
    printf("%d\n", tide_rpc_server_port(server));
    fflush(stdout);
    uv_signal_init(loop, &sig_term);
    uv_signal_start(&sig_term, on_signal, SIGTERM);
    uv_signal_init(loop, &sig_int);
    uv_signal_start(&sig_int, on_signal, SIGINT);
    uv_run(loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(loop);
    if (rc != 0)
        fprintf(stderr, "echo_server: loop not empty at exit\n");
    return rc != 0;
}

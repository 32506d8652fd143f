/* Loop tests: the libuv server and client over 127.0.0.1 port 0. Every test waits on conditions
 * with a deadline (never a fixed sleep), closes every handle and ends with uv_loop_close() == 0. */
#include <errno.h>
#include <nghttp2/nghttp2.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include <cmocka.h>

#include "grpc_frame.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc_status.h"
#include "rpc_client.h"
#include "rpc_server.h"

#define WAIT_MS 10000

typedef struct fixture {
    uv_loop_t loop;
    tide_rpc_server_t *srv;
    tide_rpc_client_t *cli;
    char addr[64];
    int cli_state_up, cli_state_down;
    int last_down;
    bool srv_closed;
} fixture_t;

static fixture_t the_fixture;
#define F the_fixture

/* ---- server side ---- */

static int srv_on_close, srv_messages;
static tide_rpc_call_t *held;

static char last_peer[64];
static uint64_t last_conn_id;

static void unary(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    srv_messages++;
    snprintf(last_peer, sizeof(last_peer), "%s", tide_rpc_call_peer(call));
    last_conn_id = tide_rpc_call_conn_id(call);
    assert_ptr_equal(tide_rpc_call_server_data(call), &the_fixture);
    tide_rpc_call_send(call, data, len);
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void bidi(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    srv_messages++;
    assert_int_equal(tide_rpc_call_send(call, data, len), 0);
}

static void bidi_half(tide_rpc_call_t *call)
{
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void stream(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    uint32_t i, n = 0;
    srv_messages++;
    if (len == 4)
        n = (uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 | (uint32_t)data[2] << 8 | data[3];
    for (i = 0; i < n; i++) {
        char m[32];
        int l = snprintf(m, sizeof(m), "item %u", i);
        assert_int_equal(tide_rpc_call_send(call, (const uint8_t *)m, (size_t)l), 0);
    }
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void hold(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    (void)data;
    (void)len;
    srv_messages++;
    held = call;
}

static void on_close(tide_rpc_call_t *call)
{
    srv_on_close++;
    if (call == held)
        held = NULL;
}

static const tide_rpc_method_t methods[] = {
    {"/t.Echo/Unary", TIDE_RPC_UNARY, false, unary, NULL, on_close},
    {"/t.Echo/Bidi", TIDE_RPC_BIDI_STREAMING, false, bidi, bidi_half, on_close},
    {"/t.Echo/Stream", TIDE_RPC_SERVER_STREAMING, false, stream, NULL, on_close},
    {"/t.Echo/Hold", TIDE_RPC_UNARY, false, hold, NULL, on_close},
    {"/t.Echo/Open", TIDE_RPC_UNARY, true, unary, NULL, on_close},
};

static int http_handler(const char *method, const char *path, tide_buf_t *body,
                        const char **content_type, void *ud)
{
    (void)method;
    (void)ud;
    (void)content_type;
    if (strcmp(path, "/healthz") == 0) {
        tide_buf_append_str(body, "ok\n");
        return 200;
    }
    return 404;
}

static void cli_state(tide_rpc_client_t *c, int status, const char *text, void *ud)
{
    fixture_t *f = ud;
    (void)c;
    (void)text;
    if (status == 0) {
        f->cli_state_up++;
    } else {
        f->cli_state_down++;
        f->last_down = status;
    }
}

static void start_server(fixture_t *f, size_t max_message)
{
    tide_rpc_server_config_t cfg = {
        .methods = methods,
        .n_methods = sizeof(methods) / sizeof(methods[0]),
        .token = "tok",
        .max_message = max_message,
        .http_handler = http_handler,
        .ud = f,
    };
    tide_error_t err;

    assert_int_equal(tide_rpc_server_new(&f->loop, &cfg, &f->srv, &err), 0);
    assert_int_equal(tide_rpc_server_listen(f->srv, "127.0.0.1:0", &err), 0);
    assert_true(tide_rpc_server_port(f->srv) > 0);
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", tide_rpc_server_port(f->srv));
}

static tide_rpc_client_t *make_client(fixture_t *f, const char *token, size_t max_message)
{
    tide_rpc_client_config_t cfg = {
        .hostport = f->addr,
        .token = token,
        .max_message = max_message,
        .on_state = cli_state,
        .ud = f,
    };
    tide_rpc_client_t *c;
    tide_error_t err;

    assert_int_equal(tide_rpc_client_new(&f->loop, &cfg, &c, &err), 0);
    return c;
}

static int setup(void **state)
{
    (void)state;
    memset(&F, 0, sizeof(F));
    srv_on_close = srv_messages = 0;
    held = NULL;
    assert_int_equal(uv_loop_init(&F.loop), 0);
    start_server(&F, 0);
    F.cli = make_client(&F, "tok", 0);
    return 0;
}

static void srv_freed(void *ud)
{
    ((fixture_t *)ud)->srv_closed = true;
}

static void walk_cb(uv_handle_t *h, void *arg)
{
    (void)arg;
    fprintf(stderr, "handle left open: type %d active %d\n", h->type, uv_is_active(h));
}

static int teardown(void **state)
{
    (void)state;
    tide_rpc_client_free(F.cli);
    tide_rpc_server_free(F.srv, srv_freed, &F);
    uv_run(&F.loop, UV_RUN_DEFAULT);
    assert_true(F.srv_closed);
    if (uv_loop_close(&F.loop) != 0) {
        uv_walk(&F.loop, walk_cb, NULL);
        fail_msg("uv_loop_close != 0");
    }
    return 0;
}

/* Runs the loop until cond(arg) holds or WAIT_MS pass (a watchdog, not a sleep). The condition is
 * checked before every poll (a prepare handle), so one satisfied by a timer callback does not leave
 * the loop blocked in poll until some unrelated event. */
typedef struct waiter {
    bool (*cond)(void *);
    void *arg;
    bool expired;
} waiter_t;

static void on_watchdog(uv_timer_t *t)
{
    ((waiter_t *)t->data)->expired = true;
    uv_stop(t->loop);
}

static void on_check(uv_prepare_t *p)
{
    waiter_t *w = p->data;
    if (w->cond(w->arg))
        uv_stop(p->loop);
}

static bool run_until(bool (*cond)(void *), void *arg)
{
    uv_timer_t dog;
    uv_prepare_t check;
    waiter_t w = {cond, arg, false};

    uv_timer_init(&F.loop, &dog);
    dog.data = &w;
    uv_timer_start(&dog, on_watchdog, WAIT_MS, 0);
    uv_prepare_init(&F.loop, &check);
    check.data = &w;
    uv_prepare_start(&check, on_check);
    while (!cond(arg) && !w.expired)
        uv_run(&F.loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)&dog, NULL);
    uv_close((uv_handle_t *)&check, NULL);
    uv_run(&F.loop, UV_RUN_NOWAIT);
    return cond(arg);
}

static bool int_reaches(void *arg)
{
    int **pp = arg;
    return *pp[0] >= *pp[1];
}

static void wait_int(int *v, int target)
{
    int *pp[2] = {v, &target};
    if (!run_until(int_reaches, pp))
        fail_msg("timed out waiting for a value to reach %d (now %d)", target, *v);
}

/* ---- client calls ---- */

typedef struct result {
    int n_msgs;
    int done;
    tide_grpc_code_t code;
    char message[256];
    tide_buf_t last;
    bool cancel_after_first;
    bool free_client_on_message;
    bool free_client_on_status;
    bool in_cancel;
    bool status_inside_cancel;
} result_t;

static void r_msg(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    result_t *r = ud;
    r->n_msgs++;
    r->last.len = 0;
    tide_buf_append(&r->last, data, len);
    if (r->free_client_on_message) {
        tide_rpc_client_free(F.cli);
        F.cli = NULL;
        assert_int_equal(r->done, 1); /* its on_status ran inside the free */
    }
    if (r->cancel_after_first && r->n_msgs == 1) {
        r->in_cancel = true;
        tide_rpc_client_call_cancel(call);
        r->in_cancel = false;
    }
}

static void r_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *msg, void *ud)
{
    result_t *r = ud;
    (void)call;
    r->done++;
    r->code = code;
    snprintf(r->message, sizeof(r->message), "%s", msg ? msg : "");
    if (r->in_cancel)
        r->status_inside_cancel = true;
    if (r->free_client_on_status) {
        tide_rpc_client_free(F.cli);
        F.cli = NULL;
    }
}

static const tide_rpc_client_call_cbs_t cbs = {r_msg, r_status};

static tide_rpc_client_call_t *call_bytes(tide_rpc_client_t *c, const char *path, const void *data,
                                          size_t len, int64_t timeout_ms, result_t *r)
{
    tide_rpc_client_call_t *call;
    assert_int_equal(tide_rpc_client_call_start(c, path, timeout_ms, &cbs, r, &call), 0);
    /* -EPIPE when the call has already failed (its status is on the way). */
    int rc = tide_rpc_client_call_send(call, data, len);
    assert_true(rc == 0 || rc == -EPIPE);
    rc = tide_rpc_client_call_close_send(call);
    assert_true(rc == 0 || rc == -EPIPE);
    return call;
}

typedef struct statrow {
    char text[1024];
} statrow_t;

static void collect_stat(const char *path, tide_grpc_code_t code, uint64_t count, void *ud)
{
    statrow_t *r = ud;
    size_t n = strlen(r->text);
    snprintf(r->text + n, sizeof(r->text) - n, "%s %s %llu;", path, tide_grpc_code_name(code),
             (unsigned long long)count);
}

static void unary_and_streaming(void **state)
{
    result_t u = {0}, s = {0};
    uint8_t n[4] = {0, 0, 0x03, 0xe8}; /* 1000 */

    (void)state;
    call_bytes(F.cli, "/t.Echo/Unary", "hello", 5, 5000, &u);
    call_bytes(F.cli, "/t.Echo/Stream", n, 4, 0, &s);
    wait_int(&u.done, 1);
    wait_int(&s.done, 1);
    assert_int_equal(F.cli_state_up, 1);
    assert_int_equal(u.code, TIDE_GRPC_OK);
    assert_int_equal(u.n_msgs, 1);
    assert_memory_equal(u.last.data, "hello", 5);
    assert_int_equal(s.code, TIDE_GRPC_OK);
    assert_int_equal(s.n_msgs, 1000);
    assert_string_equal(tide_buf_cstr(&s.last), "item 999");
    assert_true(tide_rpc_client_connected(F.cli));
    wait_int(&srv_on_close, 2);
    assert_int_equal(strncmp(last_peer, "127.0.0.1:", 10), 0);
    assert_true(last_conn_id > 0);
    {
        statrow_t st = {""};
        tide_rpc_server_foreach_stat(F.srv, collect_stat, &st);
        assert_string_equal(st.text, "/t.Echo/Unary OK 1;/t.Echo/Stream OK 1;");
    }
    tide_buf_free(&u.last);
    tide_buf_free(&s.last);
}

static void bidi_echo_many(void **state)
{
    result_t r = {0};
    tide_rpc_client_call_t *call;
    int i;

    (void)state;
    assert_int_equal(tide_rpc_client_call_start(F.cli, "/t.Echo/Bidi", 0, &cbs, &r, &call), 0);
    for (i = 0; i < 5000; i++) {
        char m[32];
        int l = snprintf(m, sizeof(m), "hb %d", i);
        assert_int_equal(tide_rpc_client_call_send(call, (const uint8_t *)m, (size_t)l), 0);
    }
    wait_int(&r.n_msgs, 5000);
    assert_string_equal(tide_buf_cstr(&r.last), "hb 4999");
    /* Ping-pong a few more one at a time, as heartbeats do. */
    for (i = 0; i < 50; i++) {
        assert_int_equal(tide_rpc_client_call_send(call, (const uint8_t *)"x", 1), 0);
        wait_int(&r.n_msgs, 5001 + i);
    }
    assert_int_equal(tide_rpc_client_call_close_send(call), 0);
    assert_int_equal(tide_rpc_client_call_send(call, (const uint8_t *)"x", 1), -EPIPE);
    wait_int(&r.done, 1);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    tide_buf_free(&r.last);
}

static void many_streams_one_connection(void **state)
{
    enum { N = 1000 };
    static result_t r[N];
    int i, done = 0;

    (void)state;
    memset(r, 0, sizeof(r));
    for (i = 0; i < N; i++) {
        char m[16];
        int l = snprintf(m, sizeof(m), "m%d", i);
        call_bytes(F.cli, "/t.Echo/Unary", m, (size_t)l, 0, &r[i]);
    }
    for (i = 0; i < N; i++) {
        char m[16];
        wait_int(&r[i].done, 1);
        snprintf(m, sizeof(m), "m%d", i);
        assert_int_equal(r[i].code, TIDE_GRPC_OK);
        assert_string_equal(tide_buf_cstr(&r[i].last), m);
        tide_buf_free(&r[i].last);
        done++;
    }
    assert_int_equal(done, N);
    assert_int_equal(F.cli_state_up, 1); /* one connection for all of them */
}

static void errors(void **state)
{
    result_t unk = {0}, tok = {0}, open = {0}, big = {0};
    tide_rpc_client_t *bad = make_client(&F, "wrong", 0);
    tide_rpc_client_t *anon = make_client(&F, NULL, 0);
    uint8_t *payload = calloc(1, (4u << 20) + 1);

    (void)state;
    call_bytes(F.cli, "/grpc.health.v1.Health/Check", "", 0, 0, &unk);
    call_bytes(bad, "/t.Echo/Unary", "x", 1, 0, &tok);
    call_bytes(anon, "/t.Echo/Open", "x", 1, 0, &open);
    call_bytes(F.cli, "/t.Echo/Unary", payload, (4u << 20) + 1, 0, &big);
    wait_int(&unk.done, 1);
    wait_int(&tok.done, 1);
    wait_int(&open.done, 1);
    wait_int(&big.done, 1);
    assert_int_equal(unk.code, TIDE_GRPC_UNIMPLEMENTED);
    assert_non_null(strstr(unk.message, "Health/Check"));
    assert_int_equal(tok.code, TIDE_GRPC_UNAUTHENTICATED);
    assert_int_equal(open.code, TIDE_GRPC_OK);
    assert_int_equal(big.code, TIDE_GRPC_RESOURCE_EXHAUSTED);
    assert_int_equal(srv_messages, 1); /* only the open method's handler ran */
    {
        statrow_t st = {""};
        tide_rpc_server_foreach_stat(F.srv, collect_stat, &st);
        assert_non_null(strstr(st.text, "unknown UNIMPLEMENTED 1;"));
        assert_non_null(strstr(st.text, "/t.Echo/Unary UNAUTHENTICATED 1;"));
        assert_non_null(strstr(st.text, "/t.Echo/Unary RESOURCE_EXHAUSTED 1;"));
    }
    free(payload);
    tide_rpc_client_free(bad);
    tide_rpc_client_free(anon);
    tide_buf_free(&open.last);
}

static void client_max_message(void **state)
{
    result_t r = {0};
    tide_rpc_client_t *small = make_client(&F, "tok", 100);
    uint8_t payload[200];

    (void)state;
    memset(payload, 'y', sizeof(payload));
    call_bytes(small, "/t.Echo/Unary", payload, sizeof(payload), 0, &r);
    wait_int(&r.done, 1);
    assert_int_equal(r.code, TIDE_GRPC_RESOURCE_EXHAUSTED);
    assert_int_equal(r.n_msgs, 0);
    tide_rpc_client_free(small);
}

static void deadline_exceeded(void **state)
{
    result_t r = {0};

    (void)state;
    call_bytes(F.cli, "/t.Echo/Hold", "x", 1, 100, &r);
    wait_int(&r.done, 1);
    assert_int_equal(r.code, TIDE_GRPC_DEADLINE_EXCEEDED);
    /* The server lets go of the call too (its own deadline or the client's reset). */
    wait_int(&srv_on_close, 1);
    assert_null(held);
}

static void client_cancel(void **state)
{
    result_t r = {.cancel_after_first = true};
    tide_rpc_client_call_t *call;

    (void)state;
    assert_int_equal(tide_rpc_client_call_start(F.cli, "/t.Echo/Bidi", 0, &cbs, &r, &call), 0);
    assert_int_equal(tide_rpc_client_call_send(call, (const uint8_t *)"a", 1), 0);
    wait_int(&r.done, 1);
    assert_false(r.status_inside_cancel); /* on_status came from the loop */
    assert_int_equal(r.code, TIDE_GRPC_CANCELLED);
    wait_int(&srv_on_close, 1);
    tide_buf_free(&r.last);
}

static bool not_connected(void *arg)
{
    return !tide_rpc_client_connected(arg);
}

static void shutdown_mid_stream(void **state)
{
    result_t r = {0}, late = {0};
    tide_rpc_client_call_t *call;

    (void)state;
    assert_int_equal(tide_rpc_client_call_start(F.cli, "/t.Echo/Bidi", 0, &cbs, &r, &call), 0);
    assert_int_equal(tide_rpc_client_call_send(call, (const uint8_t *)"before", 6), 0);
    wait_int(&r.n_msgs, 1);
    tide_rpc_server_shutdown(F.srv);
    assert_true(run_until(not_connected, F.cli)); /* the client saw GOAWAY */
    /* New calls fail at once with UNAVAILABLE... */
    call_bytes(F.cli, "/t.Echo/Unary", "x", 1, 0, &late);
    wait_int(&late.done, 1);
    assert_int_equal(late.code, TIDE_GRPC_UNAVAILABLE);
    /* ...while the call in flight goes on to its end. */
    assert_int_equal(tide_rpc_client_call_send(call, (const uint8_t *)"after", 5), 0);
    wait_int(&r.n_msgs, 2);
    assert_string_equal(tide_buf_cstr(&r.last), "after");
    tide_rpc_client_call_close_send(call);
    wait_int(&r.done, 1);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    /* Then the server closes the idle connection. */
    wait_int(&F.cli_state_down, 1);
    tide_buf_free(&r.last);
}

static void free_from_callbacks(void **state)
{
    result_t a = {.free_client_on_status = true}, b = {0};

    (void)state;
    call_bytes(F.cli, "/t.Echo/Unary", "x", 1, 0, &a);
    call_bytes(F.cli, "/t.Echo/Hold", "y", 1, 0, &b);
    wait_int(&a.done, 1);
    assert_null(F.cli);
    /* The other call ended with the client, exactly once. */
    assert_int_equal(b.done, 1);
    assert_int_equal(b.code, TIDE_GRPC_UNAVAILABLE);
    assert_string_equal(b.message, "client closed");
    wait_int(&srv_on_close, 2);
    tide_buf_free(&a.last);
}

static void connect_refused(void **state)
{
    result_t r = {0};
    tide_rpc_client_t *c;
    tide_rpc_client_config_t cfg = {.hostport = "127.0.0.1:1", .on_state = cli_state, .ud = &F};
    tide_error_t err;

    (void)state;
    assert_int_equal(tide_rpc_client_new(&F.loop, &cfg, &c, &err), 0);
    call_bytes(c, "/t.Echo/Unary", "x", 1, 0, &r);
    wait_int(&r.done, 1);
    assert_int_equal(r.code, TIDE_GRPC_UNAVAILABLE);
    wait_int(&F.cli_state_down, 1);
    assert_int_equal(F.last_down, UV_ECONNREFUSED);
    /* Later calls fail too, from the loop. */
    memset(&r, 0, sizeof(r));
    call_bytes(c, "/t.Echo/Unary", "x", 1, 0, &r);
    assert_int_equal(r.done, 0);
    wait_int(&r.done, 1);
    assert_int_equal(r.code, TIDE_GRPC_UNAVAILABLE);
    tide_rpc_client_free(c);
    cfg.hostport = "no-port";
    assert_int_equal(tide_rpc_client_new(&F.loop, &cfg, &c, &err), -EINVAL);
}

/* ---- raw sockets: HTTP/1 on the same port, garbage, a compressed message, a silent server ---- */

typedef struct raw {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    tide_buf_t rx;
    tide_buf_t tx;
    bool connected, eof, closed;
    nghttp2_session *h2; /* optional: speak HTTP/2 through it */
    int grpc_status;
} raw_t;

static void raw_alloc(uv_handle_t *h, size_t s, uv_buf_t *b)
{
    (void)h;
    b->base = malloc(s);
    b->len = s;
}

static void raw_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    raw_t *r = s->data;
    if (n > 0) {
        tide_buf_append(&r->rx, b->base, (size_t)n);
        if (r->h2)
            nghttp2_session_mem_recv(r->h2, (const uint8_t *)b->base, (size_t)n);
    } else if (n < 0) {
        r->eof = true;
        uv_read_stop(s);
    }
    free(b->base);
}

static void raw_connected(uv_connect_t *req, int status)
{
    raw_t *r = req->data;
    assert_int_equal(status, 0);
    r->connected = true;
    uv_read_start((uv_stream_t *)&r->tcp, raw_alloc, raw_read);
}

static void raw_written(uv_write_t *w, int status)
{
    (void)w;
    (void)status;
}

static bool raw_is_connected(void *arg)
{
    return ((raw_t *)arg)->connected;
}

static bool raw_is_eof(void *arg)
{
    return ((raw_t *)arg)->eof;
}

static void raw_open(raw_t *r, int port)
{
    struct sockaddr_in a;
    memset(r, 0, sizeof(*r));
    r->grpc_status = -1;
    uv_ip4_addr("127.0.0.1", port, &a);
    uv_tcp_init(&F.loop, &r->tcp);
    r->tcp.data = r;
    r->creq.data = r;
    assert_int_equal(uv_tcp_connect(&r->creq, &r->tcp, (struct sockaddr *)&a, raw_connected), 0);
    assert_true(run_until(raw_is_connected, r));
}

static void raw_send(raw_t *r, const void *data, size_t len)
{
    uv_buf_t b;
    r->tx.len = 0;
    tide_buf_append(&r->tx, data, len);
    b = uv_buf_init((char *)r->tx.data, (unsigned)len);
    assert_int_equal(uv_write(&r->wreq, (uv_stream_t *)&r->tcp, &b, 1, raw_written), 0);
}

static void raw_closed(uv_handle_t *h)
{
    ((raw_t *)h->data)->closed = true;
}

static void raw_close(raw_t *r)
{
    uv_close((uv_handle_t *)&r->tcp, raw_closed);
    uv_run(&F.loop, UV_RUN_NOWAIT);
    tide_buf_free(&r->rx);
    tide_buf_free(&r->tx);
    if (r->h2)
        nghttp2_session_del(r->h2);
}

static void http1_same_port(void **state)
{
    raw_t r;
    const char *req = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

    (void)state;
    raw_open(&r, tide_rpc_server_port(F.srv));
    raw_send(&r, req, strlen(req));
    assert_true(run_until(raw_is_eof, &r));
    assert_non_null(strstr(tide_buf_cstr(&r.rx), "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(tide_buf_cstr(&r.rx), "\r\n\r\nok\n"));
    raw_close(&r);
}

static void garbage_keeps_others_serving(void **state)
{
    raw_t r, slow;
    result_t res = {0};
    static const uint8_t junk[] = "\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03garbage";

    (void)state;
    raw_open(&r, tide_rpc_server_port(F.srv));
    raw_open(&slow, tide_rpc_server_port(F.srv));
    raw_send(&slow, "PRI * HTTP/2.0\r\n", 16); /* half a preface, then nothing */
    raw_send(&r, junk, sizeof(junk) - 1);
    assert_true(run_until(raw_is_eof, &r)); /* that connection is closed */
    call_bytes(F.cli, "/t.Echo/Unary", "still", 5, 0, &res);
    wait_int(&res.done, 1);
    assert_int_equal(res.code, TIDE_GRPC_OK);
    assert_false(slow.eof); /* the slow one waits for its idle deadline (10 s) */
    raw_close(&r);
    raw_close(&slow);
    tide_buf_free(&res.last);
}

static int raw_on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nl,
                         const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    raw_t *r = ud;
    (void)s;
    (void)f;
    (void)vl;
    (void)flags;
    if (nl == 11 && !memcmp(name, "grpc-status", 11))
        r->grpc_status = atoi((const char *)value);
    return 0;
}

static bool raw_has_status(void *arg)
{
    return ((raw_t *)arg)->grpc_status >= 0;
}

static void compressed_message(void **state)
{
    raw_t r;
    nghttp2_session_callbacks *cb;
    tide_buf_t out = TIDE_BUF_INIT;
    uint8_t body[5 + 2];
    const uint8_t *p;
    ssize_t n;
    nghttp2_nv nva[] = {
        {(uint8_t *)":method", (uint8_t *)"POST", 7, 4, 0},
        {(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
        {(uint8_t *)":path", (uint8_t *)"/t.Echo/Open", 5, 12, 0},
        {(uint8_t *)":authority", (uint8_t *)"x", 10, 1, 0},
        {(uint8_t *)"content-type", (uint8_t *)"application/grpc", 12, 16, 0},
        {(uint8_t *)"grpc-encoding", (uint8_t *)"gzip", 13, 4, 0},
    };
    int32_t id;

    (void)state;
    raw_open(&r, tide_rpc_server_port(F.srv));
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, raw_on_header);
    nghttp2_session_client_new(&r.h2, cb, &r);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(r.h2, NGHTTP2_FLAG_NONE, NULL, 0);
    id = nghttp2_submit_headers(r.h2, NGHTTP2_FLAG_NONE, -1, NULL, nva, 6, NULL);
    assert_true(id > 0);
    while ((n = nghttp2_session_mem_send(r.h2, &p)) > 0)
        tide_buf_append(&out, p, (size_t)n);
    /* DATA by hand: flag 1 (compressed), 2 bytes, END_STREAM. */
    tide_grpc_frame_prefix(body, 2);
    body[0] = 1;
    body[5] = body[6] = 'z';
    {
        uint8_t hd[9] = {0, 0, 7, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 0, 0, 0, (uint8_t)id};
        tide_buf_append(&out, hd, 9);
        tide_buf_append(&out, body, 7);
    }
    raw_send(&r, out.data, out.len);
    assert_true(run_until(raw_has_status, &r));
    assert_int_equal(r.grpc_status, TIDE_GRPC_UNIMPLEMENTED);
    assert_int_equal(srv_messages, 0);
    tide_buf_free(&out);
    raw_close(&r);
}

/* A "server" that accepts and never answers: the client's keepalive must give up on it. */
static void silent_accept(uv_stream_t *server, int status)
{
    uv_tcp_t *c = malloc(sizeof(*c));
    (void)status;
    uv_tcp_init(server->loop, c);
    uv_accept(server, (uv_stream_t *)c);
    server->data = c;
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

static void client_keepalive_timeout(void **state)
{
    static uv_tcp_t lst; /* closed after return: teardown's loop run finishes the close */
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char addr[64];
    tide_rpc_client_t *c;
    tide_rpc_client_config_t cfg = {.hostport = addr,
                                    .keepalive_ms = 50,
                                    .keepalive_timeout_ms = 100,
                                    .on_state = cli_state,
                                    .ud = &F};
    tide_error_t err;
    result_t r = {0};

    (void)state;
    uv_tcp_init(&F.loop, &lst);
    lst.data = NULL;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&lst, (struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&lst, 4, silent_accept), 0);
    uv_tcp_getsockname(&lst, (struct sockaddr *)&ss, &len);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(((struct sockaddr_in *)&ss)->sin_port));
    assert_int_equal(tide_rpc_client_new(&F.loop, &cfg, &c, &err), 0);
    call_bytes(c, "/t.Echo/Hold", "x", 1, 0, &r);
    wait_int(&F.cli_state_down, 1);
    assert_int_equal(F.last_down, -ETIMEDOUT);
    assert_int_equal(r.done, 1);
    assert_int_equal(r.code, TIDE_GRPC_UNAVAILABLE);
    tide_rpc_client_free(c);
    if (lst.data)
        uv_close((uv_handle_t *)lst.data, free_handle);
    uv_close((uv_handle_t *)&lst, NULL);
}

static void free_from_on_message(void **state)
{
    result_t a = {.free_client_on_message = true};
    tide_rpc_client_call_t *call;

    (void)state;
    assert_int_equal(tide_rpc_client_call_start(F.cli, "/t.Echo/Bidi", 0, &cbs, &a, &call), 0);
    tide_rpc_client_call_send(call, (const uint8_t *)"a", 1);
    tide_rpc_client_call_send(call, (const uint8_t *)"b", 1); /* may arrive in the same read */
    wait_int(&a.done, 1);
    assert_null(F.cli);
    assert_int_equal(a.n_msgs, 1); /* nothing after the free */
    assert_int_equal(a.code, TIDE_GRPC_UNAVAILABLE);
    wait_int(&srv_on_close, 1);
    tide_buf_free(&a.last);
}

static void unary_protobuf(void **state)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    Grpc__Health__V1__HealthCheckRequest *back;
    result_t r = {0};
    tide_rpc_client_call_t *call;

    (void)state;
    req.service = "tide.v1.JobService";
    /* The server's Unary echoes the bytes: what comes back unpacks to what was sent. */
    assert_int_equal(
        tide_rpc_client_unary(F.cli, "/t.Echo/Unary", &req.base, 5000, &cbs, &r, &call), 0);
    assert_non_null(call);
    assert_int_equal(tide_rpc_client_call_queued_bytes(call), 5 + 20);
    assert_int_equal(tide_rpc_client_unary(F.cli, "/t.Echo/Unary", NULL, 0, &cbs, &r, NULL),
                     -EINVAL);
    wait_int(&r.done, 1);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    back = grpc__health__v1__health_check_request__unpack(NULL, r.last.len, r.last.data);
    assert_non_null(back);
    assert_string_equal(back->service, "tide.v1.JobService");
    grpc__health__v1__health_check_request__free_unpacked(back, NULL);
    tide_buf_free(&r.last);
}

/* ---- a fake HTTP/2 server that answers the way non-conforming servers and proxies do ---- */

typedef struct fake {
    uv_tcp_t lst;
    uv_tcp_t conn;
    bool accepted;
    nghttp2_session *s;
    char path[64];
} fake_t;

static void fake_written(uv_write_t *w, int status)
{
    (void)status;
    free(w->data);
    free(w);
}

static void fake_flush(fake_t *f)
{
    const uint8_t *p;
    ssize_t n;
    tide_buf_t out = TIDE_BUF_INIT;
    uv_write_t *w;
    uv_buf_t b;

    while ((n = nghttp2_session_mem_send(f->s, &p)) > 0)
        tide_buf_append(&out, p, (size_t)n);
    if (!out.len)
        return;
    w = malloc(sizeof(*w));
    w->data = out.data;
    b = uv_buf_init((char *)out.data, (unsigned)out.len);
    assert_int_equal(uv_write(w, (uv_stream_t *)&f->conn, &b, 1, fake_written), 0);
}

static int fake_on_header(nghttp2_session *s, const nghttp2_frame *fr, const uint8_t *name,
                          size_t nl, const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    fake_t *f = ud;
    (void)s;
    (void)fr;
    (void)flags;
    if (nl == 5 && !memcmp(name, ":path", 5))
        snprintf(f->path, sizeof(f->path), "%.*s", (int)vl, value);
    return 0;
}

static ssize_t fake_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    static const uint8_t compressed[] = {1, 0, 0, 0, 2, 'z', 'z'};
    (void)s;
    (void)id;
    (void)src;
    (void)ud;
    assert_true(len >= sizeof(compressed));
    memcpy(buf, compressed, sizeof(compressed));
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return sizeof(compressed);
}

#define FNV(n, v)                                                                                  \
    {                                                                                              \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, 0                            \
    }

static int fake_on_frame_recv(nghttp2_session *s, const nghttp2_frame *fr, void *ud)
{
    fake_t *f = ud;
    int32_t id = fr->hd.stream_id;
    nghttp2_nv not_found[] = {FNV(":status", "404")};
    nghttp2_nv no_status[] = {FNV(":status", "200"), FNV("content-type", "application/grpc")};
    nghttp2_nv bad_status[] = {FNV(":status", "200"), FNV("content-type", "application/grpc"),
                               FNV("grpc-status", "abc")};
    nghttp2_nv unavailable[] = {FNV(":status", "503")};
    nghttp2_data_provider prd = {.source = {.ptr = NULL}, .read_callback = fake_read};

    if (fr->hd.type != NGHTTP2_HEADERS || fr->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    if (!strcmp(f->path, "/f/404"))
        nghttp2_submit_response(s, id, not_found, 1, NULL);
    else if (!strcmp(f->path, "/f/503"))
        nghttp2_submit_response(s, id, unavailable, 1, NULL);
    else if (!strcmp(f->path, "/f/nostatus"))
        nghttp2_submit_response(s, id, no_status, 2, NULL);
    else if (!strcmp(f->path, "/f/badstatus"))
        nghttp2_submit_response(s, id, bad_status, 3, NULL);
    else if (!strcmp(f->path, "/f/compressed"))
        nghttp2_submit_response(s, id, no_status, 2, &prd);
    else if (!strcmp(f->path, "/f/refused"))
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
    else if (!strcmp(f->path, "/f/cancel"))
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    else
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, id, NGHTTP2_INTERNAL_ERROR);
    return 0;
}

static void fake_read_cb(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    fake_t *f = st->data;
    if (n > 0) {
        nghttp2_session_mem_recv(f->s, (const uint8_t *)b->base, (size_t)n);
        fake_flush(f);
    } else if (n < 0) {
        uv_read_stop(st);
    }
    free(b->base);
}

static void fake_accept(uv_stream_t *server, int status)
{
    fake_t *f = server->data;
    nghttp2_session_callbacks *cb;
    (void)status;
    uv_tcp_init(server->loop, &f->conn);
    f->conn.data = f;
    assert_int_equal(uv_accept(server, (uv_stream_t *)&f->conn), 0);
    f->accepted = true;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, fake_on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, fake_on_frame_recv);
    nghttp2_session_server_new(&f->s, cb, f);
    nghttp2_session_callbacks_del(cb);
    nghttp2_submit_settings(f->s, NGHTTP2_FLAG_NONE, NULL, 0);
    fake_flush(f);
    uv_read_start((uv_stream_t *)&f->conn, raw_alloc, fake_read_cb);
}

static void client_status_mapping(void **state)
{
    static const struct {
        const char *path;
        tide_grpc_code_t code;
        const char *text;
    } cases[] = {
        {"/f/404", TIDE_GRPC_UNIMPLEMENTED, "HTTP status 404"},
        {"/f/503", TIDE_GRPC_UNAVAILABLE, "HTTP status 503"},
        {"/f/nostatus", TIDE_GRPC_UNKNOWN, "without grpc-status"},
        {"/f/badstatus", TIDE_GRPC_UNKNOWN, ""},
        {"/f/compressed", TIDE_GRPC_INTERNAL, "compressed"},
        {"/f/refused", TIDE_GRPC_UNAVAILABLE, "refused"},
        {"/f/cancel", TIDE_GRPC_CANCELLED, "cancelled"},
        {"/f/internal", TIDE_GRPC_INTERNAL, "INTERNAL_ERROR"},
    };
    enum { N = sizeof(cases) / sizeof(cases[0]) };
    fake_t f;
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    int len = sizeof(ss), i;
    char addr[64];
    result_t r[N];
    tide_rpc_client_t *c;
    tide_rpc_client_config_t cfg = {.hostport = addr};
    tide_error_t err;

    (void)state;
    memset(&f, 0, sizeof(f));
    memset(r, 0, sizeof(r));
    uv_tcp_init(&F.loop, &f.lst);
    f.lst.data = &f;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&f.lst, (struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&f.lst, 4, fake_accept), 0);
    uv_tcp_getsockname(&f.lst, (struct sockaddr *)&ss, &len);
    snprintf(addr, sizeof(addr), "localhost:%d", ntohs(((struct sockaddr_in *)&ss)->sin_port));
    assert_int_equal(tide_rpc_client_new(&F.loop, &cfg, &c, &err), 0); /* by name: getaddrinfo */
    for (i = 0; i < N; i++)
        call_bytes(c, cases[i].path, "x", 1, 0, &r[i]);
    for (i = 0; i < N; i++) {
        wait_int(&r[i].done, 1);
        if (r[i].code != cases[i].code || !strstr(r[i].message, cases[i].text))
            fail_msg("%s: got %s \"%s\"", cases[i].path, tide_grpc_code_name(r[i].code),
                     r[i].message);
        assert_int_equal(r[i].n_msgs, 0);
    }
    tide_rpc_client_free(c);
    if (f.accepted) {
        uv_close((uv_handle_t *)&f.conn, NULL);
        nghttp2_session_del(f.s);
    }
    uv_close((uv_handle_t *)&f.lst, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(unary_and_streaming, setup, teardown),
        cmocka_unit_test_setup_teardown(bidi_echo_many, setup, teardown),
        cmocka_unit_test_setup_teardown(many_streams_one_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(errors, setup, teardown),
        cmocka_unit_test_setup_teardown(client_max_message, setup, teardown),
        cmocka_unit_test_setup_teardown(deadline_exceeded, setup, teardown),
        cmocka_unit_test_setup_teardown(client_cancel, setup, teardown),
        cmocka_unit_test_setup_teardown(shutdown_mid_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(free_from_callbacks, setup, teardown),
        cmocka_unit_test_setup_teardown(connect_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(http1_same_port, setup, teardown),
        cmocka_unit_test_setup_teardown(garbage_keeps_others_serving, setup, teardown),
        cmocka_unit_test_setup_teardown(compressed_message, setup, teardown),
        cmocka_unit_test_setup_teardown(client_keepalive_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(free_from_on_message, setup, teardown),
        cmocka_unit_test_setup_teardown(unary_protobuf, setup, teardown),
        cmocka_unit_test_setup_teardown(client_status_mapping, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Fake tide_rpc_client (see fake_rpc.h). Invariant: every started call gets exactly one on_status, from
 * the loop's pump timer, and is freed right after it; tide_rpc_client_free fails the open ones inline
 * (as the header promises) and frees the client in its timer's close callback. */
#include "fake_rpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "buf.h"
#include "list.h"
#include "rpc_client.h"
#include "xmalloc.h"

#define MAX_ROUTES 32

typedef enum ev_kind { EV_DISPATCH, EV_MESSAGE, EV_STATUS } ev_kind_t;

typedef struct ev {
    tide_list_t node;
    ev_kind_t kind;
    uint8_t *data;
    size_t len;
    tide_grpc_code_t code;
    char *message;
} ev_t;

struct fake_call {
    tide_list_t node; /* in client->calls */
    tide_rpc_client_t *client;
    char *path;
    tide_rpc_client_call_cbs_t cbs;
    void *ud;
    tide_buf_t req;
    tide_list_t events;
    bool finish_queued, cancelled, dispatched;
};

struct tide_rpc_client {
    uv_loop_t *loop;
    uv_timer_t pump;
    tide_list_t calls;
    tide_rpc_client_config_t cfg;
    bool state_sent, refused, closing;
    int drop_status; /* fake_rpc_drop: lose the connection at the next turn */
    char drop_text[160];
};

static struct {
    char *path;
    fake_handler_fn fn;
    void *ud;
} routes[MAX_ROUTES];
static int n_routes;
static struct {
    char *path;
    int count;
} counts[MAX_ROUTES];
static int n_counts;
static int refuse_status;
static char *last_hostport, *last_token;
static int live_clients;
static tide_rpc_client_t *current; /* the newest client, for fake_call_alive */

const char *tide_grpc_code_name(int code)
{
    static const char *const names[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                        "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                        "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
                                        "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    return code >= 0 && code < (int)(sizeof(names) / sizeof(names[0])) ? names[code] : "UNKNOWN";
}

void fake_rpc_reset(void)
{
    for (int i = 0; i < n_routes; i++)
        free(routes[i].path);
    for (int i = 0; i < n_counts; i++)
        free(counts[i].path);
    n_routes = n_counts = 0;
    refuse_status = 0;
    free(last_hostport);
    free(last_token);
    last_hostport = last_token = NULL;
}

void fake_rpc_route(const char *path, fake_handler_fn fn, void *ud)
{
    routes[n_routes].path = tide_xstrdup(path);
    routes[n_routes].fn = fn;
    routes[n_routes].ud = ud;
    n_routes++;
}

void fake_rpc_refuse(int status)
{
    refuse_status = status;
}

const char *fake_rpc_last_hostport(void)
{
    return last_hostport;
}

const char *fake_rpc_last_token(void)
{
    return last_token;
}

int fake_rpc_count(const char *path)
{
    for (int i = 0; i < n_counts; i++)
        if (strcmp(counts[i].path, path) == 0)
            return counts[i].count;
    return 0;
}

int fake_rpc_live_clients(void)
{
    return live_clients;
}

static void count(const char *path)
{
    for (int i = 0; i < n_counts; i++) {
        if (strcmp(counts[i].path, path) == 0) {
            counts[i].count++;
            return;
        }
    }
    counts[n_counts].path = tide_xstrdup(path);
    counts[n_counts].count = 1;
    n_counts++;
}

static void pump_cb(uv_timer_t *t);

static void kick(tide_rpc_client_t *c)
{
    if (!c->closing)
        uv_timer_start(&c->pump, pump_cb, 0, 0);
}

static void queue(fake_call_t *call, ev_kind_t kind, const void *data, size_t len, tide_grpc_code_t code,
                  const char *message)
{
    ev_t *e = tide_xcalloc(1, sizeof(*e));

    e->kind = kind;
    if (len) {
        e->data = tide_xmalloc(len);
        memcpy(e->data, data, len);
    }
    e->len = len;
    e->code = code;
    e->message = message ? tide_xstrdup(message) : NULL;
    tide_list_push_back(&call->events, &e->node);
}

static void free_ev(ev_t *e)
{
    free(e->data);
    free(e->message);
    free(e);
}

static void end_call(fake_call_t *call, tide_grpc_code_t code, const char *message)
{
    tide_list_t *pos, *tmp;

    tide_list_remove(&call->node);
    tide_list_for_each_safe(pos, tmp, &call->events)
    {
        tide_list_remove(pos);
        free_ev(tide_list_entry(pos, ev_t, node));
    }
    call->cbs.on_status((tide_rpc_client_call_t *)call, code, message, call->ud);
    tide_buf_free(&call->req);
    free(call->path);
    free(call);
}

static fake_handler_fn route(const char *path, void **ud)
{
    for (int i = 0; i < n_routes; i++) {
        if (strcmp(routes[i].path, path) == 0) {
            *ud = routes[i].ud;
            return routes[i].fn;
        }
    }
    return NULL;
}

/* Delivers one event of one call per turn, so the client sees the same interleavings as with a real
 * connection (messages of several calls in arrival order). */
static void pump_cb(uv_timer_t *t)
{
    tide_rpc_client_t *c = t->data;
    tide_list_t *pos;

    if (!c->state_sent) {
        c->state_sent = true;
        if (c->refused) {
            char text[160];
            /* The real client's wording (rpc_client.c, connect_cb). */
            snprintf(text, sizeof(text), "connect to %s: %s", last_hostport, uv_strerror(refuse_status));
            if (c->cfg.on_state)
                c->cfg.on_state(c, refuse_status, text, c->cfg.ud);
            while (!tide_list_empty(&c->calls))
                end_call(tide_list_entry(tide_list_first(&c->calls), fake_call_t, node), TIDE_GRPC_UNAVAILABLE,
                         "connection failed");
            return;
        }
        if (c->cfg.on_state)
            c->cfg.on_state(c, 0, NULL, c->cfg.ud);
    }
    tide_list_for_each(pos, &c->calls)
    {
        fake_call_t *call = tide_list_entry(pos, fake_call_t, node);
        ev_t *e;

        if (tide_list_empty(&call->events))
            continue;
        e = tide_list_entry(tide_list_first(&call->events), ev_t, node);
        tide_list_remove(&e->node);
        switch (e->kind) {
        case EV_DISPATCH: {
            void *ud = NULL;
            fake_handler_fn fn = route(call->path, &ud);
            count(call->path);
            call->dispatched = true;
            if (fn)
                fn(call, call->req.data, call->req.len, ud);
            else
                fake_call_finish(call, TIDE_GRPC_UNIMPLEMENTED, "no route in the fake");
            break;
        }
        case EV_MESSAGE:
            call->cbs.on_message((tide_rpc_client_call_t *)call, e->data, e->len, call->ud);
            break;
        case EV_STATUS:
            end_call(call, e->code, e->message);
            break;
        }
        free_ev(e);
        kick(c);
        return;
    }
    if (c->drop_status) {
        /* Once what was sent has been delivered. As the real client's conn_down: fail every call,
         * then tell the owner. */
        while (!tide_list_empty(&c->calls))
            end_call(tide_list_entry(tide_list_first(&c->calls), fake_call_t, node), TIDE_GRPC_UNAVAILABLE,
                     c->drop_text);
        if (c->cfg.on_state)
            c->cfg.on_state(c, c->drop_status, c->drop_text, c->cfg.ud);
        c->drop_status = 0;
    }
}

int tide_rpc_client_new(struct uv_loop_s *loop, const tide_rpc_client_config_t *cfg, tide_rpc_client_t **out,
                        tide_error_t *err)
{
    tide_rpc_client_t *c = tide_xcalloc(1, sizeof(*c));

    (void)err;
    c->loop = loop;
    c->cfg = *cfg;
    c->cfg.hostport = NULL;
    c->cfg.token = NULL;
    c->refused = refuse_status != 0;
    tide_list_init(&c->calls);
    uv_timer_init(loop, &c->pump);
    c->pump.data = c;
    free(last_hostport);
    free(last_token);
    last_hostport = tide_xstrdup(cfg->hostport);
    last_token = cfg->token ? tide_xstrdup(cfg->token) : NULL;
    live_clients++;
    current = c;
    kick(c);
    *out = c;
    return 0;
}

static void on_pump_closed(uv_handle_t *h)
{
    free(h->data);
    live_clients--;
}

void tide_rpc_client_free(tide_rpc_client_t *c)
{
    if (!c)
        return;
    while (!tide_list_empty(&c->calls))
        end_call(tide_list_entry(tide_list_first(&c->calls), fake_call_t, node), TIDE_GRPC_UNAVAILABLE,
                 "client closed");
    c->closing = true;
    if (current == c)
        current = NULL;
    uv_close((uv_handle_t *)&c->pump, on_pump_closed);
}

bool tide_rpc_client_connected(const tide_rpc_client_t *c)
{
    return c->state_sent && !c->refused;
}

int tide_rpc_client_call_start(tide_rpc_client_t *c, const char *path, int64_t timeout_ms,
                               const tide_rpc_client_call_cbs_t *cbs, void *ud, tide_rpc_client_call_t **out)
{
    fake_call_t *call = tide_xcalloc(1, sizeof(*call));

    (void)timeout_ms;
    call->client = c;
    call->path = tide_xstrdup(path);
    call->cbs = *cbs;
    call->ud = ud;
    tide_buf_init(&call->req);
    tide_list_init(&call->events);
    tide_list_push_back(&c->calls, &call->node);
    *out = (tide_rpc_client_call_t *)call;
    return 0;
}

int tide_rpc_client_call_send(tide_rpc_client_call_t *rc, const uint8_t *data, size_t len)
{
    fake_call_t *call = (fake_call_t *)rc;
    tide_buf_append(&call->req, data, len);
    return 0;
}

int tide_rpc_client_call_send_pb(tide_rpc_client_call_t *rc, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = tide_xmalloc(n ? n : 1);
    int r;

    protobuf_c_message_pack(msg, buf);
    r = tide_rpc_client_call_send(rc, buf, n);
    free(buf);
    return r;
}

int tide_rpc_client_call_close_send(tide_rpc_client_call_t *rc)
{
    fake_call_t *call = (fake_call_t *)rc;
    queue(call, EV_DISPATCH, NULL, 0, 0, NULL);
    kick(call->client);
    return 0;
}

void tide_rpc_client_call_cancel(tide_rpc_client_call_t *rc)
{
    fake_call_t *call = (fake_call_t *)rc;

    if (call->cancelled)
        return;
    call->cancelled = true;
    /* Drop what the "server" queued and end from the loop, as a RST_STREAM would. */
    while (!tide_list_empty(&call->events)) {
        ev_t *e = tide_list_entry(tide_list_first(&call->events), ev_t, node);
        tide_list_remove(&e->node);
        free_ev(e);
    }
    call->finish_queued = true;
    queue(call, EV_STATUS, NULL, 0, TIDE_GRPC_CANCELLED, "cancelled");
    kick(call->client);
}

size_t tide_rpc_client_call_queued_bytes(const tide_rpc_client_call_t *rc)
{
    (void)rc;
    return 0;
}

int tide_rpc_client_unary(tide_rpc_client_t *c, const char *path, const ProtobufCMessage *req, int64_t timeout_ms,
                          const tide_rpc_client_call_cbs_t *cbs, void *ud, tide_rpc_client_call_t **out)
{
    tide_rpc_client_call_t *call;
    int rc = tide_rpc_client_call_start(c, path, timeout_ms, cbs, ud, &call);

    if (rc < 0)
        return rc;
    tide_rpc_client_call_send_pb(call, req);
    tide_rpc_client_call_close_send(call);
    if (out)
        *out = call;
    return 0;
}

void fake_call_send(fake_call_t *call, const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = tide_xmalloc(n ? n : 1);

    protobuf_c_message_pack(msg, buf);
    fake_call_send_raw(call, buf, n);
    free(buf);
}

void fake_call_send_raw(fake_call_t *call, const void *data, size_t len)
{
    if (call->finish_queued)
        return;
    queue(call, EV_MESSAGE, data, len, 0, NULL);
    kick(call->client);
}

void fake_call_finish(fake_call_t *call, tide_grpc_code_t code, const char *message)
{
    if (call->finish_queued)
        return;
    call->finish_queued = true;
    queue(call, EV_STATUS, NULL, 0, code, message);
    kick(call->client);
}

int fake_call_cancelled(const fake_call_t *call)
{
    return call->cancelled;
}

int fake_call_alive(const fake_call_t *call)
{
    tide_list_t *pos;

    if (!current || !call)
        return 0;
    tide_list_for_each(pos, &current->calls)
        if (tide_list_entry(pos, fake_call_t, node) == call)
            return 1;
    return 0;
}

void fake_rpc_drop(int status, const char *text)
{
    if (!current)
        return;
    current->drop_status = status;
    snprintf(current->drop_text, sizeof(current->drop_text), "%s", text);
    kick(current);
}

/* Fake tide_rpc_client (see fake_rpc.h). Invariant: every started call gets exactly one on_status,
 * from the loop or from tide_rpc_client_free, and is freed right after it; the fake's own timer
 * handle is closed by tide_rpc_client_free, so loop tests stay leak-clean. */
#include "fake_rpc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "list.h"
#include "rpc_client.h"
#include "xmalloc.h"

struct tide_rpc_client_call {
    tide_list_t link;
    tide_rpc_client_t *client;
    tide_rpc_client_call_cbs_t cbs;
    void *ud;
    int serial;
    bool half_closed;
    bool pending;
    tide_grpc_code_t code;
    char *message;
};

struct tide_rpc_client {
    uv_timer_t defer;
    tide_list_t calls;
    void (*on_state)(tide_rpc_client_t *c, int status, const char *text, void *ud);
    void *ud;
    bool refused;
    bool state_reported;
};

typedef struct sent {
    tide_list_t link;
    int serial;
    uint8_t *data;
    size_t len;
} sent_t;

static tide_list_t sent_msgs = TIDE_LIST_INIT(sent_msgs);
static tide_rpc_client_call_t *current;
static int clients, calls;
static bool refuse;
static size_t queued;
static char last_path[128], last_token[128], last_hostport[128];
static bool half_closed_serials[256];

const char *tide_grpc_code_name(int code)
{
    static const char *names[] = {"OK",
                                  "CANCELLED",
                                  "UNKNOWN",
                                  "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED",
                                  "NOT_FOUND",
                                  "ALREADY_EXISTS",
                                  "PERMISSION_DENIED",
                                  "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION",
                                  "ABORTED",
                                  "OUT_OF_RANGE",
                                  "UNIMPLEMENTED",
                                  "INTERNAL",
                                  "UNAVAILABLE",
                                  "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    return code >= 0 && code < 17 ? names[code] : "UNKNOWN";
}

void fake_rpc_reset(void)
{
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, &sent_msgs)
    {
        sent_t *s = tide_list_entry(pos, sent_t, link);
        tide_list_remove(&s->link);
        free(s->data);
        free(s);
    }
    current = NULL;
    clients = calls = 0;
    refuse = false;
    queued = 0;
    last_path[0] = last_token[0] = last_hostport[0] = '\0';
    memset(half_closed_serials, 0, sizeof(half_closed_serials));
}

int fake_rpc_clients_created(void)
{
    return clients;
}

int fake_rpc_calls_started(void)
{
    return calls;
}

int fake_rpc_current_call(void)
{
    return current ? current->serial : 0;
}

const char *fake_rpc_last_path(void)
{
    return last_path;
}

const char *fake_rpc_last_token(void)
{
    return last_token;
}

const char *fake_rpc_last_hostport(void)
{
    return last_hostport;
}

bool fake_rpc_half_closed(int serial)
{
    return serial > 0 && serial < 256 && half_closed_serials[serial];
}

Tide__V1__WorkerMessage *fake_rpc_pop(int *serial)
{
    tide_list_t *first = tide_list_first(&sent_msgs);
    Tide__V1__WorkerMessage *m;
    sent_t *s;

    if (!first)
        return NULL;
    s = tide_list_entry(first, sent_t, link);
    tide_list_remove(&s->link);
    m = tide__v1__worker_message__unpack(NULL, s->len, s->data);
    if (serial)
        *serial = s->serial;
    free(s->data);
    free(s);
    return m;
}

size_t fake_rpc_pending(void)
{
    tide_list_t *pos;
    size_t n = 0;

    tide_list_for_each(pos, &sent_msgs) n++;
    return n;
}

static void call_end(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message)
{
    tide_list_remove(&call->link);
    if (current == call)
        current = NULL;
    call->cbs.on_status(call, code, message, call->ud);
    free(call->message);
    free(call);
}

static void on_defer(uv_timer_t *t)
{
    tide_rpc_client_t *c = t->data;
    tide_list_t *pos, *tmp;

    if (!c->state_reported) {
        c->state_reported = true;
        if (c->on_state && !c->refused)
            c->on_state(c, 0, NULL, c->ud);
    }
    tide_list_for_each_safe(pos, tmp, &c->calls)
    {
        tide_rpc_client_call_t *call = tide_list_entry(pos, tide_rpc_client_call_t, link);
        if (call->pending) {
            char *msg = call->message ? tide_xstrdup(call->message) : NULL;
            call_end(call, call->code, msg);
            free(msg);
        }
    }
}

static void set_pending(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message)
{
    if (call->pending)
        return;
    call->pending = true;
    call->code = code;
    call->message = message ? tide_xstrdup(message) : NULL;
    uv_timer_start(&call->client->defer, on_defer, 0, 0);
}

bool fake_rpc_deliver(const Tide__V1__SchedulerMessage *msg)
{
    size_t len = tide__v1__scheduler_message__get_packed_size(msg);
    uint8_t *buf = tide_xmalloc(len ? len : 1);
    tide_rpc_client_call_t *call = current;

    if (!call || call->pending) {
        free(buf);
        return false;
    }
    tide__v1__scheduler_message__pack(msg, buf);
    call->cbs.on_message(call, buf, len, call->ud);
    free(buf);
    return true;
}

bool fake_rpc_end(tide_grpc_code_t code, const char *message)
{
    if (!current)
        return false;
    set_pending(current, code, message);
    return true;
}

void fake_rpc_refuse(bool r)
{
    refuse = r;
}

void fake_rpc_set_queued(size_t bytes)
{
    queued = bytes;
}

/* --- rpc_client.h --- */

int tide_rpc_client_new(struct uv_loop_s *loop, const tide_rpc_client_config_t *cfg,
                        tide_rpc_client_t **out, tide_error_t *err)
{
    tide_rpc_client_t *c = tide_xcalloc(1, sizeof(*c));

    (void)err;
    uv_timer_init(loop, &c->defer);
    c->defer.data = c;
    tide_list_init(&c->calls);
    c->on_state = cfg->on_state;
    c->ud = cfg->ud;
    c->refused = refuse;
    snprintf(last_hostport, sizeof(last_hostport), "%s", cfg->hostport ? cfg->hostport : "");
    snprintf(last_token, sizeof(last_token), "%s", cfg->token ? cfg->token : "");
    clients++;
    uv_timer_start(&c->defer, on_defer, 0, 0);
    *out = c;
    return 0;
}

static void on_client_closed(uv_handle_t *h)
{
    free(h->data);
}

void tide_rpc_client_free(tide_rpc_client_t *c)
{
    tide_list_t *pos, *tmp;

    if (!c)
        return;
    tide_list_for_each_safe(pos, tmp, &c->calls)
    {
        call_end(tide_list_entry(pos, tide_rpc_client_call_t, link), TIDE_GRPC_UNAVAILABLE,
                 "client closed");
    }
    uv_close((uv_handle_t *)&c->defer, on_client_closed);
}

bool tide_rpc_client_connected(const tide_rpc_client_t *c)
{
    return !c->refused;
}

int tide_rpc_client_call_start(tide_rpc_client_t *c, const char *path, int64_t timeout_ms,
                               const tide_rpc_client_call_cbs_t *cbs, void *ud,
                               tide_rpc_client_call_t **out)
{
    tide_rpc_client_call_t *call = tide_xcalloc(1, sizeof(*call));

    (void)timeout_ms;
    call->client = c;
    call->cbs = *cbs;
    call->ud = ud;
    call->serial = ++calls;
    tide_list_push_back(&c->calls, &call->link);
    snprintf(last_path, sizeof(last_path), "%s", path);
    current = call;
    if (c->refused)
        set_pending(call, TIDE_GRPC_UNAVAILABLE, "connection refused");
    *out = call;
    return 0;
}

int tide_rpc_client_call_send(tide_rpc_client_call_t *call, const uint8_t *data, size_t len)
{
    sent_t *s;

    if (call->half_closed || call->pending || call->client->refused)
        return -EPIPE;
    s = tide_xcalloc(1, sizeof(*s));
    s->serial = call->serial;
    s->data = tide_xmalloc(len ? len : 1);
    memcpy(s->data, data, len);
    s->len = len;
    tide_list_push_back(&sent_msgs, &s->link);
    return 0;
}

int tide_rpc_client_call_send_pb(tide_rpc_client_call_t *call, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = tide_xmalloc(len ? len : 1);
    int rc;

    protobuf_c_message_pack(msg, buf);
    rc = tide_rpc_client_call_send(call, buf, len);
    free(buf);
    return rc;
}

int tide_rpc_client_call_close_send(tide_rpc_client_call_t *call)
{
    if (call->half_closed)
        return -EPIPE;
    call->half_closed = true;
    if (call->serial < 256)
        half_closed_serials[call->serial] = true;
    /* The fake scheduler answers a half-close by ending the call. */
    set_pending(call, TIDE_GRPC_OK, NULL);
    return 0;
}

void tide_rpc_client_call_cancel(tide_rpc_client_call_t *call)
{
    set_pending(call, TIDE_GRPC_CANCELLED, "cancelled");
}

size_t tide_rpc_client_call_queued_bytes(const tide_rpc_client_call_t *call)
{
    (void)call;
    return queued;
}

int tide_rpc_client_unary(tide_rpc_client_t *c, const char *path, const ProtobufCMessage *req,
                          int64_t timeout_ms, const tide_rpc_client_call_cbs_t *cbs, void *ud,
                          tide_rpc_client_call_t **out)
{
    int rc = tide_rpc_client_call_start(c, path, timeout_ms, cbs, ud, out);

    if (rc == 0)
        rc = tide_rpc_client_call_send_pb(*out, req);
    if (rc == 0)
        rc = tide_rpc_client_call_close_send(*out);
    return rc;
}

/* --- the server side: the worker's WorkerLauncher service (worker/mpi.c). The agent tests do not
 * start MPI jobs, so a server that listens nowhere and never gets a call is enough. --- */

#include "rpc_server.h"

struct tide_rpc_server {
    int unused;
};

int tide_rpc_server_new(struct uv_loop_s *loop, const tide_rpc_server_config_t *cfg,
                        tide_rpc_server_t **out, tide_error_t *err)
{
    (void)loop;
    (void)cfg;
    (void)err;
    *out = tide_xcalloc(1, sizeof(**out));
    return 0;
}

int tide_rpc_server_listen(tide_rpc_server_t *s, const char *hostport, tide_error_t *err)
{
    (void)s;
    (void)hostport;
    (void)err;
    return 0;
}

int tide_rpc_server_port(const tide_rpc_server_t *s)
{
    (void)s;
    return 0;
}

void tide_rpc_server_free(tide_rpc_server_t *s, void (*close_cb)(void *ud), void *ud)
{
    free(s);
    if (close_cb)
        close_cb(ud);
}

int tide_rpc_call_send_pb(tide_rpc_call_t *call, const ProtobufCMessage *msg)
{
    (void)call;
    (void)msg;
    return -EPIPE;
}

void tide_rpc_call_finish(tide_rpc_call_t *call, tide_grpc_code_t code, const char *message)
{
    (void)call;
    (void)code;
    (void)message;
}

const char *tide_rpc_call_peer(const tide_rpc_call_t *call)
{
    (void)call;
    return "";
}

void tide_rpc_call_set_data(tide_rpc_call_t *call, void *data)
{
    (void)call;
    (void)data;
}

void *tide_rpc_call_data(const tide_rpc_call_t *call)
{
    (void)call;
    return NULL;
}

void *tide_rpc_call_server_data(const tide_rpc_call_t *call)
{
    (void)call;
    return NULL;
}

/* The peer mirror service (worker/ckpt_mirror.c) reads these on calls the fake server never makes. */
size_t tide_rpc_call_queued_bytes(const tide_rpc_call_t *call)
{
    (void)call;
    return 0;
}

const tide_rpc_method_t *tide_rpc_call_method(const tide_rpc_call_t *call)
{
    (void)call;
    return NULL;
}

const char *tide_rpc_call_header(const tide_rpc_call_t *call, const char *name)
{
    (void)call;
    (void)name;
    return NULL;
}

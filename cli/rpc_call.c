/* Calls to the scheduler for tidectl (see rpc_call.h). Invariant: open_calls counts calls whose on_end
 * has not fired yet; tide_cli_conn_run turns the loop until it is zero, so each command reads as
 * straight-line code while streams and unary calls can still overlap (submit --wait). */
#include "rpc_call.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "addr_list.h"
#include "config.h"
#include "grpc/health/v1/health.pb-c.h"
#include "token.h"
#include "table.h"
#include "rpc_client.h"
#include "xmalloc.h"

#define DEFAULT_CALL_TIMEOUT_MS 30000

struct tide_cli_conn {
    tide_cli_t *cli;
    uv_loop_t loop;
    tide_rpc_client_t *client;
    char *address;
    int open_calls;
    bool connected;     /* the connection came up at least once */
    int conn_status;    /* the connection's failure (-errno), 0 while none */
    char conn_text[256];
    uv_timer_t sleep_timer; /* tide_cli_conn_sleep's; initialised on first use */
    bool sleep_timer_init, slept;
    tide_tls_ctx_t *tls; /* NULL: plaintext */
};

struct tide_cli_call {
    tide_cli_conn_t *conn;
    tide_rpc_client_call_t *rpc;
    const ProtobufCMessageDescriptor *resp_desc;
    tide_cli_call_ops_t ops;
    void *ud;
    bool cancelled;     /* by us: on_message said stop, or a malformed response */
    bool bad_response;
};

static void on_state(tide_rpc_client_t *client, int status, const char *text, void *ud)
{
    tide_cli_conn_t *c = ud;

    (void)client;
    if (status == 0) {
        c->connected = true;
        return;
    }
    c->conn_status = status;
    snprintf(c->conn_text, sizeof(c->conn_text), "%s", text ? text : "");
}

/* --- finding the leader among several replicas --- */

#define LEADER_WAIT_MS 10000 /* while some replica answers as a standby (an election is under way) */
#define PROBE_TIMEOUT_MS 3000

typedef struct probe {
    tide_rpc_client_t *client;
    const char *addr;
    bool done, serving, standby;
    char why[sizeof(((tide_error_t *)0)->text) + 64];
} probe_t;

static void probe_on_message(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    probe_t *p = ud;
    Grpc__Health__V1__HealthCheckResponse *r = grpc__health__v1__health_check_response__unpack(NULL, len, data);

    (void)call;
    if (!r)
        return;
    p->serving = r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    p->standby = r->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    grpc__health__v1__health_check_response__free_unpacked(r, NULL);
}

static void probe_on_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message, void *ud)
{
    probe_t *p = ud;

    (void)call;
    p->done = true;
    if (p->standby)
        snprintf(p->why, sizeof(p->why), "standby");
    else if (code != TIDE_GRPC_OK || !p->serving)
        snprintf(p->why, sizeof(p->why), "%s%s%s", tide_grpc_code_name(code), message && *message ? ": " : "",
                 message ? message : "");
}

static void probe_on_state(tide_rpc_client_t *client, int status, const char *text, void *ud)
{
    probe_t *p = ud;

    (void)client;
    if (status < 0 && !p->done)
        snprintf(p->why, sizeof(p->why), "%s", text && *text ? text : uv_strerror(status));
}

/* One round: asks every address at once whether it serves tide.v1.JobService (the leader does, a
 * standby says NOT_SERVING). Returns the index of the first that serves, or -1 with *standbys set to
 * how many answered as standbys and why filled with each one's answer. */
static int probe_round(uv_loop_t *loop, const tide_addr_list_t *l, const char *token, tide_tls_ctx_t *tls,
                       size_t *standbys,
                       char *why, size_t why_size)
{
    static const tide_rpc_client_call_cbs_t cbs = {probe_on_message, probe_on_status};
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    probe_t probes[TIDE_ADDR_LIST_MAX];
    size_t pending = 0;
    int found = -1;

    memset(probes, 0, sizeof(probes));
    req.service = "tide.v1.JobService";
    for (size_t i = 0; i < l->n; i++) {
        tide_rpc_client_config_t cfg = {0};
        tide_error_t err = {{0}};
        probe_t *p = &probes[i];

        p->addr = l->addrs[i];
        cfg.hostport = p->addr;
        cfg.token = token;
        cfg.tls = tls;
        cfg.connect_timeout_ms = PROBE_TIMEOUT_MS;
        cfg.on_state = probe_on_state;
        cfg.ud = p;
        if (tide_rpc_client_new(loop, &cfg, &p->client, &err) < 0 ||
            tide_rpc_client_unary(p->client, "/grpc.health.v1.Health/Check", &req.base, PROBE_TIMEOUT_MS, &cbs,
                                  p, NULL) < 0) {
            p->done = true;
            snprintf(p->why, sizeof(p->why), "%s", err.text[0] ? err.text : "cannot connect");
            continue;
        }
        pending++;
    }
    while (found < 0 && pending > 0) {
        uv_run(loop, UV_RUN_ONCE);
        pending = 0;
        for (size_t i = 0; i < l->n; i++) {
            if (probes[i].done && probes[i].serving && found < 0)
                found = (int)i;
            pending += !probes[i].done;
        }
    }
    *standbys = 0;
    why[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        size_t used = strlen(why);
        *standbys += probes[i].standby;
        snprintf(why + used, why_size - used, "%s%s: %s", i ? "; " : "", probes[i].addr,
                 probes[i].why[0] ? probes[i].why : "no answer");
        tide_rpc_client_free(probes[i].client); /* closes through the loop */
    }
    return found;
}

static void pause_done(uv_timer_t *t)
{
    (void)t;
}

static void pause_closed(uv_handle_t *h)
{
    free(h);
}

/* The leader among the addresses: waits while an election is under way (some replica answers as a
 * standby), at most LEADER_WAIT_MS. Returns 0 with *chosen (owned), or -1 with why filled. */
static int find_leader(uv_loop_t *loop, const tide_addr_list_t *l, const char *token, tide_tls_ctx_t *tls,
                       char **chosen, char *why,
                       size_t why_size)
{
    uint64_t deadline = uv_hrtime() + (uint64_t)LEADER_WAIT_MS * 1000000;
    uv_timer_t *pause = tide_xmalloc(sizeof(*pause)); /* freed by its close callback, from the loop */
    int idx = -1;

    uv_timer_init(loop, pause);
    for (;;) {
        size_t standbys = 0;

        idx = probe_round(loop, l, token, tls, &standbys, why, why_size);
        if (idx >= 0 || standbys == 0 || uv_hrtime() >= deadline)
            break;
        uv_timer_start(pause, pause_done, 250, 0);
        while (uv_is_active((uv_handle_t *)pause))
            uv_run(loop, UV_RUN_ONCE);
    }
    uv_close((uv_handle_t *)pause, pause_closed);
    if (idx < 0)
        return -1;
    *chosen = tide_xstrdup(l->addrs[idx]);
    return 0;
}

/* TLS from --tls-ca/--tls-cert/--tls-key (else TIDE_TLS_*): *out a client context, or NULL for plaintext,
 * which a non-loopback address gets only with --insecure / TIDE_INSECURE=1. Returns 0 or the exit code
 * (the error printed). */
static int resolve_tls(tide_cli_t *cli, const char *address, tide_tls_ctx_t **out)
{
    const char *ca = cli->tls_ca_opt ? cli->tls_ca_opt : cli->env_tls_ca;
    const char *cert = cli->tls_cert_opt ? cli->tls_cert_opt : cli->env_tls_cert;
    const char *key = cli->tls_key_opt ? cli->tls_key_opt : cli->env_tls_key;
    bool insecure = cli->insecure_opt ||
                    (cli->env_insecure && *cli->env_insecure && strcmp(cli->env_insecure, "0") != 0);
    tide_error_t err;

    *out = NULL;
    ca = ca && *ca ? ca : NULL;
    cert = cert && *cert ? cert : NULL;
    key = key && *key ? key : NULL;
    if (ca) {
        tide_tls_config_t tc = {.cert_file = cert, .key_file = key, .ca_file = ca};
        if (tide_tls_ctx_new_client(&tc, out, &err) < 0) {
            tide_cli_errorf(cli, "%s", err.text);
            return TIDE_CLI_EXIT_FAILURE;
        }
        return 0;
    }
    if (cert || key)
        return tide_cli_usage_error(cli, NULL, "--tls-cert and --tls-key need --tls-ca FILE (or TIDE_TLS_CA)");
    if (tide_tls_check_plaintext(address, false, false, insecure, &err) < 0) {
        tide_cli_errorf(cli, "%s (or TIDE_TLS_CA=FILE, TIDE_INSECURE=1)", err.text);
        return TIDE_CLI_EXIT_FAILURE;
    }
    return 0;
}

int tide_cli_conn_open(tide_cli_t *cli, tide_cli_conn_t **out)
{
    tide_tls_ctx_t *tls = NULL;
    tide_rpc_client_config_t cfg;
    tide_error_t err = {{0}};
    tide_cli_conn_t *c;
    char *address = NULL, *token = NULL;
    int rc;

    if (tide_cli_scheduler_resolve(cli->scheduler_opt, cli->env_scheduler, &address, &err) < 0)
        return tide_cli_usage_error(cli, NULL, "%s", err.text);
    if ((rc = resolve_tls(cli, address, &tls)) != 0) {
        free(address);
        return rc;
    }
    if (tide_token_resolve(cli->token_file_opt, cli->env_token, cli->env_token_file,
                               cli->default_token_path, &token, &err) < 0) {
        tide_cli_errorf(cli, "%s", err.text);
        free(address);
        tide_tls_ctx_free(tls);
        return TIDE_CLI_EXIT_FAILURE;
    }
    c = tide_xcalloc(1, sizeof(*c));
    c->cli = cli;
    c->address = address;
    c->tls = tls;
    rc = uv_loop_init(&c->loop);
    if (rc < 0) {
        tide_cli_errorf(cli, "cannot start an event loop: %s", uv_strerror(rc));
        goto fail;
    }
    if (strchr(address, ',')) {
        tide_addr_list_t l;
        char why[1024], *chosen = NULL;

        if (tide_addr_list_parse(address, NULL, &l, &err) < 0 ||
            find_leader(&c->loop, &l, token, c->tls, &chosen, why, sizeof(why)) < 0) {
            tide_cli_errorf(cli, "UNAVAILABLE: no scheduler leads among %s (%s)", address,
                            l.n ? why : err.text);
            tide_addr_list_free(&l);
            uv_run(&c->loop, UV_RUN_DEFAULT);
            uv_loop_close(&c->loop);
            goto fail;
        }
        tide_addr_list_free(&l);
        free(c->address);
        c->address = address = chosen;
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.hostport = address;
    cfg.token = token;
    cfg.tls = c->tls;
    cfg.on_state = on_state;
    cfg.ud = c;
    rc = tide_rpc_client_new(&c->loop, &cfg, &c->client, &err);
    if (rc < 0) {
        tide_cli_errorf(cli, "UNAVAILABLE: cannot reach scheduler at %s: %s", address,
                        err.text[0] ? err.text : uv_strerror(rc));
        uv_loop_close(&c->loop);
        goto fail;
    }
    if (token) {
        /* The client copied it; do not keep the secret around longer than needed. */
        explicit_bzero(token, strlen(token));
        free(token);
    }
    *out = c;
    return 0;
fail:
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    free(c->address);
    tide_tls_ctx_free(c->tls);
    free(c);
    return TIDE_CLI_EXIT_FAILURE;
}

void tide_cli_conn_close(tide_cli_conn_t *c)
{
    if (!c)
        return;
    /* Fails any open call (their on_end fire now), then closes the socket through the loop. */
    tide_rpc_client_free(c->client);
    c->client = NULL;
    if (c->sleep_timer_init)
        uv_close((uv_handle_t *)&c->sleep_timer, NULL);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&c->loop) != 0) {
        /* A handle outlived the client: let its close finish rather than leak the loop. */
        uv_run(&c->loop, UV_RUN_DEFAULT);
        uv_loop_close(&c->loop);
    }
    free(c->address);
    tide_tls_ctx_free(c->tls);
    free(c);
}

const char *tide_cli_conn_address(const tide_cli_conn_t *c)
{
    return c->address;
}

static void call_on_message(tide_rpc_client_call_t *rpc, const uint8_t *data, size_t len, void *ud)
{
    tide_cli_call_t *call = ud;
    ProtobufCMessage *msg;

    if (call->cancelled)
        return;
    msg = protobuf_c_message_unpack(call->resp_desc, NULL, len, data);
    if (!msg) {
        call->bad_response = true;
        call->cancelled = true;
        tide_rpc_client_call_cancel(rpc);
        return;
    }
    if (call->ops.on_message && call->ops.on_message(call, msg, call->ud) != 0 && !call->cancelled) {
        call->cancelled = true;
        tide_rpc_client_call_cancel(rpc);
    }
    protobuf_c_message_free_unpacked(msg, NULL);
}

static void call_on_status(tide_rpc_client_call_t *rpc, tide_grpc_code_t code, const char *message, void *ud)
{
    tide_cli_call_t *call = ud;
    tide_cli_status_t st;

    (void)rpc;
    st.code = code;
    snprintf(st.message, sizeof(st.message), "%s", message ? message : "");
    if (call->bad_response) {
        st.code = TIDE_GRPC_INTERNAL;
        snprintf(st.message, sizeof(st.message), "malformed %s from the scheduler", call->resp_desc->name);
    }
    call->conn->open_calls--;
    if (call->ops.on_end)
        call->ops.on_end(call, &st, call->ud);
    free(call);
}

int tide_cli_call_start(tide_cli_conn_t *c, const char *path, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                        const tide_cli_call_ops_t *ops, void *ud, tide_cli_call_t **out)
{
    static const tide_rpc_client_call_cbs_t cbs = {call_on_message, call_on_status};
    tide_cli_call_t *call = tide_xcalloc(1, sizeof(*call));
    int rc;

    call->conn = c;
    call->resp_desc = resp_desc;
    call->ops = *ops;
    call->ud = ud;
    rc = tide_rpc_client_unary(c->client, path, req, timeout_ms, &cbs, call, &call->rpc);
    if (rc < 0) {
        free(call);
        return rc;
    }
    c->open_calls++;
    if (out)
        *out = call;
    return 0;
}

void tide_cli_call_cancel(tide_cli_call_t *call)
{
    if (call->cancelled)
        return;
    call->cancelled = true;
    tide_rpc_client_call_cancel(call->rpc);
}

void tide_cli_conn_run(tide_cli_conn_t *c)
{
    while (c->open_calls > 0)
        uv_run(&c->loop, UV_RUN_ONCE);
}

static void on_sleep_timer(uv_timer_t *t)
{
    tide_cli_conn_t *c = t->data;

    c->slept = true;
}

int tide_cli_conn_sleep(tide_cli_conn_t *c, int64_t ms)
{
    int rc;

    if (!c->sleep_timer_init) {
        rc = uv_timer_init(&c->loop, &c->sleep_timer);
        if (rc < 0)
            return rc;
        c->sleep_timer.data = c;
        c->sleep_timer_init = true;
    }
    c->slept = false;
    rc = uv_timer_start(&c->sleep_timer, on_sleep_timer, ms > 0 ? (uint64_t)ms : 0, 0);
    if (rc < 0)
        return rc;
    while (!c->slept)
        uv_run(&c->loop, UV_RUN_ONCE);
    return 0;
}

typedef struct unary_result {
    ProtobufCMessage *resp;
    tide_cli_status_t st;
    bool done;
} unary_result_t;

static int unary_on_message(tide_cli_call_t *call, const ProtobufCMessage *msg, void *ud)
{
    unary_result_t *r = ud;
    size_t n;
    uint8_t *buf;

    (void)call;
    if (r->resp)
        return 0; /* a unary call has one response; ignore extras */
    /* msg is freed after this callback: keep a copy. */
    n = protobuf_c_message_get_packed_size(msg);
    buf = tide_xmalloc(n ? n : 1);
    protobuf_c_message_pack(msg, buf);
    r->resp = protobuf_c_message_unpack(msg->descriptor, NULL, n, buf);
    free(buf);
    return 0;
}

static void unary_on_end(tide_cli_call_t *call, const tide_cli_status_t *st, void *ud)
{
    unary_result_t *r = ud;

    (void)call;
    r->st = *st;
    r->done = true;
}

int tide_cli_unary(tide_cli_conn_t *c, const char *path, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, tide_cli_status_t *st)
{
    static const tide_cli_call_ops_t ops = {unary_on_message, unary_on_end};
    unary_result_t r;
    int64_t timeout = c->cli->call_timeout_ms > 0 ? c->cli->call_timeout_ms : DEFAULT_CALL_TIMEOUT_MS;
    int rc;

    memset(&r, 0, sizeof(r));
    rc = tide_cli_call_start(c, path, req, resp_desc, timeout, &ops, &r, NULL);
    if (rc < 0) {
        st->code = TIDE_GRPC_INTERNAL;
        snprintf(st->message, sizeof(st->message), "cannot start %s: %s", path, strerror(-rc));
        return -1;
    }
    while (!r.done)
        uv_run(&c->loop, UV_RUN_ONCE);
    if (r.st.code == TIDE_GRPC_OK && !r.resp) {
        r.st.code = TIDE_GRPC_INTERNAL;
        snprintf(r.st.message, sizeof(r.st.message), "the scheduler sent no %s", resp_desc->name);
    }
    if (r.st.code != TIDE_GRPC_OK) {
        protobuf_c_message_free_unpacked(r.resp, NULL);
        *st = r.st;
        return -1;
    }
    *st = r.st;
    *resp = r.resp;
    return 0;
}

void tide_cli_status_text(const tide_cli_conn_t *c, const tide_cli_status_t *st, char *buf, size_t size)
{
    const char *name = tide_grpc_code_name(st->code);
    const char *reason = st->message;
    char *clean;

    if (st->code == TIDE_GRPC_UNAVAILABLE && c->conn_status < 0) {
        /* The transport's own words say most ("resolve h: unknown node or service", "keepalive PING
         * not answered"); its "connect to ADDR: " prefix repeats what this line already says. */
        size_t alen = strlen(c->address);
        reason = c->conn_text;
        if (strncmp(reason, "connect to ", 11) == 0 && strncmp(reason + 11, c->address, alen) == 0 &&
            strncmp(reason + 11 + alen, ": ", 2) == 0)
            reason += 13 + alen;
        if (!*reason)
            reason = uv_strerror(c->conn_status);
        snprintf(buf, size, "%s: %s scheduler at %s: %s%s", name,
                 c->connected ? "lost connection to" : "cannot reach", c->address, reason,
                 !c->tls && strstr(reason, "closed by the server before it answered")
                     ? " (if it serves TLS, give --tls-ca FILE or set TIDE_TLS_CA)"
                 : c->tls && strstr(reason, "certificate verify failed")
                     ? " (check --tls-ca: the CA that signed the scheduler's certificate, which must name "
                       "this address)"
                     : "");
    } else if (st->code == TIDE_GRPC_UNAVAILABLE && !c->connected) {
        snprintf(buf, size, "%s: cannot reach scheduler at %s%s%s", name, c->address, *reason ? ": " : "",
                 reason);
    } else if (*reason) {
        snprintf(buf, size, "%s: %s", name, reason);
    } else {
        snprintf(buf, size, "%s", name);
    }
    /* The scheduler's text must not drive the terminal. */
    clean = tide_cli_sanitize(buf);
    snprintf(buf, size, "%s", clean);
    free(clean);
}

void tide_cli_report(tide_cli_conn_t *c, const tide_cli_status_t *st)
{
    char text[800];

    tide_cli_status_text(c, st, text, sizeof(text));
    tide_cli_errorf(c->cli, "%s", text);
}

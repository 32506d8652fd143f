/* A standby replica's server (HA with etcd, ha.c): it listens where the leader would, answers every tide
 * call with UNAVAILABLE naming the leader, reports NOT_SERVING for the tide services (readiness) and
 * SERVING for "" (liveness), and exports tide_is_leader 0. Invariant: it holds no scheduling state, so
 * nothing it answers can be stale. */
#include "standby.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "daemon.h"
#include "grpc/health/v1/health.pb-c.h"
#include "prom.h"
#include "xmalloc.h"

struct tide_standby {
    uv_loop_t *loop;
    tide_rpc_server_t *server;
    tide_rpc_method_t *methods;
    char *self;   /* this replica's advertised address */
    char *leader; /* the leader's, NULL while none is known */
    char msg[512];
    void (*done)(void *ud);
    void *done_ud;
};

static void refresh_msg(tide_standby_t *s)
{
    if (s->leader)
        snprintf(s->msg, sizeof(s->msg), "tide-scheduler %s is a standby; the leader is at %s", s->self,
                 s->leader);
    else
        snprintf(s->msg, sizeof(s->msg), "tide-scheduler %s is a standby and no leader is elected yet",
                 s->self);
}

static void refuse(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_standby_t *s = tide_rpc_call_server_data(call);

    (void)data;
    (void)len;
    tide_rpc_call_finish(call, TIDE_GRPC_UNAVAILABLE, s->msg);
}

static void refuse_half_close(tide_rpc_call_t *call)
{
    refuse(call, NULL, 0);
}

/* Liveness ("") is SERVING: the process is healthy. The tide services are NOT_SERVING: a readiness
 * probe keeps a Kubernetes Service from routing clients here. */
static int standby_status(const char *service, void *ud)
{
    (void)ud;
    if (service[0] == '\0')
        return GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    return tide_health_tide_service(service) ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                                             : -ENOENT;
}

static void health_check(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_svc_health_answer(call, data, len, false, standby_status, NULL);
}

static void health_watch(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_svc_health_answer(call, data, len, true, standby_status, NULL);
}

static int http(const char *method, const char *path, tide_buf_t *body, const char **content_type, void *ud)
{
    (void)method;
    (void)ud;
    if (strcmp(path, "/healthz") == 0) {
        *content_type = "text/plain; charset=utf-8";
        tide_buf_append_str(body, "ok (standby)\n");
        return 200;
    }
    if (strcmp(path, "/metrics") == 0) {
        tide_prom_t *p = tide_prom_new(body);
        tide_prom_label_t l = {"version", TIDE_VERSION};

        *content_type = TIDE_PROM_CONTENT_TYPE;
        tide_prom_family(p, "tide_is_leader", TIDE_PROM_GAUGE,
                         "1 while this scheduler leads (and serves), 0 on a standby.");
        tide_prom_sample(p, NULL, 0, 0);
        tide_prom_family(p, "tide_build_info", TIDE_PROM_GAUGE, "The running tide version.");
        tide_prom_sample(p, &l, 1, 1);
        tide_prom_free(p);
        return 200;
    }
    *content_type = "text/plain; charset=utf-8";
    tide_buf_append_str(body, "not found: tide serves GET /healthz and GET /metrics here\n");
    return 404;
}

/* Refusals need no token: they tell nothing but the leader's address, and a worker or user whose token only
 * the leader's users file knows must hear UNAVAILABLE (go to the leader), not UNAUTHENTICATED. */
static void add_refusing(tide_rpc_method_t *out, size_t *n, const tide_rpc_method_t *m)
{
    out[*n] = (tide_rpc_method_t){.path = m->path, .kind = m->kind, .no_auth = true,
                                  .on_message = refuse, .on_half_close = refuse_half_close};
    (*n)++;
}

int tide_standby_start(uv_loop_t *loop, const char *listen, const char *self, const char *token,
                       tide_tls_ctx_t *tls, tide_standby_t **out, tide_error_t *err)
{
    tide_standby_t *s = tide_xcalloc(1, sizeof(*s));
    tide_rpc_server_config_t cfg = {0};
    size_t n = 0;
    int rc;

    s->loop = loop;
    s->self = tide_xstrdup(self);
    refresh_msg(s);
    s->methods = tide_xcalloc(tide_svc_jobs_count + tide_svc_cluster_count + tide_svc_accounting_count + 5,
                              sizeof(*s->methods));
    for (size_t i = 0; i < tide_svc_jobs_count; i++)
        add_refusing(s->methods, &n, &tide_svc_jobs[i]);
    for (size_t i = 0; i < tide_svc_cluster_count; i++)
        add_refusing(s->methods, &n, &tide_svc_cluster[i]);
    for (size_t i = 0; i < tide_svc_accounting_count; i++)
        add_refusing(s->methods, &n, &tide_svc_accounting[i]);
    add_refusing(s->methods, &n, &tide_svc_job_logs);
    add_refusing(s->methods, &n, &tide_svc_watch_events);
    add_refusing(s->methods, &n, &tide_svc_worker_connect);
    s->methods[n++] = (tide_rpc_method_t){.path = "/grpc.health.v1.Health/Check", .no_auth = true,
                                          .on_message = health_check};
    s->methods[n++] = (tide_rpc_method_t){.path = "/grpc.health.v1.Health/Watch",
                                          .kind = TIDE_RPC_SERVER_STREAMING, .no_auth = true,
                                          .on_message = health_watch};
    cfg.methods = s->methods;
    cfg.n_methods = n;
    cfg.token = token;
    cfg.tls = tls; /* the leader's TLS: clients and workers see one server either way */
    cfg.http_handler = http;
    cfg.ud = s;
    *out = s;
    if ((rc = tide_rpc_server_new(loop, &cfg, &s->server, err)) < 0)
        return rc;
    return tide_rpc_server_listen(s->server, listen, err);
}

void tide_standby_set_leader(tide_standby_t *s, const char *leader)
{
    if (!s)
        return;
    if ((leader && s->leader && strcmp(leader, s->leader) == 0) || (!leader && !s->leader))
        return;
    free(s->leader);
    s->leader = leader ? tide_xstrdup(leader) : NULL;
    refresh_msg(s);
}

static void on_server_closed(void *ud)
{
    tide_standby_t *s = ud;
    void (*done)(void *) = s->done;
    void *done_ud = s->done_ud;

    free(s->methods);
    free(s->self);
    free(s->leader);
    free(s);
    if (done)
        done(done_ud);
}

void tide_standby_free(tide_standby_t *s, void (*done)(void *ud), void *ud)
{
    if (!s) {
        if (done)
            done(ud);
        return;
    }
    s->done = done;
    s->done_ud = ud;
    if (!s->server) {
        on_server_closed(s);
        return;
    }
    tide_rpc_server_free(s->server, on_server_closed, s);
}

/* HTTP/1.1 on the gRPC port: GET /healthz (liveness, no token) and GET /metrics (Prometheus text
 * format). Neither exposes secrets: no commands, no environment values, no tokens. Metric names are
 * documented in docs/architecture.md ("Metrics"). */
#include <string.h>

#include "daemon.h"
#include "prom.h"

typedef struct rpc_stat_ctx {
    tide_prom_t *p;
} rpc_stat_ctx_t;

static void rpc_stat(const char *path, tide_grpc_code_t code, uint64_t count, void *ud)
{
    rpc_stat_ctx_t *c = ud;
    tide_prom_label_t l[2] = {{"method", path}, {"code", tide_grpc_code_name(code)}};
    tide_prom_sample(c->p, l, 2, (double)count);
}

static void write_metrics(tide_daemon_t *d, tide_buf_t *body)
{
    static const char *wnames[5] = {"cordoned", "ready", "busy", "suspect", "dead"};
    static const char *jnames[6] = {"", "pending", "running", "succeeded", "failed", "cancelled"};
    tide_prom_t *p = tide_prom_new(body);
    rpc_stat_ctx_t c = {p};
    int w[5], j[6];

    tide_core_worker_counts(d->core, w);
    tide_core_job_counts(d->core, j);
    tide_prom_family(p, "tide_workers", TIDE_PROM_GAUGE, "Workers by state.");
    for (int i = 1; i < 5; i++) {
        tide_prom_label_t l = {"state", wnames[i]};
        tide_prom_sample(p, &l, 1, w[i]);
    }
    tide_prom_family(p, "tide_workers_cordoned", TIDE_PROM_GAUGE, "Workers cordoned (any state).");
    tide_prom_sample(p, NULL, 0, w[0]);
    tide_prom_family(p, "tide_jobs", TIDE_PROM_GAUGE, "Jobs by state (finished jobs until pruned).");
    for (int i = 1; i < 6; i++) {
        tide_prom_label_t l = {"state", jnames[i]};
        tide_prom_sample(p, &l, 1, j[i]);
    }
    tide_prom_family(p, "tide_rpc_requests_total", TIDE_PROM_COUNTER,
                     "Finished gRPC calls by method and status code.");
    tide_rpc_server_foreach_stat(d->server, rpc_stat, &c);
    tide_prom_family(p, "tide_heartbeats_total", TIDE_PROM_COUNTER, "Worker heartbeats received.");
    tide_prom_sample(p, NULL, 0, (double)d->heartbeats_total);
    tide_prom_family(p, "tide_store_commits_total", TIDE_PROM_COUNTER, "Group commits to the store.");
    tide_prom_sample(p, NULL, 0, (double)d->commits_total);
    tide_prom_family(p, "tide_store_writes_total", TIDE_PROM_COUNTER,
                     "Puts and deletes written to the store.");
    tide_prom_sample(p, NULL, 0, (double)d->commit_ops_total);
    tide_prom_family(p, "tide_leader_epoch", TIDE_PROM_GAUGE, "This scheduler's leader epoch.");
    tide_prom_sample(p, NULL, 0, (double)d->epoch);
    tide_prom_family(p, "tide_uptime_seconds", TIDE_PROM_GAUGE, "Seconds since this scheduler started.");
    tide_prom_sample(p, NULL, 0, (double)((int64_t)uv_now(d->loop) - d->start_mono) / 1e3);
    {
        tide_prom_label_t l = {"version", TIDE_VERSION};
        tide_prom_family(p, "tide_build_info", TIDE_PROM_GAUGE, "The running tide version.");
        tide_prom_sample(p, &l, 1, 1);
    }
    tide_prom_free(p);
}

int tide_daemon_http(const char *method, const char *path, tide_buf_t *body, const char **content_type,
                     void *ud)
{
    tide_daemon_t *d = ud;

    (void)method;
    if (strcmp(path, "/healthz") == 0) {
        *content_type = "text/plain; charset=utf-8";
        tide_buf_append_str(body, d->shutting_down ? "shutting down\n" : "ok\n");
        return d->shutting_down ? 503 : 200;
    }
    if (strcmp(path, "/metrics") == 0) {
        *content_type = TIDE_PROM_CONTENT_TYPE;
        write_metrics(d, body);
        return 200;
    }
    *content_type = "text/plain; charset=utf-8";
    tide_buf_append_str(body, "not found: tide serves GET /healthz and GET /metrics here\n");
    return 404;
}

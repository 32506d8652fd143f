/* HTTP/1.1 on the gRPC port: GET /healthz (liveness, no token) and GET /metrics (Prometheus text
 * format). Neither exposes secrets: no commands, no environment values, no tokens. Metric names are
 * documented in docs/architecture.md ("Metrics") and docs/metrics.md (MFU, GPU figures). */
#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "mfu.h"
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

/* MFU (docs/metrics.md): the cluster's, then each running job's. */
static void write_mfu(tide_daemon_t *d, tide_prom_t *p)
{
    tide_prom_label_t cl = {"scope", "cluster"};
    double achieved, peak;
    tide_job_t *job;

    tide_core_cluster_flops(d->core, &achieved, &peak);
    tide_prom_family(p, "tide_mfu_ratio", TIDE_PROM_GAUGE,
                     "Model FLOPs utilization over ~10 s: achieved model FLOP/s / peak FLOP/s of every "
                     "healthy GPU, idle ones included.");
    tide_prom_sample(p, &cl, 1, tide_mfu(achieved, peak));
    tide_prom_family(p, "tide_model_flops_per_second", TIDE_PROM_GAUGE,
                     "Achieved model FLOP/s reported by trainers (~10 s windows).");
    tide_prom_sample(p, &cl, 1, achieved);
    tide_prom_family(p, "tide_peak_flops_per_second", TIDE_PROM_GAUGE,
                     "Peak FLOP/s of every healthy GPU (READY or BUSY).");
    tide_prom_sample(p, &cl, 1, peak);
    tide_prom_family(p, "tide_job_mfu_ratio", TIDE_PROM_GAUGE,
                     "A running job's model FLOPs utilization over ~10 s (its ranks' GPUs).");
    for (job = tide_core_job_next(d->core, NULL); job; job = tide_core_job_next(d->core, job)) {
        tide_prom_label_t l = {"job", job->id};
        if (job->state != TIDE_JOB_RUNNING)
            continue;
        tide_core_job_flops(job, &achieved, &peak);
        tide_prom_sample(p, &l, 1, tide_mfu(achieved, peak));
    }
}

/* Each live worker's GPU figures, from its newest heartbeat. */
static void write_gpus(tide_daemon_t *d, tide_prom_t *p)
{
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"tide_gpu_utilization_ratio", "Fraction of time a kernel ran on the GPU."},
        {"tide_gpu_memory_used_bytes", "GPU memory in use."},
        {"tide_gpu_memory_total_bytes", "GPU memory."},
        {"tide_gpu_temperature_celsius", "GPU temperature."},
        {"tide_gpu_power_watts", "GPU board power draw."},
        {"tide_gpu_peak_flops_per_second", "The GPU's dense BF16 peak (the MFU denominator)."},
        {"tide_worker_mfu_ratio", "MFU of the rank this worker runs, when its trainer uses the SDK."},
    };
    size_t n;
    tide_worker_t **ws = tide_core_workers_sorted(d->core, &n);

    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        tide_prom_family(p, fam[f].name, TIDE_PROM_GAUGE, fam[f].help);
        for (size_t i = 0; i < n; i++) {
            const tide_worker_t *w = ws[i];
            tide_prom_label_t l = {"worker", w->id};
            const tide_job_rank_t *slot =
                w->job && w->rank >= 0 && w->rank < w->job->n_ranks ? &w->job->ranks[w->rank] : NULL;
            double v;
            if (w->state == TIDE_WORKER_DEAD || !w->last_heartbeat_ms)
                continue;
            switch (f) {
            case 0: v = w->telemetry.gpu_util; break;
            case 1: v = (double)w->telemetry.mem_used_bytes; break;
            case 2: v = (double)w->telemetry.mem_total_bytes; break;
            case 3: v = w->telemetry.temperature_c; break;
            case 4: v = w->telemetry.power_w; break;
            case 5: v = w->peak_flops; break;
            default:
                if (!slot || !slot->progress.sdk)
                    continue;
                v = slot->progress.mfu;
                break;
            }
            tide_prom_sample(p, &l, 1, v);
        }
    }
    free(ws);
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
    write_mfu(d, p);
    write_gpus(d, p);
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

/* HTTP/1.1 on the gRPC port: GET /healthz (liveness, no token) and GET /metrics (Prometheus text
 * format). Neither exposes secrets: no commands, no environment values, no tokens. Metric names are
 * documented in docs/architecture.md ("Metrics") and docs/metrics.md (MFU, GPU figures). */
#include <stdbool.h>
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

/* Utilization per known dimension and the bottleneck (1 on the binding dimension's series), for the
 * cluster and each running job; the cluster's health score and failure risk (docs/metrics.md). */
static void write_utilization(tide_prom_t *p, const tide_utilization_t *u, const char *job)
{
    tide_prom_label_t l[2] = {{"job", job}, {"dimension", NULL}};

    for (int dim = 0; dim < TIDE_DIM_COUNT; dim++) {
        if (!(u->known & (1u << dim)))
            continue;
        l[1].value = tide_dim_name((tide_dim_t)dim);
        if (job)
            tide_prom_sample(p, l, 2, u->u[dim]);
        else
            tide_prom_sample(p, l + 1, 1, u->u[dim]);
    }
}

/* The headroom reserve (docs/policies.md) and the queue that waits on it. */
static void write_reserve(tide_daemon_t *d, tide_prom_t *p)
{
    tide_reserve_t r;
    tide_prom_label_t part;

    tide_core_reserve(d->core, &r);
    tide_prom_family(p, "tide_reserve_gpus", TIDE_PROM_GAUGE,
                     "GPUs the headroom reserve keeps for failures (spares) and bursts; only LOW work may use them.");
    part.name = "part";
    part.value = "spares";
    tide_prom_sample(p, &part, 1, r.spares);
    part.value = "burst";
    tide_prom_sample(p, &part, 1, r.burst);
    part.value = "total";
    tide_prom_sample(p, &part, 1, r.gpus);
    tide_prom_family(p, "tide_gpus_free", TIDE_PROM_GAUGE, "Schedulable GPUs now.");
    tide_prom_sample(p, NULL, 0, r.free);
    tide_prom_family(p, "tide_failure_rate_per_gpu_hour", TIDE_PROM_GAUGE,
                     "The failure rate the reserve is sized with (observed once 3 failures were seen).");
    tide_prom_sample(p, NULL, 0, r.failure_rate);
}

static void write_health(tide_daemon_t *d, tide_prom_t *p)
{
    tide_health_input_t in;
    tide_health_t h;
    tide_job_t *job;

    tide_daemon_health(d, &in, &h);
    tide_prom_family(p, "tide_cluster_utilization_ratio", TIDE_PROM_GAUGE,
                     "Mean utilization of each known dimension over healthy GPUs.");
    write_utilization(p, &in.util, NULL);
    tide_prom_family(p, "tide_cluster_bottleneck", TIDE_PROM_GAUGE,
                     "1 for the dimension that binds the cluster (the busiest known one).");
    if (h.bottleneck != TIDE_DIM_COUNT) {
        tide_prom_label_t l = {"dimension", tide_dim_name(h.bottleneck)};
        tide_prom_sample(p, &l, 1, 1);
    }
    tide_prom_family(p, "tide_health_score", TIDE_PROM_GAUGE,
                     "The cluster's health score, 0-100 (docs/metrics.md).");
    tide_prom_sample(p, NULL, 0, h.score);
    tide_prom_family(p, "tide_cluster_failure_risk_ratio", TIDE_PROM_GAUGE,
                     "The highest failure risk of a healthy GPU.");
    tide_prom_sample(p, NULL, 0, in.failure_risk);
    write_reserve(d, p);
    tide_prom_family(p, "tide_job_utilization_ratio", TIDE_PROM_GAUGE,
                     "A running job's mean utilization of each known dimension over its ranks' GPUs.");
    for (job = tide_core_job_next(d->core, NULL); job; job = tide_core_job_next(d->core, job)) {
        tide_utilization_t u;
        if (job->state != TIDE_JOB_RUNNING)
            continue;
        tide_core_job_utilization(job, &u);
        write_utilization(p, &u, job->id);
    }
    tide_prom_family(p, "tide_job_bottleneck", TIDE_PROM_GAUGE,
                     "1 for the dimension that binds a running job.");
    for (job = tide_core_job_next(d->core, NULL); job; job = tide_core_job_next(d->core, job)) {
        tide_utilization_t u;
        tide_dim_t b;
        if (job->state != TIDE_JOB_RUNNING)
            continue;
        tide_core_job_utilization(job, &u);
        b = tide_bottleneck(&u);
        if (b != TIDE_DIM_COUNT) {
            tide_prom_label_t l[2] = {{"job", job->id}, {"dimension", tide_dim_name(b)}};
            tide_prom_sample(p, l, 2, 1);
        }
    }
}

/* Each live worker's GPU figures, from its newest heartbeat, in base units. A figure the worker
 * could not read (its bit clear in Telemetry.known) is left out, never reported as 0. */
enum gpu_fig { F_UTIL, F_MEM_USED, F_MEM_TOTAL, F_TEMP, F_POWER, F_MEM_BW, F_SM_CLOCK, F_MEM_CLOCK,
               F_ECC_CORRECTED, F_ECC_UNCORRECTED, F_XID, F_PEAK, F_MFU, F_NET, F_STORAGE, F_RISK,
               F_COUNT };

static const struct {
    const char *name, *help;
    tide_prom_type_t type;
    uint32_t bit; /* 0: always known */
} gpu_fams[F_COUNT] = {
    [F_UTIL] = {"tide_gpu_utilization_ratio", "Fraction of time a kernel ran on the GPU.",
                TIDE_PROM_GAUGE, 1u << 0},
    [F_MEM_USED] = {"tide_gpu_memory_used_bytes", "GPU memory in use.", TIDE_PROM_GAUGE, 1u << 1},
    [F_MEM_TOTAL] = {"tide_gpu_memory_total_bytes", "GPU memory.", TIDE_PROM_GAUGE, 1u << 1},
    [F_TEMP] = {"tide_gpu_temperature_celsius", "GPU temperature.", TIDE_PROM_GAUGE, 1u << 2},
    [F_POWER] = {"tide_gpu_power_watts", "GPU board power draw.", TIDE_PROM_GAUGE, 1u << 3},
    [F_MEM_BW] = {"tide_gpu_memory_bandwidth_ratio",
                  "Fraction of time device memory was read or written.", TIDE_PROM_GAUGE, 1u << 4},
    [F_SM_CLOCK] = {"tide_gpu_sm_clock_hertz", "SM clock.", TIDE_PROM_GAUGE, 1u << 5},
    [F_MEM_CLOCK] = {"tide_gpu_memory_clock_hertz", "Memory clock.", TIDE_PROM_GAUGE, 1u << 5},
    [F_ECC_CORRECTED] = {"tide_gpu_ecc_corrected_errors_total",
                         "Corrected ECC errors since the driver loaded.", TIDE_PROM_COUNTER, 1u << 7},
    [F_ECC_UNCORRECTED] = {"tide_gpu_ecc_uncorrected_errors_total",
                           "Uncorrected ECC errors since the driver loaded.", TIDE_PROM_COUNTER,
                           1u << 7},
    [F_XID] = {"tide_gpu_xid_events_total", "XID events since the worker started.",
               TIDE_PROM_COUNTER, 1u << 8},
    [F_PEAK] = {"tide_gpu_peak_flops_per_second", "The GPU's dense BF16 peak (the MFU denominator).",
                TIDE_PROM_GAUGE, 0},
    [F_MFU] = {"tide_worker_mfu_ratio",
               "MFU of the rank this worker runs, when its trainer uses the SDK.", TIDE_PROM_GAUGE, 0},
    [F_NET] = {"tide_node_network_utilization_ratio",
               "The worker's node: network bytes/s over link capacity, busiest direction.",
               TIDE_PROM_GAUGE, 1u << 9},
    [F_STORAGE] = {"tide_node_storage_utilization_ratio",
                   "The worker's node: busiest disk's busy time (or bytes/s over a capacity).",
                   TIDE_PROM_GAUGE, 1u << 10},
    [F_RISK] = {"tide_gpu_failure_risk_ratio",
                "Failure risk from the GPU's telemetry (docs/metrics.md, rule-based).",
                TIDE_PROM_GAUGE, 0},
};

static bool gpu_figure(const tide_worker_t *w, enum gpu_fig f, double *v)
{
    const tide_telemetry_t *t = &w->telemetry;
    const tide_job_rank_t *slot =
        w->job && w->rank >= 0 && w->rank < w->job->n_ranks ? &w->job->ranks[w->rank] : NULL;

    if (gpu_fams[f].bit && !(t->known & gpu_fams[f].bit))
        return false;
    switch (f) {
    case F_UTIL: *v = t->gpu_util; break;
    case F_MEM_USED: *v = (double)t->mem_used_bytes; break;
    case F_MEM_TOTAL: *v = (double)t->mem_total_bytes; break;
    case F_TEMP: *v = t->temperature_c; break;
    case F_POWER: *v = t->power_w; break;
    case F_MEM_BW: *v = t->mem_bw_util; break;
    case F_SM_CLOCK: *v = t->sm_clock_mhz * 1e6; break;
    case F_MEM_CLOCK: *v = t->mem_clock_mhz * 1e6; break;
    case F_ECC_CORRECTED: *v = (double)t->ecc_corrected; break;
    case F_ECC_UNCORRECTED: *v = (double)t->ecc_uncorrected; break;
    case F_XID: *v = (double)t->xid_count; break;
    case F_PEAK: *v = w->peak_flops; break;
    case F_MFU:
        if (!slot || !slot->progress.sdk)
            return false;
        *v = slot->progress.mfu;
        break;
    case F_NET: *v = t->net_util; break;
    case F_STORAGE: *v = t->storage_util; break;
    case F_RISK: *v = tide_core_worker_risk(w); break;
    default:
        return false;
    }
    return true;
}

/* The per-GPU families, while the fleet is small enough (--metrics-gpu-limit): else one gauge saying how
 * many workers' series were left out, so a scrape of a large fleet stays small and never walks it. */
static void write_gpus(tide_daemon_t *d, tide_prom_t *p)
{
    int64_t limit = d->cfg.metrics_gpu_limit ? d->cfg.metrics_gpu_limit : TIDE_METRICS_GPU_LIMIT;
    size_t n;
    tide_worker_t **ws;
    int w[5];

    tide_core_worker_counts(d->core, w);
    tide_prom_family(p, "tide_metrics_gpus_omitted", TIDE_PROM_GAUGE,
                     "Live workers whose per-GPU series /metrics leaves out (--metrics-gpu-limit).");
    if (limit < 0 || (int64_t)(w[1] + w[2] + w[3]) > limit) {
        tide_prom_sample(p, NULL, 0, (double)(w[1] + w[2] + w[3]));
        return;
    }
    tide_prom_sample(p, NULL, 0, 0);
    ws = tide_core_workers_sorted(d->core, &n);

    for (int f = 0; f < F_COUNT; f++) {
        tide_prom_family(p, gpu_fams[f].name, gpu_fams[f].type, gpu_fams[f].help);
        for (size_t i = 0; i < n; i++) {
            tide_prom_label_t l = {"worker", ws[i]->id};
            double v;
            if (ws[i]->state == TIDE_WORKER_DEAD || !ws[i]->last_heartbeat_ms)
                continue;
            if (gpu_figure(ws[i], (enum gpu_fig)f, &v))
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
    tide_prom_family(p, "tide_steal_requests_total", TIDE_PROM_COUNTER,
                     "Steal requests of ranks whose task deque ran empty (docs/work-stealing.md).");
    tide_prom_sample(p, NULL, 0, (double)d->steal_requests_total);
    tide_prom_family(p, "tide_task_reports_rejected_total", TIDE_PROM_COUNTER,
                     "Task messages from workers the scheduler refused (bad input; nothing changed).");
    tide_prom_sample(p, NULL, 0, (double)d->task_reports_rejected_total);
    {
        uint64_t n[TIDE_RESIZE_REASONS];
        double s[TIDE_RESIZE_REASONS];
        tide_burst_stats_t bs;
        tide_core_resize_stats(d->core, n, s);
        tide_prom_family(p, "tide_resizes_total", TIDE_PROM_COUNTER,
                         "Completed job resizes by reason (docs/elastic.md).");
        for (int i = TIDE_RESIZE_REQUESTED; i < TIDE_RESIZE_REASONS; i++) {
            tide_prom_label_t l = {"reason", tide_resize_reason_name((tide_resize_reason_t)i)};
            tide_prom_sample(p, &l, 1, (double)n[i]);
        }
        tide_prom_family(p, "tide_resize_seconds_total", TIDE_PROM_COUNTER,
                         "Their latencies summed: decision to every rank of the new generation running.");
        for (int i = TIDE_RESIZE_REQUESTED; i < TIDE_RESIZE_REASONS; i++) {
            tide_prom_label_t l = {"reason", tide_resize_reason_name((tide_resize_reason_t)i)};
            tide_prom_sample(p, &l, 1, s[i]);
        }
        tide_core_burst_stats(d->core, &bs);
        tide_prom_family(p, "tide_burst_workers", TIDE_PROM_GAUGE,
                         "Workers lent to jobs in their high-load phases now (docs/elastic.md, \"Burst\").");
        tide_prom_sample(p, NULL, 0, (double)bs.lent_now);
        tide_prom_family(p, "tide_burst_lent_total", TIDE_PROM_COUNTER, "Workers lent for bursts.");
        tide_prom_sample(p, NULL, 0, (double)bs.lent_total);
        tide_prom_family(p, "tide_bursts_total", TIDE_PROM_COUNTER, "Burst lendings (one decision may lend several).");
        tide_prom_sample(p, NULL, 0, (double)bs.bursts);
        tide_prom_family(p, "tide_burst_reclaims_total", TIDE_PROM_COUNTER, "Burst lendings taken back.");
        tide_prom_sample(p, NULL, 0, (double)bs.reclaims);
        tide_prom_family(p, "tide_burst_worker_seconds_total", TIDE_PROM_COUNTER,
                         "Lent-worker seconds of the lendings taken back.");
        tide_prom_sample(p, NULL, 0, bs.lent_seconds);
    }
    tide_prom_family(p, "tide_store_commits_total", TIDE_PROM_COUNTER, "Group commits to the store.");
    tide_prom_sample(p, NULL, 0, (double)d->commits_total);
    tide_prom_family(p, "tide_store_writes_total", TIDE_PROM_COUNTER,
                     "Puts and deletes written to the store.");
    tide_prom_sample(p, NULL, 0, (double)d->commit_ops_total);
    tide_prom_family(p, "tide_is_leader", TIDE_PROM_GAUGE,
                     "1 while this scheduler leads (and serves), 0 on a standby.");
    tide_prom_sample(p, NULL, 0, 1);
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
    write_health(d, p);
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

/* What the core adds up from workers' reports for MFU and utilization (docs/metrics.md): a job's
 * achieved model FLOP/s and its GPUs' peak, the cluster's (denominator: every healthy GPU), and the
 * mean utilization per dimension over a job's workers and over the cluster's, and the GPUs' failure
 * risk from their telemetry. Reads only; scans are for status queries. */
#include "core_private.h"
#include "risk.h"

void tide_core_job_flops(const tide_job_t *job, double *achieved, double *peak)
{
    double a = 0, p = 0;

    for (int32_t r = 0; job->state == TIDE_JOB_RUNNING && r < job->n_ranks; r++) {
        const tide_job_rank_t *slot = &job->ranks[r];
        if (slot->state != TIDE_RANK_RUNNING)
            continue;
        if (slot->progress.sdk)
            a += slot->progress.flops_per_s;
        if (slot->worker)
            p += slot->worker->peak_flops;
    }
    *achieved = a;
    *peak = p;
}

void tide_core_cluster_flops(const tide_core_t *core, double *achieved, double *peak)
{
    double a = 0, p = 0, ja, jp;
    const tide_list_t *pos;
    tide_worker_t *w, *tmp;

    tide_list_for_each(pos, &core->jobs_by_seq) {
        const tide_job_t *job = tide_list_entry(pos, tide_job_t, all_node);
        if (job->state != TIDE_JOB_RUNNING)
            continue;
        tide_core_job_flops(job, &ja, &jp);
        a += ja;
    }
    HASH_ITER(hh, core->workers, w, tmp) {
        if (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY)
            p += w->peak_flops;
    }
    *achieved = a;
    *peak = p;
}

/* Telemetry bits (TIDE_GPU_HAS_*, common/gpu/gpu.h) of each dimension, in tide_dim_t order. */
static const uint32_t dim_bits[TIDE_DIM_COUNT] = {1u << 0, 1u << 4, 1u << 9, 1u << 10};

typedef struct util_sum {
    double sum[TIDE_DIM_COUNT];
    int32_t n[TIDE_DIM_COUNT];
} util_sum_t;

static void util_add(util_sum_t *s, const tide_telemetry_t *t)
{
    const double v[TIDE_DIM_COUNT] = {t->gpu_util, t->mem_bw_util, t->net_util, t->storage_util};

    for (int d = 0; d < TIDE_DIM_COUNT; d++) {
        if (t->known & dim_bits[d]) {
            s->sum[d] += v[d];
            s->n[d]++;
        }
    }
}

static void util_mean(const util_sum_t *s, tide_utilization_t *out)
{
    out->known = 0;
    for (int d = 0; d < TIDE_DIM_COUNT; d++) {
        out->u[d] = s->n[d] ? s->sum[d] / s->n[d] : 0;
        if (s->n[d])
            out->known |= 1u << d;
    }
}

void tide_core_job_utilization(const tide_job_t *job, tide_utilization_t *out)
{
    util_sum_t s = {{0}, {0}};

    for (int32_t r = 0; job->state == TIDE_JOB_RUNNING && r < job->n_ranks; r++) {
        const tide_job_rank_t *slot = &job->ranks[r];
        if (slot->state == TIDE_RANK_RUNNING && slot->worker)
            util_add(&s, &slot->worker->telemetry);
    }
    util_mean(&s, out);
}

void tide_core_cluster_utilization(const tide_core_t *core, tide_utilization_t *out)
{
    util_sum_t s = {{0}, {0}};
    tide_worker_t *w, *tmp;

    HASH_ITER(hh, core->workers, w, tmp) {
        if (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY)
            util_add(&s, &w->telemetry);
    }
    util_mean(&s, out);
}

double tide_core_worker_risk(const tide_worker_t *w)
{
    return w->risk_score; /* prediction.c keeps it per heartbeat */
}

void tide_core_cluster_risk(const tide_core_t *core, double *risk)
{
    double r = 0;
    tide_worker_t *w, *tmp;

    HASH_ITER(hh, core->workers, w, tmp) {
        if (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY) {
            double wr = tide_core_worker_risk(w);
            if (wr > r)
                r = wr;
        }
    }
    *risk = r;
}

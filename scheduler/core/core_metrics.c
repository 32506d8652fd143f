/* What the core adds up from workers' reports for MFU and utilization (docs/metrics.md): a job's
 * achieved model FLOP/s and its GPUs' peak, the cluster's (denominator: every healthy GPU), and the
 * cluster's mean GPU and memory-bandwidth utilization. Reads only; scans are for status queries. */
#include "core_private.h"

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

void tide_core_cluster_utilization(const tide_core_t *core, double *gpu_util, int32_t *n_gpu,
                                   double *mem_bw, int32_t *n_mem_bw)
{
    double su = 0, sb = 0;
    int32_t nu = 0, nb = 0;
    tide_worker_t *w, *tmp;

    HASH_ITER(hh, core->workers, w, tmp) {
        uint32_t known = w->telemetry.known;
        if (w->state != TIDE_WORKER_READY && w->state != TIDE_WORKER_BUSY)
            continue;
        if (known & 1u) { /* TIDE_GPU_HAS_UTIL */
            su += w->telemetry.gpu_util;
            nu++;
        }
        if (known & 16u) { /* TIDE_GPU_HAS_MEM_BW */
            sb += w->telemetry.mem_bw_util;
            nb++;
        }
    }
    *gpu_util = nu ? su / nu : 0;
    *n_gpu = nu;
    *mem_bw = nb ? sb / nb : 0;
    *n_mem_bw = nb;
}

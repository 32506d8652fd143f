/* tide.v1.ClusterService (ListWorkers, GetClusterStatus, CordonWorker, UncordonWorker, DrainWorker); the
 * health service is svc_health.c. Workers that said goodbye (departed) are listed only when asked for and
 * never counted. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "daemon.h"
#include "health.h"
#include "mfu.h"
#include "xmalloc.h"

#include "tide/v1/cluster_service.pb-c.h"

static void unary_close(tide_rpc_call_t *call)
{
    tide_daemon_forget_call(tide_rpc_call_server_data(call), call);
}

static void list_workers(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__ListWorkersRequest *req = tide__v1__list_workers_request__unpack(NULL, len, data);
    Tide__V1__ListWorkersResponse resp = TIDE__V1__LIST_WORKERS_RESPONSE__INIT;
    tide_worker_t **ws;
    unsigned states = 0;
    size_t n;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             "request is not a valid tide.v1.ListWorkersRequest");
        return;
    }
    for (size_t i = 0; i < req->n_states; i++) {
        if (req->states[i] < TIDE__V1__WORKER_STATE__WORKER_STATE_READY ||
            req->states[i] > TIDE__V1__WORKER_STATE__WORKER_STATE_DEAD) {
            tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                                 "states has a value that is not a WorkerState");
            goto done;
        }
        states |= 1u << req->states[i];
    }
    ws = tide_core_workers_sorted(d->core, &n);
    resp.workers = tide_arena_calloc(&d->arena, n + 1, sizeof(*resp.workers));
    for (size_t i = 0; i < n; i++) {
        Tide__V1__Worker *pb;
        if (states && !(states & (1u << ws[i]->state)))
            continue;
        if (ws[i]->departed && !req->include_departed)
            continue; /* it said goodbye: gone from the list unless asked for */
        pb = tide_arena_alloc(&d->arena, sizeof(*pb));
        tide_conv_worker(d->core, ws[i], pb, &d->arena);
        pb->departed = ws[i]->departed;
        resp.workers[resp.n_workers++] = pb;
    }
    free(ws);
    tide_daemon_reply(d, call, &resp.base);
    tide_arena_reset(&d->arena);
done:
    tide__v1__list_workers_request__free_unpacked(req, NULL);
}

void tide_daemon_health(tide_daemon_t *d, tide_health_input_t *in, tide_health_t *h)
{
    tide_reserve_t r;

    memset(in, 0, sizeof(*in));
    tide_core_cluster_utilization(d->core, &in->util);
    tide_core_cluster_risk(d->core, &in->failure_risk);
    /* The reserve term: free GPUs against the headroom reserve the policy wants (docs/policies.md);
     * with no reserve (small clusters) it counts as met. */
    tide_core_reserve(d->core, &r);
    in->reserve_target_gpus = r.gpus;
    in->reserve_gpus = r.free;
    tide_health_score(in, h);
}

/* Running jobs checkpointing before they yield to a higher class. O(jobs): for status queries. */
static int32_t jobs_preempting(const tide_core_t *core)
{
    const tide_job_t *job = NULL;
    int32_t n = 0;

    while ((job = tide_core_job_next(core, job)))
        n += job->state == TIDE_JOB_RUNNING && job->preempted_by != NULL;
    return n;
}

static void cluster_status(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__GetClusterStatusRequest *req = tide__v1__get_cluster_status_request__unpack(NULL, len, data);
    Tide__V1__ClusterStatus st = TIDE__V1__CLUSTER_STATUS__INIT;
    int w[5], j[6];

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             "request is not a valid tide.v1.GetClusterStatusRequest");
        return;
    }
    tide__v1__get_cluster_status_request__free_unpacked(req, NULL);
    tide_core_worker_counts(d->core, w);
    tide_core_job_counts(d->core, j);
    st.version = TIDE_VERSION;
    st.uptime_ms = (int64_t)uv_now(d->loop) - d->start_mono;
    st.leader_epoch = d->epoch;
    st.workers_ready = w[TIDE_WORKER_READY];
    st.workers_busy = w[TIDE_WORKER_BUSY];
    st.workers_suspect = w[TIDE_WORKER_SUSPECT];
    st.workers_dead = w[TIDE_WORKER_DEAD];
    st.workers_cordoned = w[0];
    st.workers_total = w[1] + w[2] + w[3] + w[4];
    st.jobs_pending = j[TIDE_JOB_PENDING];
    st.jobs_running = j[TIDE_JOB_RUNNING];
    st.jobs_succeeded = j[TIDE_JOB_SUCCEEDED];
    st.jobs_failed = j[TIDE_JOB_FAILED];
    st.jobs_cancelled = j[TIDE_JOB_CANCELLED];
    st.store = (char *)tide_store_scheme(d->store);
    tide_core_cluster_flops(d->core, &st.flops_per_s, &st.peak_flops);
    st.mfu = tide_mfu(st.flops_per_s, st.peak_flops);
    {
        tide_health_input_t in;
        tide_health_t h;
        tide_daemon_health(d, &in, &h);
        st.utilization_compute = in.util.u[TIDE_DIM_COMPUTE];
        st.utilization_memory_bandwidth = in.util.u[TIDE_DIM_MEMORY_BW];
        st.utilization_network = in.util.u[TIDE_DIM_NETWORK];
        st.utilization_storage = in.util.u[TIDE_DIM_STORAGE];
        st.utilization_known = in.util.known;
        st.bottleneck = (char *)tide_dim_name(h.bottleneck);
        st.health_score = h.score;
        st.health_status = tide_arena_strdup(&d->arena, h.status);
    }
    {
        tide_reserve_t r;
        tide_core_reserve(d->core, &r);
        st.reserve_gpus = r.gpus;
        st.reserve_spares = r.spares;
        st.reserve_burst = r.burst;
        st.reserve_fixed = r.fixed;
        st.failure_rate_per_gpu_hour = r.failure_rate;
        st.failure_rate_observed = r.observed;
        st.gpus_free = r.free;
    }
    st.jobs_preempting = jobs_preempting(d->core);
    tide_core_running_target(d->core, &st.mfu_target_low, &st.mfu_target_high, &st.running_mfu);
    tide_daemon_reply(d, call, &st.base);
    tide_arena_reset(&d->arena);
}

/* The answer of a worker call: the worker, or the core's error as its status. */
static void reply_worker(tide_daemon_t *d, tide_rpc_call_t *call, int rc, const tide_worker_t *w,
                         const tide_error_t *err)
{
    Tide__V1__Worker pb;

    if (rc < 0) {
        tide_daemon_reply_status(d, call, tide_daemon_code(rc), err->text);
        return;
    }
    tide_conv_worker(d->core, w, &pb, &d->arena);
    pb.departed = w->departed;
    tide_daemon_reply(d, call, &pb.base);
    tide_arena_reset(&d->arena);
    tide_daemon_absorb(d);
}

static void cordon_common(tide_rpc_call_t *call, const uint8_t *data, size_t len, bool cordon)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__WorkerRef *req = tide__v1__worker_ref__unpack(NULL, len, data);
    tide_worker_t *w = NULL;
    tide_error_t err;
    int rc;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "request is not a valid tide.v1.WorkerRef");
        return;
    }
    if (!req->id[0]) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "id must not be empty");
        goto done;
    }
    {
        char note[96];
        snprintf(note, sizeof(note), "worker %.80s", req->id);
        tide_rpc_call_set_note(call, note);
    }
    tide_daemon_now(d);
    rc = tide_core_worker_cordon(d->core, req->id, cordon, &w, &err);
    reply_worker(d, call, rc, w, &err);
done:
    tide__v1__worker_ref__free_unpacked(req, NULL);
}

static void drain(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__DrainWorkerRequest *req = tide__v1__drain_worker_request__unpack(NULL, len, data);
    tide_worker_t *w = NULL;
    tide_error_t err;
    int rc;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "request is not a valid tide.v1.DrainWorkerRequest");
        return;
    }
    if (!req->id[0]) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "id must not be empty");
        goto done;
    }
    if (strlen(req->reason) > 256) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "reason must be at most 256 bytes");
        goto done;
    }
    {
        char note[96];
        snprintf(note, sizeof(note), "worker %.80s", req->id);
        tide_rpc_call_set_note(call, note);
    }
    tide_daemon_now(d);
    rc = tide_core_worker_drain(d->core, req->id, req->reason, &w, &err);
    reply_worker(d, call, rc, w, &err);
done:
    tide__v1__drain_worker_request__free_unpacked(req, NULL);
}

static void cordon(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    cordon_common(call, data, len, true);
}

static void uncordon(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    cordon_common(call, data, len, false);
}

const tide_rpc_method_t tide_svc_cluster[] = {
    {.path = "/tide.v1.ClusterService/ListWorkers", .on_message = list_workers, .on_close = unary_close},
    {.path = "/tide.v1.ClusterService/GetClusterStatus", .on_message = cluster_status,
     .on_close = unary_close},
    {.path = "/tide.v1.ClusterService/CordonWorker", .on_message = cordon, .on_close = unary_close},
    {.path = "/tide.v1.ClusterService/UncordonWorker", .on_message = uncordon, .on_close = unary_close},
    {.path = "/tide.v1.ClusterService/DrainWorker", .on_message = drain, .on_close = unary_close},
};
const size_t tide_svc_cluster_count = sizeof(tide_svc_cluster) / sizeof(tide_svc_cluster[0]);

/* JobService/GetJobLogs: the scheduler relays each requested rank's output from the worker that ran it
 * (LogRequest down the worker's stream, LogData back up) to the client as LogChunks, so tidectl needs to
 * reach only the scheduler. One relay per client call, one request per rank; the call ends when every
 * rank's request has ended, with UNAVAILABLE naming the ranks whose worker could not be reached. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "authz.h"
#include "daemon.h"
#include "log.h"
#include "xmalloc.h"

#include "tide/v1/job_service.pb-c.h"
#include "tide/v1/worker_service.pb-c.h"

typedef struct relay {
    tide_daemon_t *d;
    tide_rpc_call_t *call; /* NULL once the client is gone */
    int pending;
    int32_t generation;
    tide_buf_t errors;
    log_req_t **reqs;
    size_t n_reqs;
} relay_t;

struct log_req {
    uint64_t id;
    relay_t *relay;
    uint64_t stream_id;
    int32_t rank;
    char *worker_id;
    bool done;
    UT_hash_handle hh;
};

void tide_logs_revoke(tide_daemon_t *d)
{
    log_req_t *q, *tmp;
    char msg[200];

    HASH_ITER(hh, d->log_reqs, q, tmp) {
        tide_rpc_call_t *call = q->relay ? q->relay->call : NULL;
        if (call && !tide_authz_current(d->authz, tide_rpc_call_identity(call), msg, sizeof(msg)))
            tide_rpc_call_finish(call, TIDE_GRPC_UNAUTHENTICATED, msg); /* idempotent: one relay, many ranks */
    }
}

static void relay_error(relay_t *r, int32_t rank, const char *text)
{
    if (r->errors.len)
        tide_buf_append_str(&r->errors, "; ");
    tide_buf_printf(&r->errors, "rank %d: %s", rank, text);
}

static void relay_free(relay_t *r)
{
    for (size_t i = 0; i < r->n_reqs; i++) {
        log_req_t *q = r->reqs[i];
        if (q) {
            HASH_DEL(r->d->log_reqs, q);
            free(q->worker_id);
            free(q);
        }
    }
    free(r->reqs);
    tide_buf_free(&r->errors);
    free(r);
}

static void relay_maybe_finish(relay_t *r)
{
    if (r->pending > 0 || !r->call)
        return;
    if (r->errors.len)
        tide_rpc_call_finish(r->call, TIDE_GRPC_UNAVAILABLE, tide_buf_cstr(&r->errors));
    else
        tide_rpc_call_finish(r->call, TIDE_GRPC_OK, NULL);
}

static void req_done(log_req_t *q)
{
    if (q->done)
        return;
    q->done = true;
    q->relay->pending--;
}

static void send_request(tide_daemon_t *d, log_req_t *q, const char *job_id, bool follow, bool cancel)
{
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__LogRequest lr = TIDE__V1__LOG_REQUEST__INIT;
    uint8_t stackbuf[512];
    size_t n;

    lr.request_id = q->id;
    lr.job_id = (char *)job_id;
    lr.rank = q->rank;
    lr.follow = follow;
    lr.cancel = cancel;
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_LOG_REQUEST;
    msg.log_request = &lr;
    n = protobuf_c_message_get_packed_size(&msg.base);
    if (n > sizeof(stackbuf))
        return; /* a job id this long cannot be; nothing to send */
    protobuf_c_message_pack(&msg.base, stackbuf);
    tide_wstream_send(d, q->stream_id, stackbuf, n);
}

static void on_request(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__GetJobLogsRequest *req = tide__v1__get_job_logs_request__unpack(NULL, len, data);
    tide_job_t *job;
    relay_t *r;
    char msg[300];
    size_t n;

    if (!req) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                             "request is not a valid tide.v1.GetJobLogsRequest");
        return;
    }
    if (!req->id[0]) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "id must not be empty");
        goto done;
    }
    job = tide_core_job_find(d->core, req->id);
    if (!job) {
        snprintf(msg, sizeof(msg), "job %.200s not found", req->id);
        tide_rpc_call_finish(call, TIDE_GRPC_NOT_FOUND, msg);
        goto done;
    }
    if (!tide_authz_current(d->authz, tide_rpc_call_identity(call), msg, sizeof(msg)) ||
        !tide_authz_job(tide_rpc_call_identity(call), job, "read the logs of", msg, sizeof(msg))) {
        tide_rpc_call_finish(call, TIDE_GRPC_PERMISSION_DENIED, msg);
        goto done;
    }
    if (job->n_ranks == 0) {
        snprintf(msg, sizeof(msg), "job %s has not started (%s): no output yet", job->id,
                 tide_job_state_name(job->state));
        tide_rpc_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, msg);
        goto done;
    }
    if (req->n_ranks > (size_t)job->n_ranks) {
        snprintf(msg, sizeof(msg), "ranks: %zu ranks asked, job %s has %d", req->n_ranks, job->id,
                 job->n_ranks);
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, msg);
        goto done;
    }
    for (size_t i = 0; i < req->n_ranks; i++) {
        if (req->ranks[i] < 0 || req->ranks[i] >= job->n_ranks) {
            snprintf(msg, sizeof(msg), "ranks: %d is not a rank of job %s (0..%d)", req->ranks[i],
                     job->id, job->n_ranks - 1);
            tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, msg);
            goto done;
        }
        for (size_t k = 0; k < i; k++) {
            if (req->ranks[k] == req->ranks[i]) {
                snprintf(msg, sizeof(msg), "ranks: %d is listed twice", req->ranks[i]);
                tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, msg);
                goto done;
            }
        }
    }
    n = req->n_ranks ? req->n_ranks : (size_t)job->n_ranks;
    r = tide_xcalloc(1, sizeof(*r));
    r->d = d;
    r->call = call;
    r->generation = job->generation;
    r->reqs = tide_xcalloc(n, sizeof(*r->reqs));
    r->n_reqs = n;
    tide_rpc_call_set_data(call, r);
    for (size_t i = 0; i < n; i++) {
        int32_t rank = req->n_ranks ? req->ranks[i] : (int32_t)i;
        const char *wid = job->ranks[rank].worker_id;
        tide_worker_t *w = tide_core_worker_find(d->core, wid);
        if (!w || !w->connected) {
            snprintf(msg, sizeof(msg), "worker %s is not connected", wid);
            relay_error(r, rank, msg);
            continue;
        }
        log_req_t *q = tide_xcalloc(1, sizeof(*q));
        q->id = ++d->next_log_req;
        q->relay = r;
        q->stream_id = tide_conn_id(w->conn);
        q->rank = rank;
        q->worker_id = tide_xstrdup(wid);
        HASH_ADD(hh, d->log_reqs, id, sizeof(q->id), q);
        r->reqs[i] = q;
        r->pending++;
        send_request(d, q, job->id, req->follow, false);
    }
    relay_maybe_finish(r);
done:
    tide__v1__get_job_logs_request__free_unpacked(req, NULL);
}

static void on_close(tide_rpc_call_t *call)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    relay_t *r = tide_rpc_call_data(call);

    if (!r)
        return;
    r->call = NULL;
    for (size_t i = 0; i < r->n_reqs; i++) {
        log_req_t *q = r->reqs[i];
        if (q && !q->done)
            send_request(d, q, "", false, true);
    }
    relay_free(r);
}

void tide_logs_on_data(tide_daemon_t *d, uint64_t stream_id, const Tide__V1__LogData *ld)
{
    log_req_t *q;
    relay_t *r;

    HASH_FIND(hh, d->log_reqs, &ld->request_id, sizeof(ld->request_id), q);
    if (!q || q->stream_id != stream_id || q->done)
        return;
    r = q->relay;
    if (ld->data.len && r->call) {
        Tide__V1__LogChunk c = TIDE__V1__LOG_CHUNK__INIT;
        c.rank = q->rank;
        c.worker_id = q->worker_id;
        c.data = ld->data;
        c.generation = r->generation;
        if (tide_rpc_call_send_pb(r->call, &c.base) == -ENOBUFS) {
            tide_rpc_call_finish(r->call, TIDE_GRPC_RESOURCE_EXHAUSTED,
                                 "the client reads the log too slowly");
            return;
        }
    }
    if (ld->eof) {
        if (ld->error && ld->error[0])
            relay_error(r, q->rank, ld->error);
        req_done(q);
        relay_maybe_finish(r);
    }
}

void tide_logs_on_stream_closed(tide_daemon_t *d, uint64_t stream_id)
{
    log_req_t *q, *tmp;
    relay_t **hit = NULL;
    size_t n = 0, cap = 0;

    /* Mark first, finish after: finishing a relay may free it and its requests. */
    HASH_ITER(hh, d->log_reqs, q, tmp) {
        bool seen = false;
        if (q->stream_id != stream_id || q->done)
            continue;
        char msg[200];
        snprintf(msg, sizeof(msg), "worker %s disconnected", q->worker_id);
        relay_error(q->relay, q->rank, msg);
        req_done(q);
        for (size_t i = 0; i < n; i++)
            seen |= hit[i] == q->relay;
        if (seen)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            hit = tide_xrealloc(hit, cap * sizeof(*hit));
        }
        hit[n++] = q->relay;
    }
    for (size_t i = 0; i < n; i++)
        relay_maybe_finish(hit[i]);
    free(hit);
}

void tide_logs_free(tide_daemon_t *d)
{
    log_req_t *q, *tmp;

    HASH_ITER(hh, d->log_reqs, q, tmp) {
        HASH_DEL(d->log_reqs, q);
        free(q->worker_id);
        free(q);
    }
}

const tide_rpc_method_t tide_svc_job_logs = {
    .path = "/tide.v1.JobService/GetJobLogs",
    .kind = TIDE_RPC_SERVER_STREAMING,
    .on_message = on_request,
    .on_close = on_close,
};

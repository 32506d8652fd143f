/* tide.v1.JobService unary methods: SubmitJob, GetJob, ListJobs, CancelJob, CheckpointJob, ScaleJob. Every
 * reply goes through the outbox, so a client never sees state the store does not have yet. Bad input
 * (including a ScaleJob size outside the job's bounds) is answered at once with INVALID_ARGUMENT naming
 * the field, and changes nothing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authz.h"
#include "convert.h"
#include "daemon.h"
#include "xmalloc.h"

#include "tide/v1/job_service.pb-c.h"

#define LIST_DEFAULT_PAGE 100
#define LIST_MAX_PAGE 1000

static void bad_request(tide_rpc_call_t *call, const char *type)
{
    char msg[128];
    snprintf(msg, sizeof(msg), "request is not a valid %s", type);
    tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, msg);
}

/* The caller may `verb` job id (authz.c): its owner, an admin, or for reads a read-only caller. Notes the
 * target for the audit log. An unknown id is the handler's to answer (NOT_FOUND). */
static bool may(tide_daemon_t *d, tide_rpc_call_t *call, const char *id, const char *verb)
{
    const tide_job_t *job = id && id[0] ? tide_core_job_find(d->core, id) : NULL;
    char note[96], msg[300];

    snprintf(note, sizeof(note), "job %.80s", id ? id : "");
    tide_rpc_call_set_note(call, note);
    if (tide_authz_current(d->authz, tide_rpc_call_identity(call), msg, sizeof(msg)) &&
        (!job || tide_authz_job(tide_rpc_call_identity(call), job, verb, msg, sizeof(msg))))
        return true;
    tide_rpc_call_finish(call, TIDE_GRPC_PERMISSION_DENIED, msg);
    return false;
}

static void reply_job(tide_daemon_t *d, tide_rpc_call_t *call, const tide_job_t *job)
{
    Tide__V1__Job pb;
    tide_conv_job(d->core, job, &pb, &d->arena);
    tide_daemon_reply(d, call, &pb.base);
    tide_arena_reset(&d->arena);
}

static void submit(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__SubmitJobRequest *req = tide__v1__submit_job_request__unpack(NULL, len, data);
    tide_job_spec_t spec;
    tide_job_t *job;
    tide_error_t err;
    int rc;

    if (!req) {
        bad_request(call, "tide.v1.SubmitJobRequest");
        return;
    }
    rc = tide_conv_spec_from_pb(req->spec, &spec, &d->arena, &err);
    if (rc == 0) {
        char msg[300];
        tide_grpc_code_t code = tide_authz_submit(d->authz, d->core, tide_rpc_call_identity(call), &spec, msg,
                                                  sizeof(msg));
        if (code != TIDE_GRPC_OK) {
            tide_rpc_call_finish(call, code, msg);
            goto done;
        }
        tide_daemon_now(d);
        rc = tide_core_job_submit(d->core, &spec, &job, &err);
    }
    if (rc < 0) {
        char msg[300];
        snprintf(msg, sizeof(msg), "%s%s", req->spec && strncmp(err.text, "spec", 4) != 0 ? "spec." : "",
                 err.text);
        tide_rpc_call_finish(call, tide_daemon_code(rc), msg);
    } else {
        char note[96];
        snprintf(note, sizeof(note), "job %.80s", job->id);
        tide_rpc_call_set_note(call, note);
        reply_job(d, call, job);
        tide_daemon_absorb(d);
    }
done:
    tide_arena_reset(&d->arena);
    tide__v1__submit_job_request__free_unpacked(req, NULL);
}

/* Answers that depend on state (NOT_FOUND, FAILED_PRECONDITION) go through the outbox like replies:
 * a client is never told something a crash could take back. */
static tide_job_t *find_job(tide_daemon_t *d, tide_rpc_call_t *call, const char *id)
{
    tide_job_t *job;
    char msg[300];

    if (!id || !id[0]) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "id must not be empty");
        return NULL;
    }
    job = tide_core_job_find(d->core, id);
    if (!job) {
        snprintf(msg, sizeof(msg), "job %.200s not found", id);
        tide_daemon_reply_status(d, call, TIDE_GRPC_NOT_FOUND, msg);
    }
    return job;
}

static void get(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__GetJobRequest *req = tide__v1__get_job_request__unpack(NULL, len, data);
    tide_job_t *job;

    if (!req) {
        bad_request(call, "tide.v1.GetJobRequest");
        return;
    }
    if (may(d, call, req->id, "see") && (job = find_job(d, call, req->id)))
        reply_job(d, call, job);
    tide__v1__get_job_request__free_unpacked(req, NULL);
}

static void list(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__ListJobsRequest *req = tide__v1__list_jobs_request__unpack(NULL, len, data);
    Tide__V1__ListJobsResponse resp = TIDE__V1__LIST_JOBS_RESPONSE__INIT;
    unsigned long long after = 0;
    size_t page, n = 0;
    tide_job_t *job = NULL;
    unsigned states = 0;
    char *end = NULL;
    const tide_rpc_identity_t *me = tide_rpc_call_identity(call);
    bool all = tide_authz_sees_all(me);

    if (!req) {
        bad_request(call, "tide.v1.ListJobsRequest");
        return;
    }
    if (req->page_size < 0) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "page_size must be >= 0");
        goto done;
    }
    page = req->page_size == 0 ? LIST_DEFAULT_PAGE
                               : (size_t)(req->page_size > LIST_MAX_PAGE ? LIST_MAX_PAGE : req->page_size);
    if (req->page_token[0]) {
        after = strtoull(req->page_token, &end, 10);
        if (*end != '\0') {
            tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                                 "page_token is not one this scheduler returned");
            goto done;
        }
    }
    for (size_t i = 0; i < req->n_states; i++) {
        if (req->states[i] < TIDE__V1__JOB_STATE__JOB_STATE_PENDING ||
            req->states[i] > TIDE__V1__JOB_STATE__JOB_STATE_CANCELLED) {
            tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "states has a value that is not a JobState");
            goto done;
        }
        states |= 1u << req->states[i];
    }
    resp.jobs = tide_arena_calloc(&d->arena, page + 1, sizeof(*resp.jobs));
    /* The page token is the last job number returned; jobs are kept in number order. */
    if (after) {
        char id[32];
        snprintf(id, sizeof(id), "%llu", after);
        job = tide_core_job_find(d->core, id);
        if (!job) {
            tide_job_t *j = NULL;
            while ((j = tide_core_job_next(d->core, j)) && j->seq <= after)
                job = j;
        }
    }
    while ((job = tide_core_job_next(d->core, job))) {
        Tide__V1__Job *pb;
        if (job->seq <= after || (states && !(states & (1u << job->state))))
            continue;
        if (!all && strcmp(tide_authz_owner(job), me->name) != 0)
            continue; /* a user sees their own jobs only */
        if (n == page) {
            resp.next_page_token = tide_arena_strdup(&d->arena, resp.jobs[n - 1]->id);
            break;
        }
        pb = tide_arena_alloc(&d->arena, sizeof(*pb));
        tide_conv_job(d->core, job, pb, &d->arena);
        resp.jobs[n++] = pb;
    }
    resp.n_jobs = n;
    tide_daemon_reply(d, call, &resp.base);
    tide_arena_reset(&d->arena);
done:
    tide__v1__list_jobs_request__free_unpacked(req, NULL);
}

static void cancel(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__CancelJobRequest *req = tide__v1__cancel_job_request__unpack(NULL, len, data);
    tide_job_t *job;
    tide_error_t err;
    int rc;

    if (!req) {
        bad_request(call, "tide.v1.CancelJobRequest");
        return;
    }
    if (!req->id[0]) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "id must not be empty");
        goto done;
    }
    if (!may(d, call, req->id, "cancel"))
        goto done;
    tide_daemon_now(d);
    rc = tide_core_job_cancel(d->core, req->id, &job, &err);
    if (rc < 0) {
        tide_daemon_reply_status(d, call, tide_daemon_code(rc), err.text);
    } else {
        reply_job(d, call, job);
        tide_daemon_absorb(d);
    }
done:
    tide__v1__cancel_job_request__free_unpacked(req, NULL);
}

static void checkpoint(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__CheckpointJobRequest *req = tide__v1__checkpoint_job_request__unpack(NULL, len, data);
    tide_job_t *job;
    tide_error_t err;
    int rc;

    if (!req) {
        bad_request(call, "tide.v1.CheckpointJobRequest");
        return;
    }
    if (!req->id[0]) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "id must not be empty");
        goto done;
    }
    if (!may(d, call, req->id, "checkpoint"))
        goto done;
    tide_daemon_now(d);
    rc = tide_core_job_checkpoint(d->core, req->id, req->deadline_ms, &job, &err);
    if (rc == -EINVAL) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, err.text);
    } else if (rc < 0) {
        tide_daemon_reply_status(d, call, tide_daemon_code(rc), err.text);
    } else {
        reply_job(d, call, job);
        tide_daemon_absorb(d);
    }
done:
    tide__v1__checkpoint_job_request__free_unpacked(req, NULL);
}

/* ScaleJob (docs/elastic.md): the core validates the size against the job's bounds and decides whether
 * the resize runs now or waits; either way the reply is the job with its resize. */
static void scale(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    Tide__V1__ScaleJobRequest *req = tide__v1__scale_job_request__unpack(NULL, len, data);
    tide_job_t *job;
    tide_error_t err;
    int rc;

    if (!req) {
        bad_request(call, "tide.v1.ScaleJobRequest");
        return;
    }
    if (!req->id[0]) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "id must not be empty");
        goto done;
    }
    if (req->elastic && req->workers != 0) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "workers must be 0 with elastic");
        goto done;
    }
    if (!may(d, call, req->id, "scale"))
        goto done;
    tide_daemon_now(d);
    rc = tide_core_job_scale(d->core, req->id, req->workers, req->elastic, &job, &err);
    if (rc == -EINVAL) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, err.text); /* names the bounds */
    } else if (rc < 0) {
        tide_daemon_reply_status(d, call, tide_daemon_code(rc), err.text); /* NOT_FOUND, FAILED_PRECONDITION */
    } else {
        reply_job(d, call, job);
        tide_daemon_absorb(d);
    }
done:
    tide__v1__scale_job_request__free_unpacked(req, NULL);
}

static void unary_close(tide_rpc_call_t *call)
{
    tide_daemon_forget_call(tide_rpc_call_server_data(call), call);
}

const tide_rpc_method_t tide_svc_jobs[] = {
    {.path = "/tide.v1.JobService/SubmitJob", .on_message = submit, .on_close = unary_close},
    {.path = "/tide.v1.JobService/GetJob", .on_message = get, .on_close = unary_close},
    {.path = "/tide.v1.JobService/ListJobs", .on_message = list, .on_close = unary_close},
    {.path = "/tide.v1.JobService/CancelJob", .on_message = cancel, .on_close = unary_close},
    {.path = "/tide.v1.JobService/CheckpointJob", .on_message = checkpoint, .on_close = unary_close},
    {.path = "/tide.v1.JobService/ScaleJob", .on_message = scale, .on_close = unary_close},
};
const size_t tide_svc_jobs_count = sizeof(tide_svc_jobs) / sizeof(tide_svc_jobs[0]);

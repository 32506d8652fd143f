/* tide.v1.WorkerService/Connect: one bidirectional stream per worker (protocol in docs/architecture.md).
 * The first message must be a hello of a protocol this scheduler speaks; then heartbeats, rank starts and
 * exits, checkpoint reports, durable-copy reports (flush_done) and log data. A heartbeat is O(1) and
 * allocates nothing once warm: worker messages are unpacked into an arena that is reset after each one.
 * The core knows a stream only by its id (conn handle), so a message queued for a stream that has since
 * ended is simply dropped. The checks and conversions of one message that need no stream are the
 * tide_wmsg_* functions (worker_msg.h), which tests/fuzz/fuzz_worker_message.c drives directly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authz.h"
#include "convert.h"
#include "daemon.h"
#include "log.h"
#include "users.h"
#include "worker_msg.h"
#include "xmalloc.h"

#include "tide/v1/worker_service.pb-c.h"

struct wstream {
    uint64_t id;
    tide_daemon_t *d;
    tide_rpc_call_t *call;
    tide_worker_t *worker; /* set by the hello */
    bool goodbye;
    UT_hash_handle hh;
    uint32_t task_warnings; /* task reports refused and logged on this stream */
};

/* Which identity registered each worker id (docs/security.md, "Workers"): a worker token may not take over a
 * worker id another identity registered. In memory: after a scheduler restart the first to register wins. */
struct worker_binding {
    char *worker_id;
    char identity[64];
    UT_hash_handle hh;
};

/* Whether the stream's identity may register worker_id; binds it when it is the first. */
static bool binding_ok(tide_daemon_t *d, const tide_rpc_identity_t *id, const char *worker_id, char *msg,
                       size_t cap)
{
    struct worker_binding *b = NULL;

    if (id->role != TIDE_ROLE_WORKER)
        return true; /* the admin token (or no authentication): any worker */
    HASH_FIND_STR(d->worker_bindings, worker_id, b);
    if (!b) {
        b = tide_xcalloc(1, sizeof(*b));
        b->worker_id = tide_xstrdup(worker_id);
        snprintf(b->identity, sizeof(b->identity), "%s", id->name);
        HASH_ADD_KEYPTR(hh, d->worker_bindings, b->worker_id, strlen(b->worker_id), b);
        return true;
    }
    if (!strcmp(b->identity, id->name))
        return true;
    snprintf(msg, cap, "hello.worker_id: %.80s was registered by %s; %s may not take it over", worker_id,
             b->identity, id->name);
    return false;
}

static void *rx_alloc(void *ud, size_t n)
{
    return tide_arena_alloc(ud, n);
}

static void rx_free(void *ud, void *p)
{
    (void)ud;
    (void)p;
}

wstream_t *tide_wstream_find(tide_daemon_t *d, uint64_t id)
{
    wstream_t *ws;
    HASH_FIND(hh, d->streams, &id, sizeof(id), ws);
    return ws;
}

void tide_wstream_send(tide_daemon_t *d, uint64_t stream_id, const uint8_t *bytes, size_t len)
{
    wstream_t *ws = tide_wstream_find(d, stream_id);

    if (!ws || !ws->call)
        return;
    if (tide_rpc_call_send(ws->call, bytes, len) == -ENOBUFS) {
        tide_warn("worker %s does not read its stream; closing it", ws->worker ? ws->worker->id : "?");
        tide_rpc_call_finish(ws->call, TIDE_GRPC_RESOURCE_EXHAUSTED, "worker stream not read");
    }
}

void tide_wstream_close(tide_daemon_t *d, uint64_t stream_id, tide_grpc_code_t code, const char *msg)
{
    wstream_t *ws = tide_wstream_find(d, stream_id);

    if (ws && ws->call)
        tide_rpc_call_finish(ws->call, code, msg);
}

void tide_wstreams_revoke(tide_daemon_t *d)
{
    wstream_t *ws, *tmp;
    char msg[200];

    HASH_ITER(hh, d->streams, ws, tmp) {
        if (ws->call && !tide_authz_current(d->authz, tide_rpc_call_identity(ws->call), msg, sizeof(msg))) {
            tide_warn("worker %s: %s: its stream ends", ws->worker ? ws->worker->id : "?", msg);
            tide_rpc_call_finish(ws->call, TIDE_GRPC_UNAUTHENTICATED, msg);
        }
    }
}

void tide_wstreams_free(tide_daemon_t *d)
{
    wstream_t *ws, *tmp;

    struct worker_binding *b, *btmp;

    HASH_ITER(hh, d->streams, ws, tmp) {
        HASH_DEL(d->streams, ws);
        if (ws->call)
            tide_rpc_call_set_data(ws->call, NULL);
        free(ws);
    }
    HASH_ITER(hh, d->worker_bindings, b, btmp) {
        HASH_DEL(d->worker_bindings, b);
        free(b->worker_id);
        free(b);
    }
}

int tide_wmsg_hello(const Tide__V1__WorkerHello *h, tide_worker_info_t *info, tide_rank_report_t **reps,
                    tide_arena_t *a, char *msg, size_t cap)
{
    tide_kv_t *labels;
    tide_rank_report_t *r_out;

    if (h->protocol_version != TIDE__V1__WORKER_PROTOCOL__WORKER_PROTOCOL_CURRENT) {
        snprintf(msg, cap,
                 "worker %s speaks worker protocol %u, this scheduler (tide %s) speaks %u; run the same "
                 "tide version on both",
                 h->worker_id, h->protocol_version, TIDE_VERSION,
                 (unsigned)TIDE__V1__WORKER_PROTOCOL__WORKER_PROTOCOL_CURRENT);
        return -EPROTO;
    }
    labels = tide_arena_calloc(a, h->n_labels + 1, sizeof(*labels));
    for (size_t i = 0; i < h->n_labels; i++) {
        labels[i].key = h->labels[i]->key;
        labels[i].value = h->labels[i]->value;
    }
    r_out = tide_arena_calloc(a, h->n_ranks + 1, sizeof(*r_out));
    for (size_t i = 0; i < h->n_ranks; i++) {
        const Tide__V1__RankStatus *r = h->ranks[i];
        r_out[i] = (tide_rank_report_t){.job_id = r->job_id, .generation = r->generation,
                                        .rank = r->rank,
                                        .running = r->state == TIDE__V1__RANK_STATE__RANK_STATE_RUNNING,
                                        .exit_code = r->exit_code, .pid = r->pid,
                                        .master_port = r->master_port, .error = r->error};
    }
    memset(info, 0, sizeof(*info));
    info->id = h->worker_id;
    info->node = h->node;
    info->gpu_index = h->gpu_index;
    info->device = h->device;
    info->peak_flops = h->peak_flops;
    info->memory_bytes = h->memory_bytes;
    info->labels = labels;
    info->n_labels = h->n_labels;
    info->address = h->address;
    info->launcher_address = h->launcher_address;
    info->agent_sock = h->agent_sock;
    info->version = h->version;
    info->boot_id = h->boot_id;
    info->stream_seq = h->stream_seq;
    *reps = r_out;
    return 0;
}

static void on_hello(wstream_t *ws, const Tide__V1__WorkerHello *h)
{
    tide_daemon_t *d = ws->d;
    tide_worker_info_t info = {0};
    tide_rank_report_t *reps = NULL;
    tide_error_t err;
    char msg[300];
    int rc;

    if (tide_wmsg_hello(h, &info, &reps, &d->rx_arena, msg, sizeof(msg)) < 0) {
        tide_warn("%s", msg);
        tide_rpc_call_finish(ws->call, TIDE_GRPC_FAILED_PRECONDITION, msg);
        return;
    }
    if (!binding_ok(d, tide_rpc_call_identity(ws->call), info.id, msg, sizeof(msg))) {
        tide_warn("%s", msg);
        tide_rpc_call_finish(ws->call, TIDE_GRPC_PERMISSION_DENIED, msg);
        return;
    }
    tide_daemon_now(d);
    rc = tide_core_worker_register(d->core, &info, tide_conn_handle(ws->id), reps, h->n_ranks,
                                   &ws->worker, &err);
    if (rc == -ESTALE) {
        /* An older stream of the agent (it has given it up): end it, change nothing. */
        snprintf(msg, sizeof(msg), "hello.%s", err.text);
        tide_info("worker %s: %s", info.id, msg);
        tide_rpc_call_finish(ws->call, TIDE_GRPC_ABORTED, msg);
        return;
    }
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "hello.%s", err.text);
        tide_rpc_call_finish(ws->call, TIDE_GRPC_INVALID_ARGUMENT, msg);
        return;
    }
    tide_daemon_absorb(d);
}

/* Bounds on a FlushDone (docs/policies.md, "Checkpoint gate"). A report that names no rank is dropped
 * (the core would ignore it anyway); one that names a rank but breaks a bound is taken as a failed copy,
 * never trusted and never dropped: the core then holds the copy and retries it, where a dropped answer
 * would leave the copy "copying" for good. */
static bool is_sha256_hex(const char *h)
{
    size_t n = 0;

    for (; h[n]; n++)
        if (!((h[n] >= '0' && h[n] <= '9') || (h[n] >= 'a' && h[n] <= 'f') || (h[n] >= 'A' && h[n] <= 'F')))
            return false;
    return n == 64;
}

int tide_wmsg_flush_check(const Tide__V1__FlushDone *f, bool *ok, char *error, const char **bad)
{
    *ok = f->ok;
    *bad = NULL;
    error[0] = '\0';
    if (!f->job_id[0] || strlen(f->job_id) > TIDE_WMSG_FLUSH_ID_MAX || f->generation < 1 || f->rank < 0 ||
        f->step < 0)
        return -EINVAL;
    if (strlen(f->durable_path) > TIDE_WMSG_FLUSH_PATH_MAX)
        *bad = "durable_path is longer than 4096 bytes";
    else if (f->sha256[0] && !is_sha256_hex(f->sha256))
        *bad = "sha256 is not 64 hex digits";
    else if (*ok && !f->durable_path[0])
        *bad = "ok without a durable_path";
    if (*bad) {
        snprintf(error, TIDE_WMSG_FLUSH_ERROR_CAP, "the worker's report is malformed: %s", *bad);
        *ok = false;
    } else {
        snprintf(error, TIDE_WMSG_FLUSH_ERROR_CAP, "%.*s", TIDE_WMSG_FLUSH_ERROR_MAX, f->error);
    }
    return 0;
}

static void on_flush_done(wstream_t *ws, const Tide__V1__FlushDone *f)
{
    tide_daemon_t *d = ws->d;
    const char *bad = NULL;
    char error[TIDE_WMSG_FLUSH_ERROR_CAP];
    bool ok;

    if (tide_wmsg_flush_check(f, &ok, error, &bad) < 0) {
        tide_warn("worker %s: ignoring a flush_done that names no rank (job \"%.64s\", generation %d, rank %d, "
                  "step %lld)",
                  ws->worker->id, f->job_id, f->generation, f->rank, (long long)f->step);
        return;
    }
    if (bad)
        tide_warn("worker %s: flush_done for job %s step %lld: %s", ws->worker->id, f->job_id, (long long)f->step,
                  error);
    tide_daemon_now(d);
    tide_core_ckpt_flushed(d->core, ws->worker, f->job_id, f->generation, f->rank, f->step, ok,
                           ok ? f->durable_path : NULL, f->bytes, ok ? f->sha256 : NULL, error);
    tide_daemon_absorb(d);
}

/* Work stealing (docs/work-stealing.md). A report the core refuses changes nothing: it is logged
 * (the first few per stream) and counted in tide_task_reports_rejected_total; the stream stays up. */
#define TASK_WARN_MAX 8 /* refusals logged per stream */

static int task_kind(Tide__V1__TaskKind k, tide_task_kind_t *out)
{
    switch (k) {
    case TIDE__V1__TASK_KIND__TASK_KIND_UNSPECIFIED:
    case TIDE__V1__TASK_KIND__TASK_KIND_MEMBER:
        *out = TIDE_TASK_MEMBER;
        return 0;
    case TIDE__V1__TASK_KIND__TASK_KIND_DETACHED:
        *out = TIDE_TASK_DETACHED;
        return 0;
    default:
        return -EINVAL;
    }
}

int tide_wmsg_task_apply(tide_core_t *core, tide_worker_t *w, const Tide__V1__WorkerMessage *m,
                         const char **what, tide_error_t *err)
{
    tide_task_kind_t kind = TIDE_TASK_MEMBER;
    int rc = -EINVAL;

    *what = "task report";
    switch (m->msg_case) {
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED: {
        const Tide__V1__TasksDeclared *t = m->tasks_declared;
        *what = "tasks_declared";
        if (task_kind(t->kind, &kind) != 0)
            tide_errprintf(err, "kind: unknown value %d", (int)t->kind);
        else if (t->n_task_ids > TIDE_WMSG_TASK_IDS_MAX)
            tide_errprintf(err, "task_ids: more than %d", TIDE_WMSG_TASK_IDS_MAX);
        else
            rc = tide_core_tasks_declared(core, w, t->job_id, t->generation, t->rank, kind, t->step, t->task_ids,
                                          t->n_task_ids, t->total, err);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE: {
        const Tide__V1__TasksDone *t = m->tasks_done;
        *what = "tasks_done";
        if (task_kind(t->kind, &kind) != 0)
            tide_errprintf(err, "kind: unknown value %d", (int)t->kind);
        else if (t->n_task_ids > TIDE_WMSG_TASK_IDS_MAX)
            tide_errprintf(err, "task_ids: more than %d", TIDE_WMSG_TASK_IDS_MAX);
        else
            rc = tide_core_tasks_done(core, w, t->job_id, t->generation, t->rank, kind, t->step, t->task_ids,
                                      t->n_task_ids, t->queued, err);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST: {
        const Tide__V1__StealRequest *t = m->steal_request;
        *what = "steal_request";
        if (task_kind(t->kind, &kind) != 0)
            tide_errprintf(err, "kind: unknown value %d", (int)t->kind);
        else
            rc = tide_core_steal_request(core, w, t->job_id, t->generation, t->rank, kind, t->step, t->steal_id,
                                         err);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED: {
        const Tide__V1__TasksReleased *t = m->tasks_released;
        *what = "tasks_released";
        if (task_kind(t->kind, &kind) != 0)
            tide_errprintf(err, "kind: unknown value %d", (int)t->kind);
        else if (t->n_task_ids > TIDE_WMSG_TASK_IDS_MAX)
            tide_errprintf(err, "task_ids: more than %d", TIDE_WMSG_TASK_IDS_MAX);
        else
            rc = tide_core_tasks_released(core, w, t->job_id, t->generation, t->rank, kind, t->step,
                                          t->release_id, t->task_ids, t->n_task_ids, t->queued, err);
        break;
    }
    default:
        rc = -ENOMSG;
        break;
    }
    return rc;
}

static void on_task_message(wstream_t *ws, const Tide__V1__WorkerMessage *m)
{
    tide_daemon_t *d = ws->d;
    tide_error_t err = {{0}};
    const char *what = "task report";
    int rc;

    if (ws->worker->conn != tide_conn_handle(ws->id))
        return; /* an older stream of a worker that has re-registered */
    tide_daemon_now(d);
    rc = tide_wmsg_task_apply(d->core, ws->worker, m, &what, &err);
    if (rc == -ENOMSG)
        return;
    if (m->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)
        d->steal_requests_total++;
    if (rc != 0 && m->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST) {
        /* A steal always gets an answer, or the rank's trainer would wait for good: one the core cannot
         * serve (a stale generation, a job that is stopping, an unknown pool) gets "none left", which is
         * always safe — the thief's deque is empty and every task stays where it is. */
        const Tide__V1__StealRequest *t = m->steal_request;
        Tide__V1__SchedulerMessage sm = TIDE__V1__SCHEDULER_MESSAGE__INIT;
        Tide__V1__GiveTasks gt = TIDE__V1__GIVE_TASKS__INIT;
        gt.job_id = t->job_id;
        gt.generation = t->generation;
        gt.rank = t->rank;
        gt.kind = t->kind;
        gt.step = t->step;
        gt.steal_id = t->steal_id;
        sm.epoch = d->epoch;
        sm.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS;
        sm.give_tasks = &gt;
        tide_daemon_to_worker(d, ws->id, &sm.base);
    }
    if (rc != 0 && rc != -ESTALE) {
        d->task_reports_rejected_total++;
        if (ws->task_warnings++ < TASK_WARN_MAX)
            tide_warn("worker %s: %s refused: %s", ws->worker->id, what, err.text[0] ? err.text : strerror(-rc));
    }
    tide_daemon_absorb(d);
}

static void on_message(tide_rpc_call_t *call, const uint8_t *data, size_t len)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    wstream_t *ws = tide_rpc_call_data(call);
    ProtobufCAllocator alloc = {rx_alloc, rx_free, &d->rx_arena};
    Tide__V1__WorkerMessage *m;

    if (!ws) {
        ws = tide_xcalloc(1, sizeof(*ws));
        ws->id = ++d->next_stream_id;
        ws->d = d;
        ws->call = call;
        HASH_ADD(hh, d->streams, id, sizeof(ws->id), ws);
        tide_rpc_call_set_data(call, ws);
    }
    m = tide__v1__worker_message__unpack(&alloc, len, data);
    if (!m) {
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "message is not a valid tide.v1.WorkerMessage");
        goto done;
    }
    if (!ws->worker && m->msg_case != TIDE__V1__WORKER_MESSAGE__MSG_HELLO) {
        tide_rpc_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, "the first message must be a hello");
        goto done;
    }
    switch (m->msg_case) {
    case TIDE__V1__WORKER_MESSAGE__MSG_HELLO:
        if (ws->worker) {
            tide_rpc_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, "hello sent twice on one stream");
            break;
        }
        on_hello(ws, m->hello);
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT: {
        tide_telemetry_t t = {0};
        size_t n;
        if (m->heartbeat->telemetry)
            tide_conv_telemetry_from_pb(m->heartbeat->telemetry, &t);
        d->heartbeats_total++;
        if (ws->worker->conn != tide_conn_handle(ws->id))
            break; /* an older stream of a worker that has re-registered: it no longer speaks for it */
        tide_daemon_now(d);
        tide_core_worker_heartbeat(d->core, ws->worker, &t);
        for (size_t i = 0; i < m->heartbeat->n_progress; i++) {
            const Tide__V1__RankProgress *rp = m->heartbeat->progress[i];
            tide_trainer_progress_t p;
            tide_conv_progress_from_pb(rp->progress, &p);
            tide_core_rank_progress(d->core, ws->worker, rp->job_id, rp->generation, rp->rank, &p);
        }
        tide_core_actions(d->core, &n);
        if (n)
            tide_daemon_absorb(d);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED: {
        const Tide__V1__RankStarted *r = m->rank_started;
        tide_daemon_now(d);
        tide_core_rank_started(d->core, ws->worker, r->job_id, r->generation, r->rank, r->pid,
                               r->master_port);
        tide_daemon_absorb(d);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED: {
        const Tide__V1__RankStatus *r = m->rank_exited->status;
        if (!r) {
            tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "rank_exited.status is required");
            break;
        }
        tide_daemon_now(d);
        tide_core_rank_exited(d->core, ws->worker, r->job_id, r->generation, r->rank, r->exit_code,
                              r->error);
        tide_daemon_absorb(d);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_CHECKPOINT_SAVED: {
        const Tide__V1__CheckpointSaved *c = m->checkpoint_saved;
        tide_daemon_now(d);
        tide_core_checkpoint_saved(d->core, ws->worker, c->job_id, c->generation, c->rank, c->step,
                                   c->path, c->bytes, c->sha256);
        tide_daemon_absorb(d);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE:
        on_flush_done(ws, m->flush_done);
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED:
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE:
    case TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST:
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED:
        on_task_message(ws, m);
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA:
        tide_logs_on_data(d, ws->id, m->log_data);
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_GOODBYE:
        ws->goodbye = true;
        tide_info("worker %s says goodbye: %s", ws->worker->id, m->goodbye->reason);
        break;
    default:
        tide_rpc_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "message has no known field set");
        break;
    }
done:
    tide_arena_reset(&d->rx_arena);
}

static void on_half_close(tide_rpc_call_t *call)
{
    tide_rpc_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void on_close(tide_rpc_call_t *call)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    wstream_t *ws = tide_rpc_call_data(call);

    if (!ws)
        return;
    ws->call = NULL;
    tide_logs_on_stream_closed(d, ws->id);
    if (ws->worker && !d->shutting_down) {
        tide_daemon_now(d);
        tide_core_worker_disconnected(d->core, ws->worker, tide_conn_handle(ws->id), ws->goodbye);
        tide_daemon_absorb(d);
    }
    HASH_DEL(d->streams, ws);
    free(ws);
}

const tide_rpc_method_t tide_svc_worker_connect = {
    .path = "/tide.v1.WorkerService/Connect",
    .kind = TIDE_RPC_BIDI_STREAMING,
    .on_message = on_message,
    .on_half_close = on_half_close,
    .on_close = on_close,
};

/* The scheduler daemon's lifecycle and its group commit (see daemon.h). Invariants: outbox entries are
 * released in the order they were queued, and only once every batch up to theirs is durable; at most one
 * commit is in flight; the core's action buffer is empty between loop callbacks. */
#include "daemon.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "convert.h"
#include "log.h"
#include "token.h"
#include "users.h"
#include "audit.h"
#include "authz.h"
#include "usage.h"
#include "xmalloc.h"

#include "tide/v1/records.pb-c.h"
#include "tide/v1/worker_service.pb-c.h"

typedef enum out_kind {
    OUT_REPLY,        /* bytes to call, then OK */
    OUT_STATUS,       /* status to call */
    OUT_WORKER_MSG,   /* bytes to a worker stream */
    OUT_WORKER_CLOSE, /* end a worker stream */
    OUT_EVENT,        /* publish an event */
} out_kind_t;

/* A job id whose record must be written with the open batch. */
typedef struct dirty_job {
    char *id;
    UT_hash_handle hh;
} dirty_job_t;

typedef struct out {
    tide_list_t node;
    uint64_t batch_no;
    out_kind_t kind;
    tide_rpc_call_t *call;
    uint64_t stream_id;
    uint8_t *bytes;
    size_t len;
    tide_grpc_code_t code;
    char *message;
    tide_event_t event;
} out_t;

tide_grpc_code_t tide_daemon_code(int rc)
{
    switch (rc) {
    case 0:
        return TIDE_GRPC_OK;
    case -EINVAL:
        return TIDE_GRPC_INVALID_ARGUMENT;
    case -ENOENT:
        return TIDE_GRPC_NOT_FOUND;
    case -EALREADY:
    case -EBUSY:
        return TIDE_GRPC_FAILED_PRECONDITION;
    case -EEXIST:
        return TIDE_GRPC_ALREADY_EXISTS;
    case -EPERM:
    case -EACCES:
        return TIDE_GRPC_PERMISSION_DENIED;
    default:
        return TIDE_GRPC_INTERNAL;
    }
}

/* Every changing call and every refusal goes to the audit log (audit.c). */
static void call_done(const tide_rpc_call_t *call, tide_grpc_code_t code, const char *message)
{
    tide_daemon_t *d = tide_rpc_call_server_data(call);
    const char *path = tide_rpc_call_method(call)->path;

    const tide_audit_entry_t *e;
    bool changes = tide_audit_changes(path);

    if (!changes && code != TIDE_GRPC_UNAUTHENTICATED && code != TIDE_GRPC_PERMISSION_DENIED &&
        code != TIDE_GRPC_RESOURCE_EXHAUSTED)
        return;
    e = tide_audit_write(d->audit, tide_clock_wall_ms(), tide_rpc_call_identity(call), tide_rpc_call_peer(call),
                         path, tide_rpc_call_note(call), code, message);
    if (e && d->batch && !d->failed) {
        /* A known identity's entries are also kept in the store (the newest TIDE_AUDIT_KEEP, numbered without
         * gaps across restarts); unknown tokens' refusals only in the file (rate-limited), so that a flood of
         * bad calls costs no store writes and pushes nothing out. */
        char key[64];
        size_t len;
        uint8_t *buf = tide_audit_pack(e, key, sizeof(key), &len);
        tide_store_batch_put(d->batch, key, buf, len);
        free(buf);
        if (e->seq > TIDE_AUDIT_KEEP) {
            snprintf(key, sizeof(key), "%s%020llu", TIDE_KEY_AUDIT, (unsigned long long)(e->seq - TIDE_AUDIT_KEEP));
            tide_store_batch_delete(d->batch, key);
        }
    }
}

void tide_daemon_reload_users(tide_daemon_t *d)
{
    tide_error_t err;

    tide_error_clear(&err);
    if (tide_authz_reload(d->authz, true, &err) < 0)
        tide_err("SIGHUP: users file not reloaded, the identities in force stay: %s", err.text);
    tide_audit_reopen(d->audit);
}

void tide_daemon_job_key(const char *id, char *buf, size_t len)
{
    snprintf(buf, len, TIDE_KEY_JOBS "%020llu", strtoull(id, NULL, 10));
}

void tide_daemon_now(tide_daemon_t *d)
{
    tide_core_set_time(d->core, (int64_t)uv_now(d->loop), tide_clock_wall_ms());
}

/* --- the outbox --- */

static out_t *out_new(tide_daemon_t *d, out_kind_t kind)
{
    out_t *o = tide_xcalloc(1, sizeof(*o));
    o->kind = kind;
    o->batch_no = d->open_no;
    tide_list_push_back(&d->outbox, &o->node);
    return o;
}

static void out_free(out_t *o)
{
    free(o->bytes);
    free(o->message);
    free(o->event.job_id);
    free(o->event.worker_id);
    free(o->event.message);
    free(o);
}

static uint8_t *pack(const ProtobufCMessage *msg, size_t *len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = tide_xmalloc(n ? n : 1);
    protobuf_c_message_pack(msg, buf);
    *len = n;
    return buf;
}

void tide_daemon_reply(tide_daemon_t *d, tide_rpc_call_t *call, const ProtobufCMessage *msg)
{
    out_t *o = out_new(d, OUT_REPLY);
    o->call = call;
    o->bytes = pack(msg, &o->len);
}

void tide_daemon_reply_status(tide_daemon_t *d, tide_rpc_call_t *call, tide_grpc_code_t code,
                              const char *message)
{
    out_t *o = out_new(d, OUT_STATUS);
    o->call = call;
    o->code = code;
    o->message = tide_xstrdup(message ? message : "");
}

void tide_daemon_forget_call(tide_daemon_t *d, tide_rpc_call_t *call)
{
    tide_list_t *pos;
    tide_list_for_each(pos, &d->outbox) {
        out_t *o = tide_list_entry(pos, out_t, node);
        if (o->call == call)
            o->call = NULL;
    }
}

void tide_daemon_to_worker(tide_daemon_t *d, uint64_t stream_id, const ProtobufCMessage *msg)
{
    out_t *o = out_new(d, OUT_WORKER_MSG);
    o->stream_id = stream_id;
    o->bytes = pack(msg, &o->len);
}

static void release(tide_daemon_t *d)
{
    if (d->failed)
        return;
    /* With a lease, nothing leaves once it cannot be proven alive (a busy loop turn can outlast it before
     * the election's guard timer runs): writes are fenced, this covers what a batch without writes holds. */
    if (d->cfg.lease_valid && !tide_list_empty(&d->outbox) && !d->cfg.lease_valid(d->cfg.lease_ud)) {
        tide_daemon_step_down(d, "the lease may have expired before this turn's messages could leave");
        return;
    }
    while (!tide_list_empty(&d->outbox)) {
        out_t *o = tide_list_entry(d->outbox.next, out_t, node);
        if (o->batch_no > d->done_no)
            break;
        tide_list_remove(&o->node);
        switch (o->kind) {
        case OUT_REPLY:
            if (o->call) {
                tide_rpc_call_send(o->call, o->bytes, o->len);
                tide_rpc_call_finish(o->call, TIDE_GRPC_OK, NULL);
            }
            break;
        case OUT_STATUS:
            if (o->call)
                tide_rpc_call_finish(o->call, o->code, o->message);
            break;
        case OUT_WORKER_MSG:
            tide_wstream_send(d, o->stream_id, o->bytes, o->len);
            break;
        case OUT_WORKER_CLOSE:
            tide_wstream_close(d, o->stream_id, o->code, o->message);
            break;
        case OUT_EVENT:
            tide_events_publish(d, &o->event);
            memset(&o->event, 0, sizeof(o->event));
            break;
        }
        out_free(o);
    }
}

/* --- turning actions into writes and messages --- */

static void mark_dirty(tide_daemon_t *d, const char *id)
{
    dirty_job_t *dj;

    HASH_FIND_STR(d->dirty, id, dj);
    if (dj)
        return;
    dj = tide_xcalloc(1, sizeof(*dj));
    dj->id = tide_xstrdup(id);
    HASH_ADD_KEYPTR(hh, d->dirty, dj->id, strlen(dj->id), dj);
}

static void forget_dirty(tide_daemon_t *d, const char *id)
{
    dirty_job_t *dj;

    HASH_FIND_STR(d->dirty, id, dj);
    if (!dj)
        return;
    HASH_DEL(d->dirty, dj);
    free(dj->id);
    free(dj);
}

static void persist_job(tide_daemon_t *d, const tide_job_t *job)
{
    Tide__V1__Job pb;
    char key[64];
    size_t len;
    uint8_t *bytes;

    tide_conv_job(NULL, job, &pb, &d->arena);
    bytes = pack(&pb.base, &len);
    tide_daemon_job_key(job->id, key, sizeof(key));
    tide_store_batch_put(d->batch, key, bytes, len);
    free(bytes);
}

static void persist_worker(tide_daemon_t *d, const tide_worker_t *w)
{
    Tide__V1__WorkerRecord rec = TIDE__V1__WORKER_RECORD__INIT;
    char *key = tide_xasprintf(TIDE_KEY_WORKERS "%s", w->id);
    size_t len;
    uint8_t *bytes;

    rec.id = w->id;
    rec.cordoned = w->cordoned;
    rec.cordon_reason = w->cordon_reason ? w->cordon_reason : "";
    bytes = pack(&rec.base, &len);
    tide_store_batch_put(d->batch, key, bytes, len);
    free(bytes);
    free(key);
}

static void put_u64(tide_daemon_t *d, const char *key, uint64_t v)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%" PRIu64, v);
    tide_store_batch_put(d->batch, key, buf, (size_t)n);
}

static void send_launch(tide_daemon_t *d, const tide_action_t *a)
{
    const tide_job_t *job = a->job;
    const tide_job_rank_t *slot = &job->ranks[a->rank];
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__LaunchRank l = TIDE__V1__LAUNCH_RANK__INIT;
    int32_t *gpus = tide_arena_calloc(&d->arena, (size_t)job->n_ranks + 1, sizeof(*gpus));
    size_t ngpus = 0;
    Tide__V1__LaunchRank__EnvEntry **env =
        tide_arena_calloc(&d->arena, job->spec.n_env + 1, sizeof(*env));

    /* The job's GPUs on this rank's node, in LOCAL_RANK order (CUDA_VISIBLE_DEVICES). */
    for (int32_t r = 0; r < job->n_ranks && a->rank < job->n_ranks; r++) {
        const tide_job_rank_t *o = &job->ranks[r];
        if (o->group_rank == slot->group_rank) {
            tide_worker_t *ow = o->worker ? o->worker : tide_core_worker_find(d->core, o->worker_id);
            gpus[ngpus++] = ow ? ow->gpu_index : o->local_rank;
        }
    }
    for (size_t i = 0; i < job->spec.n_env; i++) {
        Tide__V1__LaunchRank__EnvEntry *e = tide_arena_alloc(&d->arena, sizeof(*e));
        tide__v1__launch_rank__env_entry__init(e);
        e->key = job->spec.env[i].key;
        e->value = job->spec.env[i].value;
        env[i] = e;
    }
    l.job_id = job->id;
    l.generation = a->generation;
    l.rank = a->rank;
    l.local_rank = slot->local_rank;
    l.world_size = job->n_ranks;
    l.local_world_size = slot->local_world_size;
    l.group_rank = slot->group_rank;
    l.master_addr = job->master_addr ? job->master_addr : "";
    l.master_port = a->master_port;
    l.n_node_gpu_indexes = ngpus;
    l.node_gpu_indexes = gpus;
    l.n_command = job->spec.argc;
    l.command = job->spec.argv;
    l.n_env = job->spec.n_env;
    l.env = env;
    l.workdir = job->spec.workdir ? job->spec.workdir : "";
    l.restart_count = job->generation - 1;
    l.max_restarts = job->spec.max_restarts > 0 ? job->spec.max_restarts : tide_core_config(d->core)->max_restarts;
    l.resume_step = job->last_ckpt.step;
    l.run_as = job->spec.run_as ? job->spec.run_as : "";
    l.owner = job->spec.owner && job->spec.owner[0] ? job->spec.owner : TIDE_ADMIN_IDENTITY;
    if (a->rank < job->n_ranks) {
        /* Checkpoint tiers: this rank's mirror peer, and where its newest checkpoint may be (the previous
         * generation's worker of this rank and that one's mirror), live workers only. */
        tide_worker_t *peer = slot->mirror_id ? tide_core_worker_find(d->core, slot->mirror_id) : NULL;
        char **peers = tide_arena_calloc(&d->arena, 3, sizeof(*peers));
        size_t np = 0;
        if (peer && peer->connected && peer->launcher_address && peer->launcher_address[0]) {
            l.mirror_address = peer->launcher_address;
            l.mirror_worker_id = peer->id;
        }
        for (int k = 0; a->rank < job->n_prev_src && k < 2; k++) {
            const char *id = job->prev_src[2 * a->rank + k];
            tide_worker_t *src = id ? tide_core_worker_find(d->core, id) : NULL;
            if (src && src != a->worker && src->connected && src->launcher_address && src->launcher_address[0])
                peers[np++] = src->launcher_address;
        }
        l.n_restore_peers = np;
        l.restore_peers = peers;
    }
    l.run_id = job->id;
    l.launcher = (Tide__V1__Launcher)job->spec.launcher;
    l.group_world_size = job->n_ranks ? job->ranks[job->n_ranks - 1].group_rank + 1 : 0;
    if (a->rank >= job->n_ranks) {
        /* A lent (burst) worker: not a member of the generation; its own GPU only, started directly. */
        l.burst = true;
        l.local_rank = 0;
        l.local_world_size = 1;
        l.group_rank = 0;
        l.group_world_size = 0;
        l.master_addr = "";
        l.master_port = 0;
        gpus[0] = a->worker ? a->worker->gpu_index : 0;
        l.n_node_gpu_indexes = 1;
        if (job->spec.n_burst_argv > 0) {
            l.n_command = job->spec.n_burst_argv;
            l.command = job->spec.burst_argv;
        }
    } else if (job->spec.launcher == TIDE_LAUNCHER_MPI) {
        tide_daemon_mpi_launch(d, job, a->generation, &l);
    }
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_LAUNCH;
    msg.launch = &l;
    tide_daemon_to_worker(d, tide_conn_id(a->conn), &msg.base);
}

static void send_stop(tide_daemon_t *d, const tide_action_t *a)
{
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__StopRank st = TIDE__V1__STOP_RANK__INIT;

    st.job_id = (char *)a->job_id;
    st.generation = a->generation;
    st.rank = a->rank;
    st.grace_ms = a->grace_ms;
    st.reason = (char *)(a->text ? a->text : "");
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_STOP;
    msg.stop = &st;
    tide_daemon_to_worker(d, tide_conn_id(a->conn), &msg.base);
}

static void send_checkpoint_now(tide_daemon_t *d, const tide_action_t *a)
{
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__TrainerCommand tc = TIDE__V1__TRAINER_COMMAND__INIT;
    Tide__V1__CheckpointNow cn = TIDE__V1__CHECKPOINT_NOW__INIT;

    if (!a->conn)
        return;
    cn.request_id = a->request_id;
    cn.deadline_unix_ms = a->deadline_ms;
    tc.job_id = (char *)a->job_id;
    tc.generation = a->generation;
    tc.rank = a->rank;
    tc.cmd_case = TIDE__V1__TRAINER_COMMAND__CMD_CHECKPOINT_NOW;
    tc.checkpoint_now = &cn;
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_TRAINER_COMMAND;
    msg.trainer_command = &tc;
    tide_daemon_to_worker(d, tide_conn_id(a->conn), &msg.base);
}

/* The checkpoint gate released a durable copy (docs/policies.md, "Checkpoint gate"): the rank's worker
 * copies the file its rank reported for the step into the durable directory and answers FlushDone. */
static void send_flush(tide_daemon_t *d, const tide_action_t *a)
{
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__FlushCheckpoint fc = TIDE__V1__FLUSH_CHECKPOINT__INIT;

    if (!a->conn)
        return;
    fc.job_id = (char *)a->job_id;
    fc.generation = a->generation;
    fc.rank = a->rank;
    fc.step = a->step;
    fc.durable_dir = d->durable_dir ? d->durable_dir : "";
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_FLUSH;
    msg.flush = &fc;
    tide_daemon_to_worker(d, tide_conn_id(a->conn), &msg.base);
}

/* The job ended (docs/fault-tolerance.md, "Checkpoint tiers"): that worker drops the job's hot copies and
 * the mirrors it keeps for it. A worker that is not connected misses it; its --ckpt-hot-ttl covers that. */
static void send_forget_ckpt(tide_daemon_t *d, const tide_action_t *a)
{
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__ForgetCheckpoints fc = TIDE__V1__FORGET_CHECKPOINTS__INIT;

    if (!a->conn)
        return;
    fc.job_id = (char *)a->job_id;
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_FORGET_CHECKPOINTS;
    msg.forget_checkpoints = &fc;
    tide_daemon_to_worker(d, tide_conn_id(a->conn), &msg.base);
}

/* Work stealing (docs/work-stealing.md): ask a victim to release part of its deque's tail, or give a
 * thief the tasks released for it (none: nothing is left to steal). */
static void send_release_tasks(tide_daemon_t *d, const tide_action_t *a)
{
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__ReleaseTasks rt = TIDE__V1__RELEASE_TASKS__INIT;

    if (!a->conn)
        return;
    rt.job_id = (char *)a->job_id;
    rt.generation = a->generation;
    rt.rank = a->rank;
    rt.kind = (Tide__V1__TaskKind)a->task_kind;
    rt.step = a->step;
    rt.release_id = a->request_id;
    rt.max_tasks = a->max_tasks;
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS;
    msg.release_tasks = &rt;
    tide_daemon_to_worker(d, tide_conn_id(a->conn), &msg.base);
}

static void send_give_tasks(tide_daemon_t *d, const tide_action_t *a)
{
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__GiveTasks gt = TIDE__V1__GIVE_TASKS__INIT;

    if (!a->conn)
        return;
    gt.job_id = (char *)a->job_id;
    gt.generation = a->generation;
    gt.rank = a->rank;
    gt.kind = (Tide__V1__TaskKind)a->task_kind;
    gt.step = a->step;
    gt.steal_id = a->request_id;
    gt.task_ids = (uint64_t *)a->task_ids;
    gt.n_task_ids = a->n_task_ids;
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS;
    msg.give_tasks = &gt;
    tide_daemon_to_worker(d, tide_conn_id(a->conn), &msg.base);
}

static void send_welcome(tide_daemon_t *d, const tide_action_t *a)
{
    Tide__V1__SchedulerMessage msg = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__Welcome w = TIDE__V1__WELCOME__INIT;

    w.protocol_version = TIDE__V1__WORKER_PROTOCOL__WORKER_PROTOCOL_CURRENT;
    w.heartbeat_interval_ms = (uint32_t)tide_core_config(d->core)->heartbeat_interval_ms;
    w.scheduler_version = TIDE_VERSION;
    msg.epoch = d->epoch;
    msg.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME;
    msg.welcome = &w;
    tide_daemon_to_worker(d, tide_conn_id(a->conn), &msg.base);
}

void tide_daemon_absorb(tide_daemon_t *d)
{
    size_t n;
    const tide_action_t *acts = tide_core_actions(d->core, &n);

    for (size_t i = 0; i < n; i++) {
        const tide_action_t *a = &acts[i];
        switch (a->type) {
        case TIDE_ACT_PERSIST_JOB:
            /* Packed once per batch at commit time: a job whose ranks start one by one is not
             * re-serialised for each. */
            mark_dirty(d, a->job->id);
            break;
        case TIDE_ACT_DELETE_JOB: {
            char key[64];
            tide_usage_pruned(d->usage, d->core, a->job, d->batch); /* its GPU time stays counted */
            forget_dirty(d, a->job_id);
            tide_daemon_job_key(a->job_id, key, sizeof(key));
            tide_store_batch_delete(d->batch, key);
            break;
        }
        case TIDE_ACT_PERSIST_WORKER:
            persist_worker(d, a->worker);
            break;
        case TIDE_ACT_PERSIST_META:
            put_u64(d, TIDE_KEY_NEXT_SEQ, tide_core_next_seq(d->core));
            break;
        case TIDE_ACT_WELCOME:
            send_welcome(d, a);
            break;
        case TIDE_ACT_LAUNCH:
            send_launch(d, a);
            break;
        case TIDE_ACT_STOP:
            send_stop(d, a);
            break;
        case TIDE_ACT_CHECKPOINT_NOW:
            send_checkpoint_now(d, a);
            break;
        case TIDE_ACT_FLUSH:
            send_flush(d, a);
            break;
        case TIDE_ACT_RELEASE_TASKS:
            send_release_tasks(d, a);
            break;
        case TIDE_ACT_GIVE_TASKS:
            send_give_tasks(d, a);
            break;
        case TIDE_ACT_FORGET_CKPT:
            send_forget_ckpt(d, a);
            break;
        case TIDE_ACT_CLOSE_STREAM: {
            out_t *o = out_new(d, OUT_WORKER_CLOSE);
            o->stream_id = tide_conn_id(a->conn);
            o->code = TIDE_GRPC_UNAVAILABLE;
            o->message = tide_xstrdup("the scheduler closed this stream: a newer one replaced it or "
                                      "the worker missed its heartbeats");
            break;
        }
        case TIDE_ACT_EVENT: {
            out_t *o = out_new(d, OUT_EVENT);
            o->event.seq = d->next_event_seq++;
            o->event.time_ms = tide_clock_wall_ms();
            o->event.type = a->event_type;
            o->event.job_id = tide_xstrdup(a->job_id);
            o->event.worker_id = tide_xstrdup(a->worker_id);
            o->event.message = tide_xstrdup(a->text ? a->text : "");
            tide_log(strstr(a->event_type, "dead") || strstr(a->event_type, "failed") ? TIDE_LOG_WARN
                                                                                       : TIDE_LOG_INFO,
                     "%s: %s", a->event_type, a->text ? a->text : "");
            break;
        }
        }
    }
    tide_core_actions_clear(d->core);
    tide_arena_reset(&d->arena);
}

/* --- group commit --- */

/* With etcd, every write of a leader is guarded by its leadership key: once another replica holds the
 * key (or the lease expired it), the commit fails and nothing of it is acknowledged or sent. */
static void fence(tide_daemon_t *d, tide_store_batch_t *b)
{
    if (d->cfg.fence_key)
        tide_store_batch_compare(b, d->cfg.fence_key, d->cfg.fence_rev);
}

void tide_daemon_step_down(tide_daemon_t *d, const char *why)
{
    if (d->failed)
        return;
    tide_err("stepping down as leader: %s", why);
    d->failed = true;
    d->exit_code = TIDE_DAEMON_STEPPED_DOWN;
    tide_daemon_stop(d);
    uv_stop(d->loop);
}

static void commit_cb(int status, int64_t revision, const char *errtext, void *ud)
{
    tide_daemon_t *d = ud;
    uint64_t no = d->open_no - 1;

    (void)revision;
    d->inflight = false;
    if (status == -ESHUTDOWN || d->failed)
        return;
    if (status < 0) {
        /* Fail-stop: nothing of this batch (or of later ones) is acknowledged or sent, and a restart
         * rebuilds from what is durable. Carrying on would acknowledge state that might not survive. */
        if (d->cfg.fence_key) {
            tide_daemon_step_down(d, status == -ECANCELED ? "another replica leads now (the leadership key "
                                                            "changed)"
                                                          : errtext && errtext[0] ? errtext
                                                                                  : strerror(-status));
            return;
        }
        tide_err("store commit failed (%s): exiting so that a restart recovers from durable state",
                 errtext && errtext[0] ? errtext : strerror(-status));
        d->failed = true;
        d->exit_code = 70;
        tide_daemon_stop(d);
        uv_stop(d->loop);
        return;
    }
    d->commits_total++;
    d->done_no = no;
    release(d);
    if (d->shutting_down && tide_list_empty(&d->outbox))
        uv_stop(d->loop);
}

static void idle_cb(uv_idle_t *h)
{
    uv_idle_stop(h);
}

static void timer_cb(uv_timer_t *h)
{
    tide_daemon_t *d = h->data;

    d->timer_at = INT64_MAX;
    d->tick_due = true;
    uv_idle_start(&d->idle, idle_cb); /* poll without blocking, then check_cb ticks */
}

/* Runs once per loop turn, after the loop polled for I/O: whatever the callbacks of this turn changed is
 * committed as one batch. (A check handle, not a prepare one: the transport flushes its writes in a
 * prepare handle that replies released here must reach before the loop sleeps.) */
static void check_cb(uv_check_t *h)
{
    tide_daemon_t *d = h->data;
    int64_t next, now;
    uint64_t now_ns = uv_hrtime(), idle_ns = uv_metrics_idle_time(d->loop);

    if (d->failed) {
        uv_stop(d->loop);
        return;
    }
    if (tide_authz_generation(d->authz) != d->authz_generation) {
        /* A new users file: streams opened by identities it no longer has (or has in another role) end now,
         * not only their next calls. */
        d->authz_generation = tide_authz_generation(d->authz);
        tide_events_revoke(d);
        tide_logs_revoke(d);
        tide_wstreams_revoke(d);
    }
    /* Time the loop spent busy (not waiting in poll) since the last turn. Longer than a heartbeat
     * interval means heartbeats sat unread in the sockets: give the workers that time back. */
    if (d->last_check_ns && d->idle_metrics) {
        uint64_t busy_ns = now_ns - d->last_check_ns - (idle_ns - d->last_idle_ns);
        int64_t busy_ms = (int64_t)(busy_ns / 1000000);
        if (busy_ms > tide_core_config(d->core)->heartbeat_interval_ms) {
            tide_warn("the event loop was busy for %lld ms: extending every worker's heartbeat deadline",
                      (long long)busy_ms);
            tide_daemon_now(d);
            tide_core_liveness_grace(d->core, busy_ms);
        }
    }
    d->last_check_ns = now_ns;
    d->last_idle_ns = idle_ns;
    /* Timers run before I/O in a libuv turn; the core's tick runs here, after this turn's heartbeats
     * were read, so a worker is never judged on a heartbeat still sitting in its socket. */
    if (d->tick_due) {
        d->tick_due = false;
        tide_daemon_now(d);
        tide_core_tick(d->core);
        tide_daemon_absorb(d);
    }
    if (!d->inflight) {
        dirty_job_t *dj, *tmp;
        HASH_ITER(hh, d->dirty, dj, tmp) {
            tide_job_t *job = tide_core_job_find(d->core, dj->id);
            if (job)
                persist_job(d, job);
            forget_dirty(d, dj->id);
        }
        tide_arena_reset(&d->arena);
        if (d->next_event_seq > d->event_seq_persisted) {
            put_u64(d, TIDE_KEY_EVENT_SEQ, d->next_event_seq);
            d->event_seq_persisted = d->next_event_seq;
        }
        if (tide_store_batch_count(d->batch) > 0) {
            tide_store_batch_t *b = d->batch;
            d->commit_ops_total += tide_store_batch_count(b);
            fence(d, b);
            d->batch = tide_store_batch_new();
            d->open_no++;
            d->inflight = true;
            if (tide_store_commit(d->store, b, commit_cb, d) < 0) {
                d->inflight = false;
                commit_cb(-EIO, 0, "the store refused the commit", d);
                return;
            }
        } else {
            d->done_no = d->open_no;
            d->open_no++;
        }
    }
    release(d);
    if (d->shutting_down) {
        if (!d->inflight && tide_list_empty(&d->outbox))
            uv_stop(d->loop);
        return;
    }
    /* Arm the timer for the core's next deadline. */
    next = tide_core_next_deadline(d->core);
    now = (int64_t)uv_now(d->loop);
    if (next != d->timer_at) {
        d->timer_at = next;
        if (next == INT64_MAX)
            uv_timer_stop(&d->timer);
        else
            uv_timer_start(&d->timer, timer_cb, (uint64_t)(next > now ? next - now : 0), 0);
    }
}

/* --- start and stop --- */

static int mkdir_p(const char *path, tide_error_t *err)
{
    char *p = tide_xstrdup(path);
    int rc = 0;

    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            rc = -errno;
            break;
        }
        *s = '/';
    }
    if (rc == 0 && mkdir(p, 0700) < 0 && errno != EEXIST)
        rc = -errno;
    if (rc < 0)
        tide_errprintf(err, "cannot create data dir %s: %s", path, strerror(-rc));
    free(p);
    return rc;
}

static void epoch_commit_cb(int status, int64_t revision, const char *errtext, void *ud)
{
    int *rc = ud;
    (void)revision;
    (void)errtext;
    *rc = status < 0 ? status : 1;
}

static int write_addr_file(tide_daemon_t *d, tide_error_t *err)
{
    const char *host = d->cfg.listen;
    const char *colon = strrchr(host, ':');
    char *tmp = tide_xasprintf("%s/scheduler.addr.tmp", d->data_dir);
    char *final = tide_xasprintf("%s/scheduler.addr", d->data_dir);
    FILE *f = fopen(tmp, "w");
    int rc = 0;

    if (!f) {
        rc = -errno;
        tide_errprintf(err, "cannot write %s: %s", tmp, strerror(errno));
        goto done;
    }
    fprintf(f, "%.*s:%d\n", (int)(colon ? colon - host : (long)strlen(host)), host,
            tide_rpc_server_port(d->server));
    if (fclose(f) != 0 || rename(tmp, final) < 0) {
        rc = -errno;
        tide_errprintf(err, "cannot write %s: %s", final, strerror(errno));
    }
done:
    free(tmp);
    free(final);
    return rc;
}

/* --ckpt-durable as an absolute path: workers resolve it in their own working directory. */
static char *durable_dir(const char *dir)
{
    char *cwd;
    char *abs;

    if (!dir || !dir[0])
        return NULL;
    if (dir[0] == '/')
        return tide_xstrdup(dir);
    cwd = getcwd(NULL, 0);
    if (!cwd)
        return tide_xstrdup(dir);
    abs = tide_xasprintf("%s/%s", cwd, dir);
    free(cwd);
    return abs;
}

int tide_daemon_start(uv_loop_t *loop, const tide_daemon_config_t *cfg, tide_daemon_t **out,
                      tide_error_t *err)
{
    tide_daemon_t *d = tide_xcalloc(1, sizeof(*d));
    tide_rpc_method_t *methods;
    size_t nm = 0;
    tide_rpc_server_config_t scfg = {0};
    char *token_path = NULL;
    int rc, done = 0;

    d->loop = loop;
    d->cfg = *cfg;
    /* Busy-time measurement (check_cb) needs the loop's idle-time metric, enabled before it runs. */
    d->idle_metrics = uv_loop_configure(loop, UV_METRICS_IDLE_TIME) == 0;
    d->data_dir = tide_xstrdup(cfg->data_dir);
    d->durable_dir = durable_dir(cfg->ckpt_durable_dir);
    d->start_wall = tide_clock_wall_ms();
    d->start_mono = (int64_t)uv_now(loop);
    d->open_no = 1;
    d->timer_at = INT64_MAX;
    tide_list_init(&d->outbox);
    d->batch = tide_store_batch_new();
    d->core = tide_core_new(&cfg->core);
    tide_events_init(d, 10000);
    *out = d;

    if ((rc = mkdir_p(d->data_dir, err)) < 0)
        return rc;
    if (!cfg->insecure_no_auth) {
        token_path = cfg->token_file ? tide_xstrdup(cfg->token_file)
                                     : tide_xasprintf("%s/token", d->data_dir);
        rc = tide_token_load_or_create(token_path, &d->token, err);
        free(token_path);
        if (rc < 0)
            return rc;
    }
    if ((rc = tide_authz_new(d->token, cfg->users_file, &d->authz, err)) < 0)
        return rc;
    d->authz_generation = tide_authz_generation(d->authz);
    d->usage = tide_usage_new();
    if (!cfg->audit_log || strcmp(cfg->audit_log, "-") != 0) {
        char *audit_path = cfg->audit_log ? tide_xstrdup(cfg->audit_log) : tide_xasprintf("%s/audit.log", d->data_dir);
        rc = tide_audit_open(audit_path, &d->audit, err);
        free(audit_path);
    } else {
        rc = tide_audit_open(NULL, &d->audit, err);
    }
    if (rc < 0)
        return rc;
    /* The secret behind the per-generation MPI credentials (launch_mpi.c): in the data dir, or with HA in
     * the store, so that a generation launched across a failover has one key (restore.c reads it). */
    if (!cfg->fence_key) {
        token_path = tide_xasprintf("%s/launch.key", d->data_dir);
        rc = tide_token_load_or_create(token_path, &d->launch_key, err);
        free(token_path);
        if (rc < 0)
            return rc;
    }
    d->store_url = cfg->store_url ? tide_xstrdup(cfg->store_url)
                                  : tide_xasprintf("sqlite:%s/state.db", d->data_dir);
    if ((rc = tide_store_open(loop, d->store_url, &d->store, err)) < 0)
        return rc;
    tide_daemon_now(d);
    if ((rc = tide_daemon_restore(d, err)) < 0)
        return rc;

    if (!d->launch_key) { /* HA and no replica made one yet: this one writes it with the epoch */
        if ((rc = tide_token_generate(&d->launch_key, err)) < 0)
            return rc;
        tide_store_batch_put(d->batch, TIDE_KEY_LAUNCH_KEY, d->launch_key, strlen(d->launch_key));
    }
    /* A new leader epoch before anything is sent: workers ignore older schedulers' messages. */
    d->epoch++;
    put_u64(d, TIDE_KEY_EPOCH, d->epoch);
    put_u64(d, TIDE_KEY_EVENT_SEQ, d->next_event_seq);
    d->event_seq_persisted = d->next_event_seq;
    fence(d, d->batch);
    rc = tide_store_commit(d->store, d->batch, epoch_commit_cb, &done);
    d->batch = tide_store_batch_new();
    if (rc < 0) {
        tide_errprintf(err, "cannot write the epoch to the store");
        return rc;
    }
    while (!done)
        uv_run(loop, UV_RUN_ONCE);
    if (done < 0) {
        tide_errprintf(err, "cannot write the epoch to the store: %s", strerror(-done));
        return done;
    }

    methods = tide_xcalloc(tide_svc_jobs_count + tide_svc_cluster_count + tide_svc_accounting_count +
                               tide_svc_health_count + 4,
                           sizeof(*methods));
    for (size_t i = 0; i < tide_svc_jobs_count; i++)
        methods[nm++] = tide_svc_jobs[i];
    methods[nm++] = tide_svc_job_logs;
    methods[nm++] = tide_svc_watch_events;
    for (size_t i = 0; i < tide_svc_cluster_count; i++)
        methods[nm++] = tide_svc_cluster[i];
    for (size_t i = 0; i < tide_svc_accounting_count; i++)
        methods[nm++] = tide_svc_accounting[i];
    for (size_t i = 0; i < tide_svc_health_count; i++)
        methods[nm++] = tide_svc_health[i];
    methods[nm++] = tide_svc_worker_connect;
    scfg.methods = methods;
    scfg.n_methods = nm;
    scfg.token = d->token;
    scfg.authenticate = tide_authz_authenticate;
    scfg.auth_ud = d->authz;
    scfg.on_call_done = call_done;
    scfg.http_handler = tide_daemon_http;
    scfg.ud = d;
    scfg.tls = cfg->tls;
    d->methods = methods;
    if ((rc = tide_rpc_server_new(loop, &scfg, &d->server, err)) < 0)
        return rc;
    if ((rc = tide_rpc_server_listen(d->server, cfg->listen, err)) < 0)
        return rc;
    if ((rc = write_addr_file(d, err)) < 0)
        return rc;

    uv_check_init(loop, &d->check);
    d->check.data = d;
    uv_check_start(&d->check, check_cb);
    uv_timer_init(loop, &d->timer);
    d->timer.data = d;
    uv_idle_init(loop, &d->idle);
    d->idle.data = d;

    tide_info("tide-scheduler %s listening on %s (port %d), store %s, leader epoch %" PRIu64,
              TIDE_VERSION, cfg->listen, tide_rpc_server_port(d->server), d->store_url, d->epoch);
    if (cfg->core.ckpt_flush)
        tide_info("checkpoint gate on: durable copies go to %s, held while a job's MFU >= %.0f%% for at most "
                  "%lld s", d->durable_dir ? d->durable_dir : "(the workers' own --ckpt-durable)",
                  cfg->core.ckpt_mfu_threshold * 100, (long long)(cfg->core.ckpt_deadline_ms / 1000));
    return 0;
}

void tide_daemon_stop(tide_daemon_t *d)
{
    if (d->shutting_down)
        return;
    d->shutting_down = true;
    if (d->server)
        tide_rpc_server_shutdown(d->server);
    /* check_cb commits what is pending, releases the outbox, then stops the loop. */
    if (!uv_is_active((uv_handle_t *)&d->check))
        uv_stop(d->loop);
}

static void close_noop(uv_handle_t *h)
{
    (void)h;
}

void tide_daemon_free(tide_daemon_t *d)
{
    if (!d)
        return;
    if (d->server)
        tide_rpc_server_free(d->server, NULL, NULL);
    if (d->check.loop) {
        uv_close((uv_handle_t *)&d->check, close_noop);
        uv_close((uv_handle_t *)&d->timer, close_noop);
        uv_close((uv_handle_t *)&d->idle, close_noop);
    }
    tide_store_close(d->store);
    /* Let the handles, the open calls (their on_close) and the store's callbacks finish. */
    uv_run(d->loop, UV_RUN_DEFAULT);
    tide_logs_free(d);
    tide_wstreams_free(d);
    while (!tide_list_empty(&d->outbox)) {
        out_t *o = tide_list_entry(d->outbox.next, out_t, node);
        tide_list_remove(&o->node);
        out_free(o);
    }
    {
        dirty_job_t *dj, *tmp;
        HASH_ITER(hh, d->dirty, dj, tmp) forget_dirty(d, dj->id);
    }
    tide_events_free(d);
    tide_store_batch_free(d->batch);
    tide_core_free(d->core);
    tide_authz_free(d->authz);
    tide_audit_free(d->audit);
    tide_usage_free(d->usage);
    tide_arena_free(&d->arena);
    tide_arena_free(&d->rx_arena);
    free(d->methods);
    free(d->token);
    free(d->store_url);
    free(d->data_dir);
    free(d->launch_key);
    free(d->durable_dir);
    free(d);
}

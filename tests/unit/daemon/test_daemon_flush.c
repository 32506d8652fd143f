/* The checkpoint gate through the daemon, on the real loop and transport (127.0.0.1, port 0) with a
 * scripted worker on a WorkerService/Connect stream: a complete checkpoint of a job whose MFU is unknown
 * is released at once as a FlushCheckpoint carrying --ckpt-durable; the worker's FlushDone makes it the
 * job's durable checkpoint; a malformed FlushDone counts as a failed copy (held again, never trusted), one
 * that names no rank is ignored without closing the stream; and the durable checkpoint survives a restart
 * from the store. Waits are on conditions with a deadline, never fixed sleeps. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "daemon.h"
#include "rpc_client.h"

#include "tide/v1/job_service.pb-c.h"
#include "tide/v1/worker_service.pb-c.h"

#define DEADLINE_MS 15000
#define MAX_MSGS 64
#define SHA_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

typedef struct world {
    uv_loop_t loop;
    uv_timer_t tick; /* wakes uv_run so deadlines are checked even when nothing happens */
    char dir[64];
    char store[128];
    tide_daemon_t *d;
    tide_rpc_client_t *client;
    tide_rpc_client_call_t *stream;
    bool stream_ended;
    Tide__V1__SchedulerMessage *msgs[MAX_MSGS];
    size_t n_msgs, seen;
} world_t;

typedef struct unary {
    bool done;
    tide_grpc_code_t code;
    char text[256];
    uint8_t *data;
    size_t len;
} unary_t;

static void tick_cb(uv_timer_t *t)
{
    (void)t;
}

static void stream_message(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    world_t *w = ud;
    Tide__V1__SchedulerMessage *m = tide__v1__scheduler_message__unpack(NULL, len, data);

    (void)call;
    assert_non_null(m);
    assert_true(w->n_msgs < MAX_MSGS);
    w->msgs[w->n_msgs++] = m;
}

static void stream_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *msg, void *ud)
{
    world_t *w = ud;
    (void)call, (void)code, (void)msg;
    w->stream_ended = true;
    w->stream = NULL;
}

static void unary_message(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    unary_t *u = ud;
    (void)call;
    u->data = malloc(len ? len : 1);
    memcpy(u->data, data, len);
    u->len = len;
}

static void unary_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *msg, void *ud)
{
    unary_t *u = ud;
    (void)call;
    u->done = true;
    u->code = code;
    snprintf(u->text, sizeof(u->text), "%s", msg ? msg : "");
}

/* Runs the loop until *flag is set or the deadline passes (then the test fails). */
static void run_until(world_t *w, const bool *flag, const char *what)
{
    uint64_t until = uv_now(&w->loop) + DEADLINE_MS;

    while (!*flag && uv_now(&w->loop) < until)
        uv_run(&w->loop, UV_RUN_ONCE);
    if (!*flag)
        fail_msg("timed out waiting for %s", what);
}

static void start_daemon(world_t *w)
{
    tide_daemon_config_t cfg = {.listen = "127.0.0.1:0", .data_dir = w->dir, .store_url = w->store,
                                .insecure_no_auth = true, .ckpt_durable_dir = "/durable"};
    tide_rpc_client_config_t ccfg = {0};
    char hostport[64];
    tide_error_t err;

    tide_core_config_default(&cfg.core);
    cfg.core.ckpt_flush = true;
    if (tide_daemon_start(&w->loop, &cfg, &w->d, &err) != 0)
        fail_msg("daemon: %s", err.text);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", tide_rpc_server_port(w->d->server));
    ccfg.hostport = hostport;
    assert_int_equal(tide_rpc_client_new(&w->loop, &ccfg, &w->client, &err), 0);
}

static void stop_daemon(world_t *w)
{
    tide_rpc_client_free(w->client);
    w->client = NULL;
    tide_daemon_stop(w->d);
    uv_timer_stop(&w->tick); /* tide_daemon_free runs the loop until only closed handles remain */
    tide_daemon_free(w->d);
    w->d = NULL;
    uv_timer_start(&w->tick, tick_cb, 20, 20);
}

/* A unary call; returns the response (caller frees with protobuf_c_message_free_unpacked). */
static ProtobufCMessage *call(world_t *w, const char *path, const ProtobufCMessage *req,
                              const ProtobufCMessageDescriptor *resp, tide_grpc_code_t want)
{
    tide_rpc_client_call_cbs_t cbs = {unary_message, unary_status};
    unary_t u = {0};
    ProtobufCMessage *m = NULL;

    assert_int_equal(tide_rpc_client_unary(w->client, path, req, 10000, &cbs, &u, NULL), 0);
    run_until(w, &u.done, path);
    if (u.code != want)
        fail_msg("%s: status %d (%s), want %d", path, (int)u.code, u.text, (int)want);
    if (u.data)
        m = protobuf_c_message_unpack(resp, NULL, u.len, u.data);
    free(u.data);
    return m;
}

static Tide__V1__Job *get_job(world_t *w, const char *id)
{
    Tide__V1__GetJobRequest req = TIDE__V1__GET_JOB_REQUEST__INIT;
    Tide__V1__Job *j;

    req.id = (char *)id;
    j = (Tide__V1__Job *)call(w, "/tide.v1.JobService/GetJob", &req.base, &tide__v1__job__descriptor, TIDE_GRPC_OK);
    assert_non_null(j);
    return j;
}

/* Reads the job until pred holds (worker messages and GetJob travel on different streams). */
static Tide__V1__Job *wait_job(world_t *w, const char *id, bool (*pred)(const Tide__V1__Job *), const char *what)
{
    uint64_t until = uv_now(&w->loop) + DEADLINE_MS;

    for (;;) {
        Tide__V1__Job *j = get_job(w, id);
        if (pred(j))
            return j;
        tide__v1__job__free_unpacked(j, NULL);
        if (uv_now(&w->loop) >= until)
            fail_msg("timed out waiting for job %s: %s", id, what);
        uv_run(&w->loop, UV_RUN_ONCE);
    }
}

static void wsend(world_t *w, Tide__V1__WorkerMessage *m)
{
    assert_non_null(w->stream);
    assert_int_equal(tide_rpc_client_call_send_pb(w->stream, &m->base), 0);
}

/* The next scheduler message of that kind (others are skipped). */
static Tide__V1__SchedulerMessage *next_msg(world_t *w, Tide__V1__SchedulerMessage__MsgCase kind)
{
    uint64_t until = uv_now(&w->loop) + DEADLINE_MS;

    for (;;) {
        while (w->seen < w->n_msgs) {
            Tide__V1__SchedulerMessage *m = w->msgs[w->seen++];
            if (m->msg_case == kind)
                return m;
        }
        if (uv_now(&w->loop) >= until || w->stream_ended)
            fail_msg("no scheduler message of kind %d", (int)kind);
        uv_run(&w->loop, UV_RUN_ONCE);
    }
}

static void connect_worker(world_t *w)
{
    tide_rpc_client_call_cbs_t cbs = {stream_message, stream_status};
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__WorkerHello h = TIDE__V1__WORKER_HELLO__INIT;

    assert_int_equal(tide_rpc_client_call_start(w->client, "/tide.v1.WorkerService/Connect", 0, &cbs, w, &w->stream),
                     0);
    h.protocol_version = TIDE__V1__WORKER_PROTOCOL__WORKER_PROTOCOL_CURRENT;
    h.worker_id = "n1/gpu0";
    h.node = "n1";
    h.device = "sim:h100";
    h.peak_flops = 989e12;
    h.memory_bytes = 80ULL << 30;
    h.address = "127.0.0.1";
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_HELLO;
    m.hello = &h;
    wsend(w, &m);
    next_msg(w, TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME);
}

static void checkpoint_saved(world_t *w, int64_t step)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__CheckpointSaved c = TIDE__V1__CHECKPOINT_SAVED__INIT;
    char path[64];

    snprintf(path, sizeof(path), "/local/1/ckpt-%lld.bin", (long long)step);
    c.job_id = "1", c.generation = 1, c.rank = 0, c.step = step, c.path = path, c.bytes = 100, c.sha256 = SHA_A;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_CHECKPOINT_SAVED;
    m.checkpoint_saved = &c;
    wsend(w, &m);
}

static void flush_done(world_t *w, const char *job, int64_t step, bool ok, const char *path, const char *sha)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__FlushDone f = TIDE__V1__FLUSH_DONE__INIT;

    f.job_id = (char *)job, f.generation = 1, f.rank = 0, f.step = step, f.ok = ok;
    f.durable_path = (char *)path, f.bytes = 100, f.sha256 = (char *)sha;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE;
    m.flush_done = &f;
    wsend(w, &m);
}

static bool copying(const Tide__V1__Job *j)
{
    return j->flush_state == TIDE__V1__FLUSH_STATE__FLUSH_STATE_COPYING;
}

static bool durable_10(const Tide__V1__Job *j)
{
    return j->durable_checkpoint && j->durable_checkpoint->step == 10 &&
           j->flush_state == TIDE__V1__FLUSH_STATE__FLUSH_STATE_NONE;
}

static bool held_20(const Tide__V1__Job *j)
{
    return j->flush_state == TIDE__V1__FLUSH_STATE__FLUSH_STATE_HELD && j->flush_step == 20;
}

static bool any(const Tide__V1__Job *j)
{
    (void)j;
    return true;
}

static void test_flush_round_trip(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    Tide__V1__SubmitJobRequest sreq = TIDE__V1__SUBMIT_JOB_REQUEST__INIT;
    Tide__V1__JobSpec spec = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__RankStarted rs = TIDE__V1__RANK_STARTED__INIT;
    Tide__V1__SchedulerMessage *sm;
    Tide__V1__Job *j;
    char *argv[] = {"train"};
    char cmd[160];
    (void)state;

    snprintf(w->dir, sizeof(w->dir), "/tmp/tide-flush-test-XXXXXX");
    assert_non_null(mkdtemp(w->dir));
    snprintf(w->store, sizeof(w->store), "sqlite:%s/state.db", w->dir);
    uv_loop_init(&w->loop);
    uv_timer_init(&w->loop, &w->tick);
    uv_timer_start(&w->tick, tick_cb, 20, 20);
    start_daemon(w);
    connect_worker(w);

    spec.n_command = 1, spec.command = argv, spec.min_workers = 1;
    sreq.spec = &spec;
    j = (Tide__V1__Job *)call(w, "/tide.v1.JobService/SubmitJob", &sreq.base, &tide__v1__job__descriptor,
                              TIDE_GRPC_OK);
    assert_string_equal(j->id, "1");
    tide__v1__job__free_unpacked(j, NULL);
    sm = next_msg(w, TIDE__V1__SCHEDULER_MESSAGE__MSG_LAUNCH);
    assert_string_equal(sm->launch->job_id, "1");
    rs.job_id = "1", rs.generation = 1, rs.rank = 0, rs.pid = 4242, rs.master_port = 29500;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED;
    m.rank_started = &rs;
    wsend(w, &m);

    /* A complete checkpoint; the job reports no FLOPs (MFU unknown): nothing to protect, copy now. */
    checkpoint_saved(w, 10);
    sm = next_msg(w, TIDE__V1__SCHEDULER_MESSAGE__MSG_FLUSH);
    assert_string_equal(sm->flush->job_id, "1");
    assert_int_equal(sm->flush->generation, 1);
    assert_int_equal(sm->flush->rank, 0);
    assert_int_equal(sm->flush->step, 10);
    assert_string_equal(sm->flush->durable_dir, "/durable");
    assert_int_equal(sm->epoch, w->d->epoch);
    j = wait_job(w, "1", copying, "flush state COPYING");
    assert_int_equal(j->flush_step, 10);
    assert_true(j->flush_since_ms > 0);
    tide__v1__job__free_unpacked(j, NULL);

    /* A report that names no rank is dropped; the stream stays open. */
    flush_done(w, "", 10, true, "/durable/x", SHA_B);
    flush_done(w, "1", 10, true, "/durable/1/step-10/ckpt-10.bin", SHA_B);
    j = wait_job(w, "1", durable_10, "durable checkpoint step 10");
    assert_string_equal(j->durable_checkpoint->path, "/durable/1/step-10/ckpt-10.bin");
    assert_string_equal(j->durable_checkpoint->sha256, SHA_B);
    assert_int_equal(j->durable_checkpoint->bytes, 100);
    assert_int_equal(j->flushes, 1);
    assert_int_equal(j->flushed_bytes, 100);
    tide__v1__job__free_unpacked(j, NULL);
    assert_false(w->stream_ended);

    /* A malformed report for the next copy is a failed copy: held again, the old durable one kept. */
    checkpoint_saved(w, 20);
    sm = next_msg(w, TIDE__V1__SCHEDULER_MESSAGE__MSG_FLUSH);
    assert_int_equal(sm->flush->step, 20);
    flush_done(w, "1", 20, true, "/durable/1/step-20/ckpt-20.bin", "not-a-checksum");
    j = wait_job(w, "1", held_20, "flush held again after a malformed report");
    assert_int_equal(j->durable_checkpoint->step, 10);
    assert_int_equal(j->flushes, 1);
    tide__v1__job__free_unpacked(j, NULL);
    assert_false(w->stream_ended);

    /* A restart keeps the durable checkpoint and the counters. */
    stop_daemon(w);
    run_until(w, &w->stream_ended, "the old stream to end");
    start_daemon(w);
    j = wait_job(w, "1", any, "the restored job");
    assert_non_null(j->durable_checkpoint);
    assert_int_equal(j->durable_checkpoint->step, 10);
    assert_string_equal(j->durable_checkpoint->path, "/durable/1/step-10/ckpt-10.bin");
    assert_int_equal(j->flushes, 1);
    assert_int_equal(j->flushed_bytes, 100);
    tide__v1__job__free_unpacked(j, NULL);

    stop_daemon(w);
    uv_close((uv_handle_t *)&w->tick, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&w->loop), 0);
    for (size_t i = 0; i < w->n_msgs; i++)
        tide__v1__scheduler_message__free_unpacked(w->msgs[i], NULL);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", w->dir);
    assert_int_equal(system(cmd), 0);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flush_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

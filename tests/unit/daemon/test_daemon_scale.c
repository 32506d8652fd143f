/* JobService.ScaleJob through the daemon, on the real loop and transport (127.0.0.1, port 0) with a
 * scripted worker on a WorkerService/Connect stream: bad requests get INVALID_ARGUMENT naming the
 * field (or the job's bounds) and change nothing; an unknown job NOT_FOUND, an ended one
 * FAILED_PRECONDITION; a pending job keeps the requested size as its cap; a running job asked for a
 * size that cannot be had gets an accepted, pending resize with its reason; the requested size
 * survives a restart from the store. Waits are on conditions with a deadline, never fixed sleeps.
 */
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
#define MAX_MSGS    64

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

static void stream_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *msg,
                          void *ud)
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

static void unary_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *msg,
                         void *ud)
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
    tide_daemon_config_t cfg = {.listen = "127.0.0.1:0",
                                .data_dir = w->dir,
                                .store_url = w->store,
                                .insecure_no_auth = true};
    tide_rpc_client_config_t ccfg = {0};
    char hostport[64];
    tide_error_t err;

    tide_core_config_default(&cfg.core);
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

/* A unary call of raw bytes; *u gets the outcome (caller frees u->data). */
static void call_raw(world_t *w, const char *path, const uint8_t *data, size_t len, unary_t *u)
{
    tide_rpc_client_call_cbs_t cbs = {unary_message, unary_status};
    tide_rpc_client_call_t *c = NULL;

    memset(u, 0, sizeof(*u));
    assert_int_equal(tide_rpc_client_call_start(w->client, path, 10000, &cbs, u, &c), 0);
    assert_int_equal(tide_rpc_client_call_send(c, data, len), 0);
    assert_int_equal(tide_rpc_client_call_close_send(c), 0);
    run_until(w, &u->done, path);
}

/* A unary call; returns the response (caller frees with protobuf_c_message_free_unpacked), and the
 * status text in text when given. */
static ProtobufCMessage *call(world_t *w, const char *path, const ProtobufCMessage *req,
                              const ProtobufCMessageDescriptor *resp, tide_grpc_code_t want,
                              char *text, size_t size)
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
    if (text)
        snprintf(text, size, "%s", u.text);
    free(u.data);
    return m;
}

/* ScaleJob(id, workers, elastic) expecting want; returns the Job on OK (caller frees), the status
 * text in text otherwise. */
static Tide__V1__Job *scale(world_t *w, const char *id, int32_t workers, bool elastic,
                            tide_grpc_code_t want, char *text, size_t size)
{
    Tide__V1__ScaleJobRequest req = TIDE__V1__SCALE_JOB_REQUEST__INIT;
    Tide__V1__Job *j;

    req.id = (char *)id, req.workers = workers, req.elastic = elastic;
    j = (Tide__V1__Job *)call(w, "/tide.v1.JobService/ScaleJob", &req.base,
                              &tide__v1__job__descriptor, want, text, size);
    if (want == TIDE_GRPC_OK)
        assert_non_null(j);
    return j;
}

static Tide__V1__Job *get_job(world_t *w, const char *id)
{
    Tide__V1__GetJobRequest req = TIDE__V1__GET_JOB_REQUEST__INIT;
    Tide__V1__Job *j;

    req.id = (char *)id;
    j = (Tide__V1__Job *)call(w, "/tide.v1.JobService/GetJob", &req.base,
                              &tide__v1__job__descriptor, TIDE_GRPC_OK, NULL, 0);
    assert_non_null(j);
    return j;
}

/* Reads the job until pred holds (worker messages and GetJob travel on different streams). */
static Tide__V1__Job *wait_job(world_t *w, const char *id, bool (*pred)(const Tide__V1__Job *),
                               const char *what)
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

    assert_int_equal(tide_rpc_client_call_start(w->client, "/tide.v1.WorkerService/Connect", 0,
                                                &cbs, w, &w->stream),
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

static bool running(const Tide__V1__Job *j)
{
    return j->state == TIDE__V1__JOB_STATE__JOB_STATE_RUNNING && j->ranks_running == 1;
}

static bool any(const Tide__V1__Job *j)
{
    (void)j;
    return true;
}

static void expect_text(const char *got, const char *want)
{
    if (strcmp(got, want) != 0)
        fail_msg("status text \"%s\", want \"%s\"", got, want);
}

static void test_scale_job(void **state)
{
    world_t *w = calloc(1, sizeof(*w));
    Tide__V1__SubmitJobRequest sreq = TIDE__V1__SUBMIT_JOB_REQUEST__INIT;
    Tide__V1__JobSpec spec = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__CancelJobRequest creq = TIDE__V1__CANCEL_JOB_REQUEST__INIT;
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__RankStarted rs = TIDE__V1__RANK_STARTED__INIT;
    Tide__V1__SchedulerMessage *sm;
    Tide__V1__Job *j;
    static const uint8_t garbage[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0x0f};
    char *argv[] = {"train"};
    char text[256], cmd[160];
    unary_t u;
    (void)state;

    snprintf(w->dir, sizeof(w->dir), "/tmp/tide-scale-test-XXXXXX");
    assert_non_null(mkdtemp(w->dir));
    snprintf(w->store, sizeof(w->store), "sqlite:%s/state.db", w->dir);
    uv_loop_init(&w->loop);
    uv_timer_init(&w->loop, &w->tick);
    uv_timer_start(&w->tick, tick_cb, 20, 20);
    start_daemon(w);

    /* Bad requests: answered at once, naming the field. */
    call_raw(w, "/tide.v1.JobService/ScaleJob", garbage, sizeof(garbage), &u);
    assert_int_equal(u.code, TIDE_GRPC_INVALID_ARGUMENT);
    expect_text(u.text, "request is not a valid tide.v1.ScaleJobRequest");
    free(u.data);
    assert_null(scale(w, "", 2, false, TIDE_GRPC_INVALID_ARGUMENT, text, sizeof(text)));
    expect_text(text, "id must not be empty");
    assert_null(scale(w, "1", 2, true, TIDE_GRPC_INVALID_ARGUMENT, text, sizeof(text)));
    expect_text(text, "workers must be 0 with elastic");
    assert_null(scale(w, "99", 2, false, TIDE_GRPC_NOT_FOUND, text, sizeof(text)));
    assert_non_null(strstr(text, "99"));

    /* A pending job: the bounds are checked, and the size it will start with at most is kept. */
    spec.n_command = 1, spec.command = argv, spec.min_workers = 1, spec.max_workers = 2;
    sreq.spec = &spec;
    j = (Tide__V1__Job *)call(w, "/tide.v1.JobService/SubmitJob", &sreq.base,
                              &tide__v1__job__descriptor, TIDE_GRPC_OK, NULL, 0);
    assert_string_equal(j->id, "1");
    assert_int_equal(j->state, TIDE__V1__JOB_STATE__JOB_STATE_PENDING);
    tide__v1__job__free_unpacked(j, NULL);
    assert_null(scale(w, "1", 3, false, TIDE_GRPC_INVALID_ARGUMENT, text, sizeof(text)));
    assert_non_null(strstr(text, "max_workers 2")); /* the core names the bounds */
    assert_null(scale(w, "1", 0, false, TIDE_GRPC_INVALID_ARGUMENT, text, sizeof(text)));
    j = get_job(w, "1");
    assert_int_equal(j->target_workers, 0); /* refused: nothing changed */
    tide__v1__job__free_unpacked(j, NULL);
    j = scale(w, "1", 1, false, TIDE_GRPC_OK, NULL, 0);
    assert_int_equal(j->state, TIDE__V1__JOB_STATE__JOB_STATE_PENDING);
    assert_int_equal(j->target_workers, 1);
    assert_null(j->resize);
    tide__v1__job__free_unpacked(j, NULL);

    /* One worker: it starts with one rank. */
    connect_worker(w);
    sm = next_msg(w, TIDE__V1__SCHEDULER_MESSAGE__MSG_LAUNCH);
    assert_string_equal(sm->launch->job_id, "1");
    rs.job_id = "1", rs.generation = sm->launch->generation, rs.rank = 0, rs.pid = 4242,
    rs.master_port = 29500;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED;
    m.rank_started = &rs;
    wsend(w, &m);
    tide__v1__job__free_unpacked(wait_job(w, "1", running, "rank 0 running"), NULL);

    /* Two asked, one GPU in the cluster: accepted and pending, with the reason. */
    j = scale(w, "1", 2, false, TIDE_GRPC_OK, NULL, 0);
    assert_int_equal(j->state, TIDE__V1__JOB_STATE__JOB_STATE_RUNNING);
    assert_int_equal(j->target_workers, 2);
    assert_non_null(j->resize);
    assert_int_equal(j->resize->state, TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING);
    assert_int_equal(j->resize->reason, TIDE__V1__RESIZE_REASON__RESIZE_REASON_REQUESTED);
    assert_int_equal(j->resize->from_workers, 1);
    assert_int_equal(j->resize->to_workers, 2);
    assert_true(j->resize->detail[0] != '\0');
    assert_null(j->last_resize);
    tide__v1__job__free_unpacked(j, NULL);

    /* An ended job cannot be scaled. */
    creq.id = "1";
    tide__v1__job__free_unpacked((Tide__V1__Job *)call(w, "/tide.v1.JobService/CancelJob",
                                                       &creq.base, &tide__v1__job__descriptor,
                                                       TIDE_GRPC_OK, NULL, 0),
                                 NULL);
    assert_null(scale(w, "1", 1, false, TIDE_GRPC_FAILED_PRECONDITION, text, sizeof(text)));
    assert_non_null(strstr(text, "1"));
    assert_null(scale(w, "1", 0, true, TIDE_GRPC_FAILED_PRECONDITION, text, sizeof(text)));

    /* A restart keeps the requested size. */
    stop_daemon(w);
    run_until(w, &w->stream_ended, "the old stream to end");
    start_daemon(w);
    j = wait_job(w, "1", any, "the restored job");
    assert_int_equal(j->state, TIDE__V1__JOB_STATE__JOB_STATE_CANCELLED);
    assert_int_equal(j->target_workers, 2);
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
        cmocka_unit_test(test_scale_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

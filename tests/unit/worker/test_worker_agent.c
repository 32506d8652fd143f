/* Tests of the whole worker shell (worker/agent.c) on a real loop with real rank processes and a
 * fake transport (fake_rpc_client.c) in the scheduler's seat: registration, heartbeats,
 * launch/exit, logs with backpressure and follow, epoch filtering, reconnect with remembered exits,
 * stop, shutdown, fatal statuses and the startup cleanup of a previous worker's ranks. Every wait
 * has a deadline; each test ends with uv_loop_close() == 0. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>

#include "agent.h"
#include "datadir.h"
#include "fake_rpc.h"
#include "worker_test_util.h"

#define WAIT_MS 15000
#define QMAX    256

typedef struct fixture {
    char *tmp, *data, *hot;
    uv_loop_t loop;
    tide_worker_config_t cfg;
    tide_gpu_t *gpu;
    tide_worker_agent_t *agent;
    uint32_t welcome_timeout_ms;
    /* what the worker sent, heartbeats counted apart */
    Tide__V1__WorkerMessage *q[QMAX];
    int qserial[QMAX];
    size_t qlen;
    int heartbeats;
    uint64_t last_seq;
    double last_temp;
    uint64_t last_mem_total;
    uint64_t last_tasks_run, last_tasks_stolen; /* the first rank's, in the last heartbeat */
    bool high_load_seen;                        /* a heartbeat carried high_load for ... */
    int32_t high_load_rank;                     /* ... this rank */
} fixture_t;

static void pump_sent(fixture_t *fx)
{
    Tide__V1__WorkerMessage *m;
    int serial;

    while ((m = fake_rpc_pop(&serial)) != NULL) {
        if (m->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT) {
            assert_true(m->heartbeat->seq > fx->last_seq);
            fx->heartbeats++;
            fx->last_seq = m->heartbeat->seq;
            assert_non_null(m->heartbeat->telemetry);
            fx->last_temp = m->heartbeat->telemetry->temperature_c;
            fx->last_mem_total = m->heartbeat->telemetry->mem_total_bytes;
            if (m->heartbeat->n_progress > 0 && m->heartbeat->progress[0]->progress) {
                fx->last_tasks_run = m->heartbeat->progress[0]->progress->tasks_run;
                fx->last_tasks_stolen = m->heartbeat->progress[0]->progress->tasks_stolen;
            }
            for (size_t i = 0; i < m->heartbeat->n_progress; i++) {
                const Tide__V1__RankProgress *rp = m->heartbeat->progress[i];
                if (rp->progress && rp->progress->high_load) {
                    fx->high_load_seen = true;
                    fx->high_load_rank = rp->rank;
                }
            }
            tide__v1__worker_message__free_unpacked(m, NULL);
            continue;
        }
        assert_true(fx->qlen < QMAX);
        fx->qserial[fx->qlen] = serial;
        fx->q[fx->qlen++] = m;
    }
}

static bool cond_have_msg(void *arg)
{
    fixture_t *fx = arg;

    pump_sent(fx);
    return fx->qlen > 0;
}

static const char *case_name(int c)
{
    static const char *names[] = {"none",          "hello",          "heartbeat",
                                  "rank_started",  "rank_exited",    "log_data",
                                  "goodbye",       "checkpoint_saved", "flush_done",
                                  "tasks_declared", "tasks_done",    "steal_request",
                                  "tasks_released"};
    return c >= 0 && c <= 12 ? names[c] : "?";
}

/* Waits for the next non-heartbeat message and checks its kind. Caller frees it. */
static Tide__V1__WorkerMessage *expect(fixture_t *fx, Tide__V1__WorkerMessage__MsgCase mc,
                                       int *serial)
{
    Tide__V1__WorkerMessage *m;

    if (!wt_run_until(&fx->loop, cond_have_msg, fx, WAIT_MS))
        fail_msg("no %s from the worker", case_name(mc));
    m = fx->q[0];
    if (serial)
        *serial = fx->qserial[0];
    memmove(fx->q, fx->q + 1, (fx->qlen - 1) * sizeof(fx->q[0]));
    memmove(fx->qserial, fx->qserial + 1, (fx->qlen - 1) * sizeof(fx->qserial[0]));
    fx->qlen--;
    if (m->msg_case != mc)
        fail_msg("expected %s, got %s", case_name(mc), case_name(m->msg_case));
    return m;
}

static void drop(Tide__V1__WorkerMessage *m)
{
    tide__v1__worker_message__free_unpacked(m, NULL);
}

typedef struct hb_cond {
    fixture_t *fx;
    int n;
} hb_cond_t;

static bool cond_heartbeats(void *arg)
{
    hb_cond_t *c = arg;

    pump_sent(c->fx);
    return c->fx->heartbeats >= c->n;
}

static void wait_heartbeats(fixture_t *fx, int more)
{
    hb_cond_t c = {fx, fx->heartbeats + more};
    assert_true(wt_run_until(&fx->loop, cond_heartbeats, &c, WAIT_MS));
}

static bool cond_done(void *arg)
{
    return tide_worker_agent_done(((fixture_t *)arg)->agent);
}

/* --- scheduler messages --- */

static void send_welcome(uint64_t epoch, uint32_t hb)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__Welcome w = TIDE__V1__WELCOME__INIT;

    w.protocol_version = 1;
    w.heartbeat_interval_ms = hb;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME;
    m.welcome = &w;
    assert_true(fake_rpc_deliver(&m));
}

static void send_launch(uint64_t epoch, const char *job, int gen, const char *script,
                        const char *workdir)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__LaunchRank l = TIDE__V1__LAUNCH_RANK__INIT;
    char *sh[] = {"/bin/sh", "-c", (char *)script};
    char *bare[] = {(char *)script};

    l.job_id = (char *)job;
    l.generation = gen;
    l.world_size = 1;
    l.local_world_size = 1;
    if (strchr(script, ' ')) {
        l.command = sh;
        l.n_command = 3;
    } else {
        l.command = bare;
        l.n_command = 1;
    }
    if (workdir)
        l.workdir = (char *)workdir;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_LAUNCH;
    m.launch = &l;
    assert_true(fake_rpc_deliver(&m));
}

static void send_stop(uint64_t epoch, const char *job, int gen, uint32_t grace)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__StopRank s = TIDE__V1__STOP_RANK__INIT;

    s.job_id = (char *)job;
    s.generation = gen;
    s.grace_ms = grace;
    s.reason = "test";
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_STOP;
    m.stop = &s;
    assert_true(fake_rpc_deliver(&m));
}

static void send_log_request(uint64_t epoch, uint64_t id, const char *job, bool follow, bool cancel)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__LogRequest r = TIDE__V1__LOG_REQUEST__INIT;

    r.request_id = id;
    r.job_id = (char *)job;
    r.follow = follow;
    r.cancel = cancel;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_LOG_REQUEST;
    m.log_request = &r;
    assert_true(fake_rpc_deliver(&m));
}

/* Collects LogData of request id until eof; returns the bytes (caller frees) and the error text. */
static char *collect_log(fixture_t *fx, uint64_t id, size_t *len, char *error, size_t error_size)
{
    char *out = calloc(1, 1);
    size_t n = 0;

    for (;;) {
        Tide__V1__WorkerMessage *m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA, NULL);
        Tide__V1__LogData *d = m->log_data;
        bool eof = d->eof;

        assert_int_equal(d->request_id, id);
        assert_true(d->data.len <= 64 * 1024);
        out = realloc(out, n + d->data.len + 1);
        if (d->data.len)
            memcpy(out + n, d->data.data, d->data.len);
        n += d->data.len;
        out[n] = '\0';
        if (eof)
            snprintf(error, error_size, "%s", d->error);
        drop(m);
        if (eof)
            break;
    }
    if (len)
        *len = n;
    return out;
}

/* --- fixture --- */

static void agent_start(fixture_t *fx)
{
    tide_worker_agent_config_t ac = {
        .cfg = &fx->cfg,
        .exec_helper = TIDE_EXEC_PATH,
        .gpu = fx->gpu,
        .handle_signals = false,
        .seed = 7,
        .welcome_timeout_ms = fx->welcome_timeout_ms,
        .drain_timeout_ms = 5000,
        .log_follow_poll_ms = 20,
    };
    tide_error_t err;

    if (tide_worker_agent_new(&fx->loop, &ac, &fx->agent, &err) < 0)
        fail_msg("agent: %s", err.text);
}

static int setup_noagent(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    tide_error_t err;
    char *argv[20];
    int argc = 0;

    fake_rpc_reset();
    fx->tmp = wt_tmpdir();
    assert_true(asprintf(&fx->data, "%s/data", fx->tmp) > 0);
    assert_true(asprintf(&fx->hot, "%s/hot", fx->tmp) > 0);
    setenv("TIDE_TOKEN", "sekrit", 1);
    argv[argc++] = "tide-worker";
    argv[argc++] = "--scheduler";
    argv[argc++] = "127.0.0.1:1";
    argv[argc++] = "--id";
    argv[argc++] = "w1";
    argv[argc++] = "--node";
    argv[argc++] = "n1";
    argv[argc++] = "--advertise";
    argv[argc++] = "127.0.0.1";
    argv[argc++] = "--data-dir";
    argv[argc++] = fx->data;
    argv[argc++] = "--labels";
    argv[argc++] = "rack=r1";
    /* the hot tier inside the data dir: nothing of the test's in /dev/shm */
    argv[argc++] = "--ckpt-hot";
    argv[argc++] = fx->hot;
    if (geteuid() == 0) /* CI runs as root; these ranks have no Unix account (LaunchRank.run_as) */
        argv[argc++] = "--allow-root-jobs";
    argv[argc] = NULL;
    assert_int_equal(tide_worker_config_parse(argc, argv, &fx->cfg, &err), 0);
    unsetenv("TIDE_TOKEN");
    assert_int_equal(tide_gpu_open(fx->cfg.gpu, 0, 0, 0, &fx->gpu, &err), 0);
    assert_int_equal(uv_loop_init(&fx->loop), 0);
    *state = fx;
    return 0;
}

static int setup(void **state)
{
    setup_noagent(state);
    agent_start(*state);
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    tide_worker_agent_free(fx->agent);
    assert_int_equal(wt_loop_finish(&fx->loop), 0);
    for (size_t i = 0; i < fx->qlen; i++)
        drop(fx->q[i]);
    tide_gpu_close(fx->gpu);
    tide_worker_config_free(&fx->cfg);
    fake_rpc_reset();
    wt_rmrf(fx->tmp);
    free(fx->data);
    free(fx->hot);
    free(fx->tmp);
    free(fx);
    return 0;
}

/* Registers: waits for the hello, welcomes at epoch. */
static void register_worker(fixture_t *fx, uint64_t epoch, uint32_t hb)
{
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, NULL));
    send_welcome(epoch, hb);
}

static char *record_path(fixture_t *fx, const char *job, int gen)
{
    char *p;
    assert_true(asprintf(&p, "%s/ranks/%s.%d.0", fx->data, job, gen) > 0);
    return p;
}

/* --- tests --- */

static void test_register_heartbeat_launch_logs(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerMessage *m;
    Tide__V1__WorkerHello *h;
    char *log, err[256], *rec, *epoch;
    int32_t pid;
    int serial;

    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, &serial);
    h = m->hello;
    assert_int_equal(serial, 1);
    assert_string_equal(fake_rpc_last_path(), "/tide.v1.WorkerService/Connect");
    assert_string_equal(fake_rpc_last_token(), "sekrit");
    assert_string_equal(fake_rpc_last_hostport(), "127.0.0.1:1");
    assert_int_equal(h->protocol_version, 1);
    assert_string_equal(h->worker_id, "w1");
    assert_string_equal(h->node, "n1");
    assert_string_equal(h->device, "sim:h100");
    assert_true(h->peak_flops == 989e12);
    assert_int_equal(h->memory_bytes, 80ULL << 30);
    assert_string_equal(h->address, "127.0.0.1");
    assert_string_equal(h->version, TIDE_VERSION);
    assert_int_equal(h->n_labels, 1);
    assert_string_equal(h->labels[0]->key, "rack");
    assert_int_equal(h->max_epoch_seen, 0);
    assert_int_equal(h->n_ranks, 0);
    drop(m);

    send_welcome(5, 30);
    wait_heartbeats(fx, 2);
    assert_true(fx->last_seq >= 2);
    assert_true(fx->last_temp > 34.0 && fx->last_temp < 36.0); /* idle */
    assert_int_equal(fx->last_mem_total, 80ULL << 30);
    assert_true(asprintf(&epoch, "%s/epoch", fx->data) > 0);
    log = wt_read_file(epoch);
    assert_string_equal(log, "5\n");
    free(log);
    free(epoch);

    send_launch(5, "j1", 1, "echo hello-log; echo err-line >&2; exit 3", NULL);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL);
    assert_string_equal(m->rank_started->job_id, "j1");
    assert_int_equal(m->rank_started->generation, 1);
    pid = m->rank_started->pid;
    assert_true(pid > 1);
    assert_true(m->rank_started->master_port > 0);
    drop(m);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->exit_code, 3);
    assert_int_equal(m->rank_exited->status->pid, pid);
    assert_int_equal(m->rank_exited->status->state, TIDE__V1__RANK_STATE__RANK_STATE_EXITED);
    drop(m);
    rec = record_path(fx, "j1", 1);
    assert_true(access(rec, F_OK) < 0); /* removed once the exit was reported */
    free(rec);

    send_log_request(5, 7, "j1", false, false);
    log = collect_log(fx, 7, NULL, err, sizeof(err));
    assert_string_equal(log, "hello-log\nerr-line\n");
    assert_string_equal(err, "");
    free(log);

    send_log_request(5, 8, "nope", false, false);
    log = collect_log(fx, 8, NULL, err, sizeof(err));
    assert_string_equal(log, "");
    assert_string_equal(err, "no log for job nope rank 0 on worker w1");
    free(log);

    /* A deposed leader's launch is ignored: the next thing sent answers the barrier after it. */
    send_launch(4, "j2", 1, "sleep 1000", NULL);
    send_log_request(5, 9, "nope", false, false);
    log = collect_log(fx, 9, NULL, err, sizeof(err));
    free(log);
    assert_int_equal(tide_worker_core_running(tide_worker_agent_core(fx->agent)), 0);

    tide_worker_agent_shutdown(fx->agent, "test over", false);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_GOODBYE, NULL);
    assert_string_equal(m->goodbye->reason, "test over");
    drop(m);
    assert_true(wt_run_until(&fx->loop, cond_done, fx, WAIT_MS));
    assert_int_equal(tide_worker_agent_exit_code(fx->agent), 0);
    assert_true(fake_rpc_half_closed(1));
}

typedef struct unreported_cond {
    fixture_t *fx;
} unreported_cond_t;

static bool cond_one_unreported(void *arg)
{
    const tide_worker_core_t *c = tide_worker_agent_core(((fixture_t *)arg)->agent);
    return tide_worker_core_running(c) == 0 && tide_worker_core_unreported(c) == 1;
}

static void test_idempotent_reconnect_remembers_exits(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerMessage *m;
    Tide__V1__RankStatus *st;
    char err[256], *s, *rec, *path;
    int32_t pid;
    int serial;

    register_worker(fx, 1, 50);
    send_launch(1, "j2", 1, "echo up; exec sleep 1000", NULL);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL);
    pid = m->rank_started->pid;
    drop(m);
    /* The same launch again is answered, not started twice. */
    send_launch(1, "j2", 1, "echo up; exec sleep 1000", NULL);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL);
    assert_int_equal(m->rank_started->pid, pid);
    drop(m);
    assert_int_equal(tide_worker_core_running(tide_worker_agent_core(fx->agent)), 1);
    rec = record_path(fx, "j2", 1);
    assert_true(access(rec, F_OK) == 0);

    /* The scheduler goes away and does not come back at once; meanwhile the rank dies. */
    fake_rpc_refuse(true);
    assert_true(fake_rpc_end(TIDE_GRPC_UNAVAILABLE, "scheduler restarting"));
    assert_int_equal(kill(-pid, SIGKILL), 0);
    assert_true(wt_run_until(&fx->loop, cond_one_unreported, fx, WAIT_MS));
    assert_true(access(rec, F_OK) == 0); /* kept until reported */

    /* It comes back: the new hello carries the exit. */
    fake_rpc_refuse(false);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, &serial);
    assert_true(serial > 1);
    assert_true(fake_rpc_clients_created() >= 2);
    assert_int_equal(m->hello->max_epoch_seen, 1);
    assert_int_equal(m->hello->n_ranks, 1);
    st = m->hello->ranks[0];
    assert_string_equal(st->job_id, "j2");
    assert_int_equal(st->state, TIDE__V1__RANK_STATE__RANK_STATE_EXITED);
    assert_int_equal(st->exit_code, 137);
    assert_int_equal(st->signal, 9);
    assert_int_equal(st->pid, pid);
    drop(m);
    send_welcome(1, 50);
    /* Welcome makes it reported: no RankExited follows, the record goes. The barrier proves it. */
    send_log_request(1, 1, "nope", false, false);
    free(collect_log(fx, 1, NULL, err, sizeof(err)));
    assert_int_equal(tide_worker_core_unreported(tide_worker_agent_core(fx->agent)), 0);
    assert_true(access(rec, F_OK) < 0);
    free(rec);

    /* Stop with grace: the rank traps SIGTERM and exits cleanly. Its loop runs builtins only, so the
     * trap runs at the next command and no child is being forked when the signal lands (one CI run
     * saw dash never run its trap for a SIGTERM that arrived around a `sleep`). */
    send_launch(1, "j3", 1,
                "trap 'echo bye; exit 0' TERM; echo ready; while :; do :; done", NULL);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    path = tide_worker_log_path(fx->data, "j3", 1, 0);
    {
        wt_file_needle_t ready = {path, "ready"};
        assert_true(wt_poll_until(wt_cond_file_contains, &ready, WAIT_MS));
    }
    send_stop(1, "j3", 1, 30000);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->exit_code, 0);
    assert_int_equal(m->rank_exited->status->signal, 0);
    drop(m);
    s = wt_read_file(path);
    assert_non_null(strstr(s, "bye"));
    free(s);
    free(path);

    /* An incompatible protocol will not fix itself: exit 1, no reconnect. */
    assert_true(fake_rpc_end(TIDE_GRPC_FAILED_PRECONDITION, "worker protocol 1 is not supported"));
    assert_true(wt_run_until(&fx->loop, cond_done, fx, WAIT_MS));
    assert_int_equal(tide_worker_agent_exit_code(fx->agent), 1);
}

static void test_shutdown_stops_ranks(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerMessage *m;
    char *path;
    int calls;

    register_worker(fx, 1, 50);
    send_launch(1, "j4", 2,
                "trap 'echo term; exit 0' TERM; echo ready; while :; do :; done", NULL);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    path = tide_worker_log_path(fx->data, "j4", 2, 0);
    {
        wt_file_needle_t ready = {path, "ready"};
        assert_true(wt_poll_until(wt_cond_file_contains, &ready, WAIT_MS));
    }
    free(path);
    calls = fake_rpc_calls_started();
    tide_worker_agent_shutdown(fx->agent, "SIGTERM", false);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_GOODBYE, NULL);
    assert_string_equal(m->goodbye->reason, "SIGTERM");
    drop(m);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_string_equal(m->rank_exited->status->job_id, "j4");
    assert_int_equal(m->rank_exited->status->exit_code, 0);
    drop(m);
    assert_true(wt_run_until(&fx->loop, cond_done, fx, WAIT_MS));
    assert_int_equal(tide_worker_agent_exit_code(fx->agent), 0);
    assert_true(fake_rpc_half_closed(1));
    assert_int_equal(fake_rpc_calls_started(), calls); /* no reconnect while going down */
}

static void send_flush(uint64_t epoch, const char *job, int gen, int64_t step, const char *dir)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__FlushCheckpoint f = TIDE__V1__FLUSH_CHECKPOINT__INIT;

    f.job_id = (char *)job;
    f.generation = gen;
    f.step = step;
    f.durable_dir = (char *)dir;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_FLUSH;
    m.flush = &f;
    assert_true(fake_rpc_deliver(&m));
}

/* A trainer's checkpoint report (a path relative to its workdir) is relayed and remembered; the
 * current leader's FlushCheckpoint copies that file to DIR/JOB/step-STEP/rank-R/ and is answered with
 * FlushDone carrying the verified sha256; a deposed leader's is ignored. */
static void test_flush_checkpoint(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerMessage *m;
    char *script, *cmd, *stale, *durable, *want;
    char sha[65];
    uint64_t bytes;
    struct stat st;

    assert_true(asprintf(&script, "%s/rank.py", fx->tmp) > 0);
    assert_true(asprintf(&cmd, "/usr/bin/python3 %s", script) > 0);
    assert_true(asprintf(&stale, "%s/stale", fx->tmp) > 0);
    assert_true(asprintf(&durable, "%s/durable", fx->tmp) > 0);
    assert_true(asprintf(&want, "%s/durable/jf/step-7/rank-0/ck.bin", fx->tmp) > 0);
    wt_write_file(script, "import hashlib, sys, time\n"
                          "sys.path.insert(0, '" TIDE_SDK_PY_DIR "')\n"
                          "import tide_trainer\n"
                          "t = tide_trainer.connect()\n"
                          "data = bytes(range(256)) * 4000\n"
                          "open('ck.bin', 'wb').write(data)\n"
                          "t.checkpoint(7, 'ck.bin', len(data), hashlib.sha256(data).hexdigest())\n"
                          "time.sleep(120)\n");
    register_worker(fx, 5, 50);
    send_launch(5, "jf", 1, cmd, fx->tmp);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_CHECKPOINT_SAVED, NULL);
    assert_int_equal(m->checkpoint_saved->step, 7);
    assert_string_equal(m->checkpoint_saved->path, "ck.bin");
    bytes = m->checkpoint_saved->bytes;
    assert_int_equal(bytes, 256 * 4000);
    snprintf(sha, sizeof(sha), "%s", m->checkpoint_saved->sha256);
    drop(m);

    send_flush(4, "jf", 1, 7, stale); /* a deposed leader */
    send_flush(5, "jf", 1, 7, durable);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE, NULL);
    assert_true(m->flush_done->ok);
    assert_string_equal(m->flush_done->job_id, "jf");
    assert_int_equal(m->flush_done->step, 7);
    assert_string_equal(m->flush_done->durable_path, want);
    assert_int_equal(m->flush_done->bytes, bytes);
    assert_string_equal(m->flush_done->sha256, sha);
    drop(m);
    assert_int_equal(stat(want, &st), 0);
    assert_int_equal((uint64_t)st.st_size, bytes);
    assert_int_not_equal(stat(stale, &st), 0);

    send_stop(5, "jf", 1, 100);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL));
    free(script);
    free(cmd);
    free(stale);
    free(durable);
    free(want);
}

static void send_give(uint64_t epoch, const char *job, int gen, uint64_t steal_id,
                      const uint64_t *ids, size_t n)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__GiveTasks g = TIDE__V1__GIVE_TASKS__INIT;

    g.job_id = (char *)job;
    g.generation = gen;
    g.kind = TIDE__V1__TASK_KIND__TASK_KIND_MEMBER;
    g.steal_id = steal_id;
    g.task_ids = (uint64_t *)ids;
    g.n_task_ids = n;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS;
    m.give_tasks = &g;
    assert_true(fake_rpc_deliver(&m));
}

static void send_release(uint64_t epoch, const char *job, int gen, uint64_t release_id)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__ReleaseTasks r = TIDE__V1__RELEASE_TASKS__INIT;

    r.job_id = (char *)job;
    r.generation = gen;
    r.release_id = release_id;
    r.max_tasks = 4;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS;
    m.release_tasks = &r;
    assert_true(fake_rpc_deliver(&m));
}

typedef struct tasks_cond {
    fixture_t *fx;
    uint64_t run;
} tasks_cond_t;

static bool cond_tasks_run(void *arg)
{
    tasks_cond_t *c = arg;

    pump_sent(c->fx);
    return c->fx->last_tasks_run >= c->run;
}

/* Work stealing through the whole shell (docs/work-stealing.md): a trainer speaking the protocol
 * declares one task; as it is handed the worker asks the scheduler ahead, and the trainer, done,
 * waits on its empty deque for that request (its completion goes with the next heartbeat); the
 * request survives a lost stream (after the new Welcome: the pool's declaration again, its
 * completions, then the request with its id), the GiveTasks answer reaches the trainer and, being
 * its only task, sends the next request ahead at once, an empty answer to that one ends its step;
 * ReleaseTasks are answered; heartbeats carry the task figures. */
static void test_tasks_steal(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerMessage *m;
    static const uint64_t stolen[] = {2};
    tasks_cond_t tc = {fx, 2};
    char *script, *cmd, *outp, *ran;
    int serial;

    assert_true(asprintf(&script, "%s/tasks.py", fx->tmp) > 0);
    assert_true(asprintf(&outp, "%s/ran", fx->tmp) > 0);
    assert_true(asprintf(&cmd, "/usr/bin/python3 %s %s", script, outp) > 0);
    wt_write_file(script,
                  "import json, os, socket, sys\n"
                  "s = socket.socket(socket.AF_UNIX)\n"
                  "s.connect(os.environ['TIDE_AGENT_SOCK'])\n"
                  "rd = s.makefile('rb')\n"
                  "def send(o):\n"
                  "    s.sendall((json.dumps(o) + '\\n').encode())\n"
                  "def recv():\n"
                  "    return json.loads(rd.readline())\n"
                  "send({'op': 'hello', 'v': 1, 'job': os.environ['TIDE_JOB_ID'],\n"
                  "      'generation': int(os.environ['TIDE_GENERATION']),\n"
                  "      'rank': int(os.environ['RANK']), 'pid': os.getpid()})\n"
                  "assert recv()['op'] == 'welcome'\n"
                  "send({'op': 'tasks', 'step': 0, 'ids': [1], 'total': 3})\n"
                  "ran, done = [], None\n"
                  "while True:\n"
                  "    m = {'op': 'next_task', 'step': 0}\n"
                  "    if done is not None:\n"
                  "        m['done'] = done\n"
                  "    send(m)\n"
                  "    r = recv()\n"
                  "    if r['op'] == 'no_task':\n"
                  "        break\n"
                  "    assert r['op'] == 'task', r\n"
                  "    ran.append(r['id'])\n"
                  "    done = r['id']\n"
                  "open(sys.argv[1], 'w').write(' '.join(map(str, ran)))\n");
    register_worker(fx, 5, 50);
    send_launch(5, "jt", 1, cmd, fx->tmp);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED, NULL);
    assert_string_equal(m->tasks_declared->job_id, "jt");
    assert_int_equal(m->tasks_declared->generation, 1);
    assert_int_equal(m->tasks_declared->n_task_ids, 1);
    assert_int_equal(m->tasks_declared->total, 3);
    drop(m);
    /* task 1, the only one queued, is handed: the steal goes out ahead, with nothing done yet */
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST, NULL);
    assert_int_equal(m->steal_request->steal_id, 1);
    assert_string_equal(m->steal_request->job_id, "jt");
    drop(m);
    /* the trainer reports 1 done and waits for that steal (no second request): the completion
     * goes with the next heartbeat */
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE, NULL);
    assert_int_equal(m->tasks_done->n_task_ids, 1);
    assert_int_equal(m->tasks_done->task_ids[0], 1);
    drop(m);
    /* a victim's answer: nothing queued here; a rank that does not run here releases nothing */
    send_release(5, "jt", 1, 70);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED, NULL);
    assert_int_equal(m->tasks_released->release_id, 70);
    assert_int_equal(m->tasks_released->n_task_ids, 0);
    drop(m);
    send_release(5, "jt", 2, 71);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED, NULL);
    assert_int_equal(m->tasks_released->release_id, 71);
    assert_int_equal(m->tasks_released->generation, 2);
    drop(m);
    /* the stream is lost while the trainer waits; the request goes again after the new Welcome */
    assert_true(fake_rpc_end(TIDE_GRPC_UNAVAILABLE, "gone"));
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, &serial));
    assert_int_equal(serial, 2);
    send_welcome(5, 50);
    /* the pool is declared again (nothing moved: as the trainer declared it), then the
     * completions again, then the request */
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED, &serial);
    assert_int_equal(serial, 2);
    assert_string_equal(m->tasks_declared->job_id, "jt");
    assert_int_equal(m->tasks_declared->generation, 1);
    assert_int_equal(m->tasks_declared->step, 0);
    assert_int_equal(m->tasks_declared->total, 3);
    assert_int_equal(m->tasks_declared->n_task_ids, 1);
    assert_int_equal(m->tasks_declared->task_ids[0], 1);
    drop(m);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE, NULL);
    assert_int_equal(m->tasks_done->n_task_ids, 1);
    assert_int_equal(m->tasks_done->task_ids[0], 1);
    drop(m);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST, &serial);
    assert_int_equal(serial, 2);
    assert_int_equal(m->steal_request->steal_id, 1);
    drop(m);
    send_give(4, "jt", 1, 1, stolen, 1); /* a deposed leader's: ignored */
    send_give(5, "jt", 1, 1, stolen, 1);
    /* the waiter is handed 2, the only task of the answer: the next steal goes out ahead at once
     * (1's completion went with the Welcome, so nothing is sent before it) ... */
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST, NULL);
    assert_int_equal(m->steal_request->steal_id, 2);
    assert_string_equal(m->steal_request->job_id, "jt");
    drop(m);
    /* ... and the trainer, done with 2, waits for it: 2's completion goes with a heartbeat */
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE, NULL);
    assert_int_equal(m->tasks_done->n_task_ids, 1);
    assert_int_equal(m->tasks_done->task_ids[0], 2);
    drop(m);
    assert_true(wt_run_until(&fx->loop, cond_tasks_run, &tc, WAIT_MS));
    assert_int_equal(fx->last_tasks_stolen, 1);
    send_give(5, "jt", 1, 2, NULL, 0); /* nothing left: no_task ends its step */
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->exit_code, 0);
    drop(m);
    ran = wt_read_file(outp);
    assert_non_null(ran);
    assert_string_equal(ran, "1 2");
    free(ran);
    free(script);
    free(cmd);
    free(outp);
}

/* --- phase-aware burst (docs/elastic.md, "Burst") --- */

static void send_launch_burst(uint64_t epoch, const char *job, int gen, int rank, int world,
                              char **cmd, size_t n_cmd, const char *workdir)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__LaunchRank l = TIDE__V1__LAUNCH_RANK__INIT;
    Tide__V1__LaunchRank__EnvEntry e = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry *ep = &e;

    l.job_id = (char *)job;
    l.generation = gen;
    l.rank = rank;
    l.world_size = world;
    l.burst = true;
    /* an MPI job's burst rank: started directly, never through mpirun (it would wait for its
     * tide-rank-exec, pid 0, and never run the script) */
    l.launcher = TIDE__V1__LAUNCHER__LAUNCHER_MPI;
    l.mpi_credential = "c";
    l.command = cmd;
    l.n_command = n_cmd;
    l.workdir = (char *)workdir;
    e.key = "RANK"; /* the job's env map cannot make it a member */
    e.value = "99";
    l.env = &ep;
    l.n_env = 1;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_LAUNCH;
    m.launch = &l;
    assert_true(fake_rpc_deliver(&m));
}

static void send_give_detached(uint64_t epoch, const char *job, int gen, int rank, int64_t step,
                               uint64_t steal_id, const uint64_t *ids, size_t n)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__GiveTasks g = TIDE__V1__GIVE_TASKS__INIT;

    g.job_id = (char *)job;
    g.generation = gen;
    g.rank = rank;
    g.kind = TIDE__V1__TASK_KIND__TASK_KIND_DETACHED;
    g.step = step;
    g.steal_id = steal_id;
    g.task_ids = (uint64_t *)ids;
    g.n_task_ids = n;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS;
    m.give_tasks = &g;
    assert_true(fake_rpc_deliver(&m));
}

static bool cond_high_load(void *arg)
{
    fixture_t *fx = arg;

    pump_sent(fx);
    return fx->high_load_seen;
}

/* Checks that m is a TasksDeclared or StealRequest of (jb, 1, rank 3, detached, step) and frees
 * it. */
static void expect_burst_msg(fixture_t *fx, Tide__V1__WorkerMessage__MsgCase mc, int64_t step,
                             uint64_t steal_id)
{
    Tide__V1__WorkerMessage *m = expect(fx, mc, NULL);

    if (mc == TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED) {
        assert_string_equal(m->tasks_declared->job_id, "jb");
        assert_int_equal(m->tasks_declared->rank, 3);
        assert_int_equal(m->tasks_declared->kind, TIDE__V1__TASK_KIND__TASK_KIND_DETACHED);
        assert_int_equal(m->tasks_declared->step, step);
        assert_int_equal(m->tasks_declared->n_task_ids, 0); /* an empty share */
        assert_int_equal(m->tasks_declared->total, 3);
    } else {
        assert_int_equal(m->steal_request->rank, 3);
        assert_int_equal(m->steal_request->kind, TIDE__V1__TASK_KIND__TASK_KIND_DETACHED);
        assert_int_equal(m->steal_request->step, step);
        assert_int_equal(m->steal_request->steal_id, steal_id);
    }
    drop(m);
}

/* A burst rank of an MPI job through the whole shell and the Python SDK: started directly with the
 * burst environment (no RANK even from the job's env), its hello names TIDE_RANK, `load` reaches
 * the heartbeats, it joins two steps' detached pools with an empty share and runs what the steals
 * bring, and a StopRank ends it after the task in hand (no_task to the waiting next_task, then
 * should_stop); its last completion goes out before its exit. */
static void test_burst_rank(void **state)
{
    fixture_t *fx = *state;
    static const uint64_t one[] = {1};
    Tide__V1__WorkerMessage *m;
    char *script, *outp, *got;
    char *cmd[3];

    assert_true(asprintf(&script, "%s/burst.py", fx->tmp) > 0);
    assert_true(asprintf(&outp, "%s/burst.out", fx->tmp) > 0);
    cmd[0] = "/usr/bin/python3";
    cmd[1] = script;
    cmd[2] = outp;
    wt_write_file(script,
                  "import json, os, sys\n"
                  "sys.path.insert(0, '" TIDE_SDK_PY_DIR "')\n"
                  "import tide_trainer\n"
                  "names = ('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',\n"
                  "         'TIDE_BURST', 'TIDE_BURST_INDEX', 'TIDE_RANK', 'TIDE_JOB_ID')\n"
                  "env = {k: os.environ.get(k) for k in names}\n"
                  "t = tide_trainer.connect()\n"
                  "assert t.active\n"
                  "t.load_phase(True)\n"
                  "ran, step = [], 0\n"
                  "while not t.should_stop(step):\n"
                  "    ran += list(t.tasks_join(step, 3))\n"
                  "    step += 1\n"
                  "json.dump({'env': env, 'burst': tide_trainer.is_burst(), 'ran': ran,\n"
                  "           'steps': step}, open(sys.argv[1], 'w'))\n");
    register_worker(fx, 5, 50);
    send_launch_burst(5, "jb", 1, 3, 2, cmd, 3, fx->tmp);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL);
    assert_int_equal(m->rank_started->rank, 3);
    assert_true(m->rank_started->pid > 0);
    assert_int_equal(m->rank_started->master_port, 0);
    drop(m);
    expect_burst_msg(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED, 0, 0);
    expect_burst_msg(fx, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST, 0, 1);
    assert_true(wt_run_until(&fx->loop, cond_high_load, fx, WAIT_MS));
    assert_int_equal(fx->high_load_rank, 3);
    /* the steal brings task 1, the only one: the next steal goes out ahead */
    send_give_detached(5, "jb", 1, 3, 0, 1, one, 1);
    expect_burst_msg(fx, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST, 0, 2);
    /* done with it, the process waits for that steal; the completion goes with a heartbeat */
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE, NULL);
    assert_int_equal(m->tasks_done->rank, 3);
    assert_int_equal(m->tasks_done->n_task_ids, 1);
    assert_int_equal(m->tasks_done->task_ids[0], 1);
    drop(m);
    send_give_detached(5, "jb", 1, 3, 0, 2, NULL, 0); /* nothing left of step 0 */
    expect_burst_msg(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED, 1, 0);
    expect_burst_msg(fx, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST, 1, 3);
    /* tide takes the worker back: an ordinary stop */
    {
        Tide__V1__SchedulerMessage sm = TIDE__V1__SCHEDULER_MESSAGE__INIT;
        Tide__V1__StopRank st = TIDE__V1__STOP_RANK__INIT;

        st.job_id = "jb";
        st.generation = 1;
        st.rank = 3;
        st.grace_ms = 30000;
        st.reason = "burst over";
        sm.epoch = 5;
        sm.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_STOP;
        sm.stop = &st;
        assert_true(fake_rpc_deliver(&sm));
    }
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->rank, 3);
    assert_int_equal(m->rank_exited->status->exit_code, 0); /* it stopped itself, no SIGTERM */
    drop(m);
    got = wt_read_file(outp);
    assert_non_null(got);
    assert_string_equal(got,
                        "{\"env\": {\"RANK\": null, \"LOCAL_RANK\": null, \"WORLD_SIZE\": null, "
                        "\"MASTER_ADDR\": null, \"MASTER_PORT\": null, \"TIDE_BURST\": \"1\", "
                        "\"TIDE_BURST_INDEX\": \"1\", \"TIDE_RANK\": \"3\", \"TIDE_JOB_ID\": "
                        "\"jb\"}, \"burst\": true, \"ran\": [1], \"steps\": 2}");
    free(got);
    free(script);
    free(outp);
}

static bool cond_not_welcomed(void *arg)
{
    return !tide_worker_core_welcomed(tide_worker_agent_core(((fixture_t *)arg)->agent));
}

static bool cond_reaped(void *arg)
{
    pid_t pid = *(pid_t *)arg;

    return kill(pid, 0) < 0 && errno == ESRCH;
}

/* A rank whose last task completions could not go out (no stream) has its exit held: the next hello
 * still shows it running, and after the Welcome its completions go out first, then its exit (else
 * the scheduler would take the tasks for orphans and run them again). */
static void test_exit_waits_for_completions(void **state)
{
    fixture_t *fx = *state;
    const tide_worker_core_t *core = tide_worker_agent_core(fx->agent);
    Tide__V1__WorkerMessage *m;
    char *script, *cmd, *go;
    pid_t pid;

    assert_true(asprintf(&script, "%s/hold.py", fx->tmp) > 0);
    assert_true(asprintf(&go, "%s/go", fx->tmp) > 0);
    assert_true(asprintf(&cmd, "/usr/bin/python3 %s %s", script, go) > 0);
    wt_write_file(script, "import os, sys, time\n"
                          "sys.path.insert(0, '" TIDE_SDK_PY_DIR "')\n"
                          "import tide_trainer\n"
                          "t = tide_trainer.connect()\n"
                          "assert t.active\n"
                          "deadline = time.monotonic() + 60\n"
                          "while not os.path.exists(sys.argv[1]):\n"
                          "    assert time.monotonic() < deadline\n"
                          "    time.sleep(0.01)\n"
                          "ran = list(t.tasks(0, [1], 1, kind='detached'))\n"
                          "assert ran == [1], ran\n");
    register_worker(fx, 5, 50);
    send_launch(5, "jh", 1, cmd, fx->tmp);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL);
    pid = m->rank_started->pid;
    drop(m);
    /* the scheduler goes away; then the trainer runs its task and ends */
    fake_rpc_refuse(true);
    assert_true(fake_rpc_end(TIDE_GRPC_UNAVAILABLE, "scheduler restarting"));
    assert_true(wt_run_until(&fx->loop, cond_not_welcomed, fx, WAIT_MS));
    wt_write_file(go, "");
    assert_true(wt_run_until(&fx->loop, cond_reaped, &pid, WAIT_MS));
    assert_int_equal(tide_worker_core_running(core), 1); /* held */
    assert_int_equal(tide_worker_core_unreported(core), 0);
    fake_rpc_refuse(false);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, NULL);
    assert_int_equal(m->hello->n_ranks, 1);
    assert_string_equal(m->hello->ranks[0]->job_id, "jh");
    assert_int_equal(m->hello->ranks[0]->state, TIDE__V1__RANK_STATE__RANK_STATE_RUNNING);
    drop(m);
    send_welcome(5, 50);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED, NULL);
    assert_int_equal(m->tasks_declared->n_task_ids, 1);
    drop(m);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE, NULL);
    assert_int_equal(m->tasks_done->n_task_ids, 1);
    assert_int_equal(m->tasks_done->task_ids[0], 1);
    drop(m);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_string_equal(m->rank_exited->status->job_id, "jh");
    assert_int_equal(m->rank_exited->status->exit_code, 0);
    drop(m);
    assert_int_equal(tide_worker_core_running(core), 0);
    free(script);
    free(cmd);
    free(go);
}

static void test_shutdown_force_kills(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerMessage *m;

    register_worker(fx, 1, 50);
    send_launch(1, "j5", 1, "trap '' TERM; echo ready; exec sleep 1000", NULL);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    tide_worker_agent_shutdown(fx->agent, "SIGTERM", false);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_GOODBYE, NULL));
    /* A second signal does not wait for the 10 s grace. */
    tide_worker_agent_shutdown(fx->agent, "SIGTERM", true);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->exit_code, 137);
    drop(m);
    assert_true(wt_run_until(&fx->loop, cond_done, fx, WAIT_MS));
    assert_int_equal(tide_worker_agent_exit_code(fx->agent), 0);
}

static void test_logs_backpressure_and_follow(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerMessage *m;
    char err[256], *log, *go;
    size_t len;

    register_worker(fx, 1, 30);
    /* 300 KiB of output. */
    send_launch(1, "j6", 1, "head -c 307200 /dev/zero | tr '\\000' x", NULL);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->exit_code, 0);
    drop(m);

    /* The stream is full: nothing is queued, heartbeats still go out. */
    fake_rpc_set_queued(1 << 20);
    send_log_request(1, 21, "j6", false, false);
    wait_heartbeats(fx, 3);
    pump_sent(fx);
    assert_int_equal(fx->qlen, 0);
    /* It drains: everything arrives, in chunks of at most 64 KiB, then eof. */
    fake_rpc_set_queued(0);
    log = collect_log(fx, 21, &len, err, sizeof(err));
    assert_int_equal(len, 307200);
    assert_int_equal(strspn(log, "x"), 307200);
    free(log);

    /* Follow: output written after the request arrives is sent, and eof only after the exit. */
    assert_true(asprintf(&go, "%s/go", fx->data) > 0);
    send_launch(1, "j7", 1, "echo one; while [ ! -e go ]; do sleep 0.02; done; echo two", NULL);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    send_log_request(1, 22, "j7", true, false);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA, NULL);
    assert_int_equal(m->log_data->request_id, 22);
    assert_false(m->log_data->eof);
    assert_int_equal(m->log_data->data.len, 4);
    assert_memory_equal(m->log_data->data.data, "one\n", 4);
    drop(m);
    wt_write_file(go, "");
    /* "two\n" then eof; RankExited may come in between. */
    {
        char got[64] = "";
        bool eof = false, exited = false;
        while (!eof || !exited) {
            Tide__V1__WorkerMessage *x;
            assert_true(wt_run_until(&fx->loop, cond_have_msg, fx, WAIT_MS));
            x = fx->q[0];
            memmove(fx->q, fx->q + 1, (fx->qlen - 1) * sizeof(fx->q[0]));
            memmove(fx->qserial, fx->qserial + 1, (fx->qlen - 1) * sizeof(fx->qserial[0]));
            fx->qlen--;
            if (x->msg_case == TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED) {
                assert_false(eof); /* eof never comes before the rank exited */
                exited = true;
            } else {
                assert_int_equal(x->msg_case, TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA);
                if (x->log_data->data.len)
                    strncat(got, (const char *)x->log_data->data.data,
                            x->log_data->data.len < 32 ? x->log_data->data.len : 32);
                eof = x->log_data->eof;
            }
            drop(x);
        }
        assert_string_equal(got, "two\n");
    }
    free(go);

    /* Cancel: a follow request on a running rank ends with one eof when cancelled. */
    send_launch(1, "j8", 1, "echo a; exec sleep 1000", NULL);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    send_log_request(1, 23, "j8", true, false);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA, NULL);
    assert_false(m->log_data->eof);
    drop(m);
    send_log_request(1, 23, "", false, true);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA, NULL);
    assert_int_equal(m->log_data->request_id, 23);
    assert_true(m->log_data->eof);
    drop(m);

    /* Follow before the launch (the request overtook the LaunchRank): the log is read once it
     * exists, instead of "no log". */
    send_log_request(1, 24, "j9", true, false);
    send_launch(1, "j9", 1, "echo late-start; while [ ! -e go9 ]; do sleep 0.02; done", NULL);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED, NULL));
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA, NULL);
    assert_int_equal(m->log_data->request_id, 24);
    assert_false(m->log_data->eof);
    assert_int_equal(m->log_data->data.len, 11);
    assert_memory_equal(m->log_data->data.data, "late-start\n", 11);
    drop(m);
    send_log_request(1, 24, "", false, true);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA, NULL);
    assert_true(m->log_data->eof);
    drop(m);
}

static void test_spawn_failures_reported(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerMessage *m;

    register_worker(fx, 1, 50);
    send_launch(1, "j9", 1, "no-such-command-xyz", NULL);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->exit_code, 127);
    assert_string_equal(m->rank_exited->status->error,
                        "spawn no-such-command-xyz: no such file or directory");
    drop(m);
    send_launch(1, "j9", 2, "echo never here", "/nonexistent-dir-xyz");
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->exit_code, 127);
    assert_string_equal(m->rank_exited->status->error,
                        "workdir /nonexistent-dir-xyz: no such file or directory");
    drop(m);
    send_launch(1, "../evil", 1, "echo never here", NULL);
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED, NULL);
    assert_int_equal(m->rank_exited->status->exit_code, 127);
    assert_non_null(strstr(m->rank_exited->status->error, "invalid LaunchRank: job_id"));
    drop(m);
    assert_int_equal(tide_worker_core_running(tide_worker_agent_core(fx->agent)), 0);
}

static void test_unauthenticated_is_fatal(void **state)
{
    fixture_t *fx = *state;

    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, NULL));
    assert_true(fake_rpc_end(TIDE_GRPC_UNAUTHENTICATED, "bad token"));
    assert_true(wt_run_until(&fx->loop, cond_done, fx, WAIT_MS));
    assert_int_equal(tide_worker_agent_exit_code(fx->agent), 1);
    assert_int_equal(fake_rpc_calls_started(), 1);
}

static void test_no_welcome_reconnects(void **state)
{
    fixture_t *fx;
    Tide__V1__WorkerMessage *m;
    int serial;

    setup_noagent(state);
    fx = *state;
    fx->welcome_timeout_ms = 100;
    agent_start(fx);
    drop(expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, &serial));
    assert_int_equal(serial, 1);
    /* No Welcome: the stream is given up and a new one says hello again. */
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, &serial);
    assert_int_equal(serial, 2);
    drop(m);
    send_welcome(0, 50);
    wait_heartbeats(fx, 1);
}

static void test_restart_kills_leftovers(void **state)
{
    fixture_t *fx;
    tide_worker_record_t rec;
    Tide__V1__WorkerMessage *m;
    char *path;
    uint64_t boot;
    pid_t p;
    int status;

    setup_noagent(state);
    fx = *state;
    /* What a crashed predecessor left: a running rank with its record, and the epoch it saw. */
    assert_int_equal(tide_worker_datadir_prepare(fx->data, NULL), 0);
    assert_int_equal(tide_worker_epoch_save(fx->data, 9, NULL), 0);
    /* its boot id was ahead of this machine's clock: the next start's is still above it (KB7) */
    assert_int_equal(tide_worker_boot_next(fx->data, 4000000000000LL, &boot, NULL), 0);
    assert_int_equal(boot, 4000000000000ULL);
    p = fork();
    if (p == 0) {
        setsid();
        execl("/bin/sleep", "sleep", "1000", (char *)NULL);
        _exit(127);
    }
    rec.pid = rec.pgid = p;
    assert_int_equal(tide_proc_stat(p, NULL, &rec.start_time, NULL), 0);
    assert_int_equal(tide_worker_record_write(fx->data, "old", 3, 0, &rec, NULL), 0);

    agent_start(fx);
    /* Killed before registering; nothing reported for it; the epoch survived. */
    assert_int_equal(waitpid(p, &status, 0), p);
    assert_true(WIFSIGNALED(status));
    m = expect(fx, TIDE__V1__WORKER_MESSAGE__MSG_HELLO, NULL);
    assert_int_equal(m->hello->max_epoch_seen, 9);
    assert_int_equal(m->hello->n_ranks, 0);
    assert_int_equal(m->hello->boot_id, 4000000000001ULL);
    assert_int_equal(m->hello->stream_seq, 1);
    drop(m);
    path = record_path(fx, "old", 3);
    assert_true(access(path, F_OK) < 0);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_register_heartbeat_launch_logs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotent_reconnect_remembers_exits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_stops_ranks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_force_kills, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tasks_steal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_waits_for_completions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_logs_backpressure_and_follow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_failures_reported, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unauthenticated_is_fatal, setup, teardown),
        cmocka_unit_test_teardown(test_no_welcome_reconnects, teardown),
        cmocka_unit_test_teardown(test_restart_kills_leftovers, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

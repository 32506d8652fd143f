/* Unit tests of the worker's decision core (worker/core.c) with fake ops: no sockets, no processes,
 * no clock. Epoch filtering, idempotent launch, exits remembered while disconnected and carried by
 * the hello, stream-end decisions and backoff, stop, shutdown, launch validation (burst ranks'
 * too). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"

/* --- fake ops: record every effect --- */

#define MAX_REC 64

typedef struct fake {
    Tide__V1__WorkerMessage *sent[MAX_REC];
    size_t n_sent;
    int send_fail; /* -errno to return from send, 0: succeed */
    int spawns;
    int spawn_fail; /* -errno to fail the next spawns with */
    uint64_t stop_ids[MAX_REC];
    uint32_t stop_grace[MAX_REC];
    size_t n_stops;
    uint64_t forgot[MAX_REC];
    size_t n_forgot;
    uint64_t saved_epoch;
    int epoch_saves;
    int log_requests;
    uint32_t welcomed_ms;
    int ends;
    int trainer_commands;
    uint64_t last_request;
    int flushes;
    int64_t last_flush_step;
    int tasks;      /* ReleaseTasks / GiveTasks handed to the op */
    int tasks_rc;   /* what the op returns */
    Tide__V1__SchedulerMessage__MsgCase last_tasks;
    char forgotten_jobs[8][64]; /* ForgetCheckpoints handed to the op, in order */
    size_t n_forgotten_jobs;
} fake_t;

static int f_send(void *ud, const Tide__V1__WorkerMessage *msg)
{
    fake_t *f = ud;
    size_t len = tide__v1__worker_message__get_packed_size(msg);
    uint8_t *buf;

    if (f->send_fail)
        return f->send_fail;
    buf = malloc(len + 1);
    tide__v1__worker_message__pack(msg, buf);
    assert_true(f->n_sent < MAX_REC);
    f->sent[f->n_sent++] = tide__v1__worker_message__unpack(NULL, len, buf);
    free(buf);
    return 0;
}

static int f_spawn(void *ud, uint64_t id, const Tide__V1__LaunchRank *l, tide_worker_spawned_t *out,
                   tide_error_t *err)
{
    fake_t *f = ud;

    f->spawns++;
    if (f->spawn_fail) {
        tide_errprintf(err, "spawn %s: no such file or directory", l->command[0]);
        return f->spawn_fail;
    }
    out->pid = 1000 + (int32_t)id;
    out->master_port = l->master_port ? l->master_port : 29500;
    return 0;
}

static void f_stop(void *ud, uint64_t id, uint32_t grace_ms)
{
    fake_t *f = ud;

    f->stop_ids[f->n_stops] = id;
    f->stop_grace[f->n_stops++] = grace_ms;
}

static void f_forget(void *ud, uint64_t id, const char *job_id, int32_t generation, int32_t rank)
{
    fake_t *f = ud;

    if (f->n_forgot < MAX_REC)
        f->forgot[f->n_forgot] = id;
    f->n_forgot++;
}

static void f_save_epoch(void *ud, uint64_t epoch)
{
    fake_t *f = ud;

    f->saved_epoch = epoch;
    f->epoch_saves++;
}

static void f_log_request(void *ud, const Tide__V1__LogRequest *req)
{
    ((fake_t *)ud)->log_requests++;
}

static void f_welcomed(void *ud, uint32_t interval_ms)
{
    ((fake_t *)ud)->welcomed_ms = interval_ms;
}

static void f_end_stream(void *ud, const char *why)
{
    ((fake_t *)ud)->ends++;
}

static void f_trainer_command(void *ud, const Tide__V1__TrainerCommand *cmd)
{
    fake_t *f = ud;

    f->trainer_commands++;
    if (cmd->cmd_case == TIDE__V1__TRAINER_COMMAND__CMD_CHECKPOINT_NOW)
        f->last_request = cmd->checkpoint_now->request_id;
}

static void f_flush(void *ud, const Tide__V1__FlushCheckpoint *req)
{
    fake_t *f = ud;

    f->flushes++;
    f->last_flush_step = req->step;
}

static int f_tasks(void *ud, const Tide__V1__SchedulerMessage *msg)
{
    fake_t *f = ud;

    f->tasks++;
    f->last_tasks = msg->msg_case;
    return f->tasks_rc;
}

static void f_forget_checkpoints(void *ud, const char *job_id)
{
    fake_t *f = ud;

    assert_true(f->n_forgotten_jobs < 8);
    snprintf(f->forgotten_jobs[f->n_forgotten_jobs++], sizeof(f->forgotten_jobs[0]), "%s", job_id);
}

static const tide_worker_core_ops_t fake_ops = {
    f_send,    f_spawn,      f_stop,        f_forget,          f_save_epoch,
    f_log_request, f_welcomed, f_end_stream, f_trainer_command, f_flush,
    f_tasks,   f_forget_checkpoints,
};

static void fake_clear_sent(fake_t *f)
{
    for (size_t i = 0; i < f->n_sent; i++)
        tide__v1__worker_message__free_unpacked(f->sent[i], NULL);
    f->n_sent = 0;
}

typedef struct fixture {
    fake_t f;
    tide_worker_core_t *core;
} fixture_t;

static const tide_worker_label_t labels[] = {{"rack", "r1"}, {"pool", "gold"}};

static fixture_t *make(uint64_t max_epoch)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    tide_worker_core_config_t cfg = {
        .worker_id = "n1/gpu3",
        .node = "n1",
        .gpu_index = 3,
        .device = "sim:h100",
        .peak_flops = 989e12,
        .memory_bytes = 80ULL << 30,
        .labels = labels,
        .n_labels = 2,
        .address = "10.0.0.7",
        .version = "9.9.9",
        .max_epoch_seen = max_epoch,
        .stop_grace_ms = 10000,
        .seed = 42,
        .boot_id = 1700000000123ULL,
    };

    tide_worker_core_new(&cfg, &fake_ops, &fx->f, &fx->core);
    return fx;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;

    fake_clear_sent(&fx->f);
    tide_worker_core_free(fx->core);
    free(fx);
    return 0;
}

static int setup(void **state)
{
    *state = make(5);
    return 0;
}

/* --- message builders --- */

static int deliver_welcome(fixture_t *fx, uint64_t epoch, uint32_t hb)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__Welcome w = TIDE__V1__WELCOME__INIT;

    w.protocol_version = 1;
    w.heartbeat_interval_ms = hb;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME;
    m.welcome = &w;
    return tide_worker_core_handle(fx->core, &m, NULL);
}

static char *default_cmd[] = {"train.py", "--lr", "0.1"};

typedef struct launch_args {
    const char *job;
    int32_t gen, rank, world, master_port;
    char **cmd;
    size_t n_cmd;
    const char *workdir;
    const char *env_key;
    bool burst;
} launch_args_t;

static int deliver_launch(fixture_t *fx, uint64_t epoch, launch_args_t a, tide_error_t *err)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__LaunchRank l = TIDE__V1__LAUNCH_RANK__INIT;
    Tide__V1__LaunchRank__EnvEntry e = TIDE__V1__LAUNCH_RANK__ENV_ENTRY__INIT;
    Tide__V1__LaunchRank__EnvEntry *ep = &e;

    l.job_id = (char *)a.job;
    l.generation = a.gen;
    l.rank = a.rank;
    l.world_size = a.world ? a.world : 1;
    l.local_world_size = 1;
    l.master_port = a.master_port;
    l.burst = a.burst;
    l.command = a.cmd ? a.cmd : default_cmd;
    l.n_command = a.cmd ? a.n_cmd : 3;
    if (a.workdir)
        l.workdir = (char *)a.workdir;
    if (a.env_key) {
        e.key = (char *)a.env_key;
        e.value = "v";
        l.env = &ep;
        l.n_env = 1;
    }
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_LAUNCH;
    m.launch = &l;
    return tide_worker_core_handle(fx->core, &m, err);
}

static int deliver_stop(fixture_t *fx, uint64_t epoch, const char *job, int32_t gen, int32_t rank,
                        uint32_t grace)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__StopRank s = TIDE__V1__STOP_RANK__INIT;

    s.job_id = (char *)job;
    s.generation = gen;
    s.rank = rank;
    s.grace_ms = grace;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_STOP;
    m.stop = &s;
    return tide_worker_core_handle(fx->core, &m, NULL);
}

static Tide__V1__WorkerMessage *sent(fixture_t *fx, size_t i, Tide__V1__WorkerMessage__MsgCase mc)
{
    assert_true(i < fx->f.n_sent);
    assert_int_equal(fx->f.sent[i]->msg_case, mc);
    return fx->f.sent[i];
}

/* Opens a stream and welcomes it at epoch 5. */
static void connect_welcome(fixture_t *fx)
{
    tide_worker_core_stream_opened(fx->core);
    assert_int_equal(deliver_welcome(fx, 5, 500), 0);
    fake_clear_sent(&fx->f);
}

static int deliver_forget_ckpt(fixture_t *fx, uint64_t epoch, const char *job, tide_error_t *err)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__ForgetCheckpoints fc = TIDE__V1__FORGET_CHECKPOINTS__INIT;

    fc.job_id = (char *)job;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_FORGET_CHECKPOINTS;
    m.forget_checkpoints = &fc;
    return tide_worker_core_handle(fx->core, &m, err);
}

/* --- tests --- */

/* ForgetCheckpoints (an ended job's hot copies): handed to the op at once when no rank of the job runs
 * here; while one runs (a cancelled job's rank still stopping) only after the last one exited, once; an
 * invalid job id or a stale epoch never reaches the op. */
static void test_forget_checkpoints(void **state)
{
    fixture_t *fx = *state;
    tide_error_t err;

    connect_welcome(fx);
    assert_int_equal(deliver_forget_ckpt(fx, 5, "j-done", &err), 0);
    assert_int_equal(fx->f.n_forgotten_jobs, 1);
    assert_string_equal(fx->f.forgotten_jobs[0], "j-done");

    assert_int_equal(deliver_forget_ckpt(fx, 5, "../etc", &err), -EINVAL);
    assert_non_null(strstr(err.text, "not a valid job id"));
    assert_int_equal(deliver_forget_ckpt(fx, 5, "", &err), -EINVAL);
    assert_int_equal(deliver_forget_ckpt(fx, 4, "j-old", &err), -ESTALE);
    assert_int_equal(fx->f.n_forgotten_jobs, 1);

    /* Two ranks of j-run here (ids 1 and 2), one of j-other (3). */
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j-run", .gen = 1, .rank = 0, .world = 2}, NULL), 0);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j-run", .gen = 1, .rank = 1, .world = 2, .master_port = 29400}, NULL), 0);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j-other", .gen = 1, .rank = 0}, NULL), 0);
    assert_true(tide_worker_core_job_running(fx->core, "j-run"));
    assert_false(tide_worker_core_job_running(fx->core, "j-done"));
    {
        const char *ids[4];
        assert_int_equal(tide_worker_core_running_jobs(fx->core, ids, 4), 3);
        assert_int_equal(tide_worker_core_running_jobs(fx->core, ids, 1), 3); /* the count, not max */
    }
    assert_int_equal(deliver_forget_ckpt(fx, 5, "j-run", &err), 0);
    assert_non_null(strstr(err.text, "once its ranks here exited"));
    assert_int_equal(deliver_forget_ckpt(fx, 5, "j-run", &err), 0); /* repeated: still one */
    assert_int_equal(fx->f.n_forgotten_jobs, 1);
    tide_worker_core_rank_exited(fx->core, 1, 0, 15);
    assert_int_equal(fx->f.n_forgotten_jobs, 1); /* rank 1 still runs */
    tide_worker_core_rank_exited(fx->core, 3, 0, 0); /* another job's exit changes nothing */
    assert_int_equal(fx->f.n_forgotten_jobs, 1);
    tide_worker_core_rank_exited(fx->core, 2, 0, 15);
    assert_int_equal(fx->f.n_forgotten_jobs, 2);
    assert_string_equal(fx->f.forgotten_jobs[1], "j-run");
    tide_worker_core_rank_exited(fx->core, 2, 0, 15); /* a repeat fires nothing */
    assert_int_equal(fx->f.n_forgotten_jobs, 2);
}

static void test_hello_fields(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerHello *h;

    tide_worker_core_stream_opened(fx->core);
    assert_int_equal(fx->f.n_sent, 1);
    h = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HELLO)->hello;
    assert_int_equal(h->protocol_version, TIDE__V1__WORKER_PROTOCOL__WORKER_PROTOCOL_CURRENT);
    assert_string_equal(h->worker_id, "n1/gpu3");
    assert_string_equal(h->node, "n1");
    assert_int_equal(h->gpu_index, 3);
    assert_string_equal(h->device, "sim:h100");
    assert_true(h->peak_flops == 989e12);
    assert_int_equal(h->memory_bytes, 80ULL << 30);
    assert_string_equal(h->address, "10.0.0.7");
    assert_string_equal(h->version, "9.9.9");
    assert_int_equal(h->max_epoch_seen, 5);
    assert_int_equal(h->n_labels, 2);
    assert_string_equal(h->labels[0]->key, "rack");
    assert_string_equal(h->labels[0]->value, "r1");
    assert_string_equal(h->labels[1]->key, "pool");
    assert_int_equal(h->n_ranks, 0);
    assert_int_equal(h->boot_id, 1700000000123ULL);
    assert_int_equal(h->stream_seq, 1);
    assert_false(tide_worker_core_welcomed(fx->core));
    assert_int_equal(deliver_welcome(fx, 5, 0), 0);
    assert_true(tide_worker_core_welcomed(fx->core));
    assert_int_equal(fx->f.welcomed_ms, 500); /* 0 means the default */
}

static void test_epoch_filtering(void **state)
{
    fixture_t *fx = *state;
    tide_error_t err;

    tide_worker_core_stream_opened(fx->core);
    /* A deposed leader's Welcome is ignored and the stream is given up. */
    assert_int_equal(deliver_welcome(fx, 4, 500), -ESTALE);
    assert_false(tide_worker_core_welcomed(fx->core));
    assert_int_equal(fx->f.ends, 1);
    assert_int_equal(deliver_welcome(fx, 5, 500), 0);
    assert_true(tide_worker_core_welcomed(fx->core));
    assert_int_equal(fx->f.epoch_saves, 0); /* not higher than the loaded one */

    assert_int_equal(deliver_launch(fx, 4, (launch_args_t){.job = "j1", .gen = 1}, &err), -ESTALE);
    assert_non_null(strstr(err.text, "epoch 4"));
    assert_int_equal(fx->f.spawns, 0);
    assert_int_equal(deliver_stop(fx, 3, "j1", 1, 0, 0), -ESTALE);

    /* A new leader raises the bar, which is persisted; its predecessor is then stale. */
    assert_int_equal(deliver_launch(fx, 7, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    assert_int_equal(fx->f.spawns, 1);
    assert_int_equal(fx->f.saved_epoch, 7);
    assert_int_equal(fx->f.epoch_saves, 1);
    assert_int_equal(tide_worker_core_max_epoch(fx->core), 7);
    assert_int_equal(deliver_stop(fx, 5, "j1", 1, 0, 0), -ESTALE);
    assert_int_equal(fx->f.n_stops, 0);
    assert_int_equal(deliver_stop(fx, 7, "j1", 1, 0, 0), 0);
    assert_int_equal(fx->f.n_stops, 1);
    assert_int_equal(fx->f.epoch_saves, 1);

    /* The next hello carries the highest epoch seen. */
    tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &(int64_t){0});
    fake_clear_sent(&fx->f);
    tide_worker_core_stream_opened(fx->core);
    assert_int_equal(sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HELLO)->hello->max_epoch_seen, 7);
    /* ... and the stream's number, so a scheduler can tell it from the stream given up (KB7) */
    assert_int_equal(sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HELLO)->hello->stream_seq, 2);
}

static void test_idempotent_launch(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__RankStarted *a, *b;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 2}, NULL), 0);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 2}, NULL), 0);
    assert_int_equal(fx->f.spawns, 1);
    assert_int_equal(tide_worker_core_running(fx->core), 1);
    assert_int_equal(fx->f.n_sent, 2);
    a = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED)->rank_started;
    b = sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED)->rank_started;
    assert_string_equal(a->job_id, "j1");
    assert_int_equal(a->generation, 2);
    assert_int_equal(a->pid, b->pid);
    assert_int_equal(a->master_port, 29500);
    assert_int_equal(b->master_port, 29500);
    assert_true(tide_worker_core_rank_running(fx->core, "j1", 2, 0));
    /* Another generation of the same job is another rank. */
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 3}, NULL), 0);
    assert_int_equal(fx->f.spawns, 2);
}

static void test_exit_reported_when_welcomed(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__RankStatus *st;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    fake_clear_sent(&fx->f);
    tide_worker_core_rank_exited(fx->core, 1, 3, 0);
    st = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED)->rank_exited->status;
    assert_string_equal(st->job_id, "j1");
    assert_int_equal(st->state, TIDE__V1__RANK_STATE__RANK_STATE_EXITED);
    assert_int_equal(st->exit_code, 3);
    assert_int_equal(st->signal, 0);
    assert_int_equal(st->pid, 1001);
    assert_int_equal(fx->f.n_forgot, 1);
    assert_int_equal(fx->f.forgot[0], 1);
    assert_int_equal(tide_worker_core_unreported(fx->core), 0);
    /* A second exit for the same id (or an unknown one) is ignored. */
    tide_worker_core_rank_exited(fx->core, 1, 0, 0);
    tide_worker_core_rank_exited(fx->core, 99, 0, 0);
    assert_int_equal(fx->f.n_sent, 1);

    /* The RankExited may have been lost with the stream: the next hello repeats the exit. */
    tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &(int64_t){0});
    fake_clear_sent(&fx->f);
    tide_worker_core_stream_opened(fx->core);
    {
        Tide__V1__WorkerHello *h = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HELLO)->hello;
        assert_int_equal(h->n_ranks, 1);
        assert_string_equal(h->ranks[0]->job_id, "j1");
        assert_int_equal(h->ranks[0]->state, TIDE__V1__RANK_STATE__RANK_STATE_EXITED);
        assert_int_equal(h->ranks[0]->exit_code, 3);
    }
    assert_int_equal(fx->f.n_forgot, 1); /* its record was removed once, at the first report */
}

static void test_reported_exits_are_bounded(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerHello *h;

    connect_welcome(fx);
    for (int g = 1; g <= 100; g++) {
        assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = g}, NULL), 0);
        tide_worker_core_rank_exited(fx->core, (uint64_t)g, 0, 0);
        fake_clear_sent(&fx->f);
    }
    tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &(int64_t){0});
    fake_clear_sent(&fx->f);
    tide_worker_core_stream_opened(fx->core);
    h = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HELLO)->hello;
    assert_int_equal(h->n_ranks, 64);
    assert_int_equal(h->ranks[0]->generation, 37); /* the newest 64 */
    assert_int_equal(h->ranks[63]->generation, 100);
}

static void test_exits_remembered_while_disconnected(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__WorkerHello *h;
    int64_t delay;
    size_t i;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j2", .gen = 4}, NULL), 0);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j3", .gen = 1}, NULL), 0);
    assert_int_equal(tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, "lost", &delay),
                     TIDE_WORKER_RECONNECT);
    fake_clear_sent(&fx->f);

    /* j1 dies of SIGKILL while nobody listens: remembered, nothing sent, record kept. */
    tide_worker_core_rank_exited(fx->core, 1, 0, 9);
    assert_int_equal(fx->f.n_sent, 0);
    assert_int_equal(fx->f.n_forgot, 0);
    assert_int_equal(tide_worker_core_unreported(fx->core), 1);
    assert_int_equal(tide_worker_core_heartbeat(fx->core, NULL, NULL, 0), -ENOTCONN);

    /* The hello lists the exit and the ranks still running. */
    tide_worker_core_stream_opened(fx->core);
    h = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HELLO)->hello;
    assert_int_equal(h->n_ranks, 3);
    for (i = 0; i < h->n_ranks; i++) {
        Tide__V1__RankStatus *st = h->ranks[i];
        if (strcmp(st->job_id, "j1") == 0) {
            assert_int_equal(st->state, TIDE__V1__RANK_STATE__RANK_STATE_EXITED);
            assert_int_equal(st->exit_code, 137);
            assert_int_equal(st->signal, 9);
            assert_int_equal(st->pid, 1001);
        } else {
            assert_int_equal(st->state, TIDE__V1__RANK_STATE__RANK_STATE_RUNNING);
            assert_true(st->pid > 1000);
            assert_int_equal(st->master_port, 29500);
        }
    }
    assert_int_equal(h->ranks[1]->generation, 4);

    /* j2 exits after the hello went out but before Welcome: it was not in the hello. */
    tide_worker_core_rank_exited(fx->core, 2, 1, 0);
    assert_int_equal(fx->f.n_sent, 1);
    fake_clear_sent(&fx->f);

    /* Welcome: j1 counts as reported (it was in the hello), j2 is sent now. */
    assert_int_equal(deliver_welcome(fx, 5, 500), 0);
    assert_int_equal(fx->f.n_sent, 1);
    assert_string_equal(
        sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED)->rank_exited->status->job_id, "j2");
    assert_int_equal(fx->f.n_forgot, 2);
    assert_int_equal(tide_worker_core_unreported(fx->core), 0);
    assert_int_equal(tide_worker_core_running(fx->core), 1);
}

static void test_hello_not_welcomed_keeps_exits(void **state)
{
    fixture_t *fx = *state;
    int64_t delay;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &delay);
    tide_worker_core_rank_exited(fx->core, 1, 2, 0);
    /* A hello that is never welcomed does not count: the next one carries the exit again. */
    tide_worker_core_stream_opened(fx->core);
    tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &delay);
    fake_clear_sent(&fx->f);
    tide_worker_core_stream_opened(fx->core);
    assert_int_equal(sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HELLO)->hello->n_ranks, 1);
    assert_int_equal(fx->f.n_forgot, 0);
    assert_int_equal(deliver_welcome(fx, 5, 500), 0);
    assert_int_equal(fx->f.n_forgot, 1);
    assert_int_equal(fx->f.n_sent, 1); /* only the hello */
}

static void test_send_failure_keeps_exit(void **state)
{
    fixture_t *fx = *state;
    int64_t delay;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    fx->f.send_fail = -EPIPE;
    tide_worker_core_rank_exited(fx->core, 1, 0, 15);
    assert_int_equal(tide_worker_core_unreported(fx->core), 1);
    assert_int_equal(fx->f.n_forgot, 0);
    fx->f.send_fail = 0;
    tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &delay);
    fake_clear_sent(&fx->f);
    tide_worker_core_stream_opened(fx->core);
    assert_int_equal(sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HELLO)->hello->ranks[0]->exit_code,
                     143);
}

static void test_stream_end_decisions(void **state)
{
    fixture_t *fx = *state;
    int64_t base = 100, delay;

    assert_int_equal(
        tide_worker_core_stream_ended(fx->core, TIDE_GRPC_FAILED_PRECONDITION, "protocol", &delay),
        TIDE_WORKER_FATAL);
    assert_int_equal(
        tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAUTHENTICATED, "token", &delay),
        TIDE_WORKER_FATAL);
    /* Backoff: 100 ms doubling to 5 s, each delay jittered into [base/2, base]. */
    for (int i = 0; i < 10; i++) {
        assert_int_equal(
            tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &delay),
            TIDE_WORKER_RECONNECT);
        assert_true(delay >= base / 2);
        assert_true(delay <= base);
        base = base * 2 > 5000 ? 5000 : base * 2;
    }
    assert_int_equal(base, 5000);
    /* Any other status reconnects too, and Welcome resets the backoff. */
    tide_worker_core_stream_opened(fx->core);
    assert_int_equal(deliver_welcome(fx, 5, 500), 0);
    assert_int_equal(tide_worker_core_stream_ended(fx->core, TIDE_GRPC_INTERNAL, NULL, &delay),
                     TIDE_WORKER_RECONNECT);
    assert_true(delay >= 50 && delay <= 100);
    assert_int_equal(tide_worker_core_stream_ended(fx->core, TIDE_GRPC_OK, NULL, &delay),
                     TIDE_WORKER_RECONNECT);
    assert_true(delay >= 100 && delay <= 200);
}

static void test_jitter_varies(void **state)
{
    fixture_t *fx = *state;
    int64_t first, delay;
    bool differs = false;

    /* With the backoff pinned at 5 s, the delays still differ (they are not all base/2 or base). */
    for (int i = 0; i < 8; i++)
        tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &first);
    for (int i = 0; i < 8; i++) {
        tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &delay);
        differs |= delay != first;
    }
    assert_true(differs);
}

static void test_stop(void **state)
{
    fixture_t *fx = *state;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    assert_int_equal(deliver_stop(fx, 5, "j1", 1, 0, 0), 0);
    assert_int_equal(fx->f.n_stops, 1);
    assert_int_equal(fx->f.stop_ids[0], 1);
    assert_int_equal(fx->f.stop_grace[0], 10000); /* 0: the worker's --stop-grace-ms */
    assert_int_equal(deliver_stop(fx, 5, "j1", 1, 0, 250), 0);
    assert_int_equal(fx->f.stop_grace[1], 250);
    assert_int_equal(deliver_stop(fx, 5, "j1", 2, 0, 0), -ENOENT); /* other generation */
    assert_int_equal(deliver_stop(fx, 5, "zz", 1, 0, 0), -ENOENT);
    assert_int_equal(fx->f.n_stops, 2);
    /* After the exit the rank is gone: stopping it again is a no-op. */
    tide_worker_core_rank_exited(fx->core, 1, 0, 15);
    assert_int_equal(deliver_stop(fx, 5, "j1", 1, 0, 0), -ENOENT);
}

static int deliver_checkpoint_now(fixture_t *fx, uint64_t epoch, const char *job, int32_t gen,
                                  int32_t rank, uint64_t request)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__TrainerCommand tc = TIDE__V1__TRAINER_COMMAND__INIT;
    Tide__V1__CheckpointNow cn = TIDE__V1__CHECKPOINT_NOW__INIT;
    tide_error_t err;

    cn.request_id = request;
    cn.deadline_unix_ms = 1;
    tc.job_id = (char *)job;
    tc.generation = gen;
    tc.rank = rank;
    tc.cmd_case = TIDE__V1__TRAINER_COMMAND__CMD_CHECKPOINT_NOW;
    tc.checkpoint_now = &cn;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_TRAINER_COMMAND;
    m.trainer_command = &tc;
    return tide_worker_core_handle(fx->core, &m, &err);
}

/* TrainerCommands reach the shell only for a rank that runs here, and only from the current
 * leader. */
static void test_trainer_command(void **state)
{
    fixture_t *fx = *state;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    assert_int_equal(deliver_checkpoint_now(fx, 5, "j1", 1, 0, 77), 0);
    assert_int_equal(fx->f.trainer_commands, 1);
    assert_int_equal(fx->f.last_request, 77);
    assert_int_equal(deliver_checkpoint_now(fx, 5, "j1", 2, 0, 78), -ENOENT);
    assert_int_equal(deliver_checkpoint_now(fx, 5, "j2", 1, 0, 78), -ENOENT);
    assert_int_equal(deliver_checkpoint_now(fx, 4, "j1", 1, 0, 78), -ESTALE);
    assert_int_equal(fx->f.trainer_commands, 1);
}

static int deliver_flush(fixture_t *fx, uint64_t epoch, int64_t step)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__FlushCheckpoint fc = TIDE__V1__FLUSH_CHECKPOINT__INIT;
    tide_error_t err;

    fc.job_id = "j1";
    fc.generation = 1;
    fc.rank = 0;
    fc.step = step;
    fc.durable_dir = "/durable";
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_FLUSH;
    m.flush = &fc;
    return tide_worker_core_handle(fx->core, &m, &err);
}

/* FlushCheckpoint reaches the shell's copier only from the current leader; a worker without a
 * copier answers FlushDone{ok=false} at once. */
static void test_flush(void **state)
{
    fixture_t *fx = *state;
    tide_worker_core_ops_t ops = fake_ops;
    const Tide__V1__FlushDone *d;

    connect_welcome(fx);
    assert_int_equal(deliver_flush(fx, 5, 40), 0);
    assert_int_equal(fx->f.flushes, 1);
    assert_int_equal(fx->f.last_flush_step, 40);
    assert_int_equal(deliver_flush(fx, 4, 41), -ESTALE);
    assert_int_equal(fx->f.flushes, 1);
    assert_int_equal(deliver_flush(fx, 6, 42), 0);
    assert_int_equal(fx->f.last_flush_step, 42);

    /* No copier. */
    fake_clear_sent(&fx->f);
    tide_worker_core_free(fx->core);
    ops.flush = NULL;
    {
        tide_worker_core_config_t cfg = {.worker_id = "n1/gpu0", .max_epoch_seen = 5};
        tide_worker_core_new(&cfg, &ops, &fx->f, &fx->core);
    }
    connect_welcome(fx);
    fake_clear_sent(&fx->f);
    assert_int_equal(deliver_flush(fx, 5, 43), -ENOTSUP);
    assert_int_equal(fx->f.flushes, 2);
    assert_int_equal(fx->f.n_sent, 1);
    assert_int_equal(fx->f.sent[0]->msg_case, TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE);
    d = fx->f.sent[0]->flush_done;
    assert_false(d->ok);
    assert_string_equal(d->job_id, "j1");
    assert_int_equal(d->step, 43);
    assert_non_null(strstr(d->error, "does not copy checkpoints"));
}

static int deliver_release(fixture_t *fx, uint64_t epoch, const char *job, int32_t gen,
                           tide_error_t *err)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__ReleaseTasks r = TIDE__V1__RELEASE_TASKS__INIT;

    r.job_id = (char *)job;
    r.generation = gen;
    r.rank = 0;
    r.kind = TIDE__V1__TASK_KIND__TASK_KIND_DETACHED;
    r.step = 17;
    r.release_id = 900;
    r.max_tasks = 4;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS;
    m.release_tasks = &r;
    return tide_worker_core_handle(fx->core, &m, err);
}

static int deliver_give(fixture_t *fx, uint64_t epoch, const char *job, int32_t gen)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__GiveTasks g = TIDE__V1__GIVE_TASKS__INIT;
    uint64_t ids[] = {3, 4};

    g.job_id = (char *)job;
    g.generation = gen;
    g.rank = 0;
    g.step = 17;
    g.steal_id = 2;
    g.task_ids = ids;
    g.n_task_ids = 2;
    m.epoch = epoch;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS;
    m.give_tasks = &g;
    return tide_worker_core_handle(fx->core, &m, NULL);
}

/* The empty TasksReleased the core answers with itself. */
static void assert_released_none(fixture_t *fx, size_t i, const char *job, int32_t gen)
{
    const Tide__V1__TasksReleased *t =
        sent(fx, i, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;

    assert_string_equal(t->job_id, job);
    assert_int_equal(t->generation, gen);
    assert_int_equal(t->rank, 0);
    assert_int_equal(t->kind, TIDE__V1__TASK_KIND__TASK_KIND_DETACHED);
    assert_int_equal(t->step, 17);
    assert_int_equal(t->release_id, 900);
    assert_int_equal(t->n_task_ids, 0);
}

/* ReleaseTasks / GiveTasks (docs/work-stealing.md) pass the epoch check and go to the tasks op for
 * a rank that runs here; otherwise (or without an op, or when the op does not know the rank) a
 * release is answered with no tasks, so the scheduler moves on, and a give is dropped. */
static void test_tasks_routing(void **state)
{
    fixture_t *fx = *state;
    tide_worker_core_ops_t ops = fake_ops;
    tide_error_t err;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    fake_clear_sent(&fx->f);
    assert_int_equal(deliver_release(fx, 5, "j1", 1, &err), 0);
    assert_int_equal(deliver_give(fx, 6, "j1", 1), 0);
    assert_int_equal(fx->f.tasks, 2);
    assert_int_equal(fx->f.last_tasks, TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS);
    assert_int_equal(fx->f.n_sent, 0); /* the op answers, not the core */
    /* a deposed leader's */
    assert_int_equal(deliver_release(fx, 5, "j1", 1, &err), -ESTALE);
    assert_int_equal(deliver_give(fx, 5, "j1", 1), -ESTALE);
    assert_int_equal(fx->f.tasks, 2);
    assert_int_equal(fx->f.n_sent, 0);
    /* a rank that does not run here */
    assert_int_equal(deliver_release(fx, 6, "j1", 2, &err), -ENOENT);
    assert_non_null(strstr(err.text, "does not run here"));
    assert_int_equal(fx->f.n_sent, 1);
    assert_released_none(fx, 0, "j1", 2);
    assert_int_equal(deliver_give(fx, 6, "j2", 1), -ENOENT);
    assert_int_equal(fx->f.n_sent, 1);
    assert_int_equal(fx->f.tasks, 2);
    /* the op does not know the rank */
    fx->f.tasks_rc = -ENOENT;
    assert_int_equal(deliver_release(fx, 6, "j1", 1, &err), -ENOENT);
    assert_int_equal(fx->f.tasks, 3);
    assert_int_equal(fx->f.n_sent, 2);
    assert_released_none(fx, 1, "j1", 1);
    assert_int_equal(deliver_give(fx, 6, "j1", 1), -ENOENT);
    assert_int_equal(fx->f.n_sent, 2);
    /* a rank that exited */
    fx->f.tasks_rc = 0;
    tide_worker_core_rank_exited(fx->core, 1, 0, 0);
    fake_clear_sent(&fx->f);
    assert_int_equal(deliver_release(fx, 6, "j1", 1, &err), -ENOENT);
    assert_released_none(fx, 0, "j1", 1);
    assert_int_equal(fx->f.tasks, 4);

    /* No tasks op. */
    fake_clear_sent(&fx->f);
    tide_worker_core_free(fx->core);
    ops.tasks = NULL;
    {
        tide_worker_core_config_t cfg = {.worker_id = "n1/gpu0", .max_epoch_seen = 5};
        tide_worker_core_new(&cfg, &ops, &fx->f, &fx->core);
    }
    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    fake_clear_sent(&fx->f);
    assert_int_equal(deliver_release(fx, 5, "j1", 1, &err), -ENOTSUP);
    assert_int_equal(fx->f.n_sent, 1);
    assert_released_none(fx, 0, "j1", 1);
    assert_int_equal(deliver_give(fx, 5, "j1", 1), -ENOTSUP);
    assert_int_equal(fx->f.n_sent, 1);
    assert_int_equal(fx->f.tasks, 4);
    /* not welcomed: the empty answer cannot go out, and nothing breaks */
    tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &(int64_t){0});
    assert_int_equal(deliver_release(fx, 5, "j1", 1, &err), -ENOTSUP);
    assert_int_equal(fx->f.n_sent, 1);
}

static void test_shutdown(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__RankStatus *st;
    int64_t delay;

    connect_welcome(fx);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j2", .gen = 1}, NULL), 0);
    fake_clear_sent(&fx->f);
    tide_worker_core_shutdown(fx->core, "SIGTERM", false);
    assert_true(tide_worker_core_shutting_down(fx->core));
    assert_string_equal(sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_GOODBYE)->goodbye->reason,
                        "SIGTERM");
    assert_int_equal(fx->f.n_stops, 2);
    assert_int_equal(fx->f.stop_grace[0], 10000);
    assert_int_equal(fx->f.stop_grace[1], 10000);

    /* No new ranks while going down. */
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j3", .gen = 1}, NULL),
                     -ESHUTDOWN);
    assert_int_equal(fx->f.spawns, 2);
    st = sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED)->rank_exited->status;
    assert_string_equal(st->job_id, "j3");
    assert_int_equal(st->exit_code, 127);
    assert_non_null(strstr(st->error, "shutting down"));

    /* A second signal forces: SIGKILL (grace 0) for the ranks still there; one Goodbye only. */
    tide_worker_core_rank_exited(fx->core, 1, 0, 15);
    tide_worker_core_shutdown(fx->core, "SIGTERM", true);
    assert_int_equal(fx->f.n_stops, 3);
    assert_int_equal(fx->f.stop_ids[2], 2);
    assert_int_equal(fx->f.stop_grace[2], 0);
    assert_int_equal(fx->f.n_sent, 3); /* Goodbye, j3's refusal, j1's exit */

    /* Going down, a lost stream is not reconnected. */
    assert_int_equal(tide_worker_core_stream_ended(fx->core, TIDE_GRPC_UNAVAILABLE, NULL, &delay),
                     TIDE_WORKER_STAY_DOWN);
    tide_worker_core_rank_exited(fx->core, 2, 0, 9);
    assert_int_equal(tide_worker_core_running(fx->core), 0);
}

static void test_spawn_failure(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__RankStatus *st;

    connect_welcome(fx);
    fx->f.spawn_fail = -ENOENT;
    assert_int_equal(deliver_launch(fx, 5, (launch_args_t){.job = "j1", .gen = 1}, NULL), 0);
    st = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED)->rank_exited->status;
    assert_int_equal(st->exit_code, 127);
    assert_string_equal(st->error, "spawn train.py: no such file or directory");
    assert_int_equal(st->state, TIDE__V1__RANK_STATE__RANK_STATE_EXITED);
    assert_int_equal(fx->f.n_forgot, 0); /* it never had a record */
    assert_int_equal(tide_worker_core_unreported(fx->core), 0);
    assert_int_equal(tide_worker_core_running(fx->core), 0);
}

static void test_invalid_launch(void **state)
{
    fixture_t *fx = *state;
    char *empty[] = {""};
    struct {
        launch_args_t a;
        const char *why;
    } bad[] = {
        {{.job = "../etc", .gen = 1}, "job_id"},
        {{.job = "", .gen = 1}, "job_id"},
        {{.job = "j/1", .gen = 1}, "job_id"},
        {{.job = "j1", .gen = -1}, "generation"},
        {{.job = "j1", .gen = 1, .rank = 2, .world = 2, .master_port = 1234}, "world_size"},
        {{.job = "j1", .gen = 1, .rank = 1, .world = 2}, "master_port"},
        {{.job = "j1", .gen = 1, .master_port = 70000}, "master_port"},
        {{.job = "j1", .gen = 1, .cmd = empty, .n_cmd = 1}, "empty command"},
        {{.job = "j1", .gen = 1, .cmd = empty, .n_cmd = 0}, "empty command"},
        {{.job = "j1", .gen = 1, .workdir = "rel/dir"}, "workdir"},
        {{.job = "j1", .gen = 1, .env_key = "A=B"}, "env name"},
        {{.job = "j1", .gen = 1, .env_key = ""}, "env name"},
        /* a burst rank takes a slot after the generation's ranks */
        {{.job = "j1", .gen = 1, .rank = 1, .world = 2, .burst = true}, "world_size"},
        {{.job = "j1", .gen = 1, .rank = 0, .world = 1, .burst = true}, "world_size"},
        {{.job = "j1", .gen = 1, .rank = 3, .world = 2, .burst = true, .master_port = 70000},
         "master_port"},
    };
    tide_error_t err;

    connect_welcome(fx);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        Tide__V1__RankStatus *st;
        assert_int_equal(deliver_launch(fx, 5, bad[i].a, &err), -EINVAL);
        assert_non_null(strstr(err.text, bad[i].why));
        st = sent(fx, i, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED)->rank_exited->status;
        assert_int_equal(st->exit_code, 127);
        assert_non_null(strstr(st->error, "invalid LaunchRank"));
    }
    assert_int_equal(fx->f.spawns, 0);
    assert_int_equal(fx->f.n_forgot, 0);
}

/* A burst rank (LaunchRank.burst): rank world_size + burst index, no MASTER_PORT needed; started,
 * reported and stopped like any rank, and told apart from the member of the same number. */
static void test_burst_launch(void **state)
{
    fixture_t *fx = *state;
    const Tide__V1__RankStarted *rs;
    tide_error_t err;

    connect_welcome(fx);
    assert_int_equal(
        deliver_launch(fx, 5,
                       (launch_args_t){.job = "jb", .gen = 2, .rank = 4, .world = 4, .burst = true},
                       &err),
        0);
    assert_int_equal(fx->f.spawns, 1);
    rs = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED)->rank_started;
    assert_string_equal(rs->job_id, "jb");
    assert_int_equal(rs->generation, 2);
    assert_int_equal(rs->rank, 4);
    assert_true(tide_worker_core_rank_running(fx->core, "jb", 2, 4));
    /* a second burst slot of the same generation */
    assert_int_equal(
        deliver_launch(
            fx, 5,
            (launch_args_t){
                .job = "jb", .gen = 2, .rank = 9, .world = 4, .burst = true, .master_port = 29500},
            &err),
        0);
    assert_int_equal(fx->f.spawns, 2);
    assert_int_equal(tide_worker_core_running(fx->core), 2);
    /* the same launch again is answered, not started twice */
    assert_int_equal(
        deliver_launch(fx, 5,
                       (launch_args_t){.job = "jb", .gen = 2, .rank = 4, .world = 4, .burst = true},
                       &err),
        0);
    assert_int_equal(fx->f.spawns, 2);
    assert_int_equal(deliver_stop(fx, 5, "jb", 2, 4, 100), 0);
    assert_int_equal(fx->f.n_stops, 1);
    tide_worker_core_rank_exited(fx->core, fx->f.stop_ids[0], 0, 0);
    assert_false(tide_worker_core_rank_running(fx->core, "jb", 2, 4));
    assert_true(tide_worker_core_rank_running(fx->core, "jb", 2, 9));
    assert_int_equal(sent(fx, fx->f.n_sent - 1, TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED)
                         ->rank_exited->status->rank,
                     4);
    /* The slot lent again after that exit was reported: a new process. */
    assert_int_equal(
        deliver_launch(fx, 5,
                       (launch_args_t){.job = "jb", .gen = 2, .rank = 4, .world = 4, .burst = true},
                       &err),
        0);
    assert_int_equal(fx->f.spawns, 3);
    assert_true(tide_worker_core_rank_running(fx->core, "jb", 2, 4));
    /* A member rank's launch after its exit is a repeat (never started twice). */
    assert_int_equal(deliver_stop(fx, 5, "jb", 2, 9, 100), 0);
    tide_worker_core_rank_exited(fx->core, fx->f.stop_ids[1], 0, 0);
    assert_int_equal(
        deliver_launch(fx, 5, (launch_args_t){.job = "jb", .gen = 2}, &err), 0);
    assert_int_equal(fx->f.spawns, 4);
    assert_int_equal(deliver_stop(fx, 5, "jb", 2, 0, 100), 0);
    tide_worker_core_rank_exited(fx->core, fx->f.stop_ids[2], 0, 0);
    assert_int_equal(
        deliver_launch(fx, 5, (launch_args_t){.job = "jb", .gen = 2}, &err), 0);
    assert_int_equal(fx->f.spawns, 4);
}

static void test_bad_bytes_and_empty(void **state)
{
    fixture_t *fx = *state;
    static const uint8_t garbage[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f};
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    tide_error_t err;

    tide_worker_core_stream_opened(fx->core);
    assert_int_equal(tide_worker_core_handle_bytes(fx->core, garbage, sizeof(garbage), &err),
                     -EPROTO);
    assert_non_null(strstr(err.text, "undecodable"));
    assert_int_equal(fx->f.ends, 1);
    /* A message with no known body (a newer scheduler's) is skipped, the stream kept. */
    m.epoch = 5;
    assert_int_equal(tide_worker_core_handle(fx->core, &m, &err), -EPROTO);
    assert_int_equal(fx->f.ends, 1);
}

static void test_log_request_and_heartbeat(void **state)
{
    fixture_t *fx = *state;
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__LogRequest lr = TIDE__V1__LOG_REQUEST__INIT;
    Tide__V1__Telemetry tm = TIDE__V1__TELEMETRY__INIT;
    Tide__V1__Heartbeat *hb;

    tide_worker_core_stream_opened(fx->core);
    assert_int_equal(tide_worker_core_heartbeat(fx->core, &tm, NULL, 0), -ENOTCONN);
    assert_int_equal(deliver_welcome(fx, 5, 20), 0);
    assert_int_equal(fx->f.welcomed_ms, 50); /* clamped */
    fake_clear_sent(&fx->f);
    tm.temperature_c = 35.0;
    assert_int_equal(tide_worker_core_heartbeat(fx->core, &tm, NULL, 0), 0);
    assert_int_equal(tide_worker_core_heartbeat(fx->core, &tm, NULL, 0), 0);
    hb = sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT)->heartbeat;
    assert_int_equal(hb->seq, 2);
    assert_true(hb->telemetry->temperature_c == 35.0);
    assert_int_equal(sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT)->heartbeat->seq, 1);

    lr.request_id = 9;
    lr.job_id = "j1";
    m.epoch = 5;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_LOG_REQUEST;
    m.log_request = &lr;
    assert_int_equal(tide_worker_core_handle(fx->core, &m, NULL), 0);
    assert_int_equal(fx->f.log_requests, 1);
    m.epoch = 1;
    assert_int_equal(tide_worker_core_handle(fx->core, &m, NULL), -ESTALE);
    assert_int_equal(fx->f.log_requests, 1);
}

static void test_helpers(void **state)
{
    (void)state;
    assert_int_equal(tide_worker_exit_code(0, 0), 0);
    assert_int_equal(tide_worker_exit_code(3, 0), 3);
    assert_int_equal(tide_worker_exit_code(0, 15), 143);
    assert_int_equal(tide_worker_exit_code(0, 9), 137);
    assert_true(tide_worker_job_id_valid("job-00000017"));
    assert_true(tide_worker_job_id_valid("a.b_c-D9"));
    assert_false(tide_worker_job_id_valid(".hidden"));
    assert_false(tide_worker_job_id_valid(".."));
    assert_false(tide_worker_job_id_valid("a/b"));
    assert_false(tide_worker_job_id_valid("a b"));
    assert_false(tide_worker_job_id_valid(""));
    char long_id[200];
    memset(long_id, 'a', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    assert_false(tide_worker_job_id_valid(long_id));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hello_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_epoch_filtering, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idempotent_launch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reported_exits_are_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exit_reported_when_welcomed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exits_remembered_while_disconnected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hello_not_welcomed_keeps_exits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_send_failure_keeps_exit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_end_decisions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jitter_varies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trainer_command, setup, teardown),
        cmocka_unit_test_setup_teardown(test_burst_launch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tasks_routing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spawn_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_launch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_bytes_and_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_request_and_heartbeat, setup, teardown),
        cmocka_unit_test(test_helpers),
        cmocka_unit_test_setup_teardown(test_forget_checkpoints, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

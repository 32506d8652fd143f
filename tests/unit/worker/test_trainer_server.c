/* Loop tests of the trainer socket's task operations (worker/trainer_server.c,
 * docs/work-stealing.md) over a real Unix socket in a temporary directory: a fake trainer declares
 * its share, pops tasks, steals (the StealRequest leaves through the send callback as the last
 * queued task is handed, the test answers with GiveTasks before or after the trainer asks),
 * answers ReleaseTasks, gets no_task at once without a stream, declares its pool again on every
 * welcome (what it holds now once tasks moved), and meets each error (unknown_step, unknown_task,
 * task_conflict, busy). Phase-aware burst: `load` reaches the heartbeat progress, completions not
 * sent yet are reported as such (the agent holds an exit for them), and a burst process through the
 * C SDK says hello with TIDE_RANK and joins detached tasks with an empty share. Every test ends
 * leak-clean. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <uv.h>

#include "tide_trainer.h"
#include "trainer_server.h"
#include "worker_test_util.h"

#define WAIT_MS  5000
#define MAX_SENT 64

typedef struct fx {
    uv_loop_t loop;
    char *dir;
    tide_trainer_server_t *s;
    /* what the server sent the scheduler */
    Tide__V1__WorkerMessage *sent[MAX_SENT];
    size_t n_sent, want;
    int send_fail; /* -errno: no stream */
    int attaches;
    /* test_c_sdk's trainer thread, joined by teardown (after the server is gone, so it ends even
     * when the test failed half way) */
    struct sdk_run *run;
    pthread_t sdk;
    bool sdk_started;
    /* the last restore request (ops.restore) */
    uint64_t restore_token;
    int64_t restore_resume;
    int32_t restore_rank;
} fx_t;

typedef struct client {
    fx_t *fx;
    int fd;
    char buf[65536];
    size_t len;
} client_t;

static int t_send(void *ud, const Tide__V1__WorkerMessage *m)
{
    fx_t *fx = ud;
    size_t len = tide__v1__worker_message__get_packed_size(m);
    uint8_t *buf;

    if (fx->send_fail)
        return fx->send_fail;
    assert_true(fx->n_sent < MAX_SENT);
    buf = malloc(len + 1);
    tide__v1__worker_message__pack(m, buf);
    fx->sent[fx->n_sent++] = tide__v1__worker_message__unpack(NULL, len, buf);
    free(buf);
    return 0;
}

static void t_attach(void *ud, tide_trainer_conn_t *c, const tide_trainer_msg_t *m)
{
    (void)c;
    (void)m;
    ((fx_t *)ud)->attaches++;
}

static void t_attach_closed(void *ud, tide_trainer_conn_t *c)
{
    (void)ud;
    (void)c;
}

static void t_restore(void *ud, uint64_t token, const char *job_id, int32_t generation,
                      int32_t rank, int64_t resume_step)
{
    fx_t *fx = ud;

    assert_string_equal(job_id, "job-t");
    assert_int_equal(generation, 3);
    fx->restore_token = token;
    fx->restore_rank = rank;
    fx->restore_resume = resume_step;
}

static void clear_sent(fx_t *fx)
{
    for (size_t i = 0; i < fx->n_sent; i++)
        tide__v1__worker_message__free_unpacked(fx->sent[i], NULL);
    fx->n_sent = 0;
}

static int setup(void **state)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    tide_trainer_server_ops_t ops = {
        .send = t_send, .attach = t_attach, .attach_closed = t_attach_closed,
        .restore = t_restore};
    tide_trainer_server_config_t cfg = {0};
    char *path;
    tide_error_t err;

    assert_int_equal(uv_loop_init(&fx->loop), 0);
    fx->dir = wt_tmpdir();
    assert_true(asprintf(&path, "%s/agent.sock", fx->dir) > 0);
    cfg.path = path;
    cfg.worker_id = "n1/gpu0";
    assert_int_equal(tide_trainer_server_new(&fx->loop, &cfg, &ops, fx, &fx->s, &err), 0);
    free(path);
    tide_trainer_server_rank_add(fx->s, 7, "job-t", 3, 1, getuid());
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;

    tide_trainer_server_free(fx->s);
    assert_int_equal(wt_loop_finish(&fx->loop), 0);
    if (fx->sdk_started)
        assert_int_equal(pthread_join(fx->sdk, NULL), 0);
    unsetenv("TIDE_AGENT_SOCK");
    unsetenv("TIDE_RANK");
    unsetenv("TIDE_BURST");
    free(fx->run);
    clear_sent(fx);
    wt_rmrf(fx->dir);
    free(fx->dir);
    free(fx);
    return 0;
}

/* --- the fake trainer --- */

static void client_open(fx_t *fx, client_t *c)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};

    memset(c, 0, sizeof(*c));
    c->fx = fx;
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", tide_trainer_server_path(fx->s));
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    assert_true(c->fd >= 0);
    assert_int_equal(connect(c->fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
}

static void client_close(client_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static void client_send(client_t *c, const char *line)
{
    size_t n = strlen(line);

    assert_int_equal(send(c->fd, line, n, MSG_NOSIGNAL), (ssize_t)n);
    assert_int_equal(send(c->fd, "\n", 1, MSG_NOSIGNAL), 1);
}

static bool cond_line(void *arg)
{
    client_t *c = arg;
    ssize_t n;

    while (c->len < sizeof(c->buf) &&
           (n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, MSG_DONTWAIT)) > 0)
        c->len += (size_t)n;
    return memchr(c->buf, '\n', c->len) != NULL;
}

/* The next line the server sent c, parsed (caller deletes). */
static cJSON *client_read(client_t *c)
{
    char *nl;
    cJSON *j;

    assert_true(wt_run_until(&c->fx->loop, cond_line, c, WAIT_MS));
    nl = memchr(c->buf, '\n', c->len);
    j = cJSON_ParseWithLength(c->buf, (size_t)(nl - c->buf));
    assert_non_null(j);
    c->len -= (size_t)(nl + 1 - c->buf);
    memmove(c->buf, nl + 1, c->len);
    return j;
}

static const char *jstr(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);

    assert_true(cJSON_IsString(v));
    return v->valuestring;
}

static double jnum(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);

    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}

/* Reads the next line and checks it is `task` id (step 0, member unless kind says otherwise). */
static void expect_task(client_t *c, int64_t step, const char *kind, uint64_t id)
{
    cJSON *j = client_read(c);

    assert_string_equal(jstr(j, "op"), "task");
    assert_true(jnum(j, "step") == (double)step);
    assert_string_equal(jstr(j, "kind"), kind);
    assert_true(jnum(j, "id") == (double)id);
    cJSON_Delete(j);
}

static void expect_no_task(client_t *c, int64_t step, const char *kind)
{
    cJSON *j = client_read(c);

    assert_string_equal(jstr(j, "op"), "no_task");
    assert_true(jnum(j, "step") == (double)step);
    assert_string_equal(jstr(j, "kind"), kind);
    cJSON_Delete(j);
}

static void expect_error(client_t *c, const char *code, const char *ref, const char *needle)
{
    cJSON *j = client_read(c);

    assert_string_equal(jstr(j, "op"), "error");
    assert_string_equal(jstr(j, "code"), code);
    assert_string_equal(jstr(j, "ref"), ref);
    assert_non_null(strstr(jstr(j, "message"), needle));
    cJSON_Delete(j);
}

static void client_hello(fx_t *fx, client_t *c)
{
    cJSON *j;

    client_open(fx, c);
    client_send(
        c, "{\"op\":\"hello\",\"v\":1,\"job\":\"job-t\",\"generation\":3,\"rank\":1,\"pid\":1}");
    j = client_read(c);
    assert_string_equal(jstr(j, "op"), "welcome");
    cJSON_Delete(j);
}

static bool cond_sent(void *arg)
{
    fx_t *fx = arg;

    return fx->n_sent >= fx->want;
}

/* Runs the loop until the server sent n messages in all. */
static void wait_sent(fx_t *fx, size_t n)
{
    fx->want = n;
    assert_true(wt_run_until(&fx->loop, cond_sent, fx, WAIT_MS));
}

typedef struct conns_arg {
    fx_t *fx;
    size_t n;
} conns_arg_t;

static bool cond_conns(void *arg)
{
    conns_arg_t *a = arg;

    return tide_trainer_server_conns(a->fx->s) == a->n;
}

static Tide__V1__WorkerMessage *sent(fx_t *fx, size_t i, Tide__V1__WorkerMessage__MsgCase mc)
{
    assert_true(i < fx->n_sent);
    assert_int_equal(fx->sent[i]->msg_case, mc);
    return fx->sent[i];
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* Checks that message i is TasksDone with exactly ids[0, n). */
static void expect_done_ids(fx_t *fx, size_t i, const uint64_t *ids, size_t n)
{
    const Tide__V1__TasksDone *done =
        sent(fx, i, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;

    assert_int_equal(done->n_task_ids, n);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(done->task_ids[k], ids[k]);
}

static int deliver_give(fx_t *fx, int32_t rank, int64_t step, uint64_t steal_id,
                        const uint64_t *ids, size_t n)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__GiveTasks g = TIDE__V1__GIVE_TASKS__INIT;

    g.job_id = "job-t";
    g.generation = 3;
    g.rank = rank;
    g.kind = TIDE__V1__TASK_KIND__TASK_KIND_MEMBER;
    g.step = step;
    g.steal_id = steal_id;
    g.task_ids = (uint64_t *)ids;
    g.n_task_ids = n;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS;
    m.give_tasks = &g;
    return tide_trainer_server_tasks(fx->s, &m);
}

static int deliver_release(fx_t *fx, int32_t rank, int64_t step, uint64_t release_id, uint32_t max)
{
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__ReleaseTasks r = TIDE__V1__RELEASE_TASKS__INIT;

    r.job_id = "job-t";
    r.generation = 3;
    r.rank = rank;
    r.step = step; /* kind UNSPECIFIED: member */
    r.release_id = release_id;
    r.max_tasks = max;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS;
    m.release_tasks = &r;
    return tide_trainer_server_tasks(fx->s, &m);
}

/* --- tests --- */

/* declare, pop; handing the last queued task sends TasksDone and the StealRequest ahead; the next
 * pop waits for that steal (no second request); a welcome re-declares the pool as declared, then
 * the completions and the request -> GiveTasks -> task; ReleaseTasks from the tail; an empty give
 * before the trainer asks -> no_task at once with the last completion; the figures in the
 * heartbeat's progress; a last welcome re-declares what the rank holds after the moves. */
static void test_steal_round_trip(void **state)
{
    fx_t *fx = *state;
    static const uint64_t stolen[] = {30, 31, 32};
    const Tide__V1__TasksDeclared *td;
    const Tide__V1__TasksDone *done;
    const Tide__V1__StealRequest *sr;
    const Tide__V1__TasksReleased *tr;
    Tide__V1__RankProgress *progress[4];
    Tide__V1__SchedulerMessage other = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    client_t c;

    client_hello(fx, &c);
    client_send(&c, "{\"op\":\"tasks\",\"step\":0,\"ids\":[1,2],\"total\":5}");
    wait_sent(fx, 1);
    td = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_string_equal(td->job_id, "job-t");
    assert_int_equal(td->generation, 3);
    assert_int_equal(td->rank, 1);
    assert_int_equal(td->kind, TIDE__V1__TASK_KIND__TASK_KIND_MEMBER);
    assert_int_equal(td->n_task_ids, 2);
    assert_int_equal(td->total, 5);
    client_send(&c, "{\"op\":\"next_task\",\"step\":0}");
    expect_task(&c, 0, "member", 1);
    assert_int_equal(fx->n_sent, 1);
    /* 2 is the last queued: the completions, then the steal request, go out while it runs */
    client_send(&c, "{\"op\":\"next_task\",\"step\":0,\"done\":1}");
    expect_task(&c, 0, "member", 2);
    assert_int_equal(fx->n_sent, 3);
    done = sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_int_equal(done->n_task_ids, 1);
    assert_int_equal(done->task_ids[0], 1);
    assert_int_equal(done->queued, 0);
    sr = sent(fx, 2, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request;
    assert_int_equal(sr->steal_id, 1);
    assert_int_equal(sr->rank, 1);
    assert_int_equal(sr->step, 0);
    /* the deque is empty: the trainer waits for that steal (a second next_task is busy) */
    client_send(&c, "{\"op\":\"next_task\",\"step\":0,\"done\":2}");
    client_send(&c, "{\"op\":\"next_task\",\"step\":0}");
    expect_error(&c, "busy", "next_task", "waits");
    assert_int_equal(fx->n_sent, 3); /* no second request */
    assert_false(cond_line(&c));     /* it waits */
    /* a welcome declares the pool again (nothing moved: the original declaration), then sends the
     * completions and the request again with its id */
    tide_trainer_server_tasks_welcome(fx->s);
    assert_int_equal(fx->n_sent, 6);
    td = sent(fx, 3, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->rank, 1);
    assert_int_equal(td->step, 0);
    assert_int_equal(td->total, 5);
    assert_int_equal(td->n_task_ids, 2);
    assert_int_equal(td->task_ids[0], 1);
    assert_int_equal(td->task_ids[1], 2);
    done = sent(fx, 4, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_int_equal(done->n_task_ids, 2);
    assert_int_equal(done->task_ids[0], 1);
    assert_int_equal(done->task_ids[1], 2);
    assert_int_equal(
        sent(fx, 5, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    /* for another rank or generation: not here */
    assert_int_equal(deliver_give(fx, 0, 0, 1, stolen, 3), -ENOENT);
    assert_int_equal(deliver_release(fx, 2, 0, 50, 1), -ENOENT);
    other.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME;
    assert_int_equal(tide_trainer_server_tasks(fx->s, &other), -EINVAL);
    /* the answer */
    assert_int_equal(deliver_give(fx, 1, 0, 1, stolen, 3), 0);
    expect_task(&c, 0, "member", 30);
    /* a replay of it is ignored */
    assert_int_equal(deliver_give(fx, 1, 0, 1, stolen, 3), 0);
    /* a thief takes the tail of what is queued (31, 32) */
    clear_sent(fx);
    assert_int_equal(deliver_release(fx, 1, 0, 50, 1), 0);
    assert_int_equal(fx->n_sent, 1);
    tr = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED)->tasks_released;
    assert_int_equal(tr->release_id, 50);
    assert_int_equal(tr->n_task_ids, 1);
    assert_int_equal(tr->task_ids[0], 32);
    assert_int_equal(tr->queued, 1);
    /* 31 is the last queued: TasksDone [30] and StealRequest 2 go ahead */
    client_send(&c, "{\"op\":\"next_task\",\"step\":0,\"done\":30}");
    expect_task(&c, 0, "member", 31);
    assert_int_equal(fx->n_sent, 3);
    done = sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_int_equal(done->n_task_ids, 1);
    assert_int_equal(done->task_ids[0], 30);
    assert_int_equal(
        sent(fx, 2, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 2);
    /* nothing left anywhere, answered before the trainer asks */
    assert_int_equal(deliver_give(fx, 1, 0, 2, NULL, 0), 0);
    assert_int_equal(fx->n_sent, 3);
    assert_false(cond_line(&c));
    /* no_task at once, the last completion goes with it, and no further request */
    client_send(&c, "{\"op\":\"next_task\",\"step\":0,\"done\":31}");
    expect_no_task(&c, 0, "member");
    assert_int_equal(fx->n_sent, 4);
    done = sent(fx, 3, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done;
    assert_int_equal(done->n_task_ids, 1);
    assert_int_equal(done->task_ids[0], 31);
    client_send(&c, "{\"op\":\"next_task\",\"step\":0}");
    expect_no_task(&c, 0, "member");
    assert_int_equal(fx->n_sent, 4);
    /* the heartbeat's figures */
    assert_int_equal(
        tide_trainer_server_progress(fx->s, (int64_t)(uv_hrtime() / 1000000), progress, 4), 1);
    assert_int_equal(progress[0]->progress->tasks_run, 4);
    assert_int_equal(progress[0]->progress->tasks_stolen, 2);
    assert_int_equal(progress[0]->progress->tasks_given, 1);
    assert_true(progress[0]->progress->steal_wait_seconds >= 0);
    assert_true(progress[0]->progress->busy_fraction >= 0 &&
                progress[0]->progress->busy_fraction <= 1);
    /* all reported: the heartbeat flush has nothing to send */
    clear_sent(fx);
    tide_trainer_server_tasks_flush(fx->s);
    assert_int_equal(fx->n_sent, 0);
    /* tasks moved (32 released, 30 and 31 stolen): a welcome declares what the rank holds now,
     * 1, 2, 30 and 31 (any order), with the same total; then every completion; no steal is out */
    tide_trainer_server_tasks_welcome(fx->s);
    assert_int_equal(fx->n_sent, 2);
    td = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->total, 5);
    assert_int_equal(td->step, 0);
    {
        static const uint64_t held[] = {1, 2, 30, 31};
        uint64_t got[4];

        assert_int_equal(td->n_task_ids, 4);
        memcpy(got, td->task_ids, sizeof(got));
        qsort(got, 4, sizeof(got[0]), cmp_u64);
        for (size_t k = 0; k < 4; k++)
            assert_int_equal(got[k], held[k]);
        expect_done_ids(fx, 1, held, 4); /* in the order they were done */
    }
    client_close(&c);
}

/* Without a stream an empty deque answers no_task at once; the declaration and the completions go
 * out with the next welcome and heartbeat. */
static void test_no_stream(void **state)
{
    fx_t *fx = *state;
    client_t c;

    fx->send_fail = -ENOTCONN;
    client_hello(fx, &c);
    client_send(&c, "{\"op\":\"tasks\",\"step\":4,\"kind\":\"detached\",\"ids\":[8],\"total\":2}");
    client_send(&c, "{\"op\":\"next_task\",\"step\":4,\"kind\":\"detached\"}");
    expect_task(&c, 4, "detached", 8);
    client_send(&c, "{\"op\":\"next_task\",\"step\":4,\"kind\":\"detached\",\"done\":8}");
    expect_no_task(&c, 4, "detached");
    tide_trainer_server_tasks_flush(fx->s);
    assert_int_equal(fx->n_sent, 0);
    fx->send_fail = 0;
    tide_trainer_server_tasks_welcome(fx->s);
    assert_int_equal(fx->n_sent, 2);
    assert_int_equal(
        sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared->kind,
        TIDE__V1__TASK_KIND__TASK_KIND_DETACHED);
    assert_int_equal(sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids[0],
                     8);
    client_close(&c);
}

/* unknown_step, unknown_task, task_conflict, busy, bad_field, not_hello; an attached connection
 * may not use tasks. Each error changes nothing. */
static void test_errors(void **state)
{
    fx_t *fx = *state;
    client_t c, d, e, a;
    conns_arg_t ca = {fx, 0};
    uint64_t rejected = tide_trainer_server_rejected(fx->s);

    client_open(fx, &e);
    client_send(&e, "{\"op\":\"tasks\",\"step\":0,\"ids\":[1],\"total\":1}");
    expect_error(&e, "not_hello", "tasks", "hello");
    client_hello(fx, &c);
    client_send(&c, "{\"op\":\"next_task\",\"step\":9}");
    expect_error(&c, "unknown_step", "next_task", "not declared");
    client_send(&c, "{\"op\":\"tasks\",\"step\":0,\"ids\":[1,2],\"total\":3}");
    client_send(&c, "{\"op\":\"tasks\",\"step\":0,\"ids\":[1,2],\"total\":3}"); /* ignored */
    client_send(&c, "{\"op\":\"tasks\",\"step\":0,\"ids\":[2,1],\"total\":3}");
    expect_error(&c, "task_conflict", "tasks", "differs");
    client_send(&c, "{\"op\":\"tasks\",\"step\":1,\"ids\":[5,5],\"total\":3}");
    expect_error(&c, "task_conflict", "tasks", "more than once");
    client_send(&c, "{\"op\":\"tasks\",\"step\":1,\"ids\":[5],\"total\":0}");
    expect_error(&c, "bad_field", "tasks", "total:");
    client_send(&c, "{\"op\":\"next_task\",\"step\":0,\"done\":1}");
    expect_error(&c, "unknown_task", "next_task", "not handed");
    client_send(&c, "{\"op\":\"next_task\",\"step\":0}");
    expect_task(&c, 0, "member", 1);
    client_send(&c, "{\"op\":\"next_task\",\"step\":0,\"done\":77}");
    expect_error(&c, "unknown_task", "next_task", "77");
    client_send(&c, "{\"op\":\"next_task\",\"step\":0,\"done\":1}");
    expect_task(&c, 0, "member", 2);
    /* 2 was the last queued: TasksDeclared, TasksDone [1], StealRequest (ahead) */
    assert_int_equal(fx->n_sent, 3);
    sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE);
    sent(fx, 2, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST);
    client_send(&c, "{\"op\":\"next_task\",\"step\":0,\"done\":2}");
    client_send(&c, "{\"op\":\"next_task\",\"step\":0}");
    expect_error(&c, "busy", "next_task", "waits"); /* c waits now */
    /* a second connection of the rank while the first waits: busy */
    client_hello(fx, &d);
    client_send(&d, "{\"op\":\"next_task\",\"step\":0}");
    expect_error(&d, "busy", "next_task", "waits");
    /* an attached connection (tide-rank-exec) does not use tasks */
    client_open(fx, &a);
    client_send(&a, "{\"op\":\"attach\",\"v\":1,\"job\":\"job-t\",\"generation\":3,\"rank\":1,"
                    "\"credential\":\"x\",\"pid\":1}");
    client_send(&a, "{\"op\":\"next_task\",\"step\":0}");
    expect_error(&a, "bad_field", "next_task", "only sends exited");
    assert_int_equal(fx->attaches, 1);
    assert_int_equal(tide_trainer_server_rejected(fx->s), rejected + 10);
    assert_int_equal(fx->n_sent, 3); /* the errors sent nothing */
    /* the waiter still gets its answer; the last completion goes with the empty one */
    assert_int_equal(deliver_give(fx, 1, 0, 1, NULL, 0), 0);
    expect_no_task(&c, 0, "member");
    assert_int_equal(fx->n_sent, 4);
    assert_int_equal(sent(fx, 3, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids[0],
                     2);
    client_close(&a);
    client_close(&c);
    client_close(&d);
    client_close(&e);
    assert_true(wt_run_until(&fx->loop, cond_conns, &ca, WAIT_MS));
}

typedef struct child_reply {
    int fd;        /* the pipe's read end */
    char line[512];
    size_t len;
} child_reply_t;

static bool cond_child_line(void *arg)
{
    child_reply_t *r = arg;
    ssize_t n;

    while (r->len < sizeof(r->line) - 1 &&
           (n = read(r->fd, r->line + r->len, sizeof(r->line) - 1 - r->len)) > 0)
        r->len += (size_t)n;
    r->line[r->len] = '\0';
    return memchr(r->line, '\n', r->len) != NULL;
}

/* A process of another account cannot say hello as a rank (its reports decide what the worker reads
 * as the rank's account): rejected naming both uids. Root's processes may. As root the test connects
 * from a child switched to uid 65534; otherwise from itself, the rank being another uid's. */
static void test_hello_from_another_account(void **state)
{
    fx_t *fx = *state;
    const char *hello = "{\"op\":\"hello\",\"v\":1,\"job\":\"job-t\",\"generation\":3,\"rank\":6,"
                        "\"pid\":1}";
    uid_t other = geteuid() == 0 ? 12345 : geteuid() + 1;
    client_t c;
    cJSON *j;

    tide_trainer_server_rank_add(fx->s, 9, "job-t", 3, 6, other);
    if (geteuid() != 0) {
        client_open(fx, &c);
        client_send(&c, hello);
        expect_error(&c, "unknown_rank", "hello", "runs as uid");
        client_close(&c);
        return;
    }
    /* root speaks for anyone */
    client_open(fx, &c);
    client_send(&c, hello);
    j = client_read(&c);
    assert_string_equal(jstr(j, "op"), "welcome");
    cJSON_Delete(j);
    client_close(&c);
    /* uid 65534 may not speak for uid 12345's rank */
    {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        child_reply_t r = {0};
        int p[2], st = 0;
        pid_t pid;

        assert_int_equal(chmod(fx->dir, 0755), 0);
        assert_int_equal(chmod(tide_trainer_server_path(fx->s), 0777), 0);
        snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", tide_trainer_server_path(fx->s));
        assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char buf[512];
            struct timeval tv = {10, 0};
            ssize_t n = -1;
            int fd;
            if (setgid(65534) == 0 && setuid(65534) == 0 &&
                (fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0 &&
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
                connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0 &&
                send(fd, hello, strlen(hello), MSG_NOSIGNAL) > 0 && send(fd, "\n", 1, MSG_NOSIGNAL) == 1)
                n = recv(fd, buf, sizeof(buf) - 1, 0);
            if (n <= 0)
                n = snprintf(buf, sizeof(buf), "child: no answer\n");
            (void)!write(p[1], buf, (size_t)n);
            _exit(0);
        }
        close(p[1]);
        r.fd = p[0];
        assert_true(wt_run_until(&fx->loop, cond_child_line, &r, WAIT_MS));
        close(p[0]);
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!strstr(r.line, "\"unknown_rank\"") || !strstr(r.line, "runs as uid 12345") ||
            !strstr(r.line, "uid 65534"))
            fail_msg("expected a refusal naming both uids, got: %s", r.line);
    }
}

/* A waiting connection that closes is forgotten: the steal's answer goes into the deque and the
 * next connection of the rank takes it. The rank's removal drops what is left. */
static void test_waiter_closes(void **state)
{
    fx_t *fx = *state;
    static const uint64_t got[] = {40, 41};
    conns_arg_t ca = {fx, 0};
    client_t c, d;

    client_hello(fx, &c);
    client_send(&c, "{\"op\":\"tasks\",\"step\":2,\"ids\":[],\"total\":2}");
    client_send(&c, "{\"op\":\"next_task\",\"step\":2}");
    wait_sent(fx, 2);
    sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST);
    client_close(&c);
    assert_true(wt_run_until(&fx->loop, cond_conns, &ca, WAIT_MS));
    assert_int_equal(deliver_give(fx, 1, 2, 1, got, 2), 0);
    client_hello(fx, &d);
    client_send(&d, "{\"op\":\"next_task\",\"step\":2}");
    expect_task(&d, 2, "member", 40);
    /* a waiter when its rank ends: the connection closes, nothing is answered */
    client_send(&d, "{\"op\":\"next_task\",\"step\":2,\"done\":40}");
    expect_task(&d, 2, "member", 41);
    assert_int_equal(fx->n_sent, 4); /* 41 was the last queued: TasksDone, StealRequest 2 ahead */
    sent(fx, 2, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE);
    assert_int_equal(
        sent(fx, 3, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 2);
    client_send(&d, "{\"op\":\"next_task\",\"step\":2,\"done\":41}");
    client_send(&d, "{\"op\":\"next_task\",\"step\":2}");
    expect_error(&d, "busy", "next_task", "waits"); /* d waits for steal 2 */
    tide_trainer_server_rank_remove(fx->s, 7);
    assert_int_equal(deliver_give(fx, 1, 2, 2, got, 2), -ENOENT);
    assert_true(wt_run_until(&fx->loop, cond_conns, &ca, WAIT_MS));
    client_close(&d);
}

/* Steal ahead over the socket: the answer to the steal sent as the last queued task was handed
 * lands before the trainer asks, and next_task takes it at once with no new request; an empty
 * answer to a waiting trainer ends its step, the last completion goes with it, and asking again is
 * no_task at once with nothing sent. */
static void test_steal_ahead(void **state)
{
    fx_t *fx = *state;
    static const uint64_t first[] = {5, 6}, second[] = {7};
    static const uint64_t d15[] = {1, 5}, d6[] = {6}, d7[] = {7};
    Tide__V1__RankProgress *progress[4];
    client_t c;

    client_hello(fx, &c);
    client_send(&c, "{\"op\":\"tasks\",\"step\":3,\"ids\":[1],\"total\":4}");
    client_send(&c, "{\"op\":\"next_task\",\"step\":3}");
    expect_task(&c, 3, "member", 1);
    assert_int_equal(fx->n_sent, 2); /* TasksDeclared, StealRequest 1 (nothing done yet) */
    assert_int_equal(
        sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    /* answered while 1 runs: queued, nobody is told */
    assert_int_equal(deliver_give(fx, 1, 3, 1, first, 2), 0);
    assert_false(cond_line(&c));
    client_send(&c, "{\"op\":\"next_task\",\"step\":3,\"done\":1}");
    expect_task(&c, 3, "member", 5);
    assert_int_equal(fx->n_sent, 2); /* no wait, no request */
    client_send(&c, "{\"op\":\"next_task\",\"step\":3,\"done\":5}");
    expect_task(&c, 3, "member", 6);
    assert_int_equal(fx->n_sent, 4); /* 6 was the last queued: TasksDone [1, 5], StealRequest 2 */
    expect_done_ids(fx, 2, d15, 2);
    assert_int_equal(
        sent(fx, 3, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 2);
    assert_int_equal(deliver_give(fx, 1, 3, 2, second, 1), 0);
    client_send(&c, "{\"op\":\"next_task\",\"step\":3,\"done\":6}");
    expect_task(&c, 3, "member", 7);
    assert_int_equal(fx->n_sent, 6); /* 7 was the last queued: TasksDone [6], StealRequest 3 */
    expect_done_ids(fx, 4, d6, 1);
    assert_int_equal(
        sent(fx, 5, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 3);
    /* this time the trainer asks first and waits */
    client_send(&c, "{\"op\":\"next_task\",\"step\":3,\"done\":7}");
    client_send(&c, "{\"op\":\"next_task\",\"step\":3}");
    expect_error(&c, "busy", "next_task", "waits");
    assert_int_equal(fx->n_sent, 6);
    assert_int_equal(deliver_give(fx, 1, 3, 3, NULL, 0), 0);
    expect_no_task(&c, 3, "member");
    assert_int_equal(fx->n_sent, 7); /* TasksDone [7] with the empty answer */
    expect_done_ids(fx, 6, d7, 1);
    client_send(&c, "{\"op\":\"next_task\",\"step\":3}");
    expect_no_task(&c, 3, "member");
    tide_trainer_server_tasks_flush(fx->s);
    assert_int_equal(fx->n_sent, 7);
    assert_int_equal(
        tide_trainer_server_progress(fx->s, (int64_t)(uv_hrtime() / 1000000), progress, 4), 1);
    assert_int_equal(progress[0]->progress->tasks_run, 4);
    assert_int_equal(progress[0]->progress->tasks_stolen, 3);
    assert_int_equal(progress[0]->progress->tasks_given, 0);
    client_close(&c);
}

/* --- phase-aware burst (docs/elastic.md, "Burst") --- */

/* The progress the heartbeats would carry for (job-t, 3, rank); NULL when it is not in them. */
static Tide__V1__TrainerProgress *progress_of(fx_t *fx, int32_t rank)
{
    Tide__V1__RankProgress *p[8];
    size_t n = tide_trainer_server_progress(fx->s, (int64_t)(uv_hrtime() / 1000000), p, 8);

    for (size_t i = 0; i < n; i++)
        if (p[i]->rank == rank)
            return p[i]->progress;
    return NULL;
}

typedef struct load_arg {
    fx_t *fx;
    int32_t rank;
    bool high;
} load_arg_t;

static bool cond_high_load(void *arg)
{
    load_arg_t *a = arg;
    Tide__V1__TrainerProgress *p = progress_of(a->fx, a->rank);

    return p && p->high_load == a->high;
}

/* load keeps the last value per rank for the heartbeats (false until reported); a bad one is
 * refused with an error naming `high` and changes nothing. */
static void test_load(void **state)
{
    fx_t *fx = *state;
    load_arg_t want = {fx, 1, true};
    uint64_t rejected = tide_trainer_server_rejected(fx->s);
    client_t c;

    client_hello(fx, &c);
    assert_non_null(progress_of(fx, 1));
    assert_false(progress_of(fx, 1)->high_load);
    client_send(&c, "{\"op\":\"load\",\"high\":true}");
    assert_true(wt_run_until(&fx->loop, cond_high_load, &want, WAIT_MS));
    client_send(&c, "{\"op\":\"load\",\"high\":\"no\"}");
    expect_error(&c, "bad_field", "load", "high: must be true or false");
    client_send(&c, "{\"op\":\"load\"}");
    expect_error(&c, "bad_field", "load", "high:");
    assert_true(progress_of(fx, 1)->high_load);
    assert_int_equal(tide_trainer_server_rejected(fx->s), rejected + 2);
    assert_int_equal(progress_of(fx, 1)->rejected_reports, 2);
    client_send(&c, "{\"op\":\"load\",\"high\":false}");
    want.high = false;
    assert_true(wt_run_until(&fx->loop, cond_high_load, &want, WAIT_MS));
    client_send(&c, "{\"op\":\"load\",\"high\":true}");
    want.high = true;
    assert_true(wt_run_until(&fx->loop, cond_high_load, &want, WAIT_MS));
    /* not before hello */
    {
        client_t e;
        client_open(fx, &e);
        client_send(&e, "{\"op\":\"load\",\"high\":true}");
        expect_error(&e, "not_hello", "load", "hello");
        client_close(&e);
    }
    assert_int_equal(fx->n_sent, 0); /* nothing for the scheduler but the heartbeats */
    client_close(&c);
}

/* Completions that could not be sent (no stream) are "unsent" until a welcome sends them: the agent
 * holds the rank's exit until then. */
static void test_unsent(void **state)
{
    fx_t *fx = *state;
    client_t c;

    assert_false(tide_trainer_server_rank_unsent(fx->s, 7));
    assert_false(tide_trainer_server_rank_unsent(fx->s, 99));
    fx->send_fail = -ENOTCONN;
    client_hello(fx, &c);
    client_send(&c, "{\"op\":\"tasks\",\"step\":1,\"kind\":\"detached\",\"ids\":[4],\"total\":1}");
    client_send(&c, "{\"op\":\"next_task\",\"step\":1,\"kind\":\"detached\"}");
    expect_task(&c, 1, "detached", 4);
    assert_false(tide_trainer_server_rank_unsent(fx->s, 7)); /* handed, not done */
    client_send(&c, "{\"op\":\"next_task\",\"step\":1,\"kind\":\"detached\",\"done\":4}");
    expect_no_task(&c, 1, "detached");
    assert_true(tide_trainer_server_rank_unsent(fx->s, 7));
    tide_trainer_server_tasks_flush(fx->s); /* still no stream */
    assert_true(tide_trainer_server_rank_unsent(fx->s, 7));
    fx->send_fail = 0;
    tide_trainer_server_tasks_welcome(fx->s);
    assert_int_equal(fx->n_sent, 2); /* TasksDeclared, TasksDone [4] */
    assert_int_equal(sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE)->tasks_done->task_ids[0],
                     4);
    assert_false(tide_trainer_server_rank_unsent(fx->s, 7));
    client_close(&c);
    /* the heartbeat flush clears it as well */
    fx->send_fail = -ENOTCONN;
    client_hello(fx, &c);
    client_send(&c, "{\"op\":\"tasks\",\"step\":2,\"kind\":\"detached\",\"ids\":[5],\"total\":1}");
    client_send(&c, "{\"op\":\"next_task\",\"step\":2,\"kind\":\"detached\"}");
    expect_task(&c, 2, "detached", 5);
    client_send(&c, "{\"op\":\"next_task\",\"step\":2,\"kind\":\"detached\",\"done\":5}");
    expect_no_task(&c, 2, "detached");
    assert_true(tide_trainer_server_rank_unsent(fx->s, 7));
    fx->send_fail = 0;
    tide_trainer_server_tasks_flush(fx->s);
    assert_false(tide_trainer_server_rank_unsent(fx->s, 7));
    tide_trainer_server_rank_remove(fx->s, 7);
    assert_false(tide_trainer_server_rank_unsent(fx->s, 7));
    client_close(&c);
}

/* --- the C SDK (trainer/tide_trainer.c) against the server: the wire formats agree --- */

struct sdk_run {
    uint64_t ran[8];
    size_t n;
    int rc;     /* the last tide_trainer_next_task's */
    bool burst; /* what tide_trainer_is_burst said */
    atomic_bool done;
};
typedef struct sdk_run sdk_run_t;

static void *sdk_thread(void *arg)
{
    static const uint64_t mine[] = {1, 2};
    sdk_run_t *r = arg;
    tide_trainer_t *t = tide_trainer_open();
    tide_task_iter_t it;
    uint64_t id;

    r->rc = t ? tide_trainer_tasks_begin(t, &it, 0, TIDE_TRAINER_TASK_MEMBER, mine, 2, 4) : -1;
    while (r->rc == 0 && (r->rc = tide_trainer_next_task(&it, &id)) == 1 && r->n < 8) {
        r->ran[r->n++] = id;
        r->rc = 0;
    }
    tide_trainer_close(t);
    atomic_store(&r->done, true);
    return NULL;
}

static bool cond_sdk_done(void *arg)
{
    return atomic_load(&((sdk_run_t *)arg)->done);
}

/* The SDK in a thread runs its two tasks, steals two more (the test answers the StealRequest sent
 * as its last task is handed), and ends its step on an empty answer. Whether an answer comes before
 * or after the trainer asks (the thread races the test), the messages are the same: completions
 * ahead of each request, the last one with the empty answer or the no_task. */
static void test_c_sdk(void **state)
{
    fx_t *fx = *state;
    static const uint64_t stolen[] = {3, 4};
    static const uint64_t d1[] = {1}, d23[] = {2, 3}, d4[] = {4};
    sdk_run_t *run;

    fx->run = run = calloc(1, sizeof(*run));
    setenv("TIDE_AGENT_SOCK", tide_trainer_server_path(fx->s), 1);
    setenv("TIDE_JOB_ID", "job-t", 1);
    setenv("TIDE_GENERATION", "3", 1);
    setenv("RANK", "1", 1);
    assert_int_equal(pthread_create(&fx->sdk, NULL, sdk_thread, run), 0);
    fx->sdk_started = true;
    wait_sent(fx, 3); /* TasksDeclared, TasksDone [1], StealRequest 1 as 2 is handed */
    sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED);
    expect_done_ids(fx, 1, d1, 1);
    assert_int_equal(
        sent(fx, 2, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 1);
    assert_int_equal(deliver_give(fx, 1, 0, 1, stolen, 2), 0);
    wait_sent(fx, 5); /* TasksDone [2, 3], StealRequest 2 as 4 is handed */
    expect_done_ids(fx, 3, d23, 2);
    assert_int_equal(
        sent(fx, 4, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->steal_id, 2);
    assert_int_equal(deliver_give(fx, 1, 0, 2, NULL, 0), 0);
    assert_true(wt_run_until(&fx->loop, cond_sdk_done, run, WAIT_MS));
    assert_int_equal(pthread_join(fx->sdk, NULL), 0);
    fx->sdk_started = false;
    wait_sent(fx, 6); /* TasksDone [4] */
    expect_done_ids(fx, 5, d4, 1);
    tide_trainer_server_tasks_flush(fx->s);
    assert_int_equal(fx->n_sent, 6); /* every completion reported once, no further request */
    assert_int_equal(run->rc, 0);
    assert_int_equal(run->n, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(run->ran[i], i + 1);
}

/* A burst process through the C SDK: hello with TIDE_RANK (no RANK), load_phase, and a join of the
 * step's detached tasks with an empty share, served by steals. */
static void *burst_thread(void *arg)
{
    sdk_run_t *r = arg;
    tide_trainer_t *t = tide_trainer_open();
    tide_task_iter_t it;
    uint64_t id;

    r->burst = tide_trainer_is_burst();
    tide_trainer_load_phase(t, true);
    r->rc = t ? tide_trainer_tasks_join(t, &it, 6, 4) : -1;
    while (r->rc == 0 && (r->rc = tide_trainer_next_task(&it, &id)) == 1 && r->n < 8) {
        r->ran[r->n++] = id;
        r->rc = 0;
    }
    tide_trainer_close(t);
    atomic_store(&r->done, true);
    return NULL;
}

static void test_c_sdk_burst(void **state)
{
    fx_t *fx = *state;
    static const uint64_t stolen[] = {2, 3};
    load_arg_t high = {fx, 5, true};
    const Tide__V1__TasksDeclared *td;
    Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__GiveTasks g = TIDE__V1__GIVE_TASKS__INIT;
    sdk_run_t *run;

    /* rank 5 of a generation of 3: burst index 2 */
    tide_trainer_server_rank_add(fx->s, 8, "job-t", 3, 5, getuid());
    fx->run = run = calloc(1, sizeof(*run));
    setenv("TIDE_AGENT_SOCK", tide_trainer_server_path(fx->s), 1);
    setenv("TIDE_JOB_ID", "job-t", 1);
    setenv("TIDE_GENERATION", "3", 1);
    setenv("TIDE_RANK", "5", 1);
    setenv("TIDE_BURST", "1", 1);
    setenv("RANK", "1", 1); /* TIDE_RANK wins */
    assert_int_equal(pthread_create(&fx->sdk, NULL, burst_thread, run), 0);
    fx->sdk_started = true;
    wait_sent(fx, 2); /* TasksDeclared (empty), StealRequest 1 */
    td = sent(fx, 0, TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED)->tasks_declared;
    assert_int_equal(td->rank, 5);
    assert_int_equal(td->kind, TIDE__V1__TASK_KIND__TASK_KIND_DETACHED);
    assert_int_equal(td->step, 6);
    assert_int_equal(td->n_task_ids, 0);
    assert_int_equal(td->total, 4);
    assert_int_equal(sent(fx, 1, TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST)->steal_request->rank,
                     5);
    assert_true(wt_run_until(&fx->loop, cond_high_load, &high, WAIT_MS));
    g.job_id = "job-t";
    g.generation = 3;
    g.rank = 5;
    g.kind = TIDE__V1__TASK_KIND__TASK_KIND_DETACHED;
    g.step = 6;
    g.steal_id = 1;
    g.task_ids = (uint64_t *)stolen;
    g.n_task_ids = 2;
    m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS;
    m.give_tasks = &g;
    assert_int_equal(tide_trainer_server_tasks(fx->s, &m), 0);
    wait_sent(fx, 4); /* TasksDone [2], StealRequest 2 as 3 is handed */
    expect_done_ids(fx, 2, stolen, 1);
    g.steal_id = 2;
    g.n_task_ids = 0;
    assert_int_equal(tide_trainer_server_tasks(fx->s, &m), 0);
    assert_true(wt_run_until(&fx->loop, cond_sdk_done, run, WAIT_MS));
    assert_int_equal(pthread_join(fx->sdk, NULL), 0);
    fx->sdk_started = false;
    wait_sent(fx, 5);
    expect_done_ids(fx, 4, stolen + 1, 1);
    assert_true(run->burst);
    assert_int_equal(run->rc, 0);
    assert_int_equal(run->n, 2);
    assert_int_equal(run->ran[0], 2);
    assert_int_equal(run->ran[1], 3);
    assert_null(progress_of(fx, 1)); /* the hello named rank 5, not RANK's 1 */
    assert_non_null(progress_of(fx, 5));
}

/* restore through the C SDK: the request reaches ops.restore with the rank's resume step, the
 * answer by token comes back whole (path, tier, skipped copies); then an answer of none. */
typedef struct restore_run {
    int rc[2];
    int64_t step;
    char path[256], tier[16], reason[128];
    size_t n_skipped;
    tide_trainer_skip_t skip0;
    atomic_int phase; /* 1: the first answer is in; 2: done */
} restore_run_t;

static void *restore_thread(void *arg)
{
    restore_run_t *r = arg;
    tide_trainer_t *t = tide_trainer_open();
    const tide_trainer_skip_t *sk;

    r->rc[0] = tide_trainer_restore(t, &r->step, r->path, sizeof(r->path));
    snprintf(r->tier, sizeof(r->tier), "%s", tide_trainer_restore_tier(t));
    r->n_skipped = tide_trainer_restore_skipped(t, &sk);
    if (r->n_skipped)
        r->skip0 = sk[0];
    atomic_store(&r->phase, 1);
    r->rc[1] = tide_trainer_restore(t, NULL, NULL, 0);
    snprintf(r->reason, sizeof(r->reason), "%s", tide_trainer_restore_reason(t));
    tide_trainer_close(t);
    atomic_store(&r->phase, 2);
    return NULL;
}

static bool cond_restore_asked(void *arg)
{
    return ((fx_t *)arg)->restore_token != 0;
}

static bool cond_restore_phase1(void *arg)
{
    return atomic_load(&((restore_run_t *)arg)->phase) >= 1;
}

static bool cond_restore_phase2(void *arg)
{
    return atomic_load(&((restore_run_t *)arg)->phase) >= 2;
}

static void test_restore_c_sdk(void **state)
{
    fx_t *fx = *state;
    restore_run_t *run = calloc(1, sizeof(*run));
    tide_trainer_restore_skip_t skips[] = {{"hot", 300, "rank-1/m.bin: sha256 \"x\", manifest says y"}};
    tide_buf_t out = TIDE_BUF_INIT;

    tide_trainer_server_rank_resume(fx->s, 7, 300);
    setenv("TIDE_AGENT_SOCK", tide_trainer_server_path(fx->s), 1);
    setenv("TIDE_JOB_ID", "job-t", 1);
    setenv("TIDE_GENERATION", "3", 1);
    setenv("RANK", "1", 1);
    fx->run = (sdk_run_t *)(void *)run; /* freed by teardown */
    assert_int_equal(pthread_create(&fx->sdk, NULL, restore_thread, run), 0);
    fx->sdk_started = true;
    assert_true(wt_run_until(&fx->loop, cond_restore_asked, fx, WAIT_MS));
    assert_int_equal(fx->restore_rank, 1);
    assert_int_equal(fx->restore_resume, 300);
    assert_int_equal(tide_trainer_server_restore_reply(fx->s, fx->restore_token + 1, "x\n", 2),
                     -ENOENT);
    tide_trainer_encode_restore(&out, 200, "/w/job-t/step-200/rank-1", "warm", NULL, skips, 1);
    assert_int_equal(tide_trainer_server_restore_reply(fx->s, fx->restore_token, out.data, out.len),
                     0);
    /* answered once only */
    assert_int_equal(tide_trainer_server_restore_reply(fx->s, fx->restore_token, out.data, out.len),
                     -ENOENT);
    fx->restore_token = 0;
    assert_true(wt_run_until(&fx->loop, cond_restore_phase1, run, WAIT_MS));
    assert_int_equal(run->rc[0], 0);
    assert_int_equal(run->step, 200);
    assert_string_equal(run->path, "/w/job-t/step-200/rank-1");
    assert_string_equal(run->tier, "warm");
    assert_int_equal(run->n_skipped, 1);
    assert_string_equal(run->skip0.tier, "hot");
    assert_int_equal(run->skip0.step, 300);
    assert_string_equal(run->skip0.reason, "rank-1/m.bin: sha256 \"x\", manifest says y");

    assert_true(wt_run_until(&fx->loop, cond_restore_asked, fx, WAIT_MS));
    tide_buf_reset(&out);
    tide_trainer_encode_restore(&out, -1, NULL, NULL, "no copy of rank 1", NULL, 0);
    assert_int_equal(tide_trainer_server_restore_reply(fx->s, fx->restore_token, out.data, out.len),
                     0);
    assert_true(wt_run_until(&fx->loop, cond_restore_phase2, run, WAIT_MS));
    assert_int_equal(run->rc[1], -ENOENT);
    assert_string_equal(run->reason, "no copy of rank 1");
    assert_int_equal(pthread_join(fx->sdk, NULL), 0);
    fx->sdk_started = false;
    tide_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_steal_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hello_from_another_account, setup, teardown),
        cmocka_unit_test_setup_teardown(test_waiter_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_steal_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(test_c_sdk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unsent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_c_sdk_burst, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restore_c_sdk, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

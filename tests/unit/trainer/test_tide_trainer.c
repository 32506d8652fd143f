/* Unit tests of the C trainer SDK (trainer/tide_trainer.c) against a fake worker: a listening Unix
 * socket in a mkdtemp dir owned by the test. A thread plays the worker's side of the hello (the SDK
 * blocks for the welcome); after that the test reads and writes the accepted socket itself, which
 * is deterministic because a Unix socket hands bytes to the peer's queue before write(2) returns. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tide_trainer.h"

#define DEADLINE_MS 10000

typedef struct fake_worker {
    char dir[64];
    char path[128];
    int lfd;           /* listening socket */
    int fd;            /* the accepted connection; -1 until the thread has it */
    pthread_t thread;
    char *hello;       /* the hello line the SDK sent (malloc) */
    const char *reply; /* written after the hello; NULL: close the connection instead */
    char rbuf[1 << 16];
    size_t rlen;
} fake_worker_t;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The next line from the SDK (malloc, without '\n'); NULL on EOF or after DEADLINE_MS. */
static char *read_line(fake_worker_t *w)
{
    int64_t deadline = now_ms() + DEADLINE_MS;

    for (;;) {
        char *nl = memchr(w->rbuf, '\n', w->rlen);
        struct pollfd pfd = {.fd = w->fd, .events = POLLIN};
        ssize_t n;

        if (nl) {
            size_t len = (size_t)(nl - w->rbuf);
            char *line = strndup(w->rbuf, len);
            memmove(w->rbuf, nl + 1, w->rlen - len - 1);
            w->rlen -= len + 1;
            return line;
        }
        if (w->rlen == sizeof(w->rbuf) || now_ms() >= deadline)
            return NULL;
        if (poll(&pfd, 1, (int)(deadline - now_ms())) <= 0)
            continue;
        n = read(w->fd, w->rbuf + w->rlen, sizeof(w->rbuf) - w->rlen);
        if (n <= 0)
            return NULL;
        w->rlen += (size_t)n;
    }
}

/* Whether the SDK sent nothing more (all bytes sent so far were read). */
static bool nothing_more(fake_worker_t *w)
{
    struct pollfd pfd = {.fd = w->fd, .events = POLLIN};

    return w->rlen == 0 && poll(&pfd, 1, 0) == 0;
}

static void put(fake_worker_t *w, const char *s)
{
    assert_int_equal(write(w->fd, s, strlen(s)), (ssize_t)strlen(s));
}

static void *worker_main(void *arg)
{
    fake_worker_t *w = arg;
    struct pollfd pfd = {.fd = w->lfd, .events = POLLIN};

    if (poll(&pfd, 1, DEADLINE_MS) != 1)
        return NULL;
    w->fd = accept4(w->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (w->fd < 0)
        return NULL;
    w->hello = read_line(w);
    if (w->reply) {
        if (write(w->fd, w->reply, strlen(w->reply)) < 0)
            return NULL;
    } else {
        close(w->fd);
        w->fd = -1;
    }
    return NULL;
}

static fake_worker_t *worker_new(void)
{
    fake_worker_t *w = calloc(1, sizeof(*w));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    strcpy(w->dir, "/tmp/tide-trainer-test-XXXXXX");
    assert_non_null(mkdtemp(w->dir));
    snprintf(w->path, sizeof(w->path), "%s/agent.sock", w->dir);
    strcpy(sa.sun_path, w->path);
    w->fd = -1;
    w->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(w->lfd >= 0);
    assert_int_equal(bind(w->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(w->lfd, 8), 0);
    setenv("TIDE_AGENT_SOCK", w->path, 1);
    setenv("TIDE_JOB_ID", "job-\"7\"", 1);
    setenv("TIDE_GENERATION", "3", 1);
    setenv("RANK", "2", 1);
    return w;
}

static void worker_start(fake_worker_t *w, const char *reply)
{
    w->reply = reply;
    assert_int_equal(pthread_create(&w->thread, NULL, worker_main, w), 0);
}

static void worker_join(fake_worker_t *w)
{
    assert_int_equal(pthread_join(w->thread, NULL), 0);
}

static void worker_free(fake_worker_t *w)
{
    if (w->fd >= 0)
        close(w->fd);
    close(w->lfd);
    unlink(w->path);
    rmdir(w->dir);
    free(w->hello);
    free(w);
    unsetenv("TIDE_AGENT_SOCK");
}

/* Opens a handle against a fresh fake worker that welcomes it (plus `extra` after the welcome). */
static tide_trainer_t *open_welcomed(fake_worker_t **wp, const char *extra)
{
    static char reply[1024];
    fake_worker_t *w = worker_new();
    tide_trainer_t *t;

    snprintf(reply, sizeof(reply), "{\"op\":\"welcome\",\"v\":1,\"worker\":\"w/gpu0\"}\n%s",
             extra ? extra : "");
    worker_start(w, reply);
    t = tide_trainer_open();
    worker_join(w);
    assert_non_null(t);
    assert_true(w->fd >= 0);
    *wp = w;
    return t;
}

static cJSON *next_json(fake_worker_t *w)
{
    char *line = read_line(w);
    cJSON *j;

    assert_non_null(line);
    j = cJSON_Parse(line);
    if (!j)
        fail_msg("not JSON: %s", line);
    free(line);
    return j;
}

static const char *jstr(const cJSON *j, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

    if (!cJSON_IsString(v))
        fail_msg("field %s is not a string", name);
    return v->valuestring;
}

static double jnum(const cJSON *j, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);

    if (!cJSON_IsNumber(v))
        fail_msg("field %s is not a number", name);
    return v->valuedouble;
}

/* --- tests ------------------------------------------------------------------------------------ */

static void test_outside_tide(void **state)
{
    int64_t req = 42, deadline = 43;

    unsetenv("TIDE_AGENT_SOCK");
    assert_null(tide_trainer_open());
    setenv("TIDE_AGENT_SOCK", "", 1);
    assert_null(tide_trainer_open());
    unsetenv("TIDE_AGENT_SOCK");
    tide_trainer_step(NULL, 1, TIDE_PHASE_FORWARD, 1e12, 1, 1);
    tide_trainer_phase(NULL, TIDE_PHASE_EVAL);
    tide_trainer_checkpoint(NULL, 1, "/x", 1, "ab", 0);
    assert_false(tide_trainer_checkpoint_requested(NULL, &req, &deadline));
    assert_int_equal(req, 42);
    assert_false(tide_trainer_should_stop(NULL, INT64_MAX));
    assert_int_equal(tide_trainer_poll(NULL), 0);
    tide_trainer_close(NULL);
    assert_string_equal(tide_phase_name(TIDE_PHASE_FORWARD), "forward");
    assert_string_equal(tide_phase_name(TIDE_PHASE_IDLE), "idle");
    assert_null(tide_phase_name((tide_phase_t)6));
    assert_null(tide_phase_name((tide_phase_t)-1));
}

/* A socket path that does not exist, bad environment, a refused hello, a worker that hangs up. */
static void test_open_failures(void **state)
{
    fake_worker_t *w;

    setenv("TIDE_AGENT_SOCK", "/nonexistent/tide.sock", 1);
    setenv("TIDE_JOB_ID", "j", 1);
    setenv("TIDE_GENERATION", "1", 1);
    setenv("RANK", "0", 1);
    assert_null(tide_trainer_open());

    w = worker_new();
    setenv("RANK", "zero", 1);
    assert_null(tide_trainer_open()); /* fails before connecting */
    setenv("RANK", "0", 1);
    unsetenv("TIDE_JOB_ID");
    assert_null(tide_trainer_open());
    worker_free(w);

    w = worker_new();
    worker_start(w, "{\"op\":\"error\",\"code\":\"unknown_rank\",\"message\":\"job j generation 3 "
                    "rank 2 does not run on this worker\",\"ref\":\"hello\"}\n");
    assert_null(tide_trainer_open());
    worker_join(w);
    assert_non_null(w->hello);
    worker_free(w);

    w = worker_new();
    worker_start(w, NULL); /* closes after the hello */
    assert_null(tide_trainer_open());
    worker_join(w);
    worker_free(w);
}

static void test_hello_and_reports(void **state)
{
    fake_worker_t *w;
    tide_trainer_t *t = open_welcomed(&w, NULL);
    cJSON *j = cJSON_Parse(w->hello);

    /* hello */
    assert_non_null(j);
    assert_string_equal(jstr(j, "op"), "hello");
    assert_true(jnum(j, "v") == 1);
    assert_string_equal(jstr(j, "job"), "job-\"7\"");
    assert_true(jnum(j, "generation") == 3);
    assert_true(jnum(j, "rank") == 2);
    assert_true(jnum(j, "pid") == getpid());
    assert_string_equal(jstr(j, "sdk"), "c/1");
    cJSON_Delete(j);

    /* step: every field, FLOPs exact to the last bit */
    tide_trainer_step(t, 5, TIDE_PHASE_BACKWARD, 0.1 * 3, 32, 4096);
    j = next_json(w);
    assert_string_equal(jstr(j, "op"), "step");
    assert_true(jnum(j, "step") == 5);
    assert_string_equal(jstr(j, "phase"), "backward");
    assert_true(jnum(j, "flops") == 0.1 * 3);
    assert_true(jnum(j, "samples") == 32);
    assert_true(jnum(j, "tokens") == 4096);
    assert_null(cJSON_GetObjectItemCaseSensitive(j, "recompute_flops"));
    cJSON_Delete(j);

    /* with recomputation: recompute_flops beside flops (absent from a plain step, above) */
    tide_trainer_step_hw(t, 5, TIDE_PHASE_FORWARD, 3e12, 1e12, 32, 4096);
    j = next_json(w);
    assert_true(jnum(j, "flops") == 3e12 && jnum(j, "recompute_flops") == 1e12);
    cJSON_Delete(j);
    tide_trainer_step_hw(t, 5, TIDE_PHASE_FORWARD, 3e12, -1, 32, 4096);
    tide_trainer_step_hw(t, 5, TIDE_PHASE_FORWARD, 3e12, NAN, 32, 4096);
    assert_true(nothing_more(w));

    /* bad reports are not sent at all */
    tide_trainer_step(t, 6, TIDE_PHASE_FORWARD, NAN, 1, 0);
    tide_trainer_step(t, 6, TIDE_PHASE_FORWARD, INFINITY, 1, 0);
    tide_trainer_step(t, 6, TIDE_PHASE_FORWARD, -1.0, 1, 0);
    tide_trainer_step(t, -1, TIDE_PHASE_FORWARD, 1.0, 1, 0);
    tide_trainer_step(t, 6, TIDE_PHASE_FORWARD, 1.0, -1, 0);
    tide_trainer_step(t, 6, TIDE_PHASE_FORWARD, 1.0, 0, INT64_C(1) << 53);
    tide_trainer_step(t, 6, (tide_phase_t)17, 1.0, 1, 0);
    tide_trainer_phase(t, (tide_phase_t)17);
    assert_true(nothing_more(w));
    tide_trainer_step(t, 6, TIDE_PHASE_FORWARD, 1e300, 0, 0);
    j = next_json(w);
    assert_true(jnum(j, "step") == 6);
    assert_true(jnum(j, "flops") == 1e300);
    cJSON_Delete(j);

    /* phase */
    tide_trainer_phase(t, TIDE_PHASE_CHECKPOINT);
    j = next_json(w);
    assert_string_equal(jstr(j, "op"), "phase");
    assert_string_equal(jstr(j, "phase"), "checkpoint");
    cJSON_Delete(j);

    /* checkpoint: escaped path, lowercase digest, request */
    tide_trainer_checkpoint(t, 6, "/ckpt/\"a\"\n\\b\x01",  1234,
                            "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", 0);
    j = next_json(w);
    assert_string_equal(jstr(j, "op"), "checkpoint");
    assert_true(jnum(j, "step") == 6);
    assert_string_equal(jstr(j, "path"), "/ckpt/\"a\"\n\\b\x01");
    assert_true(jnum(j, "bytes") == 1234);
    assert_string_equal(jstr(j, "sha256"),
                        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    assert_true(jnum(j, "request") == 0);
    cJSON_Delete(j);
    /* an empty checkpoint needs no digest; a bad digest is not sent */
    tide_trainer_checkpoint(t, 7, "/x", 10, "abc", 0);
    tide_trainer_checkpoint(t, 7, "/x", 10, NULL, 0);
    assert_true(nothing_more(w));
    tide_trainer_checkpoint(t, 7, NULL, 0, NULL, 0);
    j = next_json(w);
    assert_string_equal(jstr(j, "path"), "");
    assert_string_equal(jstr(j, "sha256"), "");
    cJSON_Delete(j);

    /* No stop arrived: not even "after the last step there is" (a burst process asks that). */
    assert_false(tide_trainer_should_stop(t, INT64_MAX));
    tide_trainer_close(t);
    assert_null(read_line(w)); /* the worker sees EOF */
    worker_free(w);
}

static void test_commands(void **state)
{
    fake_worker_t *w;
    /* commands queued before the welcome arrive with it */
    tide_trainer_t *t = open_welcomed(&w, "{\"op\":\"stop_after_step\",\"step\":100}\n");
    int64_t req = 0, deadline = 0;
    cJSON *j;

    assert_false(tide_trainer_should_stop(t, 99));
    assert_true(tide_trainer_should_stop(t, 100));
    assert_false(tide_trainer_checkpoint_requested(t, &req, &deadline));

    /* lowest stop wins; newest checkpoint_now wins */
    put(w, "{\"op\":\"stop_after_step\",\"step\":50}\n{\"op\":\"stop_after_step\",\"step\":70}\n"
           "{\"op\":\"checkpoint_now\",\"id\":5,\"deadline_unix_ms\":1700000000000}\n"
           "{\"deadline_unix_ms\": 1700000000999 , \"id\" : 6, \"op\" : \"checkpoint_now\"}\r\n");
    assert_int_equal(tide_trainer_poll(t), 4);
    assert_false(tide_trainer_should_stop(t, 49));
    assert_true(tide_trainer_should_stop(t, 50));
    assert_true(tide_trainer_checkpoint_requested(t, &req, &deadline));
    assert_int_equal(req, 6);
    assert_int_equal(deadline, INT64_C(1700000000999));
    assert_true(tide_trainer_checkpoint_requested(t, NULL, NULL));

    /* a command split across writes applies when complete */
    put(w, "{\"op\":\"stop_after_step\",");
    assert_int_equal(tide_trainer_poll(t), 0);
    put(w, "\"step\":20}");
    assert_int_equal(tide_trainer_poll(t), 0);
    put(w, "\n");
    assert_int_equal(tide_trainer_poll(t), 1);
    assert_true(tide_trainer_should_stop(t, 20));
    assert_false(tide_trainer_should_stop(t, 19));

    /* garbage is ignored, the valid command after it is not */
    {
        char big[5000];
        memset(big, 'z', sizeof(big) - 2);
        big[sizeof(big) - 2] = '\n';
        big[sizeof(big) - 1] = '\0';
        put(w, "not json\n{\"op\":\"checkpoint_now\"}\n{\"op\":\"stop_after_step\",\"step\":1.5}\n"
               "{\"op\":\"stop_after_step\",\"step\":[1]}\n{\"op\":\"stop_after_step\",\"step\":1}x\n"
               "{\"op\":\"stop_after_step\",\"step\":99999999999999999999999}\n"
               "{\"op\":\"stop_after_step\",\"step\":\"1\"}\n\n{}\n{\"op\":\"welcome\"\n");
        put(w, big);
        put(w, "{\"op\":\"error\",\"code\":\"bad_field\",\"message\":\"step: must be an integer\","
               "\"ref\":\"step\"}\n");
        put(w, "{\"op\":\"stop_after_step\",\"step\":10}\n");
    }
    assert_int_equal(tide_trainer_poll(t), 1);
    assert_true(tide_trainer_should_stop(t, 10));
    assert_false(tide_trainer_should_stop(t, 9));

    /* answering an older request keeps the newest pending; answering it clears it */
    tide_trainer_checkpoint(t, 10, "/c", 0, NULL, 5);
    j = next_json(w);
    assert_true(jnum(j, "request") == 5);
    cJSON_Delete(j);
    assert_true(tide_trainer_checkpoint_requested(t, &req, NULL));
    assert_int_equal(req, 6);
    tide_trainer_checkpoint(t, 10, "/c", 0, NULL, 6);
    j = next_json(w);
    assert_true(jnum(j, "request") == 6);
    cJSON_Delete(j);
    assert_false(tide_trainer_checkpoint_requested(t, &req, NULL));
    /* step() reads commands too */
    put(w, "{\"op\":\"checkpoint_now\",\"id\":7,\"deadline_unix_ms\":1}\n");
    tide_trainer_step(t, 11, TIDE_PHASE_FORWARD, 1, 1, 1);
    free(read_line(w));
    assert_int_equal(tide_trainer_poll(t), 0);
    assert_true(tide_trainer_checkpoint_requested(t, &req, &deadline));
    assert_int_equal(req, 7);
    assert_int_equal(deadline, 1);

    tide_trainer_close(t);
    worker_free(w);
}

/* The worker goes away: no SIGPIPE (its default action would kill this test), the handle turns
 * into a no-op, a stop it had received stays in force. */
static void test_worker_closes(void **state)
{
    fake_worker_t *w;
    tide_trainer_t *t;

    assert_true(signal(SIGPIPE, SIG_DFL) != SIG_ERR);
    /* EOF seen by a read */
    t = open_welcomed(&w, NULL);
    put(w, "{\"op\":\"stop_after_step\",\"step\":8}\n{\"op\":\"checkpoint_now\",\"id\":3}\n");
    close(w->fd);
    w->fd = -1;
    assert_int_equal(tide_trainer_poll(t), -1);
    assert_int_equal(tide_trainer_poll(t), -1);
    assert_true(tide_trainer_should_stop(t, 8));
    assert_false(tide_trainer_checkpoint_requested(t, NULL, NULL));
    for (int i = 0; i < 100; i++)
        tide_trainer_step(t, i, TIDE_PHASE_FORWARD, 1, 1, 1);
    tide_trainer_checkpoint(t, 1, "/x", 0, NULL, 0);
    tide_trainer_close(t);
    worker_free(w);

    /* EPIPE seen by a send */
    t = open_welcomed(&w, NULL);
    shutdown(w->fd, SHUT_RD);
    close(w->fd);
    w->fd = -1;
    for (int i = 0; i < 100; i++) {
        tide_trainer_step(t, i, TIDE_PHASE_FORWARD, 1, 1, 1);
        tide_trainer_phase(t, TIDE_PHASE_UPDATE);
    }
    tide_trainer_checkpoint(t, 1, "/x", 0, NULL, 0);
    assert_int_equal(tide_trainer_poll(t), -1);
    assert_false(tide_trainer_should_stop(t, INT64_MAX - 1));
    tide_trainer_close(t);
    worker_free(w);
}

/* A worker that does not read: step reports are dropped, never block, never leave half a line. */
static void test_worker_does_not_read(void **state)
{
    fake_worker_t *w;
    tide_trainer_t *t = open_welcomed(&w, NULL);
    int lines = 0, last = -1;
    char *line;

    for (int i = 0; i < 50000; i++)
        tide_trainer_step(t, i, TIDE_PHASE_FORWARD, 1e12, 1, 1);
    /* drain what arrived; then one more report goes through whole */
    while (!nothing_more(w) && (line = read_line(w))) {
        cJSON *j = cJSON_Parse(line);
        if (!j)
            fail_msg("half a line: %s", line);
        assert_true(jnum(j, "step") > last);
        last = (int)jnum(j, "step");
        lines++;
        cJSON_Delete(j);
        free(line);
    }
    assert_true(lines > 0);
    assert_true(lines < 50000); /* the socket buffer cannot hold them all */
    tide_trainer_step(t, 50000, TIDE_PHASE_FORWARD, 1e12, 1, 1);
    line = read_line(w);
    assert_non_null(line);
    /* whatever was partly sent is completed first, then the new report */
    while (strstr(line, "\"step\":50000,") == NULL) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        cJSON_Delete(j);
        free(line);
        line = read_line(w);
        assert_non_null(line);
    }
    free(line);
    tide_trainer_close(t);
    worker_free(w);
}

/* --- tasks (docs/work-stealing.md) ----------------------------------------------------------- */

/* A thread that plays the worker during blocking calls: reads up to n lines and answers the i-th
 * with replies[i] (NULL: nothing; EOF_REPLY: shuts its sending side down and stops), keeping the
 * lines for the test. It answers only after it has read the request, so the SDK really waits. */
#define EOF_REPLY "<eof>"
typedef struct script {
    fake_worker_t *w;
    const char *replies[8];
    size_t n;
    char *lines[8];
    size_t got;
    pthread_t thread;
} script_t;

static void *script_main(void *arg)
{
    script_t *s = arg;

    for (size_t i = 0; i < s->n; i++) {
        char *line = read_line(s->w);
        if (!line)
            break;
        s->lines[s->got++] = line;
        if (s->replies[i] && !strcmp(s->replies[i], EOF_REPLY)) {
            shutdown(s->w->fd, SHUT_WR);
            break;
        }
        if (s->replies[i] && write(s->w->fd, s->replies[i], strlen(s->replies[i])) < 0)
            break;
    }
    return NULL;
}

static void script_start(script_t *s, fake_worker_t *w, size_t n, ...)
{
    va_list ap;

    memset(s, 0, sizeof(*s));
    s->w = w;
    s->n = n;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        s->replies[i] = va_arg(ap, const char *);
    va_end(ap);
    assert_int_equal(pthread_create(&s->thread, NULL, script_main, s), 0);
}

static void script_join(script_t *s)
{
    assert_int_equal(pthread_join(s->thread, NULL), 0);
}

static void script_free(script_t *s)
{
    for (size_t i = 0; i < s->got; i++)
        free(s->lines[i]);
    s->got = 0;
}

/* The script's i-th line is a next_task for (step, kind) with done (-1: without done). */
static void assert_next_task(script_t *s, size_t i, int64_t step, const char *kind, int64_t done)
{
    const cJSON *d;
    cJSON *j;

    assert_true(i < s->got);
    j = cJSON_Parse(s->lines[i]);
    if (!j)
        fail_msg("not JSON: %s", s->lines[i]);
    d = cJSON_GetObjectItemCaseSensitive(j, "done");
    assert_string_equal(jstr(j, "op"), "next_task");
    assert_true(jnum(j, "step") == (double)step);
    assert_string_equal(jstr(j, "kind"), kind);
    if (done < 0)
        assert_null(d);
    else
        assert_true(cJSON_IsNumber(d) && d->valuedouble == (double)done);
    cJSON_Delete(j);
}

/* One next_task against a script that answers its request with `reply`; checks the request. */
static int next_with_reply(fake_worker_t *w, tide_task_iter_t *it, uint64_t *id, const char *reply,
                           const char *kind, int64_t done)
{
    script_t s;
    int rc;

    script_start(&s, w, 1, reply);
    rc = tide_trainer_next_task(it, id);
    script_join(&s);
    assert_next_task(&s, 0, it->step, kind, done);
    script_free(&s);
    return rc;
}

static void test_tasks_local(void **state)
{
    static const uint64_t ids[] = {5, 3, 9};
    static uint64_t big[TIDE_TASKS_MAX_SHARE + 1];
    tide_task_iter_t it;
    uint64_t id = 77;
    (void)state;

    /* outside tide: the rank's own ids, in order, then 0 for good */
    assert_int_equal(tide_trainer_tasks_begin(NULL, &it, 0, TIDE_TRAINER_TASK_MEMBER, ids, 3, 3),
                     0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(tide_trainer_next_task(&it, &id), 1);
        assert_int_equal(id, ids[i]);
    }
    assert_int_equal(tide_trainer_next_task(&it, &id), 0);
    assert_int_equal(tide_trainer_next_task(&it, &id), 0);
    /* an empty share; the largest values */
    assert_int_equal(tide_trainer_tasks_begin(NULL, &it, 1, TIDE_TRAINER_TASK_DETACHED, NULL, 0, 1),
                     0);
    assert_int_equal(tide_trainer_next_task(&it, &id), 0);
    for (size_t i = 0; i < TIDE_TASKS_MAX_SHARE; i++)
        big[i] = ((UINT64_C(1) << 53) - 1) - i;
    assert_int_equal(tide_trainer_tasks_begin(NULL, &it, (INT64_C(1) << 53) - 1,
                                              TIDE_TRAINER_TASK_MEMBER, big, TIDE_TASKS_MAX_SHARE,
                                              TIDE_TASKS_MAX_TOTAL),
                     0);
    assert_int_equal(tide_trainer_next_task(&it, &id), 1);
    assert_int_equal(id, (UINT64_C(1) << 53) - 1);

    /* bad arguments: -EINVAL, also from every next_task after it */
#define BAD_BEGIN(step, kind, ids_, n, total)                                                      \
    do {                                                                                           \
        assert_int_equal(tide_trainer_tasks_begin(NULL, &it, step, kind, ids_, n, total),          \
                         -EINVAL);                                                                 \
        assert_int_equal(tide_trainer_next_task(&it, &id), -EINVAL);                               \
        assert_int_equal(tide_trainer_next_task(&it, &id), -EINVAL);                               \
    } while (0)
    BAD_BEGIN(-1, TIDE_TRAINER_TASK_MEMBER, ids, 3, 3);
    BAD_BEGIN(INT64_C(1) << 53, TIDE_TRAINER_TASK_MEMBER, ids, 3, 3);
    BAD_BEGIN(0, (tide_trainer_task_kind_t)0, ids, 3, 3);
    BAD_BEGIN(0, (tide_trainer_task_kind_t)3, ids, 3, 3);
    BAD_BEGIN(0, TIDE_TRAINER_TASK_MEMBER, ids, 3, 2); /* total < n */
    BAD_BEGIN(0, TIDE_TRAINER_TASK_MEMBER, ids, 0, 0); /* total < 1 */
    BAD_BEGIN(0, TIDE_TRAINER_TASK_MEMBER, ids, 3, TIDE_TASKS_MAX_TOTAL + 1);
    BAD_BEGIN(0, TIDE_TRAINER_TASK_MEMBER, NULL, 3, 3);
    BAD_BEGIN(0, TIDE_TRAINER_TASK_MEMBER, big, TIDE_TASKS_MAX_SHARE + 1, TIDE_TASKS_MAX_TOTAL);
    big[100] = big[7];
    BAD_BEGIN(0, TIDE_TRAINER_TASK_MEMBER, big, 200, 200); /* a repeated id */
    big[0] = UINT64_C(1) << 53;
    BAD_BEGIN(0, TIDE_TRAINER_TASK_MEMBER, big, 1, 8);
#undef BAD_BEGIN
    assert_int_equal(tide_trainer_tasks_begin(NULL, NULL, 0, TIDE_TRAINER_TASK_MEMBER, ids, 3, 3),
                     -EINVAL);
    assert_int_equal(tide_trainer_next_task(NULL, &id), -EINVAL);
    assert_int_equal(tide_trainer_tasks_begin(NULL, &it, 0, TIDE_TRAINER_TASK_MEMBER, ids, 3, 3),
                     0);
    assert_int_equal(tide_trainer_next_task(&it, NULL), -EINVAL);
}

/* The declaration's content, next_task with `done` = the task handed out before, tasks that are not
 * the rank's own (stolen), no_task ending the iteration for good; bad arguments are not sent. */
static void test_tasks_protocol(void **state)
{
    static const uint64_t ids[] = {0, 7, (UINT64_C(1) << 53) - 1};
    static uint64_t big[TIDE_TASKS_MAX_SHARE];
    fake_worker_t *w;
    tide_trainer_t *t = open_welcomed(&w, NULL);
    const cJSON *arr;
    tide_task_iter_t it;
    uint64_t id = 0;
    cJSON *j;
    (void)state;

    assert_int_equal(tide_trainer_tasks_begin(t, &it, 4, TIDE_TRAINER_TASK_DETACHED, ids, 3, 10),
                     0);
    j = next_json(w); /* begin does not wait for an answer: there is none when it is accepted */
    assert_string_equal(jstr(j, "op"), "tasks");
    assert_true(jnum(j, "step") == 4);
    assert_string_equal(jstr(j, "kind"), "detached");
    assert_true(jnum(j, "total") == 10);
    arr = cJSON_GetObjectItemCaseSensitive(j, "ids");
    assert_true(cJSON_IsArray(arr));
    assert_int_equal(cJSON_GetArraySize(arr), 3);
    for (int i = 0; i < 3; i++)
        assert_true(cJSON_GetArrayItem(arr, i)->valuedouble == (double)ids[i]);
    cJSON_Delete(j);
    assert_true(nothing_more(w));

    assert_int_equal(
        next_with_reply(w, &it, &id,
                        "{\"op\":\"task\",\"step\":4,\"kind\":\"detached\",\"id\":7}\n", "detached",
                        -1),
        1);
    assert_int_equal(id, 7);
    /* a task of another rank's share (stolen), near the largest id */
    assert_int_equal(next_with_reply(w, &it, &id,
                                     "{\"op\":\"task\",\"step\":4,\"kind\":\"detached\",\"id\":"
                                     "9007199254740990}\n",
                                     "detached", 7),
                     1);
    assert_int_equal(id, (UINT64_C(1) << 53) - 2);
    assert_int_equal(next_with_reply(w, &it, &id,
                                     "{\"op\":\"no_task\",\"step\":4,\"kind\":\"detached\"}\n",
                                     "detached", (INT64_C(1) << 53) - 2),
                     0);
    assert_int_equal(tide_trainer_next_task(&it, &id), 0); /* done: nothing more is sent */
    assert_true(nothing_more(w));

    /* member is the default kind of a reply; an empty share may still get tasks */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 5, TIDE_TRAINER_TASK_MEMBER, NULL, 0, 1), 0);
    j = next_json(w);
    assert_string_equal(jstr(j, "kind"), "member");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "ids")), 0);
    cJSON_Delete(j);
    assert_int_equal(
        next_with_reply(w, &it, &id, "{\"op\":\"task\",\"step\":5,\"id\":3}\n", "member", -1), 1);
    assert_int_equal(id, 3);
    assert_int_equal(next_with_reply(w, &it, &id, "{\"op\":\"no_task\",\"step\":5}\n", "member", 3),
                     0);

    /* bad arguments are not sent; the largest share that fits one line is */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 6, TIDE_TRAINER_TASK_MEMBER, ids, 3, 2),
                     -EINVAL);
    for (size_t i = 0; i < TIDE_TASKS_MAX_SHARE; i++)
        big[i] = ((UINT64_C(1) << 53) - 1) - i; /* 16 digits each: more than 64 KiB */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 6, TIDE_TRAINER_TASK_MEMBER, big,
                                              TIDE_TASKS_MAX_SHARE, TIDE_TASKS_MAX_TOTAL),
                     -EINVAL);
    assert_int_equal(tide_trainer_next_task(&it, &id), -EINVAL);
    assert_true(nothing_more(w));
    for (size_t i = 0; i < TIDE_TASKS_MAX_SHARE; i++)
        big[i] = UINT64_C(1000000000000) + i; /* 13 digits: about 57 KB */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 6, TIDE_TRAINER_TASK_MEMBER, big,
                                              TIDE_TASKS_MAX_SHARE, TIDE_TASKS_MAX_TOTAL),
                     0);
    j = next_json(w);
    arr = cJSON_GetObjectItemCaseSensitive(j, "ids");
    assert_int_equal(cJSON_GetArraySize(arr), TIDE_TASKS_MAX_SHARE);
    assert_true(cJSON_GetArrayItem(arr, 4095)->valuedouble == (double)big[4095]);
    cJSON_Delete(j);

    /* reports still flow on the same connection */
    tide_trainer_step(t, 5, TIDE_PHASE_FORWARD, 1, 1, 0);
    j = next_json(w);
    assert_string_equal(jstr(j, "op"), "step");
    cJSON_Delete(j);
    tide_trainer_close(t);
    worker_free(w);
}

/* next_task blocks until its answer arrives, which the fake sends only after reading the request;
 * commands arriving meanwhile are applied, and replies for another step or kind (one split across
 * writes) are not taken for the answer. */
static void test_tasks_wait_applies_commands(void **state)
{
    static const uint64_t ids[] = {1, 2};
    fake_worker_t *w;
    tide_trainer_t *t = open_welcomed(&w, NULL);
    tide_task_iter_t it;
    int64_t req = 0, deadline = 0;
    uint64_t id = 0;
    script_t s;
    (void)state;

    assert_int_equal(tide_trainer_tasks_begin(t, &it, 8, TIDE_TRAINER_TASK_MEMBER, ids, 2, 4), 0);
    free(read_line(w));
    put(w, "{\"op\":\"task\",\"step\":7,\"kind\":\"mem"); /* half of a stale reply */
    assert_int_equal(tide_trainer_poll(t), 0);
    assert_false(tide_trainer_checkpoint_requested(t, NULL, NULL));
    assert_false(tide_trainer_should_stop(t, 8));
    script_start(
        &s, w, 1,
        "ber\",\"id\":40}\n"
        "{\"op\":\"checkpoint_now\",\"id\":12,\"deadline_unix_ms\":1700000000123}\n"
        "{\"op\":\"task\",\"step\":8,\"kind\":\"detached\",\"id\":41}\n"
        "{\"op\":\"no_task\",\"step\":9}\n"
        "{\"op\":\"error\",\"code\":\"step_backwards\",\"message\":\"x\",\"ref\":\"step\"}\n"
        "{\"op\":\"stop_after_step\",\"step\":8}\n"
        "{\"op\":\"task\",\"step\":8,\"kind\":\"member\",\"id\":2}\n");
    assert_int_equal(tide_trainer_next_task(&it, &id), 1);
    script_join(&s);
    assert_next_task(&s, 0, 8, "member", -1);
    script_free(&s);
    assert_int_equal(id, 2);
    assert_true(tide_trainer_checkpoint_requested(t, &req, &deadline));
    assert_int_equal(req, 12);
    assert_int_equal(deadline, INT64_C(1700000000123));
    assert_true(tide_trainer_should_stop(t, 8));
    assert_false(tide_trainer_should_stop(t, 7));
    tide_trainer_close(t);
    worker_free(w);
}

/* A worker slow to read: the tasks line and the request queue behind a partly sent report, never
 * dropped, never split; the reply comes once the worker has read them. */
typedef struct drain {
    fake_worker_t *w;
    int lines, bad, tasks_ids;
    bool answered;
} drain_t;

static void *drain_main(void *arg)
{
    drain_t *d = arg;
    char *line;

    while ((line = read_line(d->w))) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(j, "op");
        d->lines++;
        if (!cJSON_IsString(op)) {
            d->bad++;
        } else if (!strcmp(op->valuestring, "tasks")) {
            d->tasks_ids = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "ids"));
        } else if (!strcmp(op->valuestring, "next_task")) {
            put(d->w, "{\"op\":\"no_task\",\"step\":3,\"kind\":\"member\"}\n");
            d->answered = true;
        }
        cJSON_Delete(j);
        free(line);
        if (d->answered)
            break;
    }
    return NULL;
}

static void test_tasks_slow_reader(void **state)
{
    static uint64_t ids[TIDE_TASKS_MAX_SHARE];
    fake_worker_t *w;
    tide_trainer_t *t = open_welcomed(&w, NULL);
    drain_t d = {.w = w};
    tide_task_iter_t it;
    pthread_t th;
    uint64_t id;
    (void)state;

    for (size_t i = 0; i < TIDE_TASKS_MAX_SHARE; i++)
        ids[i] = UINT64_C(1000000000000) + i;
    for (int i = 0; i < 50000; i++) /* fills the socket; a report is likely left partly sent */
        tide_trainer_step(t, i, TIDE_PHASE_FORWARD, 1e12, 1, 1);
    assert_int_equal(pthread_create(&th, NULL, drain_main, &d), 0);
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 3, TIDE_TRAINER_TASK_MEMBER, ids,
                                              TIDE_TASKS_MAX_SHARE, TIDE_TASKS_MAX_TOTAL),
                     0);
    assert_int_equal(tide_trainer_next_task(&it, &id), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(d.answered);
    assert_int_equal(d.bad, 0);
    assert_int_equal(d.tasks_ids, TIDE_TASKS_MAX_SHARE);
    assert_true(d.lines > 2);
    tide_trainer_close(t);
    worker_free(w);
}

/* The worker refuses: an error with ref next_task or tasks fails the iteration with -EPROTO
 * (sticky, nothing more sent for it); the connection stays up for the next step. */
static void test_tasks_refused(void **state)
{
    static const uint64_t ids[] = {4, 5};
    fake_worker_t *w;
    tide_trainer_t *t = open_welcomed(&w, NULL);
    tide_task_iter_t it;
    uint64_t id = 0;
    (void)state;

    /* the answer to the request */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 1, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    free(read_line(w));
    assert_int_equal(
        next_with_reply(w, &it, &id, "{\"op\":\"task\",\"step\":1,\"id\":4}\n", "member", -1), 1);
    assert_int_equal(
        next_with_reply(w, &it, &id,
                        "{\"op\":\"error\",\"code\":\"unknown_task\",\"message\":\"done: "
                        "task 4 was not handed to this rank\",\"ref\":\"next_task\"}\n",
                        "member", 4),
        -EPROTO);
    assert_int_equal(tide_trainer_next_task(&it, &id), -EPROTO);
    assert_true(nothing_more(w));

    /* the declaration refused, seen while waiting */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 2, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    free(read_line(w));
    assert_int_equal(
        next_with_reply(w, &it, &id,
                        "{\"op\":\"error\",\"code\":\"task_conflict\",\"message\":\"ids: "
                        "differ from the earlier declaration\",\"ref\":\"tasks\"}\n",
                        "member", -1),
        -EPROTO);
    /* ... and seen before the first next_task: that one is not even sent */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 3, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    free(read_line(w));
    put(w, "{\"op\":\"error\",\"code\":\"bad_field\",\"message\":\"total: too large\","
           "\"ref\":\"tasks\"}\n");
    assert_int_equal(tide_trainer_poll(t), 0);
    assert_int_equal(tide_trainer_next_task(&it, &id), -EPROTO);
    assert_true(nothing_more(w));
    /* a task reply without a valid id */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 4, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    free(read_line(w));
    assert_int_equal(
        next_with_reply(w, &it, &id, "{\"op\":\"task\",\"step\":4,\"id\":-1}\n", "member", -1),
        -EPROTO);
    /* the next step works */
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 5, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    free(read_line(w));
    assert_int_equal(
        next_with_reply(w, &it, &id, "{\"op\":\"task\",\"step\":5,\"id\":5}\n", "member", -1), 1);
    assert_int_equal(id, 5);
    assert_int_equal(tide_trainer_poll(t), 0);
    tide_trainer_close(t);
    worker_free(w);
}

/* The worker goes away mid-step: -EPIPE (sticky), never the local ids, since tasks may have moved;
 * the handle is a no-op afterwards and a later step iterates locally. */
static void test_tasks_worker_lost(void **state)
{
    static const uint64_t ids[] = {4, 5};
    fake_worker_t *w;
    tide_trainer_t *t;
    tide_task_iter_t it;
    uint64_t id = 0;
    script_t s;
    (void)state;

    assert_true(signal(SIGPIPE, SIG_DFL) != SIG_ERR);
    /* EOF while waiting for the answer */
    t = open_welcomed(&w, NULL);
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 1, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    free(read_line(w));
    assert_int_equal(
        next_with_reply(w, &it, &id, "{\"op\":\"task\",\"step\":1,\"id\":5}\n", "member", -1), 1);
    assert_int_equal(next_with_reply(w, &it, &id, EOF_REPLY, "member", 5), -EPIPE);
    assert_int_equal(tide_trainer_next_task(&it, &id), -EPIPE);
    assert_int_equal(tide_trainer_poll(t), -1);
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 2, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    assert_int_equal(tide_trainer_next_task(&it, &id), 1);
    assert_int_equal(id, 4);
    tide_trainer_close(t);
    worker_free(w);

    /* EOF after the declaration went out, before the first next_task */
    t = open_welcomed(&w, NULL);
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 1, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    free(read_line(w));
    close(w->fd);
    w->fd = -1;
    assert_int_equal(tide_trainer_next_task(&it, &id), -EPIPE);
    assert_int_equal(tide_trainer_next_task(&it, &id), -EPIPE);
    tide_trainer_close(t);
    worker_free(w);

    /* the answer arrives, then EOF: the answer counts */
    t = open_welcomed(&w, NULL);
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 1, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2), 0);
    free(read_line(w));
    script_start(&s, w, 2, "{\"op\":\"no_task\",\"step\":1}\n", EOF_REPLY);
    assert_int_equal(tide_trainer_next_task(&it, &id), 0);
    tide_trainer_step(t, 1, TIDE_PHASE_FORWARD, 1, 1, 0); /* the script reads it, then hangs up */
    script_join(&s);
    assert_int_equal(s.got, 2);
    script_free(&s);
    assert_int_equal(tide_trainer_poll(t), -1);
    tide_trainer_close(t);
    worker_free(w);
}

/* A worker that predates tasks answers unknown_op (without ref) to both lines: the rank runs its
 * own ids locally, says so once, and declares nothing more on that connection. */
static void test_tasks_old_worker(void **state)
{
    static const uint64_t ids[] = {6, 2};
    static const char unknown[] =
        "{\"op\":\"error\",\"code\":\"unknown_op\",\"message\":\"op: must be "
        "one of hello, step, phase, checkpoint, attach, exited\"}\n";
    fake_worker_t *w;
    tide_trainer_t *t = open_welcomed(&w, NULL);
    tide_task_iter_t it;
    uint64_t id = 0;
    script_t s;
    cJSON *j;
    (void)state;

    assert_int_equal(tide_trainer_tasks_begin(t, &it, 1, TIDE_TRAINER_TASK_MEMBER, ids, 2, 4), 0);
    put(w, unknown);                       /* the answer to `tasks` */
    script_start(&s, w, 2, NULL, unknown); /* reads tasks, then next_task and answers it */
    assert_int_equal(tide_trainer_next_task(&it, &id), 1);
    assert_int_equal(id, 6);
    script_join(&s);
    assert_int_equal(s.got, 2);
    assert_next_task(&s, 1, 1, "member", -1);
    script_free(&s);
    assert_int_equal(tide_trainer_next_task(&it, &id), 1);
    assert_int_equal(id, 2);
    assert_int_equal(tide_trainer_next_task(&it, &id), 0);
    assert_int_equal(tide_trainer_poll(t), 0); /* the second unknown_op is swallowed */
    assert_true(nothing_more(w));
    assert_int_equal(tide_trainer_tasks_begin(t, &it, 2, TIDE_TRAINER_TASK_MEMBER, ids, 2, 4), 0);
    assert_int_equal(tide_trainer_next_task(&it, &id), 1);
    assert_int_equal(id, 6);
    assert_true(nothing_more(w));
    tide_trainer_step(t, 2, TIDE_PHASE_FORWARD, 1, 1, 0);
    j = next_json(w);
    assert_string_equal(jstr(j, "op"), "step");
    cJSON_Delete(j);
    tide_trainer_close(t);
    worker_free(w);
}

/* --- phase-aware burst (docs/elastic.md, "Burst") ------------------------------------------- */

/* Outside tide: load_phase does nothing, is_burst reads TIDE_BURST ("1" only), tasks_join hands out
 * nothing (its arguments are still checked). */
static void test_burst_outside_tide(void **state)
{
    tide_task_iter_t it;
    uint64_t id = 77;
    (void)state;

    unsetenv("TIDE_AGENT_SOCK");
    tide_trainer_load_phase(NULL, true);
    tide_trainer_load_phase(NULL, false);
    unsetenv("TIDE_BURST");
    assert_false(tide_trainer_is_burst());
    setenv("TIDE_BURST", "1", 1);
    assert_true(tide_trainer_is_burst());
    setenv("TIDE_BURST", "0", 1);
    assert_false(tide_trainer_is_burst());
    setenv("TIDE_BURST", "", 1);
    assert_false(tide_trainer_is_burst());
    setenv("TIDE_BURST", "1 ", 1);
    assert_false(tide_trainer_is_burst());
    unsetenv("TIDE_BURST");
    assert_int_equal(tide_trainer_tasks_join(NULL, &it, 3, 5), 0);
    assert_int_equal(tide_trainer_next_task(&it, &id), 0);
    assert_int_equal(id, 77);
    assert_int_equal(tide_trainer_tasks_join(NULL, &it, 3, 0), -EINVAL);
    assert_int_equal(tide_trainer_next_task(&it, &id), -EINVAL);
    assert_int_equal(tide_trainer_tasks_join(NULL, &it, -1, 5), -EINVAL);
    assert_int_equal(tide_trainer_tasks_join(NULL, NULL, 3, 5), -EINVAL);
}

/* A burst process: its hello names TIDE_RANK (RANK, if any, is not its rank), load_phase sends
 * `load`, tasks_join declares an empty detached share and takes what the worker hands out; after
 * the worker went away load_phase is a no-op. A bad TIDE_RANK fails the open; an empty one counts
 * as unset. */
static void test_burst_protocol(void **state)
{
    fake_worker_t *w;
    tide_trainer_t *t;
    tide_task_iter_t it;
    uint64_t id = 0;
    cJSON *j;
    (void)state;

    setenv("TIDE_RANK", "5", 1); /* worker_new sets RANK=2 */
    t = open_welcomed(&w, NULL);
    j = cJSON_Parse(w->hello);
    assert_non_null(j);
    assert_true(jnum(j, "rank") == 5);
    cJSON_Delete(j);

    tide_trainer_load_phase(t, true);
    j = next_json(w);
    assert_string_equal(jstr(j, "op"), "load");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "high")));
    assert_int_equal(cJSON_GetArraySize(j), 2);
    cJSON_Delete(j);
    tide_trainer_load_phase(t, false);
    j = next_json(w);
    assert_string_equal(jstr(j, "op"), "load");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "high")));
    cJSON_Delete(j);
    assert_true(nothing_more(w));

    assert_int_equal(tide_trainer_tasks_join(t, &it, 3, 5), 0);
    j = next_json(w);
    assert_string_equal(jstr(j, "op"), "tasks");
    assert_true(jnum(j, "step") == 3);
    assert_string_equal(jstr(j, "kind"), "detached");
    assert_true(jnum(j, "total") == 5);
    assert_true(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "ids")));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "ids")), 0);
    cJSON_Delete(j);
    assert_int_equal(
        next_with_reply(w, &it, &id,
                        "{\"op\":\"task\",\"step\":3,\"kind\":\"detached\",\"id\":4}\n", "detached",
                        -1),
        1);
    assert_int_equal(id, 4);
    assert_int_equal(next_with_reply(w, &it, &id,
                                     "{\"op\":\"no_task\",\"step\":3,\"kind\":\"detached\"}\n",
                                     "detached", 4),
                     0);
    /* the worker goes away: a no-op, no SIGPIPE */
    assert_true(signal(SIGPIPE, SIG_DFL) != SIG_ERR);
    close(w->fd);
    w->fd = -1;
    assert_int_equal(tide_trainer_poll(t), -1);
    tide_trainer_load_phase(t, true);
    tide_trainer_close(t);
    worker_free(w);

    /* TIDE_RANK, once set, must be valid: RANK is no fallback */
    w = worker_new();
    setenv("TIDE_RANK", "x", 1);
    assert_null(tide_trainer_open());
    setenv("TIDE_RANK", "", 1); /* empty: unset */
    worker_start(w, "{\"op\":\"welcome\",\"v\":1,\"worker\":\"w/gpu0\"}\n");
    t = tide_trainer_open();
    worker_join(w);
    assert_non_null(t);
    j = cJSON_Parse(w->hello);
    assert_true(jnum(j, "rank") == 2);
    cJSON_Delete(j);
    tide_trainer_close(t);
    worker_free(w);
    unsetenv("TIDE_RANK");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outside_tide),
        cmocka_unit_test(test_open_failures),
        cmocka_unit_test(test_hello_and_reports),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_worker_closes),
        cmocka_unit_test(test_worker_does_not_read),
        cmocka_unit_test(test_tasks_local),
        cmocka_unit_test(test_tasks_protocol),
        cmocka_unit_test(test_tasks_wait_applies_commands),
        cmocka_unit_test(test_tasks_slow_reader),
        cmocka_unit_test(test_tasks_refused),
        cmocka_unit_test(test_tasks_worker_lost),
        cmocka_unit_test(test_tasks_old_worker),
        cmocka_unit_test(test_burst_outside_tide),
        cmocka_unit_test(test_burst_protocol),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

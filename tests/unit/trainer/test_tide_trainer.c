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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outside_tide),
        cmocka_unit_test(test_open_failures),
        cmocka_unit_test(test_hello_and_reports),
        cmocka_unit_test(test_commands),
        cmocka_unit_test(test_worker_closes),
        cmocka_unit_test(test_worker_does_not_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

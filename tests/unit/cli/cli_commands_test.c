/* Whole tidectl commands through tide_cli_main against the in-process fake transport (fake_rpc.h):
 * what goes on the wire, what the user sees on stdout and stderr, and the exit code. Every command must
 * leave no client behind (its loop closed). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli.h"
#include "cli_run.h"
#include "fake_rpc.h"
#include "tide/v1/cluster_service.pb-c.h"
#include "tide/v1/job_service.pb-c.h"
#include "tide/v1/types.pb-c.h"

#define NOW_MS CLI_RUN_NOW_MS

static const char *env_scheduler, *env_token;
static const char *env_insecure; /* TIDE_INSECURE */
static bool err_tty;             /* run() tells the command that stderr is a terminal */
static int64_t (*clock_fn)(void); /* run()'s clock; NULL: the fixed one */

/* Runs "tidectl ARGS..." (NULL-terminated) with this file's environment and captures its output. */
static result_t run(const char *first, ...)
{
    cli_env_t env = {.scheduler = env_scheduler, .token = env_token, .insecure = env_insecure,
                     .cwd = "/home/u/exp", .now_ms = clock_fn, .err_tty = err_tty};
    va_list ap;
    result_t r;

    va_start(ap, first);
    r = cli_vrun(&env, first, ap);
    va_end(ap);
    return r;
}

static int setup(void **state)
{
    (void)state;
    fake_rpc_reset();
    env_scheduler = NULL;
    env_token = NULL;
    env_insecure = NULL;
    err_tty = false;
    clock_fn = NULL;
    return 0;
}

/* ---- fixtures ---- */

static Tide__V1__JobSpec spec_fixture(void)
{
    Tide__V1__JobSpec s = TIDE__V1__JOB_SPEC__INIT;
    static char *cmd[] = {"python3", "train.py"};

    s.name = "mnist";
    s.n_command = 2, s.command = cmd;
    s.min_workers = 2, s.max_workers = 2;
    return s;
}

static void send_job(fake_call_t *call, const char *id, int state, int gen, const char *message)
{
    Tide__V1__JobSpec s = spec_fixture();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    char *wids[] = {"node1/gpu0", "node1/gpu1"};

    j.id = (char *)id;
    j.spec = &s;
    j.state = state;
    j.generation = gen;
    if (gen > 0) {
        j.n_worker_ids = 2;
        j.worker_ids = wids;
    }
    j.message = (char *)(message ? message : "");
    j.submit_time_ms = NOW_MS - 65000;
    j.failed_rank = -1;
    fake_call_send(call, &j.base);
}

/* ---- help and usage ---- */

static void test_help_and_usage(void **state)
{
    result_t r;
    (void)state;

    r = run("--help", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "Usage: tidectl [GLOBAL OPTIONS] COMMAND"));
    assert_non_null(strstr(r.out, "  submit      Submit a job\n"));
    assert_non_null(strstr(r.out, "  checkpoint  Ask a running job for a checkpoint now\n"));
    expect_str(r.err, "");
    result_free(&r);

    r = run(NULL);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "Usage: tidectl"));
    result_free(&r);

    r = run("bogus", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: unknown command 'bogus'\nRun 'tidectl --help' for usage.\n");
    result_free(&r);

    r = run("submit", "--help", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "Usage: tidectl submit [OPTIONS] [--] CMD [ARGS...]"));
    assert_non_null(strstr(r.out, "  -n, --workers N"));
    assert_non_null(strstr(r.out, "      --scheduler HOST:PORT"));
    result_free(&r);

    r = run("help", "logs", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "Usage: tidectl logs ID [--rank R]... [-f]"));
    result_free(&r);

    r = run("jobs", "--bogus", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: unknown option '--bogus'\nRun 'tidectl jobs --help' for usage.\n");
    result_free(&r);

    r = run("-o", "yaml", "jobs", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad --output 'yaml' (one of table, json)\nRun 'tidectl --help' for usage.\n");
    result_free(&r);

    r = run("jobs", "--state", "runing", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: unknown job state 'runing' (one of pending, running, succeeded, failed, "
                      "cancelled)\nRun 'tidectl jobs --help' for usage.\n");
    result_free(&r);

    r = run("job", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: missing job ID\nRun 'tidectl job --help' for usage.\n");
    result_free(&r);

    r = run("job", "1", "2", NULL);
    assert_int_equal(r.rc, 2);
    result_free(&r);

    r = run("logs", "5", "--rank", "x", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad --rank 'x': expected a rank number (0 or more)\n"
                      "Run 'tidectl logs --help' for usage.\n");
    result_free(&r);

    /* Usage errors never reach the network. */
    r = run("submit", "--time", "5x", "--", "true", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad --time '5x': expected e.g. 90s, 15m, 2h, 1h30m, 1d, MM:SS, HH:MM:SS or "
                      "D-HH:MM:SS\nRun 'tidectl submit --help' for usage.\n");
    result_free(&r);
    r = run("submit", "--workers", "2", NULL);
    assert_int_equal(r.rc, 2);
    result_free(&r);
    r = run("--scheduler", "a:b:c", "status", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad scheduler address 'a:b:c': IPv6 addresses need brackets, as in [::1]:7070\n"
                      "Run 'tidectl --help' for usage.\n");
    result_free(&r);
    assert_null(fake_rpc_last_hostport());
}

/* ---- submit ---- */

static void submit_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__SubmitJobRequest *r = tide__v1__submit_job_request__unpack(NULL, len, req);
    Tide__V1__JobSpec **seen = ud;

    assert_non_null(r);
    assert_non_null(r->spec);
    *seen = r->spec;
    r->spec = NULL;
    tide__v1__submit_job_request__free_unpacked(r, NULL);
    send_job(call, "17", TIDE__V1__JOB_STATE__JOB_STATE_PENDING, 0, "queued");
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_submit(void **state)
{
    Tide__V1__JobSpec *seen = NULL;
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/SubmitJob", submit_handler, &seen);
    env_scheduler = "envhost:9000";
    env_token = "  s3cret \n";
    env_insecure = "1"; /* plaintext to a non-loopback scheduler (docs/security.md) */
    r = run("submit", "--min", "2", "--max", "4", "-e", "A=1", "--priority", "high", "-t", "1:30:00", "/usr/bin/python3",
            "train.py", "--epochs", "3", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "17\n");
    expect_str(r.err, "");
    expect_str(fake_rpc_last_hostport(), "envhost:9000");
    expect_str(fake_rpc_last_token(), "s3cret");
    assert_non_null(seen);
    assert_string_equal(seen->name, "python3");
    assert_int_equal(seen->n_command, 4);
    assert_string_equal(seen->command[2], "--epochs");
    assert_int_equal(seen->min_workers, 2);
    assert_int_equal(seen->max_workers, 4);
    assert_int_equal(seen->priority, TIDE__V1__PRIORITY__PRIORITY_HIGH);
    assert_int_equal(seen->n_env, 1);
    assert_string_equal(seen->workdir, "/home/u/exp");
    assert_int_equal(seen->time_limit_seconds, 5400);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);

    /* The flag wins over the environment; -o json after the command prints the Job. */
    seen = NULL;
    r = run("--scheduler", "flaghost:7000", "submit", "-o", "json", "--", "true", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(fake_rpc_last_hostport(), "flaghost:7000");
    expect_str(r.out, "{\n"
                      "  \"id\": \"17\",\n"
                      "  \"spec\": {\n"
                      "    \"name\": \"mnist\",\n"
                      "    \"command\": [\n"
                      "      \"python3\",\n"
                      "      \"train.py\"\n"
                      "    ],\n"
                      "    \"minWorkers\": 2,\n"
                      "    \"maxWorkers\": 2\n"
                      "  },\n"
                      "  \"state\": \"JOB_STATE_PENDING\",\n"
                      "  \"message\": \"queued\",\n"
                      "  \"submitTimeMs\": \"1714564735000\",\n"
                      "  \"failedRank\": -1\n"
                      "}\n");
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);
}

static void test_submit_from_file(void **state)
{
    Tide__V1__JobSpec *seen = NULL;
    char path[] = "/tmp/tidectl-spec-XXXXXX";
    const char *json = "{\"name\": \"from-file\", \"command\": [\"bash\", \"run.sh\"], \"minWorkers\": 3,"
                       " \"env\": {\"X\": \"1\"}, \"timeLimitSeconds\": \"60\","
                       " \"checkpointIntervalSeconds\": \"300\"}";
    int fd = mkstemp(path);
    result_t r;
    (void)state;

    assert_true(fd >= 0);
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    fake_rpc_route("/tide.v1.JobService/SubmitJob", submit_handler, &seen);
    r = run("submit", "-f", path, "--env", "Y=2", NULL);
    assert_int_equal(r.rc, 0);
    assert_string_equal(seen->name, "from-file");
    assert_int_equal(seen->n_command, 2);
    assert_int_equal(seen->min_workers, 3);
    assert_int_equal(seen->max_workers, 0); /* "0 means min_workers": left as the file had it */
    assert_int_equal(seen->n_env, 2);
    assert_int_equal(seen->time_limit_seconds, 60);
    assert_int_equal(seen->checkpoint_interval_seconds, 300);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);

    /* An option overrides the file's value. */
    seen = NULL;
    r = run("submit", "-f", path, "--ckpt-interval", "off", NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(seen->checkpoint_interval_seconds, -1);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);

    /* A bad file is reported with the field at fault, before anything is sent. */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "{\"minWorkers\": \"x\"}", 19), 19);
    close(fd);
    r = run("submit", "-f", path, NULL);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.err, ": minWorkers: expected an integer\n"));
    assert_int_equal(fake_rpc_count("/tide.v1.JobService/SubmitJob"), 2);
    result_free(&r);
    unlink(path);
}

/* submit --wait: the watch replays one event per job step; each GetJob answers the next state. */
typedef struct wait_script {
    int step, n;
    struct {
        int state, gen;
        const char *message;
        int events_after; /* events to push on the watch after this answer */
    } steps[8];
    fake_call_t *watch;
    tide_grpc_code_t watch_end; /* != OK: end the watch with this after the first event */
} wait_script_t;

static void push_event(wait_script_t *s, const char *type)
{
    Tide__V1__Event ev = TIDE__V1__EVENT__INIT;

    if (!fake_call_alive(s->watch))
        return;
    ev.seq = (uint64_t)s->step + 1;
    ev.type = (char *)type;
    ev.job_id = "17";
    fake_call_send(s->watch, &ev.base);
}

static void wait_watch_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    wait_script_t *s = ud;
    Tide__V1__WatchEventsRequest *r = tide__v1__watch_events_request__unpack(NULL, len, req);

    assert_string_equal(r->job_id, "17");
    assert_true(r->follow);
    assert_int_equal(r->since_seq, 0);
    tide__v1__watch_events_request__free_unpacked(r, NULL);
    s->watch = call;
    push_event(s, "job.submitted");
    if (s->watch_end != TIDE_GRPC_OK)
        fake_call_finish(call, s->watch_end, "connection lost");
}

static void wait_get_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    wait_script_t *s = ud;
    int i = s->step < s->n ? s->step++ : s->n - 1;

    (void)req, (void)len;
    send_job(call, "17", s->steps[i].state, s->steps[i].gen, s->steps[i].message);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
    for (int k = 0; k < s->steps[i].events_after; k++)
        push_event(s, "job.changed");
}

static void test_submit_wait(void **state)
{
    Tide__V1__JobSpec *seen = NULL;
    wait_script_t s = {.n = 5,
                       .steps = {{TIDE__V1__JOB_STATE__JOB_STATE_PENDING, 0, "queued", 1},
                                 /* two events at once: coalesced into one more GetJob */
                                 {TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, 1, NULL, 2},
                                 {TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, 1, NULL, 1},
                                 {TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, 2, "migrated", 1},
                                 {TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED, 2, NULL, 0}}};
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/SubmitJob", submit_handler, &seen);
    fake_rpc_route("/tide.v1.JobService/WatchEvents", wait_watch_handler, &s);
    fake_rpc_route("/tide.v1.JobService/GetJob", wait_get_handler, &s);
    r = run("submit", "--wait", "-n", "2", "--", "python3", "train.py", NULL);
    expect_str(r.out, "job 17: PENDING (queued)\n"
                      "job 17: RUNNING on node1/gpu0,node1/gpu1 (generation 1)\n"
                      "job 17: RUNNING on node1/gpu0,node1/gpu1 (generation 2)\n"
                      "job 17: SUCCEEDED\n");
    expect_str(r.err, "");
    assert_int_equal(r.rc, 0);
    assert_int_equal(fake_rpc_count("/tide.v1.JobService/GetJob"), 5);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);
}

static void test_submit_wait_failed(void **state)
{
    Tide__V1__JobSpec *seen = NULL;
    wait_script_t s = {.n = 2,
                       .steps = {{TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, 1, NULL, 1},
                                 {TIDE__V1__JOB_STATE__JOB_STATE_FAILED, 1, "rank 1 exited with code 3", 0}}};
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/SubmitJob", submit_handler, &seen);
    fake_rpc_route("/tide.v1.JobService/WatchEvents", wait_watch_handler, &s);
    fake_rpc_route("/tide.v1.JobService/GetJob", wait_get_handler, &s);
    r = run("submit", "-W", "-o", "json", "--", "false", NULL);
    assert_int_equal(r.rc, 1);
    /* One JSON object per line: the submitted job, then each change. */
    assert_non_null(strstr(r.out, "{\"id\":\"17\""));
    assert_non_null(strstr(r.out, "\"state\":\"JOB_STATE_FAILED\""));
    assert_non_null(strstr(r.out, "\"message\":\"rank 1 exited with code 3\""));
    {
        int lines = 0;
        for (const char *p = r.out; *p; p++)
            lines += *p == '\n';
        assert_int_equal(lines, 3);
    }
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);
}

static void test_submit_wait_stream_lost(void **state)
{
    Tide__V1__JobSpec *seen = NULL;
    wait_script_t s = {.n = 1,
                       .steps = {{TIDE__V1__JOB_STATE__JOB_STATE_PENDING, 0, "queued", 0}},
                       .watch_end = TIDE_GRPC_UNAVAILABLE};
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/SubmitJob", submit_handler, &seen);
    fake_rpc_route("/tide.v1.JobService/WatchEvents", wait_watch_handler, &s);
    fake_rpc_route("/tide.v1.JobService/GetJob", wait_get_handler, &s);
    r = run("submit", "--wait", "--", "sleep", "1000", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "job 17: PENDING (queued)\n");
    expect_str(r.err, "tidectl: UNAVAILABLE: connection lost\n");
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);
}

/* ---- jobs, job, cancel ---- */

typedef struct pages {
    int calls;
    const char *tokens[4]; /* next_page_token per page */
    char seen_tokens[4][16];
    size_t seen_states;
} pages_t;

static void list_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    pages_t *p = ud;
    Tide__V1__ListJobsRequest *r = tide__v1__list_jobs_request__unpack(NULL, len, req);
    Tide__V1__ListJobsResponse resp = TIDE__V1__LIST_JOBS_RESPONSE__INIT;
    Tide__V1__JobSpec s = spec_fixture();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__Job *jobs[] = {&j};
    char id[16];
    int i = p->calls++;

    snprintf(p->seen_tokens[i], sizeof(p->seen_tokens[i]), "%s", r->page_token);
    p->seen_states = r->n_states;
    tide__v1__list_jobs_request__free_unpacked(r, NULL);
    snprintf(id, sizeof(id), "%d", i + 1);
    j.id = id, j.spec = &s, j.state = TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED, j.generation = 1;
    j.submit_time_ms = NOW_MS - 7200000;
    resp.n_jobs = 1, resp.jobs = jobs;
    resp.next_page_token = (char *)p->tokens[i];
    fake_call_send(call, &resp.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_jobs_pages(void **state)
{
    pages_t p = {.tokens = {"p2", "p3", ""}};
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/ListJobs", list_handler, &p);
    r = run("jobs", "--state", "succeeded,failed", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "ID   NAME    OWNER   STATE       WORKERS   GEN   STEP   AGE   MESSAGE\n"
                      "1    mnist   -       SUCCEEDED   0/2       1     -      2h\n"
                      "2    mnist   -       SUCCEEDED   0/2       1     -      2h\n"
                      "3    mnist   -       SUCCEEDED   0/2       1     -      2h\n");
    assert_int_equal(p.calls, 3);
    assert_string_equal(p.seen_tokens[0], "");
    assert_string_equal(p.seen_tokens[1], "p2");
    assert_string_equal(p.seen_tokens[2], "p3");
    assert_int_equal(p.seen_states, 2);
    result_free(&r);

    /* -A overrides --state; -o json is one document with every page's jobs. */
    memset(&p, 0, sizeof(p));
    p.tokens[0] = "p2", p.tokens[1] = "";
    r = run("jobs", "--state", "failed", "-A", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(p.seen_states, 0);
    assert_non_null(strstr(r.out, "{\n  \"jobs\": [\n    {\n      \"id\": \"1\""));
    assert_non_null(strstr(r.out, "\"id\": \"2\""));
    assert_null(strstr(r.out, "nextPageToken"));
    result_free(&r);

    /* A scheduler that repeats a page token is not followed forever. */
    memset(&p, 0, sizeof(p));
    p.tokens[0] = "same", p.tokens[1] = "same";
    r = run("jobs", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: INTERNAL: the scheduler's job list does not end (page token 'same' repeats)\n");
    result_free(&r);
}

static void empty_list_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__ListJobsResponse resp = TIDE__V1__LIST_JOBS_RESPONSE__INIT;
    (void)req, (void)len, (void)ud;
    fake_call_send(call, &resp.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_jobs_empty(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/ListJobs", empty_list_handler, NULL);
    r = run("jobs", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "");
    expect_str(r.err, "No jobs found.\n");
    result_free(&r);
}

static void not_found_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__GetJobRequest *r = tide__v1__get_job_request__unpack(NULL, len, req);
    char msg[64];

    (void)ud;
    snprintf(msg, sizeof(msg), "job %s not found", r->id);
    tide__v1__get_job_request__free_unpacked(r, NULL);
    fake_call_finish(call, TIDE_GRPC_NOT_FOUND, msg);
}

static void get_job_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    (void)req, (void)len, (void)ud;
    send_job(call, "17", TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, 1, NULL);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_job(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/GetJob", get_job_handler, NULL);
    r = run("job", "17", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "ID:           17\nName:         mnist\nState:        RUNNING\n"));
    assert_non_null(strstr(r.out, "Submitted:    2024-05-01 11:58:55 (1m ago)\n"));
    result_free(&r);

    fake_rpc_reset();
    fake_rpc_route("/tide.v1.JobService/GetJob", not_found_handler, NULL);
    r = run("job", "42", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    expect_str(r.err, "tidectl: NOT_FOUND: job 42 not found\n");
    result_free(&r);
}

static void garbage_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    (void)req, (void)len, (void)ud;
    fake_call_send_raw(call, "\xff\xff\xff", 3);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_errors(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_refuse(-ECONNREFUSED);
    r = run("status", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: UNAVAILABLE: cannot reach scheduler at 127.0.0.1:7070: connection refused\n");
    result_free(&r);

    fake_rpc_reset();
    fake_rpc_route("/tide.v1.JobService/GetJob", garbage_handler, NULL);
    r = run("job", "1", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: INTERNAL: malformed tide.v1.Job from the scheduler\n");
    result_free(&r);

    /* No route: the fake answers UNIMPLEMENTED like a scheduler without the method. */
    r = run("workers", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: UNIMPLEMENTED: no route in the fake\n");
    result_free(&r);

    r = run("--token-file", "/nonexistent/token", "status", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: cannot read token file /nonexistent/token: No such file or directory\n");
    result_free(&r);
}

static void cancel_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__CancelJobRequest *r = tide__v1__cancel_job_request__unpack(NULL, len, req);

    (void)ud;
    if (strcmp(r->id, "17") == 0) {
        send_job(call, "17", TIDE__V1__JOB_STATE__JOB_STATE_CANCELLED, 1, "cancelled by user");
        fake_call_finish(call, TIDE_GRPC_OK, NULL);
    } else if (strcmp(r->id, "18") == 0) {
        send_job(call, "18", TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, 1, NULL);
        fake_call_finish(call, TIDE_GRPC_OK, NULL);
    } else {
        fake_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, "job 5 already ended");
    }
    tide__v1__cancel_job_request__free_unpacked(r, NULL);
}

static void test_cancel(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/CancelJob", cancel_handler, NULL);
    r = run("cancel", "17", "5", "18", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "job 17 cancelled\njob 18: cancellation requested (state RUNNING)\n");
    expect_str(r.err, "tidectl: FAILED_PRECONDITION: job 5 already ended\n");
    result_free(&r);
}

/* ---- checkpoint ---- */

#define CKPT_REQ 1714564790000ULL

typedef enum ckpt_outcome { CKPT_COMPLETE, CKPT_MISSED, CKPT_JOB_FAILED, CKPT_GET_FAILS } ckpt_outcome_t;

typedef struct ckpt_script {
    char id_seen[32];
    int64_t deadline_seen;
    int gets;           /* GetJob calls answered */
    int pending_gets;   /* how many of them still show the request in flight */
    ckpt_outcome_t outcome;
    bool sdk;           /* the ranks report through the trainer SDK */
    bool no_request;    /* CheckpointJob answers without a request id */
    const char *reply_id; /* the job id in answers; NULL: "17" */
} ckpt_script_t;

static void send_ckpt_job(fake_call_t *call, const ckpt_script_t *s, bool pending)
{
    Tide__V1__JobSpec spec = spec_fixture();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__JobRank r0 = TIDE__V1__JOB_RANK__INIT, r1 = TIDE__V1__JOB_RANK__INIT;
    Tide__V1__JobRank *ranks[] = {&r0, &r1};
    Tide__V1__TrainerProgress p = TIDE__V1__TRAINER_PROGRESS__INIT;
    Tide__V1__Checkpoint c = TIDE__V1__CHECKPOINT__INIT;

    j.id = (char *)(s->reply_id ? s->reply_id : "17"), j.spec = &spec;
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, j.generation = 1;
    j.failed_rank = -1, j.message = "";
    r0.rank = 0, r0.worker_id = "node1/gpu0", r0.phase = TIDE__V1__RANK_PHASE__RANK_PHASE_RUNNING;
    r1.rank = 1, r1.worker_id = "node1/gpu1", r1.phase = TIDE__V1__RANK_PHASE__RANK_PHASE_RUNNING;
    p.sdk = 1, p.step = 1200, p.phase = TIDE__V1__TRAINER_PHASE__TRAINER_PHASE_UPDATE;
    if (s->sdk)
        r0.progress = r1.progress = &p;
    j.n_ranks = 2, j.ranks = ranks;
    /* The trainer's own checkpoint from before. */
    c.step = 1100, c.generation = 1, c.ranks = 2, c.bytes = 1024, c.path = "/ckpt/17/step-1100";
    c.time_ms = NOW_MS - 60000;
    j.last_checkpoint = &c;
    if (pending && !s->no_request) {
        j.checkpoint_request = CKPT_REQ;
        j.checkpoint_deadline_ms = NOW_MS + (s->deadline_seen ? s->deadline_seen : 60000);
    } else if (!pending && s->outcome == CKPT_COMPLETE) {
        c.step = 1200, c.bytes = 2048, c.path = "/ckpt/17/step-1200", c.time_ms = NOW_MS, c.request_id = CKPT_REQ;
    } else if (!pending && s->outcome == CKPT_JOB_FAILED) {
        j.state = TIDE__V1__JOB_STATE__JOB_STATE_FAILED, j.message = "rank 1 exited with code 3";
    }
    fake_call_send(call, &j.base);
}

static void checkpoint_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    ckpt_script_t *s = ud;
    Tide__V1__CheckpointJobRequest *r = tide__v1__checkpoint_job_request__unpack(NULL, len, req);

    assert_non_null(r);
    snprintf(s->id_seen, sizeof(s->id_seen), "%s", r->id);
    s->deadline_seen = r->deadline_ms;
    if (strcmp(r->id, "17") == 0) {
        send_ckpt_job(call, s, true);
        fake_call_finish(call, TIDE_GRPC_OK, NULL);
    } else if (strcmp(r->id, "18") == 0) {
        fake_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, "job 18 is PENDING: only a running job can checkpoint");
    } else {
        char msg[64];
        snprintf(msg, sizeof(msg), "job %s not found", r->id);
        fake_call_finish(call, TIDE_GRPC_NOT_FOUND, msg);
    }
    tide__v1__checkpoint_job_request__free_unpacked(r, NULL);
}

static void checkpoint_get_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    ckpt_script_t *s = ud;

    (void)req, (void)len;
    s->gets++;
    if (s->gets > s->pending_gets && s->outcome == CKPT_GET_FAILS) {
        fake_call_finish(call, TIDE_GRPC_UNAVAILABLE, "scheduler shutting down");
        return;
    }
    send_ckpt_job(call, s, s->gets <= s->pending_gets);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void route_checkpoint(ckpt_script_t *s)
{
    fake_rpc_route("/tide.v1.JobService/CheckpointJob", checkpoint_handler, s);
    fake_rpc_route("/tide.v1.JobService/GetJob", checkpoint_get_handler, s);
}

static void test_checkpoint_usage(void **state)
{
    result_t r;
    (void)state;

    r = run("checkpoint", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: missing job ID\nRun 'tidectl checkpoint --help' for usage.\n");
    result_free(&r);
    r = run("checkpoint", "17", "18", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: unexpected argument '18'\nRun 'tidectl checkpoint --help' for usage.\n");
    result_free(&r);
    r = run("checkpoint", "17", "--deadline", "5x", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad --deadline '5x': expected e.g. 30s, 5m, 1h or MM:SS\n"
                      "Run 'tidectl checkpoint --help' for usage.\n");
    result_free(&r);
    /* 0 would mean the scheduler's default: not what someone typing it wants. */
    static const char *const out_of_range[] = {"0", "unlimited", "1d1s", "2d"};
    for (size_t i = 0; i < 4; i++) {
        char want[160];
        r = run("checkpoint", "--deadline", out_of_range[i], "17", NULL);
        assert_int_equal(r.rc, 2);
        snprintf(want, sizeof(want),
                 "tidectl: bad --deadline '%s': must be from 1s to 1d\nRun 'tidectl checkpoint --help' for usage.\n",
                 out_of_range[i]);
        expect_str(r.err, want);
        result_free(&r);
    }
    r = run("checkpoint", "17", "--follow", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: unknown option '--follow'\nRun 'tidectl checkpoint --help' for usage.\n");
    result_free(&r);
    r = run("checkpoint", "--help", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "Usage: tidectl checkpoint ID [--deadline DURATION] [-W]\n"));
    assert_non_null(strstr(r.out, "      --deadline DURATION"));
    assert_non_null(strstr(r.out, "  -W, --wait"));
    result_free(&r);
    /* None of that reached the network. */
    assert_null(fake_rpc_last_hostport());
}

static void test_checkpoint(void **state)
{
    ckpt_script_t s = {.sdk = true};
    result_t r;
    (void)state;

    route_checkpoint(&s);
    r = run("checkpoint", "17", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 17: checkpoint requested (request 1714564790000, deadline in 60s)\n");
    expect_str(r.err, "");
    expect_str(s.id_seen, "17");
    assert_int_equal(s.deadline_seen, 0); /* the scheduler's default */
    assert_int_equal(fake_rpc_count("/tide.v1.JobService/GetJob"), 0);
    result_free(&r);

    r = run("checkpoint", "--deadline", "5m", "17", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 17: checkpoint requested (request 1714564790000, deadline in 300s)\n");
    assert_int_equal(s.deadline_seen, 300000);
    result_free(&r);
    r = run("checkpoint", "17", "--deadline=1d", NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(s.deadline_seen, 86400000);
    result_free(&r);

    /* -o json: the returned Job. */
    s.deadline_seen = 0;
    r = run("checkpoint", "17", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "{\n  \"id\": \"17\",\n", 16) == 0);
    assert_non_null(strstr(r.out, "\n  \"checkpointRequest\": \"1714564790000\",\n"));
    assert_non_null(strstr(r.out, "\"phase\": \"TRAINER_PHASE_UPDATE\""));
    result_free(&r);

    /* A job whose ranks do not use the SDK: the request goes out, with a note. */
    s.sdk = false;
    r = run("checkpoint", "17", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 17: checkpoint requested (request 1714564790000, deadline in 60s)\n");
    expect_str(r.err, "tidectl: note: no rank of job 17 has reported through the trainer SDK yet; only SDK "
                      "trainers checkpoint on request (docs/trainer-api.md)\n");
    result_free(&r);

    /* The scheduler's refusals, as every command reports them. */
    r = run("checkpoint", "42", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    expect_str(r.err, "tidectl: NOT_FOUND: job 42 not found\n");
    result_free(&r);
    r = run("checkpoint", "18", "--wait", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    expect_str(r.err, "tidectl: FAILED_PRECONDITION: job 18 is PENDING: only a running job can checkpoint\n");
    result_free(&r);
    s.no_request = true;
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: INTERNAL: the scheduler accepted the checkpoint of job 17 but named no request\n");
    result_free(&r);
    assert_int_equal(fake_rpc_count("/tide.v1.JobService/GetJob"), 0);
}

static void test_checkpoint_wait(void **state)
{
    ckpt_script_t s = {.sdk = true, .pending_gets = 2, .outcome = CKPT_COMPLETE};
    result_t r;
    (void)state;

    route_checkpoint(&s);
    r = run("checkpoint", "17", "--wait", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 17: checkpoint requested (request 1714564790000, deadline in 60s)\n"
                      "job 17: checkpoint of step 1200 complete (2 ranks, 2048 bytes, /ckpt/17/step-1200)\n");
    expect_str(r.err, ""); /* not a terminal: no progress line */
    assert_int_equal(s.gets, 3);
    result_free(&r);

    /* -o json: only the final Job, whose last checkpoint answers the request. */
    s.gets = 0;
    r = run("checkpoint", "17", "-W", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "{\n  \"id\": \"17\",\n", 16) == 0);
    assert_non_null(strstr(r.out, "\"requestId\": \"1714564790000\""));
    assert_null(strstr(r.out, "checkpointRequest"));
    assert_null(strstr(r.out, "}\n{"));
    expect_str(r.err, "");
    result_free(&r);

    /* Missed: the request ends without a checkpoint answering it. */
    s.gets = 0, s.outcome = CKPT_MISSED;
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "job 17: checkpoint requested (request 1714564790000, deadline in 60s)\n"
                      "job 17: checkpoint request 1714564790000 missed (job RUNNING; no complete checkpoint "
                      "before the deadline)\n");
    result_free(&r);
    s.gets = 0, s.outcome = CKPT_JOB_FAILED, s.pending_gets = 0;
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "job 17: checkpoint requested (request 1714564790000, deadline in 60s)\n"
                      "job 17: checkpoint request 1714564790000 missed (job FAILED: rank 1 exited with code 3)\n");
    assert_int_equal(s.gets, 1);
    result_free(&r);
    s.gets = 0;
    r = run("-o", "json", "checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "\"state\": \"JOB_STATE_FAILED\""));
    result_free(&r);

    /* The scheduler goes away while we wait. */
    s.gets = 0, s.outcome = CKPT_GET_FAILS, s.pending_gets = 1;
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: UNAVAILABLE: scheduler shutting down\n");
    assert_int_equal(s.gets, 2);
    result_free(&r);
}

/* On a terminal the wait redraws one line in place and erases it before the result. */
static void test_checkpoint_wait_tty(void **state)
{
    ckpt_script_t s = {.sdk = true, .pending_gets = 2, .outcome = CKPT_COMPLETE};
    const char *line = "job 17: checkpoint pending 0s, deadline in 60s, step 1200 (UPDATE)";
    char want[512];
    size_t n = strlen(line);
    result_t r;
    (void)state;

    route_checkpoint(&s);
    err_tty = true;
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 17: checkpoint requested (request 1714564790000, deadline in 60s)\n"
                      "job 17: checkpoint of step 1200 complete (2 ranks, 2048 bytes, /ckpt/17/step-1200)\n");
    /* Drawn before each of the three reads, then blanked. */
    snprintf(want, sizeof(want), "\r%s\r%s\r%s\r%*s\r", line, line, line, (int)n, "");
    expect_str(r.err, want);
    result_free(&r);

    /* A shorter line is padded over the longer one it replaces. */
    s.gets = 0, s.sdk = false, s.pending_gets = 1, s.outcome = CKPT_MISSED;
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 1);
    {
        const char *shorter = "job 17: checkpoint pending 0s, deadline in 60s";
        const char *note = "tidectl: note: no rank of job 17 has reported through the trainer SDK yet; only SDK "
                           "trainers checkpoint on request (docs/trainer-api.md)\n";
        snprintf(want, sizeof(want), "%s\r%s\r%s\r%*s\r", note, shorter, shorter, (int)strlen(shorter), "");
        expect_str(r.err, want);
    }
    result_free(&r);

    /* Never wider than 79 columns, so it cannot wrap on an 80-column terminal and break the redraw;
     * a multi-byte character is not split. */
    s.gets = 0, s.sdk = true, s.pending_gets = 1, s.outcome = CKPT_COMPLETE;
    s.reply_id = "experiment-\xc3\xa9-with-a-very-long-name-that-goes-on-and-on";
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 0);
    {
        /* 79 columns end in a blank, which goes too. */
        const char *cut = "job experiment-\xc3\xa9-with-a-very-long-name-that-goes-on-and-on: checkpoint pending";
        snprintf(want, sizeof(want), "\r%s\r%s\r%*s\r", cut, cut, 78, "");
        expect_str(r.err, want);
    }
    result_free(&r);
    s.reply_id = "x-\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
                 "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9";
    s.gets = 0;
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 0);
    {
        /* "job x-" then 74 é: 80 characters, cut to 79 = "job x-" + 73 é, 152 bytes. */
        const char *e = r.err + 1;
        const char *cr = strchr(e, '\r');
        assert_non_null(cr);
        assert_int_equal(cr - e, 6 + 73 * 2);
        assert_true(strncmp(e, "job x-\xc3\xa9", 8) == 0);
        assert_true(strncmp(cr - 2, "\xc3\xa9", 2) == 0);
    }
    result_free(&r);
}

/* A clock 10 s ahead at every look: the request never ends, tidectl stops 30 s after its deadline. */
static int64_t fast_clock_ms;
static int64_t fast_clock(void)
{
    fast_clock_ms += 10000;
    return fast_clock_ms;
}

static void test_checkpoint_wait_gives_up(void **state)
{
    ckpt_script_t s = {.sdk = true, .pending_gets = 1000000};
    result_t r;
    (void)state;

    route_checkpoint(&s);
    fast_clock_ms = NOW_MS - 10000;
    clock_fn = fast_clock;
    r = run("checkpoint", "17", "-W", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: DEADLINE_EXCEEDED: job 17: checkpoint request 1714564790000 still pending 30s "
                      "after its deadline\n");
    /* 60 s deadline + 30 s grace at 10 s a look: about ten reads, not a million. */
    assert_true(s.gets >= 5 && s.gets <= 12);
    result_free(&r);
}

/* ---- scale ---- */

typedef enum scale_view {
    SV_PENDING,  /* running, the resize to 4 accepted and waiting for capacity */
    SV_ACTIVE,   /* running, the resize under way (state in scale_script_t.active_state) */
    SV_DONE,     /* resized 2 -> 4, generation 3 */
    SV_FAILED,   /* the job failed meanwhile */
    SV_WITHDRAWN, /* no resize any more, and none completed: another request asked for 2 */
    SV_UNSTARTED, /* 4 requested, 2 run, no resize open (the scheduler could not start it yet) */
    SV_ALREADY,  /* 4 workers, 4 requested: nothing to do */
    SV_QUEUED,   /* a pending job */
    SV_ELASTIC,  /* running 4 of 2..8, nothing requested */
} scale_view_t;

typedef struct scale_script {
    char id_seen[32];
    int32_t workers_seen;
    bool elastic_seen;
    scale_view_t reply;   /* what ScaleJob answers for job 7 */
    int gets;             /* GetJob calls answered */
    int pending_gets;     /* the first ones still show the resize pending */
    int active_gets;      /* then these show it under way: stopping, then starting */
    scale_view_t outcome; /* then this (SV_DONE, SV_FAILED, SV_WITHDRAWN); get_fails: GetJob fails */
    bool get_fails;
} scale_script_t;

static void send_scale_job(fake_call_t *call, scale_view_t v, int active_state)
{
    Tide__V1__JobSpec spec = spec_fixture();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__Resize r = TIDE__V1__RESIZE__INIT, lr = TIDE__V1__RESIZE__INIT;
    char *two[] = {"node1/gpu0", "node1/gpu1"};
    char *four[] = {"node1/gpu0", "node1/gpu1", "node2/gpu0", "node2/gpu1"};

    spec.min_workers = 2, spec.max_workers = 8;
    j.id = "7", j.spec = &spec, j.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, j.generation = 2;
    j.n_worker_ids = 2, j.worker_ids = two, j.failed_rank = -1, j.message = "";
    j.target_workers = 4;
    r.reason = TIDE__V1__RESIZE_REASON__RESIZE_REASON_REQUESTED;
    r.from_workers = 2, r.to_workers = 4, r.from_generation = 2, r.detail = "requested by ScaleJob";
    r.decided_ms = NOW_MS;
    lr.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_DONE, lr.reason = TIDE__V1__RESIZE_REASON__RESIZE_REASON_REQUESTED;
    lr.from_workers = 2, lr.to_workers = 4, lr.workers = 4, lr.from_generation = 2, lr.to_generation = 3;
    lr.total_seconds = 1.42, lr.checkpoint_seconds = 0.31, lr.stop_seconds = 0.40, lr.start_seconds = 0.71;
    switch (v) {
    case SV_PENDING:
        r.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING;
        r.detail = "only 1 worker free";
        j.resize = &r;
        break;
    case SV_ACTIVE:
        r.state = active_state;
        if (active_state == TIDE__V1__RESIZE_STATE__RESIZE_STATE_STARTING) {
            j.generation = 3, r.to_generation = 3;
            j.n_worker_ids = 4, j.worker_ids = four;
        } else if (active_state == TIDE__V1__RESIZE_STATE__RESIZE_STATE_STOPPING) {
            j.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, j.message = "resizing 2 -> 4 workers";
            j.n_worker_ids = 0;
        }
        j.resize = &r;
        break;
    case SV_DONE:
        j.generation = 3, j.n_worker_ids = 4, j.worker_ids = four, j.last_resize = &lr, j.resizes = 1;
        break;
    case SV_FAILED:
        j.state = TIDE__V1__JOB_STATE__JOB_STATE_FAILED, j.message = "rank 1 exited with code 3";
        break;
    case SV_WITHDRAWN:
        j.target_workers = 2;
        break;
    case SV_UNSTARTED:
        break;
    case SV_ALREADY:
        j.n_worker_ids = 4, j.worker_ids = four;
        break;
    case SV_QUEUED:
        j.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, j.generation = 0, j.n_worker_ids = 0;
        j.message = "waiting for 4 free workers";
        break;
    case SV_ELASTIC:
        j.target_workers = 0, j.n_worker_ids = 4, j.worker_ids = four;
        break;
    }
    fake_call_send(call, &j.base);
}

static void scale_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    scale_script_t *s = ud;
    Tide__V1__ScaleJobRequest *r = tide__v1__scale_job_request__unpack(NULL, len, req);

    assert_non_null(r);
    snprintf(s->id_seen, sizeof(s->id_seen), "%s", r->id);
    s->workers_seen = r->workers;
    s->elastic_seen = r->elastic;
    if (strcmp(r->id, "7") == 0) {
        send_scale_job(call, s->reply, TIDE__V1__RESIZE_STATE__RESIZE_STATE_CHECKPOINTING);
        fake_call_finish(call, TIDE_GRPC_OK, NULL);
    } else if (strcmp(r->id, "8") == 0) {
        fake_call_finish(call, TIDE_GRPC_FAILED_PRECONDITION, "job 8 has ended (SUCCEEDED)");
    } else if (strcmp(r->id, "9") == 0) {
        fake_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT, "workers 9 is outside the job's bounds [2, 8]");
    } else {
        char msg[64];
        snprintf(msg, sizeof(msg), "job %s not found", r->id);
        fake_call_finish(call, TIDE_GRPC_NOT_FOUND, msg);
    }
    tide__v1__scale_job_request__free_unpacked(r, NULL);
}

static void scale_get_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    scale_script_t *s = ud;
    int n = ++s->gets;

    (void)req, (void)len;
    if (n <= s->pending_gets) {
        send_scale_job(call, SV_PENDING, 0);
    } else if (n <= s->pending_gets + s->active_gets) {
        int k = n - s->pending_gets; /* 1: stopping, 2 and on: starting */
        send_scale_job(call, SV_ACTIVE,
                       k == 1 ? TIDE__V1__RESIZE_STATE__RESIZE_STATE_STOPPING : TIDE__V1__RESIZE_STATE__RESIZE_STATE_STARTING);
    } else if (s->get_fails) {
        fake_call_finish(call, TIDE_GRPC_UNAVAILABLE, "scheduler shutting down");
        return;
    } else {
        send_scale_job(call, s->outcome, 0);
    }
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void route_scale(scale_script_t *s)
{
    fake_rpc_route("/tide.v1.JobService/ScaleJob", scale_handler, s);
    fake_rpc_route("/tide.v1.JobService/GetJob", scale_get_handler, s);
}

static void expect_usage(const result_t *r, const char *msg)
{
    char want[256];

    assert_int_equal(r->rc, 2);
    snprintf(want, sizeof(want), "tidectl: %s\nRun 'tidectl scale --help' for usage.\n", msg);
    expect_str(r->err, want);
}

static void test_scale_usage(void **state)
{
    result_t r;
    (void)state;

    r = run("scale", "--workers", "4", NULL);
    expect_usage(&r, "missing job ID");
    result_free(&r);
    r = run("scale", "7", NULL);
    expect_usage(&r, "missing --workers N or --elastic");
    result_free(&r);
    r = run("scale", "7", "--workers", "4", "--elastic", NULL);
    expect_usage(&r, "--workers and --elastic exclude each other");
    result_free(&r);
    static const char *const bad[] = {"0", "-2", "x", "1.5", "", "1000001"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char msg[128];
        r = run("scale", "7", "-n", bad[i], NULL);
        snprintf(msg, sizeof(msg), "bad --workers '%s': expected a number of workers (1 or more)", bad[i]);
        expect_usage(&r, msg);
        result_free(&r);
    }
    r = run("scale", "7", "-n", "4", "--timeout", "5m", NULL);
    expect_usage(&r, "--timeout needs --wait");
    result_free(&r);
    r = run("scale", "7", "-n", "4", "-W", "--timeout", "soon", NULL);
    expect_usage(&r, "bad --timeout 'soon': expected e.g. 30s, 5m, 1h or MM:SS");
    result_free(&r);
    r = run("scale", "7", "-n", "4", "-W", "--timeout", "0", NULL);
    expect_usage(&r, "bad --timeout '0': must be at least 1s");
    result_free(&r);
    r = run("scale", "7", "8", "-n", "4", NULL);
    expect_usage(&r, "unexpected argument '8'");
    result_free(&r);
    r = run("scale", "7", "--deadline", "5m", NULL);
    expect_usage(&r, "unknown option '--deadline'");
    result_free(&r);
    r = run("scale", "--help", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "Usage: tidectl scale ID --workers N | --elastic [-W [--timeout DURATION]]\n"));
    assert_non_null(strstr(r.out, "  -n, --workers N"));
    assert_non_null(strstr(r.out, "      --elastic"));
    assert_non_null(strstr(r.out, "      --timeout DURATION"));
    result_free(&r);
    r = run("--help", NULL);
    assert_non_null(strstr(r.out, "  scale       Grow or shrink a job\n"));
    result_free(&r);
    /* None of that reached the network. */
    assert_null(fake_rpc_last_hostport());
}

static void test_scale(void **state)
{
    scale_script_t s = {.reply = SV_ACTIVE};
    result_t r;
    (void)state;

    route_scale(&s);
    r = run("scale", "7", "--workers", "4", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 7: scaling 2 -> 4 workers (resizing: checkpointing)\n");
    expect_str(r.err, "");
    expect_str(s.id_seen, "7");
    assert_int_equal(s.workers_seen, 4);
    assert_false(s.elastic_seen);
    result_free(&r);

    s.reply = SV_PENDING;
    r = run("scale", "-n", "4", "7", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 7: 4 workers requested; pending: only 1 worker free\n");
    result_free(&r);
    s.reply = SV_ALREADY;
    r = run("scale", "7", "-n4", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 7: already 4 workers\n");
    result_free(&r);
    s.reply = SV_QUEUED;
    r = run("scale", "7", "--workers=4", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 7: will start with at most 4 workers\n");
    result_free(&r);
    s.reply = SV_ELASTIC;
    r = run("scale", "7", "--elastic", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 7: elastic: 4 workers now, sized by tide within 2..8\n");
    assert_int_equal(s.workers_seen, 0);
    assert_true(s.elastic_seen);
    result_free(&r);

    /* -o json: the returned Job, with its resize. */
    s.reply = SV_ACTIVE;
    r = run("scale", "7", "-n", "4", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "{\n  \"id\": \"7\",\n", 15) == 0);
    assert_non_null(strstr(r.out, "\n  \"targetWorkers\": 4,\n"));
    assert_non_null(strstr(r.out, "\"state\": \"RESIZE_STATE_CHECKPOINTING\""));
    assert_non_null(strstr(r.out, "\"reason\": \"RESIZE_REASON_REQUESTED\""));
    result_free(&r);

    /* The scheduler's refusals, as every command reports them. */
    r = run("scale", "42", "-n", "4", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    expect_str(r.err, "tidectl: NOT_FOUND: job 42 not found\n");
    result_free(&r);
    r = run("scale", "8", "-n", "4", "--wait", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: FAILED_PRECONDITION: job 8 has ended (SUCCEEDED)\n");
    result_free(&r);
    r = run("scale", "9", "-n", "9", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: INVALID_ARGUMENT: workers 9 is outside the job's bounds [2, 8]\n");
    result_free(&r);
    assert_int_equal(fake_rpc_count("/tide.v1.JobService/GetJob"), 0);
}

static void test_scale_wait(void **state)
{
    scale_script_t s = {.reply = SV_ACTIVE, .active_gets = 2, .outcome = SV_DONE};
    const char *resized = "job 7: resized 2 -> 4 workers in 1.42 s (checkpoint 0.31 s, stop 0.40 s, start 0.71 s), "
                          "generation 3\n";
    char want[512];
    result_t r;
    (void)state;

    route_scale(&s);
    r = run("scale", "7", "-n", "4", "--wait", NULL);
    assert_int_equal(r.rc, 0);
    snprintf(want, sizeof(want), "job 7: scaling 2 -> 4 workers (resizing: checkpointing)\n%s", resized);
    expect_str(r.out, want);
    expect_str(r.err, ""); /* not a terminal: no progress line */
    assert_int_equal(s.gets, 3);
    result_free(&r);

    /* Pending when the wait starts: it keeps waiting until the resize runs and completes. */
    s.reply = SV_PENDING, s.pending_gets = 3, s.gets = 0;
    r = run("scale", "7", "-n", "4", "-W", NULL);
    assert_int_equal(r.rc, 0);
    snprintf(want, sizeof(want), "job 7: 4 workers requested; pending: only 1 worker free\n%s", resized);
    expect_str(r.out, want);
    assert_int_equal(s.gets, 6);
    result_free(&r);

    /* -o json: only the final Job. */
    s.reply = SV_ACTIVE, s.pending_gets = 0, s.gets = 0;
    r = run("scale", "7", "-n", "4", "-W", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    assert_true(strncmp(r.out, "{\n  \"id\": \"7\",\n", 15) == 0);
    assert_non_null(strstr(r.out, "\"lastResize\": {"));
    assert_null(strstr(r.out, "\"resize\": {"));
    assert_null(strstr(r.out, "}\n{"));
    result_free(&r);

    /* Nothing to follow: the size holds already. */
    s.reply = SV_ALREADY, s.gets = 0;
    r = run("scale", "7", "-n", "4", "-W", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "job 7: already 4 workers\n");
    assert_int_equal(s.gets, 0);
    result_free(&r);

    /* The job ends first; the resize is taken back. */
    s.reply = SV_ACTIVE, s.outcome = SV_FAILED, s.gets = 0;
    r = run("scale", "7", "-n", "4", "-W", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "job 7: scaling 2 -> 4 workers (resizing: checkpointing)\n"
                      "job 7: FAILED before the resize completed: rank 1 exited with code 3\n");
    result_free(&r);
    s.gets = 0;
    r = run("-o", "json", "scale", "7", "-n", "4", "-W", NULL);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.out, "\"state\": \"JOB_STATE_FAILED\""));
    result_free(&r);
    /* No resize open but the job is not at the size asked for (the scheduler could not start it yet:
     * the job was yielding, starting or reconnecting): not done; it waits on, here until --timeout. */
    s.outcome = SV_WITHDRAWN, s.gets = 0;
    r = run("scale", "7", "-n", "4", "-W", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "job 7: scaling 2 -> 4 workers (resizing: checkpointing)\n"
                      "job 7: another request changed the size to 2 meanwhile; 2 workers now\n");
    result_free(&r);
    s.outcome = SV_UNSTARTED, s.gets = 0;
    fast_clock_ms = NOW_MS - 10000;
    clock_fn = fast_clock;
    r = run("scale", "7", "-n", "4", "-W", "--timeout", "1m", NULL);
    clock_fn = NULL;
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "job 7: scaling 2 -> 4 workers (resizing: checkpointing)\n");
    assert_non_null(strstr(r.err, "DEADLINE_EXCEEDED: job 7: the resize to 4 workers is not done after"));
    assert_true(s.gets > 1);
    result_free(&r);

    /* The scheduler goes away while we wait. */
    s.get_fails = true, s.gets = 0;
    r = run("scale", "7", "-n", "4", "-W", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: UNAVAILABLE: scheduler shutting down\n");
    assert_int_equal(s.gets, 3);
    result_free(&r);
}

/* On a terminal: one line redrawn in place per read, the phase and its time, erased before the result. */
static void test_scale_wait_tty(void **state)
{
    scale_script_t s = {.reply = SV_PENDING, .pending_gets = 1, .active_gets = 2, .outcome = SV_DONE};
    const char *l1 = "job 7: resize to 4 pending 0.0s: only 1 worker free";
    const char *l2 = "job 7: resizing 2 -> 4: stopping 0.0s";
    const char *l3 = "job 7: resizing 2 -> 4: starting 0.0s";
    char want[512];
    result_t r;
    (void)state;

    route_scale(&s);
    err_tty = true;
    r = run("scale", "7", "-n", "4", "-W", NULL);
    assert_int_equal(r.rc, 0);
    /* Drawn before each read (the first two show it pending), padded over a longer line, then blanked. */
    snprintf(want, sizeof(want), "\r%s\r%s\r%s%*s\r%s\r%*s\r", l1, l1, l2, (int)(strlen(l1) - strlen(l2)), "", l3,
             (int)strlen(l3), "");
    expect_str(r.err, want);
    result_free(&r);
}

/* A clock 10 s ahead at every look: the resize never ends; --timeout ends the wait. */
static void test_scale_wait_gives_up(void **state)
{
    scale_script_t s = {.reply = SV_PENDING, .pending_gets = 1000000};
    result_t r;
    (void)state;

    route_scale(&s);
    fast_clock_ms = NOW_MS - 10000;
    clock_fn = fast_clock;
    r = run("scale", "7", "-n", "4", "-W", "--timeout", "1m", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "job 7: 4 workers requested; pending: only 1 worker free\n");
    expect_str(r.err, "tidectl: DEADLINE_EXCEEDED: job 7: the resize to 4 workers is not done after 1m (it goes on; "
                      "'tidectl job 7' shows it)\n");
    assert_true(s.gets >= 4 && s.gets <= 7);
    result_free(&r);
}

/* ---- submit --launcher ---- */

static void test_submit_launcher(void **state)
{
    Tide__V1__JobSpec *seen = NULL;
    char path[] = "/tmp/tidectl-spec-XXXXXX";
    const char *json = "{\"command\": [\"./run.sh\"], \"launcher\": \"LAUNCHER_MPI\"}";
    int fd;
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/SubmitJob", submit_handler, &seen);
    r = run("submit", "--launcher", "mpi", "-n", "4", "--", "./run.sh", NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(seen->launcher, TIDE__V1__LAUNCHER__LAUNCHER_MPI);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);
    seen = NULL;
    r = run("submit", "--", "./run.sh", NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(seen->launcher, TIDE__V1__LAUNCHER__LAUNCHER_UNSPECIFIED);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);

    r = run("submit", "--launcher", "srun", "--", "./run.sh", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad --launcher 'srun' (one of env, mpi)\nRun 'tidectl submit --help' for usage.\n");
    result_free(&r);
    r = run("submit", "--help", NULL);
    assert_non_null(strstr(r.out, "      --launcher KIND"));
    result_free(&r);

    /* From a spec file (the JSON mapping's enum name), and overridden by the option. */
    fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    seen = NULL;
    r = run("submit", "-f", path, NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(seen->launcher, TIDE__V1__LAUNCHER__LAUNCHER_MPI);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);
    seen = NULL;
    r = run("submit", "-f", path, "--launcher", "ENV", NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(seen->launcher, TIDE__V1__LAUNCHER__LAUNCHER_ENV);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);
    /* A short name is not the JSON mapping: the file is refused with the field named. */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, "{\"launcher\": \"mpi\"}", 19), 19);
    close(fd);
    r = run("submit", "-f", path, "--", "true", NULL);
    assert_int_equal(r.rc, 1);
    assert_non_null(strstr(r.err, ": launcher: unknown value \"mpi\" of tide.v1.Launcher\n"));
    result_free(&r);
    unlink(path);
    assert_int_equal(fake_rpc_count("/tide.v1.JobService/SubmitJob"), 4);
}

/* ---- logs and events ---- */

typedef struct log_script {
    size_t n_ranks_seen;
    int follow_seen;
} log_script_t;

static void send_chunk(fake_call_t *call, int rank, const void *data, size_t len)
{
    Tide__V1__LogChunk c = TIDE__V1__LOG_CHUNK__INIT;

    c.rank = rank;
    c.data.data = (uint8_t *)data;
    c.data.len = len;
    fake_call_send(call, &c.base);
}

static void logs_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    log_script_t *s = ud;
    Tide__V1__GetJobLogsRequest *r = tide__v1__get_job_logs_request__unpack(NULL, len, req);

    s->n_ranks_seen = r->n_ranks;
    s->follow_seen = r->follow;
    tide__v1__get_job_logs_request__free_unpacked(r, NULL);
    send_chunk(call, 0, "epoch 1\nloss=", 13);
    send_chunk(call, 1, "epoch 1\n", 8);
    send_chunk(call, 0, "0.5\nbye", 7);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_logs(void **state)
{
    log_script_t s = {0};
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/GetJob", get_job_handler, NULL);
    fake_rpc_route("/tide.v1.JobService/GetJobLogs", logs_handler, &s);
    /* The job has two workers: every line is prefixed, the partial last line is flushed at the end. */
    r = run("logs", "17", "-f", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "[rank 0] epoch 1\n[rank 1] epoch 1\n[rank 0] loss=0.5\n[rank 0] bye\n");
    assert_int_equal(s.n_ranks_seen, 0);
    assert_int_equal(s.follow_seen, 1);
    result_free(&r);

    /* One rank asked for: raw bytes, no GetJob needed. */
    r = run("logs", "--rank", "0", "17", NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.out_len, 28);
    assert_memory_equal(r.out, "epoch 1\nloss=epoch 1\n0.5\nbye", 28);
    assert_int_equal(s.n_ranks_seen, 1);
    assert_int_equal(s.follow_seen, 0);
    assert_int_equal(fake_rpc_count("/tide.v1.JobService/GetJob"), 1);
    result_free(&r);

    r = run("logs", "17", "-r", "0", "-r", "1", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    assert_int_equal(s.n_ranks_seen, 2);
    /* Rank 0 is the proto3 default, so the JSON mapping leaves it out. */
    expect_str(r.out, "{\"data\":\"ZXBvY2ggMQpsb3NzPQ==\"}\n"
                      "{\"rank\":1,\"data\":\"ZXBvY2ggMQo=\"}\n"
                      "{\"data\":\"MC41CmJ5ZQ==\"}\n");
    result_free(&r);
}

static void events_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__WatchEventsRequest *r = tide__v1__watch_events_request__unpack(NULL, len, req);
    Tide__V1__Event ev = TIDE__V1__EVENT__INIT;

    (void)ud;
    assert_int_equal(r->since_seq, 41);
    assert_string_equal(r->job_id, "17");
    assert_false(r->follow);
    tide__v1__watch_events_request__free_unpacked(r, NULL);
    ev.seq = 42, ev.time_ms = NOW_MS, ev.type = "job.started", ev.job_id = "17";
    ev.worker_id = "node1/gpu0", ev.message = "generation 1";
    fake_call_send(call, &ev.base);
    ev.seq = 43, ev.type = "job.succeeded", ev.worker_id = "", ev.message = "";
    fake_call_send(call, &ev.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_events(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/WatchEvents", events_handler, NULL);
    r = run("--utc", "events", "--job", "17", "--since", "41", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "2024-05-01 12:00:00 UTC  job.started        17     node1/gpu0     generation 1\n"
                      "2024-05-01 12:00:00 UTC  job.succeeded      17     -\n");
    result_free(&r);
}

static void events_drop_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__Event ev = TIDE__V1__EVENT__INIT;

    (void)req, (void)len, (void)ud;
    ev.seq = 1, ev.time_ms = NOW_MS, ev.type = "job.started", ev.job_id = "3";
    fake_call_send(call, &ev.base);
    fake_rpc_drop(-ECONNRESET, "connection closed by the server");
}

static void test_events_connection_lost(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/WatchEvents", events_drop_handler, NULL);
    r = run("events", "-f", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "2024-05-01 12:00:00  job.started        3      -\n");
    expect_str(r.err, "tidectl: UNAVAILABLE: lost connection to scheduler at 127.0.0.1:7070: connection closed "
                      "by the server\n");
    result_free(&r);
}

/* ---- cluster ---- */

static void workers_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__ListWorkersRequest *r = tide__v1__list_workers_request__unpack(NULL, len, req);
    Tide__V1__ListWorkersResponse resp = TIDE__V1__LIST_WORKERS_RESPONSE__INIT;
    Tide__V1__Worker w = TIDE__V1__WORKER__INIT;
    Tide__V1__Worker *ws[] = {&w};

    (void)ud;
    assert_int_equal(r->n_states, 1);
    assert_int_equal(r->states[0], TIDE__V1__WORKER_STATE__WORKER_STATE_READY);
    tide__v1__list_workers_request__free_unpacked(r, NULL);
    w.id = "n1/gpu0", w.node = "n1", w.device = "sim:h100", w.state = TIDE__V1__WORKER_STATE__WORKER_STATE_READY;
    w.rank = -1, w.last_heartbeat_ms = NOW_MS - 2000;
    resp.n_workers = 1, resp.workers = ws;
    fake_call_send(call, &resp.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void cordon_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__WorkerRef *r = tide__v1__worker_ref__unpack(NULL, len, req);
    Tide__V1__Worker w = TIDE__V1__WORKER__INIT;

    w.id = r->id;
    w.cordoned = ud != NULL;
    fake_call_send(call, &w.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
    tide__v1__worker_ref__free_unpacked(r, NULL);
}

static void status_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__ClusterStatus cs = TIDE__V1__CLUSTER_STATUS__INIT;

    (void)req, (void)len, (void)ud;
    cs.version = "0.1.0", cs.uptime_ms = 61000, cs.leader_epoch = 1, cs.store = "sqlite";
    cs.workers_total = 2, cs.workers_ready = 2, cs.jobs_succeeded = 3;
    fake_call_send(call, &cs.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

/* Plaintext to a non-loopback scheduler only with --insecure or TIDE_INSECURE=1 (docs/security.md). */
static void test_plaintext_off_loopback(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.ClusterService/GetClusterStatus", status_handler, NULL);
    r = run("--scheduler", "10.0.0.9:7070", "status", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: refusing to connect to 10.0.0.9:7070 without TLS: give --tls-ca FILE (the CA that "
                      "signed its certificate), or --insecure to send plaintext over the network (or "
                      "TIDE_TLS_CA=FILE, TIDE_INSECURE=1)\n");
    assert_string_equal(r.out, "");
    result_free(&r);
    r = run("--scheduler", "10.0.0.9:7070", "--insecure", "status", NULL);
    assert_int_equal(r.rc, 0);
    result_free(&r);
    env_insecure = "1";
    r = run("--scheduler", "10.0.0.9:7070", "status", NULL);
    assert_int_equal(r.rc, 0);
    result_free(&r);
    env_insecure = NULL;
    r = run("--scheduler", "localhost:7070", "status", NULL);
    assert_int_equal(r.rc, 0);
    result_free(&r);
    /* A client certificate without the CA is a usage error. */
    r = run("--tls-cert", "c.pem", "--tls-key", "k.pem", "status", NULL);
    assert_int_equal(r.rc, 2);
    result_free(&r);
}

static void test_cluster(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.ClusterService/ListWorkers", workers_handler, NULL);
    fake_rpc_route("/tide.v1.ClusterService/CordonWorker", cordon_handler, (void *)1);
    fake_rpc_route("/tide.v1.ClusterService/UncordonWorker", cordon_handler, NULL);
    fake_rpc_route("/tide.v1.ClusterService/GetClusterStatus", status_handler, NULL);

    r = run("workers", "--state", "ready", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "ID        NODE   GPU   DEVICE     STATE   JOB   RANK   CORDONED   UTIL   TEMP   RISK   HEARTBEAT\n"
                      "n1/gpu0   n1     0     sim:h100   READY   -     -      no         -      -      0.00   2s\n");
    result_free(&r);

    r = run("cordon", "n1/gpu0", "n1/gpu1", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "worker n1/gpu0 cordoned\nworker n1/gpu1 cordoned\n");
    result_free(&r);
    r = run("uncordon", "n1/gpu0", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "worker n1/gpu0 uncordoned\n");
    result_free(&r);
    r = run("cordon", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: missing worker ID\nRun 'tidectl cordon --help' for usage.\n");
    result_free(&r);

    r = run("status", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "Scheduler:  127.0.0.1:7070 (tide 0.1.0, up 1m1s, leader epoch 1, store sqlite)\n"
                      "Workers:    2 total: 2 ready, 0 busy, 0 suspect, 0 dead; 0 cordoned\n"
                      "Jobs:       0 pending, 0 running, 3 succeeded, 0 failed, 0 cancelled\n");
    result_free(&r);

    r = run("version", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "tidectl " TIDE_VERSION "\nscheduler 0.1.0 at 127.0.0.1:7070\n");
    result_free(&r);
    r = run("version", "--client", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "{\n  \"client\": \"" TIDE_VERSION "\"\n}\n");
    result_free(&r);

    fake_rpc_refuse(-ECONNREFUSED);
    r = run("version", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "tidectl " TIDE_VERSION "\n");
    expect_str(r.err, "tidectl: UNAVAILABLE: cannot reach scheduler at 127.0.0.1:7070: connection refused\n");
    result_free(&r);
}

/* Answers like the scheduler: the departed worker only when the request includes departed ones. */
static void departed_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__ListWorkersRequest *r = tide__v1__list_workers_request__unpack(NULL, len, req);
    Tide__V1__ListWorkersResponse resp = TIDE__V1__LIST_WORKERS_RESPONSE__INIT;
    Tide__V1__Worker live = TIDE__V1__WORKER__INIT, gone = TIDE__V1__WORKER__INIT;
    Tide__V1__Worker *ws[] = {&live, &gone};

    (void)ud;
    live.id = "n1/gpu0", live.node = "n1", live.device = "sim:h100";
    live.state = TIDE__V1__WORKER_STATE__WORKER_STATE_READY, live.rank = -1, live.last_heartbeat_ms = NOW_MS - 2000;
    gone.id = "n1/gpu1", gone.node = "n1", gone.gpu_index = 1, gone.device = "sim:h100";
    gone.state = TIDE__V1__WORKER_STATE__WORKER_STATE_DEAD, gone.rank = -1, gone.departed = true;
    gone.last_heartbeat_ms = NOW_MS - 60000;
    resp.n_workers = r->include_departed ? 2 : 1, resp.workers = ws;
    tide__v1__list_workers_request__free_unpacked(r, NULL);
    fake_call_send(call, &resp.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_workers_departed(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.ClusterService/ListWorkers", departed_handler, NULL);
    r = run("workers", NULL);
    assert_int_equal(r.rc, 0);
    assert_null(strstr(r.out, "n1/gpu1"));
    result_free(&r);
    r = run("workers", "--all", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "ID        NODE   GPU   DEVICE     STATE      JOB   RANK   CORDONED   UTIL   TEMP   RISK   HEARTBEAT\n"
                      "n1/gpu0   n1     0     sim:h100   READY      -     -      no         -      -      0.00   2s\n"
                      "n1/gpu1   n1     1     sim:h100   DEPARTED   -     -      no         -      -      0.00   1m\n");
    result_free(&r);
    r = run("-o", "json", "workers", "-A", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "\"departed\": true"));
    result_free(&r);
    r = run("workers", "--help", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "also workers that said goodbye and left (state DEPARTED)"));
    result_free(&r);
}

static void pool_refused_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    (void)req, (void)len, (void)ud;
    fake_call_finish(call, TIDE_GRPC_INVALID_ARGUMENT,
                     "spec.pool \"nope\" is unknown: no worker carries it and the scheduler names no such pool "
                     "(known: default)");
}

/* ---- queue ---- */

typedef struct queue_pages {
    int calls;
    size_t n_states;
    int state0;
    bool empty;
} queue_pages_t;

/* Two pages of pending jobs in job-number order, as the scheduler lists them; the queue order differs. */
static void queue_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    queue_pages_t *q = ud;
    Tide__V1__ListJobsRequest *r = tide__v1__list_jobs_request__unpack(NULL, len, req);
    Tide__V1__ListJobsResponse resp = TIDE__V1__LIST_JOBS_RESPONSE__INIT;
    Tide__V1__JobSpec s1 = spec_fixture(), s2 = spec_fixture(), s3 = spec_fixture();
    Tide__V1__Job a = TIDE__V1__JOB__INIT, b = TIDE__V1__JOB__INIT, c = TIDE__V1__JOB__INIT;
    Tide__V1__Job *first[] = {&a, &b}, *second[] = {&c};
    bool page2 = r->page_token[0] != '\0';

    q->calls++;
    q->n_states = r->n_states;
    q->state0 = r->n_states ? (int)r->states[0] : 0;
    tide__v1__list_jobs_request__free_unpacked(r, NULL);
    s1.priority = TIDE__V1__PRIORITY__PRIORITY_LOW, s1.name = "sweep", s1.max_workers = 4;
    a.id = "3", a.spec = &s1, a.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, a.queue_position = 2;
    a.effective_priority = TIDE__V1__PRIORITY__PRIORITY_NORMAL, a.submit_time_ms = NOW_MS - 3600000;
    a.message = "queued behind job 9 (CRITICAL), which waits for the same GPUs";
    s2.name = "restarting";
    b.id = "5", b.spec = &s2, b.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, b.queue_position = 0;
    b.submit_time_ms = NOW_MS - 600000, b.message = "waiting for 1 rank of generation 2 to stop";
    s3.priority = TIDE__V1__PRIORITY__PRIORITY_CRITICAL, s3.name = "llama", s3.min_workers = 8, s3.max_workers = 8;
    c.id = "9", c.spec = &s3, c.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, c.queue_position = 1;
    c.effective_priority = TIDE__V1__PRIORITY__PRIORITY_CRITICAL, c.submit_time_ms = NOW_MS - 30000;
    c.message = "waiting: needs 8 GPUs in one rack; the largest usable fit is 6";
    if (!q->empty) {
        resp.n_jobs = page2 ? 1 : 2;
        resp.jobs = page2 ? second : first;
        resp.next_page_token = page2 ? "" : "5";
    }
    fake_call_send(call, &resp.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_queue(void **state)
{
    queue_pages_t q = {0};
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/ListJobs", queue_handler, &q);
    r = run("queue", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "POS   JOB   NAME         CLASS         GPUS   WAITING   REASON\n"
                      "1     9     llama        CRITICAL      8      30s       waiting: needs 8 GPUs in one rack; the "
                      "largest usable fit is 6\n"
                      "2     3     sweep        LOW->NORMAL   2..4   1h        queued behind job 9 (CRITICAL), which "
                      "waits for the same GPUs\n"
                      "-     5     restarting   NORMAL        2      10m       waiting for 1 rank of generation 2 to "
                      "stop\n");
    expect_str(r.err, "");
    assert_int_equal(q.calls, 2);
    assert_int_equal(q.n_states, 1);
    assert_int_equal(q.state0, TIDE__V1__JOB_STATE__JOB_STATE_PENDING);
    result_free(&r);

    /* -o json: one ListJobsResponse in queue order. */
    r = run("queue", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    {
        const char *p9 = strstr(r.out, "\"id\": \"9\""), *p3 = strstr(r.out, "\"id\": \"3\""),
                   *p5 = strstr(r.out, "\"id\": \"5\"");
        assert_non_null(p9);
        assert_non_null(p3);
        assert_non_null(p5);
        assert_true(p9 < p3 && p3 < p5);
        assert_non_null(strstr(r.out, "\"queuePosition\": 1"));
    }
    result_free(&r);

    q.empty = true;
    r = run("queue", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "");
    expect_str(r.err, "The queue is empty: no job is waiting.\n");
    result_free(&r);

    r = run("queue", "extra", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: unexpected argument 'extra'\nRun 'tidectl queue --help' for usage.\n");
    result_free(&r);
}

/* The policy options go on the wire; a bad one is a usage error that never reaches it. */
static void test_submit_policy(void **state)
{
    Tide__V1__JobSpec *seen = NULL;
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/SubmitJob", submit_handler, &seen);
    r = run("submit", "--priority", "critical", "--pool", "prod", "--memory-per-rank", "80GB", "--topology", "node",
            "--device", "h100", "--ckpt-mfu-threshold", "0.25", "--ckpt-deadline", "15m", "--ckpt-interval", "20m", "--adaptive-target",
            "--no-stealing", "-n", "8", "--", "./train", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "17\n");
    assert_non_null(seen);
    assert_int_equal(seen->priority, TIDE__V1__PRIORITY__PRIORITY_CRITICAL);
    assert_string_equal(seen->pool, "prod");
    assert_int_equal(seen->memory_per_rank_bytes, 80000000000ULL);
    assert_int_equal(seen->topology, TIDE__V1__TOPOLOGY__TOPOLOGY_NODE);
    assert_string_equal(seen->device, "h100");
    assert_float_equal(seen->checkpoint_mfu_threshold, 0.25, 0);
    assert_int_equal(seen->checkpoint_deadline_seconds, 900);
    assert_int_equal(seen->checkpoint_interval_seconds, 1200);
    assert_true(seen->adaptive_target);
    assert_true(seen->no_stealing);
    tide__v1__job_spec__free_unpacked(seen, NULL);
    result_free(&r);

    r = run("submit", "--topology", "row", "--", "./train", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad --topology 'row' (one of node, rack, switch, any)\n"
                      "Run 'tidectl submit --help' for usage.\n");
    result_free(&r);
    r = run("submit", "--memory-per-rank", "lots", "--", "./train", NULL);
    assert_int_equal(r.rc, 2);
    result_free(&r);
    r = run("submit", "--ckpt-interval", "5s", "--", "./train", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad --ckpt-interval '5s': expected a duration of at least 10s such as 10m, or off\n"
                      "Run 'tidectl submit --help' for usage.\n");
    result_free(&r);
    assert_int_equal(fake_rpc_count("/tide.v1.JobService/SubmitJob"), 1);

    /* What the scheduler refuses comes back as its INVALID_ARGUMENT line. */
    fake_rpc_reset();
    fake_rpc_route("/tide.v1.JobService/SubmitJob", pool_refused_handler, NULL);
    r = run("submit", "--pool", "nope", "--", "./train", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: INVALID_ARGUMENT: spec.pool \"nope\" is unknown: no worker carries it and the "
                      "scheduler names no such pool (known: default)\n");
    result_free(&r);
}

/* --burst: alone 20 %, a number after it or after '=', and a command that follows it is the command. */
static void test_submit_burst(void **state)
{
    static const struct {
        const char *a, *b, *c;
        int pct;
        const char *cmd0;
    } ok[] = {
        {"--burst", "--", "./train", 20, "./train"},
        {"--burst", "./train", NULL, 20, "./train"},
        {"--burst", "50", "./train", 50, "./train"},
        {"--burst=30%", "./train", NULL, 30, "./train"},
        {"--burst", "100%", "./train", 100, "./train"},
    };
    static const char *bad[] = {"--burst=0", "--burst=101", "--burst=x", "--burst=", "--burst=20%%"};
    result_t r;
    (void)state;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        Tide__V1__JobSpec *seen = NULL;
        fake_rpc_reset();
        fake_rpc_route("/tide.v1.JobService/SubmitJob", submit_handler, &seen);
        r = run("submit", ok[i].a, ok[i].b, ok[i].c, NULL);
        assert_int_equal(r.rc, 0);
        assert_non_null(seen);
        assert_int_equal(seen->burst_percent, ok[i].pct);
        assert_string_equal(seen->command[0], ok[i].cmd0);
        tide__v1__job_spec__free_unpacked(seen, NULL);
        result_free(&r);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fake_rpc_reset();
        r = run("submit", bad[i], "--", "./train", NULL);
        assert_int_equal(r.rc, 2);
        assert_non_null(strstr(r.err, "bad --burst"));
        result_free(&r);
        assert_int_equal(fake_rpc_count("/tide.v1.JobService/SubmitJob"), 0);
    }
    /* --burst 0 reads 0 as its value: refused the same way. */
    r = run("submit", "--burst", "0", "./train", NULL);
    assert_int_equal(r.rc, 2);
    result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_help_and_usage, setup),
        cmocka_unit_test_setup(test_submit_burst, setup),
        cmocka_unit_test_setup(test_submit, setup),
        cmocka_unit_test_setup(test_plaintext_off_loopback, setup),
        cmocka_unit_test_setup(test_submit_from_file, setup),
        cmocka_unit_test_setup(test_submit_wait, setup),
        cmocka_unit_test_setup(test_submit_wait_failed, setup),
        cmocka_unit_test_setup(test_submit_wait_stream_lost, setup),
        cmocka_unit_test_setup(test_jobs_pages, setup),
        cmocka_unit_test_setup(test_jobs_empty, setup),
        cmocka_unit_test_setup(test_job, setup),
        cmocka_unit_test_setup(test_errors, setup),
        cmocka_unit_test_setup(test_cancel, setup),
        cmocka_unit_test_setup(test_checkpoint_usage, setup),
        cmocka_unit_test_setup(test_checkpoint, setup),
        cmocka_unit_test_setup(test_checkpoint_wait, setup),
        cmocka_unit_test_setup(test_checkpoint_wait_tty, setup),
        cmocka_unit_test_setup(test_checkpoint_wait_gives_up, setup),
        cmocka_unit_test_setup(test_scale_usage, setup),
        cmocka_unit_test_setup(test_scale, setup),
        cmocka_unit_test_setup(test_scale_wait, setup),
        cmocka_unit_test_setup(test_scale_wait_tty, setup),
        cmocka_unit_test_setup(test_scale_wait_gives_up, setup),
        cmocka_unit_test_setup(test_submit_launcher, setup),
        cmocka_unit_test_setup(test_logs, setup),
        cmocka_unit_test_setup(test_events, setup),
        cmocka_unit_test_setup(test_events_connection_lost, setup),
        cmocka_unit_test_setup(test_cluster, setup),
        cmocka_unit_test_setup(test_workers_departed, setup),
        cmocka_unit_test_setup(test_queue, setup),
        cmocka_unit_test_setup(test_submit_policy, setup),
    };
    int rc;

    setenv("TZ", "UTC", 1);
    tzset();
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    fake_rpc_reset();
    return rc;
}

/* Unit tests of tidectl's socket-free parts: option parsing, durations, tables, address and token
 * resolution, the views of jobs/workers/events/status, log line prefixing, submit spec building and
 * JSON layout. Exact expected strings throughout (times in UTC). */
#include <errno.h>
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

#include "args.h"
#include "cli.h"
#include "config.h"
#include "token.h"
#include "duration.h"
#include "logmux.h"
#include "output.h"
#include "render.h"
#include "spec.h"
#include "table.h"

#define NOW_MS 1714564800000LL /* 2024-05-01 12:00:00 UTC */

static void expect_str(const char *got, const char *want)
{
    if (strcmp(got, want) != 0)
        print_error("want:\n%s\ngot:\n%s\n", want, got);
    assert_string_equal(got, want);
}

static const tide_cli_opt_t test_opts[] = {
    {"name", 'n', true, 1, "N", "a name"},
    {"all", 'A', false, 2, NULL, "all"},
    {"follow", 'f', false, 3, NULL, "follow"},
    {"output", 'o', true, 4, "F", "format"},
    TIDE_CLI_OPT_END,
};

static void test_args(void **state)
{
    char *argv[] = {"cmd", "--name=x", "-Af", "-ojson", "pos1", "--name", "y", "-o", "table", "--", "--all", "-", NULL};
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    (void)state;

    tide_cli_args_init(&a, 12, argv, 1, test_opts, NULL, NULL);
    assert_int_equal(tide_cli_args_next(&a, &err), 1);
    assert_string_equal(a.arg, "x");
    assert_int_equal(tide_cli_args_next(&a, &err), 2);
    assert_int_equal(tide_cli_args_next(&a, &err), 3);
    assert_int_equal(tide_cli_args_next(&a, &err), 4);
    assert_string_equal(a.arg, "json");
    assert_int_equal(tide_cli_args_next(&a, &err), TIDE_CLI_ARG_POSITIONAL);
    assert_string_equal(a.arg, "pos1");
    /* Options after a positional still count (no stop mode). */
    assert_int_equal(tide_cli_args_next(&a, &err), 1);
    assert_string_equal(a.arg, "y");
    assert_int_equal(tide_cli_args_next(&a, &err), 4);
    assert_string_equal(a.arg, "table");
    /* After "--" everything is positional. */
    assert_int_equal(tide_cli_args_next(&a, &err), TIDE_CLI_ARG_POSITIONAL);
    assert_string_equal(a.arg, "--all");
    assert_int_equal(tide_cli_args_next(&a, &err), TIDE_CLI_ARG_POSITIONAL);
    assert_string_equal(a.arg, "-");
    assert_int_equal(tide_cli_args_next(&a, &err), TIDE_CLI_ARG_END);
}

static void test_args_stop_at_positional(void **state)
{
    char *argv[] = {"submit", "-A", "python3", "train.py", "--all", "-n", "3", NULL};
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    (void)state;

    tide_cli_args_init(&a, 7, argv, 1, test_opts, NULL, NULL);
    a.stop_at_positional = true;
    assert_int_equal(tide_cli_args_next(&a, &err), 2);
    for (int i = 2; i < 7; i++) {
        assert_int_equal(tide_cli_args_next(&a, &err), TIDE_CLI_ARG_POSITIONAL);
        assert_string_equal(a.arg, argv[i]);
    }
    assert_int_equal(tide_cli_args_next(&a, &err), TIDE_CLI_ARG_END);
}

static void expect_arg_error(char *arg, const char *want)
{
    char *argv[] = {"cmd", arg, NULL};
    tide_cli_args_t a;
    tide_error_t err = {{0}};

    int id;

    tide_cli_args_init(&a, 2, argv, 1, test_opts, NULL, NULL);
    /* Good flags of a bundle come out before the bad one. */
    while ((id = tide_cli_args_next(&a, &err)) > 0)
        ;
    assert_int_equal(id, TIDE_CLI_ARG_ERROR);
    expect_str(err.text, want);
}

static void test_args_errors(void **state)
{
    (void)state;
    expect_arg_error("--bogus", "unknown option '--bogus'");
    expect_arg_error("--bogus=1", "unknown option '--bogus'");
    expect_arg_error("-x", "unknown option '-x'");
    expect_arg_error("-Ax", "unknown option '-x'");
    expect_arg_error("--name", "option '--name' needs a value");
    expect_arg_error("-n", "option '-n' needs a value");
    expect_arg_error("--all=yes", "option '--all' takes no value");
}

static void test_parse_values(void **state)
{
    int64_t v;
    char *key;
    const char *value;
    int *vals = NULL;
    size_t n = 0;
    tide_error_t err = {{0}};
    (void)state;

    assert_int_equal(tide_cli_parse_int("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(tide_cli_parse_int("-1", 0, 100, &v), -ERANGE);
    assert_int_equal(tide_cli_parse_int("101", 0, 100, &v), -ERANGE);
    assert_int_equal(tide_cli_parse_int("4x", 0, 100, &v), -EINVAL);
    assert_int_equal(tide_cli_parse_int("", 0, 100, &v), -EINVAL);
    assert_int_equal(tide_cli_parse_int(" 4", 0, 100, &v), -EINVAL);
    assert_int_equal(tide_cli_parse_int("99999999999999999999", 0, INT64_MAX, &v), -ERANGE);

    assert_int_equal(tide_cli_parse_kv("A=b=c", &key, &value), 0);
    assert_string_equal(key, "A");
    assert_string_equal(value, "b=c");
    free(key);
    assert_int_equal(tide_cli_parse_kv("A=", &key, &value), 0);
    assert_string_equal(value, "");
    free(key);
    assert_int_equal(tide_cli_parse_kv("=b", &key, &value), -EINVAL);
    assert_int_equal(tide_cli_parse_kv("A", &key, &value), -EINVAL);

    assert_int_equal(tide_cli_parse_enum_list("running,PENDING", &tide__v1__job_state__descriptor, "JOB_STATE_",
                                              "job state", &vals, &n, &err),
                     0);
    assert_int_equal(tide_cli_parse_enum_list("job_state_failed", &tide__v1__job_state__descriptor, "JOB_STATE_",
                                              "job state", &vals, &n, &err),
                     0);
    assert_int_equal(n, 3);
    assert_int_equal(vals[0], TIDE__V1__JOB_STATE__JOB_STATE_RUNNING);
    assert_int_equal(vals[1], TIDE__V1__JOB_STATE__JOB_STATE_PENDING);
    assert_int_equal(vals[2], TIDE__V1__JOB_STATE__JOB_STATE_FAILED);
    assert_int_equal(tide_cli_parse_enum_list("running,bogus", &tide__v1__job_state__descriptor, "JOB_STATE_",
                                              "job state", &vals, &n, &err),
                     -EINVAL);
    expect_str(err.text, "unknown job state 'bogus' (one of pending, running, succeeded, failed, cancelled)");
    /* UNSPECIFIED is not a filter, and an empty word is not a state. */
    assert_int_equal(tide_cli_parse_enum_list("unspecified", &tide__v1__job_state__descriptor, "JOB_STATE_",
                                              "job state", &vals, &n, &err),
                     -EINVAL);
    assert_int_equal(tide_cli_parse_enum_list("running,", &tide__v1__job_state__descriptor, "JOB_STATE_",
                                              "job state", &vals, &n, &err),
                     -EINVAL);
    free(vals);
}

static void test_duration_parse(void **state)
{
    static const struct {
        const char *in;
        int64_t want;
    } ok[] = {{"0", 0},          {"90", 90},          {"90s", 90},          {"15m", 900},
              {"2h", 7200},      {"1h30m", 5400},     {"1d", 86400},        {"1d12h", 129600},
              {"30m1h", 5400},   {"1h0m5s", 3605},    {"05:30", 330},       {"90:00", 5400},
              {"01:02:03", 3723}, {"100:00:00", 360000}, {"2-03:04:05", 183845}, {"1-12", 129600},
              {"1-12:30", 131400}, {"unlimited", 0},  {"UNLIMITED", 0},     {"36500d", 3153600000LL}};
    static const char *const bad[] = {"",     "abc", "5x",   "1h1h", "h",     "1.5h", "-5",   "1:60",
                                      "1:2:3:4", "1-24", "1-",  "-1-00", " 5",   "5 ",   "1m30", "15M",
                                      "1:", ":30", "1-1:60", "1--1", "9999999999999"};
    int64_t v;
    (void)state;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        v = -1;
        if (tide_cli_duration_parse(ok[i].in, &v) != 0 || v != ok[i].want)
            print_error("duration '%s': got %lld\n", ok[i].in, (long long)v);
        assert_int_equal(tide_cli_duration_parse(ok[i].in, &v), 0);
        assert_int_equal(v, ok[i].want);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (tide_cli_duration_parse(bad[i], &v) != -EINVAL)
            print_error("duration '%s' should be invalid\n", bad[i]);
        assert_int_equal(tide_cli_duration_parse(bad[i], &v), -EINVAL);
    }
    assert_int_equal(tide_cli_duration_parse("36501d", &v), -ERANGE);
    assert_int_equal(tide_cli_duration_parse("999999999999s", &v), -ERANGE);
    assert_int_equal(tide_cli_duration_parse("36600-00:00:00", &v), -ERANGE);
}

static void test_duration_format(void **state)
{
    static const struct {
        int64_t s;
        const char *age, *exact;
    } v[] = {{-5, "0s", "0s"},          {0, "0s", "0s"},          {59, "59s", "59s"},
             {60, "1m", "1m"},          {3599, "59m", "59m59s"},  {3600, "1h", "1h"},
             {5400, "1h", "1h30m"},     {86399, "23h", "23h59m59s"}, {86400, "1d", "1d"},
             {4 * 86400 + 5, "4d", "4d5s"}, {365 * 86400, "1y", "365d"}};
    char buf[32];
    (void)state;

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        tide_cli_age_format(v[i].s, buf, sizeof(buf));
        assert_string_equal(buf, v[i].age);
        tide_cli_duration_format(v[i].s, buf, sizeof(buf));
        assert_string_equal(buf, v[i].exact);
    }
    tide_cli_duration_format(183845, buf, 5); /* truncated at a unit, still terminated */
    assert_string_equal(buf, "2d3h");
}

static void test_table(void **state)
{
    static const char *const h[] = {"ID", "NAME", "STATE", "MESSAGE"};
    static const char *const r1[] = {"1", "mnist", "RUNNING", ""};
    static const char *const r2[] = {"12", "h\xc3\xa9llo", "FAILED", "line1\nline2\x1b[31m\xc2\x9b"};
    static const char *const r3[] = {"123", NULL, "PENDING", "waiting"};
    tide_cli_table_t *t = tide_cli_table_new(4, h);
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    tide_cli_table_add_row(t, r1);
    tide_cli_table_add_row(t, r2);
    tide_cli_table_add_row(t, r3);
    tide_cli_table_render(t, &b);
    expect_str(tide_buf_cstr(&b), "ID    NAME    STATE     MESSAGE\n"
                                  "1     mnist   RUNNING\n"
                                  "12    h\xc3\xa9llo   FAILED    line1 line2 [31m\n"
                                  "123           PENDING   waiting\n");
    tide_buf_free(&b);
    tide_cli_table_free(t);
    tide_cli_table_free(NULL);
    assert_int_equal(tide_cli_display_width("h\xc3\xa9llo \xe2\x82\xac"), 7);
}

static void test_scheduler_resolve(void **state)
{
    static const struct {
        const char *opt, *env, *want;
    } ok[] = {{NULL, NULL, "127.0.0.1:7070"},
              {NULL, "", "127.0.0.1:7070"},
              {NULL, "sched:9000", "sched:9000"},
              {"flag:1", "sched:9000", "flag:1"},
              {"node7", NULL, "node7:7070"},
              {"[::1]:7443", NULL, "[::1]:7443"},
              {"[::1]", NULL, "[::1]:7070"},
              {"a,b:7071,[::1]", NULL, "a:7070,b:7071,[::1]:7070"}};
    static const struct {
        const char *in, *err;
    } bad[] = {{"::1", "bad scheduler address '::1': IPv6 addresses need brackets, as in [::1]:7070"},
               {":7070", "bad scheduler address ':7070': missing host"},
               {"h:0", "bad scheduler address 'h:0': port must be 1-65535"},
               {"h:70000", "bad scheduler address 'h:70000': port must be 1-65535"},
               {"h:x", "bad scheduler address 'h:x': port must be 1-65535"},
               {"[::1", "bad scheduler address '[::1': unterminated '['"},
               {"[::1]x", "bad scheduler address '[::1]x': expected ':' after ']'"},
               {"a b:1", "bad scheduler address 'a b:1': contains blanks"},
               {"a:1,", "bad scheduler address '' in 'a:1,': empty address"},
               {"a:1,b:x", "bad scheduler address 'b:x' in 'a:1,b:x': port must be 1-65535"}};
    tide_error_t err = {{0}};
    char *out;
    (void)state;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        assert_int_equal(tide_cli_scheduler_resolve(ok[i].opt, ok[i].env, &out, &err), 0);
        assert_string_equal(out, ok[i].want);
        free(out);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(tide_cli_scheduler_resolve(bad[i].in, NULL, &out, &err), -EINVAL);
        expect_str(err.text, bad[i].err);
    }
}

static char *write_temp(const char *content)
{
    char *path = strdup("/tmp/tidectl-test-XXXXXX");
    int fd = mkstemp(path);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
    close(fd);
    return path;
}

static void test_token_resolve(void **state)
{
    char *f1 = write_temp("  flag-token\n"), *f2 = write_temp("env-file-token\n"), *f3 = write_temp("default\n");
    char *empty = write_temp(" \n\t");
    tide_error_t err = {{0}};
    char *tok;
    (void)state;

    /* Precedence: --token-file, TIDE_TOKEN, TIDE_TOKEN_FILE, the default path. */
    assert_int_equal(tide_token_resolve(f1, "env-token", f2, f3, &tok, &err), 0);
    assert_string_equal(tok, "flag-token");
    free(tok);
    assert_int_equal(tide_token_resolve(NULL, " env-token ", f2, f3, &tok, &err), 0);
    assert_string_equal(tok, "env-token");
    free(tok);
    assert_int_equal(tide_token_resolve(NULL, "  ", f2, f3, &tok, &err), 0);
    assert_string_equal(tok, "env-file-token");
    free(tok);
    assert_int_equal(tide_token_resolve(NULL, NULL, NULL, f3, &tok, &err), 0);
    assert_string_equal(tok, "default");
    free(tok);
    /* No default file: no token, no error. */
    assert_int_equal(tide_token_resolve(NULL, NULL, NULL, "/nonexistent/tide/token", &tok, &err), 0);
    assert_null(tok);
    /* A file that was asked for must be readable and non-empty. */
    assert_int_equal(tide_token_resolve("/nonexistent/tok", NULL, NULL, NULL, &tok, &err), -ENOENT);
    expect_str(err.text, "cannot read token file /nonexistent/tok: No such file or directory");
    assert_null(tok);
    assert_int_equal(tide_token_resolve(NULL, NULL, "/nonexistent/tok2", f3, &tok, &err), -ENOENT);
    assert_int_equal(tide_token_resolve(empty, NULL, NULL, NULL, &tok, &err), -EINVAL);
    assert_null(tok);
    assert_true(strstr(err.text, "is empty") != NULL);

    unlink(f1), unlink(f2), unlink(f3), unlink(empty);
    free(f1), free(f2), free(f3), free(empty);
}

static Tide__V1__JobSpec make_spec(void)
{
    Tide__V1__JobSpec s = TIDE__V1__JOB_SPEC__INIT;
    static char *cmd[] = {"python3", "train.py", "--note", "it's fine"};
    static Tide__V1__JobSpec__EnvEntry e1 = TIDE__V1__JOB_SPEC__ENV_ENTRY__INIT, e2 = TIDE__V1__JOB_SPEC__ENV_ENTRY__INIT;
    static Tide__V1__JobSpec__EnvEntry *env[] = {&e1, &e2};

    e1.key = "OMP_NUM_THREADS", e1.value = "4";
    e2.key = "EMPTY", e2.value = "";
    s.name = "mnist";
    s.n_command = 4, s.command = cmd;
    s.min_workers = 2, s.max_workers = 4;
    s.priority = TIDE__V1__PRIORITY__PRIORITY_HIGH;
    s.n_env = 2, s.env = env;
    s.workdir = "/home/u";
    s.time_limit_seconds = 5400;
    return s;
}

static void test_render_jobs(void **state)
{
    Tide__V1__JobSpec s1 = make_spec(), s2 = make_spec();
    Tide__V1__Job j1 = TIDE__V1__JOB__INIT, j2 = TIDE__V1__JOB__INIT, j3 = TIDE__V1__JOB__INIT;
    Tide__V1__Job *jobs[] = {&j1, &j2, &j3};
    Tide__V1__JobRank r0 = TIDE__V1__JOB_RANK__INIT, r1 = TIDE__V1__JOB_RANK__INIT;
    Tide__V1__JobRank *ranks[] = {&r1, &r0}; /* STEP is rank 0's, wherever it is in the list */
    Tide__V1__TrainerProgress p0 = TIDE__V1__TRAINER_PROGRESS__INIT, p1 = TIDE__V1__TRAINER_PROGRESS__INIT;
    char *wids[] = {"node1/gpu0", "node1/gpu1"};
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    p0.sdk = 1, p0.step = 1200;
    p1.sdk = 1, p1.step = 1199;
    r0.rank = 0, r0.progress = &p0;
    r1.rank = 1, r1.progress = &p1;
    j1.n_ranks = 2, j1.ranks = ranks;
    s2.name = "resnet-long-name";
    s2.min_workers = s2.max_workers = 1;
    j1.id = "17", j1.spec = &s1, j1.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, j1.generation = 1;
    j1.owner = "alice"; /* the others have none (a scheduler from before identities): "-" */
    j1.n_worker_ids = 2, j1.worker_ids = wids, j1.submit_time_ms = NOW_MS - 185000;
    j2.id = "18", j2.spec = &s2, j2.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING;
    j2.message = "waiting for 1 free worker", j2.submit_time_ms = NOW_MS - 5000;
    j3.id = "9", j3.state = 9, j3.submit_time_ms = NOW_MS - 4 * 86400000LL;
    tide_cli_render_jobs(jobs, 3, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b),
               "ID   NAME               OWNER   STATE     WORKERS   GEN   STEP   AGE   MESSAGE\n"
               "17   mnist              alice   RUNNING   2/2-4     1     1200   3m\n"
               "18   resnet-long-name   -       PENDING   0/1       0     -      5s    waiting for 1 free worker\n"
               "9    -                  -       9         0         0     -      4d\n");
    tide_buf_free(&b);

    /* Rank 0 without the SDK (or no step yet) shows "-", even when another rank reports. */
    p0.sdk = 0;
    tide_cli_render_jobs(jobs, 1, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "ID   NAME    OWNER   STATE     WORKERS   GEN   STEP   AGE   MESSAGE\n"
                                  "17   mnist   alice   RUNNING   2/2-4     1     -      3m\n");
    tide_buf_reset(&b);
    p0.sdk = 1, p0.step = -1;
    tide_cli_render_jobs(jobs, 1, NOW_MS, &b);
    assert_non_null(strstr(tide_buf_cstr(&b), "\n17   mnist   alice   RUNNING   2/2-4     1     -      3m\n"));
    tide_buf_free(&b);
}

static void test_render_job(void **state)
{
    Tide__V1__JobSpec s = make_spec();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__JobRank r0 = TIDE__V1__JOB_RANK__INIT, r1 = TIDE__V1__JOB_RANK__INIT;
    Tide__V1__JobRank *ranks[] = {&r0, &r1};
    char *wids[] = {"node1/gpu0", "node2/gpu0"};
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    j.id = "17", j.spec = &s, j.state = TIDE__V1__JOB_STATE__JOB_STATE_FAILED, j.generation = 2;
    j.n_worker_ids = 2, j.worker_ids = wids;
    r0.rank = 0, r0.worker_id = "node1/gpu0", r0.phase = TIDE__V1__RANK_PHASE__RANK_PHASE_EXITED, r0.pid = 4242;
    r0.exit_code = 137;
    r1.rank = 1, r1.worker_id = "node2/gpu0", r1.phase = TIDE__V1__RANK_PHASE__RANK_PHASE_LOST;
    j.n_ranks = 2, j.ranks = ranks;
    j.master_addr = "node1", j.master_port = 29500;
    j.submit_time_ms = NOW_MS - 600000;
    j.start_time_ms = NOW_MS - 590000;
    j.end_time_ms = NOW_MS - 5000;
    j.gpu_seconds = 1170.04;
    j.exit_code = 137, j.failed_rank = 0;
    j.message = "rank 0 was killed\n(out of memory?)";
    j.owner = "alice", j.run_as = "alice_unix";
    tide_cli_render_job(&j, NOW_MS, false, &b);
    expect_str(tide_buf_cstr(&b), "ID:           17\n"
                                  "Name:         mnist\n"
                                  "State:        FAILED\n"
                                  "Owner:        alice\n"
                                  "Runs as:      alice_unix\n"
                                  "Priority:     HIGH\n"
                                  "Launcher:     ENV\n"
                                  "Size:         2 workers (min 2, max 4, elastic)\n"
                                  "Generation:   2\n"
                                  "Ranks:\n"
                                  "  RANK   WORKER       PHASE    PID    EXIT            STEP   TRAINER   STEP-TIME   FLOP/S\n"
                                  "  0      node1/gpu0   EXITED   4242   137 (SIGKILL)   -      -         -           -\n"
                                  "  1      node2/gpu0   LOST     -      -               -      -         -           -\n"
                                  "Master:       node1:29500\n"
                                  "Checkpoint:   -\n"
                                  "Command:      python3 train.py --note 'it'\\''s fine'\n"
                                  "Workdir:      /home/u\n"
                                  "Environment:  OMP_NUM_THREADS=4\n"
                                  "              EMPTY=\n"
                                  "Time limit:   1h30m\n"
                                  "Submitted:    2024-05-01 11:50:00 (10m ago)\n"
                                  "Started:      2024-05-01 11:50:10\n"
                                  "Ended:        2024-05-01 11:59:55\n"
                                  "Duration:     9m45s\n"
                                  "GPU-seconds:  1170.0\n"
                                  "Exit code:    137 (SIGKILL) (rank 0)\n"
                                  "Message:      rank 0 was killed (out of memory?)\n");
    tide_buf_free(&b);

    /* A pending job without spec details and a running one (worker ids only, UTC times). */
    Tide__V1__Job p = TIDE__V1__JOB__INIT;
    p.id = "3", p.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, p.n_worker_ids = 2, p.worker_ids = wids;
    p.start_time_ms = NOW_MS - 61000, p.failed_rank = -1;
    tide_cli_render_job(&p, NOW_MS, true, &b);
    expect_str(tide_buf_cstr(&b), "ID:           3\n"
                                  "Name:         -\n"
                                  "State:        RUNNING\n"
                                  "Owner:        -\n"
                                  "Priority:     UNSPECIFIED\n"
                                  "Launcher:     -\n"
                                  "Size:         2 workers\n"
                                  "Generation:   0\n"
                                  "Ranks:\n"
                                  "  RANK   WORKER\n"
                                  "  0      node1/gpu0\n"
                                  "  1      node2/gpu0\n"
                                  "Checkpoint:   -\n"
                                  "Submitted:    -\n"
                                  "Started:      2024-05-01 11:58:59 UTC\n"
                                  "Ended:        -\n"
                                  "Duration:     1m1s (running)\n"
                                  "GPU-seconds:  0.0\n"
                                  "Exit code:    -\n"
                                  "Message:      -\n");
    tide_buf_free(&b);
}

/* What SDK trainers report, the last checkpoint and a request in flight; ranks without the SDK get "-". */
static void test_render_job_progress(void **state)
{
    Tide__V1__JobSpec s = make_spec();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__JobRank r[4] = {TIDE__V1__JOB_RANK__INIT, TIDE__V1__JOB_RANK__INIT, TIDE__V1__JOB_RANK__INIT,
                              TIDE__V1__JOB_RANK__INIT};
    Tide__V1__JobRank *ranks[] = {&r[0], &r[1], &r[2], &r[3]};
    Tide__V1__TrainerProgress p[4] = {TIDE__V1__TRAINER_PROGRESS__INIT, TIDE__V1__TRAINER_PROGRESS__INIT,
                                      TIDE__V1__TRAINER_PROGRESS__INIT, TIDE__V1__TRAINER_PROGRESS__INIT};
    Tide__V1__Checkpoint c = TIDE__V1__CHECKPOINT__INIT;
    static const char *const workers[] = {"node1/gpu0", "node1/gpu1", "node2/gpu0", "node2/gpu1"};
    tide_buf_t b = TIDE_BUF_INIT;
    const char *view;
    (void)state;

    s.launcher = TIDE__V1__LAUNCHER__LAUNCHER_MPI;
    for (int i = 0; i < 4; i++) {
        r[i].rank = i, r[i].worker_id = (char *)workers[i], r[i].pid = 100 + i;
        r[i].phase = TIDE__V1__RANK_PHASE__RANK_PHASE_RUNNING;
    }
    /* A GPU rank in its update phase: 124.8 TFLOP in 0.4 s. */
    p[0].sdk = 1, p[0].step = 1200, p[0].phase = TIDE__V1__TRAINER_PHASE__TRAINER_PHASE_UPDATE;
    p[0].step_flops = 1.248e14, p[0].step_seconds = 0.4;
    /* Short steps. */
    p[1].sdk = 1, p[1].step = 1199, p[1].phase = TIDE__V1__TRAINER_PHASE__TRAINER_PHASE_BACKWARD;
    p[1].step_flops = 5e9, p[1].step_seconds = 0.0042;
    /* A CPU rank: 2.5 GFLOP in 12.5 s. */
    p[2].sdk = 1, p[2].step = 7, p[2].phase = TIDE__V1__TRAINER_PHASE__TRAINER_PHASE_FORWARD;
    p[2].step_flops = 2.5e9, p[2].step_seconds = 12.5;
    /* Connected, no step yet. */
    p[3].sdk = 1, p[3].step = -1, p[3].phase = TIDE__V1__TRAINER_PHASE__TRAINER_PHASE_IDLE;
    for (int i = 0; i < 4; i++)
        r[i].progress = &p[i];
    j.id = "17", j.spec = &s, j.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, j.generation = 2;
    j.n_ranks = 4, j.ranks = ranks, j.failed_rank = -1;
    c.step = 1100, c.generation = 2, c.ranks = 4, c.bytes = 1610612736, c.path = "/ckpt/job17/step-1100\x1b[2J";
    c.time_ms = NOW_MS - 180000, c.request_id = 5;
    j.last_checkpoint = &c;
    j.checkpoint_request = 1714564790000ULL, j.checkpoint_deadline_ms = NOW_MS + 49600;
    tide_cli_render_job(&j, NOW_MS, false, &b);
    view = tide_buf_cstr(&b);
    assert_non_null(strstr(view, "Priority:     HIGH\nLauncher:     MPI\nSize:"));
    assert_non_null(strstr(view,
                           "Ranks:\n"
                           "  RANK   WORKER       PHASE     PID   EXIT   STEP   TRAINER    STEP-TIME   FLOP/S\n"
                           "  0      node1/gpu0   RUNNING   100   -      1200   UPDATE     400ms       312T\n"
                           "  1      node1/gpu1   RUNNING   101   -      1199   BACKWARD   4.2ms       1.19T\n"
                           "  2      node2/gpu0   RUNNING   102   -      7      FORWARD    12.5s       200M\n"
                           "  3      node2/gpu1   RUNNING   103   -      -      IDLE       -           -\n"
                           "Checkpoint:   step 1100 (generation 2, 4 ranks), 1.5 GiB, /ckpt/job17/step-1100 [2J, 3m ago\n"
                           "              request 1714564790000 pending, deadline in 50s\n"
                           "Command:"));
    tide_buf_reset(&b);

    /* Without the SDK: no progress at all, or progress not from the SDK. No checkpoint yet, a request
     * whose deadline has passed; step times of a second and more. */
    r[0].progress = NULL;
    p[1].sdk = 0;
    p[2].step_seconds = 1.25, p[3].step = 3, p[3].step_seconds = 340, p[3].step_flops = 1e3;
    j.last_checkpoint = NULL;
    j.checkpoint_request = 9, j.checkpoint_deadline_ms = NOW_MS - 2000;
    tide_cli_render_job(&j, NOW_MS, false, &b);
    view = tide_buf_cstr(&b);
    assert_non_null(strstr(view,
                           "  RANK   WORKER       PHASE     PID   EXIT   STEP   TRAINER   STEP-TIME   FLOP/S\n"
                           "  0      node1/gpu0   RUNNING   100   -      -      -         -           -\n"
                           "  1      node1/gpu1   RUNNING   101   -      -      -         -           -\n"
                           "  2      node2/gpu0   RUNNING   102   -      7      FORWARD   1.25s       2.00G\n"
                           "  3      node2/gpu1   RUNNING   103   -      3      IDLE      340s        2.94\n"
                           "Checkpoint:   none yet; request 9 pending, deadline passed\n"));
    tide_buf_reset(&b);

    /* A checkpoint of one rank without a path or time; nothing pending. */
    c.ranks = 1, c.path = "", c.time_ms = 0, c.bytes = 0, c.step = 0;
    j.last_checkpoint = &c;
    j.checkpoint_request = 0;
    tide_cli_render_job(&j, NOW_MS, false, &b);
    assert_non_null(strstr(tide_buf_cstr(&b), "\nCheckpoint:   step 0 (generation 2, 1 rank), 0 B\nCommand:"));
    tide_buf_free(&b);
    assert_null(tide_cli_job_progress(&j)); /* rank 0 has none */
    r[0].progress = &p[0];
    assert_ptr_equal(tide_cli_job_progress(&j), &p[0]);
}

/* Work stealing (docs/work-stealing.md): the Stealing line and the Tasks table, top's task lines. */
static void test_render_job_tasks(void **state)
{
    Tide__V1__JobSpec s = make_spec();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__JobRank r[2] = {TIDE__V1__JOB_RANK__INIT, TIDE__V1__JOB_RANK__INIT};
    Tide__V1__JobRank *ranks[] = {&r[0], &r[1]};
    Tide__V1__TrainerProgress p[2] = {TIDE__V1__TRAINER_PROGRESS__INIT, TIDE__V1__TRAINER_PROGRESS__INIT};
    Tide__V1__Job *jobs[] = {&j};
    tide_buf_t b = TIDE_BUF_INIT;
    const char *view;
    (void)state;

    r[0].rank = 0, r[0].worker_id = "node1/gpu0", r[0].phase = TIDE__V1__RANK_PHASE__RANK_PHASE_RUNNING;
    r[1].rank = 1, r[1].worker_id = "node1/gpu1\x1b[2J", r[1].phase = TIDE__V1__RANK_PHASE__RANK_PHASE_RUNNING;
    j.id = "17", j.spec = &s, j.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, j.generation = 1;
    j.n_ranks = 2, j.ranks = ranks, j.failed_rank = -1;
    /* No task reports: nothing about stealing. */
    tide_cli_render_job(&j, NOW_MS, false, &b);
    assert_null(strstr(tide_buf_cstr(&b), "Stealing:"));
    assert_false(tide_cli_job_uses_tasks(&j));
    tide_cli_render_top_tasks(jobs, 1, NOW_MS, &b);
    assert_null(strstr(tide_buf_cstr(&b), "tasks:"));
    tide_buf_reset(&b);

    p[0].sdk = 1, p[0].step = 40, p[0].step_seconds = 0.036, p[0].task_seconds = 0.0041, p[0].tasks_run = 330;
    p[0].tasks_stolen = 12, p[0].busy_fraction = 0.93;
    p[1].sdk = 1, p[1].step = 40, p[1].step_seconds = 0.036, p[1].task_seconds = 0.0082, p[1].tasks_run = 150;
    p[1].tasks_given = 12, p[1].busy_fraction = 0.97;
    r[0].progress = &p[0], r[1].progress = &p[1];
    r[0].slowness = 0.67;
    r[1].slowness = 1.33, r[1].straggler = TIDE__V1__STRAGGLER_STATE__STRAGGLER_STATE_STRAGGLER;
    r[1].slow_since_ms = NOW_MS - 45000;
    j.tasks_stolen = 12, j.steal_requests = 20, j.tasks_committed = 480, j.stragglers = 1;
    tide_cli_render_job(&j, NOW_MS, false, &b);
    view = tide_buf_cstr(&b);
    assert_non_null(strstr(view,
                           "Stealing:     12 tasks stolen for 20 steal requests, 480 committed; 1 straggler\n"
                           "Tasks:\n"
                           "  RANK   WORKER           STEP-TIME   TASK-TIME   TASKS   STOLEN   GIVEN   BUSY   SLOWNESS   STATE\n"
                           "  0      node1/gpu0       36.0ms      4.10ms      330     12       0       93%    0.67x      -\n"
                           "  1      node1/gpu1 [2J   36.0ms      8.20ms      150     0        12      97%    1.33x      "
                           "STRAGGLER\n"));
    tide_buf_reset(&b);
    tide_cli_render_top_tasks(jobs, 1, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "\ntasks: job 17: 12 stolen, 480 committed; busy 93%..97% (mean 95%)\n"
                                  "  rank 1 on node1/gpu1 [2J: STRAGGLER, 8.20ms per task (1.33x the median) for 45s, "
                                  "12 tasks given away\n");
    tide_buf_reset(&b);
    s.no_stealing = 1;
    tide_cli_render_job(&j, NOW_MS, false, &b);
    assert_non_null(strstr(tide_buf_cstr(&b), "480 committed (stealing off for this job); 1 straggler\n"));
    tide_buf_free(&b);
}

/* Elastic scaling (render_resize.c): the Size / Resize / Last resize lines, the WORKERS cell while a
 * resize runs, and the lines of tidectl scale. */
static void test_render_resize(void **state)
{
    Tide__V1__JobSpec s = make_spec();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__Job *jobs[] = {&j};
    Tide__V1__Resize r = TIDE__V1__RESIZE__INIT, lr = TIDE__V1__RESIZE__INIT;
    char *wids[] = {"node1/gpu0", "node1/gpu1"};
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    s.max_workers = 8;
    j.id = "7", j.spec = &s, j.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, j.generation = 2;
    j.n_worker_ids = 2, j.worker_ids = wids, j.failed_rank = -1;

    /* Sizes: elastic, requested, fixed, no spec; one worker is singular. */
    tide_cli_render_size(&j, &b);
    expect_str(tide_buf_cstr(&b), "Size:         2 workers (min 2, max 8, elastic)\n");
    tide_buf_reset(&b);
    j.target_workers = 4;
    tide_cli_render_size(&j, &b);
    expect_str(tide_buf_cstr(&b), "Size:         2 workers (min 2, max 8, requested 4)\n");
    tide_buf_reset(&b);
    j.target_workers = 0, s.max_workers = 2;
    tide_cli_render_size(&j, &b);
    expect_str(tide_buf_cstr(&b), "Size:         2 workers (min 2, max 2)\n");
    tide_buf_reset(&b);
    j.spec = NULL, j.n_worker_ids = 1;
    tide_cli_render_size(&j, &b);
    expect_str(tide_buf_cstr(&b), "Size:         1 worker\n");
    tide_buf_reset(&b);
    j.spec = &s, s.max_workers = 8, j.n_worker_ids = 2;

    /* Nothing about resizes until there is one. */
    tide_cli_render_resizes(&j, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "");

    /* Under way: the phase and how long since the decision. */
    j.target_workers = 4;
    r.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_CHECKPOINTING;
    r.reason = TIDE__V1__RESIZE_REASON__RESIZE_REASON_REQUESTED;
    r.from_workers = 2, r.to_workers = 4, r.from_generation = 2;
    r.detail = "requested by ScaleJob";
    r.decided_ms = NOW_MS - 1200;
    j.resize = &r;
    tide_cli_render_resizes(&j, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "Resize:       2 -> 4 (requested) checkpointing since 1.2s\n");
    tide_buf_reset(&b);
    /* tidectl job puts them together: Size, Generation, Resize. */
    tide_cli_render_job(&j, NOW_MS, true, &b);
    assert_non_null(strstr(tide_buf_cstr(&b), "\nSize:         2 workers (min 2, max 8, requested 4)\n"
                                              "Generation:   2\n"
                                              "Resize:       2 -> 4 (requested) checkpointing since 1.2s\n"
                                              "Ranks:\n"));
    tide_buf_reset(&b);
    /* The jobs table says both sizes while it runs. */
    tide_cli_render_jobs(jobs, 1, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "ID   NAME    OWNER   STATE     WORKERS   GEN   STEP   AGE   MESSAGE\n"
                                  "7    mnist   -       RUNNING   2\xe2\x86\x92" "4/2-8   2     -      -\n");
    tide_buf_reset(&b);

    /* tide's own shrink says why on a second line; a long phase reads in minutes. */
    r.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_STOPPING;
    r.reason = TIDE__V1__RESIZE_REASON__RESIZE_REASON_SHRINK;
    r.from_workers = 4, r.to_workers = 2;
    r.detail = "job 12 (CRITICAL) needs 2 GPUs\x1b[2J";
    r.decided_ms = NOW_MS - 65000;
    tide_cli_render_resizes(&j, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "Resize:       4 -> 2 (shrink) stopping since 1m5s\n"
                                  "              job 12 (CRITICAL) needs 2 GPUs [2J\n");
    tide_buf_reset(&b);

    /* Pending: the reason it waits. */
    r.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING;
    r.reason = TIDE__V1__RESIZE_REASON__RESIZE_REASON_REQUESTED;
    r.from_workers = 2, r.to_workers = 8;
    r.detail = "only 3 workers free";
    tide_cli_render_resizes(&j, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "Resize:       2 -> 8 (requested) pending: only 3 workers free\n");
    tide_buf_reset(&b);
    tide_cli_render_jobs(jobs, 1, NOW_MS, &b); /* pending: nothing moves yet */
    assert_non_null(strstr(tide_buf_cstr(&b), "\n7    mnist   -       RUNNING   2/2-8     2"));
    tide_buf_reset(&b);

    /* The last completed one, with its phases; fewer than asked is said. */
    j.resize = NULL, j.generation = 3, j.resizes = 2, j.n_worker_ids = 4;
    lr.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_DONE;
    lr.reason = TIDE__V1__RESIZE_REASON__RESIZE_REASON_GROW;
    lr.from_workers = 2, lr.to_workers = 4, lr.workers = 4, lr.from_generation = 2, lr.to_generation = 3;
    lr.total_seconds = 1.42, lr.checkpoint_seconds = 0.31, lr.stop_seconds = 0.40, lr.start_seconds = 0.71;
    j.last_resize = &lr;
    tide_cli_render_resizes(&j, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "Last resize:  2 -> 4 (grow) in 1.42 s (checkpoint 0.31, stop 0.40, start 0.71), "
                                  "generation 3; 2 resizes\n");
    tide_buf_reset(&b);
    lr.workers = 3, j.resizes = 1, lr.reason = 9;
    tide_cli_render_resizes(&j, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b), "Last resize:  2 -> 3 (9, 4 asked) in 1.42 s (checkpoint 0.31, stop 0.40, start "
                                  "0.71), generation 3; 1 resize\n");
    tide_buf_reset(&b);
    tide_cli_render_resized(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 7: resized 2 -> 3 workers (4 asked) in 1.42 s (checkpoint 0.31 s, stop 0.40 s, "
                                  "start 0.71 s), generation 3\n");
    tide_buf_reset(&b);
    lr.workers = 4;
    tide_cli_render_resized(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 7: resized 2 -> 4 workers in 1.42 s (checkpoint 0.31 s, stop 0.40 s, start "
                                  "0.71 s), generation 3\n");
    tide_buf_reset(&b);

    /* What tidectl scale prints for the job ScaleJob returned. */
    j.last_resize = NULL, j.n_worker_ids = 2, j.target_workers = 4;
    r.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_CHECKPOINTING;
    r.from_workers = 2, r.to_workers = 4;
    j.resize = &r;
    tide_cli_render_scale(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 7: scaling 2 -> 4 workers (resizing: checkpointing)\n");
    tide_buf_reset(&b);
    r.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING;
    r.detail = "only 1 worker free\n";
    tide_cli_render_scale(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 7: 4 workers requested; pending: only 1 worker free\n");
    tide_buf_reset(&b);
    j.resize = NULL, j.n_worker_ids = 4;
    tide_cli_render_scale(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 7: already 4 workers\n");
    tide_buf_reset(&b);
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, j.n_worker_ids = 0;
    tide_cli_render_scale(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 7: will start with at most 4 workers\n");
    tide_buf_reset(&b);
    j.target_workers = 0;
    tide_cli_render_scale(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 7: will start with at most 8 workers (elastic)\n");
    tide_buf_reset(&b);
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, j.n_worker_ids = 4;
    tide_cli_render_scale(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 7: elastic: 4 workers now, sized by tide within 2..8\n");
    tide_buf_reset(&b);

    /* The progress text of scale --wait. */
    r.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_STOPPING;
    j.resize = &r;
    tide_cli_render_resize_progress(&j, 1.24, &b);
    expect_str(tide_buf_cstr(&b), "job 7: resizing 2 -> 4: stopping 1.2s");
    tide_buf_reset(&b);
    r.state = TIDE__V1__RESIZE_STATE__RESIZE_STATE_PENDING;
    r.detail = "only 1 worker free";
    tide_cli_render_resize_progress(&j, 12, &b);
    expect_str(tide_buf_cstr(&b), "job 7: resize to 4 pending 12.0s: only 1 worker free");
    tide_buf_free(&b);
}

static void test_render_recovery(void **state)
{
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__JobSpec s = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__Generation g1 = TIDE__V1__GENERATION__INIT, g2 = TIDE__V1__GENERATION__INIT;
    Tide__V1__Generation *gs[] = {&g1, &g2};
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    /* Nothing to say: no lines. */
    j.spec = &s;
    tide_cli_render_recovery(&j, NOW_MS, true, &b);
    expect_str(tide_buf_cstr(&b), "");
    g1.number = 1, g1.workers = 2, g1.cause = "submitted", g1.detail = "";
    g1.start_time_ms = 1714564800000LL, g1.running_time_ms = 1714564801000LL, g1.end_time_ms = 1714565100000LL;
    g1.end = "rank 1 lost", g1.resumed_step = -1, g1.steps_lost = -1;
    g2.number = 2, g2.workers = 2, g2.cause = "worker_lost";
    g2.detail = "rank 1 lost (worker n1/gpu1 died (no heartbeat for 1.5 s))\x1b[31m";
    g2.start_time_ms = 1714565100000LL, g2.failure_time_ms = 1714565099900LL, g2.running_time_ms = 1714565101420LL;
    g2.resumed_step = 100, g2.steps_lost = 25, g2.seconds_lost = 5.0;
    j.n_generations = 2, j.generations = gs;
    j.restarts = 1, j.restarts_in_row = 1;
    tide_cli_render_recovery(&j, NOW_MS, true, &b);
    expect_str(tide_buf_cstr(&b),
               "Restarts:     1 (1 in a row; policy on-loss)\n"
               "Generations:\n"
               "  GEN   WORKERS   STARTED     CAUSE         RECOVERY   LOST               RESUMED    ENDED\n"
               "  1     2         12:00:00Z   submitted     -          -                  -          12:05:00Z\n"
               "  2     2         12:05:00Z   worker_lost   1.52s      25 steps (5.00s)   step 100   -\n"
               "Last failure: rank 1 lost (worker n1/gpu1 died (no heartbeat for 1.5 s)) [31m (generation 2 "
               "started for it)\n");
    /* A backoff in progress, the job's own policy. */
    tide_buf_reset(&b);
    j.n_generations = 0;
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, j.restarts_in_row = 2, j.restart_at_ms = NOW_MS + 800;
    s.restart_policy = TIDE__V1__RESTART_POLICY__RESTART_POLICY_ON_FAILURE, s.max_restarts = 5;
    tide_cli_render_recovery(&j, NOW_MS, true, &b);
    expect_str(tide_buf_cstr(&b),
               "Restarts:     1 (2 in a row; policy on-failure, at most 5 in a row); next in 0.80s (backoff)\n");
    tide_buf_free(&b);
}

static void test_render_workers(void **state)
{
    Tide__V1__Worker w0 = TIDE__V1__WORKER__INIT, w1 = TIDE__V1__WORKER__INIT;
    Tide__V1__Worker *ws[] = {&w0, &w1};
    Tide__V1__Telemetry t = TIDE__V1__TELEMETRY__INIT;
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    t.gpu_util = 0.873, t.temperature_c = 64.6;
    w0.id = "node1/gpu0", w0.node = "node1", w0.gpu_index = 0, w0.device = "sim:h100";
    w0.state = TIDE__V1__WORKER_STATE__WORKER_STATE_BUSY, w0.job_id = "17", w0.rank = 1;
    w0.telemetry = &t, w0.last_heartbeat_ms = NOW_MS - 400;
    w1.id = "node1/gpu1", w1.node = "node1", w1.gpu_index = 1, w1.device = "sim:h100";
    w1.state = TIDE__V1__WORKER_STATE__WORKER_STATE_DEAD, w1.rank = -1, w1.cordoned = 1;
    w1.last_heartbeat_ms = NOW_MS - 3 * 3600000LL;
    w0.failure_risk = 0.456;
    tide_cli_render_workers(ws, 2, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b),
               "ID           NODE    GPU   DEVICE     STATE   JOB   RANK   CORDONED   UTIL   TEMP   RISK   HEARTBEAT\n"
               "node1/gpu0   node1   0     sim:h100   BUSY    17    1      no         87%    65C    0.46   0s\n"
               "node1/gpu1   node1   1     sim:h100   DEAD    -     -      yes        -      -      0.00   3h\n");
    /* A cordon with a reason shows the reason's head. */
    tide_buf_reset(&b);
    w1.cordon_reason = "predicted failure: temperature 96.0 C rising 120.0 C/min";
    tide_cli_render_workers(ws + 1, 1, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b),
               "ID           NODE    GPU   DEVICE     STATE   JOB   RANK   CORDONED            UTIL   TEMP   RISK   HEARTBEAT\n"
               "node1/gpu1   node1   1     sim:h100   DEAD    -     -      predicted failure   -      -      0.00   3h\n");
    tide_buf_free(&b);
}

static void test_render_event_status_change(void **state)
{
    Tide__V1__Event ev = TIDE__V1__EVENT__INIT;
    Tide__V1__ClusterStatus cs = TIDE__V1__CLUSTER_STATUS__INIT;
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    char *wids[] = {"node1/gpu0", "node1/gpu1"};
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    ev.seq = 5, ev.time_ms = NOW_MS, ev.type = "job.started", ev.job_id = "17", ev.worker_id = "node1/gpu0";
    ev.message = "generation 1 on 2 workers";
    tide_cli_render_event(&ev, false, &b);
    ev.type = "worker.dead", ev.job_id = "", ev.message = "";
    tide_cli_render_event(&ev, true, &b);
    expect_str(tide_buf_cstr(&b),
               "2024-05-01 12:00:00  job.started        17     node1/gpu0     generation 1 on 2 workers\n"
               "2024-05-01 12:00:00 UTC  worker.dead        -      node1/gpu0\n");
    tide_buf_reset(&b);

    cs.version = "0.1.0", cs.uptime_ms = 11520000, cs.leader_epoch = 4, cs.store = "sqlite";
    cs.workers_total = 16, cs.workers_ready = 4, cs.workers_busy = 10, cs.workers_suspect = 1;
    cs.workers_dead = 1, cs.workers_cordoned = 2;
    cs.jobs_pending = 5, cs.jobs_running = 3, cs.jobs_succeeded = 40, cs.jobs_failed = 2, cs.jobs_cancelled = 1;
    tide_cli_render_status(&cs, "127.0.0.1:7070", &b);
    expect_str(tide_buf_cstr(&b),
               "Scheduler:  127.0.0.1:7070 (tide 0.1.0, up 3h12m, leader epoch 4, store sqlite)\n"
               "Workers:    16 total: 4 ready, 10 busy, 1 suspect, 1 dead; 2 cordoned\n"
               "Jobs:       5 pending, 3 running, 40 succeeded, 2 failed, 1 cancelled\n");
    tide_buf_reset(&b);

    j.id = "17", j.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, j.failed_rank = -1;
    tide_cli_render_job_change(&j, &b);
    j.message = "waiting for 2 workers";
    tide_cli_render_job_change(&j, &b);
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, j.generation = 1, j.n_worker_ids = 2, j.worker_ids = wids;
    tide_cli_render_job_change(&j, &b);
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_FAILED, j.message = "", j.failed_rank = 1, j.exit_code = 3;
    tide_cli_render_job_change(&j, &b);
    j.message = "rank 1 exited with code 3";
    tide_cli_render_job_change(&j, &b);
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED, j.message = "";
    tide_cli_render_job_change(&j, &b);
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_CANCELLED, j.message = "cancelled by user";
    tide_cli_render_job_change(&j, &b);
    expect_str(tide_buf_cstr(&b), "job 17: PENDING\n"
                                  "job 17: PENDING (waiting for 2 workers)\n"
                                  "job 17: RUNNING on node1/gpu0,node1/gpu1 (generation 1)\n"
                                  "job 17: FAILED: rank 1 exited with code 3\n"
                                  "job 17: FAILED: rank 1 exited with code 3\n"
                                  "job 17: SUCCEEDED\n"
                                  "job 17: CANCELLED: cancelled by user\n");
    tide_buf_free(&b);
}

static void test_small_formats(void **state)
{
    char *argv[] = {"python3", "-c", "print('hi')", "a b", "", "x=1,y/z@w"};
    char buf[64];
    char *s;
    (void)state;

    s = tide_cli_shell_join(argv, 6);
    expect_str(s, "python3 -c 'print('\\''hi'\\'')' 'a b' '' x=1,y/z@w");
    free(s);
    tide_cli_exit_code_format(137, buf, sizeof(buf));
    assert_string_equal(buf, "137 (SIGKILL)");
    tide_cli_exit_code_format(143, buf, sizeof(buf));
    assert_string_equal(buf, "143 (SIGTERM)");
    tide_cli_exit_code_format(3, buf, sizeof(buf));
    assert_string_equal(buf, "3");
    tide_cli_exit_code_format(128, buf, sizeof(buf));
    assert_string_equal(buf, "128");
    tide_cli_time_format(0, false, buf, sizeof(buf));
    assert_string_equal(buf, "-");
    assert_string_equal(tide_cli_enum_name(&tide__v1__job_state__descriptor, 2, "JOB_STATE_", buf, sizeof(buf)),
                        "RUNNING");
    assert_string_equal(tide_cli_enum_name(&tide__v1__job_state__descriptor, 99, "JOB_STATE_", buf, sizeof(buf)),
                        "99");
    tide_cli_bytes_format(0, buf, sizeof(buf));
    assert_string_equal(buf, "0 B");
    tide_cli_bytes_format(1023, buf, sizeof(buf));
    assert_string_equal(buf, "1023 B");
    tide_cli_bytes_format(1024, buf, sizeof(buf));
    assert_string_equal(buf, "1.0 KiB");
    tide_cli_bytes_format(1536, buf, sizeof(buf));
    assert_string_equal(buf, "1.5 KiB");
    tide_cli_bytes_format(1048575, buf, sizeof(buf)); /* not "1024.0 KiB" */
    assert_string_equal(buf, "1.0 MiB");
    tide_cli_bytes_format(20971520, buf, sizeof(buf));
    assert_string_equal(buf, "20.0 MiB");
    tide_cli_bytes_format(UINT64_MAX, buf, sizeof(buf));
    assert_string_equal(buf, "16.0 EiB");
}

static void feed(tide_cli_logmux_t *m, int rank, const char *s, tide_buf_t *out)
{
    tide_cli_logmux_feed(m, rank, (const uint8_t *)s, strlen(s), out);
}

static void test_logmux(void **state)
{
    tide_cli_logmux_t *m = tide_cli_logmux_new(true);
    tide_buf_t b = TIDE_BUF_INIT;
    char *big;
    (void)state;

    feed(m, 0, "epoch 1\nloss=", &b);
    feed(m, 1, "epoch 1\n", &b);
    feed(m, 0, "0.5\n", &b);
    feed(m, 10, "no newline", &b);
    feed(m, 1, "a\n\nb", &b);
    expect_str(tide_buf_cstr(&b), "[rank 0] epoch 1\n"
                                  "[rank 1] epoch 1\n"
                                  "[rank 0] loss=0.5\n"
                                  "[rank 1] a\n"
                                  "[rank 1] \n");
    tide_buf_reset(&b);
    tide_cli_logmux_flush(m, &b);
    expect_str(tide_buf_cstr(&b), "[rank 1] b\n[rank 10] no newline\n");
    tide_buf_reset(&b);
    tide_cli_logmux_flush(m, &b);
    assert_int_equal(b.len, 0);

    /* A line without end is written out at the bound, not held forever. */
    big = malloc(TIDE_CLI_LOGMUX_MAX_PARTIAL + 11);
    memset(big, 'x', TIDE_CLI_LOGMUX_MAX_PARTIAL + 10);
    big[TIDE_CLI_LOGMUX_MAX_PARTIAL + 10] = '\0';
    feed(m, 2, big, &b);
    assert_int_equal(b.len, strlen("[rank 2] ") + TIDE_CLI_LOGMUX_MAX_PARTIAL + 1);
    tide_buf_reset(&b);
    tide_cli_logmux_flush(m, &b);
    expect_str(tide_buf_cstr(&b), "[rank 2] xxxxxxxxxx\n");
    free(big);
    tide_buf_reset(&b);
    tide_cli_logmux_free(m);

    /* Without prefixes bytes pass through as they are, partial lines and NULs included. */
    m = tide_cli_logmux_new(false);
    tide_cli_logmux_feed(m, 0, (const uint8_t *)"a\0b\nc", 5, &b);
    tide_cli_logmux_flush(m, &b);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data, "a\0b\nc", 5);
    tide_buf_free(&b);
    tide_cli_logmux_free(m);
    tide_cli_logmux_free(NULL);
}

static int apply(tide_cli_submit_t *s, int id, const char *arg, tide_error_t *err)
{
    return tide_cli_submit_apply(s, id, arg, err);
}

static void test_submit_spec(void **state)
{
    tide_cli_submit_t o;
    tide_error_t err = {{0}};
    Tide__V1__JobSpec *spec, base = make_spec();
    char *cmd[] = {"/usr/bin/python3", "train.py"};
    (void)state;

    memset(&o, 0, sizeof(o));
    o.command = cmd, o.n_command = 2;
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/work/here", &spec, &err), 0);
    assert_string_equal(spec->name, "python3");
    assert_int_equal(spec->n_command, 2);
    assert_string_equal(spec->command[0], "/usr/bin/python3");
    assert_int_equal(spec->min_workers, 1);
    assert_int_equal(spec->max_workers, 0);
    assert_string_equal(spec->workdir, "/work/here");
    assert_int_equal(spec->priority, 0);
    protobuf_c_message_free_unpacked(&spec->base, NULL);

    assert_int_equal(apply(&o, TIDE_CLI_OPT_NAME, "exp1", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MIN, "2", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MAX, "8", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_PRIORITY, "Critical", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_ENV, "A=1", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_ENV, "OMP_NUM_THREADS=8", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_ENV, "A=2", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_TIME, "1h30m", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_WORKDIR, "/data", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_WAIT, NULL, &err), 0);
    assert_true(o.wait);
    /* Options override a base spec (from --file); its env entries stay unless replaced. */
    assert_int_equal(tide_cli_submit_build(&o, &base, "/ignored", &spec, &err), 0);
    assert_string_equal(spec->name, "exp1");
    assert_int_equal(spec->n_command, 2);
    assert_string_equal(spec->command[1], "train.py");
    assert_int_equal(spec->min_workers, 2);
    assert_int_equal(spec->max_workers, 8);
    assert_int_equal(spec->priority, TIDE__V1__PRIORITY__PRIORITY_CRITICAL);
    assert_int_equal(spec->n_env, 3);
    assert_string_equal(spec->env[0]->key, "OMP_NUM_THREADS");
    assert_string_equal(spec->env[0]->value, "8");
    assert_string_equal(spec->env[1]->key, "EMPTY");
    assert_string_equal(spec->env[2]->key, "A");
    assert_string_equal(spec->env[2]->value, "2");
    assert_int_equal(spec->time_limit_seconds, 5400);
    assert_string_equal(spec->workdir, "/data");
    protobuf_c_message_free_unpacked(&spec->base, NULL);

    /* --workers with --min/--max is ambiguous. */
    assert_int_equal(apply(&o, TIDE_CLI_OPT_WORKERS, "4", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/", &spec, &err), -EINVAL);
    expect_str(err.text, "use either --workers N or --min N --max M, not both");
    tide_cli_submit_clear(&o);

    o.command = cmd, o.n_command = 2;
    assert_int_equal(apply(&o, TIDE_CLI_OPT_WORKERS, "4", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, &base, "/", &spec, &err), 0);
    assert_int_equal(spec->min_workers, 4);
    assert_int_equal(spec->max_workers, 4);
    assert_string_equal(spec->name, "mnist"); /* from the base */
    assert_string_equal(spec->workdir, "/home/u");
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    tide_cli_submit_clear(&o);

    /* --launcher: unset leaves the spec file's (or UNSPECIFIED, which the scheduler runs as env). */
    o.command = cmd, o.n_command = 2;
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/", &spec, &err), 0);
    assert_int_equal(spec->launcher, TIDE__V1__LAUNCHER__LAUNCHER_UNSPECIFIED);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    base.launcher = TIDE__V1__LAUNCHER__LAUNCHER_MPI;
    assert_int_equal(tide_cli_submit_build(&o, &base, "/", &spec, &err), 0);
    assert_int_equal(spec->launcher, TIDE__V1__LAUNCHER__LAUNCHER_MPI);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_LAUNCHER, "ENV", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, &base, "/", &spec, &err), 0);
    assert_int_equal(spec->launcher, TIDE__V1__LAUNCHER__LAUNCHER_ENV);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_LAUNCHER, "mpi", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/", &spec, &err), 0);
    assert_int_equal(spec->launcher, TIDE__V1__LAUNCHER__LAUNCHER_MPI);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    base.launcher = 0;
    tide_cli_submit_clear(&o);

    /* A relative --workdir is relative to where tidectl runs (as sbatch -D). */
    o.command = cmd, o.n_command = 2;
    assert_int_equal(apply(&o, TIDE_CLI_OPT_WORKDIR, "runs/a", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/home/u", &spec, &err), 0);
    assert_string_equal(spec->workdir, "/home/u/runs/a");
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    tide_cli_submit_clear(&o);

    /* --max alone: elastic from 1; --min alone: fixed size. */
    o.command = cmd, o.n_command = 2;
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MAX, "3", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/", &spec, &err), 0);
    assert_int_equal(spec->min_workers, 1);
    assert_int_equal(spec->max_workers, 3);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    tide_cli_submit_clear(&o);
    o.command = cmd, o.n_command = 2;
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MIN, "3", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/", &spec, &err), 0);
    assert_int_equal(spec->min_workers, 3);
    assert_int_equal(spec->max_workers, 3);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MAX, "2", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/", &spec, &err), -EINVAL);
    expect_str(err.text, "--min 3 is more than --max 2");
    tide_cli_submit_clear(&o);

    /* Bad values name the option. */
    assert_int_equal(apply(&o, TIDE_CLI_OPT_TIME, "5x", &err), -EINVAL);
    expect_str(err.text, "bad --time '5x': expected e.g. 90s, 15m, 2h, 1h30m, 1d, MM:SS, HH:MM:SS or D-HH:MM:SS");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_TIME, "99999d", &err), -EINVAL);
    expect_str(err.text, "bad --time '99999d': longer than 100 years");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_WORKERS, "0", &err), -EINVAL);
    expect_str(err.text, "bad --workers '0': expected a number of workers (1 or more)");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_PRIORITY, "urgent", &err), -EINVAL);
    expect_str(err.text, "bad --priority 'urgent' (one of low, normal, high, critical)");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_ENV, "NOVALUE", &err), -EINVAL);
    expect_str(err.text, "bad --env 'NOVALUE': expected KEY=VALUE");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_LAUNCHER, "ssh", &err), -EINVAL);
    expect_str(err.text, "bad --launcher 'ssh' (one of env, mpi)");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_LAUNCHER, "", &err), -EINVAL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_LAUNCHER, "launcher_mpi", &err), -EINVAL);
    assert_int_equal(o.launcher, 0);
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/", &spec, &err), -EINVAL);
    expect_str(err.text, "no command given (put it after --, as in: tidectl submit -- python3 train.py)");
    tide_cli_submit_clear(&o);
}

/* Sizes (--memory-per-rank), fractions (--ckpt-mfu-threshold) and topologies. */
static void test_policy_values(void **state)
{
    uint64_t b = 7;
    double f = -1;
    int t = -1;
    (void)state;

    assert_int_equal(tide_cli_parse_size("4096", &b), 0);
    assert_int_equal(b, 4096);
    assert_int_equal(tide_cli_parse_size("80GiB", &b), 0);
    assert_int_equal(b, 80ULL << 30);
    assert_int_equal(tide_cli_parse_size("80G", &b), 0);
    assert_int_equal(b, 80ULL << 30);
    assert_int_equal(tide_cli_parse_size("80gi", &b), 0);
    assert_int_equal(b, 80ULL << 30);
    assert_int_equal(tide_cli_parse_size("80GB", &b), 0); /* what an "80 GB" H100 has (79.6 GiB) */
    assert_int_equal(b, 80000000000ULL);
    assert_int_equal(tide_cli_parse_size("512MiB", &b), 0);
    assert_int_equal(b, 512ULL << 20);
    assert_int_equal(tide_cli_parse_size("1.5T", &b), 0);
    assert_int_equal(b, 3ULL << 39);
    assert_int_equal(tide_cli_parse_size("100b", &b), 0);
    assert_int_equal(b, 100);
    assert_int_equal(tide_cli_parse_size("1P", &b), 0);
    assert_int_equal(b, 1ULL << 50);
    b = 7;
    assert_int_equal(tide_cli_parse_size("", &b), -EINVAL);
    assert_int_equal(tide_cli_parse_size("G", &b), -EINVAL);
    assert_int_equal(tide_cli_parse_size("-1G", &b), -EINVAL);
    assert_int_equal(tide_cli_parse_size("80 GiB", &b), -EINVAL);
    assert_int_equal(tide_cli_parse_size("80GiBs", &b), -EINVAL);
    assert_int_equal(tide_cli_parse_size("1e9", &b), -EINVAL);
    assert_int_equal(tide_cli_parse_size("0x10", &b), -EINVAL);
    assert_int_equal(tide_cli_parse_size("80X", &b), -EINVAL);
    assert_int_equal(tide_cli_parse_size("2048P", &b), -ERANGE);
    assert_int_equal(b, 7);

    assert_int_equal(tide_cli_parse_fraction("0.3", &f), 0);
    assert_float_equal(f, 0.3, 1e-12);
    assert_int_equal(tide_cli_parse_fraction("30%", &f), 0);
    assert_float_equal(f, 0.3, 1e-12);
    assert_int_equal(tide_cli_parse_fraction("100%", &f), 0);
    assert_float_equal(f, 1, 0);
    assert_int_equal(tide_cli_parse_fraction("1.5", &f), -ERANGE);
    assert_int_equal(tide_cli_parse_fraction("150%", &f), -ERANGE);
    assert_int_equal(tide_cli_parse_fraction("nan", &f), -EINVAL);
    assert_int_equal(tide_cli_parse_fraction("-0.1", &f), -EINVAL);
    assert_int_equal(tide_cli_parse_fraction("30 %", &f), -EINVAL);
    assert_int_equal(tide_cli_parse_fraction("", &f), -EINVAL);

    assert_int_equal(tide_cli_topology_parse("rack", &t), 0);
    assert_int_equal(t, TIDE__V1__TOPOLOGY__TOPOLOGY_RACK);
    assert_int_equal(tide_cli_topology_parse("NODE", &t), 0);
    assert_int_equal(t, TIDE__V1__TOPOLOGY__TOPOLOGY_NODE);
    assert_int_equal(tide_cli_topology_parse("Switch", &t), 0);
    assert_int_equal(t, TIDE__V1__TOPOLOGY__TOPOLOGY_SWITCH);
    assert_int_equal(tide_cli_topology_parse("any", &t), 0);
    assert_int_equal(t, TIDE__V1__TOPOLOGY__TOPOLOGY_ANY);
    assert_int_equal(tide_cli_topology_parse("row", &t), -EINVAL);
    assert_int_equal(tide_cli_topology_parse("topology_rack", &t), -EINVAL);
}

/* The policy options reach the spec; unset ones keep the spec file's; bad ones name the option. */
static void test_submit_spec_policy(void **state)
{
    tide_cli_submit_t o;
    tide_error_t err = {{0}};
    Tide__V1__JobSpec *spec, base = make_spec();
    char *cmd[] = {"train"};
    (void)state;

    memset(&o, 0, sizeof(o));
    o.command = cmd, o.n_command = 1;
    assert_int_equal(apply(&o, TIDE_CLI_OPT_POOL, "prod", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MEMORY_PER_RANK, "80GiB", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_TOPOLOGY, "rack", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_DEVICE, "h100", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_MFU_THRESHOLD, "20%", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_DEADLINE, "10m", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_INTERVAL, "10m", &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_ADAPTIVE_TARGET, NULL, &err), 0);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_PRIORITY, "low", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, NULL, "/", &spec, &err), 0);
    assert_string_equal(spec->pool, "prod");
    assert_int_equal(spec->memory_per_rank_bytes, 80ULL << 30);
    assert_int_equal(spec->topology, TIDE__V1__TOPOLOGY__TOPOLOGY_RACK);
    assert_string_equal(spec->device, "h100");
    assert_float_equal(spec->checkpoint_mfu_threshold, 0.2, 1e-12);
    assert_int_equal(spec->checkpoint_deadline_seconds, 600);
    assert_int_equal(spec->checkpoint_interval_seconds, 600);
    assert_true(spec->adaptive_target);
    assert_int_equal(spec->priority, TIDE__V1__PRIORITY__PRIORITY_LOW);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    tide_cli_submit_clear(&o);

    /* A spec file's policy stays unless an option replaces it; --topology any clears its topology. */
    base.pool = "file-pool", base.topology = TIDE__V1__TOPOLOGY__TOPOLOGY_NODE, base.memory_per_rank_bytes = 1024;
    base.checkpoint_mfu_threshold = 0.5, base.checkpoint_interval_seconds = 300;
    o.command = cmd, o.n_command = 1;
    assert_int_equal(apply(&o, TIDE_CLI_OPT_TOPOLOGY, "any", &err), 0);
    assert_int_equal(tide_cli_submit_build(&o, &base, "/", &spec, &err), 0);
    assert_string_equal(spec->pool, "file-pool");
    assert_int_equal(spec->topology, TIDE__V1__TOPOLOGY__TOPOLOGY_ANY);
    assert_int_equal(spec->memory_per_rank_bytes, 1024);
    assert_float_equal(spec->checkpoint_mfu_threshold, 0.5, 0);
    assert_int_equal(spec->checkpoint_interval_seconds, 300);
    assert_false(spec->adaptive_target);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    tide_cli_submit_clear(&o);

    /* --ckpt-interval off overrides the spec file's cadence with -1 (only the trainer's own). */
    o.command = cmd, o.n_command = 1;
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_INTERVAL, "off", &err), 0);
    assert_int_equal(o.ckpt_interval, -1);
    assert_int_equal(tide_cli_submit_build(&o, &base, "/", &spec, &err), 0);
    assert_int_equal(spec->checkpoint_interval_seconds, -1);
    protobuf_c_message_free_unpacked(&spec->base, NULL);
    tide_cli_submit_clear(&o);

    assert_int_equal(apply(&o, TIDE_CLI_OPT_POOL, "", &err), -EINVAL);
    expect_str(err.text, "bad --pool: empty");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MEMORY_PER_RANK, "80 GB", &err), -EINVAL);
    expect_str(err.text, "bad --memory-per-rank '80 GB': expected a size such as 80GiB, 80G, 40GB, 512MiB or bytes");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MEMORY_PER_RANK, "0", &err), -EINVAL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_MEMORY_PER_RANK, "9000P", &err), -EINVAL);
    expect_str(err.text, "bad --memory-per-rank '9000P': larger than any GPU");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_TOPOLOGY, "row", &err), -EINVAL);
    expect_str(err.text, "bad --topology 'row' (one of node, rack, switch, any)");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_DEVICE, "", &err), -EINVAL);
    expect_str(err.text, "bad --device: empty");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_MFU_THRESHOLD, "0", &err), -EINVAL);
    expect_str(err.text, "bad --ckpt-mfu-threshold '0': expected more than 0 and at most 1, or a percentage such as 30%");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_MFU_THRESHOLD, "130%", &err), -EINVAL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_DEADLINE, "soon", &err), -EINVAL);
    expect_str(err.text, "bad --ckpt-deadline 'soon': expected a duration such as 10m, 1h or 90s");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_DEADLINE, "unlimited", &err), -EINVAL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_INTERVAL, "often", &err), -EINVAL);
    expect_str(err.text, "bad --ckpt-interval 'often': expected a duration of at least 10s such as 10m, or off");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_INTERVAL, "9s", &err), -EINVAL);
    expect_str(err.text, "bad --ckpt-interval '9s': expected a duration of at least 10s such as 10m, or off");
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_INTERVAL, "0", &err), -EINVAL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_INTERVAL, "unlimited", &err), -EINVAL);
    assert_int_equal(apply(&o, TIDE_CLI_OPT_CKPT_INTERVAL, "10s", &err), 0);
    assert_int_equal(o.ckpt_interval, 10);
    assert_false(o.has_memory);
    assert_false(o.has_topology);
    tide_cli_submit_clear(&o);
}

static void test_render_queue(void **state)
{
    Tide__V1__JobSpec s1 = make_spec(), s2 = make_spec(), s3 = make_spec();
    Tide__V1__Job j1 = TIDE__V1__JOB__INIT, j2 = TIDE__V1__JOB__INIT, j3 = TIDE__V1__JOB__INIT;
    Tide__V1__Job *jobs[] = {&j1, &j2, &j3};
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    s1.name = "llama", s1.priority = TIDE__V1__PRIORITY__PRIORITY_CRITICAL, s1.min_workers = 8, s1.max_workers = 8;
    j1.id = "12", j1.spec = &s1, j1.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, j1.queue_position = 1;
    j1.effective_priority = TIDE__V1__PRIORITY__PRIORITY_CRITICAL, j1.submit_time_ms = NOW_MS - 125000;
    j1.message = "waiting: needs 8 GPUs with >= 80 GiB in one rack; the largest usable fit is 6";
    s2.name = "sweep", s2.priority = TIDE__V1__PRIORITY__PRIORITY_LOW, s2.min_workers = 1, s2.max_workers = 4;
    j2.id = "15", j2.spec = &s2, j2.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, j2.queue_position = 2;
    j2.effective_priority = TIDE__V1__PRIORITY__PRIORITY_NORMAL, j2.submit_time_ms = NOW_MS - 45 * 60000;
    j2.message = "queued behind job 12 (CRITICAL), which waits for the same GPUs";
    s3.name = "", s3.priority = 0, s3.min_workers = 2, s3.max_workers = 0;
    j3.id = "16", j3.spec = &s3, j3.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING;
    j3.message = "waiting for 2 ranks of generation 3\nto stop";
    tide_cli_render_queue(jobs, 3, NOW_MS, &b);
    expect_str(tide_buf_cstr(&b),
               "POS   JOB   NAME    CLASS         GPUS   WAITING   REASON\n"
               "1     12    llama   CRITICAL      8      2m        waiting: needs 8 GPUs with >= 80 GiB in one rack; "
               "the largest usable fit is 6\n"
               "2     15    sweep   LOW->NORMAL   1..4   45m       queued behind job 12 (CRITICAL), which waits for "
               "the same GPUs\n"
               "-     16    -       NORMAL        2      -         waiting for 2 ranks of generation 3 to stop\n");
    tide_buf_free(&b);
}

/* The policy lines of `tidectl job`: none for a job without policy state (see test_render_job), and
 * each when there is something to say. */
static void test_render_job_policy(void **state)
{
    Tide__V1__JobSpec s = make_spec();
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__Checkpoint d = TIDE__V1__CHECKPOINT__INIT;
    tide_buf_t b = TIDE_BUF_INIT;
    const char *out;
    (void)state;

    s.priority = TIDE__V1__PRIORITY__PRIORITY_LOW;
    s.pool = "prod", s.topology = TIDE__V1__TOPOLOGY__TOPOLOGY_RACK, s.memory_per_rank_bytes = 80ULL << 30;
    s.device = "h100", s.checkpoint_mfu_threshold = 0.3, s.checkpoint_deadline_seconds = 600;
    s.checkpoint_interval_seconds = 600;
    s.adaptive_target = true;
    j.id = "17", j.spec = &s, j.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING, j.failed_rank = -1;
    j.effective_priority = TIDE__V1__PRIORITY__PRIORITY_NORMAL;
    j.mfu_target_low = 0.45, j.mfu_target_high = 0.55;
    tide_cli_render_job(&j, NOW_MS, true, &b);
    out = tide_buf_cstr(&b);
    assert_non_null(strstr(out, "\nPriority:     LOW (aged to NORMAL while waiting)\n"));
    assert_non_null(strstr(out, "\nSize:         0 workers (min 2, max 4, elastic)\n"
                                "Placement:    pool prod, one rack, >= 80.0 GiB per rank, device h100\n"
                                "Durable gate: hold durable copies while MFU >= 30.0%, at most 10m between durable "
                                "copies\n"
                                "Cadence:      a checkpoint asked for every 10m\n"
                                "Generation:   0\n"));
    assert_non_null(strstr(out, "\nMFU target:   45-55% (adaptive)\n"));
    assert_null(strstr(out, "Durable:"));
    assert_null(strstr(out, "Preemptions:"));
    tide_buf_reset(&b);

    /* Cadence off: only the trainer's own checkpoints. */
    s.checkpoint_interval_seconds = -1;
    tide_cli_render_job(&j, NOW_MS, true, &b);
    assert_non_null(strstr(tide_buf_cstr(&b), "\nCadence:      the trainer's own checkpoints only\nGeneration:"));
    tide_buf_reset(&b);

    /* Running after aging, a copy held at high MFU, preempted once and yielding now. */
    j.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING;
    j.mfu = 0.71, j.flops_per_s = 7e14;
    j.flush_state = TIDE__V1__FLUSH_STATE__FLUSH_STATE_HELD, j.flush_step = 1300;
    j.flush_since_ms = NOW_MS - 180000;
    j.preemptions = 1, j.preempted_by = "12";
    tide_cli_render_job(&j, NOW_MS, true, &b);
    out = tide_buf_cstr(&b);
    assert_non_null(strstr(out, "\nPriority:     LOW (runs as NORMAL after aging)\n"));
    assert_non_null(strstr(out, "\nCheckpoint:   -\n"
                                "Durable:      none yet\n"
                                "              step 1300 held since 11:57 UTC (MFU 71.0% >= 30.0%)\n"
                                "Preemptions:  1; yielding to job 12 now (checkpointing before it stops)\n"));
    assert_non_null(strstr(out, "\nMFU target:   45-55% (adaptive); now 71.0%, above it\n"));
    tide_buf_reset(&b);

    /* Copying the next one after two durable copies; the job's threshold unset (the scheduler's). */
    s.checkpoint_mfu_threshold = 0, s.checkpoint_deadline_seconds = 0, s.checkpoint_interval_seconds = 0;
    d.step = 1200, d.generation = 2, d.bytes = 3ULL << 29, d.path = "/durable/17/step-1200/ckpt.bin";
    d.time_ms = NOW_MS - 240000;
    j.durable_checkpoint = &d, j.flushes = 2, j.flushed_bytes = 3ULL << 30;
    j.flush_state = TIDE__V1__FLUSH_STATE__FLUSH_STATE_COPYING, j.flush_since_ms = NOW_MS - 10000;
    j.preempted_by = "", j.mfu = 0.5;
    tide_cli_render_job(&j, NOW_MS, true, &b);
    out = tide_buf_cstr(&b);
    assert_non_null(strstr(out, "\nDurable:      step 1200 (generation 2), 1.5 GiB, /durable/17/step-1200/ckpt.bin, 4m "
                                "ago; 2 copies, 3.0 GiB written\n"
                                "              step 1300 copying since 11:59 UTC\n"
                                "Preemptions:  1\n"));
    assert_null(strstr(out, "Durable gate:"));
    assert_null(strstr(out, "Cadence:"));
    assert_non_null(strstr(out, "\nMFU target:   45-55% (adaptive); now 50.0%, within it\n"));
    tide_buf_reset(&b);

    /* Held with the scheduler's threshold: the MFU is shown, the threshold is not guessed. */
    j.flush_state = TIDE__V1__FLUSH_STATE__FLUSH_STATE_HELD;
    tide_cli_render_job(&j, NOW_MS, true, &b);
    assert_non_null(strstr(tide_buf_cstr(&b), "              step 1300 held since 11:59 UTC (MFU 50.0%, at or above "
                                              "the scheduler's threshold)\n"));
    tide_buf_free(&b);
}

static void test_render_status_reserve(void **state)
{
    Tide__V1__ClusterStatus cs = TIDE__V1__CLUSTER_STATUS__INIT;
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    cs.version = "0.1.0", cs.uptime_ms = 61000, cs.leader_epoch = 1, cs.store = "sqlite";
    cs.workers_total = 1024, cs.workers_busy = 1010, cs.workers_ready = 14;
    cs.jobs_pending = 3, cs.jobs_running = 9, cs.jobs_preempting = 1;
    cs.reserve_gpus = 3, cs.reserve_spares = 1, cs.reserve_burst = 2;
    cs.failure_rate_per_gpu_hour = 3.0 / (1000.0 * 730.0), cs.gpus_free = 14;
    tide_cli_render_status(&cs, "127.0.0.1:7070", &b);
    expect_str(tide_buf_cstr(&b),
               "Scheduler:  127.0.0.1:7070 (tide 0.1.0, up 1m1s, leader epoch 1, store sqlite)\n"
               "Workers:    1024 total: 14 ready, 1010 busy, 0 suspect, 0 dead; 0 cordoned\n"
               "Jobs:       3 pending, 9 running (1 yielding to a higher class), 0 succeeded, 0 failed, 0 cancelled\n"
               "Reserve:    3 GPUs kept free for failures and bursts (1 spare + 2 burst); only LOW work may use them\n"
               "            failure rate 3 per 1,000 GPUs a month (configured); 14 GPUs free now\n");
    tide_buf_reset(&b);

    cs.jobs_preempting = 0;
    cs.reserve_fixed = true, cs.reserve_gpus = 1, cs.failure_rate_observed = true;
    cs.failure_rate_per_gpu_hour = 14.4 / (1000.0 * 730.0), cs.gpus_free = 1;
    tide_cli_render_status(&cs, "127.0.0.1:7070", &b);
    assert_non_null(strstr(tide_buf_cstr(&b),
                           "Jobs:       3 pending, 9 running, 0 succeeded, 0 failed, 0 cancelled\n"
                           "Reserve:    1 GPU kept free (set with --reserve); only LOW work may use them\n"
                           "            failure rate 14.4 per 1,000 GPUs a month (observed); 1 GPU free now\n"));
    tide_buf_reset(&b);

    /* A small cluster gets no computed reserve. */
    cs.reserve_fixed = false, cs.reserve_gpus = 0, cs.reserve_burst = 0, cs.reserve_spares = 0;
    cs.failure_rate_observed = false, cs.workers_total = 4, cs.workers_ready = 1, cs.workers_busy = 3;
    tide_cli_render_status(&cs, "127.0.0.1:7070", &b);
    assert_non_null(strstr(tide_buf_cstr(&b), "Reserve:    none (fewer than 16 usable GPUs; --reserve N sets one)\n"
                                               "            failure rate 14.4 per 1,000 GPUs a month (configured); "
                                               "1 GPU free now\n"));
    tide_buf_reset(&b);

    /* The running jobs' target band next to the MFU of their GPUs. */
    cs.peak_flops = 4e15, cs.flops_per_s = 1.2e15, cs.mfu = 0.3;
    cs.mfu_target_low = 0.5, cs.mfu_target_high = 0.6, cs.running_mfu = 0.4;
    tide_cli_render_status(&cs, "127.0.0.1:7070", &b);
    assert_non_null(strstr(tide_buf_cstr(&b), "Target:     50-60% (the running jobs' bands, by GPUs); their GPUs now 40.0%\n"));
    tide_buf_free(&b);
}

static void test_json_pretty(void **state)
{
    cJSON *j = cJSON_Parse("{\"a\":1,\"b\":[1,\"x\",{}],\"c\":{\"d\":[],\"e\":\"q\\\"\"},\"f\":null}");
    tide_buf_t b = TIDE_BUF_INIT;
    (void)state;

    tide_cli_json_pretty(j, &b);
    expect_str(tide_buf_cstr(&b), "{\n"
                                  "  \"a\": 1,\n"
                                  "  \"b\": [\n"
                                  "    1,\n"
                                  "    \"x\",\n"
                                  "    {}\n"
                                  "  ],\n"
                                  "  \"c\": {\n"
                                  "    \"d\": [],\n"
                                  "    \"e\": \"q\\\"\"\n"
                                  "  },\n"
                                  "  \"f\": null\n"
                                  "}");
    tide_buf_free(&b);
    cJSON_Delete(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_args_stop_at_positional),
        cmocka_unit_test(test_args_errors),
        cmocka_unit_test(test_parse_values),
        cmocka_unit_test(test_duration_parse),
        cmocka_unit_test(test_duration_format),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_scheduler_resolve),
        cmocka_unit_test(test_token_resolve),
        cmocka_unit_test(test_render_jobs),
        cmocka_unit_test(test_render_job),
        cmocka_unit_test(test_render_job_progress),
        cmocka_unit_test(test_render_job_tasks),
        cmocka_unit_test(test_render_resize),
        cmocka_unit_test(test_render_recovery),
        cmocka_unit_test(test_render_workers),
        cmocka_unit_test(test_render_event_status_change),
        cmocka_unit_test(test_small_formats),
        cmocka_unit_test(test_logmux),
        cmocka_unit_test(test_submit_spec),
        cmocka_unit_test(test_json_pretty),
        cmocka_unit_test(test_policy_values),
        cmocka_unit_test(test_submit_spec_policy),
        cmocka_unit_test(test_render_queue),
        cmocka_unit_test(test_render_job_policy),
        cmocka_unit_test(test_render_status_reserve),
    };
    setenv("TZ", "UTC", 1);
    tzset();
    return cmocka_run_group_tests(tests, NULL, NULL);
}

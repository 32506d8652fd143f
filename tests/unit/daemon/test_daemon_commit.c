/* The daemon's group commit on the real loop and transport, with the mem: store's fault injection: an
 * acknowledged SubmitJob is durable before its reply; when a commit fails, nothing that depended on it
 * (the reply) is sent and the daemon stops with status 70. */
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

typedef struct result {
    bool done;
    tide_grpc_code_t code;
    bool got_message;
    char text[256];
} result_t;

static void on_message(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    result_t *r = ud;
    (void)call;
    (void)data;
    (void)len;
    r->got_message = true;
}

static void on_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *msg, void *ud)
{
    result_t *r = ud;
    (void)call;
    r->done = true;
    r->code = code;
    snprintf(r->text, sizeof(r->text), "%s", msg ? msg : "");
}

static char *tmpdir(void)
{
    char tmpl[] = "/tmp/tide-daemon-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static void rmrf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Starts a daemon on a mem: store, submits one job; fail_commits > 0 makes the store fail them. */
static void submit_once(int fail_commits, result_t *r, tide_daemon_t **dout, uv_loop_t *loop, char *dir)
{
    tide_daemon_config_t cfg = {.listen = "127.0.0.1:0", .data_dir = dir, .store_url = "mem:",
                                .insecure_no_auth = true};
    tide_rpc_client_config_t ccfg = {0};
    tide_rpc_client_call_cbs_t cbs = {on_message, on_status};
    Tide__V1__SubmitJobRequest req = TIDE__V1__SUBMIT_JOB_REQUEST__INIT;
    Tide__V1__JobSpec spec = TIDE__V1__JOB_SPEC__INIT;
    char *argv[] = {"true"};
    char hostport[64];
    tide_rpc_client_t *client;
    tide_rpc_client_call_t *call;
    tide_daemon_t *d;
    tide_error_t err;

    tide_core_config_default(&cfg.core);
    assert_int_equal(tide_daemon_start(loop, &cfg, &d, &err), 0);
    if (fail_commits)
        assert_int_equal(tide_store_mem_inject_failure(d->store, -EIO, fail_commits), 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", tide_rpc_server_port(d->server));
    ccfg.hostport = hostport;
    assert_int_equal(tide_rpc_client_new(loop, &ccfg, &client, &err), 0);
    spec.n_command = 1;
    spec.command = argv;
    spec.min_workers = 1;
    req.spec = &spec;
    assert_int_equal(tide_rpc_client_unary(client, "/tide.v1.JobService/SubmitJob", &req.base, 10000, &cbs,
                                           r, &call),
                     0);
    /* Runs until the reply arrives, or until the daemon stops itself. */
    while (!r->done && uv_run(loop, UV_RUN_ONCE))
        ;
    tide_rpc_client_free(client);
    *dout = d;
}

static void test_ack_after_commit(void **state)
{
    uv_loop_t loop;
    result_t r = {0};
    tide_daemon_t *d;
    char *dir = tmpdir();
    (void)state;

    uv_loop_init(&loop);
    submit_once(0, &r, &d, &loop, dir);
    assert_true(r.done);
    assert_int_equal(r.code, TIDE_GRPC_OK);
    assert_true(r.got_message);
    assert_true(d->commits_total >= 1); /* the reply came after a commit */
    assert_int_equal(d->exit_code, 0);
    tide_daemon_free(d);
    assert_int_equal(uv_loop_close(&loop), 0);
    rmrf(dir);
    free(dir);
}

static void test_failed_commit_sends_nothing(void **state)
{
    uv_loop_t loop;
    result_t r = {0};
    tide_daemon_t *d;
    char *dir = tmpdir();
    (void)state;

    uv_loop_init(&loop);
    submit_once(100, &r, &d, &loop, dir);
    assert_true(d->failed);
    assert_int_equal(d->exit_code, 70);
    /* The loop stopped before any reply; freeing the daemon ends the connection. */
    tide_daemon_free(d);
    while (!r.done && uv_run(&loop, UV_RUN_ONCE))
        ;
    assert_true(r.done);
    assert_int_not_equal(r.code, TIDE_GRPC_OK);
    assert_false(r.got_message);
    assert_int_equal(uv_loop_close(&loop), 0);
    rmrf(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ack_after_commit),
        cmocka_unit_test(test_failed_commit_sends_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* The scheduler's authorisation (scheduler/daemon/authz.c, docs/security.md): the role a method needs, who the
 * token belongs to (expired and revoked tokens named), an identity removed or changed by a reload while its call
 * was open, the quotas at submission (burst lending counted), the rate bucket, and a missing users file reported
 * once with the identities in force kept. */
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

#include "authz.h"
#include "core.h"
#include "users.h"

typedef struct fx {
    char path[64];
    tide_authz_t *a;
    tide_core_t *core;
} fx_t;

static void write_users(const char *path, const char *extra)
{
    char d[4][65], tmp[80];
    FILE *f;

    tide_token_digest_hex("alice-token", d[0]);
    tide_token_digest_hex("ro-token", d[1]);
    tide_token_digest_hex("old-token", d[2]);
    tide_token_digest_hex("gone-token", d[3]);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    assert_non_null(f);
    fprintf(f,
            "{\"users\": [{\"name\": \"alice\", \"role\": \"user\", \"unix_user\": \"nobody\", \"max_gpus\": 4,"
            " \"max_queued_jobs\": 2, \"priority_classes\": [\"LOW\", \"NORMAL\"], \"rate_limit\": 1,"
            " \"tokens\": [{\"sha256\": \"%s\"}, {\"sha256\": \"%s\", \"expires\": \"2020-01-01T00:00:00Z\"},"
            " {\"sha256\": \"%s\", \"revoked\": true}]},"
            " {\"name\": \"ro\", \"role\": \"read-only\", \"tokens\": [{\"sha256\": \"%s\"}]}%s]}",
            d[0], d[2], d[3], d[1], extra ? extra : "");
    fclose(f);
    assert_int_equal(rename(tmp, path), 0);
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof(*f));
    tide_core_config_t cfg;
    tide_error_t err;
    int fd;

    snprintf(f->path, sizeof(f->path), "/tmp/tide-authz-XXXXXX");
    fd = mkstemp(f->path);
    assert_true(fd >= 0);
    close(fd);
    write_users(f->path, NULL);
    tide_error_clear(&err);
    assert_int_equal(tide_authz_new("admin-token", f->path, &f->a, &err), 0);
    tide_core_config_default(&cfg);
    f->core = tide_core_new(&cfg);
    tide_core_set_time(f->core, 1000, 1714564800000LL);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;

    tide_authz_free(f->a);
    tide_core_free(f->core);
    unlink(f->path);
    free(f);
    return 0;
}

static tide_grpc_code_t auth(fx_t *f, const char *token, const char *path, tide_rpc_identity_t *id, char *msg)
{
    char header[128];

    memset(id, 0, sizeof(*id));
    msg[0] = '\0';
    snprintf(header, sizeof(header), "Bearer %s", token);
    return tide_authz_authenticate(f->a, token ? header : NULL, path, id, msg, 256);
}

static void test_roles_and_tokens(void **state)
{
    fx_t *f = *state;
    tide_rpc_identity_t id;
    char msg[256];

    assert_int_equal(auth(f, "admin-token", "/tide.v1.ClusterService/CordonWorker", &id, msg), TIDE_GRPC_OK);
    assert_string_equal(id.name, "admin");
    assert_int_equal(id.role, TIDE_ROLE_ADMIN);
    assert_int_equal(auth(f, "alice-token", "/tide.v1.JobService/SubmitJob", &id, msg), TIDE_GRPC_OK);
    assert_string_equal(id.name, "alice");
    assert_int_equal(auth(f, "ro-token", "/tide.v1.JobService/CancelJob", &id, msg), TIDE_GRPC_PERMISSION_DENIED);
    assert_string_equal(msg, "CancelJob: ro (read-only) may not call it: admin and user roles only");
    assert_string_equal(id.name, "ro"); /* the audit log says who was refused */
    assert_int_equal(auth(f, "ro-token", "/tide.v1.ClusterService/ListAudit", &id, msg), TIDE_GRPC_OK);
    assert_int_equal(auth(f, "ro-token", "/tide.v1.WorkerService/Connect", &id, msg), TIDE_GRPC_PERMISSION_DENIED);
    /* a path the table does not name is for admins only */
    assert_int_equal(auth(f, "ro-token", "/tide.v1.Nope/Nothing", &id, msg), TIDE_GRPC_PERMISSION_DENIED);
    assert_int_equal(auth(f, "old-token", "/tide.v1.JobService/GetJob", &id, msg), TIDE_GRPC_UNAUTHENTICATED);
    assert_string_equal(msg, "GetJob: the token of alice expired at 2020-01-01T00:00:00Z");
    assert_string_equal(id.name, "alice");
    assert_int_equal(auth(f, "gone-token", "/tide.v1.JobService/GetJob", &id, msg), TIDE_GRPC_UNAUTHENTICATED);
    assert_string_equal(msg, "GetJob: the token of alice was revoked");
    assert_int_equal(auth(f, "nobody", "/tide.v1.JobService/GetJob", &id, msg), TIDE_GRPC_UNAUTHENTICATED);
    assert_string_equal(id.name, "");
    assert_int_equal(auth(f, NULL, "/tide.v1.JobService/GetJob", &id, msg), TIDE_GRPC_UNAUTHENTICATED);
    assert_non_null(strstr(msg, "missing bearer token"));
    assert_int_equal(tide_authz_identities(f->a), 3);
}

static void test_rate_limit(void **state)
{
    fx_t *f = *state;
    tide_rpc_identity_t id;
    char msg[256];
    int ok = 0, limited = 0;

    /* alice: 1 call/s, bursts of 2; the loop runs well within a second, so at most 3 get through */
    for (int i = 0; i < 10; i++) {
        tide_grpc_code_t c = auth(f, "alice-token", "/tide.v1.JobService/GetJob", &id, msg);
        ok += c == TIDE_GRPC_OK;
        limited += c == TIDE_GRPC_RESOURCE_EXHAUSTED;
    }
    assert_true(ok >= 2 && ok <= 3);
    assert_int_equal(ok + limited, 10);
    assert_non_null(strstr(msg, "rate limit of alice"));
    /* others are not limited by alice's bucket */
    assert_int_equal(auth(f, "ro-token", "/tide.v1.JobService/GetJob", &id, msg), TIDE_GRPC_OK);
}

static tide_job_t *submit_as(fx_t *f, const tide_rpc_identity_t *id, int32_t n, int32_t burst, tide_prio_t prio,
                             tide_grpc_code_t want, const char *needle)
{
    char *argv[] = {"sleep", "600"};
    tide_job_spec_t spec = {.argv = argv, .argc = 2, .min_workers = n, .max_workers = n, .priority = prio,
                            .burst_percent = burst};
    char msg[256] = "";
    tide_job_t *job = NULL;
    tide_error_t err;

    assert_int_equal(tide_authz_submit(f->a, f->core, id, &spec, msg, sizeof(msg)), want);
    if (needle && !strstr(msg, needle))
        fail_msg("\"%s\" does not say \"%s\"", msg, needle);
    if (want != TIDE_GRPC_OK)
        return NULL;
    tide_error_clear(&err);
    assert_int_equal(tide_core_job_submit(f->core, &spec, &job, &err), 0);
    tide_core_actions_clear(f->core);
    return job;
}

static void test_quotas(void **state)
{
    fx_t *f = *state;
    tide_rpc_identity_t alice = {.name = "alice", .role = TIDE_ROLE_USER}, admin = {.name = "admin",
                                                                                  .role = TIDE_ROLE_ADMIN};
    tide_job_t *j;

    j = submit_as(f, &alice, 2, 0, TIDE_PRIO_NORMAL, TIDE_GRPC_OK, NULL);
    assert_string_equal(j->spec.owner, "alice");
    assert_string_equal(j->spec.run_as, "nobody");
    submit_as(f, &alice, 1, 0, TIDE_PRIO_HIGH, TIDE_GRPC_PERMISSION_DENIED, "may not submit HIGH jobs (allowed: LOW, NORMAL)");
    /* 2 held + 2 asked + ceil(2 * 50%) lent in a burst = 5 > 4 */
    submit_as(f, &alice, 2, 50, TIDE_PRIO_NORMAL, TIDE_GRPC_RESOURCE_EXHAUSTED, "this one 3; the limit is 4 (max_gpus)");
    submit_as(f, &alice, 2, 0, TIDE_PRIO_LOW, TIDE_GRPC_OK, NULL);
    submit_as(f, &alice, 0 + 1, 0, TIDE_PRIO_LOW, TIDE_GRPC_RESOURCE_EXHAUSTED, "max_queued_jobs");
    /* the admin has no limits and its jobs run as the worker's own account */
    j = submit_as(f, &admin, 64, 100, TIDE_PRIO_CRITICAL, TIDE_GRPC_OK, NULL);
    assert_string_equal(j->spec.owner, "admin");
    assert_string_equal(j->spec.run_as, "");
}

static void test_removed_while_calling(void **state)
{
    fx_t *f = *state;
    tide_rpc_identity_t id;
    char msg[256];
    tide_error_t err;

    assert_int_equal(auth(f, "alice-token", "/tide.v1.JobService/SubmitJob", &id, msg), TIDE_GRPC_OK);
    assert_true(tide_authz_current(f->a, &id, msg, sizeof(msg)));
    /* the file changes while alice's call is open: she is gone */
    write_users(f->path, NULL);
    {
        FILE *fp = fopen(f->path, "w");
        char d[65];
        tide_token_digest_hex("ro-token", d);
        fprintf(fp, "{\"users\": [{\"name\": \"ro\", \"role\": \"read-only\", \"tokens\": [{\"sha256\": \"%s\"}]}]}", d);
        fclose(fp);
    }
    tide_error_clear(&err);
    assert_int_equal(tide_authz_reload(f->a, true, &err), 0);
    assert_false(tide_authz_current(f->a, &id, msg, sizeof(msg)));
    assert_string_equal(msg, "alice is no longer an identity in the users file");
    submit_as(f, &id, 1, 0, TIDE_PRIO_NORMAL, TIDE_GRPC_PERMISSION_DENIED, "no longer an identity");
    /* a broken file keeps the identities in force; a missing one too, reported once */
    {
        FILE *fp = fopen(f->path, "w");
        fputs("{\"users\": [{\"name\": \"x\", \"role\": \"boss\", \"tokens\": []}]}", fp);
        fclose(fp);
    }
    assert_int_equal(tide_authz_reload(f->a, true, &err), -EINVAL);
    assert_non_null(strstr(err.text, "users[0] (x).role"));
    assert_int_equal(auth(f, "ro-token", "/tide.v1.JobService/GetJob", &id, msg), TIDE_GRPC_OK);
    unlink(f->path);
    assert_int_equal(tide_authz_reload(f->a, false, &err), -ENOENT);
    assert_int_equal(tide_authz_reload(f->a, false, &err), 0); /* already reported */
    assert_int_equal(auth(f, "ro-token", "/tide.v1.JobService/GetJob", &id, msg), TIDE_GRPC_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roles_and_tokens, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rate_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quotas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed_while_calling, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

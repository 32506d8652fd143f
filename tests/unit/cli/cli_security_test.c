/* tidectl token, usage and audit, and the owner in job views, through tide_cli_main against the
 * in-process fake transport (fake_rpc.h): what goes on the wire, what the user sees, the exit code.
 * A created token's users-file entry is checked by the scheduler's own parser
 * (common/auth/users.h): it must authenticate that token, with the role and expiry asked for. No
 * sockets. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "cli.h"
#include "cli_run.h"
#include "fake_rpc.h"
#include "tide/v1/cluster_service.pb-c.h"
#include "tide/v1/job_service.pb-c.h"
#include "tide/v1/types.pb-c.h"
#include "users.h"

#define NOW_MS CLI_RUN_NOW_MS

/* Runs "tidectl ARGS..." (NULL-terminated) and captures its output. */
static result_t run(const char *first, ...)
{
    cli_env_t env = {0};
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
    return 0;
}

/* Points stdin at a file holding text (token hash reads it). */
static void stdin_from(const char *text)
{
    char path[] = "/tmp/tide-cli-stdin-XXXXXX";
    int fd = mkstemp(path);
    FILE *f;

    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_non_null(freopen(path, "r", stdin));
    unlink(path);
}

/* ---- token ---- */

/* The token and the entry of `token create`'s table output; both owned by the caller. */
static void split_create(const char *out, char **token, cJSON **entry)
{
    const char *nl = strchr(out, '\n');
    const char *sp;

    assert_non_null(nl);
    assert_memory_equal(out, "token:  ", 8);
    sp = strchr(out + 8, ' ');
    assert_non_null(sp);
    *token = strndup(out + 8, (size_t)(sp - (out + 8)));
    assert_int_equal(strlen(*token), 64);
    assert_memory_equal(nl + 1, "entry:  ", 8);
    *entry = cJSON_Parse(nl + 9);
    assert_non_null(*entry);
}

/* The scheduler's view of entry as the only identity of a users file: how token authenticates at
 * now_ms. */
static tide_auth_result_t authenticate(const cJSON *entry, const char *token, int64_t now_ms,
                                       tide_role_t *role, int64_t *expired_ms)
{
    cJSON *root = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(root, "users");
    char *text;
    tide_users_t *users = NULL;
    const tide_user_t *u = NULL;
    tide_error_t err = {{0}};
    tide_auth_result_t res;

    cJSON_AddItemToArray(list, cJSON_Duplicate(entry, true));
    text = cJSON_PrintUnformatted(root);
    if (tide_users_parse(text, strlen(text), &users, &err) < 0)
        print_error("users file rejected: %s\n%s\n", err.text, text);
    assert_non_null(users);
    res = tide_users_authenticate(users, token, now_ms, &u, expired_ms);
    if (u)
        *role = u->role;
    tide_users_free(users);
    free(text);
    cJSON_Delete(root);
    return res;
}

static void test_token_create(void **state)
{
    char *token, *token2, digest[65];
    cJSON *entry, *entry2, *t;
    tide_role_t role = TIDE_ROLE_NONE;
    int64_t expired = 0;
    result_t r;
    (void)state;

    r = run("token", "create", "--user", "alice", "--role", "readonly", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.err, "");
    split_create(r.out, &token, &entry);
    assert_non_null(strstr(
        r.out, "   (give this to alice; it is not stored anywhere)\nentry:  {\"name\": \"alice\", "
               "\"role\": \"read-only\", \"tokens\": [{\"sha256\": \""));
    tide_token_digest_hex(token, digest);
    t = cJSON_GetArrayItem(cJSON_GetObjectItem(entry, "tokens"), 0);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(t, "sha256")), digest);
    assert_null(cJSON_GetObjectItem(t, "expires"));
    assert_null(strstr(r.out + 8 + 64, token)); /* the token is printed once, not in the entry */
    assert_int_equal(authenticate(entry, token, NOW_MS + 86400000LL * 3650, &role, &expired),
                     TIDE_AUTH_OK);
    assert_int_equal(role, TIDE_ROLE_READ_ONLY);
    assert_int_equal(authenticate(entry, "not-the-token", NOW_MS, &role, &expired),
                     TIDE_AUTH_UNKNOWN);
    result_free(&r);

    /* Every token is new; the default role is user. Nothing went to a scheduler. */
    r = run("token", "create", "--user", "alice", NULL);
    assert_int_equal(r.rc, 0);
    split_create(r.out, &token2, &entry2);
    assert_string_not_equal(token, token2);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(entry2, "role")), "user");
    assert_int_equal(authenticate(entry2, token2, NOW_MS, &role, &expired), TIDE_AUTH_OK);
    assert_int_equal(role, TIDE_ROLE_USER);
    assert_null(fake_rpc_last_hostport());
    result_free(&r);
    free(token);
    free(token2);
    cJSON_Delete(entry);
    cJSON_Delete(entry2);
}

static void test_token_expires(void **state)
{
    static const struct {
        const char *arg, *want;
    } cases[] = {
        {"30d", "2024-05-31T12:00:00Z"},
        {"1h30m", "2024-05-01T13:30:00Z"},
        {"2027-01-31T00:00:00Z", "2027-01-31T00:00:00Z"},
        {"2027-01-31", "2027-01-31T00:00:00Z"},
    };
    tide_role_t role;
    int64_t expired = 0;
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *token;
        cJSON *entry, *t;
        result_t r = run("token", "create", "--user", "bob", "--expires", cases[i].arg, "--role",
                         "worker", NULL);
        const char *got;

        assert_int_equal(r.rc, 0);
        split_create(r.out, &token, &entry);
        t = cJSON_GetArrayItem(cJSON_GetObjectItem(entry, "tokens"), 0);
        got = cJSON_GetStringValue(cJSON_GetObjectItem(t, "expires"));
        assert_non_null(got);
        expect_str(got, cases[i].want);
        /* The scheduler reads the same instant: valid one second before, expired at it. */
        if (i == 0) {
            int64_t at = NOW_MS + 30 * 86400000LL;
            assert_int_equal(authenticate(entry, token, at - 1000, &role, &expired), TIDE_AUTH_OK);
            assert_int_equal(role, TIDE_ROLE_WORKER);
            assert_int_equal(authenticate(entry, token, at, &role, &expired), TIDE_AUTH_EXPIRED);
            assert_int_equal(expired, at);
        }
        free(token);
        cJSON_Delete(entry);
        result_free(&r);
    }
}

static void test_token_json(void **state)
{
    char digest[65];
    cJSON *doc, *entry, *t;
    const char *token;
    tide_role_t role;
    int64_t expired;
    result_t r;
    (void)state;

    r = run("token", "create", "--user", "ci.bot@team", "--role", "admin", "--expires",
            "2027-01-31T00:00:00Z", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    doc = cJSON_Parse(r.out);
    assert_non_null(doc);
    token = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "token"));
    assert_non_null(token);
    assert_int_equal(strlen(token), 64);
    entry = cJSON_GetObjectItem(doc, "entry");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(entry, "name")), "ci.bot@team");
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(entry, "role")), "admin");
    t = cJSON_GetArrayItem(cJSON_GetObjectItem(entry, "tokens"), 0);
    tide_token_digest_hex(token, digest);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(t, "sha256")), digest);
    assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(t, "expires")),
                        "2027-01-31T00:00:00Z");
    assert_int_equal(authenticate(entry, token, NOW_MS, &role, &expired), TIDE_AUTH_OK);
    assert_int_equal(role, TIDE_ROLE_ADMIN);
    assert_non_null(strstr(r.out, "{\n  \"token\": \"")); /* indented like the other documents */
    cJSON_Delete(doc);
    result_free(&r);
}

static void test_token_usage(void **state)
{
    static const struct {
        const char *args[8];
        const char *err;
    } cases[] = {
        {{"token", NULL},
         "tidectl: missing 'create' or 'hash'\nRun 'tidectl token --help' for usage.\n"},
        {{"token", "frob", NULL},
         "tidectl: unknown token command 'frob' (one of create, hash)\nRun 'tidectl token --help' "
         "for usage.\n"},
        {{"token", "create", "extra", NULL},
         "tidectl: unexpected argument 'extra'\nRun 'tidectl token --help' for usage.\n"},
        {{"token", "create", "--user", "alice", "--role", "boss", NULL},
         "tidectl: bad --role 'boss' (one of admin, user, worker, read-only)\nRun 'tidectl token "
         "--help' for usage.\n"},
        {{"token", "create", "--user", "al ice", NULL},
         "tidectl: bad --user 'al ice': 1-63 letters, digits or ._@-\nRun 'tidectl token --help' "
         "for usage.\n"},
        {{"token", "create", "--user", "", NULL},
         "tidectl: bad --user '': 1-63 letters, digits or ._@-\nRun 'tidectl token --help' for "
         "usage.\n"},
        {{"token", "create", "--user", "admin", NULL},
         "tidectl: bad --user 'admin': the name of the scheduler's own token; choose another\n"
         "Run 'tidectl token --help' for usage.\n"},
        {{"token", "create", "--user", "a", "--expires", "5x", NULL},
         "tidectl: bad --expires '5x': a duration from now (30d, 12h) or a future UTC time "
         "(2027-01-31T00:00:00Z)\n"
         "Run 'tidectl token --help' for usage.\n"},
        {{"token", "create", "--user", "a", "--expires", "2020-01-01T00:00:00Z", NULL}, NULL},
        {{"token", "create", "--user", "a", "--expires", "2027-01-31T00:00:00", NULL}, NULL},
        {{"token", "create", "--user", "a", "--expires", "0", NULL}, NULL},
        {{"token", "create", "--user", "a", "--expires", "2027-02-31", NULL}, NULL},
        {{"token", "create", "--user", NULL},
         "tidectl: option '--user' needs a value\nRun 'tidectl token --help' for usage.\n"},
        {{"token", "hash", "--user", "a", NULL},
         "tidectl: 'token hash' takes no option ('--user' is for 'token create')\nRun 'tidectl "
         "token --help' for "
         "usage.\n"},
        {{"token", "create", "--limit", "3", NULL},
         "tidectl: unknown option '--limit'\nRun 'tidectl token --help' for usage.\n"},
    };
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *const *a = cases[i].args;
        result_t r = run(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
        if (r.rc != 2)
            print_error("case %zu: rc %d, err %s\n", i, r.rc, r.err);
        assert_int_equal(r.rc, 2);
        expect_str(r.out, "");
        if (cases[i].err)
            expect_str(r.err, cases[i].err);
        else
            assert_non_null(strstr(r.err, "bad --expires"));
        result_free(&r);
    }
    assert_null(fake_rpc_last_hostport());
}

static void test_token_default_user(void **state)
{
    result_t r;
    (void)state;

    /* Without --user: the login name, when it is a valid identity name (it is in any sane test
     * env). */
    r = run("token", "create", NULL);
    if (r.rc == 0) {
        assert_non_null(strstr(r.out, "entry:  {\"name\": \""));
    } else {
        assert_int_equal(r.rc, 2);
        assert_non_null(strstr(r.err, "give --user NAME"));
    }
    result_free(&r);

    r = run("token", "--help", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(
        r.out, "Usage: tidectl token create [--user NAME] [--role ROLE] [--expires WHEN] | hash"));
    result_free(&r);

    r = run("--help", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "  token       Make a bearer token for the users file\n"));
    assert_non_null(strstr(r.out, "  usage       Show GPU-hours per user and pool\n"));
    assert_non_null(strstr(r.out, "  audit       Show the scheduler's audit log\n"));
    result_free(&r);
}

static void test_token_hash(void **state)
{
    char want[128], digest[65];
    result_t r;
    (void)state;

    tide_token_digest_hex("tok-123", digest);
    snprintf(want, sizeof(want), "sha256: %s\n", digest);
    stdin_from("  tok-123 \n");
    r = run("token", "hash", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, want);
    expect_str(r.err, "");
    result_free(&r);

    stdin_from("tok-123");
    r = run("token", "hash", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    snprintf(want, sizeof(want), "{\n  \"sha256\": \"%s\"\n}\n", digest);
    expect_str(r.out, want);
    result_free(&r);

    stdin_from(" \n\t\n");
    r = run("token", "hash", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    expect_str(r.err, "tidectl: no token on stdin\n");
    result_free(&r);

    stdin_from("tok 123\n");
    r = run("token", "hash", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    assert_non_null(strstr(r.err, "more than one word"));
    result_free(&r);

    /* What `token create` printed hashes to what its entry holds. */
    {
        char *token;
        cJSON *entry;
        r = run("token", "create", "--user", "carol", NULL);
        split_create(r.out, &token, &entry);
        result_free(&r);
        stdin_from(token);
        r = run("token", "hash", NULL);
        assert_int_equal(r.rc, 0);
        tide_token_digest_hex(token, digest);
        snprintf(want, sizeof(want), "sha256: %s\n", digest);
        expect_str(r.out, want);
        expect_str(cJSON_GetStringValue(cJSON_GetObjectItem(
                       cJSON_GetArrayItem(cJSON_GetObjectItem(entry, "tokens"), 0), "sha256")),
                   digest);
        result_free(&r);
        free(token);
        cJSON_Delete(entry);
    }
}

/* ---- usage ---- */

typedef struct usage_seen {
    int calls;
    char user[64], pool[64];
} usage_seen_t;

static void usage_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    usage_seen_t *seen = ud;
    Tide__V1__GetUsageRequest *q = tide__v1__get_usage_request__unpack(NULL, len, req);
    Tide__V1__UsageReport rep = TIDE__V1__USAGE_REPORT__INIT;
    Tide__V1__UsageRow a = TIDE__V1__USAGE_ROW__INIT, b = TIDE__V1__USAGE_ROW__INIT,
                       c = TIDE__V1__USAGE_ROW__INIT;
    Tide__V1__UsageRow *rows[] = {&a, &b, &c};

    assert_non_null(q);
    seen->calls++;
    snprintf(seen->user, sizeof(seen->user), "%s", q->user);
    snprintf(seen->pool, sizeof(seen->pool), "%s", q->pool);
    tide__v1__get_usage_request__free_unpacked(q, NULL);
    a.user = "alice", a.pool = "*", a.gpu_seconds = 36000, a.jobs = 12, a.running_jobs = 1,
    a.gpus_in_use = 4;
    b.user = "alice", b.pool = "prod", b.gpu_seconds = 5400.5, b.jobs = 3;
    c.user = "bob", c.pool = "prod", c.gpu_seconds = 18, c.jobs = 1, c.running_jobs = 1,
    c.gpus_in_use = 2;
    rep.n_rows = 3, rep.rows = rows;
    rep.total_gpu_seconds = 36000 + 5400.5 + 18;
    fake_call_send(call, &rep.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void empty_usage_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__UsageReport rep = TIDE__V1__USAGE_REPORT__INIT;
    (void)req, (void)len, (void)ud;
    fake_call_send(call, &rep.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

/* Refuses the call with the code in ud and a message like the scheduler's for it. */
static void denied_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    tide_grpc_code_t code = (tide_grpc_code_t)(intptr_t)ud;
    const char *msg;

    (void)req, (void)len;
    if (code == TIDE_GRPC_UNAUTHENTICATED)
        msg = "token expired at 2024-05-01T00:00:00Z";
    else if (code == TIDE_GRPC_RESOURCE_EXHAUSTED)
        msg = "alice may hold 8 GPUs at once (asks 16 more, holds 4)";
    else
        msg =
            "user alice may not read the audit log\x1b[2J"; /* control characters are not printed */
    fake_call_finish(call, code, msg);
}

static void test_usage(void **state)
{
    usage_seen_t seen = {0};
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.ClusterService/GetUsage", usage_handler, &seen);
    r = run("usage", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "USER    POOL   GPU-HOURS   JOBS   RUNNING   GPUS\n"
                      "alice   *      10.00       12     1         4\n"
                      "alice   prod   1.50        3      0         0\n"
                      "bob     prod   0.01        1      1         2\n"
                      "TOTAL          11.51       16     2         6\n");
    expect_str(r.err, "");
    assert_int_equal(seen.calls, 1);
    expect_str(seen.user, "");
    expect_str(seen.pool, "");
    result_free(&r);

    r = run("usage", "--user", "alice", "--pool", "*", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(seen.user, "alice");
    expect_str(seen.pool, "*");
    {
        cJSON *doc = cJSON_Parse(r.out), *row0, *row1;
        assert_non_null(doc);
        row0 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "rows"), 0);
        row1 = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "rows"), 1);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(row0, "user")), "alice");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(row0, "pool")), "*");
        assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(row0, "gpuSeconds")) == 36000);
        assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(row0, "runningJobs")), 1);
        assert_int_equal((int)cJSON_GetNumberValue(cJSON_GetObjectItem(row0, "gpusInUse")), 4);
        assert_null(
            cJSON_GetObjectItem(row1, "runningJobs")); /* 0: left out, as the JSON mapping does */
        assert_true(cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "totalGpuSeconds")) == 41418.5);
        cJSON_Delete(doc);
    }
    assert_memory_equal(r.out, "{\n  \"rows\": [\n    {\n      \"user\": \"alice\",", 37);
    result_free(&r);

    fake_rpc_reset();
    fake_rpc_route("/tide.v1.ClusterService/GetUsage", empty_usage_handler, NULL);
    r = run("usage", "--user", "nobody", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "");
    expect_str(r.err, "No usage found.\n");
    result_free(&r);

    fake_rpc_reset();
    fake_rpc_route("/tide.v1.ClusterService/GetUsage", denied_handler,
                   (void *)(intptr_t)TIDE_GRPC_UNAUTHENTICATED);
    r = run("usage", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    expect_str(r.err, "tidectl: UNAUTHENTICATED: token expired at 2024-05-01T00:00:00Z\n");
    result_free(&r);

    /* Bad flags never reach the scheduler. */
    fake_rpc_reset();
    r = run("usage", "--user", "", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err, "tidectl: bad --user: empty\nRun 'tidectl usage --help' for usage.\n");
    result_free(&r);
    r = run("usage", "alice", NULL);
    assert_int_equal(r.rc, 2);
    expect_str(r.err,
               "tidectl: unexpected argument 'alice'\nRun 'tidectl usage --help' for usage.\n");
    result_free(&r);
    r = run("usage", "--limit", "3", NULL);
    assert_int_equal(r.rc, 2);
    result_free(&r);
    assert_null(fake_rpc_last_hostport());
}

/* ---- audit ---- */

typedef struct audit_script {
    int calls;
    uint64_t after[8];
    int32_t limit[8];
    char user[64];
    int fail_at; /* the call (1-based) that ends with UNAVAILABLE; 0: none */
} audit_script_t;

static void add_entry(Tide__V1__AuditEntry *e, uint64_t seq, const char *user, const char *role,
                      const char *method, const char *target, const char *code, const char *message)
{
    tide__v1__audit_entry__init(e);
    e->seq = seq;
    e->time_ms = NOW_MS + (int64_t)seq * 1000;
    e->user = (char *)user, e->role = (char *)role, e->method = (char *)method;
    e->target = (char *)target, e->code = (char *)code, e->message = (char *)message;
}

#define LONG_MESSAGE                                                                               \
    "job 5 is FAILED: only a running job can checkpoint, and this message goes on well past the "  \
    "width of any "                                                                                \
    "terminal so that it has to be cut"

static void audit_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    audit_script_t *s = ud;
    Tide__V1__ListAuditRequest *q = tide__v1__list_audit_request__unpack(NULL, len, req);
    Tide__V1__ListAuditResponse resp = TIDE__V1__LIST_AUDIT_RESPONSE__INIT;
    Tide__V1__AuditEntry e[3];
    Tide__V1__AuditEntry *ep[3] = {&e[0], &e[1], &e[2]};
    int n = s->calls++;

    assert_non_null(q);
    if (n < 8) {
        s->after[n] = q->after_seq;
        s->limit[n] = q->limit;
    }
    snprintf(s->user, sizeof(s->user), "%s", q->user);
    tide__v1__list_audit_request__free_unpacked(q, NULL);
    if (s->fail_at && s->calls == s->fail_at) {
        fake_call_finish(call, TIDE_GRPC_UNAVAILABLE, "the scheduler is shutting down");
        return;
    }
    if (n == 0) {
        add_entry(&e[0], 7, "alice", "user", "SubmitJob", "job 5", "OK", "");
        add_entry(&e[1], 8, "", "", "ListJobs", "", "UNAUTHENTICATED", "unknown token");
        add_entry(&e[2], 9, "alice", "user", "CheckpointJob", "job 5", "FAILED_PRECONDITION",
                  LONG_MESSAGE);
        resp.n_entries = 3;
    } else if (n == 2) {
        /* A repeat of 9 (not printed twice) and a new one. */
        add_entry(&e[0], 9, "alice", "user", "CheckpointJob", "job 5", "FAILED_PRECONDITION",
                  LONG_MESSAGE);
        add_entry(&e[1], 10, "ops", "admin", "DrainWorker", "worker node1/gpu0", "OK", "");
        resp.n_entries = 2;
    }
    resp.entries = ep;
    fake_call_send(call, &resp.base);
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_audit(void **state)
{
    audit_script_t s = {0};
    const char *line3;
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.ClusterService/ListAudit", audit_handler, &s);
    r = run("audit", "--utc", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "TIME                      USER    ROLE   METHOD          TARGET   RESULT    "
                      "            MESSAGE\n"
                      "2024-05-01 12:00:07 UTC   alice   user   SubmitJob       job 5    OK\n"
                      "2024-05-01 12:00:08 UTC   -       -      ListJobs        -        "
                      "UNAUTHENTICATED       unknown token\n"
                      "2024-05-01 12:00:09 UTC   alice   user   CheckpointJob   job 5    "
                      "FAILED_PRECONDITION   job 5 is FAILED: "
                      "only a runni...\n");
    /* The cut row is exactly 120 columns. */
    line3 = strstr(r.out, "2024-05-01 12:00:09");
    assert_int_equal(strlen(line3), 121);
    expect_str(r.err, "");
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.after[0], 0);
    assert_int_equal(s.limit[0], 0); /* the scheduler's default, 100 */
    result_free(&r);

    /* JSON has the whole message; --limit and --user go on the wire. */
    memset(&s, 0, sizeof(s));
    r = run("audit", "--limit", "3", "--user", "alice", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "{\n  \"entries\": [\n    {\n      \"seq\": \"7\",\n"));
    assert_non_null(strstr(r.out, "\"message\": \"" LONG_MESSAGE "\""));
    assert_int_equal(s.limit[0], 3);
    expect_str(s.user, "alice");
    result_free(&r);

    /* Nothing to show. */
    memset(&s, 0, sizeof(s));
    s.calls = 1; /* past the first answer: an empty page */
    r = run("audit", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "");
    expect_str(r.err, "No audit entries found.\n");
    result_free(&r);

    /* Refused by the scheduler: its message (sanitized), exit 1. */
    fake_rpc_reset();
    fake_rpc_route("/tide.v1.ClusterService/ListAudit", denied_handler,
                   (void *)(intptr_t)TIDE_GRPC_PERMISSION_DENIED);
    r = run("audit", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    expect_str(r.err, "tidectl: PERMISSION_DENIED: user alice may not read the audit log [2J\n");
    result_free(&r);

    /* Bad flags exit 2 without a call. */
    fake_rpc_reset();
    {
        static const char *const bad[] = {"0", "1001", "x", "-5"};
        for (size_t i = 0; i < 4; i++) {
            r = run("audit", "--limit", bad[i], NULL);
            assert_int_equal(r.rc, 2);
            assert_non_null(strstr(r.err, "tidectl: bad --limit '"));
            assert_non_null(
                strstr(r.err, "': from 1 to 1000\nRun 'tidectl audit --help' for usage.\n"));
            result_free(&r);
        }
    }
    r = run("audit", "--user", "", NULL);
    assert_int_equal(r.rc, 2);
    result_free(&r);
    r = run("audit", "extra", NULL);
    assert_int_equal(r.rc, 2);
    result_free(&r);
    assert_null(fake_rpc_last_hostport());
}

static void test_audit_follow(void **state)
{
    audit_script_t s = {0};
    result_t r;
    (void)state;

    /* Polls with after_seq until the scheduler goes away (the test's stand-in for Ctrl-C). */
    s.fail_at = 4;
    fake_rpc_route("/tide.v1.ClusterService/ListAudit", audit_handler, &s);
    r = run("--utc", "audit", "-f", "--limit", "50", NULL);
    assert_int_equal(r.rc, 1);
    /* One table: the header once, the widths of the first page kept (a wider cell pushes its row).
     */
    expect_str(r.out,
               "TIME                      USER    ROLE   METHOD          TARGET   RESULT           "
               "     MESSAGE\n"
               "2024-05-01 12:00:07 UTC   alice   user   SubmitJob       job 5    OK\n"
               "2024-05-01 12:00:08 UTC   -       -      ListJobs        -        UNAUTHENTICATED  "
               "     unknown token\n"
               "2024-05-01 12:00:09 UTC   alice   user   CheckpointJob   job 5    "
               "FAILED_PRECONDITION   job 5 is FAILED: "
               "only a runni...\n"
               "2024-05-01 12:00:10 UTC   ops     admin  DrainWorker     worker node1/gpu0 OK\n");
    expect_str(r.err, "tidectl: UNAVAILABLE: the scheduler is shutting down\n");
    assert_int_equal(s.calls, 4);
    assert_int_equal(s.after[0], 0);
    assert_int_equal(s.limit[0], 50);
    assert_int_equal(s.after[1], 9);
    assert_int_equal(s.limit[1], 1000);
    assert_int_equal(s.after[2], 9);
    assert_int_equal(s.after[3], 10);
    result_free(&r);

    /* -o json -f: one line per entry, each once. */
    memset(&s, 0, sizeof(s));
    s.fail_at = 4;
    r = run("audit", "-f", "-o", "json", NULL);
    assert_int_equal(r.rc, 1);
    {
        int lines = 0;
        for (const char *p = r.out; (p = strchr(p, '\n')); p++)
            lines++;
        assert_int_equal(lines, 4);
    }
    assert_non_null(strstr(r.out, "{\"seq\":\"7\","));
    assert_non_null(strstr(r.out, "\n{\"seq\":\"10\","));
    result_free(&r);
}

/* ---- the owner in job views, and the scheduler's refusals on existing commands ---- */

static void owned_job_handler(fake_call_t *call, const uint8_t *req, size_t len, void *ud)
{
    Tide__V1__Job j = TIDE__V1__JOB__INIT;
    Tide__V1__JobSpec s = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__ListJobsResponse lr = TIDE__V1__LIST_JOBS_RESPONSE__INIT;
    Tide__V1__Job *jobs[] = {&j};

    (void)req, (void)len;
    s.name = "train", s.min_workers = 1, s.max_workers = 1;
    j.id = "5", j.spec = &s, j.state = TIDE__V1__JOB_STATE__JOB_STATE_PENDING;
    j.owner = "alice", j.run_as = ud ? (char *)ud : "";
    j.failed_rank = -1;
    if (ud) {
        fake_call_send(call, &j.base);
    } else {
        lr.n_jobs = 1, lr.jobs = jobs;
        fake_call_send(call, &lr.base);
    }
    fake_call_finish(call, TIDE_GRPC_OK, NULL);
}

static void test_owner(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/GetJob", owned_job_handler, "svc_train");
    fake_rpc_route("/tide.v1.JobService/ListJobs", owned_job_handler, NULL);
    r = run("job", "5", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(
        strstr(r.out, "State:        PENDING\nOwner:        alice\nRuns as:      svc_train\n"));
    result_free(&r);

    r = run("jobs", NULL);
    assert_int_equal(r.rc, 0);
    expect_str(r.out, "ID   NAME    OWNER   STATE     WORKERS   GEN   STEP   AGE   MESSAGE\n"
                      "5    train   alice   PENDING   0/1       0     -      -\n");
    result_free(&r);

    r = run("jobs", "-o", "json", NULL);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "\"owner\": \"alice\""));
    result_free(&r);
}

static void test_refusals(void **state)
{
    result_t r;
    (void)state;

    fake_rpc_route("/tide.v1.JobService/SubmitJob", denied_handler,
                   (void *)(intptr_t)TIDE_GRPC_RESOURCE_EXHAUSTED);
    fake_rpc_route("/tide.v1.JobService/CancelJob", denied_handler,
                   (void *)(intptr_t)TIDE_GRPC_PERMISSION_DENIED);
    fake_rpc_route("/tide.v1.JobService/ListJobs", denied_handler,
                   (void *)(intptr_t)TIDE_GRPC_UNAUTHENTICATED);
    r = run("submit", "-n", "16", "--", "python3", "train.py", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.out, "");
    expect_str(
        r.err,
        "tidectl: RESOURCE_EXHAUSTED: alice may hold 8 GPUs at once (asks 16 more, holds 4)\n");
    result_free(&r);

    r = run("cancel", "5", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: PERMISSION_DENIED: user alice may not read the audit log [2J\n");
    result_free(&r);

    r = run("jobs", NULL);
    assert_int_equal(r.rc, 1);
    expect_str(r.err, "tidectl: UNAUTHENTICATED: token expired at 2024-05-01T00:00:00Z\n");
    result_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_token_create, setup),
        cmocka_unit_test_setup(test_token_expires, setup),
        cmocka_unit_test_setup(test_token_json, setup),
        cmocka_unit_test_setup(test_token_usage, setup),
        cmocka_unit_test_setup(test_token_default_user, setup),
        cmocka_unit_test_setup(test_token_hash, setup),
        cmocka_unit_test_setup(test_usage, setup),
        cmocka_unit_test_setup(test_audit, setup),
        cmocka_unit_test_setup(test_audit_follow, setup),
        cmocka_unit_test_setup(test_owner, setup),
        cmocka_unit_test_setup(test_refusals, setup),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);

    fake_rpc_reset();
    return rc;
}

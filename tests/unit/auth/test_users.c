/* The users file (docs/security.md): identities, roles, token digests with expiry and revocation, pools,
 * classes and limits; every malformed entry is refused with its place named, and nothing is half-loaded. */
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

#include "users.h"

/* sha256("alice-token"), sha256("bob-token") ... computed by the test itself */
static char d_alice[65], d_bob[65], d_old[65], d_gone[65], d_w[65];

static void digests(void)
{
    tide_token_digest_hex("alice-token", d_alice);
    tide_token_digest_hex("bob-token", d_bob);
    tide_token_digest_hex("old-token", d_old);
    tide_token_digest_hex("gone-token", d_gone);
    tide_token_digest_hex("worker-token", d_w);
}

static tide_users_t *parse_ok(const char *text)
{
    tide_users_t *u = NULL;
    tide_error_t err;

    tide_error_clear(&err);
    if (tide_users_parse(text, strlen(text), &u, &err) != 0)
        fail_msg("parse failed: %s", err.text);
    return u;
}

static void expect_error(const char *text, const char *needle)
{
    tide_users_t *u = (tide_users_t *)1;
    tide_error_t err;

    tide_error_clear(&err);
    assert_int_equal(tide_users_parse(text, strlen(text), &u, &err), -EINVAL);
    assert_null(u);
    if (!strstr(err.text, needle))
        fail_msg("error \"%s\" does not name \"%s\"", err.text, needle);
}

static void test_digest_is_sha256(void **state)
{
    char hex[65];

    (void)state;
    tide_token_digest_hex("abc", hex); /* FIPS 180-2's example */
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_roles_tokens_and_limits(void **state)
{
    char text[2048];
    tide_users_t *u;
    const tide_user_t *who = NULL;
    int64_t when = 0;
    int32_t limit = 0;

    (void)state;
    digests();
    snprintf(text, sizeof(text),
             "{\"users\": ["
             "{\"name\": \"alice\", \"role\": \"user\", \"unix_user\": \"nobody\","
             " \"tokens\": [{\"sha256\": \"%s\"}, {\"sha256\": \"%s\", \"expires\": \"2026-01-01T00:00:00Z\"},"
             "              {\"sha256\": \"%s\", \"revoked\": true}],"
             " \"pools\": [\"research\", {\"name\": \"big\", \"max_gpus\": 8}],"
             " \"priority_classes\": [\"low\", \"NORMAL\"], \"max_gpus\": 16, \"max_queued_jobs\": 3,"
             " \"rate_limit\": 2.5},"
             "{\"name\": \"bob\", \"role\": \"read-only\", \"tokens\": [{\"sha256\": \"%s\", \"comment\": \"ci\"}]},"
             "{\"name\": \"node1\", \"role\": \"worker\", \"tokens\": [{\"sha256\": \"%s\"}]}"
             "]}",
             d_alice, d_old, d_gone, d_bob, d_w);
    u = parse_ok(text);
    assert_int_equal(tide_users_count(u), 3);
    /* 2026-06-01 */
    assert_int_equal(tide_users_authenticate(u, "alice-token", 1780272000000, &who, &when), TIDE_AUTH_OK);
    assert_string_equal(who->name, "alice");
    assert_int_equal(who->role, TIDE_ROLE_USER);
    assert_string_equal(who->unix_user, "nobody");
    assert_int_equal(who->classes, 3u);
    assert_int_equal(who->max_gpus, 16);
    assert_int_equal(who->max_queued_jobs, 3);
    assert_true(who->rate_limit == 2.5);
    assert_true(tide_user_pool_allowed(who, "research", &limit));
    assert_int_equal(limit, -1);
    assert_true(tide_user_pool_allowed(who, "big", &limit));
    assert_int_equal(limit, 8);
    assert_false(tide_user_pool_allowed(who, "other", &limit));
    assert_false(tide_user_pool_allowed(who, "", &limit));
    assert_int_equal(tide_users_authenticate(u, "old-token", 1780272000000, &who, &when), TIDE_AUTH_EXPIRED);
    assert_string_equal(who->name, "alice");
    assert_true(when == 1767225600000);
    /* before its expiry it works */
    assert_int_equal(tide_users_authenticate(u, "old-token", 1767225599999, &who, &when), TIDE_AUTH_OK);
    assert_int_equal(tide_users_authenticate(u, "gone-token", 0, &who, &when), TIDE_AUTH_REVOKED);
    assert_int_equal(tide_users_authenticate(u, "nobody's", 0, &who, &when), TIDE_AUTH_UNKNOWN);
    assert_null(who);
    assert_int_equal(tide_users_authenticate(u, "bob-token", 0, &who, &when), TIDE_AUTH_OK);
    assert_int_equal(who->role, TIDE_ROLE_READ_ONLY);
    assert_int_equal(who->classes, TIDE_USER_CLASSES_ALL);
    assert_int_equal(who->max_gpus, -1);
    assert_true(tide_user_pool_allowed(who, "", &limit)); /* no pools listed: any */
    assert_ptr_equal(tide_users_find(u, "node1"), tide_users_find(u, "node1"));
    assert_int_equal(tide_users_find(u, "node1")->role, TIDE_ROLE_WORKER);
    assert_null(tide_users_find(u, "carol"));
    tide_users_free(u);
}

static void test_errors_name_their_place(void **state)
{
    char text[1024];

    (void)state;
    digests();
    expect_error("[]", "not a JSON object");
    expect_error("{\"users\": [], \"extra\": 1}", "unknown field \"extra\"");
    expect_error("{\"users\": {}}", "users: required");
    expect_error("{\"users\": [{\"name\": \"a b\", \"role\": \"user\", \"tokens\": []}]}", "users[0].name");
    expect_error("{\"users\": [{\"name\": \"admin\", \"role\": \"user\", \"tokens\": []}]}", "scheduler's own");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"boss\", \"tokens\": []}]}", "users[0] (a).role");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"user\"}]}", "users[0] (a).tokens: required");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [], \"max_gpu\": 1}]}",
                 "unknown field \"max_gpu\"");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [], \"max_gpus\": -1}]}",
                 "users[0] (a).max_gpus");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [{\"sha256\": \"abc\"}]}]}",
                 "users[0] (a).tokens[0].sha256");
    snprintf(text, sizeof(text),
             "{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [{\"sha256\": \"%s\", "
             "\"expires\": \"tomorrow\"}]}]}", d_alice);
    expect_error(text, "tokens[0].expires");
    snprintf(text, sizeof(text),
             "{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [{\"sha256\": \"%s\"}]},"
             "{\"name\": \"b\", \"role\": \"user\", \"tokens\": [{\"sha256\": \"%s\"}]}]}", d_alice, d_alice);
    expect_error(text, "already a's");
    snprintf(text, sizeof(text),
             "{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [{\"sha256\": \"%s\"}]},"
             "{\"name\": \"a\", \"role\": \"user\", \"tokens\": [{\"sha256\": \"%s\"}]}]}", d_alice, d_bob);
    expect_error(text, "listed twice");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [], \"pools\": []}]}",
                 "pools: must not be empty");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [], \"pools\": [\"x\", \"x\"]}]}",
                 "pool \"x\" is listed twice");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [], "
                 "\"priority_classes\": [\"URGENT\"]}]}", "priority_classes[0]");
    expect_error("{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [], \"rate_limit\": \"x\"}]}",
                 "rate_limit");
}

static void test_load_names_the_file(void **state)
{
    tide_users_t *u = NULL;
    tide_error_t err;
    char path[] = "/tmp/tide-users-XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");

    (void)state;
    fputs("{\"users\": [{\"name\": \"a\", \"role\": \"user\", \"tokens\": [], \"x\": 1}]}", f);
    fclose(f);
    tide_error_clear(&err);
    assert_int_equal(tide_users_load(path, &u, &err), -EINVAL);
    assert_non_null(strstr(err.text, path));
    assert_non_null(strstr(err.text, "unknown field \"x\""));
    f = fopen(path, "w");
    fputs("{\"users\": []}", f);
    fclose(f);
    assert_int_equal(tide_users_load(path, &u, &err), 0);
    assert_int_equal(tide_users_count(u), 0);
    tide_users_free(u);
    unlink(path);
    assert_int_equal(tide_users_load(path, &u, &err), -ENOENT);
    assert_non_null(strstr(err.text, path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digest_is_sha256),
        cmocka_unit_test(test_roles_tokens_and_limits),
        cmocka_unit_test(test_errors_name_their_place),
        cmocka_unit_test(test_load_names_the_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

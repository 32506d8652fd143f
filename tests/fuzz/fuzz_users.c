/* libFuzzer target for the scheduler's identity decoders (docs/security.md): the users file parser
 * (common/auth/users.c) and the authenticate hook's reading of the authorization header and the method
 * path (scheduler/daemon/authz.c). Checks their promises: a file is either refused with an error text and
 * nothing kept (LeakSanitizer), or every identity in it is found by name with a valid role; the hook
 * answers OK with a named identity, or a refusal code with a message, and never reads past its input.
 *
 * Input: [selector][bytes]. Selector bit 0 clear: bytes are a users file. Set: bytes are
 * "PATH\nAUTHORIZATION" for the hook, against a fixed table (alice: user, ro: read-only, node1: worker,
 * eve: rate-limited user) and the admin token "admin-token". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "authz.h"
#include "users.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tide_authz_t *fixed_authz(void)
{
    static tide_authz_t *a;
    char path[] = "/tmp/tide-fuzz-users-XXXXXX", d[4][65];
    static const char *const toks[4] = {"alice-token", "ro-token", "worker-token", "eve-token"};
    tide_error_t err;
    FILE *f;
    int fd;

    if (a)
        return a;
    for (int i = 0; i < 4; i++)
        tide_token_digest_hex(toks[i], d[i]);
    if ((fd = mkstemp(path)) < 0 || !(f = fdopen(fd, "w")))
        abort();
    fprintf(f,
            "{\"users\": [{\"name\": \"alice\", \"role\": \"user\", \"tokens\": [{\"sha256\": \"%s\"}]},"
            "{\"name\": \"ro\", \"role\": \"read-only\", \"tokens\": [{\"sha256\": \"%s\"}]},"
            "{\"name\": \"node1\", \"role\": \"worker\", \"tokens\": [{\"sha256\": \"%s\"}]},"
            "{\"name\": \"eve\", \"role\": \"user\", \"rate_limit\": 1, \"tokens\": [{\"sha256\": \"%s\"}]}]}",
            d[0], d[1], d[2], d[3]);
    fclose(f);
    tide_error_clear(&err);
    if (tide_authz_new("admin-token", path, &a, &err) != 0)
        abort();
    unlink(path);
    return a;
}

static void users_file(const uint8_t *data, size_t size)
{
    tide_users_t *u = (tide_users_t *)1;
    tide_error_t err;

    tide_error_clear(&err);
    if (tide_users_parse((const char *)data, size, &u, &err) != 0) {
        if (u || !err.text[0])
            abort();
        return;
    }
    if (!u)
        abort();
    /* an identity found by name has that name and a valid role */
    for (const char *name = "alice"; name; name = strcmp(name, "alice") == 0 ? "admin" : NULL) {
        const tide_user_t *who = tide_users_find(u, name);
        if (who && (strcmp(who->name, name) != 0 || who->role < TIDE_ROLE_ADMIN || who->role > TIDE_ROLE_READ_ONLY))
            abort();
    }
    {
        const tide_user_t *who = NULL;
        int64_t when = 0;
        tide_auth_result_t r = tide_users_authenticate(u, "alice-token", 0, &who, &when);
        if (r != TIDE_AUTH_UNKNOWN && !who)
            abort();
    }
    tide_users_free(u);
}

static void header(const uint8_t *data, size_t size)
{
    tide_authz_t *a = fixed_authz();
    char *buf = malloc(size + 1), *nl, msg[256];
    tide_rpc_identity_t id;
    tide_grpc_code_t code;

    memcpy(buf, data, size);
    buf[size] = '\0';
    nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
    memset(&id, 0, sizeof(id));
    msg[0] = '\0';
    code = tide_authz_authenticate(a, nl ? nl + 1 : NULL, buf, &id, msg, sizeof(msg));
    if (code == TIDE_GRPC_OK) {
        if (!id.name[0] || id.role < TIDE_ROLE_ADMIN || id.role > TIDE_ROLE_READ_ONLY)
            abort();
    } else if (!msg[0] || strlen(msg) >= sizeof(msg)) {
        abort();
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        header(data + 1, size - 1);
    else
        users_file(data + 1, size - 1);
    return 0;
}

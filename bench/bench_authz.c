/* What authentication and authorisation cost a call (docs/security.md): the scheduler's authenticate hook
 * (bearer token -> SHA-256 -> identity by digest -> role vs method -> rate bucket) against a users file of
 * N identities, for a user's token, the admin token and an unknown one; and the users file's parse time.
 *     tide-bench-authz [N_IDENTITIES] [CALLS] */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "authz.h"
#include "users.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double per_call_ns(tide_authz_t *a, const char *auth, const char *path, long calls, int *code)
{
    tide_rpc_identity_t id;
    char msg[256];
    double t0 = now_s();

    for (long i = 0; i < calls; i++) {
        memset(&id, 0, sizeof(id));
        *code = (int)tide_authz_authenticate(a, auth, path, &id, msg, sizeof(msg));
    }
    return (now_s() - t0) / (double)calls * 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000, calls = argc > 2 ? atol(argv[2]) : 1000000;
    char path[] = "/tmp/tide-bench-users-XXXXXX", digest[65], tok[64];
    int fd = mkstemp(path), code = 0;
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    tide_authz_t *a = NULL;
    tide_error_t err;
    double t0, parse_ms;

    if (!f || n < 1 || calls < 1) {
        fprintf(stderr, "usage: tide-bench-authz [N_IDENTITIES >= 1] [CALLS >= 1]\n");
        return 2;
    }
    fputs("{\"users\": [", f);
    for (long i = 0; i < n; i++) {
        snprintf(tok, sizeof(tok), "token-of-user-%ld", i);
        tide_token_digest_hex(tok, digest);
        fprintf(f, "%s{\"name\": \"u%ld\", \"role\": \"user\", \"max_gpus\": 64, \"tokens\": [{\"sha256\": \"%s\"}]}",
                i ? "," : "", i, digest);
    }
    fputs("]}", f);
    fclose(f);
    tide_error_clear(&err);
    t0 = now_s();
    if (tide_authz_new("the-admin-token", path, &a, &err) != 0) {
        fprintf(stderr, "tide-bench-authz: %s\n", err.text);
        return 1;
    }
    parse_ms = (now_s() - t0) * 1e3;
    unlink(path);
    printf("users file: %ld identities parsed and indexed in %.1f ms\n", n, parse_ms);
    snprintf(tok, sizeof(tok), "Bearer token-of-user-%ld", n / 2);
    printf("user token, GetJob:        %6.0f ns/call", per_call_ns(a, tok, "/tide.v1.JobService/GetJob", calls, &code));
    printf(" (code %d)\n", code);
    printf("user token, CordonWorker:  %6.0f ns/call", per_call_ns(a, tok, "/tide.v1.ClusterService/CordonWorker", calls, &code));
    printf(" (code %d: refused)\n", code);
    printf("admin token, SubmitJob:    %6.0f ns/call", per_call_ns(a, "Bearer the-admin-token", "/tide.v1.JobService/SubmitJob", calls, &code));
    printf(" (code %d)\n", code);
    printf("unknown token:             %6.0f ns/call", per_call_ns(a, "Bearer nobody", "/tide.v1.JobService/GetJob", calls / 10, &code));
    printf(" (code %d: refused, logged)\n", code);
    tide_authz_free(a);
    return 0;
}

/* tide-bench-store URL [COMMITS]: commits per second and p50/p99 commit latency of one store
 * backend, with one commit in flight at a time (as the daemon's group commit runs), for batches of
 * 1 and 64 puts of 256-byte values. One line per batch size: "URL ops=N commits=C commits/s=X
 * p50_ms=Y p99_ms=Z". Run bench/store_bench.py for sqlite: and a throwaway etcd side by side.
 * Invariant: nothing is timed but the interval from tide_store_commit to its callback. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "store.h"

typedef struct bench {
    uv_loop_t *loop;
    tide_store_t *s;
    int ops, commits, done;
    uint64_t start;
    uint64_t *lat; /* ns per commit */
    int failed;
    char err[256];
} bench_t;

static void next(bench_t *b);

static void on_commit(int status, int64_t revision, const char *errtext, void *ud)
{
    bench_t *b = ud;

    b->lat[b->done++] = uv_hrtime() - b->start;
    if (status != 0) {
        b->failed = status;
        snprintf(b->err, sizeof(b->err), "%s", errtext);
        return;
    }
    if (b->done < b->commits)
        next(b);
}

static void next(bench_t *b)
{
    tide_store_batch_t *batch = tide_store_batch_new();
    char key[64], value[256];

    memset(value, 'v', sizeof(value));
    for (int i = 0; i < b->ops; i++) {
        snprintf(key, sizeof(key), "bench/%d/%08d", b->ops, (b->done * b->ops + i) % 4096);
        tide_store_batch_put(batch, key, value, sizeof(value));
    }
    b->start = uv_hrtime();
    if (tide_store_commit(b->s, batch, on_commit, b) < 0) {
        b->failed = -EINVAL;
        snprintf(b->err, sizeof(b->err), "commit refused");
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

static int run(uv_loop_t *loop, tide_store_t *s, const char *url, int ops, int commits)
{
    bench_t b = {.loop = loop, .s = s, .ops = ops, .commits = commits};
    uint64_t t0, total;

    b.lat = calloc((size_t)commits, sizeof(*b.lat));
    t0 = uv_hrtime();
    next(&b);
    while (b.done < commits && !b.failed)
        uv_run(loop, UV_RUN_ONCE);
    total = uv_hrtime() - t0;
    if (b.failed) {
        fprintf(stderr, "tide-bench-store: %s: commit failed (%d): %s\n", url, b.failed, b.err);
        free(b.lat);
        return 1;
    }
    qsort(b.lat, (size_t)commits, sizeof(*b.lat), cmp_u64);
    printf("%s ops=%d commits=%d commits/s=%.0f p50_ms=%.2f p99_ms=%.2f\n", url, ops, commits,
           commits / (total / 1e9), b.lat[commits / 2] / 1e6,
           b.lat[(size_t)(commits * 0.99)] / 1e6);
    fflush(stdout);
    free(b.lat);
    return 0;
}

int main(int argc, char **argv)
{
    uv_loop_t loop;
    tide_store_t *s = NULL;
    tide_error_t err = {{0}};
    int commits = argc > 2 ? atoi(argv[2]) : 500, rc = 0;

    if (argc < 2 || commits < 1) {
        fprintf(stderr, "usage: tide-bench-store URL [COMMITS]\n");
        return 2;
    }
    uv_loop_init(&loop);
    if (tide_store_open(&loop, argv[1], &s, &err) < 0) {
        fprintf(stderr, "tide-bench-store: %s\n", err.text);
        uv_loop_close(&loop);
        return 1;
    }
    rc = run(&loop, s, argv[1], 1, commits);
    if (rc == 0)
        rc = run(&loop, s, argv[1], 64, commits);
    tide_store_close(s);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}

/* tide-bench-trainer: what a step report costs a trainer. A thread plays the worker on a Unix socket
 * in a temporary directory with the real framing and decoder (worker/trainer_proto.c); the main
 * thread calls tide_trainer_step N times in batches and reports ns per call (mean, and p50/p99 over
 * the batch means). Two runs: "paced" waits (untimed) after each batch until the reader has decoded
 * every report, as with a real trainer whose steps take milliseconds; "flood" calls back to back, so
 * the reader falls behind and the SDK drops reports (which makes those calls cheaper: the decoded
 * and dropped columns say how many).
 *   tide-bench-trainer [N [BATCH]]     (default: 200000 100; a paced batch must fit the socket
 *   buffer, ~200 short lines on Linux, or its overflow is dropped) */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tide_trainer.h"
#include "trainer_proto.h"

typedef struct reader {
    int lfd;
    atomic_uint_fast64_t steps;
    uint64_t rejected, oversize;
} reader_t;

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The worker's side: welcome the hello, then decode every line until EOF. */
static void *reader_main(void *arg)
{
    reader_t *r = arg;
    tide_trainer_lines_t lines;
    tide_trainer_msg_t m = {0};
    tide_buf_t out = TIDE_BUF_INIT;
    char buf[65536], err[192];
    int fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);

    if (fd < 0)
        return NULL;
    tide_trainer_lines_init(&lines);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        const char *line, *ref;
        size_t len;
        int rc;

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        tide_trainer_lines_feed(&lines, buf, (size_t)n);
        while ((rc = tide_trainer_lines_next(&lines, &line, &len)) != 0) {
            if (rc < 0) {
                r->oversize++;
                continue;
            }
            if (tide_trainer_decode(line, len, &m, err, sizeof(err), &ref) != TIDE_TRAINER_OK) {
                r->rejected++;
                continue;
            }
            if (m.op == TIDE_TRAINER_OP_HELLO) {
                tide_buf_reset(&out);
                tide_trainer_encode_welcome(&out, "bench/gpu0");
                if (write(fd, out.data, out.len) != (ssize_t)out.len)
                    goto done;
            } else if (m.op == TIDE_TRAINER_OP_STEP) {
                atomic_fetch_add(&r->steps, 1);
            }
        }
    }
done:
    close(fd);
    tide_trainer_msg_free(&m);
    tide_trainer_lines_free(&lines);
    tide_buf_free(&out);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Waits (untimed for the results) until the reader has decoded `target` step reports in all, or
 * made no progress for 100 ms (the rest were dropped). */
static void wait_reader(reader_t *r, uint64_t target)
{
    uint64_t last = atomic_load(&r->steps);
    int64_t stall = now_ns() + 100 * INT64_C(1000000);

    while (last < target && now_ns() < stall) {
        uint64_t now = atomic_load(&r->steps);
        if (now != last) {
            last = now;
            stall = now_ns() + 100 * INT64_C(1000000);
        }
        sched_yield();
    }
}

/* Runs nb batches of `batch` steps from step `first`; with pace, waits (untimed) after each batch
 * until the reader decoded everything sent. Prints one table row. */
static void run(tide_trainer_t *t, reader_t *r, const char *mode, bool pace, long nb, long batch,
                int64_t first)
{
    int64_t *per_batch = calloc((size_t)nb, sizeof(*per_batch)), total = 0, t0;
    uint64_t before = atomic_load(&r->steps), sent = 0, decoded;
    long b, i;

    for (b = 0; b < nb; b++) {
        t0 = now_ns();
        for (i = 0; i < batch; i++)
            tide_trainer_step(t, first + b * batch + i, TIDE_PHASE_FORWARD,
                              6.0e12 + (double)i * 0.5, 32, 4096);
        per_batch[b] = now_ns() - t0;
        total += per_batch[b];
        sent += (uint64_t)batch;
        if (pace)
            wait_reader(r, before + sent);
    }
    wait_reader(r, before + sent); /* what is still in flight counts as decoded, not dropped */
    decoded = atomic_load(&r->steps) - before;
    qsort(per_batch, (size_t)nb, sizeof(*per_batch), cmp_i64);
    printf("| %s | %ld | %ld | %.0f | %.0f | %.0f | %" PRIu64 " | %" PRIu64 " |\n", mode, nb * batch,
           batch, (double)total / (double)(nb * batch), (double)per_batch[nb / 2] / (double)batch,
           (double)per_batch[(nb * 99) / 100] / (double)batch, decoded,
           sent > decoded ? sent - decoded : 0);
    free(per_batch);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 200000;
    long batch = argc > 2 ? atol(argv[2]) : 100;
    char dir[] = "/tmp/tide-bench-trainer-XXXXXX", path[128];
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    reader_t r = {0};
    pthread_t th;
    tide_trainer_t *t;
    long nb, i;

    if (n <= 0 || batch <= 0 || batch > n) {
        fprintf(stderr, "usage: tide-bench-trainer [N [BATCH]]\n");
        return 2;
    }
    nb = n / batch;
    if (!mkdtemp(dir)) {
        perror("tide-bench-trainer");
        return 1;
    }
    snprintf(path, sizeof(path), "%s/agent.sock", dir);
    strcpy(sa.sun_path, path);
    r.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r.lfd < 0 || bind(r.lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(r.lfd, 1) < 0) {
        perror("tide-bench-trainer: socket");
        return 1;
    }
    pthread_create(&th, NULL, reader_main, &r);
    setenv("TIDE_AGENT_SOCK", path, 1);
    setenv("TIDE_JOB_ID", "bench", 1);
    setenv("TIDE_GENERATION", "1", 1);
    setenv("RANK", "0", 1);
    t = tide_trainer_open();
    if (!t) {
        fprintf(stderr, "tide-bench-trainer: no connection\n");
        return 1;
    }
    /* warm up (page faults, first sends) */
    for (i = 0; i < batch; i++)
        tide_trainer_step(t, i, TIDE_PHASE_FORWARD, 6.0e12 + (double)i, 32, 4096);
    wait_reader(&r, (uint64_t)batch);
    printf("tide-bench-trainer: tide_trainer_step over a Unix socket, worker-side decode in a "
           "thread\n\n");
    printf("| mode | calls | batch | mean (ns/step) | p50 batch (ns/step) | p99 batch (ns/step) | "
           "decoded | dropped |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    run(t, &r, "paced", true, nb, batch, batch);
    run(t, &r, "flood", false, nb, batch, batch + nb * batch);
    tide_trainer_close(t);
    pthread_join(th, NULL);
    close(r.lfd);
    unlink(path);
    rmdir(dir);
    return r.rejected || r.oversize ? 1 : 0;
}

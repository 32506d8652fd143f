/* tide-bench-steal-rtt: the latency of a steal as a trainer sees it, through real tide workers and a
 * real scheduler on loopback (bench/steal.sh starts them and runs this as a 2-rank job). Per round,
 * rank 0 (the victim) declares 2 tasks and takes the first; rank 1 (the thief) declares none and calls
 * next_task twice: the first call is a full steal round trip (thief's worker -> scheduler -> victim's
 * worker releases its tail -> scheduler -> thief's worker -> thief), the second one a steal the scheduler
 * answers alone ("nothing left"). The ranks take turns through a Unix socket of their own, so a steal is
 * never parked waiting for the other rank's declaration and nothing sleeps. Rank 1 prints the
 * percentiles. Outside tide it still runs (local iteration, nothing stolen) and says so.
 *   tide-bench-steal-rtt [ROUNDS]     (default 5000; RANK and TIDE_JOB_ID from the environment) */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tide_trainer.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* One byte each way per round between the two ranks. */
static int pair_socket(int rank, const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM, 0), lfd;

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    if (fd < 0)
        return -1;
    if (rank == 1) {
        for (int tries = 0; tries < 30000; tries++) { /* until rank 0 listens (at most ~30 s) */
            if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
                return fd;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        close(fd);
        return -1;
    }
    lfd = fd;
    unlink(path);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(lfd, 1) != 0) {
        close(lfd);
        return -1;
    }
    fd = accept(lfd, NULL, NULL);
    close(lfd);
    unlink(path);
    return fd;
}

static int xfer(int fd, bool send_first)
{
    char b = 1;
    if (send_first)
        return write(fd, &b, 1) == 1 ? 0 : -1;
    return read(fd, &b, 1) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 5000;
    const char *rs = getenv("RANK"), *job = getenv("TIDE_JOB_ID");
    int rank = rs ? atoi(rs) : 0, fd;
    char path[108];
    tide_trainer_t *t;
    double *full, *alone;
    long got = 0, stolen_rounds = 0;
    int rc = 0;

    if (rounds < 1)
        rounds = 1;
    snprintf(path, sizeof(path), "/tmp/tide-bench-steal-%s.sock", job ? job : "local");
    t = tide_trainer_open();
    fd = pair_socket(rank, path);
    if (fd < 0) {
        fprintf(stderr, "tide-bench-steal-rtt: rank %d: cannot pair with the other rank at %s\n", rank, path);
        return 1;
    }
    full = calloc((size_t)rounds, sizeof(double));
    alone = calloc((size_t)rounds, sizeof(double));
    for (long r = 0; r < rounds && rc == 0; r++) {
        tide_task_iter_t it;
        uint64_t ids[2] = {(uint64_t)r * 2, (uint64_t)r * 2 + 1}, id;
        int n;
        if (rank == 0) {
            tide_trainer_tasks_begin(t, &it, r, TIDE_TRAINER_TASK_MEMBER, ids, 2, 2);
            if (tide_trainer_next_task(&it, &id) != 1 || xfer(fd, true) || xfer(fd, false))
                rc = 1;
            while (rc == 0 && (n = tide_trainer_next_task(&it, &id)) == 1) /* outside tide: the 2nd */
                ;
        } else {
            double t0, t1, t2;
            if (xfer(fd, false)) {
                rc = 1;
                break;
            }
            tide_trainer_tasks_begin(t, &it, r, TIDE_TRAINER_TASK_MEMBER, NULL, 0, 2);
            t0 = now_us();
            n = tide_trainer_next_task(&it, &id);
            t1 = now_us();
            if (n == 1) {
                stolen_rounds++;
                n = tide_trainer_next_task(&it, &id);
            }
            t2 = now_us();
            if (n < 0)
                rc = 1;
            full[got] = t1 - t0;
            alone[got] = t2 - t1;
            got++;
            if (xfer(fd, true))
                rc = 1;
        }
    }
    if (rank == 1 && got > 0) {
        qsort(full, (size_t)got, sizeof(double), cmp_double);
        qsort(alone, (size_t)got, sizeof(double), cmp_double);
        printf("steal round trips on loopback, %ld rounds (%ld stole a task)%s\n", got, stolen_rounds,
               t ? "" : " -- OUTSIDE TIDE: nothing was stolen");
        printf("%-44s %8s %8s %8s %8s\n", "", "p50 us", "p90 us", "p99 us", "max us");
        printf("%-44s %8.0f %8.0f %8.0f %8.0f\n", "steal served by the victim (full round trip)", pct(full, got, .5),
               pct(full, got, .9), pct(full, got, .99), full[got - 1]);
        printf("%-44s %8.0f %8.0f %8.0f %8.0f\n", "steal answered by the scheduler (none left)", pct(alone, got, .5),
               pct(alone, got, .9), pct(alone, got, .99), alone[got - 1]);
    }
    free(full);
    free(alone);
    close(fd);
    tide_trainer_close(t);
    return rc;
}

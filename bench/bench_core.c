/* tide-bench-core: the scheduler core's hot paths on one core, with no I/O — registering N workers,
 * heartbeats (the per-message cost at fleet scale), ticks with nothing due, and placing/finishing
 * jobs — plus resident memory per worker. Prints a table; timings belong here, never in tests.
 *   tide-bench-core [N ...]     (default: 1000 10000 100000) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * 4;
}

static void run(int n)
{
    tide_core_t *core;
    tide_worker_t **ws = calloc((size_t)n, sizeof(*ws));
    char id[64], node[32];
    int64_t mono = 1000;
    long rss0 = rss_kib(), rss1;
    double t0, t_reg, t_hb, t_tick, t_jobs;
    int hb_rounds = n >= 100000 ? 20 : 100, ticks = 10000, jobs = n / 8;
    size_t na;
    tide_telemetry_t tel = {.gpu_util = 0.5, .temperature_c = 60, .power_w = 500};

    core = tide_core_new(NULL);
    tide_core_set_time(core, mono, 0);
    t0 = now_s();
    for (int i = 0; i < n; i++) {
        tide_worker_info_t info = {.id = id, .node = node, .gpu_index = i % 8, .device = "sim:h100",
                                   .peak_flops = 989e12, .address = "10.0.0.1", .version = "bench"};
        tide_error_t err;
        snprintf(id, sizeof(id), "node%06d/gpu%d", i / 8, i % 8);
        snprintf(node, sizeof(node), "node%06d", i / 8);
        if (tide_core_worker_register(core, &info, &ws[i], NULL, 0, &ws[i], &err) < 0)
            abort();
        if ((i & 1023) == 0)
            tide_core_actions_clear(core);
    }
    tide_core_actions_clear(core);
    t_reg = now_s() - t0;
    rss1 = rss_kib();

    /* Heartbeats: every worker once per round, each round 500 ms later (the default interval). */
    t0 = now_s();
    for (int r = 0; r < hb_rounds; r++) {
        mono += 500;
        tide_core_set_time(core, mono, mono);
        for (int i = 0; i < n; i++)
            tide_core_worker_heartbeat(core, ws[i], &tel);
    }
    t_hb = now_s() - t0;
    tide_core_actions(core, &na);
    if (na != 0)
        fprintf(stderr, "unexpected: %zu actions from heartbeats\n", na);

    t0 = now_s();
    for (int i = 0; i < ticks; i++)
        tide_core_tick(core);
    t_tick = now_s() - t0;

    /* Jobs of 8 ranks: submit (placement), start every rank, exit every rank. */
    t0 = now_s();
    for (int j = 0; j < jobs; j++) {
        char *argv[] = {"train", NULL};
        tide_job_spec_t spec = {.name = "b", .argv = argv, .argc = 1, .min_workers = 8, .max_workers = 8};
        tide_job_t *job;
        tide_error_t err;
        if (tide_core_job_submit(core, &spec, &job, &err) < 0 || job->state != TIDE_JOB_RUNNING)
            abort();
        tide_core_rank_started(core, job->ranks[0].worker, job->id, 1, 0, 1, 29500);
        for (int r = 1; r < 8; r++)
            tide_core_rank_started(core, job->ranks[r].worker, job->id, 1, r, 1, 0);
        for (int r = 0; r < 8; r++)
            tide_core_rank_exited(core, job->ranks[r].worker, job->id, 1, r, 0, NULL);
        tide_core_actions_clear(core);
    }
    t_jobs = now_s() - t0;

    printf("| %7d | %8.2f | %8.1f | %9.2f | %8.1f | %9.1f | %6.2f |\n", n, t_reg * 1e9 / n / 1e3,
           t_hb * 1e9 / ((double)n * hb_rounds), (double)n * hb_rounds / t_hb / 1e6, t_tick * 1e9 / ticks,
           t_jobs * 1e6 / jobs, (double)(rss1 - rss0) / n);
    tide_core_free(core);
    free(ws);
}

int main(int argc, char **argv)
{
    printf("tide-bench-core: scheduler core, one thread, no I/O\n\n");
    printf("| workers | register (us each) | heartbeat (ns each) | heartbeats (M/s) | idle tick (ns) |"
           " 8-rank job, submit to done (us) | core memory per worker (KiB) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            run(atoi(argv[i]));
    } else {
        run(1000);
        run(10000);
        run(100000);
    }
    return 0;
}

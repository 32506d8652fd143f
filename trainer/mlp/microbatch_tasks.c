/* tide-mlp's micro-batches as tide tasks (microbatch_tasks.h). Invariant: the share of a rank and
 * the exactly-once check depend only on (micro-batches, rank, world) and the counts, never on which
 * rank ran what, so every rank reaches the same verdict from the same allreduced counts. */
#include "microbatch_tasks.h"

#include <time.h>

#include "shard.h"

uint32_t tide_mlp_max_owned(uint32_t micro_batches, uint32_t world)
{
    if (world == 0)
        return micro_batches;
    return (uint32_t)(((uint64_t)micro_batches + world - 1) / world);
}

uint32_t tide_mlp_owned_microbatches(uint32_t micro_batches, uint32_t rank, uint32_t world,
                                     uint64_t *ids)
{
    uint32_t n = 0;

    for (uint32_t m = 0; m < micro_batches; m++)
        if (tide_mlp_microbatch_owner(m, world) == rank)
            ids[n++] = m;
    return n;
}

bool tide_mlp_task_counts_ok(const int64_t *counts, uint32_t m, uint32_t *bad, int64_t *times)
{
    for (uint32_t i = 0; i < m; i++) {
        if (counts[i] == 1)
            continue;
        if (bad)
            *bad = i;
        if (times)
            *times = counts[i];
        return false;
    }
    return true;
}

unsigned tide_mlp_simulated_compute_with(double ms, tide_mlp_sleep_fn sleep_fn, void *ud)
{
    double credited = 0;
    unsigned sleeps = 0;

    while (credited < ms) {
        double want =
            ms - credited < TIDE_MLP_SIM_QUANTUM_MS ? ms - credited : TIDE_MLP_SIM_QUANTUM_MS;
        double took = sleep_fn(ud, want);

        if (!(took > 0))
            took = 0; /* a clock that did not move: sleep again */
        credited += took < TIDE_MLP_SIM_MAX_CREDIT_MS ? took : TIDE_MLP_SIM_MAX_CREDIT_MS;
        sleeps++;
    }
    return sleeps;
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double real_sleep(void *ud, double ms)
{
    double t0 = now_ms();
    struct timespec ts = {.tv_sec = (time_t)(ms / 1e3),
                          .tv_nsec = (long)((ms - (double)(time_t)(ms / 1e3) * 1e3) * 1e6)};

    (void)ud;
    nanosleep(&ts, NULL); /* EINTR: the time that passed is what counts */
    return now_ms() - t0;
}

unsigned tide_mlp_simulated_compute(double ms)
{
    return tide_mlp_simulated_compute_with(ms, real_sleep, NULL);
}

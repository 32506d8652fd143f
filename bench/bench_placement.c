/* tide-bench-placement: the scheduler core's gang placement at fleet scale, one thread, no I/O
 * (issue 5, "Performance"). A cluster of 16,384 GPUs (2,048 nodes x 8, racks of 4 nodes, 16 racks
 * per switch) with 10,000 queued jobs:
 * - submitting 10,000 small gangs (1-8 GPUs) into the full cluster (they queue);
 * - draining that queue: the oldest running job ends (its ranks report their exits) and the core
 *   places queued gangs on what it freed, until the queue is empty. The rate counts every core call
 *   of the drain (the exits that free capacity and the placements they trigger) per gang placed;
 * - the same with one job in four LOW (holders and queued): NORMAL work at the head of the queue
 *   preempts LOW work (victims stopped at once, their exits reported, placed again later); the
 *   rate counts submits, exits, preemptions and every placement, re-placements included;
 * - submit + place of small gangs on an empty cluster;
 * - placing one 1,024-rank gang (CRITICAL, so it goes first) while 10,000 jobs are queued behind a
 *   large job that waits for capacity, with the free GPUs as whole nodes and as one GPU per node
 *   (the worst fragmentation): best, median and worst of N.
 * Timings belong here, never in tests. The invariant it keeps: every scenario checks that the core
 * did what was timed (all placed, queue drained) and exits 1 otherwise.
 *   tide-bench-placement [NODES [QUEUED [REPS]]]     (default: 2048 10000 21) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

#define GPUS_PER_NODE    8
#define NODES_PER_RACK   4
#define RACKS_PER_SWITCH 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void die(const char *what, const tide_error_t *err)
{
    fprintf(stderr, "tide-bench-placement: %s: %s\n", what, err ? err->text : "unexpected state");
    exit(1);
}

/* The cluster: nodes x 8 GPUs with rack and switch labels. */
static tide_core_t *cluster(int nodes, bool preemption)
{
    tide_core_config_t cfg;
    tide_core_t *core;
    static int conns[1 << 16];

    tide_core_config_default(&cfg);
    cfg.preemption = preemption;
    core = tide_core_new(&cfg);
    tide_core_set_time(core, 1000, 1800000000000LL);
    for (int n = 0; n < nodes; n++) {
        char node[32], rack[32], sw[32], id[48];
        int r = n / NODES_PER_RACK;
        tide_kv_t labels[2] = {{.key = "rack", .value = rack}, {.key = "switch", .value = sw}};
        snprintf(node, sizeof(node), "node%05d", n);
        snprintf(rack, sizeof(rack), "r%04d", r);
        snprintf(sw, sizeof(sw), "s%03d", r / RACKS_PER_SWITCH);
        for (int g = 0; g < GPUS_PER_NODE; g++) {
            tide_worker_info_t info = {.id = id,
                                       .node = node,
                                       .gpu_index = g,
                                       .device = "NVIDIA H100 80GB HBM3",
                                       .peak_flops = 989e12,
                                       .memory_bytes = 80ULL << 30,
                                       .labels = labels,
                                       .n_labels = 2,
                                       .address = "10.0.0.1",
                                       .version = "bench"};
            tide_worker_t *w;
            tide_error_t err;
            snprintf(id, sizeof(id), "%s/gpu%d", node, g);
            if (tide_core_worker_register(core, &info, &conns[(n * GPUS_PER_NODE + g) & 0xffff],
                                          NULL, 0, &w, &err) < 0)
                die("register", &err);
        }
        tide_core_actions_clear(core);
    }
    return core;
}

static tide_job_t *submit(tide_core_t *core, int min, int max, tide_prio_t prio)
{
    static char *argv[] = {"train", NULL};
    tide_job_spec_t spec = {.name = "b",
                            .argv = argv,
                            .argc = 1,
                            .min_workers = min,
                            .max_workers = max,
                            .priority = prio};
    tide_job_t *job;
    tide_error_t err;

    if (tide_core_job_submit(core, &spec, &job, &err) < 0)
        die("submit", &err);
    return job;
}

/* Jobs in the order they were placed, from the LAUNCH of their rank 0 in the action list. */
typedef struct fifo {
    tide_job_t **jobs;
    size_t head, tail, cap;
} fifo_t;

typedef struct stop {
    tide_worker_t *w;
    char job[32];
    int32_t gen, rank;
} stop_t;

/* Carries out the actions like a shell would, as far as placement cares: notes the jobs placed
 * (LAUNCH of rank 0) and reports every STOP as its rank's exit (a preempted or cancelled rank),
 * until no STOP is left. Returns the jobs placed; *preempted counts job.preempted events. */
static char notes[2][160]; /* printed under the table */

static size_t settle(tide_core_t *core, fifo_t *f, size_t *preempted)
{
    static stop_t *st;
    static size_t st_cap;
    size_t placed = 0;

    for (;;) {
        size_t n, ns = 0;
        const tide_action_t *a = tide_core_actions(core, &n);
        for (size_t i = 0; i < n; i++) {
            if (a[i].type == TIDE_ACT_EVENT && preempted &&
                strcmp(a[i].event_type, "job.preempted") == 0)
                (*preempted)++;
            if (a[i].type == TIDE_ACT_STOP) {
                if (ns == st_cap) {
                    st_cap = st_cap ? st_cap * 2 : 256;
                    st = realloc(st, st_cap * sizeof(*st));
                    if (!st)
                        abort();
                }
                st[ns].w = a[i].worker;
                snprintf(st[ns].job, sizeof(st[ns].job), "%s", a[i].job_id);
                st[ns].gen = a[i].generation;
                st[ns].rank = a[i].rank;
                ns++;
            }
            if (a[i].type != TIDE_ACT_LAUNCH || a[i].rank != 0)
                continue;
            if (f->tail == f->cap) {
                f->cap = f->cap ? f->cap * 2 : 4096;
                f->jobs = realloc(f->jobs, f->cap * sizeof(*f->jobs));
                if (!f->jobs)
                    abort();
            }
            f->jobs[f->tail++] = a[i].job;
            placed++;
        }
        tide_core_actions_clear(core);
        if (ns == 0)
            return placed;
        for (size_t i = 0; i < ns; i++)
            tide_core_rank_exited(core, st[i].w, st[i].job, st[i].gen, st[i].rank, 143, NULL);
    }
}

/* Every rank of job reports exit code 0: the job succeeds and frees its GPUs. A job that is no
 * longer running (preempted meanwhile) is left alone. */
static void finish(tide_core_t *core, tide_job_t *job)
{
    int32_t n = job->n_ranks, gen = job->generation;

    if (job->state != TIDE_JOB_RUNNING)
        return;
    for (int32_t r = 0; r < n; r++) {
        tide_worker_t *w = job->ranks[r].worker;
        if (w && job->state == TIDE_JOB_RUNNING)
            tide_core_rank_exited(core, w, job->id, gen, r, 0, NULL);
    }
}

static int small_size(void)
{
    return 1 + (int)(rnd() % GPUS_PER_NODE);
}

/* mixed: one job in four is LOW (holders and queued), and NORMAL work waiting at the head of the
 * queue preempts LOW work. */
static tide_prio_t prio_of(bool mixed, int i)
{
    return mixed && i % 4 == 3 ? TIDE_PRIO_LOW : TIDE_PRIO_NORMAL;
}

/* Fills the cluster (one 8-GPU job per node, the last smaller by the headroom reserve, which NORMAL
 * work may not use), queues `queued` small gangs, then drains the queue: the oldest running job
 * ends, the core fills what it freed, until nothing is queued. */
static void bench_drain(int nodes, int queued, bool mixed)
{
    tide_core_t *core = cluster(nodes, true);
    fifo_t f = {0};
    int counts[6];
    size_t placed = 0, finished = 0, preempted = 0;
    double t0, t_submit, t_drain;
    tide_reserve_t res;

    tide_core_reserve(core, &res);
    for (int n = 0; n < nodes; n++) {
        int k = n < nodes - 1 ? GPUS_PER_NODE : GPUS_PER_NODE - res.gpus;
        submit(core, k, k, prio_of(mixed, n));
    }
    settle(core, &f, NULL);
    tide_core_job_counts(core, counts);
    if (counts[TIDE_JOB_RUNNING] != nodes)
        die("fill", NULL);

    t0 = now_s();
    for (int j = 0; j < queued; j++) {
        int k = small_size();
        submit(core, k, k, prio_of(mixed, j));
        if ((j & 255) == 255)
            placed += settle(core, &f, &preempted);
    }
    placed += settle(core, &f, &preempted);
    t_submit = now_s() - t0;
    tide_core_job_counts(core, counts);
    if (!mixed && counts[TIDE_JOB_PENDING] != queued)
        die("queue", NULL);

    t0 = now_s();
    while (counts[TIDE_JOB_PENDING] > 0 && f.head < f.tail) {
        finish(core, f.jobs[f.head++]);
        finished++;
        placed += settle(core, &f, &preempted);
        tide_core_job_counts(core, counts);
    }
    t_drain = now_s() - t0;
    if (counts[TIDE_JOB_PENDING] != 0 || placed < (size_t)queued)
        die("drain", NULL);
    tide_core_free(core);
    free(f.jobs);

    if (!mixed) {
        printf("| %-66s | %6d | %8.1f | %10.0f | %8.2f |\n",
               "submit 1-8 GPU gangs into the full cluster (they queue)", queued, t_submit * 1e3,
               queued / t_submit, t_submit * 1e6 / queued);
        printf("| %-66s | %6zu | %8.1f | %10.0f | %8.2f |\n",
               "drain: ranks exit, the core places the queued gangs", placed, t_drain * 1e3,
               placed / t_drain, t_drain * 1e6 / (double)placed);
    } else {
        char what[128];
        snprintf(what, sizeof(what), "drain, 1 in 4 LOW, preemption (%zu preempted, placed again)",
                 preempted);
        printf("| %-66s | %6zu | %8.1f | %10.0f | %8.2f |\n", what, placed,
               (t_submit + t_drain) * 1e3, placed / (t_submit + t_drain),
               (t_submit + t_drain) * 1e6 / (double)placed);
    }
    snprintf(notes[mixed], sizeof(notes[mixed]),
             "drain%s: %zu jobs ended to free the capacity for %zu placements",
             mixed ? " (1 in 4 LOW)" : "", finished, placed);
}

/* Submit + place on an empty cluster, until it is nearly full. */
static void bench_empty(int nodes)
{
    tide_core_t *core = cluster(nodes, true);
    int jobs = 0, gpus = 0;
    double t0 = now_s(), t;

    while (gpus < nodes * GPUS_PER_NODE * 9 / 10) {
        int k = small_size();
        tide_job_t *job = submit(core, k, k, TIDE_PRIO_NORMAL);
        if (job->state != TIDE_JOB_RUNNING)
            die("empty cluster placement", NULL);
        gpus += k;
        jobs++;
        if ((jobs & 255) == 0)
            tide_core_actions_clear(core);
    }
    t = now_s() - t0;
    tide_core_free(core);
    printf("| %-66s | %6d | %8.1f | %10.0f | %8.2f |\n",
           "submit + place 1-8 GPU gangs on an empty cluster", jobs, t * 1e3, jobs / t,
           t * 1e6 / jobs);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One 1,024-rank gang placed while `queued` jobs wait behind a large job. fragmented: the free GPUs
 * are one per node; else whole nodes. */
static void bench_gang(int nodes, int queued, int reps, bool fragmented)
{
    tide_core_t *core = cluster(nodes, true);
    int gang = 1024, free_gpus;
    double *t = calloc((size_t)reps, sizeof(*t));
    tide_job_t *big;
    tide_reserve_t res;
    int counts[6], running;
    const char *what = fragmented ? "one free GPU per node" : "whole nodes free";

    if (!t)
        abort();
    /* The gang must fit beside the headroom reserve (which it may not use), or it would preempt. */
    tide_core_reserve(core, &res);
    if (fragmented && nodes < gang + res.gpus) {
        printf("| %-40s | (needs >= %d nodes) | | | | |\n", what, gang + res.gpus);
        free(t);
        tide_core_free(core);
        return;
    }
    if (fragmented) {
        for (int n = 0; n < nodes; n++)
            submit(core, GPUS_PER_NODE - 1, GPUS_PER_NODE - 1, TIDE_PRIO_NORMAL);
    } else {
        int idle = (gang + res.gpus + GPUS_PER_NODE - 1) / GPUS_PER_NODE;
        if (idle < nodes / 8)
            idle = nodes / 8; /* an eighth of the nodes stay free */
        for (int n = 0; n < nodes - idle; n++)
            submit(core, GPUS_PER_NODE, GPUS_PER_NODE, TIDE_PRIO_NORMAL);
    }
    tide_core_actions_clear(core);
    tide_core_reserve(core, &res);
    tide_core_job_counts(core, counts);
    running = counts[TIDE_JOB_RUNNING];
    free_gpus = res.free;
    /* A large job waits for capacity (it cannot preempt work of its own class) and holds the queue.
     */
    big = submit(core, 2 * free_gpus, 2 * free_gpus, TIDE_PRIO_NORMAL);
    if (big->state != TIDE_JOB_PENDING)
        die("big job", NULL);
    for (int j = 0; j < queued; j++) {
        int k = small_size();
        submit(core, k, k, j % 4 == 0 ? TIDE_PRIO_LOW : TIDE_PRIO_NORMAL);
        if ((j & 255) == 255)
            tide_core_actions_clear(core);
    }
    tide_core_actions_clear(core);
    tide_core_job_counts(core, counts);
    if (counts[TIDE_JOB_PENDING] != queued + 1 || free_gpus < gang + res.gpus)
        die("gang setup", NULL);

    for (int i = 0; i < reps; i++) {
        tide_job_t *job;
        tide_error_t err;
        double t0 = now_s();
        job = submit(core, gang, gang, TIDE_PRIO_CRITICAL);
        t[i] = now_s() - t0;
        if (job->state != TIDE_JOB_RUNNING || job->n_ranks != gang)
            die("gang placement", NULL);
        tide_core_actions_clear(core);
        /* Cancel it; rank 0 (launched) reports its exit; the others were never launched. */
        {
            tide_worker_t *w0 = job->ranks[0].worker;
            int32_t gen = job->generation;
            char id[32];
            snprintf(id, sizeof(id), "%s", job->id);
            if (tide_core_job_cancel(core, id, &job, &err) < 0)
                die("cancel", &err);
            tide_core_rank_exited(core, w0, id, gen, 0, 143, NULL);
        }
        tide_core_actions_clear(core);
        tide_core_reserve(core, &res);
        tide_core_job_counts(core, counts);
        if (res.free != free_gpus || counts[TIDE_JOB_RUNNING] != running)
            die("gang cleanup (or it preempted)", NULL);
    }
    qsort(t, (size_t)reps, sizeof(*t), cmp_double);
    printf("| %-40s | %9d | %6d | %8.3f | %8.3f | %8.3f |\n", what, free_gpus, queued + 1,
           t[0] * 1e3, t[reps / 2] * 1e3, t[reps - 1] * 1e3);
    free(t);
    tide_core_free(core);
}

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 2048;
    int queued = argc > 2 ? atoi(argv[2]) : 10000;
    int reps = argc > 3 ? atoi(argv[3]) : 21;

    if (nodes < 256 || queued < 1 || reps < 1) {
        fprintf(stderr, "usage: tide-bench-placement [NODES (>= 256) [QUEUED [REPS]]]\n");
        return 2;
    }
    printf("tide-bench-placement: scheduler core placement, one thread, no I/O; %d GPUs (%d nodes "
           "x %d, racks of "
           "%d nodes, %d racks per switch), %d queued jobs\n\n",
           nodes * GPUS_PER_NODE, nodes, GPUS_PER_NODE, NODES_PER_RACK, RACKS_PER_SWITCH, queued);
    printf("| small gangs (1-8 GPUs) | jobs | time (ms) | jobs/s | us per job |\n");
    printf("|---|---|---|---|---|\n");
    bench_drain(nodes, queued, false);
    bench_drain(nodes, queued, true);
    bench_empty(nodes);
    printf("\n%s\n%s\n", notes[0], notes[1]);
    printf("\n| one 1,024-rank gang (CRITICAL) | free GPUs | queued | best (ms) | median (ms) | "
           "worst (ms) |\n");
    printf("|---|---|---|---|---|---|\n");
    bench_gang(nodes, queued, reps, false);
    bench_gang(nodes, queued, reps, true);
    return 0;
}

/* tide-sim steal: a data-parallel job's steps at the scale of tasks, on a virtual clock, with the real
 * scheduler core deciding every steal (docs/work-stealing.md, "Measured"). Each rank's worker is
 * modelled as the real one behaves — a deque popped at the head by its trainer, released from the tail
 * when the core asks — and messages take a fixed one-way latency. Ranks' speeds vary per step (log-
 * normal noise, occasional transient hiccups) and one rank may be slow for good. The same steps run with
 * and without stealing; the report compares step time, the job's MFU from step to step, and the spread
 * of the workers' busy share. Deterministic for a seed. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "rng.h"
#include "steal_sim.h"
#include "xmalloc.h"

typedef struct sopt {
    int ranks, tasks, steps;
    double task_ms, latency_ms, noise, hiccup_p, hiccup_speed, slow_speed, mfu_ideal;
    int slow_rank;
    uint64_t seed;
    bool no_ahead; /* the worker steals only once the trainer waits */
} sopt_t;

/* A message in flight or a rank's next pop, ordered by time then sequence. */
typedef enum ev_kind { EV_POP, EV_STEAL, EV_RELEASE, EV_RELEASED, EV_GIVE } ev_kind_t;
typedef struct ev {
    double t;
    uint64_t seq;
    ev_kind_t kind;
    int rank;
    uint64_t id; /* steal or release id */
    uint32_t max;
    uint64_t *ids;
    size_t n;
} ev_t;

typedef struct heap {
    ev_t *v;
    size_t n, cap;
} heap_t;

static bool ev_less(const ev_t *a, const ev_t *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void heap_push(heap_t *h, ev_t e)
{
    size_t i;
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = tide_xrealloc(h->v, h->cap * sizeof(*h->v));
    }
    i = h->n++;
    while (i > 0 && ev_less(&e, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = e;
}

static ev_t heap_pop(heap_t *h)
{
    ev_t top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && ev_less(&h->v[c + 1], &h->v[c]))
            c++;
        if (!ev_less(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

typedef struct srank {
    uint64_t *dq; /* deque ids[head, tail) */
    size_t head, tail, cap;
    double speed;   /* this step */
    double busy_ms; /* this step */
    uint64_t n_run; /* tasks run this step */
    double done_at; /* no_task received */
    bool running;   /* a task in hand */
    uint64_t cur, steal_id;
    uint64_t done_buf[4096];
    size_t n_done;
    bool finished;
    bool waiting;   /* the trainer waits for the steal */
    bool steal_out; /* a StealRequest has no answer yet */
    bool exhausted; /* a steal was answered with none */
} srank_t;

typedef struct srun {
    const sopt_t *o;
    bool stealing;
    tide_core_t *core;
    tide_job_t *job;
    srank_t *r;
    heap_t h;
    uint64_t seq;
    double now;
    uint64_t stolen;
} srun_t;

static void push(srun_t *s, double t, ev_kind_t k, int rank, uint64_t id, uint32_t max, const uint64_t *ids,
                 size_t n)
{
    ev_t e = {.t = t, .seq = s->seq++, .kind = k, .rank = rank, .id = id, .max = max, .n = n};
    if (n) {
        e.ids = tide_xmalloc(n * sizeof(uint64_t));
        memcpy(e.ids, ids, n * sizeof(uint64_t));
    }
    heap_push(&s->h, e);
}

/* The core's actions become messages that arrive one latency later. */
static void drain(srun_t *s)
{
    size_t n;
    const tide_action_t *a = tide_core_actions(s->core, &n);
    for (size_t i = 0; i < n; i++) {
        if (a[i].type == TIDE_ACT_RELEASE_TASKS)
            push(s, s->now + s->o->latency_ms, EV_RELEASE, a[i].rank, a[i].request_id, a[i].max_tasks, NULL, 0);
        else if (a[i].type == TIDE_ACT_GIVE_TASKS)
            push(s, s->now + s->o->latency_ms, EV_GIVE, a[i].rank, a[i].request_id, 0, a[i].task_ids,
                 a[i].n_task_ids);
    }
    tide_core_actions_clear(s->core);
}

static tide_worker_t *wk(srun_t *s, int r)
{
    return s->job->ranks[r].worker;
}

/* Rank r's trainer asks for its next task at s->now (having finished cur if running). */
/* The worker's StealRequest, with the completions first (as worker/task_deque.c sends them). */
static void steal(srun_t *s, int r, int64_t step)
{
    srank_t *k = &s->r[r];
    tide_error_t err;

    if (k->steal_out || k->exhausted)
        return;
    if (k->n_done) {
        tide_core_tasks_done(s->core, wk(s, r), s->job->id, s->job->generation, r, TIDE_TASK_MEMBER, step,
                             k->done_buf, k->n_done, (uint32_t)(k->tail - k->head), &err);
        k->n_done = 0;
    }
    k->steal_out = true;
    push(s, s->now + s->o->latency_ms, EV_STEAL, r, ++k->steal_id, 0, NULL, 0);
}

static void next_task(srun_t *s, int r, int64_t step)
{
    srank_t *k = &s->r[r];
    tide_error_t err;

    if (k->running) {
        if (k->n_done == sizeof(k->done_buf) / sizeof(k->done_buf[0])) {
            tide_core_tasks_done(s->core, wk(s, r), s->job->id, s->job->generation, r, TIDE_TASK_MEMBER, step,
                                 k->done_buf, k->n_done, (uint32_t)(k->tail - k->head), &err);
            k->n_done = 0;
        }
        k->done_buf[k->n_done++] = k->cur;
        k->running = false;
    }
    if (k->head < k->tail) {
        double d = s->o->task_ms / k->speed;
        k->cur = k->dq[k->head++];
        k->running = true;
        k->busy_ms += d;
        k->n_run++;
        push(s, s->now + d, EV_POP, r, 0, 0, NULL, 0);
        /* The worker steals ahead as the trainer takes its last queued task (worker/task_deque.c). */
        if (k->head == k->tail && s->stealing && !s->o->no_ahead)
            steal(s, r, step);
        return;
    }
    if (!s->stealing || k->exhausted) {
        if (k->n_done) { /* the worker reports the last completions at once */
            tide_core_tasks_done(s->core, wk(s, r), s->job->id, s->job->generation, r, TIDE_TASK_MEMBER, step,
                                 k->done_buf, k->n_done, 0, &err);
            k->n_done = 0;
        }
        k->finished = true;
        k->done_at = s->now;
        return;
    }
    k->waiting = true;
    if (!k->steal_out)
        steal(s, r, step);
}

static void on_event(srun_t *s, ev_t *e, int64_t step)
{
    srank_t *k = &s->r[e->rank];
    tide_error_t err;

    s->now = e->t;
    switch (e->kind) {
    case EV_POP:
        next_task(s, e->rank, step);
        break;
    case EV_STEAL:
        tide_core_steal_request(s->core, wk(s, e->rank), s->job->id, s->job->generation, e->rank, TIDE_TASK_MEMBER,
                                step, e->id, &err);
        drain(s);
        break;
    case EV_RELEASE: { /* at the victim's worker: take from the tail, answer one latency later */
        uint64_t out[4096];
        size_t n = 0;
        while (n < e->max && n < 4096 && k->tail > k->head)
            out[n++] = k->dq[--k->tail];
        push(s, s->now + s->o->latency_ms, EV_RELEASED, e->rank, e->id, (uint32_t)(k->tail - k->head), out, n);
        break;
    }
    case EV_RELEASED:
        tide_core_tasks_released(s->core, wk(s, e->rank), s->job->id, s->job->generation, e->rank, TIDE_TASK_MEMBER,
                                 step, e->id, e->ids, e->n, e->max, &err);
        drain(s);
        break;
    case EV_GIVE:
        if (e->id != k->steal_id || !k->steal_out)
            break;
        k->steal_out = false;
        if (e->n == 0) {
            k->exhausted = true;
            if (k->waiting) {
                k->finished = true;
                k->done_at = s->now;
            }
            break;
        }
        s->stolen += e->n;
        for (size_t i = 0; i < e->n; i++) {
            if (k->tail == k->cap) {
                k->cap *= 2;
                k->dq = tide_xrealloc(k->dq, k->cap * sizeof(uint64_t));
            }
            k->dq[k->tail++] = e->ids[i];
        }
        if (k->waiting) {
            k->waiting = false;
            next_task(s, e->rank, step);
        }
        break;
    }
    free(e->ids);
}

typedef struct sresult {
    double *step_ms, *mfu, *busy_spread;
    double total_ms;
    uint64_t stolen;
} sresult_t;

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quant(double *v, int n, double q)
{
    double *c = tide_xmalloc((size_t)n * sizeof(double)), r;
    memcpy(c, v, (size_t)n * sizeof(double));
    qsort(c, (size_t)n, sizeof(double), cmp_d);
    r = c[(int)(q * (n - 1) + 0.5)];
    free(c);
    return r;
}

/* Runs o->steps steps; speeds come from their own random stream, so both runs see the same speeds. */
static void run(const sopt_t *o, bool stealing, sresult_t *res)
{
    srun_t s = {.o = o, .stealing = stealing};
    tide_core_config_t cfg;
    tide_error_t err;
    tide_rng_t rng;
    char *av[] = {"train", NULL};
    tide_job_spec_t spec = {.name = "sim", .argv = av, .argc = 1, .min_workers = o->ranks,
                            .max_workers = o->ranks};

    tide_core_config_default(&cfg);
    cfg.reserve_gpus = 0;
    s.core = tide_core_new(&cfg);
    tide_core_set_time(s.core, 1000, 1000);
    for (int i = 0; i < o->ranks; i++) {
        char id[64], node[32];
        tide_worker_info_t info = {.id = id, .node = node, .gpu_index = i % 8, .device = "sim:h100",
                                   .peak_flops = 989e12, .address = "10.0.0.1", .version = "sim"};
        tide_worker_t *w;
        snprintf(id, sizeof(id), "node%04d/gpu%d", i / 8, i % 8);
        snprintf(node, sizeof(node), "node%04d", i / 8);
        if (tide_core_worker_register(s.core, &info, (void *)(uintptr_t)(i + 1), NULL, 0, &w, &err) < 0)
            abort();
    }
    if (tide_core_job_submit(s.core, &spec, &s.job, &err) < 0 || s.job->state != TIDE_JOB_RUNNING)
        abort();
    for (int r = 0; r < o->ranks; r++)
        tide_core_rank_started(s.core, s.job->ranks[r].worker, s.job->id, s.job->generation, r, 1, r ? 0 : 29500);
    tide_core_actions_clear(s.core);
    s.r = tide_xcalloc((size_t)o->ranks, sizeof(*s.r));
    for (int r = 0; r < o->ranks; r++) {
        s.r[r].cap = (size_t)o->tasks * 4 + 16;
        s.r[r].dq = tide_xmalloc(s.r[r].cap * sizeof(uint64_t));
    }
    tide_rng_seed(&rng, o->seed, 1);
    res->step_ms = tide_xcalloc((size_t)o->steps, sizeof(double));
    res->mfu = tide_xcalloc((size_t)o->steps, sizeof(double));
    res->busy_spread = tide_xcalloc((size_t)o->steps, sizeof(double));
    for (int step = 0; step < o->steps; step++) {
        double t0 = s.now, end = t0, work = 0, bmin = 1e300, bmax = 0, bsum = 0;
        for (int r = 0; r < o->ranks; r++) {
            srank_t *k = &s.r[r];
            double sp = exp(o->noise * tide_rng_normal(&rng));
            if (tide_rng_uniform(&rng) < o->hiccup_p)
                sp *= o->hiccup_speed;
            if (r == o->slow_rank)
                sp *= o->slow_speed;
            k->speed = sp;
            k->head = k->tail = 0;
            k->busy_ms = 0;
            k->n_run = 0;
            k->done_at = t0;
            k->running = k->finished = k->waiting = k->steal_out = k->exhausted = false;
            k->n_done = 0;
            for (int t = 0; t < o->tasks; t++)
                k->dq[k->tail++] = (uint64_t)(r * o->tasks + t);
            tide_core_tasks_declared(s.core, wk(&s, r), s.job->id, s.job->generation, r, TIDE_TASK_MEMBER, step,
                                     k->dq, (size_t)o->tasks, (uint64_t)(o->ranks * o->tasks), &err);
        }
        drain(&s);
        for (int r = 0; r < o->ranks; r++)
            next_task(&s, r, step);
        while (s.h.n > 0) {
            ev_t e = heap_pop(&s.h);
            on_event(&s, &e, step);
        }
        for (int r = 0; r < o->ranks; r++) {
            srank_t *k = &s.r[r];
            if (!k->finished) {
                tide_task_pool_info_t pi;
                tide_core_task_pool(s.core, s.job, TIDE_TASK_MEMBER, step, &pi);
                fprintf(stderr, "tide-sim steal: step %d: rank %d never finished (waiting %d, steal out %d, "
                        "queued %zu; pool: total %llu committed %llu queued %llu orphaned %llu pending %d parked %d)\n",
                        step, r, k->waiting, k->steal_out, k->tail - k->head, (unsigned long long)pi.total,
                        (unsigned long long)pi.committed, (unsigned long long)pi.queued,
                        (unsigned long long)pi.orphaned, pi.steals_pending, pi.steals_parked);
                abort();
            }
            if (k->done_at > end)
                end = k->done_at;
            work += o->task_ms * (double)o->tasks; /* every task's useful work, at full speed */
        }
        for (int r = 0; r < o->ranks; r++) {
            double b = s.r[r].busy_ms / (end - t0);
            bmin = b < bmin ? b : bmin;
            bmax = b > bmax ? b : bmax;
            bsum += b;
        }
        /* What each rank's worker reports with its heartbeats: its time per task over the step (the
         * real worker's ~10 s window is many steps; one step is enough for a model without noise in
         * the measurement). The core compares the ranks every straggler_check_ms of simulated time. */
        for (int r = 0; r < o->ranks; r++) {
            srank_t *k = &s.r[r];
            tide_trainer_progress_t pr = {.sdk = true, .step = step, .step_seconds = (end - t0) / 1e3};
            pr.task_seconds = k->n_run ? k->busy_ms / 1e3 / (double)k->n_run : 0;
            pr.busy_fraction = k->busy_ms / (end - t0);
            pr.tasks_run = k->n_run;
            tide_core_rank_progress(s.core, wk(&s, r), s.job->id, s.job->generation, r, &pr);
        }
        s.now = end; /* the collective; the next step starts together */
        tide_core_set_time(s.core, 1000 + (int64_t)s.now, 1000 + (int64_t)s.now);
        for (int r = 0; r < o->ranks; r++) { /* the workers are alive */
            tide_telemetry_t tel = {.gpu_util = s.r[r].busy_ms / (end - t0)};
            tide_core_worker_heartbeat(s.core, wk(&s, r), &tel);
        }
        tide_core_tick(s.core);
        tide_core_actions_clear(s.core);
        if (s.job->state != TIDE_JOB_RUNNING)
            abort(); /* the model keeps every worker alive */
        res->step_ms[step] = end - t0;
        /* MFU: the model FLOPs of the step over what the GPUs could do in its time, scaled so that a
         * perfectly balanced step at full speed has mfu_ideal. */
        res->mfu[step] = o->mfu_ideal * work / ((double)o->ranks * (end - t0));
        res->busy_spread[step] = (bmax - bmin) / 2 / (bsum / o->ranks);
    }
    res->total_ms = s.now;
    res->stolen = s.stolen;
    for (int r = 0; r < o->ranks; r++)
        free(s.r[r].dq);
    free(s.r);
    free(s.h.v);
    tide_core_free(s.core);
}

static void report(const sopt_t *o, const char *label, sresult_t *r)
{
    int n = o->steps;
    double mean = 0;
    for (int i = 0; i < n; i++)
        mean += r->mfu[i];
    mean /= n;
    printf("%-12s %9.2f %9.2f %9.2f %8.1f%% %+7.1f%% %+7.1f%% %9.1f%% %10llu\n", label, quant(r->step_ms, n, .5),
           quant(r->step_ms, n, .95), r->total_ms / n, 100 * mean, 100 * (quant(r->mfu, n, .05) / mean - 1),
           100 * (quant(r->mfu, n, .95) / mean - 1), 100 * quant(r->busy_spread, n, .5),
           (unsigned long long)r->stolen);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tide-sim steal [--ranks N] [--tasks T] [--steps S] [--task-ms MS] [--latency-ms MS]\n"
               "                      [--noise SIGMA] [--hiccup P] [--slow RANK=SPEED] [--seed N]\n"
               "  --ranks N         data-parallel ranks (default 64)\n"
               "  --tasks T         micro-batches per rank per step (default 16)\n"
               "  --steps S         steps (default 200)\n"
               "  --task-ms MS      a micro-batch at full speed (default 20)\n"
               "  --latency-ms MS   one message's one-way latency (default 0.1)\n"
               "  --noise SIGMA     log-normal spread of a rank's speed per step (default 0.10)\n"
               "  --hiccup P        chance per rank and step of a transient slowdown to 50%% (default 0.02)\n"
               "  --slow RANK=SPEED one rank slow for good, e.g. 3=0.5 (default none)\n"
               "  --seed N          (default 1)\n"
               "  --no-steal-ahead  steal only when the trainer waits (the worker steals ahead by default)\n");
}

int tide_steal_sim_main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"ranks", required_argument, NULL, 'r'},   {"tasks", required_argument, NULL, 't'},
        {"steps", required_argument, NULL, 's'},   {"task-ms", required_argument, NULL, 'm'},
        {"latency-ms", required_argument, NULL, 'l'}, {"noise", required_argument, NULL, 'n'},
        {"hiccup", required_argument, NULL, 'p'},  {"slow", required_argument, NULL, 'w'},
        {"seed", required_argument, NULL, 'e'},    {"help", no_argument, NULL, 'h'},
        {"no-steal-ahead", no_argument, NULL, 'A'},
        {NULL, 0, NULL, 0},
    };
    sopt_t o = {.ranks = 64, .tasks = 16, .steps = 200, .task_ms = 20, .latency_ms = 0.1, .noise = 0.10,
                .hiccup_p = 0.02, .hiccup_speed = 0.5, .slow_speed = 1, .slow_rank = -1, .mfu_ideal = 0.5,
                .seed = 1};
    sresult_t a = {0}, b = {0};
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        switch (c) {
        case 'r': o.ranks = (int)strtol(optarg, &end, 10); break;
        case 't': o.tasks = (int)strtol(optarg, &end, 10); break;
        case 's': o.steps = (int)strtol(optarg, &end, 10); break;
        case 'm': o.task_ms = strtod(optarg, &end); break;
        case 'l': o.latency_ms = strtod(optarg, &end); break;
        case 'n': o.noise = strtod(optarg, &end); break;
        case 'p': o.hiccup_p = strtod(optarg, &end); break;
        case 'e': o.seed = strtoull(optarg, &end, 10); break;
        case 'w':
            o.slow_rank = (int)strtol(optarg, &end, 10);
            if (*end == '=')
                o.slow_speed = strtod(end + 1, &end);
            else
                end = optarg; /* error below */
            break;
        case 'A':
            o.no_ahead = true;
            end = (char *)"";
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        if (errno || !end || *end) {
            fprintf(stderr, "tide-sim steal: bad value '%s'\n", optarg);
            return 2;
        }
    }
    if (optind != argc || o.ranks < 2 || o.ranks > 4096 || o.tasks < 1 || o.tasks > 1024 || o.steps < 1 ||
        !(o.task_ms > 0) || o.latency_ms < 0 || o.noise < 0 || o.hiccup_p < 0 || o.hiccup_p > 1 ||
        o.slow_rank >= o.ranks || !(o.slow_speed > 0 && o.slow_speed <= 1)) {
        usage(stderr);
        return 2;
    }
    run(&o, true, &a);
    run(&o, false, &b);
    printf("tide-sim steal: %d ranks x %d micro-batches of %.1f ms, %d steps, speed noise %.2f, hiccups %.0f%%, "
           "latency %.2f ms, seed %llu",
           o.ranks, o.tasks, o.task_ms, o.steps, o.noise, 100 * o.hiccup_p, o.latency_ms,
           (unsigned long long)o.seed);
    if (o.slow_rank >= 0)
        printf(", rank %d at %.0f%%", o.slow_rank, 100 * o.slow_speed);
    printf("\nbalanced step at full speed: %.2f ms\n\n", o.task_ms * o.tasks);
    printf("%-12s %9s %9s %9s %9s %8s %8s %10s %10s\n", "", "step p50", "step p95", "step mean", "MFU mean",
           "MFU p5", "MFU p95", "busy +-", "stolen");
    report(&o, "stealing", &a);
    report(&o, "no stealing", &b);
    free(a.step_ms);
    free(a.mfu);
    free(a.busy_spread);
    free(b.step_ms);
    free(b.mfu);
    free(b.busy_spread);
    return 0;
}

/* tide-dst: deterministic simulation testing of the scheduler core (the way FoundationDB and
 * TigerBeetle test theirs). Each seed draws a cluster, a configuration and a hostile world, runs the
 * real core behind the shell model against it, checks the invariants after every step, then leaves the
 * world alone until every job must have ended. The same seed replays the same run bit for bit.
 *
 *   tide-dst [--seed K] [--seeds N] [--chaos-ms MS] [--trace] [--no-restarts] [--no-net-faults]
 *            [--no-preemption] [--no-flush] [--no-starvation] [--no-tasks] [--no-burst]
 *            [--strict | --strict-kb N ...]
 *            [--keep-going] [-q]
 *
 * Without --seed, TIDE_DST_SEED (default 1) is the first seed; without --seeds, TIDE_DST_SEEDS
 * (default 1 with --seed, else 400). */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core_private.h"
#include "dst.h"
#include "invariants.h"
#include "net.h"
#include "shell.h"
#include "store.h"
#include "world.h"
#include "xmalloc.h"

#define GIB (1ULL << 30)
#define MAX_ACTIVE_JOBS 40 /* pending and running jobs at most (fewer in a light seed: k->max_active) */
#define CALM_MAX_MS (60LL * 60 * 1000)

/* --- the run context --- */

uint64_t dst_rand(dst_t *d)
{
    uint64_t z = (d->rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int64_t dst_below(dst_t *d, int64_t n)
{
    return n <= 1 ? 0 : (int64_t)(dst_rand(d) % (uint64_t)n);
}

int64_t dst_range(dst_t *d, int64_t lo, int64_t hi)
{
    return hi <= lo ? lo : lo + dst_below(d, hi - lo + 1);
}

bool dst_chance(dst_t *d, double p)
{
    return p > 0 && (double)(dst_rand(d) >> 11) * 0x1.0p-53 < p;
}

int dst_pick(dst_t *d, const int *w, int n)
{
    int total = 0, r;

    for (int i = 0; i < n; i++)
        total += w[i] > 0 ? w[i] : 0;
    if (total == 0)
        return -1;
    r = (int)dst_below(d, total);
    for (int i = 0; i < n; i++) {
        if (w[i] <= 0)
            continue;
        if (r < w[i])
            return i;
        r -= w[i];
    }
    return -1;
}

int64_t dst_wall(const dst_t *d)
{
    return DST_WALL0 + d->now;
}

void dst_trace(dst_t *d, const char *fmt, ...)
{
    char *line = d->trace[d->n_trace++ % DST_TRACE_LINES];
    int n = snprintf(line, sizeof(d->trace[0]), "t=%lld ", (long long)d->now);
    va_list ap;

    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(d->trace[0]))
        vsnprintf(line + n, sizeof(d->trace[0]) - (size_t)n, fmt, ap);
    va_end(ap);
    if (d->trace_all)
        fprintf(stderr, "%s\n", line);
}

static dst_t *g_cur; /* the seed being run, for the failure report */
static bool g_keep_going; /* --keep-going: a failing seed is listed and the next one runs */
static jmp_buf g_seed_jb;

void dst_fail(dst_t *d, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    uint64_t first = d->n_trace > DST_TRACE_LINES ? d->n_trace - DST_TRACE_LINES : 0;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "\nDST: invariant broken (seed %" PRIu64 ", step %" PRIu64 ", t=%lld ms):\n  %s\n", d->seed,
            d->step, (long long)d->now, msg);
    if (!d->trace_all) {
        fprintf(stderr, "DST: the last %" PRIu64 " trace lines:\n", d->n_trace - first);
        for (uint64_t i = first; i < d->n_trace; i++)
            fprintf(stderr, "  %s\n", d->trace[i % DST_TRACE_LINES]);
    }
    if (g_keep_going)
        longjmp(g_seed_jb, 1);
    fail_msg("DST seed %" PRIu64 " step %" PRIu64 ": %s", d->seed, d->step, msg);
    abort(); /* not reached: fail_msg jumps out of the test */
}

/* --- options --- */

static struct {
    uint64_t first;
    uint64_t n;
    int64_t chaos_ms; /* 0: drawn per seed */
    bool trace, quiet;
    dst_switches_t sw;
    const char *argv0;
    char switches[256];
} opt;

static dst_stats_t g_stats;

/* --- one seed's world --- */

static void draw_knobs(dst_t *d)
{
    dst_knobs_t *k = &d->k;
    int faults = (int)dst_range(d, 0, 3); /* 0: a quiet seed ... 3: a hostile one */

    k->chaos_ms = opt.chaos_ms ? opt.chaos_ms : dst_range(d, 20000, 60000);
    k->inject_mean_ms = dst_range(d, 60, 300);
    k->p_drop = faults ? dst_range(d, 0, 40) / 10000.0 : 0;
    k->p_slow = faults ? dst_range(d, 0, 20) / 1000.0 : 0;
    k->p_dup = dst_range(d, 0, 100) / 1000.0;
    k->p_late = dst_range(d, 0, 50) / 1000.0;
    k->delay_max_ms = dst_range(d, 1, 60);
    k->w_crash = faults * (int)dst_range(d, 0, 2);
    k->w_leave = faults * (int)dst_range(d, 0, 1);
    k->w_join = 4;
    k->w_hang = faults * (int)dst_range(d, 0, 2);
    k->w_blip = faults * (int)dst_range(d, 0, 3);
    k->w_fail = faults * (int)dst_range(d, 0, 1);
    k->w_restart = d->sw.no_restarts ? 0 : (int)dst_range(d, 0, 2);
    k->w_submit = (int)dst_range(d, 15, 40);
    k->w_cancel = (int)dst_range(d, 0, 5);
    k->w_cordon = (int)dst_range(d, 0, 4);
    k->w_ckpt = (int)dst_range(d, 0, 4);
    k->w_mfu = (int)dst_range(d, 2, 8);
    k->w_scale = dst_chance(d, 0.8) ? (int)dst_range(d, 1, 6) : 0;
    k->p_flush_fail = dst_range(d, 0, 30) / 100.0;
    k->job_telemetry = dst_chance(d, 0.5);
    k->p_tasks = d->sw.no_tasks ? 0 : 0.5;
    k->stealing = dst_chance(d, 0.9);
    k->p_burst = d->sw.no_burst ? 0 : dst_range(d, 20, 60) / 100.0;
    /* a light seed in two of five: few jobs at once, so free workers are there to lend (a full queue blocks
     * lending into its shapes) */
    k->max_active = dst_chance(d, 0.4) ? (int)dst_range(d, 2, 8) : MAX_ACTIVE_JOBS;
    k->w_phase = d->sw.no_burst ? 0 : (int)dst_range(d, 2, 12);
    /* drain and hang detection (issue 8) */
    k->w_drain = dst_chance(d, 0.7) ? (int)dst_range(d, 1, 4) : 0;
    k->p_freeze = dst_chance(d, 0.7) ? dst_range(d, 5, 30) / 100.0 : 0;
}

static const char *const pool_names[] = {"crit", "shared", "scratch"};
static int32_t pool_dedicated[3];
static int n_pools;

static void draw_config(dst_t *d, tide_core_config_t *cfg)
{
    tide_core_config_default(cfg);
    cfg->reconnect_deadline_ms = dst_range(d, 2000, 30000);
    cfg->launch_timeout_ms = dst_range(d, 3000, 30000);
    cfg->stop_grace_ms = (uint32_t)dst_range(d, 300, 10000);
    cfg->retention_ms = 1000 * dst_range(d, 1, 120);
    cfg->aging_ms = dst_chance(d, 0.7) ? dst_range(d, 2000, 30000) : 0;
    cfg->preemption = !d->sw.no_preemption && dst_chance(d, 0.8);
    cfg->preempt_grace_ms = (uint32_t)dst_range(d, 300, 10000);
    cfg->ckpt_flush = !d->sw.no_flush && dst_chance(d, 0.7);
    cfg->ckpt_mfu_threshold = dst_range(d, 20, 50) / 100.0;
    cfg->ckpt_deadline_ms = dst_range(d, 2000, 60000);
    cfg->ckpt_gate_check_ms = dst_range(d, 200, 5000);
    cfg->ckpt_copy_timeout_ms = dst_range(d, 2000, 20000); /* FLUSHes and answers get lost */
    switch (dst_below(d, 3)) {
    case 0: /* the operator's fixed reserve */
        cfg->reserve_gpus = (int32_t)dst_range(d, 0, 3);
        break;
    case 1: /* computed, at a failure rate high enough to matter on a small cluster */
        cfg->failure_rate = dst_range(d, 1, 50) / 100.0;
        cfg->replacement_lead_h = dst_range(d, 1, 8) / 2.0;
        cfg->reserve_min_cluster = (int32_t)dst_range(d, 2, 16);
        break;
    default: /* the defaults: 0 below 16 GPUs */
        break;
    }
    /* restarts (docs/fault-tolerance.md, "Restarts"): often none, short backoffs and windows so that
     * backoffs, window resets and quarantines happen within a seed's minute */
    cfg->max_restarts = dst_chance(d, 0.5) ? (int32_t)dst_range(d, 1, 3) : 0;
    cfg->restart_backoff_ms = dst_chance(d, 0.3) ? 0 : dst_range(d, 100, 2000);
    cfg->restart_backoff_max_ms = dst_range(d, 1000, 8000);
    cfg->restart_window_ms = dst_range(d, 2000, 30000);
    cfg->quarantine_failures = (int32_t)dst_range(d, 0, 3);
    cfg->quarantine_window_ms = dst_range(d, 2000, 60000);
    /* work stealing: few pools (older complete ones are dropped), fast straggler checks */
    cfg->stealing = d->k.stealing;
    if (dst_chance(d, 0.3))
        cfg->max_task_pools = (int32_t)dst_range(d, 2, 4);
    cfg->straggler_check_ms = dst_range(d, 500, 5000);
    cfg->straggler_window_ms = dst_range(d, 1000, 30000);
    cfg->straggler_ratio = dst_range(d, 110, 200) / 100.0;
    /* elastic scaling (docs/elastic.md): short dwells and graces, so that grows, shrinks and replacements
     * happen within a seed's minute */
    cfg->auto_grow = dst_chance(d, 0.7);
    cfg->resize_dwell_ms = dst_range(d, 500, 10000);
    cfg->resize_grace_ms = (uint32_t)dst_range(d, 1000, 10000);
    if (dst_chance(d, 0.5))
        cfg->grow_min_gain = 0;
    if ((cfg->replace_stragglers = dst_chance(d, 0.3))) {
        cfg->straggler_window_ms = dst_range(d, 1000, 5000);
        cfg->straggler_check_ms = dst_range(d, 500, 2000);
    }
    /* phase-aware burst (docs/elastic.md, "Burst"): hysteresis, dwell and costs short enough that lending
     * and taking back happen many times within a seed's minute */
    cfg->burst_enter_ms = dst_range(d, 50, 1000);
    cfg->burst_exit_ms = dst_range(d, 50, 2000);
    cfg->burst_min_dwell_ms = dst_range(d, 200, 6000);
    cfg->burst_lend_cost_ms = dst_range(d, 20, 400);
    cfg->burst_cost_factor = dst_range(d, 5, 30) / 10.0;
    cfg->burst_resize_cost_ms = dst_range(d, 20, 2000);
    /* hang detection (docs/fault-tolerance.md, "Hangs"): a short minimum, so that frozen trainers are
     * noticed within a seed; a few restarts, so that some jobs fail for hanging */
    cfg->hang_min_ms = dst_range(d, 2000, 5000);
    /* pools: a critical pool (dedicated or not), a shared one, one for LOW work */
    n_pools = 0;
    if (dst_chance(d, 0.6))
        pool_dedicated[n_pools++] = dst_chance(d, 0.7) ? TIDE_PRIO_CRITICAL : -1;
    if (n_pools == 1 && dst_chance(d, 0.5))
        pool_dedicated[n_pools++] = -1;
    if (n_pools == 2 && dst_chance(d, 0.4))
        pool_dedicated[n_pools++] = TIDE_PRIO_LOW;
}

static void draw_cluster(dst_t *d)
{
    int nodes = (int)dst_range(d, 2, 6), total = 0;
    bool racked[4], switched[2];

    for (int i = 0; i < 4; i++)
        racked[i] = dst_chance(d, 0.7);
    for (int i = 0; i < 2; i++)
        switched[i] = dst_chance(d, 0.6);

    for (int n = 0; n < nodes && total < W_MAX_AGENTS; n++) {
        int gpus = (int)dst_range(d, 1, 8);
        char node[16], rack[12] = "", sw[12] = "";
        const char *device = dst_chance(d, 0.7) ? "sim:h100" : "sim:a100";
        uint64_t mem = (dst_chance(d, 0.6) ? 80 : 40) * GIB;
        const char *pool = "";
        bool na = dst_chance(d, 0.2);
        snprintf(node, sizeof(node), "n%d", n);
        if (n_pools > 0 && dst_chance(d, 0.5))
            pool = pool_names[dst_below(d, n_pools)];
        /* racks of two nodes, switches of two racks; labels consistent within a rack (the core keys a
         * rack's switch by the first worker it sees) */
        if (racked[n / 2])
            snprintf(rack, sizeof(rack), "r%d", n / 2);
        if (racked[n / 2] && switched[n / 4])
            snprintf(sw, sizeof(sw), "s%d", n / 4);
        for (int g = 0; g < gpus && total < W_MAX_AGENTS; g++, total++) {
            agent_t *a = world_add_agent(d->world, node, g, device, mem, pool, rack, sw, na);
            if (dst_chance(d, 0.85))
                world_join(d, a);
        }
    }
}

static int active_jobs(dst_t *d)
{
    int c[6];

    tide_core_job_counts(d->shell->core, c);
    return c[TIDE_JOB_PENDING] + c[TIDE_JOB_RUNNING];
}

static void inject_submit(dst_t *d)
{
    static const char *const devices[] = {"h100", "A100", "sim", "tpu"};
    static const uint64_t mems[] = {20 * GIB, 40 * GIB, 60 * GIB, 80 * GIB, 100 * GIB};
    char *argv[] = {"/bin/train", NULL};
    tide_job_spec_t spec = {.name = "dst", .argv = argv, .argc = 1};
    wjob_t b = {.resume = -1};
    char id[DST_ID_MAX];
    int rc;

    if (!shell_up(d) || active_jobs(d) >= d->k.max_active)
        return;
    spec.min_workers = (int32_t)(dst_chance(d, 0.15) ? dst_range(d, 4, 10) : dst_range(d, 1, 4));
    spec.max_workers = spec.min_workers + (int32_t)dst_range(d, 0, 2);
    spec.priority = (tide_prio_t)dst_below(d, TIDE_PRIO_COUNT);
    if (n_pools && dst_chance(d, 0.25))
        spec.pool = (char *)pool_names[dst_below(d, n_pools)];
    if (dst_chance(d, 0.3))
        spec.memory_per_rank = mems[dst_below(d, 5)];
    if (dst_chance(d, 0.3))
        spec.topology = (tide_topology_t)dst_range(d, 1, 3);
    if (dst_chance(d, 0.2))
        spec.device = (char *)devices[dst_below(d, 4)];
    if (dst_chance(d, 0.15))
        spec.time_limit_s = dst_range(d, 1, 30);
    if (dst_chance(d, 0.2))
        spec.ckpt_mfu_threshold = dst_range(d, 10, 80) / 100.0;
    if (dst_chance(d, 0.2))
        spec.ckpt_deadline_s = dst_range(d, 1, 30);
    if (dst_chance(d, 0.2)) /* checkpoint cadence: short enough to fire in a run; or off */
        spec.ckpt_interval_s = dst_chance(d, 0.2) ? -1 : dst_range(d, TIDE_CKPT_INTERVAL_MIN_S, 40);
    spec.adaptive_target = dst_chance(d, 0.1);
    if (dst_chance(d, d->k.p_burst)) {
        static char *burst_argv[] = {"/bin/burst", NULL};
        static const int32_t pcts[] = {10, 20, 34, 50, 100};
        spec.burst_percent = dst_chance(d, 0.8) ? pcts[dst_below(d, 5)] : (int32_t)dst_range(d, 1, 100);
        if (d->k.max_active < MAX_ACTIVE_JOBS && dst_chance(d, 0.5))
            spec.burst_percent = 100; /* a light seed: lend much, so that queued jobs meet lent workers */
        if (dst_chance(d, 0.3)) {
            spec.burst_argv = burst_argv;
            spec.n_burst_argv = 1;
        }
        b.burst_percent = spec.burst_percent;
    }
    /* its load phases: a cycle for most burst jobs (a few other jobs report phases too: nothing to lend) */
    b.phase_at = INT64_MAX;
    if (!d->sw.no_burst && dst_chance(d, b.burst_percent > 0 ? 0.85 : 0.1)) {
        b.high_ms = dst_range(d, 500, 6000);
        b.normal_ms = dst_range(d, 200, 3000);
        b.phase_at = d->now + dst_range(d, 0, b.normal_ms);
    }
    b.sdk = dst_chance(d, 0.6);
    b.answers = b.sdk && dst_chance(d, 0.7);
    b.step_ms = dst_range(d, 20, 200);
    b.total_steps = dst_chance(d, 0.2) ? dst_range(d, 100, 600) : dst_range(d, 5, 150);
    b.ckpt_every = dst_range(d, 3, 40);
    if (spec.ckpt_interval_s > 0 && b.sdk) {
        /* a long run whose own checkpoints are further apart than its cadence: tide asks in between */
        b.step_ms = dst_range(d, 100, 200);
        b.total_steps = dst_range(d, 300, 600);
        b.ckpt_every = dst_range(d, 50, 200);
    }
    b.peer_timeout_ms = dst_range(d, 500, 8000);
    b.fail_p = dst_range(d, 0, 15) / 100.0;
    b.mfu = dst_range(d, 5, 80) / 100.0;
    if (b.sdk && dst_chance(d, d->k.p_tasks)) {
        /* its steps are tasks: about as long as step_ms when balanced */
        b.tasks = true;
        /* burst lends workers only to jobs with detached tasks: most burst task jobs have them */
        b.task_kind = dst_chance(d, b.burst_percent > 0 ? 0.3 : 0.8) ? TIDE_TASK_MEMBER : TIDE_TASK_DETACHED;
        b.n_tasks = (int32_t)dst_range(d, 1, W_MAX_TASKS);
        b.id_base = dst_chance(d, 0.5) ? 0 : (uint64_t)dst_range(d, 0, (1LL << 52));
        b.id_stride = (uint64_t)dst_range(d, 1, 1000);
        b.task_ms = b.step_ms * spec.min_workers / b.n_tasks;
        if (b.task_ms < 1)
            b.task_ms = 1;
        b.p_slow_rank = dst_range(d, 0, 40) / 100.0;
        if (b.burst_percent > 0 && b.task_kind == TIDE_TASK_DETACHED)
            b.total_steps = dst_range(d, 40, 120); /* long enough for a few load phases */
        b.total_steps = b.total_steps > 120 ? 120 : b.total_steps; /* each step is many events */
    }
    if (dst_chance(d, 0.5)) {
        /* restarts (docs/fault-tolerance.md): the job's own policy, count and backoff now and then */
        spec.restart_policy = (int32_t)dst_range(d, TIDE_RESTART_DEFAULT, TIDE_RESTART_ON_FAILURE);
        spec.max_restarts = dst_chance(d, 0.4) ? 0 : (int32_t)dst_range(d, 1, 4);
        spec.restart_backoff_ms = dst_chance(d, 0.4) ? 0 : dst_range(d, 50, 1500);
    }
    rc = shell_submit(d, &spec, &b, id, sizeof(id));
    if (rc == 0 && b.tasks)
        d->stats->task_jobs++;
    if (rc == 0 && b.burst_percent > 0)
        d->stats->burst_jobs++;
    if (rc == 0)
        dst_trace(d, "client: submit -> job %s (%s, %d..%d, pool %s, %llu GiB, %s, device %s, burst %d%%%s, restart "
                     "%s max %d backoff %lld)",
                  id, tide_prio_name(spec.priority), spec.min_workers, spec.max_workers, spec.pool ? spec.pool : "-",
                  (unsigned long long)(spec.memory_per_rank >> 30), tide_topology_name(spec.topology),
                  spec.device ? spec.device : "-", spec.burst_percent, b.tasks ? tide_task_kind_name(b.task_kind) : "",
                  tide_restart_policy_name(spec.restart_policy), spec.max_restarts, (long long)spec.restart_backoff_ms);
    else if (rc != -EINVAL)
        dst_fail(d, "submit failed with %d", rc);
    else if (!spec.pool)
        dst_fail(d, "a valid spec was refused");
}

/* A job number the clients have seen (acknowledged or not, maybe already pruned). */
static void pick_job(dst_t *d, char *id, size_t len)
{
    uint64_t next = shell_up(d) ? tide_core_next_seq(d->shell->core) : 1;

    snprintf(id, len, "%llu", (unsigned long long)(next > 1 ? (uint64_t)dst_range(d, 1, (int64_t)next - 1) : 1));
}

/* JobService.ScaleJob (docs/elastic.md): mostly a live job with min < max and a size within its bounds;
 * sometimes outside them or elastic with a size (-EINVAL: nothing changes), elastic (the target is
 * forgotten), or any job number the clients have seen (ended: -EALREADY; pruned: -ENOENT). */
static void inject_scale(dst_t *d)
{
    tide_job_t *job = NULL, *pick = NULL;
    char id[DST_ID_MAX];
    int32_t workers, lo = 1, hi = 4;
    bool elastic = false;
    int64_t n = 0, r;
    int rc;

    if (!shell_up(d))
        return;
    if (dst_chance(d, 0.1)) {
        pick_job(d, id, sizeof(id));
    } else {
        while ((job = tide_core_job_next(d->shell->core, job))) {
            if (job->state != TIDE_JOB_PENDING && job->state != TIDE_JOB_RUNNING)
                continue;
            if (job->spec.min_workers == job->spec.max_workers && !dst_chance(d, 0.15))
                continue;
            if (dst_below(d, ++n) == 0)
                pick = job;
        }
        if (!pick)
            return;
        snprintf(id, sizeof(id), "%s", pick->id);
        lo = pick->spec.min_workers;
        hi = pick->spec.max_workers;
    }
    r = dst_below(d, 100);
    if (r < 65) {
        workers = (int32_t)dst_range(d, lo, hi);
    } else if (r < 80) {
        workers = dst_chance(d, 0.5) ? lo - (int32_t)dst_range(d, 1, 2) : hi + (int32_t)dst_range(d, 1, 3);
    } else if (r < 95) {
        workers = 0;
        elastic = true;
    } else {
        workers = (int32_t)dst_range(d, 1, hi);
        elastic = true;
    }
    rc = shell_scale(d, id, workers, elastic);
    dst_trace(d, "client: scale job %s to %d%s -> %d", id, workers, elastic ? " (elastic)" : "", rc);
}

/* A running job's load phase flips (docs/elastic.md, "Burst"): mostly a job with burst on. Its trainers
 * report the new phase in their next heartbeats (rank 0's counts); for a job without the SDK the
 * simulator's side tells the core directly (tide_core_job_load_phase). */
static void inject_phase(dst_t *d)
{
    tide_job_t *job = NULL;
    wjob_t *pick = NULL;
    int64_t n = 0;
    bool any = dst_chance(d, 0.1);

    if (!shell_up(d))
        return;
    while ((job = tide_core_job_next(d->shell->core, job))) {
        wjob_t *j;
        if (job->state != TIDE_JOB_RUNNING || (!any && job->spec.burst_percent <= 0) ||
            !(j = world_job_find(d->world, job->id)))
            continue;
        if (dst_below(d, ++n) == 0)
            pick = j;
    }
    if (!pick)
        return;
    pick->high = !pick->high;
    pick->load_said = true;
    d->stats->phase_flips++;
    dst_trace(d, "client: job %s enters a %s phase", pick->id, pick->high ? "high-load" : "normal");
    if (!pick->sdk) {
        shell_set_time(d);
        shell_load_phase(d, pick->id, pick->high);
    }
}

/* ClusterService.DrainWorker (docs/elastic.md, "Drain"): mostly a worker of the cluster (known to the
 * core or not yet); one call in ten names a worker that never existed (-ENOENT: nothing changes); one in
 * four instead uncordons a cordoned worker, so that drains do not leave the cluster dry. */
static void inject_drain(dst_t *d)
{
    static const char *const reasons[] = {NULL, "", "maintenance", "bad ECC"};
    int64_t r = dst_below(d, 100);

    if (!shell_up(d))
        return;
    if (r < 25) {
        tide_worker_t *w, *tmp, *pick = NULL;
        int64_t n = 0;
        HASH_ITER(hh, d->shell->core->workers, w, tmp) {
            if (w->cordoned && dst_below(d, ++n) == 0)
                pick = w;
        }
        if (pick) {
            char id[32];
            snprintf(id, sizeof(id), "%s", pick->id);
            if (shell_cordon(d, id, false) == 0) {
                d->stats->drain_uncordons++;
                dst_trace(d, "client: uncordon %s", id);
            }
        }
        return;
    }
    {
        const char *id = r < 35 ? "n9/gpu99" : d->world->a[dst_below(d, d->world->n)].id;
        char copy[32];
        int rc;
        snprintf(copy, sizeof(copy), "%s", id);
        rc = shell_drain(d, copy, reasons[dst_below(d, 4)]);
        dst_trace(d, "client: drain %s -> %d", copy, rc);
    }
}

static void inject(dst_t *d)
{
    enum { I_SUBMIT, I_CANCEL, I_CORDON, I_CKPT, I_MFU, I_CRASH, I_LEAVE, I_JOIN, I_HANG, I_BLIP, I_FAIL,
           I_RESTART, I_SCALE, I_PHASE, I_DRAIN, I_N };
    dst_knobs_t *k = &d->k;
    int w[I_N] = {k->w_submit, k->w_cancel, k->w_cordon, k->w_ckpt,    k->w_mfu,   k->w_crash,
                  k->w_leave,  k->w_join,   k->w_hang,   k->w_blip,    k->w_fail,  k->w_restart,
                  k->w_scale,  k->w_phase,  k->w_drain};
    agent_t *a = &d->world->a[dst_below(d, d->world->n)];
    char id[DST_ID_MAX];

    switch (dst_pick(d, w, I_N)) {
    case I_SUBMIT:
        inject_submit(d);
        break;
    case I_CANCEL:
        pick_job(d, id, sizeof(id));
        if (shell_cancel(d, id) == 0)
            dst_trace(d, "client: cancel job %s", id);
        break;
    case I_CORDON:
        shell_cordon(d, a->id, dst_chance(d, 0.5));
        break;
    case I_CKPT:
        pick_job(d, id, sizeof(id));
        if (shell_checkpoint(d, id, dst_range(d, 0, 5000)) == 0)
            dst_trace(d, "client: checkpoint job %s", id);
        break;
    case I_MFU: {
        /* a job's load changes (a phase): its MFU jumps */
        wjob_t *j, *jt;
        int64_t pick = dst_below(d, 8);
        HASH_ITER(hh, d->world->jobs, j, jt) {
            if (pick-- == 0)
                j->mfu = dst_range(d, 5, 85) / 100.0;
        }
        break;
    }
    case I_CRASH:
        world_crash(d, a, dst_range(d, 200, 6000));
        break;
    case I_LEAVE:
        world_leave(d, a);
        break;
    case I_JOIN:
        world_join(d, a);
        break;
    case I_HANG:
        world_hang(d, a, dst_range(d, 200, 4000));
        break;
    case I_BLIP:
        world_blip(d, a);
        break;
    case I_FAIL:
        if (a->up) {
            world_crash(d, a, dst_range(d, 1000, 10000));
            a->fail_report = true;
        }
        break;
    case I_RESTART:
        shell_crash_at_turn_end(d, dst_chance(d, 0.5));
        break;
    case I_SCALE:
        inject_scale(d);
        break;
    case I_PHASE:
        inject_phase(d);
        break;
    case I_DRAIN:
        inject_drain(d);
        break;
    default:
        break;
    }
}

/* The world is left alone: everything comes back, the network is reliable, cordons are lifted. */
static void calm_down(dst_t *d)
{
    d->calm = true;
    d->calm_at = d->now;
    dst_trace(d, "dst: the world is left alone");
    for (int i = 0; i < d->world->n; i++) {
        agent_t *a = &d->world->a[i];
        world_thaw(d, a);
        world_join(d, a);
    }
}

static void uncordon_all(dst_t *d)
{
    tide_worker_t *w, *tmp;

    if (!shell_up(d))
        return;
    HASH_ITER(hh, d->shell->core->workers, w, tmp) {
        if (w->cordoned)
            shell_cordon(d, w->id, false);
    }
}

/* One step: the world's own events, an injected action when one is due, the scheduler's turn, then
 * every invariant. Time jumps to the next instant anything is due. */
static void step_once(dst_t *d, int64_t *next_inject, bool chaos)
{
    int64_t next = world_next_due(d), t;

    if ((t = net_next_due(d->net, world_skip_stream, d)) < next)
        next = t;
    if ((t = shell_next_due(d)) < next)
        next = t;
    if (chaos && *next_inject < next)
        next = *next_inject;
    d->now = next > d->now ? next : d->now + 1;
    world_run(d);
    if (chaos && d->now >= *next_inject) {
        shell_set_time(d);
        inject(d);
        *next_inject = d->now + dst_range(d, 1, 2 * d->k.inject_mean_ms);
    }
    shell_turn(d);
    net_gc(d->net);
    chk_step(d);
    d->step++;
}

static void dst_free(dst_t *d)
{
    if (!d)
        return;
    shell_free(d->shell);
    world_free(d->world);
    net_free(d->net);
    store_free(d->store);
    chk_free(d->chk);
    free(d);
}

static void run_seed(uint64_t seed)
{
    dst_t *d = tide_xcalloc(1, sizeof(*d));
    tide_core_config_t cfg;
    int64_t next_inject, calm_until;
    bool uncordoned = false;

    g_cur = d;
    d->seed = seed;
    d->rng = seed;
    d->sw = opt.sw;
    d->trace_all = opt.trace;
    d->stats = &g_stats;
    d->world = world_new(d);
    d->net = net_new();
    d->store = store_new();
    d->chk = chk_new();
    draw_knobs(d);
    draw_config(d, &cfg);
    d->world->stop_grace_ms = cfg.stop_grace_ms;
    d->world->hb_ms = cfg.heartbeat_interval_ms;
    draw_cluster(d);
    shell_new(d, &cfg, pool_names, pool_dedicated, n_pools);
    dst_trace(d, "dst: seed %" PRIu64 ": %d workers, preemption %d, flush %d, reserve %d, aging %lld ms, "
                 "max_restarts %d (backoff %lld ms, window %lld ms), quarantine %d, %d pool(s)",
              seed, d->world->n, cfg.preemption, cfg.ckpt_flush, cfg.reserve_gpus, (long long)cfg.aging_ms,
              cfg.max_restarts, (long long)cfg.restart_backoff_ms, (long long)cfg.restart_window_ms,
              cfg.quarantine_failures, n_pools);
    dst_trace(d, "dst: auto_grow %d, dwell %lld ms, resize grace %u ms, grow_min_gain %.3f, replace_stragglers %d "
                 "(window %lld ms)",
              cfg.auto_grow, (long long)cfg.resize_dwell_ms, cfg.resize_grace_ms, cfg.grow_min_gain,
              cfg.replace_stragglers, (long long)cfg.straggler_window_ms);

    next_inject = dst_range(d, 1, d->k.inject_mean_ms);
    while (d->now < d->k.chaos_ms) {
        step_once(d, &next_inject, true);
        if (d->k.job_telemetry && d->now / 1000 != (d->now - 1) / 1000 && shell_up(d)) {
            shell_set_time(d);
            shell_job_telemetry(d);
        }
    }
    calm_down(d);
    calm_until = d->now + CALM_MAX_MS;
    while (d->now < calm_until) {
        if (!uncordoned && shell_up(d)) {
            shell_set_time(d);
            uncordon_all(d);
            uncordoned = true;
        }
        step_once(d, &next_inject, false);
        if (uncordoned && chk_settled(d))
            break;
    }
    chk_final(d);
    g_stats.seeds++;
    g_stats.steps += d->step;
    g_stats.sim_ms += d->now;
    g_cur = NULL;
    dst_free(d);
}

/* --- CMocka glue and the command line --- */

static void dst_free(dst_t *d);

static void test_dst(void **state)
{
    static uint64_t failed[64];
    static volatile uint64_t n_failed;

    (void)state;
    for (volatile uint64_t i = 0; i < opt.n; i++) {
        if (g_keep_going && setjmp(g_seed_jb)) {
            /* the seed failed (dst_fail printed why): note it, drop its world, go on */
            if (n_failed < 64)
                failed[n_failed] = g_cur->seed;
            n_failed++;
            dst_free(g_cur);
            g_cur = NULL;
            continue;
        }
        run_seed(opt.first + i);
        if (!opt.quiet && opt.n >= 100 && (i + 1) % 100 == 0)
            fprintf(stderr, "dst: %" PRIu64 " of %" PRIu64 " seeds\n", i + 1, opt.n);
    }
    if (n_failed) {
        fprintf(stderr, "dst: %" PRIu64 " of %" PRIu64 " seed(s) failed:", (uint64_t)n_failed, opt.n);
        for (uint64_t k = 0; k < n_failed && k < 64; k++)
            fprintf(stderr, " %" PRIu64, failed[k]);
        fprintf(stderr, "%s\n", n_failed > 64 ? " ..." : "");
        fail_msg("DST: %" PRIu64 " seed(s) failed", (uint64_t)n_failed);
    }
}

static int teardown(void **state)
{
    (void)state;
    if (g_cur) {
        fprintf(stderr, "\nDST: seed %" PRIu64 " failed at step %" PRIu64 " (t=%lld ms). Replay it with:\n"
                        "  %s --seed %" PRIu64 "%s\n  make dst SEED=%" PRIu64 "%s%s%s\n"
                        "(add --trace to print every event)\n",
                g_cur->seed, g_cur->step, (long long)g_cur->now, opt.argv0, g_cur->seed, opt.switches,
                g_cur->seed, opt.switches[0] ? " DST_FLAGS=\"" : "", opt.switches[0] ? opt.switches + 1 : "",
                opt.switches[0] ? "\"" : "");
        dst_free(g_cur);
        g_cur = NULL;
    }
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: tide-dst [--seed K] [--seeds N] [--chaos-ms MS] [--trace] [-q]\n"
               "                [--no-restarts] [--no-net-faults] [--no-preemption] [--no-flush] "
               "[--no-starvation] [--no-tasks] [--no-burst] [--strict | --strict-kb N ...]\n"
               "                [--keep-going]\n"
               "--strict: no tolerance for the known core bugs KB1..KB4, KB8..KB%d (tests/dst/README.md); --strict-kb "
               "N: for KBN only (all are fixed and checked by default)\n"
               "--keep-going: list every failing seed instead of stopping at the first\n"
               "Runs N seeds from K (TIDE_DST_SEED, TIDE_DST_SEEDS; default: seed 1, 400 seeds).\n",
            DST_KNOWN_BUGS);
}

static bool parse(int argc, char **argv)
{
    const char *env_seed = getenv("TIDE_DST_SEED"), *env_n = getenv("TIDE_DST_SEEDS");
    bool seed_given = false, n_given = false;
    size_t sl = 0;

    opt.argv0 = argv[0];
    /* KB1..KB4 and KB8..KB12 are fixed: always checked, with no tolerance (dst.h). */
    for (int k = 1; k <= DST_KNOWN_BUGS; k++)
        opt.sw.strict[k] = true;
    opt.first = env_seed ? strtoull(env_seed, NULL, 10) : 1;
    if (env_n) {
        opt.n = strtoull(env_n, NULL, 10);
        n_given = true;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        struct {
            const char *name;
            bool *flag;
        } sws[] = {{"--no-restarts", &opt.sw.no_restarts},     {"--no-net-faults", &opt.sw.no_net_faults},
                   {"--no-preemption", &opt.sw.no_preemption}, {"--no-flush", &opt.sw.no_flush},
                   {"--no-starvation", &opt.sw.no_starvation}, {"--no-tasks", &opt.sw.no_tasks},
                   {"--no-burst", &opt.sw.no_burst}};
        bool matched = false;
        for (size_t k = 0; k < sizeof(sws) / sizeof(sws[0]); k++) {
            if (strcmp(a, sws[k].name) == 0) {
                *sws[k].flag = true;
                sl += (size_t)snprintf(opt.switches + sl, sizeof(opt.switches) - sl, " %s", a);
                matched = true;
            }
        }
        if (matched)
            continue;
        if (strcmp(a, "--strict") == 0) {
            for (int k = 1; k <= DST_KNOWN_BUGS; k++)
                opt.sw.strict[k] = true;
            sl += (size_t)snprintf(opt.switches + sl, sizeof(opt.switches) - sl, " --strict");
        } else if (strcmp(a, "--keep-going") == 0) {
            g_keep_going = true;
        } else if (strcmp(a, "--strict-kb") == 0 && i + 1 < argc) {
            int k = atoi(argv[++i]);
            if (k < 1 || k > DST_KNOWN_BUGS || (k >= 5 && k <= 7)) {
                usage(stderr);
                return false;
            }
            opt.sw.strict[k] = true;
            sl += (size_t)snprintf(opt.switches + sl, sizeof(opt.switches) - sl, " --strict-kb %d", k);
        } else if (strcmp(a, "--seed") == 0 && i + 1 < argc) {
            opt.first = strtoull(argv[++i], NULL, 10);
            seed_given = true;
        } else if (strcmp(a, "--seeds") == 0 && i + 1 < argc) {
            opt.n = strtoull(argv[++i], NULL, 10);
            n_given = true;
        } else if (strcmp(a, "--chaos-ms") == 0 && i + 1 < argc) {
            opt.chaos_ms = strtoll(argv[++i], NULL, 10);
            sl += (size_t)snprintf(opt.switches + sl, sizeof(opt.switches) - sl, " --chaos-ms %lld",
                                   (long long)opt.chaos_ms);
        } else if (strcmp(a, "--trace") == 0) {
            opt.trace = true;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            opt.quiet = true;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else {
            usage(stderr);
            return false;
        }
    }
    if (!n_given)
        opt.n = seed_given ? 1 : 400;
    return true;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_dst, teardown),
    };
    struct timespec t0, t1;
    double secs;
    int rc;

    if (!parse(argc, argv))
        return 2;
    fprintf(stderr, "dst: seeds %" PRIu64 "..%" PRIu64 "%s\n", opt.first, opt.first + opt.n - 1, opt.switches);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = cmocka_run_group_tests_name("dst", tests, NULL, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    {
        dst_stats_t *s = &g_stats;
        fprintf(stderr,
                "dst: %" PRIu64 " seed(s) in %.1f s (%.1f seeds/s), %" PRIu64 " steps, %.0f simulated minutes, "
                "%" PRIu64 " core calls\n"
                "dst: restarts %" PRIu64 " (%" PRIu64 " lost their open batch), messages %" PRIu64 " (dropped %" PRIu64
                ", slow %" PRIu64 ", duplicated %" PRIu64 "), spawns %" PRIu64 "\n"
                "dst: acknowledged submits %" PRIu64 ", cancels %" PRIu64 "; events: started %" PRIu64
                ", succeeded %" PRIu64 ", failed %" PRIu64 ", cancelled %" PRIu64 ", rolled back %" PRIu64
                ", requeued %" PRIu64 ", preempting %" PRIu64 ", preempted %" PRIu64 ", aged %" PRIu64 "\n"
                "dst: checkpoints %" PRIu64 ", held %" PRIu64 ", durable %" PRIu64 ", flush failed %" PRIu64
                ", requested %" PRIu64 " (missed %" PRIu64 ", cadence off %" PRIu64 "; %" PRIu64
                " cadence checks), workers dead %" PRIu64
                ", superseded hellos refused %" PRIu64
                "\n"
                "dst: checks: placement %" PRIu64 ", reserve %" PRIu64 ", starvation %" PRIu64 "\n"
                "dst: tasks: %" PRIu64 " jobs, %" PRIu64 " generations; %" PRIu64 " handed; steps %" PRIu64
                " ended (%" PRIu64 " checked exactly once, %" PRIu64 " complete across a restart, %" PRIu64
                " lost %" PRIu64 " task(s) to a restart, %" PRIu64 " cut by a generation end); %" PRIu64
                " handed again after their generation ended\n"
                "dst: steals: %" PRIu64 " requests sent, %" PRIu64 " gives (%" PRIu64 " tasks, %" PRIu64
                " empty), %" PRIu64 " releases, %" PRIu64 " waits (longest %lld ms); task messages duplicated %"
                PRIu64 ", late %" PRIu64 "; refused by the core %" PRIu64 " (%" PRIu64
                " declarations: no pool room)\n"
                "dst: task checks: pools %" PRIu64 ", commits %" PRIu64 ", gives %" PRIu64 "\n"
                "dst: scale: %" PRIu64 " ScaleJob calls (%" PRIu64 " acknowledged, %" PRIu64 " invalid, %" PRIu64
                " on ended jobs, %" PRIu64 " unknown); resizes: %" PRIu64 " decided, %" PRIu64 " pending, %" PRIu64
                " cancelled; done: %" PRIu64 " requested, %" PRIu64 " grow, %" PRIu64 " shrink, %" PRIu64
                " replace; %" PRIu64 " generations of a new size (%" PRIu64 " resumed from a checkpoint); %" PRIu64
                " resize checks\n"
                "dst: burst: %" PRIu64 " jobs, %" PRIu64 " phase flips; lent %" PRIu64 " time(s) (%" PRIu64
                " by a resize), taken back %" PRIu64 "; lent processes %" PRIu64 " started (%" PRIu64
                " by the core), %" PRIu64 " exited by themselves, %" PRIu64 " lost; %" PRIu64
                " task(s) handed to them, %" PRIu64 " given back unfinished, %" PRIu64
                " missing from a step after their process ended, %" PRIu64 " run again after their process was "
                "lost; %" PRIu64 " burst checks\n"
                "dst: drain: %" PRIu64 " DrainWorker calls (%" PRIu64 " acknowledged, %" PRIu64 " unknown); %" PRIu64
                " moved a job off the worker, %" PRIu64 " found it free; %" PRIu64 " uncordons; %" PRIu64
                " drained-worker checks\n"
                "dst: hangs: %" PRIu64 " job.hung (%" PRIu64 " of a frozen generation, %" PRIu64
                " failed the job); %" PRIu64 " freezes drawn, %" PRIu64 " of them declared hung; %" PRIu64
                " hang checks\n"
                "dst: recovery: %" PRIu64 " restarts (%" PRIu64 " after a backoff), %" PRIu64 " quarantines; failed: %"
                PRIu64 " by policy, %" PRIu64 " at max_restarts; %" PRIu64 " generation starts checked (%" PRIu64
                " resumed from a checkpoint); %" PRIu64 " history checks, %" PRIu64 " one-job-per-worker checks\n"
                "dst: open core bugs tolerated: KB8 %" PRIu64 " job(s), KB9 %" PRIu64 " launch(es), KB10 %" PRIu64
                " job(s), %" PRIu64 " burst slot(s) relaunched on the same worker, KB12 %" PRIu64 " call(s)\n",
                s->seeds, secs, secs > 0 ? (double)s->seeds / secs : 0, s->steps, (double)s->sim_ms / 60000.0,
                s->core_calls, s->restarts, s->lossy_restarts, s->msgs, s->drops, s->slow, s->dups, s->spawns,
                s->submits_acked, s->cancels_acked, s->ev_started, s->ev_succeeded, s->ev_failed, s->ev_cancelled,
                s->ev_rolled_back, s->ev_requeued, s->ev_preempting, s->ev_preempted, s->ev_aged, s->ev_ckpt,
                s->ev_held, s->ev_durable, s->ev_flush_failed, s->ev_ckpt_requested, s->ev_ckpt_missed, s->ev_cadence_off, s->cadence_checks,
                s->ev_worker_dead,
                s->hellos_refused,
                s->placement_checks, s->reserve_checks, s->starvation_checks, s->task_jobs, s->task_trainers,
                s->tasks_handed, s->task_steps, s->task_steps_exact, s->task_steps_restart, s->task_steps_restart_lost,
                s->tasks_restart_lost, s->task_steps_gen_cut, s->task_dups_gen_over, s->steals_sent, s->gives,
                s->gives_ids, s->gives_empty, s->releases, s->waits, (long long)s->wait_max_ms, s->task_msgs_dup,
                s->task_msgs_late, s->task_rejected, s->declare_nospace, s->pool_checks, s->commit_checks,
                s->give_checks, s->scales, s->scales_acked, s->scale_einval, s->scale_ealready, s->scale_enoent,
                s->ev_resizing, s->ev_resize_pending, s->ev_resize_cancelled, s->ev_resized[0], s->ev_resized[1],
                s->ev_resized[2], s->ev_resized[3], s->gens_resized, s->gens_resized_resumed, s->resize_checks,
                s->burst_jobs, s->phase_flips, s->ev_burst_lent, s->burst_resizes, s->ev_burst_reclaimed,
                s->burst_spawns, s->ev_burst_started, s->ev_burst_exited, s->ev_burst_lost, s->burst_tasks,
                s->burst_tasks_aborted, s->burst_tasks_lost, s->burst_dups_excused, s->burst_checks, s->drains,
                s->drains_acked, s->drains_enoent, s->drains_moved, s->drains_idle, s->drain_uncordons,
                s->drain_checks, s->ev_hung, s->hung_frozen, s->hung_failed, s->freezes, s->freezes_hung,
                s->hang_checks, s->ev_restarted, s->restarts_backoff, s->ev_quarantined, s->failed_policy,
                s->failed_max, s->resume_checks, s->resumed_ckpt, s->history_checks, s->exclusive_checks, s->kb8_seen,
                s->kb9_seen, s->kb10_seen, s->kb11_seen, s->kb12_seen);
    }
    return rc;
}

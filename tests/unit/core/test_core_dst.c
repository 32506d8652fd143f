/* Deterministic simulation of the scheduler core (the way FoundationDB and TigerBeetle test theirs): a
 * seeded random world of workers, processes, network blips, hung agents, worker crashes and scheduler
 * restarts drives the core; its invariants are checked after every step, and at the end the world is
 * left alone until every job must have ended. Reproduce a failure with TIDE_DST_SEED=N (and
 * TIDE_DST_SEEDS=1). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "core_harness.h"
#include "core_private.h"

#define NW 12
#define MAXP 4

typedef struct proc {
    bool live;
    char job[16];
    int32_t gen, rank;
    bool reported; /* start reported */
    int64_t exit_at;
    int32_t exit_code;
} proc_t;

typedef struct exitrec {
    char job[16];
    int32_t gen, rank, code;
} exitrec_t;

typedef struct sw {
    char id[32], node[16];
    int gpu;
    bool up, connected, frozen;
    int conn_slot; /* &conn_ids[conn_slot] is the stream handle */
    tide_worker_t *cw;
    proc_t procs[MAXP];
    exitrec_t exits[16];
    int n_exits;
} sw_t;

typedef struct world {
    h_t h;
    uint64_t rng;
    sw_t w[NW];
    int next_conn;
    int conn_ids[1 << 16];
    int steps, restarts;
} world_t;

static uint64_t rnd(world_t *W)
{
    /* splitmix64 */
    uint64_t z = (W->rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int rint_(world_t *W, int n)
{
    return (int)(rnd(W) % (uint64_t)n);
}

static sw_t *by_conn(world_t *W, void *conn)
{
    for (int i = 0; i < NW; i++)
        if (W->w[i].up && W->w[i].connected && conn == &W->conn_ids[W->w[i].conn_slot])
            return &W->w[i];
    return NULL;
}

/* Delivers the core's actions to the simulated workers (instantly; loss happens through disconnects). */
static void deliver(world_t *W)
{
    size_t n;
    const tide_action_t *a = tide_core_actions(W->h.core, &n);

    const char *dbg = getenv("TIDE_DST_DEBUG_JOB");
    for (size_t i = 0; i < n; i++) {
        sw_t *s = a[i].conn ? by_conn(W, a[i].conn) : NULL;
        if (dbg && ((a[i].job_id && strcmp(a[i].job_id, dbg) == 0) || (a[i].job && strcmp(a[i].job->id, dbg) == 0)))
            fprintf(stderr, "t=%lld act %d %s w=%s delivered=%d\n", (long long)W->h.mono, a[i].type,
                    a[i].text ? a[i].text : "", a[i].worker ? a[i].worker->id : "-", s != NULL);
        if (!s)
            continue;
        if (a[i].type == TIDE_ACT_CLOSE_STREAM) {
            s->connected = false;
        } else if (a[i].type == TIDE_ACT_LAUNCH) {
            bool dup = false;
            for (int p = 0; p < MAXP; p++) {
                proc_t *pr = &s->procs[p];
                if (pr->live && strcmp(pr->job, a[i].job->id) == 0 && pr->gen == a[i].generation &&
                    pr->rank == a[i].rank)
                    dup = true;
            }
            for (int p = 0; p < MAXP && !dup; p++) {
                proc_t *pr = &s->procs[p];
                if (pr->live)
                    continue;
                memset(pr, 0, sizeof(*pr));
                pr->live = true;
                snprintf(pr->job, sizeof(pr->job), "%s", a[i].job->id);
                pr->gen = a[i].generation;
                pr->rank = a[i].rank;
                pr->exit_at = W->h.mono + 200 + rint_(W, 20000);
                pr->exit_code = rint_(W, 10) == 0 ? 1 + rint_(W, 3) : 0;
                break;
            }
        } else if (a[i].type == TIDE_ACT_STOP) {
            for (int p = 0; p < MAXP; p++) {
                proc_t *pr = &s->procs[p];
                if (pr->live && strcmp(pr->job, a[i].job_id) == 0 && pr->gen == a[i].generation &&
                    pr->rank == a[i].rank) {
                    int64_t at = W->h.mono + rint_(W, 3000);
                    if (at < pr->exit_at)
                        pr->exit_at = at;
                    pr->exit_code = 143;
                }
            }
        }
    }
    tide_core_actions_clear(W->h.core);
}

static void do_register(world_t *W, sw_t *s)
{
    if (getenv("TIDE_DST_DEBUG_JOB"))
        fprintf(stderr, "t=%lld sim %s register n_exits=%d\n", (long long)W->h.mono, s->id, s->n_exits);
    tide_rank_report_t reps[MAXP + 16];
    size_t n = 0;
    tide_worker_info_t info = {.id = s->id, .node = s->node, .gpu_index = s->gpu, .device = "sim",
                               .address = "127.0.0.1"};
    tide_error_t err;

    for (int p = 0; p < MAXP; p++) {
        proc_t *pr = &s->procs[p];
        if (!pr->live)
            continue;
        reps[n++] = (tide_rank_report_t){.job_id = pr->job, .generation = pr->gen, .rank = pr->rank,
                                         .running = true, .pid = 100 + p,
                                         .master_port = pr->rank == 0 ? 29400 : 0};
        pr->reported = true;
    }
    for (int e = 0; e < s->n_exits; e++)
        reps[n++] = (tide_rank_report_t){.job_id = s->exits[e].job, .generation = s->exits[e].gen,
                                         .rank = s->exits[e].rank, .running = false,
                                         .exit_code = s->exits[e].code};
    s->conn_slot = W->next_conn++ % (1 << 16);
    s->connected = true;
    assert_int_equal(tide_core_worker_register(W->h.core, &info, &W->conn_ids[s->conn_slot], reps, n,
                                               &s->cw, &err),
                     0);
    s->n_exits = 0;
    deliver(W);
}

/* Processes report starts and exits. */
static void run_procs(world_t *W, sw_t *s)
{
    if (!s->up || s->frozen)
        return;
    for (int p = 0; p < MAXP; p++) {
        proc_t *pr = &s->procs[p];
        if (!pr->live)
            continue;
        if (!pr->reported && s->connected && rint_(W, 8) == 0) {
            /* the RankStarted is lost with a stream that then stays up: only the exit will tell */
            pr->reported = true;
        } else if (!pr->reported && s->connected) {
            pr->reported = true;
            tide_core_rank_started(W->h.core, s->cw, pr->job, pr->gen, pr->rank, 100 + p,
                                   pr->rank == 0 ? 29400 : 0);
            deliver(W);
        }
        if (W->h.mono >= pr->exit_at) {
            pr->live = false;
            if (getenv("TIDE_DST_DEBUG_JOB") && strcmp(pr->job, getenv("TIDE_DST_DEBUG_JOB")) == 0)
                fprintf(stderr, "t=%lld sim %s exit %s/%d/%d code %d connected=%d\n", (long long)W->h.mono, s->id, pr->job, pr->gen, pr->rank, pr->exit_code, s->connected);
            if (s->connected) {
                tide_core_rank_exited(W->h.core, s->cw, pr->job, pr->gen, pr->rank, pr->exit_code, NULL);
                deliver(W);
            } else if (s->n_exits < 16) {
                exitrec_t *e = &s->exits[s->n_exits++];
                snprintf(e->job, sizeof(e->job), "%s", pr->job);
                e->gen = pr->gen;
                e->rank = pr->rank;
                e->code = pr->exit_code;
            }
        }
    }
}

static void advance(world_t *W, int64_t ms)
{
    int64_t step = 100;
    for (int64_t t = 0; t < ms; t += step) {
        W->h.mono += step;
        tide_core_set_time(W->h.core, W->h.mono, H_WALL0 + W->h.mono);
        if ((W->h.mono / 100) % 5 == 0) {
            for (int i = 0; i < NW; i++) {
                sw_t *s = &W->w[i];
                if (s->up && s->connected && !s->frozen)
                    tide_core_worker_heartbeat(W->h.core, s->cw, NULL);
            }
        }
        tide_core_tick(W->h.core);
        deliver(W);
        for (int i = 0; i < NW; i++)
            run_procs(W, &W->w[i]);
    }
}

static void restart_scheduler(world_t *W)
{
    tide_core_t *old = W->h.core;
    tide_core_t *core = tide_core_new(tide_core_config(old));
    tide_job_t *job = NULL;
    tide_worker_t *w, *tmp;
    tide_error_t err;

    tide_core_set_time(core, W->h.mono, H_WALL0 + W->h.mono);
    tide_core_restore_meta(core, tide_core_next_seq(old));
    HASH_ITER(hh, old->workers, w, tmp) {
        if (w->cordoned)
            tide_core_worker_restore(core, w->id, true);
    }
    while ((job = tide_core_job_next(old, job))) {
        int32_t n = job->n_ranks;
        const char **ids = calloc((size_t)n + 1, sizeof(*ids));
        tide_rank_state_t *st = calloc((size_t)n + 1, sizeof(*st));
        int32_t *codes = calloc((size_t)n + 1, sizeof(*codes));
        int32_t *local = calloc((size_t)n + 1, sizeof(*local));
        int32_t *group = calloc((size_t)n + 1, sizeof(*group));
        for (int32_t r = 0; r < n; r++) {
            ids[r] = job->ranks[r].worker_id;
            st[r] = job->ranks[r].state;
            codes[r] = job->ranks[r].exit_code;
            local[r] = job->ranks[r].local_rank;
            group[r] = job->ranks[r].group_rank;
        }
        tide_job_record_t rec = {.id = job->id, .spec = &job->spec, .state = job->state,
                                 .generation = job->generation, .worker_ids = ids, .n_workers = n,
                                 .rank_states = st, .rank_exit_codes = codes,
                                 .rank_local_ranks = local, .rank_group_ranks = group,
                                 .master_addr = job->master_addr, .master_port = job->master_port,
                                 .message = job->message, .submit_ms = job->submit_ms,
                                 .start_ms = job->start_ms, .end_ms = job->end_ms,
                                 .gen_start_ms = job->gen_start_ms, .gpu_seconds = job->gpu_seconds,
                                 .exit_code = job->exit_code, .failed_rank = job->failed_rank};
        assert_int_equal(tide_core_job_restore(core, &rec, &err), 0);
        free(ids);
        free(st);
        free(codes);
        free(local);
        free(group);
    }
    tide_core_restore_done(core);
    tide_core_free(old);
    W->h.core = core;
    for (int i = 0; i < NW; i++) {
        W->w[i].connected = false;
        W->w[i].cw = NULL;
    }
    deliver(W);
    W->restarts++;
}

static void step(world_t *W)
{
    int what = rint_(W, 100);
    sw_t *s = &W->w[rint_(W, NW)];

    if (what < 15) {
        int min = 1 + rint_(W, 5);
        tide_job_t *job = h_submit(&W->h, min, min + rint_(W, 3), (tide_prio_t)rint_(W, 4));
        if (rint_(W, 5) == 0)
            job->spec.time_limit_s = 1 + rint_(W, 20);
        deliver(W);
    } else if (what < 55) {
        advance(W, 100 * (1 + rint_(W, 8)));
    } else if (what < 62) {
        /* network blip: the stream drops, the worker reconnects later */
        if (s->up && s->connected) {
            s->connected = false;
            tide_core_worker_disconnected(W->h.core, s->cw, &W->conn_ids[s->conn_slot], false);
            deliver(W);
        }
    } else if (what < 72) {
        if (s->up && !s->connected && !s->frozen)
            do_register(W, s);
    } else if (what < 75) {
        /* crash: ranks die with the worker, the stream closes */
        if (s->up) {
            bool was = s->connected;
            s->up = false;
            s->connected = false;
            s->frozen = false;
            memset(s->procs, 0, sizeof(s->procs));
            s->n_exits = 0;
            if (was && s->cw) {
                tide_core_worker_disconnected(W->h.core, s->cw, &W->conn_ids[s->conn_slot], false);
                deliver(W);
            }
        }
    } else if (what < 80) {
        if (!s->up) {
            s->up = true;
            do_register(W, s);
        }
    } else if (what < 83) {
        if (s->up)
            s->frozen = !s->frozen;
    } else if (what < 88) {
        tide_job_t *job = NULL, *out;
        tide_error_t err;
        int k = rint_(W, 8);
        while ((job = tide_core_job_next(W->h.core, job)) && k--)
            ;
        if (job) {
            tide_core_job_cancel(W->h.core, job->id, &out, &err);
            deliver(W);
        }
    } else if (what < 91) {
        tide_worker_t *out;
        tide_error_t err;
        if (tide_core_worker_find(W->h.core, s->id))
            tide_core_worker_cordon(W->h.core, s->id, rint_(W, 2) == 0, &out, &err);
        deliver(W);
    } else if (what < 92) {
        restart_scheduler(W);
    } else {
        for (int i = 0; i < NW; i++)
            run_procs(W, &W->w[i]);
    }
    h_check_invariants(&W->h);
    /* A GPU never runs two ranks: a stopping or stale rank keeps its worker out of placement. */
    for (int i = 0; i < NW; i++) {
        int live = 0;
        for (int p = 0; p < MAXP; p++)
            live += W->w[i].procs[p].live;
        if (live > 1)
            fail_msg("step %d: %s runs %d ranks at once", W->steps, W->w[i].id, live);
    }
    W->steps++;
}

/* Jobs that have not ended and could still run, and processes still running. */
static int active_jobs(world_t *W)
{
    tide_job_t *job = NULL;
    int n = 0;
    while ((job = tide_core_job_next(W->h.core, job)))
        n += job->state == TIDE_JOB_RUNNING ||
             (job->state == TIDE_JOB_PENDING && job->spec.min_workers <= W->h.core->n_usable);
    for (int i = 0; i < NW; i++)
        for (int p = 0; p < MAXP; p++)
            n += W->w[i].procs[p].live;
    return n;
}

static void run_seed(uint64_t seed, int steps)
{
    world_t *W = calloc(1, sizeof(*W));
    tide_job_t *job = NULL;
    tide_core_config_t cfg;
    int jobs_final = 0, jobs = 0;

    tide_core_config_default(&cfg);
    W->rng = seed;
    cfg.retention_ms = 1000 * (1 + rint_(W, 120)); /* short: jobs get pruned while ranks still stop */
    h_init(&W->h, &cfg);
    for (int i = 0; i < NW; i++) {
        sw_t *s = &W->w[i];
        snprintf(s->node, sizeof(s->node), "n%d", i / 4);
        snprintf(s->id, sizeof(s->id), "n%d/gpu%d", i / 4, i % 4);
        s->gpu = i % 4;
        s->up = true;
        do_register(W, s);
    }
    for (int i = 0; i < steps; i++)
        step(W);

    /* Quiesce: everything comes back, nothing fails any more, processes finish. */
    for (int i = 0; i < NW; i++) {
        sw_t *s = &W->w[i];
        s->frozen = false;
        if (!s->up) {
            s->up = true;
            memset(s->procs, 0, sizeof(s->procs));
        }
        for (int p = 0; p < MAXP; p++)
            if (s->procs[p].exit_code != 143)
                s->procs[p].exit_code = 0;
        if (!s->connected)
            do_register(W, s);
    }
    for (int round = 0; round < 2000 && active_jobs(W) > 0; round++) {
        advance(W, 30000);
        for (int i = 0; i < NW; i++)
            if (!W->w[i].connected)
                do_register(W, &W->w[i]);
        h_check_invariants(&W->h);
    }
    while ((job = tide_core_job_next(W->h.core, job))) {
        jobs++;
        if (job->state == TIDE_JOB_RUNNING || job->state == TIDE_JOB_PENDING) {
            bool can_never_fit = job->state == TIDE_JOB_PENDING && job->spec.min_workers > W->h.core->n_usable;
            if (!can_never_fit) {
                fail_msg("seed %" PRIu64 ": job %s stuck in %s after quiescence: %s", seed, job->id,
                         tide_job_state_name(job->state), job->message);
            }
        } else {
            jobs_final++;
        }
    }
    for (int i = 0; i < NW; i++) {
        tide_worker_t *w = tide_core_worker_find(W->h.core, W->w[i].id);
        assert_non_null(w);
        if (w->state != TIDE_WORKER_READY) {
            if (getenv("TIDE_DST_DEBUG") && w->job)
                fprintf(stderr, "%s bound to job %s (%s gen %d) as gen %d rank %d\n", w->id, w->job->id,
                        tide_job_state_name(w->job->state), w->job->generation, w->generation, w->rank);
            fail_msg("seed %" PRIu64 ": worker %s is %s after quiescence", seed, w->id,
                     tide_worker_state_name(w->state));
        }
    }
    (void)jobs_final;
    h_fini(&W->h);
    free(W);
}

static void test_dst(void **state)
{
    const char *env_seed = getenv("TIDE_DST_SEED");
    const char *env_n = getenv("TIDE_DST_SEEDS");
    uint64_t first = env_seed ? strtoull(env_seed, NULL, 10) : 1;
    int n = env_n ? atoi(env_n) : 60;
    (void)state;

    for (int i = 0; i < n; i++)
        run_seed(first + (uint64_t)i, 1500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dst),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

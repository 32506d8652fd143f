/* The engine: builds the core from the scenario, then runs events in (time, sequence) order,
 * advancing the core's clock to each (tide_core_set_time), firing the core's own timers at
 * tide_core_next_deadline(), and turning the actions the core emits into future events (a rank
 * starts after the start delay, exits after the stop delay, a checkpoint lands after its write
 * time, a copy after bytes / bandwidth). Invariants: the core's clock never runs ahead of the event
 * being handled; after every event the core's actions are carried out and cleared, so pointers into
 * the core are never kept across events except to jobs and workers it still owns. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim_private.h"
#include "xmalloc.h"

void tide__sim_core_time(tide_sim_t *s)
{
    tide_core_set_time(s->core, TIDE_SIM_MONO0 + s->now, TIDE_SIM_WALL0 + s->now);
}

void tide__sim_push(tide_sim_t *s, int64_t t, int32_t type, uint32_t a, uint64_t b, uint64_t c,
                    void *p)
{
    tide_ev_t ev = {.time = t, .type = type, .a = a, .b = b, .c = c, .p = p};

    tide_evq_push(&s->q, &ev);
}

/* --- actions --- */

static rank_batch_t *batch_add(rank_batch_t *b, const char *job_id, int32_t gen, uint32_t worker,
                               int32_t rank, uint32_t epoch)
{
    if (!b) {
        b = tide_xmalloc(sizeof(*b) + 8 * sizeof(rank_item_t));
        snprintf(b->job_id, sizeof(b->job_id), "%s", job_id);
        b->generation = gen;
        b->n = 0;
        b->cap = 8;
    } else if (b->n == b->cap) {
        b->cap *= 2;
        b = tide_xrealloc(b, sizeof(*b) + (size_t)b->cap * sizeof(rank_item_t));
    }
    b->items[b->n++] = (rank_item_t){.worker = worker, .rank = rank, .epoch = epoch};
    return b;
}

static bool batch_is(const rank_batch_t *b, const char *job_id, int32_t gen)
{
    return b->generation == gen && strncmp(b->job_id, job_id, sizeof(b->job_id) - 1) == 0;
}

static void batch_push(tide_sim_t *s, rank_batch_t **b, int32_t type, int64_t delay)
{
    if (*b)
        tide__sim_push(s, s->now + delay, type, 0, 0, 0, *b);
    *b = NULL;
}

/* Collects a LAUNCH or STOP into the batch of its (job, generation), pushing the previous batch
 * when the action belongs to another. */
static void collect(tide_sim_t *s, rank_batch_t **b, int32_t type, int64_t delay,
                    const tide_action_t *a, const char *job_id)
{
    tide_sim_worker_t *sw = a->worker ? tide__cluster_worker(s, a->worker) : NULL;

    if (!sw || !job_id)
        return;
    if (*b && !batch_is(*b, job_id, a->generation))
        batch_push(s, b, type, delay);
    *b = batch_add(*b, job_id, a->generation, (uint32_t)(sw - s->workers), a->rank, sw->epoch);
}

void tide__sim_process_actions(tide_sim_t *s)
{
    size_t n;
    const tide_action_t *a = tide_core_actions(s->core, &n);
    rank_batch_t *launch = NULL, *stop = NULL;

    s->batch++;
    for (size_t i = 0; i < n; i++) {
        switch (a[i].type) {
        case TIDE_ACT_LAUNCH:
            collect(s, &launch, EV_RANKS_STARTED, s->sc->start_delay_ms, &a[i],
                    a[i].job ? a[i].job->id : NULL);
            break;
        case TIDE_ACT_STOP:
            collect(s, &stop, EV_RANKS_EXITED, s->sc->stop_delay_ms, &a[i], a[i].job_id);
            break;
        case TIDE_ACT_CHECKPOINT_NOW:
            tide__workload_ckpt_now(s, &a[i]);
            break;
        case TIDE_ACT_FLUSH:
            tide__workload_flush(s, &a[i]);
            break;
        case TIDE_ACT_EVENT:
            tide__workload_event(s, &a[i]);
            break;
        case TIDE_ACT_FORGET_CKPT:
            break; /* simulated workers keep no hot tier to clean up */
        default:
            break; /* PERSIST_*, DELETE_JOB, WELCOME, CLOSE_STREAM: nothing to simulate */
        }
    }
    batch_push(s, &launch, EV_RANKS_STARTED, s->sc->start_delay_ms);
    batch_push(s, &stop, EV_RANKS_EXITED, s->sc->stop_delay_ms);
    s->res.actions += n;
    tide_core_actions_clear(s->core);
}

/* --- events --- */

static void ranks_started(tide_sim_t *s, const rank_batch_t *b)
{
    for (int32_t i = 0; i < b->n; i++) {
        const rank_item_t *it = &b->items[i];
        tide_sim_worker_t *sw = &s->workers[it->worker];
        tide_trainer_progress_t p;
        if (sw->epoch != it->epoch || !sw->up)
            continue; /* the GPU failed meanwhile: the process never started */
        tide__sim_called(s);
        tide_core_rank_started(s->core, sw->w, b->job_id, b->generation, it->rank, 1000 + it->rank,
                               it->rank == 0 ? 29500 : 0);
        /* The trainer uses the SDK, so preemption asks it for a checkpoint first. One rank's report
         * is enough for the core to know (and keeps a 16k-rank restart at 16k calls, not 32k). */
        if (it->rank != 0)
            continue;
        memset(&p, 0, sizeof(p));
        p.sdk = true;
        p.step = -1;
        p.peak_flops = sw->w->peak_flops;
        tide__sim_called(s);
        tide_core_rank_progress(s->core, sw->w, b->job_id, b->generation, it->rank, &p);
    }
}

static void ranks_exited(tide_sim_t *s, const rank_batch_t *b)
{
    for (int32_t i = 0; i < b->n; i++) {
        const rank_item_t *it = &b->items[i];
        tide_sim_worker_t *sw = &s->workers[it->worker];
        if (sw->epoch != it->epoch || !sw->up)
            continue; /* it died with its GPU; the core already knows */
        tide__sim_called(s);
        tide_core_rank_exited(s->core, sw->w, b->job_id, b->generation, it->rank, 143, NULL);
    }
}

static void progress_line(tide_sim_t *s)
{
    int jc[6];
    tide_reserve_t r;

    tide_core_job_counts(s->core, jc);
    tide_core_reserve(s->core, &r);
    fprintf(s->opt.progress,
            "tide-sim: day %.0f of %.0f: %d running, %d pending, %d of %d GPUs allocated, %" PRIu64
            " failures, %" PRIu64 " events\n",
            (double)s->now / 86400e3, s->sc->days, jc[TIDE_JOB_RUNNING], jc[TIDE_JOB_PENDING],
            (int)(r.usable - r.free), (int)r.usable, s->res.failures, s->res.events);
    fflush(s->opt.progress);
}

static void dispatch(tide_sim_t *s, tide_ev_t *ev)
{
    switch (ev->type) {
    case EV_ARRIVAL:
        tide__workload_arrival(s, ev);
        break;
    case EV_RANKS_STARTED:
        ranks_started(s, ev->p);
        break;
    case EV_RANKS_EXITED:
        ranks_exited(s, ev->p);
        break;
    case EV_JOB_TIMELINE:
        tide__workload_timeline(s, ev);
        break;
    case EV_COPY_DONE:
        tide__workload_copy_done(s, ev);
        break;
    case EV_FAULT:
        tide__faults_candidate(s, ev);
        break;
    case EV_FAIL:
        tide__faults_fail(s, ev);
        break;
    case EV_WORKER_BACK:
        tide__cluster_back(s, &s->workers[ev->a]);
        break;
    case EV_TELEMETRY:
        tide__workload_telemetry(s);
        tide__faults_remind(s);
        tide__sim_push(s, s->now + s->sc->telemetry_ms, EV_TELEMETRY, 0, 0, 0, NULL);
        break;
    case EV_SAMPLE:
        tide__report_sample(s);
        tide__sim_push(s, s->now + s->sc->sample_ms, EV_SAMPLE, 0, 0, 0, NULL);
        break;
    case EV_DAY:
        progress_line(s);
        tide__sim_push(s, s->now + 86400000LL, EV_DAY, 0, 0, 0, NULL);
        break;
    }
    free(ev->p);
    ev->p = NULL;
}

/* --- life cycle --- */

tide_sim_t *tide_sim_new(const tide_scenario_t *sc, const tide_sim_options_t *opt)
{
    tide_sim_t *s = tide_xcalloc(1, sizeof(*s));
    tide_core_config_t cfg;

    s->sc = sc;
    if (opt)
        s->opt = *opt;
    s->seed = s->opt.seed_set ? s->opt.seed : sc->seed;
    s->end = (int64_t)llround(sc->days * 86400e3);
    tide_core_config_default(&cfg);
    /* Heartbeats are not simulated: liveness never fires; failures arrive as
     * tide_core_worker_failed. */
    cfg.heartbeat_interval_ms = 1LL << 58;
    cfg.launch_timeout_ms = 4 * sc->start_delay_ms + 60000;
    if (cfg.launch_timeout_ms < 30000)
        cfg.launch_timeout_ms = 30000;
    cfg.retention_ms =
        60000; /* ended jobs leave the core soon: the simulator keeps its own counts */
    cfg.aging_ms = sc->aging_ms;
    cfg.preemption = sc->preemption;
    cfg.preempt_grace_ms = (uint32_t)sc->preempt_grace_ms;
    cfg.ckpt_flush = sc->gate && sc->durable;
    cfg.ckpt_mfu_threshold = sc->gate_threshold;
    cfg.ckpt_deadline_ms = sc->gate_deadline_ms;
    cfg.ckpt_gate_check_ms = sc->gate_check_ms;
    cfg.reserve_gpus = sc->reserve_gpus;
    cfg.reserve_min_cluster = sc->reserve_min_cluster;
    cfg.ckpt_interval_ms = sc->ckpt_interval_ms;
    cfg.reserve_quantile = sc->reserve_quantile;
    cfg.failure_rate = sc->fail_rate;
    cfg.replacement_lead_h = sc->lead_h;
    cfg.max_restarts = INT32_MAX / 2; /* jobs requeue after failures and resume from a checkpoint */
    cfg.restart_backoff_ms = 0;       /* its failures are independent draws: no backoff, no quarantine */
    cfg.quarantine_failures = 0;
    s->core = tide_core_new(&cfg);
    for (size_t i = 0; i < sc->n_pools; i++) {
        tide_error_t err;
        if (tide_core_pool_add(s->core, sc->pools[i].name, sc->pools[i].dedicated, &err) < 0) {
            fprintf(stderr, "tide-sim: pool %s: %s\n", sc->pools[i].name, err.text);
            abort(); /* the scenario parser checked the name and the class */
        }
    }
    tide_evq_init(&s->q);
    tide__sim_core_time(s);
    tide__report_init(s);
    tide__cluster_init(s);
    tide__faults_init(s);
    tide__workload_init(s);
    tide__sim_push(s, sc->telemetry_ms, EV_TELEMETRY, 0, 0, 0, NULL);
    tide__sim_push(s, sc->sample_ms, EV_SAMPLE, 0, 0, 0, NULL);
    if (s->opt.progress)
        tide__sim_push(s, 86400000LL, EV_DAY, 0, 0, 0, NULL);
    return s;
}

int tide_sim_run(tide_sim_t *s)
{
    int64_t stuck_t = -1;
    int stuck = 0;
    bool warned = false;

    for (;;) {
        int64_t tq = tide_evq_peek_time(&s->q);
        int64_t dl = tide_core_next_deadline(s->core);
        int64_t tc = dl == INT64_MAX ? INT64_MAX : dl - TIDE_SIM_MONO0;
        tide_ev_t ev;

        if (tc < s->now)
            tc = s->now;
        if (stuck > 64 && tc == stuck_t)
            tc = INT64_MAX; /* a timer the core does not consume: ignore it until time moves on */
        if ((tq < tc ? tq : tc) > s->end)
            break;
        if (tc <= tq) {
            if (tc == stuck_t) {
                stuck++;
                if (stuck > 64 && !warned) {
                    fprintf(stderr,
                            "tide-sim: the core's next deadline stays at %" PRId64
                            " ms; ignoring it\n",
                            tc);
                    warned = true;
                }
            } else {
                stuck_t = tc;
                stuck = 0;
            }
            s->now = tc;
            tide__sim_core_time(s);
            tide_core_tick(s->core);
            s->res.events++;
            tide__sim_process_actions(s);
            continue;
        }
        tide_evq_pop(&s->q, &ev);
        s->now = ev.time;
        tide__sim_core_time(s);
        dispatch(s, &ev);
        s->res.events++;
        tide__sim_process_actions(s);
        s->failing_precursor = false;
    }
    s->now = s->end;
    tide__sim_core_time(s);
    tide__workload_finish(s);
    tide__report_finish(s);
    if (s->opt.csv && fflush(s->opt.csv) != 0)
        s->csv_error = true;
    return s->csv_error ? -EIO : 0;
}

const tide_sim_result_t *tide_sim_result(const tide_sim_t *s)
{
    return &s->res;
}

void tide_sim_free(tide_sim_t *s)
{
    if (!s)
        return;
    tide_evq_free(&s->q);
    tide__workload_free(s);
    tide__cluster_free(s);
    tide__report_free(s);
    tide_core_free(s->core);
    free(s);
}

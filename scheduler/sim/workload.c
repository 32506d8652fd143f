/* The workload: job arrivals per class, each job's performance model and its life as the core
 * drives it (docs/simulator.md, "Job model"). A job's work is a number of steps; it trains only
 * while every rank of its generation runs, pauses for local checkpoints and evaluation phases, runs
 * slower while a durable copy of its checkpoint runs, and on a failure falls back to its newest
 * checkpoint that survives. Invariants: a job's progress (pos) is brought up to date (advance)
 * before anything that changes its rate; its next timeline event carries its current version, so
 * older ones are void; phase changes are reported to the core (tide_core_job_telemetry) before any
 * checkpoint report that follows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_private.h"
#include "xmalloc.h"

#define PHASE_TRAIN      1 /* TRAINER_PHASE_FORWARD: training steps */
#define PHASE_EVAL       4 /* TRAINER_PHASE_EVAL */
#define PHASE_CHECKPOINT 5 /* TRAINER_PHASE_CHECKPOINT */

/* STOP_MOVE: a resize's generation change — the move off a GPU predicted to fail (it checkpointed first). */
typedef enum stop_cause { STOP_FAILURE, STOP_PREEMPT, STOP_ROLLBACK, STOP_MOVE } stop_cause_t;

/* --- performance model --- */

/* A pulse cycle of P iterations, the first l at factor f times the base load L. A base iteration
 * takes step_peak_s / L; a pulse iteration needs f times the FLOPs and takes step_peak_s * max(1/L,
 * f): it stretches when f * L exceeds the GPU. */
static void model(const tide_scenario_t *sc, double L, double step_peak_s, double *mfu,
                  double *step_s, double *pulse_share, double *pulse_load, double *flops_share)
{
    double P = sc->pulse_period, l = sc->pulse_length, f = sc->pulse_factor;
    double base_t = step_peak_s / L, pulse_t = step_peak_s * fmax(1.0 / L, f);
    double cycle = (P - l) * base_t + l * pulse_t, flops = ((P - l) + l * f) * step_peak_s;

    *mfu = flops / cycle;
    *step_s = cycle / P;
    *pulse_share = l * pulse_t / cycle;
    *pulse_load = fmin(1.0, f * L);
    *flops_share = flops / P; /* peak-seconds of FLOPs per step, per rank */
}

/* The base load whose training MFU is `mfu` (bisection: the MFU grows with L). */
static double load_for_mfu(const tide_scenario_t *sc, double mfu)
{
    double lo = 0.01, hi = 1.0, m, st, ps, pl, fs;

    model(sc, hi, 1.0, &m, &st, &ps, &pl, &fs);
    if (mfu >= m)
        return hi;
    model(sc, lo, 1.0, &m, &st, &ps, &pl, &fs);
    if (mfu <= m)
        return lo;
    for (int i = 0; i < 60; i++) {
        double mid = (lo + hi) / 2;
        model(sc, mid, 1.0, &m, &st, &ps, &pl, &fs);
        if (m < mfu)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

static double target_load(tide_sim_t *s, const tide_sim_job_t *j)
{
    double lo, hi;

    tide_core_job_target(s->core, j->core, &lo, &hi);
    return load_for_mfu(s->sc, (lo + hi) / 2);
}

/* Sets the load and what follows from it; the nominal figures (goodput) are fixed at submission. */
static void set_load(tide_sim_t *s, tide_sim_job_t *j, double L, bool nominal)
{
    const tide_sim_class_t *c = &s->sc->classes[j->cls];
    double step_s, flops_share;

    j->load = L;
    model(s->sc, L, c->step_peak_s, &j->mfu_train, &step_s, &j->pulse_share, &j->pulse_load,
          &flops_share);
    j->step_ms = step_s * 1000.0;
    if (nominal) {
        j->gpu_s_per_step = step_s * j->n;
        j->peak_s_per_step = flops_share * j->n;
    }
}

/* --- helpers --- */

tide_sim_job_t *tide__workload_job(tide_sim_t *s, const tide_job_t *job)
{
    return job && job->seq < s->cap_jobs ? s->jobs[job->seq] : NULL;
}

static tide_sim_job_t *job_by_seq(tide_sim_t *s, uint64_t seq)
{
    return seq < s->cap_jobs ? s->jobs[seq] : NULL;
}

static const tide_sim_class_t *cls_of(const tide_sim_t *s, const tide_sim_job_t *j)
{
    return &s->sc->classes[j->cls];
}

/* The core's ranks of j's generation that run now, copied (calls into the core may free its array).
 */
static size_t running_refs(tide_sim_t *s, const tide_sim_job_t *j)
{
    const tide_job_t *cj = j->core;
    size_t n = 0;

    if ((size_t)cj->n_ranks > s->cap_refs) {
        s->cap_refs = (size_t)cj->n_ranks;
        s->refs = tide_xrealloc(s->refs, s->cap_refs * sizeof(*s->refs));
    }
    for (int32_t r = 0; r < cj->n_ranks; r++) {
        const tide_job_rank_t *slot = &cj->ranks[r];
        if (!slot->worker || slot->state != TIDE_RANK_RUNNING)
            continue;
        s->refs[n].w = slot->worker;
        s->refs[n].rank = r;
        n++;
    }
    return n;
}

static double gpu_h(const tide_sim_t *s, const tide_sim_job_t *j, int64_t ms)
{
    (void)s;
    return (double)j->ranks * (double)ms / 3.6e6;
}

/* Brings a running job's progress and GPU-time accounting up to now. */
static void advance(tide_sim_t *s, tide_sim_job_t *j)
{
    int64_t dt = s->now - j->pos_t;
    double g;

    if (dt <= 0)
        return;
    j->pos += j->rate * (double)dt;
    if (j->pos > j->steps_total)
        j->pos = j->steps_total;
    g = gpu_h(s, j, dt);
    if (j->saving)
        s->res.save_gpu_h += g;
    else if (j->in_eval)
        s->res.eval_gpu_h += g;
    else {
        s->res.train_gpu_h += g;
        if (j->copying)
            s->res.interference_gpu_h += g * s->sc->interference;
    }
    j->pos_t = s->now;
}

/* Recomputes the rate, MFU and fault load of j from its phase, and tells the core of a change. */
static void set_phase(tide_sim_t *s, tide_sim_job_t *j)
{
    const tide_scenario_t *sc = s->sc;
    const tide_sim_class_t *c = cls_of(s, j);
    double slow = j->copying ? 1.0 - sc->interference : 1.0;

    if (j->saving) {
        j->phase = PHASE_CHECKPOINT;
        j->rate = 0;
        j->mfu = 0;
        j->fault_f = tide__faults_factor(sc, 0);
    } else if (j->in_eval) {
        j->phase = PHASE_EVAL;
        j->rate = 0;
        j->mfu = c->eval_mfu;
        j->fault_f = tide__faults_factor(sc, c->eval_mfu);
    } else {
        j->phase = PHASE_TRAIN;
        j->rate = slow * (double)j->ranks / ((double)j->n * j->step_ms);
        j->mfu = j->mfu_train * slow;
        j->fault_f = (1 - j->pulse_share) * tide__faults_factor(sc, j->load) +
                     j->pulse_share * tide__faults_factor(sc, j->pulse_load);
    }
    if (j->mfu != j->told_mfu || j->phase != j->told_phase) {
        j->told_mfu = j->mfu;
        j->told_phase = j->phase;
        tide__sim_called(s);
        tide_core_job_telemetry(s->core, j->core, j->mfu, j->phase);
    }
}

/* Queues j's next timeline event: the end of a save or evaluation, the next one due, or the end of
 * its work, whichever is first. */
static void schedule(tide_sim_t *s, tide_sim_job_t *j)
{
    int64_t t = INT64_MAX;

    if (j->saving)
        t = j->save_end;
    else if (j->next_ckpt < t)
        t = j->next_ckpt;
    if (j->in_eval) {
        if (j->eval_end < t)
            t = j->eval_end;
    } else if (j->next_eval < t) {
        t = j->next_eval;
    }
    if (j->rate > 0) {
        double left = (j->steps_total - j->pos) / j->rate;
        int64_t done = j->pos_t + (int64_t)ceil(left);
        if (left < 9e15 && done < t)
            t = done;
    }
    if (t < s->now)
        t = s->now;
    j->version++;
    if (t != INT64_MAX)
        tide__sim_push(s, t, EV_JOB_TIMELINE, 0, j->seq, j->version, NULL);
}

static int64_t every_ms(double seconds)
{
    return seconds > 0 ? (int64_t)llround(seconds * 1000) : INT64_MAX;
}

static int64_t after(int64_t now, int64_t ms)
{
    return ms == INT64_MAX ? INT64_MAX : now + ms;
}

static double copy_ms(const tide_sim_t *s, const tide_sim_job_t *j)
{
    return cls_of(s, j)->ckpt_bytes_per_gpu / s->sc->durable_bps_per_gpu * 1000.0;
}

static void copy_started(tide_sim_t *s, tide_sim_job_t *j)
{
    double wait = (double)(s->now - j->local_t) / 1000.0;

    s->copy_wait_sum += wait;
    s->copy_waits++;
    if (wait > s->res.copy_wait_max_s)
        s->res.copy_wait_max_s = wait;
    j->copy_id++;
    tide__sim_push(s, s->now + (int64_t)ceil(copy_ms(s, j)), EV_COPY_DONE, 0, j->seq, j->copy_id,
                   NULL);
}

/* The gate is off: the simulator copies the newest local checkpoint at once. */
static void sim_copy_start(tide_sim_t *s, tide_sim_job_t *j)
{
    advance(s, j);
    j->copying = true;
    j->copy_by_sim = true;
    j->copy_pending = false;
    j->copy_pos = j->local_pos;
    copy_started(s, j);
    set_phase(s, j);
    schedule(s, j);
}

/* --- arrivals --- */

void tide__workload_init(tide_sim_t *s)
{
    const tide_scenario_t *sc = s->sc;

    tide_list_init(&s->running);
    s->rng_arrival = tide_xcalloc(sc->n_classes, sizeof(tide_rng_t));
    s->rng_attr = tide_xcalloc(sc->n_classes, sizeof(tide_rng_t));
    for (size_t i = 0; i < sc->n_classes; i++) {
        const tide_sim_class_t *c = &sc->classes[i];
        tide_rng_seed(&s->rng_arrival[i], s->seed, 100 + 2 * i);
        tide_rng_seed(&s->rng_attr[i], s->seed, 101 + 2 * i);
        for (int32_t k = 0; k < c->initial; k++)
            tide__sim_push(s, 0, EV_ARRIVAL, (uint32_t)i, 0, 0, NULL);
        for (size_t k = 0; k < c->n_at; k++)
            tide__sim_push(s, (int64_t)llround(c->at_s[k] * 1000), EV_ARRIVAL, (uint32_t)i, 0, 0,
                           NULL);
        if (c->arrivals_per_h > 0)
            tide__sim_push(
                s, (int64_t)ceil(tide_rng_exp(&s->rng_arrival[i], 3.6e6 / c->arrivals_per_h)),
                EV_ARRIVAL, (uint32_t)i, 1, 0, NULL);
    }
}

void tide__workload_free(tide_sim_t *s)
{
    for (size_t i = 0; i < s->cap_jobs; i++)
        free(s->jobs[i]);
    free(s->jobs);
    free(s->rng_arrival);
    free(s->rng_attr);
    free(s->refs);
}

void tide__workload_arrival(tide_sim_t *s, const tide_ev_t *ev)
{
    const tide_sim_class_t *c = &s->sc->classes[ev->a];
    tide_rng_t *ra = &s->rng_attr[ev->a];
    char *argv[] = {"tide-sim-job", NULL};
    tide_job_spec_t spec;
    tide_sim_job_t *j;
    tide_job_t *job = NULL;
    tide_error_t err;
    double gpus, dur, load, hours;
    int32_t n, min;

    if (ev->b) {
        double dt = tide_rng_exp(&s->rng_arrival[ev->a], 3.6e6 / c->arrivals_per_h);
        tide__sim_push(s, s->now + (int64_t)ceil(dt), EV_ARRIVAL, ev->a, 1, 0, NULL);
    }
    /* Always the same three draws, whatever the class uses. */
    gpus = tide_dist_draw(&c->gpus, ra);
    dur = tide_dist_draw(&c->duration, ra);
    load = tide_dist_draw(&c->base_load, ra);
    n = (int32_t)llround(gpus);
    if (n < 1)
        n = 1;
    min = (int32_t)ceil((double)n * c->min_fraction - 1e-9);
    if (min < 1)
        min = 1;
    if (min > n)
        min = n;
    memset(&spec, 0, sizeof(spec));
    spec.name = c->name;
    spec.argv = argv;
    spec.argc = 1;
    spec.min_workers = min;
    spec.max_workers = n;
    spec.priority = c->priority;
    spec.pool = c->pool;
    spec.memory_per_rank = c->memory_per_rank;
    spec.topology = c->topology;
    spec.device = c->device;
    spec.ckpt_mfu_threshold = c->ckpt_mfu_threshold;
    spec.ckpt_deadline_s = c->ckpt_deadline_s;
    spec.adaptive_target = c->adaptive_target;
    s->acc[ev->a].submitted++;
    tide__sim_called(s);
    if (tide_core_job_submit(s->core, &spec, &job, &err) < 0) {
        fprintf(stderr, "tide-sim: class %s: the core refused a job: %s\n", c->name, err.text);
        s->acc[ev->a].failed++;
        return;
    }
    if (job->seq >= s->cap_jobs) {
        size_t cap = s->cap_jobs ? s->cap_jobs : 1024;
        while (cap <= job->seq)
            cap *= 2;
        s->jobs = tide_xrealloc(s->jobs, cap * sizeof(*s->jobs));
        memset(s->jobs + s->cap_jobs, 0, (cap - s->cap_jobs) * sizeof(*s->jobs));
        s->cap_jobs = cap;
    }
    j = tide_xcalloc(1, sizeof(*j));
    s->jobs[job->seq] = j;
    j->seq = job->seq;
    snprintf(j->id, sizeof(j->id), "%s", job->id);
    j->cls = (int32_t)ev->a;
    j->core = job;
    j->n = n;
    j->state = SJ_QUEUED;
    j->local_pos = j->durable_pos = -1;
    j->told_mfu = -2;
    j->told_phase = -1;
    j->submit_t = j->queued_t = s->now;
    tide_list_init(&j->run_node);
    /* The work is sized, and goodput counted, at the nominal load; a job whose load follows the
     * core's target runs at that target from its first start on. */
    set_load(s, j, c->load_target ? c->nominal_load : load, true);
    switch (c->dur_kind) {
    case TIDE_DUR_HOURS:
        j->steps_total = dur * 3.6e6 / j->step_ms;
        break;
    case TIDE_DUR_GPU_HOURS:
        hours = dur / n;
        j->steps_total = hours * 3.6e6 / j->step_ms;
        break;
    case TIDE_DUR_STEPS:
        j->steps_total = floor(dur);
        break;
    }
    if (j->steps_total < 1)
        j->steps_total = 1;
}

/* --- the timeline of a running job --- */

/* Every rank of j saved its part of the checkpoint of save_pos. */
static void report_saves(tide_sim_t *s, tide_sim_job_t *j)
{
    int64_t step = (int64_t)floor(j->save_pos);
    uint64_t bytes = (uint64_t)cls_of(s, j)->ckpt_bytes_per_gpu;
    size_t n = running_refs(s, j);

    for (size_t i = 0; i < n; i++) {
        tide__sim_called(s);
        tide_core_checkpoint_saved(s->core, s->refs[i].w, j->id, j->gen, s->refs[i].rank, step,
                                   NULL, bytes, NULL);
    }
}

/* The work is done: every rank exits with 0 (the core then ends the job). */
static void finish(tide_sim_t *s, tide_sim_job_t *j)
{
    size_t n = running_refs(s, j);

    j->finishing = true;
    j->version++;
    for (size_t i = 0; i < n; i++) {
        tide__sim_called(s);
        tide_core_rank_exited(s->core, s->refs[i].w, j->id, j->gen, s->refs[i].rank, 0, NULL);
    }
}

static void start_save(tide_sim_t *s, tide_sim_job_t *j)
{
    j->saving = true;
    j->save_pos = j->pos;
    j->save_end = s->now + (int64_t)llround(cls_of(s, j)->ckpt_write_s * 1000);
}

void tide__workload_timeline(tide_sim_t *s, const tide_ev_t *ev)
{
    tide_sim_job_t *j = job_by_seq(s, ev->b);
    const tide_sim_class_t *c;
    bool saved = false;

    if (!j || j->version != ev->c || j->state != SJ_RUNNING || j->finishing)
        return;
    c = cls_of(s, j);
    advance(s, j);
    if (j->pos >= j->steps_total * (1 - 1e-12)) {
        j->pos = j->steps_total;
        finish(s, j);
        return;
    }
    if (j->saving && s->now >= j->save_end) {
        j->saving = false;
        saved = true;
        j->next_ckpt = after(s->now, every_ms(c->ckpt_every_s));
    }
    if (j->in_eval && s->now >= j->eval_end) {
        j->in_eval = false;
        j->next_eval = after(s->now, every_ms(c->eval_every_s));
    }
    if (!j->in_eval && s->now >= j->next_eval) {
        j->in_eval = true;
        j->eval_end = s->now + (int64_t)llround(c->eval_s * 1000);
    }
    if (!j->saving && s->now >= j->next_ckpt)
        start_save(s, j);
    if (saved && c->load_target && c->adaptive_target)
        set_load(s, j, target_load(s, j), false);
    set_phase(s, j); /* the core hears the phase before the checkpoint reports */
    if (saved)
        report_saves(s, j);
    schedule(s, j);
}

void tide__workload_copy_done(tide_sim_t *s, const tide_ev_t *ev)
{
    tide_sim_job_t *j = job_by_seq(s, ev->b);
    uint64_t bytes;
    size_t n;

    if (!j || j->copy_id != ev->c || !j->copying || j->state != SJ_RUNNING)
        return;
    bytes = (uint64_t)cls_of(s, j)->ckpt_bytes_per_gpu;
    if (j->copy_by_sim) {
        advance(s, j);
        j->copying = false;
        j->durable_pos = j->copy_pos;
        j->durable_t = s->now;
        s->res.copies++;
        s->res.durable_bytes += (double)bytes * j->ranks;
        if (j->copy_pending) {
            sim_copy_start(s, j);
            return;
        }
        set_phase(s, j);
        schedule(s, j);
        return;
    }
    /* The core may hold the next copy inside this report: it reads the MFU then, so make it fresh.
     */
    tide__sim_called(s);
    tide_core_job_telemetry(s->core, j->core, j->mfu, j->phase);
    n = running_refs(s, j);
    for (size_t i = 0; i < n; i++) {
        tide__sim_called(s);
        tide_core_ckpt_flushed(s->core, s->refs[i].w, j->id, j->gen, s->refs[i].rank, j->copy_step,
                               true, NULL, bytes, NULL, NULL);
    }
}

void tide__workload_telemetry(tide_sim_t *s)
{
    tide_list_t *pos;

    /* Phase changes are reported as they happen; between them the gate reads a job's MFU only while
     * it holds the job's durable copy, so only those jobs need a fresh report each period. */
    tide_list_for_each(pos, &s->running)
    {
        tide_sim_job_t *j = tide_list_entry(pos, tide_sim_job_t, run_node);
        if (j->core->flush_state != TIDE_FLUSH_HELD)
            continue;
        tide__sim_called(s);
        tide_core_job_telemetry(s->core, j->core, j->mfu, j->phase);
    }
}

double tide__workload_gpu_fault_factor(tide_sim_t *s, const tide_worker_t *w)
{
    tide_sim_job_t *j = w->job ? tide__workload_job(s, w->job) : NULL;

    if (j && j->state == SJ_RUNNING && w->job->generation == j->gen)
        return j->fault_f;
    return tide__faults_factor(s->sc, 0);
}

/* --- what the core decided --- */

static void leave_running(tide_sim_t *s, tide_sim_job_t *j)
{
    if (j->state == SJ_RUNNING) {
        advance(s, j);
        tide_list_remove(&j->run_node);
    } else if (j->state == SJ_STARTING) {
        s->res.start_gpu_h += gpu_h(s, j, s->now - j->state_t);
    }
}

static void retain(tide_sim_t *s, tide_sim_job_t *j)
{
    double g = j->pos * j->gpu_s_per_step / 3600.0;

    s->res.retained_gpu_h += g;
    s->acc[j->cls].retained_gpu_h += g;
    s->acc[j->cls].wall_gpu_h += (double)j->n * (double)(s->now - j->submit_t) / 3.6e6;
    s->res.effective_mfu += j->pos * j->peak_s_per_step; /* peak GPU-seconds; divided at the end */
}

static void stopped(tide_sim_t *s, tide_sim_job_t *j, stop_cause_t cause)
{
    class_acc_t *acc = &s->acc[j->cls];
    bool trained = j->state == SJ_RUNNING;

    leave_running(s, j);
    if (trained && cause != STOP_ROLLBACK) {
        double keep, lost;
        if (cause == STOP_FAILURE) {
            /* The failed GPU's part of the local checkpoint is gone unless the hot tier is
             * mirrored. */
            keep = j->durable_pos;
            if (s->sc->mirrored && j->local_pos > keep)
                keep = j->local_pos;
            if (j->durable_pos >= 0) {
                s->durable_age_sum += (double)(s->now - j->durable_t) / 1000.0;
                s->durable_ages++;
            }
        } else {
            keep = j->local_pos > j->durable_pos ? j->local_pos : j->durable_pos;
        }
        if (keep < 0)
            keep = 0;
        lost = (j->pos > keep ? j->pos - keep : 0) * j->gpu_s_per_step / 3600.0;
        s->res.lost_gpu_h += lost;
        acc->lost_gpu_h += lost;
        if (cause == STOP_FAILURE) {
            s->res.lost_failure_gpu_h += lost;
            if (s->failing_precursor)
                s->res.lost_precursor_gpu_h += lost;
        } else if (cause == STOP_MOVE) {
            s->res.lost_move_gpu_h += lost;
        } else {
            s->res.lost_preempt_gpu_h += lost;
        }
        j->pos = keep;
        if (cause == STOP_FAILURE && !s->sc->mirrored)
            j->local_pos = j->durable_pos; /* the newer local copy lost a part with the GPU */
    }
    switch (cause) {
    case STOP_FAILURE:
        s->res.requeues++;
        acc->requeues++;
        break;
    case STOP_PREEMPT:
        s->res.preemptions++;
        acc->preemptions++;
        break;
    case STOP_ROLLBACK:
        s->res.rollbacks++;
        break;
    case STOP_MOVE:
        s->res.moves++;
        break;
    }
    j->state = SJ_QUEUED;
    j->queued_t = s->now;
    j->requeued = true;
    j->version++;
    j->copy_id++;
    j->saving = j->in_eval = j->copying = j->copy_pending = false;
    j->mfu = 0;
    j->rate = 0;
}

static void ended(tide_sim_t *s, tide_sim_job_t *j, tide_job_state_t st)
{
    class_acc_t *acc = &s->acc[j->cls];

    leave_running(s, j);
    if (st == TIDE_JOB_SUCCEEDED) {
        j->pos = j->steps_total;
        acc->finished++;
    } else if (st == TIDE_JOB_FAILED) {
        acc->failed++;
        s->res.jobs_failed++;
    }
    retain(s, j);
    s->jobs[j->seq] = NULL;
    free(j);
}

static void started(tide_sim_t *s, tide_sim_job_t *j, const tide_job_t *cj)
{
    j->state = SJ_STARTING;
    j->gen = cj->generation;
    j->ranks = cj->n_ranks;
    j->state_t = s->now;
    j->finishing = false;
    if (!j->placed_once) {
        j->placed_once = true;
        s->acc[j->cls].started++;
        tide__report_delay(s, j->cls, (double)(s->now - j->submit_t) / 1000.0);
    } else if (j->requeued) {
        class_acc_t *acc = &s->acc[j->cls];
        double w = (double)(s->now - j->queued_t) / 1000.0;
        acc->restarts++;
        acc->restart_sum += w;
        if (w > acc->restart_max)
            acc->restart_max = w;
    }
    j->requeued = false;
}

static void running(tide_sim_t *s, tide_sim_job_t *j, const tide_job_t *cj)
{
    const tide_sim_class_t *c = cls_of(s, j);

    if (j->state != SJ_STARTING || cj->generation != j->gen)
        return;
    s->res.start_gpu_h += gpu_h(s, j, s->now - j->state_t);
    j->state = SJ_RUNNING;
    j->state_t = j->pos_t = s->now;
    j->next_ckpt = after(s->now, every_ms(c->ckpt_every_s));
    j->next_eval = after(s->now, every_ms(c->eval_every_s));
    j->saving = j->in_eval = j->copying = j->copy_pending = false;
    if (c->load_target)
        set_load(s, j, target_load(s, j), false);
    tide_list_push_back(&s->running, &j->run_node);
    /* A checkpoint request reached its last ranks as they started (just before this event): the
     * trainer saves before its first step. */
    if (cj->ckpt_request)
        start_save(s, j);
    set_phase(s, j);
    schedule(s, j);
}

static void checkpointed(tide_sim_t *s, tide_sim_job_t *j, const tide_job_t *cj)
{
    if (j->state != SJ_RUNNING || cj->last_ckpt.generation != j->gen)
        return;
    j->local_pos = j->save_pos;
    j->local_t = s->now;
    s->res.checkpoints++;
    if (!s->sc->gate && s->sc->durable) {
        if (j->copying)
            j->copy_pending = true;
        else
            sim_copy_start(s, j);
    }
}

static void durable(tide_sim_t *s, tide_sim_job_t *j, const tide_job_t *cj)
{
    if (j->state != SJ_RUNNING || !j->copying || j->copy_by_sim)
        return;
    advance(s, j);
    j->copying = false;
    j->durable_pos = j->copy_pos;
    j->durable_t = s->now;
    s->res.copies++;
    s->res.durable_bytes += (double)cj->durable_ckpt.bytes;
    set_phase(s, j);
    schedule(s, j);
}

void tide__workload_event(tide_sim_t *s, const tide_action_t *a)
{
    const char *t = a->event_type;
    tide_sim_job_t *j = tide__workload_job(s, a->job);

    if (strcmp(t, "job.aged") == 0)
        s->res.aged++;
    if (!j || strncmp(t, "job.", 4) != 0)
        return;
    t += 4;
    if (strcmp(t, "started") == 0)
        started(s, j, a->job);
    else if (strcmp(t, "running") == 0)
        running(s, j, a->job);
    else if (strcmp(t, "checkpoint") == 0)
        checkpointed(s, j, a->job);
    else if (strcmp(t, "checkpoint_durable") == 0)
        durable(s, j, a->job);
    else if (strcmp(t, "checkpoint_held") == 0)
        s->res.copies_held++;
    else if (strcmp(t, "requeued") == 0)
        stopped(s, j, STOP_FAILURE);
    else if (strcmp(t, "preempted") == 0)
        stopped(s, j, STOP_PREEMPT);
    else if (strcmp(t, "rolled_back") == 0)
        stopped(s, j, STOP_ROLLBACK);
    else if (strcmp(t, "resize_stopping") == 0)
        stopped(s, j, STOP_MOVE);
    else if (strcmp(t, "succeeded") == 0)
        ended(s, j, TIDE_JOB_SUCCEEDED);
    else if (strcmp(t, "failed") == 0)
        ended(s, j, TIDE_JOB_FAILED);
    else if (strcmp(t, "cancelled") == 0)
        ended(s, j, TIDE_JOB_CANCELLED);
}

void tide__workload_flush(tide_sim_t *s, const tide_action_t *a)
{
    tide_sim_job_t *j = tide__workload_job(s, a->job);

    if (!j || j->state != SJ_RUNNING || a->generation != j->gen)
        return;
    if (j->flush_batch == s->batch && j->copying)
        return; /* another rank of the copy that started in this batch */
    j->flush_batch = s->batch;
    advance(s, j);
    j->copying = true;
    j->copy_by_sim = false;
    j->copy_step = a->step;
    j->copy_pos = j->local_pos >= 0 && (int64_t)floor(j->local_pos) == a->step ? j->local_pos
                                                                               : (double)a->step;
    copy_started(s, j);
    set_phase(s, j);
    schedule(s, j);
}

void tide__workload_ckpt_now(tide_sim_t *s, const tide_action_t *a)
{
    tide_sim_job_t *j = tide__workload_job(s, a->job);

    if (!j || j->state != SJ_RUNNING || a->generation != j->gen || j->ckpt_batch == s->batch)
        return;
    j->ckpt_batch = s->batch;
    if (j->saving || j->finishing)
        return; /* the save in progress answers the request */
    advance(s, j);
    start_save(s, j);
    set_phase(s, j);
    schedule(s, j);
}

void tide__workload_finish(tide_sim_t *s)
{
    for (size_t i = 0; i < s->cap_jobs; i++) {
        tide_sim_job_t *j = s->jobs[i];
        if (!j)
            continue;
        if (j->state == SJ_QUEUED)
            s->res.classes[j->cls].waiting_at_end++;
        else
            s->res.classes[j->cls].running_at_end++;
        leave_running(s, j);
        retain(s, j);
    }
}

/* The fault model (docs/simulator.md, "Faults"). Ordinary GPUs fail at a constant rate per
 * GPU-hour; new-arch GPUs at that rate times a multiplier times a load factor F(m) =
 * max(min_factor, ratio^((m - ref_mfu) / per_mfu)) of the MFU m of their work (the article: 3x the
 * failures at MFU 70% as at 50%). Candidates are drawn by thinning: a Poisson stream at the largest
 * possible rate over every GPU of a kind, each candidate accepted when its GPU is up (and, for
 * new-arch, with probability F(m) / F(1)). Invariant: each candidate consumes the same four draws
 * of its kind's stream whatever the cluster's state, so policy variants of one seed see the same
 * fault instants. */
#include <math.h>

#include "sim_private.h"

double tide__faults_factor(const tide_scenario_t *sc, double m)
{
    double f = pow(sc->curve_ratio, (m - sc->curve_ref) / sc->curve_per);
    return f < sc->curve_min ? sc->curve_min : f;
}

/* The candidate rate of a kind, per ms, over all of its GPUs. */
static double kind_rate(const tide_sim_t *s, int kind)
{
    double per_h = s->sc->fail_rate * (double)s->kind_n[kind];

    if (kind == 1)
        per_h *= s->sc->new_arch_mult * s->fault_fmax;
    return per_h / 3.6e6;
}

static void next_candidate(tide_sim_t *s, int kind)
{
    double rate = kind_rate(s, kind), dt;

    if (!(rate > 0))
        return;
    dt = tide_rng_exp(&s->rng_fault[kind], 1.0 / rate);
    if (dt > 1e15)
        return;
    tide__sim_push(s, s->now + (int64_t)ceil(dt), EV_FAULT, (uint32_t)kind, 0, 0, NULL);
}

void tide__faults_init(tide_sim_t *s)
{
    tide_rng_seed(&s->rng_fault[0], s->seed, 1);
    tide_rng_seed(&s->rng_fault[1], s->seed, 2);
    s->fault_fmax = tide__faults_factor(s->sc, 1.0);
    for (int k = 0; k < 2; k++)
        if (s->kind_n[k] > 0)
            next_candidate(s, k);
}

void tide__faults_candidate(tide_sim_t *s, const tide_ev_t *ev)
{
    int kind = (int)ev->a;
    tide_rng_t *r = &s->rng_fault[kind];
    uint32_t idx = s->kind_idx[kind][tide_rng_below(r, (uint64_t)s->kind_n[kind])];
    double accept = tide_rng_uniform(r), warn = tide_rng_uniform(r);
    tide_sim_worker_t *sw = &s->workers[idx];

    if (sw->up && !sw->doomed &&
        (kind == 0 || accept * s->fault_fmax < tide__workload_gpu_fault_factor(s, sw->w))) {
        if (warn < s->sc->precursor_fraction && s->sc->precursor_lead_s > 0) {
            /* It looks risky now and fails after the lead time. With precursor.predict the core hears it as
             * a new uncorrected ECC error (a critical sign: predicted at once) and moves the job off the GPU
             * (prediction.c); without, the report says what acting on it would have saved. */
            sw->doomed = true;
            s->res.precursors++;
            if (s->sc->precursor_predict && sw->w->connected) {
                tide_telemetry_t tel = {.known = 1u << 7};
                tide__sim_called(s);
                tide_core_worker_heartbeat(s->core, sw->w, &tel); /* the counters' baseline */
                tel.ecc_uncorrected = 1;
                tide__sim_called(s);
                tide_core_worker_heartbeat(s->core, sw->w, &tel);
            }
            tide__sim_push(s, s->now + (int64_t)(s->sc->precursor_lead_s * 1000), EV_FAIL, idx, 0,
                           sw->epoch, NULL);
        } else {
            tide__cluster_fail(s, sw);
        }
    }
    next_candidate(s, kind);
}

void tide__faults_remind(tide_sim_t *s)
{
    tide_telemetry_t tel = {.known = 1u << 7, .ecc_uncorrected = 1};

    if (!s->sc->precursor_predict)
        return;
    for (size_t i = 0; i < (size_t)s->n_workers; i++) {
        tide_sim_worker_t *sw = &s->workers[i];
        if (sw->doomed && sw->up && sw->w->connected && sw->w->job) {
            tide__sim_called(s);
            tide_core_worker_heartbeat(s->core, sw->w, &tel);
        }
    }
}

void tide__faults_fail(tide_sim_t *s, const tide_ev_t *ev)
{
    tide_sim_worker_t *sw = &s->workers[ev->a];

    if (sw->epoch != (uint32_t)ev->c || !sw->up || !sw->doomed)
        return;
    s->failing_precursor = true; /* read while the engine processes the resulting actions */
    tide__cluster_fail(s, sw);
}

/* The headroom policy (docs/policies.md, "Headroom"): each job's MFU target band and the reserve of GPUs
 * kept free for failures (hot spares: a Poisson quantile of the failures expected during the
 * replacement lead time) and for bursts (from the running jobs' target bands). Invariant: core->reserve
 * is recomputed whenever the usable count, the running set or the failure count changes, so reading it
 * is O(1). */
#include <math.h>
#include <stdint.h>

#include "core_private.h"

int32_t tide_poisson_quantile(double lambda, double q)
{
    double cdf = 0, ll;
    int32_t k;

    if (!(lambda > 0) || !(q > 0))
        return 0;
    if (q >= 1)
        q = 1 - 1e-12;
    if (lambda > 2e9)
        return INT32_MAX; /* the quantile is beyond what an int32 holds */
    ll = log(lambda);
    /* Mass below lambda - 12 sqrt(lambda) is negligible: start there, sum the pmf in log space (no
     * underflow of exp(-lambda)). O(sqrt(lambda)) terms. */
    k = lambda > 144 ? (int32_t)floor(lambda - 12 * sqrt(lambda)) : 0;
    for (;; k++) {
        cdf += exp(-lambda + k * ll - lgamma((double)k + 1));
        if (cdf >= q || k >= INT32_MAX - 1)
            return k;
    }
}

/* The class's band: long, high-value runs keep more headroom than short experiments. */
static const double band_lo[TIDE_PRIO_COUNT] = {0.65, 0.55, 0.50, 0.45};
static const double band_hi[TIDE_PRIO_COUNT] = {0.75, 0.65, 0.60, 0.55};

void tide_core_job_target(const tide_core_t *core, const tide_job_t *job, double *lo, double *hi)
{
    tide_prio_t p = job->state == TIDE_JOB_RUNNING ? job->run_priority : job->spec.priority;
    double l, h, shift = 0;

    if ((unsigned)p >= TIDE_PRIO_COUNT)
        p = TIDE_PRIO_NORMAL;
    l = band_lo[p];
    h = band_hi[p];
    if (core->n_usable >= 1024)
        shift -= 0.05; /* a large cluster fails more often per hour: more room */
    if (job->new_arch_ranks > 0)
        shift -= 0.10; /* immature hardware fails more at high load (the article: 3x at 70% vs 50%) */
    if (job->spec.adaptive_target) {
        /* Lower early (failures and tuning are likeliest then), higher late. Progress is the share of
         * the time limit used; without a limit, the first 24 h count as early. */
        double span = job->spec.time_limit_s > 0 ? (double)job->spec.time_limit_s * 1000.0 : 86400e3;
        double ran = job->start_ms > 0 && core->now_wall > job->start_ms ? (double)(core->now_wall - job->start_ms) : 0;
        double f = ran / span;
        if (f < 0.2)
            shift -= 0.10;
        else if (f > 0.8)
            shift += 0.05;
    }
    l += shift;
    h += shift;
    *lo = l < 0.05 ? 0.05 : l;
    *hi = h > 0.95 ? 0.95 : h;
}

static void reserve_compute(tide_core_t *core);

double tide__job_burst_share(const tide_core_t *core, const tide_job_t *job)
{
    double lo, hi;

    /* Long, high-value runs get room to absorb their load swings: the width of their band, as extra
     * GPUs, is the burst capacity they may borrow (elastic bursts, issue 7, draw on it). */
    if (job->run_priority < TIDE_PRIO_HIGH)
        return 0;
    tide_core_job_target(core, job, &lo, &hi);
    return (double)job->n_ranks * (hi - lo);
}

void tide__reserve_update(tide_core_t *core)
{
    tide_reserve_t *r = &core->reserve;
    int32_t before = r->gpus;

    reserve_compute(core);
    if (r->gpus != before)
        core->usable_stamp++; /* jobs found never to fit may fit now (or the reverse) */
}

static void reserve_compute(tide_core_t *core)
{
    tide_reserve_t *r = &core->reserve;
    double rate = core->cfg.failure_rate;
    int32_t usable = core->n_usable;

    r->usable = usable;
    r->fixed = core->cfg.reserve_gpus >= 0;
    r->observed = false;
    /* Observed once enough failures were seen for the rate to mean something. */
    if (core->failures >= 3 && core->gpu_hours > 0) {
        rate = (double)core->failures / core->gpu_hours;
        r->observed = true;
    }
    r->failure_rate = rate;
    r->failures = core->failures;
    r->gpu_hours = core->gpu_hours;
    r->expected_failures = rate * (double)usable * core->cfg.replacement_lead_h;
    if (r->fixed) {
        r->spares = core->cfg.reserve_gpus;
        r->burst = 0;
        r->gpus = core->cfg.reserve_gpus;
        return;
    }
    if (usable < core->cfg.reserve_min_cluster) {
        r->spares = r->burst = r->gpus = 0;
        return;
    }
    /* Expecting more failures than there are GPUs (a few failures in the first GPU-hours make the observed
     * rate huge) asks for every GPU as a spare, and the cap below holds back half the cluster whatever the
     * quantile: skip computing it, which costs O(sqrt(expected)) terms on every registration otherwise. */
    if (r->expected_failures > (double)usable + 1 && core->cfg.reserve_quantile >= 0.5)
        r->spares = usable;
    else
        r->spares = tide_poisson_quantile(r->expected_failures, core->cfg.reserve_quantile);
    /* burst_gpus is a running sum of doubles (shares added and taken away as jobs start and end):
     * ignore its rounding residue, or an idle cluster could keep a phantom burst GPU. */
    r->burst = (int32_t)ceil(core->burst_gpus - 1e-9);
    r->gpus = r->spares + r->burst;
    if (r->gpus > usable / 2)
        r->gpus = usable / 2; /* never hold back more than half the cluster */
}

void tide_core_reserve(const tide_core_t *core, tide_reserve_t *out)
{
    *out = core->reserve;
    out->free = core->n_free;
    out->gpu_hours = core->gpu_hours; /* grows with the clock, between recomputations too */
}

void tide_core_running_target(const tide_core_t *core, double *lo, double *hi, double *mfu)
{
    double wl = 0, wh = 0, ranks = 0, achieved = 0, peak = 0;

    for (int p = 0; p < TIDE_PRIO_COUNT; p++) {
        const tide_list_t *pos;
        tide_list_for_each(pos, &core->running[p]) {
            const tide_job_t *job = tide_list_entry(pos, tide_job_t, run_node);
            double l, h, a, k;
            if (job->n_ranks <= 0)
                continue;
            tide_core_job_target(core, job, &l, &h);
            wl += l * job->n_ranks;
            wh += h * job->n_ranks;
            ranks += job->n_ranks;
            tide_core_job_flops(job, &a, &k);
            achieved += a;
            peak += k;
        }
    }
    *lo = ranks > 0 ? wl / ranks : 0;
    *hi = ranks > 0 ? wh / ranks : 0;
    *mfu = peak > 0 ? achieved / peak : 0;
}

/* Windowed achieved FLOP/s (mfu.h). Each window keeps a decayed sum S with time constant tau:
 * S(t) = sum_i f_i exp(-(t - t_i) / tau). For a steady rate r that started T ago, S ~ r tau (1 -
 * exp(-T / tau)), so the rate is S / (tau (1 - exp(-T / tau))): exact for a steady rate from the
 * first report on, and it decays toward 0 when reports stop. */
#include "mfu.h"

#include <errno.h>
#include <math.h>
#include <string.h>

void tide_flops_window_init(tide_flops_window_t *w)
{
    memset(w, 0, sizeof(*w));
}

static double decay(double sum, int64_t dt_ms, double tau_ms)
{
    return dt_ms > 0 ? sum * exp(-(double)dt_ms / tau_ms) : sum;
}

/* What a report adds to a decayed sum: its FLOPs were done evenly over its `seconds`, so they count
 * as the decayed integral of that constant rate, not as one lump at its end (which would overstate a
 * steady rate by about seconds / (2 tau)). */
static double spread(double flops, double seconds, double tau_ms)
{
    double x = seconds * 1000.0 / tau_ms;

    return x > 1e-9 ? flops * (1.0 - exp(-x)) / x : flops;
}

int tide_flops_window_add(tide_flops_window_t *w, int64_t now_ms, double flops, double seconds,
                          double peak)
{
    if (!isfinite(flops) || flops < 0 || !isfinite(seconds) || seconds < 0 ||
        (peak > 0 && flops > peak * seconds * TIDE_MFU_TOLERANCE)) {
        w->rejected++;
        return -ERANGE;
    }
    if (w->accepted == 0) {
        w->first_ms = now_ms - (int64_t)llround(seconds * 1000.0);
        w->last_ms = now_ms;
    }
    if (now_ms < w->last_ms)
        now_ms = w->last_ms;
    w->fast = decay(w->fast, now_ms - w->last_ms, TIDE_MFU_FAST_TAU_MS) +
              spread(flops, seconds, TIDE_MFU_FAST_TAU_MS);
    w->slow = decay(w->slow, now_ms - w->last_ms, TIDE_MFU_SLOW_TAU_MS) +
              spread(flops, seconds, TIDE_MFU_SLOW_TAU_MS);
    w->total += flops;
    w->last_ms = now_ms;
    w->accepted++;
    return 0;
}

static double rate(double sum, int64_t since_last_ms, int64_t age_ms, double tau_ms)
{
    double norm;

    if (age_ms <= 0)
        return 0;
    norm = tau_ms / 1000.0 * (1.0 - exp(-(double)age_ms / tau_ms));
    return norm > 0 ? decay(sum, since_last_ms, tau_ms) / norm : 0;
}

void tide_flops_window_rates(const tide_flops_window_t *w, int64_t now_ms, double *fast,
                             double *slow, double *life)
{
    int64_t age, since;

    if (w->accepted == 0) {
        if (fast)
            *fast = 0;
        if (slow)
            *slow = 0;
        if (life)
            *life = 0;
        return;
    }
    if (now_ms < w->last_ms)
        now_ms = w->last_ms;
    age = now_ms - w->first_ms;
    since = now_ms - w->last_ms;
    if (fast)
        *fast = rate(w->fast, since, age, TIDE_MFU_FAST_TAU_MS);
    if (slow)
        *slow = rate(w->slow, since, age, TIDE_MFU_SLOW_TAU_MS);
    if (life)
        *life = age > 0 ? w->total / ((double)age / 1000.0) : 0;
}

double tide_mfu(double achieved_flops_per_s, double peak_flops_per_s)
{
    if (!(peak_flops_per_s > 0) || !(achieved_flops_per_s > 0))
        return 0;
    return achieved_flops_per_s / peak_flops_per_s;
}

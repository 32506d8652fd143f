/* Bottleneck and health score (health.h). The formula, documented in docs/metrics.md:
 *   b = utilization of the binding dimension (the busiest known one)
 *   efficiency  E = min(1, b / TARGET)             the binding resource does real work
 *   headroom    H = 1 if b <= TARGET, else (1 - b) / (1 - TARGET)   deliberate slack is kept
 *   reserve     R = min(1, reserve / target) (1 when there is no target)
 *   reliability L = 1 - failure_risk
 *   score = 100 (0.30 E + 0.30 H + 0.25 R + 0.15 L)
 * so a cluster scores best with its bottleneck near the target band, spares at the reserve target
 * and nothing about to fail; pushing any dimension to 100% or running without spares costs points. */
#include "health.h"

#include <stdbool.h>
#include <stdio.h>

static double clamp01(double x)
{
    if (!(x > 0))
        return 0;
    return x > 1 ? 1 : x;
}

const char *tide_dim_name(tide_dim_t d)
{
    static const char *const names[] = {"compute", "memory_bandwidth", "network", "storage_io"};

    return (unsigned)d < TIDE_DIM_COUNT ? names[d] : "none";
}

/* For people: "memory bandwidth". */
static const char *dim_words(tide_dim_t d)
{
    static const char *const words[] = {"compute", "memory bandwidth", "network", "storage I/O"};

    return (unsigned)d < TIDE_DIM_COUNT ? words[d] : "nothing";
}

tide_dim_t tide_bottleneck(const tide_utilization_t *u)
{
    tide_dim_t best = TIDE_DIM_COUNT;

    for (int d = 0; d < TIDE_DIM_COUNT; d++) {
        if (!(u->known & (1u << d)))
            continue;
        if (best == TIDE_DIM_COUNT || clamp01(u->u[d]) > clamp01(u->u[best]))
            best = (tide_dim_t)d;
    }
    return best;
}

void tide_health_score(const tide_health_input_t *in, tide_health_t *out)
{
    const tide_utilization_t *u = &in->util;
    tide_dim_t b = tide_bottleneck(u);
    double ub = b == TIDE_DIM_COUNT ? 0 : clamp01(u->u[b]);
    bool compute_known = (u->known & (1u << TIDE_DIM_COMPUTE)) != 0;
    double uc = clamp01(u->u[TIDE_DIM_COMPUTE]);
    size_t n;

    out->bottleneck = b;
    out->efficiency = clamp01(ub / TIDE_HEALTH_TARGET);
    out->headroom = ub <= TIDE_HEALTH_TARGET ? 1 : clamp01((1 - ub) / (1 - TIDE_HEALTH_TARGET));
    out->reserve = in->reserve_target_gpus > 0
                       ? clamp01(in->reserve_gpus / in->reserve_target_gpus)
                       : 1;
    out->reliability = 1 - clamp01(in->failure_risk);
    out->score = 100 * (0.30 * out->efficiency + 0.30 * out->headroom + 0.25 * out->reserve +
                        0.15 * out->reliability);

    if (b == TIDE_DIM_COUNT)
        n = (size_t)snprintf(out->status, sizeof(out->status), "no utilization known yet");
    else if (b != TIDE_DIM_COMPUTE && ub >= 0.9 && compute_known && uc < 0.6)
        n = (size_t)snprintf(out->status, sizeof(out->status),
                             "%s at %.0f%% binds while compute is at %.0f%%: pushing MFU will not "
                             "help; relieve %s",
                             dim_words(b), 100 * ub, 100 * uc, dim_words(b));
    else if (ub >= 0.9)
        n = (size_t)snprintf(out->status, sizeof(out->status), "%s at %.0f%% binds: no headroom left",
                             dim_words(b), 100 * ub);
    else if (ub < 0.5)
        n = (size_t)snprintf(out->status, sizeof(out->status),
                             "underused: the busiest dimension, %s, is at %.0f%%", dim_words(b),
                             100 * ub);
    else
        n = (size_t)snprintf(out->status, sizeof(out->status), "%s binds at %.0f%% with headroom",
                             dim_words(b), 100 * ub);
    if (n < sizeof(out->status) && out->reserve < 1)
        snprintf(out->status + n, sizeof(out->status) - n, "; reserve %.0f of %.0f spare GPUs",
                 in->reserve_gpus > 0 ? in->reserve_gpus : 0, in->reserve_target_gpus);
}

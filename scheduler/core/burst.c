/* Phase-aware burst decisions for one job (burst.h, docs/elastic.md "Burst"): a pure controller fed
 * phase observations and asked what to do at a given time. Invariant: lent > 0 exactly between a
 * LEND the caller carried out (tide_burst_lent) and the next tide_burst_reclaimed; time never moves
 * backwards inside it (an older time is taken as the newest one known). */
#include <math.h>
#include <string.h>

#include "burst.h"

void tide_burst_cfg_default(tide_burst_cfg_t *cfg)
{
    cfg->percent = 20;
    cfg->enter_ms = 2000;
    cfg->exit_ms = 2000;
    cfg->min_dwell_ms = 10000;
    cfg->cost_factor = 2.0;
    cfg->ewma_alpha = 0.3;
}

void tide_burst_init(tide_burst_t *b)
{
    memset(b, 0, sizeof(*b));
}

/* The newest time the controller knows of: the start of the current phase, or the lending. */
static int64_t clamp_now(const tide_burst_t *b, int64_t now_ms)
{
    if (b->observed && now_ms < b->phase_since)
        now_ms = b->phase_since;
    if (b->lent > 0 && now_ms < b->lent_at)
        now_ms = b->lent_at;
    return now_ms;
}

void tide_burst_observe(tide_burst_t *b, const tide_burst_cfg_t *cfg, int64_t now_ms, bool high)
{
    now_ms = clamp_now(b, now_ms);
    if (!b->observed) {
        b->observed = true;
        b->high = high;
        b->phase_since = now_ms;
        return;
    }
    if (high == b->high)
        return;
    if (b->high) {
        double len = (double)(now_ms - b->phase_since);
        if (b->highs_seen == 0)
            b->ewma_high_ms = len;
        else
            b->ewma_high_ms = cfg->ewma_alpha * len + (1 - cfg->ewma_alpha) * b->ewma_high_ms;
        b->highs_seen++;
    }
    b->high = high;
    b->phase_since = now_ms;
}

int64_t tide_burst_predicted_rest(const tide_burst_t *b, int64_t now_ms)
{
    int64_t rest;

    if (!b->observed || !b->high || b->highs_seen == 0)
        return -1;
    rest = (int64_t)llround(b->ewma_high_ms) - (clamp_now(b, now_ms) - b->phase_since);
    return rest > 0 ? rest : 0;
}

tide_burst_action_t tide_burst_decide(const tide_burst_t *b, const tide_burst_cfg_t *cfg,
                                      int64_t now_ms, int32_t n_ranks, int32_t avail,
                                      int64_t cost_ms, int32_t *n)
{
    int64_t rest, in_phase;
    double want;
    int32_t k;

    if (n)
        *n = 0;
    if (!b->observed)
        return TIDE_BURST_HOLD;
    now_ms = clamp_now(b, now_ms);
    in_phase = now_ms - b->phase_since;
    if (b->lent > 0) {
        if (!b->high && in_phase >= cfg->exit_ms && now_ms - b->lent_at >= cfg->min_dwell_ms)
            return TIDE_BURST_RECLAIM;
        return TIDE_BURST_HOLD;
    }
    if (!b->high || in_phase < cfg->enter_ms || n_ranks < 1 || avail < 1 || !(cfg->percent > 0))
        return TIDE_BURST_HOLD;
    rest = tide_burst_predicted_rest(b, now_ms);
    if (rest < 0 || !((double)rest > cfg->cost_factor * (double)(cost_ms > 0 ? cost_ms : 0)))
        return TIDE_BURST_HOLD;
    /* n x percent first: 5 x 20 / 100 is 1 exactly. */
    want = ceil((double)n_ranks * cfg->percent / 100.0);
    k = want < 1 ? 1 : want > (double)avail ? avail : (int32_t)want;
    if (n)
        *n = k;
    return TIDE_BURST_LEND;
}

void tide_burst_pause(tide_burst_t *b, int64_t now_ms, int64_t ms)
{
    if (!b->observed || ms <= 0)
        return;
    b->phase_since += ms;
    if (b->phase_since > now_ms)
        b->phase_since = now_ms;
}

void tide_burst_lent(tide_burst_t *b, int64_t now_ms, int32_t n)
{
    b->lent = n > 0 ? n : 0;
    b->lent_at = now_ms;
}

void tide_burst_reclaimed(tide_burst_t *b)
{
    b->lent = 0;
    b->lent_at = 0;
}

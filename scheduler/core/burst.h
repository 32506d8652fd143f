/* Phase-aware burst decisions for one job (docs/elastic.md, "Burst"): when a job reports a high-load
 * phase, lend it extra workers for that phase and take them back after, with hysteresis and a minimum
 * dwell, and only when the phase is predicted to outlast what lending costs. Pure: no clock, no I/O, no
 * allocation; the caller passes the time (the core's monotonic clock, or the simulator's) and carries
 * out the decisions. The core (lending, issue 7 part 2) and `tide-sim burst` use the same code. */
#ifndef TIDE_BURST_H
#define TIDE_BURST_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tide_burst_cfg {
    double percent;       /* 20: lend ceil(n_ranks * percent / 100) workers (at least 1) */
    int64_t enter_ms;     /* 2000: a high phase lasts this long before anything is lent (hysteresis) */
    int64_t exit_ms;      /* 2000: a normal phase lasts this long before lent workers are taken back */
    int64_t min_dwell_ms; /* 10000: lent workers stay at least this long */
    double cost_factor;   /* 2.0: lend only when the high phase's predicted rest > factor x the cost */
    double ewma_alpha;    /* 0.3: weight of the newest high phase's length in the prediction */
} tide_burst_cfg_t;

/* Fills cfg with the defaults above. */
void tide_burst_cfg_default(tide_burst_cfg_t *cfg);

typedef struct tide_burst {
    bool high;            /* the phase last observed */
    bool observed;        /* any observation yet */
    int64_t phase_since;  /* when the current phase (high or not) began */
    double ewma_high_ms;  /* predicted length of a high phase; valid once highs_seen > 0 */
    uint32_t highs_seen;  /* high phases that ended (their lengths are in the EWMA) */
    int32_t lent;         /* workers lent now; 0: none */
    int64_t lent_at;      /* when they were lent */
} tide_burst_t;

typedef enum tide_burst_action {
    TIDE_BURST_HOLD = 0,    /* nothing to do */
    TIDE_BURST_LEND = 1,    /* lend *n workers now */
    TIDE_BURST_RECLAIM = 2, /* take the lent workers back now */
} tide_burst_action_t;

void tide_burst_init(tide_burst_t *b);
/* The job's phase at now_ms (high: it reports a high-load phase). A change of phase starts a new one;
 * the end of a high phase feeds its length into the prediction. Times never go backwards (an older
 * now_ms is taken as the last one). */
void tide_burst_observe(tide_burst_t *b, const tide_burst_cfg_t *cfg, int64_t now_ms, bool high);
/* The predicted rest of the current high phase in ms: the predicted length less what has passed, never
 * below 0; -1 when unknown (no high phase has ended yet, or the phase is not high). */
int64_t tide_burst_predicted_rest(const tide_burst_t *b, int64_t now_ms);
/* What to do at now_ms for a job of n_ranks ranks, with `avail` workers free for it (what the reserve
 * allows) and lending costing cost_ms (lent workers' start, or a resize's latency plus the trainer's
 * restart). LEND (*n set, 1..avail) when nothing is lent, the phase has been high for enter_ms and its
 * predicted rest exceeds cost_factor x cost_ms; RECLAIM when workers are lent, the phase has not been
 * high for exit_ms and they have been lent min_dwell_ms; else HOLD. */
tide_burst_action_t tide_burst_decide(const tide_burst_t *b, const tide_burst_cfg_t *cfg, int64_t now_ms,
                                      int32_t n_ranks, int32_t avail, int64_t cost_ms, int32_t *n);
/* The job was paused for ms (a resize's stop and start) inside the current phase: the phase's length
 * leaves that out (a pause is not load), so its start moves later by ms, never past now_ms. */
void tide_burst_pause(tide_burst_t *b, int64_t now_ms, int64_t ms);
/* The caller lent n workers at now_ms / took them all back. */
void tide_burst_lent(tide_burst_t *b, int64_t now_ms, int32_t n);
void tide_burst_reclaimed(tide_burst_t *b);

#endif

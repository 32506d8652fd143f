/* MFU done right (docs/metrics.md): achieved *model* FLOP/s divided by the peak FLOP/s of the
 * hardware that was available. A tide_flops_window turns a stream of per-step FLOP reports into
 * achieved FLOP/s over about 10 s, about 5 min and the whole life, in O(1) time and memory per
 * report (exponentially decayed sums, bias-corrected while young), and refuses reports that claim
 * more than the device can do. Pure: time is passed in. */
#ifndef TIDE_MFU_H
#define TIDE_MFU_H

#include <stdint.h>

#define TIDE_MFU_FAST_TAU_MS 10000   /* "now": ~10 s */
#define TIDE_MFU_SLOW_TAU_MS 300000  /* "recently": ~5 min */
/* A report may exceed peak x seconds by this much (timer jitter between the trainer's step and
 * the worker's clock) before it is called absurd. */
#define TIDE_MFU_TOLERANCE 1.05

typedef struct tide_flops_window {
    double fast, slow;  /* decayed FLOP sums (time constants TIDE_MFU_*_TAU_MS) as of last_ms */
    double total;       /* FLOPs over the life */
    int64_t first_ms;   /* start of the first report's interval; 0 and last_ms 0: no report yet */
    int64_t last_ms;    /* end of the newest report */
    uint64_t accepted;  /* reports folded in */
    uint64_t rejected;  /* absurd reports (never folded in) */
} tide_flops_window_t;

void tide_flops_window_init(tide_flops_window_t *w);
/* Folds in `flops` model FLOPs done in the `seconds` that end at now_ms on a device of peak
 * FLOP/s `peak` (<= 0: unknown, no plausibility check). Returns 0, or -ERANGE (counted in
 * rejected, nothing else changes) when flops is negative or not finite, seconds is negative or not
 * finite, or flops > peak x seconds x TIDE_MFU_TOLERANCE. A report whose now_ms is before the
 * previous one is folded in at the previous time. */
int tide_flops_window_add(tide_flops_window_t *w, int64_t now_ms, double flops, double seconds,
                          double peak);
/* Achieved FLOP/s at now_ms: over ~10 s, ~5 min and the life (0 before any report; any pointer
 * may be NULL). Rates decay while no report arrives, so a stalled trainer's MFU falls. */
void tide_flops_window_rates(const tide_flops_window_t *w, int64_t now_ms, double *fast,
                             double *slow, double *life);

/* achieved / peak, 0 when peak <= 0 or achieved < 0. Not clamped above 1: a value over 1 means a
 * trainer over-reports and is shown as such. */
double tide_mfu(double achieved_flops_per_s, double peak_flops_per_s);

#endif

/* A GPU's failure risk from its telemetry (docs/metrics.md, "Failure risk"): the reliability term
 * of the health score and the trigger for proactive migration. Two forms: tide_failure_risk, the
 * instantaneous rules on one sample (for the health score), and tide_risk_track, a per-GPU tracker
 * of trends (temperature slope, corrected-ECC rate, power anomalies, new errors) whose verdict says
 * when to cordon the GPU and migrate its job before it dies. Pure: no allocation, clock or I/O. */
#ifndef TIDE_RISK_H
#define TIDE_RISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One telemetry sample. A field whose has_* flag is false is unknown and adds no risk. */
typedef struct tide_risk_input {
    bool has_temperature;
    double temperature_c;
    bool has_ecc;
    uint64_t ecc_uncorrected; /* volatile totals since the driver loaded */
    uint64_t ecc_corrected;
    bool has_xid;
    uint64_t xid_count; /* XID events since the worker started */
    uint32_t last_xid;  /* the newest code, 0: none */
    bool has_throttle;
    uint64_t throttle_reasons; /* NVML clocks-event-reason bits */
    bool has_power;
    double power_w;
    bool has_util;
    double util; /* 0..1: fraction of time a kernel ran */
} tide_risk_input_t;

/* Temperatures: no risk up to WARM, rising linearly to 0.6 at HOT and beyond. */
#define TIDE_RISK_WARM_C 80.0
#define TIDE_RISK_HOT_C  95.0

/* 0..1: the largest of the instantaneous rules' values on one sample (docs/metrics.md lists them;
 * counters count since the worker started, so any uncorrected error or XID counts). Unknown inputs
 * add none. Used by the health score; the trend tracker below decides cordons. */
double tide_failure_risk(const tide_risk_input_t *in);
/* True for XID codes that mean the GPU or its memory fails (48, 63, 64, 74, 79, 92, 94, 95). */
bool tide_xid_critical(uint32_t xid);

/* ---- The trend tracker ---- */

/* The tracker's thresholds; tide_risk_cfg_default fills the documented values (docs/metrics.md).
 * The rules' risk values and the filters' time constants are fixed in risk.c. */
typedef struct tide_risk_cfg {
    double threshold;       /* 0.7: a score at or above it is WATCHed, then PREDICTED */
    int64_t confirm_ms;     /* 10000: how long the score must stay >= threshold (no dip) */
    int64_t gap_ms;         /* 30000: a longer silence restarts a signal's trend */
    double warm_c;          /* 80: temperature level risk starts */
    double hot_c;           /* 95: temperature level risk is full; the slope rule's target */
    double trend_floor_c;   /* 75: the slope rule needs a reading above it */
    int64_t horizon_ms;     /* 60000: the slope rule projects this far ahead */
    double power_deviation; /* 0.30: |power - baseline| / baseline above it is an anomaly */
    int64_t power_prime_ms; /* 10000: the power baseline needs this much history first */
    double util_steady;     /* 0.1: |util - its average| below it is steady utilization */
    double ecc_rate_low;    /* 1/min: corrected-ECC rate with no risk */
    double ecc_rate_high;   /* 100/min: corrected-ECC rate with the rule's full risk */
} tide_risk_cfg_t;

/* Fills cfg with the defaults. */
void tide_risk_cfg_default(tide_risk_cfg_t *cfg);

typedef enum tide_risk_verdict {
    TIDE_RISK_OK = 0,    /* score below the threshold */
    TIDE_RISK_WATCH,     /* score >= threshold, not yet for confirm_ms */
    TIDE_RISK_PREDICTED, /* confirmed or critical: cordon the GPU and migrate its job */
} tide_risk_verdict_t;

/* One GPU's history. Plain data (copyable, no pointers); the fields are the tracker's, not the
 * caller's. Zero it or call tide_risk_track_reset before the first sample. */
typedef struct tide_risk_track {
    /* temperature: short average, the slope of that average (C/min), when last seen */
    bool temp_seen;
    double temp_avg, slope_avg;
    int64_t temp_ms;
    /* power: slow baseline primed since power_since_ms; utilization average */
    bool power_seen, util_seen;
    double power_base, util_avg;
    int64_t power_ms, power_since_ms, util_ms;
    /* ECC: counters at the previous sample, corrected-ECC rate average (per minute) */
    bool ecc_seen;
    uint64_t ecc_corrected, ecc_uncorrected;
    double ecc_rate;
    int64_t ecc_ms;
    /* XID: count at the previous sample; the newest non-critical one */
    bool xid_seen, xid_other_seen;
    uint64_t xid_count;
    uint32_t xid_other;
    int64_t xid_other_ms;
    /* confirmation: score >= threshold continuously since above_ms */
    bool above;
    int64_t above_ms;
    int64_t last_ms;
    bool any;
    /* PREDICTED is sticky until reset: when and why */
    bool predicted;
    int64_t predicted_ms;
    char predicted_why[128];
} tide_risk_track_t;

/* Forgets all history (e.g. after an operator uncordons the GPU): the next sample sets the
 * counters' baselines again, so totals seen before are never new. */
void tide_risk_track_reset(tide_risk_track_t *t);

/* Feeds one sample taken at now_ms (monotonic, the caller's clock; O(1)). Returns the verdict,
 * which stays TIDE_RISK_PREDICTED once reached until tide_risk_track_reset. Fills *score (0..1, the
 * latest sample's noisy-or of the rules; may be NULL) and reason[len] (may be NULL/0), a short text
 * naming the rules that contribute, largest first ("temperature 93.1 C rising 48.0 C/min; HW
 * thermal slowdown"), "none" when none do; while PREDICTED it is the text of the sample that made
 * the prediction. in, cfg and t are borrowed for the call. */
tide_risk_verdict_t tide_risk_track_update(tide_risk_track_t *t, const tide_risk_cfg_t *cfg,
                                           const tide_risk_input_t *in, int64_t now_ms,
                                           double *score, char *reason, size_t len);
/* "ok", "watch", "predicted". */
const char *tide_risk_verdict_name(tide_risk_verdict_t v);

#endif

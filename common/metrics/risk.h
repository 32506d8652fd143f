/* A GPU's failure risk from its telemetry (docs/metrics.md, "Failure risk"): the reliability term of
 * the health score. A first, rule-based estimate from the precursors the article names (heat,
 * uncorrectable memory errors, driver XID events, hardware slowdown); the fault-tolerance work
 * replaces it with a predictor fitted on rates. Pure. */
#ifndef TIDE_RISK_H
#define TIDE_RISK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tide_risk_input {
    bool has_temperature;
    double temperature_c;
    bool has_ecc;
    uint64_t ecc_uncorrected;
    bool has_xid;
    uint64_t xid_count;
    uint32_t last_xid;
    bool has_throttle;
    uint64_t throttle_reasons; /* NVML clocks-event-reason bits */
} tide_risk_input_t;

/* Temperatures: no risk up to WARM, rising linearly to TIDE_RISK_HOT_VALUE at HOT and beyond. */
#define TIDE_RISK_WARM_C 80.0
#define TIDE_RISK_HOT_C  95.0

/* 0..1: the largest of the rules' values (docs/metrics.md lists them). Unknown inputs add none. */
double tide_failure_risk(const tide_risk_input_t *in);
/* True for XID codes that mean the GPU or its memory is failing (48, 63, 64, 74, 79, 92, 94, 95). */
bool tide_xid_critical(uint32_t xid);

#endif

/* Beyond MFU (docs/metrics.md, "Bottleneck and health score"): the utilization of each dimension
 * that can bound a training run (compute, memory bandwidth, network, storage I/O), the binding one
 * (the bottleneck), and a 0-100 health score that weighs how well the binding resource is used
 * against the headroom left on it, the reserve of spare GPUs and the failure risk. Pure. */
#ifndef TIDE_HEALTH_H
#define TIDE_HEALTH_H

#include <stddef.h>
#include <stdint.h>

typedef enum tide_dim {
    TIDE_DIM_COMPUTE = 0,
    TIDE_DIM_MEMORY_BW = 1,
    TIDE_DIM_NETWORK = 2,
    TIDE_DIM_STORAGE = 3,
    TIDE_DIM_COUNT = 4, /* also "none": no dimension is known */
} tide_dim_t;

/* Utilization of each dimension as a fraction of its capacity (0..1; more is clamped to 1), and
 * which ones are known (bit 1 << dim). */
typedef struct tide_utilization {
    double u[TIDE_DIM_COUNT];
    uint32_t known;
} tide_utilization_t;

/* The health formula's knobs (docs/metrics.md). */
#define TIDE_HEALTH_TARGET 0.80 /* utilization of the binding dimension that is "fully used" */

typedef struct tide_health_input {
    tide_utilization_t util;
    double reserve_gpus;        /* healthy idle GPUs held as spares */
    double reserve_target_gpus; /* what the reserve policy wants; 0: no target */
    double failure_risk;        /* 0..1: predicted risk of a failure soon (max over GPUs) */
} tide_health_input_t;

typedef struct tide_health {
    double score;          /* 0..100 */
    tide_dim_t bottleneck; /* TIDE_DIM_COUNT when no dimension is known */
    double efficiency;     /* 0..1: the binding dimension's use, up to the target */
    double headroom;       /* 0..1: what is left above the target on it */
    double reserve;        /* 0..1: spare GPUs against the target */
    double reliability;    /* 0..1: 1 - failure risk */
    char status[200];      /* one line for people: what binds and what to do */
} tide_health_t;

/* "compute", "memory_bandwidth", "network", "storage_io"; "none" for TIDE_DIM_COUNT. */
const char *tide_dim_name(tide_dim_t d);
/* The known dimension with the highest utilization (ties: the lower index), or TIDE_DIM_COUNT. */
tide_dim_t tide_bottleneck(const tide_utilization_t *u);
/* Fills out from in (docs/metrics.md has the formula). */
void tide_health_score(const tide_health_input_t *in, tide_health_t *out);

#endif

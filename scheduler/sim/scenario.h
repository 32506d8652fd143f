/* A simulation scenario: the cluster, the policy (mapped onto the scheduler core's configuration),
 * the fault and storage models and the workload, read from JSON (docs/simulator.md, "Scenario
 * format"). Parsing validates everything: an error names the key path ("workload.classes[2].gpus:
 * expected a positive integer") or the line of a JSON syntax error; unknown keys are errors. */
#ifndef TIDE_SIM_SCENARIO_H
#define TIDE_SIM_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "error.h"

struct cJSON;

/* A distribution of a number: a constant, uniform, exponential, lognormal or a weighted choice,
 * with an optional clamp. */
typedef enum tide_dist_kind {
    TIDE_DIST_FIXED = 0,
    TIDE_DIST_UNIFORM,     /* a..b */
    TIDE_DIST_EXPONENTIAL, /* mean a */
    TIDE_DIST_LOGNORMAL,   /* mean a, sigma b of the underlying normal */
    TIDE_DIST_CHOICE,      /* values[i] with weight cum[i] - cum[i-1] */
} tide_dist_kind_t;

typedef struct tide_dist {
    tide_dist_kind_t kind;
    double a, b;
    double *values, *cum; /* CHOICE: n entries each; owned */
    size_t n;
    double min, max; /* clamp of every draw */
} tide_dist_t;

typedef enum tide_duration_kind {
    TIDE_DUR_HOURS = 0, /* wall hours at full size without interference */
    TIDE_DUR_GPU_HOURS, /* GPU-hours at full size without interference */
    TIDE_DUR_STEPS,     /* training steps */
} tide_duration_kind_t;

/* One class of jobs (docs/simulator.md, "workload.classes[]"). */
typedef struct tide_sim_class {
    char *name;
    tide_prio_t priority;
    double arrivals_per_h; /* Poisson rate; 0: none */
    int32_t initial;       /* submitted at t = 0 */
    double *at_s;          /* fixed submission times; owned */
    size_t n_at;
    tide_dist_t gpus;    /* max workers */
    double min_fraction; /* min workers = ceil(gpus * this) */
    tide_duration_kind_t dur_kind;
    tide_dist_t duration;
    tide_topology_t topology;
    uint64_t memory_per_rank;
    char *pool;            /* "" : any */
    char *device;          /* "" : any */
    bool load_target;      /* base load from the core's MFU target band */
    tide_dist_t base_load; /* fraction of peak a base iteration uses */
    double nominal_load;   /* load_target: the load goodput and the work size are counted at */
    bool adaptive_target;
    double step_peak_s;  /* seconds one step needs on each rank at the GPU's peak FLOP/s */
    double ckpt_every_s; /* local checkpoint period; 0: none */
    double ckpt_write_s; /* training pauses this long per local checkpoint */
    double ckpt_bytes_per_gpu;
    double eval_every_s; /* a low-MFU phase this often; 0: none */
    double eval_s;
    double eval_mfu;
    double ckpt_mfu_threshold; /* job spec override; 0: the scheduler's */
    int64_t ckpt_deadline_s;   /* job spec override; 0: the scheduler's */
} tide_sim_class_t;

typedef struct tide_sim_group {
    int32_t gpus;
    char device[64]; /* "sim:h100" */
    double peak_flops;
    uint64_t memory_bytes;
    char pool[TIDE_POOL_NAME_MAX + 1]; /* "" : no pool label (the default pool) */
    bool new_arch;
} tide_sim_group_t;

typedef struct tide_scenario {
    char *name;
    uint64_t seed;
    double days;

    /* cluster */
    int32_t gpus_per_node, nodes_per_rack, racks_per_switch;
    tide_sim_group_t *groups;
    size_t n_groups;
    int32_t total_gpus;
    struct {
        char name[TIDE_POOL_NAME_MAX + 1];
        int32_t dedicated; /* -1 shared, else a tide_prio_t */
    } pools[16];
    size_t n_pools;

    /* policy */
    int64_t aging_ms;
    bool preemption;
    int64_t preempt_grace_ms;
    int32_t reserve_gpus; /* -1: computed by the core */
    double reserve_quantile;
    int32_t reserve_min_cluster;
    int64_t ckpt_interval_ms;  /* policy.checkpoint_interval_min: the core's cadence; 0: off */

    /* checkpoint gate and storage */
    bool gate;
    double gate_threshold;
    int64_t gate_deadline_ms;
    int64_t gate_check_ms;
    bool durable;  /* copies to durable storage happen at all */
    bool mirrored; /* the local tier survives a GPU failure */
    double durable_bps_per_gpu;
    double interference; /* step-rate loss while a durable copy runs during training */

    /* faults */
    double fail_rate; /* per GPU-hour */
    double lead_h;    /* replacement lead time */
    double new_arch_mult;
    double curve_ref, curve_ratio, curve_per, curve_min;
    double precursor_fraction;
    double precursor_lead_s;
    bool precursor_predict;  /* the precursor reaches the core as a critical telemetry sign (a new uncorrected
                                ECC error): failure prediction cordons the GPU and moves its job off it */

    /* timing */
    int64_t start_delay_ms, stop_delay_ms, telemetry_ms, sample_ms;

    /* the pulse load */
    int32_t pulse_period, pulse_length;
    double pulse_factor;

    tide_sim_class_t *classes;
    size_t n_classes;
} tide_scenario_t;

/* Parses and validates a scenario from JSON text, after applying the overrides (n_sets "PATH=VALUE"
 * strings, see tide_scenario_set). -EINVAL with err naming the key path or the line. *out is filled
 * (free with tide_scenario_free; safe on failure). */
int tide_scenario_parse(const char *text, const char *const *sets, size_t n_sets,
                        tide_scenario_t *out, tide_error_t *err);
/* Reads the file then parses it: -errno when it cannot be read (err says why). */
int tide_scenario_load(const char *path, const char *const *sets, size_t n_sets,
                       tide_scenario_t *out, tide_error_t *err);
/* Applies one "a.b[2].c=VALUE" override to a JSON tree: VALUE is JSON when it parses as JSON, else
 * a string. Missing objects on the path are created; an index past an array's end is an error. 0 or
 * -EINVAL with err. */
int tide_scenario_set(struct cJSON *root, const char *assignment, tide_error_t *err);
void tide_scenario_free(tide_scenario_t *sc);

/* A draw from d (clamped). */
struct tide_rng;
double tide_dist_draw(const tide_dist_t *d, struct tide_rng *r);
/* The mean of d before clamping (for reports). */
double tide_dist_mean(const tide_dist_t *d);

#endif

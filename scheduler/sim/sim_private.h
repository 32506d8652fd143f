/* Internals shared by the simulator's files (not for main.c or tests). The simulation object, the
 * simulated workers and jobs, and the hooks each concern exports to the engine (sim.c). */
#ifndef TIDE_SIM_PRIVATE_H
#define TIDE_SIM_PRIVATE_H

#include "core.h"
#include "events.h"
#include "list.h"
#include "rng.h"
#include "scenario.h"
#include "sim.h"

#define TIDE_SIM_MONO0 1000LL /* core monotonic ms at simulated time 0 (0 is "none" to it) */
#define TIDE_SIM_WALL0 1700000000000LL /* core wall-clock ms at simulated time 0 */

/* Event types (tide_ev_t.type). */
enum {
    EV_ARRIVAL = 1,   /* a: class; b: 1 when the class's next Poisson arrival follows */
    EV_RANKS_STARTED, /* p: rank_batch_t */
    EV_RANKS_EXITED,  /* p: rank_batch_t */
    EV_JOB_TIMELINE,  /* b: job; c: version */
    EV_COPY_DONE,     /* b: job; c: copy id */
    EV_FAULT,         /* a: 0 ordinary GPUs, 1 new-arch GPUs: the next candidate fault */
    EV_FAIL,          /* a: worker; c: epoch: a fault that showed a precursor fails now */
    EV_WORKER_BACK,   /* a: worker: the replacement registers */
    EV_TELEMETRY,     /* every timing.telemetry_s */
    EV_SAMPLE,        /* every timing.sample_s */
    EV_DAY,           /* progress line */
};

typedef struct rank_item {
    uint32_t worker;
    int32_t rank;
    uint32_t epoch;
} rank_item_t;

/* LAUNCH or STOP actions of one (job, generation) in one batch. */
typedef struct rank_batch {
    char job_id[24];
    int32_t generation;
    int32_t n, cap;
    rank_item_t items[];
} rank_batch_t;

typedef struct tide_sim_worker {
    tide_worker_t *w; /* the core's; stable */
    char id[24], node[16], rack[16], sw[16];
    int32_t group;
    uint32_t epoch; /* bumped at each failure: events of an older epoch are void */
    bool up;
    bool new_arch;
    bool doomed; /* showed a precursor; fails at its EV_FAIL */
} tide_sim_worker_t;

typedef enum sim_job_state {
    SJ_QUEUED = 0, /* PENDING in the core */
    SJ_STARTING,   /* placed; ranks launching */
    SJ_RUNNING,    /* every rank started: training */
} sim_job_state_t;

typedef struct tide_sim_job {
    uint64_t seq;
    char id[24];
    int32_t cls;
    tide_job_t *core; /* valid until the job ends */
    sim_job_state_t state;
    int32_t n; /* max workers: the size its work is defined at */
    int32_t gen, ranks;
    /* performance model (workload.c) */
    double load;      /* base load L */
    double mfu_train; /* MFU of training, pulses included */
    double step_ms;   /* nominal time of a step at full size (pulse cycle average) */
    double pulse_share, pulse_load;
    double steps_total;
    double gpu_s_per_step;  /* nominal GPU-seconds per step (goodput) */
    double peak_s_per_step; /* model FLOPs per step in peak GPU-seconds (effective MFU) */
    /* progress */
    double pos;      /* steps done (continuous) */
    int64_t pos_t;   /* when pos was last brought up to date */
    double rate;     /* steps per ms now */
    int64_t state_t; /* when the current state began */
    /* checkpoints */
    double local_pos; /* the newest complete local checkpoint; < 0: none */
    int64_t local_t;
    double durable_pos; /* the newest durable copy; < 0: none */
    int64_t durable_t;
    bool saving;
    int64_t save_end;
    double save_pos;
    int64_t next_ckpt;
    bool copying;      /* a durable copy runs */
    bool copy_by_sim;  /* the gate is off: the simulator copies (else the core's FLUSH) */
    bool copy_pending; /* gate off: a newer checkpoint waits for the running copy */
    double copy_pos;
    int64_t copy_step;
    uint64_t copy_id;
    uint64_t flush_batch; /* the action batch of the last FLUSH seen */
    uint64_t ckpt_batch;  /* the action batch of the last CHECKPOINT_NOW seen */
    bool held_counted;
    /* phases */
    bool in_eval;
    int64_t eval_end, next_eval;
    int32_t phase;   /* tide.v1.TrainerPhase */
    double mfu;      /* MFU now */
    double fault_f;  /* load factor of the fault model now */
    double told_mfu; /* last job_telemetry sent */
    int32_t told_phase;
    uint64_t version; /* bumped when its timeline changes: older EV_JOB_TIMELINE are void */
    /* queueing */
    int64_t submit_t, queued_t;
    bool placed_once, requeued, finishing;
    tide_list_t run_node; /* s->running while SJ_RUNNING */
} tide_sim_job_t;

typedef struct class_acc {
    uint64_t submitted, started, finished, failed;
    double *delays;
    size_t n_delays, cap_delays;
    uint64_t restarts;
    double restart_sum, restart_max;
    uint64_t preemptions, requeues;
    double retained_gpu_h, lost_gpu_h;
    double wall_gpu_h; /* sum over its jobs of size x (end or now - submission), hours */
} class_acc_t;

struct tide_sim {
    const tide_scenario_t *sc;
    tide_sim_options_t opt;
    uint64_t seed;
    tide_core_t *core;
    tide_evq_t q;
    int64_t now, end;
    uint64_t batch; /* action batches processed */

    /* cluster.c */
    tide_sim_worker_t *workers;
    int32_t n_workers;
    uint32_t *kind_idx[2]; /* workers of each kind: 0 ordinary, 1 new-arch */
    int32_t kind_n[2];
    int32_t n_up;
    double peak_sum; /* peak FLOP/s of every GPU (effective MFU) */

    /* workload.c */
    tide_sim_job_t **jobs; /* by job number; NULL once ended */
    size_t cap_jobs;
    tide_list_t running;
    tide_rng_t *rng_arrival, *rng_attr; /* one stream per class */
    struct rank_ref {
        tide_worker_t *w;
        int32_t rank;
    } * refs;
    size_t cap_refs;

    /* faults.c */
    tide_rng_t rng_fault[2], rng_precursor;
    double fault_fmax;
    bool failing_precursor; /* the failure being delivered showed a precursor */

    /* report.c */
    tide_sim_result_t res;
    class_acc_t *acc;
    double *mfu_samples;
    size_t n_samples, cap_samples;
    double busy_sum, usable_sum, reserve_sum;
    double copy_wait_sum;
    uint64_t copy_waits;
    double durable_age_sum;
    uint64_t durable_ages;
    bool csv_error;
};

/* sim.c */
/* Brings the core's clock to s->now. */
void tide__sim_core_time(tide_sim_t *s);
/* Counts one call that feeds the core an event. */
static inline void tide__sim_called(tide_sim_t *s)
{
    s->res.core_calls++;
}
void tide__sim_push(tide_sim_t *s, int64_t t, int32_t type, uint32_t a, uint64_t b, uint64_t c,
                    void *p);
/* Carries out the core's pending actions (schedules their effects) and clears them. */
void tide__sim_process_actions(tide_sim_t *s);

/* cluster.c */
void tide__cluster_init(tide_sim_t *s);
void tide__cluster_free(tide_sim_t *s);
tide_sim_worker_t *tide__cluster_worker(tide_sim_t *s, const tide_worker_t *w);
/* The GPU fails now (tide_core_worker_failed); its replacement registers after the lead time. */
void tide__cluster_fail(tide_sim_t *s, tide_sim_worker_t *sw);
void tide__cluster_back(tide_sim_t *s, tide_sim_worker_t *sw);

/* workload.c */
void tide__workload_init(tide_sim_t *s);
void tide__workload_free(tide_sim_t *s);
void tide__workload_arrival(tide_sim_t *s, const tide_ev_t *ev);
void tide__workload_timeline(tide_sim_t *s, const tide_ev_t *ev);
void tide__workload_copy_done(tide_sim_t *s, const tide_ev_t *ev);
void tide__workload_telemetry(tide_sim_t *s);
/* A core EVENT action about a job. */
void tide__workload_event(tide_sim_t *s, const tide_action_t *a);
void tide__workload_flush(tide_sim_t *s, const tide_action_t *a);
void tide__workload_ckpt_now(tide_sim_t *s, const tide_action_t *a);
tide_sim_job_t *tide__workload_job(tide_sim_t *s, const tide_job_t *job);
/* The fault model's load factor of the work on GPU w now (an idle or starting GPU: the factor at
 * MFU 0). */
double tide__workload_gpu_fault_factor(tide_sim_t *s, const tide_worker_t *w);
/* The end: brings every job's accounting up to s->now. */
void tide__workload_finish(tide_sim_t *s);

/* faults.c */
void tide__faults_init(tide_sim_t *s);
/* The fault model's load factor at MFU m (1 at faults.new_arch.ref_mfu). */
double tide__faults_factor(const tide_scenario_t *sc, double m);
void tide__faults_candidate(tide_sim_t *s, const tide_ev_t *ev);
void tide__faults_fail(tide_sim_t *s, const tide_ev_t *ev);
/* faults.precursor.predict: a doomed GPU keeps reporting its sign (each telemetry period), so the core can
 * move a job it could not move at once (no room then). O(workers) per period. */
void tide__faults_remind(tide_sim_t *s);

/* report.c */
void tide__report_init(tide_sim_t *s);
void tide__report_free(tide_sim_t *s);
void tide__report_sample(tide_sim_t *s);
void tide__report_delay(tide_sim_t *s, int32_t cls, double seconds);
void tide__report_finish(tide_sim_t *s);

#endif

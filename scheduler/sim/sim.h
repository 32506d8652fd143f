/* tide-sim: a discrete-event simulator that drives the real scheduler core (scheduler/core) on a
 * virtual clock with simulated workers, a workload model and a fault model (docs/simulator.md). The
 * same scenario and seed give byte-identical reports. */
#ifndef TIDE_SIM_H
#define TIDE_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core.h"
#include "error.h"
#include "scenario.h"

typedef struct tide_sim tide_sim_t;

typedef struct tide_sim_options {
    uint64_t seed; /* used when seed_set; else the scenario's */
    bool seed_set;
    FILE *csv;      /* time series, one row per sample period; NULL: none. Borrowed */
    FILE *progress; /* a line per simulated day; NULL: none. Borrowed */
} tide_sim_options_t;

/* What one class of jobs saw (times in seconds, GPU-hours at nominal speed). */
typedef struct tide_sim_class_result {
    const char *name; /* borrowed from the scenario */
    tide_prio_t priority;
    uint64_t submitted, started, finished, failed, running_at_end, waiting_at_end;
    double delay_mean_s, delay_p50_s, delay_p95_s, delay_max_s; /* submission -> first placement */
    uint64_t restarts;                                          /* placements after a requeue */
    double restart_mean_s, restart_max_s;                       /* requeue -> placement */
    uint64_t preemptions, requeues;
    double retained_gpu_h, lost_gpu_h;
    /* Effective training time (Llama 3's "effective training time"): the share of its jobs' wall
     * time, submission to their end (or the run's), that made progress they kept, at full size and
     * nominal speed: retained_gpu_h / sum(size x wall hours). 0 when no job was submitted. */
    double effective_training_time;
} tide_sim_class_result_t;

typedef struct tide_sim_result {
    uint64_t seed;
    double days;
    int32_t gpus;
    double cluster_gpu_h;  /* GPUs x simulated hours */
    double goodput;        /* retained_gpu_h / cluster_gpu_h */
    double effective_mfu;  /* retained model FLOPs / the cluster's peak FLOPs over the run */
    double retained_gpu_h; /* training progress kept, in GPU-hours at the jobs' nominal speed */
    double mfu_mean, mfu_p5, mfu_p95; /* cluster MFU over usable GPUs, sampled */
    double busy_mean;                 /* share of usable GPUs allocated to jobs, sampled */
    double usable_mean;               /* usable GPUs, sampled */
    double reserve_mean;              /* the core's headroom reserve in GPUs, sampled */
    int32_t reserve_max;
    double train_gpu_h, eval_gpu_h, save_gpu_h,
        start_gpu_h; /* allocated GPU-hours by what they did */
    double lost_gpu_h, lost_failure_gpu_h, lost_preempt_gpu_h, lost_precursor_gpu_h;
    double lost_move_gpu_h; /* jobs moved off a GPU predicted to fail (faults.precursor.predict) */
    uint64_t moves;
    double interference_gpu_h; /* training time lost to durable copies running alongside */
    uint64_t checkpoints;      /* complete local checkpoints */
    uint64_t copies;           /* durable copies completed */
    uint64_t copies_held;      /* copies the gate held back at least once */
    double durable_bytes;      /* bytes copied to durable storage */
    double copy_wait_mean_s, copy_wait_max_s; /* checkpoint complete -> its copy starts */
    double durable_age_mean_s; /* age of the newest durable copy when a failure hit its job */
    uint64_t failures, failures_busy, precursors, requeues, preemptions, rollbacks, jobs_failed,
        aged;
    uint64_t events;     /* simulator events processed (core timers included) */
    uint64_t core_calls; /* calls into the core that feed it an event */
    uint64_t actions;    /* actions the core emitted */
    size_t n_classes;
    tide_sim_class_result_t *classes;
} tide_sim_result_t;

/* Builds a simulation of sc (borrowed: it must outlive the simulation): the core with the
 * scenario's configuration and pools, and every worker registered. Never fails on a parsed scenario
 * (aborts on OOM). */
tide_sim_t *tide_sim_new(const tide_scenario_t *sc, const tide_sim_options_t *opt);
/* Runs to the scenario's end. 0, or -EIO when the CSV could not be written. */
int tide_sim_run(tide_sim_t *s);
/* The summary after tide_sim_run. Borrowed until tide_sim_free. */
const tide_sim_result_t *tide_sim_result(const tide_sim_t *s);
/* The summary for people / for scripts. */
void tide_sim_print_table(const tide_sim_result_t *r, const tide_scenario_t *sc, FILE *f);
void tide_sim_print_json(const tide_sim_result_t *r, const tide_scenario_t *sc, FILE *f);
void tide_sim_free(tide_sim_t *s);

#endif

/* tide-mlp's configuration: the model shape, the training hyper-parameters and the run's flags, and
 * the parser of its command line. Pure (no MPI, no I/O beyond what the caller prints), so the unit
 * tests drive it directly. docs/tide-mlp.md lists the flags. */
#ifndef TIDE_MLP_CONFIG_H
#define TIDE_MLP_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

/* What defines the training trajectory: every field must match for a checkpoint to be resumed,
 * because each one changes the parameters after a step. */
typedef struct tide_mlp_config {
    uint32_t input;         /* input features per sample */
    uint32_t width;         /* units per hidden layer */
    uint32_t depth;         /* hidden layers (>= 1); the model has depth + 1 linear layers */
    uint32_t output;        /* outputs per sample */
    uint32_t micro_batches; /* micro-batches per step; divides batch */
    uint64_t batch;         /* global batch: samples per step, whatever the world size */
    uint64_t seed;          /* data, teacher and initial parameters */
    double lr;              /* SGD learning rate */
    double momentum;        /* SGD momentum in [0, 1); 0 turns momentum off */
} tide_mlp_config_t;

/* How to run: the config plus what does not change the trajectory. */
typedef struct tide_mlp_options {
    tide_mlp_config_t cfg;
    uint64_t steps;             /* train until this many steps are done */
    const char *checkpoint_dir; /* NULL: no checkpoints; borrowed from argv */
    uint64_t checkpoint_every;  /* 0: only at the end, on a stop and on request */
    uint32_t checkpoint_keep;   /* newest checkpoints kept in checkpoint_dir */
    uint64_t log_every;         /* progress line every this many steps (0: none) */
    double simulated_compute_ms; /* extra running time per micro-batch (>= 0; 0: none) */
    /* Evaluation phases (docs/tide-mlp.md, "Evaluation"); none of them changes the trajectory.
     * eval_every: a phase after every this many steps (0: none; needs checkpoint_dir);
     * eval_tasks: held-out shards per phase (1 .. TIDE_MLP_EVAL_TASKS_MAX); eval_per_step: shards
     * a rank takes per training step while its phase lasts (>= 1); eval_compute_ms: simulated
     * running time per shard (>= 0; after parsing, --simulated-compute's unless given). */
    uint64_t eval_every;
    uint32_t eval_tasks;
    uint32_t eval_per_step;
    double eval_compute_ms;
    bool tiered; /* --tiered-checkpoints: under tide with TIDE_CKPT_DIR, rank 0 saves into the
                    worker's hot tier (tide_trainer_ckpt_path) and resumes via tide_trainer_restore */
    bool async_checkpoints; /* --async-checkpoints: rank 0 copies the state at a checkpoint step and
                               a background thread saves the copy (async_save.h) */
    bool quiet;                 /* only the final params-sha256 line */
    bool help;
} tide_mlp_options_t;

/* The most shards of one evaluation phase: a rank (of a world of 1) declares all of them, and the
 * SDK takes at most 4096 ids per declaration (TIDE_TASKS_MAX_SHARE). */
#define TIDE_MLP_EVAL_TASKS_MAX 4096

/* The defaults: a small model that trains in a few seconds on 4 ranks of a 2-core machine. */
void tide_mlp_options_default(tide_mlp_options_t *o);

/* Parses argv (argv[0] is the program) over the defaults into *o. Returns 0, or -EINVAL with one
 * line in err naming the bad flag (also --eval-every > 0 without --checkpoint-dir). Strings in *o
 * point into argv. Not reentrant (getopt_long). */
int tide_mlp_options_parse(tide_mlp_options_t *o, int argc, char **argv, tide_error_t *err);

/* Checks a config's ranges and consistency (micro_batches divides batch, the model fits in memory).
 * Returns 0 or -EINVAL with err naming the field. */
int tide_mlp_config_validate(const tide_mlp_config_t *c, tide_error_t *err);

/* The usage text (static storage). */
const char *tide_mlp_usage(void);

#endif

/* The Slurm identity of a tide-worker that srun started, one task per GPU (docs/slurm.md): which GPU
 * the task takes, which node it is on, and the labels it registers with. Read from the environment
 * srun gives each task; pure apart from the getter, so the tests pass their own. */
#ifndef TIDE_WORKER_SLURM_H
#define TIDE_WORKER_SLURM_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

#define TIDE_SLURM_LABELS 6 /* slurm.job_id, .step_id, .procid, .localid, .nodeid, .node */

typedef struct tide_worker_slurm {
    bool present;         /* SLURM_JOB_ID is set: the worker runs in a Slurm allocation */
    char job_id[32];      /* SLURM_JOB_ID */
    char step_id[32];     /* SLURM_STEP_ID; "": a batch script's own shell, not a step */
    char node[256];       /* SLURMD_NODENAME; "": not set */
    long procid, localid, nodeid; /* SLURM_PROCID / SLURM_LOCALID / SLURM_NODEID; -1: not set */
    int32_t gpu_index;    /* the GPU this task takes: entry SLURM_LOCALID of SLURM_STEP_GPUS (the
                             step's GPUs on this node), else SLURM_LOCALID; -1: unknown */
} tide_worker_slurm_t;

/* Environment lookup: the value or NULL. */
typedef const char *(*tide_worker_getenv_fn)(const char *name);

/* Fills *out from the environment (get NULL: getenv). Outside Slurm out->present is false and 0 is
 * returned. Returns -EINVAL with err naming the variable when one is malformed (not a number, a GPU
 * list that is not comma-separated indices, SLURM_LOCALID past the end of SLURM_STEP_GPUS); *out is
 * then not to be used. */
int tide_worker_slurm_detect(tide_worker_getenv_fn get, tide_worker_slurm_t *out, tide_error_t *err);

/* The labels a Slurm task registers with (key, value pairs into keys/values, TIDE_SLURM_LABELS at most;
 * values point into s or into vbuf, which must hold TIDE_SLURM_LABELS x 24 bytes). Returns how many. */
int tide_worker_slurm_labels(const tide_worker_slurm_t *s, const char **keys, const char **values,
                             char *vbuf);

#endif

/* The workers that may hold a job's hot checkpoints (issue 8, hot-tier retention;
 * docs/fault-tolerance.md, "Checkpoint tiers"): tide_job_t.ckpt_holders, a set kept in insertion order
 * so the shell can persist it as a plain list. Core-internal (no I/O). */
#ifndef TIDE_CORE_CKPT_HOLDERS_H
#define TIDE_CORE_CKPT_HOLDERS_H

#include "core.h"

/* Adds worker_id (borrowed; copied) to job's holders unless it is there already: O(1) expected. NULL or
 * "" is ignored. Returns true when it was added. */
bool tide__ckpt_holder_add(tide_job_t *job, const char *worker_id);
/* Whether worker_id is one of job's holders. */
bool tide__ckpt_holder_has(const tide_job_t *job, const char *worker_id);
/* The job ended: one TIDE_ACT_FORGET_CKPT per holder, in insertion order (worker and conn set when that
 * worker is connected). The set stays (a job record may still list it). */
void tide__ckpt_holders_forget(tide_core_t *core, tide_job_t *job);
/* Frees the set and the array. */
void tide__ckpt_holders_free(tide_job_t *job);

#endif

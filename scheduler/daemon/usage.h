/* GPU-time accounting per owner and pool (docs/security.md, "Accounting"). Jobs the core still keeps are
 * counted from the core; a job the core prunes folds its GPU time into a per-(owner, pool) total kept in the
 * store (usage/OWNER/POOL) in the same batch that deletes the job, so nothing is counted twice or lost. */
#ifndef TIDE_SCHED_USAGE_H
#define TIDE_SCHED_USAGE_H

#include <stddef.h>

#include "arena.h"
#include "core.h"
#include "error.h"
#include "store.h"

#include "tide/v1/cluster_service.pb-c.h"

#define TIDE_KEY_USAGE "usage/"

typedef struct tide_usage tide_usage_t;

tide_usage_t *tide_usage_new(void);
void tide_usage_free(tide_usage_t *u);
/* A usage/ record read at start. -EINVAL with err naming the key when it is not a tide.v1.UsageRow. */
int tide_usage_restore(tide_usage_t *u, const char *key, const void *value, size_t len, tide_error_t *err);
/* job is being pruned (its record deleted in batch b): its GPU time joins its owner's and pool's total,
 * written to b. */
void tide_usage_pruned(tide_usage_t *u, const tide_core_t *core, const tide_job_t *job, tide_store_batch_t *b);
/* The report: pruned totals plus every job the core keeps (running generations up to now), filtered by
 * owner (NULL/"": all) and pool (NULL/"": all; "*": jobs that named none). Arena memory. */
void tide_usage_report(const tide_usage_t *u, const tide_core_t *core, const char *owner, const char *pool,
                       Tide__V1__UsageReport *out, tide_arena_t *a);

#endif

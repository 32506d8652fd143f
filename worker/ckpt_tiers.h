/* The worker's checkpoint tiers (docs/worker.md, "Checkpoint tiers"): the loop-side half over the
 * tier store (ckpt_store.h). A rank writes its checkpoint under TIDE_CKPT_DIR (HOT/JOB) at
 * step-S/rank-R and reports it; tide_ckpt_tiers_saved then, on the libuv threadpool at idle I/O
 * priority and one job at a time, scans it and writes its manifest in hot, copies the rank
 * directory to WARM/JOB/step-S/rank-R (verified, atomic) and prunes both tiers. A rank's `restore`
 * request searches hot, warm and cold (tide_ckpt_find) off the loop too, and hands the copy found
 * to the rank's account when it runs as another one. An ended job's hot copies
 * go with tide_ckpt_tiers_forget, and old ones of jobs nobody told it about with
 * tide_ckpt_tiers_sweep. Failures are logged, never fatal. Loop thread only. */
#ifndef TIDE_WORKER_CKPT_TIERS_H
#define TIDE_WORKER_CKPT_TIERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt_store.h"

struct uv_loop_s;

typedef struct tide_ckpt_tiers tide_ckpt_tiers_t;

/* A save ended well: rank_dir (HOT/JOB/step-S/rank-R) has its verified manifest meta. Both borrowed for
 * the call (the peer mirror copies it from here). */
typedef void (*tide_ckpt_saved_cb)(void *ud, const char *rank_dir, const tide_ckpt_meta_t *meta);

typedef struct tide_ckpt_tiers_config {
    const char *hot;  /* absolute; NULL or "": no tiers (reports are never in the layout) */
    const char *warm; /* absolute; NULL or "": no warm copies; copied */
    const char *cold; /* the worker's --ckpt-durable; NULL or "": not searched; copied */
    int keep_hot;     /* newest steps per job kept in each tier (>= 1) */
    int keep_warm;
    tide_ckpt_saved_cb saved; /* NULL: none */
    void *ud;
} tide_ckpt_tiers_config_t;

/* What a restore found (the tide_ckpt_found_t of the search, owned by the tiers module for the
 * duration of the callback). rc: 0 (found->path, found->meta, tier_name set: the tier the copy came
 * from), -ENOENT (nothing usable; why says so), -EACCES (a copy was found but could not be handed to
 * the restore's account: why says which and why; found->path NULL) or another -errno.
 * found->skipped lists what was passed over. */
typedef void (*tide_ckpt_restore_cb)(void *ud, uint64_t token, int rc,
                                     const tide_ckpt_found_t *found, const char *tier_name,
                                     const char *why);

/* Creates the tiers on loop. Never fails. Caller frees with tide_ckpt_tiers_free. */
void tide_ckpt_tiers_new(struct uv_loop_s *loop, const tide_ckpt_tiers_config_t *cfg,
                         tide_ckpt_tiers_t **out);
/* Stops: queued saves are dropped, no callback fires any more, and the memory goes once the jobs
 * on the threadpool ended (run the loop afterwards). NULL is fine. */
void tide_ckpt_tiers_free(tide_ckpt_tiers_t *t);

/* Whether path is the rank directory HOT/JOB/step-STEP/rank-RANK (one trailing '/' allowed) or a
 * plain file name directly in it. *is_dir (when not NULL) says which. Pure. */
bool tide_ckpt_tiers_in_layout(const char *hot, const char *job, int64_t step, int32_t rank,
                               const char *path, bool *is_dir);

/* A rank reported a checkpoint (everything borrowed). When path is in the hot layout (above) the
 * manifest / warm copy / prune job is queued and 1 is returned; else 0 and nothing happens. as: the
 * rank's account when it runs as another than the worker's (NULL: the worker's own): HOT/JOB is then
 * the account's, and the job reads, writes its manifest in and prunes it as the account (fs_as.h), so
 * a link the account planted there leads nowhere the account could not go itself. */
int tide_ckpt_tiers_saved(tide_ckpt_tiers_t *t, const char *job_id, int32_t generation,
                          int32_t rank, int64_t step, const char *path, const char *sha256,
                          const tide_fs_account_t *as);

/* Searches [hot, mirror (HOT/mirror: copies peers mirrored here), warm, cold] for (job, rank): the
 * newest step <= resume_step (-1: any) whose copy verifies and was written by generation <=
 * `generation`. With as (NULL: the worker's own account, nothing changes hands) the hot tier, the
 * account's HOT/JOB, is searched as the account (fs_as.h), so a hot copy found is one it can read as it
 * is; a copy found in another tier is copied, verified, into the worker's own
 * HOT/restored/JOB/step-S/rank-R (directories the worker's, 0755; files the account's) on the
 * threadpool before cb, and found->path names that copy. cb fires once, from the loop, later (never
 * inside this call) with token. job_id and as borrowed. */
void tide_ckpt_tiers_restore(tide_ckpt_tiers_t *t, const char *job_id, int32_t generation,
                             int32_t rank, int64_t resume_step, const tide_fs_account_t *as,
                             uint64_t token, tide_ckpt_restore_cb cb, void *ud);

/* The job ended (ForgetCheckpoints): removes HOT/JOB and HOT/mirror/JOB (the copies peers mirrored
 * here for it) on the threadpool, in the queue the saves use, so a save of the job queued before runs
 * first and nothing of it is removed under a save. Each tree is renamed to a '.' name first, so a
 * reader or a late mirror commit finds all of it or nothing. Logs one INFO line with the steps and
 * bytes removed. The caller makes sure no rank of the job runs here. Returns 1 (queued), 0 (no hot
 * tier) or -EINVAL (job_id is not a valid job id: nothing is built from it). */
int tide_ckpt_tiers_forget(tide_ckpt_tiers_t *t, const char *job_id);
/* The backstop for a missed ForgetCheckpoints: queues (like a forget) a sweep of the hot and mirror
 * tiers that removes, as a forget does, each job directory whose newest file (or directory) is older
 * than ttl_ms (a mirror copy: 7 x ttl_ms, its job runs elsewhere) and that is not one of keep's n_keep
 * job ids (the jobs with a rank running here; copied); only directories named by job numbers, and
 * leftovers of an interrupted removal. Returns 1 (queued), 0 (no hot tier, or ttl_ms 0: never)
 * or -EINVAL (ttl_ms < 0). */
int tide_ckpt_tiers_sweep(tide_ckpt_tiers_t *t, int64_t ttl_ms, const char *const *keep,
                          size_t n_keep);
/* Rank process id of job_id (copied) started here / ended (id unknown: nothing). A forget or sweep never
 * removes the copies of a job with a rank started and not ended. Loop thread; NULL t: nothing. */
void tide_ckpt_tiers_rank_started(tide_ckpt_tiers_t *t, uint64_t id, const char *job_id);
void tide_ckpt_tiers_rank_ended(tide_ckpt_tiers_t *t, uint64_t id);
/* Jobs whose hot copies forgets and sweeps removed since start, and their bytes (NULL: not wanted). */
void tide_ckpt_tiers_forgotten(const tide_ckpt_tiers_t *t, uint64_t *jobs, uint64_t *bytes);

/* Jobs queued or running (saves, restores, forgets and sweeps). */
size_t tide_ckpt_tiers_busy(const tide_ckpt_tiers_t *t);
/* Saves that ended well / failed since start. */
void tide_ckpt_tiers_counts(const tide_ckpt_tiers_t *t, uint64_t *saved, uint64_t *failed);

#endif

/* Durable checkpoint copies on the worker (docs/worker.md, "Durable checkpoint copies"; the
 * scheduler's side is docs/policies.md, "Checkpoint gate"). Two parts. tide_flush_copy: one
 * blocking, checksummed, atomic copy of a checkpoint file (or of a directory's regular files) into
 * a durable directory; thread-safe, never logs, run it off the loop. tide_flusher_t: the loop-side
 * bookkeeping; it remembers what each local rank reported in its CheckpointSaved (a short history
 * per rank), answers FlushCheckpoint by running tide_flush_copy on the libuv threadpool at idle I/O
 * and lowest CPU priority (at most one copy per rank at a time, later requests for that rank queued
 * behind it) and sends FlushDone; loop thread only. */
#ifndef TIDE_WORKER_FLUSH_H
#define TIDE_WORKER_FLUSH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "fs_as.h"
#include "tide/v1/worker_service.pb-c.h"

struct uv_loop_s;

/* --- the copy --- */

typedef struct tide_flush_copy {
    /* A regular file, or a directory (its regular files, one level, are copied; anything else in
     * it is skipped). */
    const char *src;
    /* The directory the copy goes into (DIR/JOB/step-STEP); created as needed. */
    const char *dest_dir;
    /* The trainer's sha256 (64 hex digits, either case); NULL or "": nothing to compare. */
    const char *expect_sha256;
    /* When it becomes nonzero the copy stops with -ECANCELED; NULL: never. */
    const atomic_int *cancel;
    /* Tests: writing fails with EIO once this many bytes were written; 0: never. */
    uint64_t fail_after;
    /* NULL: src is read as the worker. Else src is opened and listed with this account's file-system
     * identity (fs_as.h): the rank's, when it runs as another account — what the rank could not read
     * is not copied. The copy is always written as the worker. */
    const tide_fs_account_t *src_as;
} tide_flush_copy_t;

typedef struct tide_flush_result {
    /* dest_dir/BASENAME, where the copy now is; freed by tide_flush_result_clear. */
    char *path;
    /* Bytes copied (a directory: the sum over its files). */
    uint64_t bytes;
    /* Lowercase hex: of the file; of a directory, the SHA-256 of its manifest, the lines
     * "HEX  NAME\n" of its files sorted by name (what `sha256sum` prints). */
    char sha256[65];
    /* 1 for a file; for a directory, how many it held. */
    uint32_t files;
} tide_flush_result_t;

/* Copies req->src to dest_dir/BASENAME (BASENAME: the last component of src) through a temporary
 * name in dest_dir, as the worker's alone (files 0600, the directories it creates 0700: other local
 * users read no job's checkpoint): the data is hashed while it is copied, compared with expect_sha256 when given,
 * fsynced, renamed into place atomically (an existing copy of the same name is replaced), and
 * dest_dir (and every directory it had to create) is fsynced. Returns 0 with *res filled, or -errno
 * with err naming the path and the reason (-EBADMSG: the checksum differs from the trainer's) and
 * *res zeroed; on failure nothing exists under the final name that was not there before and no
 * temporary file or directory is left behind — except when only the last fsync of the directories
 * failed: then the copy is in place but may not survive a crash (a retry replaces it). */
int tide_flush_copy(const tide_flush_copy_t *req, tide_flush_result_t *res, tide_error_t *err);
/* Frees what a result holds and zeroes it. NULL is fine. */
void tide_flush_result_clear(tide_flush_result_t *res);
/* Lowers the calling thread's I/O priority to the idle class and its CPU priority to nice 19,
 * saving the previous values in *saved; tide_flush_priority_restore puts them back as far as the
 * kernel allows (an unprivileged thread cannot lower its nice value again). Failures (EPERM) are
 * ignored. */
typedef struct tide_flush_priority {
    int ioprio; /* -1: unknown */
    int nice;
    bool have_nice;
} tide_flush_priority_t;
void tide_flush_priority_lower(tide_flush_priority_t *saved);
void tide_flush_priority_restore(const tide_flush_priority_t *saved);

/* --- the flusher --- */

typedef struct tide_flusher tide_flusher_t;

typedef struct tide_flusher_ops {
    /* Queue msg (a FlushDone, borrowed for the call) on the scheduler stream. Returns 0, or -errno
     * when there is no welcomed stream: the answer is then kept and offered again by
     * tide_flusher_resend. */
    int (*send)(void *ud, const Tide__V1__WorkerMessage *msg);
} tide_flusher_ops_t;

typedef struct tide_flusher_config {
    const char *durable_dir; /* the worker's --ckpt-durable (absolute): overrides the scheduler's
                                FlushCheckpoint.durable_dir; NULL: use the scheduler's; copied */
    const char *default_workdir; /* relative checkpoint paths resolve against the rank's workdir,
                                    else this (the worker's data dir); copied */
    uint64_t fail_after;         /* tests: passed to every copy (tide_flush_copy_t.fail_after) */
    const char *hot_dir;         /* the worker's hot tier (--ckpt-hot); NULL: none. A checkpoint reported in its
                                    layout (HOT/JOB/step-S/rank-R) is copied as that whole rank directory, its
                                    manifest included, to DIR/JOB/step-S/rank-R/: the cold tier a restore can read */
} tide_flusher_config_t;

/* Creates a flusher on loop. ops copied, ud borrowed. Caller frees with tide_flusher_free. */
void tide_flusher_new(struct uv_loop_s *loop, const tide_flusher_config_t *cfg,
                      const tide_flusher_ops_t *ops, void *ud, tide_flusher_t **out);
/* Stops: copies that have not started are cancelled, a running one is asked to stop (its temporary
 * file is removed), nothing is sent any more, and the memory goes once the last copy ended (run the
 * loop afterwards). NULL is fine. */
void tide_flusher_free(tide_flusher_t *f);
/* Rank (job, generation, rank) was started here in workdir (absolute; NULL or "": the default). */
void tide_flusher_rank_started(tide_flusher_t *f, const char *job_id, int32_t generation,
                               int32_t rank, const char *workdir);
/* The rank reported a checkpoint of step (CheckpointSaved: path may be "", sha256 may be ""). The
 * newest few per rank are kept. as: NULL, or the rank's account when it runs as another (the copy
 * then reads path as the account: tide_flush_copy_t.src_as). Everything borrowed. */
void tide_flusher_saved(tide_flusher_t *f, const char *job_id, int32_t generation, int32_t rank,
                        int64_t step, const char *path, uint64_t bytes, const char *sha256,
                        const tide_fs_account_t *as);
/* A FlushCheckpoint that passed the epoch check (borrowed). Answers with FlushDone, now (bad
 * request, nothing to copy) or when its copy ends. */
void tide_flusher_request(tide_flusher_t *f, const Tide__V1__FlushCheckpoint *req);
/* The stream was welcomed again: sends the answers that could not be sent before. */
void tide_flusher_resend(tide_flusher_t *f);
/* Copies running or queued. */
size_t tide_flusher_busy(const tide_flusher_t *f);

#endif

/* The worker's data dir (docs/worker.md, "Data dir"): the highest epoch seen, one record per
 * running rank, and the ranks' log files.
 *
 *   DATA/epoch                    highest SchedulerMessage.epoch seen (decimal)
 *   DATA/boot                     this worker's last WorkerHello.boot_id (decimal)
 *   DATA/ranks/JOB.GEN.RANK       "pid P / pgid G / start_time T" of a running rank's exec helper
 *   DATA/logs/JOB/gGEN.rankR.log  stdout+stderr of that rank
 *
 * Job ids must pass tide_worker_job_id_valid before they name a path. All functions return 0 or
 * -errno and fill err; strings returned are the caller's to free. */
#ifndef TIDE_WORKER_DATADIR_H
#define TIDE_WORKER_DATADIR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

/* Creates DIR (parents as needed, DIR itself mode 0700), DIR/ranks and DIR/logs. */
int tide_worker_datadir_prepare(const char *dir, tide_error_t *err);

/* The hot tier HOT (NULL or "": none): created when missing (parents as needed, HOT 0700), then HOT and,
 * in the default layout (/dev/shm/tide-UID/ID), its tide-UID parent must be directories (not links) of
 * the worker's own euid that nobody else may write: else -EPERM with err saying which and why (a local
 * user who made them first could redirect every root write into the hot tier). 0 or -errno. */
int tide_worker_hot_dir_prepare(const char *hot, tide_error_t *err);

/* Reads DIR/epoch; a missing file reads as 0. */
int tide_worker_epoch_load(const char *dir, uint64_t *out, tide_error_t *err);
/* Replaces DIR/epoch atomically (write, fsync, rename). */
int tide_worker_epoch_save(const char *dir, uint64_t epoch, tide_error_t *err);

/* The boot_id of a starting agent: max(DIR/boot + 1, wall_ms), saved back to DIR/boot before it is used,
 * so each start's id is above the previous one's (and, with a lost data dir, above any earlier start's
 * unless the wall clock went back). A missing file reads as 0. */
int tide_worker_boot_next(const char *dir, int64_t wall_ms, uint64_t *out, tide_error_t *err);

/* Where a rank's output goes. Caller frees. */
char *tide_worker_log_path(const char *dir, const char *job_id, int32_t generation, int32_t rank);
/* DIR/logs/JOB (the directory of that job's logs). Caller frees. */
char *tide_worker_log_dir(const char *dir, const char *job_id);
/* Creates DIR/logs and DIR/logs/JOB (mode 0700) if missing. Returns 0, or -errno with err naming
 * the directory. */
int tide_worker_log_dir_make(const char *dir, const char *job_id, tide_error_t *err);

/* A running rank's process: the exec helper, which leads its own process group. */
typedef struct tide_worker_record {
    pid_t pid;
    pid_t pgid;
    uint64_t start_time; /* /proc/PID/stat field 22, clock ticks since boot */
} tide_worker_record_t;

/* Writes DIR/ranks/JOB.GEN.RANK atomically. */
int tide_worker_record_write(const char *dir, const char *job_id, int32_t generation, int32_t rank,
                             const tide_worker_record_t *rec, tide_error_t *err);
/* Removes it; a missing record is fine. */
int tide_worker_record_remove(const char *dir, const char *job_id, int32_t generation,
                              int32_t rank);

/* Reads /proc/PID/stat: process group, start time and state letter ('Z' for a zombie). Any out may
 * be NULL. -ENOENT when there is no such process. */
int tide_proc_stat(pid_t pid, pid_t *pgid, uint64_t *start_time, char *state);

typedef struct tide_worker_reap_stats {
    unsigned killed;  /* records whose process was still there: group SIGKILLed */
    unsigned stale;   /* process gone, or its pid reused (start time differs) */
    unsigned invalid; /* unreadable records */
} tide_worker_reap_stats_t;

/* At startup, before connecting: SIGKILLs the process group of every record whose pid still runs
 * with the recorded start time, waits up to wait_ms for those to be gone, and removes every record.
 * Nothing is reported for them: their generation is lost. */
int tide_worker_records_reap(const char *dir, int64_t wait_ms, tide_worker_reap_stats_t *stats,
                             tide_error_t *err);

#endif

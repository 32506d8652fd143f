/* Human-readable views of the scheduler's messages for tidectl's table output: tables of jobs and
 * workers, the describe view of one job, event lines, the cluster summary, the state-change lines of
 * `submit --wait`. Pure: the current time is passed in; text from the scheduler is sanitized so it
 * cannot drive the terminal. */
#ifndef TIDE_CLI_RENDER_H
#define TIDE_CLI_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "tide/v1/cluster_service.pb-c.h"
#include "tide/v1/job_service.pb-c.h"
#include "tide/v1/types.pb-c.h"

/* An enum value's name without its prefix ("JOB_STATE_RUNNING" -> "RUNNING"), or the number for values
 * this tidectl does not know. Returns buf. */
const char *tide_cli_enum_name(const ProtobufCEnumDescriptor *d, int value, const char *prefix, char *buf,
                               size_t size);

/* "2024-05-01 12:00:00" in local time (utc: in UTC with a trailing "Z"); "-" for 0. */
void tide_cli_time_format(int64_t ms, bool utc, char *buf, size_t size);

/* argv joined with spaces, each word quoted for a POSIX shell when it needs it. Caller frees. */
char *tide_cli_shell_join(char *const *argv, size_t n);

/* "137 (SIGKILL)" for exit codes that mean a signal (128+N), else the number. */
void tide_cli_exit_code_format(int32_t code, char *buf, size_t size);

/* "0 B", "512 B", "1.5 KiB", "20.0 MiB", "3.1 GiB" (powers of 1024, one decimal above bytes). */
void tide_cli_bytes_format(uint64_t bytes, char *buf, size_t size);
/* A rate with an SI prefix and three significant digits: "312T", "1.25G", "980". */
void tide_cli_si_format(double v, char *buf, size_t size);
/* A ratio (MFU, utilization) as a percentage with enough digits to tell small ones apart: "41.3%",
 * "0.012%". Returns buf. */
const char *tide_cli_ratio_format(double ratio, char *buf, size_t size);
/* The four dimensions (docs/metrics.md; bits of Utilization.known) as "gpu 45%, membw 97%, net -,
 * io 3% (bound by membw)"; "-" for unknown ones. Returns buf. */
const char *tide_cli_utilization_format(const double u[4], uint32_t known, char *buf, size_t size);
/* The busiest known of the four as "membw 97%"; "-" when none is known. Returns buf. */
const char *tide_cli_bound_format(const double u[4], uint32_t known, char *buf, size_t size);

/* What rank 0's trainer last reported through the SDK (borrowed from j), or NULL when it reported
 * nothing (no SDK, or no heartbeat carried it yet). */
const Tide__V1__TrainerProgress *tide_cli_job_progress(const Tide__V1__Job *j);

/* Table ID NAME OWNER STATE WORKERS GEN STEP AGE MESSAGE; OWNER "-" when the scheduler sent none;
 * WORKERS is "running/min" or "running/min-max"
 * ("2→4/2-8" while a resize from 2 to 4 workers runs), STEP rank 0's last reported training step ("-"
 * when it reported none). */
void tide_cli_render_jobs(Tide__V1__Job *const *jobs, size_t n, int64_t now_ms, tide_buf_t *out);

/* Table POS JOB NAME CLASS GPUS WAITING REASON of pending jobs in the order given (tidectl queue sorts
 * them by queue_position). POS is "-" for a job outside the queue (0); CLASS "LOW->NORMAL" for a job
 * raised by aging; GPUS "4" or "2..8"; WAITING the time since submission; REASON the job's message. */
void tide_cli_render_queue(Tide__V1__Job *const *jobs, size_t n, int64_t now_ms, tide_buf_t *out);

/* The describe view of one job: "Key:  value" lines, its size and resizes (tide_cli_render_size,
 * tide_cli_render_resizes), ranks in rank order with what their trainers report (STEP, TRAINER phase,
 * STEP-TIME, FLOP/S; "-" for ranks without the SDK), the last checkpoint and a CheckpointJob request in
 * flight; and the policy state when there is any (docs/policies.md): the class aging raised it to,
 * placement constraints, the MFU target band against the MFU, preemptions, the durable checkpoint and
 * the flush of the newest one ("held since 12:03 (MFU 71% >= 30%)", "copying"). */
void tide_cli_render_job(const Tide__V1__Job *job, int64_t now_ms, bool utc, tide_buf_t *out);

/* Work stealing (render_tasks.c, docs/work-stealing.md). Whether the job's trainers use tasks. */
bool tide_cli_job_uses_tasks(const Tide__V1__Job *j);
/* For `tidectl job` of a job that uses tasks: a "Stealing:" line (tasks stolen, steal requests,
 * committed, stragglers) and a "Tasks:" table RANK WORKER STEP-TIME TASK-TIME TASKS STOLEN GIVEN BUSY
 * SLOWNESS STATE. Nothing for other jobs. */
void tide_cli_render_tasks(const Tide__V1__Job *j, tide_buf_t *out);
/* For `tidectl top`: per job that uses tasks, one line (stolen, committed, the spread of the ranks'
 * busy share) and one per slow or straggling rank with its evidence. Nothing when no job uses tasks. */
void tide_cli_render_top_tasks(Tide__V1__Job *const *jobs, size_t n, int64_t now_ms, tide_buf_t *out);

/* Fault tolerance (render_recovery.c, docs/fault-tolerance.md). For `tidectl job`: the "Restarts:" line
 * (count, in a row, policy, a backoff in progress) when there is anything to say, the "Generations:" table
 * GEN WORKERS STARTED CAUSE RECOVERY LOST RESUMED ENDED, and the newest failure in words. */
void tide_cli_render_recovery(const Tide__V1__Job *j, int64_t now_ms, bool utc, tide_buf_t *out);

/* Elastic scaling (render_resize.c, docs/elastic.md). For `tidectl job`: the "Size:" line (the
 * current generation's workers, the bounds, the requested size or "elastic"). */
void tide_cli_render_size(const Tide__V1__Job *j, tide_buf_t *out);
/* For `tidectl job`: "Resize:" for a resize in progress ("2 -> 4 (requested) checkpointing since
 * 1.2s") or pending ("... pending: DETAIL"), and "Last resize:" for the newest completed one with its
 * phases, generation and the job's count of resizes. Nothing when neither is set. */
void tide_cli_render_resizes(const Tide__V1__Job *j, int64_t now_ms, tide_buf_t *out);
/* Whether r is a resize under way (checkpointing, stopping or starting); false for NULL, pending, done. */
bool tide_cli_resize_active(const Tide__V1__Resize *r);
/* A ResizeState in lower case without its prefix ("stopping"). Returns buf. */
const char *tide_cli_resize_state_word(int s, char *buf, size_t size);
/* The line `tidectl scale` prints for the Job ScaleJob returned: "job 7: scaling 2 -> 4 workers
 * (resizing: checkpointing)", "job 7: 4 workers requested; pending: DETAIL", "job 7: already 4
 * workers", "job 7: will start with at most 4 workers" (a pending job), or the elastic forms. */
void tide_cli_render_scale(const Tide__V1__Job *j, tide_buf_t *out);
/* The progress text of `scale --wait` (no newline; the progress line sanitizes and cuts it):
 * "job 7: resizing 2 -> 4: stopping 1.2s" or "job 7: resize to 4 pending 12.0s: DETAIL"; phase_s is how
 * long the resize has been in its current state as tidectl saw it. */
void tide_cli_render_resize_progress(const Tide__V1__Job *j, double phase_s, tide_buf_t *out);
/* "job 7: resized 2 -> 4 workers in 1.42 s (checkpoint 0.31 s, stop 0.40 s, start 0.71 s), generation 3"
 * from j->last_resize. */
void tide_cli_render_resized(const Tide__V1__Job *j, tide_buf_t *out);

/* Table ID NODE GPU DEVICE STATE JOB RANK CORDONED UTIL TEMP HEARTBEAT (age of the last one). */
void tide_cli_render_workers(Tide__V1__Worker *const *workers, size_t n, int64_t now_ms, tide_buf_t *out);

/* One line per event: time, type, job, worker, message ("-" for empty fields). */
void tide_cli_render_event(const Tide__V1__Event *ev, bool utc, tide_buf_t *out);

/* The cluster summary of `tidectl status`: scheduler, workers and jobs lines, MFU, utilization and
 * health when known, and the headroom reserve (spares + burst, the failure rate and whether it was
 * observed) with the free GPUs when the scheduler reports a reserve policy. */
void tide_cli_render_status(const Tide__V1__ClusterStatus *st, const char *scheduler, tide_buf_t *out);

/* One line for `submit --wait`: "job 17: RUNNING on node1/gpu0,node1/gpu1 (generation 1)",
 * "job 17: PENDING (waiting for 2 workers)", "job 17: FAILED: rank 1 exited with code 3". */
void tide_cli_render_job_change(const Tide__V1__Job *job, tide_buf_t *out);

#endif

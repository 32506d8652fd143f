/* The worker's decision core: what a tide-worker does with each scheduler message, rank exit,
 * stream change and shutdown request (docs/worker.md, "Stream protocol"). Pure C, no I/O: every
 * effect (send a message, spawn or stop a process, forget a record, persist the epoch) goes out
 * through tide_worker_core_ops_t, and randomness comes from a seed, so tests drive it without
 * sockets or processes. The libuv shell (agent.c) feeds it events and carries out the ops.
 *
 * Ranks are identified by (job_id, generation, rank); the core gives each one it starts an id
 * (never 0) that the shell uses for the process. Everything runs on one thread. */
#ifndef TIDE_WORKER_CORE_H
#define TIDE_WORKER_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "grpc_status.h"
#include "tide/v1/worker_service.pb-c.h"

typedef struct tide_worker_core tide_worker_core_t;

typedef struct tide_worker_label {
    const char *key;
    const char *value;
} tide_worker_label_t;

typedef struct tide_worker_core_config {
    /* Copied. What WorkerHello says about this worker. */
    const char *worker_id;
    const char *node;
    int32_t gpu_index;
    const char *device;
    double peak_flops;
    uint64_t memory_bytes;
    const tide_worker_label_t *labels; /* n_labels entries, copied */
    size_t n_labels;
    const char *address; /* advertised address */
    const char *launcher_address; /* HOST:PORT of the WorkerLauncher service; may be NULL */
    const char *agent_sock;       /* trainer socket path; may be NULL */
    const char *version;
    uint64_t max_epoch_seen; /* loaded from the data dir */
    uint32_t stop_grace_ms;  /* StopRank.grace_ms == 0 and shutdown use this */
    uint64_t seed;           /* reconnect jitter */
    uint64_t boot_id;        /* WorkerHello.boot_id (tide_worker_boot_next); this core counts the streams */
} tide_worker_core_config_t;

/* What a successful spawn reports. */
typedef struct tide_worker_spawned {
    int32_t pid;         /* the process group leader (the exec helper) */
    int32_t master_port; /* the MASTER_PORT the rank was given */
} tide_worker_spawned_t;

/* Effects. Pointers passed in are borrowed for the call only. */
typedef struct tide_worker_core_ops {
    /* Queue msg on the current stream. Returns 0, or -errno when it cannot be queued. */
    int (*send)(void *ud, const Tide__V1__WorkerMessage *msg);
    /* Start rank `id` (record written before returning). Returns 0 and fills *out, or -errno with a
     * reason in err ("spawn train.py: no such file or directory"); on failure there is no process
     * and rank_exited must not be called for id. */
    int (*spawn)(void *ud, uint64_t id, const Tide__V1__LaunchRank *launch,
                 tide_worker_spawned_t *out, tide_error_t *err);
    /* SIGTERM the rank's process group now, SIGKILL it after grace_ms (0: at once). May repeat. */
    void (*stop)(void *ud, uint64_t id, uint32_t grace_ms);
    /* The exit of rank id was reported (or the rank is dropped): remove its record. */
    void (*forget)(void *ud, uint64_t id, const char *job_id, int32_t generation, int32_t rank);
    /* The highest epoch seen went up: persist it. */
    void (*save_epoch)(void *ud, uint64_t epoch);
    /* A LogRequest that passed the epoch check (the shell streams the file). */
    void (*log_request)(void *ud, const Tide__V1__LogRequest *req);
    /* Welcome arrived: heartbeat every interval_ms from now on. */
    void (*welcomed)(void *ud, uint32_t interval_ms);
    /* The current stream is unusable (why): end it; stream_ended follows as usual. */
    void (*end_stream)(void *ud, const char *why);
    /* A TrainerCommand for a rank that runs here (relay it to the trainer). May be NULL. */
    void (*trainer_command)(void *ud, const Tide__V1__TrainerCommand *cmd);
    /* A FlushCheckpoint (docs/worker.md, "Durable checkpoint copies"): copy that rank's checkpoint
     * and answer with FlushDone through tide_worker_core_send. NULL: the core answers ok=false at
     * once. */
    void (*flush)(void *ud, const Tide__V1__FlushCheckpoint *req);
    /* A ReleaseTasks or GiveTasks (docs/work-stealing.md; msg borrowed) for a rank that runs here:
     * the callee answers a ReleaseTasks with TasksReleased through tide_worker_core_send. Returns
     * 0, or -ENOENT when it holds no tasks of that rank (the core then answers a ReleaseTasks with
     * no tasks). NULL: every ReleaseTasks gets no tasks and GiveTasks are ignored. */
    int (*tasks)(void *ud, const Tide__V1__SchedulerMessage *msg);
    /* A ForgetCheckpoints (docs/fault-tolerance.md, "Checkpoint tiers"): the job ended and no rank of it
     * runs here (any more): drop its hot copies and the mirrors kept for it, off the loop. job_id is a
     * valid job id (tide_worker_job_id_valid). NULL: the message is ignored. */
    void (*forget_checkpoints)(void *ud, const char *job_id);
} tide_worker_core_ops_t;

/* What to do after a stream ended. */
typedef enum tide_worker_next {
    TIDE_WORKER_RECONNECT = 0, /* connect again after *delay_ms */
    TIDE_WORKER_FATAL = 1,     /* it will not fix itself: log and exit 1 */
    TIDE_WORKER_STAY_DOWN = 2, /* shutting down: do not reconnect */
} tide_worker_next_t;

/* Creates a core with no stream and no ranks; ops is copied, ud borrowed. Caller frees. */
void tide_worker_core_new(const tide_worker_core_config_t *cfg, const tide_worker_core_ops_t *ops,
                          void *ud, tide_worker_core_t **out);
/* NULL is fine. Calls no op. */
void tide_worker_core_free(tide_worker_core_t *c);

/* A new stream to the scheduler is open: sends WorkerHello (running ranks and unreported exits). */
void tide_worker_core_stream_opened(tide_worker_core_t *c);
/* The stream ended with a gRPC status (message may be NULL). Returns the decision and, for
 * RECONNECT, the backoff delay (100 ms doubling to 5 s, jittered to [d/2, d]; reset by Welcome). */
tide_worker_next_t tide_worker_core_stream_ended(tide_worker_core_t *c, tide_grpc_code_t code,
                                                 const char *message, int64_t *delay_ms);

/* One SchedulerMessage (borrowed). Returns 0 when acted on; -ESTALE when its epoch is below the
 * highest seen (ignored); -EPROTO when malformed; -ENOENT for a StopRank, TrainerCommand,
 * ReleaseTasks or GiveTasks of a rank that does not run here (a ReleaseTasks is answered with no
 * tasks, so the scheduler moves on);
 * -EINVAL for a LaunchRank that fails validation (answered with RankExited 127); -ENOTSUP for a
 * FlushCheckpoint without a flush op (answered with FlushDone ok=false) and for ReleaseTasks /
 * GiveTasks without a tasks op (ReleaseTasks answered with no tasks). A ForgetCheckpoints with an invalid job
 * id is -EINVAL (ignored); while a rank of that job runs here it is deferred (0, err says so) and
 * forget_checkpoints fires once the last one exited. err says why for the log. */
int tide_worker_core_handle(tide_worker_core_t *c, const Tide__V1__SchedulerMessage *msg,
                            tide_error_t *err);
/* Same, from the wire bytes; -EPROTO (and end_stream) when they do not decode. */
int tide_worker_core_handle_bytes(tide_worker_core_t *c, const uint8_t *data, size_t len,
                                  tide_error_t *err);

/* Heartbeat tick: sends Heartbeat{seq, telemetry, progress} when welcomed (everything borrowed).
 * Returns 0, or -ENOTCONN. */
int tide_worker_core_heartbeat(tide_worker_core_t *c, const Tide__V1__Telemetry *telemetry,
                               Tide__V1__RankProgress **progress, size_t n_progress);
/* Sends a message that is only worth sending on a live stream (a checkpoint report) when
 * welcomed. Returns 0, -ENOTCONN, or the send op's error. */
int tide_worker_core_send(tide_worker_core_t *c, const Tide__V1__WorkerMessage *msg);
/* Rank id's process ended (libuv exit_cb values). Reports it now when welcomed, else at the next
 * hello. Unknown ids are ignored. */
void tide_worker_core_rank_exited(tide_worker_core_t *c, uint64_t id, int64_t exit_status,
                                  int term_signal);
/* SIGTERM/SIGINT: sends WorkerGoodbye{reason} when welcomed and stops every running rank with the
 * default grace (force: grace 0). New LaunchRanks are refused. May be called again (to force). */
void tide_worker_core_shutdown(tide_worker_core_t *c, const char *reason, bool force);

/* Queries (pure reads). */
bool tide_worker_core_welcomed(const tide_worker_core_t *c);
bool tide_worker_core_shutting_down(const tide_worker_core_t *c);
size_t tide_worker_core_running(const tide_worker_core_t *c);
/* Exits not reported yet. */
size_t tide_worker_core_unreported(const tide_worker_core_t *c);
bool tide_worker_core_rank_running(const tide_worker_core_t *c, const char *job_id,
                                   int32_t generation, int32_t rank);
/* Whether any rank of job_id (any generation) runs here, stopping ones included. O(ranks). */
bool tide_worker_core_job_running(const tide_worker_core_t *c, const char *job_id);
/* The ids of the jobs with a running rank here (duplicates possible): up to max of them into ids
 * (borrowed: valid until the next event the core handles). Returns how many there are in all. */
size_t tide_worker_core_running_jobs(const tide_worker_core_t *c, const char **ids, size_t max);
uint64_t tide_worker_core_max_epoch(const tide_worker_core_t *c);

/* Exit code as reported: 0..255, or 128+N for signal N. */
int32_t tide_worker_exit_code(int64_t exit_status, int term_signal);
/* Whether s may be used as a job id (and so as a file name): 1..128 of [A-Za-z0-9_.-], no leading
 * dot. */
bool tide_worker_job_id_valid(const char *s);

#endif

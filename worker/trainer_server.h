/* The worker's trainer socket: a Unix stream socket in the data dir (TIDE_AGENT_SOCK) speaking the
 * newline-delimited JSON of docs/trainer-api.md. It ties connections to the ranks this worker runs
 * (by their hello), keeps each rank's progress for the heartbeats, relays tide's commands
 * (checkpoint_now, stop_after_step), hands checkpoint reports to the agent, and serves the ranks'
 * task deques (docs/work-stealing.md: `tasks`, `next_task`, ReleaseTasks, GiveTasks; task_deque.h
 * keeps the state, this file the connections). Nothing a trainer
 * sends can crash or block the worker: lines are bounded, bad ones get an error reply and are
 * counted, and a connection whose replies back up past 64 KiB is closed. Loop thread only. */
#ifndef TIDE_WORKER_TRAINER_SERVER_H
#define TIDE_WORKER_TRAINER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "tide/v1/worker_service.pb-c.h"
#include "trainer_proto.h"

struct uv_loop_s;

typedef struct tide_trainer_server tide_trainer_server_t;
/* A connection of tide-rank-exec (an MPI rank's supervisor, docs/mpi.md). */
typedef struct tide_trainer_conn tide_trainer_conn_t;

typedef struct tide_trainer_server_ops {
    /* A rank reported a checkpoint (validated; m borrowed for the call). */
    void (*checkpoint)(void *ud, const char *job_id, int32_t generation, int32_t rank,
                       const tide_trainer_msg_t *m);
    /* An attach from tide-rank-exec (m borrowed). The callee answers with
     * tide_trainer_conn_send (now or later) or closes c. NULL: attach is refused. */
    void (*attach)(void *ud, tide_trainer_conn_t *c, const tide_trainer_msg_t *m);
    /* An attached connection reported its command's exit. */
    void (*attach_exited)(void *ud, tide_trainer_conn_t *c, int64_t status, int64_t signal);
    /* An attached (or attaching) connection closed; c is gone after the call. */
    void (*attach_closed)(void *ud, tide_trainer_conn_t *c);
    /* Sends a WorkerMessage of the task deques (TasksDeclared, TasksDone, StealRequest,
     * TasksReleased; borrowed) to the scheduler: 0, or -errno when there is no welcomed stream (the
     * agent passes tide_worker_core_send). NULL: no scheduler, so no stealing (an empty deque
     * answers no_task). */
    int (*send)(void *ud, const Tide__V1__WorkerMessage *msg);
    /* A rank asked where to restore from (docs/trainer-api.md, "Checkpoint tiers"): resume_step is
     * what tide_trainer_server_rank_resume set (-1: any). The callee answers, now or later, with
     * tide_trainer_server_restore_reply(token). NULL: restore is refused (unknown_op). */
    void (*restore)(void *ud, uint64_t token, const char *job_id, int32_t generation,
                    int32_t rank, int64_t resume_step);
} tide_trainer_server_ops_t;

typedef struct tide_trainer_server_config {
    const char *path;      /* socket path; a stale file there is replaced; copied */
    const char *worker_id; /* for welcome; copied */
    size_t max_conns;      /* 0: 64; more connections are accepted and closed at once */
    double peak_flops;     /* this worker's GPU peak FLOP/s: a step claiming more is refused; 0: none */
} tide_trainer_server_config_t;

/* Binds and listens (mode 0600). Returns 0, or -errno with err naming the path ("trainer socket
 * DIR/agent.sock: path longer than 107 bytes"). ops copied, ud borrowed. */
int tide_trainer_server_new(struct uv_loop_s *loop, const tide_trainer_server_config_t *cfg,
                            const tide_trainer_server_ops_t *ops, void *ud,
                            tide_trainer_server_t **out, tide_error_t *err);
/* Closes every connection and the socket (the file is removed); frees once the handles closed
 * (run the loop afterwards). NULL is fine. */
void tide_trainer_server_free(tide_trainer_server_t *s);
const char *tide_trainer_server_path(const tide_trainer_server_t *s);

/* Rank `id` (the worker core's id) runs here as (job, generation, rank), as Unix user uid: from now on
 * its hello is accepted from a connection whose peer (SO_PEERCRED) is uid or root — never from another
 * account's process, which could otherwise speak for it (its reports decide what the worker reads as
 * that account). */
void tide_trainer_server_rank_add(tide_trainer_server_t *s, uint64_t id, const char *job_id,
                                  int32_t generation, int32_t rank, uid_t uid);
/* The newest step rank id may restore (LaunchRank.resume_step; -1: any, the default). */
void tide_trainer_server_rank_resume(tide_trainer_server_t *s, uint64_t id, int64_t resume_step);
/* Sends the answer (len bytes, whole lines) to the restore request `token`. Returns 0, or -ENOENT
 * when its connection is gone (nothing sent). */
int tide_trainer_server_restore_reply(tide_trainer_server_t *s, uint64_t token, const void *data,
                                      size_t len);
/* Rank id ended: its connections are closed and its state dropped. Unknown ids are ignored. */
void tide_trainer_server_rank_remove(tide_trainer_server_t *s, uint64_t id);
/* Whether rank id said hello (is using the SDK). */
bool tide_trainer_server_rank_sdk(const tide_trainer_server_t *s, uint64_t id);
/* Whether rank id has task completions the scheduler was not sent yet (no stream when they were
 * due; the next welcome sends them): its exit is reported only after them, or the scheduler would
 * run those tasks again (docs/worker.md, "Ranks"). False for an unknown id. */
bool tide_trainer_server_rank_unsent(const tide_trainer_server_t *s, uint64_t id);
/* Asks rank id to stop after its next step (last reported + 1, or 0). Returns 0 when sent to at
 * least one connection, -ENOTCONN when the rank has none, -ENOENT for an unknown id. */
int tide_trainer_server_stop_after_step(tide_trainer_server_t *s, uint64_t id);
/* Relays checkpoint_now to the rank (job, generation, rank): sent now, or right after its next
 * welcome. Returns 0, or -ENOENT when no such rank runs here. */
int tide_trainer_server_checkpoint_now(tide_trainer_server_t *s, const char *job_id,
                                       int32_t generation, int32_t rank, uint64_t request_id,
                                       int64_t deadline_unix_ms);
/* Points out[0..] at the progress of the ranks that used the SDK (at most max), for a Heartbeat,
 * with their achieved FLOP/s and MFU as of now_ms (docs/metrics.md) and their task figures (now_ms
 * monotonic, like uv_hrtime); the structs are owned by the
 * server and valid until the next call that changes ranks. Returns how many. */
size_t tide_trainer_server_progress(tide_trainer_server_t *s, int64_t now_ms,
                                    Tide__V1__RankProgress **out, size_t max);
/* A ReleaseTasks or GiveTasks from the scheduler (borrowed; docs/work-stealing.md): a release is
 * answered with TasksReleased through ops.send, a give answers the waiting next_task. Returns 0, or
 * -ENOENT when no rank (job, generation, rank) runs here (nothing sent), -EINVAL for another
 * message. */
int tide_trainer_server_tasks(tide_trainer_server_t *s, const Tide__V1__SchedulerMessage *msg);
/* A Welcome arrived: sends again what the scheduler may have missed (declarations made while no
 * stream was up, completions, pending steal requests with their ids). */
void tide_trainer_server_tasks_welcome(tide_trainer_server_t *s);
/* Heartbeat tick: sends TasksDone for the completions not yet reported. */
void tide_trainer_server_tasks_flush(tide_trainer_server_t *s);
/* Attach connections. */
/* Queues len bytes (whole lines) on c; closes it when its backlog is too large. */
void tide_trainer_conn_send(tide_trainer_conn_t *c, const void *data, size_t len);
/* Closes c (attach_closed follows at once). */
void tide_trainer_conn_close(tide_trainer_conn_t *c);
void tide_trainer_conn_set_data(tide_trainer_conn_t *c, void *data);
void *tide_trainer_conn_data(const tide_trainer_conn_t *c);
/* The peer's pid from the kernel (SO_PEERCRED), or -1. */
int32_t tide_trainer_conn_pid(const tide_trainer_conn_t *c);

/* Lines rejected since start (all ranks and unbound connections). */
uint64_t tide_trainer_server_rejected(const tide_trainer_server_t *s);
/* Connections open now (closing ones excluded). */
size_t tide_trainer_server_conns(const tide_trainer_server_t *s);

#endif

/* The scheduler shell: the daemon's part of the loop, modelled on scheduler/daemon/daemon.c. Each turn
 * it feeds the core what the network delivered and what clients asked, ticks the core's timers, then
 * group-commits the turn's PERSIST actions to the fake store; only after the commit are replies,
 * worker messages and stream closes released (the daemon's outbox), so a client is acknowledged only
 * for what the store has. A crash loses the open batch and the outbox; a restart rebuilds the core
 * from the store. */
#ifndef TIDE_DST_SHELL_H
#define TIDE_DST_SHELL_H

#include "core.h"
#include "core_harness.h"
#include "dst.h"
#include "store.h"
#include "world.h"

typedef enum shell_op { OP_SUBMIT, OP_CANCEL, OP_CORDON, OP_CHECKPOINT, OP_SCALE, OP_DRAIN } shell_op_t;

/* One core call's events, for the checks that look at a call as a whole. */
#define SHELL_EVENTS_MAX 256
typedef struct shell_event {
    const char *type;
    char job[DST_ID_MAX];
    char worker[32];
    char text[96];
} shell_event_t;

typedef struct out_item {
    enum { OUT_MSG, OUT_CLOSE, OUT_REPLY } kind;
    uint64_t stream;
    net_msg_t *msg;
    shell_op_t op;
    char job[DST_ID_MAX];
    int rc;
    int32_t arg; /* OP_SCALE: the target it set (0: elastic) */
    struct out_item *next;
} out_item_t;

typedef enum shell_crash { CRASH_NONE, CRASH_LOSSY, CRASH_CLEAN } shell_crash_t;

struct shell {
    tide_core_config_t cfg;
    tide_core_t *core;
    h_t h; /* for h_check_invariants */
    bool up;
    int64_t up_at;
    uint64_t epoch; /* the leader epoch: one more per start */
    store_batch_t batch;
    char (*dirty)[DST_ID_MAX]; /* jobs whose record is written at commit */
    size_t n_dirty, cap_dirty;
    out_item_t *out_head, *out_tail;
    struct {
        tide_worker_t *w;
        uint64_t conn;
    } closes[W_MAX_AGENTS * 4]; /* streams the shell closed: tell the core next turn */
    size_t n_closes;
    shell_crash_t crash;
    shell_event_t ev[SHELL_EVENTS_MAX];
    size_t n_ev;
    uint64_t starts;
    uint64_t crashes;
};

/* Creates the shell and its first core (pools named by name/dedicated, n_pools of them). */
shell_t *shell_new(dst_t *d, const tide_core_config_t *cfg, const char *const *pools,
                   const int32_t *dedicated, int n_pools);
void shell_free(shell_t *sh);
bool shell_up(const dst_t *d);

/* Hands the core d->now (before client calls made outside a turn). */
void shell_set_time(dst_t *d);
/* One loop turn at d->now: stream closes, messages delivered by now, node-failure reports, the core's
 * timers, then the group commit and the release of the outbox; a requested crash happens last. A
 * stopped scheduler starts again (from the store) once its time has come. */
void shell_turn(dst_t *d);
/* The earliest time the shell has something to do, or INT64_MAX. */
int64_t shell_next_due(dst_t *d);
/* Crashes the scheduler at the end of this turn: lossy drops the turn's open batch. */
void shell_crash_at_turn_end(dst_t *d, bool lossy);

/* Client calls, answered once the turn commits. Each returns the core's rc (-ENOTCONN when down). */
int shell_submit(dst_t *d, const tide_job_spec_t *spec, wjob_t *behaviour, char *id_out, size_t len);
int shell_cancel(dst_t *d, const char *id);
int shell_cordon(dst_t *d, const char *worker_id, bool cordon);
int shell_checkpoint(dst_t *d, const char *id, int64_t deadline_ms);
/* JobService.ScaleJob: tide_core_job_scale(id, workers, elastic). The call is checked as a whole
 * (chk_on_scale: what it returned against the job before it, and that a refusal changed nothing); the
 * reply against the store once it is committed (chk_on_reply). */
int shell_scale(dst_t *d, const char *id, int32_t workers, bool elastic);
/* ClusterService.DrainWorker: tide_core_worker_drain(worker_id, reason). The call is checked as a whole
 * (chk_on_drain: -ENOENT exactly for an unknown worker, and then nothing changes; the worker is cordoned;
 * its job moves off it) and the worker is watched from then on until a client uncordons it. */
int shell_drain(dst_t *d, const char *worker_id, const char *reason);
/* Job-level telemetry from the simulator's side: every running job's MFU. */
void shell_job_telemetry(dst_t *d);
/* A job's load phase from the simulator's side (tide_core_job_load_phase), for a job whose trainers
 * report no progress; SDK jobs report it in their ranks' progress (rank 0's counts). */
void shell_load_phase(dst_t *d, const char *id, bool high);

#endif

/* The rank launcher: starts ranks through the exec helper (tide-exec) with uv_spawn, stops them
 * (SIGTERM to the process group, SIGKILL after a grace period) and reports their exits. It builds
 * the rank's environment, working directory and log file, picks rank 0's MASTER_PORT and writes the
 * rank record before a spawn returns. docs/worker.md, "Ranks". Loop thread only. */
#ifndef TIDE_WORKER_LAUNCHER_H
#define TIDE_WORKER_LAUNCHER_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "error.h"
#include "run_as.h"
#include "tide/v1/worker_service.pb-c.h"

struct uv_loop_s;

typedef struct tide_launcher tide_launcher_t;

/* A rank's exec helper exited (libuv's exit_status and term_signal). Not called for failed spawns.
 */
typedef void (*tide_launcher_exit_cb)(uint64_t id, int64_t exit_status, int term_signal, void *ud);

typedef struct tide_launcher_config {
    const char *exec_helper; /* path of tide-exec; copied */
    const char *data_dir;    /* logs, records, default workdir; copied */
    const char *worker_id;   /* TIDE_WORKER_ID; copied */
    const char
        *advertise;    /* MASTER_ADDR when LaunchRank has none; bound to pick MASTER_PORT; copied */
    int32_t gpu_index; /* CUDA_VISIBLE_DEVICES when LaunchRank lists no node_gpu_indexes */
    const char *agent_sock; /* TIDE_AGENT_SOCK (the trainer socket); NULL: not set; copied */
    const char *ckpt_hot;   /* the hot checkpoint tier: ranks get TIDE_CKPT_DIR=ckpt_hot/JOB
                               (created); NULL: not set; copied */
    uint32_t report_timeout_ms; /* wait for the helper's "ok"; 0: 5000 */
    /* Who ranks run as (LaunchRank.run_as; run_as.h). refuse_root_jobs: a worker running as root
     * refuses ranks that would run as root (tide-worker sets it unless --allow-root-jobs; false
     * lets tests run ranks as root). node names this node in refusals; lookup NULL: the system's. */
    bool refuse_root_jobs;
    const char *node; /* copied; NULL: "this node" */
    tide_run_as_lookup_fn lookup;
    void *lookup_ud;
    tide_launcher_exit_cb on_exit;
    void *ud;
} tide_launcher_config_t;

/* Creates a launcher on loop (borrowed). Caller frees with tide_launcher_free. */
void tide_launcher_new(struct uv_loop_s *loop, const tide_launcher_config_t *cfg,
                       tide_launcher_t **out);
/* SIGKILLs the groups of ranks still running; their handles close once they exited (run the loop
 * afterwards until it is empty). on_exit is not called any more. NULL is fine. */
void tide_launcher_free(tide_launcher_t *l);

/* How a spawn differs from a plain rank's (MPI: mpirun for rank 0, an orted for StartDaemon). */
typedef struct tide_launch_override {
    char *const *command; /* replaces launch->command; n_command entries */
    size_t n_command;
    const char *const *env; /* "K=V" strings set after tide's variables (they win); n_env */
    size_t n_env;
    const char *log_path;  /* NULL: the rank's log */
    int32_t record_rank;   /* names the rank record in place of launch->rank */
    bool no_master_port;   /* never pick a MASTER_PORT */
    bool mpi_runtime;      /* mpirun or an MPI daemon: the `slow` perturbation leaves it alone (its
                              ranks are slowed through their tide-rank-exec) */
} tide_launch_override_t;

/* Decides who launch (borrowed) runs as, with the launcher's rules, and when it switches to another
 * account makes what the worker hands the rank usable by it: the data dir, logs/ and logs/JOB
 * traversable (0711), the rank's log created and owned by it, the trainer socket owned by it, the
 * hot tier traversable and TIDE_CKPT_DIR (HOT/JOB) owned by it. Returns 0 with *ra filled (free
 * with tide_run_as_clear), or -errno with the refusal in err (nothing changed, *ra zeroed). Every
 * spawn does this itself; MPI ranks without a process here call it (mpi.c). */
int tide_launcher_run_as(tide_launcher_t *l, const Tide__V1__LaunchRank *launch,
                         tide_run_as_t *ra, tide_error_t *err);

/* Which account launch (borrowed) runs as, by the same rules, without changing anything: 1 when
 * another account than the worker's (*uid, *gid: its uid and primary group), 0 when the worker's own,
 * or -errno when the rank would be refused (err says why). For a rank that already started. */
int tide_launcher_account(tide_launcher_t *l, const Tide__V1__LaunchRank *launch, uid_t *uid,
                          gid_t *gid, tide_error_t *err);

/* Starts rank `id` as `launch` (borrowed; validated by the core) describes. Returns 0 and fills
 * *out once the command was exec'd and its record written, or -errno with the reason in err (then
 * nothing runs and on_exit is never called for id). Blocks for the helper's report (a fork+exec).
 * A burst rank gets no MASTER_PORT (out->master_port 0). */
int tide_launcher_spawn(tide_launcher_t *l, uint64_t id, const Tide__V1__LaunchRank *launch,
                        tide_worker_spawned_t *out, tide_error_t *err);
/* The same with ov (borrowed; NULL: none) applied. */
int tide_launcher_spawn_ex(tide_launcher_t *l, uint64_t id, const Tide__V1__LaunchRank *launch,
                           const tide_launch_override_t *ov, tide_worker_spawned_t *out,
                           tide_error_t *err);
/* The variables a rank gets besides the worker's own environment: the job's env map, then tide's
 * (RANK, ..., TIDE_*, CUDA_VISIBLE_DEVICES; a burst rank gets TIDE_BURST, TIDE_BURST_INDEX and no
 * RANK, WORLD_SIZE, LOCAL_*, GROUP_*, ROLE_*, MASTER_*, TORCHELASTIC_*; TIDE_JOB_OWNER; HOME, USER
 * and LOGNAME of the account when it runs as another one), as "K=V" strings. *n is set; free with
 * tide_launcher_env_free. */
char **tide_launcher_rank_env(const tide_launcher_t *l, const Tide__V1__LaunchRank *launch,
                              int master_port, size_t *n);
void tide_launcher_env_free(char **env, size_t n);
/* SIGTERM to rank id's process group now, SIGKILL after grace_ms (0: now). A repeat can only
 * shorten the grace. Returns 0 or -ENOENT when id is not running. */
int tide_launcher_stop(tide_launcher_t *l, uint64_t id, uint32_t grace_ms);
/* The soft stop of a rank that uses the trainer SDK (it was asked to stop after a step): SIGTERM to
 * its group after term_after_ms, SIGKILL grace_ms later. Never delays a stop already under way.
 * Returns 0 or -ENOENT. */
int tide_launcher_stop_soft(tide_launcher_t *l, uint64_t id, uint32_t term_after_ms,
                            uint32_t grace_ms);
/* Removes the record of a rank whose exit was reported. */
void tide_launcher_forget(tide_launcher_t *l, const char *job_id, int32_t generation, int32_t rank);
/* Ranks started and not yet exited. */
size_t tide_launcher_running(const tide_launcher_t *l);
/* Sends sig to the process group of every rank the launcher runs — not mpirun or MPI daemons, whose
 * ranks are reached through their tide-rank-exec: the `slow` perturbation's SIGSTOP/SIGCONT duty
 * cycle. A stopped MPI runtime misses its own teardown (a daemon that does not answer is taken for
 * lost and its ranks are killed), and it is not what a slow GPU slows down. */
void tide_launcher_signal_all(tide_launcher_t *l, int sig);
/* The pids of the running ranks' helpers (each the leader of its rank's process group; the rank is
 * its child), at most max of them into out. Returns how many. */
size_t tide_launcher_pids(const tide_launcher_t *l, int32_t *out, size_t max);

#endif

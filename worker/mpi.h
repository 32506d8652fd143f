/* MPI jobs on this worker (docs/mpi.md): rank 0's worker runs mpirun with tide-mpi-shim as its rsh
 * agent; the shim asks one worker per node (WorkerLauncher/StartDaemon) to start the Open MPI
 * daemon; each MPI rank runs under tide-rank-exec, which attaches to the worker of its local rank
 * over the trainer socket, takes that worker's environment and log, and reports its exit. Ranks
 * other than 0 are "virtual" here: no process of the worker's own, just the attached rank-exec.
 * Every StartDaemon and attach must carry the generation's credential (LaunchRank.mpi_credential).
 * Loop thread only. */
#ifndef TIDE_WORKER_MPI_H
#define TIDE_WORKER_MPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "error.h"
#include "launcher.h"
#include "rpc_server.h"
#include "tide/v1/worker_service.pb-c.h"
#include "trainer_server.h"

struct uv_loop_s;

typedef struct tide_worker_mpi tide_worker_mpi_t;

/* A virtual rank ended (libuv exit_cb values: status, or 0 and a signal). */
typedef void (*tide_worker_mpi_exit_cb)(void *ud, uint64_t id, int64_t exit_status,
                                        int term_signal);

typedef struct tide_worker_mpi_config {
    const char *data_dir;  /* copied */
    const char *worker_id; /* copied */
    const char *rank_exec; /* path of tide-rank-exec; copied */
    const char *shim;      /* path of tide-mpi-shim; copied */
    const char *mpirun;    /* NULL: "mpirun" from PATH ($TIDE_MPIRUN overrides); copied */
    uint32_t wait_ms;      /* how long an attach or StartDaemon waits for its LaunchRank; 0: 30000 */
    tide_launcher_t *launcher; /* borrowed */
    /* The worker's TLS files, handed to tide-mpi-shim as TIDE_TLS_CA / _CERT / _KEY (its StartDaemon calls
     * to peers' launchers are TLS then); NULL: none. Copied. */
    const char *tls_ca, *tls_cert, *tls_key;
    tide_worker_mpi_exit_cb on_exit;
    void *ud;
} tide_worker_mpi_config_t;

/* High bit of the launcher ids of daemons (orted), so they never collide with the core's rank ids. */
#define TIDE_WORKER_MPI_DAEMON_ID (1ULL << 63)

void tide_worker_mpi_new(struct uv_loop_s *loop, const tide_worker_mpi_config_t *cfg,
                         tide_worker_mpi_t **out);
/* Stops daemons, closes pending calls and attaches; frees once its timer closed (run the loop).
 * NULL is fine. */
void tide_worker_mpi_free(tide_worker_mpi_t *m);

/* The core's spawn for a LaunchRank whose launcher is MPI: rank 0 starts mpirun (a process of the
 * launcher), other ranks are registered and wait for their tide-rank-exec (out->pid is 0). Returns
 * 0, or -errno with err ("mpirun not found in PATH ..."). */
int tide_worker_mpi_spawn(tide_worker_mpi_t *m, uint64_t id, const Tide__V1__LaunchRank *launch,
                          tide_worker_spawned_t *out, tide_error_t *err);
/* Whether id is an MPI rank of this worker without a process of its own (rank > 0). */
bool tide_worker_mpi_is_virtual(const tide_worker_mpi_t *m, uint64_t id);
/* Stops virtual rank id: its rank-exec gets SIGTERM (after term_after_ms: a soft stop of an SDK
 * rank), then SIGKILL grace_ms later; one that never attached is reported as exited at once.
 * Returns 0 or -ENOENT when id is not virtual. */
int tide_worker_mpi_stop(tide_worker_mpi_t *m, uint64_t id, uint32_t term_after_ms,
                         uint32_t grace_ms);
/* Rank id (any MPI rank) is being stopped by tide: the daemons of its generation on this worker
 * go too (SIGTERM, then SIGKILL), after after_ms (0: now). A rank that simply ends leaves them to mpirun, which ends them
 * when the job is done (killing them early would fail the job). No-op for other ids. */
void tide_worker_mpi_stop_daemons(tide_worker_mpi_t *m, uint64_t id, uint32_t after_ms);
/* Rank id (any MPI rank) ended or was dropped: forget it (its rank-exec connection is closed). */
/* Sends sig to the process group of every attached rank's command (through its tide-rank-exec;
 * rank 0 too, whose worker also runs mpirun): the `slow` perturbation's SIGSTOP/SIGCONT. */
void tide_worker_mpi_signal_all(tide_worker_mpi_t *m, int sig);
/* The pids of the attached ranks' tide-rank-exec (the command is its child), at most max into out.
 * Returns how many. */
size_t tide_worker_mpi_pids(const tide_worker_mpi_t *m, int32_t *out, size_t max);
void tide_worker_mpi_rank_gone(tide_worker_mpi_t *m, uint64_t id);
/* The launcher's exit callback for a daemon id (TIDE_WORKER_MPI_DAEMON_ID set). */
void tide_worker_mpi_daemon_exited(tide_worker_mpi_t *m, uint64_t id, int64_t exit_status,
                                   int term_signal);

/* Hooks for the trainer server's attach connections (tide_trainer_server_ops_t). ud is m. */
void tide_worker_mpi_on_attach(void *ud, tide_trainer_conn_t *c, const tide_trainer_msg_t *msg);
void tide_worker_mpi_on_attach_exited(void *ud, tide_trainer_conn_t *c, int64_t status,
                                      int64_t signal);
void tide_worker_mpi_on_attach_closed(void *ud, tide_trainer_conn_t *c);

/* The WorkerLauncher service; the rpc server's ud must be the tide_worker_mpi_t. */
extern const tide_rpc_method_t tide_worker_mpi_methods[];
extern const size_t tide_worker_mpi_methods_count;

#endif

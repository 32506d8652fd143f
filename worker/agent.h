/* The tide-worker agent: the libuv shell around the decision core (core.h). It owns the stream to
 * the scheduler (WorkerService.Connect over tide_rpc_client), reconnects with backoff, sends
 * heartbeats with GPU telemetry, runs ranks through the launcher, streams logs, and shuts down on
 * SIGTERM/SIGINT. docs/worker.md. Loop thread only. */
#ifndef TIDE_WORKER_AGENT_H
#define TIDE_WORKER_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "core.h"
#include "error.h"
#include "gpu.h"
#include "hostio.h"

struct uv_loop_s;

typedef struct tide_worker_agent tide_worker_agent_t;

typedef struct tide_worker_agent_config {
    const tide_worker_config_t *cfg; /* borrowed; must outlive the agent */
    const char *exec_helper;         /* path of tide-exec; copied */
    const char *rank_exec;           /* path of tide-rank-exec (MPI ranks); NULL: beside exec_helper */
    const char *mpi_shim;            /* path of tide-mpi-shim (mpirun's rsh agent); same */
    tide_gpu_t *gpu;                 /* borrowed; must outlive the agent */
    tide_hostio_t *hostio;           /* the node's network and storage; NULL: unknown; borrowed */
    const struct tide_perturb *perturb; /* scripted perturbations; NULL: none; borrowed */
    bool handle_signals;             /* SIGTERM/SIGINT shut down (a second one forces) */
    uint64_t seed;                   /* reconnect jitter */
    uint32_t welcome_timeout_ms;     /* end a stream that got no Welcome; 0: 10000 */
    uint32_t drain_timeout_ms;       /* at exit, wait this long for the scheduler to end the stream;
                                        0: 2000 */
    size_t log_queue_limit;          /* 0: the logs default (256 KiB) */
    uint32_t log_follow_poll_ms;     /* 0: the logs default (200 ms) */
} tide_worker_agent_config_t;

/* Prepares the data dir, kills what a previous worker left running (its records), loads the epoch
 * and starts connecting. Returns 0, or -errno with err filled (then nothing is left on the loop).
 */
int tide_worker_agent_new(struct uv_loop_s *loop, const tide_worker_agent_config_t *cfg,
                          tide_worker_agent_t **out, tide_error_t *err);
/* Begins the shutdown SIGTERM begins: WorkerGoodbye, stop every rank, report exits, close. force
 * stops ranks with SIGKILL at once. */
void tide_worker_agent_shutdown(tide_worker_agent_t *a, const char *reason, bool force);
/* Whether the agent finished (then its handles are closing and the loop runs dry) and with what
 * exit status: 0 after a shutdown, 1 after a fatal stream status (FAILED_PRECONDITION,
 * UNAUTHENTICATED). */
bool tide_worker_agent_done(const tide_worker_agent_t *a);
int tide_worker_agent_exit_code(const tide_worker_agent_t *a);
/* The decision core, for queries (borrowed). */
const tide_worker_core_t *tide_worker_agent_core(const tide_worker_agent_t *a);
/* Stops everything still running (ranks are SIGKILLed) and frees the agent once its handles closed:
 * run the loop afterwards. NULL is fine. */
void tide_worker_agent_free(tide_worker_agent_t *a);

#endif

/* tide-worker's main(): flags, logging, the GPU backend, then the agent on a libuv loop until it is
 * done. Exit status: 0 after SIGTERM/SIGINT, 1 when the scheduler refuses the worker or startup
 * fails, 2 for a bad flag. Everything else lives in tide_worker_lib so tests can reach it. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "agent.h"
#include "clock.h"
#include "config.h"
#include "gpu.h"
#include "hostio.h"
#include "log.h"
#include "perturb.h"
#include "probe.h"

#define PROBE_INTERVAL_MS 1000 /* between --probe's two readings */

/* The helpers (tide-exec, tide-rank-exec, tide-mpi-shim) sit next to tide-worker (in build/bin, or
 * installed together); the environment variable `env` overrides. */
static char *find_helper(const char *name, const char *env_name)
{
    char path[PATH_MAX];
    size_t len = sizeof(path);
    const char *env = getenv(env_name);
    char *slash;

    if (env && *env)
        return strdup(env);
    if (uv_exepath(path, &len) < 0)
        return strdup(name);
    slash = strrchr(path, '/');
    if (!slash)
        return strdup(name);
    snprintf(slash + 1, sizeof(path) - (size_t)(slash + 1 - path), "%s", name);
    return strdup(path);
}

int main(int argc, char **argv)
{
    tide_worker_config_t cfg;
    tide_worker_agent_config_t ac;
    tide_worker_agent_t *agent = NULL;
    tide_perturb_t perturb = {NULL, 0};
    tide_gpu_t *gpu = NULL;
    tide_hostio_t *hostio = NULL;
    tide_hostio_config_t hc;
    tide_error_t err;
    uv_loop_t loop;
    char *helper = NULL, *rank_exec = NULL, *shim = NULL;
    int rc, status = 1;

    tide_error_clear(&err);
    rc = tide_worker_config_parse(argc, argv, &cfg, &err);
    if (rc == 1) {
        fputs(tide_worker_usage(), stdout);
        tide_worker_config_free(&cfg);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "tide-worker: %s (see --help)\n", err.text);
        tide_worker_config_free(&cfg);
        return 2;
    }
    tide_log_init("tide-worker", cfg.log_level);
    if (tide_gpu_open(cfg.gpu, cfg.gpu_index, tide_clock_mono_ms(), cfg.peak_flops, &gpu, &err) < 0) {
        fprintf(stderr, "tide-worker: --gpu: %s (see --help)\n", err.text);
        tide_worker_config_free(&cfg);
        return 2;
    }
    hc = (tide_hostio_config_t){.net_devs = cfg.net_devs,
                                .net_capacity = cfg.net_capacity,
                                .storage_devs = cfg.storage_devs,
                                .storage_capacity = cfg.storage_capacity};
    if (tide_hostio_open(&hc, tide_clock_mono_ms(), &hostio, &err) < 0) {
        fprintf(stderr, "tide-worker: %s (see --help)\n", err.text);
        tide_gpu_close(gpu);
        tide_worker_config_free(&cfg);
        return 2;
    }
    if (cfg.probe) {
        rc = tide_worker_probe(gpu, hostio, PROBE_INTERVAL_MS, stdout);
        if (rc < 0)
            fprintf(stderr, "tide-worker: --probe: reading the device failed: %s\n", strerror(-rc));
        tide_hostio_close(hostio);
        tide_gpu_close(gpu);
        tide_worker_config_free(&cfg);
        return rc < 0 ? 1 : 0;
    }
    /* A dead scheduler connection must be an error return, not a fatal SIGPIPE. Ranks get the
     * default back: libuv resets dispositions in the child. */
    signal(SIGPIPE, SIG_IGN);

    if (cfg.perturb && tide_perturb_load(cfg.perturb, &perturb, &err) < 0) {
        fprintf(stderr, "tide-worker: --perturb: %s\n", err.text);
        tide_hostio_close(hostio);
        tide_gpu_close(gpu);
        tide_worker_config_free(&cfg);
        return 2;
    }
    /* Plaintext off loopback without --insecure, or a certificate or key that cannot be used: exit 1. */
    if (tide_worker_config_load_tls(&cfg, &err) < 0) {
        fprintf(stderr, "tide-worker: %s\n", err.text);
        tide_hostio_close(hostio);
        tide_gpu_close(gpu);
        tide_perturb_free(&perturb);
        tide_worker_config_free(&cfg);
        return 1;
    }
    helper = find_helper("tide-exec", "TIDE_EXEC");
    rank_exec = find_helper("tide-rank-exec", "TIDE_RANK_EXEC");
    shim = find_helper("tide-mpi-shim", "TIDE_MPI_SHIM");
    uv_loop_init(&loop);
    memset(&ac, 0, sizeof(ac));
    ac.cfg = &cfg;
    ac.exec_helper = helper;
    ac.rank_exec = rank_exec;
    ac.mpi_shim = shim;
    ac.gpu = gpu;
    ac.hostio = hostio;
    ac.perturb = cfg.perturb ? &perturb : NULL;
    ac.handle_signals = true;
    ac.seed = (uint64_t)getpid() ^ (uint64_t)tide_clock_wall_ms();
    rc = tide_worker_agent_new(&loop, &ac, &agent, &err);
    if (rc < 0) {
        tide_err("cannot start: %s", err.text);
    } else {
        uv_run(&loop, UV_RUN_DEFAULT);
        status = tide_worker_agent_exit_code(agent);
        tide_worker_agent_free(agent);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    tide_hostio_close(hostio);
    tide_gpu_close(gpu);
    tide_perturb_free(&perturb);
    free(helper);
    free(rank_exec);
    free(shim);
    tide_worker_config_free(&cfg);
    return status;
}

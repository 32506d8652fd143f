/* GPU backend dispatch: maps a device name ("sim:MODEL", "nvml", "auto") to its ops struct and
 * wraps the backend state in a tide_gpu_t. Invariant: a tide_gpu_t always holds an opened backend
 * state. */
#include "gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "xmalloc.h"

struct tide_gpu {
    const tide_gpu_ops_t *ops;
    void *state;
    tide_gpu_info_t info;
};

/* Every backend built in. sim takes a model ("sim:h100"); nvml and cpu take none (nvml's index
 * picks the device). */
static const tide_gpu_ops_t *const backends[] = {
    &tide_gpu_sim_ops,
    &tide_gpu_nvml_ops,
    &tide_gpu_cpu_ops,
};

/* What "auto" opens when NVML is not usable. */
#define AUTO_FALLBACK_MODEL "h100"

static int open_with(const tide_gpu_ops_t *ops, const char *model, int index, int64_t now_ms,
                     double peak_flops, tide_gpu_t **out, tide_error_t *err)
{
    tide_gpu_t *g = tide_xcalloc(1, sizeof(*g));
    int rc = ops->open(model, index, now_ms, peak_flops, &g->state, &g->info, err);

    if (rc < 0) {
        free(g);
        return rc;
    }
    if (peak_flops > 0)
        g->info.peak_flops = peak_flops;
    g->ops = ops;
    *out = g;
    return 0;
}

/* "auto": NVML when a driver and the GPU are there; otherwise (no library: -ENOENT, no driver or no
 * GPU: -ENODEV) the simulated H100, said once on stderr. Other NVML failures (a bad index on a
 * machine that has GPUs) are errors, not a reason to pretend. */
static int open_auto(int index, int64_t now_ms, double peak_flops, tide_gpu_t **out,
                     tide_error_t *err)
{
    tide_error_t nerr;
    int rc;

    tide_error_clear(&nerr);
    rc = open_with(&tide_gpu_nvml_ops, "", index, now_ms, peak_flops, out, &nerr);
    if (rc == 0)
        return 0;
    if (rc != -ENOENT && rc != -ENODEV) {
        tide_errprintf(err, "%s", nerr.text);
        return rc;
    }
    tide_warn("no NVIDIA driver (%s): using the simulated GPU sim:%s", nerr.text,
              AUTO_FALLBACK_MODEL);
    return open_with(&tide_gpu_sim_ops, AUTO_FALLBACK_MODEL, index, now_ms, peak_flops, out, err);
}

int tide_gpu_open(const char *spec, int index, int64_t now_ms, double peak_flops, tide_gpu_t **out,
                  tide_error_t *err)
{
    const char *colon = strchr(spec, ':');
    const tide_gpu_ops_t *ops = NULL;
    size_t plen = colon ? (size_t)(colon - spec) : strlen(spec);

    if (strcmp(spec, "auto") == 0)
        return open_auto(index, now_ms, peak_flops, out, err);
    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        if (strlen(backends[i]->name) == plen && strncmp(backends[i]->name, spec, plen) == 0)
            ops = backends[i];
    }
    /* sim needs ":MODEL"; nvml and cpu must not have one. */
    if (!ops || (ops != &tide_gpu_sim_ops) == (colon != NULL)) {
        tide_errprintf(err,
                       "unknown GPU '%s' (expected sim:MODEL, nvml, cpu or auto; backends: sim, "
                       "nvml, cpu, auto)",
                       spec);
        return -ENOENT;
    }
    return open_with(ops, colon ? colon + 1 : "", index, now_ms, peak_flops, out, err);
}

const tide_gpu_info_t *tide_gpu_info(const tide_gpu_t *g)
{
    return &g->info;
}

void tide_gpu_track(tide_gpu_t *g, const int32_t *pids, size_t n_pids)
{
    if (g->ops->track)
        g->ops->track(g->state, pids, n_pids);
}

int tide_gpu_read(tide_gpu_t *g, int64_t now_ms, bool busy, tide_gpu_telemetry_t *out)
{
    return g->ops->read(g->state, now_ms, busy, out);
}

void tide_gpu_close(tide_gpu_t *g)
{
    if (!g)
        return;
    g->ops->close(g->state);
    free(g);
}

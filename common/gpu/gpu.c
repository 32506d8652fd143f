/* GPU backend dispatch: maps the "BACKEND:" prefix of a device name to its ops struct and wraps the
 * backend state in a tide_gpu_t. Invariant: a tide_gpu_t always holds an opened backend state. */
#include "gpu.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

struct tide_gpu {
    const tide_gpu_ops_t *ops;
    void *state;
    tide_gpu_info_t info;
};

/* Every backend built in. The NVML and cpu backends join this table. */
static const tide_gpu_ops_t *const backends[] = {
    &tide_gpu_sim_ops,
};

int tide_gpu_open(const char *spec, int index, int64_t now_ms, tide_gpu_t **out, tide_error_t *err)
{
    const char *colon = strchr(spec, ':');
    const tide_gpu_ops_t *ops = NULL;
    size_t plen = colon ? (size_t)(colon - spec) : strlen(spec);
    tide_gpu_t *g;
    int rc;

    for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
        if (strlen(backends[i]->name) == plen && strncmp(backends[i]->name, spec, plen) == 0)
            ops = backends[i];
    }
    if (!ops || !colon) {
        tide_errprintf(err, "unknown GPU '%s' (expected BACKEND:MODEL; backends: sim)", spec);
        return -ENOENT;
    }
    g = tide_xcalloc(1, sizeof(*g));
    g->ops = ops;
    rc = ops->open(colon + 1, index, now_ms, &g->state, &g->info, err);
    if (rc < 0) {
        free(g);
        return rc;
    }
    *out = g;
    return 0;
}

const tide_gpu_info_t *tide_gpu_info(const tide_gpu_t *g)
{
    return &g->info;
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

/* `tide-worker --probe`: reads the device and the node once, the way the agent would, and prints
 * what it got — to check a node's telemetry (NVML present? which figures are known?) before it
 * joins a cluster. */
#ifndef TIDE_WORKER_PROBE_H
#define TIDE_WORKER_PROBE_H

#include <stdio.h>

#include "gpu.h"
#include "hostio.h"

/* Takes a baseline reading, waits interval_ms (rates need two samples) and prints the device's facts
 * and the second reading to out, one "name value" line each; a figure the backend could not read
 * prints "unknown". hostio may be NULL. Returns 0, or -errno when the device cannot be read. */
int tide_worker_probe(tide_gpu_t *gpu, tide_hostio_t *hostio, unsigned interval_ms, FILE *out);

#endif

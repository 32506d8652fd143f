/* The simulated GPU: a table of device models from vendor datasheets and a deterministic telemetry
 * model (utilisation, memory, power and temperature follow "busy or idle" with first-order lags).
 * Pure: no clock, no I/O, no randomness, so the worker's sim backend and the discrete-event
 * simulator share it and a test can predict every reading. */
#ifndef TIDE_GPU_SIM_H
#define TIDE_GPU_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h"

typedef struct tide_gpu_model {
    const char *name;      /* "h100"; the device is "sim:" + name */
    double peak_flops;     /* dense BF16 FLOP/s, datasheet */
    uint64_t memory_bytes; /* datasheet */
    double tdp_w;          /* board power, datasheet */
    double idle_w;         /* modelling choice: power with a context but no work */
    double busy_temp_c;    /* modelling choice: steady temperature under a training load */
} tide_gpu_model_t;

/* Model constants shared by every device (documented in gpu_sim.c). */
#define TIDE_GPU_SIM_IDLE_TEMP_C 35.0

/* The known models, in a fixed order; *count gets their number. Borrowed, static. */
const tide_gpu_model_t *tide_gpu_sim_models(size_t *count);
/* Finds "h100" or "sim:h100"; NULL when unknown. Borrowed, static. */
const tide_gpu_model_t *tide_gpu_sim_model_find(const char *name);
/* Writes "sim:h100, sim:a100, ..." into buf (truncating). */
void tide_gpu_sim_model_list(char *buf, size_t size);

/* The state of one simulated GPU. A plain value (no allocation) so a simulator can hold thousands.
 */
typedef struct tide_gpu_sim {
    const tide_gpu_model_t *model; /* borrowed, static */
    bool busy;                     /* load from since_ms on */
    int64_t since_ms;              /* time of the last busy/idle change */
    /* readings at since_ms; each decays from there toward the busy or idle target */
    double util0, mem0, power0, temp0;
} tide_gpu_sim_t;

/* Starts idle and settled at now_ms. */
void tide_gpu_sim_init(tide_gpu_sim_t *s, const tide_gpu_model_t *m, int64_t now_ms);
/* Switches the load at now_ms (no-op when unchanged). Times before since_ms count as since_ms. */
void tide_gpu_sim_set_busy(tide_gpu_sim_t *s, int64_t now_ms, bool busy);
/* The reading at now_ms (>= the last change; earlier times read as the change time). */
void tide_gpu_sim_read(const tide_gpu_sim_t *s, int64_t now_ms, tide_gpu_telemetry_t *out);

#endif

/* Simulated GPUs: the model table and the first-order-lag telemetry model, plus the "sim" backend
 * that wraps them in tide_gpu_ops_t. Invariant: a reading is a pure function of (model, the
 * sequence of busy/idle changes, now), so repeated runs and the simulator see identical numbers. */
#include "gpu_sim.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Peak dense BF16 tensor FLOP/s, memory and board power from the vendor datasheets (the datasheets
 * print BF16 "with sparsity"; dense is half of that):
 *  - H100 SXM5: 1,979 TFLOPS sparse -> 989e12 dense, 80 GB HBM3, up to 700 W
 *    (NVIDIA H100 Tensor Core GPU datasheet).
 *  - A100 SXM 80GB: 624 TFLOPS sparse -> 312e12 dense, 80 GB HBM2e, 400 W
 *    (NVIDIA A100 Tensor Core GPU datasheet).
 *  - L4: 242 TFLOPS sparse -> 121e12 dense, 24 GB GDDR6, 72 W (NVIDIA L4 Tensor Core GPU
 * datasheet).
 *  - B200 (HGX B200): 4.5 PFLOPS sparse -> 2.25e15 dense, 192 GB HBM3e, up to 1,000 W
 *    (NVIDIA HGX B200 / Blackwell datasheet).
 * Memory is counted in GiB, as the devices report it. Idle power and the busy temperature are
 * modelling choices, not datasheet figures: idle is the power of a card with a context and no work
 * (roughly a tenth to a fifth of the limit), the busy temperature what air/liquid-cooled cards
 * settle at under load. */
static const tide_gpu_model_t models[] = {
    {"h100", 989e12, (uint64_t)(80 * GIB), 700.0, 70.0, 72.0},
    {"a100", 312e12, (uint64_t)(80 * GIB), 400.0, 55.0, 68.0},
    {"l4", 121e12, (uint64_t)(24 * GIB), 72.0, 16.0, 75.0},
    {"b200", 2.25e15, (uint64_t)(192 * GIB), 1000.0, 140.0, 70.0},
};

/* Time constants of the lags (ms): utilisation follows the work almost at once, memory as the
 * framework allocates, power with the clocks, temperature with the heat capacity of the board. */
#define TAU_UTIL_MS  1000.0
#define TAU_MEM_MS   2000.0
#define TAU_POWER_MS 2000.0
#define TAU_TEMP_MS  30000.0
/* Busy targets as fractions: a training step keeps the SMs ~95% busy, holds ~85% of memory and
 * draws ~85% of the power limit. Idle: nothing allocated, idle power, TIDE_GPU_SIM_IDLE_TEMP_C. */
#define BUSY_UTIL           0.95
#define BUSY_MEM_FRACTION   0.85
#define BUSY_POWER_FRACTION 0.85

const tide_gpu_model_t *tide_gpu_sim_models(size_t *count)
{
    *count = sizeof(models) / sizeof(models[0]);
    return models;
}

const tide_gpu_model_t *tide_gpu_sim_model_find(const char *name)
{
    if (strncmp(name, "sim:", 4) == 0)
        name += 4;
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        if (strcmp(models[i].name, name) == 0)
            return &models[i];
    }
    return NULL;
}

void tide_gpu_sim_model_list(char *buf, size_t size)
{
    size_t off = 0;

    if (size == 0)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]) && off < size; i++) {
        int n = snprintf(buf + off, size - off, "%ssim:%s", i ? ", " : "", models[i].name);
        if (n < 0)
            break;
        off += (size_t)n;
    }
}

typedef struct targets {
    double util, mem, power, temp;
} targets_t;

static targets_t targets_for(const tide_gpu_model_t *m, bool busy)
{
    targets_t t;

    if (busy) {
        t.util = BUSY_UTIL;
        t.mem = BUSY_MEM_FRACTION * (double)m->memory_bytes;
        t.power = BUSY_POWER_FRACTION * m->tdp_w;
        t.temp = m->busy_temp_c;
    } else {
        t.util = 0.0;
        t.mem = 0.0;
        t.power = m->idle_w;
        t.temp = TIDE_GPU_SIM_IDLE_TEMP_C;
    }
    return t;
}

/* x(t) = target + (x0 - target) * exp(-dt / tau) */
static double lag(double x0, double target, double dt_ms, double tau_ms)
{
    return target + (x0 - target) * exp(-dt_ms / tau_ms);
}

void tide_gpu_sim_init(tide_gpu_sim_t *s, const tide_gpu_model_t *m, int64_t now_ms)
{
    targets_t t = targets_for(m, false);

    s->model = m;
    s->busy = false;
    s->since_ms = now_ms;
    s->util0 = t.util;
    s->mem0 = t.mem;
    s->power0 = t.power;
    s->temp0 = t.temp;
}

static void sim_values(const tide_gpu_sim_t *s, int64_t now_ms, double *util, double *mem,
                       double *power, double *temp)
{
    targets_t t = targets_for(s->model, s->busy);
    double dt = now_ms > s->since_ms ? (double)(now_ms - s->since_ms) : 0.0;

    *util = lag(s->util0, t.util, dt, TAU_UTIL_MS);
    *mem = lag(s->mem0, t.mem, dt, TAU_MEM_MS);
    *power = lag(s->power0, t.power, dt, TAU_POWER_MS);
    *temp = lag(s->temp0, t.temp, dt, TAU_TEMP_MS);
}

void tide_gpu_sim_set_busy(tide_gpu_sim_t *s, int64_t now_ms, bool busy)
{
    if (busy == s->busy)
        return;
    if (now_ms < s->since_ms)
        now_ms = s->since_ms;
    /* Start the new lag from where the old one had got to. */
    sim_values(s, now_ms, &s->util0, &s->mem0, &s->power0, &s->temp0);
    s->busy = busy;
    s->since_ms = now_ms;
}

void tide_gpu_sim_read(const tide_gpu_sim_t *s, int64_t now_ms, tide_gpu_telemetry_t *out)
{
    double util, mem, power, temp;

    sim_values(s, now_ms, &util, &mem, &power, &temp);
    memset(out, 0, sizeof(*out));
    out->known = TIDE_GPU_HAS_UTIL | TIDE_GPU_HAS_MEMORY | TIDE_GPU_HAS_TEMPERATURE | TIDE_GPU_HAS_POWER;
    out->gpu_util = util;
    out->mem_used_bytes = mem <= 0.0 ? 0 : (uint64_t)llround(mem);
    out->mem_total_bytes = s->model->memory_bytes;
    if (out->mem_used_bytes > out->mem_total_bytes)
        out->mem_used_bytes = out->mem_total_bytes;
    out->temperature_c = temp;
    out->power_w = power;
}

/* --- the "sim" backend --- */

static int sim_open(const char *model, int index, int64_t now_ms, double peak_flops, void **state,
                    tide_gpu_info_t *info, tide_error_t *err)
{
    const tide_gpu_model_t *m = tide_gpu_sim_model_find(model);
    tide_gpu_sim_t *s;
    char known[256];

    (void)peak_flops; /* tide_gpu_open applies --peak-flops */
    if (!m) {
        tide_gpu_sim_model_list(known, sizeof(known));
        tide_errprintf(err, "unknown GPU model 'sim:%s' (known: %s)", model, known);
        return -ENOENT;
    }
    s = tide_xmalloc(sizeof(*s));
    tide_gpu_sim_init(s, m, now_ms);
    snprintf(info->device, sizeof(info->device), "sim:%s", m->name);
    info->peak_flops = m->peak_flops;
    info->memory_bytes = m->memory_bytes;
    info->tdp_w = m->tdp_w;
    *state = s;
    return 0;
}

static int sim_read(void *state, int64_t now_ms, bool busy, tide_gpu_telemetry_t *out)
{
    tide_gpu_sim_t *s = state;

    tide_gpu_sim_read(s, now_ms, out);
    tide_gpu_sim_set_busy(s, now_ms, busy);
    return 0;
}

static void sim_close(void *state)
{
    free(state);
}

const tide_gpu_ops_t tide_gpu_sim_ops = {
    .name = "sim",
    .open = sim_open,
    .read = sim_read,
    .close = sim_close,
};

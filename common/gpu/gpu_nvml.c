/* The "nvml" backend: real NVIDIA telemetry through libnvidia-ml.so.1, loaded with dlopen at open
 * so the library is never a build dependency (the ABI is declared in gpu_nvml_abi.h). Invariants: a
 * reading sets a TIDE_GPU_HAS_* bit only when the NVML calls behind it succeeded (a failure means
 * unknown, never zero); the XID thread is joined before NVML is shut down and the library closed.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "gpu_nvml_abi.h"
#include "gpu_sim.h"
#include "log.h"
#include "xmalloc.h"

#define NVML_DEFAULT_LIB "libnvidia-ml.so.1"
/* How long one nvmlEventSetWait_v2 may block: it bounds how long close() waits for the thread. */
#define XID_WAIT_MS 500

/* Dense BF16 peaks of real devices, found by a token of the NVML name ("NVIDIA H100 80GB HBM3" has
 * the token "h100"). Figures live in the simulated model table (gpu_sim.c, datasheets cited there);
 * this table only maps names onto it, so each number exists once. Entries with a `variant` token
 * match only when the name also has it and come before the plain entry; a variant that the sim
 * table lacks carries its own figure (peak_flops, with its source), else 0 = take sim_model's.
 *  - H200 and GH200 use the H100's GH100 die and clocks: BF16 dense is the H100 SXM figure (NVIDIA
 *    H200 and GH200 datasheets: 1,979 TFLOPS sparse); H800 and A800 are export variants with the
 *    compute of the H100 SXM and A100.
 *  - H100 PCIe: 1,513 TFLOPS sparse -> 756.5e12 dense (NVIDIA H100 PCIe datasheet).
 *  - The NVL (PCIe, lower power) boards of H100 and H200 run below the SXM figure; tide has no
 *    checked number for them yet, so their peak is 0 (unknown, with a warning) rather than wrong.
 */
typedef struct nvml_model {
    const char *token;      /* lower-case token of the NVML name */
    const char *variant;    /* a second token that must also appear, or NULL */
    const char *short_name; /* the device is "nvml:" + this */
    const char *sim_model;  /* gpu_sim.c model whose peak applies, or NULL */
    double peak_flops;      /* only when sim_model is NULL */
} nvml_model_t;

static const nvml_model_t nvml_models[] = {
    {"h100", "pcie", "h100-pcie", NULL, 756.5e12},
    {"h100", "nvl", "h100-nvl", NULL, 0},
    {"h200", "nvl", "h200-nvl", NULL, 0},
    {"h100", NULL, "h100", "h100", 0},
    {"h200", NULL, "h200", "h100", 0},
    {"gh200", NULL, "gh200", "h100", 0},
    {"h800", NULL, "h800", "h100", 0},
    {"a100", NULL, "a100", "a100", 0},
    {"a800", NULL, "a800", "a100", 0},
    {"l4", NULL, "l4", "l4", 0},
    {"b200", NULL, "b200", "b200", 0},
};

/* The NVML entry points, typed from gpu_nvml_abi.h. Metric functions may be NULL (an old driver
 * lacks one): that metric is then always unknown. */
typedef struct nvml_api {
    __typeof__(nvmlInit_v2) *init;
    __typeof__(nvmlShutdown) *shutdown;
    __typeof__(nvmlErrorString) *error_string;
    __typeof__(nvmlDeviceGetCount_v2) *get_count;
    __typeof__(nvmlDeviceGetHandleByIndex_v2) *get_handle;
    __typeof__(nvmlDeviceGetName) *get_name;
    __typeof__(nvmlDeviceGetMemoryInfo) *get_memory;
    __typeof__(nvmlDeviceGetUtilizationRates) *get_util;
    __typeof__(nvmlDeviceGetTemperature) *get_temperature;
    __typeof__(nvmlDeviceGetPowerUsage) *get_power;
    __typeof__(nvmlDeviceGetEnforcedPowerLimit) *get_power_limit;
    __typeof__(nvmlDeviceGetClockInfo) *get_clock;
    __typeof__(nvmlDeviceGetCurrentClocksThrottleReasons) *get_throttle;
    __typeof__(nvmlDeviceGetTotalEccErrors) *get_ecc;
    __typeof__(nvmlEventSetCreate) *event_set_create;
    __typeof__(nvmlDeviceRegisterEvents) *register_events;
    __typeof__(nvmlEventSetWait_v2) *event_set_wait;
    __typeof__(nvmlEventSetFree) *event_set_free;
} nvml_api_t;

typedef struct nvml_state {
    void *lib;
    nvml_api_t api;
    bool initialized; /* nvmlInit_v2 succeeded: nvmlShutdown owed */
    nvmlDevice_t dev;
    nvmlEventSet_t events; /* NULL: no XID events */
    pthread_t thread;
    bool thread_started;
    atomic_bool stop;     /* close() asks the thread to leave */
    atomic_bool xid_live; /* the thread is watching: XID figures are known */
    atomic_uint_least64_t xid_count;
    atomic_uint_least32_t last_xid;
} nvml_state_t;

static const char *nvml_strerror(const nvml_state_t *s, nvmlReturn_t rc)
{
    const char *msg = s->api.error_string ? s->api.error_string(rc) : NULL;

    return msg ? msg : "unknown NVML error";
}

/* Loads every symbol; the first seven are required. Returns 0 or -ENOENT naming the missing one. */
static int load_api(nvml_state_t *s, const char *path, tide_error_t *err)
{
    nvml_api_t *a = &s->api;
    const char *missing = NULL;

#define LOAD(field, sym, required)                                                                 \
    do {                                                                                           \
        a->field = (__typeof__(a->field))dlsym(s->lib, sym);                                       \
        if (!a->field && (required) && !missing)                                                   \
            missing = sym;                                                                         \
    } while (0)
    LOAD(init, "nvmlInit_v2", true);
    LOAD(shutdown, "nvmlShutdown", true);
    LOAD(error_string, "nvmlErrorString", true);
    LOAD(get_count, "nvmlDeviceGetCount_v2", true);
    LOAD(get_handle, "nvmlDeviceGetHandleByIndex_v2", true);
    LOAD(get_name, "nvmlDeviceGetName", true);
    LOAD(get_memory, "nvmlDeviceGetMemoryInfo", true);
    LOAD(get_util, "nvmlDeviceGetUtilizationRates", false);
    LOAD(get_temperature, "nvmlDeviceGetTemperature", false);
    LOAD(get_power, "nvmlDeviceGetPowerUsage", false);
    LOAD(get_power_limit, "nvmlDeviceGetEnforcedPowerLimit", false);
    LOAD(get_clock, "nvmlDeviceGetClockInfo", false);
    LOAD(get_throttle, "nvmlDeviceGetCurrentClocksThrottleReasons", false);
    /* Newer drivers renamed it (same signature, same bits); the old name is deprecated. */
    if (!a->get_throttle)
        LOAD(get_throttle, "nvmlDeviceGetCurrentClocksEventReasons", false);
    LOAD(get_ecc, "nvmlDeviceGetTotalEccErrors", false);
    LOAD(event_set_create, "nvmlEventSetCreate", false);
    LOAD(register_events, "nvmlDeviceRegisterEvents", false);
    LOAD(event_set_wait, "nvmlEventSetWait_v2", false);
    LOAD(event_set_free, "nvmlEventSetFree", false);
#undef LOAD
    if (missing) {
        tide_errprintf(err, "NVML library %s lacks %s (driver too old?)", path, missing);
        return -ENOENT;
    }
    return 0;
}

/* Splits the NVML name into lower-case tokens on spaces, '-' and '_'; returns their number. */
static size_t name_tokens(const char *name, char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE],
                          const char *tok[], size_t max)
{
    size_t n = 0;
    char *save = NULL;

    snprintf(buf, NVML_DEVICE_NAME_V2_BUFFER_SIZE, "%s", name);
    for (char *p = buf; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    for (char *t = strtok_r(buf, " -_", &save); t && n < max; t = strtok_r(NULL, " -_", &save))
        tok[n++] = t;
    return n;
}

static bool has_token(const char *tok[], size_t n, const char *want)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(tok[i], want) == 0)
            return true;
    }
    return false;
}

/* Fills info->device and info->peak_flops from the NVML name. An unknown model gets a sanitised
 * name ("NVIDIA GeForce RTX 4090" -> "nvml:geforce-rtx-4090"), peak 0 and a warning. */
static void identify(const char *name, tide_gpu_info_t *info)
{
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    const char *tok[16];
    size_t n = name_tokens(name, buf, tok, sizeof(tok) / sizeof(tok[0]));
    size_t off;

    for (size_t i = 0; i < sizeof(nvml_models) / sizeof(nvml_models[0]); i++) {
        const nvml_model_t *m = &nvml_models[i];
        const tide_gpu_model_t *sim;

        if (!has_token(tok, n, m->token) || (m->variant && !has_token(tok, n, m->variant)))
            continue;
        sim = m->sim_model ? tide_gpu_sim_model_find(m->sim_model) : NULL;
        snprintf(info->device, sizeof(info->device), "nvml:%s", m->short_name);
        info->peak_flops = sim ? sim->peak_flops : m->peak_flops;
        goto done;
    }
    off = (size_t)snprintf(info->device, sizeof(info->device), "nvml:");
    for (size_t i = 0; i < n && off + 1 < sizeof(info->device); i++) {
        if (strcmp(tok[i], "nvidia") == 0)
            continue;
        off += (size_t)snprintf(info->device + off, sizeof(info->device) - off, "%s%s",
                                off > 5 ? "-" : "", tok[i]);
    }
    if (strlen(info->device) == 5)
        snprintf(info->device, sizeof(info->device), "nvml:unknown");
    info->peak_flops = 0;
done:
    if (info->peak_flops > 0)
        return;
    tide_warn("tide knows no peak FLOP/s for GPU '%s': MFU is unknown unless --peak-flops is given",
              name);
}

static void *xid_thread(void *arg)
{
    nvml_state_t *s = arg;

    while (!atomic_load(&s->stop)) {
        nvmlEventData_t ev;
        nvmlReturn_t rc;

        memset(&ev, 0, sizeof(ev));
        rc = s->api.event_set_wait(s->events, &ev, XID_WAIT_MS);
        if (rc == NVML_ERROR_TIMEOUT)
            continue; /* also returned early on an interrupt: just wait again */
        if (rc != NVML_SUCCESS) {
            /* A lost GPU or a broken event set: stop watching rather than spin; the XID figures
             * become unknown (the other metrics report the same failure on their own). */
            tide_warn("NVML event wait failed (%s): XID events are no longer watched",
                      nvml_strerror(s, rc));
            atomic_store(&s->xid_live, false);
            break;
        }
        if (ev.eventType & nvmlEventTypeXidCriticalError) {
            atomic_store(&s->last_xid, (uint_least32_t)ev.eventData);
            atomic_fetch_add(&s->xid_count, 1);
        }
    }
    return NULL;
}

/* Registers for XID events and starts the thread; on any failure XID stays unknown (not an error:
 * some boards or permissions do not allow events). */
static void start_xid(nvml_state_t *s)
{
    const nvml_api_t *a = &s->api;
    nvmlReturn_t rc;
    int prc;

    if (!a->event_set_create || !a->register_events || !a->event_set_wait || !a->event_set_free)
        return;
    rc = a->event_set_create(&s->events);
    if (rc != NVML_SUCCESS) {
        s->events = NULL;
        tide_warn("NVML: cannot create an event set (%s): XID events are not watched",
                  nvml_strerror(s, rc));
        return;
    }
    rc = a->register_events(s->dev, nvmlEventTypeXidCriticalError, s->events);
    if (rc != NVML_SUCCESS) {
        tide_warn("NVML: cannot register for XID events (%s): XID events are not watched",
                  nvml_strerror(s, rc));
        goto error;
    }
    atomic_store(&s->xid_live, true);
    prc = pthread_create(&s->thread, NULL, xid_thread, s);
    if (prc != 0) {
        atomic_store(&s->xid_live, false);
        tide_warn("NVML: cannot start the XID thread: %s", strerror(prc));
        goto error;
    }
    s->thread_started = true;
    return;
error:
    a->event_set_free(s->events);
    s->events = NULL;
}

static void nvml_close(void *state)
{
    nvml_state_t *s = state;

    if (!s)
        return;
    if (s->thread_started) {
        atomic_store(&s->stop, true);
        pthread_join(s->thread, NULL);
    }
    if (s->events)
        s->api.event_set_free(s->events);
    if (s->initialized)
        s->api.shutdown();
    if (s->lib)
        dlclose(s->lib);
    free(s);
}

static int nvml_open(const char *model, int index, int64_t now_ms, double peak_flops, void **state,
                     tide_gpu_info_t *info, tide_error_t *err)
{
    const char *path = getenv("TIDE_NVML_LIB");
    nvml_state_t *s = tide_xcalloc(1, sizeof(*s));
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int count = 0, limit_mw = 0;
    nvmlMemory_t mem;
    nvmlReturn_t rc;
    int ret;

    (void)peak_flops; /* tide_gpu_open applies --peak-flops */
    (void)now_ms;
    if (!path || !*path)
        path = NVML_DEFAULT_LIB;
    if (model && *model) {
        tide_errprintf(
            err, "the nvml backend takes no model ('nvml:%s'): use 'nvml' and --gpu-index", model);
        ret = -EINVAL;
        goto error;
    }
    atomic_init(&s->stop, false);
    atomic_init(&s->xid_live, false);
    atomic_init(&s->xid_count, 0);
    atomic_init(&s->last_xid, 0);
    dlerror();
    s->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!s->lib) {
        const char *why = dlerror();

        /* dlerror() normally starts with the path; name it when it does not. */
        if (why && strstr(why, path))
            tide_errprintf(err, "cannot load NVML: %s", why);
        else
            tide_errprintf(err, "cannot load NVML from %s: %s", path, why ? why : "dlopen failed");
        ret = -ENOENT;
        goto error;
    }
    ret = load_api(s, path, err);
    if (ret < 0)
        goto error;
    rc = s->api.init();
    if (rc != NVML_SUCCESS) {
        tide_errprintf(err, "nvmlInit_v2 failed: %s", nvml_strerror(s, rc));
        ret = -ENODEV;
        goto error;
    }
    s->initialized = true;
    rc = s->api.get_count(&count);
    if (rc != NVML_SUCCESS) {
        tide_errprintf(err, "nvmlDeviceGetCount_v2 failed: %s", nvml_strerror(s, rc));
        ret = -ENODEV;
        goto error;
    }
    if (count == 0) {
        tide_errprintf(err, "NVML sees no GPU");
        ret = -ENODEV;
        goto error;
    }
    if (index < 0 || (unsigned int)index >= count) {
        tide_errprintf(err, "GPU index %d out of range: NVML sees %u GPU%s (0..%u)", index, count,
                       count == 1 ? "" : "s", count - 1);
        ret = -EINVAL;
        goto error;
    }
    rc = s->api.get_handle((unsigned int)index, &s->dev);
    if (rc != NVML_SUCCESS) {
        tide_errprintf(err, "nvmlDeviceGetHandleByIndex_v2(%d) failed: %s", index,
                       nvml_strerror(s, rc));
        ret = -EIO;
        goto error;
    }
    rc = s->api.get_name(s->dev, name, sizeof(name));
    if (rc != NVML_SUCCESS) {
        tide_errprintf(err, "nvmlDeviceGetName(GPU %d) failed: %s", index, nvml_strerror(s, rc));
        ret = -EIO;
        goto error;
    }
    name[sizeof(name) - 1] = '\0';

    memset(info, 0, sizeof(*info));
    identify(name, info);
    if (s->api.get_memory(s->dev, &mem) == NVML_SUCCESS)
        info->memory_bytes = mem.total;
    if (s->api.get_power_limit && s->api.get_power_limit(s->dev, &limit_mw) == NVML_SUCCESS)
        info->tdp_w = limit_mw / 1000.0;
    start_xid(s);
    *state = s;
    return 0;
error:
    nvml_close(s);
    return ret;
}

static int nvml_read(void *state, int64_t now_ms, bool busy, tide_gpu_telemetry_t *out)
{
    nvml_state_t *s = state;
    const nvml_api_t *a = &s->api;
    nvmlMemory_t mem;
    nvmlUtilization_t util;
    unsigned int v, sm, memclk;
    unsigned long long throttle, corrected, uncorrected;

    (void)now_ms; /* a real device is measured, not modelled */
    (void)busy;
    memset(out, 0, sizeof(*out));
    if (a->get_util && a->get_util(s->dev, &util) == NVML_SUCCESS) {
        out->gpu_util = util.gpu / 100.0;
        out->mem_bw_util = util.memory / 100.0;
        out->known |= TIDE_GPU_HAS_UTIL | TIDE_GPU_HAS_MEM_BW;
    }
    if (a->get_memory(s->dev, &mem) == NVML_SUCCESS) {
        out->mem_used_bytes = mem.used;
        out->mem_total_bytes = mem.total;
        out->known |= TIDE_GPU_HAS_MEMORY;
    }
    if (a->get_temperature &&
        a->get_temperature(s->dev, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS) {
        out->temperature_c = v;
        out->known |= TIDE_GPU_HAS_TEMPERATURE;
    }
    if (a->get_power && a->get_power(s->dev, &v) == NVML_SUCCESS) {
        out->power_w = v / 1000.0;
        out->known |= TIDE_GPU_HAS_POWER;
    }
    if (a->get_clock && a->get_clock(s->dev, NVML_CLOCK_SM, &sm) == NVML_SUCCESS &&
        a->get_clock(s->dev, NVML_CLOCK_MEM, &memclk) == NVML_SUCCESS) {
        out->sm_clock_mhz = sm;
        out->mem_clock_mhz = memclk;
        out->known |= TIDE_GPU_HAS_CLOCKS;
    }
    if (a->get_throttle && a->get_throttle(s->dev, &throttle) == NVML_SUCCESS) {
        out->throttle_reasons = throttle;
        out->known |= TIDE_GPU_HAS_THROTTLE;
    }
    if (a->get_ecc &&
        a->get_ecc(s->dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &corrected) ==
            NVML_SUCCESS &&
        a->get_ecc(s->dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &uncorrected) ==
            NVML_SUCCESS) {
        out->ecc_corrected = corrected;
        out->ecc_uncorrected = uncorrected;
        out->known |= TIDE_GPU_HAS_ECC;
    }
    if (atomic_load(&s->xid_live)) {
        out->xid_count = atomic_load(&s->xid_count);
        out->last_xid = atomic_load(&s->last_xid);
        out->known |= TIDE_GPU_HAS_XID;
    }
    return 0;
}

const tide_gpu_ops_t tide_gpu_nvml_ops = {
    .name = "nvml",
    .open = nvml_open,
    .read = nvml_read,
    .close = nvml_close,
};

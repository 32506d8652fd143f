/* GPU telemetry backends behind one ops struct (design.md: "dispatch tables and ops structs"). A
 * device is named "BACKEND:MODEL" ("sim:h100") or by a backend alone ("nvml", "cpu"); each backend
 * is a tide_gpu_ops_t.
 *
 * Pure by construction: readings take the time as an argument, so the simulator can drive the same
 * backends on a virtual clock. */
#ifndef TIDE_GPU_H
#define TIDE_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Static facts about one device, filled by open. */
typedef struct tide_gpu_info {
    char device[64];       /* "sim:h100": what the worker reports as WorkerHello.device */
    double peak_flops;     /* dense BF16 FLOP/s (the MFU denominator) */
    uint64_t memory_bytes; /* device memory */
    double tdp_w;          /* board power limit */
} tide_gpu_info_t;

/* Which fields of a reading are known (a backend that cannot read one, or whose call failed,
 * leaves its bit clear: unknown is never reported as zero). */
#define TIDE_GPU_HAS_UTIL        (1u << 0)
#define TIDE_GPU_HAS_MEMORY      (1u << 1) /* mem_used_bytes, mem_total_bytes */
#define TIDE_GPU_HAS_TEMPERATURE (1u << 2)
#define TIDE_GPU_HAS_POWER       (1u << 3)
#define TIDE_GPU_HAS_MEM_BW      (1u << 4)
#define TIDE_GPU_HAS_CLOCKS      (1u << 5) /* sm_clock_mhz, mem_clock_mhz */
#define TIDE_GPU_HAS_THROTTLE    (1u << 6)
#define TIDE_GPU_HAS_ECC         (1u << 7) /* ecc_corrected, ecc_uncorrected */
#define TIDE_GPU_HAS_XID         (1u << 8) /* xid_count, last_xid */
#define TIDE_GPU_HAS_NET         (1u << 9)  /* net_util (the node's, worker/hostio.h) */
#define TIDE_GPU_HAS_STORAGE     (1u << 10) /* storage_util (the node's, worker/hostio.h) */

/* One reading; mirrors tide.v1.Telemetry. GPU backends fill the device fields; the worker adds
 * the node's network and storage figures (worker/hostio.h). */
typedef struct tide_gpu_telemetry {
    double gpu_util; /* 0..1: fraction of time a kernel ran */
    uint64_t mem_used_bytes;
    uint64_t mem_total_bytes;
    double temperature_c;
    double power_w;
    double mem_bw_util;         /* 0..1: fraction of time device memory was read or written */
    uint32_t sm_clock_mhz;
    uint32_t mem_clock_mhz;
    uint64_t throttle_reasons;  /* NVML's clocks-throttle-reason bits (0: none) */
    uint64_t ecc_corrected;     /* volatile totals since the driver loaded */
    uint64_t ecc_uncorrected;
    uint64_t xid_count;         /* XID events seen since open */
    uint32_t last_xid;          /* the newest XID code, 0: none */
    double net_util;            /* 0..1: the node's network links, busiest direction (hostio) */
    double storage_util;        /* 0..1: the node's busiest disk, or bytes/s over a capacity */
    uint32_t known;             /* TIDE_GPU_HAS_* */
} tide_gpu_telemetry_t;

/* A backend. `model` is the part of the name after "BACKEND:". `peak_flops` > 0 is the user's
 * --peak-flops: a backend that would measure its peak (cpu) uses it instead; the others ignore it
 * (tide_gpu_open puts it in info). `busy` tells simulated backends whether work runs on the GPU
 * from now_ms on (real backends ignore it and measure). `track` (optional, NULL where unused) names
 * the processes that run on the device, for backends that measure processes (cpu); the array is
 * the caller's and is copied. All return 0 or -errno. */
typedef struct tide_gpu_ops {
    const char *name; /* "sim" */
    int (*open)(const char *model, int index, int64_t now_ms, double peak_flops, void **state,
                tide_gpu_info_t *info, tide_error_t *err);
    int (*read)(void *state, int64_t now_ms, bool busy, tide_gpu_telemetry_t *out);
    void (*track)(void *state, const int32_t *pids, size_t n_pids);
    void (*close)(void *state); /* NULL state is fine */
} tide_gpu_ops_t;

/* The simulated backend (gpu_sim.c). */
extern const tide_gpu_ops_t tide_gpu_sim_ops;
/* The NVML backend (gpu_nvml.c): takes no model; libnvidia-ml.so.1 (or $TIDE_NVML_LIB) is loaded
 * with dlopen at open. */
extern const tide_gpu_ops_t tide_gpu_nvml_ops;
/* The cpu backend (gpu_cpu.c): CPU trainers; takes no model. The "device" is one core: its peak is
 * measured at open by a short calibrated kernel unless peak_flops is given; readings come from
 * /proc for the tracked processes and the host. */
extern const tide_gpu_ops_t tide_gpu_cpu_ops;

typedef struct tide_gpu tide_gpu_t;

/* Opens device `spec` ("sim:h100", "nvml", "cpu" or "auto") as GPU number `index`. "auto" opens
 * nvml and falls back to sim:h100 with one warning when no NVIDIA driver or GPU is usable.
 * `peak_flops` > 0 (--peak-flops) replaces the device's peak in info (and spares the cpu backend
 * its calibration); 0 keeps the device's. An unknown backend or model fails with -ENOENT and an
 * err text that lists the known ones. *out is the caller's; free with tide_gpu_close. */
int tide_gpu_open(const char *spec, int index, int64_t now_ms, double peak_flops, tide_gpu_t **out,
                  tide_error_t *err);
/* Borrowed; valid until tide_gpu_close. */
const tide_gpu_info_t *tide_gpu_info(const tide_gpu_t *g);
/* The processes that run on the device now (tide_gpu_ops_t.track; a no-op for backends without
 * it). pids is the caller's. */
void tide_gpu_track(tide_gpu_t *g, const int32_t *pids, size_t n_pids);
/* Reads telemetry at now_ms; `busy` as in tide_gpu_ops_t.read. Returns 0 or -errno. */
int tide_gpu_read(tide_gpu_t *g, int64_t now_ms, bool busy, tide_gpu_telemetry_t *out);
/* NULL is fine. */
void tide_gpu_close(tide_gpu_t *g);

#endif

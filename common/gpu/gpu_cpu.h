/* The "cpu" telemetry backend (gpu_cpu.c): one CPU core as the "device" of a CPU trainer. This
 * header exposes what tests and tools need beyond tide_gpu_cpu_ops (declared in gpu.h): the peak
 * calibration, the /proc/PID/stat parser, and an open whose /proc and /sys roots can be moved to a
 * fixture tree. */
#ifndef TIDE_GPU_CPU_H
#define TIDE_GPU_CPU_H

#include <stdint.h>

#include "error.h"
#include "gpu.h"

/* The fields of /proc/PID/stat the backend uses. */
typedef struct tide_gpu_cpu_stat {
    char state;         /* field 3: R, S, D, Z, ... */
    uint64_t utime;     /* field 14, clock ticks (sysconf(_SC_CLK_TCK)) */
    uint64_t stime;     /* field 15, clock ticks */
    uint64_t starttime; /* field 22, ticks after boot: tells a reused pid from the old process */
} tide_gpu_cpu_stat_t;

/* Parses the text of /proc/PID/stat (NUL-terminated, borrowed). The command name in field 2 may
 * hold spaces and parentheses, so fields are counted from the LAST ')'. Returns 0, or -EINVAL when
 * the text is not a stat line (no ')', a field missing or not a number); *out is then unchanged. */
int tide_gpu_cpu_parse_stat(const char *text, tide_gpu_cpu_stat_t *out);

/* Measures the fp64 FLOP/s one core reaches on a small cache-resident GEMM (method in gpu_cpu.c's
 * header comment); takes ~0.15 s of CPU. Returns FLOP/s (> 0). */
double tide_gpu_cpu_calibrate(void);

/* tide_gpu_cpu_ops.open with the roots of /proc and /sys given (tests pass a fixture tree;
 * the backend opens "/proc" and "/sys"). Roots are borrowed for the call and copied (at most 511
 * bytes each, else -ENAMETOOLONG). peak_flops > 0 is used as the peak, 0 calibrates. *state is the
 * caller's: use it with tide_gpu_cpu_ops.read/track and free it with tide_gpu_cpu_ops.close.
 * Returns 0 or -errno (err says why). */
int tide_gpu_cpu_open_at(const char *proc_root, const char *sys_root, int64_t now_ms,
                         double peak_flops, void **state, tide_gpu_info_t *info, tide_error_t *err);

#endif

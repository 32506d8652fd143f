/* tide-worker --probe (probe.h): two readings interval_ms apart, the second one printed. Runs
 * before any loop exists, so it simply sleeps; nothing here is shared with the agent's state. */
#include "probe.h"

#include <errno.h>
#include <time.h>

#include "clock.h"

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static void line_pct(FILE *out, const char *name, double v, bool known)
{
    if (known)
        fprintf(out, "%-18s %.1f%%\n", name, 100 * v);
    else
        fprintf(out, "%-18s unknown\n", name);
}

int tide_worker_probe(tide_gpu_t *gpu, tide_hostio_t *hostio, unsigned interval_ms, FILE *out)
{
    const tide_gpu_info_t *info = tide_gpu_info(gpu);
    tide_gpu_telemetry_t t;
    tide_hostio_reading_t io = {0};
    uint32_t k;
    int rc;

    rc = tide_gpu_read(gpu, tide_clock_mono_ms(), false, &t);
    if (hostio)
        tide_hostio_read(hostio, tide_clock_mono_ms(), &io);
    if (rc < 0)
        return rc;
    sleep_ms(interval_ms);
    rc = tide_gpu_read(gpu, tide_clock_mono_ms(), false, &t);
    if (rc < 0)
        return rc;
    if (hostio) {
        tide_hostio_read(hostio, tide_clock_mono_ms(), &io);
        t.net_util = io.net_util;
        t.storage_util = io.storage_util;
        t.known |= io.known;
    }
    k = t.known;
    fprintf(out, "%-18s %s\n", "device", info->device);
    fprintf(out, "%-18s %.4g\n", "peak_flops", info->peak_flops);
    fprintf(out, "%-18s %llu\n", "memory_bytes", (unsigned long long)info->memory_bytes);
    fprintf(out, "%-18s %.0f\n", "power_limit_w", info->tdp_w);
    line_pct(out, "utilization", t.gpu_util, k & TIDE_GPU_HAS_UTIL);
    if (k & TIDE_GPU_HAS_MEMORY)
        fprintf(out, "%-18s %llu of %llu bytes\n", "memory_used", (unsigned long long)t.mem_used_bytes,
                (unsigned long long)t.mem_total_bytes);
    else
        fprintf(out, "%-18s unknown\n", "memory_used");
    line_pct(out, "memory_bandwidth", t.mem_bw_util, k & TIDE_GPU_HAS_MEM_BW);
    if (k & TIDE_GPU_HAS_TEMPERATURE)
        fprintf(out, "%-18s %.0f C\n", "temperature", t.temperature_c);
    else
        fprintf(out, "%-18s unknown\n", "temperature");
    if (k & TIDE_GPU_HAS_POWER)
        fprintf(out, "%-18s %.1f W\n", "power", t.power_w);
    else
        fprintf(out, "%-18s unknown\n", "power");
    if (k & TIDE_GPU_HAS_CLOCKS)
        fprintf(out, "%-18s sm %u MHz, memory %u MHz\n", "clocks", t.sm_clock_mhz, t.mem_clock_mhz);
    else
        fprintf(out, "%-18s unknown\n", "clocks");
    if (k & TIDE_GPU_HAS_THROTTLE)
        fprintf(out, "%-18s 0x%llx\n", "throttle_reasons", (unsigned long long)t.throttle_reasons);
    else
        fprintf(out, "%-18s unknown\n", "throttle_reasons");
    if (k & TIDE_GPU_HAS_ECC)
        fprintf(out, "%-18s %llu corrected, %llu uncorrected\n", "ecc_errors",
                (unsigned long long)t.ecc_corrected, (unsigned long long)t.ecc_uncorrected);
    else
        fprintf(out, "%-18s unknown\n", "ecc_errors");
    if (k & TIDE_GPU_HAS_XID)
        fprintf(out, "%-18s %llu (last %u)\n", "xid_events", (unsigned long long)t.xid_count,
                t.last_xid);
    else
        fprintf(out, "%-18s unknown\n", "xid_events");
    line_pct(out, "network", t.net_util, k & TIDE_GPU_HAS_NET);
    line_pct(out, "storage_io", t.storage_util, k & TIDE_GPU_HAS_STORAGE);
    fprintf(out, "%-18s 0x%x\n", "known", k);
    return 0;
}

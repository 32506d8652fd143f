/* The node's network and storage I/O utilization, the telemetry's network and storage dimensions
 * (docs/metrics.md): what the worker adds to every backend's reading.
 *   network = bytes/s through the chosen interfaces ÷ their capacity, busiest direction (links are
 *             full duplex): per interface against its link speed (/sys/class/net/IF/speed), the
 *             busiest interface binding; or max(sum rx, sum tx) ÷ --net-capacity when given.
 *   storage = the busiest chosen disk's busy-time fraction from /proc/diskstats (iostat's %util);
 *             or (sectors read + written) × 512 per second ÷ --storage-capacity when given.
 * A dimension with nothing to measure (no interface with a known speed and no --net-capacity; no
 * disk) is unknown, never 0. Rates need two samples: the first read only sets the baseline. */
#ifndef TIDE_WORKER_HOSTIO_H
#define TIDE_WORKER_HOSTIO_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct tide_hostio_config {
    const char *net_devs;     /* "eth0,ib0"; NULL or "": every interface that is up, but loopback */
    double net_capacity;      /* bytes/s of the chosen interfaces together; 0: their link speeds */
    const char *storage_devs; /* "nvme0n1,sda"; NULL or "": every whole disk (not loop, ram, zram,
                                 dm-, md, sr, fd) */
    double storage_capacity;  /* bytes/s; 0: busy-time fraction */
    const char *proc_root;    /* NULL: "/proc" (tests point it at a fixture tree) */
    const char *sys_root;     /* NULL: "/sys" */
} tide_hostio_config_t;

typedef struct tide_hostio tide_hostio_t;

/* One sample's outcome: the fields that are known have their bit set (TIDE_GPU_HAS_NET,
 * TIDE_GPU_HAS_STORAGE from gpu.h). */
typedef struct tide_hostio_reading {
    double net_util;     /* 0..1 (clamped) */
    double storage_util; /* 0..1 (clamped) */
    double net_bytes_per_s;     /* busiest direction, summed over the chosen interfaces; filled
                                   whenever the rate could be measured, even with no capacity */
    double storage_bytes_per_s; /* read + written, summed over the chosen disks (likewise) */
    uint32_t known;
} tide_hostio_reading_t;

/* Checks the config (a named interface or disk that does not exist fails with -ENOENT and an err
 * naming it; capacities must be finite and >= 0: -EINVAL) and takes the baseline sample at
 * now_ms. *out is the caller's; free with tide_hostio_close. */
int tide_hostio_open(const tide_hostio_config_t *cfg, int64_t now_ms, tide_hostio_t **out,
                     tide_error_t *err);
/* Samples at now_ms (monotonic ms) and fills *out with the utilization since the previous read.
 * A file that cannot be read or parsed leaves that dimension unknown for this sample. Returns 0. */
int tide_hostio_read(tide_hostio_t *h, int64_t now_ms, tide_hostio_reading_t *out);
/* NULL is fine. */
void tide_hostio_close(tide_hostio_t *h);

/* Pure parsers, exposed for tests. */

/* From /proc/net/dev's text: the received and transmitted byte counters of interface `dev`.
 * Returns 0, or -ENOENT when it is not listed, -EINVAL when its line is malformed. */
int tide_hostio_parse_net_dev(const char *text, const char *dev, uint64_t *rx_bytes,
                              uint64_t *tx_bytes);
/* From /proc/diskstats' text: disk `dev`'s sectors read, sectors written and milliseconds spent
 * doing I/O (fields 6, 10 and 13). Returns 0, -ENOENT or -EINVAL as above. */
int tide_hostio_parse_diskstats(const char *text, const char *dev, uint64_t *sectors_read,
                                uint64_t *sectors_written, uint64_t *io_ms);

#endif

/* The "cpu" backend: telemetry for CPU trainers, where one tide-worker stands for one core. Figures
 * come from /proc (the tracked processes and the host) and /sys (thermal zones, RAPL); the peak is
 * measured once at open. Invariants: a TIDE_GPU_HAS_* bit is set only when the files behind it were
 * read and parsed (unknown is never reported as zero), and a read allocates nothing: it opens,
 * reads and closes each file once into stack buffers.
 *
 * Peak (tide_gpu_cpu_calibrate; --peak-flops replaces it, and then nothing is measured): the fp64
 * FLOP/s one core reaches on C += A·B with A, B, C 64×64 (96 KiB together: resident in L1/L2),
 * written the way a good plain-C trainer is (tide-mlp's model.c): i-k-j order, four rows of C per
 * pass so each loaded row of B feeds four of them, the inner loop over contiguous columns, which
 * the compiler vectorises with the baseline ISA (SSE2 on x86-64: the project builds without
 * -march). One GEMM counts 2·64·64·64 FLOPs. A run repeats it in batches of 8 until 35 ms of CPU
 * time have passed; the peak is the best of 4 runs (the first also warms caches and clocks):
 * ~140 ms of CPU in all; on a busy host the runs stop at 200 ms of wall time (at least one batch
 * is timed). A checksum of C is used afterwards, so the work cannot be optimised away.
 *
 * Clock: runs are timed with CLOCK_THREAD_CPUTIME_ID, not CLOCK_MONOTONIC. The peak is what the
 * core does while it runs the kernel; on a busy host (2 cores shared by several workers and their
 * trainers) a monotonic clock would count the time the thread spent descheduled as slow FLOPs and
 * understate the peak, which inflates every MFU computed against it. The CPU-time clock cannot see
 * slowdowns while the thread runs (an SMT sibling or a noisy VM neighbour on the same physical
 * core): best-of-4 absorbs short ones; on a host shared all the time, pass --peak-flops.
 *
 * Build: gpu_cpu.c is compiled with -O3 -ffp-contract=off in every build type, as tide-mlp's model
 * is (common/gpu/CMakeLists.txt), and the kernel without sanitizers (ASan slows it ~10×), so a
 * Debug or ASan worker measures the same peak as a release one.
 *
 * Readings (tide_gpu_ops_t.read; `busy` is ignored: this backend measures):
 *  - gpu_util: Σ over tracked pids of Δ(utime+stime) of /proc/PID/stat, in seconds (÷ CLK_TCK),
 *    ÷ (Δ wall seconds × 1 core), clamped to [0, 1] (a multi-threaded rank can use more than its
 *    core). A pid counts from its second sample on (the first is its baseline); a pid whose files
 *    are gone is dropped, and its CPU since the previous read is lost; a pid reused by a new
 *    process (another starttime) starts over. No tracked pids: 0, known (nothing runs on the
 *    core). The tracked pids count with their descendants (all threads; the children of each
 *    process's main thread, from /proc/PID/task/PID/children), so a helper's rank is seen.
 *    Resolution: one tick (10 ms with CLK_TCK 100) per interval, 2% at the worker's 2 reads/s.
 *  - mem_used_bytes: Σ RSS of the tracked pids (/proc/PID/statm field 2 × page size; pages shared
 *    by two tracked pids count twice); mem_total_bytes: MemTotal of /proc/meminfo, read at open.
 *  - temperature_c: the hottest of up to 8 thermal zones (/sys/class/thermal/thermal_zoneN/temp,
 *    the lowest-numbered N that are readable at open), in °C; unknown when none reads.
 *  - power_w: package power of socket 0 (the whole package, not this core's share), from the
 *    RAPL counter /sys/class/powercap/intel-rapl:0/energy_uj (also AMD's on recent kernels) as
 *    Δenergy ÷ Δt between reads; a wrap is undone with max_energy_range_uj, or the sample is
 *    skipped when that is unknown. Often readable by root only (unknown otherwise).
 *  - Memory bandwidth, clocks, throttling, ECC and XID have no source here: always unknown.
 * Two reads at the same now_ms repeat the previous utilisation and power. */
#include "gpu_cpu.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "xmalloc.h"

/* Calibration (see the header comment). */
#define CAL_DIM     64
#define CAL_BATCH   8
#define CAL_RUN_NS  35000000LL
#define CAL_RUNS    4
#define CAL_WALL_NS 200000000LL

#define MAX_PIDS  64 /* track() keeps the first 64 distinct pids it is given */
#define MAX_ZONES 8
#define ROOT_MAX  512
#define PATH_LEN  (ROOT_MAX + 64)

typedef struct tracked {
    int32_t pid;
    bool have_base;     /* ticks/starttime hold its previous sample */
    uint64_t starttime; /* of the process the baseline belongs to */
    uint64_t ticks;     /* utime + stime at the baseline */
} tracked_t;

typedef struct cpu_state {
    char proc[ROOT_MAX];
    long clk_tck;
    long page_size;
    uint64_t mem_total; /* bytes; 0: unknown */
    size_t n_zones;
    char zones[MAX_ZONES][PATH_LEN]; /* .../thermal_zoneN/temp */
    bool have_rapl;                  /* energy_uj was readable at open */
    char rapl_path[PATH_LEN];
    uint64_t rapl_range; /* max_energy_range_uj; 0: unknown */
    bool have_energy;    /* energy_uj/energy_ms hold the last sample */
    uint64_t energy_uj;
    int64_t energy_ms;
    bool have_power; /* last_power is a figure (for a repeated now_ms) */
    double last_power;
    int64_t last_ms; /* time of the last utilisation baseline */
    double last_util;
    size_t n_roots;
    int32_t roots[MAX_PIDS]; /* what track() named; each read adds their descendants */
    size_t n_pids;
    tracked_t pids[MAX_PIDS];
    bool warned_many;
} cpu_state_t;

/* ---- calibration ---- */

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;

    if (clock_gettime(id, &ts) < 0)
        clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* c += a·b for CAL_DIM×CAL_DIM row-major matrices. Fixed sizes (multiples of the vector width) let
 * the compiler vectorise the j loop with no remainder. Not instrumented: sanitizers would measure
 * their checks (ASan slows this ~10×), not the core. */
__attribute__((no_sanitize("address", "undefined"))) static void
cal_gemm(const double *restrict a, const double *restrict b, double *restrict c)
{
    for (size_t i = 0; i < CAL_DIM; i += 4) {
        double *restrict c0 = c + i * CAL_DIM, *restrict c1 = c0 + CAL_DIM,
                         *restrict c2 = c1 + CAL_DIM, *restrict c3 = c2 + CAL_DIM;
        const double *ai = a + i * CAL_DIM;

        for (size_t k = 0; k < CAL_DIM; k++) {
            const double *restrict bk = b + k * CAL_DIM;
            const double x0 = ai[k], x1 = ai[CAL_DIM + k], x2 = ai[2 * CAL_DIM + k],
                         x3 = ai[3 * CAL_DIM + k];

            for (size_t j = 0; j < CAL_DIM; j++) {
                const double bj = bk[j];

                c0[j] += x0 * bj;
                c1[j] += x1 * bj;
                c2[j] += x2 * bj;
                c3[j] += x3 * bj;
            }
        }
    }
}

double tide_gpu_cpu_calibrate(void)
{
    const size_t n = (size_t)CAL_DIM * CAL_DIM;
    double *a = tide_xmalloc(3 * n * sizeof(double));
    double *b = a + n, *c = b + n;
    const double flops_per_gemm = 2.0 * CAL_DIM * CAL_DIM * CAL_DIM;
    int64_t wall0 = clock_ns(CLOCK_MONOTONIC);
    double best = 0, sum = 0;

    /* Entries in [1/7, 1] and [1/6, 1/2]: C grows by ~7 per GEMM, far from overflow or
     * denormals in the few thousand GEMMs a calibration runs. */
    for (size_t i = 0; i < n; i++) {
        a[i] = 1.0 / (double)(1 + i % 7);
        b[i] = 1.0 / (double)(2 + i % 5);
        c[i] = 0;
    }
    for (int run = 0; run < CAL_RUNS; run++) {
        int64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t;
        long gemms = 0;

        do {
            for (int q = 0; q < CAL_BATCH; q++) {
                cal_gemm(a, b, c);
                /* each GEMM reads the C the previous one wrote: none can be merged or dropped */
                __asm__ volatile("" ::: "memory");
            }
            gemms += CAL_BATCH;
            t = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        } while (t - t0 < CAL_RUN_NS && clock_ns(CLOCK_MONOTONIC) - wall0 < CAL_WALL_NS);
        if (t > t0 && flops_per_gemm * (double)gemms / ((double)(t - t0) * 1e-9) > best)
            best = flops_per_gemm * (double)gemms / ((double)(t - t0) * 1e-9);
        if (clock_ns(CLOCK_MONOTONIC) - wall0 >= CAL_WALL_NS)
            break;
    }
    for (size_t i = 0; i < n; i++)
        sum += c[i];
    /* The checksum is what makes the GEMMs observable; it is always positive and finite. */
    if (!(sum > 0) || !(best > 0)) {
        tide_warn("cpu: calibration went wrong (checksum %g, %g FLOP/s): assuming 1 GFLOP/s", sum,
                  best);
        best = 1e9;
    }
    free(a);
    return best;
}

/* ---- parsing ---- */

/* Reads a decimal u64 at *p (after blanks); the number must end at a blank, a newline or the end.
 * Advances *p past it. Returns 0 or -EINVAL. */
static int parse_u64(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;

    while (*s == ' ' || *s == '\t')
        s++;
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');

        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    if (*s && !isspace((unsigned char)*s))
        return -EINVAL;
    *p = s;
    *out = v;
    return 0;
}

/* A signed decimal (thermal zones go below zero). Same rules as parse_u64. */
static int parse_i64(const char **p, int64_t *out)
{
    const char *s = *p;
    bool neg = false;
    uint64_t v;
    int rc;

    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '-') {
        neg = true;
        s++;
    }
    rc = parse_u64(&s, &v);
    if (rc < 0 || v > (uint64_t)INT64_MAX)
        return -EINVAL;
    *p = s;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* Skips one blank-separated token; -EINVAL when there is none. */
static int skip_token(const char **p)
{
    const char *s = *p;

    while (*s == ' ')
        s++;
    if (!*s || isspace((unsigned char)*s))
        return -EINVAL;
    while (*s && !isspace((unsigned char)*s))
        s++;
    *p = s;
    return 0;
}

int tide_gpu_cpu_parse_stat(const char *text, tide_gpu_cpu_stat_t *out)
{
    const char *p = strrchr(text, ')');
    tide_gpu_cpu_stat_t st;

    if (!p)
        return -EINVAL;
    p++;
    if (*p != ' ' || !isalpha((unsigned char)p[1]) || (p[2] != ' '))
        return -EINVAL;
    memset(&st, 0, sizeof(st));
    st.state = p[1];
    p += 2;
    /* fields 4..22 after the state; only 14, 15 and 22 are kept (others may be negative) */
    for (int field = 4; field <= 22; field++) {
        uint64_t *dst = field == 14   ? &st.utime
                        : field == 15 ? &st.stime
                        : field == 22 ? &st.starttime
                                      : NULL;

        if (dst ? parse_u64(&p, dst) < 0 : skip_token(&p) < 0)
            return -EINVAL;
    }
    *out = st;
    return 0;
}

/* ---- files ---- */

/* Reads the start of a file into buf (NUL-terminated): one open, one read, one close; what fits
 * is enough for every file read here. Returns the length or -errno. */
static ssize_t read_text(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -errno;
    do
        n = read(fd, buf, size - 1);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        n = -errno;
    else
        buf[n] = '\0';
    close(fd);
    return n;
}

/* One number from a file that holds one (temp, energy_uj). Returns 0 or -errno. */
static int read_i64_file(const char *path, int64_t *out)
{
    char buf[64];
    const char *p = buf;
    ssize_t n = read_text(path, buf, sizeof(buf));

    if (n < 0)
        return (int)n;
    return parse_i64(&p, out);
}

static int read_u64_file(const char *path, uint64_t *out)
{
    char buf[64];
    const char *p = buf;
    ssize_t n = read_text(path, buf, sizeof(buf));

    if (n < 0)
        return (int)n;
    return parse_u64(&p, out);
}

/* MemTotal in bytes, or 0 when /proc/meminfo lacks it. */
static uint64_t read_mem_total(const char *proc)
{
    char path[PATH_LEN], buf[4096];
    const char *line;
    uint64_t kb;

    snprintf(path, sizeof(path), "%s/meminfo", proc);
    if (read_text(path, buf, sizeof(buf)) < 0)
        return 0;
    for (line = buf; line; line = strchr(line, '\n')) {
        if (*line == '\n')
            line++;
        if (strncmp(line, "MemTotal:", 9) == 0) {
            const char *p = line + 9;

            return parse_u64(&p, &kb) == 0 && strncmp(p, " kB", 3) == 0 ? kb * 1024 : 0;
        }
    }
    return 0;
}

static int cmp_uint(const void *x, const void *y)
{
    unsigned a = *(const unsigned *)x, b = *(const unsigned *)y;

    return (a > b) - (a < b);
}

/* Keeps the temp files of the lowest-numbered thermal zones that read now, at most MAX_ZONES. */
static void find_zones(cpu_state_t *s, const char *sys)
{
    char dir[PATH_LEN];
    unsigned nums[256];
    size_t n = 0;
    DIR *d;
    struct dirent *e;

    snprintf(dir, sizeof(dir), "%s/class/thermal", sys);
    d = opendir(dir);
    if (!d)
        return;
    while ((e = readdir(d)) != NULL && n < sizeof(nums) / sizeof(nums[0])) {
        const char *p = e->d_name + 12;
        uint64_t v;

        if (strncmp(e->d_name, "thermal_zone", 12) == 0 && parse_u64(&p, &v) == 0 && !*p &&
            v <= 1000000)
            nums[n++] = (unsigned)v;
    }
    closedir(d);
    qsort(nums, n, sizeof(nums[0]), cmp_uint);
    for (size_t i = 0; i < n && s->n_zones < MAX_ZONES; i++) {
        int64_t mc;

        snprintf(s->zones[s->n_zones], PATH_LEN, "%s/class/thermal/thermal_zone%u/temp", sys,
                 nums[i]);
        if (read_i64_file(s->zones[s->n_zones], &mc) == 0)
            s->n_zones++;
    }
}

/* Takes the first RAPL sample at now_ms when the counter reads. */
static void find_rapl(cpu_state_t *s, const char *sys, int64_t now_ms)
{
    char path[PATH_LEN];
    uint64_t e;

    snprintf(s->rapl_path, sizeof(s->rapl_path), "%s/class/powercap/intel-rapl:0/energy_uj", sys);
    if (read_u64_file(s->rapl_path, &e) < 0)
        return;
    s->have_rapl = true;
    s->have_energy = true;
    s->energy_uj = e;
    s->energy_ms = now_ms;
    snprintf(path, sizeof(path), "%s/class/powercap/intel-rapl:0/max_energy_range_uj", sys);
    if (read_u64_file(path, &s->rapl_range) < 0)
        s->rapl_range = 0;
}

/* ---- the backend ---- */

int tide_gpu_cpu_open_at(const char *proc_root, const char *sys_root, int64_t now_ms,
                         double peak_flops, void **state, tide_gpu_info_t *info, tide_error_t *err)
{
    cpu_state_t *s;

    if (strlen(proc_root) >= ROOT_MAX || strlen(sys_root) >= ROOT_MAX) {
        tide_errprintf(err, "cpu: /proc or /sys root longer than %d bytes", ROOT_MAX - 1);
        return -ENAMETOOLONG;
    }
    s = tide_xcalloc(1, sizeof(*s));
    snprintf(s->proc, sizeof(s->proc), "%s", proc_root);
    s->clk_tck = sysconf(_SC_CLK_TCK);
    if (s->clk_tck <= 0)
        s->clk_tck = 100;
    s->page_size = sysconf(_SC_PAGESIZE);
    if (s->page_size <= 0)
        s->page_size = 4096;
    s->mem_total = read_mem_total(proc_root);
    if (!s->mem_total)
        tide_warn("cpu: no MemTotal in %s/meminfo: memory figures are unknown", proc_root);
    find_zones(s, sys_root);
    find_rapl(s, sys_root, now_ms);
    s->last_ms = now_ms;

    memset(info, 0, sizeof(*info));
    snprintf(info->device, sizeof(info->device), "cpu");
    info->memory_bytes = s->mem_total;
    info->tdp_w = 0; /* a package's TDP is not this core's */
    if (peak_flops > 0) {
        info->peak_flops = peak_flops;
    } else {
        int64_t t0 = clock_ns(CLOCK_MONOTONIC);

        info->peak_flops = tide_gpu_cpu_calibrate();
        tide_info("cpu: measured peak %.3g FLOP/s on one core (fp64 GEMM, %.0f ms; --peak-flops "
                  "overrides)",
                  info->peak_flops, (double)(clock_ns(CLOCK_MONOTONIC) - t0) / 1e6);
    }
    *state = s;
    return 0;
}

/* The index is not used: which core a worker stands for is decided by how it is started (one
 * worker per core, ranks with OMP_NUM_THREADS=1). */
static int cpu_open(const char *model, int index, int64_t now_ms, double peak_flops, void **state,
                    tide_gpu_info_t *info, tide_error_t *err)
{
    (void)index;
    if (model && *model) {
        tide_errprintf(err, "the cpu backend takes no model ('cpu:%s'): use 'cpu'", model);
        return -EINVAL;
    }
    return tide_gpu_cpu_open_at("/proc", "/sys", now_ms, peak_flops, state, info, err);
}

/* Keeps the first MAX_PIDS distinct positive pids of `pids` as the processes sampled (a rank is a
 * few processes, a worker runs one rank, so 64 is far more than a worker needs; the rest are
 * ignored, said once). A pid sampled before keeps its baseline; a new one gets its baseline at its
 * first sample. */
static void set_pids(cpu_state_t *s, const int32_t *pids, size_t n_pids)
{
    tracked_t next[MAX_PIDS];
    size_t n = 0;

    for (size_t i = 0; i < n_pids; i++) {
        bool skip = pids[i] <= 0; /* not a process, or named twice */

        for (size_t j = 0; j < n && !skip; j++)
            skip = next[j].pid == pids[i];
        if (skip)
            continue;
        if (n == MAX_PIDS) {
            if (!s->warned_many)
                tide_warn("cpu: tracking only the first %d processes", MAX_PIDS);
            s->warned_many = true;
            break;
        }
        memset(&next[n], 0, sizeof(next[n]));
        next[n].pid = pids[i];
        for (size_t j = 0; j < s->n_pids; j++) {
            if (s->pids[j].pid == pids[i])
                next[n] = s->pids[j];
        }
        n++;
    }
    if (n)
        memcpy(s->pids, next, n * sizeof(next[0]));
    s->n_pids = n;
}

/* The tracked processes are the workers' rank helpers (tide-exec, tide-rank-exec), whose child is
 * the rank: remember them, and sample them with their descendants at each read. */
static void cpu_track(void *state, const int32_t *pids, size_t n_pids)
{
    cpu_state_t *s = state;

    s->n_roots = n_pids < MAX_PIDS ? n_pids : MAX_PIDS;
    if (s->n_roots)
        memcpy(s->roots, pids, s->n_roots * sizeof(pids[0]));
    /* The sampled set (and the baselines of what stays in it) changes at the next read: setting it
     * from the roots alone here would drop the descendants' baselines at every heartbeat. */
}

/* The roots and their descendants, breadth first, from /proc/PID/task/PID/children (the children
 * of each process's main thread: those of other threads are missed), at most MAX_PIDS, duplicates
 * included (set_pids drops them). A process whose file does not read has no children here. */
static size_t with_descendants(const cpu_state_t *s, int32_t *out)
{
    size_t n = s->n_roots;

    memcpy(out, s->roots, n * sizeof(out[0]));
    for (size_t i = 0; i < n && n < MAX_PIDS; i++) {
        char path[PATH_LEN], buf[1024];
        const char *p = buf;
        uint64_t child;

        if (out[i] <= 0)
            continue;
        snprintf(path, sizeof(path), "%s/%d/task/%d/children", s->proc, (int)out[i], (int)out[i]);
        if (read_text(path, buf, sizeof(buf)) < 0)
            continue;
        while (n < MAX_PIDS && parse_u64(&p, &child) == 0 && child > 0 && child <= INT32_MAX) {
            bool seen = false;
            for (size_t j = 0; j < n && !seen; j++)
                seen = out[j] == (int32_t)child;
            if (!seen)
                out[n++] = (int32_t)child;
        }
    }
    return n;
}

/* Samples one pid: adds its ticks since the baseline (when `advance`) and its resident pages.
 * Returns 0, or -errno when the process is gone (its files do not read or parse). */
static int sample_pid(const cpu_state_t *s, tracked_t *t, bool advance, uint64_t *ticks,
                      uint64_t *rss_pages)
{
    char path[PATH_LEN], buf[1024];
    const char *p = buf;
    tide_gpu_cpu_stat_t st;
    uint64_t size, resident, now_ticks;
    ssize_t n;

    snprintf(path, sizeof(path), "%s/%d/stat", s->proc, (int)t->pid);
    n = read_text(path, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    if (tide_gpu_cpu_parse_stat(buf, &st) < 0)
        return -EINVAL;
    snprintf(path, sizeof(path), "%s/%d/statm", s->proc, (int)t->pid);
    n = read_text(path, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    if (parse_u64(&p, &size) < 0 || parse_u64(&p, &resident) < 0)
        return -EINVAL;
    *rss_pages += resident;
    now_ticks = st.utime + st.stime;
    if (!t->have_base || t->starttime != st.starttime) {
        t->have_base = true;
        t->starttime = st.starttime;
        t->ticks = now_ticks;
    } else if (advance) {
        *ticks += now_ticks >= t->ticks ? now_ticks - t->ticks : 0;
        t->ticks = now_ticks;
    }
    return 0;
}

/* Package power since the previous sample; sets the bit when known. */
static void read_power(cpu_state_t *s, int64_t now_ms, tide_gpu_telemetry_t *out)
{
    uint64_t e, d;

    if (!s->have_rapl || read_u64_file(s->rapl_path, &e) < 0)
        return;
    if (s->have_energy && now_ms <= s->energy_ms) {
        if (s->have_power) {
            out->power_w = s->last_power;
            out->known |= TIDE_GPU_HAS_POWER;
        }
        return;
    }
    s->have_power = false;
    if (s->have_energy && (e >= s->energy_uj || (s->rapl_range && s->energy_uj <= s->rapl_range))) {
        d = e >= s->energy_uj ? e - s->energy_uj : s->rapl_range - s->energy_uj + e;
        /* µJ per ms is mW */
        s->last_power = (double)d / (double)(now_ms - s->energy_ms) / 1000.0;
        s->have_power = true;
        out->power_w = s->last_power;
        out->known |= TIDE_GPU_HAS_POWER;
    }
    s->have_energy = true;
    s->energy_uj = e;
    s->energy_ms = now_ms;
}

static int cpu_read(void *state, int64_t now_ms, bool busy, tide_gpu_telemetry_t *out)
{
    cpu_state_t *s = state;
    bool advance = now_ms > s->last_ms;
    uint64_t ticks = 0, rss_pages = 0;
    size_t keep = 0;
    bool have_temp = false;
    int64_t max_mc = 0;

    (void)busy; /* measured, not modelled */
    memset(out, 0, sizeof(*out));
    {
        int32_t all[MAX_PIDS];
        set_pids(s, all, with_descendants(s, all));
    }
    for (size_t i = 0; i < s->n_pids; i++) {
        tracked_t t = s->pids[i];

        if (sample_pid(s, &t, advance, &ticks, &rss_pages) == 0)
            s->pids[keep++] = t;
    }
    s->n_pids = keep;
    if (advance) {
        double util = (double)ticks / (double)s->clk_tck / ((double)(now_ms - s->last_ms) / 1000.0);

        s->last_util = util > 1 ? 1 : util;
        s->last_ms = now_ms;
    }
    out->gpu_util = s->last_util;
    out->known |= TIDE_GPU_HAS_UTIL;

    if (s->mem_total) {
        out->mem_used_bytes = rss_pages * (uint64_t)s->page_size;
        out->mem_total_bytes = s->mem_total;
        out->known |= TIDE_GPU_HAS_MEMORY;
    }

    for (size_t i = 0; i < s->n_zones; i++) {
        int64_t mc;

        if (read_i64_file(s->zones[i], &mc) == 0 && (!have_temp || mc > max_mc)) {
            max_mc = mc;
            have_temp = true;
        }
    }
    if (have_temp) {
        out->temperature_c = (double)max_mc / 1000.0;
        out->known |= TIDE_GPU_HAS_TEMPERATURE;
    }

    read_power(s, now_ms, out);
    return 0;
}

static void cpu_close(void *state)
{
    free(state);
}

const tide_gpu_ops_t tide_gpu_cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .read = cpu_read,
    .track = cpu_track,
    .close = cpu_close,
};

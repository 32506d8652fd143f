/* Unit tests of the cpu GPU backend (common/gpu/gpu_cpu.c): the /proc/PID/stat parser, readings
 * from a fixture /proc and /sys tree (exact: the time is passed in), the real /proc with a spinning
 * child, and opening through tide_gpu_open with a measured or a given peak. */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gpu.h"
#include "fake_tree.h"
#include "gpu_cpu.h"

#define GIB (1024ULL * 1024 * 1024)

/* CMocka 1.1 has no assert_double_equal. */
#define assert_near(a, b, eps) assert_near_at((a), (b), (eps), __FILE__, __LINE__)

static void assert_near_at(double a, double b, double eps, const char *file, int line)
{
    if (!(fabs(a - b) <= eps)) {
        print_error("%.17g != %.17g (within %g)\n", a, b, eps);
        _fail(file, line);
    }
}

/* ---- fixture tree ---- */

typedef tide_fake_tree_t fixture_t;
#define put    tide_fake_tree_put
#define rm_tree tide_fake_tree_rm

/* Each fixture test gets a fresh tree in *state; teardown removes it, also after a failure. */
static int setup_fixture(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    assert_int_equal(tide_fake_tree_init(f, "gpu-cpu"), 0);
    *state = f;
    return 0;
}

static int teardown_fixture(void **state)
{
    fixture_t *f = *state;

    rm_tree(f->root);
    free(f);
    return 0;
}

/* /proc/PID/stat and statm of a fake process; its comm has spaces and parentheses. */
static void put_pid(const fixture_t *f, int pid, unsigned long long utime, unsigned long long stime,
                    unsigned long long starttime, unsigned long long rss_pages)
{
    char rel[64];

    snprintf(rel, sizeof(rel), "proc/%d/stat", pid);
    put(f, rel,
        "%d (py (rank) 0) R 1 %d %d 0 -1 4194304 1200 0 3 0 %llu %llu 0 0 20 0 1 0 %llu 104857600 "
        "%llu 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
        pid, pid, pid, utime, stime, starttime, rss_pages);
    snprintf(rel, sizeof(rel), "proc/%d/statm", pid);
    put(f, rel, "25600 %llu 300 10 0 2000 0\n", rss_pages);
}

static void remove_pid(const fixture_t *f, int pid)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/%d", f->proc, pid);
    rm_tree(path);
}

static void *open_fixture(const fixture_t *f, int64_t now_ms)
{
    void *st = NULL;
    tide_gpu_info_t info;
    tide_error_t err;

    assert_int_equal(tide_gpu_cpu_open_at(f->proc, f->sys, now_ms, 1e9, &st, &info, &err), 0);
    assert_non_null(st);
    return st;
}

static tide_gpu_telemetry_t read_at(void *st, int64_t now_ms)
{
    tide_gpu_telemetry_t t;

    memset(&t, 0xa5, sizeof(t)); /* the backend must fill every field */
    assert_int_equal(tide_gpu_cpu_ops.read(st, now_ms, true, &t), 0);
    return t;
}

static double tck(void)
{
    return (double)sysconf(_SC_CLK_TCK);
}

static uint64_t page(void)
{
    return (uint64_t)sysconf(_SC_PAGESIZE);
}

/* ---- parser ---- */

static void test_parse_stat(void **state)
{
    tide_gpu_cpu_stat_t st;
    char buf[1024];
    FILE *fp;
    size_t n;

    (void)state;
    assert_int_equal(tide_gpu_cpu_parse_stat("42 (a) b (c) R 1 42 42 0 -1 4194304 10 0 0 0 7 3 0 0 "
                                             "20 0 1 0 99 1000 5 18446744073709551615 1\n",
                                             &st),
                     0);
    assert_int_equal(st.state, 'R');
    assert_int_equal(st.utime, 7);
    assert_int_equal(st.stime, 3);
    assert_int_equal(st.starttime, 99);
    /* a comm that ends in ") S 1 ..." cannot fool it: the last ')' wins */
    assert_int_equal(tide_gpu_cpu_parse_stat("7 (x) S 1 2 3 4 5 6 7 8 9 10 11 12) Z 1 7 7 0 -1 0 0 "
                                             "0 0 0 40 2 0 0 20 0 1 0 5 0 0\n",
                                             &st),
                     0);
    assert_int_equal(st.state, 'Z');
    assert_int_equal(st.utime, 40);
    assert_int_equal(st.stime, 2);
    assert_int_equal(st.starttime, 5);

    /* failures leave *out alone */
    memset(&st, 0, sizeof(st));
    st.utime = 1234;
    assert_int_equal(tide_gpu_cpu_parse_stat("42 (abc R 1 42", &st), -EINVAL);
    assert_int_equal(tide_gpu_cpu_parse_stat("42 (a) R 1 42 42 0 -1 4194304 10 0 0 0 7", &st),
                     -EINVAL);
    assert_int_equal(tide_gpu_cpu_parse_stat("42 (a) R 1 42 42 0 -1 4194304 10 0 0 0 7x 3 0 0 20 0 "
                                             "1 0 99\n",
                                             &st),
                     -EINVAL);
    assert_int_equal(tide_gpu_cpu_parse_stat("42 (a) R 1 42 42 0 -1 4194304 10 0 0 0 -7 3 0 0 20 0 "
                                             "1 0 99\n",
                                             &st),
                     -EINVAL);
    assert_int_equal(tide_gpu_cpu_parse_stat("42 (a)R 1", &st), -EINVAL);
    assert_int_equal(tide_gpu_cpu_parse_stat("", &st), -EINVAL);
    assert_int_equal(st.utime, 1234);

    /* the real thing */
    fp = fopen("/proc/self/stat", "r");
    assert_non_null(fp);
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    assert_int_equal(tide_gpu_cpu_parse_stat(buf, &st), 0);
    assert_int_equal(st.state, 'R');
    assert_true(st.starttime > 0);
}

/* ---- fixture readings ---- */

static void test_fixture_readings(void **state)
{
    fixture_t *f = *state;
    void *st = NULL;
    tide_gpu_info_t info;
    tide_gpu_telemetry_t t;
    const int32_t pids[] = {100, 200};
    const uint32_t all =
        TIDE_GPU_HAS_UTIL | TIDE_GPU_HAS_MEMORY | TIDE_GPU_HAS_TEMPERATURE | TIDE_GPU_HAS_POWER;

    put(f, "proc/meminfo", "MemTotal:        8388608 kB\nMemFree:  100 kB\n");
    put_pid(f, 100, 1000, 500, 7000, 250);
    put_pid(f, 200, 10, 5, 7100, 50);
    put(f, "sys/class/thermal/thermal_zone0/temp", "45000\n");
    put(f, "sys/class/thermal/thermal_zone1/temp", "61500\n");
    put(f, "sys/class/thermal/thermal_zone2/type", "no temp file here\n");
    put(f, "sys/class/thermal/cooling_device0/temp", "99000\n"); /* not a zone */
    put(f, "sys/class/powercap/intel-rapl:0/energy_uj", "1000000\n");
    put(f, "sys/class/powercap/intel-rapl:0/max_energy_range_uj", "262143328850\n");

    assert_int_equal(tide_gpu_cpu_open_at(f->proc, f->sys, 10000, 1e9, &st, &info, NULL), 0);
    assert_string_equal(info.device, "cpu");
    assert_true(info.peak_flops == 1e9);
    assert_true(info.memory_bytes == 8 * GIB);
    assert_true(info.tdp_w == 0);

    /* nothing tracked: idle, known */
    t = read_at(st, 10000);
    assert_int_equal(t.known, TIDE_GPU_HAS_UTIL | TIDE_GPU_HAS_MEMORY | TIDE_GPU_HAS_TEMPERATURE);
    assert_true(t.gpu_util == 0);
    assert_true(t.mem_used_bytes == 0);
    assert_true(t.mem_total_bytes == 8 * GIB);
    assert_near(t.temperature_c, 61.5, 1e-9);

    /* first sample of both pids: their baselines, util 0 */
    tide_gpu_cpu_ops.track(st, pids, 2);
    put(f, "sys/class/powercap/intel-rapl:0/energy_uj", "7000000\n");
    t = read_at(st, 10500);
    assert_int_equal(t.known, all);
    assert_true(t.gpu_util == 0);
    assert_true(t.mem_used_bytes == 300 * page());
    /* 6 J over 0.5 s since open */
    assert_near(t.power_w, 12.0, 1e-9);

    /* 50 + 25 ticks in 1 s; 5 J in 1 s */
    put_pid(f, 100, 1030, 520, 7000, 260);
    put_pid(f, 200, 30, 10, 7100, 40);
    put(f, "sys/class/powercap/intel-rapl:0/energy_uj", "12000000\n");
    t = read_at(st, 11500);
    assert_int_equal(t.known, all);
    assert_near(t.gpu_util, fmin(1.0, 75.0 / tck()), 1e-9);
    assert_true(t.mem_used_bytes == 300 * page());
    assert_near(t.power_w, 5.0, 1e-9);
    assert_true(t.mem_total_bytes == 8 * GIB);

    /* the same instant again: the same figures */
    t = read_at(st, 11500);
    assert_int_equal(t.known, all);
    assert_near(t.gpu_util, fmin(1.0, 75.0 / tck()), 1e-9);
    assert_near(t.power_w, 5.0, 1e-9);

    /* pid 200 exits; pid 100 uses 10 ticks in 2 s */
    remove_pid(f, 200);
    put_pid(f, 100, 1035, 525, 7000, 260);
    t = read_at(st, 13500);
    assert_near(t.gpu_util, 10.0 / tck() / 2.0, 1e-9);
    assert_true(t.mem_used_bytes == 260 * page());
    assert_near(t.power_w, 0.0, 1e-9);
    assert_true(t.known & TIDE_GPU_HAS_POWER);

    /* a tracked pid that comes back is sampled again from a fresh baseline: its 1000 ticks do
     * not count, its pages do */
    put_pid(f, 200, 500, 500, 9000, 1000);
    t = read_at(st, 14500);
    assert_true(t.gpu_util == 0);
    assert_true(t.mem_used_bytes == 1260 * page());
    /* tracked again: a fresh baseline (its 1000 ticks do not count) */
    tide_gpu_cpu_ops.track(st, pids, 2);
    put_pid(f, 100, 1040, 525, 7000, 260);
    t = read_at(st, 15500);
    assert_near(t.gpu_util, 5.0 / tck(), 1e-9);
    assert_true(t.mem_used_bytes == 1260 * page());

    /* more CPU than one core (a multi-threaded rank): clamped */
    put_pid(f, 100, 1540, 525, 7000, 260);
    put_pid(f, 200, 900, 900, 9000, 1000);
    t = read_at(st, 16500);
    assert_true(t.gpu_util == 1.0);

    /* an unreadable thermal zone drops out of the max; all gone: unknown */
    put(f, "sys/class/thermal/thermal_zone1/temp", "garbage\n");
    t = read_at(st, 17500);
    assert_near(t.temperature_c, 45.0, 1e-9);
    rm_tree(f->sys);
    t = read_at(st, 18500);
    assert_false(t.known & TIDE_GPU_HAS_TEMPERATURE);
    assert_false(t.known & TIDE_GPU_HAS_POWER);
    assert_true(t.temperature_c == 0 && t.power_w == 0);
    assert_int_equal(t.known, TIDE_GPU_HAS_UTIL | TIDE_GPU_HAS_MEMORY);

    tide_gpu_cpu_ops.close(st);
}

static void test_rapl_wrap(void **state)
{
    fixture_t *f = *state;
    void *st;
    tide_gpu_telemetry_t t;

    put(f, "proc/meminfo", "MemTotal: 1024 kB\n");
    put(f, "sys/class/powercap/intel-rapl:0/energy_uj", "990000\n");
    put(f, "sys/class/powercap/intel-rapl:0/max_energy_range_uj", "1000000\n");
    st = open_fixture(f, 0);
    /* wrapped: 10,000 µJ to the top, 20,000 after it, in 1 s */
    put(f, "sys/class/powercap/intel-rapl:0/energy_uj", "20000\n");
    t = read_at(st, 1000);
    assert_true(t.known & TIDE_GPU_HAS_POWER);
    assert_near(t.power_w, 0.03, 1e-12);
    tide_gpu_cpu_ops.close(st);

    /* without the range a backward step is skipped, and the next one counts from there */
    {
        char path[256];

        snprintf(path, sizeof(path), "%s/class/powercap/intel-rapl:0/max_energy_range_uj", f->sys);
        assert_int_equal(remove(path), 0);
    }
    put(f, "sys/class/powercap/intel-rapl:0/energy_uj", "990000\n");
    st = open_fixture(f, 0);
    put(f, "sys/class/powercap/intel-rapl:0/energy_uj", "20000\n");
    t = read_at(st, 1000);
    assert_false(t.known & TIDE_GPU_HAS_POWER);
    assert_true(t.power_w == 0);
    put(f, "sys/class/powercap/intel-rapl:0/energy_uj", "2020000\n");
    t = read_at(st, 2000);
    assert_true(t.known & TIDE_GPU_HAS_POWER);
    assert_near(t.power_w, 2.0, 1e-12);
    tide_gpu_cpu_ops.close(st);
}

/* A pid reused by a new process (another starttime) starts over instead of counting the
 * difference between two unrelated processes. */
static void test_pid_reuse(void **state)
{
    fixture_t *f = *state;
    void *st;
    tide_gpu_telemetry_t t;
    const int32_t pid = 300;

    put(f, "proc/meminfo", "MemTotal: 1024 kB\n");
    put_pid(f, 300, 5, 5, 100, 10);
    st = open_fixture(f, 0);
    tide_gpu_cpu_ops.track(st, &pid, 1);
    t = read_at(st, 1000);
    assert_true(t.gpu_util == 0);
    /* the new process has used more ticks than the old one had: still not counted */
    put_pid(f, 300, 250, 250, 200, 10);
    t = read_at(st, 2000);
    assert_true(t.gpu_util == 0);
    put_pid(f, 300, 270, 250, 200, 10);
    t = read_at(st, 3000);
    assert_near(t.gpu_util, 20.0 / tck(), 1e-9);
    tide_gpu_cpu_ops.close(st);
}

/* A tracked helper's rank is its child: descendants count (children of children too), each once,
 * and a child that appears later is sampled from its first read on. */
static void test_descendants(void **state)
{
    fixture_t *f = *state;
    void *st;
    tide_gpu_telemetry_t t;
    const int32_t roots[2] = {500, 501};

    put(f, "proc/meminfo", "MemTotal: 1024 kB\n");
    put_pid(f, 500, 0, 0, 100, 1);
    put_pid(f, 501, 0, 0, 100, 1);
    put_pid(f, 510, 10, 0, 100, 20);
    put_pid(f, 520, 10, 0, 100, 30);
    put(f, "proc/500/task/500/children", "510 ");
    put(f, "proc/510/task/510/children", "520 501");
    st = open_fixture(f, 0);
    tide_gpu_cpu_ops.track(st, roots, 2);
    t = read_at(st, 1000);
    assert_true(t.gpu_util == 0);
    assert_true(t.mem_used_bytes == 52 * page()); /* 501 once, though both list it */
    put_pid(f, 510, 20, 0, 100, 20);
    put_pid(f, 520, 15, 5, 100, 30);
    put_pid(f, 530, 99, 0, 100, 40);
    put(f, "proc/520/task/520/children", "530\n");
    /* the agent names the roots before every read: the descendants keep their baselines */
    tide_gpu_cpu_ops.track(st, roots, 2);
    t = read_at(st, 2000);
    assert_near(t.gpu_util, 20.0 / tck(), 1e-9); /* 530 is at its baseline */
    assert_true(t.mem_used_bytes == 92 * page());
    put_pid(f, 530, 109, 0, 100, 40);
    tide_gpu_cpu_ops.track(st, roots, 2);
    t = read_at(st, 3000);
    assert_near(t.gpu_util, 10.0 / tck(), 1e-9);
    tide_gpu_cpu_ops.close(st);
}

/* Files that are not there are unknown figures, never zeros. */
static void test_missing_files(void **state)
{
    fixture_t *f = *state;
    void *st = NULL;
    tide_gpu_info_t info;
    tide_gpu_telemetry_t t;
    const int32_t pid = 400;

    assert_int_equal(tide_gpu_cpu_open_at(f->proc, f->sys, 0, 2e9, &st, &info, NULL), 0);
    assert_true(info.memory_bytes == 0);
    tide_gpu_cpu_ops.track(st, &pid, 1); /* no such process: dropped at the first read */
    t = read_at(st, 1000);
    assert_int_equal(t.known, TIDE_GPU_HAS_UTIL);
    assert_true(t.gpu_util == 0 && t.mem_used_bytes == 0 && t.mem_total_bytes == 0);
    assert_true(t.temperature_c == 0 && t.power_w == 0 && t.mem_bw_util == 0);
    assert_true(t.sm_clock_mhz == 0 && t.throttle_reasons == 0 && t.xid_count == 0);
    tide_gpu_cpu_ops.close(st);

    /* MemTotal alone makes memory known; a stat without statm is a process that is going away */
    put(f, "proc/meminfo", "MemFree: 1 kB\nMemTotal:     2048 kB\n");
    put_pid(f, 400, 1, 1, 1, 7);
    {
        char path[256];

        snprintf(path, sizeof(path), "%s/400/statm", f->proc);
        assert_int_equal(remove(path), 0);
    }
    st = open_fixture(f, 0);
    tide_gpu_cpu_ops.track(st, &pid, 1);
    t = read_at(st, 1000);
    assert_int_equal(t.known, TIDE_GPU_HAS_UTIL | TIDE_GPU_HAS_MEMORY);
    assert_true(t.mem_used_bytes == 0 && t.mem_total_bytes == 2048 * 1024);
    /* it was skipped for that read; statm coming back brings it back */
    put_pid(f, 400, 1, 1, 1, 7);
    t = read_at(st, 2000);
    assert_true(t.mem_used_bytes == 7 * page());
    tide_gpu_cpu_ops.close(st);

    /* a broken meminfo is unknown memory too */
    put(f, "proc/meminfo", "MemTotal: lots\n");
    st = open_fixture(f, 0);
    t = read_at(st, 1000);
    assert_int_equal(t.known, TIDE_GPU_HAS_UTIL);
    tide_gpu_cpu_ops.close(st);
}

/* track keeps the first 64 distinct positive pids. */
static void test_track_limit(void **state)
{
    fixture_t *f = *state;
    void *st;
    tide_gpu_telemetry_t t;
    int32_t pids[70];
    const int32_t odd[] = {5, 5, -1, 0, 5};

    put(f, "proc/meminfo", "MemTotal: 1024 kB\n");
    for (int i = 0; i < 70; i++) {
        pids[i] = 1000 + i;
        put_pid(f, pids[i], 0, 0, 1, 1);
    }
    put_pid(f, 5, 0, 0, 1, 3);
    st = open_fixture(f, 0);
    tide_gpu_cpu_ops.track(st, pids, 70);
    t = read_at(st, 1000);
    assert_true(t.mem_used_bytes == 64 * page());
    tide_gpu_cpu_ops.track(st, odd, 5);
    t = read_at(st, 2000);
    assert_true(t.mem_used_bytes == 3 * page());
    tide_gpu_cpu_ops.track(st, NULL, 0);
    t = read_at(st, 3000);
    assert_true(t.mem_used_bytes == 0);
    assert_true(t.known & TIDE_GPU_HAS_UTIL);
    tide_gpu_cpu_ops.close(st);
}

static void test_long_root(void **state)
{
    char root[600];
    void *st = NULL;
    tide_gpu_info_t info;
    tide_error_t err;

    (void)state;
    memset(root, 'a', sizeof(root) - 1);
    root[sizeof(root) - 1] = '\0';
    assert_int_equal(tide_gpu_cpu_open_at(root, "/sys", 0, 1e9, &st, &info, &err), -ENAMETOOLONG);
    assert_null(st);
}

/* ---- the real /proc ---- */

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void test_real_proc(void **state)
{
    tide_gpu_t *g = NULL;
    tide_error_t err;
    tide_gpu_telemetry_t t;
    struct timespec pause = {0, 10 * 1000 * 1000};
    int64_t deadline;
    int32_t pid;
    int status;
    bool seen = false;

    (void)state;
    assert_int_equal(tide_gpu_open("cpu", 0, mono_ms(), 1e9, &g, &err), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        volatile unsigned long spin = 0;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;)
            spin++;
    }
    tide_gpu_track(g, &pid, 1);
    deadline = mono_ms() + 20000;
    while (!seen && mono_ms() < deadline) {
        nanosleep(&pause, NULL);
        assert_int_equal(tide_gpu_read(g, mono_ms(), false, &t), 0);
        assert_true(t.known & TIDE_GPU_HAS_UTIL);
        assert_true(t.known & TIDE_GPU_HAS_MEMORY);
        assert_true(t.gpu_util >= 0 && t.gpu_util <= 1);
        seen = t.gpu_util > 0;
    }
    assert_true(t.mem_used_bytes > 0);
    assert_true(t.mem_total_bytes > 0);
    assert_int_equal(t.known & (TIDE_GPU_HAS_MEM_BW | TIDE_GPU_HAS_CLOCKS | TIDE_GPU_HAS_THROTTLE |
                                TIDE_GPU_HAS_ECC | TIDE_GPU_HAS_XID),
                     0);
    assert_int_equal(kill(pid, SIGKILL), 0);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(seen);
    /* gone: dropped, the core is idle again */
    assert_int_equal(tide_gpu_read(g, mono_ms() + 1000, false, &t), 0);
    assert_int_equal(tide_gpu_read(g, mono_ms() + 2000, false, &t), 0);
    assert_true(t.gpu_util == 0 && t.mem_used_bytes == 0);
    tide_gpu_close(g);
}

static void test_open_peak(void **state)
{
    tide_gpu_t *g = NULL;
    tide_error_t err;
    const tide_gpu_info_t *info;
    void *st = NULL;
    tide_gpu_info_t direct;

    (void)state;
    assert_int_equal(tide_gpu_open("cpu", 0, mono_ms(), 0, &g, &err), 0);
    info = tide_gpu_info(g);
    assert_string_equal(info->device, "cpu");
    assert_true(info->peak_flops > 0 && isfinite(info->peak_flops));
    assert_true(info->memory_bytes > 0);
    print_message("calibrated peak: %.3g FLOP/s\n", info->peak_flops);
    tide_gpu_close(g);

    assert_int_equal(tide_gpu_open("cpu", 0, mono_ms(), 5e9, &g, &err), 0);
    assert_true(tide_gpu_info(g)->peak_flops == 5e9);
    tide_gpu_close(g);
    /* the backend itself takes the given peak (tide_gpu_open would overwrite it anyway) */
    assert_int_equal(tide_gpu_cpu_open_at("/proc", "/sys", 0, 5e9, &st, &direct, &err), 0);
    assert_true(direct.peak_flops == 5e9);
    tide_gpu_cpu_ops.close(st);
    tide_gpu_cpu_ops.close(NULL);

    g = NULL;
    assert_int_equal(tide_gpu_open("cpu:x", 0, 0, 0, &g, &err), -ENOENT);
    assert_null(g);
    assert_int_equal(tide_gpu_cpu_ops.open("x", 0, 0, 1e9, &st, &direct, &err), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_stat),
        cmocka_unit_test_setup_teardown(test_fixture_readings, setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_rapl_wrap, setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_pid_reuse, setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_descendants, setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_missing_files, setup_fixture, teardown_fixture),
        cmocka_unit_test_setup_teardown(test_track_limit, setup_fixture, teardown_fixture),
        cmocka_unit_test(test_long_root),
        cmocka_unit_test(test_real_proc),
        cmocka_unit_test(test_open_peak),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

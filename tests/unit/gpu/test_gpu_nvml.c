/* Unit tests of the nvml GPU backend (common/gpu/gpu_nvml.c) against the fake libnvidia-ml built
 * beside this file (fake_nvml.c, path in FAKE_NVML_PATH): device info, every metric with the fake's
 * values, a failing call clearing exactly its bit, XID events from the event thread, the error
 * paths, and "auto" falling back to sim:h100. Every test sets the environment it needs first. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "fake_nvml.h"
#include "gpu.h"

#define ALL_BITS                                                                                   \
    (TIDE_GPU_HAS_UTIL | TIDE_GPU_HAS_MEMORY | TIDE_GPU_HAS_TEMPERATURE | TIDE_GPU_HAS_POWER |     \
     TIDE_GPU_HAS_MEM_BW | TIDE_GPU_HAS_CLOCKS | TIDE_GPU_HAS_THROTTLE | TIDE_GPU_HAS_ECC |        \
     TIDE_GPU_HAS_XID)

/* Points the backend at the fake and sets its knobs (NULL: unset). */
static void use_fake(const char *fail, const char *xid, const char *name)
{
    setenv("TIDE_NVML_LIB", FAKE_NVML_PATH, 1);
    if (fail)
        setenv("FAKE_NVML_FAIL", fail, 1);
    else
        unsetenv("FAKE_NVML_FAIL");
    if (xid)
        setenv("FAKE_NVML_XID", xid, 1);
    else
        unsetenv("FAKE_NVML_XID");
    if (name)
        setenv("FAKE_NVML_NAME", name, 1);
    else
        unsetenv("FAKE_NVML_NAME");
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls the backend until pred holds or 10 s pass; returns whether it held. A short pause between
 * polls keeps the loop from spinning; the deadline, not the pause, is the synchronisation. */
static bool read_until(tide_gpu_t *g, tide_gpu_telemetry_t *t,
                       bool (*pred)(const tide_gpu_telemetry_t *))
{
    int64_t deadline = mono_ms() + 10000;
    struct timespec pause = {0, 1000 * 1000};

    for (;;) {
        assert_int_equal(tide_gpu_read(g, 0, false, t), 0);
        if (pred(t))
            return true;
        if (mono_ms() > deadline)
            return false;
        nanosleep(&pause, NULL);
    }
}

static void test_info(void **state)
{
    tide_gpu_t *g = NULL;
    tide_error_t err;
    const tide_gpu_info_t *info;

    (void)state;
    use_fake(NULL, NULL, NULL);
    assert_int_equal(tide_gpu_open("nvml", 1, 0, 0, &g, &err), 0);
    info = tide_gpu_info(g);
    assert_string_equal(info->device, "nvml:h100");
    assert_true(info->peak_flops == 989e12);
    assert_int_equal(info->memory_bytes, FAKE_NVML_MEM_TOTAL);
    assert_true(info->tdp_w == 700.0);
    tide_gpu_close(g);
}

static void test_reading(void **state)
{
    tide_gpu_t *g = NULL;
    tide_gpu_telemetry_t t;
    tide_error_t err;

    (void)state;
    use_fake(NULL, NULL, NULL);
    assert_int_equal(tide_gpu_open("nvml", 0, 0, 0, &g, &err), 0);
    assert_int_equal(tide_gpu_read(g, 1234, true, &t), 0);
    assert_int_equal(t.known, ALL_BITS);
    assert_true(t.gpu_util == FAKE_NVML_UTIL_GPU / 100.0);
    assert_true(t.mem_bw_util == FAKE_NVML_UTIL_MEM / 100.0);
    assert_int_equal(t.mem_used_bytes, FAKE_NVML_MEM_USED);
    assert_int_equal(t.mem_total_bytes, FAKE_NVML_MEM_TOTAL);
    assert_true(t.temperature_c == 61.0);
    assert_true(t.power_w == 512.345);
    assert_int_equal(t.sm_clock_mhz, FAKE_NVML_SM_MHZ);
    assert_int_equal(t.mem_clock_mhz, FAKE_NVML_MEM_MHZ);
    assert_int_equal(t.throttle_reasons, FAKE_NVML_THROTTLE);
    assert_int_equal(t.ecc_corrected, FAKE_NVML_ECC_CORRECTED);
    assert_int_equal(t.ecc_uncorrected, FAKE_NVML_ECC_UNCORRECTED);
    assert_int_equal(t.xid_count, 0);
    assert_int_equal(t.last_xid, 0);
    tide_gpu_close(g);
}

static void test_failing_calls(void **state)
{
    static const struct {
        const char *fail;
        uint32_t cleared;
    } cases[] = {
        {"power", TIDE_GPU_HAS_POWER},
        {"temperature", TIDE_GPU_HAS_TEMPERATURE},
        {"power,temperature", TIDE_GPU_HAS_POWER | TIDE_GPU_HAS_TEMPERATURE},
        {"utilization", TIDE_GPU_HAS_UTIL | TIDE_GPU_HAS_MEM_BW},
        {"memory", TIDE_GPU_HAS_MEMORY},
        {"clock", TIDE_GPU_HAS_CLOCKS},
        {"throttle", TIDE_GPU_HAS_THROTTLE},
        {"ecc", TIDE_GPU_HAS_ECC},
        {"events", TIDE_GPU_HAS_XID},
        {"power_limit", 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tide_gpu_t *g = NULL;
        tide_gpu_telemetry_t t;
        tide_error_t err;

        use_fake(cases[i].fail, NULL, NULL);
        assert_int_equal(tide_gpu_open("nvml", 0, 0, 0, &g, &err), 0);
        assert_int_equal(tide_gpu_read(g, 0, false, &t), 0);
        if (t.known != (ALL_BITS & ~cases[i].cleared))
            fail_msg("FAKE_NVML_FAIL=%s: known 0x%x, want 0x%x", cases[i].fail, t.known,
                     ALL_BITS & ~cases[i].cleared);
        /* The metrics that stayed known still carry the fake's values. */
        if (t.known & TIDE_GPU_HAS_TEMPERATURE)
            assert_true(t.temperature_c == 61.0);
        if (t.known & TIDE_GPU_HAS_POWER)
            assert_true(t.power_w == 512.345);
        if (strcmp(cases[i].fail, "power_limit") == 0)
            assert_true(tide_gpu_info(g)->tdp_w ==
                        0.0); /* unknown limit: 0, as tide_gpu_info_t has no mask */
        if (strcmp(cases[i].fail, "memory") == 0)
            assert_int_equal(tide_gpu_info(g)->memory_bytes, 0);
        tide_gpu_close(g);
    }
}

static bool xid_seen(const tide_gpu_telemetry_t *t)
{
    return t->xid_count >= 1;
}

static bool xid_unknown(const tide_gpu_telemetry_t *t)
{
    return !(t->known & TIDE_GPU_HAS_XID);
}

static void test_xid(void **state)
{
    tide_gpu_t *g = NULL;
    tide_gpu_telemetry_t t;
    tide_error_t err;

    (void)state;
    use_fake(NULL, "79", NULL);
    assert_int_equal(tide_gpu_open("nvml", 0, 0, 0, &g, &err), 0);
    assert_true(read_until(g, &t, xid_seen));
    assert_true(t.known & TIDE_GPU_HAS_XID);
    assert_int_equal(t.xid_count, 1);
    assert_int_equal(t.last_xid, 79);
    /* The fake delivers one event: the count stays at one. */
    assert_int_equal(tide_gpu_read(g, 0, false, &t), 0);
    assert_int_equal(t.xid_count, 1);
    tide_gpu_close(g);
}

static void test_wait_failure(void **state)
{
    tide_gpu_t *g = NULL;
    tide_gpu_telemetry_t t;
    tide_error_t err;

    (void)state;
    use_fake("wait", NULL, NULL);
    assert_int_equal(tide_gpu_open("nvml", 0, 0, 0, &g, &err), 0);
    /* The thread gives up on a failing wait: XID becomes unknown, the rest stays known. */
    assert_true(read_until(g, &t, xid_unknown));
    assert_int_equal(t.known, ALL_BITS & ~TIDE_GPU_HAS_XID);
    tide_gpu_close(g);
}

static void test_names(void **state)
{
    static const struct {
        const char *name;
        const char *device;
        double peak;
    } cases[] = {
        {"NVIDIA H100 80GB HBM3", "nvml:h100", 989e12},
        {"NVIDIA H100 PCIe", "nvml:h100-pcie", 756.5e12},
        {"NVIDIA H200", "nvml:h200", 989e12},
        {"NVIDIA H200 NVL", "nvml:h200-nvl", 0},
        {"NVIDIA GH200 480GB", "nvml:gh200", 989e12},
        {"NVIDIA A100-SXM4-80GB", "nvml:a100", 312e12},
        {"NVIDIA A100 80GB PCIe", "nvml:a100", 312e12},
        {"NVIDIA B200", "nvml:b200", 2.25e15},
        {"NVIDIA L4", "nvml:l4", 121e12},
        {"NVIDIA L40S", "nvml:l40s", 0},
        {"NVIDIA GeForce RTX 4090", "nvml:geforce-rtx-4090", 0},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tide_gpu_t *g = NULL;
        tide_error_t err;

        use_fake("events", NULL, cases[i].name);
        assert_int_equal(tide_gpu_open("nvml", 0, 0, 0, &g, &err), 0);
        if (strcmp(tide_gpu_info(g)->device, cases[i].device) != 0 ||
            tide_gpu_info(g)->peak_flops != cases[i].peak)
            fail_msg("'%s': got %s %g, want %s %g", cases[i].name, tide_gpu_info(g)->device,
                     tide_gpu_info(g)->peak_flops, cases[i].device, cases[i].peak);
        tide_gpu_close(g);
    }
}

static void test_errors(void **state)
{
    tide_gpu_t *g = NULL;
    tide_error_t err;

    (void)state;
    use_fake(NULL, NULL, NULL);
    assert_int_equal(tide_gpu_open("nvml", 2, 0, 0, &g, &err), -EINVAL);
    assert_string_equal(err.text, "GPU index 2 out of range: NVML sees 2 GPUs (0..1)");
    assert_int_equal(tide_gpu_open("nvml", -1, 0, 0, &g, &err), -EINVAL);

    setenv("TIDE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_int_equal(tide_gpu_open("nvml", 0, 0, 0, &g, &err), -ENOENT);
    assert_non_null(strstr(err.text, "/nonexistent/libnvidia-ml.so.1"));
    assert_non_null(strstr(err.text, "cannot open shared object file"));

    use_fake("init", NULL, NULL);
    assert_int_equal(tide_gpu_open("nvml", 0, 0, 0, &g, &err), -ENODEV);
    assert_string_equal(err.text, "nvmlInit_v2 failed: Driver Not Loaded");
    use_fake("handle", NULL, NULL);
    assert_int_equal(tide_gpu_open("nvml", 0, 0, 0, &g, &err), -EIO);
    assert_string_equal(err.text, "nvmlDeviceGetHandleByIndex_v2(0) failed: Unknown Error");

    /* Spelling: nvml takes no model; sim needs one. */
    assert_int_equal(tide_gpu_open("nvml:h100", 0, 0, 0, &g, &err), -ENOENT);
    assert_non_null(strstr(err.text, "backends: sim, nvml, cpu, auto"));
    assert_int_equal(tide_gpu_open("sim", 0, 0, 0, &g, &err), -ENOENT);
    assert_int_equal(tide_gpu_open("nvmlx", 0, 0, 0, &g, &err), -ENOENT);
}

/* Runs tide_gpu_open with stderr captured into buf. */
static int open_capturing(const char *spec, int index, tide_gpu_t **g, tide_error_t *err, char *buf,
                          size_t size)
{
    char path[] = "/tmp/tide-test-nvml-XXXXXX";
    int fd = mkstemp(path);
    int saved = dup(STDERR_FILENO);
    ssize_t n;
    int rc;

    assert_true(fd >= 0 && saved >= 0);
    unlink(path);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    rc = tide_gpu_open(spec, index, 0, 0, g, err);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    n = pread(fd, buf, size - 1, 0);
    assert_true(n >= 0);
    buf[n] = '\0';
    close(fd);
    return rc;
}

static void test_auto(void **state)
{
    tide_gpu_t *g = NULL;
    tide_error_t err;
    char log[4096];
    const char *nl;

    (void)state;
    /* No library: one warning line, then the simulated H100. */
    setenv("TIDE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_int_equal(open_capturing("auto", 0, &g, &err, log, sizeof(log)), 0);
    assert_string_equal(tide_gpu_info(g)->device, "sim:h100");
    tide_gpu_close(g);
    assert_non_null(strstr(log, "WARN"));
    assert_non_null(strstr(log, "/nonexistent/libnvidia-ml.so.1"));
    assert_non_null(strstr(log, "using the simulated GPU sim:h100"));
    nl = strchr(log, '\n');
    assert_non_null(nl);
    assert_string_equal(nl + 1, ""); /* exactly one line */

    /* No driver behind the library: the same fallback. */
    use_fake("init", NULL, NULL);
    assert_int_equal(open_capturing("auto", 0, &g, &err, log, sizeof(log)), 0);
    assert_string_equal(tide_gpu_info(g)->device, "sim:h100");
    assert_non_null(strstr(log, "Driver Not Loaded"));
    tide_gpu_close(g);

    /* NVML works: auto is nvml, silently. */
    use_fake(NULL, NULL, NULL);
    assert_int_equal(open_capturing("auto", 1, &g, &err, log, sizeof(log)), 0);
    assert_string_equal(tide_gpu_info(g)->device, "nvml:h100");
    assert_string_equal(log, "");
    tide_gpu_close(g);

    /* A bad index on a machine with GPUs is an error, not a reason to simulate. */
    assert_int_equal(tide_gpu_open("auto", 5, 0, 0, &g, &err), -EINVAL);
    assert_non_null(strstr(err.text, "NVML sees 2 GPUs"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info),          cmocka_unit_test(test_reading),
        cmocka_unit_test(test_failing_calls), cmocka_unit_test(test_xid),
        cmocka_unit_test(test_wait_failure),  cmocka_unit_test(test_names),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

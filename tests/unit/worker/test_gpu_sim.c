/* Unit tests of the simulated GPU (common/gpu): the model table, the deterministic telemetry model
 * (idle ~35 C, a first-order rise toward the busy steady state and back) and the ops dispatch. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gpu.h"
#include "gpu_sim.h"

static void test_models(void **state)
{
    const tide_gpu_model_t *m;
    size_t n;
    char list[256];

    (void)state;
    tide_gpu_sim_models(&n);
    assert_int_equal(n, 4);
    m = tide_gpu_sim_model_find("sim:h100");
    assert_non_null(m);
    assert_true(m->peak_flops == 989e12);
    assert_int_equal(m->memory_bytes, 80ULL << 30);
    assert_true(m->tdp_w == 700.0);
    assert_ptr_equal(tide_gpu_sim_model_find("h100"), m);
    m = tide_gpu_sim_model_find("a100");
    assert_true(m->peak_flops == 312e12 && m->tdp_w == 400.0 && m->memory_bytes == 80ULL << 30);
    m = tide_gpu_sim_model_find("l4");
    assert_true(m->peak_flops == 121e12 && m->tdp_w == 72.0 && m->memory_bytes == 24ULL << 30);
    m = tide_gpu_sim_model_find("b200");
    assert_true(m->peak_flops == 2.25e15 && m->tdp_w == 1000.0 && m->memory_bytes == 192ULL << 30);
    assert_null(tide_gpu_sim_model_find("h200"));
    assert_null(tide_gpu_sim_model_find("nvml:h100"));
    tide_gpu_sim_model_list(list, sizeof(list));
    assert_string_equal(list, "sim:h100, sim:a100, sim:l4, sim:b200");
}

static void test_idle_busy_idle(void **state)
{
    const tide_gpu_model_t *m = tide_gpu_sim_model_find("h100");
    tide_gpu_telemetry_t t, prev;
    tide_gpu_sim_t s;

    (void)state;
    tide_gpu_sim_init(&s, m, 1000);
    tide_gpu_sim_read(&s, 1000, &t);
    assert_true(fabs(t.temperature_c - TIDE_GPU_SIM_IDLE_TEMP_C) < 1e-9);
    assert_true(t.gpu_util == 0.0);
    assert_int_equal(t.mem_used_bytes, 0);
    assert_int_equal(t.mem_total_bytes, m->memory_bytes);
    assert_true(t.power_w == m->idle_w);
    /* Idle stays idle. */
    tide_gpu_sim_read(&s, 1000000, &t);
    assert_true(fabs(t.temperature_c - 35.0) < 1e-9);

    /* Busy from t = 2 s: every figure rises monotonically and settles at the steady state. */
    tide_gpu_sim_set_busy(&s, 2000, true);
    tide_gpu_sim_read(&s, 2000, &prev);
    assert_true(fabs(prev.temperature_c - 35.0) < 1e-9); /* a lag, not a jump */
    for (int64_t now = 2500; now <= 200000; now += 500) {
        tide_gpu_sim_read(&s, now, &t);
        assert_true(t.temperature_c > prev.temperature_c);
        assert_true(t.gpu_util >= prev.gpu_util);
        assert_true(t.power_w >= prev.power_w);
        assert_true(t.mem_used_bytes >= prev.mem_used_bytes);
        assert_true(t.temperature_c < m->busy_temp_c);
        prev = t;
    }
    assert_true(fabs(t.temperature_c - m->busy_temp_c) < 0.1);
    assert_true(fabs(t.gpu_util - 0.95) < 1e-6);
    assert_true(t.power_w > 0.8 * m->tdp_w && t.power_w <= m->tdp_w);
    assert_true(t.mem_used_bytes > m->memory_bytes / 2 && t.mem_used_bytes < m->memory_bytes);
    /* One time constant (30 s) in, the temperature has covered ~63% of the way. */
    tide_gpu_sim_read(&s, 32000, &t);
    assert_true(fabs((t.temperature_c - 35.0) / (m->busy_temp_c - 35.0) - (1 - exp(-1))) < 1e-9);

    /* Back to idle: it cools from where it was, continuously. */
    tide_gpu_sim_read(&s, 300000, &prev);
    tide_gpu_sim_set_busy(&s, 300000, false);
    tide_gpu_sim_read(&s, 300000, &t);
    assert_true(fabs(t.temperature_c - prev.temperature_c) < 1e-9);
    tide_gpu_sim_read(&s, 310000, &t);
    assert_true(t.temperature_c < prev.temperature_c && t.temperature_c > 35.0);
    tide_gpu_sim_read(&s, 10000000, &t);
    assert_true(fabs(t.temperature_c - 35.0) < 1e-6);
    assert_int_equal(t.mem_used_bytes, 0);
}

static void test_deterministic(void **state)
{
    const tide_gpu_model_t *m = tide_gpu_sim_model_find("b200");
    tide_gpu_sim_t a, b;
    tide_gpu_telemetry_t ta, tb;

    (void)state;
    tide_gpu_sim_init(&a, m, 0);
    tide_gpu_sim_init(&b, m, 0);
    for (int64_t now = 0; now < 100000; now += 700) {
        bool busy = (now / 9000) % 2 == 0;
        tide_gpu_sim_set_busy(&a, now, busy);
        tide_gpu_sim_set_busy(&b, now, busy);
        tide_gpu_sim_read(&a, now + 100, &ta);
        tide_gpu_sim_read(&b, now + 100, &tb);
        assert_memory_equal(&ta, &tb, sizeof(ta));
    }
    /* Unchanged load is a no-op; a time before the last change reads as the change. */
    tide_gpu_sim_set_busy(&a, 200000, a.busy);
    assert_int_equal(a.since_ms, b.since_ms);
    tide_gpu_sim_read(&a, a.since_ms - 5000, &ta);
    tide_gpu_sim_read(&a, a.since_ms, &tb);
    assert_memory_equal(&ta, &tb, sizeof(ta));
}

static void test_ops(void **state)
{
    tide_gpu_t *g = NULL;
    tide_gpu_telemetry_t t;
    tide_error_t err;

    (void)state;
    assert_int_equal(tide_gpu_open("sim:l4", 2, 0, 0, &g, &err), 0);
    assert_string_equal(tide_gpu_info(g)->device, "sim:l4");
    assert_true(tide_gpu_info(g)->peak_flops == 121e12);
    assert_int_equal(tide_gpu_info(g)->memory_bytes, 24ULL << 30);
    /* read(now, busy): the reading reflects the past; busy applies from now on. */
    assert_int_equal(tide_gpu_read(g, 0, true, &t), 0);
    assert_true(t.gpu_util == 0.0);
    assert_int_equal(tide_gpu_read(g, 60000, true, &t), 0);
    assert_true(t.gpu_util > 0.9 && t.temperature_c > 60.0);
    tide_gpu_close(g);
    tide_gpu_close(NULL);

    assert_int_equal(tide_gpu_open("sim:h200", 0, 0, 0, &g, &err), -ENOENT);
    assert_string_equal(
        err.text, "unknown GPU model 'sim:h200' (known: sim:h100, sim:a100, sim:l4, sim:b200)");
    assert_int_equal(tide_gpu_open("nvml:h100", 0, 0, 0, &g, &err), -ENOENT);
    assert_non_null(strstr(err.text, "backends: sim"));
    assert_int_equal(tide_gpu_open("h100", 0, 0, 0, &g, &err), -ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_idle_busy_idle),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

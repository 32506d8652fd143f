/* Tests of the Prometheus text writer (common/metrics/prom.c): exact output for a small exposition,
 * number spelling, escaping, everything the writer must refuse without writing a byte, and (when
 * Debian's `prometheus` package is installed) `promtool check metrics` on a representative
 * exposition. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "prom.h"

static void test_exposition_exact(void **state)
{
    tide_buf_t b = TIDE_BUF_INIT;
    tide_prom_t *p = tide_prom_new(&b);
    const tide_prom_label_t l1[] = {{"job", "j1"}, {"worker", "node1/gpu0"}};
    const tide_prom_label_t l2[] = {{"job", "a\"b\\c\nd"}, {"worker", ""}};

    assert_int_equal(tide_prom_family(p, "tide_jobs_submitted_total", TIDE_PROM_COUNTER,
                                      "Jobs submitted.\nBackslash \\ and \"quotes\" stay."),
                     0);
    assert_int_equal(tide_prom_sample(p, l1, 2, 3), 0);
    assert_int_equal(tide_prom_sample(p, l2, 2, 0), 0);
    assert_int_equal(
        tide_prom_family(p, "tide_cluster_mfu", TIDE_PROM_GAUGE, "Cluster MFU (0..1)."), 0);
    assert_int_equal(tide_prom_sample(p, NULL, 0, 0.4375), 0);
    assert_int_equal(tide_prom_family(p, "tide_up", TIDE_PROM_GAUGE, NULL), 0);
    assert_int_equal(tide_prom_sample(p, NULL, 0, 1), 0);

    assert_string_equal(
        tide_buf_cstr(&b),
        "# HELP tide_jobs_submitted_total Jobs submitted.\\nBackslash \\\\ and \"quotes\" "
        "stay.\n"
        "# TYPE tide_jobs_submitted_total counter\n"
        "tide_jobs_submitted_total{job=\"j1\",worker=\"node1/gpu0\"} 3\n"
        "tide_jobs_submitted_total{job=\"a\\\"b\\\\c\\nd\",worker=\"\"} 0\n"
        "# HELP tide_cluster_mfu Cluster MFU (0..1).\n"
        "# TYPE tide_cluster_mfu gauge\n"
        "tide_cluster_mfu 0.4375\n"
        "# TYPE tide_up gauge\n"
        "tide_up 1\n");
    tide_prom_free(p);
    tide_buf_free(&b);
}

static void expect_double(double v, const char *want)
{
    tide_buf_t b = TIDE_BUF_INIT;

    tide_prom_append_double(&b, v);
    assert_string_equal(tide_buf_cstr(&b), want);
    tide_buf_free(&b);
}

static void test_doubles(void **state)
{
    expect_double(0, "0");
    expect_double(-0.0, "0");
    expect_double(42, "42");
    expect_double(-7, "-7");
    expect_double(1e15, "1000000000000000");
    expect_double(9007199254740992.0, "9007199254740992");
    expect_double(1e20, "1e+20");
    expect_double(-1e300, "-1e+300");
    expect_double(0.1, "0.1");
    expect_double(1.5, "1.5");
    expect_double(1e-9, "1e-09");
    expect_double(123456.789, "123456.789");
    expect_double(1.0 / 3.0, "0.3333333333333333");
    expect_double(0.1 + 0.2, "0.30000000000000004");
    expect_double(NAN, "NaN");
    expect_double(INFINITY, "+Inf");
    expect_double(-INFINITY, "-Inf");
}

/* Each refusal returns -EINVAL and writes nothing. */
static void test_refusals(void **state)
{
    tide_buf_t b = TIDE_BUF_INIT;
    tide_prom_t *p = tide_prom_new(&b);
    const tide_prom_label_t dup[] = {{"job", "a"}, {"job", "b"}};
    static const char *const bad_names[] = {"", "1abc", "a-b", "a b", "ä", "x{y}"};
    static const char *const bad_labels[] = {"", "__name__", "__x", "1a", "a-b", "a:b"};
    static const char *const bad_values[] = {
        "\xff", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "abc\xe2\x82", "\x80"};
    size_t len;

    assert_int_equal(tide_prom_sample(p, NULL, 0, 1), -EINVAL); /* no family yet */
    assert_int_equal(tide_prom_family(p, NULL, TIDE_PROM_GAUGE, "h"), -EINVAL);
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
        assert_int_equal(tide_prom_family(p, bad_names[i], TIDE_PROM_GAUGE, "h"), -EINVAL);
    assert_int_equal(tide_prom_family(p, "tide_restarts", TIDE_PROM_COUNTER, "h"), -EINVAL);
    assert_int_equal(tide_prom_family(p, "tide_x", (tide_prom_type_t)7, "h"), -EINVAL);
    assert_int_equal(b.len, 0);

    assert_int_equal(tide_prom_family(p, "tide_restarts_total", TIDE_PROM_COUNTER, "h"), 0);
    len = b.len;
    assert_int_equal(tide_prom_family(p, "tide_restarts_total", TIDE_PROM_COUNTER, "h"), -EINVAL);
    assert_int_equal(tide_prom_sample(p, NULL, 0, -1), -EINVAL); /* counters do not go down */
    assert_int_equal(tide_prom_sample(p, dup, 2, 1), -EINVAL);
    assert_int_equal(tide_prom_sample(p, NULL, 1, 1), -EINVAL);
    for (size_t i = 0; i < sizeof(bad_labels) / sizeof(bad_labels[0]); i++) {
        tide_prom_label_t l = {bad_labels[i], "v"};
        assert_int_equal(tide_prom_sample(p, &l, 1, 1), -EINVAL);
    }
    for (size_t i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++) {
        tide_prom_label_t l = {"job", bad_values[i]};
        assert_int_equal(tide_prom_sample(p, &l, 1, 1), -EINVAL);
    }
    tide_prom_label_t null_value = {"job", NULL};
    assert_int_equal(tide_prom_sample(p, &null_value, 1, 1), -EINVAL);
    assert_int_equal(b.len, len);

    /* Still usable afterwards; a counter may be NaN (unknown). */
    tide_prom_label_t ok = {"job", "GPU \xc3\xbc \xe6\x97\xa5 \xf0\x9f\x9a\x80"};
    assert_int_equal(tide_prom_sample(p, &ok, 1, NAN), 0);
    assert_string_equal(
        tide_buf_cstr(&b) + len,
        "tide_restarts_total{job=\"GPU \xc3\xbc \xe6\x97\xa5 \xf0\x9f\x9a\x80\"} NaN\n");
    /* A gauge may go negative. */
    assert_int_equal(tide_prom_family(p, "tide_headroom_ratio", TIDE_PROM_GAUGE, "h"), 0);
    assert_int_equal(tide_prom_sample(p, NULL, 0, -0.25), 0);

    tide_prom_free(p);
    tide_prom_free(NULL);
    tide_buf_free(&b);
}

static char *find_in_path(const char *prog)
{
    const char *path = getenv("PATH");
    char *copy, *dir, *save = NULL, *found = NULL;

    copy = strdup(path ? path : "/usr/bin:/bin");
    for (dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
        char full[4096];
        snprintf(full, sizeof(full), "%s/%s", dir, prog);
        if (access(full, X_OK) == 0)
            found = strdup(full);
    }
    free(copy);
    return found;
}

static void test_promtool_accepts(void **state)
{
    char *promtool = find_in_path("promtool");
    char file[] = "/tmp/tide-prom-XXXXXX";
    tide_buf_t b = TIDE_BUF_INIT;
    tide_prom_t *p;
    char cmd[8192];
    int fd, status;

    if (!promtool) {
        skip(); /* Debian's prometheus package is not installed here */
        return;
    }
    p = tide_prom_new(&b);
    assert_int_equal(tide_prom_family(p, "tide_steps_total", TIDE_PROM_COUNTER,
                                      "Training steps completed.\nPer job and generation."),
                     0);
    for (int j = 0; j < 3; j++) {
        char job[32], gen[16];
        snprintf(job, sizeof(job), "job-%d \"quoted\" \\ back\nslash", j);
        snprintf(gen, sizeof(gen), "%d", j + 1);
        tide_prom_label_t l[] = {{"job", job}, {"generation", gen}};
        assert_int_equal(tide_prom_sample(p, l, 2, 1000.0 * j), 0);
    }
    assert_int_equal(
        tide_prom_family(p, "tide_worker_mfu_ratio", TIDE_PROM_GAUGE, "MFU per worker."), 0);
    tide_prom_label_t w1[] = {{"worker", "node1/gpu0"}};
    tide_prom_label_t w2[] = {{"worker", "node1/gpu1"}};
    tide_prom_label_t w3[] = {{"worker", "n\xc3\xb6"
                                         "de2/gpu0"}};
    assert_int_equal(tide_prom_sample(p, w1, 1, 0.41), 0);
    assert_int_equal(tide_prom_sample(p, w2, 1, NAN), 0);
    assert_int_equal(tide_prom_sample(p, w3, 1, 1e-9), 0);
    assert_int_equal(tide_prom_family(p, "tide_reserve_headroom", TIDE_PROM_GAUGE, "Headroom."), 0);
    assert_int_equal(tide_prom_sample(p, NULL, 0, INFINITY), 0);
    assert_int_equal(tide_prom_family(p, "tide_clock_skew_seconds", TIDE_PROM_GAUGE, "Skew."), 0);
    assert_int_equal(tide_prom_sample(p, NULL, 0, -INFINITY), 0);
    tide_prom_free(p);

    fd = mkstemp(file);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.data, b.len), (ssize_t)b.len);
    close(fd);
    snprintf(cmd, sizeof(cmd), "'%s' check metrics < '%s'", promtool, file);
    status = system(cmd);
    unlink(file);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("promtool rejected:\n%s", tide_buf_cstr(&b));
    tide_buf_free(&b);
    free(promtool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exposition_exact),
        cmocka_unit_test(test_doubles),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_promtool_accepts),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

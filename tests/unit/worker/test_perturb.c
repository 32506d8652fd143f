/* Perturbation scripts: parsing (errors name the line), the state at a time, the overlay. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "perturb.h"

static void test_parse_and_order(void **state)
{
    tide_perturb_t p;
    tide_error_t err;
    const char *text = "# a flaky GPU\n"
                       "\n"
                       "  30 heat 2   # warms 2 C a minute\n"
                       "10 slow 50\n"
                       "10 xid 79\n"
                       "60 ecc-uncorrected 2\r\n"
                       "90.5 die";
    (void)state;
    assert_int_equal(tide_perturb_parse(text, "p.txt", &p, &err), 0);
    assert_int_equal(p.n, 5);
    /* sorted by time; equal times keep their order */
    assert_int_equal(p.events[0].action, TIDE_PERTURB_SLOW);
    assert_int_equal(p.events[0].at_ms, 10000);
    assert_int_equal(p.events[1].action, TIDE_PERTURB_XID);
    assert_int_equal(p.events[2].action, TIDE_PERTURB_HEAT);
    assert_int_equal(p.events[2].line, 3);
    assert_int_equal(p.events[3].action, TIDE_PERTURB_ECC_UNCORRECTED);
    assert_int_equal(p.events[4].action, TIDE_PERTURB_DIE);
    assert_int_equal(p.events[4].at_ms, 90500);
    tide_perturb_free(&p);
    assert_int_equal(tide_perturb_parse("", "e", &p, &err), 0);
    assert_int_equal(p.n, 0);
    tide_perturb_free(&p);
}

static void expect_error(const char *text, const char *want)
{
    tide_perturb_t p;
    tide_error_t err;

    assert_int_equal(tide_perturb_parse(text, "p.txt", &p, &err), -EINVAL);
    if (!strstr(err.text, want)) {
        print_error("error '%s' does not contain '%s'\n", err.text, want);
        fail();
    }
    assert_null(p.events);
}

static void test_errors_name_the_line(void **state)
{
    (void)state;
    expect_error("10 slow 50\n20 hot 3\n", "p.txt:2: unknown action 'hot' (slow, heat, ecc");
    expect_error("x slow 50\n", "p.txt:1: 'x' is not a time in seconds >= 0");
    expect_error("-1 slow 50\n", "p.txt:1:");
    expect_error("1\n", "p.txt:1: missing ACTION");
    expect_error("1 slow\n", "p.txt:1: slow needs an argument");
    expect_error("1 die now\n", "p.txt:1: die takes no argument");
    expect_error("1 slow fast\n", "p.txt:1: slow: 'fast' is not a number");
    expect_error("1 slow 0\n", "PERCENT must be between 1 and 100");
    expect_error("1 slow 150\n", "PERCENT must be between 1 and 100");
    expect_error("1 heat 3001\n", "CELSIUS_PER_MINUTE must be between -3000 and 3000");
    expect_error("\n\n1 xid 7.5\n", "p.txt:3: xid: CODE must be an integer");
    expect_error("1 ecc-uncorrected 0\n", "COUNT must be an integer from 1");
    expect_error("1 ecc -3\n", "CORRECTED_PER_MINUTE");
    expect_error("1 heat 1e9\n", "CELSIUS_PER_MINUTE");
    expect_error("1 slow 50 60\n", "too many words");
    expect_error("1 slow nan\n", "is not a number");
}

static void test_state_at(void **state)
{
    tide_perturb_t p;
    tide_perturb_state_t st;
    tide_error_t err;
    (void)state;
    assert_int_equal(tide_perturb_parse("10 slow 50\n20 slow 100\n"
                                        "0 heat 2\n60 heat -1\n"
                                        "0 ecc 30\n120 ecc 0\n"
                                        "30 xid 79\n40 xid 48\n50 ecc-uncorrected 3\n100 die\n",
                                        "s", &p, &err),
                     0);
    tide_perturb_state_at(&p, 5000, &st);
    assert_true(st.speed == 1 && !st.die && st.xid_count == 0);
    assert_true(fabs(st.heat_c - 2 * 5.0 / 60) < 1e-9);
    tide_perturb_state_at(&p, 15000, &st);
    assert_true(st.speed == 0.5);
    tide_perturb_state_at(&p, 45000, &st);
    assert_true(st.speed == 1);
    assert_int_equal(st.xid_count, 2);
    assert_int_equal(st.last_xid, 48);
    assert_int_equal(st.ecc_uncorrected, 0);
    /* 90 s: heat 2 C/min for 60 s, then -1 C/min for 30 s */
    tide_perturb_state_at(&p, 90000, &st);
    assert_true(fabs(st.heat_c - 1.5) < 1e-9);
    assert_int_equal(st.ecc_uncorrected, 3);
    assert_int_equal(st.ecc_corrected, 45); /* 30 a minute for 1.5 min */
    assert_false(st.die);
    tide_perturb_state_at(&p, 300000, &st);
    assert_int_equal(st.ecc_corrected, 60); /* the rate stopped at 120 s */
    assert_true(st.die);
    tide_perturb_free(&p);
}

static void test_apply(void **state)
{
    tide_perturb_state_t st = {.speed = 1, .heat_c = 4, .ecc_corrected = 5, .xid_count = 1, .last_xid = 79};
    tide_gpu_telemetry_t t = {.temperature_c = 60, .known = TIDE_GPU_HAS_TEMPERATURE};
    (void)state;
    tide_perturb_apply(&st, &t);
    assert_true(t.temperature_c == 64);
    assert_true(t.known & TIDE_GPU_HAS_ECC);
    assert_int_equal(t.ecc_corrected, 5);
    assert_int_equal(t.ecc_uncorrected, 0);
    assert_true(t.known & TIDE_GPU_HAS_XID);
    assert_int_equal(t.last_xid, 79);
    /* An unknown temperature stays unknown. */
    memset(&t, 0, sizeof(t));
    tide_perturb_apply(&st, &t);
    assert_false(t.known & TIDE_GPU_HAS_TEMPERATURE);
    assert_true(t.temperature_c == 0);
}

static void test_load(void **state)
{
    char path[] = "/tmp/tide-perturb-XXXXXX";
    int fd = mkstemp(path);
    tide_perturb_t p;
    tide_error_t err;
    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "1 die\n", 6), 6);
    close(fd);
    assert_int_equal(tide_perturb_load(path, &p, &err), 0);
    assert_int_equal(p.n, 1);
    tide_perturb_free(&p);
    unlink(path);
    assert_int_equal(tide_perturb_load(path, &p, &err), -ENOENT);
    assert_non_null(strstr(err.text, path));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_order), cmocka_unit_test(test_errors_name_the_line),
        cmocka_unit_test(test_state_at),        cmocka_unit_test(test_apply),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

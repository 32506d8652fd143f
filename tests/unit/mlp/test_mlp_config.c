/* tide-mlp's flags: defaults, every flag parsed, and one clear line naming the flag for bad input;
 * the evaluation flags (--eval-*): their defaults, --eval-compute following --simulated-compute,
 * --eval-every needing --checkpoint-dir, and none of them in the checkpoint's config. */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mlp_config.h"

static int parse(tide_mlp_options_t *o, tide_error_t *err, int argc, const char **argv)
{
    tide_mlp_options_default(o);
    tide_error_clear(err);
    return tide_mlp_options_parse(o, argc, (char **)argv, err);
}

#define PARSE(o, err, ...)                                                                         \
    parse(o, err, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)),             \
          (const char *[]){__VA_ARGS__})

static void test_defaults_and_flags(void **state)
{
    tide_mlp_options_t o;
    tide_error_t err;
    (void)state;

    assert_int_equal(PARSE(&o, &err, "tide-mlp"), 0);
    assert_int_equal(o.steps, 100);
    assert_int_equal(o.cfg.width, 128);
    assert_int_equal(o.checkpoint_keep, 2);
    assert_null(o.checkpoint_dir);
    assert_true(o.simulated_compute_ms == 0);
    assert_false(o.async_checkpoints);
    assert_int_equal(tide_mlp_config_validate(&o.cfg, &err), 0);

    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--steps", "7", "--width", "16", "--depth=5",
                           "--input", "3", "--output", "2", "--batch", "60", "--micro-batches",
                           "12", "--lr", "0.5", "--momentum", "0", "--seed", "18446744073709551615",
                           "--checkpoint-dir", "/x/y", "--checkpoint-every", "3",
                           "--checkpoint-keep", "4", "--log-every", "0", "--quiet",
                           "--simulated-compute", "2.5"),
                     0);
    assert_int_equal(o.steps, 7);
    assert_int_equal(o.cfg.width, 16);
    assert_int_equal(o.cfg.depth, 5);
    assert_int_equal(o.cfg.input, 3);
    assert_int_equal(o.cfg.output, 2);
    assert_int_equal(o.cfg.batch, 60);
    assert_int_equal(o.cfg.micro_batches, 12);
    assert_true(o.cfg.lr == 0.5 && o.cfg.momentum == 0);
    assert_true(o.cfg.seed == UINT64_MAX);
    assert_string_equal(o.checkpoint_dir, "/x/y");
    assert_int_equal(o.checkpoint_every, 3);
    assert_int_equal(o.checkpoint_keep, 4);
    assert_int_equal(o.log_every, 0);
    assert_true(o.quiet);
    assert_true(o.simulated_compute_ms == 2.5);
    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--async-checkpoints"), 0);
    assert_true(o.async_checkpoints);
    /* it is not part of the trajectory: the checkpoint config does not change */
    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--simulated-compute=0"), 0);
    assert_true(o.simulated_compute_ms == 0);
    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--simulated-compute", "1e-3"), 0);
    assert_true(o.simulated_compute_ms == 1e-3);
    {
        tide_mlp_options_t a, b;
        assert_int_equal(PARSE(&a, &err, "tide-mlp", "--simulated-compute", "40"), 0);
        assert_int_equal(PARSE(&b, &err, "tide-mlp"), 0);
        assert_memory_equal(&a.cfg, &b.cfg, sizeof(a.cfg));
    }
    assert_non_null(strstr(tide_mlp_usage(), "--simulated-compute MS"));

    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--help"), 0);
    assert_true(o.help);
    assert_non_null(strstr(tide_mlp_usage(), "--micro-batches"));
    /* the parser can run again (getopt's state is reset) */
    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--steps", "3"), 0);
    assert_int_equal(o.steps, 3);
}

static void test_eval_flags(void **state)
{
    tide_mlp_options_t o, plain;
    tide_error_t err;
    (void)state;

    assert_int_equal(PARSE(&plain, &err, "tide-mlp"), 0);
    assert_int_equal(plain.eval_every, 0);
    assert_int_equal(plain.eval_tasks, 64);
    assert_int_equal(plain.eval_per_step, 1);
    assert_true(plain.eval_compute_ms == 0); /* --simulated-compute's default */

    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--checkpoint-dir", "/c", "--eval-every", "5",
                           "--eval-tasks", "4096", "--eval-per-step=3", "--eval-compute", "2.5",
                           "--simulated-compute", "7"),
                     0);
    assert_int_equal(o.eval_every, 5);
    assert_int_equal(o.eval_tasks, TIDE_MLP_EVAL_TASKS_MAX);
    assert_int_equal(o.eval_per_step, 3);
    assert_true(o.eval_compute_ms == 2.5);
    assert_true(o.simulated_compute_ms == 7);
    /* not part of the trajectory: the checkpoint's config is that of a plain run */
    assert_memory_equal(&o.cfg, &plain.cfg, sizeof(o.cfg));

    /* --eval-compute defaults to --simulated-compute's value, wherever that flag stands */
    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--simulated-compute", "4"), 0);
    assert_true(o.eval_compute_ms == 4);
    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--checkpoint-dir", "/c", "--eval-every", "1",
                           "--simulated-compute", "1.5"),
                     0);
    assert_true(o.eval_compute_ms == 1.5);
    /* ... unless given, 0 included */
    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--eval-compute", "0", "--simulated-compute", "4"),
                     0);
    assert_true(o.eval_compute_ms == 0);
    /* --eval-every 0 is off and needs no directory; the other eval flags alone are fine */
    assert_int_equal(PARSE(&o, &err, "tide-mlp", "--eval-every", "0", "--eval-tasks", "1"), 0);
    assert_int_equal(o.eval_every, 0);
    assert_int_equal(o.eval_tasks, 1);
    assert_non_null(strstr(tide_mlp_usage(), "--eval-every K"));
    assert_non_null(strstr(tide_mlp_usage(), "--eval-tasks T"));
    assert_non_null(strstr(tide_mlp_usage(), "--eval-per-step E"));
    assert_non_null(strstr(tide_mlp_usage(), "--eval-compute MS"));
}

static void expect_bad(const char *needle, int argc, const char **argv)
{
    tide_mlp_options_t o;
    tide_error_t err;

    assert_int_equal(parse(&o, &err, argc, argv), -EINVAL);
    if (!strstr(err.text, needle))
        fail_msg("error '%s' does not name '%s'", err.text, needle);
    assert_null(strchr(err.text, '\n'));
}

#define BAD(needle, ...)                                                                           \
    expect_bad(needle, (int)(sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *)),        \
               (const char *[]){__VA_ARGS__})

static void test_bad_flags_are_named(void **state)
{
    (void)state;
    BAD("'--bogus'", "tide-mlp", "--bogus");
    BAD("'-x'", "tide-mlp", "-x");
    BAD("--width: missing value", "tide-mlp", "--width");
    BAD("--width: expected an integer", "tide-mlp", "--width", "abc");
    BAD("--width", "tide-mlp", "--width", "0");
    BAD("--width", "tide-mlp", "--width", "-3");
    BAD("--width", "tide-mlp", "--width", "12x");
    BAD("--depth", "tide-mlp", "--depth", "65");
    BAD("--steps", "tide-mlp", "--steps", "");
    BAD("--steps", "tide-mlp", "--steps", "99999999999999999999999");
    BAD("--lr", "tide-mlp", "--lr", "0");
    BAD("--lr", "tide-mlp", "--lr", "nan");
    BAD("--lr", "tide-mlp", "--lr", "-1");
    BAD("--momentum", "tide-mlp", "--momentum", "1");
    BAD("--checkpoint-keep", "tide-mlp", "--checkpoint-keep", "0");
    BAD("--checkpoint-dir", "tide-mlp", "--checkpoint-dir", "");
    BAD("--simulated-compute: expected a number", "tide-mlp", "--simulated-compute", "-1");
    BAD("--simulated-compute", "tide-mlp", "--simulated-compute", "nan");
    BAD("--simulated-compute", "tide-mlp", "--simulated-compute", "inf");
    BAD("--simulated-compute", "tide-mlp", "--simulated-compute", "5ms");
    BAD("--simulated-compute", "tide-mlp", "--simulated-compute", "");
    BAD("--simulated-compute", "tide-mlp", "--simulated-compute", "1e6");
    BAD("--simulated-compute: missing value", "tide-mlp", "--simulated-compute");
    BAD("--micro-batches: 3 does not divide --batch 10", "tide-mlp", "--batch", "10",
        "--micro-batches", "3");
    BAD("--micro-batches", "tide-mlp", "--batch", "4", "--micro-batches", "8");
    BAD("--eval-every: needs --checkpoint-dir", "tide-mlp", "--eval-every", "3");
    BAD("--eval-every: expected an integer", "tide-mlp", "--checkpoint-dir", "/c", "--eval-every",
        "-1");
    BAD("--eval-every", "tide-mlp", "--checkpoint-dir", "/c", "--eval-every", "x");
    BAD("--eval-tasks: expected an integer in [1, 4096]", "tide-mlp", "--eval-tasks", "0");
    BAD("--eval-tasks", "tide-mlp", "--eval-tasks", "4097");
    BAD("--eval-per-step", "tide-mlp", "--eval-per-step", "0");
    BAD("--eval-per-step: missing value", "tide-mlp", "--eval-per-step");
    BAD("--eval-compute: expected a number", "tide-mlp", "--eval-compute", "-1");
    BAD("--eval-compute", "tide-mlp", "--eval-compute", "nan");
    BAD("unexpected argument 'extra'", "tide-mlp", "extra");
    BAD("parameters", "tide-mlp", "--width", "65536", "--depth", "64");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_flags),
        cmocka_unit_test(test_eval_flags),
        cmocka_unit_test(test_bad_flags_are_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* tide-scheduler's flags (scheduler/daemon/flags.c): durations, pools and the policy flags land in the
 * daemon's configuration; every bad value is refused with one line naming the flag and changes nothing
 * that a later good flag would not set anyway. No daemon is started. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flags.h"

static void test_duration(void **state)
{
    int64_t ms = -1;
    (void)state;

    assert_int_equal(tide_sched_parse_duration("0", &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(tide_sched_parse_duration("90", &ms), 0); /* bare: seconds */
    assert_int_equal(ms, 90000);
    assert_int_equal(tide_sched_parse_duration("500ms", &ms), 0);
    assert_int_equal(ms, 500);
    assert_int_equal(tide_sched_parse_duration("15m", &ms), 0);
    assert_int_equal(ms, 900000);
    assert_int_equal(tide_sched_parse_duration("1h30m", &ms), 0);
    assert_int_equal(ms, 5400000);
    assert_int_equal(tide_sched_parse_duration("2d4h", &ms), 0);
    assert_int_equal(ms, (2 * 24 + 4) * 3600000LL);
    assert_int_equal(tide_sched_parse_duration("1m30s250ms", &ms), 0);
    assert_int_equal(ms, 90250);
    assert_int_equal(tide_sched_parse_duration("0s", &ms), 0);
    assert_int_equal(ms, 0);

    ms = 7;
    assert_int_equal(tide_sched_parse_duration("", &ms), -EINVAL);
    assert_int_equal(tide_sched_parse_duration("5x", &ms), -EINVAL);
    assert_int_equal(tide_sched_parse_duration("m", &ms), -EINVAL);
    assert_int_equal(tide_sched_parse_duration("-5s", &ms), -EINVAL);
    assert_int_equal(tide_sched_parse_duration("30m1h", &ms), -EINVAL); /* out of order */
    assert_int_equal(tide_sched_parse_duration("1m1m", &ms), -EINVAL);  /* repeated */
    assert_int_equal(tide_sched_parse_duration("1.5h", &ms), -EINVAL);
    assert_int_equal(tide_sched_parse_duration("10 s", &ms), -EINVAL);
    assert_int_equal(tide_sched_parse_duration("3651d", &ms), -ERANGE);
    assert_int_equal(tide_sched_parse_duration("99999999999999999999s", &ms), -ERANGE);
    assert_int_equal(tide_sched_parse_duration("999999999999", &ms), -ERANGE);
    assert_int_equal(ms, 7); /* untouched on failure */
}

static void test_pool_value(void **state)
{
    char name[64];
    int32_t ded = 99;
    tide_error_t err;
    (void)state;

    assert_int_equal(tide_sched_parse_pool("train", name, sizeof(name), &ded, &err), 0);
    assert_string_equal(name, "train");
    assert_int_equal(ded, -1);
    assert_int_equal(tide_sched_parse_pool("prod=Critical", name, sizeof(name), &ded, &err), 0);
    assert_string_equal(name, "prod");
    assert_int_equal(ded, TIDE_PRIO_CRITICAL);
    assert_int_equal(tide_sched_parse_pool("scratch=low", name, sizeof(name), &ded, &err), 0);
    assert_int_equal(ded, TIDE_PRIO_LOW);
    assert_int_equal(tide_sched_parse_pool("=high", name, sizeof(name), &ded, &err), -EINVAL);
    assert_string_equal(err.text, "\"=high\" has no pool name (NAME or NAME=CLASS)");
    assert_int_equal(tide_sched_parse_pool("a=urgent", name, sizeof(name), &ded, &err), -EINVAL);
    assert_string_equal(err.text, "pool a: \"urgent\" is not a class (low, normal, high or critical)");
    assert_int_equal(tide_sched_parse_pool("a=", name, sizeof(name), &ded, &err), -EINVAL);
    assert_int_equal(tide_sched_parse_pool("abcdefgh", name, 4, &ded, &err), -EINVAL);
}

/* Parses "tide-scheduler ARGS..." (NULL-terminated) into a config with the defaults. */
static int parse(tide_daemon_config_t *cfg, tide_error_t *err, const char *first, ...)
{
    char *argv[64];
    int argc = 0;
    va_list ap;
    tide_log_level_t level = TIDE_LOG_INFO;
    char *out = NULL;
    size_t out_len = 0;
    FILE *f = open_memstream(&out, &out_len);
    int rc;

    argv[argc++] = "tide-scheduler";
    va_start(ap, first);
    for (const char *a = first; a; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    memset(cfg, 0, sizeof(*cfg));
    cfg->listen = "127.0.0.1:7070";
    tide_core_config_default(&cfg->core);
    memset(err, 0, sizeof(*err));
    rc = tide_sched_parse_args(argc, argv, cfg, &level, f, err);
    fclose(f);
    if (rc == 1)
        assert_non_null(strstr(out, "tide-scheduler"));
    free(out);
    return rc;
}

static void test_policy_flags(void **state)
{
    tide_daemon_config_t cfg;
    tide_error_t err;
    (void)state;

    /* Defaults: no pools, aging 30 min, preemption on, no durable copies, computed reserve. */
    assert_int_equal(parse(&cfg, &err, NULL), 0);
    assert_int_equal(cfg.core.n_pools, 0);
    assert_int_equal(cfg.core.aging_ms, 30 * 60000);
    assert_true(cfg.core.preemption);
    assert_false(cfg.core.ckpt_flush);
    assert_null(cfg.ckpt_durable_dir);
    assert_int_equal(cfg.core.reserve_gpus, -1);
    assert_true(cfg.core.stealing);
    assert_float_equal(cfg.core.straggler_ratio, 1.25, 1e-12);
    assert_int_equal(cfg.core.straggler_window_ms, 30000);
    assert_int_equal(cfg.core.straggler_check_ms, 5000);
    /* Elastic scaling (docs/elastic.md): grow by itself, 1 min dwell, 30 s grace, stragglers reported. */
    assert_true(cfg.core.auto_grow);
    assert_int_equal(cfg.core.resize_dwell_ms, 60000);
    assert_int_equal(cfg.core.resize_grace_ms, 30000);
    assert_false(cfg.core.replace_stragglers);

    assert_int_equal(parse(&cfg, &err, "--no-auto-grow", "--resize-dwell", "5m", "--resize-grace", "1500ms",
                           "--replace-stragglers", NULL),
                     0);
    assert_false(cfg.core.auto_grow);
    assert_int_equal(cfg.core.resize_dwell_ms, 300000);
    assert_int_equal(cfg.core.resize_grace_ms, 1500);
    assert_true(cfg.core.replace_stragglers);
    /* 0: resize as soon as it pays / stop without waiting for a checkpoint; a bare number is seconds. */
    assert_int_equal(parse(&cfg, &err, "--resize-dwell", "0", "--resize-grace", "0", NULL), 0);
    assert_int_equal(cfg.core.resize_dwell_ms, 0);
    assert_int_equal(cfg.core.resize_grace_ms, 0);
    assert_true(cfg.core.auto_grow);
    assert_int_equal(parse(&cfg, &err, "--resize-grace", "1d", "--resize-dwell", "90", NULL), 0);
    assert_int_equal(cfg.core.resize_grace_ms, 86400000);
    assert_int_equal(cfg.core.resize_dwell_ms, 90000);

    /* Work stealing (docs/work-stealing.md): a short window is checked four times per window. */
    assert_int_equal(parse(&cfg, &err, "--no-stealing", "--straggler-ratio", "1.5", "--straggler-window", "2s",
                           NULL),
                     0);
    assert_false(cfg.core.stealing);
    assert_float_equal(cfg.core.straggler_ratio, 1.5, 1e-12);
    assert_int_equal(cfg.core.straggler_window_ms, 2000);
    assert_int_equal(cfg.core.straggler_check_ms, 500);
    assert_int_equal(parse(&cfg, &err, "--straggler-window", "10m", NULL), 0);
    assert_int_equal(cfg.core.straggler_check_ms, 5000);

    assert_int_equal(parse(&cfg, &err, "--pool", "prod=critical", "--pool", "shared", "--pool", "prod=high",
                           "--aging", "0", "--no-preemption", "--preempt-grace", "45s", "--ckpt-durable", "/dur",
                           "--ckpt-mfu-threshold", "25%", "--ckpt-deadline", "10m", "--reserve", "4",
                           "--failure-rate", "14.4", "--replacement-lead-time", "2h", "--max-restarts", "5",
                           "--restart-backoff", "2s", "--restart-window", "30m", "--quarantine-after", "4",
                           "--quarantine-window", "2h", "--listen", "127.0.0.1:0", NULL),
                     0);
    /* A pool named twice keeps its place and takes the last class. */
    assert_int_equal(cfg.core.n_pools, 2);
    assert_string_equal(cfg.core.pools[0].name, "prod");
    assert_int_equal(cfg.core.pools[0].dedicated, TIDE_PRIO_HIGH);
    assert_string_equal(cfg.core.pools[1].name, "shared");
    assert_int_equal(cfg.core.pools[1].dedicated, -1);
    assert_int_equal(cfg.core.aging_ms, 0);
    assert_false(cfg.core.preemption);
    assert_int_equal(cfg.core.preempt_grace_ms, 45000);
    assert_true(cfg.core.ckpt_flush);
    assert_string_equal(cfg.ckpt_durable_dir, "/dur");
    assert_float_equal(cfg.core.ckpt_mfu_threshold, 0.25, 1e-12);
    assert_int_equal(cfg.core.ckpt_deadline_ms, 600000);
    assert_int_equal(cfg.core.reserve_gpus, 4);
    assert_float_equal(cfg.core.failure_rate, 14.4 / (1000.0 * 730.0), 1e-15);
    assert_float_equal(cfg.core.replacement_lead_h, 2.0, 1e-12);
    assert_int_equal(cfg.core.max_restarts, 5);
    assert_int_equal(cfg.core.restart_backoff_ms, 2000);
    assert_int_equal(cfg.core.restart_window_ms, 1800000);
    assert_int_equal(cfg.core.quarantine_failures, 4);
    assert_int_equal(cfg.core.quarantine_window_ms, 7200000);
    assert_string_equal(cfg.listen, "127.0.0.1:0");

    assert_int_equal(parse(&cfg, &err, "--reserve", "4", "--reserve", "auto", "--ckpt-mfu-threshold", "0.4", NULL), 0);
    assert_int_equal(cfg.core.reserve_gpus, -1);
    assert_float_equal(cfg.core.ckpt_mfu_threshold, 0.4, 1e-12);

    /* /metrics' per-GPU series: unset (0) is the default limit, the flag's 0 is never (-1) */
    assert_int_equal(cfg.metrics_gpu_limit, 0);
    assert_int_equal(parse(&cfg, &err, "--metrics-gpu-limit", "100000", NULL), 0);
    assert_int_equal(cfg.metrics_gpu_limit, 100000);
    assert_int_equal(parse(&cfg, &err, "--metrics-gpu-limit", "0", NULL), 0);
    assert_int_equal(cfg.metrics_gpu_limit, -1);

    assert_int_equal(parse(&cfg, &err, "--help", NULL), 1);
    assert_int_equal(parse(&cfg, &err, "--version", NULL), 1);
}

/* Every bad value: -EINVAL and one line (no newline) that starts with the flag. */
static void expect_bad(const char *flag, const char *value, const char *text)
{
    tide_daemon_config_t cfg;
    tide_error_t err;

    assert_int_equal(parse(&cfg, &err, flag, value, NULL), -EINVAL);
    if (strcmp(err.text, text) != 0)
        print_error("%s %s: want \"%s\", got \"%s\"\n", flag, value ? value : "", text, err.text);
    assert_string_equal(err.text, text);
    assert_null(strchr(err.text, '\n'));
}

static void test_bad_flags(void **state)
{
    tide_daemon_config_t cfg;
    tide_error_t err;
    char many[17][32];
    char *argv[40];
    (void)state;

    expect_bad("--aging", "5x", "--aging: \"5x\" is not a duration (e.g. 90s, 15m, 1h30m, 2d)");
    expect_bad("--preempt-grace", "2d", "--preempt-grace: \"2d\" is too long (at most 86400 s)");
    expect_bad("--ckpt-deadline", "0", "--ckpt-deadline: \"0\" is too short (at least 1000 ms)");
    expect_bad("--ckpt-mfu-threshold", "1.5",
               "--ckpt-mfu-threshold: \"1.5\" is not a fraction from 0 to 1 (or a percentage such as 30%)");
    expect_bad("--ckpt-mfu-threshold", "nan",
               "--ckpt-mfu-threshold: \"nan\" is not a fraction from 0 to 1 (or a percentage such as 30%)");
    expect_bad("--ckpt-durable", "", "--ckpt-durable: the directory must not be empty");
    expect_bad("--reserve", "some", "--reserve: \"some\" is not auto or a number of GPUs from 0 to 1000000");
    expect_bad("--reserve", "-1", "--reserve: \"-1\" is not auto or a number of GPUs from 0 to 1000000");
    expect_bad("--failure-rate", "-3",
               "--failure-rate: \"-3\" is not a number of failures per 1,000 GPUs per month (0 to 1000000; the "
               "article's is 3)");
    expect_bad("--failure-rate", "inf",
               "--failure-rate: \"inf\" is not a number of failures per 1,000 GPUs per month (0 to 1000000; the "
               "article's is 3)");
    expect_bad("--replacement-lead-time", "0", "--replacement-lead-time: \"0\" is too short (at least 1000 ms)");
    expect_bad("--straggler-ratio", "1", "--straggler-ratio: \"1\" is not a number above 1 and at most 10");
    expect_bad("--straggler-ratio", "x2", "--straggler-ratio: \"x2\" is not a number above 1 and at most 10");
    expect_bad("--straggler-window", "0", "--straggler-window: \"0\" is too short (at least 1000 ms)");
    expect_bad("--resize-dwell", "soon", "--resize-dwell: \"soon\" is not a duration (e.g. 90s, 15m, 1h30m, 2d)");
    expect_bad("--resize-dwell", "3651d", "--resize-dwell: \"3651d\" is too long (at most 315360000 s)");
    expect_bad("--resize-grace", "1d1ms", "--resize-grace: \"1d1ms\" is too long (at most 86400 s)");
    expect_bad("--resize-grace", "-1s", "--resize-grace: \"-1s\" is not a duration (e.g. 90s, 15m, 1h30m, 2d)");
    expect_bad("--no-auto-grow=yes", NULL, "--no-auto-grow takes no value");
    expect_bad("--replace-stragglers=1", NULL, "--replace-stragglers takes no value");
    expect_bad("--max-restarts", "1001", "--max-restarts: \"1001\" is not a number from 0 to 1000");
    expect_bad("--quarantine-after", "17", "--quarantine-after: \"17\" is not a number from 0 to 16");
    expect_bad("--restart-backoff", "2h", "--restart-backoff: \"2h\" is too long (at most 3600 s)");
    expect_bad("--pool", "a b", "--pool: pool name \"a b\": only letters, digits, '-', '_' and '.'");
    expect_bad("--pool", "gpu=urgent", "--pool: pool gpu: \"urgent\" is not a class (low, normal, high or critical)");
    expect_bad("--heartbeat-ms", "5", "--heartbeat-ms: \"5\" is not a number from 10 to 60000");
    expect_bad("--bogus", NULL, "unknown option '--bogus' (try --help)");

    expect_bad("--metrics-gpu-limit", "-1",
               "--metrics-gpu-limit: \"-1\" is not a number from 0 to 2147483647");
    assert_int_equal(parse(&cfg, &err, "--aging", NULL), -EINVAL);
    assert_string_equal(err.text, "--aging needs a value");
    assert_int_equal(parse(&cfg, &err, "stray", NULL), -EINVAL);
    assert_string_equal(err.text, "unexpected argument \"stray\" (try --help)");

    /* The core's table holds 16 named pools. */
    argv[0] = "tide-scheduler";
    for (int i = 0; i < 17; i++) {
        snprintf(many[i], sizeof(many[i]), "p%d", i);
        argv[1 + 2 * i] = "--pool";
        argv[2 + 2 * i] = many[i];
    }
    argv[35] = NULL;
    {
        tide_log_level_t level;
        memset(&cfg, 0, sizeof(cfg));
        tide_core_config_default(&cfg.core);
        assert_int_equal(tide_sched_parse_args(35, argv, &cfg, &level, stdout, &err), -EINVAL);
        assert_string_equal(err.text, "--pool: at most 16 pools may be named");
        assert_int_equal(cfg.core.n_pools, 16);
    }
}

/* HA flags: the leader's address and lease, and how long etcd is tried at start, only with an etcd
 * store, which needs a shared token file. */
static void test_ha_flags(void **state)
{
    tide_daemon_config_t cfg;
    tide_error_t err;
    (void)state;

    assert_int_equal(parse(&cfg, &err, "--store", "etcd://127.0.0.1:2379/t", "--token-file", "/tmp/t", "--advertise",
                           "s0.example:7070", "--lease-ttl", "5s", "--store-wait", "5m", NULL),
                     0);
    assert_string_equal(cfg.advertise, "s0.example:7070");
    assert_int_equal(cfg.lease_ttl_ms, 5000);
    assert_int_equal(cfg.store_wait_ms, 300000);

    assert_int_equal(parse(&cfg, &err, "--store", "etcd://127.0.0.1:2379", NULL), -EINVAL);
    assert_string_equal(err.text, "--store etcd://: give --token-file (every replica must check the same token)");
    assert_int_equal(parse(&cfg, &err, "--lease-ttl", "5s", NULL), -EINVAL);
    assert_string_equal(err.text, "--lease-ttl: only with --store etcd:// (leader election)");
    assert_int_equal(parse(&cfg, &err, "--store-wait", "1m", NULL), -EINVAL);
    assert_string_equal(err.text, "--store-wait: only with --store etcd:// (leader election)");
    assert_int_equal(parse(&cfg, &err, "--advertise", "a:1", NULL), -EINVAL);
    assert_string_equal(err.text, "--advertise: only with --store etcd:// (leader election)");
    expect_bad("--advertise", "nohost", "--advertise: \"nohost\" is not HOST:PORT");
    expect_bad("--advertise", "a:1,b:2", "--advertise: \"a:1,b:2\" is not HOST:PORT");
    expect_bad("--lease-ttl", "1s", "--lease-ttl: \"1s\" is too short (at least 2000 ms)");
    expect_bad("--lease-ttl", "2m", "--lease-ttl: \"2m\" is too long (at most 60 s)");
    expect_bad("--store-wait", "soon", "--store-wait: \"soon\" is not a duration (e.g. 90s, 15m, 1h30m, 2d)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration),
        cmocka_unit_test(test_pool_value),
        cmocka_unit_test(test_policy_flags),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_ha_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

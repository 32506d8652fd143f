/* Unit tests of tide-worker's flag parsing (worker/config.c): defaults, every flag, the token
 * sources in order, and one-line errors that name the bad flag. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "worker_test_util.h"

#define ARGV(...)                                                                                  \
    (char *[])                                                                                     \
    {                                                                                              \
        "tide-worker", __VA_ARGS__, NULL                                                           \
    }
#define ARGC(...) ((int)(sizeof((char *[]){"tide-worker", __VA_ARGS__}) / sizeof(char *)))
#define PARSE(cfg, err, ...)                                                                       \
    tide_worker_config_parse(ARGC(__VA_ARGS__), ARGV(__VA_ARGS__), cfg, err)

static int clear_env(void **state)
{
    (void)state;
    unsetenv("TIDE_SCHEDULER");
    unsetenv("TIDE_TOKEN");
    unsetenv("TIDE_TOKEN_FILE");
    /* a developer may run the tests inside an allocation */
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_LOCALID");
    unsetenv("SLURM_NODEID");
    unsetenv("SLURMD_NODENAME");
    unsetenv("SLURM_STEP_GPUS");
    return 0;
}

static const char *label(const tide_worker_config_t *cfg, const char *key)
{
    for (size_t i = 0; i < cfg->n_labels; i++)
        if (strcmp(cfg->labels[i].key, key) == 0)
            return cfg->labels[i].value;
    return NULL;
}

/* Started by srun: the task's GPU of the step, the Slurm node name, slurm.* labels; flags win. */
static void test_slurm(void **state)
{
    tide_worker_config_t cfg;
    tide_error_t err;
    (void)state;

    setenv("SLURM_JOB_ID", "4242", 1);
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURMD_NODENAME", "gpunode2", 1);
    setenv("SLURM_STEP_GPUS", "2,3", 1);
    assert_int_equal(PARSE(&cfg, &err, "--data-dir", "/tmp/x"), 0);
    assert_true(cfg.slurm);
    assert_int_equal(cfg.gpu_index, 3);
    assert_string_equal(cfg.node, "gpunode2");
    assert_string_equal(cfg.id, "gpunode2/gpu3");
    assert_string_equal(label(&cfg, "slurm.job_id"), "4242");
    assert_string_equal(label(&cfg, "slurm.procid"), "5");
    assert_string_equal(label(&cfg, "slurm.node"), "gpunode2");
    tide_worker_config_free(&cfg);

    assert_int_equal(PARSE(&cfg, &err, "--gpu-index", "0", "--node", "n9", "--labels", "slurm.node=mine,rack=r1"), 0);
    assert_int_equal(cfg.gpu_index, 0);
    assert_string_equal(cfg.node, "n9");
    assert_string_equal(label(&cfg, "slurm.node"), "mine");
    assert_string_equal(label(&cfg, "rack"), "r1");
    assert_string_equal(label(&cfg, "slurm.job_id"), "4242");
    tide_worker_config_free(&cfg);

    setenv("SLURM_LOCALID", "2", 1); /* more tasks than the step's GPUs */
    assert_int_equal(PARSE(&cfg, &err, "--data-dir", "/tmp/x"), -EINVAL);
    assert_non_null(strstr(err.text, "SLURM_STEP_GPUS"));
    tide_worker_config_free(&cfg);
    clear_env(NULL);
}

static void test_defaults(void **state)
{
    tide_worker_config_t cfg;
    char host[256], *want;
    char *argv[] = {"tide-worker", NULL};

    (void)state;
    gethostname(host, sizeof(host));
    assert_int_equal(tide_worker_config_parse(1, argv, &cfg, NULL), 0);
    assert_string_equal(cfg.scheduler, "127.0.0.1:7070");
    assert_string_equal(cfg.node, host);
    assert_int_equal(cfg.gpu_index, 0);
    want = NULL;
    assert_true(asprintf(&want, "%s/gpu0", host) > 0);
    assert_string_equal(cfg.id, want);
    free(want);
    assert_string_equal(cfg.gpu, "sim:h100");
    assert_string_equal(cfg.advertise, host); /* not 127.0.0.1 */
    assert_true(asprintf(&want, "/var/lib/tide/worker/%s-gpu0", host) > 0);
    assert_string_equal(cfg.data_dir, want);
    free(want);
    assert_null(cfg.token);
    assert_int_equal(cfg.n_labels, 0);
    assert_int_equal(cfg.log_level, TIDE_LOG_INFO);
    assert_int_equal(cfg.stop_grace_ms, 10000);
    assert_null(cfg.ckpt_durable); /* the scheduler's directory */
    tide_worker_config_free(&cfg);

    setenv("TIDE_SCHEDULER", "sched.example:9000", 1);
    assert_int_equal(tide_worker_config_parse(1, argv, &cfg, NULL), 0);
    assert_string_equal(cfg.scheduler, "sched.example:9000");
    tide_worker_config_free(&cfg);
    /* The flag wins over the variable. */
    assert_int_equal(PARSE(&cfg, NULL, "--scheduler", "10.1.1.1:7071"), 0);
    assert_string_equal(cfg.scheduler, "10.1.1.1:7071");
    tide_worker_config_free(&cfg);
    /* The replicas of an HA scheduler: the worker follows the leader among them. */
    assert_int_equal(PARSE(&cfg, NULL, "--scheduler", "a:7070,b:7070,[::1]:7070"), 0);
    assert_string_equal(cfg.scheduler, "a:7070,b:7070,[::1]:7070");
    tide_worker_config_free(&cfg);
}

static void test_flags(void **state)
{
    tide_worker_config_t cfg;
    tide_error_t err;

    (void)state;
    assert_int_equal(PARSE(&cfg, &err, "--scheduler", "s:1", "--node", "n7", "--gpu-index=3",
                           "--gpu", "sim:b200", "--labels", "rack=r1,switch=s2", "--advertise",
                           "127.0.0.1", "--data-dir", "/tmp/x", "--log-level", "debug",
                           "--stop-grace-ms", "250"),
                     0);
    assert_string_equal(cfg.node, "n7");
    assert_string_equal(cfg.id, "n7/gpu3");
    assert_int_equal(cfg.gpu_index, 3);
    assert_string_equal(cfg.gpu, "sim:b200");
    assert_int_equal(cfg.n_labels, 2);
    assert_string_equal(cfg.labels[0].key, "rack");
    assert_string_equal(cfg.labels[0].value, "r1");
    assert_string_equal(cfg.labels[1].key, "switch");
    assert_string_equal(cfg.labels[1].value, "s2");
    assert_string_equal(cfg.advertise, "127.0.0.1");
    assert_string_equal(cfg.data_dir, "/tmp/x");
    assert_int_equal(cfg.log_level, TIDE_LOG_DEBUG);
    assert_int_equal(cfg.stop_grace_ms, 250);
    tide_worker_config_free(&cfg);

    assert_int_equal(PARSE(&cfg, &err, "--id", "custom", "--node", "n1"), 0);
    assert_string_equal(cfg.id, "custom");
    assert_string_equal(cfg.data_dir, "/var/lib/tide/worker/n1-gpu0");
    tide_worker_config_free(&cfg);

    /* --ckpt-durable: absolute as given; relative to the worker's starting directory. */
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-durable", "/mnt/durable"), 0);
    assert_string_equal(cfg.ckpt_durable, "/mnt/durable");
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-durable=ckpts"), 0);
    {
        char cwd[4096], *want;
        assert_non_null(getcwd(cwd, sizeof(cwd)));
        assert_true(asprintf(&want, "%s/ckpts", cwd) > 0);
        assert_string_equal(cfg.ckpt_durable, want);
        free(want);
    }
    tide_worker_config_free(&cfg);

    /* Checkpoint tiers: hot in /dev/shm when it is writable, else under the data dir; warm under
     * the data dir; retention 2 / 4; every flag takes its value. */
    assert_int_equal(PARSE(&cfg, &err, "--id", "n1/gpu2", "--data-dir", "/tmp/dd"), 0);
    {
        struct stat st;
        char *want;
        if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0)
            assert_true(asprintf(&want, "/dev/shm/tide-%u/n1-gpu2", (unsigned)getuid()) > 0);
        else
            want = strdup("/tmp/dd/ckpt-hot");
        assert_string_equal(cfg.ckpt_hot, want);
        free(want);
    }
    assert_string_equal(cfg.ckpt_warm, "/tmp/dd/ckpt-warm");
    assert_int_equal(cfg.ckpt_keep_hot, 2);
    assert_int_equal(cfg.ckpt_keep_warm, 4);
    assert_int_equal(cfg.ckpt_hot_ttl_ms, 24LL * 3600 * 1000);
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-hot-ttl", "90m"), 0);
    assert_int_equal(cfg.ckpt_hot_ttl_ms, 90LL * 60 * 1000);
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-hot-ttl=0"), 0);
    assert_int_equal(cfg.ckpt_hot_ttl_ms, 0);
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-hot-ttl", "2d"), 0);
    assert_int_equal(cfg.ckpt_hot_ttl_ms, 2LL * 86400 * 1000);
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-hot-ttl", "3x"), -EINVAL);
    assert_non_null(strstr(err.text, "--ckpt-hot-ttl"));
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-hot-ttl", "-1h"), -EINVAL);
    tide_worker_config_free(&cfg);
    /* the room peers' mirror copies leave free */
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-keep-hot", "2"), 0);
    assert_int_equal(cfg.ckpt_mirror_min_free, 25);
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-mirror-min-free=0"), 0);
    assert_int_equal(cfg.ckpt_mirror_min_free, 0);
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-mirror-min-free", "91"), -EINVAL);
    assert_non_null(strstr(err.text, "--ckpt-mirror-min-free"));
    tide_worker_config_free(&cfg);
    assert_int_equal(PARSE(&cfg, &err, "--ckpt-hot", "/mnt/hot", "--ckpt-warm=warm",
                           "--ckpt-keep-hot", "1", "--ckpt-keep-warm=9"),
                     0);
    assert_string_equal(cfg.ckpt_hot, "/mnt/hot");
    {
        char cwd[4096], *want;
        assert_non_null(getcwd(cwd, sizeof(cwd)));
        assert_true(asprintf(&want, "%s/warm", cwd) > 0);
        assert_string_equal(cfg.ckpt_warm, want);
        free(want);
    }
    assert_int_equal(cfg.ckpt_keep_hot, 1);
    assert_int_equal(cfg.ckpt_keep_warm, 9);
    tide_worker_config_free(&cfg);

    assert_int_equal(PARSE(&cfg, &err, "--help"), 1);
    tide_worker_config_free(&cfg);
    assert_non_null(strstr(tide_worker_usage(), "--ckpt-keep-warm N"));
    assert_non_null(strstr(tide_worker_usage(), "--stop-grace-ms"));
    assert_non_null(strstr(tide_worker_usage(), "--ckpt-durable DIR"));
}

static void test_bad_flags(void **state)
{
    struct {
        int argc;
        char **argv;
        const char *want;
    } cases[] = {
        {ARGC("--bogus"), ARGV("--bogus"), "unknown flag --bogus"},
        {ARGC("--bogus=1"), ARGV("--bogus=1"), "unknown flag --bogus"},
        {ARGC("stray"), ARGV("stray"), "unexpected argument 'stray'"},
        {ARGC("--gpu-index"), ARGV("--gpu-index"), "--gpu-index needs a value"},
        {ARGC("--gpu-index", "x"), ARGV("--gpu-index", "x"), "--gpu-index: 'x' is not a number"},
        {ARGC("--gpu-index", "-1"), ARGV("--gpu-index", "-1"), "--gpu-index:"},
        {ARGC("--scheduler", "nohost"), ARGV("--scheduler", "nohost"), "--scheduler:"},
        {ARGC("--scheduler", "h:0"), ARGV("--scheduler", "h:0"), "--scheduler:"},
        {ARGC("--scheduler", "h:99999"), ARGV("--scheduler", "h:99999"), "--scheduler:"},
        {ARGC("--scheduler", "a:1,b"), ARGV("--scheduler", "a:1,b"), "--scheduler: 'b' in 'a:1,b': not HOST:PORT"},
        {ARGC("--labels", "a=1,b"), ARGV("--labels", "a=1,b"), "--labels: 'b' is not key=value"},
        {ARGC("--labels", "a=1,a=2"), ARGV("--labels", "a=1,a=2"), "--labels: key 'a' given twice"},
        {ARGC("--log-level", "loud"), ARGV("--log-level", "loud"), "--log-level:"},
        {ARGC("--stop-grace-ms", "soon"), ARGV("--stop-grace-ms", "soon"), "--stop-grace-ms:"},
        {ARGC("--token-file", "/nonexistent/t"), ARGV("--token-file", "/nonexistent/t"),
         "cannot read token file /nonexistent/t: No such file or directory"},
        {ARGC("--data-dir="), ARGV("--data-dir="), "--data-dir: empty"},
        {ARGC("--ckpt-durable="), ARGV("--ckpt-durable="), "--ckpt-durable: empty"},
        {ARGC("--ckpt-hot="), ARGV("--ckpt-hot="), "--ckpt-hot: empty"},
        {ARGC("--ckpt-warm="), ARGV("--ckpt-warm="), "--ckpt-warm: empty"},
        {ARGC("--ckpt-keep-hot", "0"), ARGV("--ckpt-keep-hot", "0"), "--ckpt-keep-hot: '0'"},
        {ARGC("--ckpt-keep-hot", "x"), ARGV("--ckpt-keep-hot", "x"), "--ckpt-keep-hot:"},
        {ARGC("--ckpt-keep-warm", "-2"), ARGV("--ckpt-keep-warm", "-2"), "--ckpt-keep-warm:"},
        {ARGC("--ckpt-keep-warm"), ARGV("--ckpt-keep-warm"), "--ckpt-keep-warm needs a value"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tide_worker_config_t cfg;
        tide_error_t err;

        err.text[0] = '\0';
        assert_int_equal(tide_worker_config_parse(cases[i].argc, cases[i].argv, &cfg, &err),
                         -EINVAL);
        if (!strstr(err.text, cases[i].want))
            fail_msg("case %zu: '%s' does not contain '%s'", i, err.text, cases[i].want);
        assert_null(strchr(err.text, '\n'));
        tide_worker_config_free(&cfg);
    }
    setenv("TIDE_SCHEDULER", "bad", 1);
    {
        tide_worker_config_t cfg;
        tide_error_t err;
        char *argv[] = {"tide-worker", NULL};
        assert_int_equal(tide_worker_config_parse(1, argv, &cfg, &err), -EINVAL);
        assert_non_null(strstr(err.text, "TIDE_SCHEDULER"));
        tide_worker_config_free(&cfg);
    }
}

static void test_token_sources(void **state)
{
    char *dir = wt_tmpdir(), *f1, *f2;
    tide_worker_config_t cfg;
    tide_error_t err;

    (void)state;
    assert_true(asprintf(&f1, "%s/t1", dir) > 0);
    assert_true(asprintf(&f2, "%s/t2", dir) > 0);
    wt_write_file(f1, "from-flag-file\n");
    wt_write_file(f2, "  from-env-file \n\n");

    setenv("TIDE_TOKEN_FILE", f2, 1);
    assert_int_equal(PARSE(&cfg, &err, "--node", "n"), 0);
    assert_string_equal(cfg.token, "from-env-file"); /* whitespace trimmed */
    tide_worker_config_free(&cfg);

    setenv("TIDE_TOKEN", "from-env", 1);
    assert_int_equal(PARSE(&cfg, &err, "--node", "n"), 0);
    assert_string_equal(cfg.token, "from-env");
    tide_worker_config_free(&cfg);

    assert_int_equal(PARSE(&cfg, &err, "--token-file", f1), 0);
    assert_string_equal(cfg.token, "from-flag-file");
    tide_worker_config_free(&cfg);

    wt_write_file(f1, "\n");
    assert_int_equal(PARSE(&cfg, &err, "--token-file", f1), -EINVAL);
    assert_non_null(strstr(err.text, "empty"));
    tide_worker_config_free(&cfg);

    wt_rmrf(dir);
    free(f1);
    free(f2);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test_setup(test_flags, clear_env),
        cmocka_unit_test_setup(test_bad_flags, clear_env),
        cmocka_unit_test_setup(test_token_sources, clear_env),
        cmocka_unit_test_setup(test_slurm, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

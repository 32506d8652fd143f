/* The Slurm identity of a worker task (worker/slurm.h): which GPU srun's task takes, its node and labels,
 * and the errors for a malformed environment. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "slurm.h"

/* The environment the getter sees: NULL-terminated name, value pairs. */
static const char *const *env_now;

static const char *fake_getenv(const char *name)
{
    for (const char *const *p = env_now; p && p[0]; p += 2)
        if (strcmp(p[0], name) == 0)
            return p[1];
    return NULL;
}

static int detect(const char *const *env, tide_worker_slurm_t *s, tide_error_t *err)
{
    env_now = env;
    memset(err, 0, sizeof(*err));
    return tide_worker_slurm_detect(fake_getenv, s, err);
}

static void test_outside_slurm(void **state)
{
    const char *const env[] = {"SLURM_LOCALID", "3", NULL}; /* without a job id it is not Slurm's */
    tide_worker_slurm_t s;
    tide_error_t err;
    const char *keys[TIDE_SLURM_LABELS], *values[TIDE_SLURM_LABELS];
    char vbuf[TIDE_SLURM_LABELS * 24];
    (void)state;

    assert_int_equal(detect(env, &s, &err), 0);
    assert_false(s.present);
    assert_int_equal(s.gpu_index, -1);
    assert_int_equal(tide_worker_slurm_labels(&s, keys, values, vbuf), 0);
}

static void test_task_takes_its_gpu_of_the_step(void **state)
{
    const char *const env[] = {"SLURM_JOB_ID", "4242", "SLURM_STEP_ID", "0",  "SLURM_PROCID", "6",
                               "SLURM_LOCALID", "2", "SLURM_NODEID", "1", "SLURMD_NODENAME", "gpunode2",
                               "SLURM_STEP_GPUS", "4,5,6,7", NULL};
    tide_worker_slurm_t s;
    tide_error_t err;
    const char *keys[TIDE_SLURM_LABELS], *values[TIDE_SLURM_LABELS];
    char vbuf[TIDE_SLURM_LABELS * 24];
    int n;
    (void)state;

    assert_int_equal(detect(env, &s, &err), 0);
    assert_true(s.present);
    assert_string_equal(s.job_id, "4242");
    assert_string_equal(s.node, "gpunode2");
    assert_int_equal(s.procid, 6);
    assert_int_equal(s.localid, 2);
    assert_int_equal(s.nodeid, 1);
    assert_int_equal(s.gpu_index, 6); /* entry 2 of the step's GPUs, not GPU 2 */
    n = tide_worker_slurm_labels(&s, keys, values, vbuf);
    assert_int_equal(n, 6);
    assert_string_equal(keys[0], "slurm.job_id");
    assert_string_equal(values[0], "4242");
    assert_string_equal(keys[1], "slurm.step_id");
    assert_string_equal(keys[2], "slurm.procid");
    assert_string_equal(values[2], "6");
    assert_string_equal(keys[3], "slurm.localid");
    assert_string_equal(values[3], "2");
    assert_string_equal(keys[4], "slurm.nodeid");
    assert_string_equal(values[4], "1");
    assert_string_equal(keys[5], "slurm.node");
    assert_string_equal(values[5], "gpunode2");
}

static void test_without_step_gpus_the_local_id_is_the_gpu(void **state)
{
    const char *const env[] = {"SLURM_JOB_ID", "7", "SLURM_LOCALID", "3", NULL};
    tide_worker_slurm_t s;
    tide_error_t err;
    const char *keys[TIDE_SLURM_LABELS], *values[TIDE_SLURM_LABELS];
    char vbuf[TIDE_SLURM_LABELS * 24];
    (void)state;

    assert_int_equal(detect(env, &s, &err), 0);
    assert_int_equal(s.gpu_index, 3);
    assert_int_equal(s.procid, -1);
    assert_int_equal(tide_worker_slurm_labels(&s, keys, values, vbuf), 2); /* job id, local id */
    /* a batch script's own shell: no local id, no GPU of its own */
    {
        const char *const batch[] = {"SLURM_JOB_ID", "7", NULL};
        assert_int_equal(detect(batch, &s, &err), 0);
        assert_true(s.present);
        assert_int_equal(s.gpu_index, -1);
    }
}

static void test_malformed_environment(void **state)
{
    static const struct {
        const char *env[8];
        const char *names;
    } cases[] = {
        {{"SLURM_JOB_ID", "1", "SLURM_LOCALID", "x", NULL}, "SLURM_LOCALID"},
        {{"SLURM_JOB_ID", "1", "SLURM_PROCID", "-2", NULL}, "SLURM_PROCID"},
        {{"SLURM_JOB_ID", "1", "SLURM_LOCALID", "0", "SLURM_STEP_GPUS", "0,,1", NULL}, "SLURM_STEP_GPUS"},
        {{"SLURM_JOB_ID", "1", "SLURM_LOCALID", "0", "SLURM_STEP_GPUS", "gpu0", NULL}, "SLURM_STEP_GPUS"},
        {{"SLURM_JOB_ID", "1", "SLURM_LOCALID", "2", "SLURM_STEP_GPUS", "0,1", NULL}, "one task per GPU"},
        {{"SLURM_JOB_ID", "123456789012345678901234567890123", NULL}, "SLURM_JOB_ID"},
    };
    tide_worker_slurm_t s;
    tide_error_t err;
    (void)state;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(detect(cases[i].env, &s, &err), -EINVAL);
        if (!strstr(err.text, cases[i].names))
            fail_msg("case %zu: \"%s\" does not name %s", i, err.text, cases[i].names);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outside_slurm),
        cmocka_unit_test(test_task_takes_its_gpu_of_the_step),
        cmocka_unit_test(test_without_step_gpus_the_local_id_is_the_gpu),
        cmocka_unit_test(test_malformed_environment),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}

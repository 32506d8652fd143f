/* Job specs: validation, deep copy and free. A valid spec has a command, 1 <= min <= max workers, no
 * negative time limit and a burst percentage in 0..100 (a burst command only with burst on). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

int tide_job_spec_validate(const tide_job_spec_t *spec, tide_error_t *err)
{
    if (spec->argc == 0 || !spec->argv || !spec->argv[0] || !spec->argv[0][0]) {
        tide_errprintf(err, "command must not be empty");
        return -EINVAL;
    }
    if (spec->min_workers < 1) {
        tide_errprintf(err, "min_workers must be >= 1 (got %d)", spec->min_workers);
        return -EINVAL;
    }
    if (spec->max_workers != 0 && spec->max_workers < spec->min_workers) {
        tide_errprintf(err, "max_workers (%d) must be >= min_workers (%d)", spec->max_workers,
                       spec->min_workers);
        return -EINVAL;
    }
    if (spec->max_workers > 65536 || spec->min_workers > 65536) {
        tide_errprintf(err, "max_workers must be <= 65536");
        return -EINVAL;
    }
    if (spec->time_limit_s > TIDE_TIME_LIMIT_MAX_S) {
        tide_errprintf(err, "time_limit_seconds must be <= %lld (10 years)", (long long)TIDE_TIME_LIMIT_MAX_S);
        return -EINVAL;
    }
    if (spec->workdir && spec->workdir[0] && spec->workdir[0] != '/') {
        tide_errprintf(err, "workdir \"%.200s\" must be an absolute path", spec->workdir);
        return -EINVAL;
    }
    if (spec->time_limit_s < 0) {
        tide_errprintf(err, "time_limit_seconds must be >= 0 (got %lld)",
                       (long long)spec->time_limit_s);
        return -EINVAL;
    }
    if (spec->launcher < 0 || spec->launcher > TIDE_LAUNCHER_MPI) {
        tide_errprintf(err, "launcher %d is not a Launcher (0 unspecified, 1 env, 2 mpi)",
                       (int)spec->launcher);
        return -EINVAL;
    }
    if ((unsigned)spec->priority >= TIDE_PRIO_COUNT) {
        tide_errprintf(err, "priority %d is not a priority class", (int)spec->priority);
        return -EINVAL;
    }
    if ((unsigned)spec->topology > TIDE_TOPO_SWITCH) {
        tide_errprintf(err, "topology %d is not a Topology (0 any, 1 node, 2 rack, 3 switch)", (int)spec->topology);
        return -EINVAL;
    }
    if (spec->pool && strlen(spec->pool) > TIDE_POOL_NAME_MAX) {
        tide_errprintf(err, "pool name must be at most %d characters", TIDE_POOL_NAME_MAX);
        return -EINVAL;
    }
    if (spec->device && strlen(spec->device) > 255) {
        tide_errprintf(err, "device must be at most 255 characters");
        return -EINVAL;
    }
    if (spec->memory_per_rank > (1ULL << 50)) {
        tide_errprintf(err, "memory_per_rank_bytes %llu is larger than any GPU (at most 1 PiB)",
                       (unsigned long long)spec->memory_per_rank);
        return -EINVAL;
    }
    if (!(spec->ckpt_mfu_threshold >= 0 && spec->ckpt_mfu_threshold <= 1)) {
        tide_errprintf(err, "checkpoint_mfu_threshold must be between 0 and 1 (got %g)", spec->ckpt_mfu_threshold);
        return -EINVAL;
    }
    if (spec->ckpt_deadline_s < 0 || spec->ckpt_deadline_s > TIDE_TIME_LIMIT_MAX_S) {
        tide_errprintf(err, "checkpoint_deadline_seconds must be between 0 and %lld (got %lld)",
                       (long long)TIDE_TIME_LIMIT_MAX_S, (long long)spec->ckpt_deadline_s);
        return -EINVAL;
    }
    if (spec->ckpt_interval_s != -1 && spec->ckpt_interval_s != 0 &&
        (spec->ckpt_interval_s < TIDE_CKPT_INTERVAL_MIN_S || spec->ckpt_interval_s > TIDE_TIME_LIMIT_MAX_S)) {
        tide_errprintf(err,
                       "checkpoint_interval_seconds must be -1 (never), 0 (the scheduler's default) or between %d "
                       "and %lld (got %lld)",
                       TIDE_CKPT_INTERVAL_MIN_S, (long long)TIDE_TIME_LIMIT_MAX_S, (long long)spec->ckpt_interval_s);
        return -EINVAL;
    }
    if (spec->burst_percent < 0 || spec->burst_percent > 100) {
        tide_errprintf(err, "burst_percent must be between 0 (off) and 100 (got %d)", (int)spec->burst_percent);
        return -EINVAL;
    }
    if (spec->n_burst_argv > 0 && (!spec->burst_argv || !spec->burst_argv[0] || !spec->burst_argv[0][0])) {
        tide_errprintf(err, "burst_command: its first word must not be empty");
        return -EINVAL;
    }
    if (spec->n_burst_argv > 0 && spec->burst_percent == 0) {
        tide_errprintf(err, "burst_command needs burst_percent > 0");
        return -EINVAL;
    }
    if (spec->restart_policy < TIDE_RESTART_DEFAULT || spec->restart_policy > TIDE_RESTART_ON_FAILURE) {
        tide_errprintf(err, "restart_policy %d is not a RestartPolicy (0 unspecified, 1 never, 2 on loss, 3 on failure)",
                       (int)spec->restart_policy);
        return -EINVAL;
    }
    if (spec->max_restarts < 0 || spec->max_restarts > 1000) {
        tide_errprintf(err, "max_restarts must be between 0 (the scheduler's default) and 1000 (got %d)",
                       (int)spec->max_restarts);
        return -EINVAL;
    }
    if (spec->restart_backoff_ms < 0 || spec->restart_backoff_ms > 3600000) {
        tide_errprintf(err, "restart_backoff_ms must be between 0 (the scheduler's default) and 3600000 (got %lld)",
                       (long long)spec->restart_backoff_ms);
        return -EINVAL;
    }
    for (size_t i = 0; i < spec->n_env; i++) {
        const char *k = spec->env[i].key;
        if (!k || !k[0] || strchr(k, '=')) {
            tide_errprintf(err, "env key \"%s\" must be non-empty and contain no '='", k ? k : "");
            return -EINVAL;
        }
    }
    return 0;
}

static tide_kv_t *kv_copy(const tide_kv_t *src, size_t n)
{
    tide_kv_t *dst = n ? tide_xcalloc(n, sizeof(*dst)) : NULL;
    for (size_t i = 0; i < n; i++) {
        dst[i].key = tide_xstrdup(src[i].key);
        dst[i].value = tide_xstrdup(src[i].value ? src[i].value : "");
    }
    return dst;
}

void tide_job_spec_copy(tide_job_spec_t *dst, const tide_job_spec_t *src)
{
    *dst = *src;
    dst->name = tide_xstrdup(src->name ? src->name : "");
    dst->argv = tide_xcalloc(src->argc + 1, sizeof(char *));
    for (size_t i = 0; i < src->argc; i++)
        dst->argv[i] = tide_xstrdup(src->argv[i]);
    dst->burst_argv = tide_xcalloc(src->n_burst_argv + 1, sizeof(char *));
    for (size_t i = 0; i < src->n_burst_argv; i++)
        dst->burst_argv[i] = tide_xstrdup(src->burst_argv[i] ? src->burst_argv[i] : "");
    dst->env = kv_copy(src->env, src->n_env);
    dst->workdir = tide_xstrdup(src->workdir ? src->workdir : "");
    dst->pool = tide_xstrdup(src->pool ? src->pool : "");
    dst->device = tide_xstrdup(src->device ? src->device : "");
    dst->owner = tide_xstrdup(src->owner ? src->owner : "");
    dst->run_as = tide_xstrdup(src->run_as ? src->run_as : "");
    if (dst->max_workers == 0)
        dst->max_workers = dst->min_workers;
}

void tide_job_spec_free(tide_job_spec_t *spec)
{
    if (!spec)
        return;
    free(spec->name);
    for (size_t i = 0; i < spec->argc; i++)
        free(spec->argv[i]);
    free(spec->argv);
    for (size_t i = 0; i < spec->n_burst_argv; i++)
        free(spec->burst_argv[i]);
    free(spec->burst_argv);
    for (size_t i = 0; i < spec->n_env; i++) {
        free(spec->env[i].key);
        free(spec->env[i].value);
    }
    free(spec->env);
    free(spec->workdir);
    free(spec->pool);
    free(spec->device);
    free(spec->owner);
    free(spec->run_as);
    memset(spec, 0, sizeof(*spec));
}

/* Submit options -> JobSpec for tidectl (see spec.h). The spec is built by deep-copying the base
 * through protobuf-c's wire format, then overriding fields, so it is freed like any unpacked message. */
#include "spec.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "args.h"
#include "cli.h"
#include "duration.h"
#include "xmalloc.h"

static int parse_count(const char *opt, const char *arg, int32_t *out, tide_error_t *err)
{
    int64_t v;

    if (tide_cli_parse_int(arg, 1, 1000000, &v) < 0) {
        tide_errprintf(err, "bad %s '%s': expected a number of workers (1 or more)", opt, arg);
        return -EINVAL;
    }
    *out = (int32_t)v;
    return 0;
}

int tide_cli_submit_apply(tide_cli_submit_t *s, int id, const char *arg, tide_error_t *err)
{
    static const struct {
        const char *name;
        int value;
    } prios[] = {{"low", TIDE__V1__PRIORITY__PRIORITY_LOW},
                 {"normal", TIDE__V1__PRIORITY__PRIORITY_NORMAL},
                 {"high", TIDE__V1__PRIORITY__PRIORITY_HIGH},
                 {"critical", TIDE__V1__PRIORITY__PRIORITY_CRITICAL}};
    static const struct {
        const char *name;
        int value;
    } launchers[] = {{"env", TIDE__V1__LAUNCHER__LAUNCHER_ENV}, {"mpi", TIDE__V1__LAUNCHER__LAUNCHER_MPI}};
    char *key;
    const char *value;
    int rc;

    switch (id) {
    case TIDE_CLI_OPT_NAME:
        if (!*arg) {
            tide_errprintf(err, "bad --name: empty");
            return -EINVAL;
        }
        free(s->name);
        s->name = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_WORKERS:
        s->has_workers = true;
        return parse_count("--workers", arg, &s->workers, err);
    case TIDE_CLI_OPT_MIN:
        s->has_min = true;
        return parse_count("--min", arg, &s->min, err);
    case TIDE_CLI_OPT_MAX:
        s->has_max = true;
        return parse_count("--max", arg, &s->max, err);
    case TIDE_CLI_OPT_PRIORITY:
        for (size_t i = 0; i < sizeof(prios) / sizeof(prios[0]); i++) {
            if (strcasecmp(arg, prios[i].name) == 0) {
                s->priority = prios[i].value;
                return 0;
            }
        }
        tide_errprintf(err, "bad --priority '%.40s' (one of low, normal, high, critical)", arg);
        return -EINVAL;
    case TIDE_CLI_OPT_LAUNCHER:
        for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]); i++) {
            if (strcasecmp(arg, launchers[i].name) == 0) {
                s->launcher = launchers[i].value;
                return 0;
            }
        }
        tide_errprintf(err, "bad --launcher '%.40s' (one of env, mpi)", arg);
        return -EINVAL;
    case TIDE_CLI_OPT_ENV:
        if (tide_cli_parse_kv(arg, &key, &value) < 0) {
            tide_errprintf(err, "bad --env '%.60s': expected KEY=VALUE", arg);
            return -EINVAL;
        }
        free(key);
        s->env = tide_xrealloc(s->env, (s->n_env + 1) * sizeof(*s->env));
        s->env[s->n_env++] = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_WORKDIR:
        if (!*arg) {
            tide_errprintf(err, "bad --workdir: empty");
            return -EINVAL;
        }
        free(s->workdir);
        s->workdir = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_TIME:
        rc = tide_cli_duration_parse(arg, &s->time_limit);
        if (rc < 0) {
            tide_errprintf(err, "bad --time '%.40s': %s", arg,
                           rc == -ERANGE ? "longer than 100 years"
                                         : "expected e.g. 90s, 15m, 2h, 1h30m, 1d, MM:SS, HH:MM:SS or D-HH:MM:SS");
            return -EINVAL;
        }
        s->has_time = true;
        return 0;
    case TIDE_CLI_OPT_WAIT:
        s->wait = true;
        return 0;
    case TIDE_CLI_OPT_FILE:
        free(s->file);
        s->file = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_POOL:
        if (!*arg) {
            tide_errprintf(err, "bad --pool: empty");
            return -EINVAL;
        }
        free(s->pool);
        s->pool = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_MEMORY_PER_RANK:
        rc = tide_cli_parse_size(arg, &s->memory_per_rank);
        if (rc < 0 || s->memory_per_rank == 0) {
            tide_errprintf(err, "bad --memory-per-rank '%.40s': %s", arg,
                           rc == -ERANGE ? "larger than any GPU"
                                         : "expected a size such as 80GiB, 80G, 40GB, 512MiB or bytes");
            return -EINVAL;
        }
        s->has_memory = true;
        return 0;
    case TIDE_CLI_OPT_TOPOLOGY:
        if (tide_cli_topology_parse(arg, &s->topology) < 0) {
            tide_errprintf(err, "bad --topology '%.40s' (one of node, rack, switch, any)", arg);
            return -EINVAL;
        }
        s->has_topology = true;
        return 0;
    case TIDE_CLI_OPT_DEVICE:
        if (!*arg) {
            tide_errprintf(err, "bad --device: empty");
            return -EINVAL;
        }
        free(s->device);
        s->device = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_CKPT_MFU_THRESHOLD:
        rc = tide_cli_parse_fraction(arg, &s->ckpt_mfu_threshold);
        if (rc < 0 || s->ckpt_mfu_threshold <= 0) {
            tide_errprintf(err, "bad --ckpt-mfu-threshold '%.40s': expected more than 0 and at most 1, or a "
                                "percentage such as 30%%",
                           arg);
            return -EINVAL;
        }
        return 0;
    case TIDE_CLI_OPT_CKPT_DEADLINE:
        rc = tide_cli_duration_parse(arg, &s->ckpt_deadline);
        if (rc < 0 || s->ckpt_deadline <= 0) {
            tide_errprintf(err, "bad --ckpt-deadline '%.40s': %s", arg,
                           rc == -ERANGE ? "longer than 100 years" : "expected a duration such as 10m, 1h or 90s");
            return -EINVAL;
        }
        return 0;
    case TIDE_CLI_OPT_CKPT_INTERVAL: {
        int64_t sec = 0;
        if (strcasecmp(arg, "off") == 0) {
            s->ckpt_interval = -1;
            return 0;
        }
        rc = tide_cli_duration_parse(arg, &sec);
        if (rc < 0 || sec < 10) {
            tide_errprintf(err, "bad --ckpt-interval '%.40s': expected a duration of at least 10s such as 10m, "
                                "or off",
                           arg);
            return -EINVAL;
        }
        s->ckpt_interval = sec;
        return 0;
    }
    case TIDE_CLI_OPT_ADAPTIVE_TARGET:
        s->adaptive_target = true;
        return 0;
    case TIDE_CLI_OPT_NO_STEALING:
        s->no_stealing = true;
        return 0;
    case TIDE_CLI_OPT_BURST: {
        char *end = NULL;
        long v;
        if (!arg) {
            s->burst_percent = 20; /* --burst alone: the article's +20 % */
            return 0;
        }
        errno = 0;
        v = strtol(arg, &end, 10);
        if (end && *end == '%')
            end++;
        if (errno || end == arg || !end || *end || v < 1 || v > 100) {
            tide_errprintf(err, "bad --burst '%.40s': expected a percentage from 1 to 100, such as 20 or 20%%", arg);
            return -EINVAL;
        }
        s->burst_percent = (int32_t)v;
        return 0;
    }
    case TIDE_CLI_OPT_RESTART:
        if (strcasecmp(arg, "never") == 0)
            s->restart_policy = TIDE__V1__RESTART_POLICY__RESTART_POLICY_NEVER;
        else if (strcasecmp(arg, "on-loss") == 0)
            s->restart_policy = TIDE__V1__RESTART_POLICY__RESTART_POLICY_ON_LOSS;
        else if (strcasecmp(arg, "on-failure") == 0)
            s->restart_policy = TIDE__V1__RESTART_POLICY__RESTART_POLICY_ON_FAILURE;
        else {
            tide_errprintf(err, "bad --restart '%.40s' (one of on-loss, on-failure, never)", arg);
            return -EINVAL;
        }
        return 0;
    case TIDE_CLI_OPT_MAX_RESTARTS: {
        int64_t v;
        if (tide_cli_parse_int(arg, 1, 1000, &v) < 0) {
            tide_errprintf(err, "bad --max-restarts '%.40s': expected a number from 1 to 1000 (--restart never "
                                "for none)",
                           arg);
            return -EINVAL;
        }
        s->max_restarts = (int32_t)v;
        return 0;
    }
    case TIDE_CLI_OPT_RESTART_BACKOFF: {
        int64_t sec = 0;
        rc = tide_cli_duration_parse(arg, &sec);
        if (rc < 0 || sec <= 0 || sec > 3600) {
            tide_errprintf(err, "bad --restart-backoff '%.40s': expected a duration from 1s to 1h, such as 5s", arg);
            return -EINVAL;
        }
        s->restart_backoff_ms = sec * 1000;
        return 0;
    }
    }
    tide_errprintf(err, "internal: unknown submit option %d", id);
    return -EINVAL;
}

int tide_cli_topology_parse(const char *s, int *out)
{
    static const struct {
        const char *name;
        int value;
    } topos[] = {{"any", TIDE__V1__TOPOLOGY__TOPOLOGY_ANY},
                 {"node", TIDE__V1__TOPOLOGY__TOPOLOGY_NODE},
                 {"rack", TIDE__V1__TOPOLOGY__TOPOLOGY_RACK},
                 {"switch", TIDE__V1__TOPOLOGY__TOPOLOGY_SWITCH}};

    for (size_t i = 0; i < sizeof(topos) / sizeof(topos[0]); i++) {
        if (strcasecmp(s, topos[i].name) == 0) {
            *out = topos[i].value;
            return 0;
        }
    }
    return -EINVAL;
}

void tide_cli_submit_clear(tide_cli_submit_t *s)
{
    free(s->name);
    free(s->pool);
    free(s->device);
    for (size_t i = 0; i < s->n_env; i++)
        free(s->env[i]);
    free(s->env);
    free(s->workdir);
    free(s->file);
    memset(s, 0, sizeof(*s));
}

static Tide__V1__JobSpec *copy_spec(const Tide__V1__JobSpec *base)
{
    Tide__V1__JobSpec *s;
    size_t n;
    uint8_t *buf;

    if (!base) {
        s = tide_xmalloc(sizeof(*s));
        tide__v1__job_spec__init(s);
        return s;
    }
    n = tide__v1__job_spec__get_packed_size(base);
    buf = tide_xmalloc(n ? n : 1);
    tide__v1__job_spec__pack(base, buf);
    s = tide__v1__job_spec__unpack(NULL, n, buf);
    free(buf);
    if (!s)
        abort(); /* our own bytes; only out-of-memory can fail here */
    return s;
}

static void set_string(char **field, const char *value)
{
    if (*field && *field != protobuf_c_empty_string)
        free(*field);
    *field = tide_xstrdup(value);
}

/* Sets K=V in the spec's env map, replacing an existing K. */
static void set_env(Tide__V1__JobSpec *s, const char *kv)
{
    const char *eq = strchr(kv, '=');
    size_t klen = (size_t)(eq - kv);
    Tide__V1__JobSpec__EnvEntry *e;

    for (size_t i = 0; i < s->n_env; i++) {
        if (strlen(s->env[i]->key) == klen && strncmp(s->env[i]->key, kv, klen) == 0) {
            set_string(&s->env[i]->value, eq + 1);
            return;
        }
    }
    e = tide_xmalloc(sizeof(*e));
    tide__v1__job_spec__env_entry__init(e);
    e->key = tide_xstrndup(kv, klen);
    e->value = tide_xstrdup(eq + 1);
    s->env = tide_xrealloc(s->env, (s->n_env + 1) * sizeof(*s->env));
    s->env[s->n_env++] = e;
}

int tide_cli_submit_build(const tide_cli_submit_t *o, const Tide__V1__JobSpec *base, const char *cwd,
                          Tide__V1__JobSpec **out, tide_error_t *err)
{
    Tide__V1__JobSpec *s;

    if (o->has_workers && (o->has_min || o->has_max)) {
        tide_errprintf(err, "use either --workers N or --min N --max M, not both");
        return -EINVAL;
    }
    if (o->has_min && o->has_max && o->min > o->max) {
        tide_errprintf(err, "--min %d is more than --max %d", o->min, o->max);
        return -EINVAL;
    }
    if (o->n_command == 0 && (!base || base->n_command == 0)) {
        tide_errprintf(err, "no command given (put it after --, as in: tidectl submit -- python3 train.py)");
        return -EINVAL;
    }
    s = copy_spec(base);
    if (o->n_command > 0) {
        for (size_t i = 0; i < s->n_command; i++)
            free(s->command[i]);
        free(s->command);
        s->command = tide_xcalloc(o->n_command, sizeof(char *));
        for (size_t i = 0; i < o->n_command; i++)
            s->command[i] = tide_xstrdup(o->command[i]);
        s->n_command = o->n_command;
    }
    if (o->has_workers) {
        s->min_workers = s->max_workers = o->workers;
    } else {
        if (o->has_min) {
            s->min_workers = o->min;
            /* --min alone: a fixed size unless the file said otherwise. */
            if (!o->has_max && s->max_workers < o->min)
                s->max_workers = o->min;
        }
        if (o->has_max) {
            s->max_workers = o->max;
            if (!o->has_min && (s->min_workers < 1 || s->min_workers > o->max))
                s->min_workers = s->min_workers < 1 ? 1 : o->max;
        }
    }
    if (s->min_workers < 1)
        s->min_workers = 1;
    if (s->max_workers != 0 && s->max_workers < s->min_workers) {
        tide_errprintf(err, "min workers %d is more than max workers %d", s->min_workers, s->max_workers);
        protobuf_c_message_free_unpacked(&s->base, NULL);
        return -EINVAL;
    }
    if (o->priority)
        s->priority = o->priority;
    if (o->launcher)
        s->launcher = o->launcher;
    for (size_t i = 0; i < o->n_env; i++)
        set_env(s, o->env[i]);
    if (o->workdir)
        set_string(&s->workdir, o->workdir);
    else if (!*s->workdir && cwd)
        set_string(&s->workdir, cwd);
    if (s->workdir[0] && s->workdir[0] != '/' && cwd) {
        /* a relative --workdir (or spec file workdir) is relative to where tidectl runs, as sbatch -D */
        char *abs = tide_xasprintf("%s/%s", cwd, s->workdir);
        set_string(&s->workdir, abs);
        free(abs);
    }
    if (o->has_time)
        s->time_limit_seconds = o->time_limit;
    if (o->pool)
        set_string(&s->pool, o->pool);
    if (o->has_memory)
        s->memory_per_rank_bytes = o->memory_per_rank;
    if (o->has_topology)
        s->topology = (Tide__V1__Topology)o->topology;
    if (o->device)
        set_string(&s->device, o->device);
    if (o->ckpt_mfu_threshold > 0)
        s->checkpoint_mfu_threshold = o->ckpt_mfu_threshold;
    if (o->ckpt_deadline > 0)
        s->checkpoint_deadline_seconds = o->ckpt_deadline;
    if (o->ckpt_interval != 0)
        s->checkpoint_interval_seconds = o->ckpt_interval;
    if (o->adaptive_target)
        s->adaptive_target = true;
    if (o->no_stealing)
        s->no_stealing = true;
    if (o->burst_percent > 0)
        s->burst_percent = o->burst_percent;
    if (o->restart_policy)
        s->restart_policy = (Tide__V1__RestartPolicy)o->restart_policy;
    if (o->max_restarts > 0)
        s->max_restarts = o->max_restarts;
    if (o->restart_backoff_ms > 0)
        s->restart_backoff_ms = o->restart_backoff_ms;
    if (o->name) {
        set_string(&s->name, o->name);
    } else if (!*s->name) {
        const char *slash = strrchr(s->command[0], '/');
        set_string(&s->name, slash && slash[1] ? slash + 1 : s->command[0]);
    }
    *out = s;
    return 0;
}

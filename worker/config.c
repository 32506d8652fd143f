/* tide-worker flag parsing (see config.h). Invariant: on success every field of the config is set
 * (a default or a checked value), so the rest of the worker never looks at argv or the environment
 * again. */
#include "config.h"

#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "addr_list.h"
#include "slurm.h"
#include "token.h"
#include "xmalloc.h"

#define SCHEDULER_DEFAULT     "127.0.0.1:7070"
#define GPU_DEFAULT           "sim:h100"
#define STOP_GRACE_DEFAULT_MS 10000
#define DATA_DIR_BASE         "/var/lib/tide/worker"
#define KEEP_HOT_DEFAULT      2
#define KEEP_WARM_DEFAULT     4
#define KEEP_MAX              100000
#define HOT_TTL_DEFAULT_MS    (24LL * 3600 * 1000)
#define MIRROR_MIN_FREE_DEFAULT 25 /* % of the hot tier's filesystem that peers' mirror copies leave free */
#define HOT_TTL_MAX_S         (3650LL * 24 * 3600)

static const char usage_text[] =
    "usage: tide-worker [--scheduler HOST:PORT] [--id ID] [--node NAME] [--gpu-index N]\n"
    "                   [--gpu sim:MODEL] [--labels k=v,...] [--advertise HOST]\n"
    "                   [--data-dir DIR] [--token-file FILE] [--log-level debug|info|warn|error]\n"
    "                   [--stop-grace-ms MS] [--listen HOST:PORT] [--perturb FILE]\n"
    "                   [--tls-ca FILE [--tls-cert FILE --tls-key FILE]] [--insecure]\n"
    "                   [--peak-flops FLOPS] [--net-dev IF,...] [--net-capacity BYTES_PER_S]\n"
    "                   [--storage-dev DISK,...] [--storage-capacity BYTES_PER_S] [--probe]\n"
    "                   [--ckpt-durable DIR] [--ckpt-hot DIR] [--ckpt-warm DIR]\n"
    "                   [--ckpt-keep-hot N] [--ckpt-keep-warm N] [--ckpt-hot-ttl DURATION]\n"
    "                   [--ckpt-mirror-min-free PCT] [--allow-root-jobs]\n"
    "\n"
    "The tide agent for one GPU: registers with the scheduler and runs the ranks it is given.\n"
    "\n"
    "  --scheduler HOST:PORT[,HOST:PORT...]  scheduler to connect to; several: the replicas of an\n"
    "                         HA scheduler, the worker follows the leader (default: $TIDE_SCHEDULER\n"
    "                         or " SCHEDULER_DEFAULT ")\n"
    "  --id ID                stable worker id (default: NODE/gpuINDEX)\n"
    "  --node NAME            node name (default: the hostname)\n"
    "  --gpu-index N          GPU index on the node (default: 0)\n"
    "  --gpu DEVICE           nvml (an NVIDIA GPU), cpu (a CPU core for CPU trainers), auto\n"
    "                         (nvml if it loads, else sim:h100) or sim:MODEL with MODEL one of\n"
    "                         h100, a100, l4, b200 (default: " GPU_DEFAULT ")\n"
    "  --labels k=v,...       labels for placement (rack, switch, pool, ...)\n"
    "  --advertise HOST       address peers use to reach ranks here, e.g. MASTER_ADDR\n"
    "                         (default: the hostname)\n"
    "  --data-dir DIR         logs, rank records, epoch (default: " DATA_DIR_BASE
    "/NODE-gpuINDEX)\n"
    "  --token-file FILE      bearer token for the scheduler (else $TIDE_TOKEN, else the file "
    "named\n"
    "                         by $TIDE_TOKEN_FILE)\n"
    "  --log-level LEVEL      debug, info, warn or error (default: info)\n"
    "  --stop-grace-ms MS     SIGTERM-to-SIGKILL grace when a stop names none (default: 10000)\n"
    "  --listen HOST:PORT     where to serve MPI daemon starts (WorkerLauncher; default:\n"
    "                         the advertised address if numeric, else 0.0.0.0, port 0 = any)\n"
    "  --peak-flops FLOPS     peak FLOP/s for MFU instead of the device's (e.g. 312e12)\n"
    "  --net-dev IF,...       network interfaces to measure (default: every one up but lo)\n"
    "  --net-capacity B/S     their capacity in bytes/s (default: their link speeds)\n"
    "  --storage-dev DISK,... disks to measure (default: every whole disk)\n"
    "  --storage-capacity B/S storage bytes/s that is 100% (default: the disks' busy time)\n"
    "  --perturb FILE         scripted faults for tests: 'SECONDS ACTION [ARG]' lines (heat,\n"
    "                         ecc, ecc-uncorrected, xid, die, slow; docs/worker.md)\n"
    "  --ckpt-durable DIR     copy checkpoints to DIR/JOB/step-STEP/rank-R/ when asked\n"
    "                         (default: the scheduler's --ckpt-durable directory)\n"
    "  --ckpt-hot DIR         the hot checkpoint tier; ranks get TIDE_CKPT_DIR=DIR/JOB\n"
    "                         (default /dev/shm/tide-UID/ID, else DATA_DIR/ckpt-hot)\n"
    "  --ckpt-warm DIR        the warm tier, a copy of each hot checkpoint\n"
    "                         (default DATA_DIR/ckpt-warm)\n"
    "  --ckpt-keep-hot N      newest steps of a job kept in hot (default 2)\n"
    "  --ckpt-keep-warm N     newest steps of a job kept in warm (default 4)\n"
    "  --ckpt-hot-ttl DURATION\n"
    "                         at start and hourly, remove hot (and mirrored) checkpoints of\n"
    "                         jobs with no rank here whose newest file is older: a backstop for\n"
    "                         an ended job's clean-up this worker missed (N[s|m|h|d]; default\n"
    "                         24h; 0: never)\n"
    "  --ckpt-mirror-min-free PCT\n"
    "                         refuse a peer's mirror copy that would leave less than PCT % of\n"
    "                         the hot tier's filesystem free (default 25; 0: no limit); the\n"
    "                         peer then relies on its other tiers\n"
    "  --allow-root-jobs      a worker running as root may run ranks as root (LaunchRank.run_as\n"
    "                         empty or a uid-0 account); refused by default\n"
    "  --probe                read the device and the node once, print it and exit\n"
    "  --tls-ca FILE          talk TLS to the scheduler and to peers, verifying their certificates\n"
    "                         against this CA (else $TIDE_TLS_CA; docs/security.md)\n"
    "  --tls-cert FILE        serve WorkerLauncher/WorkerCheckpoints over TLS with this certificate\n"
    "  --tls-key FILE         (and its key), also presented as the client certificate (else\n"
    "                         $TIDE_TLS_CERT, $TIDE_TLS_KEY)\n"
    "  --insecure             allow plaintext to a non-loopback scheduler or on a non-loopback\n"
    "                         --listen (without TLS such a worker refuses to start)\n"
    "  --help                 this text\n";

const char *tide_worker_usage(void)
{
    return usage_text;
}

static void set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = tide_xstrdup(v);
}

static int parse_long(const char *flag, const char *v, long min, long max, long *out,
                      tide_error_t *err)
{
    char *end;
    long n;

    errno = 0;
    n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < min || n > max) {
        tide_errprintf(err, "%s: '%s' is not a number in %ld..%ld", flag, v, min, max);
        return -EINVAL;
    }
    *out = n;
    return 0;
}

/* "N", "Ns", "Nm", "Nh" or "Nd" (N seconds, minutes, hours, days; up to ten years) into *ms. */
static int parse_duration(const char *flag, const char *v, int64_t *ms, tide_error_t *err)
{
    char *end;
    long long n;
    int64_t unit = 1;

    errno = 0;
    n = strtoll(v, &end, 10);
    if (end != v && *end && !end[1]) {
        unit = *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600 : *end == 'd' ? 86400 : 0;
        end += unit != 0;
    }
    if (errno || end == v || *end || unit == 0 || n < 0 || n > HOT_TTL_MAX_S / unit) {
        tide_errprintf(err, "%s: '%s' is not a duration (N, Ns, Nm, Nh or Nd; 0: never)", flag, v);
        return -EINVAL;
    }
    *ms = (int64_t)n * unit * 1000;
    return 0;
}

static int check_hostport(const char *v, tide_error_t *err)
{
    tide_addr_list_t l;
    tide_error_t e;

    if (tide_addr_list_parse(v, NULL, &l, &e) < 0) {
        tide_errprintf(err, "--scheduler: %s", e.text);
        return -EINVAL;
    }
    tide_addr_list_free(&l);
    return 0;
}

static void labels_clear(tide_worker_config_t *cfg)
{
    for (size_t i = 0; i < cfg->n_labels; i++) {
        free((char *)cfg->labels[i].key);
        free((char *)cfg->labels[i].value);
    }
    free(cfg->labels);
    cfg->labels = NULL;
    cfg->n_labels = 0;
}

static int parse_labels(tide_worker_config_t *cfg, const char *v, tide_error_t *err)
{
    char *copy = tide_xstrdup(v), *save = NULL, *tok;
    int rc = 0;

    labels_clear(cfg);
    for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) {
            tide_errprintf(err, "--labels: '%s' is not key=value", tok);
            rc = -EINVAL;
            goto done;
        }
        *eq = '\0';
        for (size_t i = 0; i < cfg->n_labels; i++) {
            if (strcmp(cfg->labels[i].key, tok) == 0) {
                tide_errprintf(err, "--labels: key '%s' given twice", tok);
                rc = -EINVAL;
                goto done;
            }
        }
        cfg->labels = tide_xrealloc(cfg->labels, (cfg->n_labels + 1) * sizeof(*cfg->labels));
        cfg->labels[cfg->n_labels].key = tide_xstrdup(tok);
        cfg->labels[cfg->n_labels].value = tide_xstrdup(eq + 1);
        cfg->n_labels++;
    }
done:
    free(copy);
    return rc;
}

/* Under srun (docs/slurm.md): the task's GPU unless --gpu-index says otherwise, the Slurm node name
 * unless --node does, and the slurm.* labels unless --labels sets those keys. */
static int apply_slurm(tide_worker_config_t *cfg, bool gpu_index_given, tide_error_t *err)
{
    tide_worker_slurm_t s;
    const char *keys[TIDE_SLURM_LABELS], *values[TIDE_SLURM_LABELS];
    char vbuf[TIDE_SLURM_LABELS * 24];
    int n, rc = tide_worker_slurm_detect(NULL, &s, err);

    if (rc < 0 || !s.present)
        return rc;
    if (!gpu_index_given && s.gpu_index >= 0)
        cfg->gpu_index = s.gpu_index;
    if (!cfg->node && s.node[0])
        cfg->node = tide_xstrdup(s.node);
    n = tide_worker_slurm_labels(&s, keys, values, vbuf);
    for (int i = 0; i < n; i++) {
        bool set = false;
        for (size_t k = 0; k < cfg->n_labels && !set; k++)
            set = strcmp(cfg->labels[k].key, keys[i]) == 0;
        if (set)
            continue;
        cfg->labels = tide_xrealloc(cfg->labels, (cfg->n_labels + 1) * sizeof(*cfg->labels));
        cfg->labels[cfg->n_labels].key = tide_xstrdup(keys[i]);
        cfg->labels[cfg->n_labels].value = tide_xstrdup(values[i]);
        cfg->n_labels++;
    }
    cfg->slurm = true;
    return 0;
}

/* A non-negative number up to max ("25e9"); 0 only where zero_ok. */
static int parse_double(const char *flag, const char *v, bool zero_ok, double max, double *out,
                        tide_error_t *err)
{
    char *end;
    double d;

    errno = 0;
    d = strtod(v, &end);
    if (errno || end == v || *end || !(d >= 0) || (!zero_ok && d == 0) || d > max) {
        tide_errprintf(err, "%s: '%s' is not a number above 0 and at most %g", flag, v, max);
        return -EINVAL;
    }
    *out = d;
    return 0;
}

/* Flags that take a value. */
static const char *const value_flags[] = {
    "--scheduler", "--id",       "--node",       "--gpu-index", "--gpu",           "--labels",
    "--advertise", "--data-dir", "--token-file", "--log-level", "--stop-grace-ms", "--listen",
    "--perturb", "--peak-flops", "--net-dev", "--net-capacity", "--storage-dev",
    "--storage-capacity", "--ckpt-durable", "--ckpt-hot", "--ckpt-warm", "--ckpt-keep-hot",
    "--ckpt-keep-warm", "--ckpt-hot-ttl", "--ckpt-mirror-min-free", "--tls-cert", "--tls-key", "--tls-ca",
};

/* val made absolute against the current directory (ranks run elsewhere) into *dst. */
static int set_abs_dir(const char *flag, const char *val, char **dst, tide_error_t *err)
{
    char cwd[PATH_MAX];

    if (!*val) {
        tide_errprintf(err, "%s: empty", flag);
        return -EINVAL;
    }
    if (val[0] == '/') {
        set_str(dst, val);
        return 0;
    }
    if (!getcwd(cwd, sizeof(cwd))) {
        tide_errprintf(err, "%s: '%s' is relative and the current directory is unknown", flag,
                       val);
        return -EINVAL;
    }
    free(*dst);
    *dst = tide_xasprintf("%s/%s", cwd, val);
    return 0;
}

/* The worker id as one path component: anything but [A-Za-z0-9._-] becomes '-'. Caller frees. */
static char *safe_id(const char *id)
{
    char *s = tide_xstrdup(id);

    for (char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            *p = '-';
    if (s[0] == '.')
        s[0] = '-';
    return s;
}

/* Where a tier lives by default: under the data dir (made absolute). */
static char *data_subdir(const char *data_dir, const char *name)
{
    char cwd[PATH_MAX];

    if (data_dir[0] != '/' && getcwd(cwd, sizeof(cwd)))
        return tide_xasprintf("%s/%s/%s", cwd, data_dir, name);
    return tide_xasprintf("%s/%s", data_dir, name);
}

static bool shm_writable(void)
{
    struct stat st;

    return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0;
}

/* TLS: flags, else TIDE_TLS_CERT / TIDE_TLS_KEY / TIDE_TLS_CA; cert and key go together and need the CA
 * (peers verify each other with it). */
static int tls_settle(tide_worker_config_t *cfg, tide_error_t *err)
{
    static const char *const envs[] = {"TIDE_TLS_CERT", "TIDE_TLS_KEY", "TIDE_TLS_CA"};
    char **dst[] = {&cfg->tls_cert, &cfg->tls_key, &cfg->tls_ca};

    for (size_t i = 0; i < 3; i++) {
        const char *env = getenv(envs[i]);
        if (!*dst[i] && env && *env)
            *dst[i] = tide_xstrdup(env);
    }
    if (!!cfg->tls_cert != !!cfg->tls_key) {
        tide_errprintf(err, "%s needs %s", cfg->tls_cert ? "--tls-cert" : "--tls-key",
                       cfg->tls_cert ? "--tls-key FILE (the certificate's private key)" : "--tls-cert FILE");
        return -EINVAL;
    }
    if (cfg->tls_cert && !cfg->tls_ca) {
        tide_errprintf(err, "--tls-cert needs --tls-ca FILE (the CA the scheduler's and peers' certificates "
                            "are checked against)");
        return -EINVAL;
    }
    return 0;
}

int tide_worker_config_load_tls(tide_worker_config_t *cfg, tide_error_t *err)
{
    tide_tls_config_t tc = {.cert_file = cfg->tls_cert, .key_file = cfg->tls_key, .ca_file = cfg->tls_ca};
    int rc;

    /* Plaintext to a non-loopback scheduler, or on a non-loopback --listen, only with --insecure. */
    if ((rc = tide_tls_check_plaintext(cfg->scheduler, false, cfg->tls_ca != NULL, cfg->insecure, err)) < 0 ||
        (rc = tide_tls_check_plaintext(cfg->listen, true, cfg->tls_cert != NULL, cfg->insecure, err)) < 0)
        return rc;
    if (cfg->tls_ca && !cfg->tls_client && (rc = tide_tls_ctx_new_client(&tc, &cfg->tls_client, err)) < 0)
        return rc;
    if (cfg->tls_cert && !cfg->tls_server) {
        tc.client_cert = TIDE_TLS_CLIENT_CERT_OPTIONAL; /* peers present the same kind of certificate */
        if ((rc = tide_tls_ctx_new_server(&tc, &cfg->tls_server, err)) < 0)
            return rc;
    }
    return 0;
}

int tide_worker_config_parse(int argc, char **argv, tide_worker_config_t *cfg, tide_error_t *err)
{
    char host[HOST_NAME_MAX + 1];
    char *token_file = NULL;
    const char *env;
    bool gpu_index_given = false;
    long n = 0;
    int rc = 0;

    memset(cfg, 0, sizeof(*cfg));
    cfg->log_level = TIDE_LOG_INFO;
    cfg->stop_grace_ms = STOP_GRACE_DEFAULT_MS;
    cfg->gpu_index = 0;
    cfg->ckpt_keep_hot = KEEP_HOT_DEFAULT;
    cfg->ckpt_keep_warm = KEEP_WARM_DEFAULT;
    cfg->ckpt_hot_ttl_ms = HOT_TTL_DEFAULT_MS;
    cfg->ckpt_mirror_min_free = MIRROR_MIN_FREE_DEFAULT;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = NULL, *eq;
        char flag[64];
        bool known = false;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            rc = 1;
            goto done;
        }
        if (strcmp(arg, "--insecure") == 0) {
            cfg->insecure = true;
            continue;
        }
        if (strcmp(arg, "--probe") == 0) {
            cfg->probe = true;
            continue;
        }
        if (strcmp(arg, "--allow-root-jobs") == 0) {
            cfg->allow_root_jobs = true;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0) {
            tide_errprintf(err, "unexpected argument '%s'", arg);
            rc = -EINVAL;
            goto done;
        }
        eq = strchr(arg, '=');
        snprintf(flag, sizeof(flag), "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
        for (size_t k = 0; k < sizeof(value_flags) / sizeof(value_flags[0]); k++)
            known |= strcmp(flag, value_flags[k]) == 0;
        if (!known) {
            tide_errprintf(err, "unknown flag %s", flag);
            rc = -EINVAL;
            goto done;
        }
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            tide_errprintf(err, "%s needs a value", flag);
            rc = -EINVAL;
            goto done;
        }

        if (strcmp(flag, "--scheduler") == 0) {
            rc = check_hostport(val, err);
            set_str(&cfg->scheduler, val);
        } else if (strcmp(flag, "--id") == 0) {
            if (!*val) {
                tide_errprintf(err, "--id: empty");
                rc = -EINVAL;
            }
            set_str(&cfg->id, val);
        } else if (strcmp(flag, "--node") == 0) {
            if (!*val) {
                tide_errprintf(err, "--node: empty");
                rc = -EINVAL;
            }
            set_str(&cfg->node, val);
        } else if (strcmp(flag, "--gpu-index") == 0) {
            rc = parse_long(flag, val, 0, 1023, &n, err);
            cfg->gpu_index = (int32_t)n;
            gpu_index_given = true;
        } else if (strcmp(flag, "--gpu") == 0) {
            set_str(&cfg->gpu, val);
        } else if (strcmp(flag, "--labels") == 0) {
            rc = parse_labels(cfg, val, err);
        } else if (strcmp(flag, "--advertise") == 0) {
            if (!*val) {
                tide_errprintf(err, "--advertise: empty");
                rc = -EINVAL;
            }
            set_str(&cfg->advertise, val);
        } else if (strcmp(flag, "--data-dir") == 0) {
            if (!*val) {
                tide_errprintf(err, "--data-dir: empty");
                rc = -EINVAL;
            }
            set_str(&cfg->data_dir, val);
        } else if (strcmp(flag, "--token-file") == 0) {
            set_str(&token_file, val);
        } else if (strcmp(flag, "--log-level") == 0) {
            if (tide_log_level_parse(val, &cfg->log_level) < 0) {
                tide_errprintf(err, "--log-level: '%s' is not debug, info, warn or error", val);
                rc = -EINVAL;
            }
        } else if (strcmp(flag, "--peak-flops") == 0) {
            rc = parse_double(flag, val, false, 1e18, &cfg->peak_flops, err);
        } else if (strcmp(flag, "--net-capacity") == 0) {
            rc = parse_double(flag, val, false, 1e15, &cfg->net_capacity, err);
        } else if (strcmp(flag, "--storage-capacity") == 0) {
            rc = parse_double(flag, val, false, 1e15, &cfg->storage_capacity, err);
        } else if (strcmp(flag, "--net-dev") == 0) {
            set_str(&cfg->net_devs, val);
        } else if (strcmp(flag, "--storage-dev") == 0) {
            set_str(&cfg->storage_devs, val);
        } else if (strcmp(flag, "--ckpt-durable") == 0) {
            if (!*val) {
                tide_errprintf(err, "--ckpt-durable: empty");
                rc = -EINVAL;
            } else if (val[0] == '/') {
                set_str(&cfg->ckpt_durable, val);
            } else {
                /* Relative to where the worker was started, fixed now (ranks run elsewhere). */
                char cwd[PATH_MAX];
                if (!getcwd(cwd, sizeof(cwd))) {
                    tide_errprintf(err,
                                   "--ckpt-durable: '%s' is relative and the current "
                                   "directory is unknown",
                                   val);
                    rc = -EINVAL;
                } else {
                    free(cfg->ckpt_durable);
                    cfg->ckpt_durable = tide_xasprintf("%s/%s", cwd, val);
                }
            }
        } else if (strcmp(flag, "--ckpt-hot") == 0) {
            rc = set_abs_dir(flag, val, &cfg->ckpt_hot, err);
        } else if (strcmp(flag, "--ckpt-warm") == 0) {
            rc = set_abs_dir(flag, val, &cfg->ckpt_warm, err);
        } else if (strcmp(flag, "--ckpt-keep-hot") == 0) {
            rc = parse_long(flag, val, 1, KEEP_MAX, &n, err);
            cfg->ckpt_keep_hot = (int)n;
        } else if (strcmp(flag, "--ckpt-keep-warm") == 0) {
            rc = parse_long(flag, val, 1, KEEP_MAX, &n, err);
            cfg->ckpt_keep_warm = (int)n;
        } else if (strcmp(flag, "--ckpt-hot-ttl") == 0) {
            rc = parse_duration(flag, val, &cfg->ckpt_hot_ttl_ms, err);
        } else if (strcmp(flag, "--ckpt-mirror-min-free") == 0) {
            rc = parse_long(flag, val, 0, 90, &n, err);
            cfg->ckpt_mirror_min_free = (int)n;
        } else if (strcmp(flag, "--tls-cert") == 0) {
            set_str(&cfg->tls_cert, val);
        } else if (strcmp(flag, "--tls-key") == 0) {
            set_str(&cfg->tls_key, val);
        } else if (strcmp(flag, "--tls-ca") == 0) {
            set_str(&cfg->tls_ca, val);
        } else if (strcmp(flag, "--perturb") == 0) {
            set_str(&cfg->perturb, val);
        } else if (strcmp(flag, "--listen") == 0) {
            if (!strchr(val, ':')) {
                tide_errprintf(err, "--listen: '%s' is not HOST:PORT", val);
                rc = -EINVAL;
            }
            set_str(&cfg->listen, val);
        } else if (strcmp(flag, "--stop-grace-ms") == 0) {
            rc = parse_long(flag, val, 0, 24L * 3600 * 1000, &n, err);
            cfg->stop_grace_ms = (uint32_t)n;
        }
        if (rc < 0)
            goto done;
    }

    if (!cfg->scheduler) {
        env = getenv("TIDE_SCHEDULER");
        if (env && *env) {
            if (check_hostport(env, err) < 0) {
                tide_errprintf(err, "TIDE_SCHEDULER: '%s' is not HOST:PORT", env);
                rc = -EINVAL;
                goto done;
            }
            cfg->scheduler = tide_xstrdup(env);
        } else {
            cfg->scheduler = tide_xstrdup(SCHEDULER_DEFAULT);
        }
    }
    rc = apply_slurm(cfg, gpu_index_given, err);
    if (rc < 0)
        goto done;
    if (gethostname(host, sizeof(host)) < 0 || !host[0])
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    if (!cfg->node)
        cfg->node = tide_xstrdup(host);
    if (!cfg->id)
        cfg->id = tide_xasprintf("%s/gpu%d", cfg->node, cfg->gpu_index);
    if (!cfg->gpu)
        cfg->gpu = tide_xstrdup(GPU_DEFAULT);
    if (!cfg->advertise)
        cfg->advertise = tide_xstrdup(host);
    if (!cfg->data_dir)
        cfg->data_dir = tide_xasprintf("%s/%s-gpu%d", DATA_DIR_BASE, cfg->node, cfg->gpu_index);
    if (!cfg->ckpt_hot) {
        char *sid = safe_id(cfg->id);
        cfg->ckpt_hot = shm_writable()
                            ? tide_xasprintf("/dev/shm/tide-%u/%s", (unsigned)getuid(), sid)
                            : data_subdir(cfg->data_dir, "ckpt-hot");
        free(sid);
    }
    if (!cfg->ckpt_warm)
        cfg->ckpt_warm = data_subdir(cfg->data_dir, "ckpt-warm");
    if (!cfg->listen) {
        struct in_addr a4;
        cfg->listen = tide_xasprintf("%s:0", inet_pton(AF_INET, cfg->advertise, &a4) == 1
                                                 ? cfg->advertise
                                                 : "0.0.0.0");
    }

    /* Token: --token-file, else TIDE_TOKEN (the value), else TIDE_TOKEN_FILE (a path), else the token of
     * a scheduler with the default data dir on this machine. */
    {
        char *dir = tide_default_data_dir();
        char *def = tide_xasprintf("%s/token", dir);
        rc = tide_token_resolve(token_file, getenv("TIDE_TOKEN"), getenv("TIDE_TOKEN_FILE"), def,
                                &cfg->token, err);
        if (rc < 0)
            rc = -EINVAL;
        free(def);
        free(dir);
    }
    if (rc == 0)
        rc = tls_settle(cfg, err);
done:
    free(token_file);
    return rc;
}

void tide_worker_config_free(tide_worker_config_t *cfg)
{
    if (!cfg)
        return;
    labels_clear(cfg);
    free(cfg->scheduler);
    free(cfg->id);
    free(cfg->node);
    free(cfg->gpu);
    free(cfg->advertise);
    free(cfg->listen);
    free(cfg->perturb);
    free(cfg->ckpt_durable);
    free(cfg->ckpt_hot);
    free(cfg->ckpt_warm);
    free(cfg->net_devs);
    free(cfg->storage_devs);
    free(cfg->data_dir);
    free(cfg->token);
    free(cfg->tls_cert);
    free(cfg->tls_key);
    free(cfg->tls_ca);
    tide_tls_ctx_free(cfg->tls_client);
    tide_tls_ctx_free(cfg->tls_server);
    memset(cfg, 0, sizeof(*cfg));
}

/* tide-scheduler's flags (see flags.h). Every bad value is refused before anything starts, with one line
 * that names the flag; a refused command line changes nothing (main exits 2). Pool names are checked by
 * the core's own rules (tide_core_pool_add on a scratch core), so the flag accepts exactly what the core
 * does. */
#include "flags.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_DURATION_MS (10LL * 365 * 24 * 3600 * 1000)

enum {
    OPT_LISTEN = 'l',
    OPT_DATA_DIR = 'd',
    OPT_STORE = 's',
    OPT_TOKEN_FILE = 't',
    OPT_LOG_LEVEL = 'L',
    OPT_HEARTBEAT = 'H',
    OPT_RECONNECT = 'R',
    OPT_STOP_GRACE = 'G',
    OPT_RETENTION = 'T',
    OPT_HELP = 'h',
    OPT_VERSION = 'V',
    OPT_POOL = 256,
    OPT_AGING,
    OPT_NO_PREEMPTION,
    OPT_PREEMPT_GRACE,
    OPT_CKPT_DURABLE,
    OPT_CKPT_MFU_THRESHOLD,
    OPT_CKPT_DEADLINE,
    OPT_CKPT_INTERVAL,
    OPT_RESERVE,
    OPT_FAILURE_RATE,
    OPT_LEAD_TIME,
    OPT_MAX_RESTARTS,
    OPT_RESTART_BACKOFF,
    OPT_RESTART_WINDOW,
    OPT_FAILURE_STOP_GRACE,
    OPT_QUARANTINE_AFTER,
    OPT_QUARANTINE_WINDOW,
    OPT_HANG_TIMEOUT,
    OPT_NO_PREDICTION,
    OPT_RISK_THRESHOLD,
    OPT_RISK_CONFIRM,
    OPT_NO_STEALING,
    OPT_STRAGGLER_RATIO,
    OPT_STRAGGLER_WINDOW,
    OPT_NO_AUTO_GROW,
    OPT_RESIZE_DWELL,
    OPT_RESIZE_GRACE,
    OPT_REPLACE_STRAGGLERS,
    OPT_BURST_ENTER,
    OPT_BURST_EXIT,
    OPT_BURST_DWELL,
    OPT_ADVERTISE,
    OPT_LEASE_TTL,
    OPT_STORE_WAIT,
    OPT_USERS,
    OPT_AUDIT_LOG,
    OPT_METRICS_GPU_LIMIT,
};

/* TLS (docs/security.md): the same names on every tide binary. */
enum {
    OPT_TLS_CERT = 512,
    OPT_TLS_KEY,
    OPT_TLS_CA,
    OPT_TLS_REQUIRE_CLIENT_CERT,
    OPT_INSECURE,
};

static const struct option opts[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"data-dir", required_argument, NULL, OPT_DATA_DIR},
    {"store", required_argument, NULL, OPT_STORE},
    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"heartbeat-ms", required_argument, NULL, OPT_HEARTBEAT},
    {"reconnect-deadline-s", required_argument, NULL, OPT_RECONNECT},
    {"stop-grace-s", required_argument, NULL, OPT_STOP_GRACE},
    {"retention-s", required_argument, NULL, OPT_RETENTION},
    {"pool", required_argument, NULL, OPT_POOL},
    {"aging", required_argument, NULL, OPT_AGING},
    {"no-preemption", no_argument, NULL, OPT_NO_PREEMPTION},
    {"preempt-grace", required_argument, NULL, OPT_PREEMPT_GRACE},
    {"ckpt-durable", required_argument, NULL, OPT_CKPT_DURABLE},
    {"ckpt-mfu-threshold", required_argument, NULL, OPT_CKPT_MFU_THRESHOLD},
    {"ckpt-deadline", required_argument, NULL, OPT_CKPT_DEADLINE},
    {"ckpt-interval", required_argument, NULL, OPT_CKPT_INTERVAL},
    {"reserve", required_argument, NULL, OPT_RESERVE},
    {"failure-rate", required_argument, NULL, OPT_FAILURE_RATE},
    {"replacement-lead-time", required_argument, NULL, OPT_LEAD_TIME},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"restart-backoff", required_argument, NULL, OPT_RESTART_BACKOFF},
    {"restart-window", required_argument, NULL, OPT_RESTART_WINDOW},
    {"failure-stop-grace", required_argument, NULL, OPT_FAILURE_STOP_GRACE},
    {"quarantine-after", required_argument, NULL, OPT_QUARANTINE_AFTER},
    {"quarantine-window", required_argument, NULL, OPT_QUARANTINE_WINDOW},
    {"hang-timeout", required_argument, NULL, OPT_HANG_TIMEOUT},
    {"no-failure-prediction", no_argument, NULL, OPT_NO_PREDICTION},
    {"risk-threshold", required_argument, NULL, OPT_RISK_THRESHOLD},
    {"risk-confirm", required_argument, NULL, OPT_RISK_CONFIRM},
    {"no-stealing", no_argument, NULL, OPT_NO_STEALING},
    {"straggler-ratio", required_argument, NULL, OPT_STRAGGLER_RATIO},
    {"straggler-window", required_argument, NULL, OPT_STRAGGLER_WINDOW},
    {"no-auto-grow", no_argument, NULL, OPT_NO_AUTO_GROW},
    {"resize-dwell", required_argument, NULL, OPT_RESIZE_DWELL},
    {"resize-grace", required_argument, NULL, OPT_RESIZE_GRACE},
    {"replace-stragglers", no_argument, NULL, OPT_REPLACE_STRAGGLERS},
    {"burst-enter", required_argument, NULL, OPT_BURST_ENTER},
    {"burst-exit", required_argument, NULL, OPT_BURST_EXIT},
    {"burst-dwell", required_argument, NULL, OPT_BURST_DWELL},
    {"advertise", required_argument, NULL, OPT_ADVERTISE},
    {"lease-ttl", required_argument, NULL, OPT_LEASE_TTL},
    {"store-wait", required_argument, NULL, OPT_STORE_WAIT},
    {"users", required_argument, NULL, OPT_USERS},
    {"audit-log", required_argument, NULL, OPT_AUDIT_LOG},
    {"metrics-gpu-limit", required_argument, NULL, OPT_METRICS_GPU_LIMIT},
    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},
    {"tls-key", required_argument, NULL, OPT_TLS_KEY},
    {"tls-ca", required_argument, NULL, OPT_TLS_CA},
    {"tls-require-client-cert", no_argument, NULL, OPT_TLS_REQUIRE_CLIENT_CERT},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

void tide_sched_usage(FILE *f)
{
    fprintf(f,
            "usage: tide-scheduler [--listen HOST:PORT] [--data-dir DIR] [--store URL] [--token-file FILE]\n"
            "                      [--log-level debug|info|warn|error] [--heartbeat-ms MS]\n"
            "                      [--reconnect-deadline-s S] [--stop-grace-s S] [--retention-s S]\n"
            "                      [policy flags (docs/policies.md)]\n"
            "\n"
            "  --listen HOST:PORT     gRPC and HTTP (/healthz, /metrics) address (default 127.0.0.1:7070)\n"
            "  --data-dir DIR         state directory (default /var/lib/tide for root, else\n"
            "                         ~/.local/share/tide); holds state.db, token, scheduler.addr\n"
            "  --store URL            sqlite:PATH (default sqlite:DATA_DIR/state.db), mem: (tests) or\n"
            "                         etcd://HOST:PORT[,HOST:PORT...][/PREFIX]: several replicas against\n"
            "                         one etcd elect a leader, the others stand by (docs/operations.md)\n"
            "  --advertise HOST:PORT  with etcd: the address clients and workers reach this replica at\n"
            "                         when it leads (default: the --listen address)\n"
            "  --lease-ttl DURATION   with etcd: the leader's lease; a standby takes over within it once\n"
            "                         the leader is gone (default 3s, from 2s to 60s)\n"
            "  --store-wait DURATION  with etcd: keep trying an unreachable etcd at start this long\n"
            "                         (default 0: exit at once; e.g. 5m where etcd starts beside it)\n"
            "  --token-file FILE      bearer token clients must send (default DATA_DIR/token, created\n"
            "                         with mode 0600 when missing); it is the identity \"admin\"\n"
            "  --users FILE           the users file: identities, roles, token digests, limits\n"
            "                         (docs/security.md); re-read when it changes and on SIGHUP\n"
            "  --audit-log FILE       where every changing call and every refusal is appended as a JSON\n"
            "                         line (default DATA_DIR/audit.log; \"-\": none; reopened on SIGHUP)\n"
            "  --metrics-gpu-limit N  /metrics carries per-GPU series (~16 each) only while at most N\n"
            "                         workers are live (default 4096; 0: never): a 100,000-GPU fleet's\n"
            "                         would be ~100 MB per scrape\n"
            "  --heartbeat-ms MS      worker heartbeat interval (default 500; SUSPECT after 2 missed,\n"
            "                         DEAD after 3)\n"
            "  --reconnect-deadline-s S  after a restart, how long workers have to re-register before\n"
            "                         their jobs fail (default 30)\n"
            "  --stop-grace-s S       SIGTERM to SIGKILL grace when stopping ranks (default 10)\n"
            "  --retention-s S        how long finished jobs are kept (default 604800 = 7 days)\n"
            "  --tls-cert FILE        serve TLS (ALPN h2; HTTP/1.1 /metrics too) with this PEM certificate\n"
            "                         chain and --tls-key FILE its key (docs/security.md)\n"
            "  --tls-ca FILE          verify client certificates against this CA when clients present one\n"
            "  --tls-require-client-cert  refuse connections without a certificate signed by --tls-ca\n"
            "  --insecure             allow plaintext on a non-loopback --listen address (without TLS\n"
            "                         such a scheduler refuses to start)\n"
            "  --version              print the version\n"
            "\n"
            "Policy (docs/policies.md). DURATION: 0, 90 (seconds), 500ms, 90s, 15m, 2h, 1d, 1h30m.\n"
            "  --pool NAME[=CLASS]    name a pool that workers join with --label pool=NAME; with CLASS\n"
            "                         (low, normal, high, critical) only jobs of that class run there,\n"
            "                         without it the pool is shared (repeatable, at most 16)\n"
            "  --aging DURATION       a waiting job rises one class per DURATION, up to HIGH\n"
            "                         (default 30m; 0 disables aging)\n"
            "  --no-preemption        never stop lower-class jobs to make room\n"
            "  --preempt-grace DURATION  a preempted job's time to checkpoint before it is stopped\n"
            "                         (default 30s)\n"
            "  --ckpt-durable DIR     copy each complete checkpoint to DIR/JOB/step-STEP/, gated on MFU\n"
            "                         (default: no durable copies)\n"
            "  --ckpt-mfu-threshold F  hold a durable copy while the job's MFU is >= F (0..1 or a\n"
            "                         percentage such as 30%%; default 0.30); a job may set its own\n"
            "  --ckpt-deadline DURATION  ... but release it once the newest durable copy is older than\n"
            "                         this (default 30m); a job may set its own\n"
            "  --ckpt-interval DURATION|off  ask a job that checkpoints for a checkpoint when its newest\n"
            "                         is older than this (default 10m, at least 10s); a job may set its own\n"
            "  --reserve N|auto       GPUs kept free for failures and bursts, only LOW work may use them\n"
            "                         (default auto: p99 of the failures expected in the replacement lead\n"
            "                         time plus burst room, 0 below 16 GPUs)\n"
            "  --failure-rate R       GPU failures per 1,000 GPUs per month for the reserve (default 3)\n"
            "  --replacement-lead-time DURATION  how long a failed GPU stays out (default 4h)\n"
            "  --max-restarts N       a job whose rank is lost with its worker or hangs (or, with its\n"
            "                         restart policy on-failure, fails) starts again on other workers,\n"
            "                         resuming from its newest checkpoint, up to N times in a row; a job\n"
            "                         may set its own (default 3; 0: such a job fails)\n"
            "  --restart-backoff DURATION  the second restart in a row waits this long, each further one\n"
            "                         twice as long, at most 5m (default 1s; the first is at once)\n"
            "  --restart-window DURATION  a job that ran this long since its last failure starts the\n"
            "                         count again (default 10m)\n"
            "  --failure-stop-grace DURATION  a failed generation's other ranks get this long after SIGTERM\n"
            "                         before SIGKILL (default 1s; at most --stop-grace-s)\n"
            "  --quarantine-after N   cordon a worker where ranks were lost or hung N times within the\n"
            "                         window (default 3, at most 16; 0: never)\n"
            "  --quarantine-window DURATION  (default 1h)\n"
            "  --hang-timeout DURATION  a rank reporting steps through the SDK whose step has not moved\n"
            "                         for max(10 x its job's median step time, this) is hung: its\n"
            "                         generation is restarted (default 30s; 0: no hang detection)\n"
            "  --no-failure-prediction  never cordon a GPU for its telemetry's trends\n"
            "  --risk-threshold F     a GPU whose failure risk (0..1, docs/metrics.md) stays at or above\n"
            "                         this for --risk-confirm is predicted to fail: cordoned, its job\n"
            "                         moved off it after a checkpoint (default 0.7)\n"
            "  --risk-confirm DURATION  (default 10s; a new uncorrected ECC error or critical XID acts\n"
            "                         at once)\n"
            "  --no-stealing          ranks never steal each other's tasks (docs/work-stealing.md)\n"
            "  --straggler-ratio F    a rank this much slower per task than its job's median is slow\n"
            "                         (default 1.25)\n"
            "  --straggler-window DURATION  slow this long makes it a straggler (default 30s)\n"
            "\n"
            "Elastic scaling (docs/elastic.md).\n"
            "  --no-auto-grow         never grow a running job by itself when capacity frees (tidectl\n"
            "                         scale and shrinking for a higher class still resize it)\n"
            "  --resize-dwell DURATION  a generation runs this long before tide resizes it by itself\n"
            "                         (default 1m)\n"
            "  --resize-grace DURATION  a resizing job's time to checkpoint before its ranks stop\n"
            "                         (default 30s)\n"
            "  --replace-stragglers   swap a persistent straggler for a free healthy worker at a new\n"
            "                         generation (default: only report it)\n"
            "  --burst-enter DURATION  a job's high-load phase lasts this long before tide lends it burst\n"
            "                         workers (default 2s)\n"
            "  --burst-exit DURATION  a normal phase lasts this long before they go back (default 2s)\n"
            "  --burst-dwell DURATION  lent workers stay at least this long (default 10s)\n");
}

static int parse_num(const char *flag, const char *s, int64_t min, int64_t max, int64_t *out, tide_error_t *err)
{
    char *end = NULL;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || !end || *end || end == s || v < min || v > max) {
        tide_errprintf(err, "%s: \"%.40s\" is not a number from %lld to %lld", flag, s, (long long)min,
                       (long long)max);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

int tide_sched_parse_duration(const char *s, int64_t *ms)
{
    /* Largest first; "ms" before "m" so that "500ms" is not read as minutes. */
    static const struct {
        const char *unit;
        int64_t ms;
        int rank;
    } units[] = {{"d", 86400000, 0}, {"h", 3600000, 1}, {"ms", 1, 4}, {"m", 60000, 2}, {"s", 1000, 3}};
    int64_t total = 0;
    int last = -1;
    const char *p = s;

    if (!s || !*s)
        return -EINVAL;
    while (*p) {
        int64_t v = 0;
        const char *start = p;
        size_t u;

        while (*p >= '0' && *p <= '9') {
            if (v > MAX_DURATION_MS)
                return -ERANGE;
            v = v * 10 + (*p++ - '0');
        }
        if (p == start)
            return -EINVAL;
        if (!*p && start == s) { /* a bare number: seconds */
            if (v > MAX_DURATION_MS / 1000)
                return -ERANGE;
            *ms = v * 1000;
            return 0;
        }
        for (u = 0; u < sizeof(units) / sizeof(units[0]); u++)
            if (strncmp(p, units[u].unit, strlen(units[u].unit)) == 0)
                break;
        if (u == sizeof(units) / sizeof(units[0]) || units[u].rank <= last)
            return -EINVAL; /* no unit, an unknown one, or units out of order or repeated */
        last = units[u].rank;
        p += strlen(units[u].unit);
        if (v > MAX_DURATION_MS / units[u].ms)
            return -ERANGE;
        total += v * units[u].ms;
        if (total > MAX_DURATION_MS)
            return -ERANGE;
    }
    *ms = total;
    return 0;
}

static int duration_flag(const char *flag, const char *s, int64_t min_ms, int64_t max_ms, int64_t *out,
                         tide_error_t *err)
{
    int64_t v;
    int rc = tide_sched_parse_duration(s, &v);

    if (rc == 0 && v >= min_ms && v <= max_ms) {
        *out = v;
        return 0;
    }
    if (rc == -EINVAL)
        tide_errprintf(err, "%s: \"%.40s\" is not a duration (e.g. 90s, 15m, 1h30m, 2d)", flag, s);
    else if (min_ms > 0 && v < min_ms)
        tide_errprintf(err, "%s: \"%.40s\" is too short (at least %lld ms)", flag, s, (long long)min_ms);
    else
        tide_errprintf(err, "%s: \"%.40s\" is too long (at most %lld s)", flag, s, (long long)(max_ms / 1000));
    return -EINVAL;
}

int tide_sched_parse_pool(const char *s, char *name, size_t name_size, int32_t *dedicated, tide_error_t *err)
{
    static const char *const classes[] = {"low", "normal", "high", "critical"}; /* tide_prio_t order */
    const char *eq = strchr(s, '=');
    size_t len = eq ? (size_t)(eq - s) : strlen(s);

    if (len == 0) {
        tide_errprintf(err, "\"%.60s\" has no pool name (NAME or NAME=CLASS)", s);
        return -EINVAL;
    }
    if (len >= name_size) {
        tide_errprintf(err, "pool name \"%.*s...\" is longer than %zu characters", 20, s, name_size - 1);
        return -EINVAL;
    }
    memcpy(name, s, len);
    name[len] = '\0';
    *dedicated = -1;
    if (!eq)
        return 0;
    for (int32_t c = 0; c < TIDE_PRIO_COUNT; c++) {
        if (strcasecmp(eq + 1, classes[c]) == 0) {
            *dedicated = c;
            return 0;
        }
    }
    tide_errprintf(err, "pool %s: \"%.20s\" is not a class (low, normal, high or critical)", name, eq + 1);
    return -EINVAL;
}

/* --pool: checked by the core's rules on a scratch core, then copied into cfg (tide_core_new copies the
 * pools with the rest of the configuration). */
static int add_pool(tide_daemon_config_t *cfg, const char *s, tide_error_t *err)
{
    char name[TIDE_POOL_NAME_MAX + 1];
    tide_error_t e;
    int32_t dedicated;
    tide_core_t *scratch;
    int rc = tide_sched_parse_pool(s, name, sizeof(name), &dedicated, &e);

    if (rc < 0) {
        tide_errprintf(err, "--pool: %s", e.text);
        return rc;
    }
    scratch = tide_core_new(&cfg->core);
    rc = tide_core_pool_add(scratch, name, dedicated, &e);
    if (rc < 0) {
        tide_errprintf(err, "--pool: %s", e.text);
    } else {
        const tide_core_config_t *c = tide_core_config(scratch);
        memcpy(cfg->core.pools, c->pools, sizeof(cfg->core.pools));
        cfg->core.n_pools = c->n_pools;
    }
    tide_core_free(scratch);
    return rc;
}

/* "0.3", "30%": a fraction in [0, 1]. */
static int fraction_flag(const char *flag, const char *s, double *out, tide_error_t *err)
{
    char *end = NULL;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (end && end != s && *end == '%' && end[1] == '\0') {
        v /= 100;
        end++;
    }
    if (errno || !end || end == s || *end || !isfinite(v) || v < 0 || v > 1) {
        tide_errprintf(err, "%s: \"%.40s\" is not a fraction from 0 to 1 (or a percentage such as 30%%)", flag, s);
        return -EINVAL;
    }
    *out = v;
    return 0;
}

static int parse_one(int c, const char *arg, tide_daemon_config_t *cfg, tide_log_level_t *level, tide_error_t *err)
{
    tide_core_config_t *core = &cfg->core;
    int64_t v;
    char *end = NULL;
    double r;

    switch (c) {
    case OPT_LISTEN:
        cfg->listen = arg;
        return 0;
    case OPT_DATA_DIR:
        cfg->data_dir = arg;
        return 0;
    case OPT_STORE:
        cfg->store_url = arg;
        return 0;
    case OPT_TOKEN_FILE:
        cfg->token_file = arg;
        return 0;
    case OPT_USERS:
        cfg->users_file = arg;
        return 0;
    case OPT_AUDIT_LOG:
        cfg->audit_log = arg;
        return 0;
    case OPT_METRICS_GPU_LIMIT:
        if (parse_num("--metrics-gpu-limit", arg, 0, INT32_MAX, &cfg->metrics_gpu_limit, err) < 0)
            return -EINVAL;
        if (cfg->metrics_gpu_limit == 0)
            cfg->metrics_gpu_limit = -1; /* never; 0 in the config means unset */
        return 0;
    case OPT_ADVERTISE:
        if (!strchr(arg, ':') || arg[0] == ':' || strchr(arg, ',')) {
            tide_errprintf(err, "--advertise: \"%.60s\" is not HOST:PORT", arg);
            return -EINVAL;
        }
        cfg->advertise = arg;
        return 0;
    case OPT_TLS_CERT:
        cfg->tls_cert = arg;
        return 0;
    case OPT_TLS_KEY:
        cfg->tls_key = arg;
        return 0;
    case OPT_TLS_CA:
        cfg->tls_ca = arg;
        return 0;
    case OPT_TLS_REQUIRE_CLIENT_CERT:
        cfg->tls_require_client_cert = true;
        return 0;
    case OPT_INSECURE:
        cfg->insecure = true;
        return 0;
    case OPT_LEASE_TTL:
        return duration_flag("--lease-ttl", arg, 2000, 60000, &cfg->lease_ttl_ms, err);
    case OPT_STORE_WAIT:
        return duration_flag("--store-wait", arg, 0, 86400000, &cfg->store_wait_ms, err);
    case OPT_LOG_LEVEL:
        if (tide_log_level_parse(arg, level) < 0) {
            tide_errprintf(err, "--log-level: \"%.40s\" is not debug, info, warn or error", arg);
            return -EINVAL;
        }
        return 0;
    case OPT_HEARTBEAT:
        if (parse_num("--heartbeat-ms", arg, 10, 60000, &v, err) < 0)
            return -EINVAL;
        core->heartbeat_interval_ms = v;
        return 0;
    case OPT_RECONNECT:
        if (parse_num("--reconnect-deadline-s", arg, 1, 86400, &v, err) < 0)
            return -EINVAL;
        core->reconnect_deadline_ms = v * 1000;
        return 0;
    case OPT_STOP_GRACE:
        if (parse_num("--stop-grace-s", arg, 0, 3600, &v, err) < 0)
            return -EINVAL;
        core->stop_grace_ms = (uint32_t)(v * 1000);
        return 0;
    case OPT_RETENTION:
        if (parse_num("--retention-s", arg, 0, 10LL * 365 * 86400, &v, err) < 0)
            return -EINVAL;
        core->retention_ms = v * 1000;
        return 0;
    case OPT_POOL:
        return add_pool(cfg, arg, err);
    case OPT_AGING:
        return duration_flag("--aging", arg, 0, MAX_DURATION_MS, &core->aging_ms, err);
    case OPT_NO_PREEMPTION:
        core->preemption = false;
        return 0;
    case OPT_PREEMPT_GRACE:
        if (duration_flag("--preempt-grace", arg, 0, 86400000, &v, err) < 0)
            return -EINVAL;
        core->preempt_grace_ms = (uint32_t)v;
        return 0;
    case OPT_CKPT_DURABLE:
        if (!arg[0]) {
            tide_errprintf(err, "--ckpt-durable: the directory must not be empty");
            return -EINVAL;
        }
        cfg->ckpt_durable_dir = arg;
        core->ckpt_flush = true;
        return 0;
    case OPT_CKPT_MFU_THRESHOLD:
        return fraction_flag("--ckpt-mfu-threshold", arg, &core->ckpt_mfu_threshold, err);
    case OPT_CKPT_DEADLINE:
        return duration_flag("--ckpt-deadline", arg, 1000, MAX_DURATION_MS, &core->ckpt_deadline_ms, err);
    case OPT_CKPT_INTERVAL:
        if (strcmp(arg, "off") == 0) {
            core->ckpt_interval_ms = 0;
            return 0;
        }
        return duration_flag("--ckpt-interval", arg, TIDE_CKPT_INTERVAL_MIN_S * 1000, MAX_DURATION_MS,
                             &core->ckpt_interval_ms, err);
    case OPT_RESERVE:
        if (strcmp(arg, "auto") == 0) {
            core->reserve_gpus = -1;
            return 0;
        }
        if (parse_num("--reserve", arg, 0, 1000000, &v, err) < 0) {
            tide_errprintf(err, "--reserve: \"%.40s\" is not auto or a number of GPUs from 0 to 1000000", arg);
            return -EINVAL;
        }
        core->reserve_gpus = (int32_t)v;
        return 0;
    case OPT_FAILURE_RATE:
        errno = 0;
        r = strtod(arg, &end);
        if (errno || !end || end == arg || *end || !isfinite(r) || r < 0 || r > 1e6) {
            tide_errprintf(err, "--failure-rate: \"%.40s\" is not a number of failures per 1,000 GPUs per month "
                                "(0 to 1000000; the article's is 3)",
                           arg);
            return -EINVAL;
        }
        core->failure_rate = r / (1000.0 * TIDE_HOURS_PER_MONTH); /* per GPU-hour */
        return 0;
    case OPT_LEAD_TIME:
        if (duration_flag("--replacement-lead-time", arg, 1000, MAX_DURATION_MS, &v, err) < 0)
            return -EINVAL;
        core->replacement_lead_h = (double)v / 3600000.0;
        return 0;
    case OPT_MAX_RESTARTS:
        if (parse_num("--max-restarts", arg, 0, 1000, &v, err) < 0)
            return -EINVAL;
        core->max_restarts = (int32_t)v;
        return 0;
    case OPT_RESTART_BACKOFF:
        return duration_flag("--restart-backoff", arg, 0, 3600000, &core->restart_backoff_ms, err);
    case OPT_RESTART_WINDOW:
        return duration_flag("--restart-window", arg, 1000, MAX_DURATION_MS, &core->restart_window_ms, err);
    case OPT_FAILURE_STOP_GRACE:
        if (duration_flag("--failure-stop-grace", arg, 0, 3600000, &v, err) < 0)
            return -EINVAL;
        core->failure_stop_grace_ms = (uint32_t)v;
        return 0;
    case OPT_QUARANTINE_AFTER:
        if (parse_num("--quarantine-after", arg, 0, TIDE_QUARANTINE_MAX, &v, err) < 0)
            return -EINVAL;
        core->quarantine_failures = (int32_t)v;
        return 0;
    case OPT_QUARANTINE_WINDOW:
        return duration_flag("--quarantine-window", arg, 1000, MAX_DURATION_MS, &core->quarantine_window_ms, err);
    case OPT_HANG_TIMEOUT:
        return duration_flag("--hang-timeout", arg, 0, MAX_DURATION_MS, &core->hang_min_ms, err);
    case OPT_NO_PREDICTION:
        core->predict_failures = false;
        return 0;
    case OPT_RISK_THRESHOLD: {
        char *rend = NULL;
        double th;
        errno = 0;
        th = strtod(arg, &rend);
        if (errno || rend == arg || *rend || !(th > 0.0 && th <= 1.0)) {
            tide_errprintf(err, "--risk-threshold: \"%.40s\" is not a number above 0 and at most 1", arg);
            return -EINVAL;
        }
        core->risk.threshold = th;
        return 0;
    }
    case OPT_RISK_CONFIRM:
        return duration_flag("--risk-confirm", arg, 0, 3600000, &core->risk.confirm_ms, err);
    case OPT_NO_STEALING:
        core->stealing = false;
        return 0;
    case OPT_STRAGGLER_RATIO: {
        char *rend = NULL;
        double ratio;
        errno = 0;
        ratio = strtod(arg, &rend);
        if (errno || rend == arg || *rend || !(ratio > 1.0 && ratio <= 10.0)) {
            tide_errprintf(err, "--straggler-ratio: \"%.40s\" is not a number above 1 and at most 10", arg);
            return -EINVAL;
        }
        core->straggler_ratio = ratio;
        return 0;
    }
    case OPT_STRAGGLER_WINDOW:
        if (duration_flag("--straggler-window", arg, 1000, MAX_DURATION_MS, &core->straggler_window_ms, err) < 0)
            return -EINVAL;
        /* Ranks are compared a few times per window, at most every 5 s. */
        core->straggler_check_ms = core->straggler_window_ms / 4 < 5000 ? core->straggler_window_ms / 4 : 5000;
        return 0;
    case OPT_NO_AUTO_GROW:
        core->auto_grow = false;
        return 0;
    case OPT_RESIZE_DWELL:
        return duration_flag("--resize-dwell", arg, 0, MAX_DURATION_MS, &core->resize_dwell_ms, err);
    case OPT_RESIZE_GRACE:
        if (duration_flag("--resize-grace", arg, 0, 86400000, &v, err) < 0)
            return -EINVAL;
        core->resize_grace_ms = (uint32_t)v;
        return 0;
    case OPT_REPLACE_STRAGGLERS:
        core->replace_stragglers = true;
        return 0;
    case OPT_BURST_ENTER:
        return duration_flag("--burst-enter", arg, 0, MAX_DURATION_MS, &core->burst_enter_ms, err);
    case OPT_BURST_EXIT:
        return duration_flag("--burst-exit", arg, 0, MAX_DURATION_MS, &core->burst_exit_ms, err);
    case OPT_BURST_DWELL:
        return duration_flag("--burst-dwell", arg, 0, MAX_DURATION_MS, &core->burst_min_dwell_ms, err);
    }
    tide_errprintf(err, "internal: unknown flag %d", c);
    return -EINVAL;
}

/* TLS flags go together; plaintext on a non-loopback address only with --insecure. */
static int check_tls_flags(const tide_daemon_config_t *cfg, tide_error_t *err)
{
    if (!!cfg->tls_cert != !!cfg->tls_key) {
        tide_errprintf(err, "%s needs %s", cfg->tls_cert ? "--tls-cert" : "--tls-key",
                       cfg->tls_cert ? "--tls-key FILE (the certificate's private key)" : "--tls-cert FILE");
        return -EINVAL;
    }
    if (cfg->tls_ca && !cfg->tls_cert) {
        tide_errprintf(err, "--tls-ca verifies client certificates: it needs --tls-cert and --tls-key");
        return -EINVAL;
    }
    if (cfg->tls_require_client_cert && !cfg->tls_ca) {
        tide_errprintf(err, "--tls-require-client-cert needs --tls-ca FILE (the CA that signs client certificates)");
        return -EINVAL;
    }
    if (cfg->insecure && cfg->tls_cert) {
        tide_errprintf(err, "--insecure and --tls-cert contradict each other");
        return -EINVAL;
    }
    return tide_tls_check_plaintext(cfg->listen, true, cfg->tls_cert != NULL, cfg->insecure, err) < 0 ? -EINVAL : 0;
}

int tide_sched_parse_args(int argc, char **argv, tide_daemon_config_t *cfg, tide_log_level_t *level, FILE *out,
                          tide_error_t *err)
{
    int c, rc;

    optind = 0; /* glibc: a full reset, so a second parse (tests) starts clean */
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        const char *bad = argv[optind - 1] ? argv[optind - 1] : "?";
        switch (c) {
        case OPT_HELP:
            tide_sched_usage(out);
            return 1;
        case OPT_VERSION:
            fprintf(out, "tide-scheduler %s\n", TIDE_VERSION);
            return 1;
        case ':':
            tide_errprintf(err, "%.60s needs a value", bad);
            return -EINVAL;
        case '?':
            /* glibc sets optopt to a known long option's value when it was given a value it does not
             * take ("--no-stealing=1"), and to the character of an unknown short option. */
            if (strncmp(bad, "--", 2) == 0 && optopt && strchr(bad, '='))
                tide_errprintf(err, "%.*s takes no value", (int)(strchr(bad, '=') - bad), bad);
            else if (strncmp(bad, "--", 2) != 0 && optopt)
                tide_errprintf(err, "unknown option '-%c' (try --help)", optopt);
            else
                tide_errprintf(err, "unknown option '%.60s' (try --help)", bad);
            return -EINVAL;
        default:
            if ((rc = parse_one(c, optarg, cfg, level, err)) < 0)
                return rc;
        }
    }
    if (optind < argc) {
        tide_errprintf(err, "unexpected argument \"%.60s\" (try --help)", argv[optind]);
        return -EINVAL;
    }
    if (cfg->store_url && strncmp(cfg->store_url, "etcd://", 7) == 0) {
        if (!cfg->token_file && !cfg->insecure_no_auth) {
            tide_errprintf(err, "--store etcd://: give --token-file (every replica must check the same token)");
            return -EINVAL;
        }
    } else if (cfg->advertise || cfg->lease_ttl_ms || cfg->store_wait_ms) {
        tide_errprintf(err, "%s: only with --store etcd:// (leader election)",
                       cfg->advertise ? "--advertise" : cfg->lease_ttl_ms ? "--lease-ttl" : "--store-wait");
        return -EINVAL;
    }
    return check_tls_flags(cfg, err);
}

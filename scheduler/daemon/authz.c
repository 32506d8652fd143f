/* Authentication and authorisation for tide-scheduler's gRPC API (docs/security.md). The hook decides
 * who a call is from (the scheduler's own token: "admin"; else the users file in force), whether that
 * role may call the method, and spends one token of the identity's rate bucket. Ownership and quotas are
 * asked by the handlers. The users file in force only changes as a whole (a reload that fails keeps it). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <uthash.h>

#include "authz.h"
#include "clock.h"
#include "log.h"
#include "token.h"
#include "xmalloc.h"

#define RELOAD_CHECK_MS 2000
#define DENY_LOG_MAX    100 /* refusals logged one by one; then every 100th */

typedef enum need {
    NEED_READ = 0, /* any role but worker */
    NEED_SUBMIT,   /* admin, user */
    NEED_OWN,      /* admin, user (the handler checks ownership) */
    NEED_ADMIN,    /* admin */
    NEED_AUDIT,    /* admin, read-only */
    NEED_WORKER,   /* worker, admin */
} need_t;

static const struct {
    const char *path;
    need_t need;
} methods[] = {
    {"/tide.v1.JobService/SubmitJob", NEED_SUBMIT},
    {"/tide.v1.JobService/GetJob", NEED_READ},
    {"/tide.v1.JobService/ListJobs", NEED_READ},
    {"/tide.v1.JobService/CancelJob", NEED_OWN},
    {"/tide.v1.JobService/GetJobLogs", NEED_READ},
    {"/tide.v1.JobService/WatchEvents", NEED_READ},
    {"/tide.v1.JobService/CheckpointJob", NEED_OWN},
    {"/tide.v1.JobService/ScaleJob", NEED_OWN},
    {"/tide.v1.ClusterService/ListWorkers", NEED_READ},
    {"/tide.v1.ClusterService/GetClusterStatus", NEED_READ},
    {"/tide.v1.ClusterService/CordonWorker", NEED_ADMIN},
    {"/tide.v1.ClusterService/UncordonWorker", NEED_ADMIN},
    {"/tide.v1.ClusterService/DrainWorker", NEED_ADMIN},
    {"/tide.v1.ClusterService/GetUsage", NEED_READ},
    {"/tide.v1.ClusterService/ListAudit", NEED_AUDIT},
    {"/tide.v1.WorkerService/Connect", NEED_WORKER},
};

typedef struct bucket {
    char name[TIDE_USER_NAME_MAX + 1];
    double tokens;
    int64_t at_ms;
    UT_hash_handle hh;
} bucket_t;

struct tide_authz {
    char *admin_token; /* NULL: no authentication */
    char *users_path;
    tide_users_t *users;
    struct stat seen; /* the users file as last loaded */
    int64_t checked_ms;
    uint64_t reload_errors;
    bool missing; /* the users file could not be found at the last check */
    uint64_t generation; /* +1 per users file taken into force */
    uint64_t denied;
    bucket_t *buckets;
};

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int tide_authz_reload(tide_authz_t *a, bool force, tide_error_t *err)
{
    struct stat st;
    tide_users_t *u = NULL;
    int rc;

    if (!a->users_path)
        return 0;
    if (stat(a->users_path, &st) < 0) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", a->users_path, strerror(-rc));
        a->reload_errors++;
        if (a->missing && !force)
            return 0; /* reported once until it is back */
        a->missing = true;
        return rc;
    }
    a->missing = false;
    if (!force && a->users && same_file(&st, &a->seen))
        return 0;
    if ((rc = tide_users_load(a->users_path, &u, err)) < 0)
        goto fail;
    tide_users_free(a->users);
    a->users = u;
    a->seen = st;
    a->generation++;
    tide_info("users file %s: %zu identities in force", a->users_path, tide_users_count(u));
    return 0;
fail:
    a->reload_errors++;
    a->seen = st; /* the same broken file is reported once */
    return rc;
}

int tide_authz_new(const char *admin_token, const char *users_path, tide_authz_t **out, tide_error_t *err)
{
    tide_authz_t *a = tide_xcalloc(1, sizeof(*a));
    int rc;

    *out = NULL;
    a->admin_token = admin_token ? tide_xstrdup(admin_token) : NULL;
    a->users_path = users_path ? tide_xstrdup(users_path) : NULL;
    a->checked_ms = tide_clock_mono_ms();
    if (users_path && (rc = tide_authz_reload(a, true, err)) < 0) {
        tide_authz_free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void tide_authz_free(tide_authz_t *a)
{
    bucket_t *b, *tmp;

    if (!a)
        return;
    if (a->admin_token) {
        explicit_bzero(a->admin_token, strlen(a->admin_token));
        free(a->admin_token);
    }
    free(a->users_path);
    tide_users_free(a->users);
    HASH_ITER(hh, a->buckets, b, tmp)
    {
        HASH_DEL(a->buckets, b);
        free(b);
    }
    free(a);
}

size_t tide_authz_identities(const tide_authz_t *a)
{
    return tide_users_count(a->users) + (a->admin_token ? 1 : 0);
}

uint64_t tide_authz_generation(const tide_authz_t *a)
{
    return a->generation;
}

uint64_t tide_authz_reload_errors(const tide_authz_t *a)
{
    return a->reload_errors;
}

const tide_user_t *tide_authz_user(const tide_authz_t *a, const char *name)
{
    return tide_users_find(a->users, name);
}

static bool role_may(tide_role_t role, need_t need)
{
    switch (role) {
    case TIDE_ROLE_ADMIN:
        return true;
    case TIDE_ROLE_USER:
        return need == NEED_READ || need == NEED_SUBMIT || need == NEED_OWN;
    case TIDE_ROLE_READ_ONLY:
        return need == NEED_READ || need == NEED_AUDIT;
    case TIDE_ROLE_WORKER:
        return need == NEED_WORKER;
    default:
        return false;
    }
}

static const char *need_text(need_t need)
{
    switch (need) {
    case NEED_SUBMIT:
    case NEED_OWN:
        return "admin and user roles only";
    case NEED_ADMIN:
        return "admin only";
    case NEED_AUDIT:
        return "admin and read-only roles only";
    case NEED_WORKER:
        return "workers only";
    default:
        return "not for workers";
    }
}

/* The method's short name: "/tide.v1.JobService/CancelJob" -> "CancelJob". */
static const char *short_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static bool rate_ok(tide_authz_t *a, const tide_user_t *u, int64_t now)
{
    bucket_t *b = NULL;
    double burst;

    if (!u || u->rate_limit <= 0)
        return true;
    burst = u->rate_limit * 2 > 1 ? u->rate_limit * 2 : 1;
    HASH_FIND_STR(a->buckets, u->name, b);
    if (!b) {
        b = tide_xcalloc(1, sizeof(*b));
        snprintf(b->name, sizeof(b->name), "%s", u->name);
        b->tokens = burst;
        b->at_ms = now;
        HASH_ADD_STR(a->buckets, name, b);
    }
    if (now > b->at_ms) {
        b->tokens += u->rate_limit * (double)(now - b->at_ms) / 1000.0;
        b->at_ms = now;
    }
    if (b->tokens > burst)
        b->tokens = burst;
    if (b->tokens < 1)
        return false;
    b->tokens -= 1;
    return true;
}

static tide_grpc_code_t deny(tide_authz_t *a, tide_grpc_code_t code, char *msg, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static tide_grpc_code_t deny(tide_authz_t *a, tide_grpc_code_t code, char *msg, size_t n, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, n, fmt, ap);
    va_end(ap);
    a->denied++;
    if (a->denied <= DENY_LOG_MAX || a->denied % 100 == 0)
        tide_warn("refused a call (%llu so far): %s", (unsigned long long)a->denied, msg);
    return code;
}

tide_grpc_code_t tide_authz_authenticate(void *ud, const char *authorization, const char *path,
                                         tide_rpc_identity_t *id, char *msg, size_t msg_size)
{
    static const char bearer[] = "Bearer ";
    tide_authz_t *a = ud;
    const tide_user_t *u = NULL;
    const char *token;
    const char *name;
    tide_role_t role;
    int64_t now = tide_clock_mono_ms(), expired = 0;
    need_t need = NEED_ADMIN;

    if (!a->admin_token) {
        /* no authentication (tests only): everyone is an anonymous admin */
        id->name[0] = '\0';
        id->role = TIDE_ROLE_ADMIN;
        return TIDE_GRPC_OK;
    }
    if (a->users_path && now - a->checked_ms >= RELOAD_CHECK_MS) {
        tide_error_t err;
        a->checked_ms = now;
        tide_error_clear(&err);
        if (tide_authz_reload(a, false, &err) < 0)
            tide_err("users file not reloaded, the identities in force stay: %s", err.text);
    }
    if (!authorization || strncmp(authorization, bearer, sizeof(bearer) - 1) != 0)
        return deny(a, TIDE_GRPC_UNAUTHENTICATED, msg, msg_size,
                    "%s: missing bearer token (authorization: Bearer TOKEN)", short_name(path));
    token = authorization + sizeof(bearer) - 1;
    if (tide_token_equal(token, a->admin_token)) {
        name = TIDE_ADMIN_IDENTITY;
        role = TIDE_ROLE_ADMIN;
    } else {
        switch (tide_users_authenticate(a->users, token, tide_clock_wall_ms(), &u, &expired)) {
        case TIDE_AUTH_OK:
            break;
        case TIDE_AUTH_EXPIRED: {
            char when[32];
            snprintf(id->name, sizeof(id->name), "%s", u->name); /* the audit log says whose token */
            id->role = (int)u->role;
            time_t t = (time_t)(expired / 1000);
            struct tm tm;
            gmtime_r(&t, &tm);
            strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
            return deny(a, TIDE_GRPC_UNAUTHENTICATED, msg, msg_size, "%s: the token of %s expired at %s",
                        short_name(path), u->name, when);
        }
        case TIDE_AUTH_REVOKED:
            snprintf(id->name, sizeof(id->name), "%s", u->name);
            id->role = (int)u->role;
            return deny(a, TIDE_GRPC_UNAUTHENTICATED, msg, msg_size, "%s: the token of %s was revoked",
                        short_name(path), u->name);
        default:
            return deny(a, TIDE_GRPC_UNAUTHENTICATED, msg, msg_size, "%s: invalid bearer token",
                        short_name(path));
        }
        name = u->name;
        role = u->role;
    }
    snprintf(id->name, sizeof(id->name), "%s", name); /* also for a refusal: the audit log says who */
    id->role = (int)role;
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (!strcmp(methods[i].path, path)) {
            need = methods[i].need;
            break;
        }
    if (!role_may(role, need))
        return deny(a, TIDE_GRPC_PERMISSION_DENIED, msg, msg_size, "%s: %s (%s) may not call it: %s",
                    short_name(path), name, tide_role_name(role), need_text(need));
    if (!rate_ok(a, u, now))
        return deny(a, TIDE_GRPC_RESOURCE_EXHAUSTED, msg, msg_size,
                    "%s: rate limit of %s: %g calls per second (rate_limit in the users file)", short_name(path),
                    name, u->rate_limit);
    return TIDE_GRPC_OK;
}

bool tide_authz_sees_all(const tide_rpc_identity_t *id)
{
    return id->role == TIDE_ROLE_ADMIN || id->role == TIDE_ROLE_READ_ONLY || id->role == TIDE_ROLE_NONE;
}

const char *tide_authz_owner(const tide_job_t *job)
{
    return job->spec.owner && job->spec.owner[0] ? job->spec.owner : TIDE_ADMIN_IDENTITY;
}

bool tide_authz_job(const tide_rpc_identity_t *id, const tide_job_t *job, const char *verb, char *msg,
                    size_t msg_size)
{
    bool reading = !strcmp(verb, "see") || !strcmp(verb, "read the logs of");

    if (id->role == TIDE_ROLE_ADMIN || id->role == TIDE_ROLE_NONE ||
        (reading && id->role == TIDE_ROLE_READ_ONLY) || !strcmp(tide_authz_owner(job), id->name))
        return true;
    snprintf(msg, msg_size, "job %s belongs to %s: %s may only %s their own jobs", job->id, tide_authz_owner(job),
             id->name[0] ? id->name : "this caller", verb);
    return false;
}

static const char *const class_names[TIDE_PRIO_COUNT] = {"LOW", "NORMAL", "HIGH", "CRITICAL"};

/* GPUs a spec may hold: its largest size, and the workers a burst may lend it on top (lending.c: up to
 * ceil(n * burst_percent / 100)). */
static int64_t spec_gpus(const tide_job_spec_t *spec)
{
    int64_t n = spec->max_workers > spec->min_workers ? spec->max_workers : spec->min_workers;

    if (n < 0)
        n = 0;
    if (spec->burst_percent > 0)
        n += (n * spec->burst_percent + 99) / 100;
    return n;
}

static int64_t job_gpus(const tide_job_t *job)
{
    return spec_gpus(&job->spec);
}

static bool unfinished(const tide_job_t *job)
{
    return job->state == TIDE_JOB_PENDING || job->state == TIDE_JOB_RUNNING;
}

/* The identity's unfinished jobs (but skip): GPUs in all pools and in pool, and how many are queued. */
static void tally(const tide_core_t *core, const char *owner, const char *pool, const tide_job_t *skip,
                  int64_t *gpus, int64_t *pool_gpus, int64_t *queued)
{
    *gpus = *pool_gpus = *queued = 0;
    for (tide_job_t *j = tide_core_job_next(core, NULL); j; j = tide_core_job_next(core, j)) {
        if (j == skip || !unfinished(j) || strcmp(tide_authz_owner(j), owner) != 0)
            continue;
        *gpus += job_gpus(j);
        if (pool && !strcmp(j->spec.pool ? j->spec.pool : "", pool))
            *pool_gpus += job_gpus(j);
        if (j->state == TIDE_JOB_PENDING)
            (*queued)++;
    }
}

static tide_grpc_code_t check_gpus(const tide_user_t *u, const char *pool, int32_t pool_limit, int64_t have,
                                   int64_t have_pool, int64_t want, char *msg, size_t n)
{
    if (u->max_gpus >= 0 && have + want > u->max_gpus) {
        snprintf(msg, n,
                 "quota: %s's unfinished jobs may hold %lld GPUs and this one %lld; the limit is %d "
                 "(max_gpus)",
                 u->name, (long long)have, (long long)want, u->max_gpus);
        return TIDE_GRPC_RESOURCE_EXHAUSTED;
    }
    if (pool_limit >= 0 && have_pool + want > pool_limit) {
        snprintf(msg, n,
                 "quota: %s's unfinished jobs in pool %s may hold %lld GPUs and this one %lld; the limit "
                 "there is %d (pools[].max_gpus)",
                 u->name, pool, (long long)have_pool, (long long)want, pool_limit);
        return TIDE_GRPC_RESOURCE_EXHAUSTED;
    }
    return TIDE_GRPC_OK;
}

bool tide_authz_current(const tide_authz_t *a, const tide_rpc_identity_t *id, char *msg, size_t n)
{
    const tide_user_t *u;

    if (!a->admin_token || id->role == TIDE_ROLE_NONE || !strcmp(id->name, TIDE_ADMIN_IDENTITY))
        return true; /* no authentication, or the scheduler's own token */
    u = tide_users_find(a->users, id->name);
    if (u && (int)u->role == id->role)
        return true;
    snprintf(msg, n, "%s is no longer %s in the users file", id->name,
             u ? "in that role" : "an identity");
    return false;
}

tide_grpc_code_t tide_authz_submit(tide_authz_t *a, const tide_core_t *core, const tide_rpc_identity_t *id,
                                   tide_job_spec_t *spec, char *msg, size_t n)
{
    const tide_user_t *u = id->name[0] ? tide_users_find(a->users, id->name) : NULL;
    const char *pool = spec->pool ? spec->pool : "";
    int64_t gpus, pool_gpus, queued, want;
    int32_t pool_limit = -1;
    tide_job_spec_t probe = *spec;

    if (!tide_authz_current(a, id, msg, n))
        return TIDE_GRPC_PERMISSION_DENIED; /* removed (or its role changed) since the call began */
    spec->owner = (char *)(id->name[0] ? id->name : TIDE_ADMIN_IDENTITY);
    spec->run_as = (char *)(u ? u->unix_user : "");
    if (!u || id->role == TIDE_ROLE_ADMIN)
        return TIDE_GRPC_OK; /* the scheduler's own token, or an admin: no limits */
    if ((unsigned)spec->priority < TIDE_PRIO_COUNT && !(u->classes & (1u << spec->priority))) {
        char allowed[64] = "";
        for (int k = 0; k < TIDE_PRIO_COUNT; k++)
            if (u->classes & (1u << k))
                snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s%s",
                         allowed[0] ? ", " : "", class_names[k]);
        snprintf(msg, n, "spec.priority: %s may not submit %s jobs (allowed: %s)", u->name,
                 class_names[spec->priority], allowed);
        return TIDE_GRPC_PERMISSION_DENIED;
    }
    if (!tide_user_pool_allowed(u, pool, &pool_limit)) {
        char allowed[256] = "";
        for (size_t k = 0; k < u->n_pools; k++)
            snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s%s", k ? ", " : "",
                     u->pools[k].name);
        snprintf(msg, n, "spec.pool: %s may submit only to pool%s %s%s", u->name, u->n_pools > 1 ? "s" : "",
                 allowed, pool[0] ? "" : " (name one with --pool)");
        return TIDE_GRPC_PERMISSION_DENIED;
    }
    if (u->max_gpus < 0 && pool_limit < 0 && u->max_queued_jobs < 0)
        return TIDE_GRPC_OK;
    probe.max_workers = spec->max_workers ? spec->max_workers : spec->min_workers;
    want = spec_gpus(&probe);
    tally(core, u->name, pool, NULL, &gpus, &pool_gpus, &queued);
    if (u->max_queued_jobs >= 0 && queued + 1 > u->max_queued_jobs) {
        snprintf(msg, n, "quota: %s has %lld jobs queued; the limit is %d (max_queued_jobs)", u->name,
                 (long long)queued, u->max_queued_jobs);
        return TIDE_GRPC_RESOURCE_EXHAUSTED;
    }
    return check_gpus(u, pool, pool_limit, gpus, pool_gpus, want, msg, n);
}

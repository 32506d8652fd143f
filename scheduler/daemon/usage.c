/* GPU time per (owner, pool): pruned jobs' totals in a hash (and the store), live jobs from the core at
 * report time. A report walks the core's jobs once (a report is a rare call, not an event). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uthash.h>

#include "authz.h"
#include "usage.h"
#include "xmalloc.h"

typedef struct row {
    char *key; /* "OWNER\nPOOL" */
    char *owner, *pool;
    double gpu_seconds;
    int32_t jobs, running, gpus;
    UT_hash_handle hh;
} row_t;

struct tide_usage {
    row_t *pruned;
};

static const char *pool_of(const tide_job_t *job)
{
    return job->spec.pool && job->spec.pool[0] ? job->spec.pool : "*";
}

static row_t *row_get(row_t **table, const char *owner, const char *pool)
{
    char *key = tide_xasprintf("%s\n%s", owner, pool);
    row_t *r = NULL;

    HASH_FIND_STR(*table, key, r);
    if (r) {
        free(key);
        return r;
    }
    r = tide_xcalloc(1, sizeof(*r));
    r->key = key;
    r->owner = tide_xstrdup(owner);
    r->pool = tide_xstrdup(pool);
    HASH_ADD_KEYPTR(hh, *table, r->key, strlen(r->key), r);
    return r;
}

static void table_free(row_t **table)
{
    row_t *r, *tmp;

    HASH_ITER(hh, *table, r, tmp)
    {
        HASH_DEL(*table, r);
        free(r->key);
        free(r->owner);
        free(r->pool);
        free(r);
    }
}

tide_usage_t *tide_usage_new(void)
{
    return tide_xcalloc(1, sizeof(tide_usage_t));
}

void tide_usage_free(tide_usage_t *u)
{
    if (!u)
        return;
    table_free(&u->pruned);
    free(u);
}

int tide_usage_restore(tide_usage_t *u, const char *key, const void *value, size_t len, tide_error_t *err)
{
    Tide__V1__UsageRow *pb = tide__v1__usage_row__unpack(NULL, len, value);
    row_t *r;

    if (!pb || !pb->user[0] || !pb->pool[0] || pb->gpu_seconds < 0 || pb->jobs < 0) {
        tide_errprintf(err, "store record %s is not a tide.v1.UsageRow", key);
        tide__v1__usage_row__free_unpacked(pb, NULL);
        return -EINVAL;
    }
    r = row_get(&u->pruned, pb->user, pb->pool);
    r->gpu_seconds = pb->gpu_seconds;
    r->jobs = pb->jobs;
    tide__v1__usage_row__free_unpacked(pb, NULL);
    return 0;
}

void tide_usage_pruned(tide_usage_t *u, const tide_core_t *core, const tide_job_t *job, tide_store_batch_t *b)
{
    row_t *r = row_get(&u->pruned, tide_authz_owner(job), pool_of(job));
    Tide__V1__UsageRow pb = TIDE__V1__USAGE_ROW__INIT;
    uint8_t buf[512];
    char key[256];
    size_t n;

    r->gpu_seconds += tide_core_job_gpu_seconds(core, job);
    r->jobs++;
    pb.user = r->owner;
    pb.pool = r->pool;
    pb.gpu_seconds = r->gpu_seconds;
    pb.jobs = r->jobs;
    n = tide__v1__usage_row__get_packed_size(&pb);
    if (n > sizeof(buf))
        return; /* owner and pool are short names: cannot happen */
    tide__v1__usage_row__pack(&pb, buf);
    snprintf(key, sizeof(key), "%s%s/%s", TIDE_KEY_USAGE, r->owner, r->pool);
    tide_store_batch_put(b, key, buf, n);
}

static bool wanted(const char *owner, const char *pool, const char *want_owner, const char *want_pool)
{
    return (!want_owner || !want_owner[0] || !strcmp(owner, want_owner)) &&
           (!want_pool || !want_pool[0] || !strcmp(pool, want_pool));
}

static int by_owner_pool(const void *a, const void *b)
{
    const Tide__V1__UsageRow *x = *(Tide__V1__UsageRow *const *)a, *y = *(Tide__V1__UsageRow *const *)b;
    int c = strcmp(x->user, y->user);
    return c ? c : strcmp(x->pool, y->pool);
}

void tide_usage_report(const tide_usage_t *u, const tide_core_t *core, const char *owner, const char *pool,
                       Tide__V1__UsageReport *out, tide_arena_t *a)
{
    row_t *t = NULL, *r, *tmp;
    size_t n = 0;

    tide__v1__usage_report__init(out);
    for (r = u->pruned; r; r = r->hh.next) {
        if (!wanted(r->owner, r->pool, owner, pool))
            continue;
        row_t *x = row_get(&t, r->owner, r->pool);
        x->gpu_seconds += r->gpu_seconds;
        x->jobs += r->jobs;
    }
    for (tide_job_t *j = tide_core_job_next(core, NULL); j; j = tide_core_job_next(core, j)) {
        if (!wanted(tide_authz_owner(j), pool_of(j), owner, pool))
            continue;
        row_t *x = row_get(&t, tide_authz_owner(j), pool_of(j));
        x->gpu_seconds += tide_core_job_gpu_seconds(core, j);
        x->jobs++;
        if (j->state == TIDE_JOB_RUNNING) {
            x->running++;
            x->gpus += j->n_ranks;
        }
    }
    out->n_rows = HASH_COUNT(t);
    out->rows = tide_arena_calloc(a, out->n_rows + 1, sizeof(*out->rows));
    HASH_ITER(hh, t, r, tmp)
    {
        Tide__V1__UsageRow *pb = tide_arena_alloc(a, sizeof(*pb));
        tide__v1__usage_row__init(pb);
        pb->user = tide_arena_strdup(a, r->owner);
        pb->pool = tide_arena_strdup(a, r->pool);
        pb->gpu_seconds = r->gpu_seconds;
        pb->jobs = r->jobs;
        pb->running_jobs = r->running;
        pb->gpus_in_use = r->gpus;
        out->total_gpu_seconds += r->gpu_seconds;
        out->rows[n++] = pb;
    }
    qsort(out->rows, n, sizeof(*out->rows), by_owner_pool);
    table_free(&t);
}

/* Scenario files: JSON -> tide_scenario_t, with every key checked (docs/simulator.md, "Scenario
 * format"). Invariant: a parsed scenario is internally consistent (sizes fit the cluster layout,
 * every distribution draws inside its domain), so the simulator never re-validates; an error names
 * the key path or the line, and unknown keys are errors. */
#include "scenario.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gpu_sim.h"
#include "rng.h"
#include "xmalloc.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* --- helpers: key paths, typed getters --- */

/* Key paths are short; a path that does not fit is cut (an error message only). */
static void join(char *buf, size_t len, const char *path, const char *key)
{
    int n = path[0] ? snprintf(buf, len, "%s.%s", path, key) : snprintf(buf, len, "%s", key);

    if (n < 0)
        buf[0] = '\0';
}

static void join_index(char *buf, size_t len, const char *path, size_t i)
{
    if (snprintf(buf, len, "%s[%zu]", path, i) < 0)
        buf[0] = '\0';
}

/* obj must be an object whose keys are all in allowed (NULL-terminated), each at most once. */
static int check_object(const cJSON *obj, const char *path, const char *const *allowed,
                        tide_error_t *err)
{
    const cJSON *c, *d;

    if (!cJSON_IsObject(obj)) {
        tide_errprintf(err, "%s: expected an object", path[0] ? path : "(top level)");
        return -EINVAL;
    }
    cJSON_ArrayForEach(c, obj)
    {
        bool ok = false;
        char p[256];
        for (size_t i = 0; allowed[i] && !ok; i++)
            ok = strcmp(allowed[i], c->string) == 0;
        join(p, sizeof(p), path, c->string);
        if (!ok) {
            char list[200];
            size_t n = 0;
            list[0] = '\0';
            for (size_t i = 0; allowed[i] && n < sizeof(list) - 1; i++)
                n +=
                    (size_t)snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "", allowed[i]);
            tide_errprintf(err, "%s: unknown key (known here: %s)", p, list);
            return -EINVAL;
        }
        for (d = obj->child; d != c; d = d->next) {
            if (strcmp(d->string, c->string) == 0) {
                tide_errprintf(err, "%s: duplicate key", p);
                return -EINVAL;
            }
        }
    }
    return 0;
}

static const cJSON *item(const cJSON *obj, const char *key)
{
    return obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
}

/* A number in [lo, hi]; def when absent. */
static int get_num(const cJSON *obj, const char *path, const char *key, double def, double lo,
                   double hi, double *out, tide_error_t *err)
{
    const cJSON *v = item(obj, key);
    char p[256];

    join(p, sizeof(p), path, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) {
        tide_errprintf(err, "%s: expected a number", p);
        return -EINVAL;
    }
    if (v->valuedouble < lo || v->valuedouble > hi) {
        if (hi >= 1e300)
            tide_errprintf(err, "%s: expected a number >= %g (got %g)", p, lo, v->valuedouble);
        else
            tide_errprintf(err, "%s: expected a number between %g and %g (got %g)", p, lo, hi,
                           v->valuedouble);
        return -EINVAL;
    }
    *out = v->valuedouble;
    return 0;
}

/* A positive number (> 0); def when absent. */
static int get_pos(const cJSON *obj, const char *path, const char *key, double def, double *out,
                   tide_error_t *err)
{
    const cJSON *v = item(obj, key);
    char p[256];

    join(p, sizeof(p), path, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble <= 0) {
        tide_errprintf(err, "%s: expected a positive number", p);
        return -EINVAL;
    }
    *out = v->valuedouble;
    return 0;
}

/* An integer in [lo, hi]; def when absent. */
static int get_int(const cJSON *obj, const char *path, const char *key, int64_t def, int64_t lo,
                   int64_t hi, int64_t *out, tide_error_t *err)
{
    const cJSON *v = item(obj, key);
    char p[256];

    join(p, sizeof(p), path, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < (double)lo || v->valuedouble > (double)hi) {
        if (lo == 1)
            tide_errprintf(err, "%s: expected a positive integer", p);
        else if (lo == 0)
            tide_errprintf(err, "%s: expected an integer >= 0", p);
        else
            tide_errprintf(err, "%s: expected an integer between %lld and %lld", p, (long long)lo,
                           (long long)hi);
        return -EINVAL;
    }
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int get_bool(const cJSON *obj, const char *path, const char *key, bool def, bool *out,
                    tide_error_t *err)
{
    const cJSON *v = item(obj, key);
    char p[256];

    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) {
        join(p, sizeof(p), path, key);
        tide_errprintf(err, "%s: expected true or false", p);
        return -EINVAL;
    }
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A string of at most max characters; def when absent. *out is owned (tide_xstrdup). */
static int get_str(const cJSON *obj, const char *path, const char *key, const char *def, size_t max,
                   char **out, tide_error_t *err)
{
    const cJSON *v = item(obj, key);
    char p[256];

    join(p, sizeof(p), path, key);
    if (!v) {
        *out = tide_xstrdup(def);
        return 0;
    }
    if (!cJSON_IsString(v)) {
        tide_errprintf(err, "%s: expected a string", p);
        return -EINVAL;
    }
    if (strlen(v->valuestring) > max) {
        tide_errprintf(err, "%s: at most %zu characters", p, max);
        return -EINVAL;
    }
    *out = tide_xstrdup(v->valuestring);
    return 0;
}

static int parse_prio(const char *s, int32_t *out)
{
    static const char *names[TIDE_PRIO_COUNT] = {"LOW", "NORMAL", "HIGH", "CRITICAL"};

    for (int i = 0; i < TIDE_PRIO_COUNT; i++) {
        if (strcasecmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return -EINVAL;
}

static bool pool_name_ok(const char *s)
{
    if (!s[0] || strlen(s) > TIDE_POOL_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
            return false;
    return true;
}

/* --- distributions --- */

static void dist_free(tide_dist_t *d)
{
    free(d->values);
    free(d->cum);
    d->values = d->cum = NULL;
}

/* A distribution at obj.key inside the domain [lo, hi] (integer: every value a whole number). A
 * number is a constant. def_fixed applies when the key is absent and has_def is true. */
static int get_dist(const cJSON *obj, const char *path, const char *key, bool has_def,
                    double def_fixed, double lo, double hi, bool integer, tide_dist_t *d,
                    tide_error_t *err)
{
    static const char *const keys[] = {"dist", "value",  "mean",    "sigma", "min",
                                       "max",  "values", "weights", NULL};
    const cJSON *v = item(obj, key), *kind, *vals, *w;
    char p[256], q[300];
    const char *what = integer ? (lo >= 1 ? "a positive integer" : "an integer") : "a number";
    double mn, mx;
    int rc;

    memset(d, 0, sizeof(*d));
    d->min = lo;
    d->max = hi;
    join(p, sizeof(p), path, key);
    if (!v) {
        if (!has_def) {
            tide_errprintf(err, "%s: required", p);
            return -EINVAL;
        }
        d->kind = TIDE_DIST_FIXED;
        d->a = def_fixed;
        return 0;
    }
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if (!isfinite(x) || x < lo || x > hi || (integer && x != floor(x))) {
            if (hi < 1e300)
                tide_errprintf(err, "%s: expected %s between %g and %g, or a distribution object",
                               p, what, lo, hi);
            else
                tide_errprintf(err, "%s: expected %s%s, or a distribution object", p, what,
                               integer ? "" : (lo > 0 ? " > 0" : " >= 0"));
            return -EINVAL;
        }
        d->kind = TIDE_DIST_FIXED;
        d->a = x;
        return 0;
    }
    if (!cJSON_IsObject(v)) {
        tide_errprintf(err, "%s: expected %s or a distribution object", p, what);
        return -EINVAL;
    }
    if ((rc = check_object(v, p, keys, err)) < 0)
        return rc;
    kind = item(v, "dist");
    if (!cJSON_IsString(kind)) {
        join(q, sizeof(q), p, "dist");
        tide_errprintf(
            err,
            "%s: required: \"fixed\", \"uniform\", \"exponential\", \"lognormal\" or \"choice\"",
            q);
        return -EINVAL;
    }
    if ((rc = get_num(v, p, "min", lo, lo, hi, &mn, err)) < 0 ||
        (rc = get_num(v, p, "max", hi, lo, hi, &mx, err)) < 0)
        return rc;
    if (mn > mx) {
        tide_errprintf(err, "%s: min (%g) is above max (%g)", p, mn, mx);
        return -EINVAL;
    }
    d->min = mn;
    d->max = mx;
#define ONLY(...)                                                                                  \
    do {                                                                                           \
        static const char *const allowed_[] = {"dist", "min", "max", __VA_ARGS__, NULL};           \
        if ((rc = check_object(v, p, allowed_, err)) < 0)                                          \
            return rc;                                                                             \
    } while (0)
    if (strcmp(kind->valuestring, "fixed") == 0) {
        ONLY("value");
        d->kind = TIDE_DIST_FIXED;
        if (!item(v, "value")) {
            join(q, sizeof(q), p, "value");
            tide_errprintf(err, "%s: required", q);
            return -EINVAL;
        }
        if ((rc = get_num(v, p, "value", 0, mn, mx, &d->a, err)) < 0)
            return rc;
    } else if (strcmp(kind->valuestring, "uniform") == 0) {
        ONLY(NULL);
        d->kind = TIDE_DIST_UNIFORM;
        if (!item(v, "min") || !item(v, "max")) {
            tide_errprintf(err, "%s: a uniform distribution needs min and max", p);
            return -EINVAL;
        }
        d->a = mn;
        d->b = mx;
    } else if (strcmp(kind->valuestring, "exponential") == 0) {
        ONLY("mean");
        d->kind = TIDE_DIST_EXPONENTIAL;
        if (!item(v, "mean")) {
            join(q, sizeof(q), p, "mean");
            tide_errprintf(err, "%s: required", q);
            return -EINVAL;
        }
        if ((rc = get_pos(v, p, "mean", 1, &d->a, err)) < 0)
            return rc;
    } else if (strcmp(kind->valuestring, "lognormal") == 0) {
        ONLY("mean", "sigma");
        d->kind = TIDE_DIST_LOGNORMAL;
        if (!item(v, "mean")) {
            join(q, sizeof(q), p, "mean");
            tide_errprintf(err, "%s: required", q);
            return -EINVAL;
        }
        if ((rc = get_pos(v, p, "mean", 1, &d->a, err)) < 0 ||
            (rc = get_num(v, p, "sigma", 1.0, 0, 10, &d->b, err)) < 0)
            return rc;
    } else if (strcmp(kind->valuestring, "choice") == 0) {
        double total = 0;
        ONLY("values", "weights");
        d->kind = TIDE_DIST_CHOICE;
        vals = item(v, "values");
        w = item(v, "weights");
        join(q, sizeof(q), p, "values");
        if (!cJSON_IsArray(vals) || cJSON_GetArraySize(vals) == 0) {
            tide_errprintf(err, "%s: expected a non-empty array", q);
            return -EINVAL;
        }
        d->n = (size_t)cJSON_GetArraySize(vals);
        if (w && (!cJSON_IsArray(w) || (size_t)cJSON_GetArraySize(w) != d->n)) {
            join(q, sizeof(q), p, "weights");
            tide_errprintf(err, "%s: expected an array as long as values (%zu)", q, d->n);
            return -EINVAL;
        }
        d->values = tide_xcalloc(d->n, sizeof(double));
        d->cum = tide_xcalloc(d->n, sizeof(double));
        for (size_t i = 0; i < d->n; i++) {
            const cJSON *x = cJSON_GetArrayItem(vals, (int)i);
            const cJSON *y = w ? cJSON_GetArrayItem(w, (int)i) : NULL;
            char r[320];
            join(q, sizeof(q), p, "values");
            join_index(r, sizeof(r), q, i);
            if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || x->valuedouble < mn ||
                x->valuedouble > mx || (integer && x->valuedouble != floor(x->valuedouble))) {
                tide_errprintf(err, "%s: expected %s between %g and %g", r, what, mn, mx);
                return -EINVAL;
            }
            d->values[i] = x->valuedouble;
            if (y && (!cJSON_IsNumber(y) || !isfinite(y->valuedouble) || y->valuedouble < 0)) {
                join(q, sizeof(q), p, "weights");
                join_index(r, sizeof(r), q, i);
                tide_errprintf(err, "%s: expected a number >= 0", r);
                return -EINVAL;
            }
            total += y ? y->valuedouble : 1.0;
            d->cum[i] = total;
        }
        if (!(total > 0)) {
            join(q, sizeof(q), p, "weights");
            tide_errprintf(err, "%s: at least one weight must be > 0", q);
            return -EINVAL;
        }
    } else {
        join(q, sizeof(q), p, "dist");
        tide_errprintf(err,
                       "%s: \"%s\" is not one of \"fixed\", \"uniform\", \"exponential\", "
                       "\"lognormal\", \"choice\"",
                       q, kind->valuestring);
        return -EINVAL;
    }
#undef ONLY
    if (integer && (d->kind == TIDE_DIST_FIXED) && d->a != floor(d->a)) {
        join(q, sizeof(q), p, "value");
        tide_errprintf(err, "%s: expected %s", q, what);
        return -EINVAL;
    }
    return 0;
}

double tide_dist_draw(const tide_dist_t *d, tide_rng_t *r)
{
    double x = d->a;

    switch (d->kind) {
    case TIDE_DIST_FIXED:
        break;
    case TIDE_DIST_UNIFORM:
        x = d->a + (d->b - d->a) * tide_rng_uniform(r);
        break;
    case TIDE_DIST_EXPONENTIAL:
        x = tide_rng_exp(r, d->a);
        break;
    case TIDE_DIST_LOGNORMAL:
        /* mean a of the lognormal itself: mu = ln(a) - sigma^2 / 2 */
        x = exp(log(d->a) - d->b * d->b / 2 + d->b * tide_rng_normal(r));
        break;
    case TIDE_DIST_CHOICE: {
        double u = tide_rng_uniform(r) * d->cum[d->n - 1];
        size_t i = 0;
        while (i + 1 < d->n && u >= d->cum[i])
            i++;
        x = d->values[i];
        break;
    }
    }
    if (x < d->min)
        x = d->min;
    if (x > d->max)
        x = d->max;
    return x;
}

double tide_dist_mean(const tide_dist_t *d)
{
    switch (d->kind) {
    case TIDE_DIST_UNIFORM:
        return (d->a + d->b) / 2;
    case TIDE_DIST_CHOICE: {
        double s = 0, prev = 0;
        for (size_t i = 0; i < d->n; i++) {
            s += d->values[i] * (d->cum[i] - prev);
            prev = d->cum[i];
        }
        return s / d->cum[d->n - 1];
    }
    default:
        return d->a;
    }
}

/* --- sections --- */

static int parse_cluster(const cJSON *c, tide_scenario_t *sc, tide_error_t *err)
{
    static const char *const keys[] = {"gpus_per_node", "nodes_per_rack", "racks_per_switch",
                                       "groups", NULL};
    static const char *const gkeys[] = {"gpus", "device",   "peak_tflops", "memory_gib",
                                        "pool", "new_arch", NULL};
    const cJSON *groups;
    int64_t v;
    int rc;

    if (!c) {
        tide_errprintf(err, "cluster: required");
        return -EINVAL;
    }
    if ((rc = check_object(c, "cluster", keys, err)) < 0)
        return rc;
    if ((rc = get_int(c, "cluster", "gpus_per_node", 8, 1, 64, &v, err)) < 0)
        return rc;
    sc->gpus_per_node = (int32_t)v;
    if ((rc = get_int(c, "cluster", "nodes_per_rack", 4, 1, 4096, &v, err)) < 0)
        return rc;
    sc->nodes_per_rack = (int32_t)v;
    if ((rc = get_int(c, "cluster", "racks_per_switch", 16, 1, 4096, &v, err)) < 0)
        return rc;
    sc->racks_per_switch = (int32_t)v;
    groups = item(c, "groups");
    if (!cJSON_IsArray(groups) || cJSON_GetArraySize(groups) == 0) {
        tide_errprintf(err, "cluster.groups: expected a non-empty array");
        return -EINVAL;
    }
    sc->n_groups = (size_t)cJSON_GetArraySize(groups);
    sc->groups = tide_xcalloc(sc->n_groups, sizeof(*sc->groups));
    for (size_t i = 0; i < sc->n_groups; i++) {
        const cJSON *g = cJSON_GetArrayItem(groups, (int)i);
        tide_sim_group_t *gr = &sc->groups[i];
        char p[64], q[96], *dev = NULL, *pool = NULL;
        const tide_gpu_model_t *m;
        double tf, mem;

        join_index(p, sizeof(p), "cluster.groups", i);
        if ((rc = check_object(g, p, gkeys, err)) < 0)
            return rc;
        if (!item(g, "gpus")) {
            join(q, sizeof(q), p, "gpus");
            tide_errprintf(err, "%s: required", q);
            return -EINVAL;
        }
        if ((rc = get_int(g, p, "gpus", 0, 1, 1 << 20, &v, err)) < 0)
            return rc;
        if (v % sc->gpus_per_node) {
            join(q, sizeof(q), p, "gpus");
            tide_errprintf(
                err, "%s: %lld is not a whole number of nodes of %d GPUs (cluster.gpus_per_node)",
                q, (long long)v, sc->gpus_per_node);
            return -EINVAL;
        }
        gr->gpus = (int32_t)v;
        if ((rc = get_str(g, p, "device", "h100", 48, &dev, err)) < 0)
            return rc;
        m = tide_gpu_sim_model_find(dev);
        snprintf(gr->device, sizeof(gr->device), "%s%s",
                 strncmp(dev, "sim:", 4) == 0 ? "" : "sim:", dev);
        free(dev);
        if (!m && (!item(g, "peak_tflops") || !item(g, "memory_gib"))) {
            char list[128];
            tide_gpu_sim_model_list(list, sizeof(list));
            join(q, sizeof(q), p, "device");
            tide_errprintf(
                err, "%s: unknown model (known: %s); give peak_tflops and memory_gib for another",
                q, list);
            return -EINVAL;
        }
        if ((rc = get_pos(g, p, "peak_tflops", m ? m->peak_flops / 1e12 : 1, &tf, err)) < 0 ||
            (rc = get_pos(g, p, "memory_gib", m ? (double)m->memory_bytes / GIB : 1, &mem, err)) <
                0)
            return rc;
        gr->peak_flops = tf * 1e12;
        gr->memory_bytes = (uint64_t)llround(mem * GIB);
        if ((rc = get_str(g, p, "pool", "", TIDE_POOL_NAME_MAX, &pool, err)) < 0)
            return rc;
        if (pool[0] && !pool_name_ok(pool)) {
            join(q, sizeof(q), p, "pool");
            tide_errprintf(err, "%s: \"%s\": only letters, digits, '-', '_' and '.'", q, pool);
            free(pool);
            return -EINVAL;
        }
        snprintf(gr->pool, sizeof(gr->pool), "%s", pool);
        free(pool);
        if ((rc = get_bool(g, p, "new_arch", false, &gr->new_arch, err)) < 0)
            return rc;
        sc->total_gpus += gr->gpus;
        if (sc->total_gpus > (1 << 20)) {
            tide_errprintf(err, "cluster.groups: more than %d GPUs in all", 1 << 20);
            return -EINVAL;
        }
    }
    return 0;
}

static int parse_pools(const cJSON *a, tide_scenario_t *sc, tide_error_t *err)
{
    static const char *const keys[] = {"name", "dedicated", NULL};
    int rc;

    if (!a)
        return 0;
    if (!cJSON_IsArray(a)) {
        tide_errprintf(err, "pools: expected an array");
        return -EINVAL;
    }
    if (cJSON_GetArraySize(a) > 16) {
        tide_errprintf(err, "pools: at most 16");
        return -EINVAL;
    }
    for (int i = 0; i < cJSON_GetArraySize(a); i++) {
        const cJSON *o = cJSON_GetArrayItem(a, i);
        char p[32], q[64], *name = NULL, *ded = NULL;
        int32_t prio = -1;

        join_index(p, sizeof(p), "pools", (size_t)i);
        if ((rc = check_object(o, p, keys, err)) < 0)
            return rc;
        join(q, sizeof(q), p, "name");
        if (!item(o, "name")) {
            tide_errprintf(err, "%s: required", q);
            return -EINVAL;
        }
        if ((rc = get_str(o, p, "name", "", TIDE_POOL_NAME_MAX, &name, err)) < 0)
            return rc;
        if (!pool_name_ok(name)) {
            tide_errprintf(err, "%s: \"%s\": 1-%d letters, digits, '-', '_' or '.'", q, name,
                           TIDE_POOL_NAME_MAX);
            free(name);
            return -EINVAL;
        }
        if ((rc = get_str(o, p, "dedicated", "shared", 16, &ded, err)) < 0) {
            free(name);
            return rc;
        }
        if (strcmp(ded, "shared") != 0 && parse_prio(ded, &prio) < 0) {
            join(q, sizeof(q), p, "dedicated");
            tide_errprintf(
                err, "%s: expected \"shared\", \"CRITICAL\", \"HIGH\", \"NORMAL\" or \"LOW\"", q);
            free(name);
            free(ded);
            return -EINVAL;
        }
        for (size_t k = 0; k < sc->n_pools; k++) {
            if (strcmp(sc->pools[k].name, name) == 0) {
                tide_errprintf(err, "%s: pool \"%s\" named twice", q, name);
                free(name);
                free(ded);
                return -EINVAL;
            }
        }
        snprintf(sc->pools[sc->n_pools].name, sizeof(sc->pools[0].name), "%s", name);
        sc->pools[sc->n_pools].dedicated = prio;
        sc->n_pools++;
        free(name);
        free(ded);
    }
    return 0;
}

static int parse_policy(const cJSON *o, tide_scenario_t *sc, tide_error_t *err)
{
    static const char *const keys[] = {"aging_min", "preemption",       "preempt_grace_s",
                                       "reserve",   "reserve_quantile", "reserve_min_cluster",
                                       "checkpoint_interval_min", NULL};
    const cJSON *r;
    double x;
    int64_t v;
    int rc;

    if (o && (rc = check_object(o, "policy", keys, err)) < 0)
        return rc;
    if ((rc = get_num(o, "policy", "aging_min", 30, 0, 1e7, &x, err)) < 0)
        return rc;
    sc->aging_ms = (int64_t)llround(x * 60000);
    if ((rc = get_bool(o, "policy", "preemption", true, &sc->preemption, err)) < 0)
        return rc;
    if ((rc = get_num(o, "policy", "preempt_grace_s", 30, 0, 86400, &x, err)) < 0)
        return rc;
    sc->preempt_grace_ms = (int64_t)llround(x * 1000);
    r = item(o, "reserve");
    sc->reserve_gpus = -1;
    if (r && !(cJSON_IsString(r) && strcmp(r->valuestring, "auto") == 0)) {
        if (!cJSON_IsNumber(r) || r->valuedouble != floor(r->valuedouble) || r->valuedouble < 0 ||
            r->valuedouble > (1 << 20)) {
            tide_errprintf(err, "policy.reserve: expected \"auto\" or an integer >= 0 (GPUs)");
            return -EINVAL;
        }
        sc->reserve_gpus = (int32_t)r->valuedouble;
    }
    if ((rc = get_num(o, "policy", "reserve_quantile", 0.99, 0.5, 0.999999, &sc->reserve_quantile,
                      err)) < 0)
        return rc;
    if ((rc = get_int(o, "policy", "reserve_min_cluster", 16, 0, 1 << 20, &v, err)) < 0)
        return rc;
    sc->reserve_min_cluster = (int32_t)v;
    /* tide's checkpoint cadence (docs/fault-tolerance.md): the scheduler's default, 0 turns it off */
    if ((rc = get_num(o, "policy", "checkpoint_interval_min", 10, 0, 1e6, &x, err)) < 0)
        return rc;
    sc->ckpt_interval_ms = (int64_t)llround(x * 60000);
    if (sc->ckpt_interval_ms > 0 && sc->ckpt_interval_ms < TIDE_CKPT_INTERVAL_MIN_S * 1000) {
        tide_errprintf(err, "policy.checkpoint_interval_min: expected 0 (off) or at least %g",
                       TIDE_CKPT_INTERVAL_MIN_S / 60.0);
        return -EINVAL;
    }
    return 0;
}

static int parse_gate_storage(const cJSON *g, const cJSON *s, tide_scenario_t *sc,
                              tide_error_t *err)
{
    static const char *const gkeys[] = {"enabled", "mfu_threshold", "deadline_min", "check_s",
                                        NULL};
    static const char *const skeys[] = {"durable", "mirrored_hot_tier", "durable_gbps_per_gpu",
                                        "copy_interference", NULL};
    double x;
    int rc;

    if (g && (rc = check_object(g, "gate", gkeys, err)) < 0)
        return rc;
    if ((rc = get_bool(g, "gate", "enabled", true, &sc->gate, err)) < 0 ||
        (rc = get_num(g, "gate", "mfu_threshold", 0.30, 0, 1, &sc->gate_threshold, err)) < 0)
        return rc;
    if ((rc = get_pos(g, "gate", "deadline_min", 30, &x, err)) < 0)
        return rc;
    sc->gate_deadline_ms = (int64_t)llround(x * 60000);
    if ((rc = get_num(g, "gate", "check_s", 60, 1, 86400, &x, err)) < 0)
        return rc;
    sc->gate_check_ms = (int64_t)llround(x * 1000);
    if (s && (rc = check_object(s, "storage", skeys, err)) < 0)
        return rc;
    if ((rc = get_bool(s, "storage", "durable", true, &sc->durable, err)) < 0 ||
        (rc = get_bool(s, "storage", "mirrored_hot_tier", false, &sc->mirrored, err)) < 0 ||
        (rc = get_pos(s, "storage", "durable_gbps_per_gpu", 0.125, &x, err)) < 0)
        return rc;
    sc->durable_bps_per_gpu = x * 1e9;
    if ((rc = get_num(s, "storage", "copy_interference", 0.10, 0, 0.99, &sc->interference, err)) <
        0)
        return rc;
    return 0;
}

static int parse_faults(const cJSON *o, tide_scenario_t *sc, tide_error_t *err)
{
    static const char *const keys[] = {
        "per_1000_gpu_month", "per_gpu_hour", "observed", "replacement_lead_h",
        "new_arch",           "precursor",    NULL};
    static const char *const okeys[] = {"failures", "gpus", "days", NULL};
    static const char *const nkeys[] = {"multiplier", "ref_mfu",    "ratio",
                                        "per_mfu",    "min_factor", NULL};
    static const char *const pkeys[] = {"fraction", "lead_min", "predict", NULL};
    const cJSON *obs, *na, *pc;
    int forms;
    double x;
    int rc;

    if (o && (rc = check_object(o, "faults", keys, err)) < 0)
        return rc;
    obs = item(o, "observed");
    forms =
        (item(o, "per_1000_gpu_month") != NULL) + (item(o, "per_gpu_hour") != NULL) + (obs != NULL);
    if (forms > 1) {
        tide_errprintf(err, "faults: give one of per_1000_gpu_month, per_gpu_hour and observed");
        return -EINVAL;
    }
    if (item(o, "per_gpu_hour")) {
        if ((rc = get_num(o, "faults", "per_gpu_hour", 0, 0, 1, &sc->fail_rate, err)) < 0)
            return rc;
    } else if (obs) {
        double f, g, d;
        if ((rc = check_object(obs, "faults.observed", okeys, err)) < 0)
            return rc;
        if (!item(obs, "failures") || !item(obs, "gpus") || !item(obs, "days")) {
            tide_errprintf(err, "faults.observed: needs failures, gpus and days");
            return -EINVAL;
        }
        if ((rc = get_num(obs, "faults.observed", "failures", 0, 0, 1e12, &f, err)) < 0 ||
            (rc = get_pos(obs, "faults.observed", "gpus", 1, &g, err)) < 0 ||
            (rc = get_pos(obs, "faults.observed", "days", 1, &d, err)) < 0)
            return rc;
        sc->fail_rate = f / (g * d * 24.0);
    } else {
        /* A month is 730 hours, as in the core's default. */
        if ((rc = get_num(o, "faults", "per_1000_gpu_month", 3, 0, 1e6, &x, err)) < 0)
            return rc;
        sc->fail_rate = x / (1000.0 * 730.0);
    }
    if ((rc = get_num(o, "faults", "replacement_lead_h", 4, 0, 1e5, &sc->lead_h, err)) < 0)
        return rc;
    na = item(o, "new_arch");
    if (na && (rc = check_object(na, "faults.new_arch", nkeys, err)) < 0)
        return rc;
    if ((rc = get_num(na, "faults.new_arch", "multiplier", 1, 0, 1e6, &sc->new_arch_mult, err)) <
            0 ||
        (rc = get_num(na, "faults.new_arch", "ref_mfu", 0.5, 0, 1, &sc->curve_ref, err)) < 0 ||
        (rc = get_num(na, "faults.new_arch", "ratio", 3, 1, 1e6, &sc->curve_ratio, err)) < 0 ||
        (rc = get_pos(na, "faults.new_arch", "per_mfu", 0.2, &sc->curve_per, err)) < 0 ||
        (rc = get_num(na, "faults.new_arch", "min_factor", 0.25, 0, 1, &sc->curve_min, err)) < 0)
        return rc;
    pc = item(o, "precursor");
    if (pc && (rc = check_object(pc, "faults.precursor", pkeys, err)) < 0)
        return rc;
    if ((rc = get_num(pc, "faults.precursor", "fraction", 0, 0, 1, &sc->precursor_fraction, err)) <
            0 ||
        (rc = get_num(pc, "faults.precursor", "lead_min", 30, 0, 1e6, &x, err)) < 0 ||
        (rc = get_bool(pc, "faults.precursor", "predict", false, &sc->precursor_predict, err)) < 0)
        return rc;
    sc->precursor_lead_s = x * 60;
    return 0;
}

static int parse_timing(const cJSON *t, const cJSON *pu, tide_scenario_t *sc, tide_error_t *err)
{
    static const char *const tkeys[] = {"start_delay_s", "stop_delay_s", "telemetry_s", "sample_s",
                                        NULL};
    static const char *const pkeys[] = {"period", "length", "factor", NULL};
    double a, b, c, d;
    int64_t v;
    int rc;

    if (t && (rc = check_object(t, "timing", tkeys, err)) < 0)
        return rc;
    if ((rc = get_num(t, "timing", "start_delay_s", 60, 0, 86400, &a, err)) < 0 ||
        (rc = get_num(t, "timing", "stop_delay_s", 10, 0, 86400, &b, err)) < 0 ||
        (rc = get_num(t, "timing", "telemetry_s", 60, 1, 86400, &c, err)) < 0 ||
        (rc = get_num(t, "timing", "sample_s", 300, 1, 86400, &d, err)) < 0)
        return rc;
    sc->start_delay_ms = (int64_t)llround(a * 1000);
    sc->stop_delay_ms = (int64_t)llround(b * 1000);
    sc->telemetry_ms = (int64_t)llround(c * 1000);
    sc->sample_ms = (int64_t)llround(d * 1000);
    if (pu && (rc = check_object(pu, "pulse", pkeys, err)) < 0)
        return rc;
    if ((rc = get_int(pu, "pulse", "period", 100, 1, 1000000, &v, err)) < 0)
        return rc;
    sc->pulse_period = (int32_t)v;
    if ((rc = get_int(pu, "pulse", "length", 10, 0, sc->pulse_period, &v, err)) < 0)
        return rc;
    sc->pulse_length = (int32_t)v;
    if ((rc = get_num(pu, "pulse", "factor", 5, 1, 1000, &sc->pulse_factor, err)) < 0)
        return rc;
    return 0;
}

static int parse_class(const cJSON *o, const char *p, tide_scenario_t *sc, tide_sim_class_t *c,
                       tide_error_t *err)
{
    static const char *const keys[] = {
        "name",         "priority",    "arrivals_per_day", "initial",
        "at_h",         "gpus",        "min_fraction",     "duration_h",
        "gpu_hours",    "steps",       "topology",         "memory_per_rank_gib",
        "pool",         "device",      "base_load",        "adaptive_target",
        "nominal_load", "step_peak_s", "checkpoint",       "eval",
        "gate",         NULL};
    static const char *const ckeys[] = {"every_min", "write_s", "gb_per_gpu", NULL};
    static const char *const ekeys[] = {"every_min", "duration_min", "mfu", NULL};
    static const char *const gkeys[] = {"mfu_threshold", "deadline_min", NULL};
    static const char *const topo[] = {"any", "node", "rack", "switch"};
    char q[320], cp[320], *s = NULL;
    const cJSON *v, *ck, *ev, *gt;
    int32_t prio;
    int64_t n;
    double x;
    int forms, rc;

    if ((rc = check_object(o, p, keys, err)) < 0)
        return rc;
    join(q, sizeof(q), p, "name");
    if (!item(o, "name")) {
        tide_errprintf(err, "%s: required", q);
        return -EINVAL;
    }
    if ((rc = get_str(o, p, "name", "", 63, &c->name, err)) < 0)
        return rc;
    if (!c->name[0]) {
        tide_errprintf(err, "%s: must not be empty", q);
        return -EINVAL;
    }
    join(q, sizeof(q), p, "priority");
    v = item(o, "priority");
    if (!v) {
        tide_errprintf(err, "%s: required", q);
        return -EINVAL;
    }
    if (!cJSON_IsString(v) || parse_prio(v->valuestring, &prio) < 0) {
        tide_errprintf(err, "%s: expected \"CRITICAL\", \"HIGH\", \"NORMAL\" or \"LOW\"", q);
        return -EINVAL;
    }
    c->priority = (tide_prio_t)prio;
    if ((rc = get_num(o, p, "arrivals_per_day", 0, 0, 1e7, &x, err)) < 0)
        return rc;
    c->arrivals_per_h = x / 24.0;
    if ((rc = get_int(o, p, "initial", 0, 0, 1000000, &n, err)) < 0)
        return rc;
    c->initial = (int32_t)n;
    v = item(o, "at_h");
    if (v) {
        join(q, sizeof(q), p, "at_h");
        if (!cJSON_IsArray(v)) {
            tide_errprintf(err, "%s: expected an array of hours", q);
            return -EINVAL;
        }
        c->n_at = (size_t)cJSON_GetArraySize(v);
        c->at_s = tide_xcalloc(c->n_at + 1, sizeof(double));
        for (size_t i = 0; i < c->n_at; i++) {
            const cJSON *x2 = cJSON_GetArrayItem(v, (int)i);
            char r[340];
            join_index(r, sizeof(r), q, i);
            if (!cJSON_IsNumber(x2) || !isfinite(x2->valuedouble) || x2->valuedouble < 0) {
                tide_errprintf(err, "%s: expected a number of hours >= 0", r);
                return -EINVAL;
            }
            c->at_s[i] = x2->valuedouble * 3600;
        }
    }
    if ((rc = get_dist(o, p, "gpus", false, 0, 1, 65536, true, &c->gpus, err)) < 0)
        return rc;
    if (c->gpus.min > sc->total_gpus) {
        join(q, sizeof(q), p, "gpus");
        tide_errprintf(err, "%s: every job would need more than the cluster's %d GPUs", q,
                       sc->total_gpus);
        return -EINVAL;
    }
    if ((rc = get_num(o, p, "min_fraction", 1, 0.0001, 1, &c->min_fraction, err)) < 0)
        return rc;
    forms = (item(o, "duration_h") != NULL) + (item(o, "gpu_hours") != NULL) +
            (item(o, "steps") != NULL);
    if (forms != 1) {
        tide_errprintf(err, "%s: give exactly one of duration_h, gpu_hours and steps", p);
        return -EINVAL;
    }
    if (item(o, "duration_h")) {
        c->dur_kind = TIDE_DUR_HOURS;
        rc = get_dist(o, p, "duration_h", false, 0, 1e-6, 1e6, false, &c->duration, err);
    } else if (item(o, "gpu_hours")) {
        c->dur_kind = TIDE_DUR_GPU_HOURS;
        rc = get_dist(o, p, "gpu_hours", false, 0, 1e-6, 1e12, false, &c->duration, err);
    } else {
        c->dur_kind = TIDE_DUR_STEPS;
        rc = get_dist(o, p, "steps", false, 0, 1, 1e15, true, &c->duration, err);
    }
    if (rc < 0)
        return rc;
    if ((rc = get_str(o, p, "topology", "any", 16, &s, err)) < 0)
        return rc;
    forms = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(s, topo[i]) == 0)
            forms = i;
    free(s);
    c->topology = forms < 0 ? TIDE_TOPO_ANY : (tide_topology_t)forms;
    if (forms < 0) {
        join(q, sizeof(q), p, "topology");
        tide_errprintf(err, "%s: expected \"any\", \"node\", \"rack\" or \"switch\"", q);
        return -EINVAL;
    }
    if ((rc = get_num(o, p, "memory_per_rank_gib", 0, 0, 1 << 20, &x, err)) < 0)
        return rc;
    c->memory_per_rank = (uint64_t)llround(x * GIB);
    if ((rc = get_str(o, p, "pool", "", TIDE_POOL_NAME_MAX, &c->pool, err)) < 0 ||
        (rc = get_str(o, p, "device", "", 64, &c->device, err)) < 0)
        return rc;
    if (c->pool[0]) {
        bool known = false;
        for (size_t i = 0; i < sc->n_groups; i++)
            known |= strcmp(sc->groups[i].pool, c->pool) == 0;
        if (!known) {
            join(q, sizeof(q), p, "pool");
            tide_errprintf(err, "%s: no cluster group carries pool \"%s\"", q, c->pool);
            return -EINVAL;
        }
        for (size_t i = 0; i < sc->n_pools; i++) {
            if (strcmp(sc->pools[i].name, c->pool) == 0 && sc->pools[i].dedicated >= 0 &&
                sc->pools[i].dedicated != (int32_t)c->priority) {
                join(q, sizeof(q), p, "pool");
                tide_errprintf(err, "%s: pool \"%s\" is dedicated to %s jobs; this class is %s", q,
                               c->pool, tide_prio_name((tide_prio_t)sc->pools[i].dedicated),
                               tide_prio_name(c->priority));
                return -EINVAL;
            }
        }
    }
    v = item(o, "base_load");
    if (cJSON_IsString(v) && strcmp(v->valuestring, "target") == 0) {
        c->load_target = true;
        c->base_load.kind = TIDE_DIST_FIXED;
        c->base_load.a = 0.5;
        c->base_load.min = 0.01;
        c->base_load.max = 1;
    } else if (cJSON_IsString(v)) {
        join(q, sizeof(q), p, "base_load");
        tide_errprintf(err, "%s: expected a number in (0, 1], a distribution or \"target\"", q);
        return -EINVAL;
    } else if ((rc = get_dist(o, p, "base_load", true, 0.5, 0.01, 1, false, &c->base_load, err)) <
               0) {
        return rc;
    }
    if (item(o, "nominal_load") && !c->load_target) {
        join(q, sizeof(q), p, "nominal_load");
        tide_errprintf(
            err,
            "%s: only with \"base_load\": \"target\" (a numeric base load is its own nominal load)",
            q);
        return -EINVAL;
    }
    if ((rc = get_num(o, p, "nominal_load", 0.5, 0.01, 1, &c->nominal_load, err)) < 0)
        return rc;
    if ((rc = get_bool(o, p, "adaptive_target", false, &c->adaptive_target, err)) < 0 ||
        (rc = get_pos(o, p, "step_peak_s", 1.0, &c->step_peak_s, err)) < 0)
        return rc;
    join(cp, sizeof(cp), p, "checkpoint");
    ck = item(o, "checkpoint");
    if (ck && (rc = check_object(ck, cp, ckeys, err)) < 0)
        return rc;
    if ((rc = get_num(ck, cp, "every_min", 30, 0, 1e6, &x, err)) < 0)
        return rc;
    c->ckpt_every_s = x * 60;
    if ((rc = get_num(ck, cp, "write_s", 10, 0, 86400, &c->ckpt_write_s, err)) < 0 ||
        (rc = get_num(ck, cp, "gb_per_gpu", 4, 0, 1e6, &x, err)) < 0)
        return rc;
    c->ckpt_bytes_per_gpu = x * 1e9;
    join(cp, sizeof(cp), p, "eval");
    ev = item(o, "eval");
    if (ev && (rc = check_object(ev, cp, ekeys, err)) < 0)
        return rc;
    if ((rc = get_num(ev, cp, "every_min", 0, 0, 1e6, &x, err)) < 0)
        return rc;
    c->eval_every_s = x * 60;
    if ((rc = get_num(ev, cp, "duration_min", 5, 0, 1e6, &x, err)) < 0)
        return rc;
    c->eval_s = x * 60;
    if ((rc = get_num(ev, cp, "mfu", 0.10, 0, 1, &c->eval_mfu, err)) < 0)
        return rc;
    join(cp, sizeof(cp), p, "gate");
    gt = item(o, "gate");
    if (gt && (rc = check_object(gt, cp, gkeys, err)) < 0)
        return rc;
    if ((rc = get_num(gt, cp, "mfu_threshold", 0, 0, 1, &c->ckpt_mfu_threshold, err)) < 0 ||
        (rc = get_num(gt, cp, "deadline_min", 0, 0, (double)TIDE_TIME_LIMIT_MAX_S / 60, &x, err)) <
            0)
        return rc;
    c->ckpt_deadline_s = (int64_t)llround(x * 60);
    return 0;
}

static int parse_workload(const cJSON *o, tide_scenario_t *sc, tide_error_t *err)
{
    static const char *const keys[] = {"classes", NULL};
    const cJSON *cls;
    int rc;

    if (!o) {
        tide_errprintf(err, "workload: required");
        return -EINVAL;
    }
    if ((rc = check_object(o, "workload", keys, err)) < 0)
        return rc;
    cls = item(o, "classes");
    if (!cJSON_IsArray(cls) || cJSON_GetArraySize(cls) == 0) {
        tide_errprintf(err, "workload.classes: expected a non-empty array");
        return -EINVAL;
    }
    sc->n_classes = (size_t)cJSON_GetArraySize(cls);
    sc->classes = tide_xcalloc(sc->n_classes, sizeof(*sc->classes));
    for (size_t i = 0; i < sc->n_classes; i++) {
        char p[64];
        join_index(p, sizeof(p), "workload.classes", i);
        if ((rc = parse_class(cJSON_GetArrayItem(cls, (int)i), p, sc, &sc->classes[i], err)) < 0)
            return rc;
        for (size_t k = 0; k < i; k++) {
            if (strcmp(sc->classes[k].name, sc->classes[i].name) == 0) {
                tide_errprintf(err, "%s.name: \"%s\" is also the name of workload.classes[%zu]", p,
                               sc->classes[i].name, k);
                return -EINVAL;
            }
        }
    }
    return 0;
}

/* --- overrides --- */

/* One step of an override path: a key of an object or an index of an array. */
typedef struct seg {
    char key[64];
    long index; /* -1: a key */
} seg_t;

static int split_path(const char *path, size_t len, seg_t *segs, size_t max, size_t *n)
{
    size_t i = 0;

    *n = 0;
    while (i < len) {
        seg_t *s;
        if (*n == max)
            return -EINVAL;
        s = &segs[(*n)++];
        if (path[i] == '[') {
            char *end;
            s->key[0] = '\0';
            s->index = strtol(path + i + 1, &end, 10);
            if (end == path + i + 1 || *end != ']' || s->index < 0)
                return -EINVAL;
            i = (size_t)(end - path) + 1;
        } else {
            size_t k = 0;
            s->index = -1;
            while (i < len && path[i] != '.' && path[i] != '[') {
                if (k + 1 >= sizeof(s->key))
                    return -EINVAL;
                s->key[k++] = path[i++];
            }
            s->key[k] = '\0';
            if (k == 0)
                return -EINVAL;
        }
        if (i < len && path[i] == '.') {
            i++;
            if (i == len || path[i] == '[' || path[i] == '.')
                return -EINVAL;
        }
    }
    return *n ? 0 : -EINVAL;
}

/* Keys of which an object may hold one: setting one drops the others (so --set
 * faults.per_gpu_hour=... works on a scenario that gives per_1000_gpu_month). */
static const char *const alternatives[][3] = {
    {"per_1000_gpu_month", "per_gpu_hour", "observed"},
    {"duration_h", "gpu_hours", "steps"},
};

static void drop_alternatives(cJSON *obj, const char *key)
{
    for (size_t g = 0; g < sizeof(alternatives) / sizeof(alternatives[0]); g++) {
        bool member = false;
        for (size_t k = 0; k < 3; k++)
            member |= strcmp(alternatives[g][k], key) == 0;
        if (!member)
            continue;
        for (size_t k = 0; k < 3; k++)
            if (strcmp(alternatives[g][k], key) != 0)
                cJSON_DeleteItemFromObjectCaseSensitive(obj, alternatives[g][k]);
    }
}

int tide_scenario_set(cJSON *root, const char *assignment, tide_error_t *err)
{
    const char *eq = strchr(assignment, '=');
    seg_t segs[16];
    size_t n = 0;
    cJSON *cur = root, *val = NULL;
    int rc = -EINVAL;

    if (!eq || split_path(assignment, (size_t)(eq - assignment), segs, 16, &n) < 0) {
        tide_errprintf(
            err,
            "--set %s: expected PATH=VALUE, PATH like gate.enabled or workload.classes[0].gpus",
            assignment);
        return -EINVAL;
    }
    val = cJSON_Parse(eq + 1);
    if (!val)
        val = cJSON_CreateString(eq + 1);
    for (size_t i = 0; i < n; i++) {
        bool last = i + 1 == n;
        if (segs[i].index < 0) {
            cJSON *next;
            if (!cJSON_IsObject(cur)) {
                tide_errprintf(err, "--set %s: \"%s\" is not inside an object", assignment,
                               segs[i].key);
                goto done;
            }
            next = cJSON_GetObjectItemCaseSensitive(cur, segs[i].key);
            if (last) {
                drop_alternatives(cur, segs[i].key);
                if (next)
                    cJSON_ReplaceItemInObjectCaseSensitive(cur, segs[i].key, val);
                else
                    cJSON_AddItemToObject(cur, segs[i].key, val);
                val = NULL;
                break;
            }
            if (!next) {
                if (segs[i + 1].index >= 0) {
                    tide_errprintf(err, "--set %s: there is no array \"%s\" to index", assignment,
                                   segs[i].key);
                    goto done;
                }
                next = cJSON_CreateObject();
                cJSON_AddItemToObject(cur, segs[i].key, next);
            }
            cur = next;
        } else {
            if (!cJSON_IsArray(cur) || segs[i].index >= cJSON_GetArraySize(cur)) {
                tide_errprintf(
                    err, "--set %s: index [%ld] is past the end of the array (or not an array)",
                    assignment, segs[i].index);
                goto done;
            }
            if (last) {
                cJSON_ReplaceItemInArray(cur, (int)segs[i].index, val);
                val = NULL;
                break;
            }
            cur = cJSON_GetArrayItem(cur, (int)segs[i].index);
        }
    }
    rc = 0;
done:
    cJSON_Delete(val);
    return rc;
}

/* --- top level --- */

static void line_of(const char *text, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = text; p < at && *p; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

int tide_scenario_parse(const char *text, const char *const *sets, size_t n_sets,
                        tide_scenario_t *sc, tide_error_t *err)
{
    static const char *const keys[] = {"name",   "description", "seed",     "days",    "cluster",
                                       "pools",  "policy",      "gate",     "storage", "faults",
                                       "timing", "pulse",       "workload", NULL};
    const char *end = NULL;
    cJSON *root;
    int64_t v;
    int rc;

    memset(sc, 0, sizeof(*sc));
    root = cJSON_ParseWithOpts(text, &end, true);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        int line, col;
        line_of(text, at ? at : text, &line, &col);
        tide_errprintf(err, "line %d, column %d: JSON syntax error", line, col);
        return -EINVAL;
    }
    for (size_t i = 0; i < n_sets; i++)
        if ((rc = tide_scenario_set(root, sets[i], err)) < 0)
            goto done;
    if ((rc = check_object(root, "", keys, err)) < 0)
        goto done;
    if ((rc = get_str(root, "", "name", "scenario", 128, &sc->name, err)) < 0)
        goto done;
    if (item(root, "description") && !cJSON_IsString(item(root, "description"))) {
        tide_errprintf(err, "description: expected a string");
        rc = -EINVAL;
        goto done;
    }
    if ((rc = get_int(root, "", "seed", 1, 0, (int64_t)1 << 53, &v, err)) < 0)
        goto done;
    sc->seed = (uint64_t)v;
    if ((rc = get_num(root, "", "days", 30, 0.001, 3650, &sc->days, err)) < 0)
        goto done;
    if ((rc = parse_cluster(item(root, "cluster"), sc, err)) < 0 ||
        (rc = parse_pools(item(root, "pools"), sc, err)) < 0 ||
        (rc = parse_policy(item(root, "policy"), sc, err)) < 0 ||
        (rc = parse_gate_storage(item(root, "gate"), item(root, "storage"), sc, err)) < 0 ||
        (rc = parse_faults(item(root, "faults"), sc, err)) < 0 ||
        (rc = parse_timing(item(root, "timing"), item(root, "pulse"), sc, err)) < 0 ||
        (rc = parse_workload(item(root, "workload"), sc, err)) < 0)
        goto done;
    if (sc->telemetry_ms > 3 * sc->gate_check_ms) {
        /* The core trusts a job's MFU report for 3 gate checks; staler, it reads the MFU as
         * unknown. */
        tide_errprintf(err, "timing.telemetry_s: at most 3 x gate.check_s (%.0f s)",
                       3.0 * (double)sc->gate_check_ms / 1000);
        rc = -EINVAL;
        goto done;
    }
done:
    cJSON_Delete(root);
    if (rc < 0)
        tide_scenario_free(sc);
    return rc;
}

int tide_scenario_load(const char *path, const char *const *sets, size_t n_sets,
                       tide_scenario_t *sc, tide_error_t *err)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t len = 0, cap = 0, n;
    int rc;

    memset(sc, 0, sizeof(*sc));
    if (!f) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", path, strerror(errno));
        return rc;
    }
    do {
        if (cap - len < 65536) {
            cap = cap ? cap * 2 : 65536;
            if (cap > (64u << 20)) {
                fclose(f);
                free(text);
                tide_errprintf(err, "%s: larger than 64 MiB", path);
                return -EFBIG;
            }
            text = tide_xrealloc(text, cap + 1);
        }
        n = fread(text + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    if (ferror(f)) {
        rc = -EIO;
        tide_errprintf(err, "%s: read error", path);
        fclose(f);
        free(text);
        return rc;
    }
    fclose(f);
    text[len] = '\0';
    if (strlen(text) != len) {
        tide_errprintf(err, "%s: contains a NUL byte", path);
        free(text);
        return -EINVAL;
    }
    rc = tide_scenario_parse(text, sets, n_sets, sc, err);
    if (rc < 0) {
        char msg[sizeof(err->text)];
        snprintf(msg, sizeof(msg), "%s", err ? err->text : "");
        tide_errprintf(err, "%s: %s", path, msg);
    }
    free(text);
    return rc;
}

void tide_scenario_free(tide_scenario_t *sc)
{
    if (!sc)
        return;
    free(sc->name);
    free(sc->groups);
    for (size_t i = 0; i < sc->n_classes; i++) {
        tide_sim_class_t *c = &sc->classes[i];
        free(c->name);
        free(c->at_s);
        dist_free(&c->gpus);
        dist_free(&c->duration);
        dist_free(&c->base_load);
        free(c->pool);
        free(c->device);
    }
    free(sc->classes);
    memset(sc, 0, sizeof(*sc));
}

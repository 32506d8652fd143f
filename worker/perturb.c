/* Perturbation scripts (perturb.h): a line parser with errors that name the line, and the state at
 * a time as the sum of the events before it (rates integrate from their start to the next change).
 * Invariant: events are kept sorted by time, stable for equal times. */
#include "perturb.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

#define MAX_FILE   (1024 * 1024)
#define MAX_EVENTS 100000
#define MAX_SECONDS (10.0 * 365 * 24 * 3600)

static const struct {
    const char *name;
    tide_perturb_action_t action;
    bool has_arg;
} actions[] = {
    {"slow", TIDE_PERTURB_SLOW, true},   {"heat", TIDE_PERTURB_HEAT, true},
    {"ecc", TIDE_PERTURB_ECC, true},     {"ecc-uncorrected", TIDE_PERTURB_ECC_UNCORRECTED, true},
    {"xid", TIDE_PERTURB_XID, true},     {"die", TIDE_PERTURB_DIE, false},
};

/* A whole token as a finite double. */
static bool number(const char *s, double *out)
{
    char *end;

    if (!s || !*s)
        return false;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && *end == '\0' && isfinite(*out);
}

static bool integer(double v)
{
    return v == floor(v);
}

/* Checks the argument of one action; NULL when fine, else what is wrong. */
static const char *check_arg(tide_perturb_action_t a, double v)
{
    switch (a) {
    case TIDE_PERTURB_SLOW:
        return v >= 1 && v <= 100 ? NULL : "PERCENT must be between 1 and 100";
    case TIDE_PERTURB_HEAT:
        return fabs(v) <= 3000 ? NULL : "CELSIUS_PER_MINUTE must be between -3000 and 3000";
    case TIDE_PERTURB_ECC:
        return v >= 0 && v <= 1e6 ? NULL : "CORRECTED_PER_MINUTE must be between 0 and 1000000";
    case TIDE_PERTURB_ECC_UNCORRECTED:
        return v >= 1 && v <= 1e6 && integer(v) ? NULL : "COUNT must be an integer from 1 to 1000000";
    case TIDE_PERTURB_XID:
        return v >= 1 && v <= 1e6 && integer(v) ? NULL : "CODE must be an integer from 1 to 1000000";
    case TIDE_PERTURB_DIE:
        return NULL;
    }
    return "unknown action";
}

static int by_time(const void *a, const void *b)
{
    const tide_perturb_event_t *x = a, *y = b;

    if (x->at_ms != y->at_ms)
        return x->at_ms < y->at_ms ? -1 : 1;
    return x->line - y->line; /* stable */
}

int tide_perturb_parse(const char *text, const char *name, tide_perturb_t *out, tide_error_t *err)
{
    char *copy = tide_xstrdup(text), *p = copy;
    size_t cap = 0;
    int lineno = 0, rc = 0;

    memset(out, 0, sizeof(*out));
    while (p) {
        char *line = p, *next = strchr(p, '\n'), *hash, *tok[4], *ts = NULL;
        int ntok = 0;
        double secs, arg = 0;
        size_t a;
        const char *bad;

        if (next)
            *next = '\0';
        p = next ? next + 1 : NULL;
        lineno++;
        if ((hash = strchr(line, '#')) != NULL)
            *hash = '\0';
        for (char *t = strtok_r(line, " \t\r", &ts); t && ntok < 4; t = strtok_r(NULL, " \t\r", &ts))
            tok[ntok++] = t;
        if (ntok > 0) {
            if (ntok > 3) {
                tide_errprintf(err, "%s:%d: too many words (SECONDS ACTION [ARG])", name, lineno);
                rc = -EINVAL;
                break;
            }
            if (!number(tok[0], &secs) || secs < 0 || secs > MAX_SECONDS) {
                tide_errprintf(err, "%s:%d: '%.40s' is not a time in seconds >= 0", name, lineno,
                               tok[0]);
                rc = -EINVAL;
                break;
            }
            if (ntok < 2) {
                tide_errprintf(err, "%s:%d: missing ACTION after the time", name, lineno);
                rc = -EINVAL;
                break;
            }
            for (a = 0; a < sizeof(actions) / sizeof(actions[0]); a++)
                if (strcmp(tok[1], actions[a].name) == 0)
                    break;
            if (a == sizeof(actions) / sizeof(actions[0])) {
                tide_errprintf(err,
                               "%s:%d: unknown action '%.40s' (slow, heat, ecc, ecc-uncorrected, "
                               "xid, die)",
                               name, lineno, tok[1]);
                rc = -EINVAL;
                break;
            }
            if (actions[a].has_arg && ntok < 3) {
                tide_errprintf(err, "%s:%d: %s needs an argument", name, lineno, actions[a].name);
                rc = -EINVAL;
                break;
            }
            if (!actions[a].has_arg && ntok > 2) {
                tide_errprintf(err, "%s:%d: %s takes no argument", name, lineno, actions[a].name);
                rc = -EINVAL;
                break;
            }
            if (actions[a].has_arg && !number(tok[2], &arg)) {
                tide_errprintf(err, "%s:%d: %s: '%.40s' is not a number", name, lineno,
                               actions[a].name, tok[2]);
                rc = -EINVAL;
                break;
            }
            if ((bad = check_arg(actions[a].action, arg)) != NULL) {
                tide_errprintf(err, "%s:%d: %s: %s", name, lineno, actions[a].name, bad);
                rc = -EINVAL;
                break;
            }
            if (out->n == MAX_EVENTS) {
                tide_errprintf(err, "%s:%d: more than %d perturbations", name, lineno, MAX_EVENTS);
                rc = -EINVAL;
                break;
            }
            if (out->n == cap) {
                cap = cap ? cap * 2 : 16;
                out->events = tide_xrealloc(out->events, cap * sizeof(*out->events));
            }
            out->events[out->n++] = (tide_perturb_event_t){
                .at_ms = (int64_t)llround(secs * 1000), .action = actions[a].action,
                .value = arg, .line = lineno};
        }
    }
    free(copy);
    if (rc < 0) {
        tide_perturb_free(out);
        return rc;
    }
    if (out->n > 1)
        qsort(out->events, out->n, sizeof(*out->events), by_time);
    return 0;
}

int tide_perturb_load(const char *path, tide_perturb_t *out, tide_error_t *err)
{
    FILE *f = fopen(path, "re");
    char *buf;
    size_t n;
    int rc;

    if (!f) {
        rc = -errno;
        tide_errprintf(err, "%s: %s", path, strerror(-rc));
        return rc;
    }
    buf = tide_xmalloc(MAX_FILE + 1);
    n = fread(buf, 1, MAX_FILE + 1, f);
    if (ferror(f) || n > MAX_FILE) {
        tide_errprintf(err, "%s: %s", path, n > MAX_FILE ? "larger than 1 MiB" : "read error");
        rc = -EINVAL;
    } else {
        buf[n] = '\0';
        rc = tide_perturb_parse(buf, path, out, err);
    }
    fclose(f);
    free(buf);
    return rc;
}

void tide_perturb_free(tide_perturb_t *p)
{
    if (!p)
        return;
    free(p->events);
    p->events = NULL;
    p->n = 0;
}

void tide_perturb_state_at(const tide_perturb_t *p, int64_t t_ms, tide_perturb_state_t *st)
{
    double heat_rate = 0, ecc_rate = 0, ecc = 0;
    int64_t heat_since = 0, ecc_since = 0;

    memset(st, 0, sizeof(*st));
    st->speed = 1;
    for (size_t i = 0; i < p->n && p->events[i].at_ms <= t_ms; i++) {
        const tide_perturb_event_t *e = &p->events[i];
        switch (e->action) {
        case TIDE_PERTURB_SLOW:
            st->speed = e->value / 100;
            break;
        case TIDE_PERTURB_HEAT:
            st->heat_c += heat_rate * (double)(e->at_ms - heat_since) / 60000.0;
            heat_rate = e->value;
            heat_since = e->at_ms;
            break;
        case TIDE_PERTURB_ECC:
            ecc += ecc_rate * (double)(e->at_ms - ecc_since) / 60000.0;
            ecc_rate = e->value;
            ecc_since = e->at_ms;
            break;
        case TIDE_PERTURB_ECC_UNCORRECTED:
            st->ecc_uncorrected += (uint64_t)e->value;
            break;
        case TIDE_PERTURB_XID:
            st->xid_count++;
            st->last_xid = (uint32_t)e->value;
            break;
        case TIDE_PERTURB_DIE:
            st->die = true;
            break;
        }
    }
    st->heat_c += heat_rate * (double)(t_ms - heat_since) / 60000.0;
    ecc += ecc_rate * (double)(t_ms - ecc_since) / 60000.0;
    st->ecc_corrected = (uint64_t)floor(ecc);
}

void tide_perturb_apply(const tide_perturb_state_t *st, tide_gpu_telemetry_t *t)
{
    if (t->known & TIDE_GPU_HAS_TEMPERATURE)
        t->temperature_c += st->heat_c;
    if (st->ecc_corrected || st->ecc_uncorrected) {
        if (!(t->known & TIDE_GPU_HAS_ECC))
            t->ecc_corrected = t->ecc_uncorrected = 0;
        t->ecc_corrected += st->ecc_corrected;
        t->ecc_uncorrected += st->ecc_uncorrected;
        t->known |= TIDE_GPU_HAS_ECC;
    }
    if (st->xid_count) {
        if (!(t->known & TIDE_GPU_HAS_XID))
            t->xid_count = 0;
        t->xid_count += st->xid_count;
        t->last_xid = st->last_xid;
        t->known |= TIDE_GPU_HAS_XID;
    }
}

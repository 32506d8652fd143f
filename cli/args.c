/* Option parsing for tidectl (see args.h). Pure: reads only argv and the option tables; the state lives
 * in tide_cli_args_t, so parsing can restart at will (each subcommand, each test). */
#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "buf.h"
#include "xmalloc.h"

void tide_cli_args_init(tide_cli_args_t *a, int argc, char **argv, int first, const tide_cli_opt_t *t1,
                        const tide_cli_opt_t *t2, const tide_cli_opt_t *t3)
{
    int n = 0;

    memset(a, 0, sizeof(*a));
    a->argc = argc;
    a->argv = argv;
    a->index = first;
    if (t1)
        a->tables[n++] = t1;
    if (t2)
        a->tables[n++] = t2;
    if (t3)
        a->tables[n++] = t3;
}

static const tide_cli_opt_t *find_long(const tide_cli_args_t *a, const char *name, size_t len)
{
    for (int t = 0; t < 3 && a->tables[t]; t++)
        for (const tide_cli_opt_t *o = a->tables[t]; o->id; o++)
            if (o->long_name && strlen(o->long_name) == len && strncmp(o->long_name, name, len) == 0)
                return o;
    return NULL;
}

static const tide_cli_opt_t *find_short(const tide_cli_args_t *a, char c)
{
    for (int t = 0; t < 3 && a->tables[t]; t++)
        for (const tide_cli_opt_t *o = a->tables[t]; o->id; o++)
            if (o->short_name && o->short_name == c)
                return o;
    return NULL;
}

static int next_short(tide_cli_args_t *a, tide_error_t *err)
{
    char c = *a->bundle++;
    const tide_cli_opt_t *o = find_short(a, c);

    snprintf(a->opt_text, sizeof(a->opt_text), "-%c", c);
    if (!o) {
        tide_errprintf(err, "unknown option '-%c'", c);
        a->bundle = NULL;
        return TIDE_CLI_ARG_ERROR;
    }
    if (!o->has_arg) {
        if (!*a->bundle)
            a->bundle = NULL;
        return o->id;
    }
    if (*a->bundle) {
        a->arg = a->bundle; /* -ojson */
    } else if (a->index < a->argc) {
        a->arg = a->argv[a->index++];
    } else {
        tide_errprintf(err, "option '-%c' needs a value", c);
        a->bundle = NULL;
        return TIDE_CLI_ARG_ERROR;
    }
    a->bundle = NULL;
    return o->id;
}

int tide_cli_args_next(tide_cli_args_t *a, tide_error_t *err)
{
    const char *s, *eq;
    const tide_cli_opt_t *o;
    size_t len;

    a->arg = NULL;
    if (a->bundle)
        return next_short(a, err);
    if (a->index >= a->argc)
        return TIDE_CLI_ARG_END;
    s = a->argv[a->index++];
    if (a->only_positional || s[0] != '-' || s[1] == '\0') {
        if (a->stop_at_positional)
            a->only_positional = true;
        a->arg = s;
        return TIDE_CLI_ARG_POSITIONAL;
    }
    if (strcmp(s, "--") == 0) {
        a->only_positional = true;
        return tide_cli_args_next(a, err);
    }
    if (s[1] != '-') {
        a->bundle = s + 1;
        return next_short(a, err);
    }
    s += 2;
    eq = strchr(s, '=');
    len = eq ? (size_t)(eq - s) : strlen(s);
    snprintf(a->opt_text, sizeof(a->opt_text), "--%.*s", (int)(len < 60 ? len : 60), s);
    o = find_long(a, s, len);
    if (!o) {
        tide_errprintf(err, "unknown option '%s'", a->opt_text);
        return TIDE_CLI_ARG_ERROR;
    }
    if (!o->has_arg) {
        if (eq) {
            tide_errprintf(err, "option '%s' takes no value", a->opt_text);
            return TIDE_CLI_ARG_ERROR;
        }
        return o->id;
    }
    if (eq) {
        a->arg = eq + 1;
    } else if (o->arg_name && o->arg_name[0] == '[') {
        bool value = a->index < a->argc && isdigit((unsigned char)a->argv[a->index][0]);
        a->arg = value ? a->argv[a->index++] : NULL;
    } else if (a->index < a->argc) {
        a->arg = a->argv[a->index++];
    } else {
        tide_errprintf(err, "option '%s' needs a value", a->opt_text);
        return TIDE_CLI_ARG_ERROR;
    }
    return o->id;
}

int tide_cli_parse_int(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    long long v;

    if (!s || !*s || isspace((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

int tide_cli_parse_kv(const char *s, char **key, const char **value)
{
    const char *eq = strchr(s, '=');

    if (!eq || eq == s)
        return -EINVAL;
    *key = tide_xstrndup(s, (size_t)(eq - s));
    *value = eq + 1;
    return 0;
}

/* The digits of a decimal number ("80", "1.5"), no sign, exponent or hex: strtod would take more. */
static size_t decimal_span(const char *s)
{
    size_t n = 0, digits = 0;
    bool dot = false;

    for (; s[n]; n++) {
        if (s[n] >= '0' && s[n] <= '9')
            digits++;
        else if (s[n] == '.' && !dot)
            dot = true;
        else
            break;
    }
    return digits ? n : 0;
}

int tide_cli_parse_size(const char *s, uint64_t *out)
{
    static const char prefixes[] = "kmgtp";
    size_t n = decimal_span(s);
    const char *u = s + n;
    double v, mult = 1;
    const char *p;

    if (n == 0)
        return -EINVAL;
    v = strtod(s, NULL);
    if (*u && (p = strchr(prefixes, tolower((unsigned char)*u))) != NULL) {
        int power = (int)(p - prefixes) + 1;
        double base = 1024;
        u++;
        if (tolower((unsigned char)u[0]) == 'i' && tolower((unsigned char)u[1]) == 'b' && !u[2]) {
            u += 2; /* KiB */
        } else if (tolower((unsigned char)u[0]) == 'b' && !u[1]) {
            base = 1000; /* KB */
            u++;
        } else if (tolower((unsigned char)u[0]) == 'i' && !u[1]) {
            u++; /* Ki, as Kubernetes writes it */
        }
        for (int i = 0; i < power; i++)
            mult *= base;
    } else if (tolower((unsigned char)*u) == 'b') {
        u++;
    }
    if (*u)
        return -EINVAL;
    v *= mult;
    if (v > (double)(1ULL << 60))
        return -ERANGE;
    *out = (uint64_t)(v + 0.5);
    return 0;
}

int tide_cli_parse_fraction(const char *s, double *out)
{
    size_t n = decimal_span(s);
    double v;

    if (n == 0)
        return -EINVAL;
    v = strtod(s, NULL);
    if (s[n] == '%' && !s[n + 1])
        v /= 100;
    else if (s[n])
        return -EINVAL;
    if (v > 1)
        return -ERANGE;
    *out = v;
    return 0;
}

/* "running" / "RUNNING" / "job_state_running" all name JOB_STATE_RUNNING. */
static const ProtobufCEnumValue *match_enum(const ProtobufCEnumDescriptor *d, const char *prefix,
                                            const char *word, size_t len)
{
    size_t plen = strlen(prefix);

    for (unsigned i = 0; i < d->n_values; i++) {
        const char *name = d->values[i].name;
        if (d->values[i].value == 0)
            continue; /* UNSPECIFIED is not something to filter on */
        if (strlen(name) == len && strncasecmp(name, word, len) == 0)
            return &d->values[i];
        if (strncmp(name, prefix, plen) == 0 && strlen(name + plen) == len &&
            strncasecmp(name + plen, word, len) == 0)
            return &d->values[i];
    }
    return NULL;
}

int tide_cli_parse_enum_list(const char *s, const ProtobufCEnumDescriptor *d, const char *prefix,
                             const char *what, int **vals, size_t *n, tide_error_t *err)
{
    size_t plen = strlen(prefix);
    const char *p = s;

    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const ProtobufCEnumValue *v = match_enum(d, prefix, p, len);

        if (!v) {
            tide_buf_t choices = TIDE_BUF_INIT;
            for (unsigned i = 0; i < d->n_values; i++) {
                const char *name = d->values[i].name;
                if (d->values[i].value == 0)
                    continue;
                if (strncmp(name, prefix, plen) == 0)
                    name += plen;
                if (choices.len)
                    tide_buf_append_str(&choices, ", ");
                for (const char *c = name; *c; c++)
                    tide_buf_printf(&choices, "%c", tolower((unsigned char)*c));
            }
            tide_errprintf(err, "unknown %s '%.*s' (one of %s)", what, (int)(len < 40 ? len : 40), p,
                           tide_buf_cstr(&choices));
            tide_buf_free(&choices);
            return -EINVAL;
        }
        *vals = tide_xrealloc(*vals, (*n + 1) * sizeof(**vals));
        (*vals)[(*n)++] = v->value;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

void tide_cli_opts_help(FILE *f, const tide_cli_opt_t *t1, const tide_cli_opt_t *t2)
{
    const tide_cli_opt_t *tables[] = {t1, t2};
    char left[64];

    for (int t = 0; t < 2; t++) {
        if (!tables[t])
            continue;
        for (const tide_cli_opt_t *o = tables[t]; o->id; o++) {
            if (!o->help)
                continue;
            if (o->short_name && o->long_name)
                snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name, o->long_name,
                         o->has_arg ? " " : "", o->has_arg ? o->arg_name : "");
            else if (o->long_name && o->arg_name && o->arg_name[0] == '[')
                snprintf(left, sizeof(left), "    --%s%s", o->long_name, o->arg_name);
            else if (o->long_name)
                snprintf(left, sizeof(left), "    --%s%s%s", o->long_name, o->has_arg ? " " : "",
                         o->has_arg ? o->arg_name : "");
            else
                snprintf(left, sizeof(left), "-%c%s%s", o->short_name, o->has_arg ? " " : "",
                         o->has_arg ? o->arg_name : "");
            fprintf(f, "  %-28s %s\n", left, o->help);
        }
    }
}

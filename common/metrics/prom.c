/* Prometheus text format 0.0.4 writer, see prom.h. Invariant: every call either appends whole,
 * newline-terminated lines or nothing (everything is validated before the first byte is written),
 * so the buffer always holds an exposition a scraper accepts, with each family's HELP/TYPE written
 * once. */
#include "prom.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

struct tide_prom {
    tide_buf_t *out;
    char **families; /* every family name started, to refuse a second start */
    size_t nfamilies, cap;
    const char *current; /* points into families; NULL before the first family */
    tide_prom_type_t type;
};

tide_prom_t *tide_prom_new(tide_buf_t *out)
{
    tide_prom_t *p = tide_xcalloc(1, sizeof(*p));

    p->out = out;
    return p;
}

void tide_prom_free(tide_prom_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->nfamilies; i++)
        free(p->families[i]);
    free(p->families);
    free(p);
}

static bool is_alpha_(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* */
static bool valid_metric_name(const char *s)
{
    if (!s || !(is_alpha_(s[0]) || s[0] == ':'))
        return false;
    for (s++; *s; s++) {
        if (!is_alpha_(*s) && !is_digit(*s) && *s != ':')
            return false;
    }
    return true;
}

/* [a-zA-Z_][a-zA-Z0-9_]*, and "__" is reserved for Prometheus itself. */
static bool valid_label_name(const char *s)
{
    if (!s || !is_alpha_(s[0]) || (s[0] == '_' && s[1] == '_'))
        return false;
    for (s++; *s; s++) {
        if (!is_alpha_(*s) && !is_digit(*s))
            return false;
    }
    return true;
}

/* Well-formed UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool valid_utf8(const char *str)
{
    const uint8_t *s = (const uint8_t *)str;

    while (*s) {
        uint32_t cp;
        int n;

        if (s[0] < 0x80) {
            s++;
            continue;
        } else if ((s[0] & 0xe0) == 0xc0) {
            cp = s[0] & 0x1f, n = 1;
        } else if ((s[0] & 0xf0) == 0xe0) {
            cp = s[0] & 0x0f, n = 2;
        } else if ((s[0] & 0xf8) == 0xf0) {
            cp = s[0] & 0x07, n = 3;
        } else {
            return false;
        }
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false; /* also stops at the NUL */
            cp = (cp << 6) | (s[i] & 0x3f);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* HELP text escapes backslash and newline; label values also the double quote. */
static void append_escaped(tide_buf_t *b, const char *s, bool quote)
{
    const char *run = s;

    for (; *s; s++) {
        const char *esc = NULL;

        if (*s == '\\')
            esc = "\\\\";
        else if (*s == '\n')
            esc = "\\n";
        else if (*s == '"' && quote)
            esc = "\\\"";
        if (esc) {
            tide_buf_append(b, run, (size_t)(s - run));
            tide_buf_append_str(b, esc);
            run = s + 1;
        }
    }
    tide_buf_append(b, run, (size_t)(s - run));
}

int tide_prom_family(tide_prom_t *p, const char *name, tide_prom_type_t type, const char *help)
{
    if (!valid_metric_name(name) || (type != TIDE_PROM_COUNTER && type != TIDE_PROM_GAUGE) ||
        (type == TIDE_PROM_COUNTER && !ends_with(name, "_total")))
        return -EINVAL;
    for (size_t i = 0; i < p->nfamilies; i++) {
        if (strcmp(p->families[i], name) == 0)
            return -EINVAL;
    }
    if (p->nfamilies == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 16;
        p->families = tide_xrealloc(p->families, p->cap * sizeof(*p->families));
    }
    p->families[p->nfamilies] = tide_xstrdup(name);
    p->current = p->families[p->nfamilies++];
    p->type = type;

    if (help) {
        tide_buf_printf(p->out, "# HELP %s ", name);
        append_escaped(p->out, help, false);
        tide_buf_append_str(p->out, "\n");
    }
    tide_buf_printf(p->out, "# TYPE %s %s\n", name,
                    type == TIDE_PROM_COUNTER ? "counter" : "gauge");
    return 0;
}

int tide_prom_sample(tide_prom_t *p, const tide_prom_label_t *labels, size_t nlabels, double value)
{
    if (!p->current || (nlabels && !labels))
        return -EINVAL;
    if (p->type == TIDE_PROM_COUNTER && value < 0)
        return -EINVAL;
    for (size_t i = 0; i < nlabels; i++) {
        if (!valid_label_name(labels[i].name) || !labels[i].value || !valid_utf8(labels[i].value))
            return -EINVAL;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(labels[i].name, labels[j].name) == 0)
                return -EINVAL;
        }
    }

    tide_buf_append_str(p->out, p->current);
    for (size_t i = 0; i < nlabels; i++) {
        tide_buf_append_str(p->out, i == 0 ? "{" : ",");
        tide_buf_append_str(p->out, labels[i].name);
        tide_buf_append_str(p->out, "=\"");
        append_escaped(p->out, labels[i].value, true);
        tide_buf_append_str(p->out, "\"");
    }
    tide_buf_append_str(p->out, nlabels ? "} " : " ");
    tide_prom_append_double(p->out, value);
    tide_buf_append_str(p->out, "\n");
    return 0;
}

void tide_prom_append_double(tide_buf_t *b, double v)
{
    char text[40];

    if (isnan(v)) {
        tide_buf_append_str(b, "NaN");
    } else if (isinf(v)) {
        tide_buf_append_str(b, v > 0 ? "+Inf" : "-Inf");
    } else if (v == trunc(v) && fabs(v) <= 9007199254740992.0) {
        /* Integers up to 2^53 (all exact in a double) print as integers, and -0 as 0. */
        tide_buf_printf(b, "%" PRId64, (int64_t)v);
    } else {
        /* The shortest of 15..17 significant digits that reads back as v (17 always does). */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(text, sizeof(text), "%.*g", prec, v);
            if (strtod(text, NULL) == v)
                break;
        }
        tide_buf_append_str(b, text);
    }
}

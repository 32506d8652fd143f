/* A writer of the Prometheus text exposition format 0.0.4 (what `GET /metrics` serves) into a
 * tide_buf_t. Families are written one after the other: tide_prom_family writes `# HELP` and
 * `# TYPE` once, the samples that follow belong to it. The writer refuses (-EINVAL, nothing
 * written) anything a scraper would reject: bad metric or label names, a family started twice,
 * counters without `_total`, label values that are not UTF-8. Not thread-safe; one writer per
 * exposition. */
#ifndef TIDE_PROM_H
#define TIDE_PROM_H

#include <stddef.h>

#include "buf.h"

/* The Content-Type of a response carrying this format. */
#define TIDE_PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef enum tide_prom_type {
    TIDE_PROM_COUNTER = 0, /* name ends in "_total"; value >= 0 (or NaN) */
    TIDE_PROM_GAUGE = 1,
} tide_prom_type_t;

typedef struct tide_prom_label {
    const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" */
    const char *value; /* any UTF-8; escaped on output */
} tide_prom_label_t;

typedef struct tide_prom tide_prom_t;

/* Starts an exposition appended to out (borrowed: it must outlive the writer). Never NULL. */
tide_prom_t *tide_prom_new(tide_buf_t *out);
/* Frees the writer, not the buffer. NULL is fine. */
void tide_prom_free(tide_prom_t *p);

/* Starts family name (borrowed for the call): writes "# HELP name help" (help escaped; the line is
 * left out when help is NULL) and "# TYPE name counter|gauge". Returns 0 or -EINVAL (nothing
 * written) for an invalid name, a counter whose name does not end in "_total", or a name already
 * used here. */
int tide_prom_family(tide_prom_t *p, const char *name, tide_prom_type_t type, const char *help);

/* Writes one sample of the current family: `name{l1="v1",...} value`. labels (borrowed for the
 * call) may be NULL when nlabels is 0. Returns 0 or -EINVAL (nothing written): no family started, a
 * bad or repeated label name, a label value that is not UTF-8, a negative counter. */
int tide_prom_sample(tide_prom_t *p, const tide_prom_label_t *labels, size_t nlabels, double value);

/* Appends v as Prometheus spells it: integers up to 2^53 without a fraction or exponent ("42",
 * "-7"), other values in the shortest form that reads back exactly ("0.1", "1e-09"), "NaN", "+Inf",
 * "-Inf". Assumes the "C" numeric locale (tide never calls setlocale). */
void tide_prom_append_double(tide_buf_t *b, double v);

#endif

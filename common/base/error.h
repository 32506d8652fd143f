/* Human-readable errors that travel beside a negative errno return value.
 * A function that takes `tide_error_t *err` (which may be NULL) fills it when it fails, so the CLI and
 * gRPC status messages can name the bad field. */
#ifndef TIDE_ERROR_H
#define TIDE_ERROR_H

#include <stddef.h>

typedef struct tide_error {
    char text[256];
} tide_error_t;

/* Formats into err->text (truncating); a NULL err is ignored. */
void tide_errprintf(tide_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears err (NULL is fine). */
void tide_error_clear(tide_error_t *err);

#endif

/* A growable byte buffer. Used for output queues and message assembly: it is reset and reused, so a hot
 * path allocates only when a message is larger than any before it. */
#ifndef TIDE_BUF_H
#define TIDE_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tide_buf {
    uint8_t *data; /* owned; NULL until the first append */
    size_t len;    /* bytes in use */
    size_t cap;    /* bytes allocated */
} tide_buf_t;

#define TIDE_BUF_INIT {NULL, 0, 0}

void tide_buf_init(tide_buf_t *b);
void tide_buf_free(tide_buf_t *b);
/* Makes room for n more bytes; returns a pointer to the first free byte (len is unchanged). */
uint8_t *tide_buf_reserve(tide_buf_t *b, size_t n);
void tide_buf_append(tide_buf_t *b, const void *p, size_t n);
void tide_buf_append_str(tide_buf_t *b, const char *s);
void tide_buf_printf(tide_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tide_buf_vprintf(tide_buf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Drops the first n bytes. */
void tide_buf_consume(tide_buf_t *b, size_t n);
void tide_buf_reset(tide_buf_t *b);
/* NUL-terminates (not counted in len) and returns data as a C string; never NULL. */
const char *tide_buf_cstr(tide_buf_t *b);

#endif

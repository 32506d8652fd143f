/* Growable byte buffer, see buf.h. Invariant: len <= cap; data is NULL only while cap == 0. */
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

void tide_buf_init(tide_buf_t *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void tide_buf_free(tide_buf_t *b)
{
    if (!b)
        return;
    free(b->data);
    tide_buf_init(b);
}

uint8_t *tide_buf_reserve(tide_buf_t *b, size_t n)
{
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n + 1)
            cap *= 2;
        b->data = tide_xrealloc(b->data, cap);
        b->cap = cap;
    }
    return b->data + b->len;
}

void tide_buf_append(tide_buf_t *b, const void *p, size_t n)
{
    if (n == 0)
        return;
    memcpy(tide_buf_reserve(b, n), p, n);
    b->len += n;
}

void tide_buf_append_str(tide_buf_t *b, const char *s)
{
    tide_buf_append(b, s, strlen(s));
}

void tide_buf_vprintf(tide_buf_t *b, const char *fmt, va_list ap)
{
    va_list ap2;
    int n;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n <= 0)
        return;
    vsnprintf((char *)tide_buf_reserve(b, (size_t)n), (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void tide_buf_printf(tide_buf_t *b, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    tide_buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void tide_buf_consume(tide_buf_t *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void tide_buf_reset(tide_buf_t *b)
{
    b->len = 0;
}

const char *tide_buf_cstr(tide_buf_t *b)
{
    tide_buf_reserve(b, 0)[0] = '\0';
    return (const char *)b->data;
}

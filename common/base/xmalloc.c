/* Aborting allocators, see xmalloc.h. */
#include "xmalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n)
{
    fprintf(stderr, "tide: out of memory allocating %zu bytes\n", n);
    abort();
}

void *tide_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *tide_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *tide_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *tide_xstrdup(const char *s)
{
    return s ? tide_xstrndup(s, strlen(s)) : NULL;
}

char *tide_xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = tide_xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *tide_xvasprintf(const char *fmt, va_list ap)
{
    char *s = NULL;

    if (vasprintf(&s, fmt, ap) < 0)
        oom(0);
    return s;
}

char *tide_xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;

    va_start(ap, fmt);
    s = tide_xvasprintf(fmt, ap);
    va_end(ap);
    return s;
}

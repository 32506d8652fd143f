/* Bump allocator, see arena.h. Invariant: chunks is a list whose head is the chunk being filled; reset
 * keeps only the biggest chunk so a steady workload stops allocating. */
#include "arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

struct tide_arena_chunk {
    tide_arena_chunk_t *next;
    size_t size;
    _Alignas(16) unsigned char data[];
};

#define ARENA_MIN_CHUNK 4096

void *tide_arena_alloc(tide_arena_t *a, size_t n)
{
    size_t need = (n + 15) & ~(size_t)15;
    tide_arena_chunk_t *c = a->chunks;

    if (!c || c->size - a->used < need) {
        size_t size = c ? c->size * 2 : ARENA_MIN_CHUNK;
        while (size < need)
            size *= 2;
        c = tide_xmalloc(sizeof(*c) + size);
        c->size = size;
        c->next = a->chunks;
        a->chunks = c;
        a->used = 0;
    }
    a->used += need;
    return c->data + a->used - need;
}

void *tide_arena_calloc(tide_arena_t *a, size_t n, size_t size)
{
    void *p = tide_arena_alloc(a, n * size);
    memset(p, 0, n * size);
    return p;
}

char *tide_arena_strdup(tide_arena_t *a, const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(tide_arena_alloc(a, n), s, n);
}

char *tide_arena_printf(tide_arena_t *a, const char *fmt, ...)
{
    va_list ap, ap2;
    int n;
    char *p;

    va_start(ap, fmt);
    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    p = tide_arena_alloc(a, (size_t)(n < 0 ? 0 : n) + 1);
    vsnprintf(p, (size_t)(n < 0 ? 0 : n) + 1, fmt, ap2);
    va_end(ap2);
    return p;
}

void tide_arena_reset(tide_arena_t *a)
{
    tide_arena_chunk_t *c = a->chunks, *keep = NULL;

    while (c) {
        tide_arena_chunk_t *next = c->next;
        if (!keep || c->size > keep->size) {
            free(keep);
            keep = c;
        } else {
            free(c);
        }
        c = next;
    }
    if (keep)
        keep->next = NULL;
    a->chunks = keep;
    a->used = 0;
}

void tide_arena_free(tide_arena_t *a)
{
    tide_arena_chunk_t *c = a->chunks;
    while (c) {
        tide_arena_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    a->chunks = NULL;
    a->used = 0;
}

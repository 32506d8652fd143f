/* A bump allocator reset as a whole: per-message scratch memory (protobuf unpacking, building responses)
 * without a malloc per field. Once warm, reset + reuse allocates nothing. */
#ifndef TIDE_ARENA_H
#define TIDE_ARENA_H

#include <stddef.h>

typedef struct tide_arena_chunk tide_arena_chunk_t;

typedef struct tide_arena {
    tide_arena_chunk_t *chunks; /* owned; the first one is the current */
    size_t used;                /* bytes used in the current chunk */
} tide_arena_t;

#define TIDE_ARENA_INIT {NULL, 0}

/* 16-byte aligned memory valid until the next reset or free. Never NULL (aborts on OOM). */
void *tide_arena_alloc(tide_arena_t *a, size_t n);
void *tide_arena_calloc(tide_arena_t *a, size_t n, size_t size);
char *tide_arena_strdup(tide_arena_t *a, const char *s);
char *tide_arena_printf(tide_arena_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Forgets every allocation; keeps the largest chunk for reuse. */
void tide_arena_reset(tide_arena_t *a);
void tide_arena_free(tide_arena_t *a);

#endif

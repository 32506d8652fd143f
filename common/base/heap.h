/* Intrusive binary min-heap keyed by int64 (deadlines). The node lives inside the object and knows its
 * index, so removal and re-keying are O(log n) without a search. */
#ifndef TIDE_HEAP_H
#define TIDE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tide_heap_node {
    int64_t key;
    size_t index; /* position in the heap; TIDE_HEAP_NONE when not in one */
} tide_heap_node_t;

#define TIDE_HEAP_NONE ((size_t)-1)

typedef struct tide_heap {
    tide_heap_node_t **items; /* owned array of borrowed nodes */
    size_t len, cap;
} tide_heap_t;

void tide_heap_init(tide_heap_t *h);
void tide_heap_free(tide_heap_t *h);
void tide_heap_node_init(tide_heap_node_t *n);
static inline bool tide_heap_node_queued(const tide_heap_node_t *n)
{
    return n->index != TIDE_HEAP_NONE;
}
/* Inserts n with key; if n is already queued, re-keys it. */
void tide_heap_set(tide_heap_t *h, tide_heap_node_t *n, int64_t key);
/* Removes n if queued. */
void tide_heap_remove(tide_heap_t *h, tide_heap_node_t *n);
/* The node with the smallest key, or NULL. */
tide_heap_node_t *tide_heap_peek(const tide_heap_t *h);

#endif

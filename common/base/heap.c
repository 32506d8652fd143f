/* Intrusive binary min-heap, see heap.h. Invariant: items[i]->index == i and every parent's key is <=
 * its children's. */
#include "heap.h"

#include <stdlib.h>

#include "xmalloc.h"

void tide_heap_init(tide_heap_t *h)
{
    h->items = NULL;
    h->len = h->cap = 0;
}

void tide_heap_free(tide_heap_t *h)
{
    for (size_t i = 0; i < h->len; i++)
        h->items[i]->index = TIDE_HEAP_NONE;
    free(h->items);
    tide_heap_init(h);
}

void tide_heap_node_init(tide_heap_node_t *n)
{
    n->key = 0;
    n->index = TIDE_HEAP_NONE;
}

static void place(tide_heap_t *h, size_t i, tide_heap_node_t *n)
{
    h->items[i] = n;
    n->index = i;
}

static void sift_up(tide_heap_t *h, size_t i)
{
    tide_heap_node_t *n = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h->items[parent]->key <= n->key)
            break;
        place(h, i, h->items[parent]);
        i = parent;
    }
    place(h, i, n);
}

static void sift_down(tide_heap_t *h, size_t i)
{
    tide_heap_node_t *n = h->items[i];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        int64_t mkey = n->key;
        if (l < h->len && h->items[l]->key < mkey) {
            m = l;
            mkey = h->items[l]->key;
        }
        if (r < h->len && h->items[r]->key < mkey)
            m = r;
        if (m == i)
            break;
        place(h, i, h->items[m]);
        i = m;
    }
    place(h, i, n);
}

void tide_heap_set(tide_heap_t *h, tide_heap_node_t *n, int64_t key)
{
    if (tide_heap_node_queued(n)) {
        int64_t old = n->key;
        n->key = key;
        if (key < old)
            sift_up(h, n->index);
        else
            sift_down(h, n->index);
        return;
    }
    if (h->len == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 16;
        h->items = tide_xrealloc(h->items, h->cap * sizeof(*h->items));
    }
    n->key = key;
    place(h, h->len++, n);
    sift_up(h, n->index);
}

void tide_heap_remove(tide_heap_t *h, tide_heap_node_t *n)
{
    size_t i = n->index;
    if (i == TIDE_HEAP_NONE)
        return;
    n->index = TIDE_HEAP_NONE;
    h->len--;
    if (i == h->len)
        return;
    tide_heap_node_t *last = h->items[h->len];
    place(h, i, last);
    if (i > 0 && h->items[(i - 1) / 2]->key > last->key)
        sift_up(h, i);
    else
        sift_down(h, i);
}

tide_heap_node_t *tide_heap_peek(const tide_heap_t *h)
{
    return h->len ? h->items[0] : NULL;
}

/* Intrusive circular doubly-linked list (the Linux kernel's shape). O(1) insert, remove and move; no
 * allocation: the node lives inside the object. */
#ifndef TIDE_LIST_H
#define TIDE_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tide_list {
    struct tide_list *prev, *next;
} tide_list_t;

#define TIDE_LIST_INIT(name) {&(name), &(name)}

#define tide_container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))
#define tide_list_entry(ptr, type, member) tide_container_of(ptr, type, member)

static inline void tide_list_init(tide_list_t *h)
{
    h->prev = h->next = h;
}

static inline bool tide_list_empty(const tide_list_t *h)
{
    return h->next == h;
}

/* A node that was initialised and is in no list is "unlinked". */
static inline bool tide_list_linked(const tide_list_t *n)
{
    return n->next != n && n->next != NULL;
}

static inline void tide_list__insert(tide_list_t *n, tide_list_t *prev, tide_list_t *next)
{
    next->prev = n;
    n->next = next;
    n->prev = prev;
    prev->next = n;
}

static inline void tide_list_push_back(tide_list_t *h, tide_list_t *n)
{
    tide_list__insert(n, h->prev, h);
}

static inline void tide_list_push_front(tide_list_t *h, tide_list_t *n)
{
    tide_list__insert(n, h, h->next);
}

/* Unlinks n and leaves it initialised (safe to remove twice). */
static inline void tide_list_remove(tide_list_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    tide_list_init(n);
}

static inline void tide_list_move_back(tide_list_t *h, tide_list_t *n)
{
    tide_list_remove(n);
    tide_list_push_back(h, n);
}

static inline tide_list_t *tide_list_first(const tide_list_t *h)
{
    return tide_list_empty(h) ? NULL : h->next;
}

#define tide_list_for_each(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

/* Safe against removal of pos. */
#define tide_list_for_each_safe(pos, tmp, head)                                                    \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

#endif

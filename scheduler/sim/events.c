/* Binary heap of events by (time, seq). Invariant: v[i] is never later than its children v[2i+1]
 * and v[2i+2]; seq is unique, so the order is total and pops are deterministic. */
#include "events.h"

#include <stdlib.h>

#include "xmalloc.h"

static inline bool before(const tide_ev_t *x, const tide_ev_t *y)
{
    return x->time < y->time || (x->time == y->time && x->seq < y->seq);
}

void tide_evq_init(tide_evq_t *q)
{
    q->v = NULL;
    q->n = q->cap = 0;
    q->next_seq = 0;
    q->pushed = 0;
}

void tide_evq_free(tide_evq_t *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->n; i++)
        free(q->v[i].p);
    free(q->v);
    q->v = NULL;
    q->n = q->cap = 0;
}

void tide_evq_push(tide_evq_t *q, const tide_ev_t *ev)
{
    size_t i;

    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 1024;
        q->v = tide_xrealloc(q->v, q->cap * sizeof(*q->v));
    }
    i = q->n++;
    q->v[i] = *ev;
    q->v[i].seq = q->next_seq++;
    q->pushed++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        tide_ev_t tmp;
        if (!before(&q->v[i], &q->v[parent]))
            break;
        tmp = q->v[i];
        q->v[i] = q->v[parent];
        q->v[parent] = tmp;
        i = parent;
    }
}

bool tide_evq_pop(tide_evq_t *q, tide_ev_t *out)
{
    size_t i = 0;
    tide_ev_t last;

    if (q->n == 0)
        return false;
    *out = q->v[0];
    last = q->v[--q->n];
    /* Sift the last element down from the root. */
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m;
        if (l >= q->n)
            break;
        m = r < q->n && before(&q->v[r], &q->v[l]) ? r : l;
        if (!before(&q->v[m], &last))
            break;
        q->v[i] = q->v[m];
        i = m;
    }
    if (q->n > 0)
        q->v[i] = last;
    return true;
}

int64_t tide_evq_peek_time(const tide_evq_t *q)
{
    return q->n ? q->v[0].time : INT64_MAX;
}

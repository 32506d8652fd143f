/* The simulator's event queue: a binary min-heap of events ordered by (time, sequence). The
 * sequence is the order of insertion, so events at equal times run in the order they were scheduled
 * and a run is deterministic. */
#ifndef TIDE_SIM_EVENTS_H
#define TIDE_SIM_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tide_ev {
    int64_t time; /* simulated ms */
    uint64_t seq; /* set by tide_evq_push */
    int32_t type; /* the simulator's event type */
    uint32_t a;   /* small operand: a worker index, a class index */
    uint64_t b;   /* a job number */
    uint64_t c;   /* a version or epoch the handler checks for staleness */
    void
        *p; /* a payload owned by the event: the handler frees it (tide_evq_free frees leftovers) */
} tide_ev_t;

typedef struct tide_evq {
    tide_ev_t *v;
    size_t n, cap;
    uint64_t next_seq;
    uint64_t pushed; /* events ever pushed */
} tide_evq_t;

void tide_evq_init(tide_evq_t *q);
/* Frees the heap and the payloads of events still queued (free()). */
void tide_evq_free(tide_evq_t *q);
/* Queues a copy of ev (its seq is assigned here). O(log n); aborts on OOM. */
void tide_evq_push(tide_evq_t *q, const tide_ev_t *ev);
/* Removes the earliest event into *out: false when the queue is empty. O(log n). */
bool tide_evq_pop(tide_evq_t *q, tide_ev_t *out);
/* The time of the earliest event, INT64_MAX when empty. */
int64_t tide_evq_peek_time(const tide_evq_t *q);

#endif

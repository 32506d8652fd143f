/* Helpers for driving the scheduler core in unit tests: a fake clock, workers registered by id, and
 * queries over the emitted actions. No sockets, no sleeps. */
#ifndef TIDE_CORE_HARNESS_H
#define TIDE_CORE_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core.h"

#define H_WALL0 1800000000000LL /* a wall-clock origin (2027) */

typedef struct h {
    tide_core_t *core;
    int64_t mono;
} h_t;

void h_init(h_t *h, const tide_core_config_t *cfg);
void h_fini(h_t *h);
/* Advances the fake clock by ms and ticks. */
void h_advance(h_t *h, int64_t ms);
/* Advances by ms in heartbeat-sized steps, heartbeating every connected worker but `except`. */
void h_advance_alive(h_t *h, int64_t ms, const char *except);
tide_worker_t *h_register(h_t *h, const char *id, const char *node, int gpu);
tide_job_t *h_submit(h_t *h, int min, int max, tide_prio_t prio);
/* The i-th action of type (and for worker id / rank when given), or NULL. */
const tide_action_t *h_find(h_t *h, tide_action_type_t type, const char *worker_id, int rank);
size_t h_count(h_t *h, tide_action_type_t type);
const tide_action_t *h_find_event(h_t *h, const char *event_type);
/* Confirms every LAUNCH in the action list (rank 0 reports port 29400), repeatedly, clearing actions. */
void h_start_all(h_t *h);
void h_clear(h_t *h);
/* Checks the core's internal invariants (counts, free index, bindings). */
void h_check_invariants(h_t *h);

#endif

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

/* The defaults, but no hang detection: scenarios report a step once and then move the clock by minutes,
 * which a real trainer never does (test_core_hang turns it on). */
void h_config(tide_core_config_t *cfg);
/* A core with cfg (NULL: h_config's) at mono 1000. */
void h_init(h_t *h, const tide_core_config_t *cfg);
void h_fini(h_t *h);
/* Advances the fake clock by ms and ticks. */
void h_advance(h_t *h, int64_t ms);
/* Advances by ms in heartbeat-sized steps, heartbeating every connected worker but `except`. */
void h_advance_alive(h_t *h, int64_t ms, const char *except);
tide_worker_t *h_register(h_t *h, const char *id, const char *node, int gpu);
tide_job_t *h_submit(h_t *h, int min, int max, tide_prio_t prio);
/* Registers a worker with its device (NULL: "sim:h100"), memory in bytes (0: 80 GiB) and labels, a
 * comma-separated "key=value" list ("pool=a,rack=r1,switch=s1"; NULL or "": none). Asserts success;
 * the worker is core-owned. */
tide_worker_t *h_register_ex(h_t *h, const char *id, const char *node, int gpu, const char *device,
                             uint64_t memory, const char *labels);
/* gpus workers "NODE/gpuI" on node, as h_register_ex; clears the actions. */
void h_node(h_t *h, const char *node, int gpus, const char *device, uint64_t memory,
            const char *labels);
/* A spec as h_submit builds it (argv borrowed from static storage), for a test to adjust. */
tide_job_spec_t h_spec(int min, int max, tide_prio_t prio);
/* Submits spec and asserts that the core accepted it. */
tide_job_t *h_submit_spec(h_t *h, const tide_job_spec_t *spec);
/* Moves the clock by ms in one step: every connected worker heartbeats first (none is suspected),
 * then the core ticks. For long waits where liveness is not under test. */
void h_jump(h_t *h, int64_t ms);
/* Reports every STOP in the action list as its rank's exit (code 143), then clears the actions.
 * Returns how many it reported. */
size_t h_stop_all(h_t *h);
/* Every running rank of job reports exit code 0 (the job succeeds). */
void h_exit_all(h_t *h, tide_job_t *job);
/* Every running rank of job reports progress through the SDK (MFU = mfu of a 1e15 FLOP/s peak). */
void h_sdk(h_t *h, tide_job_t *job, double mfu);
/* Every running rank of job reports its part of a checkpoint of step (1000 bytes each). */
void h_ckpt(h_t *h, tide_job_t *job, int64_t step);
/* Events of that type in the action list / the i-th one's text (NULL when fewer). */
size_t h_count_event(h_t *h, const char *event_type);
const char *h_event_text(h_t *h, const char *event_type, size_t i);
/* The node each rank of job runs on, "n1,n1,n2" style, into buf. */
const char *h_nodes_of(const tide_job_t *job, char *buf, size_t len);
/* The i-th action of type (and for worker id / rank when given), or NULL. */
const tide_action_t *h_find(h_t *h, tide_action_type_t type, const char *worker_id, int rank);
size_t h_count(h_t *h, tide_action_type_t type);
const tide_action_t *h_find_event(h_t *h, const char *event_type);
/* Confirms every LAUNCH in the action list (rank 0 reports port 29400), repeatedly, clearing actions. */
void h_start_all(h_t *h);
/* As h_start_all, but what the last confirmations emitted (job.running, job.resized ...) stays in the
 * action list for the test to look at. */
void h_start_keep(h_t *h);
void h_clear(h_t *h);
/* Checks the core's internal invariants (counts, free index, bindings, resize bookkeeping). */
void h_check_invariants(h_t *h);

#define H_REC_RANKS 16
/* A job record as the daemon would write it for a restore test (fields a test needs beyond these it sets
 * itself). Strings are the job's, borrowed: the job must outlive the record's use. */
typedef struct h_rec {
    tide_job_record_t rec;
    const char *ids[H_REC_RANKS], *mirrors[H_REC_RANKS];
    tide_rank_state_t st[H_REC_RANKS];
    int32_t codes[H_REC_RANKS], local[H_REC_RANKS], group[H_REC_RANKS];
} h_rec_t;
/* Fills hr from job: identity, state, its ranks (at most H_REC_RANKS, with their mirrors), checkpoints and
 * request, restart counters, backoff and restore sources. Returns &hr->rec. */
const tide_job_record_t *h_record_of(const tide_job_t *job, h_rec_t *hr);

#endif

/* Conversions between the core's structs and the tide.v1 protobuf messages. Built messages borrow
 * strings from the core object and take arrays from the arena: valid until the core changes the object
 * or the arena is reset. */
#ifndef TIDE_CONVERT_H
#define TIDE_CONVERT_H

#include "arena.h"
#include "core.h"
#include "error.h"

#include "tide/v1/types.pb-c.h"

/* Job -> tide.v1.Job. With core, for clients: message is the job's current reason
 * (tide_core_job_reason), and the live figures are filled (MFU, utilization, queue position, MFU target
 * band; the queue position costs O(queued jobs)); with NULL, the record kept in the store: the stored
 * message, no live figures. */
void tide_conv_job(const tide_core_t *core, const tide_job_t *job, Tide__V1__Job *out, tide_arena_t *a);
/* Worker -> tide.v1.Worker. */
void tide_conv_worker(const tide_core_t *core, const tide_worker_t *w, Tide__V1__Worker *out, tide_arena_t *a);
/* tide.v1.JobSpec -> core spec (borrowing the message's strings; arrays from the arena). -EINVAL with
 * err naming the field for a bad enum value. */
int tide_conv_spec_from_pb(const Tide__V1__JobSpec *pb, tide_job_spec_t *spec, tide_arena_t *a,
                           tide_error_t *err);
/* A stored tide.v1.Job -> a restore record (borrowing from pb and the arena): spec, ranks, the last
 * and the durable checkpoint, flushed bytes, flushes, preemptions, the requested size (target_workers)
 * and the count of completed resizes. */
int tide_conv_record_from_pb(const Tide__V1__Job *pb, tide_job_record_t *rec, tide_job_spec_t *spec,
                             tide_arena_t *a, tide_error_t *err);
/* tide.v1.Priority <-> core class. */
int tide_conv_prio_from_pb(int pb, tide_prio_t *out);
/* A heartbeat's TrainerProgress (NULL: empty) into the core's form. */
/* A utilization (docs/metrics.md) with its bottleneck's name, in a; a job's from its workers. */
Tide__V1__Utilization *tide_conv_utilization_of(const tide_utilization_t *u, tide_arena_t *a);
Tide__V1__Utilization *tide_conv_utilization(const tide_job_t *job, tide_arena_t *a);
/* A heartbeat's telemetry: fractions clamped to [0, 1], and a figure that is not a number marked
 * unknown rather than trusted (workers are authenticated, not infallible). */
void tide_conv_telemetry_from_pb(const Tide__V1__Telemetry *pt, tide_telemetry_t *t);
void tide_conv_progress_from_pb(const Tide__V1__TrainerProgress *pb, tide_trainer_progress_t *out);

#endif

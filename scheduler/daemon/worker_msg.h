/* The pure part of the scheduler's handling of a worker's stream (svc_workers.c): the checks and
 * conversions applied to one WorkerMessage before (and around) the core's call, with no daemon, stream
 * or socket, so that they can be driven directly (tests/fuzz/fuzz_worker_message.c). */
#ifndef TIDE_WORKER_MSG_H
#define TIDE_WORKER_MSG_H

#include <stdbool.h>
#include <stddef.h>

#include "arena.h"
#include "core.h"
#include "error.h"

#include "tide/v1/worker_service.pb-c.h"

#define TIDE_WMSG_FLUSH_ID_MAX 64      /* bytes of a FlushDone's job_id */
#define TIDE_WMSG_FLUSH_PATH_MAX 4096  /* bytes of its durable_path */
#define TIDE_WMSG_FLUSH_ERROR_MAX 512  /* bytes of its error kept */
#define TIDE_WMSG_FLUSH_ERROR_CAP (TIDE_WMSG_FLUSH_ERROR_MAX + 64)
#define TIDE_WMSG_TASK_IDS_MAX 65536   /* task ids in one message */

/* A hello -> the registration's info and rank reports (strings borrowed from h, labels and *reps, of
 * h->n_ranks entries, from a). Returns 0, or -EPROTO with msg (cap bytes, for the worker and the log)
 * when h speaks another worker protocol; then info and *reps are untouched. */
int tide_wmsg_hello(const Tide__V1__WorkerHello *h, tide_worker_info_t *info, tide_rank_report_t **reps,
                    tide_arena_t *a, char *msg, size_t cap);

/* The bounds on a FlushDone (docs/policies.md, "Checkpoint gate"). Returns -EINVAL when it names no rank
 * (the report is dropped). Otherwise 0 with *ok the verdict (false for a malformed report whatever it
 * says), error (TIDE_WMSG_FLUSH_ERROR_CAP bytes) the text for the core and *bad what is malformed (a
 * static string) or NULL. */
int tide_wmsg_flush_check(const Tide__V1__FlushDone *f, bool *ok, char *error, const char **bad);

/* A task message (tasks_declared, tasks_done, steal_request, tasks_released) from worker w: its kind
 * and id count are checked, then it goes to the core. Returns the core's result (0, -ESTALE, ...) or
 * -EINVAL with err for a bad kind or too many ids; *what names the message (static). -ENOMSG when m is
 * no task message (nothing done). */
int tide_wmsg_task_apply(tide_core_t *core, tide_worker_t *w, const Tide__V1__WorkerMessage *m,
                         const char **what, tide_error_t *err);

#endif

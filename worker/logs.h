/* Log streaming for LogRequest (docs/worker.md, "Logs"): sends the output file of the newest
 * generation of a rank as LogData chunks (<= 64 KiB) and one final chunk with eof, following a
 * running rank's file until it exited and everything was sent. It never queues more than a bound on
 * the stream, so heartbeats are not starved: it waits for the transport to drain and goes on. Loop
 * thread only. */
#ifndef TIDE_WORKER_LOGS_H
#define TIDE_WORKER_LOGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tide/v1/worker_service.pb-c.h"

struct uv_loop_s;

typedef struct tide_worker_logs tide_worker_logs_t;

typedef struct tide_worker_logs_ops {
    /* Queue a message on the stream; 0 or -errno (then the request is dropped). */
    int (*send)(void *ud, const Tide__V1__WorkerMessage *msg);
    /* Bytes queued on the stream and not yet written. */
    size_t (*queued)(void *ud);
    /* Whether that rank still runs (its file may still grow). */
    bool (*rank_running)(void *ud, const char *job_id, int32_t generation, int32_t rank);
} tide_worker_logs_ops_t;

typedef struct tide_worker_logs_config {
    const char *data_dir;    /* copied */
    const char *worker_id;   /* for error texts; copied */
    size_t queue_limit;      /* send only while queued() is below this; 0: 256 KiB */
    size_t chunk;            /* LogData size; 0: 64 KiB (also the maximum) */
    uint32_t follow_poll_ms; /* look for new output of a followed rank; 0: 200 */
    uint32_t drain_poll_ms;  /* look again at a full queue; 0: 10 */
} tide_worker_logs_config_t;

/* ops is copied, ud borrowed. Caller frees. */
void tide_worker_logs_new(struct uv_loop_s *loop, const tide_worker_logs_config_t *cfg,
                          const tide_worker_logs_ops_t *ops, void *ud, tide_worker_logs_t **out);
/* Closes its timer (memory goes in the close callback: run the loop afterwards). NULL is fine. */
void tide_worker_logs_free(tide_worker_logs_t *l);

/* Starts (or, with cancel, ends) a request; req is borrowed. Unknown job/rank is answered at once.
 */
void tide_worker_logs_request(tide_worker_logs_t *l, const Tide__V1__LogRequest *req);
/* Something changed (a rank exited, the queue drained): pump soon. */
void tide_worker_logs_kick(tide_worker_logs_t *l);
/* The stream ended: drop every request without sending. */
void tide_worker_logs_reset(tide_worker_logs_t *l);
/* Requests in progress. */
size_t tide_worker_logs_active(const tide_worker_logs_t *l);

#endif

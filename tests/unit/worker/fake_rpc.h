/* A fake of common/rpc/rpc_client.h for the worker's tests: no sockets. The test plays the
 * scheduler: it reads what the worker sent, delivers SchedulerMessages and ends streams with a
 * status. Completions (end, cancel, refused connections, the answer to a half-close) fire from the
 * loop, never inline, as in the real transport. */
#ifndef TIDE_FAKE_RPC_H
#define TIDE_FAKE_RPC_H

#include <stdbool.h>
#include <stddef.h>

#include "grpc_status.h"
#include "tide/v1/worker_service.pb-c.h"

/* Forgets everything sent and every setting (call between tests, after the loop is closed). */
void fake_rpc_reset(void);
/* Clients and calls made so far. */
int fake_rpc_clients_created(void);
int fake_rpc_calls_started(void);
/* Serial number (1, 2, ...) of the open call, 0 when none. */
int fake_rpc_current_call(void);
/* Path and token of the last call / client. */
const char *fake_rpc_last_path(void);
const char *fake_rpc_last_token(void);
const char *fake_rpc_last_hostport(void);
/* Whether the worker half-closed the call with that serial. */
bool fake_rpc_half_closed(int serial);

/* Pops the oldest message the worker sent (any call); NULL when none. *serial gets its call's
 * serial. Free with tide__v1__worker_message__free_unpacked(m, NULL). */
Tide__V1__WorkerMessage *fake_rpc_pop(int *serial);
size_t fake_rpc_pending(void);

/* Delivers msg on the open call (inline, as a read callback would). Returns false when none is
 * open. */
bool fake_rpc_deliver(const Tide__V1__SchedulerMessage *msg);
/* Ends the open call with a status (from the loop). */
bool fake_rpc_end(tide_grpc_code_t code, const char *message);
/* New connections fail (from the loop) with UNAVAILABLE while refuse is true. */
void fake_rpc_refuse(bool refuse);
/* What tide_rpc_client_call_queued_bytes reports. */
void fake_rpc_set_queued(size_t bytes);

#endif

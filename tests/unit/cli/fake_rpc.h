/* An in-process stand-in for common/rpc's client (rpc_client.h) for tidectl's command tests: calls are
 * routed by path to handlers in the test, and every response, status and connection event is delivered
 * from the libuv loop (never inline), as the real transport does. No sockets. */
#ifndef TIDE_TEST_FAKE_RPC_H
#define TIDE_TEST_FAKE_RPC_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "grpc_status.h"

typedef struct fake_call fake_call_t;

/* Runs (from the loop) when a call's request has arrived; req is borrowed for the call's lifetime. The
 * handler answers with fake_call_send / fake_call_finish now or later (keeping the call). */
typedef void (*fake_handler_fn)(fake_call_t *call, const uint8_t *req, size_t len, void *ud);

/* Forgets routes and counters; the next client connects normally. */
void fake_rpc_reset(void);
void fake_rpc_route(const char *path, fake_handler_fn fn, void *ud);
/* Clients made from now on fail to connect with status (e.g. -ECONNREFUSED). */
void fake_rpc_refuse(int status);

/* Loses the newest client's connection at the next loop turn (status -errno, the transport's text). */
void fake_rpc_drop(int status, const char *text);

/* Queues one response message (packed now) / the call's end. */
void fake_call_send(fake_call_t *call, const ProtobufCMessage *msg);
void fake_call_send_raw(fake_call_t *call, const void *data, size_t len);
void fake_call_finish(fake_call_t *call, tide_grpc_code_t code, const char *message);
/* Whether the client cancelled the call (it is then finished by the fake). */
int fake_call_cancelled(const fake_call_t *call);

/* Whether call is still open on the newest client (a call is freed once it ended). */
int fake_call_alive(const fake_call_t *call);

/* What the last client was created with, and how many calls each path got. */
const char *fake_rpc_last_hostport(void);
const char *fake_rpc_last_token(void); /* NULL when none */
int fake_rpc_count(const char *path);
/* Clients alive now (must be 0 after each command). */
int fake_rpc_live_clients(void);

#endif

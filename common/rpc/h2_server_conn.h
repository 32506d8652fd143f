/* Internal to tide_rpc: the HTTP/2 side of a server connection, an nghttp2 server session with no
 * socket. Bytes in through tide__h2_feed, frames out into conn->out through tide__h2_pull; gRPC
 * calls are dispatched to the method table. Window credit for a message is returned only after its
 * handler ran. */
#ifndef TIDE_RPC_H2_SERVER_CONN_H
#define TIDE_RPC_H2_SERVER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server_core.h"

typedef struct tide__h2_conn tide__h2_conn_t;

/* A session for conn with our SETTINGS and connection window queued. Caller frees. */
tide__h2_conn_t *tide__h2_new(tide__srv_conn_t *conn);
/* Ends every open call (on_close for those whose handler ran), then frees. NULL is fine. */
void tide__h2_free(tide__h2_conn_t *h);
/* Returns 0, or -EPROTO when the session failed (the connection is marked for closing). */
int tide__h2_feed(tide__h2_conn_t *h, const uint8_t *data, size_t len);
/* Serialises frames into conn->out until it holds TIDE_RPC_OUT_HIGH bytes; marks the connection for
 * closing once the session has nothing left to read or write (after GOAWAY). */
void tide__h2_pull(tide__h2_conn_t *h);
/* GOAWAY with the last stream we processed: calls in flight may finish, new ones are refused. */
void tide__h2_shutdown(tide__h2_conn_t *h);
/* Keepalive: PINGs an idle peer and closes the connection when a PING goes unanswered. Returns the
 * time it wants to run next, or -1 after closing. */
int64_t tide__h2_tick(tide__h2_conn_t *h, int64_t now);
/* Calls (streams) currently open. */
size_t tide__h2_open_calls(const tide__h2_conn_t *h);

#endif

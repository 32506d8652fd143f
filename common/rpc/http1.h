/* Internal to tide_rpc: the HTTP/1.1 side of a server connection (GET /healthz, /metrics ...) on
 * Debian's http-parser. GET only (others 405), keep-alive and pipelining, bounded request line and
 * headers (431), responses from the server's http_handler (404 without one). No sockets: responses
 * are appended to the connection's output queue. */
#ifndef TIDE_RPC_HTTP1_H
#define TIDE_RPC_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server_core.h"

#define TIDE_HTTP1_MAX_HEAD (8u << 10) /* request line + headers */

typedef struct tide__http1_conn tide__http1_conn_t;

/* A parser that writes responses to conn->out. Caller frees. */
tide__http1_conn_t *tide__http1_new(tide__srv_conn_t *conn);
void tide__http1_free(tide__http1_conn_t *h);
/* Parses data; complete requests are answered at once. While the output queue is over
 * TIDE_RPC_OUT_HIGH the rest of the input is kept (tide__http1_stalled) until tide__http1_resume.
 * Returns 0, or -EPROTO after a bad request (a 400/431 response is queued; close after flushing).
 */
int tide__http1_feed(tide__http1_conn_t *h, const uint8_t *data, size_t len);
/* Parses kept input if the output queue has room. Same returns as feed. */
int tide__http1_resume(tide__http1_conn_t *h);
bool tide__http1_stalled(const tide__http1_conn_t *h);
/* True once no further request will be read (Connection: close, HTTP/1.0, an error, an upgrade). */
bool tide__http1_done(const tide__http1_conn_t *h);
/* True while a request has started but is not complete. */
bool tide__http1_in_request(const tide__http1_conn_t *h);
/* Requests answered so far (the idle deadline restarts with each). */
uint64_t tide__http1_answered(const tide__http1_conn_t *h);

#endif

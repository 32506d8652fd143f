/* tidectl's calls to the scheduler: one connection (tide_rpc_client) on a private libuv loop, calls
 * whose responses arrive unpacked, and a loop runner that returns when the last call has ended.
 * Errors reach the user as one line: "tidectl: NOT_FOUND: job 42 not found",
 * "tidectl: UNAVAILABLE: cannot reach scheduler at 127.0.0.1:7070: connection refused". */
#ifndef TIDE_CLI_RPC_CALL_H
#define TIDE_CLI_RPC_CALL_H

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "cli.h"
#include "grpc_status.h"

typedef struct tide_cli_conn tide_cli_conn_t;
typedef struct tide_cli_call tide_cli_call_t;

typedef struct tide_cli_status {
    tide_grpc_code_t code;
    char message[512];
} tide_cli_status_t;

typedef struct tide_cli_call_ops {
    /* One response, unpacked (borrowed for the callback). Return non-zero to cancel the call. */
    int (*on_message)(tide_cli_call_t *call, const ProtobufCMessage *msg, void *ud);
    /* The call ended (OK, the server's status, or a local one); called once. The call is gone after. */
    void (*on_end)(tide_cli_call_t *call, const tide_cli_status_t *st, void *ud);
} tide_cli_call_ops_t;

/* Resolves cli's scheduler address and token and starts connecting. Returns 0 with *out, or prints the
 * error and returns the exit code (2 for a bad address, 1 for an unreadable token file). */
int tide_cli_conn_open(tide_cli_t *cli, tide_cli_conn_t **out);

/* Ends open calls, closes the connection, runs the loop until its handles are closed and closes the
 * loop. NULL is fine. */
void tide_cli_conn_close(tide_cli_conn_t *c);

/* The resolved "HOST:PORT" (borrowed from c). */
const char *tide_cli_conn_address(const tide_cli_conn_t *c);

/* Starts a call of path ("/tide.v1.JobService/GetJob") with req (packed now; borrowed) whose responses
 * are resp_desc messages. timeout_ms 0: none. Returns 0 (ops->on_end will fire exactly once, from
 * tide_cli_conn_run) or -errno (nothing fires). */
int tide_cli_call_start(tide_cli_conn_t *c, const char *path, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
                        const tide_cli_call_ops_t *ops, void *ud, tide_cli_call_t **out);

/* Cancels a call that has not ended; its on_end follows with CANCELLED. */
void tide_cli_call_cancel(tide_cli_call_t *call);

/* Runs the loop until no call is open. */
void tide_cli_conn_run(tide_cli_conn_t *c);

/* Runs the loop for ms milliseconds (calls in flight go on meanwhile): the pause between two polls.
 * Returns 0, or -errno when no timer can be started (then it returns at once). */
int tide_cli_conn_sleep(tide_cli_conn_t *c, int64_t ms);

/* One unary call, run to its end (deadline: cli->call_timeout_ms, default 30 s). Returns 0 with *resp
 * (caller frees with protobuf_c_message_free_unpacked(*resp, NULL)), or -1 with st filled. */
int tide_cli_unary(tide_cli_conn_t *c, const char *path, const ProtobufCMessage *req,
                   const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp, tide_cli_status_t *st);

/* Prints st as the one-line error ("tidectl: CODE: message"), explaining UNAVAILABLE with the address
 * and the connection's own error when the connection never came up or was lost. */
void tide_cli_report(tide_cli_conn_t *c, const tide_cli_status_t *st);

/* Formats what tide_cli_report prints (without "tidectl: " and the newline). */
void tide_cli_status_text(const tide_cli_conn_t *c, const tide_cli_status_t *st, char *buf, size_t size);

#endif

/* Test harness: a socket-free server connection (server_core.h) with a fake clock, driven by a real
 * nghttp2 client session in memory. Shared by test_rpc_conn.c. */
#ifndef TIDE_TEST_CONN_HARNESS_H
#define TIDE_TEST_CONN_HARNESS_H

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stdint.h>

#include "grpc_frame.h"
#include "server_core.h"

#define H_MAX_STREAMS 512

typedef struct h_stream {
    int32_t id;
    int http_status;
    int grpc_status; /* -1 until seen */
    char grpc_message[512];
    int header_frames; /* HEADERS frames received (1 for Trailers-Only) */
    bool end_stream;   /* server sent END_STREAM */
    bool closed;
    uint32_t close_code;
    tide_grpc_decoder_t dec;
    int n_msgs;
    tide_buf_t msgs; /* every response message as "len:bytes|" (the first 4 KiB of them) */
    size_t last_len; /* the last message's length and first byte */
    uint8_t last_first;
    tide_buf_t req; /* request bytes not yet sent */
    size_t req_off;
    bool req_eof; /* END_STREAM after req drains */
} h_stream_t;

typedef struct harness {
    int64_t now;
    tide__srv_ctx_t ctx;
    tide__srv_conn_t *conn;
    nghttp2_session *client;
    h_stream_t streams[H_MAX_STREAMS];
    int n_streams;
    bool goaway;
    int pings_seen;
    int notified;
    bool feed_failed;
} harness_t;

#endif

/* gRPC message framing (Length-Prefixed-Message): 1-byte compressed flag, 4-byte big-endian length,
 * payload. The decoder turns bytes split in any way into whole messages and reuses its buffer, so a
 * stream that carries messages of similar size allocates nothing once warm. */
#ifndef TIDE_GRPC_FRAME_H
#define TIDE_GRPC_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define TIDE_GRPC_PREFIX_LEN 5

typedef struct tide_grpc_decoder {
    tide_buf_t buf;     /* payload of the message being assembled (owned, reused) */
    size_t max_message; /* payload bytes allowed per message */
    uint8_t hdr[TIDE_GRPC_PREFIX_LEN];
    uint8_t hdr_len; /* prefix bytes seen of the current message */
    uint32_t need;   /* declared payload length of the current message (also after -EMSGSIZE) */
    bool have_len;   /* the prefix is complete and valid */
    bool delivered;  /* buf holds a message handed out by the last feed */
    int error;       /* sticky: once a feed failed, every later feed fails the same way */
} tide_grpc_decoder_t;

/* Results of tide_grpc_decoder_feed besides a negative errno. */
#define TIDE_GRPC_DEC_MORE    0 /* all input consumed, no complete message yet */
#define TIDE_GRPC_DEC_MESSAGE 1 /* one complete message */

void tide_grpc_decoder_init(tide_grpc_decoder_t *d, size_t max_message);
/* Frees the buffer; NULL is fine. */
void tide_grpc_decoder_free(tide_grpc_decoder_t *d);
/* Consumes input up to the end of at most one message; *used is set to the bytes consumed.
 * Returns TIDE_GRPC_DEC_MESSAGE with *msg and *msg_len set (borrowed until the next feed or free),
 * TIDE_GRPC_DEC_MORE, -EPROTONOSUPPORT for a compressed message (flag 1: the caller answers
 * UNIMPLEMENTED), -EBADMSG for a flag other than 0 or 1, -EMSGSIZE for a length over max_message
 * (RESOURCE_EXHAUSTED). Errors are sticky. */
int tide_grpc_decoder_feed(tide_grpc_decoder_t *d, const uint8_t *data, size_t len, size_t *used,
                           const uint8_t **msg, size_t *msg_len);
/* True while part of a message (prefix or payload) is buffered. */
bool tide_grpc_decoder_partial(const tide_grpc_decoder_t *d);
/* The declared payload length of the message being assembled (0 before its prefix is complete). */
size_t tide_grpc_decoder_pending_len(const tide_grpc_decoder_t *d);

/* Writes the 5-byte prefix of an uncompressed message of len bytes. */
void tide_grpc_frame_prefix(uint8_t out[TIDE_GRPC_PREFIX_LEN], uint32_t len);
/* Appends prefix + payload to b. */
void tide_grpc_frame_append(tide_buf_t *b, const void *payload, uint32_t len);

#endif

/* Incremental gRPC message decoder and prefix encoder (see grpc_frame.h). Invariant: hdr_len < 5
 * means the prefix is incomplete and buf is empty; have_len means the prefix was validated and buf
 * holds buf.len <= need bytes of payload. */
#include "grpc_frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A buffer grown past this by one big message is dropped when a small one follows. */
#define SHRINK_CAP (1u << 20)
#define SMALL_MSG  (64u << 10)

void tide_grpc_decoder_init(tide_grpc_decoder_t *d, size_t max_message)
{
    memset(d, 0, sizeof(*d));
    tide_buf_init(&d->buf);
    d->max_message = max_message;
}

void tide_grpc_decoder_free(tide_grpc_decoder_t *d)
{
    if (!d)
        return;
    tide_buf_free(&d->buf);
}

bool tide_grpc_decoder_partial(const tide_grpc_decoder_t *d)
{
    return !d->delivered && d->hdr_len > 0;
}

size_t tide_grpc_decoder_pending_len(const tide_grpc_decoder_t *d)
{
    return (!d->delivered && d->hdr_len == TIDE_GRPC_PREFIX_LEN) ? d->need : 0;
}

int tide_grpc_decoder_feed(tide_grpc_decoder_t *d, const uint8_t *data, size_t len, size_t *used,
                           const uint8_t **msg, size_t *msg_len)
{
    size_t off = 0;

    *used = 0;
    if (d->error)
        return d->error;
    if (d->delivered) {
        d->delivered = false;
        d->have_len = false;
        d->hdr_len = 0;
        d->buf.len = 0;
    }
    while (d->hdr_len < TIDE_GRPC_PREFIX_LEN && off < len)
        d->hdr[d->hdr_len++] = data[off++];
    if (d->hdr_len < TIDE_GRPC_PREFIX_LEN) {
        *used = off;
        return TIDE_GRPC_DEC_MORE;
    }
    if (!d->have_len) {
        /* The prefix is complete: validate it once. */
        uint32_t n = ((uint32_t)d->hdr[1] << 24) | ((uint32_t)d->hdr[2] << 16) |
                     ((uint32_t)d->hdr[3] << 8) | (uint32_t)d->hdr[4];
        d->need = n; /* also kept on error: callers name the declared size */
        if (d->hdr[0] == 1)
            d->error = -EPROTONOSUPPORT;
        else if (d->hdr[0] != 0)
            d->error = -EBADMSG;
        else if (n > d->max_message)
            d->error = -EMSGSIZE;
        if (d->error) {
            *used = off;
            return d->error;
        }
        d->have_len = true;
        if (d->buf.cap > SHRINK_CAP && n <= SMALL_MSG)
            tide_buf_free(&d->buf);
    }
    size_t want = d->need - d->buf.len;
    size_t take = len - off < want ? len - off : want;
    tide_buf_append(&d->buf, data + off, take);
    off += take;
    *used = off;
    if (d->buf.len < d->need)
        return TIDE_GRPC_DEC_MORE;
    d->delivered = true;
    *msg = d->buf.data ? d->buf.data : (const uint8_t *)"";
    *msg_len = d->buf.len;
    return TIDE_GRPC_DEC_MESSAGE;
}

void tide_grpc_frame_prefix(uint8_t out[TIDE_GRPC_PREFIX_LEN], uint32_t len)
{
    out[0] = 0;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

void tide_grpc_frame_append(tide_buf_t *b, const void *payload, uint32_t len)
{
    uint8_t *p = tide_buf_reserve(b, TIDE_GRPC_PREFIX_LEN + (size_t)len);
    tide_grpc_frame_prefix(p, len);
    if (len)
        memcpy(p + TIDE_GRPC_PREFIX_LEN, payload, len);
    b->len += TIDE_GRPC_PREFIX_LEN + (size_t)len;
}

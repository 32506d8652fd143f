/* libFuzzer target for the small decoders of network input: the gRPC message decoder (bytes split
 * at points chosen by the input), grpc-timeout parsing, grpc-message percent-decoding and
 * connection sniffing. Checks what can be checked: consumed counts add up, messages respect the
 * limit, a decoded timeout round-trips through the formatter without shrinking. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_frame.h"
#include "grpc_percent.h"
#include "grpc_timeout.h"
#include "sniff.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tide_grpc_decoder_t d;
    tide_buf_t b = TIDE_BUF_INIT;
    size_t off = 1, step, total = 0;
    int64_t ms;

    if (size == 0)
        return 0;
    step = (size_t)(data[0] % 17) + 1;
    tide_grpc_decoder_init(&d, 512);
    while (off < size) {
        size_t n = size - off < step ? size - off : step;
        while (n > 0) {
            const uint8_t *msg;
            size_t used = 0, mlen = 0;
            int rc = tide_grpc_decoder_feed(&d, data + off, n, &used, &msg, &mlen);
            if (used > n)
                abort();
            off += used;
            n -= used;
            total += used;
            if (rc < 0) {
                off = size;
                break;
            }
            if (rc == TIDE_GRPC_DEC_MESSAGE) {
                if (mlen > 512)
                    abort();
                b.len = 0;
                tide_buf_append(&b, msg, mlen); /* the message must be readable in full */
            } else if (n != 0) {
                abort(); /* MORE must consume everything */
            }
        }
    }
    tide_grpc_decoder_free(&d);

    b.len = 0;
    tide_grpc_percent_decode(&b, (const char *)data, size);
    if (b.len > size)
        abort();
    b.len = 0;
    tide_grpc_percent_encode(&b, (const char *)data, size);
    {
        tide_buf_t back = TIDE_BUF_INIT;
        tide_grpc_percent_decode(&back, (const char *)b.data, b.len);
        if (back.len != size || (size && memcmp(back.data, data, size) != 0))
            abort(); /* encode then decode is the identity */
        tide_buf_free(&back);
    }
    if (tide_grpc_timeout_parse((const char *)data, size, &ms) == 0) {
        char s[TIDE_GRPC_TIMEOUT_MAX_LEN];
        int64_t again;
        if (ms < 0)
            abort();
        if (ms > 0) {
            tide_grpc_timeout_format(ms, s);
            if (tide_grpc_timeout_parse(s, strlen(s), &again) != 0 || again < ms)
                abort();
        }
    }
    (void)tide_sniff(data, size);
    tide_buf_free(&b);
    (void)total;
    return 0;
}

/* Unit tests of the pure transport pieces: gRPC framing (every split offset, several messages per
 * read, oversize, compressed flag), grpc-timeout, grpc-message percent-encoding, connection
 * sniffing, status names and the HTTP-to-gRPC mapping. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc_frame.h"
#include "grpc_percent.h"
#include "grpc_status.h"
#include "grpc_timeout.h"
#include "sniff.h"

/* Feeds data in pieces of the given sizes (cycled); collects every message into out as
 * "len:bytes|". */
static int feed_pieces(tide_grpc_decoder_t *d, const uint8_t *data, size_t len,
                       const size_t *pieces, size_t npieces, tide_buf_t *out, int *nmsg)
{
    size_t off = 0, k = 0;

    *nmsg = 0;
    while (off < len) {
        size_t piece = pieces[k++ % npieces];
        size_t end = off + piece > len ? len : off + piece;
        while (off < end) {
            const uint8_t *msg;
            size_t used, mlen;
            int rc = tide_grpc_decoder_feed(d, data + off, end - off, &used, &msg, &mlen);
            off += used;
            if (rc < 0)
                return rc;
            if (rc == TIDE_GRPC_DEC_MESSAGE) {
                tide_buf_printf(out, "%zu:", mlen);
                tide_buf_append(out, msg, mlen);
                tide_buf_append(out, "|", 1);
                (*nmsg)++;
            } else {
                assert_int_equal(off, end);
            }
        }
    }
    return 0;
}

static void frame_every_split(void **state)
{
    tide_buf_t wire = TIDE_BUF_INIT, expect = TIDE_BUF_INIT;
    const char *msgs[] = {"hello", "", "a somewhat longer message with more bytes", "x"};
    size_t i, split;

    (void)state;
    for (i = 0; i < 4; i++) {
        tide_grpc_frame_append(&wire, msgs[i], (uint32_t)strlen(msgs[i]));
        tide_buf_printf(&expect, "%zu:%s|", strlen(msgs[i]), msgs[i]);
    }
    /* Two reads split at every offset. */
    for (split = 0; split <= wire.len; split++) {
        tide_grpc_decoder_t d;
        tide_buf_t got = TIDE_BUF_INIT;
        size_t pieces[2] = {split ? split : 1, wire.len};
        int n;
        tide_grpc_decoder_init(&d, 1024);
        assert_int_equal(feed_pieces(&d, wire.data, wire.len, pieces, 2, &got, &n), 0);
        assert_int_equal(n, 4);
        assert_int_equal(got.len, expect.len);
        assert_memory_equal(got.data, expect.data, got.len);
        assert_false(tide_grpc_decoder_partial(&d));
        tide_buf_free(&got);
        tide_grpc_decoder_free(&d);
    }
    /* One byte at a time, and all at once. */
    for (i = 1; i <= wire.len; i += wire.len - 1) {
        tide_grpc_decoder_t d;
        tide_buf_t got = TIDE_BUF_INIT;
        int n;
        tide_grpc_decoder_init(&d, 1024);
        assert_int_equal(feed_pieces(&d, wire.data, wire.len, &i, 1, &got, &n), 0);
        assert_int_equal(n, 4);
        assert_memory_equal(got.data, expect.data, expect.len);
        tide_buf_free(&got);
        tide_grpc_decoder_free(&d);
    }
    tide_buf_free(&wire);
    tide_buf_free(&expect);
}

static void frame_partial_state(void **state)
{
    tide_grpc_decoder_t d;
    uint8_t wire[5 + 3];
    const uint8_t *msg;
    size_t used, mlen;

    (void)state;
    tide_grpc_frame_prefix(wire, 3);
    memcpy(wire + 5, "abc", 3);
    tide_grpc_decoder_init(&d, 16);
    assert_false(tide_grpc_decoder_partial(&d));
    assert_int_equal(tide_grpc_decoder_feed(&d, wire, 2, &used, &msg, &mlen), TIDE_GRPC_DEC_MORE);
    assert_int_equal(used, 2);
    assert_true(tide_grpc_decoder_partial(&d));
    assert_int_equal(tide_grpc_decoder_pending_len(&d), 0);
    assert_int_equal(tide_grpc_decoder_feed(&d, wire + 2, 4, &used, &msg, &mlen),
                     TIDE_GRPC_DEC_MORE);
    assert_int_equal(tide_grpc_decoder_pending_len(&d), 3);
    assert_int_equal(tide_grpc_decoder_feed(&d, wire + 6, 2, &used, &msg, &mlen),
                     TIDE_GRPC_DEC_MESSAGE);
    assert_int_equal(mlen, 3);
    assert_memory_equal(msg, "abc", 3);
    assert_false(tide_grpc_decoder_partial(&d));
    tide_grpc_decoder_free(&d);
}

static void frame_errors(void **state)
{
    tide_grpc_decoder_t d;
    uint8_t wire[5 + 4];
    const uint8_t *msg;
    size_t used, mlen;

    (void)state;
    /* Oversize: rejected from the prefix alone, and the error sticks. */
    tide_grpc_frame_prefix(wire, 17);
    tide_grpc_decoder_init(&d, 16);
    assert_int_equal(tide_grpc_decoder_feed(&d, wire, 5, &used, &msg, &mlen), -EMSGSIZE);
    assert_int_equal(d.need, 17);
    assert_int_equal(tide_grpc_decoder_feed(&d, wire, 5, &used, &msg, &mlen), -EMSGSIZE);
    tide_grpc_decoder_free(&d);
    /* Exactly max is fine. */
    tide_grpc_frame_prefix(wire, 4);
    tide_grpc_decoder_init(&d, 4);
    assert_int_equal(tide_grpc_decoder_feed(&d, wire, 9, &used, &msg, &mlen),
                     TIDE_GRPC_DEC_MESSAGE);
    tide_grpc_decoder_free(&d);
    /* Compressed flag. */
    tide_grpc_frame_prefix(wire, 4);
    wire[0] = 1;
    tide_grpc_decoder_init(&d, 16);
    assert_int_equal(tide_grpc_decoder_feed(&d, wire, 9, &used, &msg, &mlen), -EPROTONOSUPPORT);
    tide_grpc_decoder_free(&d);
    /* Any other flag. */
    wire[0] = 0x80;
    tide_grpc_decoder_init(&d, 16);
    assert_int_equal(tide_grpc_decoder_feed(&d, wire, 9, &used, &msg, &mlen), -EBADMSG);
    tide_grpc_decoder_free(&d);
    /* A 4 GiB length cannot wrap anything. */
    memset(wire + 1, 0xff, 4);
    wire[0] = 0;
    tide_grpc_decoder_init(&d, 4u << 20);
    assert_int_equal(tide_grpc_decoder_feed(&d, wire, 5, &used, &msg, &mlen), -EMSGSIZE);
    tide_grpc_decoder_free(&d);
}

static void frame_buffer_reused(void **state)
{
    tide_grpc_decoder_t d;
    tide_buf_t wire = TIDE_BUF_INIT;
    uint8_t payload[300];
    const uint8_t *msg;
    size_t used, mlen, i, cap = 0;
    uint8_t *data = NULL;

    (void)state;
    memset(payload, 'p', sizeof(payload));
    tide_grpc_frame_append(&wire, payload, sizeof(payload));
    tide_grpc_decoder_init(&d, 1024);
    for (i = 0; i < 100; i++) {
        /* Split so the decoder has to copy. */
        assert_int_equal(tide_grpc_decoder_feed(&d, wire.data, 100, &used, &msg, &mlen),
                         TIDE_GRPC_DEC_MORE);
        assert_int_equal(
            tide_grpc_decoder_feed(&d, wire.data + 100, wire.len - 100, &used, &msg, &mlen),
            TIDE_GRPC_DEC_MESSAGE);
        assert_int_equal(mlen, sizeof(payload));
        if (i == 0) {
            cap = d.buf.cap;
            data = d.buf.data;
        }
        /* Warm: the same storage every time. */
        assert_int_equal(d.buf.cap, cap);
        assert_ptr_equal(d.buf.data, data);
    }
    tide_grpc_decoder_free(&d);
    tide_buf_free(&wire);
}

static void timeout_parse(void **state)
{
    int64_t ms = 0;

    (void)state;
    assert_int_equal(tide_grpc_timeout_parse("100m", 4, &ms), 0);
    assert_int_equal(ms, 100);
    assert_int_equal(tide_grpc_timeout_parse("5S", 2, &ms), 0);
    assert_int_equal(ms, 5000);
    assert_int_equal(tide_grpc_timeout_parse("1H", 2, &ms), 0);
    assert_int_equal(ms, 3600000);
    assert_int_equal(tide_grpc_timeout_parse("2M", 2, &ms), 0);
    assert_int_equal(ms, 120000);
    assert_int_equal(tide_grpc_timeout_parse("1500u", 5, &ms), 0);
    assert_int_equal(ms, 2);
    assert_int_equal(tide_grpc_timeout_parse("1n", 2, &ms), 0);
    assert_int_equal(ms, 1);
    assert_int_equal(tide_grpc_timeout_parse("99999999H", 9, &ms), 0);
    assert_int_equal(ms, 99999999LL * 3600000);
    assert_int_equal(tide_grpc_timeout_parse("0m", 2, &ms), 0);
    assert_int_equal(ms, 0);
    assert_int_equal(tide_grpc_timeout_parse("123456789m", 10, &ms), -EINVAL); /* 9 digits */
    assert_int_equal(tide_grpc_timeout_parse("m", 1, &ms), -EINVAL);
    assert_int_equal(tide_grpc_timeout_parse("", 0, &ms), -EINVAL);
    assert_int_equal(tide_grpc_timeout_parse("10x", 3, &ms), -EINVAL);
    assert_int_equal(tide_grpc_timeout_parse("-1S", 3, &ms), -EINVAL);
    assert_int_equal(tide_grpc_timeout_parse("1 S", 3, &ms), -EINVAL);
    assert_int_equal(tide_grpc_timeout_parse("10", 2, &ms), -EINVAL);
}

static void timeout_format(void **state)
{
    char out[TIDE_GRPC_TIMEOUT_MAX_LEN];
    int64_t ms;

    (void)state;
    tide_grpc_timeout_format(100, out);
    assert_string_equal(out, "100m");
    tide_grpc_timeout_format(99999999, out);
    assert_string_equal(out, "99999999m");
    tide_grpc_timeout_format(100000000, out);
    assert_string_equal(out, "100000S");
    tide_grpc_timeout_format(0, out);
    assert_string_equal(out, "1m");
    tide_grpc_timeout_format(INT64_MAX, out);
    assert_string_equal(out, "99999999H");
    /* Round trip never shortens a deadline. */
    for (ms = 1; ms < (int64_t)1 << 40; ms = ms * 3 + 7) {
        int64_t back;
        tide_grpc_timeout_format(ms, out);
        assert_int_equal(tide_grpc_timeout_parse(out, strlen(out), &back), 0);
        assert_true(back >= ms);
    }
}

static void percent_roundtrip(void **state)
{
    tide_buf_t enc = TIDE_BUF_INIT, dec = TIDE_BUF_INIT;
    const char *s = "100% done\n\xc3\xa9t\xc3\xa9 ~ok";

    (void)state;
    tide_grpc_percent_encode(&enc, s, strlen(s));
    assert_string_equal(tide_buf_cstr(&enc), "100%25 done%0A%C3%A9t%C3%A9 ~ok");
    tide_grpc_percent_decode(&dec, (const char *)enc.data, enc.len);
    assert_string_equal(tide_buf_cstr(&dec), s);
    /* Malformed escapes pass through untouched. */
    dec.len = 0;
    tide_grpc_percent_decode(&dec, "a%zzb%4", 7);
    assert_string_equal(tide_buf_cstr(&dec), "a%zzb%4");
    dec.len = 0;
    tide_grpc_percent_decode(&dec, "%41%62%", 7);
    assert_string_equal(tide_buf_cstr(&dec), "Ab%");
    /* A space first or last is escaped: HTTP/2 refuses a field value with whitespace at either end. */
    enc.len = 0;
    tide_grpc_percent_encode(&enc, " is gone ", 9);
    assert_string_equal(tide_buf_cstr(&enc), "%20is gone%20");
    enc.len = 0;
    tide_grpc_percent_encode(&enc, " ", 1);
    assert_string_equal(tide_buf_cstr(&enc), "%20");
    tide_buf_free(&enc);
    tide_buf_free(&dec);
}

static tide_sniff_t sniff_str(const char *s)
{
    return tide_sniff((const uint8_t *)s, strlen(s));
}

static void sniffing(void **state)
{
    size_t i;

    (void)state;
    assert_int_equal(tide_sniff(NULL, 0), TIDE_SNIFF_NEED_MORE);
    /* Every prefix of the preface needs more; the whole of it is HTTP/2. */
    for (i = 1; i < TIDE_H2_PREFACE_LEN; i++)
        assert_int_equal(tide_sniff((const uint8_t *)TIDE_H2_PREFACE, i), TIDE_SNIFF_NEED_MORE);
    assert_int_equal(sniff_str(TIDE_H2_PREFACE), TIDE_SNIFF_HTTP2);
    assert_int_equal(sniff_str(TIDE_H2_PREFACE "\x00\x00\x00\x04"), TIDE_SNIFF_HTTP2);
    assert_int_equal(sniff_str("GET / HTTP/1.1\r\n"), TIDE_SNIFF_HTTP1);
    assert_int_equal(sniff_str("GET "), TIDE_SNIFF_HTTP1);
    assert_int_equal(sniff_str("GE"), TIDE_SNIFF_NEED_MORE);
    assert_int_equal(sniff_str("POST"), TIDE_SNIFF_NEED_MORE);
    assert_int_equal(sniff_str("PRI * HTTP/1.1\r\n"), TIDE_SNIFF_HTTP1);
    assert_int_equal(sniff_str("M-SEARCH * HTTP/1.1"), TIDE_SNIFF_HTTP1);
    assert_int_equal(sniff_str("\x16\x03\x01"), TIDE_SNIFF_GARBAGE); /* TLS ClientHello */
    assert_int_equal(sniff_str(" GET"), TIDE_SNIFF_GARBAGE);
    assert_int_equal(sniff_str("get / HTTP/1.1"), TIDE_SNIFF_GARBAGE);
    assert_int_equal(sniff_str("ABCDEFGHIJKLMNOPQ"), TIDE_SNIFF_GARBAGE);
    assert_int_equal(sniff_str("ABCDEFGHIJKLMNOP"), TIDE_SNIFF_NEED_MORE);
    assert_int_equal(sniff_str("ABCDEFGHIJKLMNOP "), TIDE_SNIFF_HTTP1);
}

static void status_names(void **state)
{
    (void)state;
    assert_string_equal(tide_grpc_code_name(TIDE_GRPC_OK), "OK");
    assert_string_equal(tide_grpc_code_name(TIDE_GRPC_UNAUTHENTICATED), "UNAUTHENTICATED");
    assert_string_equal(tide_grpc_code_name(17), "UNKNOWN");
    assert_string_equal(tide_grpc_code_name(-1), "UNKNOWN");
    assert_int_equal(tide_grpc_code_from_http(400), TIDE_GRPC_INTERNAL);
    assert_int_equal(tide_grpc_code_from_http(401), TIDE_GRPC_UNAUTHENTICATED);
    assert_int_equal(tide_grpc_code_from_http(403), TIDE_GRPC_PERMISSION_DENIED);
    assert_int_equal(tide_grpc_code_from_http(404), TIDE_GRPC_UNIMPLEMENTED);
    assert_int_equal(tide_grpc_code_from_http(503), TIDE_GRPC_UNAVAILABLE);
    assert_int_equal(tide_grpc_code_from_http(200), TIDE_GRPC_UNKNOWN);
    assert_int_equal(tide_grpc_code_from_http(418), TIDE_GRPC_UNKNOWN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(frame_every_split), cmocka_unit_test(frame_partial_state),
        cmocka_unit_test(frame_errors),      cmocka_unit_test(frame_buffer_reused),
        cmocka_unit_test(timeout_parse),     cmocka_unit_test(timeout_format),
        cmocka_unit_test(percent_roundtrip), cmocka_unit_test(sniffing),
        cmocka_unit_test(status_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* Tells from the first bytes of a connection whether it speaks HTTP/2 (the 24-byte client preface,
 * prior knowledge) or HTTP/1 (a request line: an upper-case method token and a space). */
#ifndef TIDE_SNIFF_H
#define TIDE_SNIFF_H

#include <stddef.h>
#include <stdint.h>

typedef enum tide_sniff {
    TIDE_SNIFF_NEED_MORE = 0, /* a prefix of either: read more */
    TIDE_SNIFF_HTTP2 = 1,     /* the whole preface is there */
    TIDE_SNIFF_HTTP1 = 2,
    TIDE_SNIFF_GARBAGE = 3, /* neither: close the connection */
} tide_sniff_t;

#define TIDE_H2_PREFACE     "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define TIDE_H2_PREFACE_LEN 24
/* Longest method token accepted before a space ("OPTIONS", "PROPFIND" ... fit). */
#define TIDE_SNIFF_MAX_METHOD 16

/* Classifies data[0..len), everything received so far. Pure; never reads past len. */
tide_sniff_t tide_sniff(const uint8_t *data, size_t len);

#endif

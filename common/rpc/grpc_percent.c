/* grpc-message percent-encoding both ways (see grpc_percent.h). Pure functions over tide_buf_t. */
#include <stdbool.h>

#include "grpc_percent.h"

static const char hex[] = "0123456789ABCDEF";

void tide_grpc_percent_encode(tide_buf_t *b, const char *s, size_t len)
{
    size_t i;

    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        /* A space first or last too: HTTP/2 refuses a field value that starts or ends with whitespace
         * (RFC 9113, 8.2.1), and nghttp2 resets such a stream. */
        bool edge_space = c == ' ' && (i == 0 || i == len - 1);
        if (c >= 0x20 && c <= 0x7e && c != '%' && !edge_space) {
            tide_buf_append(b, &c, 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            tide_buf_append(b, e, 3);
        }
    }
}

static int unhex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void tide_grpc_percent_decode(tide_buf_t *b, const char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        if (s[i] == '%' && i + 2 < len && unhex(s[i + 1]) >= 0 && unhex(s[i + 2]) >= 0) {
            unsigned char c = (unsigned char)(unhex(s[i + 1]) << 4 | unhex(s[i + 2]));
            tide_buf_append(b, &c, 1);
            i += 3;
        } else {
            tide_buf_append(b, &s[i], 1);
            i++;
        }
    }
}

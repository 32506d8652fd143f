/* Base64 (RFC 4648), for the proto3 JSON mapping of `bytes` and etcd's JSON gateway. Encoding is always the
 * standard alphabet with padding; decoding accepts both alphabets, padding optional, and rejects anything
 * else. */
#include "base64.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "xmalloc.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *tide_base64_encode(const void *data, size_t len)
{
    const unsigned char *p = data;
    char *out = tide_xmalloc((len + 2) / 3 * 4 + 1);
    char *o = out;
    size_t i;

    for (i = 0; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = alphabet[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

static int sextet(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

int tide_base64_decode(const char *text, size_t text_len, unsigned char **out, size_t *out_len)
{
    unsigned char *buf;
    size_t n = text_len, i, o = 0;
    uint32_t acc = 0;
    int bits = 0;

    /* Up to two '=' at the end, and only where they complete a group of four. */
    if (n > 0 && text[n - 1] == '=') {
        if (n % 4 != 0)
            return -EINVAL;
        n--;
        if (n > 0 && text[n - 1] == '=')
            n--;
    }
    if (n % 4 == 1)
        return -EINVAL;
    buf = tide_xmalloc(n / 4 * 3 + 3);
    for (i = 0; i < n; i++) {
        int v = sextet(text[i]);
        if (v < 0) {
            free(buf);
            return -EINVAL;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    /* Leftover bits must be zero, or the text was not produced by an encoder. */
    if (acc != 0) {
        free(buf);
        return -EINVAL;
    }
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    return 0;
}

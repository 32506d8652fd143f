/* Base64 (RFC 4648): the proto3 JSON mapping of `bytes` (common/pbjson) and etcd's JSON gateway
 * (common/store/etcd_client.c) encode bytes this way. */
#ifndef TIDE_BASE64_H
#define TIDE_BASE64_H

#include <stddef.h>

/* Standard base64 (with padding) of len bytes, NUL-terminated. Caller frees with free(). Never NULL. */
char *tide_base64_encode(const void *data, size_t len);

/* Decodes standard or URL-safe base64, padding optional. Returns 0 with *out (caller frees with free();
 * never NULL, even for zero bytes; one NUL byte follows the data) and *out_len, or -EINVAL on a bad
 * character, length or padding (*out untouched). */
int tide_base64_decode(const char *text, size_t text_len, unsigned char **out, size_t *out_len);

#endif

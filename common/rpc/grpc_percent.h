/* Percent-encoding of the grpc-message header (gRPC over HTTP/2 spec, "Responses"): bytes outside
 * 0x20-0x7E and '%' itself travel as %XX. */
#ifndef TIDE_GRPC_PERCENT_H
#define TIDE_GRPC_PERCENT_H

#include <stddef.h>

#include "buf.h"

/* Appends s[0..len) encoded to b (not NUL-terminated; use tide_buf_cstr). */
void tide_grpc_percent_encode(tide_buf_t *b, const char *s, size_t len);
/* Appends s[0..len) decoded to b. Malformed escapes ("%", "%G1") are kept as they are, as the spec
 * asks (a bad message must not be thrown away). */
void tide_grpc_percent_decode(tide_buf_t *b, const char *s, size_t len);

#endif

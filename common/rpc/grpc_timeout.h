/* The grpc-timeout header: TimeoutValue (1-8 ASCII digits) + TimeoutUnit (H M S m u n). */
#ifndef TIDE_GRPC_TIMEOUT_H
#define TIDE_GRPC_TIMEOUT_H

#include <stddef.h>
#include <stdint.h>

#define TIDE_GRPC_TIMEOUT_MAX_LEN 10 /* 8 digits + unit + NUL */

/* Parses s[0..len) into milliseconds, rounding sub-millisecond values up (so "1n" is 1 ms and a
 * deadline never fires early). Returns 0, or -EINVAL for anything the spec does not allow. */
int tide_grpc_timeout_parse(const char *s, size_t len, int64_t *ms);
/* Formats ms (> 0) with the finest unit that fits 8 digits, rounding up. out gets a NUL-terminated
 * string of at most TIDE_GRPC_TIMEOUT_MAX_LEN bytes. Values over 99999999 hours are clamped. */
void tide_grpc_timeout_format(int64_t ms, char out[TIDE_GRPC_TIMEOUT_MAX_LEN]);

#endif

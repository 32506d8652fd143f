/* Log output of several ranks on one terminal: each line prefixed "[rank R] ", a rank's partial line
 * held until its newline arrives so ranks never interleave mid-line. With one rank, bytes pass through
 * untouched. */
#ifndef TIDE_CLI_LOGMUX_H
#define TIDE_CLI_LOGMUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* A partial line longer than this is written out (with a newline) rather than held without bound. */
#define TIDE_CLI_LOGMUX_MAX_PARTIAL 65536

typedef struct tide_cli_logmux tide_cli_logmux_t;

/* prefix: prefix and buffer per rank; false: pass bytes through. Never NULL. */
tide_cli_logmux_t *tide_cli_logmux_new(bool prefix);
/* NULL is fine. Held partial lines are dropped: call tide_cli_logmux_flush first. */
void tide_cli_logmux_free(tide_cli_logmux_t *m);

/* Appends to out what rank's len bytes make printable now (data is borrowed). */
void tide_cli_logmux_feed(tide_cli_logmux_t *m, int32_t rank, const uint8_t *data, size_t len, tide_buf_t *out);

/* Appends every held partial line, each ended with a newline, in rank order, and forgets them. */
void tide_cli_logmux_flush(tide_cli_logmux_t *m, tide_buf_t *out);

#endif

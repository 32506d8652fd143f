/* Durations for tidectl: parsing --time values (unit and Slurm forms) and printing ages and lengths the
 * way kubectl and squeue show them. Pure functions. */
#ifndef TIDE_CLI_DURATION_H
#define TIDE_CLI_DURATION_H

#include <stddef.h>
#include <stdint.h>

/* Parses a duration into seconds. Forms: "90" (seconds; note that Slurm reads a bare number as
 * minutes), "90s", "15m", "2h", "1d", combinations such as "1h30m" or "1d12h" (each unit once), Slurm's
 * "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM", "D-HH:MM:SS", and "unlimited" (0: no limit).
 * Returns 0, -EINVAL when malformed, -ERANGE beyond 100 years. */
int tide_cli_duration_parse(const char *s, int64_t *seconds);

/* A short age as kubectl's AGE column: "0s".."59s", "1m".."59m", "1h".."23h", "1d".."364d", "1y"...
 * Negative ages (clock skew) print as "0s". Writes into buf (NUL-terminated, truncated to size). */
void tide_cli_age_format(int64_t seconds, char *buf, size_t size);

/* An exact length, largest unit first, zero units left out: "0s", "45s", "1h30m", "2d3h0m5s" prints as
 * "2d3h5s". Negative prints as "0s". */
void tide_cli_duration_format(int64_t seconds, char *buf, size_t size);

#endif

/* tide-scheduler's command line: flags -> tide_daemon_config_t, and the values they take (durations,
 * pools, fractions). Separate from main.c so tests can parse command lines without starting a daemon. */
#ifndef TIDE_SCHED_FLAGS_H
#define TIDE_SCHED_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include "daemon.h"
#include "error.h"
#include "log.h"

/* Hours in a month for --failure-rate (per 1,000 GPUs per month): 8,760 / 12, as the core's default. */
#define TIDE_HOURS_PER_MONTH 730.0

/* Parses a duration into milliseconds: "0", a bare number (seconds), or numbers with units "ms", "s",
 * "m", "h", "d" in decreasing order, each at most once ("500ms", "90s", "15m", "1h30m", "2d"). Returns 0,
 * -EINVAL when malformed, -ERANGE beyond 10 years. */
int tide_sched_parse_duration(const char *s, int64_t *ms);

/* Parses --pool's value "NAME" (shared) or "NAME=CLASS" (dedicated to low, normal, high or critical;
 * case-insensitive) into *dedicated (-1 shared, else a tide_prio_t). The name's own rules are the core's
 * (tide_core_pool_add). Returns 0 or -EINVAL with err saying what is wrong (without the flag's name). */
int tide_sched_parse_pool(const char *s, char *name, size_t name_size, int32_t *dedicated, tide_error_t *err);

/* Parses argv (argv[0] the program) into cfg, which the caller filled with defaults (data_dir, listen,
 * tide_core_config_default), and *level. Strings in cfg are borrowed from argv. Returns 0 to run, 1 when
 * --help or --version was written to out, or -EINVAL with err holding one line that names the flag
 * ("--aging: \"5x\" is not a duration (e.g. 30m, 1h30m, 0 to disable)"). Not re-entrant (getopt). */
int tide_sched_parse_args(int argc, char **argv, tide_daemon_config_t *cfg, tide_log_level_t *level, FILE *out,
                          tide_error_t *err);

/* Writes `tide-scheduler --help`. */
void tide_sched_usage(FILE *f);

#endif

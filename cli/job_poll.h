/* One step of tidectl's waits on a job (checkpoint --wait, scale --wait): sleep the poll interval,
 * re-read the job with GetJob, keep the newest copy. */
#ifndef TIDE_CLI_JOB_POLL_H
#define TIDE_CLI_JOB_POLL_H

#include <stdint.h>

#include "cli.h"
#include "progress_line.h"
#include "rpc_call.h"
#include "tide/v1/types.pb-c.h"

/* Sleeps poll_ms on conn, then reads job id. On success *last (the caller's, freed here when
 * replaced; the caller frees the final one) is the job read and 0 is returned. On failure the
 * progress line pl is erased, the error printed (a timer that cannot start: INTERNAL; a failed
 * call: its status), *last left as it was, and TIDE_CLI_EXIT_FAILURE returned. */
int tide_cli_job_poll(tide_cli_t *cli, tide_cli_conn_t *conn, const char *id, int64_t poll_ms,
                      tide_cli_progress_t *pl, Tide__V1__Job **last);

#endif

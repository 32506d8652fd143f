/* Every job a ListJobs filter matches, across pages: shared by `tidectl jobs` and `tidectl queue`. */
#ifndef TIDE_CLI_JOB_LIST_H
#define TIDE_CLI_JOB_LIST_H

#include <stddef.h>

#include "cli.h"
#include "rpc_call.h"
#include "tide/v1/job_service.pb-c.h"

typedef struct tide_cli_job_list {
    Tide__V1__ListJobsResponse **pages; /* owned */
    size_t n_pages;
    Tide__V1__Job **jobs; /* n_jobs, borrowed from the pages; owned array */
    size_t n_jobs;
} tide_cli_job_list_t;

/* Calls ListJobs with req (its page_size and page_token are set here) until the scheduler says there
 * are no more pages; refuses a page token that repeats. 0 with *out filled (free it with
 * tide_cli_job_list_free, also after a failure), or an exit code after reporting the error. */
int tide_cli_job_list_fetch(tide_cli_t *cli, tide_cli_conn_t *conn, Tide__V1__ListJobsRequest *req,
                            tide_cli_job_list_t *out);
void tide_cli_job_list_free(tide_cli_job_list_t *l);

#endif

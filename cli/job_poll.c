/* tidectl's wait step on a job (job_poll.h): sleep, GetJob, keep the newest copy. The one place
 * both waits re-read a job, so they report errors and own their copies the same way. */
#include "job_poll.h"

#include "tide/v1/job_service.pb-c.h"

int tide_cli_job_poll(tide_cli_t *cli, tide_cli_conn_t *conn, const char *id, int64_t poll_ms,
                      tide_cli_progress_t *pl, Tide__V1__Job **last)
{
    Tide__V1__GetJobRequest req = TIDE__V1__GET_JOB_REQUEST__INIT;
    tide_cli_status_t st;
    ProtobufCMessage *resp;

    if (tide_cli_conn_sleep(conn, poll_ms) < 0) {
        tide_cli_progress_clear(pl);
        tide_cli_errorf(cli, "INTERNAL: cannot start a timer");
        return TIDE_CLI_EXIT_FAILURE;
    }
    req.id = (char *)id;
    if (tide_cli_unary(conn, "/tide.v1.JobService/GetJob", &req.base, &tide__v1__job__descriptor, &resp,
                       &st) < 0) {
        tide_cli_progress_clear(pl);
        tide_cli_report(conn, &st);
        return TIDE_CLI_EXIT_FAILURE;
    }
    if (*last)
        protobuf_c_message_free_unpacked(&(*last)->base, NULL);
    *last = (Tide__V1__Job *)resp;
    return 0;
}

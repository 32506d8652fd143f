/* tidectl jobs, job and cancel: the JobService's unary calls. `jobs` lists every page (job_list.c). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "job_list.h"
#include "output.h"
#include "render.h"
#include "rpc_call.h"
#include "table.h"
#include "tide/v1/job_service.pb-c.h"
#include "xmalloc.h"

static void write_buf(FILE *f, tide_buf_t *b)
{
    if (b->len)
        fwrite(b->data, 1, b->len, f);
    fflush(f);
}

int tide_cli_cmd_jobs(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__ListJobsRequest req = TIDE__V1__LIST_JOBS_REQUEST__INIT;
    Tide__V1__ListJobsResponse all = TIDE__V1__LIST_JOBS_RESPONSE__INIT;
    tide_cli_job_list_t list = {0};
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    int *states = NULL, id, rc = TIDE_CLI_EXIT_FAILURE;
    size_t n_states = 0;
    bool all_states = false;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto done;
        if (id == TIDE_CLI_OPT_STATE) {
            if (tide_cli_parse_enum_list(a.arg, &tide__v1__job_state__descriptor, "JOB_STATE_", "job state",
                                         &states, &n_states, &err) < 0) {
                rc = tide_cli_usage_error(cli, cmd, "%s", err.text);
                goto done;
            }
        } else if (id == TIDE_CLI_OPT_ALL) {
            all_states = true;
        } else {
            rc = tide_cli_usage_error(cli, cmd, "unexpected argument '%s'", a.arg);
            goto done;
        }
    }
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    if (!all_states) {
        req.n_states = n_states;
        req.states = (Tide__V1__JobState *)states;
    }
    if ((rc = tide_cli_job_list_fetch(cli, conn, &req, &list)) != 0)
        goto done;
    all.jobs = list.jobs;
    all.n_jobs = list.n_jobs;
    if (cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json(cli->out, &all.base);
    } else if (all.n_jobs == 0) {
        fputs("No jobs found.\n", cli->err);
    } else {
        tide_buf_t b = TIDE_BUF_INIT;
        tide_cli_render_jobs(all.jobs, all.n_jobs, cli->now_ms(), &b);
        write_buf(cli->out, &b);
        tide_buf_free(&b);
    }
    rc = TIDE_CLI_EXIT_OK;
done:
    tide_cli_job_list_free(&list);
    free(states);
    tide_cli_conn_close(conn);
    return rc;
}

int tide_cli_cmd_job(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__GetJobRequest req = TIDE__V1__GET_JOB_REQUEST__INIT;
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    ProtobufCMessage *resp = NULL;
    const char **ids;
    size_t n;
    int rc = tide_cli_collect_args(cli, cmd, argc, argv, 1, "job ID", &ids, &n);

    if (rc >= 0)
        goto done;
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    req.id = (char *)ids[0];
    if (tide_cli_unary(conn, "/tide.v1.JobService/GetJob", &req.base, &tide__v1__job__descriptor, &resp, &st) < 0) {
        tide_cli_report(conn, &st);
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    if (cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json(cli->out, resp);
    } else {
        tide_buf_t b = TIDE_BUF_INIT;
        tide_cli_render_job((Tide__V1__Job *)resp, cli->now_ms(), cli->utc, &b);
        write_buf(cli->out, &b);
        tide_buf_free(&b);
    }
    rc = TIDE_CLI_EXIT_OK;
done:
    protobuf_c_message_free_unpacked(resp, NULL);
    free(ids);
    tide_cli_conn_close(conn);
    return rc;
}

int tide_cli_cmd_cancel(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    tide_cli_conn_t *conn = NULL;
    const char **ids;
    size_t n;
    int rc = tide_cli_collect_args(cli, cmd, argc, argv, 0, "job ID", &ids, &n);

    if (rc >= 0)
        goto done;
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    /* Each job on its own: one that cannot be cancelled does not stop the others. */
    for (size_t i = 0; i < n; i++) {
        Tide__V1__CancelJobRequest req = TIDE__V1__CANCEL_JOB_REQUEST__INIT;
        tide_cli_status_t st;
        ProtobufCMessage *resp;
        Tide__V1__Job *job;

        req.id = (char *)ids[i];
        if (tide_cli_unary(conn, "/tide.v1.JobService/CancelJob", &req.base, &tide__v1__job__descriptor, &resp,
                           &st) < 0) {
            tide_cli_report(conn, &st);
            rc = TIDE_CLI_EXIT_FAILURE;
            continue;
        }
        job = (Tide__V1__Job *)resp;
        if (cli->format == TIDE_CLI_FORMAT_JSON && n == 1) {
            tide_cli_print_json(cli->out, resp);
        } else if (cli->format == TIDE_CLI_FORMAT_JSON) {
            tide_cli_print_json_line(cli->out, resp);
        } else {
            tide_buf_t b = TIDE_BUF_INIT;
            char *jid = tide_cli_sanitize(job->id);
            if (job->state == TIDE__V1__JOB_STATE__JOB_STATE_CANCELLED) {
                tide_buf_printf(&b, "job %s cancelled\n", jid);
            } else {
                char state[32];
                tide_cli_enum_name(&tide__v1__job_state__descriptor, job->state, "JOB_STATE_", state, sizeof(state));
                tide_buf_printf(&b, "job %s: cancellation requested (state %s)\n", jid, state);
            }
            write_buf(cli->out, &b);
            tide_buf_free(&b);
            free(jid);
        }
        protobuf_c_message_free_unpacked(resp, NULL);
    }
done:
    free(ids);
    tide_cli_conn_close(conn);
    return rc;
}

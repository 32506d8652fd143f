/* tidectl logs: the GetJobLogs stream written to stdout. Bytes go out as the ranks wrote them when one
 * rank is shown; with several, whole lines prefixed "[rank R] " (logmux.h). Partial lines still held
 * when the stream ends are written with a newline, so nothing is lost. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "logmux.h"
#include "output.h"
#include "rpc_call.h"
#include "tide/v1/job_service.pb-c.h"
#include "xmalloc.h"

typedef struct logs_state {
    tide_cli_t *cli;
    tide_cli_logmux_t *mux;
    tide_buf_t out;
    tide_cli_status_t end;
} logs_state_t;

static int on_chunk(tide_cli_call_t *call, const ProtobufCMessage *msg, void *ud)
{
    logs_state_t *s = ud;
    const Tide__V1__LogChunk *c = (const Tide__V1__LogChunk *)msg;

    (void)call;
    if (s->cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json_line(s->cli->out, msg);
        return 0;
    }
    tide_buf_reset(&s->out);
    tide_cli_logmux_feed(s->mux, c->rank, c->data.data, c->data.len, &s->out);
    if (s->out.len) {
        fwrite(s->out.data, 1, s->out.len, s->cli->out);
        fflush(s->cli->out);
    }
    return 0;
}

static void on_end(tide_cli_call_t *call, const tide_cli_status_t *st, void *ud)
{
    logs_state_t *s = ud;

    (void)call;
    s->end = *st;
}

/* Whether lines need a rank prefix: several ranks asked for, or all ranks of a job that has (or may
 * grow to) more than one. Returns 0, or the exit code after reporting a failed GetJob. */
static int decide_prefix(tide_cli_conn_t *conn, const char *job_id, size_t n_ranks, bool *prefix)
{
    Tide__V1__GetJobRequest req = TIDE__V1__GET_JOB_REQUEST__INIT;
    Tide__V1__Job *job;
    tide_cli_status_t st;
    ProtobufCMessage *resp;

    if (n_ranks > 0) {
        *prefix = n_ranks > 1;
        return 0;
    }
    req.id = (char *)job_id;
    if (tide_cli_unary(conn, "/tide.v1.JobService/GetJob", &req.base, &tide__v1__job__descriptor, &resp, &st) < 0) {
        tide_cli_report(conn, &st);
        return TIDE_CLI_EXIT_FAILURE;
    }
    job = (Tide__V1__Job *)resp;
    *prefix = job->n_worker_ids > 1 || job->n_ranks > 1 ||
              (job->spec && (job->spec->min_workers > 1 || job->spec->max_workers > 1));
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

int tide_cli_cmd_logs(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    static const tide_cli_call_ops_t ops = {on_chunk, on_end};
    Tide__V1__GetJobLogsRequest req = TIDE__V1__GET_JOB_LOGS_REQUEST__INIT;
    logs_state_t s;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    const char *job_id = NULL;
    int32_t *ranks = NULL;
    size_t n_ranks = 0;
    bool follow = false, prefix = false;
    int id, rc;

    memset(&s, 0, sizeof(s));
    tide_buf_init(&s.out);
    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        int64_t r;
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto done;
        switch (id) {
        case TIDE_CLI_OPT_RANK:
            if (tide_cli_parse_int(a.arg, 0, INT32_MAX, &r) < 0) {
                rc = tide_cli_usage_error(cli, cmd, "bad --rank '%s': expected a rank number (0 or more)", a.arg);
                goto done;
            }
            ranks = tide_xrealloc(ranks, (n_ranks + 1) * sizeof(*ranks));
            ranks[n_ranks++] = (int32_t)r;
            break;
        case TIDE_CLI_OPT_FOLLOW:
            follow = true;
            break;
        case TIDE_CLI_ARG_POSITIONAL:
            if (job_id) {
                rc = tide_cli_usage_error(cli, cmd, "unexpected argument '%s'", a.arg);
                goto done;
            }
            job_id = a.arg;
            break;
        default:
            rc = tide_cli_usage_error(cli, cmd, "unexpected option '%s'", a.opt_text);
            goto done;
        }
    }
    if (!job_id || !*job_id) {
        rc = tide_cli_usage_error(cli, cmd, "missing job ID");
        goto done;
    }
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    if (cli->format == TIDE_CLI_FORMAT_TABLE && (rc = decide_prefix(conn, job_id, n_ranks, &prefix)) != 0)
        goto done;
    s.cli = cli;
    s.mux = tide_cli_logmux_new(prefix);
    req.id = (char *)job_id;
    req.n_ranks = n_ranks;
    req.ranks = ranks;
    req.follow = follow;
    if (tide_cli_call_start(conn, "/tide.v1.JobService/GetJobLogs", &req.base, &tide__v1__log_chunk__descriptor, 0,
                            &ops, &s, NULL) < 0) {
        tide_cli_errorf(cli, "INTERNAL: cannot start the log stream");
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    tide_cli_conn_run(conn);
    tide_buf_reset(&s.out);
    tide_cli_logmux_flush(s.mux, &s.out);
    if (s.out.len) {
        fwrite(s.out.data, 1, s.out.len, cli->out);
        fflush(cli->out);
    }
    if (s.end.code != TIDE_GRPC_OK) {
        tide_cli_report(conn, &s.end);
        rc = TIDE_CLI_EXIT_FAILURE;
    }
done:
    tide_cli_logmux_free(s.mux);
    tide_buf_free(&s.out);
    free(ranks);
    tide_cli_conn_close(conn);
    return rc;
}

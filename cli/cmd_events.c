/* tidectl events: the WatchEvents stream, one line (or one JSON object) per event, flushed as each
 * arrives so `tidectl events -f | grep` works live. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "render.h"
#include "rpc_call.h"
#include "tide/v1/job_service.pb-c.h"

typedef struct events_state {
    tide_cli_t *cli;
    tide_buf_t line;
    tide_cli_status_t end;
} events_state_t;

static int on_event(tide_cli_call_t *call, const ProtobufCMessage *msg, void *ud)
{
    events_state_t *s = ud;

    (void)call;
    if (s->cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json_line(s->cli->out, msg);
        return 0;
    }
    tide_buf_reset(&s->line);
    tide_cli_render_event((const Tide__V1__Event *)msg, s->cli->utc, &s->line);
    fwrite(s->line.data, 1, s->line.len, s->cli->out);
    fflush(s->cli->out);
    return 0;
}

static void on_end(tide_cli_call_t *call, const tide_cli_status_t *st, void *ud)
{
    events_state_t *s = ud;

    (void)call;
    s->end = *st;
}

int tide_cli_cmd_events(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    static const tide_cli_call_ops_t ops = {on_event, on_end};
    Tide__V1__WatchEventsRequest req = TIDE__V1__WATCH_EVENTS_REQUEST__INIT;
    events_state_t s;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    int id, rc;

    memset(&s, 0, sizeof(s));
    tide_buf_init(&s.line);
    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        int64_t seq;
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto done;
        switch (id) {
        case TIDE_CLI_OPT_FOLLOW:
            req.follow = true;
            break;
        case TIDE_CLI_OPT_JOB:
            if (!*a.arg) {
                rc = tide_cli_usage_error(cli, cmd, "bad --job: empty");
                goto done;
            }
            req.job_id = (char *)a.arg;
            break;
        case TIDE_CLI_OPT_SINCE:
            if (tide_cli_parse_int(a.arg, 0, INT64_MAX, &seq) < 0) {
                rc = tide_cli_usage_error(cli, cmd, "bad --since '%s': expected an event sequence number", a.arg);
                goto done;
            }
            req.since_seq = (uint64_t)seq;
            break;
        default:
            rc = tide_cli_usage_error(cli, cmd, "unexpected argument '%s'",
                                      id == TIDE_CLI_ARG_POSITIONAL ? a.arg : a.opt_text);
            goto done;
        }
    }
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    s.cli = cli;
    if (tide_cli_call_start(conn, "/tide.v1.JobService/WatchEvents", &req.base, &tide__v1__event__descriptor, 0, &ops,
                            &s, NULL) < 0) {
        tide_cli_errorf(cli, "INTERNAL: cannot start the event stream");
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    tide_cli_conn_run(conn);
    if (s.end.code != TIDE_GRPC_OK) {
        tide_cli_report(conn, &s.end);
        rc = TIDE_CLI_EXIT_FAILURE;
    }
done:
    tide_buf_free(&s.line);
    tide_cli_conn_close(conn);
    return rc;
}

/* tidectl submit: builds a JobSpec from the options (spec.h), submits it, and with --wait follows the
 * job to its end. Following = the job's events (WatchEvents from the oldest kept, so nothing that
 * happened before the watch started is missed) as a trigger to re-read the job with GetJob; at most one
 * GetJob is in flight, and events that arrive meanwhile coalesce into one more read. A line is printed
 * whenever the state or the generation changes. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "output.h"
#include "pbjson.h"
#include "render.h"
#include "rpc_call.h"
#include "spec.h"
#include "table.h"
#include "tide/v1/job_service.pb-c.h"
#include "xmalloc.h"

#define MAX_SPEC_FILE (1 << 20)

typedef struct waiter {
    tide_cli_t *cli;
    tide_cli_conn_t *conn;
    char *job_id;
    tide_cli_call_t *watch; /* NULL once ended */
    bool get_inflight, get_again;
    int state, generation;  /* last printed */
    bool finished;          /* reached a terminal state */
    int exit_code;
    bool failed;            /* a call failed; error already reported */
} waiter_t;

static bool terminal(int state)
{
    return state == TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED || state == TIDE__V1__JOB_STATE__JOB_STATE_FAILED ||
           state == TIDE__V1__JOB_STATE__JOB_STATE_CANCELLED;
}

static void show(waiter_t *w, const Tide__V1__Job *job, bool force)
{
    if (!force && (int)job->state == w->state && job->generation == w->generation)
        return;
    w->state = job->state;
    w->generation = job->generation;
    if (w->cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json_line(w->cli->out, &job->base);
    } else {
        tide_buf_t b = TIDE_BUF_INIT;
        tide_cli_render_job_change(job, &b);
        fwrite(b.data, 1, b.len, w->cli->out);
        fflush(w->cli->out);
        tide_buf_free(&b);
    }
}

static void finish(waiter_t *w, int exit_code)
{
    w->finished = true;
    w->exit_code = exit_code;
    if (w->watch)
        tide_cli_call_cancel(w->watch);
}

static void handle_job(waiter_t *w, const Tide__V1__Job *job)
{
    if (w->finished)
        return;
    show(w, job, false);
    if (terminal(job->state))
        finish(w, job->state == TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? TIDE_CLI_EXIT_OK : TIDE_CLI_EXIT_FAILURE);
}

static void start_get(waiter_t *w);

static int get_on_message(tide_cli_call_t *call, const ProtobufCMessage *msg, void *ud)
{
    (void)call;
    handle_job(ud, (const Tide__V1__Job *)msg);
    return 0;
}

static void get_on_end(tide_cli_call_t *call, const tide_cli_status_t *st, void *ud)
{
    waiter_t *w = ud;

    (void)call;
    w->get_inflight = false;
    if (w->finished)
        return;
    if (st->code != TIDE_GRPC_OK) {
        tide_cli_report(w->conn, st);
        w->failed = true;
        finish(w, TIDE_CLI_EXIT_FAILURE);
        return;
    }
    if (w->get_again) {
        /* More events came in while this read was on its way. */
        w->get_again = false;
        start_get(w);
    } else if (!w->watch) {
        /* The watch ended cleanly and this was the last look: the job is still not over. */
        tide_cli_errorf(w->cli, "UNAVAILABLE: the scheduler ended the event stream before job %s finished",
                        w->job_id);
        w->failed = true;
        finish(w, TIDE_CLI_EXIT_FAILURE);
    }
}

static void start_get(waiter_t *w)
{
    static const tide_cli_call_ops_t ops = {get_on_message, get_on_end};
    Tide__V1__GetJobRequest req = TIDE__V1__GET_JOB_REQUEST__INIT;
    int64_t timeout = w->cli->call_timeout_ms > 0 ? w->cli->call_timeout_ms : 30000;

    if (w->get_inflight) {
        w->get_again = true;
        return;
    }
    req.id = w->job_id;
    if (tide_cli_call_start(w->conn, "/tide.v1.JobService/GetJob", &req.base, &tide__v1__job__descriptor, timeout,
                            &ops, w, NULL) < 0) {
        tide_cli_errorf(w->cli, "INTERNAL: cannot start GetJob");
        w->failed = true;
        finish(w, TIDE_CLI_EXIT_FAILURE);
        return;
    }
    w->get_inflight = true;
}

static int watch_on_message(tide_cli_call_t *call, const ProtobufCMessage *msg, void *ud)
{
    waiter_t *w = ud;
    const Tide__V1__Event *ev = (const Tide__V1__Event *)msg;

    (void)call;
    if (!w->finished && (!*ev->job_id || strcmp(ev->job_id, w->job_id) == 0))
        start_get(w);
    return 0;
}

static void watch_on_end(tide_cli_call_t *call, const tide_cli_status_t *st, void *ud)
{
    waiter_t *w = ud;

    (void)call;
    w->watch = NULL;
    if (w->finished)
        return;
    if (st->code != TIDE_GRPC_OK) {
        tide_cli_report(w->conn, st);
        w->failed = true;
        finish(w, TIDE_CLI_EXIT_FAILURE);
        return;
    }
    /* The stream ended cleanly without the job ending: one last look decides (get_on_end). */
    start_get(w);
}

static int wait_for_job(tide_cli_t *cli, tide_cli_conn_t *conn, const Tide__V1__Job *job)
{
    static const tide_cli_call_ops_t ops = {watch_on_message, watch_on_end};
    Tide__V1__WatchEventsRequest req = TIDE__V1__WATCH_EVENTS_REQUEST__INIT;
    waiter_t w;

    memset(&w, 0, sizeof(w));
    w.cli = cli;
    w.conn = conn;
    w.job_id = job->id;
    show(&w, job, true);
    if (terminal(job->state))
        return job->state == TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED ? TIDE_CLI_EXIT_OK : TIDE_CLI_EXIT_FAILURE;
    req.job_id = job->id;
    req.follow = true;
    req.since_seq = 0;
    if (tide_cli_call_start(conn, "/tide.v1.JobService/WatchEvents", &req.base, &tide__v1__event__descriptor, 0,
                            &ops, &w, &w.watch) < 0) {
        tide_cli_errorf(cli, "INTERNAL: cannot start the event stream");
        return TIDE_CLI_EXIT_FAILURE;
    }
    tide_cli_conn_run(conn);
    return w.exit_code;
}

/* Reads --file into a JobSpec. Returns 0, or -1 after printing the error. */
static int read_spec_file(tide_cli_t *cli, const char *path, Tide__V1__JobSpec **out)
{
    tide_error_t err = {{0}};
    char *buf = NULL;
    size_t len = 0;
    ssize_t n;
    int fd = strcmp(path, "-") == 0 ? dup(0) : open(path, O_RDONLY | O_CLOEXEC), rc = -1;

    if (fd < 0) {
        tide_cli_errorf(cli, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    buf = tide_xmalloc(MAX_SPEC_FILE + 1);
    while (len <= MAX_SPEC_FILE && (n = read(fd, buf + len, MAX_SPEC_FILE + 1 - len)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            tide_cli_errorf(cli, "cannot read %s: %s", path, strerror(errno));
            goto done;
        }
        len += (size_t)n;
    }
    if (len > MAX_SPEC_FILE) {
        tide_cli_errorf(cli, "%s: larger than %d bytes", path, MAX_SPEC_FILE);
        goto done;
    }
    if (tide_pbjson_parse(buf, len, &tide__v1__job_spec__descriptor, 0, (ProtobufCMessage **)out, &err) < 0) {
        tide_cli_errorf(cli, "%s: %s", path, err.text);
        goto done;
    }
    rc = 0;
done:
    free(buf);
    close(fd);
    return rc;
}

int tide_cli_cmd_submit(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__SubmitJobRequest req = TIDE__V1__SUBMIT_JOB_REQUEST__INIT;
    Tide__V1__JobSpec *base = NULL, *spec = NULL;
    Tide__V1__Job *job = NULL;
    tide_cli_submit_t o;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    int id, rc;

    memset(&o, 0, sizeof(o));
    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto done;
        if (id == TIDE_CLI_ARG_POSITIONAL) {
            /* CMD and its ARGS: argv order is kept, and stop_at_positional makes every later word one. */
            if (!o.command)
                o.command = &a.argv[a.index - 1];
            o.n_command++;
            continue;
        }
        if (tide_cli_submit_apply(&o, id, a.arg, &err) < 0) {
            rc = tide_cli_usage_error(cli, cmd, "%s", err.text);
            goto done;
        }
    }
    if (o.file && read_spec_file(cli, o.file, &base) < 0) {
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    if (tide_cli_submit_build(&o, base, cli->cwd, &spec, &err) < 0) {
        rc = tide_cli_usage_error(cli, cmd, "%s", err.text);
        goto done;
    }
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    req.spec = spec;
    if (tide_cli_unary(conn, "/tide.v1.JobService/SubmitJob", &req.base, &tide__v1__job__descriptor,
                       (ProtobufCMessage **)&job, &st) < 0) {
        tide_cli_report(conn, &st);
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    if (o.wait) {
        rc = wait_for_job(cli, conn, job);
    } else if (cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json(cli->out, &job->base);
        rc = TIDE_CLI_EXIT_OK;
    } else {
        char *jid = tide_cli_sanitize(job->id);
        fprintf(cli->out, "%s\n", jid);
        fflush(cli->out);
        free(jid);
        rc = TIDE_CLI_EXIT_OK;
    }
done:
    if (job)
        protobuf_c_message_free_unpacked(&job->base, NULL);
    if (spec)
        protobuf_c_message_free_unpacked(&spec->base, NULL);
    if (base)
        protobuf_c_message_free_unpacked(&base->base, NULL);
    tide_cli_submit_clear(&o);
    tide_cli_conn_close(conn);
    return rc;
}

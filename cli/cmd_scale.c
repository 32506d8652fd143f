/* tidectl scale: JobService.ScaleJob, and with --wait the resize followed to its end by re-reading
 * the job (GetJob) every poll interval (docs/elastic.md). The resize is over once the job carries
 * no resize under way or pending; it succeeded iff last_resize names a generation newer than the
 * one the job had when the wait began. A progress line on a terminal is redrawn in place and erased
 * before anything else is printed. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "duration.h"
#include "output.h"
#include "job_poll.h"
#include "progress_line.h"
#include "render.h"
#include "rpc_call.h"
#include "table.h"
#include "tide/v1/job_service.pb-c.h"

#define DEFAULT_POLL_MS   200
#define DEFAULT_TIMEOUT_S 600     /* --timeout's default: 10m */
#define MAX_WORKERS       1000000 /* as submit's --workers */

static bool job_ended(const Tide__V1__Job *j)
{
    return j->state == TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
           j->state == TIDE__V1__JOB_STATE__JOB_STATE_FAILED ||
           j->state == TIDE__V1__JOB_STATE__JOB_STATE_CANCELLED;
}

/* Whether there is a resize to wait for: one under way or accepted and pending. */
static bool resize_open(const Tide__V1__Job *j)
{
    return j->resize && j->resize->state != TIDE__V1__RESIZE_STATE__RESIZE_STATE_UNSPECIFIED &&
           j->resize->state != TIDE__V1__RESIZE_STATE__RESIZE_STATE_DONE;
}

/* Whether the job holds the size asked for: no resize under way or pending and, with a requested size,
 * running with exactly that many workers. A request the scheduler could not start yet (the job was
 * starting, yielding to a preemption, or waiting for its workers after a restart) is not settled. */
static bool settled(const Tide__V1__Job *j)
{
    if (resize_open(j))
        return false;
    return j->target_workers == 0 ||
           (j->state == TIDE__V1__JOB_STATE__JOB_STATE_RUNNING && (int32_t)j->n_worker_ids == j->target_workers);
}

/* The generation the resize starts from: a completed resize names a newer one. */
static int32_t base_generation(const Tide__V1__Job *j)
{
    if (j->resize && j->resize->from_generation > 0)
        return j->resize->from_generation;
    return j->generation;
}

static void print_buf(tide_cli_t *cli, tide_buf_t *b)
{
    fputs(tide_buf_cstr(b), cli->out);
    fflush(cli->out);
    tide_buf_reset(b);
}

/* Prints how the wait ended (the table form) and returns the exit code. */
static int report_end(tide_cli_t *cli, const Tide__V1__Job *job, const char *jid, int32_t gen0, int32_t asked)
{
    tide_buf_t b = TIDE_BUF_INIT;
    int rc;

    if (!job_ended(job) && asked > 0 && job->target_workers != asked) {
        /* Another ScaleJob changed the requested size meanwhile: what was asked for is not what holds. */
        if (job->target_workers > 0)
            tide_buf_printf(&b, "job %s: another request changed the size to %d meanwhile; %zu workers now\n", jid,
                            job->target_workers, job->n_worker_ids);
        else
            tide_buf_printf(&b, "job %s: another request made it elastic meanwhile; %zu workers now\n", jid,
                            job->n_worker_ids);
        rc = TIDE_CLI_EXIT_FAILURE;
    } else if (!job_ended(job) && settled(job) && job->last_resize && job->last_resize->to_generation > gen0) {
        tide_cli_render_resized(job, &b);
        rc = TIDE_CLI_EXIT_OK;
    } else if (!job_ended(job) && settled(job)) {
        tide_buf_printf(&b, "job %s: %zu workers\n", jid, job->n_worker_ids);
        rc = TIDE_CLI_EXIT_OK;
    } else if (job_ended(job)) {
        char state[32], *msg = tide_cli_sanitize(job->message);
        tide_cli_enum_name(&tide__v1__job_state__descriptor, job->state, "JOB_STATE_", state,
                           sizeof(state));
        tide_buf_printf(&b, "job %s: %s before the resize completed%s%s\n", jid, state,
                        *msg ? ": " : "", msg);
        free(msg);
        rc = TIDE_CLI_EXIT_FAILURE;
    } else {
        /* Another ScaleJob took it back, or the scheduler dropped it: the size asked for was not
         * had. */
        tide_buf_printf(&b, "job %s: the resize was withdrawn; %zu workers now\n", jid,
                        job->n_worker_ids);
        rc = TIDE_CLI_EXIT_FAILURE;
    }
    if (cli->format == TIDE_CLI_FORMAT_TABLE)
        print_buf(cli, &b);
    tide_buf_free(&b);
    return rc;
}

/* Re-reads the job until its resize is over or timeout_ms passes. Returns the exit code; *last is
 * the newest job read (caller frees; NULL when none was read) and *ended tells whether the wait
 * reached an outcome (rather than an error or the timeout). */
static int wait_resize(tide_cli_t *cli, tide_cli_conn_t *conn, const Tide__V1__Job *first,
                       const char *jid, int32_t asked, int64_t timeout_ms, Tide__V1__Job **last, bool *ended)
{
    int32_t gen0 = base_generation(first);
    int64_t start = cli->now_ms(), phase_since = start;
    int64_t poll = cli->poll_interval_ms > 0 ? cli->poll_interval_ms : DEFAULT_POLL_MS;
    int phase = -1;
    tide_cli_progress_t pl;
    const Tide__V1__Job *job = first;
    int rc;

    tide_cli_progress_init(&pl, cli->err_tty ? cli->err : NULL);
    *last = NULL;
    *ended = false;
    for (;;) {
        int64_t now = cli->now_ms();

        if (settled(job) || job_ended(job) || (asked > 0 && job->target_workers != asked)) {
            tide_cli_progress_clear(&pl);
            *ended = true;
            rc = report_end(cli, job, jid, gen0, asked);
            break;
        }
        if (now - start >= timeout_ms) {
            char d[32];
            tide_cli_progress_clear(&pl);
            tide_cli_duration_format(timeout_ms / 1000, d, sizeof(d));
            tide_cli_errorf(
                cli,
                "DEADLINE_EXCEEDED: job %s: the resize to %d workers is not done after %s (it goes "
                "on; 'tidectl job %s' shows it)",
                jid, job->resize ? job->resize->to_workers : job->target_workers, d, jid);
            rc = TIDE_CLI_EXIT_FAILURE;
            break;
        }
        if (tide_cli_progress_active(&pl) && job->resize) {
            tide_buf_t b = TIDE_BUF_INIT;
            if ((int)job->resize->state != phase) {
                phase = (int)job->resize->state;
                phase_since = now;
            }
            tide_cli_render_resize_progress(job, (double)(now - phase_since) / 1000.0, &b);
            tide_cli_progress_draw(&pl, tide_buf_cstr(&b));
            tide_buf_free(&b);
        }
        if ((rc = tide_cli_job_poll(cli, conn, first->id, poll, &pl, last)) != 0)
            break;
        job = *last;
    }
    return rc;
}

int tide_cli_cmd_scale(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__ScaleJobRequest req = TIDE__V1__SCALE_JOB_REQUEST__INIT;
    Tide__V1__Job *job = NULL, *last = NULL;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    tide_buf_t b = TIDE_BUF_INIT;
    const char *job_id = NULL;
    char *jid = NULL;
    bool wait = false, has_workers = false, has_timeout = false, ended;
    int64_t timeout_s = DEFAULT_TIMEOUT_S;
    int id, rc;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        int64_t v;
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto done;
        switch (id) {
        case TIDE_CLI_OPT_WORKERS:
            if (tide_cli_parse_int(a.arg, 1, MAX_WORKERS, &v) < 0) {
                rc = tide_cli_usage_error(
                    cli, cmd, "bad --workers '%.40s': expected a number of workers (1 or more)",
                    a.arg);
                goto done;
            }
            req.workers = (int32_t)v;
            has_workers = true;
            break;
        case TIDE_CLI_OPT_ELASTIC:
            req.elastic = true;
            break;
        case TIDE_CLI_OPT_WAIT:
            wait = true;
            break;
        case TIDE_CLI_OPT_TIMEOUT:
            rc = tide_cli_duration_parse(a.arg, &v);
            if (rc == -EINVAL) {
                rc = tide_cli_usage_error(
                    cli, cmd, "bad --timeout '%.40s': expected e.g. 30s, 5m, 1h or MM:SS", a.arg);
                goto done;
            }
            if (rc < 0 || v < 1) {
                rc = tide_cli_usage_error(cli, cmd, "bad --timeout '%.40s': must be at least 1s",
                                          a.arg);
                goto done;
            }
            timeout_s = v;
            has_timeout = true;
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
    if (has_workers == req.elastic) {
        rc = tide_cli_usage_error(cli, cmd,
                                  has_workers ? "--workers and --elastic exclude each other"
                                              : "missing --workers N or --elastic");
        goto done;
    }
    if (has_timeout && !wait) {
        rc = tide_cli_usage_error(cli, cmd, "--timeout needs --wait");
        goto done;
    }
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    req.id = (char *)job_id;
    if (tide_cli_unary(conn, "/tide.v1.JobService/ScaleJob", &req.base, &tide__v1__job__descriptor,
                       (ProtobufCMessage **)&job, &st) < 0) {
        tide_cli_report(conn, &st);
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    jid = tide_cli_sanitize(job->id);
    if (cli->format == TIDE_CLI_FORMAT_TABLE) {
        tide_cli_render_scale(job, &b);
        print_buf(cli, &b);
    }
    if (!wait || settled(job)) {
        /* Nothing to follow: the size holds already, or a pending job starts with it. */
        if (cli->format == TIDE_CLI_FORMAT_JSON)
            tide_cli_print_json(cli->out, &job->base);
        rc = TIDE_CLI_EXIT_OK;
        goto done;
    }
    rc = wait_resize(cli, conn, job, jid, req.workers, timeout_s * 1000, &last, &ended);
    if (ended && cli->format == TIDE_CLI_FORMAT_JSON)
        tide_cli_print_json(cli->out, last ? &last->base : &job->base);
    fflush(cli->out);
done:
    if (last)
        protobuf_c_message_free_unpacked(&last->base, NULL);
    if (job)
        protobuf_c_message_free_unpacked(&job->base, NULL);
    tide_buf_free(&b);
    free(jid);
    tide_cli_conn_close(conn);
    return rc;
}

/* tidectl checkpoint: JobService.CheckpointJob, and with --wait the request followed to its end by
 * re-reading the job (GetJob) every poll interval. The request is over once the job's
 * checkpoint_request is no longer ours; it succeeded iff last_checkpoint answers it (request_id). A
 * progress line on a terminal is redrawn in place and always erased before anything else is printed. */
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

#define DEFAULT_DEADLINE_MS 60000            /* the scheduler's, for deadline_ms 0 (job_service.proto) */
#define MAX_DEADLINE_S      (24 * 3600)      /* the scheduler refuses more */
#define DEFAULT_POLL_MS     200
#define GRACE_MS            30000            /* after the deadline, before tidectl stops waiting itself */

/* Milliseconds until the request's deadline on the scheduler's clock (0 once passed); fallback_ms when
 * the job carries no deadline or one that cannot be right (our clock far from the scheduler's). */
static int64_t deadline_left_ms(const Tide__V1__Job *job, int64_t now_ms, int64_t fallback_ms)
{
    int64_t left = job->checkpoint_deadline_ms - now_ms;

    if (job->checkpoint_deadline_ms <= 0 || left < -(int64_t)MAX_DEADLINE_S * 1000 ||
        left > (int64_t)MAX_DEADLINE_S * 1000 + 60000)
        return fallback_ms;
    return left < 0 ? 0 : left;
}

/* Whether any rank reports through the trainer SDK; a request to a job without one can only miss. */
static bool any_sdk_rank(const Tide__V1__Job *job)
{
    for (size_t i = 0; i < job->n_ranks; i++)
        if (job->ranks[i]->progress && job->ranks[i]->progress->sdk)
            return true;
    return false;
}

/* "job 7: checkpoint pending 3s, deadline in 57s, step 1200 (UPDATE)". The request id is on the line
 * above; leaving it out keeps the line short of 80 columns, where a wrapped line could not be redrawn. */
static void draw_wait(tide_cli_progress_t *pl, const Tide__V1__Job *job, const char *jid, int64_t elapsed_ms,
                      int64_t now_ms)
{
    const Tide__V1__TrainerProgress *p = tide_cli_job_progress(job);
    tide_buf_t b = TIDE_BUF_INIT;
    int64_t left;

    if (!tide_cli_progress_active(pl))
        return;
    tide_buf_printf(&b, "job %s: checkpoint pending %" PRId64 "s", jid, elapsed_ms / 1000);
    left = deadline_left_ms(job, now_ms, -1);
    if (left >= 0)
        tide_buf_printf(&b, ", deadline in %" PRId64 "s", (left + 500) / 1000);
    if (p && p->step >= 0) {
        tide_buf_printf(&b, ", step %" PRId64, p->step);
        if (p->phase != TIDE__V1__TRAINER_PHASE__TRAINER_PHASE_UNSPECIFIED) {
            char phase[32];
            tide_buf_printf(&b, " (%s)",
                            tide_cli_enum_name(&tide__v1__trainer_phase__descriptor, p->phase, "TRAINER_PHASE_",
                                               phase, sizeof(phase)));
        }
    }
    tide_cli_progress_draw(pl, tide_buf_cstr(&b)); /* sanitized and cut there */
    tide_buf_free(&b);
}

/* Prints how the request ended (the table form) and returns the exit code. */
static int report_end(tide_cli_t *cli, const Tide__V1__Job *job, const char *jid, uint64_t request)
{
    const Tide__V1__Checkpoint *c = job->last_checkpoint;
    char state[32];

    if (c && c->request_id == request) {
        if (cli->format == TIDE_CLI_FORMAT_TABLE) {
            char *path = tide_cli_sanitize(c->path);
            fprintf(cli->out, "job %s: checkpoint of step %" PRId64 " complete (%d rank%s, %" PRIu64 " bytes%s%s)\n",
                    jid, c->step, c->ranks, c->ranks == 1 ? "" : "s", c->bytes, *path ? ", " : "", path);
            free(path);
        }
        return TIDE_CLI_EXIT_OK;
    }
    if (cli->format == TIDE_CLI_FORMAT_TABLE) {
        char *msg = tide_cli_sanitize(job->message);
        bool ended = job->state == TIDE__V1__JOB_STATE__JOB_STATE_SUCCEEDED ||
                     job->state == TIDE__V1__JOB_STATE__JOB_STATE_FAILED ||
                     job->state == TIDE__V1__JOB_STATE__JOB_STATE_CANCELLED;

        tide_cli_enum_name(&tide__v1__job_state__descriptor, job->state, "JOB_STATE_", state, sizeof(state));
        if (ended)
            fprintf(cli->out, "job %s: checkpoint request %" PRIu64 " missed (job %s%s%s)\n", jid, request, state,
                    *msg ? ": " : "", msg);
        else
            fprintf(cli->out, "job %s: checkpoint request %" PRIu64 " missed (job %s; no complete checkpoint "
                              "before the deadline)\n", jid, request, state);
        free(msg);
    }
    return TIDE_CLI_EXIT_FAILURE;
}

/* Re-reads the job until the request is over. Returns the exit code; *last is the newest job read
 * (caller frees; may be NULL after an error) and *ended tells whether it shows the request over. */
static int wait_request(tide_cli_t *cli, tide_cli_conn_t *conn, const Tide__V1__Job *first, const char *jid,
                        int64_t fallback_ms, Tide__V1__Job **last, bool *ended)
{
    uint64_t request = first->checkpoint_request;
    int64_t start = cli->now_ms();
    int64_t limit = deadline_left_ms(first, start, fallback_ms) + GRACE_MS;
    int64_t poll = cli->poll_interval_ms > 0 ? cli->poll_interval_ms : DEFAULT_POLL_MS;
    tide_cli_progress_t pl;
    const Tide__V1__Job *job = first;
    int rc;

    tide_cli_progress_init(&pl, cli->err_tty ? cli->err : NULL);
    *last = NULL;
    *ended = false;
    for (;;) {
        int64_t now = cli->now_ms();

        if (job->checkpoint_request != request) {
            tide_cli_progress_clear(&pl);
            *ended = true;
            rc = report_end(cli, job, jid, request);
            break;
        }
        if (now - start > limit) {
            /* The scheduler should have ended it by now: do not wait forever on a lost request. */
            tide_cli_progress_clear(&pl);
            tide_cli_errorf(cli, "DEADLINE_EXCEEDED: job %s: checkpoint request %" PRIu64 " still pending %ds after "
                            "its deadline", jid, request, GRACE_MS / 1000);
            rc = TIDE_CLI_EXIT_FAILURE;
            break;
        }
        draw_wait(&pl, job, jid, now - start, now);
        if ((rc = tide_cli_job_poll(cli, conn, first->id, poll, &pl, last)) != 0)
            break;
        job = *last;
    }
    return rc;
}

int tide_cli_cmd_checkpoint(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__CheckpointJobRequest req = TIDE__V1__CHECKPOINT_JOB_REQUEST__INIT;
    Tide__V1__Job *job = NULL, *last = NULL;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    const char *job_id = NULL;
    char *jid = NULL;
    bool wait = false, ended;
    int64_t fallback_ms;
    int id, rc;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        int64_t secs;
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto done;
        switch (id) {
        case TIDE_CLI_OPT_DEADLINE:
            rc = tide_cli_duration_parse(a.arg, &secs);
            if (rc == -EINVAL) {
                rc = tide_cli_usage_error(cli, cmd, "bad --deadline '%.40s': expected e.g. 30s, 5m, 1h or MM:SS",
                                          a.arg);
                goto done;
            }
            if (rc < 0 || secs < 1 || secs > MAX_DEADLINE_S) {
                rc = tide_cli_usage_error(cli, cmd, "bad --deadline '%.40s': must be from 1s to 1d", a.arg);
                goto done;
            }
            req.deadline_ms = secs * 1000;
            break;
        case TIDE_CLI_OPT_WAIT:
            wait = true;
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
    req.id = (char *)job_id;
    if (tide_cli_unary(conn, "/tide.v1.JobService/CheckpointJob", &req.base, &tide__v1__job__descriptor,
                       (ProtobufCMessage **)&job, &st) < 0) {
        tide_cli_report(conn, &st);
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    jid = tide_cli_sanitize(job->id);
    if (job->checkpoint_request == 0) {
        tide_cli_errorf(cli, "INTERNAL: the scheduler accepted the checkpoint of job %s but named no request", jid);
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    /* A request already in flight is joined, not restarted: its own deadline counts. */
    fallback_ms = req.deadline_ms ? req.deadline_ms : DEFAULT_DEADLINE_MS;
    if (cli->format == TIDE_CLI_FORMAT_TABLE) {
        fprintf(cli->out, "job %s: checkpoint requested (request %" PRIu64 ", deadline in %" PRId64 "s)\n", jid,
                job->checkpoint_request, (deadline_left_ms(job, cli->now_ms(), fallback_ms) + 500) / 1000);
        fflush(cli->out);
    }
    if (job->n_ranks > 0 && !any_sdk_rank(job))
        tide_cli_errorf(cli, "note: no rank of job %s has reported through the trainer SDK yet; only SDK trainers "
                        "checkpoint on request (docs/trainer-api.md)", jid);
    if (!wait) {
        if (cli->format == TIDE_CLI_FORMAT_JSON)
            tide_cli_print_json(cli->out, &job->base);
        rc = TIDE_CLI_EXIT_OK;
        goto done;
    }
    rc = wait_request(cli, conn, job, jid, fallback_ms, &last, &ended);
    if (ended && last && cli->format == TIDE_CLI_FORMAT_JSON)
        tide_cli_print_json(cli->out, &last->base);
    fflush(cli->out);
done:
    if (last)
        protobuf_c_message_free_unpacked(&last->base, NULL);
    if (job)
        protobuf_c_message_free_unpacked(&job->base, NULL);
    free(jid);
    tide_cli_conn_close(conn);
    return rc;
}

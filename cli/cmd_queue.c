/* tidectl queue: the pending jobs in the order the scheduler considers them (docs/policies.md, "Queues"),
 * with why each waits. One ListJobs for PENDING jobs across pages (job_list.c), then sorted by
 * the queue_position the scheduler computed for each; a pending job outside the queue (position 0: its
 * previous ranks are still stopping) comes last. */
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

/* Queue order: position 1, 2, ...; then jobs without one by job number. */
static int by_position(const void *a, const void *b)
{
    const Tide__V1__Job *x = *(Tide__V1__Job *const *)a, *y = *(Tide__V1__Job *const *)b;
    int32_t px = x->queue_position > 0 ? x->queue_position : INT32_MAX;
    int32_t py = y->queue_position > 0 ? y->queue_position : INT32_MAX;
    unsigned long long ix = strtoull(x->id, NULL, 10), iy = strtoull(y->id, NULL, 10);

    if (px != py)
        return px < py ? -1 : 1;
    return ix < iy ? -1 : ix > iy;
}

int tide_cli_cmd_queue(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__ListJobsRequest req = TIDE__V1__LIST_JOBS_REQUEST__INIT;
    Tide__V1__ListJobsResponse all = TIDE__V1__LIST_JOBS_RESPONSE__INIT;
    Tide__V1__JobState pending = TIDE__V1__JOB_STATE__JOB_STATE_PENDING;
    tide_cli_job_list_t list = {0};
    tide_cli_conn_t *conn = NULL;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    int id, rc;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            return rc;
        return tide_cli_usage_error(cli, cmd, "unexpected argument '%s'",
                                    id == TIDE_CLI_ARG_POSITIONAL ? a.arg : a.opt_text);
    }
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        return rc;
    req.n_states = 1;
    req.states = &pending;
    if ((rc = tide_cli_job_list_fetch(cli, conn, &req, &list)) != 0)
        goto done;
    /* Pending jobs only (a job may have started between pages). With many pages, positions come from
     * slightly different moments; the order is still the scheduler's. */
    all.jobs = tide_xcalloc(list.n_jobs ? list.n_jobs : 1, sizeof(*all.jobs));
    for (size_t i = 0; i < list.n_jobs; i++)
        if (list.jobs[i]->state == TIDE__V1__JOB_STATE__JOB_STATE_PENDING)
            all.jobs[all.n_jobs++] = list.jobs[i];
    qsort(all.jobs, all.n_jobs, sizeof(*all.jobs), by_position);
    if (cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json(cli->out, &all.base);
    } else if (all.n_jobs == 0) {
        fputs("The queue is empty: no job is waiting.\n", cli->err);
    } else {
        tide_buf_t b = TIDE_BUF_INIT;
        tide_cli_render_queue(all.jobs, all.n_jobs, cli->now_ms(), &b);
        if (b.len)
            fwrite(b.data, 1, b.len, cli->out);
        fflush(cli->out);
        tide_buf_free(&b);
    }
    rc = TIDE_CLI_EXIT_OK;
done:
    free(all.jobs);
    tide_cli_job_list_free(&list);
    tide_cli_conn_close(conn);
    return rc;
}

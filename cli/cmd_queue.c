/* tidectl queue: the pending jobs in the order the scheduler considers them (docs/policies.md, "Queues"),
 * with why each waits. One ListJobs for PENDING jobs, following page tokens as `jobs` does, then sorted by
 * the queue_position the scheduler computed for each; a pending job outside the queue (position 0: its
 * previous ranks are still stopping) comes last. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "output.h"
#include "render.h"
#include "rpc_call.h"
#include "table.h"
#include "tide/v1/job_service.pb-c.h"
#include "xmalloc.h"

#define PAGE_SIZE 1000
#define MAX_PAGES 100000

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
    Tide__V1__ListJobsResponse **pages = NULL;
    Tide__V1__JobState pending = TIDE__V1__JOB_STATE__JOB_STATE_PENDING;
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    size_t n_pages = 0;
    char *token = NULL;
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
    req.page_size = PAGE_SIZE;
    for (;;) {
        ProtobufCMessage *resp;
        Tide__V1__ListJobsResponse *page;

        req.page_token = token ? token : (char *)protobuf_c_empty_string;
        if (tide_cli_unary(conn, "/tide.v1.JobService/ListJobs", &req.base, &tide__v1__list_jobs_response__descriptor,
                           &resp, &st) < 0) {
            tide_cli_report(conn, &st);
            rc = TIDE_CLI_EXIT_FAILURE;
            goto done;
        }
        page = (Tide__V1__ListJobsResponse *)resp;
        pages = tide_xrealloc(pages, (n_pages + 1) * sizeof(*pages));
        pages[n_pages++] = page;
        if (!*page->next_page_token)
            break;
        if ((token && strcmp(token, page->next_page_token) == 0) || n_pages >= MAX_PAGES) {
            tide_cli_errorf(cli, "INTERNAL: the scheduler's job list does not end (page token '%.40s' repeats)",
                            page->next_page_token);
            rc = TIDE_CLI_EXIT_FAILURE;
            goto done;
        }
        free(token);
        token = tide_xstrdup(page->next_page_token);
    }
    /* One list out of every page (the jobs stay owned by their pages), pending jobs only. With many
     * pages, positions come from slightly different moments; the order is still the scheduler's. */
    for (size_t p = 0; p < n_pages; p++)
        all.n_jobs += pages[p]->n_jobs;
    all.jobs = tide_xcalloc(all.n_jobs ? all.n_jobs : 1, sizeof(*all.jobs));
    all.n_jobs = 0;
    for (size_t p = 0; p < n_pages; p++)
        for (size_t i = 0; i < pages[p]->n_jobs; i++)
            if (pages[p]->jobs[i]->state == TIDE__V1__JOB_STATE__JOB_STATE_PENDING)
                all.jobs[all.n_jobs++] = pages[p]->jobs[i];
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
    for (size_t p = 0; p < n_pages; p++)
        protobuf_c_message_free_unpacked(&pages[p]->base, NULL);
    free(pages);
    free(token);
    tide_cli_conn_close(conn);
    return rc;
}

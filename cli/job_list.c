/* ListJobs across pages. Follows page tokens until the scheduler hands back an empty one, and refuses
 * to loop when it hands back a token it gave before (or after MAX_PAGES pages). */
#include <stdlib.h>
#include <string.h>

#include "job_list.h"
#include "output.h"
#include "xmalloc.h"

#define PAGE_SIZE 500
#define MAX_PAGES 100000

int tide_cli_job_list_fetch(tide_cli_t *cli, tide_cli_conn_t *conn, Tide__V1__ListJobsRequest *req,
                            tide_cli_job_list_t *out)
{
    tide_cli_status_t st;
    char *token = NULL;
    int rc = TIDE_CLI_EXIT_FAILURE;

    memset(out, 0, sizeof(*out));
    req->page_size = PAGE_SIZE;
    for (;;) {
        ProtobufCMessage *resp;
        Tide__V1__ListJobsResponse *page;

        req->page_token = token ? token : (char *)protobuf_c_empty_string;
        if (tide_cli_unary(conn, "/tide.v1.JobService/ListJobs", &req->base,
                           &tide__v1__list_jobs_response__descriptor, &resp, &st) < 0) {
            tide_cli_report(conn, &st);
            goto done;
        }
        page = (Tide__V1__ListJobsResponse *)resp;
        out->pages = tide_xrealloc(out->pages, (out->n_pages + 1) * sizeof(*out->pages));
        out->pages[out->n_pages++] = page;
        if (!*page->next_page_token)
            break;
        if ((token && strcmp(token, page->next_page_token) == 0) || out->n_pages >= MAX_PAGES) {
            tide_cli_errorf(cli, "INTERNAL: the scheduler's job list does not end (page token '%.40s' repeats)",
                            page->next_page_token);
            goto done;
        }
        free(token);
        token = tide_xstrdup(page->next_page_token);
    }
    for (size_t p = 0; p < out->n_pages; p++)
        out->n_jobs += out->pages[p]->n_jobs;
    out->jobs = tide_xcalloc(out->n_jobs ? out->n_jobs : 1, sizeof(*out->jobs));
    out->n_jobs = 0;
    for (size_t p = 0; p < out->n_pages; p++)
        for (size_t i = 0; i < out->pages[p]->n_jobs; i++)
            out->jobs[out->n_jobs++] = out->pages[p]->jobs[i];
    rc = 0;
done:
    req->page_token = NULL;
    free(token);
    return rc;
}

void tide_cli_job_list_free(tide_cli_job_list_t *l)
{
    if (!l)
        return;
    free(l->jobs);
    for (size_t p = 0; p < l->n_pages; p++)
        protobuf_c_message_free_unpacked(&l->pages[p]->base, NULL);
    free(l->pages);
    memset(l, 0, sizeof(*l));
}

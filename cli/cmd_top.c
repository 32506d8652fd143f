/* tidectl top: a live view of the cluster like top/nvtop, in 80 columns: the cluster's MFU,
 * utilization per dimension and health, every running job with its MFU, step and bottleneck, every
 * worker with its GPU and node figures, MFU and bottleneck (docs/metrics.md), and for jobs whose
 * trainers use tasks, the tasks stolen and the slow and straggling ranks (docs/work-stealing.md).
 * Each frame is three unary calls (GetClusterStatus, ListJobs of running jobs, ListWorkers); on a
 * terminal the screen is redrawn in place, otherwise frames are printed one after another (like
 * `top -b`); --once prints one frame and exits. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "duration.h"
#include "render.h"
#include "rpc_call.h"
#include "table.h"
#include "tide/v1/cluster_service.pb-c.h"
#include "tide/v1/job_service.pb-c.h"
#include "xmalloc.h"

#define INTERVAL_DEFAULT_S 2

/* A ratio as a percentage, or "-" when unknown. */
static void pct(double ratio, bool known, char *buf, size_t size)
{
    if (known)
        tide_cli_ratio_format(ratio, buf, size);
    else
        snprintf(buf, size, "-");
}

/* A utilization as a whole percentage ("37%"), or "-": the worker table's columns are narrow. */
static void pct0(double ratio, bool known, char *buf, size_t size)
{
    if (known)
        snprintf(buf, size, "%.0f%%", 100 * ratio);
    else
        snprintf(buf, size, "-");
}

static const Tide__V1__Job *find_job(Tide__V1__ListJobsResponse *jobs, const char *id)
{
    for (size_t i = 0; jobs && i < jobs->n_jobs; i++)
        if (strcmp(jobs->jobs[i]->id, id) == 0)
            return jobs->jobs[i];
    return NULL;
}

static void render(const Tide__V1__ClusterStatus *st, Tide__V1__ListJobsResponse *jobs,
                   const Tide__V1__ListWorkersResponse *ws, const char *addr, int64_t now_ms,
                   tide_buf_t *out)
{
    static const char *const jh[] = {"JOB", "NAME", "RANKS", "STEP", "MFU", "FLOP/S", "STEALS", "BOUND BY"};
    static const char *const wh[] = {"WORKER", "STATE", "JOB",  "GPU", "MEMBW", "NET",
                                     "IO",     "TEMP",  "POWER", "MFU", "BOUND BY"};
    char m[32], a[32], p[32], clock[32];
    tide_cli_table_t *t;

    pct(st->mfu, st->peak_flops > 0, m, sizeof(m));
    tide_cli_si_format(st->flops_per_s, a, sizeof(a));
    tide_cli_si_format(st->peak_flops, p, sizeof(p));
    tide_cli_time_format(now_ms, false, clock, sizeof(clock));
    tide_buf_printf(out, "tide top  %s  %s\n", addr, clock);
    tide_buf_printf(out, "MFU %s (%sFLOP/s of %sFLOP/s, every healthy GPU)\n", m, a, p);
    if (st->utilization_known) {
        char *status = tide_cli_sanitize(st->health_status);
        const double v[4] = {st->utilization_compute, st->utilization_memory_bandwidth,
                             st->utilization_network, st->utilization_storage};
        char line[128];
        tide_buf_printf(out, "health %.0f/100; %s\n  %.76s\n", st->health_score,
                        tide_cli_utilization_format(v, st->utilization_known, line, sizeof(line)),
                        status);
        free(status);
    }
    tide_buf_printf(out, "workers %d: %d ready, %d busy, %d suspect, %d dead; jobs %d running, %d pending\n\n",
                    st->workers_total, st->workers_ready, st->workers_busy, st->workers_suspect,
                    st->workers_dead, st->jobs_running, st->jobs_pending);

    t = tide_cli_table_new(8, jh);
    tide_cli_table_set_gap(t, 2);
    for (size_t i = 0; jobs && i < jobs->n_jobs; i++) {
        const Tide__V1__Job *j = jobs->jobs[i];
        const Tide__V1__TrainerProgress *pr = tide_cli_job_progress(j);
        const Tide__V1__Utilization *ju = j->utilization;
        char ranks[16], step[24], mfu[32], rate[32], bound[24], steals[24];
        char *id = tide_cli_sanitize(j->id), *name = tide_cli_sanitize(j->spec ? j->spec->name : "");
        const char *row[8] = {id, name, ranks, step, mfu, rate, steals, bound};
        if (ju) {
            const double u[4] = {ju->compute, ju->memory_bandwidth, ju->network, ju->storage_io};
            tide_cli_bound_format(u, ju->known, bound, sizeof(bound));
        } else {
            snprintf(bound, sizeof(bound), "-");
        }
        snprintf(ranks, sizeof(ranks), "%zu", j->n_ranks);
        if (tide_cli_job_uses_tasks(j))
            snprintf(steals, sizeof(steals), "%llu", (unsigned long long)j->tasks_stolen);
        else
            snprintf(steals, sizeof(steals), "-");
        if (pr && pr->sdk && pr->step >= 0)
            snprintf(step, sizeof(step), "%lld", (long long)pr->step);
        else
            snprintf(step, sizeof(step), "-");
        pct(j->mfu, j->flops_per_s > 0, mfu, sizeof(mfu));
        if (j->flops_per_s > 0)
            tide_cli_si_format(j->flops_per_s, rate, sizeof(rate));
        else
            snprintf(rate, sizeof(rate), "-");
        tide_cli_table_add_row(t, row);
        free(id);
        free(name);
    }
    tide_cli_table_render(t, out);
    tide_cli_table_free(t);
    tide_buf_append_str(out, "\n");

    t = tide_cli_table_new(11, wh);
    tide_cli_table_set_gap(t, 2);
    for (size_t i = 0; i < ws->n_workers; i++) {
        const Tide__V1__Worker *w = ws->workers[i];
        const Tide__V1__Telemetry *tm = w->telemetry;
        uint32_t known = tm ? (tm->known ? tm->known : 0xfu) : 0;
        const Tide__V1__Job *j = w->job_id[0] ? find_job(jobs, w->job_id) : NULL;
        const Tide__V1__TrainerProgress *pr =
            j && w->rank >= 0 && (size_t)w->rank < j->n_ranks ? j->ranks[w->rank]->progress : NULL;
        char state[24], util[16], membw[16], net[16], io[16], temp[16], power[16], mfu[32];
        char bound[24];
        char *id = tide_cli_sanitize(w->id), *job = tide_cli_sanitize(w->job_id[0] ? w->job_id : "-");
        const char *row[11] = {id, state, job, util, membw, net, io, temp, power, mfu, bound};
        tide_cli_enum_name(&tide__v1__worker_state__descriptor, w->state, "WORKER_STATE_", state,
                           sizeof(state));
        pct0(tm ? tm->gpu_util : 0, known & 1u, util, sizeof(util));
        pct0(tm ? tm->mem_bw_util : 0, known & 16u, membw, sizeof(membw));
        pct0(tm ? tm->net_util : 0, known & 512u, net, sizeof(net));
        pct0(tm ? tm->storage_util : 0, known & 1024u, io, sizeof(io));
        if (tm) {
            const double u[4] = {tm->gpu_util, tm->mem_bw_util, tm->net_util, tm->storage_util};
            /* Telemetry bits 1, 16, 512, 1024 in the order of Utilization's 1, 2, 4, 8. */
            uint32_t k = (known & 1u) | (known & 16u ? 2u : 0) | (known & 512u ? 4u : 0) |
                         (known & 1024u ? 8u : 0);
            tide_cli_bound_format(u, k, bound, sizeof(bound));
        } else {
            snprintf(bound, sizeof(bound), "-");
        }
        if (known & 4u)
            snprintf(temp, sizeof(temp), "%.0fC", tm->temperature_c);
        else
            snprintf(temp, sizeof(temp), "-");
        if (known & 8u)
            snprintf(power, sizeof(power), "%.0fW", tm->power_w);
        else
            snprintf(power, sizeof(power), "-");
        pct(pr ? pr->mfu : 0, pr && pr->sdk && pr->flops_per_s > 0, mfu, sizeof(mfu));
        tide_cli_table_add_row(t, row);
        free(id);
        free(job);
    }
    tide_cli_table_render(t, out);
    tide_cli_table_free(t);
    if (jobs)
        tide_cli_render_top_tasks(jobs->jobs, jobs->n_jobs, now_ms, out);
}

/* One frame into out. Returns 0, or an exit status after reporting the error. */
static int frame(tide_cli_t *cli, tide_cli_conn_t *conn, tide_buf_t *out)
{
    Tide__V1__GetClusterStatusRequest sreq = TIDE__V1__GET_CLUSTER_STATUS_REQUEST__INIT;
    Tide__V1__ListJobsRequest jreq = TIDE__V1__LIST_JOBS_REQUEST__INIT;
    Tide__V1__ListWorkersRequest wreq = TIDE__V1__LIST_WORKERS_REQUEST__INIT;
    Tide__V1__JobState running = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING;
    ProtobufCMessage *st = NULL, *jobs = NULL, *ws = NULL;
    tide_cli_status_t s;
    int rc = 0;

    jreq.n_states = 1;
    jreq.states = &running;
    jreq.page_size = 1000;
    if (tide_cli_unary(conn, "/tide.v1.ClusterService/GetClusterStatus", &sreq.base,
                       &tide__v1__cluster_status__descriptor, &st, &s) < 0 ||
        tide_cli_unary(conn, "/tide.v1.JobService/ListJobs", &jreq.base,
                       &tide__v1__list_jobs_response__descriptor, &jobs, &s) < 0 ||
        tide_cli_unary(conn, "/tide.v1.ClusterService/ListWorkers", &wreq.base,
                       &tide__v1__list_workers_response__descriptor, &ws, &s) < 0) {
        tide_cli_report(conn, &s);
        rc = TIDE_CLI_EXIT_FAILURE;
    } else {
        render((Tide__V1__ClusterStatus *)st, (Tide__V1__ListJobsResponse *)jobs,
               (Tide__V1__ListWorkersResponse *)ws, tide_cli_conn_address(conn), cli->now_ms(), out);
    }
    protobuf_c_message_free_unpacked(st, NULL);
    protobuf_c_message_free_unpacked(jobs, NULL);
    protobuf_c_message_free_unpacked(ws, NULL);
    return rc;
}

int tide_cli_cmd_top(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    int64_t interval = INTERVAL_DEFAULT_S;
    bool once = false, tty = isatty(fileno(cli->out)) == 1;
    int id, rc;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            return rc;
        if (id == TIDE_CLI_OPT_ONCE) {
            once = true;
        } else if (id == TIDE_CLI_OPT_INTERVAL) {
            if (tide_cli_duration_parse(a.arg, &interval) < 0 || interval < 1 || interval > 3600)
                return tide_cli_usage_error(cli, cmd, "bad --interval '%.40s': from 1s to 1h", a.arg);
        } else {
            return tide_cli_usage_error(cli, cmd, "unexpected argument '%s'", a.arg);
        }
    }
    if (cli->format == TIDE_CLI_FORMAT_JSON)
        return tide_cli_usage_error(cli, cmd,
                                    "top has no JSON form: use status, jobs or workers with -o json");
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        return rc;
    for (;;) {
        tide_buf_t b = TIDE_BUF_INIT;
        if (tty && !once)
            tide_buf_append_str(&b, "\033[H\033[2J"); /* home, clear: redraw in place */
        rc = frame(cli, conn, &b);
        if (rc == 0 && b.len)
            fwrite(b.data, 1, b.len, cli->out);
        fflush(cli->out);
        tide_buf_free(&b);
        if (rc || once)
            break;
        if (!tty)
            fputs("\n", cli->out);
        if (tide_cli_conn_sleep(conn, interval * 1000) < 0)
            break;
    }
    tide_cli_conn_close(conn);
    return rc ? rc : TIDE_CLI_EXIT_OK;
}

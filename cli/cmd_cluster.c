/* tidectl workers, cordon, uncordon, status and version: the ClusterService's unary calls. Several
 * workers in one cordon/uncordon are handled one by one: a failure is reported and the rest still run. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "output.h"
#include "render.h"
#include "rpc_call.h"
#include "table.h"
#include "tide/v1/cluster_service.pb-c.h"
#include "xmalloc.h"

#ifndef TIDE_VERSION
#define TIDE_VERSION "unknown"
#endif

static void write_buf(FILE *f, tide_buf_t *b)
{
    if (b->len)
        fwrite(b->data, 1, b->len, f);
    fflush(f);
}

int tide_cli_cmd_workers(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__ListWorkersRequest req = TIDE__V1__LIST_WORKERS_REQUEST__INIT;
    Tide__V1__ListWorkersResponse *resp = NULL;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    int *states = NULL, id, rc = TIDE_CLI_EXIT_FAILURE;
    size_t n_states = 0;
    bool all = false;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto done;
        if (id == TIDE_CLI_OPT_STATE) {
            if (tide_cli_parse_enum_list(a.arg, &tide__v1__worker_state__descriptor, "WORKER_STATE_",
                                         "worker state", &states, &n_states, &err) < 0) {
                rc = tide_cli_usage_error(cli, cmd, "%s", err.text);
                goto done;
            }
        } else if (id == TIDE_CLI_OPT_ALL) {
            all = true;
        } else {
            rc = tide_cli_usage_error(cli, cmd, "unexpected argument '%s'", a.arg);
            goto done;
        }
    }
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    req.n_states = n_states;
    req.states = (Tide__V1__WorkerState *)states;
    req.include_departed = all;
    if (tide_cli_unary(conn, "/tide.v1.ClusterService/ListWorkers", &req.base,
                       &tide__v1__list_workers_response__descriptor, (ProtobufCMessage **)&resp, &st) < 0) {
        tide_cli_report(conn, &st);
        rc = TIDE_CLI_EXIT_FAILURE;
        goto done;
    }
    if (cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json(cli->out, &resp->base);
    } else if (resp->n_workers == 0) {
        fputs("No workers found.\n", cli->err);
    } else {
        tide_buf_t b = TIDE_BUF_INIT;
        tide_cli_render_workers(resp->workers, resp->n_workers, cli->now_ms(), &b);
        write_buf(cli->out, &b);
        tide_buf_free(&b);
    }
    rc = TIDE_CLI_EXIT_OK;
done:
    if (resp)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(states);
    tide_cli_conn_close(conn);
    return rc;
}

/* cordon and uncordon share this: the command's name picks the method. */
int tide_cli_cmd_cordon(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    bool cordon = strcmp(cmd->name, "cordon") == 0;
    const char *path = cordon ? "/tide.v1.ClusterService/CordonWorker" : "/tide.v1.ClusterService/UncordonWorker";
    tide_cli_conn_t *conn = NULL;
    const char **ids;
    size_t n;
    int rc = tide_cli_collect_args(cli, cmd, argc, argv, 0, "worker ID", &ids, &n);

    if (rc >= 0)
        goto done;
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        goto done;
    for (size_t i = 0; i < n; i++) {
        Tide__V1__WorkerRef ref = TIDE__V1__WORKER_REF__INIT;
        tide_cli_status_t st;
        ProtobufCMessage *resp;

        ref.id = (char *)ids[i];
        if (tide_cli_unary(conn, path, &ref.base, &tide__v1__worker__descriptor, &resp, &st) < 0) {
            tide_cli_report(conn, &st);
            rc = TIDE_CLI_EXIT_FAILURE;
            continue;
        }
        if (cli->format == TIDE_CLI_FORMAT_JSON && n == 1) {
            tide_cli_print_json(cli->out, resp);
        } else if (cli->format == TIDE_CLI_FORMAT_JSON) {
            tide_cli_print_json_line(cli->out, resp);
        } else {
            char *wid = tide_cli_sanitize(((Tide__V1__Worker *)resp)->id);
            fprintf(cli->out, "worker %s %s\n", wid, cordon ? "cordoned" : "uncordoned");
            fflush(cli->out);
            free(wid);
        }
        protobuf_c_message_free_unpacked(resp, NULL);
    }
done:
    free(ids);
    tide_cli_conn_close(conn);
    return rc;
}

int tide_cli_cmd_drain(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__DrainWorkerRequest req = TIDE__V1__DRAIN_WORKER_REQUEST__INIT;
    Tide__V1__Worker *w = NULL;
    tide_cli_conn_t *conn = NULL;
    tide_cli_args_t a;
    tide_cli_status_t st;
    tide_error_t err = {{0}};
    const char *worker = NULL;
    int id, rc;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            return rc;
        if (id == TIDE_CLI_OPT_REASON) {
            req.reason = (char *)a.arg;
        } else if (id == TIDE_CLI_ARG_POSITIONAL && !worker) {
            worker = a.arg;
        } else {
            return tide_cli_usage_error(cli, cmd, "unexpected argument '%s'",
                                        id == TIDE_CLI_ARG_POSITIONAL ? a.arg : a.opt_text);
        }
    }
    if (!worker || !*worker)
        return tide_cli_usage_error(cli, cmd, "missing worker ID");
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        return rc;
    req.id = (char *)worker;
    if (tide_cli_unary(conn, "/tide.v1.ClusterService/DrainWorker", &req.base, &tide__v1__worker__descriptor,
                       (ProtobufCMessage **)&w, &st) < 0) {
        tide_cli_report(conn, &st);
        tide_cli_conn_close(conn);
        return TIDE_CLI_EXIT_FAILURE;
    }
    if (cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json(cli->out, &w->base);
    } else {
        char *wid = tide_cli_sanitize(w->id), *jid = tide_cli_sanitize(w->job_id);
        if (*jid)
            fprintf(cli->out, "worker %s drained: job %s moves off it (follow it with 'tidectl job %s')\n", wid, jid,
                    jid);
        else
            fprintf(cli->out, "worker %s drained: it runs no rank; it stays cordoned\n", wid);
        free(wid);
        free(jid);
    }
    fflush(cli->out);
    protobuf_c_message_free_unpacked(&w->base, NULL);
    tide_cli_conn_close(conn);
    return TIDE_CLI_EXIT_OK;
}

static int no_args(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv, bool *client_only)
{
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    int id, rc;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            return rc;
        if (id == TIDE_CLI_OPT_CLIENT && client_only)
            *client_only = true;
        else
            return tide_cli_usage_error(cli, cmd, "unexpected argument '%s'",
                                        id == TIDE_CLI_ARG_POSITIONAL ? a.arg : a.opt_text);
    }
    return -1;
}

int tide_cli_cmd_status(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__GetClusterStatusRequest req = TIDE__V1__GET_CLUSTER_STATUS_REQUEST__INIT;
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    ProtobufCMessage *resp = NULL;
    int rc = no_args(cli, cmd, argc, argv, NULL);

    if (rc >= 0)
        return rc;
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        return rc;
    if (tide_cli_unary(conn, "/tide.v1.ClusterService/GetClusterStatus", &req.base,
                       &tide__v1__cluster_status__descriptor, &resp, &st) < 0) {
        tide_cli_report(conn, &st);
        rc = TIDE_CLI_EXIT_FAILURE;
    } else if (cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json(cli->out, resp);
    } else {
        tide_buf_t b = TIDE_BUF_INIT;
        tide_cli_render_status((Tide__V1__ClusterStatus *)resp, tide_cli_conn_address(conn), &b);
        write_buf(cli->out, &b);
        tide_buf_free(&b);
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    tide_cli_conn_close(conn);
    return rc;
}

int tide_cli_cmd_version(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__GetClusterStatusRequest req = TIDE__V1__GET_CLUSTER_STATUS_REQUEST__INIT;
    Tide__V1__ClusterStatus *cs = NULL;
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    bool client_only = false;
    int rc = no_args(cli, cmd, argc, argv, &client_only);

    if (rc >= 0)
        return rc;
    if (cli->format == TIDE_CLI_FORMAT_TABLE) {
        fprintf(cli->out, "tidectl %s\n", TIDE_VERSION);
        fflush(cli->out);
    }
    rc = TIDE_CLI_EXIT_OK;
    if (!client_only) {
        rc = tide_cli_conn_open(cli, &conn);
        if (rc == 0 && tide_cli_unary(conn, "/tide.v1.ClusterService/GetClusterStatus", &req.base,
                                      &tide__v1__cluster_status__descriptor, (ProtobufCMessage **)&cs, &st) < 0) {
            tide_cli_report(conn, &st);
            rc = TIDE_CLI_EXIT_FAILURE;
        }
    }
    if (cli->format == TIDE_CLI_FORMAT_JSON) {
        cJSON *j = cJSON_CreateObject();
        tide_buf_t b = TIDE_BUF_INIT;
        cJSON_AddStringToObject(j, "client", TIDE_VERSION);
        if (cs)
            cJSON_AddStringToObject(j, "scheduler", cs->version);
        tide_cli_json_pretty(j, &b);
        tide_buf_append(&b, "\n", 1);
        write_buf(cli->out, &b);
        tide_buf_free(&b);
        cJSON_Delete(j);
    } else if (cs) {
        char *v = tide_cli_sanitize(cs->version);
        fprintf(cli->out, "scheduler %s at %s\n", *v ? v : "(unknown)", tide_cli_conn_address(conn));
        fflush(cli->out);
        free(v);
    }
    if (cs)
        protobuf_c_message_free_unpacked(&cs->base, NULL);
    tide_cli_conn_close(conn);
    return rc;
}

/* tidectl token, usage and audit: identities for the scheduler's users file (made here, offline:
 * the token leaves this process only on stdout and only its SHA-256 goes in the file), GPU time per
 * owner and pool (GetUsage), and the audit log (ListAudit, polled with after_seq under --follow so
 * no entry is printed twice). docs/security.md describes the users file, accounting and the audit
 * log. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "duration.h"
#include "output.h"
#include "render.h"
#include "rpc_call.h"
#include "table.h"
#include "tide/v1/cluster_service.pb-c.h"
#include "token.h"
#include "users.h"
#include "xmalloc.h"

#define AUDIT_LIMIT_MAX 1000
#define AUDIT_POLL_MS   1000
#define AUDIT_WIDTH     120 /* table mode cuts MESSAGE so a row fits this many columns */
#define AUDIT_MSG_MIN   20  /* ... but leaves it at least this many */
#define AUDIT_COLS      7

static void write_buf(FILE *f, tide_buf_t *b)
{
    if (b->len)
        fwrite(b->data, 1, b->len, f);
    fflush(f);
}

/* ---- token ---- */

/* --expires: "never", a DURATION from now, a UTC time "2027-01-31T00:00:00Z" or a date "2027-01-31"
 * (midnight UTC). *ms is 0 for never. Returns 0 or -EINVAL. */
static int parse_expires(const char *s, int64_t now_ms, int64_t *ms)
{
    struct tm tm;
    const char *end;
    int64_t secs;

    if (strcasecmp(s, "never") == 0 || strcasecmp(s, "unlimited") == 0) {
        *ms = 0;
        return 0;
    }
    memset(&tm, 0, sizeof(tm));
    end = strptime(s, "%Y-%m-%d", &tm);
    if (end && (*end == '\0' || (*end == 'T' && (end = strptime(end + 1, "%H:%M:%S", &tm)) &&
                                 strcmp(end, "Z") == 0))) {
        struct tm back, want = tm;
        time_t t = timegm(&tm);
        /* timegm would carry 2027-02-31 into March: only a date that exists is taken. */
        if (!gmtime_r(&t, &back) || back.tm_year != want.tm_year || back.tm_mon != want.tm_mon ||
            back.tm_mday != want.tm_mday || back.tm_hour != want.tm_hour ||
            back.tm_min != want.tm_min || back.tm_sec != want.tm_sec)
            return -EINVAL;
        *ms = (int64_t)t * 1000;
        return *ms > now_ms ? 0 : -EINVAL;
    }
    if (tide_cli_duration_parse(s, &secs) < 0 || secs <= 0)
        return -EINVAL;
    *ms = (now_ms / 1000 + secs) * 1000;
    return 0;
}

static void utc_iso(int64_t ms, char *buf, size_t size)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    if (!gmtime_r(&t, &tm) || strftime(buf, size, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, size, "?");
}

static int token_create(tide_cli_t *cli, const char *user, const char *role_name,
                        int64_t expires_ms)
{
    tide_error_t err = {{0}};
    char digest[65], expires[40] = "";
    char *token = NULL;

    if (tide_token_generate(&token, &err) < 0) {
        tide_cli_errorf(cli, "cannot make a token: %s", err.text);
        return TIDE_CLI_EXIT_FAILURE;
    }
    tide_token_digest_hex(token, digest);
    if (expires_ms)
        utc_iso(expires_ms, expires, sizeof(expires));
    if (cli->format == TIDE_CLI_FORMAT_JSON) {
        cJSON *j = cJSON_CreateObject(), *entry, *toks, *t;
        tide_buf_t b = TIDE_BUF_INIT;

        cJSON_AddStringToObject(j, "token", token);
        entry = cJSON_AddObjectToObject(j, "entry");
        cJSON_AddStringToObject(entry, "name", user);
        cJSON_AddStringToObject(entry, "role", role_name);
        toks = cJSON_AddArrayToObject(entry, "tokens");
        t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "sha256", digest);
        if (*expires)
            cJSON_AddStringToObject(t, "expires", expires);
        cJSON_AddItemToArray(toks, t);
        tide_cli_json_pretty(j, &b);
        tide_buf_append_str(&b, "\n");
        write_buf(cli->out, &b);
        tide_buf_free(&b);
        cJSON_Delete(j);
    } else {
        /* user and role are checked names: nothing in them needs JSON escaping. */
        fprintf(cli->out, "token:  %s   (give this to %s; it is not stored anywhere)\n", token,
                user);
        fprintf(cli->out,
                "entry:  {\"name\": \"%s\", \"role\": \"%s\", \"tokens\": [{\"sha256\": "
                "\"%s\"%s%s%s}]}\n",
                user, role_name, digest, *expires ? ", \"expires\": \"" : "", expires,
                *expires ? "\"" : "");
        fflush(cli->out);
    }
    /* The secret does not outlive its printing. */
    memset(token, 0, strlen(token));
    free(token);
    return TIDE_CLI_EXIT_OK;
}

static int token_hash(tide_cli_t *cli)
{
    char buf[TIDE_TOKEN_FILE_MAX + 2];
    size_t n = 0, start = 0;
    char digest[65];

    if (isatty(fileno(stdin)) == 1)
        fputs("Paste the token, then press Enter and Ctrl-D:\n", cli->err);
    while (n < sizeof(buf) - 1) {
        size_t got = fread(buf + n, 1, sizeof(buf) - 1 - n, stdin);
        if (got == 0)
            break;
        n += got;
    }
    if (ferror(stdin)) {
        tide_cli_errorf(cli, "cannot read stdin: %s", strerror(errno));
        return TIDE_CLI_EXIT_FAILURE;
    }
    if (n > TIDE_TOKEN_FILE_MAX) {
        tide_cli_errorf(cli, "stdin holds more than %d bytes: not a token", TIDE_TOKEN_FILE_MAX);
        return TIDE_CLI_EXIT_FAILURE;
    }
    buf[n] = '\0';
    /* Trimmed as tidectl and the worker trim token files. */
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';
    while (start < n && isspace((unsigned char)buf[start]))
        start++;
    if (start == n) {
        tide_cli_errorf(cli, "no token on stdin");
        return TIDE_CLI_EXIT_FAILURE;
    }
    for (size_t i = start; i < n; i++) {
        if (isspace((unsigned char)buf[i]) || iscntrl((unsigned char)buf[i])) {
            tide_cli_errorf(
                cli, "stdin holds more than one word: a token has no blanks or control characters");
            memset(buf, 0, sizeof(buf));
            return TIDE_CLI_EXIT_FAILURE;
        }
    }
    tide_token_digest_hex(buf + start, digest);
    memset(buf, 0, sizeof(buf));
    if (cli->format == TIDE_CLI_FORMAT_JSON)
        fprintf(cli->out, "{\n  \"sha256\": \"%s\"\n}\n", digest);
    else
        fprintf(cli->out, "sha256: %s\n", digest);
    fflush(cli->out);
    return TIDE_CLI_EXIT_OK;
}

int tide_cli_cmd_token(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    const char *sub = NULL, *user = NULL, *role_arg = NULL, *expires_arg = NULL, *opt_seen = NULL;
    char opt_text[sizeof(a.opt_text)];
    char *login = NULL;
    tide_role_t role = TIDE_ROLE_USER;
    int64_t expires_ms = 0;
    int id, rc;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto done;
        switch (id) {
        case TIDE_CLI_ARG_POSITIONAL:
            if (sub) {
                rc = tide_cli_usage_error(cli, cmd, "unexpected argument '%s'", a.arg);
                goto done;
            }
            sub = a.arg;
            continue;
        case TIDE_CLI_OPT_USER:
            user = a.arg;
            break;
        case TIDE_CLI_OPT_ROLE:
            role_arg = a.arg;
            break;
        case TIDE_CLI_OPT_EXPIRES:
            expires_arg = a.arg;
            break;
        default:
            rc = tide_cli_usage_error(cli, cmd, "unexpected argument '%s'", a.opt_text);
            goto done;
        }
        snprintf(opt_text, sizeof(opt_text), "%s", a.opt_text);
        opt_seen = opt_text;
    }
    if (!sub) {
        rc = tide_cli_usage_error(cli, cmd, "missing 'create' or 'hash'");
        goto done;
    }
    if (strcmp(sub, "hash") == 0) {
        if (opt_seen) {
            rc = tide_cli_usage_error(
                cli, cmd, "'token hash' takes no option ('%s' is for 'token create')", opt_seen);
            goto done;
        }
        rc = token_hash(cli);
        goto done;
    }
    if (strcmp(sub, "create") != 0) {
        rc =
            tide_cli_usage_error(cli, cmd, "unknown token command '%s' (one of create, hash)", sub);
        goto done;
    }
    if (!user) {
        struct passwd *pw = getpwuid(geteuid());
        if (!pw || !pw->pw_name || !tide_user_name_valid(pw->pw_name)) {
            rc = tide_cli_usage_error(cli, cmd, "cannot tell your login name: give --user NAME");
            goto done;
        }
        login = tide_xstrdup(pw->pw_name);
        user = login;
    }
    if (!tide_user_name_valid(user)) {
        rc = tide_cli_usage_error(cli, cmd, "bad --user '%.80s': 1-%d letters, digits or ._@-",
                                  user, TIDE_USER_NAME_MAX);
        goto done;
    }
    if (strcmp(user, TIDE_ADMIN_IDENTITY) == 0) {
        rc = tide_cli_usage_error(
            cli, cmd, "bad --user 'admin': the name of the scheduler's own token; choose another");
        goto done;
    }
    if (role_arg && tide_role_parse(role_arg, &role) < 0) {
        rc = tide_cli_usage_error(
            cli, cmd, "bad --role '%.40s' (one of admin, user, worker, read-only)", role_arg);
        goto done;
    }
    if (expires_arg && parse_expires(expires_arg, cli->now_ms(), &expires_ms) < 0) {
        rc = tide_cli_usage_error(
            cli, cmd,
            "bad --expires '%.40s': a duration from now (30d, 12h) or a future UTC time "
            "(2027-01-31T00:00:00Z)",
            expires_arg);
        goto done;
    }
    rc = token_create(cli, user, tide_role_name(role), expires_ms);
done:
    free(login);
    return rc;
}

/* ---- usage ---- */

/* The value of an option that names something: not empty. Returns 0, or -1 after a usage error in
 * *rc. */
static int name_arg(tide_cli_t *cli, const tide_cli_command_t *cmd, const tide_cli_args_t *a,
                    int *rc)
{
    if (*a->arg)
        return 0;
    *rc = tide_cli_usage_error(cli, cmd, "bad %s: empty", a->opt_text);
    return -1;
}

static void render_usage(const Tide__V1__UsageReport *r, tide_buf_t *out)
{
    static const char *const headers[] = {"USER", "POOL", "GPU-HOURS", "JOBS", "RUNNING", "GPUS"};
    tide_cli_table_t *t = tide_cli_table_new(6, headers);
    long long jobs = 0, running = 0, gpus = 0;
    char hours[32], nj[24], nr[24], ng[24];
    const char *cells[6] = {NULL, NULL, hours, nj, nr, ng};

    for (size_t i = 0; i < r->n_rows; i++) {
        const Tide__V1__UsageRow *row = r->rows[i];
        snprintf(hours, sizeof(hours), "%.2f", row->gpu_seconds / 3600.0);
        snprintf(nj, sizeof(nj), "%d", row->jobs);
        snprintf(nr, sizeof(nr), "%d", row->running_jobs);
        snprintf(ng, sizeof(ng), "%d", row->gpus_in_use);
        cells[0] = *row->user ? row->user : "-";
        cells[1] = *row->pool ? row->pool : "*";
        tide_cli_table_add_row(t, cells);
        jobs += row->jobs;
        running += row->running_jobs;
        gpus += row->gpus_in_use;
    }
    snprintf(hours, sizeof(hours), "%.2f", r->total_gpu_seconds / 3600.0);
    snprintf(nj, sizeof(nj), "%lld", jobs);
    snprintf(nr, sizeof(nr), "%lld", running);
    snprintf(ng, sizeof(ng), "%lld", gpus);
    cells[0] = "TOTAL";
    cells[1] = "";
    tide_cli_table_add_row(t, cells);
    tide_cli_table_render(t, out);
    tide_cli_table_free(t);
}

int tide_cli_cmd_usage(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__GetUsageRequest req = TIDE__V1__GET_USAGE_REQUEST__INIT;
    Tide__V1__UsageReport *resp = NULL;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    tide_cli_status_t st;
    int id, rc;

    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            return rc;
        if (id == TIDE_CLI_OPT_USER) {
            if (name_arg(cli, cmd, &a, &rc) < 0)
                return rc;
            req.user = (char *)a.arg;
        } else if (id == TIDE_CLI_OPT_POOL) {
            if (name_arg(cli, cmd, &a, &rc) < 0)
                return rc;
            req.pool = (char *)a.arg;
        } else {
            return tide_cli_usage_error(cli, cmd, "unexpected argument '%s'",
                                        id == TIDE_CLI_ARG_POSITIONAL ? a.arg : a.opt_text);
        }
    }
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        return rc;
    if (tide_cli_unary(conn, "/tide.v1.ClusterService/GetUsage", &req.base,
                       &tide__v1__usage_report__descriptor, (ProtobufCMessage **)&resp, &st) < 0) {
        tide_cli_report(conn, &st);
        tide_cli_conn_close(conn);
        return TIDE_CLI_EXIT_FAILURE;
    }
    if (cli->format == TIDE_CLI_FORMAT_JSON) {
        tide_cli_print_json(cli->out, &resp->base);
    } else if (resp->n_rows == 0) {
        fputs("No usage found.\n", cli->err);
    } else {
        tide_buf_t b = TIDE_BUF_INIT;
        render_usage(resp, &b);
        write_buf(cli->out, &b);
        tide_buf_free(&b);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    tide_cli_conn_close(conn);
    return TIDE_CLI_EXIT_OK;
}

/* ---- audit ---- */

typedef struct audit_view {
    bool utc, follow;
    bool header_done;
    size_t width[AUDIT_COLS -
                 1]; /* of every column but MESSAGE; fixed after the first rows under --follow */
} audit_view_t;

/* The columns of one entry, sanitized (cells[i] owned; free with cells_free). */
static void audit_cells(const Tide__V1__AuditEntry *e, bool utc, char *cells[AUDIT_COLS])
{
    char when[48];

    tide_cli_time_format(e->time_ms, utc, when, sizeof(when));
    cells[0] = tide_xstrdup(when);
    cells[1] = tide_cli_sanitize(*e->user ? e->user : "-");
    cells[2] = tide_cli_sanitize(*e->role ? e->role : "-");
    cells[3] = tide_cli_sanitize(*e->method ? e->method : "-");
    cells[4] = tide_cli_sanitize(*e->target ? e->target : "-");
    cells[5] = tide_cli_sanitize(*e->code ? e->code : "-");
    cells[6] = tide_cli_sanitize(e->message);
}

static void cells_free(char *cells[AUDIT_COLS])
{
    for (int i = 0; i < AUDIT_COLS; i++)
        free(cells[i]);
}

/* s cut to at most w characters (code points), the last three "..." when it was cut. */
static void append_cut(tide_buf_t *out, const char *s, size_t w)
{
    size_t chars = 0, i = 0;

    if (tide_cli_display_width(s) <= w) {
        tide_buf_append_str(out, s);
        return;
    }
    for (; s[i]; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80 && chars++ == w - 3)
            break;
    }
    tide_buf_append(out, s, i);
    tide_buf_append_str(out, "...");
}

static void append_row(tide_buf_t *out, const audit_view_t *v, const char *const cells[AUDIT_COLS])
{
    size_t used = 0, msg_w;
    size_t start = out->len;

    for (int c = 0; c < AUDIT_COLS - 1; c++) {
        /* A cell wider than its column (a later row under --follow) pushes the rest, one space at
         * least. */
        size_t w = tide_cli_display_width(cells[c]);
        size_t pad = w < v->width[c] + 3 ? v->width[c] + 3 - w : 1;
        tide_buf_append_str(out, cells[c]);
        for (size_t k = 0; k < pad; k++)
            tide_buf_append(out, " ", 1);
        used += w + pad;
    }
    msg_w = used + AUDIT_MSG_MIN < AUDIT_WIDTH ? AUDIT_WIDTH - used : AUDIT_MSG_MIN;
    append_cut(out, cells[AUDIT_COLS - 1], msg_w);
    while (out->len > start && out->data[out->len - 1] == ' ')
        out->len--;
    tide_buf_append(out, "\n", 1);
}

/* Appends entries as rows of the TIME USER ROLE METHOD TARGET RESULT MESSAGE table (the header
 * before the first rows). Column widths come from the first rows seen and stay (as kubectl get -w),
 * so rows that come later under --follow line up with the header unless a cell is wider than its
 * column. */
static void render_audit(audit_view_t *v, Tide__V1__AuditEntry *const *entries, size_t n,
                         tide_buf_t *out)
{
    static const char *const headers[AUDIT_COLS] = {"TIME",   "USER",   "ROLE",   "METHOD",
                                                    "TARGET", "RESULT", "MESSAGE"};
    char *(*rows)[AUDIT_COLS];

    if (n == 0)
        return;
    rows = tide_xcalloc(n, sizeof(*rows));
    for (size_t i = 0; i < n; i++)
        audit_cells(entries[i], v->utc, rows[i]);
    if (!v->header_done) {
        for (int c = 0; c < AUDIT_COLS - 1; c++) {
            v->width[c] = strlen(headers[c]);
            for (size_t i = 0; i < n; i++) {
                size_t w = tide_cli_display_width(rows[i][c]);
                if (w > v->width[c])
                    v->width[c] = w;
            }
        }
        append_row(out, v, headers);
        v->header_done = true;
    }
    for (size_t i = 0; i < n; i++) {
        append_row(out, v, (const char *const *)rows[i]);
        cells_free(rows[i]);
    }
    free(rows);
}

int tide_cli_cmd_audit(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv)
{
    Tide__V1__ListAuditRequest req = TIDE__V1__LIST_AUDIT_REQUEST__INIT;
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    tide_cli_conn_t *conn = NULL;
    audit_view_t view;
    int64_t limit = 0, poll_ms = cli->poll_interval_ms > 0 ? cli->poll_interval_ms : AUDIT_POLL_MS;
    uint64_t after = 0;
    int id, rc;

    memset(&view, 0, sizeof(view));
    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            return rc;
        if (id == TIDE_CLI_OPT_USER) {
            if (name_arg(cli, cmd, &a, &rc) < 0)
                return rc;
            req.user = (char *)a.arg;
        } else if (id == TIDE_CLI_OPT_LIMIT) {
            if (tide_cli_parse_int(a.arg, 1, AUDIT_LIMIT_MAX, &limit) < 0)
                return tide_cli_usage_error(cli, cmd, "bad --limit '%.40s': from 1 to %d", a.arg,
                                            AUDIT_LIMIT_MAX);
        } else if (id == TIDE_CLI_OPT_FOLLOW) {
            view.follow = true;
        } else {
            return tide_cli_usage_error(cli, cmd, "unexpected argument '%s'",
                                        id == TIDE_CLI_ARG_POSITIONAL ? a.arg : a.opt_text);
        }
    }
    view.utc = cli->utc; /* --utc may come after the command */
    rc = tide_cli_conn_open(cli, &conn);
    if (rc)
        return rc;
    req.limit = (int32_t)limit;
    for (;;) {
        Tide__V1__ListAuditResponse *resp = NULL;
        tide_cli_status_t st;
        size_t first = 0;
        bool full;

        req.after_seq = after;
        if (tide_cli_unary(conn, "/tide.v1.ClusterService/ListAudit", &req.base,
                           &tide__v1__list_audit_response__descriptor, (ProtobufCMessage **)&resp,
                           &st) < 0) {
            tide_cli_report(conn, &st);
            rc = TIDE_CLI_EXIT_FAILURE;
            break;
        }
        /* A scheduler that repeats what it sent already is not believed twice. */
        while (after && first < resp->n_entries && resp->entries[first]->seq <= after)
            first++;
        if (cli->format == TIDE_CLI_FORMAT_JSON && !view.follow) {
            tide_cli_print_json(cli->out, &resp->base);
        } else if (cli->format == TIDE_CLI_FORMAT_JSON) {
            for (size_t i = first; i < resp->n_entries; i++)
                tide_cli_print_json_line(cli->out, &resp->entries[i]->base);
        } else if (resp->n_entries == 0 && !view.follow) {
            fputs("No audit entries found.\n", cli->err);
        } else {
            tide_buf_t b = TIDE_BUF_INIT;
            render_audit(&view, resp->entries + first, resp->n_entries - first, &b);
            write_buf(cli->out, &b);
            tide_buf_free(&b);
        }
        for (size_t i = first; i < resp->n_entries; i++)
            if (resp->entries[i]->seq > after)
                after = resp->entries[i]->seq;
        /* A full page after after_seq: more are waiting, ask again at once. (The first page is the
         * newest entries; what it left out is older.) */
        full = req.after_seq && resp->n_entries >= (size_t)req.limit && resp->n_entries > first;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        if (!view.follow)
            break;
        req.limit = AUDIT_LIMIT_MAX; /* catching up after the first page */
        if (!full && tide_cli_conn_sleep(conn, poll_ms) < 0) {
            tide_cli_errorf(cli, "INTERNAL: cannot start a timer");
            rc = TIDE_CLI_EXIT_FAILURE;
            break;
        }
    }
    tide_cli_conn_close(conn);
    return rc;
}

/* tidectl's command table, global options and help (the program's front door; main.c only wires the
 * process to it). Parsing never touches the network: a command connects only after its arguments are
 * known to be good, so usage errors are fast and exit 2. */
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

const tide_cli_opt_t tide_cli_global_opts[] = {
    {"scheduler", 0, true, TIDE_CLI_OPT_SCHEDULER, "HOST:PORT",
     "scheduler address (default: $TIDE_SCHEDULER, else 127.0.0.1:7070)"},
    {"token-file", 0, true, TIDE_CLI_OPT_TOKEN_FILE, "FILE",
     "bearer token file (default: $TIDE_TOKEN, $TIDE_TOKEN_FILE, /var/lib/tide/token)"},
    {"output", 'o', true, TIDE_CLI_OPT_OUTPUT, "FORMAT", "table (default) or json"},
    {"utc", 0, false, TIDE_CLI_OPT_UTC, NULL, "print times in UTC"},
    {"tls-ca", 0, true, TIDE_CLI_OPT_TLS_CA, "FILE",
     "talk TLS, verifying the scheduler's certificate against this CA (default: $TIDE_TLS_CA)"},
    {"tls-cert", 0, true, TIDE_CLI_OPT_TLS_CERT, "FILE", "client certificate for TLS (default: $TIDE_TLS_CERT)"},
    {"tls-key", 0, true, TIDE_CLI_OPT_TLS_KEY, "FILE", "its private key (default: $TIDE_TLS_KEY)"},
    {"insecure", 0, false, TIDE_CLI_OPT_INSECURE, NULL,
     "allow plaintext to a non-loopback scheduler (or TIDE_INSECURE=1)"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t help_opts[] = {
    {"help", 'h', false, TIDE_CLI_OPT_HELP, NULL, "show this help"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t submit_opts[] = {
    {"name", 'J', true, TIDE_CLI_OPT_NAME, "NAME", "job name (default: the command's basename)"},
    {"workers", 'n', true, TIDE_CLI_OPT_WORKERS, "N", "run on exactly N workers (GPUs); default 1"},
    {"min", 0, true, TIDE_CLI_OPT_MIN, "N", "elastic: at least N workers"},
    {"max", 0, true, TIDE_CLI_OPT_MAX, "M", "elastic: grow up to M workers"},
    {"priority", 0, true, TIDE_CLI_OPT_PRIORITY, "CLASS", "low, normal (default), high or critical"},
    {"env", 'e', true, TIDE_CLI_OPT_ENV, "K=V", "extra environment for every rank (repeatable)"},
    {"workdir", 'D', true, TIDE_CLI_OPT_WORKDIR, "DIR", "working directory of the ranks (default: here)"},
    {"time", 't', true, TIDE_CLI_OPT_TIME, "DURATION", "time limit: 90s, 15m, 2h, 1h30m, 1d, MM:SS, HH:MM:SS, D-HH:MM:SS"},
    {"wait", 'W', false, TIDE_CLI_OPT_WAIT, NULL, "follow the job until it ends; exit 0 if it succeeded, else 1"},
    {"file", 'f', true, TIDE_CLI_OPT_FILE, "FILE", "start from a JobSpec in JSON (options override it)"},
    {"launcher", 0, true, TIDE_CLI_OPT_LAUNCHER, "KIND",
     "how ranks start: env (default: torchrun-style environment) or mpi (one mpirun)"},
    {"pool", 0, true, TIDE_CLI_OPT_POOL, "NAME", "only workers of pool NAME (default: any open to the class)"},
    {"memory-per-rank", 0, true, TIDE_CLI_OPT_MEMORY_PER_RANK, "SIZE",
     "only GPUs with >= SIZE memory: 80GiB, 80G, 80GB (10^9), 512MiB"},
    {"topology", 0, true, TIDE_CLI_OPT_TOPOLOGY, "WHERE",
     "require one node, rack or switch (default any: preferred, not required)"},
    {"device", 0, true, TIDE_CLI_OPT_DEVICE, "TEXT", "only workers whose device contains TEXT, e.g. h100"},
    {"ckpt-mfu-threshold", 0, true, TIDE_CLI_OPT_CKPT_MFU_THRESHOLD, "F",
     "hold durable checkpoint copies while MFU >= F (0.3 or 30%)"},
    {"ckpt-deadline", 0, true, TIDE_CLI_OPT_CKPT_DEADLINE, "DURATION",
     "but copy once the newest durable copy is this old"},
    {"ckpt-interval", 0, true, TIDE_CLI_OPT_CKPT_INTERVAL, "DURATION|off",
     "ask its ranks for a checkpoint once the newest is this old (default: the scheduler's, 10m; off: only "
     "the trainer's own)"},
    {"adaptive-target", 0, false, TIDE_CLI_OPT_ADAPTIVE_TARGET, NULL,
     "MFU target band lower early in the run, higher late"},
    {"no-stealing", 0, false, TIDE_CLI_OPT_NO_STEALING, NULL,
     "its ranks never steal each other's tasks (docs/work-stealing.md)"},
    {"burst", 0, true, TIDE_CLI_OPT_BURST, "[=PCT]",
     "phase-aware burst: lend it up to PCT% (default 20) more workers in its high-load phases"},
    {"restart", 0, true, TIDE_CLI_OPT_RESTART, "POLICY",
     "which failures restart it on other workers: on-loss (default: a lost worker, a hang), on-failure "
     "(also a rank's failing exit) or never"},
    {"max-restarts", 0, true, TIDE_CLI_OPT_MAX_RESTARTS, "N",
     "restarts in a row before it fails (default: the scheduler's, 3)"},
    {"restart-backoff", 0, true, TIDE_CLI_OPT_RESTART_BACKOFF, "DURATION",
     "wait before the second restart in a row, doubling after (default: the scheduler's, 1s)"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t checkpoint_opts[] = {
    {"deadline", 0, true, TIDE_CLI_OPT_DEADLINE, "DURATION",
     "how long the ranks have to save it (default 60s, at most 1d)"},
    {"wait", 'W', false, TIDE_CLI_OPT_WAIT, NULL, "wait for the outcome; exit 0 if a checkpoint completed, else 1"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t scale_opts[] = {
    {"workers", 'n', true, TIDE_CLI_OPT_WORKERS, "N", "the size to have, within the job's min..max workers"},
    {"elastic", 0, false, TIDE_CLI_OPT_ELASTIC, NULL, "no requested size: tide sizes the job within min..max"},
    {"wait", 'W', false, TIDE_CLI_OPT_WAIT, NULL,
     "follow the resize until every new rank runs; exit 1 if it does not"},
    {"timeout", 0, true, TIDE_CLI_OPT_TIMEOUT, "DURATION", "with --wait: give up after DURATION (default 10m)"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t drain_opts[] = {
    {"reason", 0, true, TIDE_CLI_OPT_REASON, "TEXT", "why, for the events (default \"drained\")"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t jobs_opts[] = {
    {"state", 0, true, TIDE_CLI_OPT_STATE, "S,...", "only these states: pending, running, succeeded, failed, cancelled"},
    {"all", 'A', false, TIDE_CLI_OPT_ALL, NULL, "every state (the default; overrides --state)"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t logs_opts[] = {
    {"rank", 'r', true, TIDE_CLI_OPT_RANK, "R", "only rank R (repeatable; default: every rank)"},
    {"follow", 'f', false, TIDE_CLI_OPT_FOLLOW, NULL, "keep streaming until the ranks exit"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t workers_opts[] = {
    {"state", 0, true, TIDE_CLI_OPT_STATE, "S,...", "only these states: ready, busy, suspect, dead"},
    {"all", 'A', false, TIDE_CLI_OPT_ALL, NULL, "also workers that said goodbye and left (state DEPARTED)"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t events_opts[] = {
    {"follow", 'f', false, TIDE_CLI_OPT_FOLLOW, NULL, "keep streaming new events"},
    {"job", 'j', true, TIDE_CLI_OPT_JOB, "ID", "only events of job ID"},
    {"since", 0, true, TIDE_CLI_OPT_SINCE, "SEQ", "only events after sequence number SEQ"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t version_opts[] = {
    {"client", 0, false, TIDE_CLI_OPT_CLIENT, NULL, "only tidectl's version; do not ask the scheduler"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t top_opts[] = {
    {"once", 0, false, TIDE_CLI_OPT_ONCE, NULL, "print one frame and exit"},
    {"interval", 'd', true, TIDE_CLI_OPT_INTERVAL, "DURATION", "time between frames (default 2s)"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t token_opts[] = {
    {"user", 0, true, TIDE_CLI_OPT_USER, "NAME", "create: the identity (default: your login name)"},
    {"role", 0, true, TIDE_CLI_OPT_ROLE, "ROLE", "create: admin, user (default), worker or read-only"},
    {"expires", 0, true, TIDE_CLI_OPT_EXPIRES, "WHEN",
     "create: a DURATION from now (30d, 12h) or a UTC time (2027-01-31T00:00:00Z); default never"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t usage_opts[] = {
    {"user", 0, true, TIDE_CLI_OPT_USER, "NAME", "only this owner's jobs"},
    {"pool", 0, true, TIDE_CLI_OPT_POOL, "NAME", "only jobs of pool NAME ('*': jobs that named no pool)"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t audit_opts[] = {
    {"user", 0, true, TIDE_CLI_OPT_USER, "NAME", "only this identity's calls"},
    {"limit", 0, true, TIDE_CLI_OPT_LIMIT, "N", "the newest N entries, 1 to 1000 (default 100)"},
    {"follow", 'f', false, TIDE_CLI_OPT_FOLLOW, NULL, "keep printing new entries (polls every second)"},
    TIDE_CLI_OPT_END,
};

static const tide_cli_opt_t no_opts[] = {TIDE_CLI_OPT_END};

const tide_cli_command_t tide_cli_commands[] = {
    {"submit", "[OPTIONS] [--] CMD [ARGS...]", "Submit a job",
     "Prints the new job's id (or the Job with -o json). Options end at CMD; put '--' before a\n"
     "command that starts with '-'. A bare DURATION number is seconds (Slurm reads it as minutes).",
     submit_opts, true, tide_cli_cmd_submit},
    {"jobs", "[--state S,...] [-A]", "List jobs", "Lists every job the scheduler keeps, oldest first.",
     jobs_opts, false, tide_cli_cmd_jobs},
    {"queue", "", "List pending jobs in the order they will be considered",
     "POS is the place in the scheduler's order (class, with aging, high to low; first come, first\n"
     "served within a class). CLASS shows LOW->NORMAL for a job that rose by aging. REASON is why the\n"
     "job waits, as the scheduler sees it now.",
     no_opts, false, tide_cli_cmd_queue},
    {"job", "ID", "Show one job in detail", NULL, no_opts, false, tide_cli_cmd_job},
    {"cancel", "ID...", "Cancel jobs", NULL, no_opts, false, tide_cli_cmd_cancel},
    {"checkpoint", "ID [--deadline DURATION] [-W]", "Ask a running job for a checkpoint now",
     "Every rank of the job that uses the trainer SDK saves a checkpoint when its current step ends\n"
     "(docs/trainer-api.md). Prints the request; with --wait, follows it until a checkpoint of every\n"
     "rank completes or the deadline passes. Interrupting the wait leaves the request in force.",
     checkpoint_opts, false, tide_cli_cmd_checkpoint},
    {"scale", "ID --workers N | --elastic [-W [--timeout DURATION]]", "Grow or shrink a job",
     "A running job checkpoints (ranks that use the trainer SDK), stops and starts a new generation of\n"
     "N workers that resumes from that checkpoint (docs/elastic.md); a pending job starts with at most\n"
     "N. N must be within the job's min..max workers. A size that cannot be had now is accepted and\n"
     "waits for capacity ('tidectl job ID' says why). --elastic drops the requested size. With --wait,\n"
     "follows the resize until every rank of the new generation runs; interrupting the wait leaves\n"
     "the resize in force.",
     scale_opts, false, tide_cli_cmd_scale},
    {"logs", "ID [--rank R]... [-f]", "Print a job's output",
     "With several ranks each line is prefixed with \"[rank R] \"; with one rank the bytes are\n"
     "written as the job wrote them.",
     logs_opts, false, tide_cli_cmd_logs},
    {"events", "[-f] [--job ID] [--since SEQ]", "Print scheduler events", NULL, events_opts, false,
     tide_cli_cmd_events},
    {"workers", "[--state S,...] [--all]", "List workers (one per GPU)", NULL, workers_opts, false,
     tide_cli_cmd_workers},
    {"cordon", "WORKER...", "Stop placing new ranks on workers", NULL, no_opts, false, tide_cli_cmd_cordon},
    {"uncordon", "WORKER...", "Allow placing ranks on workers again", NULL, no_opts, false,
     tide_cli_cmd_cordon},
    {"drain", "[--reason TEXT] WORKER", "Move the job off a worker and leave it cordoned",
     "Cordons the worker; the job whose rank runs there moves to a new generation without it (it\n"
     "checkpoints first when it reports through the SDK; a free worker takes its place, or the job\n"
     "shrinks within its min workers, or it waits queued). Follow it with 'tidectl job ID'.",
     drain_opts, false, tide_cli_cmd_drain},
    {"status", "", "Summarise the cluster", NULL, no_opts, false, tide_cli_cmd_status},
    {"top", "[--once] [--interval DURATION]", "Watch MFU, jobs and GPUs live",
     "Redraws in place on a terminal (Ctrl-C ends it); prints one frame after another otherwise.",
     top_opts, false, tide_cli_cmd_top},
    {"usage", "[--user NAME] [--pool NAME]", "Show GPU-hours per user and pool",
     "Every job the scheduler has kept or pruned, running generations up to now (ClusterService.GetUsage).\n"
     "POOL '*' is jobs that named no pool. A user sees their own rows only.",
     usage_opts, false, tide_cli_cmd_usage},
    {"audit", "[--user NAME] [--limit N] [-f]", "Show the scheduler's audit log",
     "The newest entries, oldest first (ClusterService.ListAudit; admin and read-only callers). With\n"
     "--follow, new entries are printed as they come until interrupted.",
     audit_opts, false, tide_cli_cmd_audit},
    {"token", "create [--user NAME] [--role ROLE] [--expires WHEN] | hash", "Make a bearer token for the users file",
     "'create' prints a new random token and the users-file entry with its SHA-256 (the token itself is\n"
     "stored nowhere: hand it over now). 'hash' reads a token from stdin and prints its SHA-256. Neither\n"
     "contacts the scheduler (docs/security.md).",
     token_opts, false, tide_cli_cmd_token},
    {"version", "[--client]", "Print tidectl's and the scheduler's versions", NULL, version_opts, false,
     tide_cli_cmd_version},
    {NULL, NULL, NULL, NULL, NULL, false, NULL},
};

void tide_cli_errorf(tide_cli_t *cli, const char *fmt, ...)
{
    va_list ap;

    fputs("tidectl: ", cli->err);
    va_start(ap, fmt);
    vfprintf(cli->err, fmt, ap);
    va_end(ap);
    fputc('\n', cli->err);
    fflush(cli->err);
}

int tide_cli_usage_error(tide_cli_t *cli, const tide_cli_command_t *cmd, const char *fmt, ...)
{
    va_list ap;

    fputs("tidectl: ", cli->err);
    va_start(ap, fmt);
    vfprintf(cli->err, fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(cli->err, "\nRun 'tidectl %s --help' for usage.\n", cmd->name);
    else
        fputs("\nRun 'tidectl --help' for usage.\n", cli->err);
    fflush(cli->err);
    return TIDE_CLI_EXIT_USAGE;
}

void tide_cli_print_help(const tide_cli_command_t *cmd, FILE *f)
{
    if (!cmd) {
        fputs("tidectl: submit and follow training jobs on a tide cluster.\n\n"
              "Usage: tidectl [GLOBAL OPTIONS] COMMAND [OPTIONS] [ARGS]\n\nCommands:\n",
              f);
        for (const tide_cli_command_t *c = tide_cli_commands; c->name; c++)
            fprintf(f, "  %-11s %s\n", c->name, c->summary);
        fputs("\nGlobal options (also accepted after the command):\n", f);
        tide_cli_opts_help(f, tide_cli_global_opts, help_opts);
        fputs("\nExit status: 0 success, 1 error (or, with submit --wait, a job that failed or was\n"
              "cancelled; with checkpoint --wait, a request that got no checkpoint; with scale --wait, a\n"
              "resize that did not complete), 2 bad usage.\n"
              "Run 'tidectl COMMAND --help' for a command's options.\n",
              f);
        return;
    }
    fprintf(f, "Usage: tidectl %s %s\n\n%s.\n", cmd->name, cmd->synopsis, cmd->summary);
    if (cmd->details)
        fprintf(f, "\n%s\n", cmd->details);
    if (cmd->opts && cmd->opts[0].id) {
        fputs("\nOptions:\n", f);
        tide_cli_opts_help(f, cmd->opts, NULL);
    }
    fputs("\nGlobal options:\n", f);
    tide_cli_opts_help(f, tide_cli_global_opts, help_opts);
}

static int apply_global(tide_cli_t *cli, int id, const char *arg, tide_error_t *err)
{
    switch (id) {
    case TIDE_CLI_OPT_SCHEDULER:
        free(cli->scheduler_opt);
        cli->scheduler_opt = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_TOKEN_FILE:
        free(cli->token_file_opt);
        cli->token_file_opt = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_OUTPUT:
        if (strcmp(arg, "table") == 0) {
            cli->format = TIDE_CLI_FORMAT_TABLE;
        } else if (strcmp(arg, "json") == 0) {
            cli->format = TIDE_CLI_FORMAT_JSON;
        } else {
            tide_errprintf(err, "bad --output '%.40s' (one of table, json)", arg);
            return -1;
        }
        return 0;
    case TIDE_CLI_OPT_UTC:
        cli->utc = true;
        return 0;
    case TIDE_CLI_OPT_TLS_CA:
        free(cli->tls_ca_opt);
        cli->tls_ca_opt = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_TLS_CERT:
        free(cli->tls_cert_opt);
        cli->tls_cert_opt = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_TLS_KEY:
        free(cli->tls_key_opt);
        cli->tls_key_opt = tide_xstrdup(arg);
        return 0;
    case TIDE_CLI_OPT_INSECURE:
        cli->insecure_opt = true;
        return 0;
    }
    return 1; /* not a global option */
}

void tide_cli_args_begin(const tide_cli_command_t *cmd, tide_cli_args_t *a, int argc, char **argv)
{
    tide_cli_args_init(a, argc, argv, 1, cmd->opts, tide_cli_global_opts, help_opts);
    a->stop_at_positional = cmd->stop_at_positional;
}

int tide_cli_next(tide_cli_t *cli, tide_cli_args_t *a, tide_error_t *err)
{
    for (;;) {
        int id = tide_cli_args_next(a, err), rc;

        if (id == TIDE_CLI_OPT_HELP)
            return TIDE_CLI_ARG_HELP;
        if (id < TIDE_CLI_OPT_SCHEDULER)
            return id;
        rc = apply_global(cli, id, a->arg, err);
        if (rc < 0)
            return TIDE_CLI_ARG_ERROR;
        if (rc > 0)
            return id;
    }
}

int tide_cli_arg_outcome(tide_cli_t *cli, const tide_cli_command_t *cmd, int id, const tide_error_t *err)
{
    if (id == TIDE_CLI_ARG_HELP) {
        tide_cli_print_help(cmd, cli->out);
        return TIDE_CLI_EXIT_OK;
    }
    if (id == TIDE_CLI_ARG_ERROR)
        return tide_cli_usage_error(cli, cmd, "%s", err->text);
    return -1;
}

int tide_cli_collect_args(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv, size_t max,
                          const char *what, const char ***args, size_t *n)
{
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    int id, rc;

    *args = NULL;
    *n = 0;
    tide_cli_args_begin(cmd, &a, argc, argv);
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, cmd, id, &err)) >= 0)
            goto fail;
        if (id != TIDE_CLI_ARG_POSITIONAL) {
            rc = tide_cli_usage_error(cli, cmd, "unexpected option '%s'", a.opt_text);
            goto fail;
        }
        if (max && *n == max) {
            rc = tide_cli_usage_error(cli, cmd, "unexpected argument '%s'", a.arg);
            goto fail;
        }
        if (!*a.arg) {
            rc = tide_cli_usage_error(cli, cmd, "empty %s", what);
            goto fail;
        }
        *args = tide_xrealloc(*args, (*n + 1) * sizeof(**args));
        (*args)[(*n)++] = a.arg;
    }
    if (*n == 0) {
        rc = tide_cli_usage_error(cli, cmd, "missing %s", what);
        goto fail;
    }
    return -1;
fail:
    free(*args);
    *args = NULL;
    *n = 0;
    return rc;
}

static const tide_cli_command_t *find_command(const char *name)
{
    for (const tide_cli_command_t *c = tide_cli_commands; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

int tide_cli_main(tide_cli_t *cli, int argc, char **argv)
{
    tide_cli_args_t a;
    tide_error_t err = {{0}};
    const tide_cli_command_t *cmd;
    const char *name = NULL;
    int id, rc;

    tide_cli_args_init(&a, argc, argv, 1, tide_cli_global_opts, help_opts, NULL);
    a.stop_at_positional = true;
    while ((id = tide_cli_next(cli, &a, &err)) != TIDE_CLI_ARG_END) {
        if ((rc = tide_cli_arg_outcome(cli, NULL, id, &err)) >= 0)
            return rc;
        if (id == TIDE_CLI_ARG_POSITIONAL) {
            name = a.arg;
            break;
        }
    }
    if (!name) {
        tide_cli_print_help(NULL, cli->err);
        return TIDE_CLI_EXIT_USAGE;
    }
    if (strcmp(name, "help") == 0) {
        /* "tidectl help [COMMAND]" */
        const char *topic = a.index < argc ? argv[a.index] : NULL;
        cmd = topic ? find_command(topic) : NULL;
        if (topic && !cmd)
            return tide_cli_usage_error(cli, NULL, "unknown command '%s'", topic);
        tide_cli_print_help(cmd, cli->out);
        return TIDE_CLI_EXIT_OK;
    }
    cmd = find_command(name);
    if (!cmd)
        return tide_cli_usage_error(cli, NULL, "unknown command '%s'", name);
    /* The command sees argv from its own name on. */
    return cmd->run(cli, cmd, argc - (a.index - 1), argv + (a.index - 1));
}

void tide_cli_cleanup(tide_cli_t *cli)
{
    free(cli->scheduler_opt);
    free(cli->token_file_opt);
    cli->scheduler_opt = cli->token_file_opt = NULL;
    free(cli->tls_ca_opt);
    free(cli->tls_cert_opt);
    free(cli->tls_key_opt);
    cli->tls_ca_opt = cli->tls_cert_opt = cli->tls_key_opt = NULL;
}

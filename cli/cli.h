/* tidectl's shared context and command table. Everything here runs without a socket except the
 * commands' RPCs, which go through rpc_call.h; tests drive tide_cli_main with their own streams and
 * environment and a fake transport. */
#ifndef TIDE_CLI_H
#define TIDE_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "args.h"
#include "error.h"

struct uv_loop_s;

typedef enum tide_cli_format {
    TIDE_CLI_FORMAT_TABLE = 0,
    TIDE_CLI_FORMAT_JSON = 1,
} tide_cli_format_t;

enum {
    TIDE_CLI_EXIT_OK = 0,
    TIDE_CLI_EXIT_FAILURE = 1, /* an error, or a job that failed or was cancelled */
    TIDE_CLI_EXIT_USAGE = 2,
};

typedef struct tide_cli {
    FILE *out; /* results; borrowed */
    FILE *err; /* "tidectl: ..." lines; borrowed */
    tide_cli_format_t format;
    char *scheduler_opt;  /* --scheduler; owned, freed by tide_cli_cleanup */
    char *token_file_opt; /* --token-file; owned */
    /* The environment, borrowed: main fills these from getenv, tests set them directly. */
    const char *env_scheduler;      /* TIDE_SCHEDULER */
    const char *env_token;          /* TIDE_TOKEN */
    const char *env_token_file;     /* TIDE_TOKEN_FILE */
    /* TLS: --tls-ca/--tls-cert/--tls-key (owned), else TIDE_TLS_CA/_CERT/_KEY (borrowed); --insecure or
     * TIDE_INSECURE=1 allows plaintext to a non-loopback scheduler. */
    char *tls_ca_opt, *tls_cert_opt, *tls_key_opt;
    bool insecure_opt;
    const char *env_tls_ca, *env_tls_cert, *env_tls_key, *env_insecure;
    const char *default_token_path; /* the default data dir's token (token.h); NULL: none */
    const char *cwd;                /* submit's default --workdir; borrowed */
    int64_t (*now_ms)(void);        /* wall clock in Unix ms; tests pin it */
    int64_t call_timeout_ms;        /* deadline of unary calls; 0: 30 s */
    int64_t poll_interval_ms;       /* how often `checkpoint --wait` and `scale --wait` re-read the job;
                                       0: 200 ms */
    bool utc;                       /* print times in UTC instead of local time */
    bool err_tty;                   /* err is a terminal: waits show a progress line there */
} tide_cli_t;

typedef struct tide_cli_command tide_cli_command_t;

struct tide_cli_command {
    const char *name;
    const char *synopsis; /* after "tidectl NAME " */
    const char *summary;  /* one line for the command list */
    const char *details;  /* more help text, or NULL */
    const tide_cli_opt_t *opts;
    bool stop_at_positional; /* positionals after the first belong to it (submit's CMD ARGS) */
    /* Runs the command with argv[0] = its name; returns an exit code. */
    int (*run)(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
};

/* The command table (dispatch.c), ended by an entry with a NULL name. */
extern const tide_cli_command_t tide_cli_commands[];

/* Options accepted before and after the command name: --scheduler, --token-file, -o/--output. */
extern const tide_cli_opt_t tide_cli_global_opts[];

/* What tide_cli_next returns for -h/--help. */
#define TIDE_CLI_ARG_HELP (-3)

/* Parses and runs one tidectl command line (argv[0] is the program). Returns the exit code. */
int tide_cli_main(tide_cli_t *cli, int argc, char **argv);

/* Frees what parsing stored in cli (the *_opt strings). */
void tide_cli_cleanup(tide_cli_t *cli);

/* Starts parsing a command's own arguments (argv[0] is the command name). */
void tide_cli_args_begin(const tide_cli_command_t *cmd, tide_cli_args_t *a, int argc, char **argv);

/* The next option of cmd's table. Global options are applied to cli here and skipped. Returns an
 * option id, TIDE_CLI_ARG_POSITIONAL, TIDE_CLI_ARG_END, TIDE_CLI_ARG_HELP, or TIDE_CLI_ARG_ERROR with
 * err set. */
int tide_cli_next(tide_cli_t *cli, tide_cli_args_t *a, tide_error_t *err);

/* Prints "tidectl: MESSAGE" on cli->err. */
void tide_cli_errorf(tide_cli_t *cli, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "tidectl: MESSAGE" and the hint "Run 'tidectl CMD --help' for usage." on cli->err;
 * returns TIDE_CLI_EXIT_USAGE. cmd NULL: the hint names 'tidectl --help'. */
int tide_cli_usage_error(tide_cli_t *cli, const tide_cli_command_t *cmd, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes cmd's help (usage, summary, options) to f; cmd NULL: the program's help. */
void tide_cli_print_help(const tide_cli_command_t *cmd, FILE *f);

/* Exit code for the common endings of argument parsing: help printed (0) or a usage error (2).
 * Returns -1 for anything else (the caller goes on). */
int tide_cli_arg_outcome(tide_cli_t *cli, const tide_cli_command_t *cmd, int id, const tide_error_t *err);

/* For commands whose arguments are only names (job ID, WORKER...): collects 1..max positionals (max
 * 0: any number) into *args (caller frees the array; the strings are argv's). Returns -1 to go on, or
 * the exit code after help or a usage error (then *args is NULL). */
int tide_cli_collect_args(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv, size_t max,
                          const char *what, const char ***args, size_t *n);

/* Commands (one file per group). */
int tide_cli_cmd_submit(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_jobs(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_queue(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_job(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_cancel(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_checkpoint(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_scale(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_logs(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_events(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_workers(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_cordon(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_drain(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_status(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_top(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_version(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
/* Identities, usage and the audit log (cmd_security.c, docs/security.md): `token create|hash` (no network),
 * `usage` (ClusterService.GetUsage), `audit` (ClusterService.ListAudit). Return an exit code. */
int tide_cli_cmd_token(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_usage(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);
int tide_cli_cmd_audit(tide_cli_t *cli, const tide_cli_command_t *cmd, int argc, char **argv);

/* Option ids shared by several commands' tables. */
enum {
    TIDE_CLI_OPT_STATE = 1,
    TIDE_CLI_OPT_ALL,
    TIDE_CLI_OPT_FOLLOW,
    TIDE_CLI_OPT_RANK,
    TIDE_CLI_OPT_JOB,
    TIDE_CLI_OPT_SINCE,
    TIDE_CLI_OPT_CLIENT,
    /* submit */
    TIDE_CLI_OPT_NAME,
    TIDE_CLI_OPT_WORKERS,
    TIDE_CLI_OPT_MIN,
    TIDE_CLI_OPT_MAX,
    TIDE_CLI_OPT_PRIORITY,
    TIDE_CLI_OPT_ENV,
    TIDE_CLI_OPT_WORKDIR,
    TIDE_CLI_OPT_TIME,
    TIDE_CLI_OPT_WAIT,
    TIDE_CLI_OPT_FILE,
    TIDE_CLI_OPT_LAUNCHER,
    TIDE_CLI_OPT_POOL,
    TIDE_CLI_OPT_MEMORY_PER_RANK,
    TIDE_CLI_OPT_TOPOLOGY,
    TIDE_CLI_OPT_DEVICE,
    TIDE_CLI_OPT_CKPT_MFU_THRESHOLD,
    TIDE_CLI_OPT_CKPT_DEADLINE,
    TIDE_CLI_OPT_CKPT_INTERVAL,
    TIDE_CLI_OPT_ADAPTIVE_TARGET,
    TIDE_CLI_OPT_NO_STEALING,
    TIDE_CLI_OPT_BURST,
    TIDE_CLI_OPT_RESTART,
    TIDE_CLI_OPT_MAX_RESTARTS,
    TIDE_CLI_OPT_RESTART_BACKOFF,
    /* drain */
    TIDE_CLI_OPT_REASON,
    /* checkpoint */
    TIDE_CLI_OPT_DEADLINE,
    /* scale */
    TIDE_CLI_OPT_ELASTIC,
    TIDE_CLI_OPT_TIMEOUT,
    /* top */
    TIDE_CLI_OPT_ONCE,
    TIDE_CLI_OPT_INTERVAL,
    /* token, usage, audit */
    TIDE_CLI_OPT_USER,
    TIDE_CLI_OPT_ROLE,
    TIDE_CLI_OPT_EXPIRES,
    TIDE_CLI_OPT_LIMIT,
    /* global, and help */
    TIDE_CLI_OPT_SCHEDULER = 100,
    TIDE_CLI_OPT_TOKEN_FILE,
    TIDE_CLI_OPT_OUTPUT,
    TIDE_CLI_OPT_UTC,
    TIDE_CLI_OPT_HELP,
    /* global: TLS (docs/security.md) */
    TIDE_CLI_OPT_TLS_CA = 110,
    TIDE_CLI_OPT_TLS_CERT,
    TIDE_CLI_OPT_TLS_KEY,
    TIDE_CLI_OPT_INSECURE,
};

#endif

/* Command-line option parsing for tidectl: a small re-entrant getopt_long (no global state, so every
 * subcommand and every test parses from scratch), the value parsers the commands share, and --help
 * text generated from the same option tables. */
#ifndef TIDE_CLI_ARGS_H
#define TIDE_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

#include "error.h"

typedef struct tide_cli_opt {
    const char *long_name; /* "name" for --name; NULL: none */
    char short_name;       /* 'n' for -n; 0: none */
    bool has_arg;
    int id;                /* > 0; what tide_cli_args_next returns for this option */
    const char *arg_name;  /* for help: "N"; "[=N]": the value is optional (long form only): taken from
                              --name=VALUE or from the next word when it starts with a digit, else a->arg
                              is NULL */
    const char *help;      /* one line; NULL hides the option from help */
} tide_cli_opt_t;

/* Option tables end with an entry whose id is 0. */
#define TIDE_CLI_OPT_END {NULL, 0, false, 0, NULL, NULL}

enum {
    TIDE_CLI_ARG_END = 0,         /* nothing left */
    TIDE_CLI_ARG_POSITIONAL = -1, /* a->arg is a positional argument */
    TIDE_CLI_ARG_ERROR = -2,      /* err says what is wrong */
};

typedef struct tide_cli_args {
    int argc;
    char **argv;              /* borrowed */
    const tide_cli_opt_t *tables[3]; /* searched in order; NULL-terminated */
    bool stop_at_positional;  /* the first positional ends option parsing (submit's CMD ARGS...) */
    /* state */
    int index;                /* next argv element */
    const char *bundle;       /* rest of a "-abc" bundle being read, or NULL */
    bool only_positional;     /* after "--" (or the first positional in stop mode) */
    const char *arg;          /* the option's argument or the positional, borrowed from argv */
    char opt_text[64];        /* the option as typed, for messages: "--name", "-o" */
} tide_cli_args_t;

/* Prepares parsing of argv[first..argc) with up to three option tables (NULLs skipped). */
void tide_cli_args_init(tide_cli_args_t *a, int argc, char **argv, int first, const tide_cli_opt_t *t1,
                        const tide_cli_opt_t *t2, const tide_cli_opt_t *t3);

/* Next option id, TIDE_CLI_ARG_POSITIONAL, TIDE_CLI_ARG_END, or TIDE_CLI_ARG_ERROR with err set
 * ("unknown option '--foo'", "option '--name' needs a value", "option '--all' takes no value").
 * Accepts --long, --long=V, --long V, -s, -sV, -s V, -abc bundles, and "--" to end options. */
int tide_cli_args_next(tide_cli_args_t *a, tide_error_t *err);

/* Parses a decimal int in [min, max]; returns 0 or -EINVAL / -ERANGE. */
int tide_cli_parse_int(const char *s, int64_t min, int64_t max, int64_t *out);

/* Parses a size in bytes: a number (decimals allowed: "1.5G") with an optional unit, case-insensitive:
 * K, M, G, T, P or KiB..PiB (powers of 1024, as Slurm's --mem), KB..PB (powers of 1000), B; no unit:
 * bytes ("80GiB", "80G", "512MiB", "80GB", "4096"). Returns 0, -EINVAL when malformed, -ERANGE above
 * 2^60. */
int tide_cli_parse_size(const char *s, uint64_t *out);

/* Parses a fraction in [0, 1]: "0.3" or a percentage "30%". Returns 0, -EINVAL when malformed,
 * -ERANGE outside [0, 1]. */
int tide_cli_parse_fraction(const char *s, double *out);

/* Parses "K=V" with a non-empty K without '='; *key is a new string (caller frees), *value borrowed
 * from s. Returns 0 or -EINVAL. */
int tide_cli_parse_kv(const char *s, char **key, const char **value);

/* Splits a comma-separated list of enum names of desc into values, matching
 * case-insensitively with or without the enum's PREFIX_ ("running", "JOB_STATE_RUNNING"). Appends to
 * *vals and *n (caller frees *vals). Returns 0, or -EINVAL with err naming the bad word and the choices. */
int tide_cli_parse_enum_list(const char *s, const ProtobufCEnumDescriptor *desc, const char *prefix, const char *what,
                             int **vals, size_t *n, tide_error_t *err);

/* Writes "Options:" help lines for the tables (each NULL-terminated, id 0 ends a table). */
void tide_cli_opts_help(FILE *f, const tide_cli_opt_t *t1, const tide_cli_opt_t *t2);

#endif

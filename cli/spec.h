/* `tidectl submit`'s options and the JobSpec they build. Pure: the working directory and an optional
 * base spec (from --file) are passed in. */
#ifndef TIDE_CLI_SPEC_H
#define TIDE_CLI_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tide/v1/types.pb-c.h"

typedef struct tide_cli_submit {
    char *name;    /* owned; NULL: from the spec file or the command's basename */
    int32_t workers, min, max;
    bool has_workers, has_min, has_max;
    int priority;  /* Tide__V1__Priority; 0: unset */
    int launcher;  /* Tide__V1__Launcher; 0: unset (the spec file's, else the scheduler's default, env) */
    char **env;    /* owned "K=V" strings, in order (a later K wins) */
    size_t n_env;
    char *workdir; /* owned; NULL: the spec file's, else the current directory */
    int64_t time_limit;
    bool has_time;
    bool wait;
    char *file;    /* --file: a JobSpec in JSON; owned */
    /* Policy (docs/policies.md); unset ones keep the spec file's value, else the scheduler's default. */
    char *pool;    /* owned; NULL: unset */
    uint64_t memory_per_rank;
    bool has_memory;
    int topology;  /* Tide__V1__Topology */
    bool has_topology;
    char *device;  /* owned; NULL: unset */
    double ckpt_mfu_threshold; /* (0, 1] */
    int64_t ckpt_deadline;     /* seconds, > 0 */
    int64_t ckpt_interval;     /* --ckpt-interval: seconds >= 10, -1: off, 0: unset */
    bool adaptive_target;
    bool no_stealing;
    int32_t burst_percent; /* --burst: 1..100; 0: unset */
    int restart_policy;    /* --restart: Tide__V1__RestartPolicy; 0: unset */
    int32_t max_restarts;  /* --max-restarts: 1..1000; 0: unset */
    int64_t restart_backoff_ms; /* --restart-backoff; 0: unset */
    char **command; /* borrowed from argv */
    size_t n_command;
} tide_cli_submit_t;

/* Applies one submit option (ids from cli.h) with its argument. Returns 0, or -EINVAL with err naming
 * the option and the bad value ("bad --time '5x': ...", "bad --launcher 'ssh' (one of env, mpi)",
 * "bad --topology 'row' (one of node, rack, switch, any)"). */
int tide_cli_submit_apply(tide_cli_submit_t *s, int id, const char *arg, tide_error_t *err);

/* Builds the spec: base (from --file, may be NULL; borrowed) overridden by the options, workdir
 * defaulting to cwd, name to the basename of the command. Checks what a user can get wrong here (no
 * command, --workers with --min/--max, min > max, workers < 1). Returns 0 with *out (caller frees with
 * protobuf_c_message_free_unpacked(&(*out)->base, NULL)), or -EINVAL with err. */
int tide_cli_submit_build(const tide_cli_submit_t *s, const Tide__V1__JobSpec *base, const char *cwd,
                          Tide__V1__JobSpec **out, tide_error_t *err);

/* Topology names for --topology: "any", "node", "rack", "switch" (case-insensitive) -> *out
 * (Tide__V1__Topology). Returns 0 or -EINVAL. */
int tide_cli_topology_parse(const char *s, int *out);

/* Frees what tide_cli_submit_apply stored; s itself is the caller's. */
void tide_cli_submit_clear(tide_cli_submit_t *s);

#endif

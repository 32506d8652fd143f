/* Which Unix account a rank runs as (LaunchRank.run_as; docs/worker.md, "Running ranks as their
 * user"): the refusal rules as a pure function over an account lookup, so they are tested with a
 * fake one, and the real lookup (getpwnam_r + getgrouplist). Thread-safe; no global state. */
#ifndef TIDE_WORKER_RUN_AS_H
#define TIDE_WORKER_RUN_AS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "error.h"

/* An account as the lookup found it. Strings and groups are owned (free with
 * tide_run_as_account_clear). */
typedef struct tide_run_as_account {
    char *name;
    uid_t uid;
    gid_t gid;     /* primary group */
    char *home;    /* the passwd entry's home directory ("" when it has none) */
    gid_t *groups; /* every group of the account, the primary one included; n_groups entries */
    size_t n_groups;
} tide_run_as_account_t;

/* Looks up account `name`: fills *out (owned by the caller) and returns 0, -ENOENT when there is
 * no such account, or another -errno when the lookup itself failed (then *out is untouched). */
typedef int (*tide_run_as_lookup_fn)(void *ud, const char *name, tide_run_as_account_t *out);

/* The decision for one rank. */
typedef struct tide_run_as {
    bool do_switch;                /* the rank switches to `account` (the worker runs as root) */
    tide_run_as_account_t account; /* valid when do_switch */
} tide_run_as_t;

/* Decides who a rank with LaunchRank.run_as `run_as` runs as, for a worker with effective uid
 * `euid` on node `node` (for messages) started with (allow_root) or without --allow-root-jobs:
 *   root worker:     "" or a uid-0 account -> refused unless allow_root ("" then runs as root
 *                    unswitched); any other known account -> switch to it;
 *   non-root worker: "" or an account with uid == euid -> runs as the worker, no switch; any other
 *                    account -> refused;
 *   an unknown account -> refused ("user 'x' does not exist on node1"); a bad name -> refused.
 * Returns 0 with *out filled (free with tide_run_as_clear), or -EPERM (a rule), -ENOENT (unknown
 * account), -EINVAL (bad name) or the lookup's -errno, with the reason in err and *out zeroed. */
int tide_run_as_decide(const char *run_as, uid_t euid, bool allow_root, const char *node,
                       tide_run_as_lookup_fn lookup, void *lookup_ud, tide_run_as_t *out,
                       tide_error_t *err);
void tide_run_as_clear(tide_run_as_t *ra);
void tide_run_as_account_clear(tide_run_as_account_t *a);

/* The system's lookup (tide_run_as_lookup_fn; ud unused): getpwnam_r, then getgrouplist for the
 * supplementary groups. */
int tide_run_as_lookup_system(void *ud, const char *name, tide_run_as_account_t *out);

#endif

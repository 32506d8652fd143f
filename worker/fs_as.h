/* File-system calls as a rank's account, on the calling thread (docs/worker.md, "Running ranks as
 * their user"). A root worker that reads or writes what belongs to a rank running as another
 * account (its checkpoint files in the account-owned HOT/JOB, a path the rank reported) does it
 * with that account's file-system identity: between tide_fs_as_enter and tide_fs_as_leave the
 * thread's fsuid and fsgid are the account's and its supplementary groups only the account's gid,
 * so a link, a hard link or a swapped directory the account planted reaches only what the account
 * itself could reach. Only the calling thread changes (raw syscalls: glibc's setgroups would change
 * every thread), so a threadpool job enters and leaves within itself; the worker's other threads
 * keep root's identity. */
#ifndef TIDE_WORKER_FS_AS_H
#define TIDE_WORKER_FS_AS_H

#include <stdbool.h>
#include <sys/types.h>

/* The Unix account a rank runs as when it is not the worker's (LaunchRank.run_as; run_as.h). */
typedef struct tide_fs_account {
    uid_t uid;
    gid_t gid;
} tide_fs_account_t;

/* What tide_fs_as_enter changed, for tide_fs_as_leave. */
typedef struct tide_fs_as_saved {
    bool switched;
    uid_t fsuid;
    gid_t fsgid;
    int n_groups;
    gid_t *groups;
} tide_fs_as_saved_t;

/* Makes the calling thread's file-system calls run as `as` until tide_fs_as_leave. Nothing changes
 * (0) when as is NULL, names root, or the process is not root (a non-root worker runs ranks only as
 * itself). Returns 0, or -errno (-EPERM without CAP_SETUID/CAP_SETGID) with the thread unchanged.
 * Always pair with tide_fs_as_leave, also after a failure. */
int tide_fs_as_enter(const tide_fs_account_t *as, tide_fs_as_saved_t *saved);
/* Gives the thread its own identity back. A thread that cannot get it back would go on as the
 * account (or as root with the account's groups): the process aborts instead. */
void tide_fs_as_leave(tide_fs_as_saved_t *saved);

#endif

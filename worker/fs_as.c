/* File-system calls as a rank's account (fs_as.h). The kernel keeps credentials per thread;
 * setfsuid, setfsgid and setgroups are called as raw syscalls so that only this thread changes.
 * Dropping the fsuid from 0 clears the thread's file-system capabilities (CAP_DAC_OVERRIDE,
 * CAP_CHOWN, ...) and taking 0 back restores them; CAP_SETUID and CAP_SETGID are not file-system
 * capabilities and stay, which is what lets the thread leave. */
#include "fs_as.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xmalloc.h"

/* setfsuid and setfsgid always answer the previous value; (id_t)-1 is no id, so it only asks. */
static uid_t cur_fsuid(void)
{
    return (uid_t)syscall(SYS_setfsuid, (uid_t)-1);
}

static gid_t cur_fsgid(void)
{
    return (gid_t)syscall(SYS_setfsgid, (gid_t)-1);
}

/* Puts the thread's saved identity back (the fsuid too when uid_too); a thread that cannot get it
 * back would go on as the account, or as root with the account's groups: the process aborts. */
static void restore(const tide_fs_as_saved_t *s, bool uid_too)
{
    bool bad = false;

    if (uid_too) {
        (void)syscall(SYS_setfsuid, s->fsuid);
        bad |= cur_fsuid() != s->fsuid;
    }
    (void)syscall(SYS_setfsgid, s->fsgid);
    bad |= cur_fsgid() != s->fsgid;
    bad |= syscall(SYS_setgroups, (size_t)s->n_groups, s->groups) != 0;
    if (bad) {
        fprintf(stderr,
                "tide-worker: a thread cannot take its own file-system identity back (uid %u): "
                "aborting\n",
                (unsigned)s->fsuid);
        abort();
    }
}

static int fail(tide_fs_as_saved_t *saved, int rc)
{
    free(saved->groups);
    saved->groups = NULL;
    return rc;
}

int tide_fs_as_enter(const tide_fs_account_t *as, tide_fs_as_saved_t *saved)
{
    int n;

    memset(saved, 0, sizeof(*saved));
    if (!as || as->uid == 0 || geteuid() != 0)
        return 0;
    saved->fsuid = cur_fsuid();
    saved->fsgid = cur_fsgid();
    n = getgroups(0, NULL);
    if (n < 0)
        return -errno;
    saved->groups = tide_xcalloc((size_t)n + 1, sizeof(gid_t));
    n = getgroups(n, saved->groups);
    if (n < 0)
        return fail(saved, -errno);
    saved->n_groups = n;
    if (syscall(SYS_setgroups, (size_t)1, &as->gid) != 0)
        return fail(saved, -errno);
    (void)syscall(SYS_setfsgid, as->gid);
    if (cur_fsgid() != as->gid) {
        restore(saved, false);
        return fail(saved, -EPERM);
    }
    (void)syscall(SYS_setfsuid, as->uid);
    if (cur_fsuid() != as->uid) {
        restore(saved, true);
        return fail(saved, -EPERM);
    }
    saved->switched = true;
    return 0;
}

void tide_fs_as_leave(tide_fs_as_saved_t *saved)
{
    if (saved->switched)
        restore(saved, true);
    free(saved->groups);
    memset(saved, 0, sizeof(*saved));
}

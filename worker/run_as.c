/* The run-as decision for a rank (run_as.h): LaunchRank.run_as, the worker's euid and
 * --allow-root-jobs in, "switch to this account" or a refusal out. Invariant: a worker running as
 * root never lets a rank keep root unless allow_root, and a non-root worker never claims to run a
 * rank as anyone but itself; a decision that is not 0 leaves nothing to free. */
#include "run_as.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xmalloc.h"

#define NAME_MAX_LEN 255

void tide_run_as_account_clear(tide_run_as_account_t *a)
{
    if (!a)
        return;
    free(a->name);
    free(a->home);
    free(a->groups);
    memset(a, 0, sizeof(*a));
}

void tide_run_as_clear(tide_run_as_t *ra)
{
    if (!ra)
        return;
    tide_run_as_account_clear(&ra->account);
    ra->do_switch = false;
}

/* A name that can be an account and is safe to print: 1-255 bytes, no control characters, no '/'
 * or ':' (passwd's separator), not starting with '-'. */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > NAME_MAX_LEN || s[0] == '-')
        return false;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == '/' || *s == ':')
            return false;
    return true;
}

int tide_run_as_decide(const char *run_as, uid_t euid, bool allow_root, const char *node,
                       tide_run_as_lookup_fn lookup, void *lookup_ud, tide_run_as_t *out,
                       tide_error_t *err)
{
    tide_run_as_account_t acc;
    int rc;

    memset(out, 0, sizeof(*out));
    memset(&acc, 0, sizeof(acc));
    if (!run_as)
        run_as = "";
    if (!node || !node[0])
        node = "this node";
    if (run_as[0] == '\0') {
        /* The worker's own account. */
        if (euid == 0 && !allow_root) {
            tide_errprintf(err,
                           "run_as is empty: the rank would run as root, and the worker runs as "
                           "root without --allow-root-jobs");
            return -EPERM;
        }
        return 0;
    }
    if (!name_ok(run_as)) {
        tide_errprintf(err, "run_as '%.64s' is not a valid user name", run_as);
        return -EINVAL;
    }
    rc = lookup(lookup_ud, run_as, &acc);
    if (rc == -ENOENT) {
        tide_errprintf(err, "user '%s' does not exist on %s", run_as, node);
        return rc;
    }
    if (rc < 0) {
        tide_errprintf(err, "user '%s': lookup failed on %s: %s", run_as, node, strerror(-rc));
        return rc;
    }
    if (euid != 0) {
        if (acc.uid != euid) {
            tide_errprintf(err,
                           "user '%s' (uid %u) is not the worker's own account (uid %u): a worker "
                           "that does not run as root runs ranks only as itself",
                           run_as, (unsigned)acc.uid, (unsigned)euid);
            rc = -EPERM;
            goto fail;
        }
        tide_run_as_account_clear(&acc); /* itself: nothing to switch */
        return 0;
    }
    if (acc.uid == 0 && !allow_root) {
        tide_errprintf(err,
                       "user '%s' has uid 0: the rank would run as root, and the worker runs as "
                       "root without --allow-root-jobs",
                       run_as);
        rc = -EPERM;
        goto fail;
    }
    out->do_switch = true;
    out->account = acc;
    return 0;
fail:
    tide_run_as_account_clear(&acc);
    return rc;
}

int tide_run_as_lookup_system(void *ud, const char *name, tide_run_as_account_t *out)
{
    struct passwd pw, *res = NULL;
    long size = sysconf(_SC_GETPW_R_SIZE_MAX);
    char *buf;
    gid_t *groups = NULL;
    int n = 16, rc;

    (void)ud;
    if (size < 1024)
        size = 1024;
    for (;;) {
        buf = tide_xmalloc((size_t)size);
        rc = getpwnam_r(name, &pw, buf, (size_t)size, &res);
        if (rc != ERANGE || size > (1 << 20))
            break;
        free(buf);
        size *= 2;
    }
    if (rc != 0 || !res) {
        free(buf);
        /* getpwnam_r reports "no such user" as 0 with no result (or as ENOENT and friends on some
         * NSS modules). */
        return rc == 0 || rc == ENOENT || rc == ESRCH || rc == EBADF || rc == EPERM ? -ENOENT
                                                                                    : -rc;
    }
    for (;;) {
        int got = n;
        groups = tide_xrealloc(groups, (size_t)n * sizeof(gid_t));
        if (getgrouplist(name, pw.pw_gid, groups, &got) >= 0) {
            n = got;
            break;
        }
        if (got <= n) /* cannot grow: a failure, not a short buffer */
            got = n * 2;
        if (got > 65536) {
            free(groups);
            free(buf);
            return -E2BIG;
        }
        n = got;
    }
    memset(out, 0, sizeof(*out));
    out->name = tide_xstrdup(pw.pw_name);
    out->uid = pw.pw_uid;
    out->gid = pw.pw_gid;
    out->home = tide_xstrdup(pw.pw_dir ? pw.pw_dir : "");
    out->groups = groups;
    out->n_groups = (size_t)n;
    free(buf);
    return 0;
}

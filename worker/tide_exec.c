/* tide-exec: the exec helper between tide-worker and a rank, so ranks die with their worker. The
 * worker starts it as the leader of a new session/process group; it forks the command into that
 * group and waits. Invariants: if the worker (its parent) dies, the whole group is SIGKILLed
 * (parent-death signal, plus a getppid() check for a parent that died before the signal was armed);
 * otherwise it forwards nothing, ignores the signals sent to its group (the command gets them
 * directly) and exits with the command's wait status, re-raising a terminating signal.
 *
 *   tide-exec --parent PID [--status-fd FD] [--uid U --gid G --groups G1,G2,... --user NAME
 *             --home DIR --env-fd FD [--chdir DIR]] -- COMMAND [ARG...]
 *
 * The status fd (inherited from the worker) gets one line once the command has been exec'd: "ok",
 * or "err spawn COMMAND: REASON" when it could not be (then the exit status is 127).
 * With --uid the command runs as that account (docs/worker.md, "Running ranks as their user"): the
 * helper stays as it is (root: it must kill the group and keep its parent-death signal, which a
 * change of credentials would clear); the forked command does setgid, setgroups, setuid, checks that
 * root cannot be regained, takes its environment from --env-fd (NUL-separated K=V, so that nothing
 * of the job's environment, LD_PRELOAD included, ever reaches a root process) with HOME, USER and
 * LOGNAME set to the account's, enters --chdir as that account, then execs. Any failure is an
 * "err" report ("err run as alice: setuid: ...", "err workdir /x: permission denied"), never a
 * command that runs with the helper's credentials. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Signals the helper holds blocked so that its group's SIGTERM/SIGINT/... reach only the command.
 */
static const int held[] = {SIGCHLD, SIGTERM, SIGINT,  SIGHUP,  SIGQUIT, SIGUSR1,
                           SIGUSR2, SIGPIPE, SIGALRM, SIGTSTP, SIGTTIN, SIGTTOU};

static int death_signal(void)
{
    return SIGRTMIN +
           3; /* sent by the kernel only, so it cannot be confused with a user's signal */
}

static void usage(void)
{
    fprintf(stderr, "usage: tide-exec --parent PID [--status-fd FD] [--uid U --gid G --groups "
                    "G1,... --user NAME --home DIR --env-fd FD [--chdir DIR]] -- COMMAND [ARG...]\n");
    exit(2);
}

static void report(int fd, const char *line)
{
    size_t len = strlen(line), off = 0;

    if (fd < 0)
        return;
    while (off < len) {
        ssize_t n = write(fd, line + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
}

/* "No such file or directory" -> "no such file or directory", as libuv and the worker word it. */
static void lower_first(char *s)
{
    if (s[0] >= 'A' && s[0] <= 'Z')
        s[0] = (char)(s[0] - 'A' + 'a');
}

static void exit_like(int status)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit nocore = {0, 0};
        sigset_t one;

        /* Die of the same signal so the worker sees the same wait status; no core of our own. */
        setrlimit(RLIMIT_CORE, &nocore);
        signal(sig, SIG_DFL);
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
        _exit(128 + sig);
    }
    exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

/* Who the command runs as (--uid and friends); uid_given false: the helper's own credentials. */
typedef struct account {
    bool uid_given, gid_given;
    uid_t uid;
    gid_t gid;
    gid_t *groups;
    size_t n_groups;
    bool groups_given;
    const char *user, *home, *chdir_to;
    int env_fd;
    char **env; /* the command's environment, from env_fd */
} account_t;

/* Where the command's start failed (sent with errno over the exec pipe). */
enum stage { STAGE_EXEC, STAGE_SETGID, STAGE_SETGROUPS, STAGE_SETUID, STAGE_PRIVILEGED, STAGE_CHDIR };

typedef struct child_error {
    int stage;
    int err;
} child_error_t;

static bool parse_id(const char *s, unsigned long *out)
{
    char *end;

    errno = 0;
    *out = strtoul(s, &end, 10);
    return s[0] >= '0' && s[0] <= '9' && !*end && !errno && *out < 0xffffffffUL;
}

/* "G1,G2,..." (at least one). */
static bool parse_groups(const char *s, account_t *a)
{
    size_t n = 1;
    const char *p;

    for (p = s; *p; p++)
        n += *p == ',';
    if (n > 65536)
        return false;
    a->groups = calloc(n, sizeof(gid_t));
    if (!a->groups)
        return false;
    for (p = s; a->n_groups < n;) {
        char num[24];
        size_t len = strcspn(p, ",");
        unsigned long v;

        if (len == 0 || len >= sizeof(num))
            return false;
        memcpy(num, p, len);
        num[len] = '\0';
        if (!parse_id(num, &v))
            return false;
        a->groups[a->n_groups++] = (gid_t)v;
        p += len + (p[len] == ',');
    }
    return true;
}

/* Replaces (or adds) NAME=value in env (a NULL-terminated array with room for one more). */
static int env_put(char ***env, size_t *n, const char *name, const char *value)
{
    size_t nl = strlen(name);
    char *kv = malloc(nl + strlen(value) + 2);

    if (!kv)
        return -1;
    sprintf(kv, "%s=%s", name, value);
    for (size_t i = 0; i < *n; i++) {
        if (strncmp((*env)[i], name, nl) == 0 && (*env)[i][nl] == '=') {
            (*env)[i] = kv; /* the old string lives in the read buffer */
            return 0;
        }
    }
    {
        char **grown = realloc(*env, (*n + 2) * sizeof(char *));
        if (!grown) {
            free(kv);
            return -1;
        }
        *env = grown;
    }
    (*env)[(*n)++] = kv;
    (*env)[*n] = NULL;
    return 0;
}

#define ENV_BYTES_MAX (64u << 20)

/* Reads the NUL-separated environment from a->env_fd into a->env, then sets HOME, USER and LOGNAME
 * to the account's. Returns 0 or -1 with errno. */
static int read_env(account_t *a)
{
    size_t cap = 65536, len = 0, n = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;

    if (!buf)
        return -1;
    for (;;) {
        if (len == cap) {
            char *grown;
            if (cap >= ENV_BYTES_MAX) {
                errno = E2BIG;
                return -1;
            }
            cap *= 2;
            grown = realloc(buf, cap + 1);
            if (!grown)
                return -1;
            buf = grown;
        }
        r = read(a->env_fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(a->env_fd);
    buf[len] = '\0';
    a->env = calloc(1, sizeof(char *));
    if (!a->env)
        return -1;
    for (size_t off = 0; off < len; off += strlen(buf + off) + 1) {
        char **grown;
        if (!strchr(buf + off, '=') || buf[off] == '=')
            continue;
        grown = realloc(a->env, (n + 2) * sizeof(char *));
        if (!grown)
            return -1;
        a->env = grown;
        a->env[n++] = buf + off;
        a->env[n] = NULL;
    }
    if (env_put(&a->env, &n, "HOME", a->home) < 0 || env_put(&a->env, &n, "USER", a->user) < 0 ||
        env_put(&a->env, &n, "LOGNAME", a->user) < 0)
        return -1;
    return 0;
}

/* In the forked command: become the account. Returns 0, or -1 with errno and *stage set. */
static int become(const account_t *a, int *stage)
{
    if (!a->uid_given)
        return 0;
    *stage = STAGE_SETGID;
    if (setgid(a->gid) < 0)
        return -1;
    *stage = STAGE_SETGROUPS;
    if (setgroups(a->n_groups, a->groups) < 0)
        return -1;
    *stage = STAGE_SETUID;
    if (setuid(a->uid) < 0)
        return -1;
    /* Never a command that kept, or could take back, more than the account has. */
    *stage = STAGE_PRIVILEGED;
    if (getuid() != a->uid || geteuid() != a->uid || getgid() != a->gid || getegid() != a->gid) {
        errno = EPERM;
        return -1;
    }
    if (a->uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
        errno = EPERM;
        return -1;
    }
    environ = a->env; /* execvp searches the command's PATH, not the helper's */
    *stage = STAGE_CHDIR;
    if (a->chdir_to && chdir(a->chdir_to) < 0)
        return -1;
    *stage = STAGE_EXEC;
    return 0;
}

int main(int argc, char **argv)
{
    pid_t parent = 0, child;
    int status_fd = -1, ep[2], cmd_i = -1, status = 0;
    child_error_t ce = {STAGE_EXEC, 0};
    account_t acc;
    sigset_t set, waitset;
    char line[512];
    ssize_t n;

    memset(&acc, 0, sizeof(acc));
    acc.env_fd = -1;
    for (int i = 1; i < argc; i++) {
        unsigned long v;
        if (strcmp(argv[i], "--") == 0) {
            cmd_i = i + 1;
            break;
        } else if (strcmp(argv[i], "--parent") == 0 && i + 1 < argc) {
            parent = (pid_t)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--status-fd") == 0 && i + 1 < argc) {
            status_fd = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--uid") == 0 && i + 1 < argc && parse_id(argv[i + 1], &v)) {
            acc.uid = (uid_t)v;
            acc.uid_given = true;
            i++;
        } else if (strcmp(argv[i], "--gid") == 0 && i + 1 < argc && parse_id(argv[i + 1], &v)) {
            acc.gid = (gid_t)v;
            acc.gid_given = true;
            i++;
        } else if (strcmp(argv[i], "--groups") == 0 && i + 1 < argc && !acc.groups_given &&
                   parse_groups(argv[i + 1], &acc)) {
            acc.groups_given = true;
            i++;
        } else if (strcmp(argv[i], "--user") == 0 && i + 1 < argc && argv[i + 1][0]) {
            acc.user = argv[++i];
        } else if (strcmp(argv[i], "--home") == 0 && i + 1 < argc) {
            acc.home = argv[++i];
        } else if (strcmp(argv[i], "--chdir") == 0 && i + 1 < argc && argv[i + 1][0] == '/') {
            acc.chdir_to = argv[++i];
        } else if (strcmp(argv[i], "--env-fd") == 0 && i + 1 < argc) {
            acc.env_fd = (int)strtol(argv[++i], NULL, 10);
        } else {
            usage();
        }
    }
    if (parent <= 0 || cmd_i < 0 || cmd_i >= argc)
        usage();
    /* All of the account or none of it. */
    if (acc.uid_given != acc.gid_given || acc.uid_given != acc.groups_given ||
        acc.uid_given != (acc.user != NULL) || acc.uid_given != (acc.home != NULL) ||
        acc.uid_given != (acc.env_fd >= 0) || (acc.chdir_to && !acc.uid_given))
        usage();
    if (status_fd >= 0 && fcntl(status_fd, F_SETFD, FD_CLOEXEC) < 0)
        status_fd = -1;

    /* Hold the group's signals and SIGCHLD (taken with sigwaitinfo); SIGCHLD must not be SIG_IGN or
     * the kernel would reap the command for us. */
    signal(SIGCHLD, SIG_DFL);
    sigemptyset(&set);
    for (size_t i = 0; i < sizeof(held) / sizeof(held[0]); i++)
        sigaddset(&set, held[i]);
    sigaddset(&set, death_signal());
    sigprocmask(SIG_BLOCK, &set, NULL);

    if (prctl(PR_SET_PDEATHSIG, death_signal()) < 0 || getppid() != parent) {
        /* The worker died before the signal was armed (or it cannot be): run nothing. */
        snprintf(line, sizeof(line), "err worker %d is gone\n", (int)parent);
        report(status_fd, line);
        return 1;
    }

    if (acc.uid_given && read_env(&acc) < 0) {
        snprintf(line, sizeof(line), "err tide-exec: read the environment: %s\n", strerror(errno));
        report(status_fd, line);
        return 127;
    }
    if (pipe2(ep, O_CLOEXEC) < 0) {
        snprintf(line, sizeof(line), "err tide-exec: pipe: %s\n", strerror(errno));
        report(status_fd, line);
        return 127;
    }
    child = fork();
    if (child < 0) {
        snprintf(line, sizeof(line), "err tide-exec: fork: %s\n", strerror(errno));
        report(status_fd, line);
        return 127;
    }
    if (child == 0) {
        /* The mask survives exec: give the command a clean one (dispositions are defaults already,
         * libuv reset them before exec'ing us and we changed only SIGCHLD, to its default). */
        sigset_t none;
        child_error_t e = {STAGE_EXEC, 0};

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        close(ep[0]);
        /* Whatever the worker inherited without close-on-exec stays out of the rank (ep[1] is
         * close-on-exec already and must stay open until the exec). Best effort on old kernels. */
        close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        if (become(&acc, &e.stage) == 0)
            execvp(argv[cmd_i], argv + cmd_i);
        e.err = errno;
        if (write(ep[1], &e, sizeof(e)) < 0) {
            /* the parent sees EOF and a 127 exit */
        }
        _exit(127);
    }
    close(ep[1]);
    do {
        n = read(ep[0], &ce, sizeof(ce));
    } while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n > 0) {
        static const char *const step[] = {"exec", "setgid", "setgroups", "setuid",
                                           "root could be regained after setuid", "chdir"};
        char reason[256];

        snprintf(reason, sizeof(reason), "%s", strerror(ce.err));
        lower_first(reason);
        if (ce.stage == STAGE_CHDIR)
            snprintf(line, sizeof(line), "err workdir %s: %s (as user %s)\n", acc.chdir_to,
                     reason, acc.user);
        else if (ce.stage != STAGE_EXEC && ce.stage >= 0 && ce.stage <= STAGE_CHDIR)
            snprintf(line, sizeof(line), "err run as %s (uid %u): %s: %s\n", acc.user,
                     (unsigned)acc.uid, step[ce.stage], reason);
        else
            snprintf(line, sizeof(line), "err spawn %s: %s\n", argv[cmd_i], reason);
        report(status_fd, line);
        fprintf(stderr, "tide-exec: %s", line + 4);
        waitpid(child, NULL, 0);
        return 127;
    }
    report(status_fd, "ok\n");
    if (status_fd >= 0)
        close(status_fd);

    sigemptyset(&waitset);
    sigaddset(&waitset, SIGCHLD);
    sigaddset(&waitset, death_signal());
    for (;;) {
        siginfo_t si;
        int sig = sigwaitinfo(&waitset, &si);

        if (sig < 0)
            continue; /* EINTR (a stop/continue) */
        if (sig == death_signal()) {
            if (getppid() != parent)
                kill(0, SIGKILL); /* the worker is gone: the group, us included */
            continue;
        }
        if (waitpid(child, &status, WNOHANG) == child)
            break;
    }
    exit_like(status);
    return 1;
}

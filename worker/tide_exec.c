/* tide-exec: the exec helper between tide-worker and a rank, so ranks die with their worker. The
 * worker starts it as the leader of a new session/process group; it forks the command into that
 * group and waits. Invariants: if the worker (its parent) dies, the whole group is SIGKILLed
 * (parent-death signal, plus a getppid() check for a parent that died before the signal was armed);
 * otherwise it forwards nothing, ignores the signals sent to its group (the command gets them
 * directly) and exits with the command's wait status, re-raising a terminating signal.
 *
 *   tide-exec --parent PID [--status-fd FD] -- COMMAND [ARG...]
 *
 * The status fd (inherited from the worker) gets one line once the command has been exec'd: "ok",
 * or "err spawn COMMAND: REASON" when it could not be (then the exit status is 127). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

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
    fprintf(stderr, "usage: tide-exec --parent PID [--status-fd FD] -- COMMAND [ARG...]\n");
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

int main(int argc, char **argv)
{
    pid_t parent = 0, child;
    int status_fd = -1, ep[2], cmd_i = -1, status = 0, child_errno = 0;
    sigset_t set, waitset;
    char line[512];
    ssize_t n;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            cmd_i = i + 1;
            break;
        } else if (strcmp(argv[i], "--parent") == 0 && i + 1 < argc) {
            parent = (pid_t)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--status-fd") == 0 && i + 1 < argc) {
            status_fd = (int)strtol(argv[++i], NULL, 10);
        } else {
            usage();
        }
    }
    if (parent <= 0 || cmd_i < 0 || cmd_i >= argc)
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
        int e;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        close(ep[0]);
        /* Whatever the worker inherited without close-on-exec stays out of the rank (ep[1] is
         * close-on-exec already and must stay open until the exec). Best effort on old kernels. */
        close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        execvp(argv[cmd_i], argv + cmd_i);
        e = errno;
        if (write(ep[1], &e, sizeof(e)) < 0) {
            /* the parent sees EOF and a 127 exit */
        }
        _exit(127);
    }
    close(ep[1]);
    do {
        n = read(ep[0], &child_errno, sizeof(child_errno));
    } while (n < 0 && errno == EINTR);
    close(ep[0]);
    if (n > 0) {
        char reason[256];

        snprintf(reason, sizeof(reason), "%s", strerror(child_errno));
        lower_first(reason);
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

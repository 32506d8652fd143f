/* tide-rank-exec: what orted starts for each rank of an MPI job under tide (docs/mpi.md). It
 * attaches to the trainer socket of the tide-worker that owns the rank, takes the rank's log and
 * environment from it, runs the command as its child in a process group of its own, and reports the
 * exit back. Invariants: the command never outlives the worker's socket or this process
 * (parent-death SIGKILL, and SIGKILL of its group when the socket closes); what it leaves in its
 * group dies when it exits; the exit status is tide's (0..255, or 128+signal).
 *
 *   tide-rank-exec -- COMMAND [ARG...]
 *
 * Environment in: TIDE_RANK_SOCKS ("path0:path1:..." in local-rank order), OMPI_COMM_WORLD_RANK,
 * OMPI_COMM_WORLD_LOCAL_RANK, TIDE_JOB_ID, TIDE_GENERATION, TIDE_MPI_CREDENTIAL.
 * Wire (one JSON object a line): we send attach, get attached or error; then the worker may send
 * {"op":"signal","signal":N} (forwarded to the command's group) and we send exited at the end.
 * Exit status: the command's; 1 when attaching fails; 2 for a usage error; 127 when the command
 * cannot be exec'd; 137 when the worker's socket closed.
 * It switches no account: for a job with one (docs/worker.md, "Running ranks as their user") the
 * worker starts mpirun and orted as that account already, so it and the command run as it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define LINE_MAX_BYTES    65536 /* longest line from the worker, newline included */
#define ATTACH_TIMEOUT_MS 60000 /* the worker may hold its answer until its LaunchRank arrives */

/* Signals forwarded to the command's process group: what orted sends to a rank's group when it
 * stops it (SIGCONT, SIGTERM; SIGKILL cannot be caught, the parent-death signal covers it), what
 * mpirun forwards (SIGUSR1/2, and SIGINT/SIGHUP/SIGQUIT from a terminal). */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};

typedef struct linebuf {
    char data[LINE_MAX_BYTES];
    size_t len;
    bool skipping; /* the current line overflowed: drop bytes up to its newline */
} linebuf_t;

static linebuf_t lb;

/* Replaces control characters so the worker's words cannot drive a terminal. In place. */
static void sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Takes one complete line out of lb (newline dropped, NUL-terminated into out, LINE_MAX_BYTES).
 * Returns true when there was one. Overflowing lines are skipped whole. */
static bool next_line(char *out)
{
    for (;;) {
        char *nl = memchr(lb.data, '\n', lb.len);
        size_t take;

        if (!nl) {
            if (lb.len == sizeof(lb.data)) {
                lb.skipping = true; /* too long: forget it, keep skipping to the newline */
                lb.len = 0;
            }
            return false;
        }
        take = (size_t)(nl - lb.data);
        if (!lb.skipping) {
            memcpy(out, lb.data, take);
            out[take] = '\0';
        }
        memmove(lb.data, nl + 1, lb.len - take - 1);
        lb.len -= take + 1;
        if (!lb.skipping)
            return true;
        lb.skipping = false;
    }
}

/* Reads what the socket has into lb. Returns bytes read, 0 at EOF, -errno on error (-EAGAIN never,
 * the socket blocks and is only read when poll said so). */
static ssize_t fill(int fd)
{
    ssize_t n;

    do {
        n = read(fd, lb.data + lb.len, sizeof(lb.data) - lb.len);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    lb.len += (size_t)n;
    return n;
}

static int send_all(int fd, const char *s, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        s += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Sends obj as one line; frees obj. */
static int send_json(int fd, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    int rc = -ENOMEM;

    cJSON_Delete(obj);
    if (text) {
        size_t len = strlen(text);
        char *line = malloc(len + 2);
        if (line) {
            memcpy(line, text, len);
            line[len] = '\n';
            rc = send_all(fd, line, len + 1);
            free(line);
        }
        free(text);
    }
    return rc;
}

/* Parses a decimal in [min, max]. */
static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    long v;

    if (!s || !*s)
        return false;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static const char *need_env(const char *name)
{
    const char *v = getenv(name);

    if (!v || !*v)
        fprintf(stderr, "tide-rank-exec: %s is not set\n", name);
    return v && *v ? v : NULL;
}

static bool need_env_long(const char *name, long min, long max, long *out)
{
    const char *v = need_env(name);

    if (!v)
        return false;
    if (!parse_long(v, min, max, out)) {
        fprintf(stderr, "tide-rank-exec: %s \"%s\" is not a number in %ld..%ld\n", name, v, min,
                max);
        return false;
    }
    return true;
}

/* Picks entry `index` of the ':'-separated list into out. Returns false (message printed) when the
 * list is shorter or the entry empty or too long for a socket address. */
static bool pick_sock(const char *socks, long index, struct sockaddr_un *out)
{
    const char *p = socks;
    size_t len;

    for (long i = 0; i < index; i++) {
        p = strchr(p, ':');
        if (!p) {
            fprintf(stderr,
                    "tide-rank-exec: TIDE_RANK_SOCKS has %ld socket(s), none for "
                    "OMPI_COMM_WORLD_LOCAL_RANK=%ld\n",
                    i + 1, index);
            return false;
        }
        p++;
    }
    len = strcspn(p, ":");
    if (len == 0 || len >= sizeof(out->sun_path)) {
        fprintf(stderr, "tide-rank-exec: TIDE_RANK_SOCKS entry %ld is %s\n", index,
                len ? "too long for a socket path" : "empty");
        return false;
    }
    memset(out, 0, sizeof(*out));
    out->sun_family = AF_UNIX;
    memcpy(out->sun_path, p, len);
    return true;
}

/* Connects sock to sa. A job that runs as its own account (docs/worker.md, "Running ranks as their
 * user") reaches a worker's socket once that worker has its LaunchRank, which may come after this
 * node's daemon started the rank: permission denied is retried until ATTACH_TIMEOUT_MS. Returns 0
 * or -1 with errno. */
static int connect_sock(int sock, const struct sockaddr_un *sa)
{
    int64_t deadline = now_ms() + ATTACH_TIMEOUT_MS;

    for (;;) {
        struct timespec pause = {0, 50 * 1000000};

        if (connect(sock, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
            return 0;
        if (errno != EACCES || now_ms() >= deadline)
            return -1;
        nanosleep(&pause, NULL);
    }
}

/* Waits for the worker's answer to attach (one line into line, LINE_MAX_BYTES). Returns 0, or -1
 * with a message printed. */
static int read_reply(int fd, const char *path, char *line)
{
    int64_t deadline = now_ms() + ATTACH_TIMEOUT_MS;

    while (!next_line(line)) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - now_ms();
        ssize_t n;
        int rc;

        if (lb.skipping) {
            fprintf(stderr, "tide-rank-exec: %s answered attach with a line over %d bytes\n", path,
                    LINE_MAX_BYTES);
            return -1;
        }
        if (left <= 0) {
            fprintf(stderr, "tide-rank-exec: no answer to attach from %s within %d s\n", path,
                    ATTACH_TIMEOUT_MS / 1000);
            return -1;
        }
        rc = poll(&pfd, 1, (int)left);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0) {
            fprintf(stderr, "tide-rank-exec: poll: %s\n", strerror(errno));
            return -1;
        }
        if (rc == 0)
            continue;
        n = fill(fd);
        if (n <= 0) {
            fprintf(stderr, "tide-rank-exec: %s closed before answering attach%s%s\n", path,
                    n < 0 ? ": " : "", n < 0 ? strerror((int)-n) : "");
            return -1;
        }
    }
    return 0;
}

/* Checks and applies an "attached" reply: setenv for each env entry. Returns the log path (borrowed
 * from reply), or NULL with a message printed. */
static const char *apply_attached(cJSON *reply, const char *path)
{
    cJSON *log = cJSON_GetObjectItemCaseSensitive(reply, "log");
    cJSON *env = cJSON_GetObjectItemCaseSensitive(reply, "env");
    cJSON *obj = cJSON_IsObject(env) ? env : NULL, *kv;

    if (!cJSON_IsString(log) || log->valuestring[0] != '/') {
        fprintf(stderr, "tide-rank-exec: %s answered attached without an absolute \"log\" path\n",
                path);
        return NULL;
    }
    if (env && !cJSON_IsNull(env) && !cJSON_IsObject(env)) {
        fprintf(stderr,
                "tide-rank-exec: %s answered attached with an \"env\" that is not an object\n",
                path);
        return NULL;
    }
    /* Check everything before changing anything. */
    cJSON_ArrayForEach(kv, obj)
    {
        if (!kv->string || !kv->string[0] || strchr(kv->string, '=') || !cJSON_IsString(kv)) {
            fprintf(stderr, "tide-rank-exec: %s answered attached with a bad env entry\n", path);
            return NULL;
        }
    }
    cJSON_ArrayForEach(kv, obj)
    {
        if (setenv(kv->string, kv->valuestring, 1) < 0) {
            fprintf(stderr, "tide-rank-exec: setenv %s: %s\n", kv->string, strerror(errno));
            return NULL;
        }
    }
    return log->valuestring;
}

/* Attaches to the worker: sends attach, applies the answer, points fds 0/1/2 at /dev/null and the
 * log. Returns 0, or -1 with a message printed (on the original stderr). */
static int attach(int fd, const char *path, const char *job, long gen, long rank, char *line)
{
    cJSON *msg = cJSON_CreateObject(), *reply = NULL, *op;
    const char *cred = getenv("TIDE_MPI_CREDENTIAL"), *log;
    int rc = -1, logfd = -1, nullfd = -1;

    cJSON_AddStringToObject(msg, "op", "attach");
    cJSON_AddNumberToObject(msg, "v", 1);
    cJSON_AddStringToObject(msg, "job", job);
    cJSON_AddNumberToObject(msg, "generation", (double)gen);
    cJSON_AddNumberToObject(msg, "rank", (double)rank);
    cJSON_AddStringToObject(msg, "credential", cred);
    cJSON_AddNumberToObject(msg, "pid", (double)getpid());
    rc = send_json(fd, msg);
    if (rc < 0) {
        fprintf(stderr, "tide-rank-exec: send attach to %s: %s\n", path, strerror(-rc));
        rc = -1;
        goto done;
    }
    rc = -1;
    if (read_reply(fd, path, line) < 0)
        goto done;
    reply = cJSON_Parse(line);
    op = reply ? cJSON_GetObjectItemCaseSensitive(reply, "op") : NULL;
    if (!cJSON_IsString(op)) {
        fprintf(stderr, "tide-rank-exec: %s answered attach with something that is not a message\n",
                path);
        goto done;
    }
    if (strcmp(op->valuestring, "error") == 0) {
        cJSON *m = cJSON_GetObjectItemCaseSensitive(reply, "message");
        cJSON *code = cJSON_GetObjectItemCaseSensitive(reply, "code");
        const char *why = "no reason given";
        char *text;

        if (cJSON_IsString(m) && m->valuestring[0])
            why = m->valuestring;
        else if (cJSON_IsString(code) && code->valuestring[0])
            why = code->valuestring;
        text = strdup(why);
        if (text)
            sanitize(text);
        fprintf(stderr, "tide-rank-exec: attach to %s refused: %s\n", path, text ? text : "?");
        free(text);
        goto done;
    }
    if (strcmp(op->valuestring, "attached") != 0) {
        fprintf(stderr, "tide-rank-exec: %s answered attach with op \"%.40s\"\n", path,
                op->valuestring);
        goto done;
    }
    log = apply_attached(reply, path);
    if (!log)
        goto done;
    logfd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (logfd < 0) {
        fprintf(stderr, "tide-rank-exec: open log %s: %s\n", log, strerror(errno));
        goto done;
    }
    nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nullfd < 0) {
        fprintf(stderr, "tide-rank-exec: open /dev/null: %s\n", strerror(errno));
        goto done;
    }
    fflush(stdout);
    fflush(stderr);
    if (dup2(nullfd, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0) {
        fprintf(stderr, "tide-rank-exec: dup2: %s\n", strerror(errno));
        goto done;
    }
    /* dup2 onto the same fd keeps close-on-exec: the command must inherit 0, 1 and 2. */
    for (int i = 0; i < 3; i++)
        fcntl(i, F_SETFD, 0);
    rc = 0;
done:
    if (logfd > 2)
        close(logfd);
    if (nullfd > 2)
        close(nullfd);
    cJSON_Delete(reply);
    return rc;
}

/* A line from the worker once attached: only signal is acted on. */
static void worker_line(const char *line, pid_t child)
{
    cJSON *msg = cJSON_Parse(line), *op, *sig;

    op = msg ? cJSON_GetObjectItemCaseSensitive(msg, "op") : NULL;
    sig = msg ? cJSON_GetObjectItemCaseSensitive(msg, "signal") : NULL;
    if (cJSON_IsString(op) && strcmp(op->valuestring, "signal") == 0 && cJSON_IsNumber(sig) &&
        sig->valuedouble >= 1 && sig->valuedouble < NSIG &&
        sig->valuedouble == (int)sig->valuedouble)
        kill(-child, (int)sig->valuedouble);
    cJSON_Delete(msg);
}

/* The child: its own process group, dies with us, then the command. Never returns. */
static void run_child(pid_t parent, const sigset_t *orig_mask, char **cmd, int sock, int sfd)
{
    close(sock);
    close(sfd);
    setpgid(0, 0);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        _exit(137); /* tide-rank-exec is already gone */
    sigprocmask(SIG_SETMASK, orig_mask, NULL);
    execvp(cmd[0], cmd);
    fprintf(stderr, "tide-rank-exec: exec %s: %s\n", cmd[0], strerror(errno));
    _exit(127);
}

int main(int argc, char **argv)
{
    static char line[LINE_MAX_BYTES];
    struct sockaddr_un sa;
    const char *socks, *job;
    long rank, local_rank, gen;
    sigset_t set, orig_mask;
    pid_t parent = getppid(), self, child;
    int sock = -1, sfd, status, cmd_i = 1, code;
    cJSON *exited;

    /* 0, 1 and 2 must be taken, or the socket could land on one of them and be replaced below. */
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
            return 1;
    if (argc > 1 && strcmp(argv[1], "--") == 0)
        cmd_i = 2;
    if (cmd_i >= argc || (cmd_i == 1 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: tide-rank-exec -- COMMAND [ARG...]\n");
        return 2;
    }
    /* Die with orted (SIGTERM: handled below once the command runs, so it is forwarded). */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent) {
        fprintf(stderr, "tide-rank-exec: the process that started it is gone\n");
        return 1;
    }
    if (!(socks = need_env("TIDE_RANK_SOCKS")) ||
        !need_env_long("OMPI_COMM_WORLD_RANK", 0, INT32_MAX, &rank) ||
        !need_env_long("OMPI_COMM_WORLD_LOCAL_RANK", 0, INT32_MAX, &local_rank) ||
        !(job = need_env("TIDE_JOB_ID")) || !need_env_long("TIDE_GENERATION", 0, INT32_MAX, &gen) ||
        !need_env("TIDE_MPI_CREDENTIAL") || !pick_sock(socks, local_rank, &sa))
        return 1;

    sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0 || connect_sock(sock, &sa) < 0) {
        fprintf(stderr, "tide-rank-exec: connect to %s: %s\n", sa.sun_path, strerror(errno));
        return 1;
    }
    if (attach(sock, sa.sun_path, job, gen, rank, line) < 0)
        return 1;
    /* From here stdout/stderr are the rank's log. */

    /* Hold the forwarded signals and SIGCHLD for the signalfd before the child exists, so none is
     * lost or acted on by default; SIGCHLD must not be ignored or the kernel would reap for us. */
    signal(SIGCHLD, SIG_DFL);
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
        sigaddset(&set, forwarded[i]);
    sigprocmask(SIG_BLOCK, &set, &orig_mask);
    sfd = signalfd(-1, &set, SFD_CLOEXEC);
    if (sfd < 0) {
        fprintf(stderr, "tide-rank-exec: signalfd: %s\n", strerror(errno));
        return 1;
    }
    self = getpid();
    child = fork();
    if (child < 0) {
        fprintf(stderr, "tide-rank-exec: fork: %s\n", strerror(errno));
        return 1;
    }
    if (child == 0)
        run_child(self, &orig_mask, argv + cmd_i, sock, sfd);
    setpgid(child, child); /* both sides set it: kill(-child) works whichever runs first */

    for (;;) {
        struct pollfd pfd[2] = {{.fd = sfd, .events = POLLIN}, {.fd = sock, .events = POLLIN}};
        int rc = poll(pfd, 2, -1);

        if (rc < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "tide-rank-exec: poll: %s\n", strerror(errno));
            kill(-child, SIGKILL);
            waitpid(child, NULL, 0);
            return 1;
        }
        if (pfd[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            siginfo_t info;

            if (read(sfd, &si, sizeof(si)) != (ssize_t)sizeof(si))
                continue; /* EINTR; poll again */
            if (si.ssi_signo != SIGCHLD) {
                kill(-child, (int)si.ssi_signo);
                continue;
            }
            /* Peek first: while the child is a zombie its pid, and so its group id, stays ours,
             * so whatever it left in its group can be killed without hitting a stranger. */
            memset(&info, 0, sizeof(info));
            if (waitid(P_PID, (id_t)child, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
                info.si_pid == child) {
                kill(-child, SIGKILL);
                while (waitpid(child, &status, 0) < 0 && errno == EINTR)
                    ;
                break;
            }
        }
        if (pfd[1].revents) {
            ssize_t n = fill(sock);

            if (n <= 0) {
                /* The worker is gone: so is the rank. */
                kill(-child, SIGKILL);
                while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                    ;
                return 137;
            }
            while (next_line(line))
                worker_line(line, child);
        }
    }

    exited = cJSON_CreateObject();
    cJSON_AddStringToObject(exited, "op", "exited");
    if (WIFSIGNALED(status)) {
        cJSON_AddNumberToObject(exited, "status", 0);
        cJSON_AddNumberToObject(exited, "signal", WTERMSIG(status));
        code = 128 + WTERMSIG(status);
    } else {
        code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        cJSON_AddNumberToObject(exited, "status", code);
        cJSON_AddNumberToObject(exited, "signal", 0);
    }
    send_json(sock, exited); /* the worker may be gone already: nothing to do about it */
    close(sock);
    close(sfd);
    return code;
}

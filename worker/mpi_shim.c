/* tide-mpi-shim: mpirun's rsh agent for MPI jobs under tide (docs/mpi.md). Called like ssh,
 * `tide-mpi-shim [ssh options] HOST COMMAND...`, it asks the WorkerLauncher of HOST's tide-worker
 * to start COMMAND (an orted) and stays attached to that StartDaemon stream. Invariants: it runs no
 * shell and nothing locally; it exits only when the stream has ended (the daemon's exit code, or
 * 255 with a one-line reason, as ssh does for connection problems) or after a signal that cancelled
 * the call (128+signal; the worker kills the daemon when the call goes away) or after its parent
 * (mpirun) died, which also cancels the call.
 *
 * Options. mpirun passes none of its own to a custom agent (Open MPI 4.1: the agent's own words
 * from plm_rsh_agent, then plm_rsh_args, then HOST); ssh-style options are skipped so either can
 * carry them: flags `-1246AaCfGgKkMNnqsTtVvXxYy` (alone or bundled, "-xT"), and options with a
 * value `-BbcDEeFIiJLlmOopQRSWw` as two tokens ("-o X") or one ("-oX", "-p22"). "--" ends the
 * options. "user@HOST" is looked up as HOST.
 *
 * The command. Like ssh, the shim joins the words after HOST with spaces into one command line;
 * Open MPI writes that line for a POSIX shell (quoted values, and with --prefix leading segments
 * such as `PATH=/p/bin:$PATH ; export PATH ;`). The shim splits it the way sh would, without
 * running one:
 *  - quoting: '...'; "..." where backslash escapes $ ` " \ and newline; backslash outside quotes.
 *  - `;` and newline separate segments. Every segment before the last may only assign variables
 *    (`NAME=VALUE ...`) or `export NAME[=VALUE]...`; those segments are dropped, and so are
 *    assignments that lead the last segment: the worker starts the daemon with its own environment.
 *  - The last segment is the argv sent, minus `--daemonize` (a daemonized orted would leave the
 *    worker's supervision and end the stream at once). It must not expand anything (`$`).
 *  - `| & < > ( )` and backquotes anywhere, and unterminated quotes, are refused (exit 255).
 * Glob characters and `~` are taken literally (a remote sh would too unless a file matched).
 * The worker refuses an argv[0] that is not an Open MPI daemon anyway.
 *
 * Environment: TIDE_MPI_LAUNCHERS ("node=HOST:PORT,..."), TIDE_JOB_ID, TIDE_GENERATION,
 * TIDE_MPI_CREDENTIAL; TIDE_MPI_SHIM_DEBUG=1 prints each step on stderr. stdin is never read. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include <uv.h>

#include "log.h"
#include "rpc_client.h"
#include "tide/v1/worker_service.pb-c.h"
#include "xmalloc.h"

#define SHIM_EXIT_FAILURE 255 /* what ssh returns for its own failures */
#define START_DAEMON_PATH "/tide.v1.WorkerLauncher/StartDaemon"

/* ---- ssh-style options ---- */

static const char flag_letters[] = "1246AaCfGgKkMNnqsTtVvXxYy";
static const char value_letters[] = "BbcDEeFIiJLlmOopQRSWw";

/* Returns the index of HOST in argv, or -1 (message printed) for an unknown option. */
static int skip_options(int argc, char **argv)
{
    int i = 1;

    while (i < argc && argv[i][0] == '-' && argv[i][1] != '\0') {
        const char *p = argv[i] + 1;

        if (strcmp(argv[i], "--") == 0)
            return i + 1;
        for (; *p; p++) {
            if (strchr(value_letters, *p)) {
                if (p[1] == '\0')
                    i++; /* the value is the next token */
                break;
            }
            if (!strchr(flag_letters, *p)) {
                fprintf(stderr, "tide-mpi-shim: unknown option -%c (in \"%s\")\n", *p, argv[i]);
                return -1;
            }
        }
        i++;
    }
    return i;
}

/* ---- the command line, split the way sh would ---- */

typedef struct word {
    char *text;
    bool expands;  /* an unquoted or double-quoted $ */
    int assign_eq; /* index of the '=' of a NAME=VALUE word, or -1 */
} word_t;

typedef enum { TOK_WORD, TOK_SEP } tok_kind_t;

typedef struct tok {
    tok_kind_t kind;
    word_t w;
} tok_t;

typedef struct toks {
    tok_t *v;
    size_t n, cap;
} toks_t;

static void toks_push(toks_t *t, tok_kind_t kind, word_t *w)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->v = tide_xrealloc(t->v, t->cap * sizeof(*t->v));
    }
    t->v[t->n].kind = kind;
    if (w)
        t->v[t->n].w = *w;
    else
        memset(&t->v[t->n].w, 0, sizeof(t->v[t->n].w));
    t->n++;
}

static void toks_free(toks_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->v[i].w.text);
    free(t->v);
    t->v = NULL;
    t->n = t->cap = 0;
}

static bool is_name_start(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static bool is_name(const char *s, size_t len)
{
    if (len == 0 || !is_name_start(s[0]))
        return false;
    for (size_t i = 1; i < len; i++)
        if (!is_name_char(s[i]))
            return false;
    return true;
}

/* Growing string for one word. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
} sbuf_t;

static void sb_putc(sbuf_t *b, char c)
{
    if (b->len + 2 > b->cap) {
        b->cap = b->cap ? 2 * b->cap : 64;
        b->s = tide_xrealloc(b->s, b->cap);
    }
    b->s[b->len++] = c;
    b->s[b->len] = '\0';
}

/* Splits line into words and separators. Returns 0, or -EINVAL with a reason in why. */
static int lex(const char *line, toks_t *out, char *why, size_t whylen)
{
    const char *p = line;

    for (;;) {
        sbuf_t b = {0};
        word_t w = {.assign_eq = -1};
        bool in_word = false, quoted_before_eq = false;

        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            return 0;
        if (*p == ';' || *p == '\n') {
            toks_push(out, TOK_SEP, NULL);
            p++;
            continue;
        }
        while (*p && *p != ' ' && *p != '\t' && *p != ';' && *p != '\n') {
            char c = *p;

            if (strchr("|&<>()`", c)) {
                snprintf(why, whylen, "shell syntax '%c' is not supported", c);
                free(b.s);
                return -EINVAL;
            }
            in_word = true;
            if (c == '\'') {
                const char *end = strchr(p + 1, '\'');
                if (!end) {
                    snprintf(why, whylen, "unterminated ' quote");
                    free(b.s);
                    return -EINVAL;
                }
                for (const char *q = p + 1; q < end; q++)
                    sb_putc(&b, *q);
                quoted_before_eq = true;
                p = end + 1;
            } else if (c == '"') {
                p++;
                while (*p && *p != '"') {
                    if (*p == '\\' && p[1] && strchr("$`\"\\\n", p[1])) {
                        if (p[1] != '\n')
                            sb_putc(&b, p[1]);
                        p += 2;
                        continue;
                    }
                    if (*p == '`') {
                        snprintf(why, whylen, "shell syntax '`' is not supported");
                        free(b.s);
                        return -EINVAL;
                    }
                    if (*p == '$')
                        w.expands = true;
                    sb_putc(&b, *p++);
                }
                if (*p != '"') {
                    snprintf(why, whylen, "unterminated \" quote");
                    free(b.s);
                    return -EINVAL;
                }
                quoted_before_eq = true;
                p++;
            } else if (c == '\\') {
                if (p[1] == '\0') {
                    p++;
                } else {
                    if (p[1] != '\n')
                        sb_putc(&b, p[1]);
                    p += 2;
                }
                quoted_before_eq = true;
            } else {
                if (c == '$')
                    w.expands = true;
                if (c == '=' && w.assign_eq < 0 && !quoted_before_eq &&
                    is_name(b.s ? b.s : "", b.len))
                    w.assign_eq = (int)b.len;
                if (c == '=')
                    quoted_before_eq = true; /* only the first '=' can make an assignment */
                sb_putc(&b, c);
                p++;
            }
        }
        if (in_word) {
            if (!b.s)
                b.s = tide_xstrdup(""); /* '' and "" are empty words */
            w.text = b.s;
            toks_push(out, TOK_WORD, &w);
        }
    }
}

static bool segment_is_setup(const tok_t *v, size_t n)
{
    size_t i = 0;

    if (n > 0 && strcmp(v[0].w.text, "export") == 0 && !v[0].w.expands) {
        for (i = 1; i < n; i++) {
            const word_t *w = &v[i].w;
            if (w->assign_eq < 0 && (w->expands || !is_name(w->text, strlen(w->text))))
                return false;
        }
        return true;
    }
    for (i = 0; i < n; i++)
        if (v[i].w.assign_eq < 0)
            return false;
    return true;
}

/* Turns the remote command line into the daemon's argv (*out, NULL-terminated, caller frees each
 * string and the array). Returns 0, or -EINVAL with the reason in why. */
static int command_argv(const char *line, char ***out, size_t *out_n, char *why, size_t whylen)
{
    toks_t t = {0};
    size_t seg_start = 0, last_start = 0, last_end = 0, n = 0;
    char **argv = NULL;
    int rc;

    rc = lex(line, &t, why, whylen);
    if (rc < 0)
        goto done;
    /* Find the last non-empty segment; check every earlier one only sets variables. */
    for (size_t i = 0; i <= t.n; i++) {
        if (i < t.n && t.v[i].kind == TOK_WORD)
            continue;
        if (i > seg_start) {
            if (last_end > last_start &&
                !segment_is_setup(t.v + last_start, last_end - last_start)) {
                snprintf(why, whylen,
                         "only variable assignments may precede the daemon, not \"%s\"",
                         t.v[last_start].w.text);
                rc = -EINVAL;
                goto done;
            }
            last_start = seg_start;
            last_end = i;
        }
        seg_start = i + 1;
    }
    while (last_start < last_end && t.v[last_start].w.assign_eq >= 0)
        last_start++;
    if (last_start == last_end) {
        snprintf(why, whylen, "no command to run");
        rc = -EINVAL;
        goto done;
    }
    argv = tide_xcalloc(last_end - last_start + 1, sizeof(*argv));
    for (size_t i = last_start; i < last_end; i++) {
        word_t *w = &t.v[i].w;
        if (w->expands) {
            snprintf(why, whylen, "shell expansion in \"%s\" is not supported", w->text);
            rc = -EINVAL;
            goto done;
        }
        if (strcmp(w->text, "--daemonize") == 0)
            continue;
        argv[n++] = w->text;
        w->text = NULL; /* moved */
    }
    *out = argv;
    *out_n = n;
    argv = NULL;
    rc = 0;
done:
    if (argv) {
        for (size_t i = 0; i < n; i++)
            free(argv[i]);
        free(argv);
    }
    toks_free(&t);
    return rc;
}

/* ---- environment ---- */

/* Finds node in TIDE_MPI_LAUNCHERS ("node=HOST:PORT,..."). Returns 0 with *hostport (caller frees),
 * -ENOENT when the node is not listed, -EINVAL when the variable is missing or garbled. */
static int launcher_lookup(const char *list, const char *node, char **hostport)
{
    const char *p = list;

    if (!list || !*list)
        return -EINVAL;
    while (*p) {
        const char *end = strchr(p, ',');
        const char *eq;
        size_t len = end ? (size_t)(end - p) : strlen(p);

        eq = memchr(p, '=', len);
        if (!eq || eq == p || eq + 1 == p + len)
            return -EINVAL;
        if ((size_t)(eq - p) == strlen(node) && memcmp(p, node, strlen(node)) == 0) {
            *hostport = tide_xstrndup(eq + 1, len - (size_t)(eq + 1 - p));
            return 0;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return -ENOENT;
}

static const char *need_env(const char *name)
{
    const char *v = getenv(name);

    if (!v || !*v) {
        fprintf(stderr, "tide-mpi-shim: %s is not set\n", name);
        return NULL;
    }
    return v;
}

/* The server's text must not drive the terminal. In place. */
static void sanitize(char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
}

/* ---- the call ---- */

typedef struct shim {
    uv_loop_t loop;
    uv_signal_t sigs[4];
    int nsigs;
    pid_t parent;  /* mpirun (or whoever started us) */
    bool orphaned; /* it died: the call was cancelled */
    tide_rpc_client_t *client;
    tide_rpc_client_call_t *call;
    const char *node;
    char *hostport;
    int signo; /* the signal that cancelled the call, or 0 */
    bool have_exit;
    int exit_code;
    bool bad_event; /* a DaemonEvent we could not use */
    char bad_text[128];
    bool ended;
    tide_grpc_code_t code;
    char message[512];
} shim_t;

static void finish(shim_t *s)
{
    tide_rpc_client_free(s->client);
    s->client = NULL;
    for (int i = 0; i < s->nsigs; i++)
        if (!uv_is_closing((uv_handle_t *)&s->sigs[i]))
            uv_close((uv_handle_t *)&s->sigs[i], NULL);
}

static void on_message(tide_rpc_client_call_t *call, const uint8_t *data, size_t len, void *ud)
{
    shim_t *s = ud;
    Tide__V1__DaemonEvent *ev;

    if (s->bad_event)
        return;
    ev = tide__v1__daemon_event__unpack(NULL, len, data);
    if (!ev) {
        s->bad_event = true;
        snprintf(s->bad_text, sizeof(s->bad_text), "malformed DaemonEvent from the worker");
        tide_rpc_client_call_cancel(call);
        return;
    }
    switch (ev->event_case) {
    case TIDE__V1__DAEMON_EVENT__EVENT_STARTED_PID:
        tide_debug("%s: daemon started, pid %d", s->node, (int)ev->started_pid);
        break;
    case TIDE__V1__DAEMON_EVENT__EVENT_EXIT_CODE:
        tide_debug("%s: daemon exited with %d", s->node, (int)ev->exit_code);
        if (ev->exit_code < 0 || ev->exit_code > 255) {
            s->bad_event = true;
            snprintf(s->bad_text, sizeof(s->bad_text), "the worker sent exit code %d (not 0..255)",
                     (int)ev->exit_code);
            tide_rpc_client_call_cancel(call);
            break;
        }
        s->have_exit = true;
        s->exit_code = ev->exit_code;
        break;
    default:
        tide_debug("%s: ignoring an empty DaemonEvent", s->node);
        break;
    }
    tide__v1__daemon_event__free_unpacked(ev, NULL);
}

static void on_status(tide_rpc_client_call_t *call, tide_grpc_code_t code, const char *message,
                      void *ud)
{
    shim_t *s = ud;

    (void)call;
    s->call = NULL;
    s->ended = true;
    s->code = code;
    snprintf(s->message, sizeof(s->message), "%s", message ? message : "");
    sanitize(s->message);
    tide_debug("%s: stream ended: %s%s%s", s->node, tide_grpc_code_name(code),
               *s->message ? ": " : "", s->message);
    finish(s);
}

/* Sent by the kernel when the parent dies (PR_SET_PDEATHSIG): mpirun neither waits for nor kills
 * its agents when it ends, so a shim whose worker never answers would otherwise outlive it. A
 * signal of its own, because the kernel also sends it when the parent *thread* that forked us ends.
 */
static int death_signal(void)
{
    return SIGRTMIN + 3;
}

static void on_signal(uv_signal_t *h, int signum)
{
    shim_t *s = h->data;

    if (s->signo || s->orphaned)
        return;
    if (signum == death_signal()) {
        if (getppid() == s->parent)
            return; /* only a thread of the parent ended */
        s->orphaned = true;
    } else {
        s->signo = signum;
    }
    tide_debug("%s: %s, cancelling the call", s->node,
               s->orphaned ? "the parent is gone" : strsignal(signum));
    if (s->call)
        tide_rpc_client_call_cancel(s->call); /* on_status(CANCELLED) follows from the loop */
    else
        finish(s);
}

/* Exit status once the loop is done; prints the reason for a failure. */
static int outcome(shim_t *s)
{
    const char *msg = s->message;
    char prefix[300];
    size_t plen;

    if (s->signo)
        return 128 + s->signo;
    if (s->orphaned) {
        fprintf(stderr, "tide-mpi-shim: %s: the process that started it (pid %d) is gone\n",
                s->node, (int)s->parent);
        return SHIM_EXIT_FAILURE;
    }
    if (s->bad_event) {
        fprintf(stderr, "tide-mpi-shim: %s (%s): %s\n", s->node, s->hostport, s->bad_text);
        return SHIM_EXIT_FAILURE;
    }
    if (s->ended && s->code == TIDE_GRPC_OK) {
        if (s->have_exit)
            return s->exit_code;
        fprintf(stderr, "tide-mpi-shim: %s (%s): the stream ended without the daemon's exit code\n",
                s->node, s->hostport);
        return SHIM_EXIT_FAILURE;
    }
    /* "connect to HOST:PORT: connection refused" repeats what the line already says. */
    snprintf(prefix, sizeof(prefix), "connect to %s: ", s->hostport);
    plen = strlen(prefix);
    if (strncmp(msg, prefix, plen) == 0)
        msg += plen;
    fprintf(stderr, "tide-mpi-shim: %s (%s): %s%s%s\n", s->node, s->hostport,
            tide_grpc_code_name(s->code), *msg ? ": " : "", msg);
    return SHIM_EXIT_FAILURE;
}

int main(int argc, char **argv)
{
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP, death_signal()};
    static const tide_rpc_client_call_cbs_t cbs = {on_message, on_status};
    Tide__V1__StartDaemonRequest req = TIDE__V1__START_DAEMON_REQUEST__INIT;
    tide_rpc_client_config_t cfg;
    tide_error_t err = {{0}};
    tide_tls_ctx_t *tls = NULL;
    shim_t s;
    const char *dbg = getenv("TIDE_MPI_SHIM_DEBUG"), *job, *gen_s, *cred, *at;
    char *line = NULL, **dargv = NULL, why[256], *end;
    size_t dargc = 0, linelen = 0;
    long gen;
    int host_i, rc, status = SHIM_EXIT_FAILURE;
    bool loop_up = false;

    memset(&s, 0, sizeof(s));
    s.parent = getppid();
    tide_log_init("tide-mpi-shim",
                  dbg && *dbg && strcmp(dbg, "0") != 0 ? TIDE_LOG_DEBUG : TIDE_LOG_WARN);
    host_i = skip_options(argc, argv);
    if (host_i < 0)
        goto done;
    if (host_i >= argc) {
        fprintf(stderr, "usage: tide-mpi-shim [ssh options] HOST COMMAND [ARG...]\n");
        goto done;
    }
    s.node = argv[host_i];
    at = strrchr(s.node, '@');
    if (at)
        s.node = at + 1;
    if (host_i + 1 >= argc) {
        fprintf(stderr, "tide-mpi-shim: no command for %s (an interactive login is not offered)\n",
                s.node);
        goto done;
    }

    /* The environment: where HOST's worker listens, and what authorises the call. */
    rc = launcher_lookup(getenv("TIDE_MPI_LAUNCHERS"), s.node, &s.hostport);
    if (rc == -ENOENT) {
        fprintf(stderr,
                "tide-mpi-shim: host %s is not one of this job's nodes (TIDE_MPI_LAUNCHERS)\n",
                s.node);
        goto done;
    }
    if (rc < 0) {
        fprintf(stderr, "tide-mpi-shim: TIDE_MPI_LAUNCHERS is %s (want NODE=HOST:PORT,...)\n",
                getenv("TIDE_MPI_LAUNCHERS") && *getenv("TIDE_MPI_LAUNCHERS") ? "garbled"
                                                                              : "not set");
        goto done;
    }
    if (!(job = need_env("TIDE_JOB_ID")) || !(gen_s = need_env("TIDE_GENERATION")) ||
        !(cred = need_env("TIDE_MPI_CREDENTIAL")))
        goto done;
    errno = 0;
    gen = strtol(gen_s, &end, 10);
    if (errno || *end || gen < 0 || gen > INT32_MAX) {
        fprintf(stderr, "tide-mpi-shim: TIDE_GENERATION \"%s\" is not a generation number\n",
                gen_s);
        goto done;
    }

    /* The command line ssh would hand the remote shell, then the daemon's argv from it. */
    for (int i = host_i + 1; i < argc; i++)
        linelen += strlen(argv[i]) + 1;
    line = tide_xcalloc(1, linelen + 1);
    for (int i = host_i + 1; i < argc; i++) {
        if (i > host_i + 1)
            strcat(line, " ");
        strcat(line, argv[i]);
    }
    tide_debug("%s: remote command line: %s", s.node, line);
    if (command_argv(line, &dargv, &dargc, why, sizeof(why)) < 0) {
        fprintf(stderr, "tide-mpi-shim: %s: cannot run the command: %s\n", s.node, why);
        goto done;
    }
    for (size_t i = 0; i < dargc; i++)
        tide_debug("%s: argv[%zu] = %s", s.node, i, dargv[i]);

    /* A closed connection must give an error, not kill us before we can report it. */
    signal(SIGPIPE, SIG_IGN);
    rc = uv_loop_init(&s.loop);
    if (rc < 0) {
        fprintf(stderr, "tide-mpi-shim: cannot start an event loop: %s\n", uv_strerror(rc));
        goto done;
    }
    loop_up = true;
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        uv_signal_init(&s.loop, &s.sigs[i]);
        s.sigs[i].data = &s;
        s.nsigs++;
        uv_signal_start(&s.sigs[i], on_signal, sigs[i]);
    }
    if (prctl(PR_SET_PDEATHSIG, death_signal()) < 0 || getppid() != s.parent) {
        s.orphaned = true; /* gone already: nobody is waiting for this daemon */
        finish(&s);
        uv_run(&s.loop, UV_RUN_DEFAULT);
        status = outcome(&s);
        goto done;
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.hostport = s.hostport; /* no token: the credential authorises the call */
    {
        /* The worker's TLS (mpi.c hands its files down): the peer's launcher serves TLS then. */
        const char *ca = getenv("TIDE_TLS_CA"), *cert = getenv("TIDE_TLS_CERT"), *key = getenv("TIDE_TLS_KEY");
        if (ca && *ca) {
            tide_tls_config_t tc = {.cert_file = cert && *cert ? cert : NULL,
                                    .key_file = key && *key ? key : NULL, .ca_file = ca};
            if (tide_tls_ctx_new_client(&tc, &tls, &err) < 0) {
                fprintf(stderr, "tide-mpi-shim: %s\n", err.text);
                finish(&s);
                uv_run(&s.loop, UV_RUN_DEFAULT);
                goto done;
            }
            cfg.tls = tls;
        }
    }
    tide_debug("%s: connecting to %s%s", s.node, s.hostport, tls ? " (TLS)" : "");
    rc = tide_rpc_client_new(&s.loop, &cfg, &s.client, &err);
    if (rc < 0) {
        fprintf(stderr, "tide-mpi-shim: %s (%s): %s\n", s.node, s.hostport,
                err.text[0] ? err.text : uv_strerror(rc));
        finish(&s);
        uv_run(&s.loop, UV_RUN_DEFAULT);
        goto done;
    }
    req.job_id = (char *)job;
    req.generation = (int32_t)gen;
    req.credential = (char *)cred;
    req.node = (char *)s.node;
    req.n_argv = dargc;
    req.argv = dargv;
    rc = tide_rpc_client_call_start(s.client, START_DAEMON_PATH, 0, &cbs, &s, &s.call);
    if (rc == 0)
        rc = tide_rpc_client_call_send_pb(s.call, &req.base);
    if (rc == 0)
        rc = tide_rpc_client_call_close_send(s.call);
    if (rc < 0) {
        fprintf(stderr, "tide-mpi-shim: %s (%s): cannot start the call: %s\n", s.node, s.hostport,
                strerror(-rc));
        if (s.call)
            tide_rpc_client_call_cancel(s.call);
        else
            finish(&s);
        uv_run(&s.loop, UV_RUN_DEFAULT);
        goto done;
    }
    tide_debug("%s: StartDaemon sent (job %s, generation %ld)", s.node, job, gen);
    uv_run(&s.loop, UV_RUN_DEFAULT);
    status = outcome(&s);
    tide_debug("%s: exiting with %d", s.node, status);
done:
    if (loop_up) {
        uv_run(&s.loop, UV_RUN_DEFAULT);
        uv_loop_close(&s.loop);
    }
    if (dargv) {
        for (size_t i = 0; i < dargc; i++)
            free(dargv[i]);
        free(dargv);
    }
    free(line);
    free(s.hostport);
    tide_tls_ctx_free(tls);
    return status;
}

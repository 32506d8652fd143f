/* tide trainer SDK for C (trainer/tide_trainer.h, protocol in docs/trainer-api.md and, for tasks,
 * docs/work-stealing.md): one Unix stream socket to the worker, one JSON line per report, commands
 * read without blocking; only tide_trainer_next_task blocks, for the reply to its request.
 * Invariants: a line goes out whole or not at all (a partly sent line is finished before anything
 * else is sent); once the connection is lost fd is -1 and every call is a no-op; a task iteration
 * whose declaration reached the worker never falls back to local ids (that could run a task twice).
 */
#include "tide_trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define HELLO_TIMEOUT_MS 5000
#define MUST_SEND_TIMEOUT_MS 5000
#define RBUF_SIZE 16384 /* worker messages are short (a restore answer the longest); a longer line is skipped */
#define MAX_ERRORS_SHOWN 5
#define SDK_NAME "c/1"
#define MAX_EXACT ((INT64_C(1) << 53) - 1) /* integers on the wire are exact */
#define LINE_MAX_BYTES        65536 /* the protocol's longest line, newline included */
#define TASKS_SEND_TIMEOUT_MS 5000  /* a `tasks` line waits this long to go out whole */
#define RESTORE_TIMEOUT_MS    600000 /* a restore search verifies whole checkpoints */

/* What a waiting next_task got (tw_result), besides 1 (a task), 0 (no_task) and -EPROTO. */
enum { TW_NONE = 2, TW_UNSUPPORTED = 3 };

struct tide_trainer {
    int fd; /* -1 once the connection is lost or closed */
    /* receive side: bytes of an unfinished line */
    char rbuf[RBUF_SIZE];
    size_t rlen;
    bool rdiscard; /* inside a line longer than rbuf: drop up to the next newline */
    /* send side: the unsent rest of a partly sent line */
    char *pending;
    size_t pending_len;
    /* commands */
    int64_t stop_step; /* valid when stop_set */
    bool stop_set;     /* a stop_after_step arrived */
    bool ckpt_pending;
    int64_t ckpt_id;
    int64_t ckpt_deadline;
    /* state of the hello exchange */
    bool welcomed;
    bool refused;
    char refusal[300]; /* "code: message" of the error that refused the hello */
    /* counters, for messages and tests */
    unsigned errors_seen;
    uint64_t dropped;
    bool warned_args;
    /* tasks (docs/work-stealing.md) */
    bool tasks_sent;        /* a `tasks` line went out on this connection */
    bool tasks_unsupported; /* the worker answered unknown_op to it: iterate locally from now on */
    bool tasks_refused;     /* an error ref `tasks` arrived while no next_task waited */
    bool tw_waiting;        /* a next_task waits for its reply (tw_step, tw_kind) */
    int64_t tw_step;
    int tw_kind;
    int tw_result; /* TW_NONE until the reply: 1 task tw_id, 0 no_task, -EPROTO, TW_UNSUPPORTED */
    uint64_t tw_id;
    /* restore (docs/trainer-api.md, "Checkpoint tiers") */
    bool rs_waiting;
    int rs_result; /* 1 while waiting; 0 found, -ENOENT none, -ENOTSUP refused */
    int64_t rs_step;
    char rs_path[4096];
    char rs_tier[16];
    char rs_reason[256];
    tide_trainer_skip_t rs_skips[TIDE_TRAINER_MAX_SKIPS];
    size_t rs_n_skips;
};

static const char *const phase_names[] = {"forward", "backward", "update",
                                          "eval",    "checkpoint", "idle"};

const char *tide_phase_name(tide_phase_t phase)
{
    if ((unsigned)phase >= sizeof(phase_names) / sizeof(phase_names[0]))
        return NULL;
    return phase_names[phase];
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* one write(2) so lines of several ranks do not interleave */
    if (write(STDERR_FILENO, line, (size_t)n) < 0)
        return;
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The connection is gone: close it, keep the struct (and the commands already received). */
static void lose(tide_trainer_t *t, const char *why)
{
    if (t->fd < 0)
        return;
    close(t->fd);
    t->fd = -1;
    free(t->pending);
    t->pending = NULL;
    t->pending_len = 0;
    t->ckpt_pending = false; /* nobody to report it to */
    if (why && t->welcomed)
        say("tide_trainer: connection to the tide worker lost (%s): reports are off", why);
}

/* --- a tiny reader for the worker's flat JSON objects ---------------------------------------- */

typedef struct wmsg {
    char op[24];
    bool has_id, has_deadline, has_step;
    int64_t id, deadline, step;
    char code[32];
    char message[256];
    char ref[24];
    char kind[16];
} wmsg_t;

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

/* A JSON string starting at p ('"'); copies its raw bytes (escapes kept as written, truncated to
 * out_size - 1) into out when not NULL. Returns the position after the closing quote, or NULL. */
static const char *scan_string(const char *p, const char *end, char *out, size_t out_size)
{
    size_t n = 0;

    if (p >= end || *p != '"')
        return NULL;
    for (p++; p < end; p++) {
        if (*p == '"') {
            if (out)
                out[n] = '\0';
            return p + 1;
        }
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            if (out && n + 1 < out_size)
                out[n++] = *p;
            if (++p >= end)
                return NULL;
        }
        if (out && n + 1 < out_size)
            out[n++] = *p;
    }
    return NULL;
}

/* A JSON number or literal at p. *is_int tells whether it is a plain integer that fits int64
 * (then in *v). Returns the position after it, or NULL. */
static const char *scan_scalar(const char *p, const char *end, bool *is_int, int64_t *v)
{
    const char *s = p;
    bool neg = false, ok = true;
    uint64_t acc = 0;

    *is_int = false;
    while (p < end && *p != ',' && *p != '}' && *p != ' ' && *p != '\t' && *p != '\r' &&
           *p != '\n') {
        if (*p == '{' || *p == '[' || *p == '"' || *p == ']')
            return NULL;
        p++;
    }
    if (p == s)
        return NULL;
    if (*s == '-') {
        neg = true;
        s++;
    }
    if (s == p)
        return p;
    for (const char *q = s; q < p; q++) {
        if (*q < '0' || *q > '9') {
            ok = false;
            break;
        }
        if (acc > (UINT64_MAX - 9) / 10) {
            ok = false;
            break;
        }
        acc = acc * 10 + (uint64_t)(*q - '0');
    }
    if (ok && acc <= (uint64_t)INT64_MAX) {
        *is_int = true;
        *v = neg ? -(int64_t)acc : (int64_t)acc;
    }
    return p;
}

/* Parses one flat object; nested values, bad syntax and the like make it return false. */
static bool parse_wmsg(const char *p, size_t len, wmsg_t *m)
{
    const char *end = p + len;

    memset(m, 0, sizeof(*m));
    p = skip_ws(p, end);
    if (p >= end || *p != '{')
        return false;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return skip_ws(p + 1, end) == end && m->op[0];
    for (;;) {
        char key[24];
        bool is_int;
        int64_t v = 0;

        p = scan_string(p, end, key, sizeof(key));
        if (!p)
            return false;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return false;
        p = skip_ws(p + 1, end);
        if (p >= end)
            return false;
        if (*p == '"') {
            char *dst = NULL;
            size_t dst_size = 0;
            if (!strcmp(key, "op")) {
                dst = m->op;
                dst_size = sizeof(m->op);
            } else if (!strcmp(key, "code")) {
                dst = m->code;
                dst_size = sizeof(m->code);
            } else if (!strcmp(key, "message")) {
                dst = m->message;
                dst_size = sizeof(m->message);
            } else if (!strcmp(key, "ref")) {
                dst = m->ref;
                dst_size = sizeof(m->ref);
            } else if (!strcmp(key, "kind")) {
                dst = m->kind;
                dst_size = sizeof(m->kind);
            }
            p = scan_string(p, end, dst, dst_size);
        } else {
            p = scan_scalar(p, end, &is_int, &v);
            if (p && is_int) {
                if (!strcmp(key, "id")) {
                    m->has_id = true;
                    m->id = v;
                } else if (!strcmp(key, "deadline_unix_ms")) {
                    m->has_deadline = true;
                    m->deadline = v;
                } else if (!strcmp(key, "step")) {
                    m->has_step = true;
                    m->step = v;
                }
            }
        }
        if (!p)
            return false;
        p = skip_ws(p, end);
        if (p >= end)
            return false;
        if (*p == '}')
            return skip_ws(p + 1, end) == end && m->op[0];
        if (*p != ',')
            return false;
        p = skip_ws(p + 1, end);
    }
}

static const char *task_kind_name(int kind)
{
    return kind == TIDE_TRAINER_TASK_DETACHED ? "detached" : "member";
}

/* A `task` / `no_task` reply for the waiting next_task (its step and kind; a reply without `kind`
 * means member). Anything else, a stale reply included, is ignored. */
static void apply_task_reply(tide_trainer_t *t, const wmsg_t *m, bool is_task)
{
    const char *kind = m->kind[0] ? m->kind : "member";

    if (!t->tw_waiting || t->tw_result != TW_NONE || !m->has_step || m->step != t->tw_step ||
        strcmp(kind, task_kind_name(t->tw_kind)) != 0)
        return;
    if (!is_task) {
        t->tw_result = 0;
    } else if (m->has_id && m->id >= 0 && m->id <= MAX_EXACT) {
        t->tw_id = (uint64_t)m->id;
        t->tw_result = 1;
    } else {
        say("tide_trainer: the tide worker sent a task without a valid id for step %" PRId64,
            m->step);
        t->tw_result = -EPROTO;
    }
}

/* An `error` about tasks. An unknown_op after a `tasks` line is a worker that predates tasks (it
 * never kept the declaration, so running the rank's own ids locally is exact); the others are
 * refusals that fail the iteration. Returns whether the error was about tasks. */
static bool apply_task_error(tide_trainer_t *t, const wmsg_t *m)
{
    bool about_tasks = !strcmp(m->ref, "tasks") || !strcmp(m->ref, "next_task");

    if (!strcmp(m->code, "unknown_op") && t->tasks_sent && (about_tasks || !m->ref[0])) {
        if (!t->tasks_unsupported)
            say("tide_trainer: the tide worker does not know tasks (an older worker): each rank "
                "runs its own tasks, without stealing");
        t->tasks_unsupported = true;
        if (t->tw_waiting && t->tw_result == TW_NONE)
            t->tw_result = TW_UNSUPPORTED;
        return true;
    }
    if (!about_tasks)
        return false;
    say("tide_trainer: the tide worker refused a %s report: %s: %s", m->ref, m->code, m->message);
    if (t->tw_waiting && t->tw_result == TW_NONE)
        t->tw_result = -EPROTO;
    else if (!strcmp(m->ref, "tasks"))
        t->tasks_refused = true;
    return true;
}

/* Undoes the JSON escapes scan_string kept (\uXXXX below 0x100 becomes that byte, others '?'). */
static void unescape(char *s)
{
    char *w = s;

    for (const char *r = s; *r; r++) {
        if (*r != '\\' || !r[1]) {
            *w++ = *r;
            continue;
        }
        r++;
        switch (*r) {
        case 'n': *w++ = '\n'; break;
        case 't': *w++ = '\t'; break;
        case 'r': *w++ = '\r'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'u': {
            unsigned v = 0;
            int k;
            for (k = 1; k <= 4 && r[k]; k++) {
                char c = r[k];
                v = v * 16 + (unsigned)(c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0');
            }
            *w++ = v < 0x100 ? (char)v : '?';
            r += k - 1;
            break;
        }
        default: *w++ = *r; break;
        }
    }
    *w = '\0';
}

/* One key/value of a restore answer (or of one of its skipped[] objects when skip is not NULL).
 * Returns the position after the value, or NULL. */
static const char *restore_field(tide_trainer_t *t, tide_trainer_skip_t *skip, const char *key,
                                 const char *p, const char *end);

/* An object at p ('{'), each field through restore_field. */
static const char *restore_object(tide_trainer_t *t, tide_trainer_skip_t *skip, const char *p,
                                  const char *end)
{
    p = skip_ws(p, end);
    if (p >= end || *p != '{')
        return NULL;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1;
    for (;;) {
        char key[24];
        p = scan_string(p, end, key, sizeof(key));
        if (!p)
            return NULL;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            return NULL;
        p = restore_field(t, skip, key, skip_ws(p + 1, end), end);
        if (!p)
            return NULL;
        p = skip_ws(p, end);
        if (p < end && *p == '}')
            return p + 1;
        if (p >= end || *p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

static const char *restore_field(tide_trainer_t *t, tide_trainer_skip_t *skip, const char *key,
                                 const char *p, const char *end)
{
    bool is_int;
    int64_t v = 0;

    if (p >= end)
        return NULL;
    if (!skip && !strcmp(key, "skipped") && *p == '[') {
        p = skip_ws(p + 1, end);
        if (p < end && *p == ']')
            return p + 1;
        for (;;) {
            tide_trainer_skip_t dummy, *k = &dummy;
            if (t->rs_n_skips < TIDE_TRAINER_MAX_SKIPS)
                k = &t->rs_skips[t->rs_n_skips];
            memset(k, 0, sizeof(*k));
            k->step = -1;
            p = restore_object(t, k, p, end);
            if (!p)
                return NULL;
            if (k != &dummy)
                t->rs_n_skips++;
            p = skip_ws(p, end);
            if (p < end && *p == ']')
                return p + 1;
            if (p >= end || *p != ',')
                return NULL;
            p = skip_ws(p + 1, end);
        }
    }
    if (*p == '"') {
        char *dst = NULL;
        size_t size = 0;
        if (skip && !strcmp(key, "tier")) {
            dst = skip->tier;
            size = sizeof(skip->tier);
        } else if (skip && !strcmp(key, "reason")) {
            dst = skip->reason;
            size = sizeof(skip->reason);
        } else if (!skip && !strcmp(key, "path")) {
            dst = t->rs_path;
            size = sizeof(t->rs_path);
        } else if (!skip && !strcmp(key, "tier")) {
            dst = t->rs_tier;
            size = sizeof(t->rs_tier);
        } else if (!skip && !strcmp(key, "reason")) {
            dst = t->rs_reason;
            size = sizeof(t->rs_reason);
        }
        p = scan_string(p, end, dst, size);
        if (p && dst)
            unescape(dst);
        return p;
    }
    p = scan_scalar(p, end, &is_int, &v);
    if (p && is_int && !strcmp(key, "step")) {
        if (skip)
            skip->step = v;
        else
            t->rs_step = v;
    }
    return p;
}

/* The answer to a waiting restore. */
static void apply_restore(tide_trainer_t *t, const char *line, size_t len)
{
    if (!t->rs_waiting || t->rs_result != 1)
        return;
    t->rs_step = -1;
    t->rs_path[0] = t->rs_tier[0] = t->rs_reason[0] = '\0';
    t->rs_n_skips = 0;
    if (!restore_object(t, NULL, line, line + len)) {
        say("tide_trainer: the tide worker sent a restore answer this SDK cannot read");
        t->rs_result = -EPROTO;
        return;
    }
    t->rs_result = t->rs_step >= 0 && t->rs_path[0] ? 0 : -ENOENT;
}

/* Applies one line from the worker; returns 1 when it was a command, else 0. */
static int apply_line(tide_trainer_t *t, const char *line, size_t len)
{
    static const char restore_op[] = "{\"op\":\"restore\"";
    wmsg_t m;

    /* The one worker message with nested values: its op comes first (docs/trainer-api.md). */
    if (len >= sizeof(restore_op) - 1 && !memcmp(line, restore_op, sizeof(restore_op) - 1)) {
        apply_restore(t, line, len);
        return 0;
    }
    if (!parse_wmsg(line, len, &m))
        return 0;
    if (!strcmp(m.op, "checkpoint_now") && m.has_id) {
        t->ckpt_pending = true;
        t->ckpt_id = m.id;
        t->ckpt_deadline = m.has_deadline ? m.deadline : 0;
        return 1;
    }
    if (!strcmp(m.op, "stop_after_step") && m.has_step) {
        if (!t->stop_set || m.step < t->stop_step)
            t->stop_step = m.step;
        t->stop_set = true;
        return 1;
    }
    if (!strcmp(m.op, "task") || !strcmp(m.op, "no_task")) {
        apply_task_reply(t, &m, !strcmp(m.op, "task"));
        return 0;
    }
    if (!strcmp(m.op, "welcome")) {
        t->welcomed = true;
        return 0;
    }
    if (!strcmp(m.op, "error")) {
        if (!t->welcomed && (!strcmp(m.ref, "hello") || !m.ref[0])) {
            t->refused = true;
            snprintf(t->refusal, sizeof(t->refusal), "%s: %s", m.code, m.message);
        } else if (!strcmp(m.ref, "restore") && t->rs_waiting && t->rs_result == 1) {
            snprintf(t->rs_reason, sizeof(t->rs_reason), "%.31s: %.200s", m.code, m.message);
            t->rs_result = !strcmp(m.code, "unknown_op") ? -ENOTSUP : -EPROTO;
        } else if (apply_task_error(t, &m)) {
            /* handled */
        } else if (t->errors_seen++ < MAX_ERRORS_SHOWN)
            say("tide_trainer: the tide worker rejected a %s report: %s: %s",
                m.ref[0] ? m.ref : "", m.code, m.message);
    }
    return 0;
}

/* Reads what is there without blocking and applies complete lines. Returns the number of
 * commands applied, or -1 when the connection is (now) lost. */
static int read_commands(tide_trainer_t *t)
{
    int applied = 0;

    if (t->fd < 0)
        return -1;
    for (;;) {
        ssize_t n = recv(t->fd, t->rbuf + t->rlen, sizeof(t->rbuf) - t->rlen, MSG_DONTWAIT);
        size_t start = 0, i;

        if (n == 0) {
            lose(t, "the worker closed it");
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return applied;
            lose(t, strerror(errno));
            return -1;
        }
        for (i = t->rlen; i < t->rlen + (size_t)n; i++) {
            if (t->rbuf[i] != '\n')
                continue;
            if (!t->rdiscard)
                applied += apply_line(t, t->rbuf + start, i - start);
            t->rdiscard = false;
            start = i + 1;
        }
        t->rlen += (size_t)n;
        if (start > 0) {
            memmove(t->rbuf, t->rbuf + start, t->rlen - start);
            t->rlen -= start;
        }
        if (t->rlen == sizeof(t->rbuf)) { /* a line longer than any worker message: skip it */
            t->rdiscard = true;
            t->rlen = 0;
        }
    }
}

/* --- sending ---------------------------------------------------------------------------------- */

/* Sends what it can of buf without blocking; returns bytes sent, or -1 when the connection is
 * lost (the handle is then a no-op). */
static ssize_t send_some(tide_trainer_t *t, const char *buf, size_t len)
{
    for (;;) {
        ssize_t n = send(t->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        lose(t, strerror(errno));
        return -1;
    }
}

/* Sends the rest of a partly sent line; with a deadline it waits for it (poll), else not.
 * Returns 0 when nothing is pending any more, 1 when some is, -1 when the connection is lost. */
static int flush_pending(tide_trainer_t *t, int64_t deadline)
{
    while (t->pending_len > 0) {
        ssize_t n = send_some(t, t->pending, t->pending_len);
        if (n < 0)
            return -1;
        memmove(t->pending, t->pending + n, t->pending_len - (size_t)n);
        t->pending_len -= (size_t)n;
        if (t->pending_len == 0)
            break;
        if (n == 0) {
            struct pollfd pfd = {.fd = t->fd, .events = POLLOUT};
            int64_t left = deadline - now_ms();
            if (deadline <= 0 || left <= 0)
                return 1;
            if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR) {
                lose(t, strerror(errno));
                return -1;
            }
        }
    }
    free(t->pending);
    t->pending = NULL;
    return 0;
}

/* Sends one whole line. A report that may be lost without harm (must == false: step, phase) is
 * dropped when the socket is full; the others wait up to MUST_SEND_TIMEOUT_MS. A partly sent line
 * is always finished later, so the stream never carries half a line followed by another. */
static void send_line(tide_trainer_t *t, const char *line, size_t len, bool must)
{
    int64_t deadline = must ? now_ms() + MUST_SEND_TIMEOUT_MS : 0;
    ssize_t n;
    int rc;

    if (t->fd < 0)
        return;
    rc = flush_pending(t, deadline);
    if (rc < 0)
        return;
    if (rc > 0) {
        t->dropped++;
        if (must)
            say("tide_trainer: the tide worker does not read its socket: a report was dropped");
        return;
    }
    n = send_some(t, line, len);
    if (n < 0 || (size_t)n == len)
        return;
    if (n == 0 && !must) {
        t->dropped++;
        return;
    }
    t->pending = malloc(len - (size_t)n);
    if (!t->pending) {
        lose(t, "out of memory");
        return;
    }
    memcpy(t->pending, line + n, len - (size_t)n);
    t->pending_len = len - (size_t)n;
    if (must && flush_pending(t, deadline) > 0)
        say("tide_trainer: the tide worker does not read its socket: a report is delayed");
}

/* Sends a line that must not be dropped (tasks, next_task) after whatever is pending; what does
 * not go out now stays pending, for flush_pending or the caller's wait to finish. Returns 0, or -1
 * when the connection is lost (then the line did not reach the worker whole). */
static int queue_line(tide_trainer_t *t, const char *line, size_t len)
{
    char *grown;

    if (t->fd < 0 || flush_pending(t, 0) < 0)
        return -1;
    if (t->pending_len == 0) {
        ssize_t n = send_some(t, line, len);
        if (n < 0)
            return -1;
        line += n;
        len -= (size_t)n;
        if (len == 0)
            return 0;
    }
    grown = realloc(t->pending, t->pending_len + len);
    if (!grown) {
        lose(t, "out of memory");
        return -1;
    }
    memcpy(grown + t->pending_len, line, len);
    t->pending = grown;
    t->pending_len += len;
    return 0;
}

/* Appends s JSON-escaped (without quotes) to out[*n..size); false when it does not fit. Bytes
 * >= 0x80 are copied as they are (the worker checks them). */
static bool put_escaped(char *out, size_t size, size_t *n, const char *s)
{
    static const char hex[] = "0123456789abcdef";

    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[6];
        size_t k = 0;

        if (c == '"' || c == '\\') {
            esc[k++] = '\\';
            esc[k++] = (char)c;
        } else if (c == '\n') {
            esc[k++] = '\\';
            esc[k++] = 'n';
        } else if (c == '\t') {
            esc[k++] = '\\';
            esc[k++] = 't';
        } else if (c == '\r') {
            esc[k++] = '\\';
            esc[k++] = 'r';
        } else if (c < 0x20) {
            memcpy(esc, "\\u00", 4);
            k = 4;
            esc[k++] = hex[c >> 4];
            esc[k++] = hex[c & 15];
        } else {
            esc[k++] = (char)c;
        }
        if (size - *n <= k)
            return false;
        memcpy(out + *n, esc, k);
        *n += k;
    }
    out[*n] = '\0';
    return true;
}

/* --- open / close ----------------------------------------------------------------------------- */

static bool env_int(const char *name, int64_t *v)
{
    const char *s = getenv(name);
    char *end;
    long long x;

    if (!s || !*s)
        return false;
    errno = 0;
    x = strtoll(s, &end, 10);
    if (errno || *end || x < 0)
        return false;
    *v = x;
    return true;
}

static int connect_to(const char *path)
{
    struct sockaddr_un sa;
    struct timeval tv = {.tv_sec = HELLO_TIMEOUT_MS / 1000};
    int fd, rc;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* bounds a connect to a worker whose backlog is full */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    do
        rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        int e = errno;
        close(fd);
        errno = (e == EINPROGRESS || e == EAGAIN) ? ETIMEDOUT : e;
        return -1;
    }
    /* from here on nothing blocks: reads and sends use MSG_DONTWAIT, waits use poll() */
    return fd;
}

tide_trainer_t *tide_trainer_open(void)
{
    const char *path = getenv("TIDE_AGENT_SOCK");
    const char *job = getenv("TIDE_JOB_ID");
    const char *rank_var;
    tide_trainer_t *t = NULL;
    int64_t generation, rank, deadline;
    char line[1024];
    size_t n;

    if (!path || !*path)
        return NULL;
    if (!job || !*job) {
        say("tide_trainer: TIDE_AGENT_SOCK is set but TIDE_JOB_ID is not: running without tide");
        return NULL;
    }
    /* TIDE_RANK names a burst rank too, which has no RANK (docs/trainer-api.md); a tide without
     * it sets RANK only. */
    rank_var = getenv("TIDE_RANK") && *getenv("TIDE_RANK") ? "TIDE_RANK" : "RANK";
    if (!env_int("TIDE_GENERATION", &generation) || !env_int(rank_var, &rank)) {
        say("tide_trainer: TIDE_GENERATION and %s must be integers >= 0: running without tide",
            rank_var);
        return NULL;
    }
    n = (size_t)snprintf(line, sizeof(line), "{\"op\":\"hello\",\"v\":1,\"job\":\"");
    if (!put_escaped(line, sizeof(line), &n, job)) {
        say("tide_trainer: TIDE_JOB_ID is too long: running without tide");
        return NULL;
    }
    n += (size_t)snprintf(line + n, sizeof(line) - n,
                          "\",\"generation\":%" PRId64 ",\"rank\":%" PRId64
                          ",\"pid\":%ld,\"sdk\":\"" SDK_NAME "\"}\n",
                          generation, rank, (long)getpid());
    if (n >= sizeof(line)) {
        say("tide_trainer: TIDE_JOB_ID is too long: running without tide");
        return NULL;
    }
    t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->stop_step = INT64_MAX;
    t->fd = connect_to(path);
    if (t->fd < 0) {
        say("tide_trainer: connect %s: %s: running without tide", path, strerror(errno));
        goto error;
    }
    send_line(t, line, n, true);
    if (t->fd < 0 || t->pending_len) {
        say("tide_trainer: hello to %s failed: running without tide", path);
        goto error;
    }
    deadline = now_ms() + HELLO_TIMEOUT_MS;
    while (!t->welcomed && !t->refused) {
        struct pollfd pfd = {.fd = t->fd, .events = POLLIN};
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            say("tide_trainer: no welcome from %s within %d s: running without tide", path,
                HELLO_TIMEOUT_MS / 1000);
            goto error;
        }
        if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR) {
            say("tide_trainer: poll: %s: running without tide", strerror(errno));
            goto error;
        }
        if (read_commands(t) < 0) {
            say("tide_trainer: the tide worker closed the connection before its welcome: running "
                "without tide");
            goto error;
        }
    }
    if (t->refused) {
        say("tide_trainer: the tide worker refused the hello (%s): running without tide",
            t->refusal);
        goto error;
    }
    return t;
error:
    tide_trainer_close(t);
    return NULL;
}

void tide_trainer_close(tide_trainer_t *t)
{
    if (!t)
        return;
    if (t->fd >= 0) {
        flush_pending(t, t->pending_len ? now_ms() + 1000 : 0);
        if (t->fd >= 0)
            close(t->fd);
    }
    free(t->pending);
    free(t);
}

/* --- reports and commands --------------------------------------------------------------------- */

/* Formats a double as JSON whatever LC_NUMERIC says (a ',' decimal point becomes '.'). */
static void fix_decimal_point(char *s)
{
    for (; *s; s++)
        if (*s == ',')
            *s = '.';
}

static void warn_args(tide_trainer_t *t, const char *what)
{
    if (t->warned_args)
        return;
    t->warned_args = true;
    say("tide_trainer: %s: report not sent (further ones are dropped silently)", what);
}

/* One step line; recompute < 0 leaves recompute_flops out. */
static void step_line(tide_trainer_t *t, int64_t step, tide_phase_t next, double flops,
                      double recompute, int64_t samples, int64_t tokens)
{
    const char *phase = tide_phase_name(next);
    char num[32], rnum[64], line[320];
    int n;

    if (!t || t->fd < 0)
        return;
    if (step < 0 || samples < 0 || tokens < 0 || step > MAX_EXACT || samples > MAX_EXACT ||
        tokens > MAX_EXACT || !phase) {
        warn_args(t, "step, samples and tokens must be integers from 0 to 2^53 - 1 and the phase "
                     "valid");
        goto done;
    }
    if (!isfinite(flops) || flops < 0 || !isfinite(recompute)) {
        warn_args(t, "flops and recompute_flops must be finite and >= 0");
        goto done;
    }
    snprintf(num, sizeof(num), "%.17g", flops == 0 ? 0.0 : flops);
    fix_decimal_point(num);
    rnum[0] = '\0';
    if (recompute >= 0) {
        char r[32];
        snprintf(r, sizeof(r), "%.17g", recompute == 0 ? 0.0 : recompute);
        fix_decimal_point(r);
        snprintf(rnum, sizeof(rnum), ",\"recompute_flops\":%s", r);
    }
    n = snprintf(line, sizeof(line),
                 "{\"op\":\"step\",\"step\":%" PRId64 ",\"phase\":\"%s\",\"flops\":%s%s,\"samples\":%" PRId64
                 ",\"tokens\":%" PRId64 "}\n",
                 step, phase, num, rnum, samples, tokens);
    send_line(t, line, (size_t)n, false);
done:
    read_commands(t);
}

void tide_trainer_step(tide_trainer_t *t, int64_t step, tide_phase_t next, double flops,
                       int64_t samples, int64_t tokens)
{
    step_line(t, step, next, flops, -1, samples, tokens);
}

void tide_trainer_step_hw(tide_trainer_t *t, int64_t step, tide_phase_t next, double flops,
                          double recompute_flops, int64_t samples, int64_t tokens)
{
    if (recompute_flops < 0) {
        if (t && t->fd >= 0)
            warn_args(t, "recompute_flops must be finite and >= 0");
        return;
    }
    step_line(t, step, next, flops, recompute_flops, samples, tokens);
}

void tide_trainer_phase(tide_trainer_t *t, tide_phase_t phase)
{
    const char *name = tide_phase_name(phase);
    char line[64];
    int n;

    if (!t || t->fd < 0)
        return;
    if (!name) {
        warn_args(t, "unknown phase");
        return;
    }
    n = snprintf(line, sizeof(line), "{\"op\":\"phase\",\"phase\":\"%s\"}\n", name);
    send_line(t, line, (size_t)n, false);
    read_commands(t);
}

/* load (docs/trainer-api.md): queued whole, never dropped (the state it sets lasts until the next
 * one), and never waited for. */
void tide_trainer_load_phase(tide_trainer_t *t, bool high)
{
    static const char hi[] = "{\"op\":\"load\",\"high\":true}\n";
    static const char lo[] = "{\"op\":\"load\",\"high\":false}\n";

    if (!t || t->fd < 0)
        return;
    if (queue_line(t, high ? hi : lo, high ? sizeof(hi) - 1 : sizeof(lo) - 1) < 0)
        return;
    read_commands(t);
}

bool tide_trainer_is_burst(void)
{
    const char *v = getenv("TIDE_BURST");

    return v && strcmp(v, "1") == 0;
}

static bool hex64(const char *s)
{
    size_t i;

    for (i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
              (s[i] >= 'A' && s[i] <= 'F')))
            return false;
    return s[64] == '\0';
}

void tide_trainer_checkpoint(tide_trainer_t *t, int64_t step, const char *path, uint64_t bytes,
                             const char *sha256_hex, int64_t request)
{
    char sha[65] = "";
    char *line = NULL;
    size_t size, n;

    if (!t || t->fd < 0)
        return;
    read_commands(t);
    if (t->fd < 0)
        return;
    if (!path)
        path = "";
    if (step < 0 || request < 0 || step > MAX_EXACT || request > MAX_EXACT ||
        bytes > (uint64_t)MAX_EXACT) {
        say("tide_trainer: checkpoint report not sent: step, bytes and request must be integers "
            "from 0 to 2^53 - 1");
        return;
    }
    if (bytes > 0) {
        if (!sha256_hex || !hex64(sha256_hex)) {
            say("tide_trainer: checkpoint report not sent: sha256 must be 64 hex digits");
            return;
        }
        for (n = 0; n < 64; n++)
            sha[n] = (char)(sha256_hex[n] | 0x20); /* lowercase */
        sha[64] = '\0';
    }
    size = 256 + 6 * strlen(path);
    line = malloc(size);
    if (!line)
        return;
    n = (size_t)snprintf(line, size, "{\"op\":\"checkpoint\",\"step\":%" PRId64 ",\"path\":\"",
                         step);
    put_escaped(line, size, &n, path); /* fits: size covers the worst case */
    n += (size_t)snprintf(line + n, size - n,
                          "\",\"bytes\":%" PRIu64 ",\"sha256\":\"%s\",\"request\":%" PRId64 "}\n",
                          bytes, sha, request);
    if (n >= 65536) {
        say("tide_trainer: checkpoint report not sent: path too long");
        goto done;
    }
    send_line(t, line, n, true);
    if (request != 0 && t->ckpt_pending && t->ckpt_id == request)
        t->ckpt_pending = false;
done:
    free(line);
}

bool tide_trainer_checkpoint_requested(tide_trainer_t *t, int64_t *request,
                                       int64_t *deadline_unix_ms)
{
    if (!t)
        return false;
    read_commands(t);
    if (!t->ckpt_pending)
        return false;
    if (request)
        *request = t->ckpt_id;
    if (deadline_unix_ms)
        *deadline_unix_ms = t->ckpt_deadline;
    return true;
}

bool tide_trainer_should_stop(tide_trainer_t *t, int64_t step)
{
    if (!t)
        return false;
    read_commands(t);
    return t->stop_set && t->stop_step <= step; /* any step, INT64_MAX too, once a stop arrived */
}

int tide_trainer_poll(tide_trainer_t *t)
{
    if (!t)
        return 0;
    return read_commands(t);
}

/* --- tasks (docs/work-stealing.md) ----------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* NULL when the arguments make a valid declaration, else what is wrong. sorted: n scratch slots. */
static const char *tasks_args_error(int64_t step, int kind, const uint64_t *ids, size_t n,
                                    uint64_t total, uint64_t *sorted)
{
    if (step < 0 || step > MAX_EXACT)
        return "step must be an integer from 0 to 2^53 - 1";
    if (kind != TIDE_TRAINER_TASK_MEMBER && kind != TIDE_TRAINER_TASK_DETACHED)
        return "kind must be TIDE_TRAINER_TASK_MEMBER or TIDE_TRAINER_TASK_DETACHED";
    if (n > TIDE_TASKS_MAX_SHARE)
        return "a rank declares at most 4096 ids per step";
    if (n > 0 && !ids)
        return "ids is NULL";
    if (total < 1 || total > TIDE_TASKS_MAX_TOTAL || total < n)
        return "total must be from the number of ids (and 1) to 1048576";
    for (size_t i = 0; i < n; i++) {
        if (ids[i] > (uint64_t)MAX_EXACT)
            return "ids must be integers from 0 to 2^53 - 1";
        sorted[i] = ids[i];
    }
    if (n > 1) {
        qsort(sorted, n, sizeof(*sorted), cmp_u64);
        for (size_t i = 1; i < n; i++)
            if (sorted[i] == sorted[i - 1])
                return "ids must be distinct";
    }
    return NULL;
}

int tide_trainer_tasks_begin(tide_trainer_t *t, tide_task_iter_t *it, int64_t step,
                             tide_trainer_task_kind_t kind, const uint64_t *ids, size_t n,
                             uint64_t total)
{
    /* n ids of at most 16 digits and a comma, plus the fixed fields */
    size_t size = (n <= TIDE_TASKS_MAX_SHARE ? n : 0) * 17 + 160, len;
    uint64_t *sorted = NULL;
    const char *bad;
    char *line = NULL;
    int rc = 0;

    if (!it) {
        say("tide_trainer: tasks of step %" PRId64 " not declared: no iterator", step);
        return -EINVAL;
    }
    memset(it, 0, sizeof(*it));
    it->step = step;
    it->kind = (int)kind;
    it->ids = ids;
    it->n = n;
    sorted = malloc(sizeof(*sorted) * (n <= TIDE_TASKS_MAX_SHARE && n ? n : 1));
    line = malloc(size);
    if (!sorted || !line) {
        say("tide_trainer: tasks of step %" PRId64 " not declared: out of memory", step);
        rc = -ENOMEM;
        goto error;
    }
    bad = tasks_args_error(step, (int)kind, ids, n, total, sorted);
    if (bad) {
        say("tide_trainer: tasks of step %" PRId64 " not declared: %s", step, bad);
        rc = -EINVAL;
        goto error;
    }
    if (!t || t->fd < 0 || t->tasks_unsupported)
        goto done; /* local: the rank's own ids, in order */
    len = (size_t)snprintf(line, size,
                           "{\"op\":\"tasks\",\"step\":%" PRId64
                           ",\"kind\":\"%s\",\"total\":%" PRIu64 ",\"ids\":[",
                           step, task_kind_name((int)kind), total);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(line + len, size - len, "%s%" PRIu64, i ? "," : "", ids[i]);
    len += (size_t)snprintf(line + len, size - len, "]}\n");
    if (len > LINE_MAX_BYTES) {
        say("tide_trainer: tasks of step %" PRId64 " not declared: %zu ids this large do not fit "
            "one line of %d bytes (use smaller ids)",
            step, n, LINE_MAX_BYTES);
        rc = -EINVAL;
        goto error;
    }
    /* When the connection is lost before the line went out whole, the worker (which drops a
     * partial line) holds nothing of this pool: iterating locally is exact then. */
    t->tasks_refused = false;
    if (queue_line(t, line, len) < 0)
        goto done;
    t->tasks_sent = true;
    if (flush_pending(t, now_ms() + TASKS_SEND_TIMEOUT_MS) < 0)
        goto done;
    if (t->pending_len)
        say("tide_trainer: the tide worker is slow to read its socket: the tasks of step %" PRId64
            " are delayed",
            step);
    it->t = t;
    goto done;
error:
    it->error = rc;
    it->done = true;
done:
    free(line);
    free(sorted);
    return rc;
}

int tide_trainer_tasks_join(tide_trainer_t *t, tide_task_iter_t *it, int64_t step, uint64_t total)
{
    /* An empty share: outside tide there is nothing to hand out; under tide the worker steals for
     * it as for any rank whose share is done (docs/work-stealing.md). */
    return tide_trainer_tasks_begin(t, it, step, TIDE_TRAINER_TASK_DETACHED, NULL, 0, total);
}

/* Waits (no timeout) for the reply to the next_task just queued, finishing its sending and
 * applying commands that arrive meanwhile. Returns tw_result's value, or -EPIPE. */
static int wait_task_reply(tide_trainer_t *t)
{
    for (;;) {
        struct pollfd pfd;
        int rc = 0;

        if (t->fd >= 0 && t->pending_len)
            rc = flush_pending(t, 0);
        if (rc >= 0)
            rc = read_commands(t);
        if (t->tw_result != TW_NONE)
            return t->tw_result;
        if (rc < 0 || t->fd < 0)
            return -EPIPE;
        pfd.fd = t->fd;
        pfd.events = (short)(POLLIN | (t->pending_len ? POLLOUT : 0));
        pfd.revents = 0;
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR) {
            lose(t, strerror(errno));
            return -EPIPE;
        }
    }
}

static int next_local(tide_task_iter_t *it, uint64_t *id)
{
    if (it->next >= it->n) {
        it->done = true;
        it->has_current = false;
        return 0;
    }
    *id = it->ids[it->next++];
    it->current = *id;
    it->has_current = true;
    return 1;
}

int tide_trainer_next_task(tide_task_iter_t *it, uint64_t *id)
{
    tide_trainer_t *t;
    char line[160];
    int len, rc;

    if (!it || !id)
        return -EINVAL;
    if (it->error)
        return it->error;
    if (it->done)
        return 0;
    t = it->t;
    if (!t)
        return next_local(it, id);
    if (t->tasks_unsupported && !it->has_current) {
        it->t = NULL; /* the worker rejected the declaration as an unknown op: it holds nothing */
        return next_local(it, id);
    }
    if (t->tasks_refused) {
        t->tasks_refused = false;
        rc = -EPROTO;
        goto failed;
    }
    if (t->fd < 0) {
        rc = -EPIPE;
        goto failed;
    }
    len = snprintf(line, sizeof(line), "{\"op\":\"next_task\",\"step\":%" PRId64 ",\"kind\":\"%s\"",
                   it->step, task_kind_name(it->kind));
    if (it->has_current)
        len += snprintf(line + len, sizeof(line) - (size_t)len, ",\"done\":%" PRIu64, it->current);
    len += snprintf(line + len, sizeof(line) - (size_t)len, "}\n");
    if (queue_line(t, line, (size_t)len) < 0) {
        rc = -EPIPE;
        goto failed;
    }
    t->tw_waiting = true;
    t->tw_step = it->step;
    t->tw_kind = it->kind;
    t->tw_result = TW_NONE;
    rc = wait_task_reply(t);
    t->tw_waiting = false;
    t->tw_result = TW_NONE;
    if (rc == 1) {
        *id = t->tw_id;
        it->current = t->tw_id;
        it->has_current = true;
        return 1;
    }
    if (rc == 0) {
        it->done = true;
        it->has_current = false;
        return 0;
    }
    if (rc == TW_UNSUPPORTED) {
        if (!it->has_current) {
            it->t = NULL;
            return next_local(it, id);
        }
        rc = -EPROTO; /* the worker handed a task, then forgot the op: nothing is certain */
    }
failed:
    if (rc == -EPIPE)
        say("tide_trainer: the connection to the tide worker was lost during the tasks of step "
            "%" PRId64 ": which of them ran elsewhere is unknown",
            it->step);
    it->error = rc;
    return rc;
}

/* --- checkpoint tiers (docs/trainer-api.md, "Checkpoint tiers") ------------------------------- */

/* mkdir -p; returns 0 or -errno. */
static int make_dirs(char *path)
{
    for (char *q = path + 1;; q++) {
        char c = *q;
        if (c != '/' && c != '\0')
            continue;
        *q = '\0';
        if (mkdir(path, 0700) < 0 && errno != EEXIST) {
            int e = errno;
            *q = c;
            return -e;
        }
        *q = c;
        if (!c)
            return 0;
    }
}

int tide_trainer_ckpt_path(tide_trainer_t *t, int64_t step, char *buf, size_t len)
{
    const char *dir = getenv("TIDE_CKPT_DIR");
    const char *rank_var = getenv("TIDE_RANK") && *getenv("TIDE_RANK") ? "TIDE_RANK" : "RANK";
    int64_t rank;
    int n;

    (void)t; /* the layout needs only the environment */
    if (!buf || step < 0)
        return -EINVAL;
    if (!dir || dir[0] != '/')
        return -ENOENT;
    if (!env_int(rank_var, &rank))
        return -EINVAL;
    n = snprintf(buf, len, "%s/step-%" PRId64 "/rank-%" PRId64, dir, step, rank);
    if (n < 0 || (size_t)n >= len)
        return -ERANGE;
    return make_dirs(buf);
}

int tide_trainer_restore(tide_trainer_t *t, int64_t *step, char *path, size_t len)
{
    static const char line[] = "{\"op\":\"restore\"}\n";
    int64_t deadline = now_ms() + RESTORE_TIMEOUT_MS;

    if (!t || t->fd < 0)
        return -ENOTCONN;
    t->rs_waiting = true;
    t->rs_result = 1;
    t->rs_n_skips = 0;
    t->rs_tier[0] = t->rs_reason[0] = '\0';
    if (queue_line(t, line, sizeof(line) - 1) < 0) {
        t->rs_waiting = false;
        return -EPIPE;
    }
    for (;;) {
        struct pollfd pfd;
        int64_t left = deadline - now_ms();
        int rc = 0;

        if (t->fd >= 0 && t->pending_len)
            rc = flush_pending(t, 0);
        if (rc >= 0)
            rc = read_commands(t);
        if (t->rs_result != 1)
            break;
        if (rc < 0 || t->fd < 0) {
            t->rs_result = -EPIPE;
            break;
        }
        if (left <= 0) {
            t->rs_result = -ETIMEDOUT;
            break;
        }
        pfd.fd = t->fd;
        pfd.events = (short)(POLLIN | (t->pending_len ? POLLOUT : 0));
        pfd.revents = 0;
        if (poll(&pfd, 1, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR) {
            lose(t, strerror(errno));
            t->rs_result = -EPIPE;
            break;
        }
    }
    t->rs_waiting = false;
    if (t->rs_result == 0) {
        if (strlen(t->rs_path) >= len) {
            t->rs_result = -ERANGE;
        } else {
            if (step)
                *step = t->rs_step;
            if (path)
                snprintf(path, len, "%s", t->rs_path);
        }
    }
    return t->rs_result;
}

const char *tide_trainer_restore_tier(const tide_trainer_t *t)
{
    return t && t->rs_result == 0 ? t->rs_tier : "";
}

const char *tide_trainer_restore_reason(const tide_trainer_t *t)
{
    return t ? t->rs_reason : "";
}

size_t tide_trainer_restore_skipped(const tide_trainer_t *t, const tide_trainer_skip_t **skips)
{
    if (skips)
        *skips = t ? t->rs_skips : NULL;
    return t ? t->rs_n_skips : 0;
}

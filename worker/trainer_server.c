/* The worker's trainer socket (trainer_server.h). Invariants: a connection is bound to at most one
 * rank entry (after its hello) and sits on that rank's conns list; a rank entry exists exactly
 * while the agent says the rank runs, and so does its entry in the task deques; a connection the
 * deques hold as a next_task waiter is open (closing it makes them forget it); one shared read
 * buffer serves every connection (reads are handled to completion in the read callback), so a step
 * report allocates nothing. */
#include "trainer_server.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "buf.h"
#include "clock.h"
#include "list.h"
#include "log.h"
#include "mfu.h"
#include "task_deque.h"
#include "xmalloc.h"

#define MAX_CONNS_DEFAULT 64
#define WRITE_BACKLOG_MAX (64 * 1024)
#define READ_BUF_SIZE     (64 * 1024)

typedef struct rank_entry {
    tide_list_t link; /* s->ranks */
    uint64_t id;
    char *job_id;
    int32_t generation;
    int32_t rank;
    uid_t uid;           /* the account it runs as: only its processes (or root's) may say hello */
    tide_list_t conns;   /* conn_t.rank_link of connections that said hello */
    bool sdk;            /* a hello was accepted once */
    int64_t last_step;   /* -1: none */
    uint64_t last_step_ns; /* uv_hrtime of the last step report */
    uint64_t added_ns;     /* uv_hrtime when the rank started: the first step's interval */
    tide_flops_window_t flops; /* achieved model FLOP/s (docs/metrics.md) */
    tide_flops_window_t hw;    /* hardware FLOP/s (model + recomputation), when reported */
    bool hw_reported;          /* a step report carried recompute_flops */
    /* commands to (re)send after a welcome */
    uint64_t ckpt_request;
    int64_t ckpt_deadline;
    int64_t stop_after; /* -1: none */
    int64_t resume_step; /* the newest step `restore` may answer; -1: any */
    /* what heartbeats carry */
    Tide__V1__RankProgress msg;
    Tide__V1__TrainerProgress progress;
} rank_entry_t;

typedef struct tide_trainer_conn {
    tide_list_t link;      /* s->conns */
    tide_list_t rank_link; /* rank->conns once bound */
    tide_trainer_server_t *s;
    uv_pipe_t pipe;
    rank_entry_t *rank;
    tide_trainer_lines_t lines;
    tide_trainer_msg_t msg;
    bool closing;
    bool attach; /* an attach was handed to ops.attach: no hello, only "exited" from now on */
    uint64_t restore_token; /* a restore waits for its answer; 0: none */
    void *data;
} conn_t;

struct tide_trainer_server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    char *path, *worker_id;
    size_t max_conns, n_conns;
    tide_trainer_server_ops_t ops;
    void *ud;
    tide_list_t conns, ranks;
    tide_task_deque_t *tasks; /* the ranks' task deques */
    double peak_flops;
    tide_buf_t out; /* message assembly */
    uint64_t rejected;
    uint64_t next_token; /* restore requests */
    int open_handles;
    bool freeing;
    char read_buf[READ_BUF_SIZE];
};

static void maybe_release(tide_trainer_server_t *s)
{
    if (s->freeing && s->open_handles == 0) {
        free(s->path);
        free(s->worker_id);
        tide_buf_free(&s->out);
        tide_task_deque_free(s->tasks);
        free(s);
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    tide_trainer_server_t *s = c->s;

    tide_trainer_lines_free(&c->lines);
    tide_trainer_msg_free(&c->msg);
    free(c);
    s->open_handles--;
    maybe_release(s);
}

static int64_t mono_ms(void)
{
    return (int64_t)(uv_hrtime() / 1000000);
}

static void conn_close(conn_t *c)
{
    if (c->closing)
        return;
    c->closing = true;
    if (c->attach && c->s->ops.attach_closed)
        c->s->ops.attach_closed(c->s->ud, c);
    /* A next_task it waits in is not answered any more; the task it was handed stays handed. */
    if (c->rank)
        tide_task_deque_forget_waiter(c->s->tasks, c->rank->id, c, mono_ms());
    tide_list_remove(&c->link);
    if (tide_list_linked(&c->rank_link))
        tide_list_remove(&c->rank_link);
    c->rank = NULL;
    c->s->n_conns--;
    uv_close((uv_handle_t *)&c->pipe, on_conn_closed);
}

static void on_write(uv_write_t *req, int status)
{
    (void)status;
    free(req);
}

/* Sends s->out (one or more lines) to c; closes c when its backlog is too large or the write
 * fails. */
static void conn_send(conn_t *c)
{
    tide_trainer_server_t *s = c->s;
    uv_write_t *req;
    uv_buf_t b;
    int rc;

    if (c->closing || s->out.len == 0)
        goto done;
    if (c->pipe.write_queue_size == 0) {
        b = uv_buf_init((char *)s->out.data, (unsigned)s->out.len);
        rc = uv_try_write((uv_stream_t *)&c->pipe, &b, 1);
        if (rc == (int)s->out.len)
            goto done;
        if (rc > 0)
            tide_buf_consume(&s->out, (size_t)rc);
        else if (rc != UV_EAGAIN) {
            conn_close(c);
            goto done;
        }
    }
    if (c->pipe.write_queue_size + s->out.len > WRITE_BACKLOG_MAX) {
        tide_warn("trainer connection does not read its socket: closing it");
        conn_close(c);
        goto done;
    }
    req = tide_xmalloc(sizeof(*req) + s->out.len);
    memcpy(req + 1, s->out.data, s->out.len);
    b = uv_buf_init((char *)(req + 1), (unsigned)s->out.len);
    if (uv_write(req, (uv_stream_t *)&c->pipe, &b, 1, on_write) < 0) {
        free(req);
        conn_close(c);
    }
done:
    tide_buf_reset(&s->out);
}

static void reject(conn_t *c, tide_trainer_err_t code, const char *message, const char *ref)
{
    tide_trainer_server_t *s = c->s;

    s->rejected++;
    if (c->rank)
        c->rank->progress.rejected_reports++;
    tide_debug("trainer message rejected (%s): %s", tide_trainer_err_name(code), message);
    tide_buf_reset(&s->out);
    tide_trainer_encode_error(&s->out, code, message, ref);
    conn_send(c);
}

static rank_entry_t *find_id(const tide_trainer_server_t *s, uint64_t id)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &s->ranks) {
        rank_entry_t *r = tide_list_entry(pos, rank_entry_t, link);
        if (r->id == id)
            return r;
    }
    return NULL;
}

static rank_entry_t *find_rank(const tide_trainer_server_t *s, const char *job_id,
                               int64_t generation, int64_t rank)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &s->ranks) {
        rank_entry_t *r = tide_list_entry(pos, rank_entry_t, link);
        if (r->generation == generation && r->rank == rank && strcmp(r->job_id, job_id) == 0)
            return r;
    }
    return NULL;
}

/* Queued commands for r, appended to s->out. */
static void encode_pending(tide_trainer_server_t *s, const rank_entry_t *r)
{
    if (r->ckpt_request)
        tide_trainer_encode_checkpoint_now(&s->out, (int64_t)r->ckpt_request, r->ckpt_deadline);
    if (r->stop_after >= 0)
        tide_trainer_encode_stop_after_step(&s->out, r->stop_after);
}

static void broadcast(tide_trainer_server_t *s, rank_entry_t *r)
{
    tide_list_t *pos, *tmp;
    tide_buf_t line = TIDE_BUF_INIT;

    /* conn_send consumes s->out: keep a copy for each connection. */
    tide_buf_append(&line, s->out.data, s->out.len);
    tide_list_for_each_safe(pos, tmp, &r->conns) {
        conn_t *c = tide_list_entry(pos, conn_t, rank_link);
        tide_buf_reset(&s->out);
        tide_buf_append(&s->out, line.data, line.len);
        conn_send(c);
    }
    tide_buf_reset(&s->out);
    tide_buf_free(&line);
}

/* The connected process's uid from the kernel (SO_PEERCRED), or -1. */
static long long peer_uid(const conn_t *c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;

    if (uv_fileno((const uv_handle_t *)&c->pipe, &fd) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -1;
    return (long long)cred.uid;
}

static void handle_hello(conn_t *c, const tide_trainer_msg_t *m)
{
    tide_trainer_server_t *s = c->s;
    rank_entry_t *r;
    long long peer;
    char why[192];

    if (m->version != 1) {
        snprintf(why, sizeof(why), "v: protocol version %lld is not supported (1 is)",
                 (long long)m->version);
        reject(c, TIDE_TRAINER_ERR_BAD_FIELD, why, "hello");
        return;
    }
    if (c->rank) {
        reject(c, TIDE_TRAINER_ERR_BAD_FIELD, "op: this connection already said hello", "hello");
        return;
    }
    r = find_rank(s, m->job, m->generation, m->rank);
    if (!r) {
        snprintf(why, sizeof(why), "job %.64s generation %lld rank %lld does not run on this worker",
                 m->job, (long long)m->generation, (long long)m->rank);
        reject(c, TIDE_TRAINER_ERR_UNKNOWN_RANK, why, "hello");
        return;
    }
    peer = peer_uid(c);
    if (peer != 0 && peer != (long long)r->uid) {
        snprintf(why, sizeof(why), "job %.64s rank %lld runs as uid %u; this process is uid %lld",
                 m->job, (long long)m->rank, (unsigned)r->uid, peer);
        reject(c, TIDE_TRAINER_ERR_UNKNOWN_RANK, why, "hello");
        return;
    }
    c->rank = r;
    tide_list_push_back(&r->conns, &c->rank_link);
    if (!r->sdk)
        tide_info("job %s rank %d uses the trainer SDK (%s, pid %lld)", r->job_id, r->rank,
                  m->sdk[0] ? m->sdk : "unnamed", (long long)m->pid);
    r->sdk = true;
    r->progress.sdk = true;
    tide_buf_reset(&s->out);
    tide_trainer_encode_welcome(&s->out, s->worker_id);
    encode_pending(s, r);
    conn_send(c);
}

static void handle_step(conn_t *c, const tide_trainer_msg_t *m)
{
    rank_entry_t *r = c->rank;
    Tide__V1__TrainerProgress *p = &r->progress;
    uint64_t now = uv_hrtime();
    double seconds;
    char why[192];

    if (m->step < r->last_step) {
        snprintf(why, sizeof(why), "step: %lld is below the last step reported (%lld)",
                 (long long)m->step, (long long)r->last_step);
        reject(c, TIDE_TRAINER_ERR_STEP_BACKWARDS, why, "step");
        return;
    }
    /* The step took at most the time since the previous report (or since the rank started): a
     * claim of more FLOPs than the GPU does in that time is refused, never folded into MFU. */
    seconds = (double)(now - (r->last_step >= 0 ? r->last_step_ns : r->added_ns)) / 1e9;
    /* With recomputation reported, what the hardware ran is flops + recompute_flops: that is what
     * the peak bounds. Both windows take the report or neither does. */
    if (m->recompute_flops >= 0) {
        tide_flops_window_t hw = r->hw;
        if (tide_flops_window_add(&hw, (int64_t)(now / 1000000), m->flops + m->recompute_flops,
                                  seconds, c->s->peak_flops) < 0) {
            snprintf(why, sizeof(why),
                     "recompute_flops: %.4g FLOP (model and recomputed) in %.3g s is more than "
                     "this GPU's peak of %.4g FLOP/s allows",
                     m->flops + m->recompute_flops, seconds, c->s->peak_flops);
            reject(c, TIDE_TRAINER_ERR_BAD_FIELD, why, "step");
            return;
        }
        r->hw = hw;
        r->hw_reported = true;
    }
    if (tide_flops_window_add(&r->flops, (int64_t)(now / 1000000), m->flops, seconds,
                              c->s->peak_flops) < 0) {
        snprintf(why, sizeof(why),
                 "flops: %.4g FLOP in %.3g s is more than this GPU's peak of %.4g FLOP/s allows",
                 m->flops, seconds, c->s->peak_flops);
        reject(c, TIDE_TRAINER_ERR_BAD_FIELD, why, "step");
        return;
    }
    if (r->last_step >= 0 && m->step > r->last_step)
        p->step_seconds = (double)(now - r->last_step_ns) / 1e9 / (double)(m->step - r->last_step);
    r->last_step = m->step;
    r->last_step_ns = now;
    p->step = m->step;
    p->phase = (Tide__V1__TrainerPhase)(m->phase + 1);
    p->step_flops = m->flops;
    p->samples = m->samples;
    p->tokens = m->tokens;
    p->steps_reported++;
    p->last_report_ms = tide_clock_wall_ms();
}

static void handle_checkpoint(conn_t *c, const tide_trainer_msg_t *m)
{
    tide_trainer_server_t *s = c->s;
    rank_entry_t *r = c->rank;

    if (m->request && (uint64_t)m->request == r->ckpt_request)
        r->ckpt_request = 0;
    tide_info("job %s rank %d saved a checkpoint of step %lld (%llu bytes%s%s)", r->job_id,
              r->rank, (long long)m->step, (unsigned long long)m->bytes, m->path[0] ? ", " : "",
              m->path);
    if (s->ops.checkpoint)
        s->ops.checkpoint(s->ud, r->job_id, r->generation, r->rank, m);
}

/* restore: the agent searches its tiers off the loop and answers by token. */
static void handle_restore(conn_t *c)
{
    tide_trainer_server_t *s = c->s;
    rank_entry_t *r = c->rank;

    if (!s->ops.restore) {
        reject(c, TIDE_TRAINER_ERR_UNKNOWN_OP, "op: restore is not served here", "restore");
        return;
    }
    if (c->restore_token) {
        reject(c, TIDE_TRAINER_ERR_BUSY, "op: a restore is already being answered", "restore");
        return;
    }
    c->restore_token = ++s->next_token;
    s->ops.restore(s->ud, c->restore_token, r->job_id, r->generation, r->rank, r->resume_step);
}

/* --- tasks (docs/work-stealing.md) --- */

/* task or no_task to the connection a deque answer names. */
static void answer(tide_trainer_server_t *s, const tide_task_answer_t *a)
{
    conn_t *w = a->waiter;

    if (!w)
        return;
    tide_buf_reset(&s->out);
    if (a->has_task)
        tide_trainer_encode_task(&s->out, a->step, (tide_trainer_kind_t)a->kind, a->id);
    else
        tide_trainer_encode_no_task(&s->out, a->step, (tide_trainer_kind_t)a->kind);
    conn_send(w);
}

static tide_trainer_err_t task_err(int rc)
{
    switch (rc) {
    case -EEXIST:
        return TIDE_TRAINER_ERR_TASK_CONFLICT;
    case -ENOENT:
        return TIDE_TRAINER_ERR_UNKNOWN_STEP;
    case -EINVAL:
        return TIDE_TRAINER_ERR_UNKNOWN_TASK;
    case -EBUSY:
        return TIDE_TRAINER_ERR_BUSY;
    default:
        return TIDE_TRAINER_ERR_UNKNOWN_RANK;
    }
}

static void handle_tasks(conn_t *c, const tide_trainer_msg_t *m)
{
    tide_trainer_server_t *s = c->s;
    tide_task_answer_t cut;
    tide_error_t err;
    int rc;

    tide_error_clear(&err);
    rc = tide_task_deque_declare(s->tasks, c->rank->id, (int)m->kind, m->step, m->ids, m->n_ids,
                                 (uint64_t)m->total, mono_ms(), &cut, &err);
    if (rc < 0) {
        reject(c, rc == -EINVAL ? TIDE_TRAINER_ERR_BAD_FIELD : task_err(rc), err.text, "tasks");
        return;
    }
    answer(s, &cut);
}

static void handle_next_task(conn_t *c, const tide_trainer_msg_t *m)
{
    tide_trainer_server_t *s = c->s;
    tide_error_t err;
    uint64_t id = 0;
    int rc;

    tide_error_clear(&err);
    rc = tide_task_deque_next(s->tasks, c->rank->id, (int)m->kind, m->step, m->done, c, mono_ms(),
                              &id, &err);
    if (rc < 0) {
        reject(c, task_err(rc), err.text, "next_task");
        return;
    }
    tide_buf_reset(&s->out);
    if (rc == TIDE_TASK_NEXT_TASK)
        tide_trainer_encode_task(&s->out, m->step, m->kind, id);
    else if (rc == TIDE_TASK_NEXT_NONE)
        tide_trainer_encode_no_task(&s->out, m->step, m->kind);
    conn_send(c); /* WAIT: nothing yet; a give answers */
}

static void handle_line(conn_t *c, const char *line, size_t len)
{
    char err[192];
    const char *ref = NULL;
    tide_trainer_err_t rc;

    rc = tide_trainer_decode(line, len, &c->msg, err, sizeof(err), &ref);
    if (rc != TIDE_TRAINER_OK) {
        reject(c, rc, err, ref);
        return;
    }
    if (c->attach) {
        if (c->msg.op == TIDE_TRAINER_OP_EXITED && c->s->ops.attach_exited)
            c->s->ops.attach_exited(c->s->ud, c, c->msg.status, c->msg.signal);
        else if (c->msg.op != TIDE_TRAINER_OP_EXITED)
            reject(c, TIDE_TRAINER_ERR_BAD_FIELD, "op: an attached connection only sends exited",
                   ref);
        return;
    }
    if (c->msg.op == TIDE_TRAINER_OP_ATTACH && !c->rank) {
        if (!c->s->ops.attach) {
            reject(c, TIDE_TRAINER_ERR_UNKNOWN_OP, "op: attach is not served here", ref);
            return;
        }
        c->attach = true;
        c->s->ops.attach(c->s->ud, c, &c->msg);
        return;
    }
    if (c->msg.op == TIDE_TRAINER_OP_HELLO) {
        handle_hello(c, &c->msg);
        return;
    }
    if (!c->rank) {
        reject(c, TIDE_TRAINER_ERR_NOT_HELLO, "op: say hello first", ref);
        return;
    }
    switch (c->msg.op) {
    case TIDE_TRAINER_OP_STEP:
        handle_step(c, &c->msg);
        break;
    case TIDE_TRAINER_OP_PHASE:
        c->rank->progress.phase = (Tide__V1__TrainerPhase)(c->msg.phase + 1);
        break;
    case TIDE_TRAINER_OP_CHECKPOINT:
        handle_checkpoint(c, &c->msg);
        break;
    case TIDE_TRAINER_OP_TASKS:
        handle_tasks(c, &c->msg);
        break;
    case TIDE_TRAINER_OP_NEXT_TASK:
        handle_next_task(c, &c->msg);
        break;
    case TIDE_TRAINER_OP_RESTORE:
        handle_restore(c);
        break;
    case TIDE_TRAINER_OP_LOAD:
        /* kept for the heartbeats: the scheduler decides on rank 0's (docs/elastic.md, "Burst") */
        c->rank->progress.high_load = c->msg.high;
        c->rank->progress.load_reported = true;
        break;
    case TIDE_TRAINER_OP_ATTACH:
    case TIDE_TRAINER_OP_EXITED:
        reject(c, TIDE_TRAINER_ERR_BAD_FIELD, "op: not on a trainer connection", ref);
        break;
    default:
        break;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;

    (void)suggested;
    *buf = uv_buf_init(c->s->read_buf, sizeof(c->s->read_buf));
}

static void on_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    conn_t *c = st->data;
    const char *line;
    size_t len;
    int rc;

    if (n < 0) {
        conn_close(c);
        return;
    }
    tide_trainer_lines_feed(&c->lines, buf->base, (size_t)n);
    while (!c->closing && (rc = tide_trainer_lines_next(&c->lines, &line, &len)) != 0) {
        if (rc < 0)
            reject(c, TIDE_TRAINER_ERR_LINE_TOO_LONG, "line: longer than 65536 bytes", NULL);
        else
            handle_line(c, line, len);
    }
}

static void on_connection(uv_stream_t *server, int status)
{
    tide_trainer_server_t *s = server->data;
    conn_t *c;

    if (status < 0)
        return;
    c = tide_xcalloc(1, sizeof(*c));
    c->s = s;
    tide_list_init(&c->rank_link);
    tide_trainer_lines_init(&c->lines);
    uv_pipe_init(s->loop, &c->pipe, 0);
    c->pipe.data = c;
    s->open_handles++;
    tide_list_push_back(&s->conns, &c->link);
    s->n_conns++;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0) {
        conn_close(c);
        return;
    }
    if (s->n_conns > s->max_conns) {
        tide_warn("trainer socket: more than %zu connections; closing the newest", s->max_conns);
        conn_close(c);
        return;
    }
    if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) < 0)
        conn_close(c);
}

static void on_listener_closed(uv_handle_t *h)
{
    tide_trainer_server_t *s = h->data;

    s->open_handles--;
    maybe_release(s);
}

/* The deques' messages go to the scheduler through the agent. */
static int deque_send(void *ud, const Tide__V1__WorkerMessage *msg)
{
    tide_trainer_server_t *s = ud;

    return s->ops.send ? s->ops.send(s->ud, msg) : -ENOTCONN;
}

int tide_trainer_server_new(uv_loop_t *loop, const tide_trainer_server_config_t *cfg,
                            const tide_trainer_server_ops_t *ops, void *ud,
                            tide_trainer_server_t **out, tide_error_t *err)
{
    struct sockaddr_un sun;
    tide_trainer_server_t *s;
    int rc;

    if (strlen(cfg->path) >= sizeof(sun.sun_path)) {
        tide_errprintf(err, "trainer socket %s: path longer than %zu bytes (use a shorter --data-dir)",
                       cfg->path, sizeof(sun.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    s = tide_xcalloc(1, sizeof(*s));
    s->loop = loop;
    s->path = tide_xstrdup(cfg->path);
    s->worker_id = tide_xstrdup(cfg->worker_id ? cfg->worker_id : "");
    s->max_conns = cfg->max_conns ? cfg->max_conns : MAX_CONNS_DEFAULT;
    s->peak_flops = cfg->peak_flops;
    if (ops)
        s->ops = *ops;
    s->ud = ud;
    tide_list_init(&s->conns);
    tide_list_init(&s->ranks);
    {
        tide_task_deque_ops_t dops = {deque_send};
        tide_task_deque_new(&dops, s, &s->tasks);
    }
    uv_pipe_init(loop, &s->listener, 0);
    s->listener.data = s;
    s->open_handles = 1;
    if (unlink(s->path) < 0 && errno != ENOENT) {
        rc = -errno;
        goto fail;
    }
    rc = uv_pipe_bind(&s->listener, s->path);
    if (rc == 0 && chmod(s->path, 0600) < 0)
        rc = -errno;
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 64, on_connection);
    if (rc < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    tide_errprintf(err, "trainer socket %s: %s", s->path, uv_strerror(rc));
    if (rc != -EADDRINUSE)
        unlink(s->path); /* bound but not listening: leave no file behind */
    s->freeing = true;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
    return rc;
}

static void rank_free(tide_trainer_server_t *s, rank_entry_t *r)
{
    tide_list_t *pos, *tmp;

    tide_list_for_each_safe(pos, tmp, &r->conns) {
        conn_close(tide_list_entry(pos, conn_t, rank_link));
    }
    tide_task_deque_rank_remove(s->tasks, r->id);
    tide_list_remove(&r->link);
    free(r->job_id);
    free(r);
}

void tide_trainer_server_free(tide_trainer_server_t *s)
{
    tide_list_t *pos, *tmp;

    if (!s)
        return;
    tide_list_for_each_safe(pos, tmp, &s->ranks) {
        rank_free(s, tide_list_entry(pos, rank_entry_t, link));
    }
    tide_list_for_each_safe(pos, tmp, &s->conns) {
        conn_close(tide_list_entry(pos, conn_t, link));
    }
    unlink(s->path);
    s->freeing = true;
    uv_close((uv_handle_t *)&s->listener, on_listener_closed);
}

const char *tide_trainer_server_path(const tide_trainer_server_t *s)
{
    return s->path;
}

void tide_trainer_server_rank_add(tide_trainer_server_t *s, uint64_t id, const char *job_id,
                                  int32_t generation, int32_t rank, uid_t uid)
{
    rank_entry_t *r = find_id(s, id);

    if (r)
        return;
    r = tide_xcalloc(1, sizeof(*r));
    r->id = id;
    r->job_id = tide_xstrdup(job_id);
    r->generation = generation;
    r->rank = rank;
    r->uid = uid;
    r->last_step = -1;
    r->stop_after = -1;
    r->resume_step = -1;
    r->added_ns = uv_hrtime();
    tide_flops_window_init(&r->flops);
    tide_flops_window_init(&r->hw);
    tide_list_init(&r->conns);
    tide__v1__rank_progress__init(&r->msg);
    tide__v1__trainer_progress__init(&r->progress);
    r->progress.step = -1;
    r->msg.job_id = r->job_id;
    r->msg.generation = generation;
    r->msg.rank = rank;
    r->msg.progress = &r->progress;
    tide_list_push_back(&s->ranks, &r->link);
    tide_task_deque_rank_add(s->tasks, id, job_id, generation, rank, mono_ms());
}

void tide_trainer_server_rank_resume(tide_trainer_server_t *s, uint64_t id, int64_t resume_step)
{
    rank_entry_t *r = find_id(s, id);

    if (r)
        r->resume_step = resume_step < 0 ? -1 : resume_step;
}

int tide_trainer_server_restore_reply(tide_trainer_server_t *s, uint64_t token, const void *data,
                                      size_t len)
{
    tide_list_t *pos;

    if (!token)
        return -ENOENT;
    tide_list_for_each(pos, &s->conns) {
        conn_t *c = tide_list_entry(pos, conn_t, link);
        if (c->restore_token != token || c->closing)
            continue;
        c->restore_token = 0;
        tide_buf_reset(&s->out);
        tide_buf_append(&s->out, data, len);
        conn_send(c);
        return 0;
    }
    return -ENOENT;
}

void tide_trainer_server_rank_remove(tide_trainer_server_t *s, uint64_t id)
{
    rank_entry_t *r = find_id(s, id);

    if (r)
        rank_free(s, r);
}

bool tide_trainer_server_rank_sdk(const tide_trainer_server_t *s, uint64_t id)
{
    const rank_entry_t *r = find_id(s, id);

    return r && r->sdk;
}

bool tide_trainer_server_rank_unsent(const tide_trainer_server_t *s, uint64_t id)
{
    return find_id(s, id) && tide_task_deque_unsent(s->tasks, id);
}

int tide_trainer_server_stop_after_step(tide_trainer_server_t *s, uint64_t id)
{
    rank_entry_t *r = find_id(s, id);
    int64_t step;

    if (!r)
        return -ENOENT;
    step = r->last_step + 1;
    if (r->stop_after < 0 || step < r->stop_after)
        r->stop_after = step;
    if (tide_list_empty(&r->conns))
        return -ENOTCONN;
    tide_buf_reset(&s->out);
    tide_trainer_encode_stop_after_step(&s->out, r->stop_after);
    broadcast(s, r);
    {
        /* A next_task waiting for a steal would wait for good (the scheduler drops the generation's
         * pools): answer it now, so the trainer ends its step and sees the stop. */
        tide_task_answer_t owed[8];
        size_t n;
        while ((n = tide_task_deque_stopping(s->tasks, id, mono_ms(), owed, 8)) > 0)
            for (size_t i = 0; i < n; i++)
                answer(s, &owed[i]);
    }
    return 0;
}

int tide_trainer_server_checkpoint_now(tide_trainer_server_t *s, const char *job_id,
                                       int32_t generation, int32_t rank, uint64_t request_id,
                                       int64_t deadline_unix_ms)
{
    rank_entry_t *r = find_rank(s, job_id, generation, rank);

    if (!r)
        return -ENOENT;
    r->ckpt_request = request_id;
    r->ckpt_deadline = deadline_unix_ms;
    if (!tide_list_empty(&r->conns)) {
        tide_buf_reset(&s->out);
        tide_trainer_encode_checkpoint_now(&s->out, (int64_t)request_id, deadline_unix_ms);
        broadcast(s, r);
    }
    return 0;
}

size_t tide_trainer_server_progress(tide_trainer_server_t *s, int64_t now_ms,
                                    Tide__V1__RankProgress **out, size_t max)
{
    tide_list_t *pos;
    size_t n = 0;

    tide_list_for_each(pos, &s->ranks) {
        rank_entry_t *r = tide_list_entry(pos, rank_entry_t, link);
        Tide__V1__TrainerProgress *p = &r->progress;
        tide_task_stats_t ts;
        if (n == max)
            break;
        if (!r->sdk)
            continue;
        if (tide_task_deque_stats(s->tasks, r->id, now_ms, &ts) == 0) {
            p->tasks_run = ts.tasks_run;
            p->tasks_stolen = ts.tasks_stolen;
            p->tasks_given = ts.tasks_given;
            p->task_seconds = ts.task_seconds;
            p->busy_fraction = ts.busy_fraction;
            p->steal_wait_seconds = ts.steal_wait_seconds;
        }
        tide_flops_window_rates(&r->flops, now_ms, &p->flops_per_s, &p->flops_per_s_5m,
                                &p->flops_per_s_life);
        p->peak_flops = s->peak_flops;
        p->mfu = tide_mfu(p->flops_per_s, s->peak_flops);
        if (r->hw_reported) {
            double hw5m, hwlife;
            tide_flops_window_rates(&r->hw, now_ms, &p->hw_flops_per_s, &hw5m, &hwlife);
            p->hfu = tide_mfu(p->hw_flops_per_s, s->peak_flops);
        }
        out[n++] = &r->msg;
    }
    return n;
}

int tide_trainer_server_tasks(tide_trainer_server_t *s, const Tide__V1__SchedulerMessage *msg)
{
    tide_task_answer_t a;
    int rc;

    switch (msg->msg_case) {
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS:
        return tide_task_deque_release(s->tasks, msg->release_tasks);
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS:
        rc = tide_task_deque_give(s->tasks, msg->give_tasks, mono_ms(), &a);
        if (rc == 0)
            answer(s, &a);
        return rc;
    default:
        return -EINVAL;
    }
}

void tide_trainer_server_tasks_welcome(tide_trainer_server_t *s)
{
    tide_task_deque_welcome(s->tasks);
}

void tide_trainer_server_tasks_flush(tide_trainer_server_t *s)
{
    tide_task_deque_flush(s->tasks);
}

void tide_trainer_conn_send(tide_trainer_conn_t *c, const void *data, size_t len)
{
    tide_buf_reset(&c->s->out);
    tide_buf_append(&c->s->out, data, len);
    conn_send(c);
}

void tide_trainer_conn_close(tide_trainer_conn_t *c)
{
    conn_close(c);
}

void tide_trainer_conn_set_data(tide_trainer_conn_t *c, void *data)
{
    c->data = data;
}

void *tide_trainer_conn_data(const tide_trainer_conn_t *c)
{
    return c->data;
}

int32_t tide_trainer_conn_pid(const tide_trainer_conn_t *c)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;

    if (c->closing || uv_fileno((const uv_handle_t *)&c->pipe, &fd) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return -1;
    return (int32_t)cred.pid;
}

uint64_t tide_trainer_server_rejected(const tide_trainer_server_t *s)
{
    return s->rejected;
}

size_t tide_trainer_server_conns(const tide_trainer_server_t *s)
{
    return s->n_conns;
}

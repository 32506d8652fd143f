/* The worker's decision core (see core.h): scheduler messages, rank exits and stream changes in,
 * effects out through the ops. Invariants: an exit stays in the table until it was sent on a
 * welcomed stream (or was in the hello of a stream that then got Welcome), so no exit is dropped
 * while disconnected; after that the newest KEEP_REPORTED exits are kept and repeated in every hello,
 * because a RankExited queued on a stream that then broke may never have arrived (the scheduler
 * ignores exits it already has); at most one entry exists per (job, generation, rank), so a repeated
 * LaunchRank never starts a second process; max_epoch never decreases. */
#include "core.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "list.h"
#include "xmalloc.h"

#define BACKOFF_MIN_MS       100
#define BACKOFF_MAX_MS       5000
#define HEARTBEAT_DEFAULT_MS 500
#define HEARTBEAT_MIN_MS     50
#define HEARTBEAT_MAX_MS     60000
#define JOB_ID_MAX           128
#define KEEP_REPORTED        64
#define FORGET_PENDING_MAX   64 /* deferred ForgetCheckpoints; beyond, the oldest go (the TTL covers them) */

typedef struct rank_entry {
    tide_list_t link;
    uint64_t id;
    char *job_id;
    int32_t generation;
    int32_t rank;
    bool running;
    bool stopping;
    bool has_record; /* spawned: the shell holds a record to forget */
    bool reported;   /* the exit was sent (or carried by a welcomed hello) */
    int32_t pid;
    int32_t master_port;
    int32_t exit_code;
    int32_t signal;
    char *error;           /* launch error, or NULL */
    uint64_t hello_stream; /* the stream whose hello carried this exit; 0: none */
} rank_entry_t;

struct tide_worker_core {
    tide_worker_core_ops_t ops;
    void *ud;

    char *worker_id, *node, *device, *address, *version;
    char *launcher_address, *agent_sock;
    int32_t gpu_index;
    double peak_flops;
    uint64_t memory_bytes;
    char **label_keys, **label_values;
    size_t n_labels;
    uint32_t stop_grace_ms;

    uint64_t max_epoch;
    uint64_t rng;
    int64_t backoff_ms;

    uint64_t stream; /* number of the current (or last) stream; 0 before the first */
    uint64_t boot_id; /* WorkerHello.boot_id */
    bool stream_open;
    bool welcomed;
    bool shutting_down;
    bool goodbye_sent; /* on the current stream */
    char *goodbye_reason;
    uint64_t heartbeat_seq;

    uint64_t next_id;
    tide_list_t ranks; /* rank_entry_t, in launch order */
    /* Jobs whose ForgetCheckpoints came while a rank of them ran here: forgotten at its last exit. */
    char *forget_pending[FORGET_PENDING_MAX];
    size_t n_forget_pending;
};

/* splitmix64: a small, seeded generator, enough for jitter. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int32_t tide_worker_exit_code(int64_t exit_status, int term_signal)
{
    if (term_signal > 0)
        return 128 + (term_signal & 0x7f);
    return (int32_t)(exit_status & 0xff);
}

bool tide_worker_job_id_valid(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > JOB_ID_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return false;
    }
    return true;
}

void tide_worker_core_new(const tide_worker_core_config_t *cfg, const tide_worker_core_ops_t *ops,
                          void *ud, tide_worker_core_t **out)
{
    tide_worker_core_t *c = tide_xcalloc(1, sizeof(*c));

    c->ops = *ops;
    c->ud = ud;
    c->worker_id = tide_xstrdup(cfg->worker_id ? cfg->worker_id : "");
    c->node = tide_xstrdup(cfg->node ? cfg->node : "");
    c->device = tide_xstrdup(cfg->device ? cfg->device : "");
    c->address = tide_xstrdup(cfg->address ? cfg->address : "");
    c->launcher_address = tide_xstrdup(cfg->launcher_address ? cfg->launcher_address : "");
    c->agent_sock = tide_xstrdup(cfg->agent_sock ? cfg->agent_sock : "");
    c->version = tide_xstrdup(cfg->version ? cfg->version : "");
    c->gpu_index = cfg->gpu_index;
    c->peak_flops = cfg->peak_flops;
    c->memory_bytes = cfg->memory_bytes;
    c->n_labels = cfg->n_labels;
    c->label_keys = tide_xcalloc(cfg->n_labels, sizeof(char *));
    c->label_values = tide_xcalloc(cfg->n_labels, sizeof(char *));
    for (size_t i = 0; i < cfg->n_labels; i++) {
        c->label_keys[i] = tide_xstrdup(cfg->labels[i].key);
        c->label_values[i] = tide_xstrdup(cfg->labels[i].value);
    }
    c->stop_grace_ms = cfg->stop_grace_ms;
    c->max_epoch = cfg->max_epoch_seen;
    c->rng = cfg->seed;
    c->boot_id = cfg->boot_id;
    c->backoff_ms = BACKOFF_MIN_MS;
    c->next_id = 1;
    tide_list_init(&c->ranks);
    *out = c;
}

static void entry_free(rank_entry_t *e)
{
    tide_list_remove(&e->link);
    free(e->job_id);
    free(e->error);
    free(e);
}

void tide_worker_core_free(tide_worker_core_t *c)
{
    tide_list_t *pos, *tmp;

    if (!c)
        return;
    tide_list_for_each_safe(pos, tmp, &c->ranks)
    {
        entry_free(tide_list_entry(pos, rank_entry_t, link));
    }
    for (size_t i = 0; i < c->n_forget_pending; i++)
        free(c->forget_pending[i]);
    for (size_t i = 0; i < c->n_labels; i++) {
        free(c->label_keys[i]);
        free(c->label_values[i]);
    }
    free(c->label_keys);
    free(c->label_values);
    free(c->worker_id);
    free(c->node);
    free(c->device);
    free(c->address);
    free(c->launcher_address);
    free(c->agent_sock);
    free(c->version);
    free(c->goodbye_reason);
    free(c);
}

static rank_entry_t *find_key(const tide_worker_core_t *c, const char *job_id, int32_t generation,
                              int32_t rank)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &c->ranks)
    {
        rank_entry_t *e = tide_list_entry(pos, rank_entry_t, link);
        if (e->generation == generation && e->rank == rank && strcmp(e->job_id, job_id) == 0)
            return e;
    }
    return NULL;
}

static rank_entry_t *find_id(const tide_worker_core_t *c, uint64_t id)
{
    tide_list_t *pos;

    tide_list_for_each(pos, &c->ranks)
    {
        rank_entry_t *e = tide_list_entry(pos, rank_entry_t, link);
        if (e->id == id)
            return e;
    }
    return NULL;
}

static rank_entry_t *entry_new(tide_worker_core_t *c, const char *job_id, int32_t generation,
                               int32_t rank)
{
    rank_entry_t *e = tide_xcalloc(1, sizeof(*e));

    e->id = c->next_id++;
    e->job_id = tide_xstrdup(job_id);
    e->generation = generation;
    e->rank = rank;
    tide_list_push_back(&c->ranks, &e->link);
    return e;
}

static int send_msg(tide_worker_core_t *c, const Tide__V1__WorkerMessage *m)
{
    if (!c->stream_open)
        return -ENOTCONN;
    return c->ops.send(c->ud, m);
}

static void fill_status(const rank_entry_t *e, Tide__V1__RankStatus *st)
{
    tide__v1__rank_status__init(st);
    st->job_id = e->job_id;
    st->generation = e->generation;
    st->rank = e->rank;
    st->pid = e->pid;
    st->master_port = e->master_port;
    if (e->running) {
        st->state = TIDE__V1__RANK_STATE__RANK_STATE_RUNNING;
    } else {
        st->state = TIDE__V1__RANK_STATE__RANK_STATE_EXITED;
        st->exit_code = e->exit_code;
        st->signal = e->signal;
        if (e->error)
            st->error = e->error;
    }
}

/* The exit is reported (sent, or carried by a welcomed hello): drop its record; keep the entry (for
 * later hellos) among the newest KEEP_REPORTED reported ones. */
static void forget(tide_worker_core_t *c, rank_entry_t *e)
{
    tide_list_t *pos, *tmp;
    size_t kept = 0;

    if (e->has_record)
        c->ops.forget(c->ud, e->id, e->job_id, e->generation, e->rank);
    e->has_record = false;
    e->reported = true;
    tide_list_for_each(pos, &c->ranks)
    {
        kept += tide_list_entry(pos, rank_entry_t, link)->reported;
    }
    tide_list_for_each_safe(pos, tmp, &c->ranks)
    {
        rank_entry_t *old = tide_list_entry(pos, rank_entry_t, link);
        if (kept <= KEEP_REPORTED)
            break;
        if (old->reported) {
            entry_free(old);
            kept--;
        }
    }
}

/* Sends RankExited for e when the stream is welcomed; drops e once sent. */
static void report_exit(tide_worker_core_t *c, rank_entry_t *e)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__RankExited ex = TIDE__V1__RANK_EXITED__INIT;
    Tide__V1__RankStatus st;

    if (!c->welcomed)
        return;
    fill_status(e, &st);
    ex.status = &st;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED;
    m.rank_exited = &ex;
    if (send_msg(c, &m) == 0)
        forget(c, e);
}

static void send_started(tide_worker_core_t *c, const rank_entry_t *e)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__RankStarted rs = TIDE__V1__RANK_STARTED__INIT;

    rs.job_id = e->job_id;
    rs.generation = e->generation;
    rs.rank = e->rank;
    rs.pid = e->pid;
    rs.master_port = e->master_port;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED;
    m.rank_started = &rs;
    send_msg(c, &m);
}

static void send_goodbye(tide_worker_core_t *c)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__WorkerGoodbye g = TIDE__V1__WORKER_GOODBYE__INIT;

    if (!c->welcomed || c->goodbye_sent)
        return;
    g.reason = c->goodbye_reason ? c->goodbye_reason : (char *)"";
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_GOODBYE;
    m.goodbye = &g;
    if (send_msg(c, &m) == 0)
        c->goodbye_sent = true;
}

void tide_worker_core_stream_opened(tide_worker_core_t *c)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__WorkerHello h = TIDE__V1__WORKER_HELLO__INIT;
    Tide__V1__WorkerHello__LabelsEntry *labels = NULL, **label_ptrs = NULL;
    Tide__V1__RankStatus *st = NULL, **st_ptrs = NULL;
    size_t n = 0, i = 0;
    tide_list_t *pos;

    c->stream++;
    c->stream_open = true;
    c->welcomed = false;
    c->goodbye_sent = false;

    h.protocol_version = TIDE__V1__WORKER_PROTOCOL__WORKER_PROTOCOL_CURRENT;
    h.worker_id = c->worker_id;
    h.node = c->node;
    h.gpu_index = c->gpu_index;
    h.device = c->device;
    h.peak_flops = c->peak_flops;
    h.memory_bytes = c->memory_bytes;
    h.address = c->address;
    h.launcher_address = c->launcher_address;
    h.agent_sock = c->agent_sock;
    h.version = c->version;
    h.max_epoch_seen = c->max_epoch;
    h.boot_id = c->boot_id;
    h.stream_seq = c->stream;
    if (c->n_labels) {
        labels = tide_xcalloc(c->n_labels, sizeof(*labels));
        label_ptrs = tide_xcalloc(c->n_labels, sizeof(*label_ptrs));
        for (i = 0; i < c->n_labels; i++) {
            tide__v1__worker_hello__labels_entry__init(&labels[i]);
            labels[i].key = c->label_keys[i];
            labels[i].value = c->label_values[i];
            label_ptrs[i] = &labels[i];
        }
        h.n_labels = c->n_labels;
        h.labels = label_ptrs;
    }
    tide_list_for_each(pos, &c->ranks)
    {
        n++;
    }
    if (n) {
        st = tide_xcalloc(n, sizeof(*st));
        st_ptrs = tide_xcalloc(n, sizeof(*st_ptrs));
        i = 0;
        tide_list_for_each(pos, &c->ranks)
        {
            rank_entry_t *e = tide_list_entry(pos, rank_entry_t, link);
            fill_status(e, &st[i]);
            st_ptrs[i] = &st[i];
            if (!e->running)
                e->hello_stream = c->stream;
            i++;
        }
        h.n_ranks = n;
        h.ranks = st_ptrs;
    }
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_HELLO;
    m.hello = &h;
    if (send_msg(c, &m) < 0) {
        /* Not carried after all: keep the exits for the next hello. */
        tide_list_for_each(pos, &c->ranks)
        {
            tide_list_entry(pos, rank_entry_t, link)->hello_stream = 0;
        }
    }
    free(st);
    free(st_ptrs);
    free(labels);
    free(label_ptrs);
}

tide_worker_next_t tide_worker_core_stream_ended(tide_worker_core_t *c, tide_grpc_code_t code,
                                                 const char *message, int64_t *delay_ms)
{
    int64_t base;

    c->stream_open = false;
    c->welcomed = false;
    *delay_ms = 0;
    if (c->shutting_down)
        return TIDE_WORKER_STAY_DOWN;
    if (code == TIDE_GRPC_FAILED_PRECONDITION || code == TIDE_GRPC_UNAUTHENTICATED)
        return TIDE_WORKER_FATAL;
    /* "Equal jitter": half the backoff fixed, half random, so a fleet does not reconnect in step.
     */
    base = c->backoff_ms;
    *delay_ms = base / 2 + (int64_t)(rng_next(&c->rng) % (uint64_t)(base / 2 + 1));
    c->backoff_ms = base * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : base * 2;
    return TIDE_WORKER_RECONNECT;
}

static int on_welcome(tide_worker_core_t *c, const Tide__V1__Welcome *w, tide_error_t *err)
{
    uint32_t interval = w->heartbeat_interval_ms ? w->heartbeat_interval_ms : HEARTBEAT_DEFAULT_MS;
    bool first = !c->welcomed;
    tide_list_t *pos, *tmp;

    if (interval < HEARTBEAT_MIN_MS)
        interval = HEARTBEAT_MIN_MS;
    if (interval > HEARTBEAT_MAX_MS)
        interval = HEARTBEAT_MAX_MS;
    c->welcomed = true;
    c->backoff_ms = BACKOFF_MIN_MS;
    c->ops.welcomed(c->ud, interval);
    if (!first)
        return 0;
    /* Exits in this stream's hello are reported; those that came after it are sent now. */
    tide_list_for_each_safe(pos, tmp, &c->ranks)
    {
        rank_entry_t *e = tide_list_entry(pos, rank_entry_t, link);
        if (e->running || e->reported)
            continue;
        if (e->hello_stream == c->stream)
            forget(c, e);
        else
            report_exit(c, e);
    }
    if (c->shutting_down)
        send_goodbye(c);
    return 0;
}

/* Network input: checked before anything is started or named after it. */
static int validate_launch(const Tide__V1__LaunchRank *l, tide_error_t *err)
{
    if (!tide_worker_job_id_valid(l->job_id)) {
        tide_errprintf(err, "invalid LaunchRank: job_id '%.64s' (1-%d of [A-Za-z0-9_.-])",
                       l->job_id, JOB_ID_MAX);
        return -EINVAL;
    }
    /* A burst rank is not a member of the generation: it takes a slot after its ranks (rank =
     * world_size + burst index, docs/elastic.md "Burst"). */
    if (l->generation < 0 || l->rank < 0 || l->world_size < 1 ||
        (l->burst ? l->rank < l->world_size : l->rank >= l->world_size)) {
        tide_errprintf(err, "invalid LaunchRank: rank %d, generation %d, world_size %d%s", l->rank,
                       l->generation, l->world_size,
                       l->burst ? " (a burst rank is numbered from world_size)" : "");
        return -EINVAL;
    }
    if (l->local_rank < 0 || l->local_world_size < 0 || l->group_rank < 0 ||
        (l->local_world_size > 0 && l->local_rank >= l->local_world_size)) {
        tide_errprintf(err, "invalid LaunchRank: local_rank %d, local_world_size %d, group_rank %d",
                       l->local_rank, l->local_world_size, l->group_rank);
        return -EINVAL;
    }
    /* A burst rank joins no rendezvous: it gets no MASTER_PORT, so any value is ignored. */
    if (l->master_port < 0 || l->master_port > 65535 ||
        (!l->burst && l->rank != 0 && l->master_port == 0)) {
        tide_errprintf(err, "invalid LaunchRank: master_port %d for rank %d", l->master_port,
                       l->rank);
        return -EINVAL;
    }
    if (l->n_command == 0 || l->command[0][0] == '\0') {
        tide_errprintf(err, "invalid LaunchRank: empty command");
        return -EINVAL;
    }
    if (l->workdir[0] != '\0' && l->workdir[0] != '/') {
        tide_errprintf(err, "invalid LaunchRank: workdir '%.64s' is not absolute", l->workdir);
        return -EINVAL;
    }
    for (size_t i = 0; i < l->n_node_gpu_indexes; i++) {
        if (l->node_gpu_indexes[i] < 0) {
            tide_errprintf(err, "invalid LaunchRank: node_gpu_indexes[%zu] = %d", i,
                           l->node_gpu_indexes[i]);
            return -EINVAL;
        }
    }
    for (size_t i = 0; i < l->n_env; i++) {
        const char *k = l->env[i]->key;
        if (k[0] == '\0' || strchr(k, '=')) {
            tide_errprintf(err, "invalid LaunchRank: env name '%.64s'", k);
            return -EINVAL;
        }
    }
    return 0;
}

/* A rank that never ran: remembered as exited 127 with the reason, reported like any exit. */
static void launch_failed(tide_worker_core_t *c, const Tide__V1__LaunchRank *l, const char *why)
{
    rank_entry_t *e = entry_new(c, l->job_id, l->generation, l->rank);

    e->exit_code = 127;
    e->error = tide_xstrdup(why);
    report_exit(c, e);
}

static int on_launch(tide_worker_core_t *c, const Tide__V1__LaunchRank *l, tide_error_t *err)
{
    tide_worker_spawned_t sp = {0, 0};
    tide_error_t serr;
    rank_entry_t *e;
    int rc;

    rc = validate_launch(l, &serr);
    if (rc < 0) {
        launch_failed(c, l, serr.text);
        tide_errprintf(err, "%s", serr.text);
        return rc;
    }
    e = find_key(c, l->job_id, l->generation, l->rank);
    if (e && l->burst && !e->running && e->reported) {
        /* A burst slot lent again after its last process's exit reached the scheduler (it reuses a
         * slot only then): a new process, not a repeat. */
        entry_free(e);
        e = NULL;
    }
    if (e) {
        /* Idempotent: the same rank again is answered, not started twice. An exit not yet reported
         * goes out with the next Welcome. */
        if (e->running)
            send_started(c, e);
        tide_errprintf(err, "LaunchRank %s g%d rank %d: already %s", l->job_id, l->generation,
                       l->rank, e->running ? "running" : "exited");
        return 0;
    }
    if (c->shutting_down) {
        tide_errprintf(err, "LaunchRank %s g%d rank %d refused: worker is shutting down", l->job_id,
                       l->generation, l->rank);
        launch_failed(c, l, "worker is shutting down");
        return -ESHUTDOWN;
    }
    e = entry_new(c, l->job_id, l->generation, l->rank);
    tide_error_clear(&serr);
    rc = c->ops.spawn(c->ud, e->id, l, &sp, &serr);
    if (rc < 0) {
        e->exit_code = 127;
        e->error = tide_xstrdup(serr.text[0] ? serr.text : "spawn failed");
        tide_errprintf(err, "LaunchRank %s g%d rank %d failed: %s", l->job_id, l->generation,
                       l->rank, e->error);
        report_exit(c, e);
        return 0;
    }
    e->running = true;
    e->has_record = true;
    e->pid = sp.pid;
    e->master_port = sp.master_port;
    tide_errprintf(err, "started %s g%d rank %d: pid %d, MASTER_PORT %d", l->job_id, l->generation,
                   l->rank, sp.pid, sp.master_port);
    send_started(c, e);
    return 0;
}

static int on_stop(tide_worker_core_t *c, const Tide__V1__StopRank *s, tide_error_t *err)
{
    rank_entry_t *e = find_key(c, s->job_id, s->generation, s->rank);
    uint32_t grace = s->grace_ms ? s->grace_ms : c->stop_grace_ms;

    if (!e || !e->running) {
        tide_errprintf(err, "StopRank %.64s g%d rank %d: not running here", s->job_id,
                       s->generation, s->rank);
        return -ENOENT;
    }
    e->stopping = true;
    c->ops.stop(c->ud, e->id, grace);
    tide_errprintf(err, "stopping %s g%d rank %d (grace %u ms): %.80s", e->job_id, e->generation,
                   e->rank, grace, s->reason);
    return 0;
}

static int on_trainer_command(tide_worker_core_t *c, const Tide__V1__TrainerCommand *cmd,
                              tide_error_t *err)
{
    if (!tide_worker_core_rank_running(c, cmd->job_id, cmd->generation, cmd->rank)) {
        tide_errprintf(err, "TrainerCommand for job %s generation %d rank %d, which does not run here",
                       cmd->job_id, cmd->generation, cmd->rank);
        return -ENOENT;
    }
    if (c->ops.trainer_command)
        c->ops.trainer_command(c->ud, cmd);
    return 0;
}

/* FlushCheckpoint: the shell copies (and answers); a worker without a copier says so. */
static int on_flush(tide_worker_core_t *c, const Tide__V1__FlushCheckpoint *req, tide_error_t *err)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__FlushDone d = TIDE__V1__FLUSH_DONE__INIT;

    if (c->ops.flush) {
        c->ops.flush(c->ud, req);
        return 0;
    }
    d.job_id = req->job_id;
    d.generation = req->generation;
    d.rank = req->rank;
    d.step = req->step;
    d.error = (char *)"this worker does not copy checkpoints";
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE;
    m.flush_done = &d;
    tide_worker_core_send(c, &m);
    tide_errprintf(err, "FlushCheckpoint %.64s rank %d refused: no copier", req->job_id, req->rank);
    return -ENOTSUP;
}

/* ForgetCheckpoints: the job ended. Its copies go now, or once the last of its ranks here exited (a
 * cancelled job's ranks get their StopRank just before). */
static int on_forget_checkpoints(tide_worker_core_t *c, const Tide__V1__ForgetCheckpoints *f,
                                 tide_error_t *err)
{
    if (!tide_worker_job_id_valid(f->job_id)) {
        tide_errprintf(err, "ForgetCheckpoints: job_id '%.64s' is not a valid job id: ignored",
                       f->job_id);
        return -EINVAL;
    }
    if (!c->ops.forget_checkpoints)
        return 0;
    if (!tide_worker_core_job_running(c, f->job_id)) {
        c->ops.forget_checkpoints(c->ud, f->job_id);
        return 0;
    }
    for (size_t i = 0; i < c->n_forget_pending; i++)
        if (strcmp(c->forget_pending[i], f->job_id) == 0)
            return 0;
    if (c->n_forget_pending == FORGET_PENDING_MAX) {
        free(c->forget_pending[0]);
        memmove(c->forget_pending, c->forget_pending + 1,
                (FORGET_PENDING_MAX - 1) * sizeof(*c->forget_pending));
        c->n_forget_pending--;
    }
    c->forget_pending[c->n_forget_pending++] = tide_xstrdup(f->job_id);
    tide_errprintf(err, "job %s ended: its hot checkpoints go once its ranks here exited", f->job_id);
    return 0;
}

/* A rank of job_id exited: a deferred forget of that job runs when it was the last one here. */
static void forget_pending_check(tide_worker_core_t *c, const char *job_id)
{
    for (size_t i = 0; i < c->n_forget_pending; i++) {
        char *id = c->forget_pending[i];
        if (strcmp(id, job_id) != 0)
            continue;
        if (tide_worker_core_job_running(c, job_id))
            return;
        memmove(c->forget_pending + i, c->forget_pending + i + 1,
                (c->n_forget_pending - i - 1) * sizeof(*c->forget_pending));
        c->n_forget_pending--;
        if (c->ops.forget_checkpoints)
            c->ops.forget_checkpoints(c->ud, id);
        free(id);
        return;
    }
}

/* TasksReleased with no tasks: what a worker without that rank's deque answers, so the scheduler
 * tries another victim. */
static void release_none(tide_worker_core_t *c, const Tide__V1__ReleaseTasks *r)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__TasksReleased t = TIDE__V1__TASKS_RELEASED__INIT;

    t.job_id = r->job_id;
    t.generation = r->generation;
    t.rank = r->rank;
    t.kind = r->kind;
    t.step = r->step;
    t.release_id = r->release_id;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED;
    m.tasks_released = &t;
    tide_worker_core_send(c, &m);
}

/* ReleaseTasks / GiveTasks (docs/work-stealing.md): the shell's deques answer; a rank that does not
 * run here (or a shell without deques) releases nothing, and a give for it is dropped. */
static int on_tasks(tide_worker_core_t *c, const Tide__V1__SchedulerMessage *msg,
                    tide_error_t *err)
{
    bool release = msg->msg_case == TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS;
    const char *job_id = release ? msg->release_tasks->job_id : msg->give_tasks->job_id;
    int32_t generation = release ? msg->release_tasks->generation : msg->give_tasks->generation;
    int32_t rank = release ? msg->release_tasks->rank : msg->give_tasks->rank;
    const char *what = release ? "ReleaseTasks" : "GiveTasks";
    int rc;

    if (!tide_worker_core_rank_running(c, job_id, generation, rank)) {
        tide_errprintf(err, "%s for job %.64s generation %d rank %d, which does not run here", what,
                       job_id, generation, rank);
        rc = -ENOENT;
    } else if (!c->ops.tasks) {
        tide_errprintf(err, "%s for job %.64s rank %d: this worker holds no task deques", what,
                       job_id, rank);
        rc = -ENOTSUP;
    } else {
        rc = c->ops.tasks(c->ud, msg);
        if (rc == -ENOENT)
            tide_errprintf(err,
                           "%s for job %.64s generation %d rank %d: no tasks of that rank here",
                           what, job_id, generation, rank);
    }
    if (rc < 0 && release)
        release_none(c, msg->release_tasks);
    return rc;
}

static const char *msg_name(Tide__V1__SchedulerMessage__MsgCase mc)
{
    switch (mc) {
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME:
        return "Welcome";
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_LAUNCH:
        return "LaunchRank";
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_STOP:
        return "StopRank";
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_LOG_REQUEST:
        return "LogRequest";
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_TRAINER_COMMAND:
        return "TrainerCommand";
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_FLUSH:
        return "FlushCheckpoint";
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS:
        return "ReleaseTasks";
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS:
        return "GiveTasks";
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_FORGET_CHECKPOINTS:
        return "ForgetCheckpoints";
    default:
        return "empty message";
    }
}

int tide_worker_core_handle(tide_worker_core_t *c, const Tide__V1__SchedulerMessage *msg,
                            tide_error_t *err)
{
    tide_error_clear(err);
    if (msg->epoch < c->max_epoch) {
        tide_errprintf(err, "ignoring %s with epoch %llu (highest seen %llu)",
                       msg_name(msg->msg_case), (unsigned long long)msg->epoch,
                       (unsigned long long)c->max_epoch);
        /* A deposed leader's Welcome leaves the stream useless: go find the current one. */
        if (msg->msg_case == TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME && c->stream_open)
            c->ops.end_stream(c->ud, "Welcome from a deposed leader");
        return -ESTALE;
    }
    if (msg->epoch > c->max_epoch) {
        c->max_epoch = msg->epoch;
        c->ops.save_epoch(c->ud, msg->epoch);
    }
    switch (msg->msg_case) {
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME:
        return on_welcome(c, msg->welcome, err);
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_LAUNCH:
        return on_launch(c, msg->launch, err);
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_STOP:
        return on_stop(c, msg->stop, err);
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_LOG_REQUEST:
        c->ops.log_request(c->ud, msg->log_request);
        return 0;
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_TRAINER_COMMAND:
        return on_trainer_command(c, msg->trainer_command, err);
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_FLUSH:
        return on_flush(c, msg->flush, err);
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_RELEASE_TASKS:
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_GIVE_TASKS:
        return on_tasks(c, msg, err);
    case TIDE__V1__SCHEDULER_MESSAGE__MSG_FORGET_CHECKPOINTS:
        return on_forget_checkpoints(c, msg->forget_checkpoints, err);
    default:
        /* A newer scheduler's message kind decodes as NOT_SET: skip it, keep the stream. */
        tide_errprintf(err, "ignoring a SchedulerMessage without a known body");
        return -EPROTO;
    }
}

int tide_worker_core_handle_bytes(tide_worker_core_t *c, const uint8_t *data, size_t len,
                                  tide_error_t *err)
{
    Tide__V1__SchedulerMessage *msg = tide__v1__scheduler_message__unpack(NULL, len, data);
    int rc;

    if (!msg) {
        tide_errprintf(err, "undecodable SchedulerMessage (%zu bytes)", len);
        if (c->stream_open)
            c->ops.end_stream(c->ud, "undecodable SchedulerMessage");
        return -EPROTO;
    }
    rc = tide_worker_core_handle(c, msg, err);
    tide__v1__scheduler_message__free_unpacked(msg, NULL);
    return rc;
}

int tide_worker_core_heartbeat(tide_worker_core_t *c, const Tide__V1__Telemetry *telemetry,
                               Tide__V1__RankProgress **progress, size_t n_progress)
{
    Tide__V1__WorkerMessage m = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__Heartbeat hb = TIDE__V1__HEARTBEAT__INIT;

    if (!c->welcomed)
        return -ENOTCONN;
    hb.seq = ++c->heartbeat_seq;
    hb.telemetry = (Tide__V1__Telemetry *)telemetry;
    hb.progress = progress;
    hb.n_progress = n_progress;
    m.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT;
    m.heartbeat = &hb;
    return send_msg(c, &m);
}

int tide_worker_core_send(tide_worker_core_t *c, const Tide__V1__WorkerMessage *msg)
{
    if (!c->welcomed)
        return -ENOTCONN;
    return send_msg(c, msg);
}

void tide_worker_core_rank_exited(tide_worker_core_t *c, uint64_t id, int64_t exit_status,
                                  int term_signal)
{
    rank_entry_t *e = find_id(c, id);

    if (!e || !e->running)
        return;
    e->running = false;
    e->exit_code = tide_worker_exit_code(exit_status, term_signal);
    e->signal = term_signal > 0 ? term_signal : 0;
    e->hello_stream = 0;
    if (c->n_forget_pending) {
        char *job_id = tide_xstrdup(e->job_id); /* report_exit may drop e */
        report_exit(c, e);
        forget_pending_check(c, job_id);
        free(job_id);
        return;
    }
    report_exit(c, e);
}

void tide_worker_core_shutdown(tide_worker_core_t *c, const char *reason, bool force)
{
    tide_list_t *pos, *tmp;

    if (!c->shutting_down) {
        c->shutting_down = true;
        c->goodbye_reason = tide_xstrdup(reason ? reason : "");
        send_goodbye(c);
    }
    tide_list_for_each_safe(pos, tmp, &c->ranks)
    {
        rank_entry_t *e = tide_list_entry(pos, rank_entry_t, link);
        if (!e->running || (e->stopping && !force))
            continue;
        e->stopping = true;
        c->ops.stop(c->ud, e->id, force ? 0 : c->stop_grace_ms);
    }
}

bool tide_worker_core_welcomed(const tide_worker_core_t *c)
{
    return c->welcomed;
}

bool tide_worker_core_shutting_down(const tide_worker_core_t *c)
{
    return c->shutting_down;
}

size_t tide_worker_core_running(const tide_worker_core_t *c)
{
    tide_list_t *pos;
    size_t n = 0;

    tide_list_for_each(pos, &c->ranks)
    {
        if (tide_list_entry(pos, rank_entry_t, link)->running)
            n++;
    }
    return n;
}

size_t tide_worker_core_unreported(const tide_worker_core_t *c)
{
    tide_list_t *pos;
    size_t n = 0;

    tide_list_for_each(pos, &c->ranks)
    {
        const rank_entry_t *e = tide_list_entry(pos, rank_entry_t, link);
        n += !e->running && !e->reported;
    }
    return n;
}

bool tide_worker_core_rank_running(const tide_worker_core_t *c, const char *job_id,
                                   int32_t generation, int32_t rank)
{
    const rank_entry_t *e = find_key(c, job_id, generation, rank);
    return e && e->running;
}

bool tide_worker_core_job_running(const tide_worker_core_t *c, const char *job_id)
{
    const tide_list_t *pos;

    for (pos = c->ranks.next; pos != &c->ranks; pos = pos->next) {
        const rank_entry_t *e = tide_list_entry(pos, rank_entry_t, link);
        if (e->running && strcmp(e->job_id, job_id) == 0)
            return true;
    }
    return false;
}

size_t tide_worker_core_running_jobs(const tide_worker_core_t *c, const char **ids, size_t max)
{
    const tide_list_t *pos;
    size_t n = 0;

    for (pos = c->ranks.next; pos != &c->ranks; pos = pos->next) {
        const rank_entry_t *e = tide_list_entry(pos, rank_entry_t, link);
        if (!e->running)
            continue;
        if (n < max)
            ids[n] = e->job_id;
        n++;
    }
    return n;
}

uint64_t tide_worker_core_max_epoch(const tide_worker_core_t *c)
{
    return c->max_epoch;
}

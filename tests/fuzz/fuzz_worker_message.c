/* libFuzzer target for the scheduler's handling of a worker's stream (scheduler/daemon/svc_workers.c):
 * the input is a script of WorkerMessages (protobuf bytes) from one worker, with clock steps and stream
 * drops between them, run as on_message does — the same checks and conversions (tide_wmsg_hello,
 * tide_conv_telemetry_from_pb / tide_conv_progress_from_pb, tide_wmsg_flush_check, tide_wmsg_task_apply)
 * — against a core (test config) with two other workers and a job of three that waits for this one.
 *
 * Checks, beyond "no crash, no leak": the first message of a stream must be a hello; a refused hello
 * leaves the info untouched and explains itself; telemetry fractions land in [0, 1] and what is not a
 * number is marked unknown; progress figures are never negative or NaN; a FlushDone that is accepted
 * names a rank, and one taken as ok has a durable path within bounds and a well-formed sha256; a refused
 * task report says why; after every step the core's invariants hold, and every job and worker converts
 * to its message and packs (what GetJob and GetClusterStatus do with them).
 *
 * Script: repeated [op][len hi][len lo][payload]: op%4 == 0: a WorkerMessage of len bytes; 1: the clock
 * moves len*10 ms (no payload); 2: the stream drops (with the goodbye if one came) and a new one opens
 * (no payload); 3: a tick of one heartbeat interval for the other workers (no payload). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "core_harness.h"
#include "worker_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STEPS_MAX 64

static void check(bool ok)
{
    if (!ok)
        abort();
}

static bool hex64(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f') || (s[n] >= 'A' && s[n] <= 'F')))
            return false;
    return n == 64;
}

static int conn_tokens[STEPS_MAX + 1];

typedef struct stream {
    int n;                /* conn is &conn_tokens[n] */
    tide_worker_t *worker; /* set by the hello */
    bool finished;        /* the daemon would have ended it */
    bool goodbye;
} stream_t;

static void *conn_of(const stream_t *s)
{
    return &conn_tokens[s->n];
}

static void check_telemetry(const Tide__V1__Telemetry *pt, const tide_telemetry_t *t)
{
    const double fr[] = {t->gpu_util, t->mem_bw_util, t->net_util, t->storage_util};
    const double in[] = {pt->gpu_util, pt->mem_bw_util, pt->net_util, pt->storage_util};
    const uint32_t bits[] = {1u << 0, 1u << 4, 1u << 9, 1u << 10};

    for (int i = 0; i < 4; i++) {
        check(fr[i] >= 0 && fr[i] <= 1);
        if (!isfinite(in[i]) || in[i] < 0)
            check(!(t->known & bits[i]));
    }
    check(isfinite(t->temperature_c) && isfinite(t->power_w));
    check((t->known & ~(pt->known ? pt->known : 0xfu)) == 0);
}

static void check_progress(const tide_trainer_progress_t *p)
{
    const double v[] = {p->step_flops, p->step_seconds, p->flops_per_s, p->flops_per_s_5m, p->flops_per_s_life,
                        p->peak_flops, p->mfu, p->hw_flops_per_s, p->hfu, p->task_seconds, p->busy_fraction,
                        p->steal_wait_seconds};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        check(isfinite(v[i]) && v[i] >= 0);
    check(p->busy_fraction <= 1);
}

static void on_hello(h_t *h, stream_t *s, const Tide__V1__WorkerHello *hello, tide_arena_t *a)
{
    static const tide_worker_info_t zero;
    tide_worker_info_t info = {0};
    tide_rank_report_t *reps = NULL;
    tide_error_t err = {{0}};
    char msg[300] = "";
    int rc = tide_wmsg_hello(hello, &info, &reps, a, msg, sizeof(msg));

    if (rc < 0) {
        check(rc == -EPROTO && msg[0] && !reps && memcmp(&info, &zero, sizeof(info)) == 0);
        check(hello->protocol_version != TIDE__V1__WORKER_PROTOCOL__WORKER_PROTOCOL_CURRENT);
        s->finished = true;
        return;
    }
    check(reps != NULL && info.id == hello->worker_id && info.n_labels == hello->n_labels);
    for (size_t i = 0; i < hello->n_ranks; i++)
        check(reps[i].job_id == hello->ranks[i]->job_id && reps[i].rank == hello->ranks[i]->rank);
    rc = tide_core_worker_register(h->core, &info, conn_of(s), reps, hello->n_ranks, &s->worker, &err);
    if (rc < 0) {
        check(err.text[0] && s->worker == NULL);
        s->finished = true;
    } else {
        check(s->worker != NULL && strcmp(s->worker->id, info.id) == 0);
    }
}

static void on_flush_done(h_t *h, stream_t *s, const Tide__V1__FlushDone *f)
{
    char error[TIDE_WMSG_FLUSH_ERROR_CAP];
    const char *bad = NULL;
    bool ok = true;

    if (tide_wmsg_flush_check(f, &ok, error, &bad) < 0) {
        check(!f->job_id[0] || strlen(f->job_id) > TIDE_WMSG_FLUSH_ID_MAX || f->generation < 1 || f->rank < 0 ||
              f->step < 0);
        return;
    }
    check(f->job_id[0] && strlen(f->job_id) <= TIDE_WMSG_FLUSH_ID_MAX && f->generation >= 1 && f->rank >= 0 &&
          f->step >= 0);
    check(strlen(error) < TIDE_WMSG_FLUSH_ERROR_CAP);
    if (bad)
        check(!ok && strstr(error, bad));
    if (ok)
        check(f->ok && f->durable_path[0] && strlen(f->durable_path) <= TIDE_WMSG_FLUSH_PATH_MAX &&
              (!f->sha256[0] || hex64(f->sha256)));
    tide_core_ckpt_flushed(h->core, s->worker, f->job_id, f->generation, f->rank, f->step, ok,
                           ok ? f->durable_path : NULL, f->bytes, ok ? f->sha256 : NULL, error);
}

static void on_task(h_t *h, stream_t *s, const Tide__V1__WorkerMessage *m)
{
    tide_error_t err = {{0}};
    const char *what = NULL;
    int rc;

    if (s->worker->conn != conn_of(s))
        return;
    rc = tide_wmsg_task_apply(h->core, s->worker, m, &what, &err);
    check(rc != -ENOMSG && what && strcmp(what, "task report") != 0);
    if (rc == -EINVAL)
        check(err.text[0] != '\0');
}

/* The stream ends (the daemon's on_close): its worker is told, once. */
static void close_stream(h_t *h, stream_t *s)
{
    if (s->worker)
        tide_core_worker_disconnected(h->core, s->worker, conn_of(s), s->goodbye);
    s->worker = NULL;
    s->finished = true;
}

/* One message on stream s, as svc_workers.c's on_message; a message that ends the stream closes it. */
static void on_message(h_t *h, stream_t *s, const uint8_t *p, size_t len)
{
    tide_arena_t a = TIDE_ARENA_INIT;
    Tide__V1__WorkerMessage *m;

    if (s->finished)
        return;
    m = tide__v1__worker_message__unpack(NULL, len, p);
    if (!m) {
        close_stream(h, s);
        return;
    }
    if (!s->worker && m->msg_case != TIDE__V1__WORKER_MESSAGE__MSG_HELLO) {
        s->finished = true;
        goto done;
    }
    switch (m->msg_case) {
    case TIDE__V1__WORKER_MESSAGE__MSG_HELLO:
        if (s->worker)
            s->finished = true;
        else
            on_hello(h, s, m->hello, &a);
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT: {
        tide_telemetry_t t = {0};
        if (m->heartbeat->telemetry) {
            tide_conv_telemetry_from_pb(m->heartbeat->telemetry, &t);
            check_telemetry(m->heartbeat->telemetry, &t);
        }
        if (s->worker->conn != conn_of(s))
            break;
        tide_core_worker_heartbeat(h->core, s->worker, &t);
        for (size_t i = 0; i < m->heartbeat->n_progress; i++) {
            const Tide__V1__RankProgress *rp = m->heartbeat->progress[i];
            tide_trainer_progress_t pr;
            tide_conv_progress_from_pb(rp->progress, &pr);
            check_progress(&pr);
            tide_core_rank_progress(h->core, s->worker, rp->job_id, rp->generation, rp->rank, &pr);
        }
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_RANK_STARTED: {
        const Tide__V1__RankStarted *r = m->rank_started;
        tide_core_rank_started(h->core, s->worker, r->job_id, r->generation, r->rank, r->pid, r->master_port);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_RANK_EXITED: {
        const Tide__V1__RankStatus *r = m->rank_exited->status;
        if (!r) {
            s->finished = true;
            break;
        }
        tide_core_rank_exited(h->core, s->worker, r->job_id, r->generation, r->rank, r->exit_code, r->error);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_CHECKPOINT_SAVED: {
        const Tide__V1__CheckpointSaved *c = m->checkpoint_saved;
        tide_core_checkpoint_saved(h->core, s->worker, c->job_id, c->generation, c->rank, c->step, c->path,
                                   c->bytes, c->sha256);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_FLUSH_DONE:
        on_flush_done(h, s, m->flush_done);
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED:
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE:
    case TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST:
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED:
        on_task(h, s, m);
        break;
    case TIDE__V1__WORKER_MESSAGE__MSG_LOG_DATA:
        break; /* relayed to a log reader by the daemon; nothing reaches the core */
    case TIDE__V1__WORKER_MESSAGE__MSG_GOODBYE:
        s->goodbye = true;
        break;
    default:
        s->finished = true;
        break;
    }
done:
    if (s->finished)
        close_stream(h, s);
    tide__v1__worker_message__free_unpacked(m, NULL);
    tide_arena_free(&a);
}

/* Every job and worker converts and packs, then the actions are absorbed. */
static void settle(h_t *h)
{
    tide_arena_t a = TIDE_ARENA_INIT;
    const tide_job_t *job = tide_core_job_find(h->core, "1");
    size_t n;

    if (job) {
        Tide__V1__Job pb;
        uint8_t *buf;
        tide_conv_job(h->core, job, &pb, &a);
        buf = malloc(tide__v1__job__get_packed_size(&pb) + 1);
        check(tide__v1__job__pack(&pb, buf) == tide__v1__job__get_packed_size(&pb));
        free(buf);
    }
    tide_core_actions(h->core, &n);
    h_check_invariants(h);
    tide_core_actions_clear(h->core);
    tide_arena_free(&a);
}

static void convert_workers(h_t *h, const stream_t *s)
{
    tide_arena_t a = TIDE_ARENA_INIT;
    Tide__V1__Worker pb;
    uint8_t *buf;

    if (!s->worker)
        return;
    tide_conv_worker(h->core, s->worker, &pb, &a);
    buf = malloc(tide__v1__worker__get_packed_size(&pb) + 1);
    check(tide__v1__worker__pack(&pb, buf) == tide__v1__worker__get_packed_size(&pb));
    free(buf);
    tide_arena_free(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    stream_t s = {0};
    size_t off = 0;
    int steps = 0;
    h_t h;
    tide_job_spec_t spec = h_spec(3, 3, TIDE_PRIO_NORMAL);
    tide_job_t *job;
    tide_error_t err;

    h_init(&h, NULL);
    h_register_ex(&h, "w0", "n0", 0, NULL, 0, "rack=r0");
    h_register_ex(&h, "w1", "n0", 1, NULL, 0, "rack=r0");
    check(tide_core_job_submit(h.core, &spec, &job, &err) == 0);
    settle(&h);
    while (off + 3 <= size && steps++ < STEPS_MAX) {
        uint8_t op = data[off];
        size_t len = (size_t)data[off + 1] << 8 | data[off + 2];
        off += 3;
        switch (op % 4) {
        case 0:
            if (len > size - off)
                len = size - off;
            on_message(&h, &s, data + off, len);
            off += len;
            convert_workers(&h, &s);
            break;
        case 1:
            h_advance(&h, (int64_t)len * 10);
            break;
        case 2:
            close_stream(&h, &s);
            s = (stream_t){.n = s.n + 1};
            break;
        default:
            h_advance_alive(&h, tide_core_config(h.core)->heartbeat_interval_ms, NULL);
            break;
        }
        settle(&h);
    }
    close_stream(&h, &s);
    settle(&h);
    h_fini(&h);
    return 0;
}

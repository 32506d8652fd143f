/* The scheduler shell (see shell.h). Invariants: the core's action buffer is empty between calls (each
 * call is absorbed at once); outbox items are released in the order they were queued and only after
 * the batch of their turn was committed; a job's record is packed at commit time (the daemon's
 * mark_dirty/persist_job), so the store never holds a state older than one the clients saw; task
 * reports are handled as scheduler/daemon/svc_workers.c does (only from the worker's current stream;
 * a steal the core refuses is answered "none"). */
#include "shell.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "invariants.h"
#include "xmalloc.h"

static const char *const *g_pools;
static const int32_t *g_dedicated;
static int g_n_pools;

static void core_start(dst_t *d, shell_t *sh)
{
    tide_error_t err;

    sh->core = tide_core_new(&sh->cfg);
    for (int i = 0; i < g_n_pools; i++)
        if (tide_core_pool_add(sh->core, g_pools[i], g_dedicated[i], &err) < 0)
            dst_fail(d, "pool %s: %s", g_pools[i], err.text);
    sh->h.core = sh->core;
    sh->h.mono = d->now;
    sh->epoch++;
    sh->starts++;
    tide_core_set_time(sh->core, d->now, dst_wall(d));
}

shell_t *shell_new(dst_t *d, const tide_core_config_t *cfg, const char *const *pools,
                   const int32_t *dedicated, int n_pools)
{
    shell_t *sh = tide_xcalloc(1, sizeof(*sh));

    sh->cfg = *cfg;
    g_pools = pools;
    g_dedicated = dedicated;
    g_n_pools = n_pools;
    d->shell = sh;
    core_start(d, sh);
    sh->up = true;
    return sh;
}

static void outbox_clear(shell_t *sh)
{
    out_item_t *o = sh->out_head, *next;

    for (; o; o = next) {
        next = o->next;
        net_msg_free(o->msg);
        free(o);
    }
    sh->out_head = sh->out_tail = NULL;
}

void shell_free(shell_t *sh)
{
    if (!sh)
        return;
    tide_core_free(sh->core);
    store_batch_clear(&sh->batch);
    outbox_clear(sh);
    free(sh->dirty);
    free(sh);
}

bool shell_up(const dst_t *d)
{
    return d->shell->up;
}

/* --- absorbing actions --- */

static out_item_t *out_add(shell_t *sh, int kind)
{
    out_item_t *o = tide_xcalloc(1, sizeof(*o));

    o->kind = kind;
    if (sh->out_tail)
        sh->out_tail->next = o;
    else
        sh->out_head = o;
    sh->out_tail = o;
    return o;
}

static void out_msg(dst_t *d, const tide_action_t *a, net_kind_t kind)
{
    shell_t *sh = d->shell;
    out_item_t *o;
    net_msg_t *m;
    bool gen_gone = false;

    if (!a->conn)
        return; /* no stream: the daemon has nowhere to send it either */
    if (kind == NM_LAUNCH && a->job &&
        (a->job->generation != a->generation || a->job->state != TIDE_JOB_RUNNING ||
         a->rank >= a->job->n_ranks + a->job->max_lent)) {
        /* KB9 (dst.h): the call that launched the rank also ended its generation */
        if (d->sw.strict[9])
            dst_fail(d, "KB9: LAUNCH of job %s generation %d rank %d after the same call ended that generation (job "
                        "%s, generation %d, %d ranks): the daemon's send_launch would read job->ranks[%d] of freed "
                        "ranks",
                     a->job->id, a->generation, a->rank, tide_job_state_name(a->job->state), a->job->generation,
                     a->job->n_ranks, a->rank);
        d->stats->kb9_seen++;
        gen_gone = true;
        dst_trace(d, "shell: KB9: LAUNCH of job %s g%d r%d whose generation the same call ended", a->job->id,
                  a->generation, a->rank);
    }
    o = out_add(sh, OUT_MSG);
    m = o->msg = net_msg_new(kind);
    o->stream = (uint64_t)(uintptr_t)a->conn;
    m->epoch = sh->epoch;
    if (a->job_id)
        snprintf(m->job, sizeof(m->job), "%s", a->job_id);
    else if (a->job)
        snprintf(m->job, sizeof(m->job), "%s", a->job->id);
    m->gen = a->generation;
    m->rank = a->rank;
    m->port = a->master_port;
    m->world = gen_gone ? -1 : a->job ? a->job->n_ranks : 0; /* -1: not known (KB9) */
    /* the daemon's send_launch: a rank after the generation's is a lent (burst) slot */
    m->burst = kind == NM_LAUNCH && !gen_gone && a->job && a->rank >= a->job->n_ranks;
    m->step = a->step;
    m->request = a->request_id;
}

static void mark_dirty(shell_t *sh, const char *id)
{
    for (size_t i = 0; i < sh->n_dirty; i++)
        if (strcmp(sh->dirty[i], id) == 0)
            return;
    if (sh->n_dirty == sh->cap_dirty) {
        sh->cap_dirty = sh->cap_dirty ? sh->cap_dirty * 2 : 32;
        sh->dirty = tide_xrealloc(sh->dirty, sh->cap_dirty * sizeof(*sh->dirty));
    }
    snprintf(sh->dirty[sh->n_dirty++], DST_ID_MAX, "%s", id);
}

static void forget_dirty(shell_t *sh, const char *id)
{
    for (size_t i = 0; i < sh->n_dirty; i++) {
        if (strcmp(sh->dirty[i], id) == 0) {
            memcpy(sh->dirty[i], sh->dirty[--sh->n_dirty], DST_ID_MAX);
            return;
        }
    }
}

/* Carries out the actions of the core call that just returned. */
static void absorb(dst_t *d, int32_t reserve_before, int32_t usable_before)
{
    shell_t *sh = d->shell;
    size_t n;
    const tide_action_t *acts = tide_core_actions(sh->core, &n);

    d->stats->core_calls++;
    sh->n_ev = 0;
    for (size_t i = 0; i < n; i++) {
        const tide_action_t *a = &acts[i];
        /* the full checks after the step look at jobs and workers: a steal's messages change neither */
        d->changed |= a->type != TIDE_ACT_RELEASE_TASKS && a->type != TIDE_ACT_GIVE_TASKS;
        switch (a->type) {
        case TIDE_ACT_PERSIST_JOB:
            mark_dirty(sh, a->job->id);
            break;
        case TIDE_ACT_DELETE_JOB:
            forget_dirty(sh, a->job_id);
            store_batch_del_job(&sh->batch, a->job_id);
            chk_on_delete(d, a->job_id);
            break;
        case TIDE_ACT_PERSIST_WORKER:
            store_batch_put_worker(&sh->batch, a->worker->id, a->worker->cordoned);
            break;
        case TIDE_ACT_PERSIST_META:
            store_batch_put_meta(&sh->batch, tide_core_next_seq(sh->core));
            break;
        case TIDE_ACT_WELCOME:
            out_msg(d, a, NM_WELCOME);
            break;
        case TIDE_ACT_LAUNCH:
            chk_on_lend(d, a);
            out_msg(d, a, NM_LAUNCH);
            break;
        case TIDE_ACT_STOP:
            out_msg(d, a, NM_STOP);
            break;
        case TIDE_ACT_CHECKPOINT_NOW:
            out_msg(d, a, NM_CKPT_NOW);
            break;
        case TIDE_ACT_FLUSH:
            out_msg(d, a, NM_FLUSH);
            break;
        case TIDE_ACT_RELEASE_TASKS:
            out_msg(d, a, NM_RELEASE_TASKS);
            if (a->conn) {
                sh->out_tail->msg->task_kind = a->task_kind;
                sh->out_tail->msg->queued = a->max_tasks;
            }
            break;
        case TIDE_ACT_GIVE_TASKS:
            chk_on_give(d, a);
            out_msg(d, a, NM_GIVE_TASKS);
            if (a->conn) {
                sh->out_tail->msg->task_kind = a->task_kind;
                net_msg_set_ids(sh->out_tail->msg, a->task_ids, a->n_task_ids);
            }
            break;
        case TIDE_ACT_CLOSE_STREAM:
            if (a->conn)
                out_add(sh, OUT_CLOSE)->stream = (uint64_t)(uintptr_t)a->conn;
            break;
        case TIDE_ACT_FORGET_CKPT:
            break; /* simulated workers keep no hot tier */
        case TIDE_ACT_EVENT:
            if (sh->n_ev < SHELL_EVENTS_MAX) {
                shell_event_t *e = &sh->ev[sh->n_ev++];
                e->type = a->event_type;
                snprintf(e->job, sizeof(e->job), "%s", a->job_id ? a->job_id : "");
                snprintf(e->worker, sizeof(e->worker), "%s", a->worker_id ? a->worker_id : "");
                snprintf(e->text, sizeof(e->text), "%s", a->text ? a->text : "");
            }
            dst_trace(d, "core: %s: %.110s", a->event_type, a->text ? a->text : "");
            break;
        }
    }
    chk_after_call(d, sh->ev, sh->n_ev, reserve_before, usable_before);
    tide_core_actions_clear(sh->core);
}

/* Wraps one core call: the reserve before it (for the checker), then the absorb. */
#define CALL(d, expr)                                                                                            \
    do {                                                                                                         \
        int32_t rb_ = (d)->shell->core->reserve.gpus, ub_ = (d)->shell->core->n_usable;                          \
        expr;                                                                                                    \
        absorb((d), rb_, ub_);                                                                                   \
    } while (0)

/* --- the turn --- */

/* Work stealing reports (svc_workers.c on_task_message): the core's answer is checked against the
 * world (chk_task_*). */
static void on_task_message(dst_t *d, net_stream_t *s, tide_worker_t *w, const net_msg_t *m)
{
    shell_t *sh = d->shell;
    tide_core_t *core = sh->core;
    tide_task_kind_t kind = m->task_kind == 0 ? TIDE_TASK_MEMBER : (tide_task_kind_t)m->task_kind;
    tide_error_t err = {{0}};
    int32_t before[W_MAX_TASKS * 2];
    int rc = 0;

    if (w->conn != net_conn(s))
        return; /* an older stream of a worker that has re-registered */
    switch (m->kind) {
    case NM_TASKS_DECLARED:
        CALL(d, rc = tide_core_tasks_declared(core, w, m->job, m->gen, m->rank, kind, m->step, m->ids, m->n_ids,
                                              m->total, &err));
        d->stats->declare_nospace += rc == -ENOSPC;
        break;
    case NM_TASKS_DONE:
        chk_task_holders(d, m, kind, before, W_MAX_TASKS * 2);
        CALL(d, rc = tide_core_tasks_done(core, w, m->job, m->gen, m->rank, kind, m->step, m->ids, m->n_ids,
                                          m->queued, &err));
        chk_task_committed(d, m, kind, before, W_MAX_TASKS * 2);
        break;
    case NM_STEAL:
        CALL(d, rc = tide_core_steal_request(core, w, m->job, m->gen, m->rank, kind, m->step, m->request, &err));
        if (rc != 0) {
            /* a steal always gets an answer: one the core cannot serve gets "none left" */
            out_item_t *o = out_add(sh, OUT_MSG);
            net_msg_t *g = o->msg = net_msg_new(NM_GIVE_TASKS);
            o->stream = s->id;
            g->epoch = sh->epoch;
            snprintf(g->job, sizeof(g->job), "%s", m->job);
            g->gen = m->gen;
            g->rank = m->rank;
            g->task_kind = m->task_kind;
            g->step = m->step;
            g->request = m->request;
        }
        break;
    case NM_TASKS_RELEASED:
        CALL(d, rc = tide_core_tasks_released(core, w, m->job, m->gen, m->rank, kind, m->step, m->request, m->ids,
                                              m->n_ids, m->queued, &err));
        break;
    default:
        return;
    }
    if (rc != 0 && rc != -ESTALE) {
        d->stats->task_rejected++;
        dst_trace(d, "shell: %s from %s refused (%d): %.90s", net_kind_name(m->kind), w->id, rc, err.text);
    }
    /* the full walk after what moves tasks or opens a pool; TasksDone (the most frequent) commits only
     * what chk_task_committed checked */
    chk_task_pool(d, m->job, m->gen, kind, m->step, m->kind != NM_TASKS_DONE);
}

static void on_message(dst_t *d, net_stream_t *s, const net_msg_t *m)
{
    shell_t *sh = d->shell;
    tide_core_t *core = sh->core;
    tide_worker_t *w = s->sched_worker;
    void *conn = net_conn(s);
    tide_error_t err;
    char path[64], sha[16];

    if (m->kind != NM_HELLO && m->kind != NM_CLOSE && !w)
        return; /* the first message must be a hello */
    switch (m->kind) {
    case NM_HELLO: {
        agent_t *a = &d->world->a[s->agent];
        tide_rank_report_t reps[W_ENTRIES];
        tide_worker_info_t info = {.id = a->id, .node = a->node, .gpu_index = a->gpu, .device = a->device,
                                   .peak_flops = W_PEAK_FLOPS, .memory_bytes = a->mem, .labels = a->labels,
                                   .n_labels = a->n_labels, .address = "10.0.0.1", .version = "dst",
                                   .boot_id = m->boot, .stream_seq = m->stream_seq};
        int rc;
        if (w)
            return; /* hello sent twice on one stream */
        for (size_t i = 0; i < m->n_ranks && i < W_ENTRIES; i++) {
            const net_rank_t *r = &m->ranks[i];
            reps[i] = (tide_rank_report_t){.job_id = r->job, .generation = r->gen, .rank = r->rank,
                                           .running = r->running, .exit_code = r->code, .pid = r->pid,
                                           .master_port = r->port};
        }
        CALL(d, rc = tide_core_worker_register(core, &info, conn, reps, m->n_ranks, &s->sched_worker, &err));
        if (rc == -ESTALE) {
            /* a hello from a stream the agent has replaced (KB7): the daemon ends it, nothing changed */
            dst_trace(d, "shell: %s: refused: %s", a->id, err.text);
            d->stats->hellos_refused++;
            net_close(d, s, NET_TO_SCHED, false);
        } else if (rc < 0)
            dst_fail(d, "worker %s could not register: %s", a->id, err.text);
        break;
    }
    case NM_HEARTBEAT:
        if (w->conn != conn)
            break; /* an older stream of a re-registered worker no longer speaks for it */
        CALL(d, tide_core_worker_heartbeat(core, w, NULL));
        for (size_t i = 0; i < m->n_prog; i++) {
            chk_on_progress(d, w, m->prog[i].job, m->prog[i].gen, m->prog[i].rank, &m->prog[i].p);
            CALL(d, tide_core_rank_progress(core, w, m->prog[i].job, m->prog[i].gen, m->prog[i].rank,
                                            &m->prog[i].p));
        }
        break;
    case NM_RANK_STARTED:
        CALL(d, tide_core_rank_started(core, w, m->job, m->gen, m->rank, m->pid, m->port));
        break;
    case NM_RANK_EXITED:
        CALL(d, tide_core_rank_exited(core, w, m->job, m->gen, m->rank, m->code,
                                      m->code == 137 ? "killed" : NULL));
        break;
    case NM_CKPT_SAVED:
        snprintf(path, sizeof(path), "/hot/%s/step-%lld/rank-%d", m->job, (long long)m->step, m->rank);
        CALL(d, tide_core_checkpoint_saved(core, w, m->job, m->gen, m->rank, m->step, path, 1000, "00"));
        break;
    case NM_FLUSHED:
        snprintf(path, sizeof(path), "/durable/%s/step-%lld", m->job, (long long)m->step);
        snprintf(sha, sizeof(sha), "ab%lld", (long long)m->step);
        CALL(d, tide_core_ckpt_flushed(core, w, m->job, m->gen, m->rank, m->step, m->ok, path, 1000, sha,
                                       m->ok ? NULL : "disk full"));
        break;
    case NM_GOODBYE:
        s->goodbye = true;
        break;
    case NM_TASKS_DECLARED:
    case NM_TASKS_DONE:
    case NM_STEAL:
    case NM_TASKS_RELEASED:
        on_task_message(d, s, w, m);
        break;
    case NM_CLOSE:
        s->sched_gone = true;
        s->gone_kb = 1;
        world_unreachable(d, &d->world->a[s->agent], 1);
        if (w)
            CALL(d, tide_core_worker_disconnected(core, w, conn, s->goodbye));
        break;
    default:
        break;
    }
}

static void commit_and_release(dst_t *d)
{
    shell_t *sh = d->shell;
    out_item_t *o;

    for (size_t i = 0; i < sh->n_dirty; i++) {
        tide_job_t *job = tide_core_job_find(sh->core, sh->dirty[i]);
        if (job)
            store_batch_put_job(&sh->batch, store_job_snapshot(job));
    }
    sh->n_dirty = 0;
    if (sh->batch.n) {
        chk_on_commit(d, &sh->batch);
        d->stats->commits++;
    }
    store_commit(d->store, &sh->batch);
    chk_turn_committed(d);
    /* Durable: release what waited for it, in order. */
    while ((o = sh->out_head)) {
        net_stream_t *s = o->stream ? net_find(d->net, o->stream) : NULL;
        sh->out_head = o->next;
        if (!sh->out_head)
            sh->out_tail = NULL;
        if (o->kind == OUT_MSG) {
            if (s && !s->sched_gone) {
                net_send(d, s, NET_TO_WORKER, o->msg);
                o->msg = NULL;
            }
        } else if (o->kind == OUT_CLOSE) {
            if (s && !s->sched_gone) {
                net_close(d, s, NET_TO_SCHED, false);
                s->gone_kb = 1;
                world_unreachable(d, &d->world->a[s->agent], 1);
                if (s->sched_worker && sh->n_closes < sizeof(sh->closes) / sizeof(sh->closes[0])) {
                    sh->closes[sh->n_closes].w = s->sched_worker;
                    sh->closes[sh->n_closes].conn = s->id;
                    sh->n_closes++;
                }
            }
        } else {
            chk_on_reply(d, o->op, o->job, o->rc, o->arg);
        }
        net_msg_free(o->msg);
        free(o);
    }
}

static void crash(dst_t *d, bool lossy)
{
    shell_t *sh = d->shell;

    d->stats->restarts++;
    d->stats->lossy_restarts += lossy;
    sh->crashes++;
    dst_trace(d, "shell: scheduler crashes (%s)", lossy ? "the open batch is lost" : "after its commit");
    if (lossy) {
        chk_turn_lost(d);
        store_batch_clear(&sh->batch);
        sh->n_dirty = 0;
        outbox_clear(sh);
    } else {
        commit_and_release(d);
    }
    for (net_stream_t *s = d->net->streams; s; s = s->next) {
        s->sched_worker = NULL;
        if (!s->sched_gone) {
            net_close(d, s, NET_TO_SCHED, false);
            s->gone_kb = 2;
        }
    }
    for (int i = 0; i < d->world->n; i++)
        world_unreachable(d, &d->world->a[i], 2);
    sh->n_closes = 0;
    tide_core_free(sh->core);
    sh->core = NULL;
    sh->h.core = NULL;
    sh->up = false;
    sh->up_at = d->now + dst_range(d, 0, 2000);
}

static void restart(dst_t *d)
{
    shell_t *sh = d->shell;
    tide_error_t err;
    int rc;

    core_start(d, sh);
    CALL(d, rc = store_restore(d->store, sh->core, &err));
    if (rc < 0)
        dst_fail(d, "the store does not restore: %s", err.text);
    sh->up = true;
    dst_trace(d, "shell: scheduler restarted from the store (epoch %llu)", (unsigned long long)sh->epoch);
    chk_on_restart(d);
}

void shell_crash_at_turn_end(dst_t *d, bool lossy)
{
    if (d->shell->up && d->shell->crash == CRASH_NONE)
        d->shell->crash = lossy ? CRASH_LOSSY : CRASH_CLEAN;
}

void shell_set_time(dst_t *d)
{
    shell_t *sh = d->shell;

    if (!sh->up)
        return;
    tide_core_set_time(sh->core, d->now, dst_wall(d));
    sh->h.mono = d->now;
}

void shell_turn(dst_t *d)
{
    shell_t *sh = d->shell;
    net_stream_t *s;
    net_msg_t *m;

    if (!sh->up) {
        if (d->now < sh->up_at)
            return;
        restart(d);
    }
    tide_core_set_time(sh->core, d->now, dst_wall(d));
    sh->h.mono = d->now;
    d->stats->turns++;
    /* the close callbacks of streams the shell ended last turn (the daemon's on_close) */
    for (size_t i = 0; i < sh->n_closes; i++)
        CALL(d, tide_core_worker_disconnected(sh->core, sh->closes[i].w,
                                              (void *)(uintptr_t)sh->closes[i].conn, false));
    sh->n_closes = 0;
    while ((m = net_pop(d->net, NET_TO_SCHED, d->now, NULL, NULL, &s))) {
        on_message(d, s, m);
        net_msg_free(m);
    }
    for (int i = 0; i < d->world->n; i++) {
        agent_t *a = &d->world->a[i];
        tide_worker_t *w;
        if (!a->fail_report)
            continue;
        a->fail_report = false;
        if ((w = tide_core_worker_find(sh->core, a->id)))
            CALL(d, tide_core_worker_failed(sh->core, w, "its node failed (fault model)"));
    }
    if (tide_core_next_deadline(sh->core) <= d->now)
        CALL(d, tide_core_tick(sh->core));
    if (sh->crash != CRASH_NONE) {
        bool lossy = sh->crash == CRASH_LOSSY;
        sh->crash = CRASH_NONE;
        crash(d, lossy);
        return;
    }
    commit_and_release(d);
}

int64_t shell_next_due(dst_t *d)
{
    shell_t *sh = d->shell;

    if (!sh->up)
        return sh->up_at;
    if (sh->n_closes || sh->crash != CRASH_NONE)
        return d->now + 1;
    return tide_core_next_deadline(sh->core);
}

/* --- clients --- */

static out_item_t *reply(shell_t *sh, shell_op_t op, const char *id, int rc)
{
    out_item_t *o = out_add(sh, OUT_REPLY);

    o->op = op;
    o->rc = rc;
    snprintf(o->job, sizeof(o->job), "%s", id ? id : "");
    return o;
}

int shell_submit(dst_t *d, const tide_job_spec_t *spec, wjob_t *behaviour, char *id_out, size_t len)
{
    shell_t *sh = d->shell;
    tide_job_t *job = NULL;
    tide_error_t err;
    int rc;

    if (!sh->up)
        return -ENOTCONN;
    CALL(d, rc = tide_core_job_submit(sh->core, spec, &job, &err));
    if (rc == 0) {
        snprintf(behaviour->id, sizeof(behaviour->id), "%s", job->id);
        world_job_set(d->world, behaviour);
        snprintf(id_out, len, "%s", job->id);
        chk_on_submit(d, job->id);
    }
    reply(sh, OP_SUBMIT, rc == 0 ? job->id : "", rc);
    return rc;
}

int shell_cancel(dst_t *d, const char *id)
{
    shell_t *sh = d->shell;
    tide_job_t *job;
    tide_error_t err;
    int rc;

    if (!sh->up)
        return -ENOTCONN;
    CALL(d, rc = tide_core_job_cancel(sh->core, id, &job, &err));
    reply(sh, OP_CANCEL, id, rc);
    return rc;
}

int shell_cordon(dst_t *d, const char *worker_id, bool cordon)
{
    shell_t *sh = d->shell;
    tide_worker_t *w;
    tide_error_t err;
    int rc;

    if (!sh->up)
        return -ENOTCONN;
    CALL(d, rc = tide_core_worker_cordon(sh->core, worker_id, cordon, &w, &err));
    if (rc == 0 && !cordon)
        chk_on_uncordon(d, worker_id);
    reply(sh, OP_CORDON, worker_id, rc);
    return rc;
}

int shell_drain(dst_t *d, const char *worker_id, const char *reason)
{
    shell_t *sh = d->shell;
    tide_worker_t *w = NULL, *before_w;
    tide_error_t err = {{0}};
    chk_drain_t before = {.exists = false, .gen = -1, .rank = -1};
    size_t n_acts;
    int32_t rb, ub;
    int rc;

    if (!sh->up)
        return -ENOTCONN;
    if ((before_w = tide_core_worker_find(sh->core, worker_id))) {
        before.exists = true;
        if (before_w->job) {
            const tide_job_t *job = before_w->job;
            snprintf(before.job, sizeof(before.job), "%s", job->id);
            before.gen = before_w->generation;
            before.rank = before_w->rank;
            before.current = job->state == TIDE_JOB_RUNNING && before_w->generation == job->generation &&
                             before_w->rank >= 0 && before_w->rank < job->n_ranks;
        }
    }
    rb = sh->core->reserve.gpus;
    ub = sh->core->n_usable;
    rc = tide_core_worker_drain(sh->core, worker_id, reason, &w, &err);
    (void)tide_core_actions(sh->core, &n_acts);
    chk_on_drain(d, worker_id, rc, &before, n_acts);
    absorb(d, rb, ub);
    reply(sh, OP_DRAIN, worker_id, rc);
    return rc;
}

int shell_checkpoint(dst_t *d, const char *id, int64_t deadline_ms)
{
    shell_t *sh = d->shell;
    tide_job_t *job;
    tide_error_t err;
    int rc;

    if (!sh->up)
        return -ENOTCONN;
    CALL(d, rc = tide_core_job_checkpoint(sh->core, id, deadline_ms, &job, &err));
    reply(sh, OP_CHECKPOINT, id, rc);
    return rc;
}

int shell_scale(dst_t *d, const char *id, int32_t workers, bool elastic)
{
    shell_t *sh = d->shell;
    tide_job_t *job = NULL, *before_job;
    tide_error_t err = {{0}};
    chk_scale_t before = {.exists = false};
    size_t n_acts;
    int32_t rb, ub;
    int rc;

    if (!sh->up)
        return -ENOTCONN;
    if ((before_job = tide_core_job_find(sh->core, id))) {
        before.exists = true;
        before.state = before_job->state;
        before.target = before_job->target_workers;
        before.resize_state = before_job->resize.state;
        before.resize_to = before_job->resize.to_workers;
        before.size_cap = before_job->size_cap;
        before.generation = before_job->generation;
        before.n_ranks = before_job->n_ranks;
        before.min = before_job->spec.min_workers;
        before.max = before_job->spec.max_workers;
        before.settled = before_job->state == TIDE_JOB_RUNNING && before_job->ranks_unstarted == 0 &&
                         !before_job->launch_deadline && !before_job->awaiting && !before_job->preempted_by &&
                         !tide__resize_in_progress(before_job);
    }
    rb = sh->core->reserve.gpus;
    ub = sh->core->n_usable;
    rc = tide_core_job_scale(sh->core, id, workers, elastic, &job, &err);
    (void)tide_core_actions(sh->core, &n_acts);
    chk_on_scale(d, id, workers, elastic, rc, err.text, &before, n_acts);
    absorb(d, rb, ub);
    reply(sh, OP_SCALE, id, rc)->arg = elastic ? 0 : workers;
    return rc;
}

void shell_load_phase(dst_t *d, const char *id, bool high)
{
    shell_t *sh = d->shell;
    tide_job_t *job;

    if (!sh->up || !(job = tide_core_job_find(sh->core, id)))
        return;
    CALL(d, tide_core_job_load_phase(sh->core, job, high));
}

void shell_job_telemetry(dst_t *d)
{
    shell_t *sh = d->shell;
    tide_job_t *job = NULL;

    if (!sh->up)
        return;
    while ((job = tide_core_job_next(sh->core, job))) {
        wjob_t *j = job->state == TIDE_JOB_RUNNING ? world_job_find(d->world, job->id) : NULL;
        if (j)
            tide_core_job_telemetry(sh->core, job, j->mfu, 1);
    }
    CALL(d, (void)0);
}

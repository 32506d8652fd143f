/* The simulated world (see world.h). Invariants kept here: an agent has at most one table entry per
 * (job, generation, rank); an exit is reported on a welcomed stream or carried by a welcomed hello, and
 * the newest W_KEEP_REPORTED reported exits are repeated in every hello; processes of a generation
 * step together, so every rank of a trainer saves the same checkpoint steps; a task job's step ends
 * only when every rank of its generation ended its part, and every handing of a task to a trainer is
 * counted (the at-most-once and exactly-once checks). The checker sees every spawn before it happens
 * (chk_on_spawn). A burst (lent) process never counts as a member of its generation: it neither starts
 * nor stalls the trainer, and a step's exactly-once check waits until no lent process works on it. */
#include "world.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "invariants.h"
#include "shell.h"
#include "xmalloc.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define RENDEZVOUS_MS 60000

static int deque_send(void *ud, const Tide__V1__WorkerMessage *msg);
static const tide_task_deque_ops_t deque_ops = {deque_send};
static void lent_excuse(trainer_t *tr, int32_t r, int64_t from);

world_t *world_new(dst_t *d)
{
    world_t *w = tide_xcalloc(1, sizeof(*w));

    w->d = d;
    w->next_pid = 1000;
    w->stop_grace_ms = 10000;
    w->hb_ms = 500;
    return w;
}

void world_free(world_t *w)
{
    wjob_t *j, *jt;
    trainer_t *t, *tt;

    if (!w)
        return;
    HASH_ITER(hh, w->trainers, t, tt) {
        HASH_DEL(w->trainers, t);
        for (int64_t i = 0; i < t->n_steps; i++)
            free(t->steps[i]);
        free(t->steps);
        free(t);
    }
    HASH_ITER(hh, w->jobs, j, jt) {
        HASH_DEL(w->jobs, j);
        free(j);
    }
    for (int i = 0; i < w->n; i++)
        tide_task_deque_free(w->a[i].deque);
    HASH_CLEAR(hh, w->by_id);
    free(w);
}

agent_t *world_add_agent(world_t *w, const char *node, int gpu, const char *device, uint64_t mem,
                         const char *pool, const char *rack, const char *sw, bool new_arch)
{
    agent_t *a = &w->a[w->n];

    memset(a, 0, sizeof(*a));
    a->idx = w->n++;
    snprintf(a->id, sizeof(a->id), "%s/gpu%d", node, gpu);
    snprintf(a->node, sizeof(a->node), "%s", node);
    snprintf(a->device, sizeof(a->device), "%s", device);
    snprintf(a->pool, sizeof(a->pool), "%s", pool);
    snprintf(a->rack, sizeof(a->rack), "%s", rack);
    snprintf(a->sw, sizeof(a->sw), "%s", sw);
    a->gpu = gpu;
    a->mem = mem;
    a->new_arch = new_arch;
    if (a->pool[0])
        a->labels[a->n_labels++] = (tide_kv_t){.key = TIDE_LABEL_POOL, .value = a->pool};
    if (a->rack[0])
        a->labels[a->n_labels++] = (tide_kv_t){.key = TIDE_LABEL_RACK, .value = a->rack};
    if (a->sw[0])
        a->labels[a->n_labels++] = (tide_kv_t){.key = TIDE_LABEL_SWITCH, .value = a->sw};
    if (new_arch)
        a->labels[a->n_labels++] = (tide_kv_t){.key = TIDE_LABEL_NEW_ARCH, .value = "true"};
    a->up_at = INT64_MAX;
    a->backoff = BACKOFF_MIN_MS;
    a->w = w;
    tide_task_deque_new(&deque_ops, a, &a->deque);
    /* Domains as the core keys them: a worker without a rack label is its node's own rack, one
     * without a switch label its rack's own switch. Same key, same number. */
    for (int l = 0; l < 3; l++) {
        a->dom[l] = a->idx;
        for (int i = 0; i < a->idx; i++) {
            const agent_t *b = &w->a[i];
            bool same = l == 0 ? strcmp(a->node, b->node) == 0
                        : l == 1 ? (a->rack[0] ? strcmp(a->rack, b->rack) == 0
                                               : !b->rack[0] && strcmp(a->node, b->node) == 0)
                                 : (a->sw[0] ? strcmp(a->sw, b->sw) == 0 : !b->sw[0] && b->dom[1] == a->dom[1]);
            if (same) {
                a->dom[l] = b->dom[l];
                break;
            }
        }
    }
    HASH_ADD_STR(w->by_id, id, a);
    return a;
}

wjob_t *world_job_find(world_t *w, const char *id)
{
    wjob_t *j;

    HASH_FIND_STR(w->jobs, id, j);
    return j;
}

wjob_t *world_job_set(world_t *w, const wjob_t *b)
{
    wjob_t *j = world_job_find(w, b->id);

    if (!j) {
        j = tide_xmalloc(sizeof(*j));
        *j = *b;
        HASH_ADD_STR(w->jobs, id, j);
    } else {
        UT_hash_handle hh = j->hh;
        *j = *b;
        j->hh = hh;
    }
    return j;
}

agent_t *world_agent_by_id(world_t *w, const char *id)
{
    agent_t *a;

    HASH_FIND_STR(w->by_id, id, a);
    return a;
}

void world_orphan(world_t *w, const char *worker_id)
{
    agent_t *a = world_agent_by_id(w, worker_id);

    if (a && a->stream)
        a->dead_stream = a->stream; /* what still arrives on it predates the verdict */
    for (int i = 0; a && i < W_ENTRIES; i++) {
        wentry_t *e = &a->e[i];
        /* A lent process that already exited is written off as well: completions it reported on a stream
         * that died with it never arrived, and the scheduler orphans what it still held (seed 1011490). */
        if (!e->used)
            continue;
        if (e->running)
            e->orphaned = true;
        if (e->burst && e->rank < W_MAX_RANKS && e->tr->job->tasks && e->tr->rk[e->rank].rid == (uint64_t)e->pid)
            lent_excuse(e->tr, e->rank, e->tr->rk[e->rank].first_step);
    }
}

void world_unreachable(dst_t *d, agent_t *a, int kb)
{
    if (d->sw.strict[kb])
        return;
    /* KB1 (dst.h): the scheduler lost its stream to this worker; until the core keeps holding a
     * requeued job's ranks there, treat them as written off. */
    for (int i = 0; i < W_ENTRIES; i++)
        if (a->e[i].used && a->e[i].running)
            a->e[i].orphaned = true;
}

int world_running(const agent_t *a)
{
    return a->n_running;
}

/* --- trainers --- */

static trainer_t *trainer_get(dst_t *d, const char *job, int32_t gen, int32_t world)
{
    world_t *w = d->world;
    char key[48];
    trainer_t *t;

    snprintf(key, sizeof(key), "%s/%d", job, gen);
    HASH_FIND_STR(w->trainers, key, t);
    if (t) {
        /* every rank of a generation is launched with its size (a resize makes a new generation) */
        if (world > 0 && t->world != (world > W_MAX_RANKS ? W_MAX_RANKS : world))
            dst_fail(d, "job %s generation %d: a rank is launched with WORLD_SIZE %d, another had %d", job, gen, world,
                     t->world);
        return t;
    }
    t = tide_xcalloc(1, sizeof(*t));
    snprintf(t->key, sizeof(t->key), "%s", key);
    t->job = world_job_find(w, job);
    if (!t->job) {
        /* A job the clients never saw: cannot happen, but behave like a plain trainer. */
        wjob_t b = {.step_ms = 100, .total_steps = 50, .ckpt_every = 10, .peer_timeout_ms = 3000,
                    .mfu = 0.4, .resume = -1, .phase_at = INT64_MAX};
        snprintf(b.id, sizeof(b.id), "%s", job);
        t->job = world_job_set(w, &b);
    }
    t->gen = gen;
    t->world = world < 1 ? 1 : (world > W_MAX_RANKS ? W_MAX_RANKS : world);
    t->t0 = t->stall = -1;
    t->resume = t->job->resume;
    /* A new generation resumes from the newest checkpoint every rank of one generation saved, whatever
     * its size; the scheduler never records one that the trainers did not complete. */
    if (shell_up(d)) {
        const tide_job_t *cj = tide_core_job_find(d->shell->core, job);
        if (cj && cj->last_ckpt.step > t->resume)
            dst_fail(d, "job %s generation %d resumes from step %lld, but the scheduler recorded a checkpoint of step "
                        "%lld (generation %d) that no generation completed",
                     job, gen, (long long)t->resume, (long long)cj->last_ckpt.step, cj->last_ckpt.generation);
    }
    if (t->job->last_world && t->job->last_world != t->world) {
        d->stats->gens_resized++;
        d->stats->gens_resized_resumed += t->resume > 0;
    }
    t->job->last_world = t->world;
    t->save_req = -1;
    t->fail_rank = -1;
    t->fail_after = -1;
    t->frz_after = t->frz_ms = t->frz_at = -1;
    if (t->job->sdk && !t->job->tasks && dst_chance(d, d->k.p_freeze)) {
        /* a freeze: mostly longer than the hang limit (the scheduler must notice), else shorter (it must
         * not) */
        int64_t lim = d->shell->cfg.hang_min_ms > 0 ? d->shell->cfg.hang_min_ms : 5000;
        t->frz_after = dst_range(d, 0, t->job->step_ms * t->job->total_steps);
        t->frz_ms = dst_chance(d, 0.7) ? dst_range(d, lim + lim / 2, 4 * lim) : dst_range(d, 100, lim / 2);
        d->stats->freezes++;
    }
    if (dst_chance(d, t->job->fail_p)) {
        t->fail_rank = (int32_t)dst_below(d, t->world);
        t->fail_after = dst_range(d, 0, t->job->step_ms * t->job->total_steps);
    }
    for (int r = 0; r < W_MAX_RANKS; r++) {
        t->saved[r] = -1;
        t->rk[r] = (trank_t){.tr = t, .r = r, .agent = -1, .slow = 1};
        if (r < t->world && t->job->tasks && dst_chance(d, t->job->p_slow_rank))
            t->rk[r].slow = (double)dst_range(d, 20, 50) / 10.0;
    }
    if (t->job->tasks) {
        t->n_steps = t->job->total_steps + 1;
        t->steps = tide_xcalloc((size_t)t->n_steps, sizeof(*t->steps));
        d->stats->task_trainers++;
    }
    HASH_ADD_STR(w->trainers, key, t);
    return t;
}

trainer_t *world_trainer(world_t *w, const char *job, int32_t gen)
{
    char key[48];
    trainer_t *t;

    snprintf(key, sizeof(key), "%s/%d", job, gen);
    HASH_FIND_STR(w->trainers, key, t);
    return t;
}

bool world_frozen(const trainer_t *tr, int64_t t)
{
    return tr->frz_at >= 0 && t >= tr->frz_at && t < tr->frz_at + tr->frz_ms;
}

/* The time the trainer has stepped from t0 to t (t > t0): all of it but its freeze. */
static int64_t active_ms(const trainer_t *tr, int64_t t)
{
    int64_t el = t - tr->t0;

    if (tr->frz_at >= 0 && t > tr->frz_at)
        el -= (t < tr->frz_at + tr->frz_ms ? t : tr->frz_at + tr->frz_ms) - tr->frz_at;
    return el;
}

int64_t world_step(const dst_t *d, const trainer_t *tr)
{
    int64_t end = d->now, s;

    if (tr->t0 < 0)
        return tr->resume < 0 ? 0 : tr->resume;
    if (tr->job->tasks)
        return tr->tstep < tr->job->total_steps ? tr->tstep : tr->job->total_steps;
    if (tr->stall >= 0 && tr->stall < end)
        end = tr->stall;
    s = (tr->resume < 0 ? 0 : tr->resume) + (end > tr->t0 ? active_ms(tr, end) / tr->job->step_ms : 0);
    return s < tr->job->total_steps ? s : tr->job->total_steps;
}

/* The time the trainer reaches step s (INT64_MAX when it never will). */
static int64_t step_time(const trainer_t *tr, int64_t s)
{
    int64_t base = tr->resume < 0 ? 0 : tr->resume, t;

    if (tr->job->tasks) /* event-driven: a step is reached when the one before it ended */
        return tr->t0 >= 0 && s <= tr->tstep ? tr->tstep_at : INT64_MAX;
    if (tr->t0 < 0 || s < base)
        return tr->t0 < 0 ? INT64_MAX : tr->t0;
    t = tr->t0 + (s - base) * tr->job->step_ms;
    if (tr->frz_at >= 0 && t > tr->frz_at)
        t += tr->frz_ms; /* it stood still meanwhile */
    if (tr->stall >= 0 && t > tr->stall)
        return INT64_MAX;
    return t;
}

/* When a running entry's process exits, and with which code. */
static int64_t exit_time(const wentry_t *e, int32_t *code)
{
    const trainer_t *tr = e->tr;
    const wjob_t *j = tr->job;
    int64_t t = INT64_MAX, finish, ft;
    int32_t c = 0;

    if (e->stop_at >= 0) {
        t = e->stop_at;
        c = 143;
    }
    if (e->burst) {
        /* a lent process: only a STOP or its own end; the trainer's steps and peers do not concern it */
        if (e->self_exit_at >= 0 && e->self_exit_at < t) {
            t = e->self_exit_at;
            c = e->self_code;
        }
        *code = c;
        return t;
    }
    if (tr->t0 >= 0) {
        finish = step_time(tr, j->total_steps);
        if (finish < t) {
            t = finish;
            c = 0;
        }
        if (tr->fail_rank == e->rank && tr->fail_after >= 0) {
            ft = tr->t0 + tr->fail_after;
            if ((tr->stall < 0 || ft <= tr->stall) && ft < t && ft < finish) {
                t = ft;
                c = 1 + e->rank % 3;
            }
        }
    } else if (e->start + RENDEZVOUS_MS < t) {
        t = e->start + RENDEZVOUS_MS; /* its peers never came */
        c = 1;
    }
    if (tr->stall >= 0 && tr->stall + j->peer_timeout_ms < t) {
        t = tr->stall + j->peer_timeout_ms; /* a peer died: the collective times out */
        c = 1;
    }
    *code = c;
    return t;
}

/* The next checkpoint step a rank of tr saves after `after` (-1: none before the end). */
static int64_t next_save(const trainer_t *tr, int64_t after)
{
    const wjob_t *j = tr->job;
    int64_t base = tr->resume < 0 ? 0 : tr->resume, s;

    if (!j->sdk)
        return -1;
    if (after < base)
        after = base;
    s = (after / j->ckpt_every + 1) * j->ckpt_every;
    if (tr->save_req > after && tr->save_req < s)
        s = tr->save_req;
    return s < j->total_steps ? s : -1;
}

static wentry_t *entry_find(agent_t *a, const char *job, int32_t gen, int32_t rank)
{
    for (int i = 0; i < W_ENTRIES; i++) {
        wentry_t *e = &a->e[i];
        if (e->used && e->gen == gen && e->rank == rank && strcmp(e->job, job) == 0)
            return e;
    }
    return NULL;
}

/* A free slot; the oldest reported exit makes room if needed. */
static wentry_t *entry_new(agent_t *a)
{
    wentry_t *old = NULL;

    for (int i = 0; i < W_ENTRIES; i++) {
        wentry_t *e = &a->e[i];
        if (!e->used)
            return e;
        if (!e->running && (!old || (e->reported && (!old->reported || e->seq < old->seq))))
            old = e;
    }
    return old;
}

/* Keeps the newest W_KEEP_REPORTED reported exits. */
static void entries_trim(agent_t *a)
{
    for (;;) {
        wentry_t *oldest = NULL;
        int kept = 0;
        for (int i = 0; i < W_ENTRIES; i++) {
            wentry_t *e = &a->e[i];
            if (!e->used || e->running || !e->reported)
                continue;
            kept++;
            if (!oldest || e->seq < oldest->seq)
                oldest = e;
        }
        if (kept <= W_KEEP_REPORTED)
            return;
        oldest->used = false;
    }
}

static net_stream_t *cur_stream(dst_t *d, agent_t *a)
{
    return a->stream ? net_find(d->net, a->stream) : NULL;
}

/* Sends towards the scheduler on the agent's stream (dropped when it has none). */
static void send(dst_t *d, agent_t *a, net_msg_t *m, bool may_dup)
{
    net_stream_t *s = cur_stream(d, a);

    if (!s) {
        net_msg_free(m);
        return;
    }
    if (may_dup && !d->calm && !d->sw.no_net_faults && dst_chance(d, d->k.p_dup)) {
        d->stats->dups++;
        net_send(d, s, NET_TO_SCHED, net_msg_dup(m));
    }
    net_send(d, s, NET_TO_SCHED, m);
}

static net_msg_t *rank_msg(net_kind_t kind, const wentry_t *e)
{
    net_msg_t *m = net_msg_new(kind);

    snprintf(m->job, sizeof(m->job), "%s", e->job);
    m->gen = e->gen;
    m->rank = e->rank;
    m->pid = e->pid;
    m->port = e->port;
    m->code = e->code;
    return m;
}

/* --- tasks (docs/work-stealing.md): the agents' deques and the task jobs' steps --- */

uint64_t world_task_id(const wjob_t *j, int i)
{
    return j->id_base + (uint64_t)i * j->id_stride;
}

int world_task_index(const wjob_t *j, uint64_t id)
{
    uint64_t i;

    if (id < j->id_base || (id - j->id_base) % j->id_stride != 0)
        return -1;
    i = (id - j->id_base) / j->id_stride;
    return i < (uint64_t)j->n_tasks ? (int)i : -1;
}

bool world_gen_over(dst_t *d, trainer_t *tr)
{
    const tide_job_t *job;

    if (!tr->gen_ended && shell_up(d)) {
        job = tide_core_job_find(d->shell->core, tr->job->id);
        tr->gen_ended = !job || job->generation != tr->gen || job->state != TIDE_JOB_RUNNING;
    }
    return tr->gen_ended;
}

/* Sends a task message towards the scheduler: sometimes twice in a row, sometimes with a late copy
 * that arrives out of order (a duplicate the core must treat as a no-op). */
static void task_send(dst_t *d, net_stream_t *s, net_msg_t *m)
{
    bool faults = !d->calm && !d->sw.no_net_faults;
    net_msg_t *late = faults && dst_chance(d, d->k.p_late) ? net_msg_dup(m) : NULL;

    if (faults && dst_chance(d, d->k.p_dup)) {
        d->stats->task_msgs_dup++;
        net_send(d, s, NET_TO_SCHED, net_msg_dup(m));
    }
    net_send(d, s, NET_TO_SCHED, m);
    if (late) {
        d->stats->task_msgs_late++;
        net_send_late(d, s, NET_TO_SCHED, late, dst_range(d, 20, 1500));
        net_msg_free(late);
    }
}

/* The deque's ops.send: what the real agent does (tide_worker_core_send): only on a welcomed stream. */
static int deque_send(void *ud, const Tide__V1__WorkerMessage *msg)
{
    agent_t *a = ud;
    dst_t *d = a->w->d;
    net_stream_t *s = a->up && a->welcomed && a->stream ? net_find(d->net, a->stream) : NULL;
    net_msg_t *m;

    if (!s)
        return -ENOTCONN;
    switch (msg->msg_case) {
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DECLARED: {
        const Tide__V1__TasksDeclared *t = msg->tasks_declared;
        m = net_msg_new(NM_TASKS_DECLARED);
        snprintf(m->job, sizeof(m->job), "%s", t->job_id);
        m->gen = t->generation;
        m->rank = t->rank;
        m->task_kind = (int32_t)t->kind;
        m->step = t->step;
        m->total = t->total;
        net_msg_set_ids(m, t->task_ids, t->n_task_ids);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_DONE: {
        const Tide__V1__TasksDone *t = msg->tasks_done;
        m = net_msg_new(NM_TASKS_DONE);
        snprintf(m->job, sizeof(m->job), "%s", t->job_id);
        m->gen = t->generation;
        m->rank = t->rank;
        m->task_kind = (int32_t)t->kind;
        m->step = t->step;
        m->queued = t->queued;
        net_msg_set_ids(m, t->task_ids, t->n_task_ids);
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_STEAL_REQUEST: {
        const Tide__V1__StealRequest *t = msg->steal_request;
        m = net_msg_new(NM_STEAL);
        snprintf(m->job, sizeof(m->job), "%s", t->job_id);
        m->gen = t->generation;
        m->rank = t->rank;
        m->task_kind = (int32_t)t->kind;
        m->step = t->step;
        m->request = t->steal_id;
        d->stats->steals_sent++;
        break;
    }
    case TIDE__V1__WORKER_MESSAGE__MSG_TASKS_RELEASED: {
        const Tide__V1__TasksReleased *t = msg->tasks_released;
        m = net_msg_new(NM_TASKS_RELEASED);
        snprintf(m->job, sizeof(m->job), "%s", t->job_id);
        m->gen = t->generation;
        m->rank = t->rank;
        m->task_kind = (int32_t)t->kind;
        m->step = t->step;
        m->request = t->release_id;
        m->queued = t->queued;
        net_msg_set_ids(m, t->task_ids, t->n_task_ids);
        break;
    }
    default:
        dst_fail(d, "%s: the deque sent a message of case %d", a->id, (int)msg->msg_case);
    }
    dst_trace(d, "world: %s: %s job %s g%d r%d step %lld (%zu ids, id %llu)", a->id, net_kind_name(m->kind),
              m->job, m->gen, m->rank, (long long)m->step, m->n_ids, (unsigned long long)m->request);
    task_send(d, s, m);
    return 0;
}

static void step_start(dst_t *d, trainer_t *tr);

/* Whether lent process k on agent a was written off: the scheduler declared its worker dead while it ran
 * (world_orphan), so what it had was orphaned and may be handed to others. */
bool world_lent_written_off(const agent_t *a, const trank_t *k)
{
    for (int i = 0; k->lent && i < W_ENTRIES; i++)
        if (a->e[i].used && a->e[i].running && a->e[i].burst && (uint64_t)a->e[i].pid == k->rid)
            return a->e[i].orphaned;
    return false;
}

/* Task id was handed to rank k's trainer (on agent a): counted; a second handing in the generation's step
 * is a task run twice (unless the scheduler had already ended the generation: nothing of it counts). A
 * lent process written off may still be handed what the scheduler gave it before the verdict (a GiveTasks
 * late on a slow stream, or read by its agent when it thaws), which the scheduler then gave again: the
 * documented "at least once" of detached tasks on a lent worker's death (seeds 1006436, 1008855). */
static void task_handed(dst_t *d, agent_t *a, trank_t *k, uint64_t id)
{
    trainer_t *tr = k->tr;
    wjob_t *j = tr->job;
    int64_t step = k->lent ? k->step : tr->tstep;
    tstep_t *st = tr->steps[step];
    int i = world_task_index(j, id);
    bool zombie = world_lent_written_off(a, k);
    int64_t dur;

    if (i < 0)
        dst_fail(d, "job %s generation %d rank %d was handed task %llu in step %lld, which is no task of the job",
                 j->id, tr->gen, k->r, (unsigned long long)id, (long long)step);
    d->stats->tasks_handed++;
    d->stats->burst_tasks += k->lent;
    if (st->count[i]++ > 0) {
        if (st->excused[i] || zombie) {
            /* a lent process that had it was written off or killed with its agent: at least once */
            d->stats->burst_dups_excused++;
            dst_trace(d, "world: task %llu of job %s g%d step %lld handed again (rank %d) after a lent process that "
                         "had it was lost",
                      (unsigned long long)id, j->id, tr->gen, (long long)step, k->r);
        } else if (!world_gen_over(d, tr)) {
            dst_fail(d, "at most once: task %llu (#%d) of job %s generation %d step %lld was handed to %s %d; "
                        "ranks 0x%x had it already (a task run twice in a live generation)",
                     (unsigned long long)id, i, j->id, tr->gen, (long long)step, k->lent ? "lent slot" : "rank", k->r,
                     st->handed[i]);
        } else {
            d->stats->task_dups_gen_over++;
            dst_trace(d, "world: task %llu of job %s g%d step %lld handed again (rank %d) after the generation ended",
                      (unsigned long long)id, j->id, tr->gen, (long long)step, k->r);
        }
    }
    st->handed[i] |= 1u << k->r;
    if (zombie)
        st->excused[i] = true; /* a rank handed it (again) later: at least once too */
    k->phase = TR_RUN;
    k->cur = id;
    dur = (int64_t)((double)j->task_ms * k->slow);
    dur = dst_range(d, dur * 8 / 10, dur * 12 / 10);
    /* on a 5 ms grid, as the network's due times: fewer distinct instants, the same orders */
    k->due = (d->now + (dur > 0 ? dur : 1) + 4) / 5 * 5;
}

/* Whether a lent process still works on step s of tr: it is about to join it, runs one of its tasks or
 * waits for one. */
static bool lent_on_step(const trainer_t *tr, int64_t s)
{
    for (int r = tr->world; r < W_MAX_RANKS; r++) {
        const trank_t *k = &tr->rk[r];
        if (k->lent && k->step == s && (k->phase == TR_DECLARE || k->phase == TR_RUN || k->phase == TR_WAIT))
            return true;
    }
    return false;
}

/* Step s ended for every rank and no lent process works on it any more: check it ran every task once. A
 * task that a lent process was handed and did not finish before it ended may be missing (lent processes
 * are not part of the step's collective: the ranks do not wait for what one had in hand). */
static void step_evaluate(dst_t *d, trainer_t *tr, int64_t s)
{
    tstep_t *st = s >= 0 && s < tr->n_steps ? tr->steps[s] : NULL;
    bool restarted, over;
    int missing = 0, first = -1, lent_lost = 0;

    if (!st || !st->members_done || st->evaluated || lent_on_step(tr, s))
        return;
    st->evaluated = true;
    for (int i = 0; i < tr->job->n_tasks; i++) {
        if (st->count[i] != 0)
            continue;
        if (st->aborted[i]) {
            lent_lost++;
            continue;
        }
        if (missing++ == 0)
            first = i;
    }
    restarted = d->shell->crashes != st->crashes;
    over = st->gen_over; /* as seen when the ranks ended the step */
    d->stats->task_steps++;
    if (lent_lost) {
        d->stats->burst_tasks_lost += (uint64_t)lent_lost;
        dst_trace(d, "world: job %s g%d step %lld ended without %d task(s) a lent process had in hand when it ended",
                  tr->job->id, tr->gen, (long long)s, lent_lost);
    }
    if (missing) {
        if (restarted) {
            d->stats->task_steps_restart_lost++;
            d->stats->tasks_restart_lost += (uint64_t)missing;
            dst_trace(d, "world: job %s g%d step %lld ended without %d task(s) after a scheduler restart", tr->job->id,
                      tr->gen, (long long)s, missing);
        } else if (over) {
            d->stats->task_steps_gen_cut++;
        } else {
            dst_fail(d, "exactly once: job %s generation %d step %lld ended (every rank got no_task) but task %llu "
                        "(#%d of its share for rank %d) never ran (%d of %d missing; no scheduler restart, the "
                        "generation still runs)",
                     tr->job->id, tr->gen, (long long)s, (unsigned long long)world_task_id(tr->job, first), first,
                     st->assign[first], missing, tr->job->n_tasks);
        }
    } else if (restarted) {
        d->stats->task_steps_restart++;
    } else if (!over) {
        d->stats->task_steps_exact++;
    }
}

/* The step ended for every rank (the collective): it is checked (now, or once the lent processes left
 * it), then the next one begins. */
static void step_maybe_done(dst_t *d, trainer_t *tr)
{
    tstep_t *st = tr->steps[tr->tstep];
    int64_t s = tr->tstep;

    for (int r = 0; r < tr->world; r++)
        if (tr->rk[r].phase != TR_END)
            return;
    st->members_done = true;
    st->gen_over = world_gen_over(d, tr);
    dst_trace(d, "world: job %s g%d step %lld ends", tr->job->id, tr->gen, (long long)tr->tstep);
    tr->tstep++;
    tr->tstep_at = d->now;
    if (tr->tstep < tr->n_steps - 1)
        step_start(d, tr);
    step_evaluate(d, tr, s);
}

static void task_end(dst_t *d, trank_t *k)
{
    trainer_t *tr = k->tr;
    int64_t s = k->step;

    if (!k->lent) {
        k->phase = TR_END;
        step_maybe_done(d, tr);
        return;
    }
    /* a lent process's part of step s is done: it joins the step the ranks are on now, if newer */
    if (!k->stopping && tr->tstep > s && tr->tstep < tr->n_steps - 1) {
        k->phase = TR_DECLARE;
        k->step = tr->tstep;
        k->due = d->now;
    } else {
        k->phase = TR_END;
    }
    step_evaluate(d, tr, s);
}

/* The SDK's next_task (with the previous task reported done). */
static void task_next(dst_t *d, agent_t *a, trank_t *k, int64_t done)
{
    trainer_t *tr = k->tr;
    tide_error_t err = {{0}};
    uint64_t id = 0;
    int64_t step = k->lent ? k->step : tr->tstep;
    int rc = tide_task_deque_next(a->deque, k->rid, tr->job->task_kind, step, done, k, d->now, &id, &err);

    switch (rc) {
    case TIDE_TASK_NEXT_TASK:
        task_handed(d, a, k, id);
        break;
    case TIDE_TASK_NEXT_WAIT:
        k->phase = TR_WAIT;
        k->wait_since = d->now;
        d->stats->waits++;
        break;
    case TIDE_TASK_NEXT_NONE:
        task_end(d, k);
        break;
    default:
        dst_fail(d, "%s: the deque refused next_task of job %s generation %d rank %d step %lld (done %lld): %d %s",
                 a->id, tr->job->id, tr->gen, k->r, (long long)step, (long long)done, rc, err.text);
    }
}

/* Rank k acts when its time came: declares its share and asks for a task, or reports one done. */
static void task_act(dst_t *d, agent_t *a, trank_t *k)
{
    trainer_t *tr = k->tr;
    wjob_t *j = tr->job;

    if (k->phase == TR_DECLARE) {
        int64_t step = k->lent ? k->step : tr->tstep;
        const tstep_t *st = tr->steps[step];
        uint64_t ids[W_MAX_TASKS];
        tide_task_answer_t cut;
        tide_error_t err = {{0}};
        size_t n = 0;
        int rc;
        for (int i = 0; i < j->n_tasks && !k->lent; i++) /* a lent process joins with no share */
            if (st->assign[i] == k->r)
                ids[n++] = world_task_id(j, i);
        rc = tide_task_deque_declare(a->deque, k->rid, j->task_kind, step, ids, n, (uint64_t)j->n_tasks, d->now,
                                     &cut, &err);
        if (rc < 0)
            dst_fail(d, "%s: the deque refused the declaration of job %s generation %d rank %d step %lld: %d %s",
                     a->id, j->id, tr->gen, k->r, (long long)step, rc, err.text);
        if (cut.waiter)
            dst_fail(d, "%s: declaring step %lld of job %s cut a next_task that waited on step %lld", a->id,
                     (long long)step, j->id, (long long)cut.step);
        task_next(d, a, k, -1);
    } else if (k->phase == TR_RUN && k->stopping) {
        /* a lent process told to stop: it reports the task in hand done (next_task) and exits without
         * running what that call hands it */
        wentry_t *e = NULL;
        for (int x = 0; x < W_ENTRIES && !e; x++)
            if (a->e[x].used && a->e[x].running && a->e[x].pid == (int32_t)k->rid)
                e = &a->e[x];
        task_next(d, a, k, (int64_t)k->cur);
        if (k->phase == TR_RUN && world_task_index(j, k->cur) >= 0) {
            tstep_t *st = tr->steps[k->step];
            int i = world_task_index(j, k->cur);
            st->count[i]--; /* handed, never started */
            st->aborted[i] = 1;
            d->stats->burst_tasks_aborted++;
        }
        if (k->phase == TR_WAIT)
            tide_task_deque_forget_waiter(a->deque, k->rid, k, d->now); /* it exits: nobody waits */
        if (k->phase != TR_END) {
            int64_t s = k->step;
            k->phase = TR_END;
            step_evaluate(d, tr, s);
        }
        if (e)
            e->stop_at = d->now + 1;
    } else if (k->phase == TR_RUN) {
        task_next(d, a, k, (int64_t)k->cur);
    }
}

/* A step begins: the trainer splits its tasks among the ranks (the same split on every rank), and
 * every rank declares its share. */
static void step_start(dst_t *d, trainer_t *tr)
{
    tstep_t *st = tr->steps[tr->tstep] = tide_xcalloc(1, sizeof(*st));
    int mode = (int)dst_below(d, 4), heavy = (int)dst_below(d, tr->world);

    st->crashes = d->shell->crashes;
    for (int i = 0; i < tr->job->n_tasks; i++) {
        switch (mode) {
        case 0: /* round robin */
            st->assign[i] = (int8_t)(i % tr->world);
            break;
        case 1: /* at random */
            st->assign[i] = (int8_t)dst_below(d, tr->world);
            break;
        case 2: /* contiguous blocks */
            st->assign[i] = (int8_t)((int64_t)i * tr->world / tr->job->n_tasks);
            break;
        default: /* one rank holds most of it */
            st->assign[i] = (int8_t)(dst_chance(d, 0.7) ? heavy : dst_below(d, tr->world));
            break;
        }
    }
    for (int r = 0; r < tr->world; r++) {
        if (tr->rk[r].phase == TR_OUT)
            continue;
        tr->rk[r].phase = TR_DECLARE;
        tr->rk[r].due = d->now;
    }
    /* lent processes done with their step join this one */
    for (int r = tr->world; r < W_MAX_RANKS; r++) {
        trank_t *k = &tr->rk[r];
        if (!k->lent || k->stopping || (k->phase != TR_END && k->phase != TR_IDLE))
            continue;
        k->phase = TR_DECLARE;
        k->step = tr->tstep;
        k->due = d->now;
    }
}

/* A GiveTasks answered the next_task that waited as k. */
static void task_answered(dst_t *d, agent_t *a, const tide_task_answer_t *ans)
{
    trank_t *k = ans->waiter;
    trainer_t *tr = k->tr;
    int64_t waited = d->now - k->wait_since;
    bool here = false;

    /* A lent slot's process that the scheduler wrote off (its agent hung) may still get the answer to a
     * steal it made, when its agent thaws, after the slot's next process took over its trainer rank
     * elsewhere (seed 1031769): that answer is the old process's, which nothing counts any more. */
    for (int i = 0; k->lent && i < W_ENTRIES && !here; i++)
        here = a->e[i].used && a->e[i].running && (uint64_t)a->e[i].pid == k->rid;
    if (k->lent && (k->agent != a->idx || !here)) {
        dst_trace(d, "world: %s: an answer for job %s g%d lent slot %d's process before, now gone", a->id,
                  tr->job->id, tr->gen, k->r);
        return;
    }

    int64_t step = k->lent ? k->step : tr->tstep;

    if (k->phase != TR_WAIT || ans->step != step || ans->kind != tr->job->task_kind)
        dst_fail(d, "%s: the deque answered job %s generation %d rank %d for step %lld (kind %d), which does not "
                    "wait there (phase %d, step %lld)",
                 a->id, tr->job->id, tr->gen, k->r, (long long)ans->step, ans->kind, k->phase, (long long)step);
    if (waited > d->stats->wait_max_ms)
        d->stats->wait_max_ms = waited;
    if (ans->has_task)
        task_handed(d, a, k, ans->id);
    else
        task_end(d, k);
}

/* The rank process pid ended: the agent reports its completions and drops its deques (at once, or
 * when it thaws: a hung agent handles no exit). */
static void task_rank_gone(agent_t *a, uint64_t pid)
{
    if (a->frozen) {
        if (a->n_rm < W_ENTRIES)
            a->rm_pending[a->n_rm++] = pid;
        return;
    }
    tide_task_deque_flush(a->deque);
    tide_task_deque_rank_remove(a->deque, pid);
}

/* Ranks whose time to act came, on agents that are not hung (a hung agent answers no next_task). A
 * step that ends starts the next one at once, so this runs until nothing is due. */
static void run_tasks(dst_t *d)
{
    world_t *w = d->world;
    bool acted = true;

    for (int pass = 0; acted && pass < 64; pass++) {
        acted = false;
        for (int i = 0; i < w->n; i++) {
            agent_t *a = &w->a[i];
            if (!a->up || a->frozen)
                continue;
            for (int x = 0, left = a->n_running; x < W_ENTRIES && left > 0; x++) {
                wentry_t *e = &a->e[x];
                trank_t *k;
                if (!e->used || !e->running)
                    continue;
                left--;
                if (!e->tr->job->tasks || e->rank >= W_MAX_RANKS)
                    continue;
                k = &e->tr->rk[e->rank];
                if (k->rid != (uint64_t)e->pid || (k->phase != TR_DECLARE && k->phase != TR_RUN) ||
                    k->due > d->now)
                    continue;
                task_act(d, a, k);
                acted = true;
            }
        }
    }
}

static void on_release_tasks(dst_t *d, agent_t *a, const net_msg_t *m)
{
    Tide__V1__ReleaseTasks rt = TIDE__V1__RELEASE_TASKS__INIT;

    rt.job_id = (char *)m->job;
    rt.generation = m->gen;
    rt.rank = m->rank;
    rt.kind = (Tide__V1__TaskKind)m->task_kind;
    rt.step = m->step;
    rt.release_id = m->request;
    rt.max_tasks = m->queued;
    d->stats->releases++;
    dst_trace(d, "world: %s: ReleaseTasks job %s g%d r%d step %lld (max %u, id %llu)", a->id, m->job, m->gen, m->rank,
              (long long)m->step, m->queued, (unsigned long long)m->request);
    (void)tide_task_deque_release(a->deque, &rt); /* -ENOENT: not a rank here (nothing is sent) */
}

static void on_give_tasks(dst_t *d, agent_t *a, const net_msg_t *m)
{
    Tide__V1__GiveTasks g = TIDE__V1__GIVE_TASKS__INIT;
    tide_task_answer_t ans;

    g.job_id = (char *)m->job;
    g.generation = m->gen;
    g.rank = m->rank;
    g.kind = (Tide__V1__TaskKind)m->task_kind;
    g.step = m->step;
    g.steal_id = m->request;
    g.task_ids = m->ids;
    g.n_task_ids = m->n_ids;
    d->stats->gives++;
    d->stats->gives_ids += m->n_ids;
    d->stats->gives_empty += m->n_ids == 0;
    dst_trace(d, "world: %s: GiveTasks job %s g%d r%d step %lld (%zu ids%s%llu, steal %llu)", a->id, m->job, m->gen,
              m->rank, (long long)m->step, m->n_ids, m->n_ids ? ": " : "", m->n_ids ? (unsigned long long)m->ids[0] : 0ULL,
              (unsigned long long)m->request);
    if (tide_task_deque_give(a->deque, &g, d->now, &ans) == 0 && ans.waiter)
        task_answered(d, a, &ans);
}

/* A lent process of tr in slot r was written off by the scheduler or died with its agent: the tasks it
 * was handed since it started may run again (those it finished may never have been reported). */
static void lent_excuse(trainer_t *tr, int32_t r, int64_t from)
{
    for (int64_t s = from < 0 ? 0 : from; s < tr->n_steps; s++) {
        tstep_t *st = tr->steps[s];
        for (int i = 0; st && i < tr->job->n_tasks; i++)
            if (st->handed[i] & (1u << r))
                st->excused[i] = true;
    }
}

static void proc_end(dst_t *d, agent_t *a, wentry_t *e, int32_t code)
{
    trainer_t *tr = e->tr;

    e->running = false;
    e->code = code;
    e->hello_stream = 0;
    e->reported = false;
    a->n_running--;
    a->to_report = true;
    if (e->burst) {
        /* a lent process: the trainer goes on; a task it had in hand was not finished */
        trank_t *k = e->rank < W_MAX_RANKS ? &tr->rk[e->rank] : NULL;
        if (k && k->lent && k->rid == (uint64_t)e->pid) {
            int64_t s = k->step;
            int i = k->phase == TR_RUN ? world_task_index(tr->job, k->cur) : -1;
            if (i >= 0 && s >= 0 && s < tr->n_steps && tr->steps[s]) {
                tr->steps[s]->count[i]--;
                tr->steps[s]->aborted[i] = 1;
                d->stats->burst_tasks_aborted++;
            }
            k->phase = TR_OUT;
            if (tr->job->tasks)
                step_evaluate(d, tr, s);
        }
        dst_trace(d, "world: %s: job %s g%d burst slot %d exited %d", a->id, e->job, e->gen, e->rank, code);
        return;
    }
    tr->live--;
    if (tr->stall < 0)
        tr->stall = d->now;
    if (tr->rk[e->rank].rid == (uint64_t)e->pid)
        tr->rk[e->rank].phase = TR_OUT;
    dst_trace(d, "world: %s: job %s g%d r%d exited %d", a->id, e->job, e->gen, e->rank, code);
}

/* The trainer's completed checkpoints: where its job resumes. */
static void trainer_saved(trainer_t *tr, int32_t rank, int64_t step)
{
    int64_t complete = INT64_MAX;

    if (rank < 0 || rank >= tr->world)
        return;
    tr->saved[rank] = step;
    for (int r = 0; r < tr->world; r++)
        if (tr->saved[r] < complete)
            complete = tr->saved[r];
    if (complete > tr->job->resume)
        tr->job->resume = complete;
}

/* Process-level events (they happen even while the agent hangs): saves and exits. */
static void run_procs(dst_t *d, agent_t *a)
{
    int left = a->n_running;

    for (int i = 0; i < W_ENTRIES && left > 0; i++) {
        wentry_t *e = &a->e[i];
        int32_t code;
        int64_t s;
        if (!e->used || !e->running)
            continue;
        left--;
        /* checkpoints reached by now (the newest one is what the rank saved last; a lent process saves
         * none) */
        while (!e->burst && (s = next_save(e->tr, e->saved)) >= 0 && step_time(e->tr, s) <= d->now) {
            e->saved = s;
            a->to_report = true;
            trainer_saved(e->tr, e->rank, s);
        }
        if (exit_time(e, &code) <= d->now) {
            proc_end(d, a, e, code);
            task_rank_gone(a, (uint64_t)e->pid);
        }
    }
}

static void send_hello(dst_t *d, agent_t *a, net_stream_t *s)
{
    net_msg_t *m = net_msg_new(NM_HELLO);
    size_t n = 0;

    m->ranks = tide_xcalloc(W_ENTRIES, sizeof(*m->ranks));
    for (int i = 0; i < W_ENTRIES; i++) {
        wentry_t *e = &a->e[i];
        net_rank_t *r = &m->ranks[n];
        if (!e->used)
            continue;
        snprintf(r->job, sizeof(r->job), "%s", e->job);
        r->gen = e->gen;
        r->rank = e->rank;
        r->running = e->running;
        r->code = e->code;
        r->pid = e->pid;
        r->port = e->port;
        if (!e->running)
            e->hello_stream = s->id;
        n++;
    }
    m->n_ranks = n;
    m->epoch = a->max_epoch;
    m->boot = a->boot;
    m->stream_seq = s->id; /* stream ids only grow, so they order this process's streams too */
    net_send(d, s, NET_TO_SCHED, m);
}

/* Heartbeats land on a 250 ms grid: fewer distinct instants for the same liveness behaviour. */
static int64_t next_beat(const dst_t *d)
{
    int64_t t = d->now + d->world->hb_ms;
    return (t + 249) / 250 * 250;
}

static void reconnect_later(dst_t *d, agent_t *a)
{
    /* equal jitter, as the real worker */
    a->reconnect_at = d->now + a->backoff / 2 + dst_below(d, a->backoff / 2 + 1);
    a->backoff = a->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : a->backoff * 2;
}

static void stream_ended(dst_t *d, agent_t *a, net_stream_t *s)
{
    net_close(d, s, NET_TO_WORKER, false);
    if (a->stream != s->id)
        return;

    a->stream = 0;
    a->welcomed = false;
    reconnect_later(d, a);
    dst_trace(d, "world: %s: stream %llu ended", a->id, (unsigned long long)s->id);
}

/* The agent's own events: reconnect, reports, heartbeats, durable copies. */
static void run_agent(dst_t *d, agent_t *a)
{
    net_stream_t *s;

    if (!a->up || a->frozen)
        return;
    if (!a->stream && d->now >= a->reconnect_at) {
        if (!shell_up(d)) {
            reconnect_later(d, a);
        } else {
            s = net_open(d, a->idx);
            a->stream = s->id;
            a->welcomed = false;
            dst_trace(d, "world: %s: connects on stream %llu", a->id, (unsigned long long)s->id);
            send_hello(d, a, s);
        }
    }
    if (!a->welcomed)
        return;
    for (int i = 0; i < W_ENTRIES && a->to_report; i++) {
        wentry_t *e = &a->e[i];
        if (!e->used)
            continue;
        if (e->saved > e->sent) {
            net_msg_t *m = rank_msg(NM_CKPT_SAVED, e);
            m->step = e->saved;
            e->sent = e->saved;
            send(d, a, m, true);
        }
        if (!e->running && !e->reported && e->hello_stream != a->stream) {
            e->reported = true;
            send(d, a, rank_msg(NM_RANK_EXITED, e), true);
        }
    }
    if (a->to_report)
        entries_trim(a);
    a->to_report = false;
    for (int i = 0; i < W_FLUSHES && a->n_flushes > 0; i++) {
        wflush_t *f = &a->fl[i];
        net_msg_t *m;
        if (!f->used || f->at > d->now)
            continue;
        m = net_msg_new(NM_FLUSHED);
        snprintf(m->job, sizeof(m->job), "%s", f->job);
        m->gen = f->gen;
        m->rank = f->rank;
        m->step = f->step;
        m->ok = f->ok;
        f->used = false;
        a->n_flushes--;
        send(d, a, m, true);
    }
    if (d->now >= a->next_hb) {
        net_msg_t *m;
        size_t n = 0;
        /* task completions go out in batches, one per pool and heartbeat (worker/agent.c) */
        tide_task_deque_flush(a->deque);
        m = net_msg_new(NM_HEARTBEAT);
        m->prog = tide_xcalloc(W_ENTRIES, sizeof(*m->prog));
        for (int i = 0; i < W_ENTRIES; i++) {
            wentry_t *e = &a->e[i];
            net_progress_t *p = &m->prog[n];
            if (!e->used || !e->running || !e->tr->job->sdk)
                continue;
            snprintf(p->job, sizeof(p->job), "%s", e->job);
            p->gen = e->gen;
            p->rank = e->rank;
            p->p.sdk = true;
            p->p.step = world_step(d, e->tr);
            p->p.steps_reported = (uint64_t)(p->p.step + 1);
            p->p.last_report_ms = dst_wall(d);
            p->p.peak_flops = W_PEAK_FLOPS;
            p->p.mfu = e->tr->job->mfu;
            p->p.flops_per_s = p->p.flops_per_s_5m = e->tr->job->mfu * W_PEAK_FLOPS;
            p->p.high_load = e->tr->job->high; /* every trainer reports it; rank 0's counts */
            p->p.load_reported = e->tr->job->load_said;
            {
                tide_task_stats_t ts;
                if (tide_task_deque_stats(a->deque, (uint64_t)e->pid, d->now, &ts) == 0) {
                    p->p.tasks_run = ts.tasks_run;
                    p->p.tasks_stolen = ts.tasks_stolen;
                    p->p.tasks_given = ts.tasks_given;
                    p->p.task_seconds = ts.task_seconds;
                    p->p.busy_fraction = ts.busy_fraction;
                    p->p.steal_wait_seconds = ts.steal_wait_seconds;
                }
            }
            n++;
        }
        m->n_prog = n;
        a->next_hb = next_beat(d);
        send(d, a, m, false);
    }
}

/* --- messages from the scheduler --- */

static void on_launch(dst_t *d, agent_t *a, net_stream_t *s, const net_msg_t *m)
{
    wentry_t *e = entry_find(a, m->job, m->gen, m->rank);
    trainer_t *tr;
    bool orphaned;

    if (e && m->burst && !e->running) {
        /* As worker/core.c since KB11's fix (tests/dst/README.md): the slot's process here has exited and the
         * scheduler lends the slot here again (only after it had that exit): a new process replaces the
         * entry. */
        d->stats->kb11_seen++;
        dst_trace(d, "world: %s: burst slot %d of job %s g%d launched here again after its process exited",
                  a->id, m->rank, m->job, m->gen);
        e->used = false;
        e = NULL;
    }
    if (e) {
        /* Idempotent: the same rank again is answered, never started twice. */
        if (e->running)
            send(d, a, rank_msg(NM_RANK_STARTED, e), false);
        return;
    }
    /* A LaunchRank read after the scheduler declared this worker dead (a hung agent waking up to its
     * buffered messages) starts a rank the scheduler has already written off; so does one read on a
     * stream the scheduler lost, as long as KB1/KB2 (dst.h) are tolerated. */
    orphaned = a->stream == a->dead_stream || (s->sched_gone && s->gone_kb && !d->sw.strict[s->gone_kb]);
    chk_on_spawn(d, a, m->job, m->gen, m->rank, orphaned, m->burst);
    e = entry_new(a);
    memset(e, 0, sizeof(*e));
    e->used = true;
    e->orphaned = orphaned;
    snprintf(e->job, sizeof(e->job), "%s", m->job);
    e->gen = m->gen;
    e->rank = m->rank;
    e->running = true;
    e->pid = d->world->next_pid++;
    e->port = m->rank == 0 ? 20000 + e->pid % 10000 : 0;
    e->start = d->now;
    e->stop_at = -1;
    e->saved = e->sent = -1;
    e->seq = ++a->seq;
    tr = e->tr = trainer_get(d, m->job, m->gen, m->world);
    if (m->burst) {
        /* a lent process (burst slot): no member; it joins the detached pools of a task job */
        trank_t *k = m->rank < W_MAX_RANKS ? &tr->rk[m->rank] : NULL;
        e->burst = true;
        e->self_exit_at = dst_chance(d, 0.15) ? d->now + dst_range(d, 200, 8000) : -1;
        e->self_code = dst_chance(d, 0.5) ? 0 : 1;
        tide_task_deque_rank_add(a->deque, (uint64_t)e->pid, m->job, m->gen, m->rank, d->now);
        if (k) {
            *k = (trank_t){.tr = tr, .r = m->rank, .agent = a->idx, .rid = (uint64_t)e->pid, .phase = TR_IDLE,
                           .slow = 1, .lent = true, .step = -1, .first_step = tr->tstep};
            if (tr->job->tasks && tr->job->task_kind == TIDE_TASK_DETACHED && tr->t0 >= 0 &&
                tr->tstep < tr->n_steps - 1) {
                k->phase = TR_DECLARE;
                k->step = tr->tstep;
                k->due = d->now;
            }
        }
        a->n_running++;
        d->stats->spawns++;
        d->stats->burst_spawns++;
        dst_trace(d, "world: %s: spawn job %s g%d burst slot %d (world %d) pid %d", a->id, m->job, m->gen, m->rank,
                  m->world, e->pid);
        send(d, a, rank_msg(NM_RANK_STARTED, e), true);
        return;
    }
    tr->spawned++;
    tr->live++;
    tide_task_deque_rank_add(a->deque, (uint64_t)e->pid, m->job, m->gen, m->rank, d->now);
    if (m->rank >= 0 && m->rank < tr->world) {
        tr->rk[m->rank].agent = a->idx;
        tr->rk[m->rank].rid = (uint64_t)e->pid;
        tr->rk[m->rank].phase = TR_IDLE;
    }
    if (tr->spawned >= tr->world && tr->live == tr->world && tr->t0 < 0 && tr->stall < 0) {
        tr->t0 = d->now;
        if (tr->frz_after >= 0)
            tr->frz_at = tr->t0 + tr->frz_after;
        if (tr->job->tasks) {
            tr->tstep = tr->resume < 0 ? 0 : tr->resume;
            tr->tstep_at = d->now;
            if (tr->tstep < tr->n_steps - 1)
                step_start(d, tr);
        }
    }
    a->n_running++;
    d->stats->spawns++;
    dst_trace(d, "world: %s: spawn job %s g%d r%d/%d pid %d", a->id, m->job, m->gen, m->rank, m->world,
              e->pid);
    send(d, a, rank_msg(NM_RANK_STARTED, e), true);
}

static void on_stop(dst_t *d, agent_t *a, const net_msg_t *m)
{
    wentry_t *e = entry_find(a, m->job, m->gen, m->rank);
    int64_t grace = d->world->stop_grace_ms, at;

    if (!e || !e->running)
        return; /* "not running here" */
    if (e->burst && e->rank < W_MAX_RANKS && e->tr->rk[e->rank].rid == (uint64_t)e->pid &&
        e->tr->rk[e->rank].lent) {
        /* a lent process sees should_stop: it exits after the task in hand (task_act), or soon when it
         * has none; SIGKILL at the grace in any case */
        trank_t *k = &e->tr->rk[e->rank];
        k->stopping = true;
        at = d->now + grace;
        if (k->phase != TR_RUN) {
            at = d->now + dst_range(d, 5, 200);
            if (k->phase == TR_WAIT)
                tide_task_deque_forget_waiter(a->deque, k->rid, k, d->now);
            if (k->phase == TR_DECLARE || k->phase == TR_WAIT) {
                int64_t s = k->step;
                k->phase = TR_END;
                step_evaluate(d, e->tr, s);
            }
        }
        if (e->stop_at < 0 || at < e->stop_at)
            e->stop_at = at;
        return;
    }
    /* SIGTERM; most exit quickly, some only at SIGKILL */
    at = d->now + (dst_chance(d, 0.1) ? grace : dst_range(d, 5, grace < 2000 ? grace : 2000));
    if (e->stop_at < 0 || at < e->stop_at)
        e->stop_at = at;
}

static void on_ckpt_now(dst_t *d, agent_t *a, const net_msg_t *m)
{
    wentry_t *e = entry_find(a, m->job, m->gen, m->rank);
    int64_t cur;

    if (!e || !e->running || !e->tr->job->sdk || !e->tr->job->answers)
        return;
    cur = world_step(d, e->tr);
    if (e->tr->save_req <= cur)
        e->tr->save_req = cur + 1;
}

static void on_flush(dst_t *d, agent_t *a, const net_msg_t *m)
{
    if (!entry_find(a, m->job, m->gen, m->rank))
        return; /* no such checkpoint here */
    for (int i = 0; i < W_FLUSHES; i++) {
        wflush_t *f = &a->fl[i];
        if (f->used)
            continue;
        f->used = true;
        snprintf(f->job, sizeof(f->job), "%s", m->job);
        f->gen = m->gen;
        f->rank = m->rank;
        f->step = m->step;
        f->at = d->now + dst_range(d, 20, 1500);
        f->ok = !dst_chance(d, d->k.p_flush_fail);
        a->n_flushes++;
        return;
    }
}

static void on_welcome(dst_t *d, agent_t *a)
{
    if (a->welcomed)
        return;
    a->welcomed = true;
    a->backoff = BACKOFF_MIN_MS;
    a->next_hb = next_beat(d);
    a->to_report = true;
    for (int i = 0; i < W_ENTRIES; i++) {
        wentry_t *e = &a->e[i];
        if (e->used && !e->running && !e->reported && e->hello_stream == a->stream)
            e->reported = true; /* carried by this stream's hello */
    }
    tide_task_deque_welcome(a->deque); /* declarations, completions, pending steals */
}

bool world_skip_stream(void *ud, net_stream_t *s)
{
    dst_t *d = ud;
    agent_t *a = &d->world->a[s->agent];

    return a->frozen; /* a hung agent reads nothing: its messages wait in the socket */
}

static void deliver(dst_t *d)
{
    net_stream_t *s;
    net_msg_t *m;

    while ((m = net_pop(d->net, NET_TO_WORKER, d->now, world_skip_stream, d, &s))) {
        agent_t *a = &d->world->a[s->agent];
        if (m->kind == NM_CLOSE) {
            stream_ended(d, a, s);
        } else if (a->up && s->id == a->stream && m->epoch >= a->max_epoch) {
            a->max_epoch = m->epoch;
            switch (m->kind) {
            case NM_WELCOME:
                on_welcome(d, a);
                break;
            case NM_LAUNCH:
                on_launch(d, a, s, m);
                break;
            case NM_STOP:
                on_stop(d, a, m);
                break;
            case NM_CKPT_NOW:
                on_ckpt_now(d, a, m);
                break;
            case NM_FLUSH:
                on_flush(d, a, m);
                break;
            case NM_RELEASE_TASKS:
                on_release_tasks(d, a, m);
                break;
            case NM_GIVE_TASKS:
                on_give_tasks(d, a, m);
                break;
            default:
                break;
            }
        }
        net_msg_free(m);
    }
}

/* Jobs whose load phase flips now (their cycle); a job that ended stops cycling. */
static void run_phases(dst_t *d)
{
    wjob_t *j, *jt;

    HASH_ITER(hh, d->world->jobs, j, jt) {
        const tide_job_t *cj;
        int64_t len;
        if (j->phase_at > d->now)
            continue;
        if (shell_up(d) && (!(cj = tide_core_job_find(d->shell->core, j->id)) || cj->state == TIDE_JOB_SUCCEEDED ||
                            cj->state == TIDE_JOB_FAILED || cj->state == TIDE_JOB_CANCELLED)) {
            j->phase_at = INT64_MAX;
            continue;
        }
        j->high = !j->high;
        j->load_said = true;
        len = j->high ? j->high_ms : j->normal_ms;
        j->phase_at = d->now + dst_range(d, len * 7 / 10, len * 13 / 10);
        d->stats->phase_flips++;
        dst_trace(d, "world: job %s enters a %s phase", j->id, j->high ? "high-load" : "normal");
        if (!j->sdk) {
            shell_set_time(d);
            shell_load_phase(d, j->id, j->high);
        }
    }
}

void world_run(dst_t *d)
{
    world_t *w = d->world;

    run_phases(d);
    for (int i = 0; i < w->n; i++) {
        agent_t *a = &w->a[i];
        if (!a->up && d->now >= a->up_at)
            world_join(d, a);
        if (a->frozen && d->now >= a->thaw_at)
            world_thaw(d, a);
        if (a->up)
            run_procs(d, a);
    }
    deliver(d);
    for (int i = 0; i < w->n; i++)
        run_agent(d, &w->a[i]);
    run_tasks(d);
}

int64_t world_next_due(dst_t *d)
{
    world_t *w = d->world;
    int64_t next = INT64_MAX;

#define AT(t)                                                                                                    \
    do {                                                                                                         \
        int64_t t_ = (t);                                                                                        \
        if (t_ < next)                                                                                           \
            next = t_ > d->now ? t_ : d->now + 1;                                                                \
    } while (0)
    {
        wjob_t *j, *jt;
        HASH_ITER(hh, w->jobs, j, jt) AT(j->phase_at);
    }
    for (int i = 0; i < w->n; i++) {
        agent_t *a = &w->a[i];
        if (!a->up) {
            AT(a->up_at);
            continue;
        }
        if (a->frozen)
            AT(a->thaw_at);
        for (int k = 0, left = a->n_running; k < W_ENTRIES && left > 0; k++) {
            wentry_t *e = &a->e[k];
            int32_t code;
            int64_t s;
            if (!e->used || !e->running)
                continue;
            left--;
            AT(exit_time(e, &code));
            if (!e->burst && (s = next_save(e->tr, e->saved)) >= 0)
                AT(step_time(e->tr, s));
        }
        if (a->frozen)
            continue;
        for (int k = 0, left = a->n_running; k < W_ENTRIES && left > 0; k++) {
            const wentry_t *e = &a->e[k];
            const trank_t *t;
            if (!e->used || !e->running)
                continue;
            left--;
            if (e->rank >= W_MAX_RANKS)
                continue;
            t = &e->tr->rk[e->rank];
            if (e->tr->job->tasks && t->rid == (uint64_t)e->pid && (t->phase == TR_DECLARE || t->phase == TR_RUN))
                AT(t->due);
        }
        if (!a->stream)
            AT(a->reconnect_at);
        if (a->welcomed) {
            AT(a->next_hb);
            for (int k = 0; k < W_FLUSHES && a->n_flushes > 0; k++)
                if (a->fl[k].used)
                    AT(a->fl[k].at);
        }
    }
#undef AT
    return next;
}

/* --- membership and faults --- */

/* The agent process ends: its ranks die with it and its deques are gone (a restart starts empty). */
static void kill_all(dst_t *d, agent_t *a)
{
    for (int i = 0; i < W_ENTRIES; i++) {
        wentry_t *e = &a->e[i];
        if (e->used && e->running && e->burst && e->rank < W_MAX_RANKS && e->tr->job->tasks &&
            e->tr->rk[e->rank].rid == (uint64_t)e->pid)
            lent_excuse(e->tr, e->rank, e->tr->rk[e->rank].first_step); /* its unreported completions die too */
        if (e->used && e->running)
            proc_end(d, a, e, 137);
        e->used = false;
    }
    memset(a->fl, 0, sizeof(a->fl));
    a->n_flushes = 0;
    tide_task_deque_free(a->deque);
    tide_task_deque_new(&deque_ops, a, &a->deque);
    a->n_rm = 0;
}

void world_join(dst_t *d, agent_t *a)
{
    if (a->up)
        return;
    a->up = true;
    a->boot++;
    a->up_at = INT64_MAX;
    a->frozen = false;
    a->stream = 0;
    a->welcomed = false;
    a->backoff = BACKOFF_MIN_MS;
    a->reconnect_at = d->now;
    dst_trace(d, "world: %s: joins", a->id);
}

void world_crash(dst_t *d, agent_t *a, int64_t down_ms)
{
    net_stream_t *s = cur_stream(d, a);

    if (!a->up)
        return;
    dst_trace(d, "world: %s: crashes (down %lld ms)", a->id, (long long)down_ms);
    kill_all(d, a); /* ranks die with their worker (parent-death signal) */
    if (s)
        net_close(d, s, NET_TO_WORKER, true);
    a->stream = 0;
    a->welcomed = false;
    a->up = false;
    a->frozen = false;
    a->up_at = d->now + down_ms;
}

void world_leave(dst_t *d, agent_t *a)
{
    net_stream_t *s = cur_stream(d, a);

    if (!a->up || a->frozen)
        return;
    dst_trace(d, "world: %s: leaves", a->id);
    kill_all(d, a);
    if (s) {
        if (a->welcomed)
            net_send(d, s, NET_TO_SCHED, net_msg_new(NM_GOODBYE));
        net_close(d, s, NET_TO_WORKER, false);
    }
    a->stream = 0;
    a->welcomed = false;
    a->up = false;
    a->up_at = INT64_MAX;
}

void world_thaw(dst_t *d, agent_t *a)
{
    if (!a->frozen)
        return;
    a->frozen = false;
    dst_trace(d, "world: %s: thaws", a->id);
    /* the exits it missed while it hung */
    for (int k = 0; k < a->n_rm; k++)
        task_rank_gone(a, a->rm_pending[k]);
    a->n_rm = 0;
}

void world_hang(dst_t *d, agent_t *a, int64_t ms)
{
    if (!a->up || a->frozen)
        return;
    dst_trace(d, "world: %s: hangs for %lld ms", a->id, (long long)ms);
    a->frozen = true;
    a->thaw_at = d->now + ms;
}

void world_blip(dst_t *d, agent_t *a)
{
    net_stream_t *s = cur_stream(d, a);

    if (!s || !a->up)
        return;
    dst_trace(d, "world: %s: stream %llu dies", a->id, (unsigned long long)s->id);
    net_break(d, s);
}

/* Worker registry and failure detector. Invariants: a worker is in core->alive (READY/BUSY, connected)
 * or core->suspect (SUSPECT, may come back) or neither (DEAD, or a placeholder awaiting reconnect), and
 * both lists are ordered by last_seen_mono, so a heartbeat is O(1) and a tick touches only the workers
 * whose deadline passed. A worker is in its node's free list exactly when it can take a rank. A departed
 * worker (it said goodbye) is DEAD, unconnected and bound to no job; core->n_departed(_cordoned) count
 * exactly the departed ones, and any state change revives it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

/* --- nodes and the free index --- */

static tide_node_t *node_get(tide_core_t *core, const char *name)
{
    tide_node_t *n;

    HASH_FIND_STR(core->nodes, name, n);
    if (n)
        return n;
    n = tide_xcalloc(1, sizeof(*n));
    n->name = tide_xstrdup(name);
    HASH_ADD_KEYPTR(hh, core->nodes, n->name, strlen(n->name), n);
    return n;
}

void tide__node_free_all(tide_core_t *core)
{
    tide_node_t *n, *tmp;

    HASH_ITER(hh, core->nodes, n, tmp) {
        HASH_DEL(core->nodes, n);
        free(n->name);
        free(n);
    }
    tide__index_free_all(core);
}

static bool schedulable(const tide_worker_t *w)
{
    return w->connected && w->state == TIDE_WORKER_READY && !w->cordoned && !w->job && w->dom &&
           w->n_stale == 0;
}

static bool usable(const tide_worker_t *w)
{
    return w->connected && !w->cordoned &&
           (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY);
}

void tide__worker_update_free(tide_core_t *core, tide_worker_t *w)
{
    bool in = tide_list_linked(&w->free_node);
    bool want = schedulable(w);
    bool u = usable(w);

    if (u != w->usable) {
        core->n_usable += u ? 1 : -1;
        w->usable = u;
        if (w->dom)
            tide__index_usable(core, w, u ? 1 : -1);
        core->need_schedule = true;
        core->alloc_stamp++;
        tide__reserve_update(core);
    }
    if (in == want)
        return;
    tide__index_free(core, w, want ? 1 : -1);
    if (want)
        core->need_schedule = true;
    core->alloc_stamp++;
}

/* Departed workers stay in the registry (jobs' ranks, actions, the shell's streams may point at them) but
 * out of listings and counts: see tide_worker_t.departed. */
static void depart(tide_core_t *core, tide_worker_t *w)
{
    if (w->departed)
        return;
    w->departed = true;
    core->n_departed++;
    core->n_departed_cordoned += w->cordoned;
}

static void undepart(tide_core_t *core, tide_worker_t *w)
{
    if (!w->departed)
        return;
    w->departed = false;
    core->n_departed--;
    core->n_departed_cordoned -= w->cordoned;
}

void tide__worker_set_state(tide_core_t *core, tide_worker_t *w, tide_worker_state_t st)
{
    if (w->state == st)
        return;
    undepart(core, w); /* registered again, or bound by a restored job: back in the listings */
    core->worker_counts[w->state]--;
    core->worker_counts[st]++;
    w->state = st;
    tide__worker_update_free(core, w);
}

static tide_worker_t *worker_add(tide_core_t *core, const char *id)
{
    tide_worker_t *w = tide_xcalloc(1, sizeof(*w));

    w->id = tide_xstrdup(id);
    w->rank = -1;
    w->state = TIDE_WORKER_DEAD;
    core->worker_counts[TIDE_WORKER_DEAD]++;
    tide_list_init(&w->live_node);
    tide_list_init(&w->free_node);
    tide_list_init(&w->bound_node);
    HASH_ADD_KEYPTR(hh, core->workers, w->id, strlen(w->id), w);
    return w;
}

tide_worker_t *tide__worker_get_or_add(tide_core_t *core, const char *id)
{
    tide_worker_t *w = tide_core_worker_find(core, id);
    return w ? w : worker_add(core, id);
}

static void kv_free(tide_kv_t *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

void tide__worker_free(tide_worker_t *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_stale; i++)
        free(w->stale[i].job_id);
    free(w->stale);
    free(w->id);
    free(w->cordon_reason);
    free(w->node_name);
    free(w->device);
    kv_free(w->labels, w->n_labels);
    free(w->address);
    free(w->launcher_address);
    free(w->agent_sock);
    free(w->version);
    free(w);
}

tide_worker_t *tide_core_worker_find(const tide_core_t *core, const char *id)
{
    tide_worker_t *w;

    HASH_FIND_STR(core->workers, id, w);
    return w;
}

void tide__worker_assign(tide_core_t *core, tide_worker_t *w, tide_job_t *job, int32_t rank)
{
    tide_list_remove(&w->bound_node);
    tide_list_push_back(&job->bound, &w->bound_node);
    core->low_busy -= w->low;
    w->low = job->run_priority == TIDE_PRIO_LOW;
    core->low_busy += w->low;
    w->job = job;
    w->rank = rank;
    w->generation = job->generation;
    if (w->state == TIDE_WORKER_READY)
        tide__worker_set_state(core, w, TIDE_WORKER_BUSY);
    else
        tide__worker_update_free(core, w);
}

void tide__worker_release(tide_core_t *core, tide_worker_t *w)
{
    tide_job_t *job = w->job;

    /* A worker that stopped a rank of an earlier generation, or held a lent slot: the job's record lists
     * it until now. */
    if (job && !job->dropped &&
        (job->state != TIDE_JOB_RUNNING || w->generation != job->generation || w->rank >= job->n_ranks))
        tide__persist_job(core, job);
    tide_list_remove(&w->bound_node);
    core->low_busy -= w->low;
    w->low = false;
    w->job = NULL;
    w->rank = -1;
    w->generation = 0;
    if (w->state == TIDE_WORKER_BUSY)
        tide__worker_set_state(core, w, TIDE_WORKER_READY);
    else
        tide__worker_update_free(core, w);
    core->need_schedule = true;
    if (job) {
        tide__resize_old_stopped(core, job);
        tide__preempt_stopped(core, job);
    }
}

/* w is DEAD: its stream is dropped and its ranks are lost. failure: counted for the reserve and reported
 * as worker.dead; else (a goodbye) reported as worker.departed. */
static void worker_dead(tide_core_t *core, tide_worker_t *w, const char *why, bool failure)
{
    tide_job_t *job = w->job;

    if (failure && (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY ||
                    w->state == TIDE_WORKER_SUSPECT)) {
        core->failures++;
        tide__reserve_update(core);
    }

    tide_list_remove(&w->live_node);
    if (w->connected) {
        /* Connected but silent (hung agent): drop the stream so that it re-registers. */
        tide_action_t *a = tide__act(core, TIDE_ACT_CLOSE_STREAM);
        a->worker = w;
        a->conn = w->conn;
        w->connected = false;
        w->conn = NULL;
    }
    tide__worker_set_state(core, w, TIDE_WORKER_DEAD);
    if (failure)
        tide__event(core, "worker.dead", job, w, "worker %s is dead: %s", w->id, why);
    else
        tide__event(core, "worker.departed", job, w, "worker %s left: %s", w->id, why);
    if (job) {
        int32_t rank = w->rank;
        if (job->state == TIDE_JOB_RUNNING && w->generation == job->generation && rank >= 0 &&
            rank < job->n_ranks && job->ranks[rank].worker == w) {
            char *text = failure ? tide_xasprintf("worker %s died (%s)", w->id, why)
                                 : tide_xasprintf("worker %s left (%s)", w->id, why);
            tide__job_rank_lost(core, job, rank, failure ? TIDE_FAILURE_LOST : TIDE_FAILURE_LEFT, text);
            free(text);
        } else if (tide__lent_slot_of(job, w, w->generation, rank)) {
            char *text = tide_xasprintf("worker %s died (%s)", w->id, why);
            tide__lent_lost(core, job, rank, text);
            free(text);
        }
        if (w->job)
            tide__worker_release(core, w);
    }
}

void tide__liveness_tick(tide_core_t *core)
{
    int64_t hb = core->cfg.heartbeat_interval_ms;
    int64_t suspect_ms = hb * core->cfg.suspect_after_missed;
    int64_t dead_ms = hb * core->cfg.dead_after_missed;

    while (!tide_list_empty(&core->alive)) {
        tide_worker_t *w = tide_list_entry(core->alive.next, tide_worker_t, live_node);
        if (core->now_mono - w->last_seen_mono < suspect_ms)
            break;
        tide_list_move_back(&core->suspect, &w->live_node);
        if (w->state != TIDE_WORKER_SUSPECT) {
            tide__worker_set_state(core, w, TIDE_WORKER_SUSPECT);
            tide__event(core, "worker.suspect", w->job, w, "worker %s missed heartbeats for %lldms",
                        w->id, (long long)(core->now_mono - w->last_seen_mono));
        }
    }
    while (!tide_list_empty(&core->suspect)) {
        tide_worker_t *w = tide_list_entry(core->suspect.next, tide_worker_t, live_node);
        int64_t silent = core->now_mono - w->last_seen_mono;
        char why[96];
        if (silent < dead_ms)
            break;
        snprintf(why, sizeof(why), "no heartbeat for %lldms", (long long)silent);
        worker_dead(core, w, why, true);
    }
}

/* --- events from workers --- */

static void set_str(char **dst, const char *src)
{
    free(*dst);
    *dst = tide_xstrdup(src ? src : "");
}

static void worker_set_info(tide_core_t *core, tide_worker_t *w, const tide_worker_info_t *info)
{
    if (!w->node_name || strcmp(w->node_name, info->node) != 0) {
        set_str(&w->node_name, info->node);
        w->node = node_get(core, info->node);
    }
    w->gpu_index = info->gpu_index;
    set_str(&w->device, info->device);
    w->peak_flops = info->peak_flops;
    w->memory_bytes = info->memory_bytes;
    kv_free(w->labels, w->n_labels);
    w->labels = info->n_labels ? tide_xcalloc(info->n_labels, sizeof(*w->labels)) : NULL;
    for (size_t i = 0; i < info->n_labels; i++) {
        w->labels[i].key = tide_xstrdup(info->labels[i].key);
        w->labels[i].value = tide_xstrdup(info->labels[i].value);
    }
    w->n_labels = info->n_labels;
    tide__index_worker(core, w);
    set_str(&w->address, info->address);
    set_str(&w->launcher_address, info->launcher_address);
    set_str(&w->agent_sock, info->agent_sock);
    set_str(&w->version, info->version);
}

static tide_job_rank_t *slot_of(tide_job_t *job, tide_worker_t *w, int32_t generation, int32_t rank)
{
    if (!job || job->state != TIDE_JOB_RUNNING || job->generation != generation || rank < 0 ||
        rank >= job->n_ranks)
        return NULL;
    if (strcmp(job->ranks[rank].worker_id, w->id) != 0)
        return NULL;
    return &job->ranks[rank];
}

static tide_stale_rank_t *stale_find(tide_worker_t *w, const char *job_id, int32_t gen, int32_t rank)
{
    for (size_t i = 0; i < w->n_stale; i++) {
        tide_stale_rank_t *st = &w->stale[i];
        if (st->generation == gen && st->rank == rank && strcmp(st->job_id, job_id) == 0)
            return st;
    }
    return NULL;
}

void tide__stale_add(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t gen, int32_t rank,
                     const char *why)
{
    tide_stale_rank_t *st = stale_find(w, job_id, gen, rank);
    tide_action_t *a;

    if (!st) {
        w->stale = tide_xrealloc(w->stale, (w->n_stale + 1) * sizeof(*w->stale));
        st = &w->stale[w->n_stale++];
        st->job_id = tide_xstrdup(job_id);
        st->generation = gen;
        st->rank = rank;
        tide__worker_update_free(core, w);
    }
    st->seen = true;
    a = tide__act(core, TIDE_ACT_STOP);
    a->worker = w;
    a->conn = w->conn;
    a->job_id = tide__keep(core, job_id);
    a->generation = gen;
    a->rank = rank;
    a->grace_ms = core->cfg.stop_grace_ms;
    a->text = why;
}

bool tide__stale_drop(tide_core_t *core, tide_worker_t *w, const char *job_id, int32_t gen, int32_t rank)
{
    tide_stale_rank_t *st = stale_find(w, job_id, gen, rank);

    if (!st)
        return false;
    free(st->job_id);
    *st = w->stale[--w->n_stale];
    tide__worker_update_free(core, w);
    core->need_schedule = true;
    return true;
}

/* STOP of a rank the re-registering worker w reports running, that the core was stopping. */
static void stop_again(tide_core_t *core, tide_worker_t *w, tide_job_t *job, const tide_rank_report_t *r,
                       const char *why)
{
    tide_action_t *a = tide__act(core, TIDE_ACT_STOP);

    a->worker = w;
    a->conn = w->conn;
    a->job = job;
    a->job_id = job->id;
    a->generation = r->generation;
    a->rank = r->rank;
    a->grace_ms = core->cfg.stop_grace_ms;
    a->text = why;
}

int tide_core_worker_register(tide_core_t *core, const tide_worker_info_t *info, void *conn,
                              const tide_rank_report_t *ranks, size_t n_ranks, tide_worker_t **out,
                              tide_error_t *err)
{
    tide_worker_t *w;
    bool known_rank_reported = false;
    tide_worker_state_t before;

    if (!info->id || !info->id[0]) {
        tide_errprintf(err, "worker_id must not be empty");
        return -EINVAL;
    }
    if (!info->node || !info->node[0]) {
        tide_errprintf(err, "node must not be empty");
        return -EINVAL;
    }
    w = tide_core_worker_find(core, info->id);
    if (w && info->boot_id && w->boot_id && w->state != TIDE_WORKER_DEAD &&
        (info->boot_id < w->boot_id || (info->boot_id == w->boot_id && info->stream_seq < w->stream_seq))) {
        /* A hello delayed on a stream the agent (or its previous process) has since replaced (KB7): what
         * it says about the ranks is older than what the core knows. A DEAD worker's ranks are written off
         * already, so any hello is taken then: an agent whose boot_id went back (a wiped data dir and a
         * clock behind) is refused only until the worker it replaces is declared dead. */
        tide_errprintf(err, "boot_id %llu stream_seq %llu: older than the registered stream (boot_id %llu "
                       "stream_seq %llu) of worker %s",
                       (unsigned long long)info->boot_id, (unsigned long long)info->stream_seq,
                       (unsigned long long)w->boot_id, (unsigned long long)w->stream_seq, w->id);
        return -ESTALE;
    }
    w = tide__worker_get_or_add(core, info->id);
    before = w->state;
    if (w->connected && w->conn != conn) {
        tide_action_t *a = tide__act(core, TIDE_ACT_CLOSE_STREAM);
        a->worker = w;
        a->conn = w->conn;
    }
    worker_set_info(core, w, info);
    w->boot_id = info->boot_id;
    w->stream_seq = info->stream_seq;
    w->conn = conn;
    w->connected = true;
    w->last_seen_mono = core->now_mono;
    w->last_heartbeat_ms = core->now_wall;
    tide_list_move_back(&core->alive, &w->live_node);
    tide__worker_set_state(core, w, w->job ? TIDE_WORKER_BUSY : TIDE_WORKER_READY);
    tide__worker_update_free(core, w);
    {
        tide_action_t *a = tide__act(core, TIDE_ACT_WELCOME);
        a->worker = w;
        a->conn = conn;
    }
    tide__event(core, before == TIDE_WORKER_SUSPECT ? "worker.recovered" : "worker.registered",
                w->job, w, "worker %s on %s (%s, gpu %d) registered with %zu rank(s) to report",
                w->id, w->node_name, w->device, w->gpu_index, n_ranks);

    /* Reconcile what the worker says it runs with what the core believes. Stale ranks that the hello no
     * longer lists are gone. */
    for (size_t i = 0; i < w->n_stale; i++)
        w->stale[i].seen = false;
    for (size_t i = 0; i < n_ranks; i++) {
        const tide_rank_report_t *r = &ranks[i];
        tide_job_t *job = tide_core_job_find(core, r->job_id ? r->job_id : "");
        tide_job_rank_t *slot = slot_of(job, w, r->generation, r->rank);

        if (tide__lent_slot_of(job, w, r->generation, r->rank)) {
            /* A lent (burst) process: running goes on (one taken back is told to stop again). */
            tide_job_rank_t *lent = &job->ranks[r->rank];
            known_rank_reported = true;
            if (lent->awaiting) {
                lent->awaiting = false;
                job->awaiting--;
                tide__job_maybe_reconciled(core, job);
            }
            if (!r->running) {
                tide__lent_exited(core, job, r->rank, r->exit_code, r->error);
            } else if (lent->lent_stopping) {
                stop_again(core, w, job, r, "burst worker taken back");
            } else {
                tide__lent_started(core, job, r->rank, r->pid);
            }
            continue;
        }
        if (!slot || slot->state == TIDE_RANK_EXITED || slot->state == TIDE_RANK_LOST) {
            /* Not ours (any more): a still-running one is stopped; an exit is just forgotten,
             * except that it frees the worker from a rank it was stopping. */
            if (r->running && w->job && job == w->job && w->generation == r->generation &&
                w->rank == r->rank) {
                /* A rank of a generation the job left, that this worker was stopping: stop it again
                 * and keep the worker bound until its exit (or its death), so the job's next
                 * generation cannot start beside it. */
                stop_again(core, w, job, r, "its generation ended");
                known_rank_reported = true;
            } else if (r->running)
                tide__stale_add(core, w, r->job_id ? r->job_id : "", r->generation, r->rank,
                                "rank unknown to the scheduler");
            else if (w->job && job == w->job && w->generation == r->generation && w->rank == r->rank)
                tide__worker_release(core, w);
            continue;
        }
        if (w->job != job || w->rank != r->rank)
            continue; /* the core bound w elsewhere; its rank there is handled below */
        known_rank_reported = true;
        if (slot->awaiting) {
            slot->awaiting = false;
            job->awaiting--;
            tide__job_maybe_reconciled(core, job);
        }
        if (r->running)
            tide__rank_started(core, w, job->id, r->generation, r->rank, r->pid, r->master_port);
        else
            tide__rank_exited(core, w, job->id, r->generation, r->rank, r->exit_code, r->error);
    }

    if (w->job && !known_rank_reported && tide__lent_slot_of(w->job, w, w->generation, w->rank)) {
        /* Its lent process is gone (or its LAUNCH was lost with the stream): the slot is free again. */
        char *why = tide_xasprintf("worker %s re-registered without burst slot %d", w->id, w->rank);
        tide__lent_lost(core, w->job, w->rank, why);
        free(why);
    } else if (w->job && !known_rank_reported) {
        tide_job_t *job = w->job;
        tide_job_rank_t *slot = slot_of(job, w, w->generation, w->rank);
        if (slot && slot->awaiting) {
            slot->awaiting = false;
            job->awaiting--;
            tide__job_maybe_reconciled(core, job);
        }
        if (slot && (slot->state == TIDE_RANK_LAUNCHED || slot->state == TIDE_RANK_RUNNING)) {
            char *why = tide_xasprintf("worker %s re-registered without rank %d", w->id, w->rank);
            tide__job_rank_lost(core, job, w->rank, TIDE_FAILURE_LOST, why);
            free(why);
            if (w->job)
                tide__worker_release(core, w);
        } else if (!slot) {
            /* A rank of an ended job or generation that the worker no longer has. */
            tide__worker_release(core, w);
        }
        /* ASSIGNED ranks wait for rank 0's port; they are launched below. */
    }
    for (size_t i = 0; i < w->n_stale;) {
        if (w->stale[i].seen) {
            i++;
            continue;
        }
        free(w->stale[i].job_id);
        w->stale[i] = w->stale[--w->n_stale];
    }
    tide__worker_update_free(core, w);
    if (w->job && w->job->state == TIDE_JOB_RUNNING) {
        tide_job_t *job = w->job;
        if (job->master_port > 0 && w->rank > 0 && w->rank < job->n_ranks &&
            job->ranks[w->rank].state == TIDE_RANK_ASSIGNED) {
            tide__act_launch(core, job, w, w->rank);
        }
    }
    tide__tasks_worker_up(core, w);
    *out = w;
    tide__schedule(core);
    return 0;
}

void tide_core_worker_heartbeat(tide_core_t *core, tide_worker_t *w, const tide_telemetry_t *t)
{
    if (!w->connected)
        return;
    if (t) {
        w->telemetry = *t;
        tide__predict_sample(core, w);
    }
    w->last_seen_mono = core->now_mono;
    w->last_heartbeat_ms = core->now_wall;
    tide_list_move_back(&core->alive, &w->live_node);
    if (w->state == TIDE_WORKER_SUSPECT) {
        tide__worker_set_state(core, w, w->job ? TIDE_WORKER_BUSY : TIDE_WORKER_READY);
        tide__event(core, "worker.recovered", w->job, w, "worker %s is heartbeating again", w->id);
        tide__schedule(core);
    }
}

void tide_core_liveness_grace(tide_core_t *core, int64_t ms)
{
    tide_list_t *lists[2] = {&core->alive, &core->suspect};
    tide_list_t *pos;

    for (int i = 0; i < 2; i++) {
        tide_list_for_each(pos, lists[i]) {
            tide_worker_t *w = tide_list_entry(pos, tide_worker_t, live_node);
            w->last_seen_mono = w->last_seen_mono + ms < core->now_mono ? w->last_seen_mono + ms
                                                                         : core->now_mono;
        }
    }
}

void tide_core_worker_disconnected(tide_core_t *core, tide_worker_t *w, void *conn, bool goodbye)
{
    if (!w->connected || w->conn != conn)
        return;
    w->connected = false;
    w->conn = NULL;
    if (goodbye) {
        worker_dead(core, w, "it shut down", false);
        if (!w->job)
            depart(core, w); /* always so: worker_dead released it */
    } else {
        /* It stays where it is in the alive list (ordered by last heartbeat): the tick moves it on to
         * the suspect list in order, so a storm of disconnects costs O(1) each. */
        tide__worker_set_state(core, w, TIDE_WORKER_SUSPECT);
        tide__event(core, "worker.suspect", w->job, w, "worker %s lost its stream", w->id);
        tide__tasks_worker_down(core, w);
    }
    tide__schedule(core);
}

void tide_core_worker_failed(tide_core_t *core, tide_worker_t *w, const char *why)
{
    if (!w || w->state == TIDE_WORKER_DEAD)
        return;
    worker_dead(core, w, why && why[0] ? why : "it failed", true);
    tide__schedule(core);
}

void tide__worker_cordon(tide_core_t *core, tide_worker_t *w, const char *reason)
{
    bool was = w->cordoned;

    free(w->cordon_reason);
    w->cordon_reason = reason && reason[0] ? tide_xstrdup(reason) : NULL;
    if (!was) {
        w->cordoned = true;
        core->worker_counts[0]++;
        core->n_departed_cordoned += w->departed;
        tide__worker_update_free(core, w);
    }
    tide__persist_worker(core, w);
}

int tide_core_worker_cordon(tide_core_t *core, const char *id, bool cordon, tide_worker_t **out,
                            tide_error_t *err)
{
    tide_worker_t *w = tide_core_worker_find(core, id);

    if (!w) {
        tide_errprintf(err, "worker %s not found", id);
        return -ENOENT;
    }
    if (cordon && !w->cordoned) {
        tide__worker_cordon(core, w, NULL);
        tide__event(core, "worker.cordoned", NULL, w, "worker %s cordoned: no new ranks", w->id);
    } else if (!cordon && w->cordoned) {
        w->cordoned = false;
        free(w->cordon_reason);
        w->cordon_reason = NULL;
        w->n_fail = 0; /* an operator put it back: its quarantine count and its trend start afresh */
        tide__predict_reset(w);
        core->worker_counts[0]--;
        core->n_departed_cordoned -= w->departed;
        tide__worker_update_free(core, w);
        tide__persist_worker(core, w);
        tide__event(core, "worker.uncordoned", NULL, w, "worker %s uncordoned", w->id);
    }
    *out = w;
    tide__schedule(core);
    return 0;
}

void tide_core_worker_restore(tide_core_t *core, const char *id, bool cordoned, const char *reason)
{
    tide_worker_t *w = tide_core_worker_find(core, id);

    if (!w) {
        w = tide__worker_get_or_add(core, id);
        if (!cordoned)
            depart(core, w); /* an old uncordon's record: nothing to show until it registers */
    }
    if (w->cordoned != cordoned) {
        w->cordoned = cordoned;
        core->worker_counts[0] += cordoned ? 1 : -1;
        core->n_departed_cordoned += w->departed ? (cordoned ? 1 : -1) : 0;
    }
    free(w->cordon_reason);
    w->cordon_reason = cordoned && reason && reason[0] ? tide_xstrdup(reason) : NULL;
}

static int cmp_worker_id(const void *a, const void *b)
{
    const tide_worker_t *x = *(tide_worker_t *const *)a, *y = *(tide_worker_t *const *)b;
    return strcmp(x->id, y->id);
}

tide_worker_t **tide_core_workers_sorted(const tide_core_t *core, size_t *n)
{
    size_t count = HASH_COUNT(core->workers), i = 0;
    tide_worker_t **arr = tide_xcalloc(count + 1, sizeof(*arr));
    tide_worker_t *w, *tmp;

    HASH_ITER(hh, core->workers, w, tmp) arr[i++] = w;
    qsort(arr, count, sizeof(*arr), cmp_worker_id);
    *n = count;
    return arr;
}

void tide_core_worker_counts(const tide_core_t *core, int counts[5])
{
    memcpy(counts, core->worker_counts, sizeof(core->worker_counts));
    counts[TIDE_WORKER_DEAD] -= core->n_departed;
    counts[0] -= core->n_departed_cordoned;
}

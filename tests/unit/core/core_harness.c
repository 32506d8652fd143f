/* Test harness for the scheduler core, see core_harness.h. It reaches into core_private.h to check
 * invariants that the public API cannot see. */
#include "core_harness.h"

#include <stdio.h>
#include <stdlib.h>

#include "core_private.h"

static int conn_tokens[4096];
static int next_conn; /* streams are tokens: &conn_tokens[i] */

void h_config(tide_core_config_t *cfg)
{
    tide_core_config_default(cfg);
    cfg->hang_min_ms = 0;
    /* The scenarios were written for failures that fail the job; restart.c's tests turn restarts on. */
    cfg->max_restarts = 0;
    cfg->quarantine_failures = 0;
}

void h_init(h_t *h, const tide_core_config_t *cfg)
{
    tide_core_config_t def;

    h_config(&def);
    h->mono = 1000;
    h->core = tide_core_new(cfg ? cfg : &def);
    tide_core_set_time(h->core, h->mono, H_WALL0);
}

void h_fini(h_t *h)
{
    tide_core_free(h->core);
}

void h_advance(h_t *h, int64_t ms)
{
    h->mono += ms;
    tide_core_set_time(h->core, h->mono, H_WALL0 + h->mono);
    tide_core_tick(h->core);
}

void h_advance_alive(h_t *h, int64_t ms, const char *except)
{
    int64_t step = tide_core_config(h->core)->heartbeat_interval_ms;
    for (int64_t t = 0; t < ms; t += step) {
        tide_worker_t *w, *tmp;
        h_advance(h, step);
        HASH_ITER(hh, h->core->workers, w, tmp) {
            if (w->connected && (!except || strcmp(w->id, except) != 0))
                tide_core_worker_heartbeat(h->core, w, NULL);
        }
    }
}

tide_worker_t *h_register(h_t *h, const char *id, const char *node, int gpu)
{
    tide_worker_info_t info = {.id = id, .node = node, .gpu_index = gpu, .device = "sim:h100",
                               .peak_flops = 989e12, .memory_bytes = 80ULL << 30,
                               .address = "127.0.0.1", .version = "test"};
    tide_worker_t *w = NULL;
    tide_error_t err;
    int rc = tide_core_worker_register(h->core, &info, &conn_tokens[next_conn++ % 4096], NULL, 0, &w, &err);
    assert_int_equal(rc, 0);
    return w;
}

tide_job_t *h_submit(h_t *h, int min, int max, tide_prio_t prio)
{
    char *argv[] = {"/bin/true", NULL};
    tide_job_spec_t spec = {.name = "t", .argv = argv, .argc = 1, .min_workers = min,
                            .max_workers = max, .priority = prio};
    tide_job_t *job = NULL;
    tide_error_t err;
    assert_int_equal(tide_core_job_submit(h->core, &spec, &job, &err), 0);
    return job;
}

tide_worker_t *h_register_ex(h_t *h, const char *id, const char *node, int gpu, const char *device,
                             uint64_t memory, const char *labels)
{
    tide_kv_t kv[8];
    size_t n_kv = 0;
    char *copy = strdup(labels ? labels : ""), *save = NULL;
    tide_worker_info_t info = {.id = id, .node = node, .gpu_index = gpu,
                               .device = device ? device : "sim:h100", .peak_flops = 1e15,
                               .memory_bytes = memory ? memory : 80ULL << 30, .address = "127.0.0.1",
                               .version = "test"};
    tide_worker_t *w = NULL;
    tide_error_t err;
    int rc;

    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        assert_true(n_kv < sizeof(kv) / sizeof(kv[0]));
        *eq = '\0';
        kv[n_kv].key = tok;
        kv[n_kv].value = eq + 1;
        n_kv++;
    }
    info.labels = kv;
    info.n_labels = n_kv;
    rc = tide_core_worker_register(h->core, &info, &conn_tokens[next_conn++ % 4096], NULL, 0, &w,
                                   &err);
    free(copy);
    assert_int_equal(rc, 0);
    return w;
}

void h_node(h_t *h, const char *node, int gpus, const char *device, uint64_t memory,
            const char *labels)
{
    char id[64];

    for (int g = 0; g < gpus; g++) {
        snprintf(id, sizeof(id), "%s/gpu%d", node, g);
        h_register_ex(h, id, node, g, device, memory, labels);
    }
    h_clear(h);
}

tide_job_spec_t h_spec(int min, int max, tide_prio_t prio)
{
    static char *argv[] = {"/bin/true", NULL};
    tide_job_spec_t spec = {.name = "t", .argv = argv, .argc = 1, .min_workers = min,
                            .max_workers = max, .priority = prio};
    return spec;
}

tide_job_t *h_submit_spec(h_t *h, const tide_job_spec_t *spec)
{
    tide_job_t *job = NULL;
    tide_error_t err = {0};
    int rc = tide_core_job_submit(h->core, spec, &job, &err);

    if (rc != 0)
        fail_msg("submit refused (%d): %s", rc, err.text);
    return job;
}

void h_jump(h_t *h, int64_t ms)
{
    tide_worker_t *w, *tmp;

    h->mono += ms;
    tide_core_set_time(h->core, h->mono, H_WALL0 + h->mono);
    HASH_ITER(hh, h->core->workers, w, tmp) {
        if (w->connected)
            tide_core_worker_heartbeat(h->core, w, NULL);
    }
    tide_core_tick(h->core);
}

size_t h_stop_all(h_t *h)
{
    size_t n, ns = 0;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    struct stop {
        tide_worker_t *w;
        char job[32];
        int32_t gen, rank;
    } *st = calloc(n + 1, sizeof(*st));

    for (size_t i = 0; i < n; i++) {
        if (a[i].type != TIDE_ACT_STOP)
            continue;
        st[ns].w = a[i].worker;
        snprintf(st[ns].job, sizeof(st[ns].job), "%s", a[i].job_id);
        st[ns].gen = a[i].generation;
        st[ns].rank = a[i].rank;
        ns++;
    }
    tide_core_actions_clear(h->core);
    for (size_t i = 0; i < ns; i++)
        tide_core_rank_exited(h->core, st[i].w, st[i].job, st[i].gen, st[i].rank, 143, NULL);
    free(st);
    return ns;
}

void h_exit_all(h_t *h, tide_job_t *job)
{
    int32_t n = job->n_ranks, gen = job->generation;
    tide_worker_t **ws = calloc((size_t)n + 1, sizeof(*ws));
    char id[32];

    snprintf(id, sizeof(id), "%s", job->id);
    for (int32_t r = 0; r < n; r++)
        ws[r] = job->ranks[r].state == TIDE_RANK_RUNNING ? job->ranks[r].worker : NULL;
    for (int32_t r = 0; r < n; r++)
        if (ws[r])
            tide_core_rank_exited(h->core, ws[r], id, gen, r, 0, NULL);
    free(ws);
}

void h_sdk(h_t *h, tide_job_t *job, double mfu)
{
    for (int32_t r = 0; r < job->n_ranks; r++) {
        tide_trainer_progress_t p = {.sdk = true, .step = 1, .peak_flops = 1e15,
                                     .flops_per_s = mfu * 1e15, .mfu = mfu};
        if (job->ranks[r].worker && job->ranks[r].state == TIDE_RANK_RUNNING)
            tide_core_rank_progress(h->core, job->ranks[r].worker, job->id, job->generation, r, &p);
    }
}

void h_ckpt(h_t *h, tide_job_t *job, int64_t step)
{
    int32_t n = job->n_ranks, gen = job->generation;
    tide_worker_t **ws = calloc((size_t)n + 1, sizeof(*ws));
    char id[32], path[64];

    snprintf(id, sizeof(id), "%s", job->id);
    for (int32_t r = 0; r < n; r++)
        ws[r] = job->ranks[r].state == TIDE_RANK_RUNNING ? job->ranks[r].worker : NULL;
    for (int32_t r = 0; r < n; r++) {
        snprintf(path, sizeof(path), "/ckpt/%s/step%lld/rank%d", id, (long long)step, r);
        if (ws[r])
            tide_core_checkpoint_saved(h->core, ws[r], id, gen, r, step, path, 1000, "ab");
    }
    free(ws);
}

size_t h_count_event(h_t *h, const char *event_type)
{
    size_t n, c = 0;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    for (size_t i = 0; i < n; i++)
        c += a[i].type == TIDE_ACT_EVENT && strcmp(a[i].event_type, event_type) == 0;
    return c;
}

const char *h_event_text(h_t *h, const char *event_type, size_t i)
{
    size_t n;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    for (size_t k = 0; k < n; k++)
        if (a[k].type == TIDE_ACT_EVENT && strcmp(a[k].event_type, event_type) == 0 && i-- == 0)
            return a[k].text;
    return NULL;
}

const char *h_nodes_of(const tide_job_t *job, char *buf, size_t len)
{
    size_t n = 0;

    buf[0] = '\0';
    for (int32_t r = 0; r < job->n_ranks && n < len; r++) {
        const tide_worker_t *w = job->ranks[r].worker;
        n += (size_t)snprintf(buf + n, len - n, "%s%s", r ? "," : "", w ? w->node_name : "-");
    }
    return buf;
}

const tide_action_t *h_find(h_t *h, tide_action_type_t type, const char *worker_id, int rank)
{
    size_t n;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    for (size_t i = 0; i < n; i++) {
        if (a[i].type != type)
            continue;
        if (worker_id && (!a[i].worker || strcmp(a[i].worker->id, worker_id) != 0))
            continue;
        if (rank >= 0 && a[i].rank != rank)
            continue;
        return &a[i];
    }
    return NULL;
}

size_t h_count(h_t *h, tide_action_type_t type)
{
    size_t n, c = 0;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    for (size_t i = 0; i < n; i++)
        c += a[i].type == type;
    return c;
}

const tide_action_t *h_find_event(h_t *h, const char *event_type)
{
    size_t n;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    for (size_t i = 0; i < n; i++)
        if (a[i].type == TIDE_ACT_EVENT && strcmp(a[i].event_type, event_type) == 0)
            return &a[i];
    return NULL;
}

/* Confirms every LAUNCH in the action list (rank 0 reports port 29400) after clearing the actions;
 * returns how many it confirmed. */
static size_t start_round(h_t *h)
{
    size_t n;
    const tide_action_t *a = tide_core_actions(h->core, &n);
    struct launch {
        tide_worker_t *w;
        char job[32];
        int32_t gen, rank;
    } *l = calloc(n + 1, sizeof(*l));
    size_t nl = 0;

    for (size_t i = 0; i < n; i++) {
        if (a[i].type != TIDE_ACT_LAUNCH)
            continue;
        l[nl].w = a[i].worker;
        snprintf(l[nl].job, sizeof(l[nl].job), "%s", a[i].job->id);
        l[nl].gen = a[i].generation;
        l[nl].rank = a[i].rank;
        nl++;
    }
    tide_core_actions_clear(h->core);
    for (size_t i = 0; i < nl; i++)
        tide_core_rank_started(h->core, l[i].w, l[i].job, l[i].gen, l[i].rank, 1000 + l[i].rank,
                               l[i].rank == 0 ? 29400 : 0);
    free(l);
    return nl;
}

void h_start_all(h_t *h)
{
    for (int round = 0; round < 8; round++)
        if (start_round(h) == 0)
            return;
}

void h_start_keep(h_t *h)
{
    for (int round = 0; round < 8 && h_count(h, TIDE_ACT_LAUNCH) > 0; round++)
        start_round(h);
}

void h_clear(h_t *h)
{
    tide_core_actions_clear(h->core);
}

/* The placement index: every count is the sum of its parts, buckets hold exactly the domains with free
 * workers, and LOW-held workers are counted. */
static void check_index(tide_core_t *core)
{
    tide_shape_t *s, *stmp;
    tide_worker_t *w, *wtmp;
    int32_t total_free = 0, low = 0;

    HASH_ITER(hh, core->workers, w, wtmp) {
        low += w->low;
        if (tide_list_linked(&w->free_node))
            assert_non_null(w->dom);
        if (w->low)
            assert_non_null(w->job);
    }
    assert_int_equal(low, core->low_busy);
    HASH_ITER(hh, core->shapes, s, stmp) {
        int32_t sfree = 0, susable = 0;
        for (int l = 0; l < TIDE_LVL_DOMAINS; l++) {
            tide_domain_t *d, *dtmp;
            int32_t lfree = 0;
            HASH_ITER(hh, s->domains[l], d, dtmp) {
                int32_t c = 0, u = 0;
                tide_list_t *pos;
                if (l == TIDE_LVL_NODE) {
                    tide_worker_t *x, *xtmp;
                    tide_list_for_each(pos, &d->free) c++;
                    HASH_ITER(hh, core->workers, x, xtmp) u += x->dom == d && x->usable;
                } else {
                    tide_list_for_each(pos, &d->children) {
                        tide_domain_t *k = tide_list_entry(pos, tide_domain_t, child_node);
                        assert_ptr_equal(k->parent, d);
                        c += k->n_free;
                        u += k->n_usable;
                    }
                }
                assert_int_equal(c, d->n_free);
                assert_int_equal(u, d->n_usable);
                assert_int_equal(tide_list_linked(&d->bucket), d->n_free > 0);
                if (l < TIDE_LVL_SWITCH)
                    assert_non_null(d->parent);
                lfree += d->n_free;
                if (l == TIDE_LVL_SWITCH)
                    susable += d->n_usable;
            }
            if (l == 0)
                sfree = lfree;
            else
                assert_int_equal(lfree, sfree);
        }
        assert_int_equal(sfree, s->n_free);
        assert_int_equal(susable, s->n_usable);
        total_free += sfree;
    }
    assert_int_equal(total_free, core->n_free);
}

/* Elastic scaling (resize.c): grow claims add up, a running job is never mid-stop, the resizable list
 * holds exactly the running jobs whose size differs from their goal, and a resize's record is
 * well-formed. */
static void check_resize(tide_core_t *core)
{
    tide_job_t *job, *jtmp;
    int32_t claimed = 0, off_goal = 0, listed = 0;
    tide_list_t *pos;

    HASH_ITER(hh, core->jobs, job, jtmp) {
        int32_t goal = job->burst_to > 0 ? job->burst_to /* grown for a phase (lending.c) */
                       : job->target_workers > 0 ? job->target_workers : job->spec.max_workers;
        /* tide resizes only jobs with a requested size, or growing by themselves (SDK, auto_grow) */
        bool want = job->state == TIDE_JOB_RUNNING && job->n_ranks != goal &&
                    (job->target_workers > 0 || (core->cfg.auto_grow && job->sdk_seen));
        tide_resize_state_t st = job->resize.state;

        assert_true(job->grow_claim >= 0);
        claimed += job->grow_claim;
        /* only a decided resize that has not been placed yet counts on free workers */
        if (job->grow_claim > 0)
            assert_true(st == TIDE_RESIZE_CHECKPOINTING || st == TIDE_RESIZE_STOPPING);
        if (job->state == TIDE_JOB_RUNNING)
            assert_int_not_equal(st, TIDE_RESIZE_STOPPING);
        if (job->state != TIDE_JOB_PENDING && job->state != TIDE_JOB_RUNNING)
            assert_int_equal(st, TIDE_RESIZE_NONE);
        if (st != TIDE_RESIZE_NONE) {
            assert_non_null(job->resize.detail);
            assert_true(st != TIDE_RESIZE_DONE);
            assert_true(job->resize.to_workers >= job->spec.min_workers &&
                        job->resize.to_workers <= job->spec.max_workers);
        }
        assert_true(job->last_resize.state == TIDE_RESIZE_NONE ||
                    job->last_resize.state == TIDE_RESIZE_DONE);
        if (job->last_resize.state == TIDE_RESIZE_DONE) {
            assert_non_null(job->last_resize.detail);
            assert_true(job->last_resize.to_generation > job->last_resize.from_generation);
            assert_true(job->last_resize.workers >= job->spec.min_workers &&
                        job->last_resize.workers <= job->spec.max_workers);
        }
        assert_true(job->target_workers == 0 || (job->target_workers >= job->spec.min_workers &&
                                                  job->target_workers <= job->spec.max_workers));
        assert_int_equal(tide_list_linked(&job->resize_node), want);
        off_goal += want;
    }
    assert_true(core->grow_claimed >= 0);
    assert_int_equal(claimed, core->grow_claimed);
    tide_list_for_each(pos, &core->resizable) {
        tide_job_t *j = tide_list_entry(pos, tide_job_t, resize_node);
        int32_t goal = j->burst_to > 0 ? j->burst_to : j->target_workers > 0 ? j->target_workers : j->spec.max_workers;
        assert_int_equal(j->state, TIDE_JOB_RUNNING);
        assert_int_not_equal(j->n_ranks, goal);
        listed++;
    }
    assert_int_equal(listed, off_goal);
}

void h_check_invariants(h_t *h)
{
    tide_core_t *core = h->core;
    tide_worker_t *w, *tmp;
    tide_job_t *job, *jtmp;
    int wcounts[5] = {0}, jcounts[6] = {0};
    int32_t n_free = 0, n_usable = 0, n_departed = 0, n_departed_cordoned = 0;

    HASH_ITER(hh, core->workers, w, tmp) {
        bool sched = w->connected && w->state == TIDE_WORKER_READY && !w->cordoned && !w->job &&
                     w->n_stale == 0;
        wcounts[w->state]++;
        wcounts[0] += w->cordoned;
        if (w->departed) {
            /* it said goodbye: DEAD, unconnected, bound to nothing, never placed */
            assert_int_equal(w->state, TIDE_WORKER_DEAD);
            assert_false(w->connected);
            assert_null(w->job);
            n_departed++;
            n_departed_cordoned += w->cordoned;
        }
        assert_int_equal(tide_list_linked(&w->free_node), sched);
        n_free += sched;
        n_usable += w->usable;
        assert_int_equal(w->usable, w->connected && !w->cordoned &&
                                        (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY));
        if (w->state == TIDE_WORKER_READY)
            assert_null(w->job);
        if (w->state == TIDE_WORKER_BUSY)
            assert_non_null(w->job);
        if (w->state == TIDE_WORKER_READY || w->state == TIDE_WORKER_BUSY)
            assert_true(w->connected);
        assert_int_equal(tide_list_linked(&w->bound_node), w->job != NULL);
        if (w->job) {
            /* bound to a live slot of its generation, or stopping a rank of an ended generation */
            tide_job_t *j = w->job;
            bool listed = false;
            tide_list_t *pos;
            tide_list_for_each(pos, &j->bound) listed |= pos == &w->bound_node;
            assert_true(listed);
            if (j->state == TIDE_JOB_RUNNING && j->generation == w->generation) /* a rank or a lent slot */
                assert_true(w->rank >= 0 && w->rank < j->n_ranks + j->max_lent);
        }
    }
    assert_int_equal(n_free, core->n_free);
    assert_int_equal(n_usable, core->n_usable);
    for (int i = 0; i < 5; i++)
        assert_int_equal(wcounts[i], core->worker_counts[i]);
    assert_int_equal(n_departed, core->n_departed);
    assert_int_equal(n_departed_cordoned, core->n_departed_cordoned);
    {
        int shown[5];
        tide_core_worker_counts(core, shown); /* what GetClusterStatus reports: departed ones left out */
        assert_int_equal(shown[TIDE_WORKER_DEAD], wcounts[TIDE_WORKER_DEAD] - n_departed);
        assert_int_equal(shown[0], wcounts[0] - n_departed_cordoned);
    }
    check_index(core);
    HASH_ITER(hh, core->jobs, job, jtmp) {
        jcounts[job->state]++;
        /* Every PENDING job is queued, but one in its restart backoff (restart.c). */
        assert_int_equal(tide_list_linked(&job->queue_node), job->state == TIDE_JOB_PENDING && !job->restart_at);
        if (job->restart_at)
            assert_int_equal(job->state, TIDE_JOB_PENDING);
        {
            tide_list_t *pos;
            tide_list_for_each(pos, &job->bound) {
                assert_ptr_equal(tide_list_entry(pos, tide_worker_t, bound_node)->job, job);
            }
        }
        if (job->state == TIDE_JOB_RUNNING) {
            int32_t running = 0, unstarted = 0, exited = 0;
            assert_true(job->n_ranks >= job->spec.min_workers && job->n_ranks <= job->spec.max_workers);
            for (int32_t r = 0; r < job->n_ranks; r++) {
                tide_job_rank_t *s = &job->ranks[r];
                running += s->state == TIDE_RANK_RUNNING;
                exited += s->state == TIDE_RANK_EXITED;
                unstarted += s->state == TIDE_RANK_ASSIGNED || s->state == TIDE_RANK_LAUNCHED;
                if (s->worker) {
                    assert_ptr_equal(s->worker->job, job);
                    assert_int_equal(s->worker->rank, r);
                    assert_int_equal(s->worker->generation, job->generation);
                }
                if (s->state == TIDE_RANK_LAUNCHED || s->state == TIDE_RANK_RUNNING ||
                    s->state == TIDE_RANK_ASSIGNED)
                    assert_non_null(s->worker);
            }
            assert_int_equal(running, job->ranks_running);
            assert_int_equal(exited, job->ranks_exited);
            assert_int_equal(unstarted, job->ranks_unstarted);
            /* a generation that has fully started has no launch deadline left */
            if (unstarted == 0)
                assert_int_equal(job->launch_deadline, 0);
        } else {
            assert_int_equal(job->n_ranks == 0 || job->state != TIDE_JOB_PENDING, 1);
        }
    }
    for (int i = 1; i < 6; i++)
        assert_int_equal(jcounts[i], core->job_counts[i]);
    /* the running lists hold exactly the RUNNING jobs, each under the class it was placed with */
    {
        int running = 0;
        for (int p = 0; p < TIDE_PRIO_COUNT; p++) {
            tide_list_t *pos;
            tide_list_for_each(pos, &core->running[p]) {
                tide_job_t *j = tide_list_entry(pos, tide_job_t, run_node);
                assert_int_equal(j->state, TIDE_JOB_RUNNING);
                assert_int_equal(j->run_priority, p);
                running++;
            }
        }
        assert_int_equal(running, core->job_counts[TIDE_JOB_RUNNING]);
    }
    check_resize(core);
}

const tide_job_record_t *h_record_of(const tide_job_t *job, h_rec_t *hr)
{
    tide_job_record_t *rec = &hr->rec;

    assert_true(job->n_ranks <= H_REC_RANKS);
    memset(hr, 0, sizeof(*hr));
    for (int32_t r = 0; r < job->n_ranks; r++) {
        hr->ids[r] = job->ranks[r].worker_id;
        hr->mirrors[r] = job->ranks[r].mirror_id;
        hr->st[r] = job->ranks[r].state;
        hr->codes[r] = job->ranks[r].exit_code;
        hr->local[r] = job->ranks[r].local_rank;
        hr->group[r] = job->ranks[r].group_rank;
    }
    rec->id = job->id;
    rec->spec = &job->spec;
    rec->state = job->state;
    rec->generation = job->generation;
    rec->worker_ids = hr->ids;
    rec->n_workers = job->n_ranks;
    rec->rank_states = hr->st;
    rec->rank_exit_codes = hr->codes;
    rec->rank_local_ranks = hr->local;
    rec->rank_group_ranks = hr->group;
    rec->rank_mirror_ids = hr->mirrors;
    rec->master_addr = job->master_addr;
    rec->gen_start_ms = job->gen_start_ms;
    rec->last_ckpt = job->last_ckpt.step >= 0 ? &job->last_ckpt : NULL;
    rec->ckpt_request = job->ckpt_request;
    rec->ckpt_deadline_ms = job->ckpt_deadline_ms;
    rec->restarts = job->restarts;
    rec->restarts_in_row = job->restarts_in_row;
    rec->restore_sources = (const char *const *)job->prev_src;
    rec->n_restore_sources = 2 * job->n_prev_src;
    rec->restart_at_ms = job->restart_at_ms;
    rec->recovering = job->state == TIDE_JOB_PENDING && job->recovering;
    return rec;
}

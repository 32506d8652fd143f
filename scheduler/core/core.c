/* The core object: configuration, time, the timer heap and names. Invariant: now_mono never decreases,
 * and every job with a deadline is in the timer heap keyed by its earliest one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core_private.h"
#include "xmalloc.h"

void tide_core_config_default(tide_core_config_t *cfg)
{
    cfg->heartbeat_interval_ms = 500;
    cfg->suspect_after_missed = 2;
    cfg->dead_after_missed = 3;
    cfg->reconnect_deadline_ms = 30000;
    cfg->launch_timeout_ms = 30000;
    cfg->max_rollbacks = 3;
    cfg->stop_grace_ms = 10000;
    cfg->retention_ms = 7LL * 24 * 3600 * 1000;
    cfg->aging_ms = 30LL * 60 * 1000;
    cfg->preemption = true;
    cfg->preempt_grace_ms = 30000;
    cfg->n_pools = 0;
    cfg->ckpt_flush = false;
    cfg->ckpt_mfu_threshold = 0.30;
    cfg->ckpt_deadline_ms = 30LL * 60 * 1000;
    cfg->ckpt_gate_check_ms = 5000;
    cfg->ckpt_copy_timeout_ms = 30LL * 60 * 1000;
    cfg->ckpt_interval_ms = 10LL * 60 * 1000;
    cfg->reserve_gpus = -1;
    cfg->reserve_min_cluster = 16;
    cfg->failure_rate = 3.0 / (1000.0 * 730.0); /* the article: 3 a month per 1,000 GPUs */
    cfg->replacement_lead_h = 4.0;
    cfg->reserve_quantile = 0.99;
    cfg->max_restarts = 3;
    cfg->failure_stop_grace_ms = 1000;
    cfg->restart_backoff_ms = 1000;
    cfg->restart_backoff_max_ms = 300000;
    cfg->restart_window_ms = 600000;
    cfg->quarantine_failures = 3;
    cfg->quarantine_window_ms = 3600000;
    cfg->stealing = true;
    cfg->max_task_pools = 8;
    cfg->max_pool_tasks = 1u << 20;
    cfg->straggler_ratio = 1.25;
    cfg->straggler_window_ms = 30000;
    cfg->straggler_check_ms = 5000;
    cfg->steal_park_ms = 2000;
    cfg->auto_grow = true;
    cfg->resize_dwell_ms = 60000;
    cfg->resize_grace_ms = 30000;
    cfg->grow_min_gain = 0.125;
    cfg->replace_stragglers = false;
    cfg->burst_enter_ms = 2000;
    cfg->burst_exit_ms = 2000;
    cfg->burst_min_dwell_ms = 10000;
    cfg->burst_cost_factor = 2.0;
    cfg->burst_lend_cost_ms = 1000;
    cfg->burst_resize_cost_ms = 30000;
    cfg->hang_min_ms = 30000;
    cfg->hang_factor = 10;
    cfg->predict_failures = true;
    tide_risk_cfg_default(&cfg->risk);
}

tide_core_t *tide_core_new(const tide_core_config_t *cfg)
{
    tide_core_t *core = tide_xcalloc(1, sizeof(*core));

    if (cfg)
        core->cfg = *cfg;
    else
        tide_core_config_default(&core->cfg);
    core->next_seq = 1;
    tide_list_init(&core->jobs_by_seq);
    tide_list_init(&core->resizable);
    tide_list_init(&core->lending);
    for (int i = 0; i < TIDE_PRIO_COUNT; i++)
        tide_list_init(&core->queues[i]);
    tide_heap_init(&core->timers);
    for (int i = 0; i < TIDE_PRIO_COUNT; i++)
        tide_list_init(&core->running[i]);
    tide_list_init(&core->shape_list);
    tide_list_init(&core->alive);
    tide_list_init(&core->suspect);
    tide_list_init(&core->graveyard);
    tide__reserve_update(core);
    return core;
}

void tide_core_free(tide_core_t *core)
{
    tide_job_t *job, *jtmp;
    tide_worker_t *w, *wtmp;

    if (!core)
        return;
    tide_core_actions_clear(core);
    tide_heap_free(&core->timers);
    HASH_ITER(hh, core->jobs, job, jtmp) {
        HASH_DEL(core->jobs, job);
        tide__job_free(job);
    }
    HASH_ITER(hh, core->workers, w, wtmp) {
        HASH_DEL(core->workers, w);
        tide__worker_free(w);
    }
    tide__node_free_all(core);
    free(core->actions);
    free(core->strings);
    tide__keep_ids_free(core);
    free(core->stat_scratch);
    free(core);
}

const tide_core_config_t *tide_core_config(const tide_core_t *core)
{
    return &core->cfg;
}

void tide_core_set_time(tide_core_t *core, int64_t mono_ms, int64_t wall_ms)
{
    if (mono_ms > core->now_mono) {
        if (core->now_mono > 0)
            core->gpu_hours += (double)core->n_usable * (double)(mono_ms - core->now_mono) / 3.6e6;
        core->now_mono = mono_ms;
    }
    core->now_wall = wall_ms;
}

void tide_core_tick(tide_core_t *core)
{
    tide_heap_node_t *n;

    tide__liveness_tick(core);
    core->ticking = true;
    while ((n = tide_heap_peek(&core->timers)) && n->key <= core->now_mono) {
        tide_job_t *job = tide_container_of(n, tide_job_t, timer);
        tide_heap_remove(&core->timers, n);
        tide__job_on_timer(core, job);
    }
    core->ticking = false;
    tide__schedule(core);
}

int64_t tide_core_next_deadline(const tide_core_t *core)
{
    int64_t next = INT64_MAX;
    tide_heap_node_t *n = tide_heap_peek(&core->timers);
    int64_t hb = core->cfg.heartbeat_interval_ms;

    if (n)
        next = n->key;
    if (tide__queue_next_deadline(core) < next)
        next = tide__queue_next_deadline(core);
    if (!tide_list_empty(&core->alive)) {
        tide_worker_t *w = tide_list_entry(core->alive.next, tide_worker_t, live_node);
        int64_t t = w->last_seen_mono + hb * core->cfg.suspect_after_missed;
        if (t < next)
            next = t;
    }
    if (!tide_list_empty(&core->suspect)) {
        tide_worker_t *w = tide_list_entry(core->suspect.next, tide_worker_t, live_node);
        int64_t t = w->last_seen_mono + hb * core->cfg.dead_after_missed;
        if (t < next)
            next = t;
    }
    return next;
}

uint64_t tide_core_next_seq(const tide_core_t *core)
{
    return core->next_seq;
}

const char *tide_job_state_name(tide_job_state_t s)
{
    switch (s) {
    case TIDE_JOB_PENDING:
        return "PENDING";
    case TIDE_JOB_RUNNING:
        return "RUNNING";
    case TIDE_JOB_SUCCEEDED:
        return "SUCCEEDED";
    case TIDE_JOB_FAILED:
        return "FAILED";
    case TIDE_JOB_CANCELLED:
        return "CANCELLED";
    }
    return "UNKNOWN";
}

const char *tide_worker_state_name(tide_worker_state_t s)
{
    switch (s) {
    case TIDE_WORKER_READY:
        return "READY";
    case TIDE_WORKER_BUSY:
        return "BUSY";
    case TIDE_WORKER_SUSPECT:
        return "SUSPECT";
    case TIDE_WORKER_DEAD:
        return "DEAD";
    }
    return "UNKNOWN";
}

int tide_core_pool_add(tide_core_t *core, const char *name, int32_t dedicated, tide_error_t *err)
{
    size_t len = name ? strlen(name) : 0;

    if (len == 0 || len > TIDE_POOL_NAME_MAX) {
        tide_errprintf(err, "pool name must be 1..%d characters", TIDE_POOL_NAME_MAX);
        return -EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '_' || c == '.')) {
            tide_errprintf(err, "pool name \"%s\": only letters, digits, '-', '_' and '.'", name);
            return -EINVAL;
        }
    }
    if (dedicated < -1 || dedicated >= TIDE_PRIO_COUNT) {
        tide_errprintf(err, "pool %s: %d is not a priority class", name, (int)dedicated);
        return -EINVAL;
    }
    for (int32_t i = 0; i < core->cfg.n_pools; i++) {
        if (strcmp(core->cfg.pools[i].name, name) == 0) {
            core->cfg.pools[i].dedicated = dedicated;
            return 0;
        }
    }
    if (core->cfg.n_pools >= (int32_t)(sizeof(core->cfg.pools) / sizeof(core->cfg.pools[0]))) {
        tide_errprintf(err, "at most %zu pools may be named", sizeof(core->cfg.pools) / sizeof(core->cfg.pools[0]));
        return -EINVAL;
    }
    memcpy(core->cfg.pools[core->cfg.n_pools].name, name, len + 1);
    core->cfg.pools[core->cfg.n_pools].dedicated = dedicated;
    core->cfg.n_pools++;
    return 0;
}

const char *tide_topology_name(tide_topology_t t)
{
    switch (t) {
    case TIDE_TOPO_NODE:
        return "node";
    case TIDE_TOPO_RACK:
        return "rack";
    case TIDE_TOPO_SWITCH:
        return "switch";
    default:
        return "any";
    }
}

const char *tide_prio_name(tide_prio_t p)
{
    static const char *names[TIDE_PRIO_COUNT] = {"LOW", "NORMAL", "HIGH", "CRITICAL"};
    return (unsigned)p < TIDE_PRIO_COUNT ? names[p] : "NORMAL";
}

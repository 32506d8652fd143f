/* Core <-> tide.v1 message conversions, see convert.h. The enum values of JobState, WorkerState and
 * RankPhase equal the core's; Priority is shifted by one (UNSPECIFIED means NORMAL). */
#include "convert.h"

#include "mfu.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static char *s(const char *p)
{
    return (char *)(p ? p : "");
}

int tide_conv_prio_from_pb(int pb, tide_prio_t *out)
{
    if (pb == TIDE__V1__PRIORITY__PRIORITY_UNSPECIFIED) {
        *out = TIDE_PRIO_NORMAL;
        return 0;
    }
    if (pb < TIDE__V1__PRIORITY__PRIORITY_LOW || pb > TIDE__V1__PRIORITY__PRIORITY_CRITICAL)
        return -EINVAL;
    *out = (tide_prio_t)(pb - 1);
    return 0;
}

static void conv_spec(const tide_job_spec_t *spec, Tide__V1__JobSpec *out, tide_arena_t *a)
{
    tide__v1__job_spec__init(out);
    out->name = s(spec->name);
    out->n_command = spec->argc;
    out->command = spec->argv;
    out->min_workers = spec->min_workers;
    out->max_workers = spec->max_workers;
    out->priority = (Tide__V1__Priority)(spec->priority + 1);
    out->n_env = spec->n_env;
    out->env = tide_arena_calloc(a, spec->n_env + 1, sizeof(*out->env));
    for (size_t i = 0; i < spec->n_env; i++) {
        Tide__V1__JobSpec__EnvEntry *e = tide_arena_alloc(a, sizeof(*e));
        tide__v1__job_spec__env_entry__init(e);
        e->key = spec->env[i].key;
        e->value = spec->env[i].value;
        out->env[i] = e;
    }
    out->workdir = s(spec->workdir);
    out->time_limit_seconds = spec->time_limit_s;
    out->launcher = (Tide__V1__Launcher)spec->launcher;
    out->pool = s(spec->pool);
    out->memory_per_rank_bytes = spec->memory_per_rank;
    out->topology = (Tide__V1__Topology)spec->topology;
    out->device = s(spec->device);
    out->checkpoint_mfu_threshold = spec->ckpt_mfu_threshold;
    out->checkpoint_deadline_seconds = spec->ckpt_deadline_s;
    out->checkpoint_interval_seconds = spec->ckpt_interval_s;
    out->adaptive_target = spec->adaptive_target;
    out->no_stealing = spec->no_stealing;
    out->burst_percent = spec->burst_percent;
    out->n_burst_command = spec->n_burst_argv;
    out->burst_command = spec->burst_argv;
    out->restart_policy = (Tide__V1__RestartPolicy)spec->restart_policy;
    out->max_restarts = spec->max_restarts;
    out->restart_backoff_ms = spec->restart_backoff_ms;
}

static Tide__V1__Checkpoint *conv_ckpt(const tide_checkpoint_t *c, tide_arena_t *a)
{
    Tide__V1__Checkpoint *out = tide_arena_alloc(a, sizeof(*out));

    tide__v1__checkpoint__init(out);
    out->step = c->step;
    out->generation = c->generation;
    out->path = s(c->path);
    out->bytes = c->bytes;
    out->sha256 = s(c->sha256);
    out->time_ms = c->time_ms;
    out->ranks = c->ranks;
    out->request_id = c->request_id;
    return out;
}

/* A resize (in progress, pending or the newest completed) -> tide.v1.Resize; the detail is borrowed. */
static Tide__V1__Resize *conv_resize(const tide_resize_t *r, tide_arena_t *a)
{
    Tide__V1__Resize *out = tide_arena_alloc(a, sizeof(*out));

    tide__v1__resize__init(out);
    out->state = (Tide__V1__ResizeState)r->state;
    out->reason = (Tide__V1__ResizeReason)r->reason;
    out->from_workers = r->from_workers;
    out->to_workers = r->to_workers;
    out->workers = r->workers;
    out->from_generation = r->from_generation;
    out->to_generation = r->to_generation;
    out->detail = s(r->detail);
    out->decided_ms = r->decided_ms;
    out->done_ms = r->done_ms;
    out->checkpoint_seconds = r->checkpoint_s;
    out->stop_seconds = r->stop_s;
    out->start_seconds = r->start_s;
    out->total_seconds = r->total_s;
    return out;
}

static Tide__V1__TrainerProgress *conv_progress(const tide_trainer_progress_t *p, tide_arena_t *a)
{
    Tide__V1__TrainerProgress *out = tide_arena_alloc(a, sizeof(*out));

    tide__v1__trainer_progress__init(out);
    out->sdk = p->sdk;
    out->step = p->step;
    out->phase = (Tide__V1__TrainerPhase)p->phase;
    out->step_flops = p->step_flops;
    out->samples = p->samples;
    out->tokens = p->tokens;
    out->step_seconds = p->step_seconds;
    out->steps_reported = p->steps_reported;
    out->rejected_reports = p->rejected_reports;
    out->last_report_ms = p->last_report_ms;
    out->flops_per_s = p->flops_per_s;
    out->flops_per_s_5m = p->flops_per_s_5m;
    out->flops_per_s_life = p->flops_per_s_life;
    out->peak_flops = p->peak_flops;
    out->mfu = p->mfu;
    out->hw_flops_per_s = p->hw_flops_per_s;
    out->hfu = p->hfu;
    out->tasks_run = p->tasks_run;
    out->tasks_stolen = p->tasks_stolen;
    out->tasks_given = p->tasks_given;
    out->task_seconds = p->task_seconds;
    out->busy_fraction = p->busy_fraction;
    out->steal_wait_seconds = p->steal_wait_seconds;
    out->high_load = p->high_load;
    out->load_reported = p->load_reported;
    return out;
}

/* A fraction from a worker: clamped to [0, 1]; not a number: unknown (its bit cleared). */
static double fraction(double v, uint32_t bit, uint32_t *known)
{
    if (!isfinite(v) || v < 0) {
        *known &= ~bit;
        return 0;
    }
    return v > 1 ? 1 : v;
}

static double finite_or_unknown(double v, uint32_t bit, uint32_t *known)
{
    if (isfinite(v))
        return v;
    *known &= ~bit;
    return 0;
}

void tide_conv_telemetry_from_pb(const Tide__V1__Telemetry *pt, tide_telemetry_t *t)
{
    /* Bits as TIDE_GPU_HAS_* (common/gpu/gpu.h); a worker before `known` existed sent the first five
     * fields only. */
    uint32_t k = pt->known ? pt->known : 0xfu;

    memset(t, 0, sizeof(*t));
    t->gpu_util = fraction(pt->gpu_util, 1u << 0, &k);
    t->mem_used_bytes = pt->mem_used_bytes;
    t->mem_total_bytes = pt->mem_total_bytes;
    t->temperature_c = finite_or_unknown(pt->temperature_c, 1u << 2, &k);
    t->power_w = finite_or_unknown(pt->power_w, 1u << 3, &k);
    t->mem_bw_util = fraction(pt->mem_bw_util, 1u << 4, &k);
    t->sm_clock_mhz = pt->sm_clock_mhz;
    t->mem_clock_mhz = pt->mem_clock_mhz;
    t->throttle_reasons = pt->throttle_reasons;
    t->ecc_corrected = pt->ecc_corrected;
    t->ecc_uncorrected = pt->ecc_uncorrected;
    t->xid_count = pt->xid_count;
    t->last_xid = pt->last_xid;
    t->net_util = fraction(pt->net_util, 1u << 9, &k);
    t->storage_util = fraction(pt->storage_util, 1u << 10, &k);
    t->known = k;
}

/* A rate or size from a worker: not a number or negative reads as 0 (unknown). */
static double nonneg(double v)
{
    return isfinite(v) && v > 0 ? v : 0;
}

void tide_conv_progress_from_pb(const Tide__V1__TrainerProgress *pb, tide_trainer_progress_t *out)
{
    memset(out, 0, sizeof(*out));
    out->step = -1;
    if (!pb)
        return;
    out->sdk = pb->sdk;
    out->step = pb->step;
    out->phase = (int32_t)pb->phase;
    out->step_flops = nonneg(pb->step_flops);
    out->samples = pb->samples;
    out->tokens = pb->tokens;
    out->step_seconds = nonneg(pb->step_seconds);
    out->steps_reported = pb->steps_reported;
    out->rejected_reports = pb->rejected_reports;
    out->last_report_ms = pb->last_report_ms;
    out->flops_per_s = nonneg(pb->flops_per_s);
    out->flops_per_s_5m = nonneg(pb->flops_per_s_5m);
    out->flops_per_s_life = nonneg(pb->flops_per_s_life);
    out->peak_flops = nonneg(pb->peak_flops);
    out->mfu = nonneg(pb->mfu);
    out->hw_flops_per_s = nonneg(pb->hw_flops_per_s);
    out->hfu = nonneg(pb->hfu);
    out->tasks_run = pb->tasks_run;
    out->tasks_stolen = pb->tasks_stolen;
    out->tasks_given = pb->tasks_given;
    out->task_seconds = nonneg(pb->task_seconds);
    out->busy_fraction = nonneg(pb->busy_fraction) > 1 ? 1 : nonneg(pb->busy_fraction);
    out->steal_wait_seconds = nonneg(pb->steal_wait_seconds);
    out->high_load = pb->high_load;
    out->load_reported = pb->load_reported;
}

void tide_conv_job(const tide_core_t *core, const tide_job_t *job, Tide__V1__Job *out, tide_arena_t *a)
{
    Tide__V1__JobSpec *spec = tide_arena_alloc(a, sizeof(*spec));

    tide__v1__job__init(out);
    conv_spec(&job->spec, spec, a);
    out->id = job->id;
    out->spec = spec;
    out->state = (Tide__V1__JobState)job->state;
    out->generation = job->generation;
    out->n_worker_ids = (size_t)job->n_ranks;
    out->worker_ids = tide_arena_calloc(a, (size_t)job->n_ranks + 1, sizeof(char *));
    out->n_ranks = (size_t)job->n_ranks;
    out->ranks = tide_arena_calloc(a, (size_t)job->n_ranks + 1, sizeof(*out->ranks));
    for (int32_t r = 0; r < job->n_ranks; r++) {
        const tide_job_rank_t *slot = &job->ranks[r];
        Tide__V1__JobRank *jr = tide_arena_alloc(a, sizeof(*jr));
        tide__v1__job_rank__init(jr);
        jr->rank = r;
        jr->worker_id = slot->worker_id;
        jr->phase = (Tide__V1__RankPhase)slot->state;
        jr->exit_code = slot->exit_code;
        jr->pid = slot->pid;
        jr->local_rank = slot->local_rank;
        jr->group_rank = slot->group_rank;
        jr->mirror_worker_id = s(slot->mirror_id);
        if (core && slot->progress.sdk) /* progress lives in memory only: never in a record */
            jr->progress = conv_progress(&slot->progress, a);
        if (core) {
            jr->straggler = (Tide__V1__StragglerState)slot->straggler;
            jr->slowness = slot->slowness;
            jr->slow_since_ms = slot->slow_since_ms;
        }
        out->ranks[r] = jr;
        out->worker_ids[r] = slot->worker_id;
    }
    if (core) {
        char *buf = tide_arena_alloc(a, 256);
        out->message = (char *)tide_core_job_reason(core, job, buf, 256);
    } else {
        out->message = s(job->message);
    }
    out->submit_time_ms = job->submit_ms;
    out->start_time_ms = job->start_ms;
    out->end_time_ms = job->end_ms;
    out->gpu_seconds = job->gpu_seconds;
    out->exit_code = job->exit_code;
    out->failed_rank = job->failed_rank;
    out->generation_start_time_ms = job->gen_start_ms;
    out->ranks_running = job->ranks_running;
    out->master_addr = s(job->master_addr);
    out->master_port = job->master_port;
    if (job->last_ckpt.step >= 0)
        out->last_checkpoint = conv_ckpt(&job->last_ckpt, a);
    out->checkpoint_request = job->ckpt_request;
    out->checkpoint_deadline_ms = job->ckpt_deadline_ms;
    /* Policy state (docs/policies.md). The durable checkpoint and the counters survive a restart
     * (tide_conv_record_from_pb); the flush state is the core's to rebuild. */
    out->effective_priority =
        (Tide__V1__Priority)((job->state == TIDE_JOB_PENDING ? job->eff_priority : job->run_priority) + 1);
    if (job->durable_ckpt.step >= 0)
        out->durable_checkpoint = conv_ckpt(&job->durable_ckpt, a);
    out->flush_state = (Tide__V1__FlushState)job->flush_state;
    out->flush_step = job->flush_step;
    out->flush_since_ms = job->flush_since_ms;
    out->flushed_bytes = job->flushed_bytes;
    out->flushes = job->flushes;
    out->preemptions = job->preemptions;
    out->preempted_by = s(job->preempted_by);
    if (core) { /* stealing counters live in memory only */
        out->tasks_stolen = job->tasks_stolen;
        out->steal_requests = job->steal_requests;
        out->tasks_committed = job->tasks_committed;
        out->stragglers = job->stragglers;
        out->high_load = job->high_load; /* burst: in memory only */
        out->lent_workers = job->lent_workers;
        out->bursts = job->bursts;
    }
    /* Elastic scaling (docs/elastic.md). The requested size and the count survive a restart
     * (tide_conv_record_from_pb); a record's resize and last resize are for readers only. */
    out->target_workers = job->target_workers;
    out->resizes = job->resizes;
    if (job->resize.state != TIDE_RESIZE_NONE)
        out->resize = conv_resize(&job->resize, a);
    if (job->last_resize.state != TIDE_RESIZE_NONE)
        out->last_resize = conv_resize(&job->last_resize, a);
    {
        /* Workers still stopping a rank of an earlier generation (never two generations at once). */
        const tide_list_t *pos;
        size_t n = 0;
        tide_list_for_each(pos, &job->bound) n++;
        out->stopping_ranks = tide_arena_calloc(a, n + 1, sizeof(*out->stopping_ranks));
        tide_list_for_each(pos, &job->bound) {
            const tide_worker_t *w = tide_list_entry(pos, tide_worker_t, bound_node);
            Tide__V1__StoppingRank *sr;
            if (job->state == TIDE_JOB_RUNNING && w->generation == job->generation && w->rank < job->n_ranks)
                continue; /* its ranks are the record's; its lent slots' workers are listed here */
            sr = tide_arena_alloc(a, sizeof(*sr));
            tide__v1__stopping_rank__init(sr);
            sr->worker_id = w->id;
            sr->generation = w->generation;
            sr->rank = w->rank;
            out->stopping_ranks[out->n_stopping_ranks++] = sr;
        }
    }
    /* Fault tolerance (docs/fault-tolerance.md): the counters and the history survive a restart. */
    out->restarts = job->restarts;
    out->restarts_in_row = job->restarts_in_row;
    out->restart_at_ms = job->restart_at_ms;
    out->recovering = job->state == TIDE_JOB_PENDING && job->recovering;
    out->n_restore_sources = 2 * (size_t)job->n_prev_src;
    out->restore_sources = tide_arena_calloc(a, out->n_restore_sources + 1, sizeof(char *));
    for (size_t i = 0; i < out->n_restore_sources; i++)
        out->restore_sources[i] = s(job->prev_src[i]);
    out->n_ckpt_holders = (size_t)job->n_ckpt_holders;
    out->ckpt_holders = job->ckpt_holders;
    out->owner = s(job->spec.owner);
    out->run_as = s(job->spec.run_as);
    out->n_generations = (size_t)job->n_history;
    out->generations = tide_arena_calloc(a, (size_t)job->n_history + 1, sizeof(*out->generations));
    for (int32_t i = 0; i < job->n_history; i++) {
        const tide_generation_rec_t *g = &job->history[i];
        Tide__V1__Generation *pg = tide_arena_alloc(a, sizeof(*pg));
        tide__v1__generation__init(pg);
        pg->number = g->number;
        pg->workers = g->workers;
        pg->cause = s(g->cause);
        pg->detail = s(g->detail);
        pg->start_time_ms = g->start_ms;
        pg->running_time_ms = g->running_ms;
        pg->end_time_ms = g->end_ms;
        pg->end = s(g->end);
        pg->resumed_step = g->resumed_step;
        pg->failure_time_ms = g->failure_ms;
        pg->steps_lost = g->steps_lost;
        pg->seconds_lost = g->seconds_lost;
        out->generations[i] = pg;
    }
    if (core) { /* live figures: never in a record */
        double achieved, peak;
        tide_core_job_flops(job, &achieved, &peak);
        out->flops_per_s = achieved;
        out->mfu = tide_mfu(achieved, peak);
        if (job->state == TIDE_JOB_RUNNING)
            out->utilization = tide_conv_utilization(job, a);
        /* O(queued jobs): replies only, never the record written on every change. */
        out->queue_position = tide_core_job_queue_position(core, job);
        tide_core_job_target(core, job, &out->mfu_target_low, &out->mfu_target_high);
    }
}

Tide__V1__Utilization *tide_conv_utilization_of(const tide_utilization_t *u, tide_arena_t *a)
{
    Tide__V1__Utilization *out = tide_arena_alloc(a, sizeof(*out));

    tide__v1__utilization__init(out);
    out->compute = u->u[TIDE_DIM_COMPUTE];
    out->memory_bandwidth = u->u[TIDE_DIM_MEMORY_BW];
    out->network = u->u[TIDE_DIM_NETWORK];
    out->storage_io = u->u[TIDE_DIM_STORAGE];
    out->known = u->known;
    out->bottleneck = (char *)tide_dim_name(tide_bottleneck(u));
    return out;
}

Tide__V1__Utilization *tide_conv_utilization(const tide_job_t *job, tide_arena_t *a)
{
    tide_utilization_t u;

    tide_core_job_utilization(job, &u);
    return tide_conv_utilization_of(&u, a);
}

void tide_conv_worker(const tide_core_t *core, const tide_worker_t *w, Tide__V1__Worker *out, tide_arena_t *a)
{
    Tide__V1__Telemetry *t = tide_arena_alloc(a, sizeof(*t));

    tide__v1__worker__init(out);
    tide__v1__telemetry__init(t);
    out->id = w->id;
    out->node = s(w->node_name);
    out->gpu_index = w->gpu_index;
    out->device = s(w->device);
    out->peak_flops = w->peak_flops;
    out->state = (Tide__V1__WorkerState)w->state;
    out->job_id = w->job ? w->job->id : "";
    out->rank = w->job ? w->rank : -1;
    out->cordoned = w->cordoned;
    out->cordon_reason = s(w->cordon_reason);
    out->failure_risk = tide_core_worker_risk(w);
    out->failures = tide_core_worker_failures(core, w);
    out->n_labels = w->n_labels;
    out->labels = tide_arena_calloc(a, w->n_labels + 1, sizeof(*out->labels));
    for (size_t i = 0; i < w->n_labels; i++) {
        Tide__V1__Worker__LabelsEntry *e = tide_arena_alloc(a, sizeof(*e));
        tide__v1__worker__labels_entry__init(e);
        e->key = w->labels[i].key;
        e->value = w->labels[i].value;
        out->labels[i] = e;
    }
    out->memory_bytes = w->memory_bytes;
    out->address = s(w->address);
    t->gpu_util = w->telemetry.gpu_util;
    t->mem_used_bytes = w->telemetry.mem_used_bytes;
    t->mem_total_bytes = w->telemetry.mem_total_bytes;
    t->temperature_c = w->telemetry.temperature_c;
    t->power_w = w->telemetry.power_w;
    t->mem_bw_util = w->telemetry.mem_bw_util;
    t->sm_clock_mhz = w->telemetry.sm_clock_mhz;
    t->mem_clock_mhz = w->telemetry.mem_clock_mhz;
    t->throttle_reasons = w->telemetry.throttle_reasons;
    t->ecc_corrected = w->telemetry.ecc_corrected;
    t->ecc_uncorrected = w->telemetry.ecc_uncorrected;
    t->xid_count = w->telemetry.xid_count;
    t->last_xid = w->telemetry.last_xid;
    t->net_util = w->telemetry.net_util;
    t->storage_util = w->telemetry.storage_util;
    t->known = w->telemetry.known;
    out->telemetry = t;
    out->last_heartbeat_ms = w->last_heartbeat_ms;
    out->version = s(w->version);
}

int tide_conv_spec_from_pb(const Tide__V1__JobSpec *pb, tide_job_spec_t *spec, tide_arena_t *a,
                           tide_error_t *err)
{
    memset(spec, 0, sizeof(*spec));
    if (!pb) {
        tide_errprintf(err, "spec is required");
        return -EINVAL;
    }
    if (tide_conv_prio_from_pb(pb->priority, &spec->priority) < 0) {
        tide_errprintf(err, "spec.priority %d is not a Priority", (int)pb->priority);
        return -EINVAL;
    }
    spec->name = pb->name;
    spec->argv = pb->command;
    spec->argc = pb->n_command;
    spec->min_workers = pb->min_workers;
    spec->max_workers = pb->max_workers;
    spec->n_env = pb->n_env;
    spec->env = tide_arena_calloc(a, pb->n_env + 1, sizeof(*spec->env));
    for (size_t i = 0; i < pb->n_env; i++) {
        spec->env[i].key = pb->env[i]->key;
        spec->env[i].value = pb->env[i]->value;
    }
    spec->workdir = pb->workdir;
    spec->time_limit_s = pb->time_limit_seconds;
    spec->launcher = (int32_t)pb->launcher;
    /* Enum values protobuf-c let through unchecked (proto3 enums are open) and numbers out of range
     * are the core's to refuse (tide_job_spec_validate names the field). */
    spec->pool = pb->pool;
    spec->memory_per_rank = pb->memory_per_rank_bytes;
    spec->topology = (tide_topology_t)pb->topology;
    spec->device = pb->device;
    spec->ckpt_mfu_threshold = pb->checkpoint_mfu_threshold;
    spec->ckpt_deadline_s = pb->checkpoint_deadline_seconds;
    spec->ckpt_interval_s = pb->checkpoint_interval_seconds;
    spec->adaptive_target = pb->adaptive_target;
    spec->no_stealing = pb->no_stealing;
    spec->burst_percent = pb->burst_percent;
    spec->burst_argv = pb->burst_command;
    spec->n_burst_argv = pb->n_burst_command;
    spec->restart_policy = (int32_t)pb->restart_policy;
    spec->max_restarts = pb->max_restarts;
    spec->restart_backoff_ms = pb->restart_backoff_ms;
    return 0;
}

static tide_checkpoint_t *ckpt_from_pb(const Tide__V1__Checkpoint *pb, tide_arena_t *a)
{
    tide_checkpoint_t *c = tide_arena_calloc(a, 1, sizeof(*c));

    c->step = pb->step;
    c->generation = pb->generation;
    c->path = pb->path;
    c->bytes = pb->bytes;
    c->sha256 = pb->sha256;
    c->time_ms = pb->time_ms;
    c->ranks = pb->ranks;
    c->request_id = pb->request_id;
    return c;
}

int tide_conv_record_from_pb(const Tide__V1__Job *pb, tide_job_record_t *rec, tide_job_spec_t *spec,
                             tide_arena_t *a, tide_error_t *err)
{
    int rc = tide_conv_spec_from_pb(pb->spec, spec, a, err);
    size_t n = pb->n_ranks;
    const char **ids = tide_arena_calloc(a, n + 1, sizeof(*ids));
    const char **mirrors = tide_arena_calloc(a, n + 1, sizeof(*mirrors));
    tide_rank_state_t *st = tide_arena_calloc(a, n + 1, sizeof(*st));
    int32_t *codes = tide_arena_calloc(a, n + 1, sizeof(*codes));
    int32_t *local = tide_arena_calloc(a, n + 1, sizeof(*local));
    int32_t *group = tide_arena_calloc(a, n + 1, sizeof(*group));

    if (rc < 0)
        return rc;
    for (size_t r = 0; r < n; r++) {
        const Tide__V1__JobRank *jr = pb->ranks[r];
        if (jr->phase < TIDE__V1__RANK_PHASE__RANK_PHASE_ASSIGNED ||
            jr->phase > TIDE__V1__RANK_PHASE__RANK_PHASE_LOST) {
            tide_errprintf(err, "job %s rank %zu has phase %d", pb->id, r, (int)jr->phase);
            return -EINVAL;
        }
        ids[r] = jr->worker_id;
        mirrors[r] = jr->mirror_worker_id;
        st[r] = (tide_rank_state_t)jr->phase;
        codes[r] = jr->exit_code;
        local[r] = jr->local_rank;
        group[r] = jr->group_rank;
    }
    memset(rec, 0, sizeof(*rec));
    rec->id = pb->id;
    rec->spec = spec;
    rec->state = (tide_job_state_t)pb->state;
    rec->generation = pb->generation;
    rec->worker_ids = ids;
    rec->n_workers = (int32_t)n;
    rec->rank_states = st;
    rec->rank_exit_codes = codes;
    rec->rank_local_ranks = local;
    rec->rank_group_ranks = group;
    rec->rank_mirror_ids = mirrors;
    rec->master_addr = pb->master_addr;
    rec->master_port = pb->master_port;
    rec->message = pb->message;
    rec->submit_ms = pb->submit_time_ms;
    rec->start_ms = pb->start_time_ms;
    rec->end_ms = pb->end_time_ms;
    rec->gen_start_ms = pb->generation_start_time_ms;
    rec->gpu_seconds = pb->gpu_seconds;
    rec->exit_code = pb->exit_code;
    rec->failed_rank = pb->failed_rank;
    if (pb->last_checkpoint)
        rec->last_ckpt = ckpt_from_pb(pb->last_checkpoint, a);
    rec->ckpt_request = pb->checkpoint_request;
    rec->ckpt_deadline_ms = pb->checkpoint_deadline_ms;
    if (pb->durable_checkpoint)
        rec->durable_ckpt = ckpt_from_pb(pb->durable_checkpoint, a);
    rec->flushed_bytes = pb->flushed_bytes;
    rec->flushes = pb->flushes;
    rec->preemptions = pb->preemptions;
    rec->target_workers = pb->target_workers;
    rec->resizes = pb->resizes;
    rec->run_class = (int32_t)pb->effective_priority; /* the class it runs with or is queued in */
    rec->restarts = pb->restarts;
    rec->restarts_in_row = pb->restarts_in_row;
    rec->restart_at_ms = pb->restart_at_ms;
    rec->recovering = pb->recovering;
    rec->ckpt_holders = (const char *const *)pb->ckpt_holders;
    rec->n_ckpt_holders = (int32_t)pb->n_ckpt_holders;
    spec->owner = pb->owner; /* the record's, never a request's (tide_conv_spec_from_pb leaves them NULL) */
    spec->run_as = pb->run_as;
    if (pb->n_restore_sources > 0 && pb->n_restore_sources % 2 == 0) {
        rec->restore_sources = (const char *const *)pb->restore_sources;
        rec->n_restore_sources = (int32_t)pb->n_restore_sources;
    }
    if (pb->n_generations > 0) {
        size_t k = pb->n_generations;
        tide_generation_rec_t *gs = tide_arena_calloc(a, k + 1, sizeof(*gs));
        for (size_t i = 0; i < k; i++) {
            const Tide__V1__Generation *pg = pb->generations[i];
            gs[i].number = pg->number;
            gs[i].workers = pg->workers;
            gs[i].cause = pg->cause;
            gs[i].detail = pg->detail;
            gs[i].start_ms = pg->start_time_ms;
            gs[i].running_ms = pg->running_time_ms;
            gs[i].end_ms = pg->end_time_ms;
            gs[i].end = pg->end;
            gs[i].resumed_step = pg->resumed_step;
            gs[i].failure_ms = pg->failure_time_ms;
            gs[i].steps_lost = pg->steps_lost;
            gs[i].seconds_lost = pg->seconds_lost;
        }
        rec->generations = gs;
        rec->n_generations = (int32_t)k;
    }
    if (pb->n_stopping_ranks > 0) {
        size_t k = pb->n_stopping_ranks;
        const char **sw = tide_arena_calloc(a, k + 1, sizeof(*sw));
        int32_t *sg = tide_arena_calloc(a, k + 1, sizeof(*sg)), *sr = tide_arena_calloc(a, k + 1, sizeof(*sr));
        for (size_t i = 0; i < k; i++) {
            sw[i] = pb->stopping_ranks[i]->worker_id;
            sg[i] = pb->stopping_ranks[i]->generation;
            sr[i] = pb->stopping_ranks[i]->rank;
        }
        rec->stopping_workers = sw;
        rec->stopping_generations = sg;
        rec->stopping_ranks = sr;
        rec->n_stopping = (int32_t)k;
    }
    return 0;
}

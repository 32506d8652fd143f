/* scheduler/daemon/convert.c for the policy fields: a JobSpec's pool, memory, topology, device and
 * checkpoint settings reach the core and come back; a client's Job carries the live policy state
 * (queue position, effective class, MFU target band) while the stored record does not; the durable
 * checkpoint, flushed bytes, flushes and preemptions survive a restart through the record; so do the
 * requested size and the count of resizes, and a client's Job carries the resizes (docs/elastic.md).
 * No loop. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "convert.h"
#include "xmalloc.h"

static tide_job_t *submit(tide_core_t *core, const Tide__V1__JobSpec *pb, tide_arena_t *a)
{
    tide_job_spec_t spec;
    tide_job_t *job = NULL;
    tide_error_t err;

    assert_int_equal(tide_conv_spec_from_pb(pb, &spec, a, &err), 0);
    if (tide_core_job_submit(core, &spec, &job, &err) != 0)
        print_error("submit: %s\n", err.text);
    assert_non_null(job);
    tide_core_actions_clear(core);
    return job;
}

static Tide__V1__JobSpec policy_spec(char **cmd)
{
    Tide__V1__JobSpec pb = TIDE__V1__JOB_SPEC__INIT;

    pb.name = "big";
    pb.n_command = 1;
    pb.command = cmd;
    pb.min_workers = 8;
    pb.priority = TIDE__V1__PRIORITY__PRIORITY_HIGH;
    pb.pool = "train";
    pb.memory_per_rank_bytes = 80ULL << 30;
    pb.topology = TIDE__V1__TOPOLOGY__TOPOLOGY_RACK;
    pb.device = "H100";
    pb.checkpoint_mfu_threshold = 0.2;
    pb.checkpoint_deadline_seconds = 600;
    pb.adaptive_target = true;
    return pb;
}

static void test_spec_round_trip(void **state)
{
    tide_core_config_t cfg;
    tide_core_t *core;
    tide_arena_t a = {0};
    char *cmd[] = {"train"};
    Tide__V1__JobSpec pb = policy_spec(cmd);
    Tide__V1__JobSpec lowpb = policy_spec(cmd);
    Tide__V1__Job out;
    tide_job_t *job, *low;
    (void)state;

    tide_core_config_default(&cfg);
    core = tide_core_new(&cfg);
    assert_int_equal(tide_core_pool_add(core, "train", -1, NULL), 0);
    tide_core_set_time(core, 1000, 1714564800000LL);
    job = submit(core, &pb, &a);
    assert_string_equal(job->spec.pool, "train");
    assert_int_equal(job->spec.memory_per_rank, 80ULL << 30);
    assert_int_equal(job->spec.topology, TIDE_TOPO_RACK);
    assert_string_equal(job->spec.device, "H100");
    assert_float_equal(job->spec.ckpt_mfu_threshold, 0.2, 0);
    assert_int_equal(job->spec.ckpt_deadline_s, 600);
    assert_true(job->spec.adaptive_target);
    lowpb.priority = TIDE__V1__PRIORITY__PRIORITY_LOW;
    low = submit(core, &lowpb, &a);

    /* A client's view: its place in the queue, its class, its target band. */
    tide_conv_job(core, job, &out, &a);
    assert_string_equal(out.spec->pool, "train");
    assert_int_equal(out.spec->memory_per_rank_bytes, 80ULL << 30);
    assert_int_equal(out.spec->topology, TIDE__V1__TOPOLOGY__TOPOLOGY_RACK);
    assert_string_equal(out.spec->device, "H100");
    assert_float_equal(out.spec->checkpoint_mfu_threshold, 0.2, 0);
    assert_int_equal(out.spec->checkpoint_deadline_seconds, 600);
    assert_true(out.spec->adaptive_target);
    assert_int_equal(out.queue_position, 1);
    assert_int_equal(out.effective_priority, TIDE__V1__PRIORITY__PRIORITY_HIGH);
    assert_true(out.mfu_target_low > 0 && out.mfu_target_low < out.mfu_target_high);
    assert_int_equal(out.flush_state, TIDE__V1__FLUSH_STATE__FLUSH_STATE_NONE);
    assert_int_equal(out.flush_step, -1);
    assert_null(out.durable_checkpoint);
    assert_string_equal(out.preempted_by, "");
    tide_conv_job(core, low, &out, &a);
    assert_int_equal(out.queue_position, 2); /* HIGH before LOW */
    assert_int_equal(out.effective_priority, TIDE__V1__PRIORITY__PRIORITY_LOW);

    /* The record has no live figures. */
    tide_conv_job(NULL, job, &out, &a);
    assert_int_equal(out.queue_position, 0);
    assert_float_equal(out.mfu_target_high, 0, 0);
    tide_arena_free(&a);
    tide_core_free(core);
}

/* A bad enum value or threshold is the core's to refuse, naming the field, before anything changes. */
static void test_spec_bad_values(void **state)
{
    tide_core_t *core = tide_core_new(NULL);
    tide_arena_t a = {0};
    char *cmd[] = {"train"};
    Tide__V1__JobSpec pb = policy_spec(cmd);
    tide_job_spec_t spec;
    tide_job_t *job = NULL;
    tide_error_t err;
    int counts[6];
    (void)state;

    pb.pool = "";
    pb.topology = (Tide__V1__Topology)7;
    assert_int_equal(tide_conv_spec_from_pb(&pb, &spec, &a, &err), 0);
    assert_int_equal(tide_core_job_submit(core, &spec, &job, &err), -EINVAL);
    assert_non_null(strstr(err.text, "topology 7 is not a Topology"));
    pb.topology = TIDE__V1__TOPOLOGY__TOPOLOGY_ANY;
    pb.checkpoint_mfu_threshold = 1.5;
    assert_int_equal(tide_conv_spec_from_pb(&pb, &spec, &a, &err), 0);
    assert_int_equal(tide_core_job_submit(core, &spec, &job, &err), -EINVAL);
    assert_non_null(strstr(err.text, "checkpoint_mfu_threshold must be between 0 and 1"));
    pb.checkpoint_mfu_threshold = 0;
    pb.pool = "nowhere";
    assert_int_equal(tide_conv_spec_from_pb(&pb, &spec, &a, &err), 0);
    assert_int_equal(tide_core_job_submit(core, &spec, &job, &err), -EINVAL);
    assert_non_null(strstr(err.text, "pool \"nowhere\" is unknown"));
    tide_core_job_counts(core, counts);
    assert_int_equal(counts[TIDE_JOB_PENDING], 0);
    assert_null(job);
    tide_arena_free(&a);
    tide_core_free(core);
}

/* What a restart must keep: the durable checkpoint, the bytes and copies, the preemptions. */
static void test_record_round_trip(void **state)
{
    tide_core_t *core = tide_core_new(NULL), *again = tide_core_new(NULL);
    tide_arena_t a = {0};
    char *cmd[] = {"train"};
    Tide__V1__JobSpec pb = policy_spec(cmd);
    Tide__V1__Job out, *back;
    Tide__V1__Job check;
    tide_job_record_t rec;
    tide_job_spec_t spec;
    tide_error_t err;
    tide_job_t *job, *restored;
    uint8_t *bytes;
    size_t len;
    (void)state;

    pb.pool = "";
    tide_core_set_time(core, 1000, 1714564800000LL);
    job = submit(core, &pb, &a);
    /* As the core leaves a job after two durable copies and a preemption (fields are the core's; set
     * here directly to test the record path alone). */
    job->durable_ckpt.step = 400;
    job->durable_ckpt.generation = 2;
    job->durable_ckpt.path = tide_xstrdup("/dur/1/step-400/ckpt.bin");
    job->durable_ckpt.bytes = 4096;
    job->durable_ckpt.sha256 = tide_xstrdup("ab");
    job->durable_ckpt.time_ms = 1714564700000LL;
    job->durable_ckpt.ranks = 8;
    job->flushed_bytes = 8192;
    job->flushes = 2;
    job->preemptions = 1;

    tide_conv_job(NULL, job, &out, &a);
    len = tide__v1__job__get_packed_size(&out);
    bytes = malloc(len);
    tide__v1__job__pack(&out, bytes);
    back = tide__v1__job__unpack(NULL, len, bytes);
    assert_non_null(back);
    assert_int_equal(tide_conv_record_from_pb(back, &rec, &spec, &a, &err), 0);
    assert_non_null(rec.durable_ckpt);
    assert_int_equal(rec.flushed_bytes, 8192);
    assert_int_equal(rec.flushes, 2);
    assert_int_equal(rec.preemptions, 1);
    assert_int_equal(tide_core_job_restore(again, &rec, &err), 0);
    tide_core_restore_done(again);
    restored = tide_core_job_find(again, job->id);
    assert_non_null(restored);
    assert_int_equal(restored->durable_ckpt.step, 400);
    assert_int_equal(restored->durable_ckpt.generation, 2);
    assert_string_equal(restored->durable_ckpt.path, "/dur/1/step-400/ckpt.bin");
    assert_int_equal(restored->durable_ckpt.bytes, 4096);
    assert_int_equal(restored->durable_ckpt.ranks, 8);
    assert_int_equal(restored->flushed_bytes, 8192);
    assert_int_equal(restored->flushes, 2);
    assert_int_equal(restored->preemptions, 1);
    assert_string_equal(restored->spec.device, "H100");
    assert_int_equal(restored->spec.topology, TIDE_TOPO_RACK);
    tide_conv_job(again, restored, &check, &a);
    assert_int_equal(check.durable_checkpoint->step, 400);
    assert_int_equal(check.flushes, 2);
    tide__v1__job__free_unpacked(back, NULL);
    free(bytes);
    tide_arena_free(&a);
    tide_core_free(core);
    tide_core_free(again);
}

/* Elastic scaling (docs/elastic.md): a client's Job carries the resize under way and the last one with
 * every field; the requested size and the count of resizes survive a restart through the record. */
static void test_resize_fields(void **state)
{
    tide_core_t *core = tide_core_new(NULL), *again = tide_core_new(NULL);
    tide_arena_t a = {0};
    char *cmd[] = {"train"};
    Tide__V1__JobSpec pb = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__Job out, *back;
    tide_job_record_t rec;
    tide_job_spec_t spec;
    tide_error_t err;
    tide_job_t *job, *restored;
    const Tide__V1__Resize *r;
    uint8_t *bytes;
    size_t len;
    (void)state;

    pb.name = "j";
    pb.n_command = 1;
    pb.command = cmd;
    pb.min_workers = 2;
    pb.max_workers = 8;
    tide_core_set_time(core, 1000, 1714564800000LL);
    job = submit(core, &pb, &a);

    /* None yet: both unset, no requested size. */
    tide_conv_job(core, job, &out, &a);
    assert_null(out.resize);
    assert_null(out.last_resize);
    assert_int_equal(out.target_workers, 0);
    assert_int_equal(out.resizes, 0);

    /* As the core leaves a job mid-resize after two completed ones (set directly: the record path alone). */
    job->target_workers = 4;
    job->resizes = 2;
    job->resize.state = TIDE_RESIZE_STOPPING;
    job->resize.reason = TIDE_RESIZE_REQUESTED;
    job->resize.from_workers = 2, job->resize.to_workers = 4;
    job->resize.from_generation = 3;
    job->resize.detail = tide_xstrdup("requested by ScaleJob");
    job->resize.decided_ms = 1714564799000LL;
    job->resize.checkpoint_s = 0.25;
    job->last_resize.state = TIDE_RESIZE_DONE;
    job->last_resize.reason = TIDE_RESIZE_SHRINK;
    job->last_resize.from_workers = 4, job->last_resize.to_workers = 2, job->last_resize.workers = 2;
    job->last_resize.from_generation = 2, job->last_resize.to_generation = 3;
    job->last_resize.detail = tide_xstrdup("job 12 (CRITICAL) needs 2 GPUs");
    job->last_resize.decided_ms = 1714564700000LL, job->last_resize.done_ms = 1714564701420LL;
    job->last_resize.checkpoint_s = 0.31, job->last_resize.stop_s = 0.40, job->last_resize.start_s = 0.71;
    job->last_resize.total_s = 1.42;

    tide_conv_job(core, job, &out, &a);
    assert_int_equal(out.target_workers, 4);
    assert_int_equal(out.resizes, 2);
    r = out.resize;
    assert_non_null(r);
    assert_int_equal(r->state, TIDE__V1__RESIZE_STATE__RESIZE_STATE_STOPPING);
    assert_int_equal(r->reason, TIDE__V1__RESIZE_REASON__RESIZE_REASON_REQUESTED);
    assert_int_equal(r->from_workers, 2);
    assert_int_equal(r->to_workers, 4);
    assert_int_equal(r->workers, 0);
    assert_int_equal(r->from_generation, 3);
    assert_int_equal(r->to_generation, 0);
    assert_string_equal(r->detail, "requested by ScaleJob");
    assert_int_equal(r->decided_ms, 1714564799000LL);
    assert_int_equal(r->done_ms, 0);
    assert_float_equal(r->checkpoint_seconds, 0.25, 0);
    r = out.last_resize;
    assert_non_null(r);
    assert_int_equal(r->state, TIDE__V1__RESIZE_STATE__RESIZE_STATE_DONE);
    assert_int_equal(r->reason, TIDE__V1__RESIZE_REASON__RESIZE_REASON_SHRINK);
    assert_int_equal(r->from_workers, 4);
    assert_int_equal(r->to_workers, 2);
    assert_int_equal(r->workers, 2);
    assert_int_equal(r->from_generation, 2);
    assert_int_equal(r->to_generation, 3);
    assert_string_equal(r->detail, "job 12 (CRITICAL) needs 2 GPUs");
    assert_int_equal(r->decided_ms, 1714564700000LL);
    assert_int_equal(r->done_ms, 1714564701420LL);
    assert_float_equal(r->checkpoint_seconds, 0.31, 0);
    assert_float_equal(r->stop_seconds, 0.40, 0);
    assert_float_equal(r->start_seconds, 0.71, 0);
    assert_float_equal(r->total_seconds, 1.42, 0);

    /* The record (what the store keeps) -> a restarted core. */
    tide_conv_job(NULL, job, &out, &a);
    len = tide__v1__job__get_packed_size(&out);
    bytes = malloc(len);
    tide__v1__job__pack(&out, bytes);
    back = tide__v1__job__unpack(NULL, len, bytes);
    assert_non_null(back);
    assert_int_equal(tide_conv_record_from_pb(back, &rec, &spec, &a, &err), 0);
    assert_int_equal(rec.target_workers, 4);
    assert_int_equal(rec.resizes, 2);
    assert_int_equal(tide_core_job_restore(again, &rec, &err), 0);
    tide_core_restore_done(again);
    restored = tide_core_job_find(again, job->id);
    assert_non_null(restored);
    assert_int_equal(restored->target_workers, 4);
    assert_int_equal(restored->resizes, 2);
    tide__v1__job__free_unpacked(back, NULL);
    free(bytes);
    tide_arena_free(&a);
    tide_core_free(core);
    tide_core_free(again);
}

static tide_worker_t *reg(tide_core_t *core, const char *id, int gpu)
{
    tide_worker_info_t info = {.id = id, .node = "n1", .gpu_index = gpu, .device = "sim:h100",
                               .peak_flops = 1e15, .memory_bytes = 80ULL << 30, .address = "127.0.0.1",
                               .launcher_address = "", .agent_sock = "", .version = "t"};
    tide_worker_t *w = NULL;
    tide_error_t err;

    assert_int_equal(tide_core_worker_register(core, &info, (void *)id, NULL, 0, &w, &err), 0);
    return w;
}

/* A job requeued while a rank of its previous generation still stops: the record names that worker, and
 * a restarted scheduler waits for it too (never two generations at once). */
static void test_record_keeps_stopping_ranks(void **state)
{
    tide_core_config_t cfg;
    tide_core_t *core, *again;
    tide_arena_t a = {0};
    char *cmd[] = {"train"};
    Tide__V1__JobSpec pb = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__Job out;
    tide_job_record_t rec;
    tide_job_spec_t spec;
    tide_error_t err;
    tide_job_t *job, *restored;
    tide_worker_t *w0, *w1;
    (void)state;

    tide_core_config_default(&cfg);
    cfg.max_restarts = 1;
    core = tide_core_new(&cfg);
    again = tide_core_new(&cfg);
    tide_core_set_time(core, 1000, 1714564800000LL);
    w0 = reg(core, "n1/gpu0", 0);
    w1 = reg(core, "n1/gpu1", 1);
    pb.name = "j";
    pb.n_command = 1;
    pb.command = cmd;
    pb.min_workers = 2;
    job = submit(core, &pb, &a);
    tide_core_rank_started(core, job->ranks[0].worker, job->id, 1, 0, 100, 29500);
    tide_core_rank_started(core, job->ranks[1].worker, job->id, 1, 1, 101, 0);
    assert_int_equal(job->ranks_running, 2);
    tide_core_worker_failed(core, w1, "xid 79");
    assert_int_equal(job->state, TIDE_JOB_PENDING);
    assert_ptr_equal(w0->job, job);

    tide_conv_job(NULL, job, &out, &a);
    assert_int_equal(out.n_stopping_ranks, 1);
    assert_string_equal(out.stopping_ranks[0]->worker_id, "n1/gpu0");
    assert_int_equal(out.stopping_ranks[0]->generation, 1);
    assert_int_equal(tide_conv_record_from_pb(&out, &rec, &spec, &a, &err), 0);
    assert_int_equal(rec.n_stopping, 1);
    tide_core_set_time(again, 1000, 1714564801000LL);
    assert_int_equal(tide_core_job_restore(again, &rec, &err), 0);
    tide_core_restore_done(again);
    restored = tide_core_job_find(again, job->id);
    assert_int_equal(restored->state, TIDE_JOB_PENDING);
    assert_ptr_equal(tide_core_worker_find(again, "n1/gpu0")->job, restored);
    /* The restart counters and the generation history came through the record. */
    assert_int_equal(out.restarts, 1);
    assert_int_equal(restored->restarts, 1);
    assert_int_equal(restored->restarts_in_row, 1);
    assert_true(out.recovering); /* a restart keeps its right to the hot spares */
    assert_true(restored->recovering);
    /* ... and the workers to tell when it ends (ForgetCheckpoints), in their order */
    assert_int_equal(out.n_ckpt_holders, 2);
    assert_int_equal(restored->n_ckpt_holders, 2);
    assert_string_equal(restored->ckpt_holders[0], job->ckpt_holders[0]);
    assert_string_equal(restored->ckpt_holders[1], job->ckpt_holders[1]);
    assert_int_equal(restored->n_history, 1);
    assert_string_equal(restored->history[0].cause, "submitted");
    assert_int_equal(restored->history[0].number, 1);
    assert_int_equal(restored->history[0].workers, 2);
    assert_int_equal(restored->history[0].start_ms, 1714564800000LL);
    assert_true(restored->history[0].running_ms > 0);
    assert_int_equal(restored->history[0].end_ms, job->history[0].end_ms);
    assert_string_equal(restored->history[0].end, job->history[0].end);
    /* Two fresh workers register: still no second generation while n1/gpu0 may run generation 1. */
    reg(again, "n1/gpu2", 2);
    reg(again, "n1/gpu3", 3);
    assert_int_equal(restored->state, TIDE_JOB_PENDING);
    /* Its reconnect deadline passes: it is dead, the job starts again. */
    tide_core_set_time(again, 1000 + cfg.reconnect_deadline_ms, 1714564801000LL + cfg.reconnect_deadline_ms);
    tide_core_worker_heartbeat(again, tide_core_worker_find(again, "n1/gpu2"), NULL);
    tide_core_worker_heartbeat(again, tide_core_worker_find(again, "n1/gpu3"), NULL);
    tide_core_tick(again);
    assert_null(tide_core_worker_find(again, "n1/gpu0")->job);
    assert_int_equal(restored->state, TIDE_JOB_RUNNING);
    assert_int_equal(restored->generation, 2);
    /* Its recovery: the failure noted before the restart was lost with the old scheduler's memory, so the
     * new generation is a plain requeue in its history. */
    assert_int_equal(restored->n_history, 2);
    assert_int_equal(restored->history[1].number, 2);
    tide_arena_free(&a);
    tide_core_free(core);
    tide_core_free(again);
}

/* A pending job aging raised keeps that class across a restart. */
static void test_record_keeps_an_aged_class(void **state)
{
    tide_core_config_t cfg;
    tide_core_t *core, *again;
    tide_arena_t a = {0};
    char *cmd[] = {"train"};
    Tide__V1__JobSpec pb = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__Job out;
    tide_job_record_t rec;
    tide_job_spec_t spec;
    tide_error_t err;
    tide_job_t *job, *restored;
    (void)state;

    tide_core_config_default(&cfg);
    cfg.aging_ms = 1000;
    core = tide_core_new(&cfg);
    again = tide_core_new(&cfg);
    tide_core_set_time(core, 1000, 1714564800000LL);
    pb.name = "j";
    pb.n_command = 1;
    pb.command = cmd;
    pb.min_workers = 2;
    pb.priority = TIDE__V1__PRIORITY__PRIORITY_LOW;
    job = submit(core, &pb, &a);
    tide_core_set_time(core, 2000, 1714564801000LL);
    tide_core_tick(core);
    assert_int_equal(job->eff_priority, TIDE_PRIO_NORMAL);
    tide_conv_job(NULL, job, &out, &a);
    assert_int_equal(tide_conv_record_from_pb(&out, &rec, &spec, &a, &err), 0);
    tide_core_set_time(again, 1000, 1714564802000LL);
    assert_int_equal(tide_core_job_restore(again, &rec, &err), 0);
    tide_core_restore_done(again);
    restored = tide_core_job_find(again, job->id);
    assert_int_equal(restored->spec.priority, TIDE_PRIO_LOW);
    assert_int_equal(restored->eff_priority, TIDE_PRIO_NORMAL);
    tide_arena_free(&a);
    tide_core_free(core);
    tide_core_free(again);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_round_trip),
        cmocka_unit_test(test_spec_bad_values),
        cmocka_unit_test(test_record_round_trip),
        cmocka_unit_test(test_record_keeps_stopping_ranks),
        cmocka_unit_test(test_record_keeps_an_aged_class),
        cmocka_unit_test(test_resize_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

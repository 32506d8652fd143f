/* libFuzzer target for the worker's decoder of scheduler messages and the decision core behind it
 * (worker/core.c): the input is a script of events — messages from the wire, rank exits, stream
 * drops, heartbeats, shutdown — run against a core with inert ops. Checks that nothing crashes or
 * leaks, that every message the core sends encodes, and the core's counting invariants.
 *
 * Script: repeated [op][arg][payload]: op%6 == 0: SchedulerMessage of `arg` bytes; 1: rank id `arg`
 * exits (signal when arg is odd); 2: stream drops and reopens; 3: heartbeat; 4: shutdown; 5:
 * Welcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct inert {
    int spawned, forgotten;
} inert_t;

static int i_send(void *ud, const Tide__V1__WorkerMessage *msg)
{
    size_t len = tide__v1__worker_message__get_packed_size(msg);
    uint8_t *buf = malloc(len ? len : 1);

    tide__v1__worker_message__pack(msg, buf);
    free(buf);
    return 0;
}

static int i_spawn(void *ud, uint64_t id, const Tide__V1__LaunchRank *l, tide_worker_spawned_t *out,
                   tide_error_t *err)
{
    inert_t *in = ud;

    if (l->n_command > 1) {
        tide_errprintf(err, "spawn %s: no such file or directory", l->command[0]);
        return -2;
    }
    in->spawned++;
    out->pid = (int32_t)(1000 + id);
    out->master_port = l->master_port ? l->master_port : 29500;
    return 0;
}

static void i_stop(void *ud, uint64_t id, uint32_t grace_ms)
{
}

static void i_forget(void *ud, uint64_t id, const char *job_id, int32_t generation, int32_t rank)
{
    ((inert_t *)ud)->forgotten++;
    if (!tide_worker_job_id_valid(job_id))
        abort(); /* records are only ever named after valid ids */
}

static void i_save_epoch(void *ud, uint64_t epoch)
{
}

static void i_log_request(void *ud, const Tide__V1__LogRequest *req)
{
}

static void i_welcomed(void *ud, uint32_t interval_ms)
{
    if (interval_ms < 50 || interval_ms > 60000)
        abort();
}

static void i_end_stream(void *ud, const char *why)
{
}

static void i_trainer_command(void *ud, const Tide__V1__TrainerCommand *cmd)
{
    (void)ud;
    (void)cmd;
}

/* flush and tasks NULL: a FlushCheckpoint and a ReleaseTasks take the core's own answer paths
 * (FlushDone ok=false, TasksReleased with no tasks); forget_checkpoints NULL: ignored after the id check. */
static const tide_worker_core_ops_t inert_ops = {
    i_send,     i_spawn,      i_stop, i_forget, i_save_epoch, i_log_request,
    i_welcomed, i_end_stream, i_trainer_command, NULL, NULL, NULL,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tide_worker_core_config_t cfg = {
        .worker_id = "w", .node = "n", .device = "sim:h100", .stop_grace_ms = 10000, .seed = 1};
    Tide__V1__Telemetry tm = TIDE__V1__TELEMETRY__INIT;
    inert_t in = {0, 0};
    tide_worker_core_t *c;
    size_t off = 0;

    tide_worker_core_new(&cfg, &inert_ops, &in, &c);
    tide_worker_core_stream_opened(c);
    while (off + 2 <= size) {
        uint8_t op = data[off] % 6, arg = data[off + 1];
        int64_t delay;

        off += 2;
        switch (op) {
        case 0: {
            size_t n = arg < size - off ? arg : size - off;
            tide_worker_core_handle_bytes(c, data + off, n, NULL);
            off += n;
            break;
        }
        case 1:
            tide_worker_core_rank_exited(c, arg, arg & 1 ? 0 : arg, arg & 1 ? 9 : 0);
            break;
        case 2:
            tide_worker_core_stream_ended(c, (tide_grpc_code_t)(arg % 17), NULL, &delay);
            if (delay < 0 || delay > 5000)
                abort();
            tide_worker_core_stream_opened(c);
            break;
        case 3:
            tide_worker_core_heartbeat(c, &tm, NULL, 0);
            break;
        case 4:
            tide_worker_core_shutdown(c, "fuzz", arg & 1);
            break;
        case 5: {
            Tide__V1__SchedulerMessage m = TIDE__V1__SCHEDULER_MESSAGE__INIT;
            Tide__V1__Welcome w = TIDE__V1__WELCOME__INIT;
            w.heartbeat_interval_ms = (uint32_t)arg * 400;
            m.epoch = arg >> 4;
            m.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_WELCOME;
            m.welcome = &w;
            tide_worker_core_handle(c, &m, NULL);
            break;
        }
        }
        /* Every spawned rank is either still running or exited-and-held or forgotten. */
        if (tide_worker_core_running(c) > (size_t)in.spawned)
            abort();
    }
    tide_worker_core_free(c);
    return 0;
}

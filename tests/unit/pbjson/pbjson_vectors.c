/* Writes test vectors for crosscheck.py: for each message, its wire bytes and tide_pbjson's JSON in the
 * three flag combinations, so an independent implementation (google.protobuf.json_format) can check
 * them. Usage: pbjson_vectors OUTDIR; OUTDIR/manifest lists "NAME FULL.MESSAGE.NAME" per line. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbjson.h"
#include "pbjson_test.pb-c.h"
#include "pbjson_test2.pb-c.h"
#include "tide/v1/cluster_service.pb-c.h"
#include "tide/v1/job_service.pb-c.h"
#include "tide/v1/types.pb-c.h"
#include "tide/v1/worker_service.pb-c.h"

static const char *outdir;
static FILE *manifest;

static void write_file(const char *name, const char *suffix, const void *data, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s%s", outdir, name, suffix);
    f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void emit(const char *name, const ProtobufCMessage *m)
{
    static const struct {
        const char *suffix;
        unsigned flags;
    } variants[] = {{".json", TIDE_PBJSON_DEFAULT},
                    {".defaults.json", TIDE_PBJSON_EMIT_DEFAULTS},
                    {".names.json", TIDE_PBJSON_PROTO_NAMES}};
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n + 1);

    protobuf_c_message_pack(m, buf);
    write_file(name, ".bin", buf, n);
    free(buf);
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        char *json = tide_pbjson_print(m, variants[i].flags);
        write_file(name, variants[i].suffix, json, strlen(json));
        free(json);
    }
    fprintf(manifest, "%s %s\n", name, m->descriptor->name);
}

static void job_vectors(void)
{
    Tide__V1__JobSpec spec = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__JobSpec__EnvEntry e1 = TIDE__V1__JOB_SPEC__ENV_ENTRY__INIT, e2 = e1;
    Tide__V1__JobSpec__EnvEntry *env[] = {&e1, &e2};
    char *cmd[] = {"python3", "train.py", "--lr=0.1"};
    char *wids[] = {"node1/gpu0", "node1/gpu1"};
    Tide__V1__Job job = TIDE__V1__JOB__INIT;
    Tide__V1__ListJobsResponse list = TIDE__V1__LIST_JOBS_RESPONSE__INIT;
    Tide__V1__Job *jobs[] = {&job, &job};
    Tide__V1__ListJobsRequest lreq = TIDE__V1__LIST_JOBS_REQUEST__INIT;
    Tide__V1__JobState states[] = {TIDE__V1__JOB_STATE__JOB_STATE_RUNNING, 77};

    spec.name = "mnist";
    spec.n_command = 3, spec.command = cmd;
    spec.min_workers = 2, spec.max_workers = 4;
    spec.priority = TIDE__V1__PRIORITY__PRIORITY_HIGH;
    e1.key = "OMP_NUM_THREADS", e1.value = "4";
    e2.key = "QUOTE", e2.value = "say \"hi\"\n\t\x01";
    spec.n_env = 2, spec.env = env;
    spec.workdir = "/home/u";
    spec.time_limit_seconds = 5400;
    emit("job_spec", &spec.base);

    job.id = "17";
    job.spec = &spec;
    job.state = TIDE__V1__JOB_STATE__JOB_STATE_RUNNING;
    job.generation = 3;
    job.n_worker_ids = 2, job.worker_ids = wids;
    job.message = "running on 2 workers";
    job.submit_time_ms = 9007199254740993LL;
    job.start_time_ms = INT64_MAX;
    job.end_time_ms = -1;
    job.gpu_seconds = 0.1 + 0.2;
    job.exit_code = 137;
    job.failed_rank = -1;
    emit("job", &job.base);

    list.n_jobs = 2, list.jobs = jobs;
    list.next_page_token = "abc";
    emit("list_jobs", &list.base);

    lreq.n_states = 2, lreq.states = states;
    lreq.page_size = 1000;
    emit("list_jobs_request", &lreq.base);
}

static void cluster_vectors(void)
{
    Tide__V1__Worker w = TIDE__V1__WORKER__INIT;
    Tide__V1__Telemetry t = TIDE__V1__TELEMETRY__INIT;
    Tide__V1__Worker__LabelsEntry l1 = TIDE__V1__WORKER__LABELS_ENTRY__INIT;
    Tide__V1__Worker__LabelsEntry *labels[] = {&l1};
    Tide__V1__ClusterStatus cs = TIDE__V1__CLUSTER_STATUS__INIT;
    Tide__V1__GetClusterStatusRequest empty = TIDE__V1__GET_CLUSTER_STATUS_REQUEST__INIT;

    w.id = "node1/gpu0", w.node = "node1", w.gpu_index = 0, w.device = "sim:h100";
    w.peak_flops = 989e12;
    w.state = TIDE__V1__WORKER_STATE__WORKER_STATE_BUSY;
    w.job_id = "17", w.rank = 0, w.cordoned = 1;
    l1.key = "rack", l1.value = "r1";
    w.n_labels = 1, w.labels = labels;
    w.memory_bytes = 80ull << 30;
    t.gpu_util = 0.875, t.mem_used_bytes = UINT64_MAX, t.temperature_c = -0.0, t.power_w = 700.5;
    w.telemetry = &t;
    w.last_heartbeat_ms = 1714564800123LL;
    emit("worker", &w.base);

    cs.version = "0.1.0", cs.uptime_ms = 1, cs.leader_epoch = UINT64_MAX;
    cs.workers_total = 16, cs.jobs_failed = 2, cs.store = "sqlite";
    emit("cluster_status", &cs.base);
    emit("empty", &empty.base);
}

static void stream_vectors(void)
{
    Tide__V1__LogChunk c = TIDE__V1__LOG_CHUNK__INIT;
    static const uint8_t data[] = {0, 'a', 0, 0xff, '\n'};
    Tide__V1__WorkerMessage wm = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__Heartbeat hb = TIDE__V1__HEARTBEAT__INIT;
    Tide__V1__SchedulerMessage sm = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__StopRank stop = TIDE__V1__STOP_RANK__INIT;
    Tide__V1__Event ev = TIDE__V1__EVENT__INIT;

    c.rank = 3, c.worker_id = "node1/gpu3", c.generation = 2;
    c.data.data = (uint8_t *)data, c.data.len = sizeof(data);
    emit("log_chunk", &c.base);

    wm.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT;
    wm.heartbeat = &hb;
    emit("worker_message_oneof_empty", &wm.base);

    sm.epoch = 7;
    sm.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_STOP;
    sm.stop = &stop;
    stop.job_id = "17", stop.grace_ms = 5000, stop.reason = "preempted";
    emit("scheduler_message", &sm.base);

    ev.seq = 18446744073709551615ull, ev.time_ms = 1, ev.type = "job.started";
    ev.job_id = "17", ev.message = "héllo";
    emit("event", &ev.base);
}

static void all_types_vectors(void)
{
    Tide__Test__AllTypes m = TIDE__TEST__ALL_TYPES__INIT, o = TIDE__TEST__ALL_TYPES__INIT;
    Tide__Test__Inner in1 = TIDE__TEST__INNER__INIT, in2 = TIDE__TEST__INNER__INIT;
    Tide__Test__Inner *inners[] = {&in1, &in2};
    int32_t ri[] = {1, -2, 2147483647};
    int64_t rl[] = {-1, 9007199254740993LL};
    float rf[] = {0.1f, -1.5f, NAN, INFINITY, 1e-45f, 16777217.0f};
    double rd[] = {0.1, 1e300, -INFINITY, 5e-324, 0.1 + 0.2, 123456789012345680.0};
    protobuf_c_boolean rb[] = {1, 0};
    char *rs[] = {"a", "", "\xf0\x9f\x98\x80"};
    ProtobufCBinaryData rby[] = {{0, NULL}, {2, (uint8_t *)"\0\1"}, {3, (uint8_t *)"\xfb\xef\xff"}};
    Tide__Test__Color rc[] = {TIDE__TEST__COLOR__COLOR_GREEN, 9, -3};
    uint64_t ru[] = {UINT64_MAX, 0};
    int32_t rsi[] = {INT32_MIN, INT32_MAX};
    Tide__Test__AllTypes__MInt32Entry mi1 = TIDE__TEST__ALL_TYPES__MINT32_ENTRY__INIT, mi2 = mi1;
    Tide__Test__AllTypes__MInt32Entry *mi[] = {&mi1, &mi2};
    Tide__Test__AllTypes__MBoolEntry mb1 = TIDE__TEST__ALL_TYPES__MBOOL_ENTRY__INIT, mb2 = mb1;
    Tide__Test__AllTypes__MBoolEntry *mb[] = {&mb1, &mb2};
    Tide__Test__AllTypes__MInnerEntry mn1 = TIDE__TEST__ALL_TYPES__MINNER_ENTRY__INIT;
    Tide__Test__AllTypes__MInnerEntry *mn[] = {&mn1};
    Tide__Test__AllTypes__MUint64ColorEntry mu1 = TIDE__TEST__ALL_TYPES__MUINT64_COLOR_ENTRY__INIT;
    Tide__Test__AllTypes__MUint64ColorEntry *mu[] = {&mu1};
    Tide__Test__AllTypes__MBytesEntry mby1 = TIDE__TEST__ALL_TYPES__MBYTES_ENTRY__INIT;
    Tide__Test__AllTypes__MBytesEntry *mby[] = {&mby1};
    Tide__Test__Pair p1 = TIDE__TEST__PAIR__INIT;
    Tide__Test__Pair *pairs[] = {&p1};
    Tide__Test__Legacy leg = TIDE__TEST__LEGACY__INIT;

    m.f_int32 = -5, m.f_int64 = -9007199254740993LL, m.f_uint32 = 4294967295u;
    m.f_uint64 = UINT64_MAX, m.f_sint32 = -7, m.f_sint64 = INT64_MIN, m.f_fixed32 = 9;
    m.f_fixed64 = 10, m.f_sfixed32 = -11, m.f_sfixed64 = -12;
    m.f_float = 1e38f, m.f_double = NAN, m.f_bool = 1;
    m.f_string = "h\xc3\xa9llo \xe2\x82\xac";
    m.f_bytes.data = (uint8_t *)"\xfb\xff", m.f_bytes.len = 2;
    m.f_color = TIDE__TEST__COLOR__COLOR_RED;
    in1.text = "x";
    m.f_inner = &in1;
    m.n_r_int32 = 3, m.r_int32 = ri;
    m.n_r_int64 = 2, m.r_int64 = rl;
    m.n_r_float = 6, m.r_float = rf;
    m.n_r_double = 6, m.r_double = rd;
    m.n_r_bool = 2, m.r_bool = rb;
    m.n_r_string = 3, m.r_string = rs;
    m.n_r_bytes = 3, m.r_bytes = rby;
    m.n_r_color = 3, m.r_color = rc;
    in2.n = 2;
    m.n_r_inner = 2, m.r_inner = inners;
    m.n_r_uint64 = 2, m.r_uint64 = ru;
    m.n_r_sint32 = 2, m.r_sint32 = rsi;
    mi1.key = -1, mi1.value = "minus one";
    mi2.key = 2, mi2.value = "two";
    m.n_m_int32 = 2, m.m_int32 = mi;
    mb1.key = 1, mb1.value = 9007199254740993LL;
    mb2.key = 0, mb2.value = -1;
    m.n_m_bool = 2, m.m_bool = mb;
    mn1.key = "k", mn1.value = &in2;
    m.n_m_inner = 1, m.m_inner = mn;
    mu1.key = UINT64_MAX, mu1.value = TIDE__TEST__COLOR__COLOR_GREEN;
    m.n_m_uint64_color = 1, m.m_uint64_color = mu;
    mby1.key = "", mby1.value.data = (uint8_t *)"\0", mby1.value.len = 1;
    m.n_m_bytes = 1, m.m_bytes = mby;
    p1.key = "pk", p1.value = "pv";
    m.n_pairs = 1, m.pairs = pairs;
    m.choice_case = TIDE__TEST__ALL_TYPES__CHOICE_O_INNER;
    m.o_inner = &in2;
    m.snake_case_name_2x = "s";
    emit("all_types", &m.base);

    o.choice_case = TIDE__TEST__ALL_TYPES__CHOICE_O_STRING;
    o.o_string = "";
    o.f_double = -0.0;
    o.f_float = 1.0f / 3.0f;
    emit("all_types_oneof_default", &o.base);
    o.choice_case = TIDE__TEST__ALL_TYPES__CHOICE_O_INT32;
    o.o_int32 = 0;
    emit("all_types_oneof_zero", &o.base);

    emit("legacy_unset", &leg.base);
    leg.has_a = 1, leg.s = "x", leg.r = 5, leg.has_d = 1, leg.d = 0;
    emit("legacy_set", &leg.base);
}

int main(int argc, char **argv)
{
    char path[4096];

    if (argc != 2) {
        fprintf(stderr, "usage: pbjson_vectors OUTDIR\n");
        return 2;
    }
    outdir = argv[1];
    snprintf(path, sizeof(path), "%s/manifest", outdir);
    manifest = fopen(path, "w");
    if (!manifest) {
        perror(path);
        return 1;
    }
    job_vectors();
    cluster_vectors();
    stream_vectors();
    all_types_vectors();
    return fclose(manifest) == 0 ? 0 : 1;
}

/* Unit tests of tide_pbjson: proto -> JSON against exact expected strings (tide.v1 messages and a
 * test proto covering every field kind), JSON -> proto with its errors, and round trips through the
 * wire format. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base64.h"
#include "pbjson.h"
#include "pbjson_test.pb-c.h"
#include "pbjson_test2.pb-c.h"
#include "tide/v1/cluster_service.pb-c.h"
#include "tide/v1/job_service.pb-c.h"
#include "tide/v1/types.pb-c.h"
#include "tide/v1/worker_service.pb-c.h"

static void expect_json(const ProtobufCMessage *m, unsigned flags, const char *want)
{
    char *got = tide_pbjson_print(m, flags);
    if (strcmp(got, want) != 0)
        print_error("want %s\n got  %s\n", want, got);
    assert_string_equal(got, want);
    free(got);
}

/* decode(text) must fail with exactly this error text. */
static void expect_decode_error(const ProtobufCMessageDescriptor *d, const char *text, const char *want)
{
    ProtobufCMessage *m = NULL;
    tide_error_t err = {{0}};
    int rc = tide_pbjson_parse(text, strlen(text), d, 0, &m, &err);

    assert_int_equal(rc, -EINVAL);
    assert_null(m);
    if (strcmp(err.text, want) != 0)
        print_error("input %s\n want %s\n got  %s\n", text, want, err.text);
    assert_string_equal(err.text, want);
}

static ProtobufCMessage *decode_ok(const ProtobufCMessageDescriptor *d, const char *text, unsigned flags)
{
    ProtobufCMessage *m = NULL;
    tide_error_t err = {{0}};
    int rc = tide_pbjson_parse(text, strlen(text), d, flags, &m, &err);

    if (rc != 0)
        print_error("input %s\n error %s\n", text, err.text);
    assert_int_equal(rc, 0);
    assert_non_null(m);
    return m;
}

/* Packs a and b and compares the bytes: equal messages with fields in the same order pack equal. */
static void assert_same_wire(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
    size_t na = protobuf_c_message_get_packed_size(a), nb = protobuf_c_message_get_packed_size(b);
    uint8_t *pa = malloc(na + 1), *pb = malloc(nb + 1);

    assert_int_equal(na, nb);
    protobuf_c_message_pack(a, pa);
    protobuf_c_message_pack(b, pb);
    assert_memory_equal(pa, pb, na);
    free(pa);
    free(pb);
}

/* encode -> print -> parse -> decode gives a message that packs to the same bytes. */
static void assert_round_trip(const ProtobufCMessage *m, unsigned flags)
{
    char *text = tide_pbjson_print(m, flags);
    ProtobufCMessage *back = decode_ok(m->descriptor, text, 0);

    assert_same_wire(m, back);
    protobuf_c_message_free_unpacked(back, NULL);
    free(text);
}

static void test_json_name(void **state)
{
    char buf[64];
    (void)state;

    assert_int_equal(tide_pbjson_json_name("min_workers", buf, sizeof(buf)), 10);
    assert_string_equal(buf, "minWorkers");
    tide_pbjson_json_name("time_limit_seconds", buf, sizeof(buf));
    assert_string_equal(buf, "timeLimitSeconds");
    tide_pbjson_json_name("id", buf, sizeof(buf));
    assert_string_equal(buf, "id");
    /* protoc's rule, quirks included: doubled and leading underscores, digits, capitals kept. */
    tide_pbjson_json_name("foo__bar", buf, sizeof(buf));
    assert_string_equal(buf, "fooBar");
    tide_pbjson_json_name("_leading", buf, sizeof(buf));
    assert_string_equal(buf, "Leading");
    tide_pbjson_json_name("snake_case_name_2x", buf, sizeof(buf));
    assert_string_equal(buf, "snakeCaseName2x");
    tide_pbjson_json_name("a_b_c", buf, sizeof(buf));
    assert_string_equal(buf, "aBC");
    tide_pbjson_json_name("HTTP_thing", buf, sizeof(buf));
    assert_string_equal(buf, "HTTPThing");
    /* Truncation reports the full length, like snprintf. */
    assert_int_equal(tide_pbjson_json_name("min_workers", buf, 4), 10);
    assert_string_equal(buf, "min");
    assert_int_equal(tide_pbjson_json_name("min_workers", NULL, 0), 10);
}

static const ProtobufCFieldDescriptor *field(const ProtobufCMessageDescriptor *d, const char *name)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, name);
    assert_non_null(f);
    return f;
}

static void test_map_detection(void **state)
{
    const ProtobufCMessageDescriptor *js = &tide__v1__job_spec__descriptor;
    const ProtobufCMessageDescriptor *at = &tide__test__all_types__descriptor;
    (void)state;

    assert_true(tide_pbjson_field_is_map(js, field(js, "env")));
    assert_false(tide_pbjson_field_is_map(js, field(js, "command")));
    assert_false(tide_pbjson_field_is_map(js, field(js, "name")));
    assert_true(tide_pbjson_field_is_map(&tide__v1__worker__descriptor,
                                         field(&tide__v1__worker__descriptor, "labels")));
    assert_true(tide_pbjson_field_is_map(at, field(at, "m_int32")));
    assert_true(tide_pbjson_field_is_map(at, field(at, "m_uint64_color")));
    /* Same shape as an entry (key = 1, value = 2) but not named as protoc names entries. */
    assert_false(tide_pbjson_field_is_map(at, field(at, "pairs")));
    assert_false(tide_pbjson_field_is_map(at, field(at, "r_inner")));
    /* The entry must be nested in the message that holds the field. */
    assert_false(tide_pbjson_field_is_map(js, field(at, "m_int32")));
}

static void test_base64(void **state)
{
    static const struct {
        const char *plain, *b64;
    } v[] = {{"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},      {"foo", "Zm9v"},
             {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
    unsigned char *out;
    size_t len;
    (void)state;

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char *e = tide_base64_encode(v[i].plain, strlen(v[i].plain));
        assert_string_equal(e, v[i].b64);
        free(e);
        assert_int_equal(tide_base64_decode(v[i].b64, strlen(v[i].b64), &out, &len), 0);
        assert_int_equal(len, strlen(v[i].plain));
        assert_memory_equal(out, v[i].plain, len);
        free(out);
    }
    /* URL-safe alphabet and missing padding are accepted. */
    assert_int_equal(tide_base64_decode("-_8", 3, &out, &len), 0);
    assert_int_equal(len, 2);
    assert_int_equal(out[0], 0xfb);
    assert_int_equal(out[1], 0xff);
    free(out);
    assert_int_equal(tide_base64_decode("Zm8", 3, &out, &len), 0);
    assert_int_equal(len, 2);
    free(out);
    /* Bad characters, bad lengths, stray padding and non-zero trailing bits are not. */
    assert_int_equal(tide_base64_decode("Zm9v!", 5, &out, &len), -EINVAL);
    assert_int_equal(tide_base64_decode("Z", 1, &out, &len), -EINVAL);
    assert_int_equal(tide_base64_decode("Zg=", 3, &out, &len), -EINVAL);
    assert_int_equal(tide_base64_decode("Z===", 4, &out, &len), -EINVAL);
    assert_int_equal(tide_base64_decode("Zm=v", 4, &out, &len), -EINVAL);
    assert_int_equal(tide_base64_decode("Zh==", 4, &out, &len), -EINVAL);
    assert_int_equal(tide_base64_decode("Zm9 v", 5, &out, &len), -EINVAL);
}

static void test_empty_messages(void **state)
{
    Tide__V1__GetClusterStatusRequest req = TIDE__V1__GET_CLUSTER_STATUS_REQUEST__INIT;
    Tide__V1__Job job = TIDE__V1__JOB__INIT;
    Tide__Test__AllTypes all = TIDE__TEST__ALL_TYPES__INIT;
    (void)state;

    expect_json(&req.base, 0, "{}");
    expect_json(&req.base, TIDE_PBJSON_EMIT_DEFAULTS, "{}");
    expect_json(&job.base, 0, "{}");
    expect_json(&all.base, 0, "{}");
}

static void test_job_spec(void **state)
{
    Tide__V1__JobSpec spec = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__JobSpec__EnvEntry e1 = TIDE__V1__JOB_SPEC__ENV_ENTRY__INIT, e2 = e1;
    Tide__V1__JobSpec__EnvEntry *env[] = {&e1, &e2};
    char *cmd[] = {"python3", "train.py", "--lr=0.1"};
    (void)state;

    spec.name = "mnist";
    spec.n_command = 3;
    spec.command = cmd;
    spec.min_workers = 2;
    spec.max_workers = 4;
    spec.priority = TIDE__V1__PRIORITY__PRIORITY_HIGH;
    e1.key = "OMP_NUM_THREADS";
    e1.value = "4";
    e2.key = "QUOTE";
    e2.value = "say \"hi\"\n";
    spec.n_env = 2;
    spec.env = env;
    spec.workdir = "/home/u";
    spec.time_limit_seconds = 5400;
    expect_json(&spec.base, 0,
                "{\"name\":\"mnist\",\"command\":[\"python3\",\"train.py\",\"--lr=0.1\"],"
                "\"minWorkers\":2,\"maxWorkers\":4,\"priority\":\"PRIORITY_HIGH\","
                "\"env\":{\"OMP_NUM_THREADS\":\"4\",\"QUOTE\":\"say \\\"hi\\\"\\n\"},"
                "\"workdir\":\"/home/u\",\"timeLimitSeconds\":\"5400\"}");
    expect_json(&spec.base, TIDE_PBJSON_PROTO_NAMES,
                "{\"name\":\"mnist\",\"command\":[\"python3\",\"train.py\",\"--lr=0.1\"],"
                "\"min_workers\":2,\"max_workers\":4,\"priority\":\"PRIORITY_HIGH\","
                "\"env\":{\"OMP_NUM_THREADS\":\"4\",\"QUOTE\":\"say \\\"hi\\\"\\n\"},"
                "\"workdir\":\"/home/u\",\"time_limit_seconds\":\"5400\"}");
    assert_round_trip(&spec.base, 0);

    /* A later map entry with the same key wins, as on the wire. */
    e2.key = "OMP_NUM_THREADS";
    spec.n_command = 0;
    spec.priority = 42; /* unknown enum values print as numbers */
    expect_json(&spec.base, 0,
                "{\"name\":\"mnist\",\"minWorkers\":2,\"maxWorkers\":4,\"priority\":42,"
                "\"env\":{\"OMP_NUM_THREADS\":\"say \\\"hi\\\"\\n\"},"
                "\"workdir\":\"/home/u\",\"timeLimitSeconds\":\"5400\"}");
}

static void test_emit_defaults(void **state)
{
    Tide__V1__JobSpec spec = TIDE__V1__JOB_SPEC__INIT;
    Tide__V1__SubmitJobRequest req = TIDE__V1__SUBMIT_JOB_REQUEST__INIT;
    (void)state;

    expect_json(&spec.base, TIDE_PBJSON_EMIT_DEFAULTS,
                "{\"name\":\"\",\"command\":[],\"minWorkers\":0,\"maxWorkers\":0,"
                "\"priority\":\"PRIORITY_UNSPECIFIED\",\"env\":{},\"workdir\":\"\","
                "\"timeLimitSeconds\":\"0\",\"launcher\":\"LAUNCHER_UNSPECIFIED\",\"pool\":\"\","
                "\"memoryPerRankBytes\":\"0\",\"topology\":\"TOPOLOGY_ANY\",\"device\":\"\","
                "\"checkpointMfuThreshold\":0,\"checkpointDeadlineSeconds\":\"0\",\"adaptiveTarget\":false,\"noStealing\":false,\"burstPercent\":0,\"burstCommand\":[],\"restartPolicy\":\"RESTART_POLICY_UNSPECIFIED\",\"maxRestarts\":0,\"restartBackoffMs\":\"0\","
                "\"checkpointIntervalSeconds\":\"0\"}");
    /* An unset message field stays omitted even with defaults on. */
    expect_json(&req.base, TIDE_PBJSON_EMIT_DEFAULTS, "{}");
    req.spec = &spec;
    expect_json(&req.base, 0, "{\"spec\":{}}");
}

static void test_int64_beyond_double(void **state)
{
    Tide__V1__Job job = TIDE__V1__JOB__INIT;
    Tide__V1__Worker w = TIDE__V1__WORKER__INIT;
    Tide__V1__Telemetry t = TIDE__V1__TELEMETRY__INIT;
    (void)state;

    job.id = "17";
    job.submit_time_ms = 9007199254740993LL; /* 2^53 + 1: a double would print ...992 */
    job.start_time_ms = INT64_MAX;
    job.end_time_ms = INT64_MIN;
    job.failed_rank = -1;
    expect_json(&job.base, 0,
                "{\"id\":\"17\",\"submitTimeMs\":\"9007199254740993\","
                "\"startTimeMs\":\"9223372036854775807\",\"endTimeMs\":\"-9223372036854775808\","
                "\"failedRank\":-1}");
    assert_round_trip(&job.base, 0);

    t.mem_used_bytes = UINT64_MAX;
    t.gpu_util = 0.875;
    w.telemetry = &t;
    w.rank = -1;
    expect_json(&w.base, 0,
                "{\"rank\":-1,\"telemetry\":{\"gpuUtil\":0.875,"
                "\"memUsedBytes\":\"18446744073709551615\"}}");
    assert_round_trip(&w.base, 0);
}

static void test_bytes_with_nuls(void **state)
{
    Tide__V1__LogChunk c = TIDE__V1__LOG_CHUNK__INIT;
    static const uint8_t data[] = {0, 'a', 0, 0xff, '\n'};
    (void)state;

    c.rank = 3;
    c.data.data = (uint8_t *)data;
    c.data.len = sizeof(data);
    expect_json(&c.base, 0, "{\"rank\":3,\"data\":\"AGEA/wo=\"}");
    assert_round_trip(&c.base, 0);
}

static void test_oneof(void **state)
{
    Tide__V1__WorkerMessage wm = TIDE__V1__WORKER_MESSAGE__INIT;
    Tide__V1__Heartbeat hb = TIDE__V1__HEARTBEAT__INIT;
    Tide__V1__SchedulerMessage sm = TIDE__V1__SCHEDULER_MESSAGE__INIT;
    Tide__V1__StopRank stop = TIDE__V1__STOP_RANK__INIT;
    Tide__Test__AllTypes all = TIDE__TEST__ALL_TYPES__INIT;
    (void)state;

    /* A set member prints even when it holds only defaults. */
    wm.msg_case = TIDE__V1__WORKER_MESSAGE__MSG_HEARTBEAT;
    wm.heartbeat = &hb;
    expect_json(&wm.base, 0, "{\"heartbeat\":{}}");
    assert_round_trip(&wm.base, 0);

    sm.epoch = 7;
    sm.msg_case = TIDE__V1__SCHEDULER_MESSAGE__MSG_STOP;
    sm.stop = &stop;
    stop.job_id = "17";
    stop.grace_ms = 5000;
    expect_json(&sm.base, TIDE_PBJSON_DEFAULT, "{\"epoch\":\"7\",\"stop\":{\"jobId\":\"17\",\"graceMs\":5000}}");
    assert_round_trip(&sm.base, 0);

    /* Scalar members too: an empty string or a zero that is set is printed; an unset one is not. */
    all.choice_case = TIDE__TEST__ALL_TYPES__CHOICE_O_STRING;
    all.o_string = "";
    expect_json(&all.base, 0, "{\"oString\":\"\"}");
    all.choice_case = TIDE__TEST__ALL_TYPES__CHOICE_O_INT32;
    all.o_int32 = 0;
    expect_json(&all.base, 0, "{\"oInt32\":0}");
    assert_round_trip(&all.base, 0);
    all.choice_case = TIDE__TEST__ALL_TYPES__CHOICE__NOT_SET;
    expect_json(&all.base, TIDE_PBJSON_EMIT_DEFAULTS, "{\"fInt32\":0,\"fInt64\":\"0\",\"fUint32\":0,"
                "\"fUint64\":\"0\",\"fSint32\":0,\"fSint64\":\"0\",\"fFixed32\":0,\"fFixed64\":\"0\","
                "\"fSfixed32\":0,\"fSfixed64\":\"0\",\"fFloat\":0,\"fDouble\":0,\"fBool\":false,"
                "\"fString\":\"\",\"fBytes\":\"\",\"fColor\":\"COLOR_UNSPECIFIED\",\"rInt32\":[],"
                "\"rInt64\":[],\"rFloat\":[],\"rDouble\":[],\"rBool\":[],\"rString\":[],\"rBytes\":[],"
                "\"rColor\":[],\"rInner\":[],\"rUint64\":[],\"rSint32\":[],\"mInt32\":{},\"mBool\":{},"
                "\"mInner\":{},\"mUint64Color\":{},\"mBytes\":{},\"pairs\":[],\"snakeCaseName2x\":\"\"}");
}

static void test_every_kind(void **state)
{
    Tide__Test__AllTypes m = TIDE__TEST__ALL_TYPES__INIT;
    Tide__Test__Inner in1 = TIDE__TEST__INNER__INIT, in2 = TIDE__TEST__INNER__INIT;
    Tide__Test__Inner *inners[] = {&in1, &in2};
    int32_t ri[] = {1, -2, 2147483647};
    int64_t rl[] = {-1, 9007199254740993LL};
    float rf[] = {0.1f, -1.5f, NAN, INFINITY};
    double rd[] = {0.1, 1e300, -INFINITY, 5e-324};
    protobuf_c_boolean rb[] = {1, 0};
    char *rs[] = {"a", ""};
    ProtobufCBinaryData rby[] = {{0, NULL}, {2, (uint8_t *)"\0\1"}};
    Tide__Test__Color rc[] = {TIDE__TEST__COLOR__COLOR_GREEN, 9};
    uint64_t ru[] = {UINT64_MAX};
    int32_t rsi[] = {INT32_MIN};
    Tide__Test__AllTypes__MInt32Entry mi1 = TIDE__TEST__ALL_TYPES__MINT32_ENTRY__INIT, mi2 = mi1;
    Tide__Test__AllTypes__MInt32Entry *mi[] = {&mi1, &mi2};
    Tide__Test__AllTypes__MBoolEntry mb1 = TIDE__TEST__ALL_TYPES__MBOOL_ENTRY__INIT;
    Tide__Test__AllTypes__MBoolEntry *mb[] = {&mb1};
    Tide__Test__AllTypes__MInnerEntry mn1 = TIDE__TEST__ALL_TYPES__MINNER_ENTRY__INIT;
    Tide__Test__AllTypes__MInnerEntry *mn[] = {&mn1};
    Tide__Test__AllTypes__MUint64ColorEntry mu1 = TIDE__TEST__ALL_TYPES__MUINT64_COLOR_ENTRY__INIT;
    Tide__Test__AllTypes__MUint64ColorEntry *mu[] = {&mu1};
    Tide__Test__Pair p1 = TIDE__TEST__PAIR__INIT;
    Tide__Test__Pair *pairs[] = {&p1};
    (void)state;

    m.f_int32 = -5;
    m.f_int64 = -9007199254740993LL;
    m.f_uint32 = 4294967295u;
    m.f_uint64 = 18446744073709551615ull;
    m.f_sint32 = -7;
    m.f_sint64 = -8;
    m.f_fixed32 = 9;
    m.f_fixed64 = 10;
    m.f_sfixed32 = -11;
    m.f_sfixed64 = -12;
    m.f_float = 3.4028235e38f;
    m.f_double = NAN;
    m.f_bool = 1;
    m.f_string = "h\xc3\xa9llo \xe2\x82\xac";
    m.f_bytes.data = (uint8_t *)"\xfb\xff";
    m.f_bytes.len = 2;
    m.f_color = TIDE__TEST__COLOR__COLOR_RED;
    in1.text = "x";
    m.f_inner = &in1;
    m.n_r_int32 = 3, m.r_int32 = ri;
    m.n_r_int64 = 2, m.r_int64 = rl;
    m.n_r_float = 4, m.r_float = rf;
    m.n_r_double = 4, m.r_double = rd;
    m.n_r_bool = 2, m.r_bool = rb;
    m.n_r_string = 2, m.r_string = rs;
    m.n_r_bytes = 2, m.r_bytes = rby;
    m.n_r_color = 2, m.r_color = rc;
    in2.n = 2;
    m.n_r_inner = 2, m.r_inner = inners;
    m.n_r_uint64 = 1, m.r_uint64 = ru;
    m.n_r_sint32 = 1, m.r_sint32 = rsi;
    mi1.key = -1, mi1.value = "minus one";
    mi2.key = 2, mi2.value = "two";
    m.n_m_int32 = 2, m.m_int32 = mi;
    mb1.key = 1, mb1.value = 9007199254740993LL;
    m.n_m_bool = 1, m.m_bool = mb;
    mn1.key = "k"; /* value left NULL: prints as {} */
    m.n_m_inner = 1, m.m_inner = mn;
    mu1.key = UINT64_MAX, mu1.value = TIDE__TEST__COLOR__COLOR_GREEN;
    m.n_m_uint64_color = 1, m.m_uint64_color = mu;
    p1.key = "pk", p1.value = "pv";
    m.n_pairs = 1, m.pairs = pairs;
    m.choice_case = TIDE__TEST__ALL_TYPES__CHOICE_O_INNER;
    m.o_inner = &in2;
    m.snake_case_name_2x = "s";
    expect_json(&m.base, 0,
                "{\"fInt32\":-5,\"fInt64\":\"-9007199254740993\",\"fUint32\":4294967295,"
                "\"fUint64\":\"18446744073709551615\",\"fSint32\":-7,\"fSint64\":\"-8\","
                "\"fFixed32\":9,\"fFixed64\":\"10\",\"fSfixed32\":-11,\"fSfixed64\":\"-12\","
                "\"fFloat\":3.4028235e+38,\"fDouble\":\"NaN\",\"fBool\":true,"
                "\"fString\":\"h\xc3\xa9llo \xe2\x82\xac\",\"fBytes\":\"+/8=\",\"fColor\":\"COLOR_RED\","
                "\"fInner\":{\"text\":\"x\"},\"rInt32\":[1,-2,2147483647],"
                "\"rInt64\":[\"-1\",\"9007199254740993\"],"
                "\"rFloat\":[0.1,-1.5,\"NaN\",\"Infinity\"],"
                "\"rDouble\":[0.1,1e+300,\"-Infinity\",5e-324],"
                "\"rBool\":[true,false],\"rString\":[\"a\",\"\"],\"rBytes\":[\"\",\"AAE=\"],"
                "\"rColor\":[\"COLOR_GREEN\",9],\"rInner\":[{\"text\":\"x\"},{\"n\":2}],"
                "\"rUint64\":[\"18446744073709551615\"],\"rSint32\":[-2147483648],"
                "\"mInt32\":{\"-1\":\"minus one\",\"2\":\"two\"},"
                "\"mBool\":{\"true\":\"9007199254740993\"},\"mInner\":{\"k\":{}},"
                "\"mUint64Color\":{\"18446744073709551615\":\"COLOR_GREEN\"},"
                "\"pairs\":[{\"key\":\"pk\",\"value\":\"pv\"}],\"oInner\":{\"n\":2},"
                "\"snakeCaseName2x\":\"s\"}");
    /* A map value left NULL comes back as an empty message, which packs 2 bytes longer. */
    Tide__Test__Inner empty = TIDE__TEST__INNER__INIT;
    mn1.value = &empty;
    /* NaN never equals itself, but its bits pack the same. */
    assert_round_trip(&m.base, 0);
    assert_round_trip(&m.base, TIDE_PBJSON_EMIT_DEFAULTS);
    assert_round_trip(&m.base, TIDE_PBJSON_PROTO_NAMES);
}

static void test_invalid_utf8_repaired(void **state)
{
    Tide__V1__Event ev = TIDE__V1__EVENT__INIT;
    (void)state;

    /* A lone continuation byte, a truncated sequence, an overlong '/', and a surrogate. */
    ev.message = "a\x80" "b\xe2\x82" "c\xc0\xaf" "d\xed\xa0\x80";
    expect_json(&ev.base, 0,
                "{\"message\":\"a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd"
                "d\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"}");
}

static void test_proto2_presence(void **state)
{
    Tide__Test__Legacy l = TIDE__TEST__LEGACY__INIT;
    (void)state;

    /* Required fields always print; optional ones only when present. */
    expect_json(&l.base, 0, "{\"r\":0}");
    l.has_a = 1;
    l.s = "x";
    l.has_d = 1;
    expect_json(&l.base, 0, "{\"a\":0,\"s\":\"x\",\"r\":0,\"d\":7}");
    assert_round_trip(&l.base, 0);
}

static void test_decode_job_spec(void **state)
{
    Tide__V1__SubmitJobRequest *req;
    Tide__V1__JobSpec *s;
    (void)state;

    req = (Tide__V1__SubmitJobRequest *)decode_ok(
        &tide__v1__submit_job_request__descriptor,
        "{\"spec\": {\"name\": \"mnist\", \"command\": [\"python3\", \"train.py\"],"
        " \"min_workers\": 2, \"maxWorkers\": \"4\", \"priority\": \"PRIORITY_CRITICAL\","
        " \"env\": {\"A\": \"1\", \"B\": \"\"}, \"workdir\": null, \"timeLimitSeconds\": 1e3}}",
        0);
    s = req->spec;
    assert_non_null(s);
    assert_string_equal(s->name, "mnist");
    assert_int_equal(s->n_command, 2);
    assert_string_equal(s->command[1], "train.py");
    assert_int_equal(s->min_workers, 2);
    assert_int_equal(s->max_workers, 4);
    assert_int_equal(s->priority, TIDE__V1__PRIORITY__PRIORITY_CRITICAL);
    assert_int_equal(s->n_env, 2);
    assert_string_equal(s->env[0]->key, "A");
    assert_string_equal(s->env[0]->value, "1");
    assert_string_equal(s->env[1]->key, "B");
    assert_string_equal(s->env[1]->value, "");
    assert_string_equal(s->workdir, "");
    assert_int_equal(s->time_limit_seconds, 1000);
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

static void test_decode_numbers(void **state)
{
    Tide__Test__AllTypes *m;
    (void)state;

    m = (Tide__Test__AllTypes *)decode_ok(
        &tide__test__all_types__descriptor,
        "{\"fInt64\":\"-9007199254740993\",\"fUint64\":\"18446744073709551615\",\"fInt32\":-2147483648,"
        "\"fUint32\":4294967295,\"fFloat\":\"-Infinity\",\"fDouble\":\"1.5\",\"fColor\":2,"
        "\"fBytes\":\"-_8\",\"mInt32\":{\"-3\":\"x\"},\"mBool\":{\"false\":\"1\"},"
        "\"mUint64Color\":{\"18446744073709551615\":\"COLOR_RED\"},\"oString\":\"\"}",
        0);
    assert_int_equal(m->f_int64, -9007199254740993LL);
    assert_true(m->f_uint64 == UINT64_MAX);
    assert_int_equal(m->f_int32, INT32_MIN);
    assert_int_equal(m->f_uint32, UINT32_MAX);
    assert_true(isinf(m->f_float) && m->f_float < 0);
    assert_true(m->f_double == 1.5);
    assert_int_equal(m->f_color, TIDE__TEST__COLOR__COLOR_GREEN);
    assert_int_equal(m->f_bytes.len, 2);
    assert_int_equal(m->m_int32[0]->key, -3);
    assert_false(m->m_bool[0]->key);
    assert_int_equal(m->m_bool[0]->value, 1);
    assert_true(m->m_uint64_color[0]->key == UINT64_MAX);
    assert_int_equal(m->choice_case, TIDE__TEST__ALL_TYPES__CHOICE_O_STRING);
    assert_string_equal(m->o_string, "");
    protobuf_c_message_free_unpacked(&m->base, NULL);
}

static void test_decode_errors(void **state)
{
    const ProtobufCMessageDescriptor *sub = &tide__v1__submit_job_request__descriptor;
    const ProtobufCMessageDescriptor *all = &tide__test__all_types__descriptor;
    ProtobufCMessage *m;
    (void)state;

    expect_decode_error(sub, "[1]", "(top level): expected a JSON object");
    expect_decode_error(sub, "{\"spec\":", "invalid JSON at byte 7");
    expect_decode_error(sub, "{} x", "invalid JSON at byte 3: trailing data");
    expect_decode_error(sub, "{\"bogus\":1}", "bogus: no such field");
    expect_decode_error(sub, "{\"spec\":{\"minWorkers\":\"two\"}}", "spec.minWorkers: expected an integer");
    expect_decode_error(sub, "{\"spec\":{\"minWorkers\":1.5}}", "spec.minWorkers: expected an integer");
    expect_decode_error(sub, "{\"spec\":{\"minWorkers\":2147483648}}", "spec.minWorkers: integer out of range");
    expect_decode_error(sub, "{\"spec\":{\"timeLimitSeconds\":9007199254740993}}",
                        "spec.timeLimitSeconds: integer of 2^53 or more must be given as a string");
    expect_decode_error(sub, "{\"spec\":{\"timeLimitSeconds\":\"99999999999999999999\"}}",
                        "spec.timeLimitSeconds: integer out of range");
    expect_decode_error(sub, "{\"spec\":{\"command\":[\"a\",2]}}", "spec.command[1]: expected a string");
    expect_decode_error(sub, "{\"spec\":{\"command\":[\"a\",null]}}",
                        "spec.command[1]: null is not allowed in a repeated field");
    expect_decode_error(sub, "{\"spec\":{\"command\":\"a\"}}", "spec.command: expected an array");
    expect_decode_error(sub, "{\"spec\":{\"env\":{\"A\":1}}}", "spec.env[\"A\"]: expected a string");
    expect_decode_error(sub, "{\"spec\":{\"env\":[]}}", "spec.env: expected an object");
    expect_decode_error(sub, "{\"spec\":{\"priority\":\"URGENT\"}}",
                        "spec.priority: unknown value \"URGENT\" of tide.v1.Priority");
    expect_decode_error(sub, "{\"spec\":{\"priority\":true}}", "spec.priority: expected an enum name or number");
    expect_decode_error(sub, "{\"spec\":{\"min_workers\":1,\"minWorkers\":2}}", "spec.minWorkers: field given twice");
    expect_decode_error(sub, "{\"spec\":3}", "spec: expected an object");
    expect_decode_error(all, "{\"fUint64\":\"-1\"}", "fUint64: expected an integer");
    expect_decode_error(all, "{\"fUint32\":-1}", "fUint32: expected a non-negative integer");
    expect_decode_error(all, "{\"fFloat\":1e39}", "fFloat: number out of range for a float");
    expect_decode_error(all, "{\"fDouble\":\"inf\"}", "fDouble: expected a number");
    expect_decode_error(all, "{\"fBool\":1}", "fBool: expected true or false");
    expect_decode_error(all, "{\"fBytes\":\"@@@@\"}", "fBytes: invalid base64");
    expect_decode_error(all, "{\"mBool\":{\"yes\":\"1\"}}", "mBool[\"yes\"]: map key must be \"true\" or \"false\"");
    expect_decode_error(all, "{\"mInt32\":{\"x\":\"1\"}}", "mInt32[\"x\"]: expected an integer");
    expect_decode_error(all, "{\"mInner\":{\"k\":null}}", "mInner[\"k\"]: map value must not be null");
    expect_decode_error(all, "{\"oString\":\"a\",\"oInt32\":1}",
                        "oInt32: another member of the same oneof is already set");
    /* Errors deep inside partly built messages leave nothing behind (LeakSanitizer checks). */
    expect_decode_error(all, "{\"oInner\":{\"text\":\"t\",\"n\":\"x\"}}", "oInner.n: expected an integer");
    expect_decode_error(all, "{\"rInner\":[{\"text\":\"a\"},{\"text\":1}]}", "rInner[1].text: expected a string");
    expect_decode_error(all, "{\"fString\":\"a\",\"fInner\":{\"text\":\"b\"},\"rString\":[\"c\"],\"x\":1}",
                        "x: no such field");

    /* Unknown fields can be skipped on request. */
    m = decode_ok(sub, "{\"bogus\":1,\"spec\":{\"name\":\"n\",\"extra\":[1]}}", TIDE_PBJSON_IGNORE_UNKNOWN);
    assert_string_equal(((Tide__V1__SubmitJobRequest *)m)->spec->name, "n");
    protobuf_c_message_free_unpacked(m, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_name),
        cmocka_unit_test(test_map_detection),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_empty_messages),
        cmocka_unit_test(test_job_spec),
        cmocka_unit_test(test_emit_defaults),
        cmocka_unit_test(test_int64_beyond_double),
        cmocka_unit_test(test_bytes_with_nuls),
        cmocka_unit_test(test_oneof),
        cmocka_unit_test(test_every_kind),
        cmocka_unit_test(test_invalid_utf8_repaired),
        cmocka_unit_test(test_proto2_presence),
        cmocka_unit_test(test_decode_job_spec),
        cmocka_unit_test(test_decode_numbers),
        cmocka_unit_test(test_decode_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

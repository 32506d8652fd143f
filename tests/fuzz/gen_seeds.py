#!/usr/bin/env python3
"""Writes the seed corpora in corpus/fuzz_rpc_conn and corpus/fuzz_grpc_frame (committed; rerun after
changing this file). HTTP/2 frames and HPACK (literal fields, no Huffman) are built by hand so the seeds
depend on nothing. fuzz_rpc_conn inputs start with one byte that picks the read size and clock step."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = range(10)
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hpack(headers):
    out = b""
    for name, value in headers:
        n, v = name.encode(), value.encode()
        assert len(n) < 127 and len(v) < 127
        out += b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v
    return out


def grpc_msg(payload, flag=0, length=None):
    return bytes([flag]) + struct.pack(">I", len(payload) if length is None else length) + payload


def req(path, extra=(), method="POST", ctype="application/grpc"):
    h = [(":method", method), (":scheme", "http"), (":path", path), (":authority", "x"),
         ("content-type", ctype), ("te", "trailers")]
    return hpack(h + list(extra))


def h2(*frames):
    return PREFACE + frame(SETTINGS, 0, 0) + b"".join(frames)


AUTH = [("authorization", "Bearer fuzz")]
CONN = {
    "h2_unary_open": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Open")),
                        frame(DATA, END_STREAM, 1, grpc_msg(b"hello")),
                        frame(SETTINGS, ACK, 0), frame(PING, 0, 0, b"12345678")),
    "h2_unary_auth_timeout": h2(frame(HEADERS, END_HEADERS, 1,
                                      req("/f.S/Unary", AUTH + [("grpc-timeout", "10m")])),
                                frame(DATA, END_STREAM, 1, grpc_msg(b"Hold"))),
    "h2_unary_fail": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Unary", AUTH)),
                        frame(DATA, END_STREAM, 1, grpc_msg(b"Fail"))),
    "h2_bad_token": h2(frame(HEADERS, END_HEADERS | END_STREAM, 1,
                             req("/f.S/Unary", [("authorization", "Bearer nope")]))),
    "h2_unknown_method": h2(frame(HEADERS, END_HEADERS, 1, req("/grpc.health.v1.Health/Check")),
                            frame(DATA, END_STREAM, 1, grpc_msg(b""))),
    "h2_bad_ctype_get": h2(frame(HEADERS, END_HEADERS | END_STREAM, 1, req("/f.S/Open", ctype="text/plain")),
                           frame(HEADERS, END_HEADERS | END_STREAM, 3, req("/f.S/Open", method="GET"))),
    "h2_stream_split": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Stream")),
                          frame(DATA, 0, 1, grpc_msg(b"abcdefgh")[:3]),
                          frame(DATA, 0, 1, grpc_msg(b"abcdefgh")[3:]),
                          frame(DATA, END_STREAM, 1, b"")),
    "h2_bidi_many": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Bidi")),
                       frame(DATA, 0, 1, b"".join(grpc_msg(b"m%d" % i) for i in range(20))),
                       frame(WINDOW, 0, 0, struct.pack(">I", 65535)),
                       frame(WINDOW, 0, 1, struct.pack(">I", 1000)),
                       frame(DATA, END_STREAM, 1, grpc_msg(b"last"))),
    "h2_upload_half_close": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Upload")),
                               frame(DATA, 0, 1, grpc_msg(b"a") + grpc_msg(b"b")),
                               frame(DATA, END_STREAM, 1, b"")),
    "h2_two_unary_msgs": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Open")),
                            frame(DATA, END_STREAM, 1, grpc_msg(b"x") + grpc_msg(b"y"))),
    "h2_compressed": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Open", [("grpc-encoding", "gzip")])),
                        frame(DATA, END_STREAM, 1, grpc_msg(b"zz", flag=1))),
    "h2_oversize": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Bidi")),
                      frame(DATA, 0, 1, grpc_msg(b"x" * 100, length=5000))),
    "h2_truncated_msg": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Bidi")),
                           frame(DATA, END_STREAM, 1, grpc_msg(b"abc")[:6])),
    "h2_rst_goaway": h2(frame(HEADERS, END_HEADERS, 1, req("/f.S/Bidi")),
                        frame(DATA, 0, 1, grpc_msg(b"r")),
                        frame(RST, 0, 1, struct.pack(">I", 8)),
                        frame(PRIORITY, 0, 3, struct.pack(">IB", 1, 16)),
                        frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0))),
    "h2_continuation": h2(frame(HEADERS, 0, 1, req("/f.S/Open")[:20]),
                          frame(CONT, END_HEADERS, 1, req("/f.S/Open")[20:]),
                          frame(DATA, END_STREAM | PADDED, 1, b"\x03" + grpc_msg(b"pad") + b"\x00" * 3)),
    "h2_bad_data_stream0": h2(frame(DATA, 0, 0, b"x")),
    "h2_settings_many": h2(frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 10) + struct.pack(">HI", 5, 20000)),
                           frame(PUSH, END_HEADERS, 1, b"\x00\x00\x00\x02")),
    "h2_truncated_preface": PREFACE[:13],
    "h2_bad_preface": PREFACE[:20] + b"XXXX" + frame(SETTINGS, 0, 0),
    "http1_get": b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    "http1_pipelined": b"GET /healthz HTTP/1.1\r\n\r\nGET /metrics?x=1 HTTP/1.1\r\n\r\n"
                       b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /healthz HTTP/1.0\r\n\r\n",
    "http1_bad_header": b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    "http1_upgrade": b"GET / HTTP/1.1\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\r\nxx",
    "http1_chunked": b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "garbage_tls": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + bytes(range(32)),
    "garbage_lower": b"get / http/1.1\r\n\r\n",
    "empty_after_selector": b"",
}

FRAME = {
    "two_msgs": grpc_msg(b"hello") + grpc_msg(b""),
    "split": grpc_msg(b"a" * 300),
    "oversize": grpc_msg(b"", length=100000),
    "compressed": grpc_msg(b"zz", flag=1),
    "bad_flag": grpc_msg(b"zz", flag=7),
    "timeout_m": b"100m",
    "timeout_H": b"99999999H",
    "timeout_n": b"1n",
    "percent": b"%41%zz%4%",
    "preface": PREFACE,
    "http1": b"GET / HTTP/1.1\r\n",
}


def write(dirname, seeds, selectors):
    d = os.path.join(HERE, "corpus", dirname)
    os.makedirs(d, exist_ok=True)
    for name, body in seeds.items():
        for sel in selectors:
            with open(os.path.join(d, "%s_%02x" % (name, sel)), "wb") as f:
                f.write(bytes([sel]) + body)


# Selectors: reads of 24 bytes, 1 MiB and 1 byte with clock steps of 0, 50 ms and 1.55 s between reads.
write("fuzz_rpc_conn", CONN, [0x00 | 3, 0x08 | 7, 0xf8 | 0])
write("fuzz_grpc_frame", FRAME, [0, 4, 16])


# --- fuzz_etcd_answer and fuzz_pbjson_decode: [selector][body], one selector per seed ---
import base64 as _b64
import json as _json


def _b(data):
    return _b64.b64encode(data if isinstance(data, bytes) else data.encode()).decode()


def _j(obj):
    return _json.dumps(obj, separators=(",", ":")).encode()


def _kv(key, value=None, crev="3", mrev="9"):
    kv = {"key": _b(key), "create_revision": crev, "mod_revision": mrev}
    if value is not None:
        kv["value"] = _b(value)
    return kv


def _wmsg(**result):
    return _j({"result": dict({"header": {"cluster_id": "1", "revision": "7"}}, **result)})


ETCD = {
    "range_page": _j({"header": {"revision": "12"}, "more": True, "count": "5",
                      "kvs": [_kv("/tide/jobs/00000001", "v1"), _kv("/tide/a", None, "4", "4")]}),
    "range_last_page": _j({"header": {"revision": "12"}, "kvs": [_kv("/tide/z", "\x00\xff")]}),
    "range_empty": _j({"header": {"revision": "1"}}),
    "range_more_no_kvs": _j({"header": {"revision": "1"}, "more": True}),
    "range_outside_prefix": _j({"header": {"revision": "2"}, "kvs": [_kv("/other/x", "v")]}),
    "range_short_key": _j({"header": {"revision": "2"}, "kvs": [_kv("/ti", "v")]}),
    "range_nul_key": _j({"header": {"revision": "2"}, "kvs": [_kv(b"/tide/a\x00b", "v")]}),
    "range_bad_b64": _j({"header": {"revision": "2"}, "kvs": [{"key": "!!!!", "mod_revision": "1"}]}),
    "range_b64_urlsafe_nopad": _j({"header": {"revision": "2"},
                                   "kvs": [{"key": _b("/tide/k?>").rstrip("=").replace("/", "_"),
                                            "value": "-_8", "mod_revision": "1"}]}),
    "range_value_number": _j({"header": {"revision": "2"}, "kvs": [{"key": _b("/tide/k"), "value": 5}]}),
    "range_rev_junk": _j({"header": {"revision": "12x"}}),
    "range_rev_huge": _j({"header": {"revision": "99999999999999999999"}}),
    "range_rev_min": _j({"header": {"revision": "-9223372036854775808"},
                         "kvs": [_kv("/tide/m", "v", "-9223372036854775809", "9223372036854775807")]}),
    "range_rev_numbers": b'{"header":{"revision":9007199254740993},"kvs":[{"key":"' + _b("/tide/n").encode()
                         + b'","create_revision":1e300,"mod_revision":-0.0,"lease":"0007"}]}',
    "txn_ok": _j({"header": {"revision": "20"}, "succeeded": True, "responses": [{"response_put": {}}]}),
    "txn_failed_first": _j({"header": {"revision": "21"}, "responses": [
        {"response_range": {"kvs": [_kv("/tide/jobs/1", None, "2", "7")]}}, {"response_range": {}}]}),
    "txn_failed_second": _j({"header": {"revision": "22"}, "succeeded": False, "responses": [
        {"response_range": {"kvs": [_kv("/tide/jobs/1", None, "2", "5")]}},
        {"response_range": {"kvs": [_kv("/tide/a", None, "3", "3")]}}, {"response_range": {}}]}),
    "txn_failed_junk": _j({"succeeded": "true", "responses": [{"response_range": {"kvs": "x"}}, 7]}),
    "error_answer": _j({"error": "etcdserver: mvcc: required revision has been compacted", "code": 11,
                        "message": "etcdserver: mvcc: required revision has been compacted"}),
    "error_only_error": _j({"error": "etcdserver: no leader", "message": 3}),
    "not_an_object": b'["a",1,null]',
    "watch_stream": _wmsg(created=True) + b"\n" + _wmsg(events=[
        {"kv": _kv("/tide/jobs/1", "{\"a\":\"}\"}", "5", "8")},
        {"type": "DELETE", "kv": {"key": _b("/tide/jobs/2"), "mod_revision": "9"}},
        {"kv": {"key": "%%%"}}, {"kv": {"key": _b("k"), "value": "a"}}, {"type": 1}]) + b"\r\n"
        + _wmsg(events=[]) + _wmsg(),
    "watch_compacted": _wmsg(canceled=True, compact_revision="3", cancel_reason="compacted"),
    "watch_canceled": _wmsg(canceled=True, created=True, events=[{"kv": _kv("/tide/x")}]),
    "watch_error": _j({"error": {"grpc_code": 14, "http_code": 503, "message": "unavailable",
                                 "http_status": "Service Unavailable"}}) + _wmsg(created=True),
    "watch_string_braces": b'{"result":{"k":"}}]]\\"{{[","events":[{"kv":{"key":"' + _b("a").encode()
                           + b'","value":"' + _b("}").encode() + b'"}}]}}{"x":"\\\\"}',
    "watch_stray_closer": b'}]' + _wmsg(created=True) + b'}',
    "watch_truncated": (_wmsg(created=True) * 2)[:-7],
    "watch_top_array": b'[' + _wmsg() + b'] "x" 12 ' + _wmsg(),
    "watch_garbage_prefix": b'data: ' + _wmsg(events=[{"kv": _kv("/tide/q", "r")}]) + b'\n\n',
    "watch_deep": b"{" * 1100 + b"}" * 1100 + b'[' * 40 + b']' * 40,
    "watch_many": b"".join(_wmsg(events=[{"kv": _kv("/tide/%d" % i, "v", "1", str(i))}]) for i in range(300)),
    "empty": b"",
}

PBJSON_SPEC = {
    "spec_full": _j({"name": "train", "command": ["python3", "-m", "x"], "minWorkers": 2, "maxWorkers": "4",
                     "priority": "PRIORITY_HIGH", "env": {"A": "1", "": "é"}, "workdir": "/w",
                     "timeLimitSeconds": "86400", "launcher": "LAUNCHER_MPI", "pool": "gpu",
                     "memoryPerRankBytes": "18446744073709551615", "topology": 2, "device": "H100",
                     "checkpointMfuThreshold": 0.3, "checkpoint_deadline_seconds": -1,
                     "adaptiveTarget": True, "noStealing": False, "burstPercent": 10,
                     "burstCommand": ["b"], "restartPolicy": "RESTART_POLICY_ON_FAILURE",
                     "maxRestarts": 3, "restartBackoffMs": "1000"}),
    "spec_minimal": b'{"command":["true"],"minWorkers":1}',
    "spec_nulls": b'{"name":null,"command":null,"env":null,"priority":null,"checkpointMfuThreshold":null}',
    "spec_floats": b'{"checkpointMfuThreshold":"NaN"} ',
    "spec_floats_inf": b'{"checkpointMfuThreshold":"-Infinity","restartBackoffMs":"-9223372036854775808"}',
    "spec_float_exp": b'{"checkpointMfuThreshold":1e-320,"timeLimitSeconds":9007199254740991}',
    "spec_neg_zero": b'{"checkpointMfuThreshold":-0.0}',
    "spec_int_huge": b'{"minWorkers":2147483648}',
    "spec_int_53": b'{"timeLimitSeconds":9007199254740992}',
    "spec_int_frac": b'{"minWorkers":1.5}',
    "spec_int_string_junk": b'{"minWorkers":"0x10"}',
    "spec_uint_negative": b'{"memoryPerRankBytes":"-1"}',
    "spec_u64_overflow": b'{"memoryPerRankBytes":"18446744073709551616"}',
    "spec_enum_unknown": b'{"priority":"PRIORITY_NOPE"}',
    "spec_enum_number": b'{"priority":17,"launcher":-3}',
    "spec_wrong_types": b'{"name":5,"command":"x","env":[],"adaptiveTarget":"true"}',
    "spec_repeated_null": b'{"command":["a",null]}',
    "spec_map_null": b'{"env":{"A":null,"B":"2"}}',
    "spec_map_dup_key": b'{"env":{"A":"1","B":"2","A":"3"}}',
    "spec_dup_field": b'{"minWorkers":1,"min_workers":2}',
    "spec_unknown_field": b'{"nope":{"deep":[1,2,{"x":null}]},"name":"n"}',
    "spec_escapes": b'{"name":"a\\u0000b\\ud83d\\ude00\\n","env":{"\\u00e9":"\\""}}',
    "spec_bad_utf8": b'{"name":"\xff\xfe","env":{"\xc3":"\xed\xa0\x80"}}',
    "spec_truncated": b'{"name":"train","command":["a"',
    "spec_trailing": b'{"name":"x"} {"name":"y"}',
    "spec_top_array": b'[{"name":"x"}]',
    "spec_deep": b'{"x":' * 200 + b'1' + b'}' * 200,
    "empty": b"",
}

PBJSON_JOB = {
    "job_full": _j({"id": "j1", "spec": {"name": "t", "command": ["a"], "minWorkers": 1},
                    "state": "JOB_STATE_RUNNING", "generation": 2, "workerIds": ["w1", "w2"],
                    "submitTimeMs": "1700000000000", "gpuSeconds": 12.5, "failedRank": -1,
                    "ranks": [{}], "lastCheckpoint": {"step": "10", "sha256": "ab", "bytes": "5"},
                    "mfu": 0.41, "utilization": {}, "stoppingRanks": [], "resize": {},
                    "generations": [{}, {}]}),
    "job_nested_bad": b'{"spec":{"env":{"A":1}}}',
    "job_spec_not_object": b'{"spec":"x","lastCheckpoint":[]}',
    "job_oneof_like": b'{"resize":{},"lastResize":null,"durable_checkpoint":{"requestId":"18446744073709551615"}}',
}

# selector bits (fuzz_etcd_answer): 0x80 4 KiB feed cap, 0x10 range starts at revision 42, low bits chunk
# sizes, error text size and txn chunk start.
_sel = [0x00, 0x13, 0x91, 0x2e, 0x45, 0xff, 0x08]
for _i, (_name, _body) in enumerate(sorted(ETCD.items())):
    _d = os.path.join(HERE, "corpus", "fuzz_etcd_answer")
    os.makedirs(_d, exist_ok=True)
    with open(os.path.join(_d, _name), "wb") as _f:
        _f.write(bytes([_sel[_i % len(_sel)]]) + _body)
# selector bits (fuzz_pbjson_decode): 1 Job, 2 IGNORE_UNKNOWN, 4 EMIT_DEFAULTS, 8 PROTO_NAMES, 0x10 via a tree.
_d = os.path.join(HERE, "corpus", "fuzz_pbjson_decode")
os.makedirs(_d, exist_ok=True)
for _i, (_name, _body) in enumerate(sorted(PBJSON_SPEC.items())):
    with open(os.path.join(_d, _name), "wb") as _f:
        _f.write(bytes([[0x00, 0x04, 0x0a, 0x1e, 0x12][_i % 5] & ~1]) + _body)
for _i, (_name, _body) in enumerate(sorted(PBJSON_JOB.items())):
    with open(os.path.join(_d, _name), "wb") as _f:
        _f.write(bytes([[0x01, 0x0f, 0x17, 0x03][_i % 4]]) + _body)


# --- corpus/fuzz_job_spec and corpus/fuzz_worker_message: protobuf built by hand (wire format only).
def pb_varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def pb_key(field, wt):
    return pb_varint(field << 3 | wt)


def pb_int(field, v):
    return pb_key(field, 0) + pb_varint(v)


def pb_bytes(field, v):
    v = v.encode() if isinstance(v, str) else v
    return pb_key(field, 2) + pb_varint(len(v)) + v


def pb_double(field, v):
    return pb_key(field, 1) + struct.pack("<d", v)


def pb_map(field, pairs):
    return b"".join(pb_bytes(field, pb_bytes(1, k) + pb_bytes(2, v)) for k, v in pairs)


def job_spec(command=("/bin/true",), min_w=1, max_w=0, extra=b""):
    return (pb_bytes(1, "fuzz") + b"".join(pb_bytes(2, c) for c in command) + pb_int(3, min_w) +
            pb_int(4, max_w) + extra)


def submit(spec):
    return pb_bytes(1, spec)


FULL_SPEC = job_spec(("python3", "train.py", "--lr=0.1"), 2, 4,
                     pb_int(5, 3) + pb_map(6, [("A", "1"), ("B", "")]) + pb_bytes(7, "/data") +
                     pb_int(8, 3600) + pb_int(9, 1) + pb_int(11, 1 << 34) + pb_int(12, 2) +
                     pb_bytes(13, "h100") + pb_double(14, 0.4) + pb_int(15, 900) + pb_int(16, 1) +
                     pb_int(17, 1) + pb_int(18, 25) + pb_bytes(19, "burst.sh") + pb_int(20, 3) +
                     pb_int(21, 5) + pb_int(22, 2000))
JOB_SPEC = {
    "minimal": submit(job_spec()),
    "full": submit(FULL_SPEC),
    "placed_two": submit(job_spec(("/bin/sleep", "1"), 2, 2)),
    "mpi_node": submit(job_spec(extra=pb_int(9, 2) + pb_int(12, 1))),
    "no_spec": b"",
    "empty_spec": submit(b""),
    "truncated": submit(FULL_SPEC)[:40],
    "wrong_wire_type": pb_int(1, 5),
    "wrong_type_in_spec": submit(pb_int(2, 7) + pb_int(3, 1)),
    "bad_priority": submit(job_spec(extra=pb_int(5, 99))),
    "neg_priority": submit(job_spec(extra=pb_int(5, -1))),
    "empty_command": submit(job_spec(command=("",))),
    "min_zero": submit(job_spec(min_w=0)),
    "max_below_min": submit(job_spec(min_w=3, max_w=2)),
    "huge_workers": submit(job_spec(min_w=70000)),
    "neg_min": submit(job_spec(min_w=-5)),
    "huge_time_limit": submit(job_spec(extra=pb_int(8, (1 << 63) - 1))),
    "neg_time_limit": submit(job_spec(extra=pb_int(8, -1))),
    "relative_workdir": submit(job_spec(extra=pb_bytes(7, "data"))),
    "bad_launcher": submit(job_spec(extra=pb_int(9, 7))),
    "bad_topology": submit(job_spec(extra=pb_int(12, 4))),
    "long_pool": submit(job_spec(extra=pb_bytes(10, "p" * 300))),
    "unknown_pool": submit(job_spec(extra=pb_bytes(10, "gpu-a"))),
    "long_device": submit(job_spec(extra=pb_bytes(13, "d" * 300))),
    "huge_memory": submit(job_spec(extra=pb_int(11, (1 << 64) - 1))),
    "nan_mfu": submit(job_spec(extra=pb_double(14, float("nan")))),
    "mfu_above_one": submit(job_spec(extra=pb_double(14, 1.5))),
    "neg_deadline": submit(job_spec(extra=pb_int(15, -3))),
    "burst_range": submit(job_spec(extra=pb_int(18, 101))),
    "burst_cmd_no_percent": submit(job_spec(extra=pb_bytes(19, "b.sh"))),
    "burst_cmd_empty": submit(job_spec(extra=pb_int(18, 10) + pb_bytes(19, ""))),
    "bad_restart_policy": submit(job_spec(extra=pb_int(20, 9))),
    "max_restarts_range": submit(job_spec(extra=pb_int(21, 1001))),
    "backoff_range": submit(job_spec(extra=pb_int(22, 3600001))),
    "env_empty_key": submit(job_spec(extra=pb_map(6, [("", "x")]))),
    "env_key_eq": submit(job_spec(extra=pb_map(6, [("A=B", "x")]))),
    "env_dup_keys": submit(job_spec(extra=pb_map(6, [("A", "1"), ("A", "2")]))),
    "unknown_fields": submit(job_spec(extra=pb_int(99, 1) + pb_bytes(100, "x"))) + pb_int(7, 3),
    "overlong_varint": submit(job_spec()[:-2] + b"\xff" * 11),
    "length_past_end": b"\x0a\xff\xff\xff\x0f" + job_spec(),
    "many_args": submit(job_spec(command=tuple("a%d" % i for i in range(300)))),
}

# fuzz_worker_message script steps
def wm(field, body):
    msg = pb_bytes(field, body)
    return bytes([0]) + struct.pack(">H", len(msg)) + msg


def wm_raw(msg):
    return bytes([0]) + struct.pack(">H", len(msg)) + msg


CLOCK = lambda ms10: bytes([1]) + struct.pack(">H", ms10)  # noqa: E731
DROP = bytes([2, 0, 0])
BEAT = bytes([3, 0, 0])
SHA = "ab" * 32


def hello(wid="fz", ranks=b"", version=1, extra=b""):
    return wm(1, pb_int(1, version) + pb_bytes(2, wid) + pb_bytes(3, "n1") + pb_int(4, 0) +
              pb_bytes(5, "sim:h100") + pb_double(6, 1e15) + pb_int(7, 80 << 30) +
              pb_map(8, [("rack", "r0")]) + pb_bytes(9, "127.0.0.1") + pb_bytes(10, "test") + ranks + extra)


def heartbeat(telemetry=b"", progress=b""):
    return wm(2, pb_int(1, 1) + (pb_bytes(2, telemetry) if telemetry is not None else b"") + progress)


def rank_started(rank, gen=1, job="1", pid=100):
    return wm(3, pb_bytes(1, job) + pb_int(2, gen) + pb_int(3, rank) + pb_int(4, pid) + pb_int(5, 29500))


def rank_status(rank, gen=1, job="1", state=2, code=0):
    return pb_bytes(1, job) + pb_int(2, gen) + pb_int(3, rank) + pb_int(4, state) + pb_int(5, code)


def task_common(rank=2, kind=1, step=1, job="1", gen=1):
    return pb_bytes(1, job) + pb_int(2, gen) + pb_int(3, rank) + pb_int(4, kind) + pb_int(5, step)


TELEMETRY = (pb_double(1, 0.9) + pb_int(2, 1 << 30) + pb_int(3, 80 << 30) + pb_double(4, 65.0) +
             pb_double(5, 300.0) + pb_double(6, 0.5) + pb_int(14, 0x7FF) + pb_double(15, 0.2) +
             pb_double(16, 0.1))
BAD_TELEMETRY = (pb_double(1, float("nan")) + pb_double(4, float("inf")) + pb_double(5, -float("inf")) +
                 pb_double(6, 7.0) + pb_int(14, 0xFFFFFFFF) + pb_double(15, -1.0) +
                 pb_double(16, float("nan")))
PROGRESS = pb_bytes(3, pb_bytes(1, "1") + pb_int(2, 1) + pb_int(3, 2) +
                    pb_bytes(4, pb_int(1, 1) + pb_int(2, 10) + pb_int(3, 1) + pb_double(4, 1e12) +
                             pb_double(7, 0.5) + pb_double(11, float("nan")) + pb_double(15, -2.0)))
RUN = hello() + rank_started(2)  # the job of three lands on w0, w1 and this worker (rank 2)

WORKER_MESSAGE = {
    "hello_only": hello(),
    "hello_old_protocol": hello(version=0),
    "hello_future_protocol": hello(version=7),
    "hello_empty_id": hello(wid=""),
    "hello_twice": hello() + hello(),
    "heartbeat_first": heartbeat(TELEMETRY),
    "hello_with_ranks": hello(ranks=pb_bytes(12, rank_status(2, state=1)) +
                              pb_bytes(12, rank_status(0, job="77", state=2, code=9))),
    "run_and_exit": RUN + wm(4, pb_bytes(1, rank_status(2, state=2, code=0))),
    "run_exit_no_status": RUN + wm(4, b""),
    "run_heartbeats": RUN + heartbeat(TELEMETRY, PROGRESS) + BEAT + heartbeat(BAD_TELEMETRY) + BEAT +
                      heartbeat(None),
    "run_checkpoint_flush": RUN + wm(7, pb_bytes(1, "1") + pb_int(2, 1) + pb_int(3, 2) + pb_int(4, 100) +
                                        pb_bytes(5, "/ckpt/100") + pb_int(6, 4096) + pb_bytes(7, SHA)) +
                            wm(8, pb_bytes(1, "1") + pb_int(2, 1) + pb_int(3, 2) + pb_int(4, 100) +
                               pb_int(5, 1) + pb_bytes(6, "/durable/100") + pb_int(7, 4096) + pb_bytes(8, SHA)),
    "flush_no_rank": RUN + wm(8, pb_bytes(1, "") + pb_int(2, 0) + pb_int(3, -1) + pb_int(4, -1)),
    "flush_long_id": RUN + wm(8, pb_bytes(1, "j" * 65) + pb_int(2, 1) + pb_int(3, 0) + pb_int(4, 1)),
    "flush_bad_sha": RUN + wm(8, pb_bytes(1, "1") + pb_int(2, 1) + pb_int(3, 2) + pb_int(4, 5) +
                              pb_int(5, 1) + pb_bytes(6, "/d") + pb_bytes(8, "zz")),
    "flush_ok_no_path": RUN + wm(8, pb_bytes(1, "1") + pb_int(2, 1) + pb_int(3, 2) + pb_int(4, 5) + pb_int(5, 1)),
    "flush_long_path": RUN + wm(8, pb_bytes(1, "1") + pb_int(2, 1) + pb_int(3, 2) + pb_int(4, 5) +
                                pb_int(5, 1) + pb_bytes(6, "/" + "p" * 4100)),
    "flush_long_error": RUN + wm(8, pb_bytes(1, "1") + pb_int(2, 1) + pb_int(3, 2) + pb_int(4, 5) +
                                 pb_bytes(9, "e" * 2000)),
    "tasks_cycle": RUN + wm(9, task_common() + b"".join(pb_int(6, i) for i in range(8)) + pb_int(7, 24)) +
                   wm(10, task_common() + pb_int(6, 0) + pb_int(6, 1) + pb_int(7, 6)) +
                   wm(11, task_common() + pb_int(6, 1)) +
                   wm(12, task_common() + pb_int(6, 1) + pb_int(7, 5) + pb_int(8, 3)),
    "tasks_packed_ids": RUN + wm(9, task_common() + pb_bytes(6, b"".join(pb_varint(i) for i in range(64))) +
                                 pb_int(7, 64)),
    "tasks_bad_kind": RUN + wm(9, task_common(kind=9)) + wm(10, task_common(kind=-1)) +
                      wm(11, task_common(kind=5)) + wm(12, task_common(kind=3)),
    "tasks_huge_numbers": RUN + wm(9, task_common(step=(1 << 63) - 1, gen=(1 << 31) - 1) +
                                   pb_int(6, (1 << 64) - 1) + pb_int(7, (1 << 64) - 1)),
    "steal_stale": RUN + wm(11, task_common(gen=0) + pb_int(6, 7)),
    "log_data_goodbye": RUN + wm(5, pb_int(1, 3) + pb_bytes(3, b"\x00\xff") + pb_int(4, 1)) +
                        wm(6, pb_bytes(1, "shutting down")) + DROP,
    "drop_reconnect": RUN + DROP + hello(ranks=pb_bytes(12, rank_status(2, state=1))) + BEAT,
    "silent_worker_dies": RUN + CLOCK(300) + heartbeat(TELEMETRY),
    "unknown_oneof": hello() + wm_raw(pb_bytes(40, b"x")),
    "empty_message": hello() + wm_raw(b""),
    "truncated": hello()[:30],
    "bad_length": hello() + bytes([0, 0, 10]) + b"\x12\xff\xff\xff\xff\x0f",
    "wrong_wire_type": wm_raw(pb_int(1, 1)),
    "nested_garbage": hello() + wm(2, pb_bytes(3, pb_bytes(4, pb_bytes(4, b"\x08" * 20)))),
}

def write_plain(dirname, seeds):
    d = os.path.join(HERE, "corpus", dirname)
    os.makedirs(d, exist_ok=True)
    for name, body in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(body)


write_plain("fuzz_job_spec", JOB_SPEC)
write_plain("fuzz_worker_message", WORKER_MESSAGE)

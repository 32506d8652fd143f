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

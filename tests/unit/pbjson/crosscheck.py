#!/usr/bin/python3
"""Cross-checks tide_pbjson against google.protobuf.json_format (Debian's python3-protobuf).

Generates Python classes for the .proto files with grpc_tools.protoc, runs pbjson_vectors, and for every
vector parses the wire bytes with those classes and compares MessageToDict(...) with tide's JSON
(as parsed values, so number spelling like 3 vs 3.0 does not matter). Exits non-zero on any mismatch.
Usage: crosscheck.py VECTORS_BINARY PROTO_ROOT TEST_PROTO_DIR
"""
import importlib
import json
import math
import os
import subprocess
import sys
import tempfile

from google.protobuf import json_format, symbol_database
from grpc_tools import protoc


def same(a, b):
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(b, float) and isinstance(a, int) and not isinstance(a, bool):
        return a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def main():
    vectors_bin, proto_root, test_dir = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        gen = os.path.join(tmp, "gen")
        vec = os.path.join(tmp, "vec")
        os.mkdir(gen)
        os.mkdir(vec)
        protos = [(proto_root, p) for p in ("tide/v1/types.proto", "tide/v1/job_service.proto",
                                            "tide/v1/cluster_service.proto", "tide/v1/worker_service.proto")]
        protos += [(test_dir, p) for p in ("pbjson_test.proto", "pbjson_test2.proto")]
        for root, p in protos:
            rc = protoc.main(["protoc", "-I" + proto_root, "-I" + test_dir, "--python_out=" + gen, p])
            if rc != 0:
                sys.exit("protoc failed on " + p)
        sys.path.insert(0, gen)
        for _, p in protos:
            importlib.import_module(p[:-len(".proto")].replace("/", ".") + "_pb2")
        subprocess.run([vectors_bin, vec], check=True)
        db = symbol_database.Default()
        failures = 0
        count = 0
        with open(os.path.join(vec, "manifest")) as f:
            for line in f:
                name, full = line.split()
                with open(os.path.join(vec, name + ".bin"), "rb") as b:
                    msg = db.GetSymbol(full)()
                    msg.ParseFromString(b.read())
                variants = {
                    ".json": {},
                    ".defaults.json": {"including_default_value_fields": True},
                    ".names.json": {"preserving_proto_field_name": True},
                }
                for suffix, kw in variants.items():
                    with open(os.path.join(vec, name + suffix), encoding="utf-8") as j:
                        ours = json.load(j)
                    theirs = json_format.MessageToDict(msg, **kw)
                    count += 1
                    if not same(theirs, ours):
                        failures += 1
                        print("MISMATCH %s%s (%s)\n  python: %s\n  tide:   %s" %
                              (name, suffix, full, json.dumps(theirs, sort_keys=True),
                               json.dumps(ours, sort_keys=True)))
                    # And tide's JSON must parse back into the same message with python's parser
                    # (except proto2 with defaults printed: that sets fields that were unset).
                    if suffix == ".defaults.json" and msg.DESCRIPTOR.file.syntax == "proto2":
                        continue
                    back = db.GetSymbol(full)()
                    json_format.ParseDict(ours, back)
                    if back.SerializeToString(deterministic=True) != msg.SerializeToString(deterministic=True):
                        if not any(isinstance(v, float) and math.isnan(v) for v in _floats(msg)):
                            failures += 1
                            print("REPARSE MISMATCH %s%s" % (name, suffix))
        print("%d comparisons, %d failures" % (count, failures))
        sys.exit(1 if failures or count == 0 else 0)


def _floats(msg):
    for fd, value in msg.ListFields():
        if fd.type in (fd.TYPE_FLOAT, fd.TYPE_DOUBLE):
            for v in (value if fd.label == fd.LABEL_REPEATED else [value]):
                yield v


if __name__ == "__main__":
    main()

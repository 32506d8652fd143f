#!/usr/bin/python3
"""Store commit throughput and latency: sqlite: (a throwaway file) beside etcd:// (a throwaway single member
on loopback, and a 3-member cluster), one commit in flight, batches of 1 and 64 puts (tide-bench-store).

usage: bench/store_bench.py [BUILD_DIR] [COMMITS]"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../tests/integration"))
import etcdtest  # noqa: E402


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../build")
    commits = sys.argv[2] if len(sys.argv) > 2 else "500"
    bench = os.path.join(build, "bin", "tide-bench-store")
    with tempfile.TemporaryDirectory(prefix="tide-store-bench-") as d:
        subprocess.run([bench, f"sqlite:{d}/state.db", commits], check=True)
    with etcdtest.Etcd() as e:
        e.start()
        subprocess.run([bench, f"etcd://{e.endpoints}/bench/", commits], check=True)
    with etcdtest.Cluster(3) as c:
        subprocess.run([bench, f"etcd://{c.endpoints}/bench/", commits], check=True)


if __name__ == "__main__":
    main()

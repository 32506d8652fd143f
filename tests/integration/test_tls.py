"""TLS on every connection (docs/security.md, "TLS"): certificates made with the openssl CLI in the test's directory;
a TLS scheduler and two TLS workers run a plain job and an MPI job (the shim's StartDaemon to the other worker's
launcher is TLS too); tidectl --tls-ca works; Debian's grpcio over grpc.secure_channel calls GetClusterStatus and
fails with the wrong CA; curl --cacert gets /metrics; a plaintext tidectl gets a clear error; with
--tls-require-client-cert a worker without a client certificate is refused and one with it registers; unusable
certificate files stop a start naming the file; a scheduler on a non-loopback address without TLS refuses to
start and starts with --insecure."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402
import grpc  # noqa: E402

GEN = tempfile.mkdtemp(prefix="tide-stubs-")
tidetest.gen_stubs(GEN)
from tide.v1 import cluster_service_pb2 as cs, cluster_service_pb2_grpc as csg  # noqa: E402

SCHED = os.path.join(tidetest.BIN, "tide-scheduler")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """ca.pem + server/worker certificates for 127.0.0.1 (and the machine's own IP), an unrelated CA."""
    own = own_ip()
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=tide test {ca}", "-days", "2", cwd=d)
    san = "IP:127.0.0.1,DNS:localhost" + (f",IP:{own}" if own else "")
    with open(os.path.join(d, "leaf.ext"), "w") as f:
        f.write(f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
                f"subjectAltName={san}\n")
    for name, cn in (("server", "tide-scheduler"), ("worker", "worker-1")):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", "leaf.ext", cwd=d)
    return {k: os.path.join(d, f"{k}.pem") for k in ("ca", "other-ca", "server", "worker")} | \
        {f"{k}-key": os.path.join(d, f"{k}.key") for k in ("server", "worker")}


def own_ip():
    """The machine's own non-loopback IPv4 address, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outgoing interface
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") or ip == "0.0.0.0" else ip


def submit(c, *argv):
    return json.loads(c.tidectl("-o", "json", "submit", *argv).stdout)["id"]


def main():
    pki_dir = tempfile.mkdtemp(prefix="tide-pki-")
    try:
        pki = make_pki(pki_dir)
        run(pki)
    finally:
        shutil.rmtree(pki_dir, ignore_errors=True)


def run(pki):
    stls = {"cert": pki["server"], "key": pki["server-key"], "ca": pki["ca"]}
    wtls = {"ca": pki["ca"], "cert": pki["worker"], "key": pki["worker-key"]}

    with tidetest.Cluster("tls") as c:
        c.start_scheduler(tls=stls)
        c.start_worker("node1", 0, tls=wtls)
        c.start_worker("node2", 0, tls=wtls)
        c.wait_workers(2)  # tidectl with TIDE_TLS_CA (the harness's tidectl)

        # tidectl --tls-ca (the flag, not the variable) and a job on both workers.
        r = c.tidectl("--tls-ca", pki["ca"], "-o", "json", "workers", tls_ca="")
        assert len(json.loads(r.stdout)["workers"]) == 2, r.stdout
        jid = submit(c, "--workers", "2", "--", "sh", "-c", "echo hello-tls")
        job = c.wait_job(jid, {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}, timeout=60)
        assert job["state"] == "JOB_STATE_SUCCEEDED", (job, c.log("scheduler"))
        out = c.tidectl("logs", jid, "--rank", "1").stdout
        assert "hello-tls" in out, out
        print("ok   a TLS scheduler and 2 TLS workers ran a job; tidectl --tls-ca and TIDE_TLS_CA")

        # MPI across the two workers: tide-mpi-shim's StartDaemon to node2's launcher is TLS.
        if shutil.which("mpirun"):
            jid = submit(c, "--launcher", "mpi", "--workers", "2", "--", "sh", "-c", "echo mpi-rank=$RANK")
            job = c.wait_job(jid, {"JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"}, timeout=90)
            assert job["state"] == "JOB_STATE_SUCCEEDED", (job["message"], c.tidectl("logs", jid, "--rank", "0").stdout)
            out = c.tidectl("logs", jid, "--rank", "1").stdout
            assert "mpi-rank=1" in out, out
            print("ok   an MPI job across 2 TLS workers (StartDaemon over TLS)")

        # Debian's grpcio with TLS: the right CA works, another is refused.
        md = [("authorization", f"Bearer {c.token}")]
        ca = open(pki["ca"], "rb").read()
        with grpc.secure_channel(c.addr, grpc.ssl_channel_credentials(ca)) as ch:
            st = csg.ClusterServiceStub(ch).GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md, timeout=10)
            assert st.workers_total == 2 and st.version, st
        other = open(pki["other-ca"], "rb").read()
        with grpc.secure_channel(c.addr, grpc.ssl_channel_credentials(other)) as ch:
            try:
                csg.ClusterServiceStub(ch).GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md, timeout=10)
                raise AssertionError("grpcio with the wrong CA was not refused")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())
        print("ok   grpcio secure_channel: GetClusterStatus with the CA; UNAVAILABLE with another CA")

        # curl --cacert: /metrics over https (HTTP/1.1 by ALPN).
        if shutil.which("curl"):
            r = subprocess.run(["curl", "-sS", "--cacert", pki["ca"], f"https://{c.addr}/metrics"],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0 and "tide_" in r.stdout, (r.returncode, r.stderr, r.stdout[:300])
            r = subprocess.run(["curl", "-sS", "--cacert", pki["other-ca"], f"https://{c.addr}/healthz"],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode != 0, r.stdout
            print("ok   curl --cacert gets /metrics over https; another CA is refused")

        # Plaintext tidectl against the TLS scheduler: a clear error that says what to do.
        r = c.tidectl("workers", tls_ca="", check=False)
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "UNAVAILABLE" in r.stderr and "--tls-ca" in r.stderr, r.stderr
        # The wrong CA: OpenSSL's reason.
        r = c.tidectl("workers", tls_ca=pki["other-ca"], check=False)
        assert r.returncode == 1 and "certificate verify failed" in r.stderr, r.stderr
        # An unreadable CA file: exit 1 naming it.
        r = c.tidectl("workers", tls_ca=os.path.join(c.tmp, "no-such-ca.pem"), check=False)
        assert r.returncode == 1 and "no-such-ca.pem" in r.stderr, r.stderr
        assert "plaintext connection" in c.log("scheduler"), "the refused plaintext connection was not logged"
        print("ok   tidectl's clear errors: plaintext to a TLS scheduler, the wrong CA, a missing CA file")

    # Client certificates required: a worker without one is refused, one with it registers.
    with tidetest.Cluster("tls-mtls") as c:
        c.start_scheduler(tls=dict(stls, require=True))
        bare = c.start_worker("node1", 0, tls={"ca": pki["ca"]})
        c.start_worker("node2", 0, tls=wtls)
        # The harness's tidectl needs a client certificate now too (set after the workers started: a worker
        # reads TIDE_TLS_CERT as well, and the bare one must have none).
        os.environ.update(TIDE_TLS_CERT=pki["worker"], TIDE_TLS_KEY=pki["worker-key"])
        c.wait_workers(1)
        wait_for(lambda: "certificate required" in c.log("worker-node1-gpu0.log"), 20,
                 "the bare worker's refusal in its log")
        ws = c.workers_json()
        assert [w["id"] for w in ws] == ["node2/gpu0"], ws
        assert bare.poll() is None  # it keeps retrying
        # grpcio without a client certificate is refused too, with one it works.
        md = [("authorization", f"Bearer {c.token}")]
        ca = open(pki["ca"], "rb").read()
        with grpc.secure_channel(c.addr, grpc.ssl_channel_credentials(ca)) as ch:
            try:
                csg.ClusterServiceStub(ch).GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md, timeout=10)
                raise AssertionError("grpcio without a client certificate was not refused")
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.UNAVAILABLE, (e.code(), e.details())
        creds = grpc.ssl_channel_credentials(ca, open(pki["worker-key"], "rb").read(),
                                             open(pki["worker"], "rb").read())
        with grpc.secure_channel(c.addr, creds) as ch:
            csg.ClusterServiceStub(ch).GetClusterStatus(cs.GetClusterStatusRequest(), metadata=md, timeout=10)
        print("ok   --tls-require-client-cert: a worker without a certificate is refused, one with it registers")
        del os.environ["TIDE_TLS_CERT"], os.environ["TIDE_TLS_KEY"]
        r = c.tidectl("workers", check=False)
        assert r.returncode == 1 and "certificate required" in r.stderr, r.stderr

    # Files that cannot be used stop the start (exit 1) naming the file.
    with tempfile.TemporaryDirectory(prefix="tide-tls-bad-") as d:
        missing = os.path.join(d, "missing.pem")
        for cert, key, needle in ((missing, pki["server-key"], missing),
                                  (pki["server"], pki["worker-key"], pki["worker-key"])):
            r = subprocess.run([SCHED, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(d, "s"),
                                "--tls-cert", cert, "--tls-key", key], capture_output=True, text=True, timeout=30)
            assert r.returncode == 1 and needle in r.stderr, (r.returncode, r.stderr)
        r = subprocess.run([os.path.join(tidetest.BIN, "tide-worker"), "--advertise", "127.0.0.1",
                            "--data-dir", os.path.join(d, "w"), "--tls-ca", missing], capture_output=True,
                           text=True, timeout=30, env=dict(os.environ, TIDE_TOKEN="x"))
        assert r.returncode == 1 and missing in r.stderr, (r.returncode, r.stderr)
    print("ok   an unreadable certificate or a key that does not match: exit 1 naming the file")

    # Plaintext on a non-loopback address only with --insecure.
    ip = own_ip()
    if not ip:
        print("skip no non-loopback address on this machine: the --insecure check")
        return
    with tempfile.TemporaryDirectory(prefix="tide-tls-insecure-") as d:
        r = subprocess.run([SCHED, "--listen", f"{ip}:0", "--data-dir", d], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode != 0 and f"{ip}:0" in r.stderr and "--insecure" in r.stderr \
            and "--tls-cert" in r.stderr, (r.returncode, r.stderr)
        r = subprocess.run([os.path.join(tidetest.BIN, "tide-worker"), "--scheduler", f"{ip}:7070",
                            "--advertise", "127.0.0.1", "--data-dir", os.path.join(d, "w")], capture_output=True,
                           text=True, timeout=30, env=dict(os.environ, TIDE_TOKEN="x"))
        assert r.returncode != 0 and f"{ip}:7070" in r.stderr and "--tls-ca" in r.stderr, (r.returncode, r.stderr)
        r = subprocess.run([os.path.join(tidetest.BIN, "tidectl"), "--scheduler", f"{ip}:7070", "workers"],
                           capture_output=True, text=True, timeout=30,
                           env={k: v for k, v in os.environ.items() if not k.startswith("TIDE_")})
        assert r.returncode != 0 and "--tls-ca" in r.stderr and "TIDE_INSECURE" in r.stderr, r.stderr
    with tidetest.Cluster("tls-insecure") as c:
        # --insecure: it starts (and a TLS one on the same kind of address needs no --insecure).
        c.start_scheduler("--insecure")  # loopback listen from the harness: --insecure is accepted anyway
        p = subprocess.Popen([SCHED, "--listen", f"{ip}:0", "--data-dir", os.path.join(c.tmp, "s2"), "--insecure"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            wait_for(lambda: os.path.exists(os.path.join(c.tmp, "s2", "scheduler.addr")) or p.poll() is not None,
                     20, "the --insecure scheduler's address file")
            assert p.poll() is None, p.stderr.read()
        finally:
            p.kill()
            p.wait(timeout=10)
    print(f"ok   plaintext on {ip}: refused without --insecure (scheduler, worker, tidectl), starts with it")


if __name__ == "__main__":
    main()

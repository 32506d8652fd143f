"""Crash soak (issue 8): kill -9 of the scheduler at a random moment in each of 20 rounds of gRPC submissions,
cancels, cordons and scales in flight; after every restart each acknowledged change is still there (jobs whole,
cancels CANCELLED, cordons and requested sizes as acknowledged), ids unique, unknown requests whole or absent
for good, and the workers come back. At the end every acknowledged, non-cancelled job SUCCEEDED and no rank ran
twice at one generation. Seeded: TIDE_SOAK_SEED=N replays a run's choices (not its timing)."""

import atexit
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for  # noqa: E402
import grpc  # noqa: E402

GEN = tempfile.mkdtemp(prefix="tide-stubs-")
atexit.register(shutil.rmtree, GEN, True)
tidetest.gen_stubs(GEN)
from tide.v1 import job_service_pb2 as js, job_service_pb2_grpc as jsg  # noqa: E402
from tide.v1 import cluster_service_pb2 as cs, cluster_service_pb2_grpc as csg  # noqa: E402
from tide.v1 import types_pb2 as t  # noqa: E402

SEED = int(os.environ.get("TIDE_SOAK_SEED") or random.SystemRandom().randrange(1 << 32))
ROUNDS = int(os.environ.get("TIDE_SOAK_ROUNDS", "20"))
SUBMITTERS = 3
RPC_TIMEOUT = 10
WORKERS = ("node1/gpu0", "node1/gpu1")
TERMINAL = {t.JOB_STATE_SUCCEEDED, t.JOB_STATE_FAILED, t.JOB_STATE_CANCELLED}
# The code a live scheduler may answer to a cancel or scale of ours (the job had ended): nothing changed.
REFUSED = {grpc.StatusCode.FAILED_PRECONDITION}


class Ledger:
    """What the clients know: acknowledged requests and their results, and requests whose fate is unknown."""

    def __init__(self):
        self.lock = threading.Lock()
        self.subs = {}        # name -> {"sent": JobSpec, "state": "ack"|"unknown"|"appeared"|"absent", "id"}
        self.jobs = {}        # id -> {"name", "spec": JobSpec as acknowledged, "cancel": None|"ack"|"unknown",
        #                                "target": acked target_workers or None, "target_unknown": set,
        #                                "terminal": state seen after a restart or None}
        self.cordon = {w: False for w in WORKERS}
        self.cordon_unknown = {w: set() for w in WORKERS}
        self.stats = dict(acked=0, appeared=0, absent=0, cancels=0, cancels_unknown=0, cordons=0,
                          cordons_unknown=0, scales=0, scales_unknown=0, refused=0, back_max=0.0)
        self.in_flight = {}   # kind of request -> how many were in flight when the scheduler was killed
        self.errors = []      # failures seen by client threads (a live scheduler misbehaved)


def job_record(name, spec):
    return {"name": name, "spec": spec, "cancel": None, "target": None, "target_unknown": set(), "terminal": None}


def spec_for(rng, name, runs):
    body = "true" if rng.random() < 0.7 else "sleep 0.2"
    # Each rank start appends to a file named by its job, generation and rank: two lines = ran twice.
    script = f'echo $$ >> {runs}/"$TIDE_JOB_ID".g"$TIDE_GENERATION".r"$RANK"; {body}'
    mn = rng.choice((1, 1, 2))
    mx = mn if mn == 2 or rng.random() < 0.5 else 2
    return t.JobSpec(name=name, command=["/bin/sh", "-c", script], min_workers=mn, max_workers=mx,
                     priority=rng.choice((t.PRIORITY_LOW, t.PRIORITY_NORMAL, t.PRIORITY_HIGH)),
                     env={"SOAK_NAME": name})


class Round:
    """One round: client threads send requests until the scheduler is killed at a random moment."""

    def __init__(self, c, led, rnd, rng, runs):
        self.c, self.led, self.rnd, self.runs = c, led, rnd, runs
        self.seeds = [rng.getrandbits(32) for _ in range(SUBMITTERS + 1 + len(WORKERS))]
        self.delay = rng.uniform(0.05, 1.5)
        self.killed = threading.Event()
        self.ch = grpc.insecure_channel(c.addr)
        self.md = [("authorization", f"Bearer {c.token}")]
        self.jobs = jsg.JobServiceStub(self.ch)
        self.cluster = csg.ClusterServiceStub(self.ch)

    def call(self, fn, req, what, refusable=False):
        """(reply, error): an error from a live scheduler is recorded as its failure, except a refusal
        (REFUSED) of a request that may be refused."""
        before = not self.killed.is_set()
        try:
            return fn(req, metadata=self.md, timeout=RPC_TIMEOUT), None
        except grpc.RpcError as e:
            live = not self.killed.is_set()  # set before the signal: clear means the scheduler was alive
            with self.led.lock:
                if live and not (refusable and e.code() in REFUSED):
                    self.led.errors.append(f"round {self.rnd}: {what} failed with a live scheduler: "
                                           f"{e.code()} {e.details()}")
                if not live and before:
                    kind = what.split()[0]
                    self.led.in_flight[kind] = self.led.in_flight.get(kind, 0) + 1
            return None, e

    def submit(self, rng, name):
        """The new job's id, or None when the thread must stop (the request's fate is unknown)."""
        led = self.led
        spec = spec_for(rng, name, self.runs)
        with led.lock:
            led.subs[name] = {"sent": spec, "state": "unknown", "id": None}
        job, e = self.call(self.jobs.SubmitJob, js.SubmitJobRequest(spec=spec), f"SubmitJob {name}")
        with led.lock:
            if e is not None:
                return None
            if job.id in led.jobs:
                led.errors.append(f"round {self.rnd}: SubmitJob {name} returned id {job.id} of "
                                  f"{led.jobs[job.id]['name']}")
            led.subs[name].update(state="ack", id=job.id)
            led.jobs[job.id] = job_record(name, job.spec)
            led.stats["acked"] += 1
        return job.id

    def cancel(self, jid):
        """False when the thread must stop (the request's fate is unknown)."""
        led = self.led
        with led.lock:
            led.jobs[jid]["cancel"] = "unknown"
        r, e = self.call(self.jobs.CancelJob, js.CancelJobRequest(id=jid), f"CancelJob {jid}", True)
        with led.lock:
            rec = led.jobs[jid]
            if e is None:
                if r.state != t.JOB_STATE_CANCELLED:
                    led.errors.append(f"round {self.rnd}: CancelJob {jid} answered {r.state}")
                rec["cancel"] = "ack"
                led.stats["cancels"] += 1
            elif e.code() in REFUSED and not self.killed.is_set():
                rec["cancel"] = None  # it had ended already: nothing changed
                led.stats["refused"] += 1
            else:
                led.stats["cancels_unknown"] += 1
                return False
        return True

    def submitter(self, k):
        rng = random.Random(self.seeds[k])
        i = 0
        while not self.killed.is_set():
            # A burst of submissions back to back, most cancelled at once (while still queued), then a pause
            # that keeps the number of jobs the 2 workers must run in bounds (pacing, not synchronisation).
            for _ in range(rng.randint(1, 6)):
                if self.killed.is_set():
                    return
                jid = self.submit(rng, f"soak-r{self.rnd:02d}-t{k}-{i:03d}")
                i += 1
                if jid is None or (rng.random() < 0.75 and not self.killed.is_set() and not self.cancel(jid)):
                    return
            time.sleep(rng.uniform(0.05, 0.2))

    def mutator(self):
        """Cancels and scales jobs of earlier rounds and this one."""
        rng = random.Random(self.seeds[SUBMITTERS])
        led = self.led
        while not self.killed.is_set():
            time.sleep(rng.uniform(0.02, 0.08))  # pacing, as above
            with led.lock:
                live = [j for j, r in led.jobs.items() if r["terminal"] is None and r["cancel"] is None]
                live = sorted(live, key=int)[-12:]  # the newest: most are still queued or running
                elastic = [j for j in live if led.jobs[j]["spec"].max_workers > led.jobs[j]["spec"].min_workers]
            if self.killed.is_set():
                return
            if rng.random() < 0.6:
                if live and not self.cancel(rng.choice(live)):
                    return
                continue
            if not elastic:
                continue
            jid = rng.choice(elastic)
            n = rng.choice((1, 2))
            with led.lock:
                led.jobs[jid]["target_unknown"].add(n)
            r, e = self.call(self.jobs.ScaleJob, js.ScaleJobRequest(id=jid, workers=n), f"ScaleJob {jid} {n}",
                             True)
            with led.lock:
                rec = led.jobs[jid]
                if e is None:
                    if r.target_workers != n:
                        led.errors.append(f"round {self.rnd}: ScaleJob {jid} to {n} answered {r.target_workers}")
                    rec["target"] = n
                    rec["target_unknown"].discard(n)
                    led.stats["scales"] += 1
                elif e.code() in REFUSED and not self.killed.is_set():
                    rec["target_unknown"].discard(n)
                    led.stats["refused"] += 1
                else:
                    led.stats["scales_unknown"] += 1
                    return

    def cordoner(self, k):
        """Cordons and uncordons worker k, one request after another (cheap: the store keeps one key)."""
        rng = random.Random(self.seeds[SUBMITTERS + 1 + k])
        led, w = self.led, WORKERS[k]
        while not self.killed.is_set():
            with led.lock:
                want = not led.cordon[w] if rng.random() < 0.8 else led.cordon[w]
                led.cordon_unknown[w].add(want)
            fn = self.cluster.CordonWorker if want else self.cluster.UncordonWorker
            r, e = self.call(fn, cs.WorkerRef(id=w), f"{'C' if want else 'Unc'}ordonWorker {w}")
            with led.lock:
                if e is not None:
                    led.stats["cordons_unknown"] += 1
                    return
                if r.cordoned != want:
                    led.errors.append(f"round {self.rnd}: cordon {w}={want} answered cordoned={r.cordoned}")
                led.cordon[w] = want
                led.cordon_unknown[w].discard(want)
                led.stats["cordons"] += 1
            time.sleep(rng.uniform(0.0, 0.01))  # pacing, as above

    def run(self):
        threads = [threading.Thread(target=self.submitter, args=(k,), daemon=True) for k in range(SUBMITTERS)]
        threads.append(threading.Thread(target=self.mutator, daemon=True))
        threads += [threading.Thread(target=self.cordoner, args=(k,), daemon=True) for k in range(len(WORKERS))]
        for th in threads:
            th.start()
        time.sleep(self.delay)  # the random moment of the crash, not a synchronisation
        self.killed.set()       # before the signal: an error seen while this is clear is the live scheduler's
        self.c.kill_scheduler()
        for th in threads:
            th.join(RPC_TIMEOUT + 5)
            assert not th.is_alive(), "a client thread did not end after the kill"
        self.ch.close()


def list_jobs(stub, md):
    out, token = [], ""
    while True:
        page = stub.ListJobs(js.ListJobsRequest(page_size=1000, page_token=token), metadata=md, timeout=RPC_TIMEOUT)
        out += list(page.jobs)
        token = page.next_page_token
        if not token:
            return out


def same_sent(job, sent):
    s = job.spec
    return (s.name == sent.name and list(s.command) == list(sent.command) and s.min_workers == sent.min_workers
            and s.max_workers == sent.max_workers and s.priority == sent.priority and dict(s.env) == dict(sent.env))


def check_after_restart(c, led, rnd):
    """Everything acknowledged before the crash is in the restarted scheduler; unknowns are whole or absent."""
    ch = grpc.insecure_channel(c.addr)
    md = [("authorization", f"Bearer {c.token}")]
    jobs, cluster = jsg.JobServiceStub(ch), csg.ClusterServiceStub(ch)
    try:
        def back():
            ws = cluster.ListWorkers(cs.ListWorkersRequest(), metadata=md, timeout=RPC_TIMEOUT).workers
            up = sorted(w.id for w in ws if w.state in (t.WORKER_STATE_READY, t.WORKER_STATE_BUSY))
            return ws if up == list(WORKERS) else None
        w0 = time.monotonic()
        ws = wait_for(back, 30, "both workers READY or BUSY after the restart")
        led.stats["back_max"] = max(led.stats["back_max"], time.monotonic() - w0)
        listed = list_jobs(jobs, md)
        ids = [j.id for j in listed]
        assert len(ids) == len(set(ids)), f"duplicate job ids: {sorted(i for i in ids if ids.count(i) > 1)}"
        names = [j.spec.name for j in listed]
        dup = sorted({n for n in names if names.count(n) > 1})
        assert not dup, f"one submission made several jobs: {dup}"
        by_id = {j.id: j for j in listed}
        by_name = {j.spec.name: j for j in listed}
        cli = {j["id"] for j in c.tidectl_json("jobs").get("jobs", [])}
        assert cli == set(ids), f"tidectl jobs differs from ListJobs: {sorted(cli ^ set(ids))}"
        with led.lock:
            for name, sub in led.subs.items():
                job = by_name.get(name)
                if sub["state"] in ("ack", "appeared"):
                    assert job is not None and job.id == sub["id"], f"acknowledged job {sub['id']} ({name}) lost"
                    assert job.spec == led.jobs[sub["id"]]["spec"], \
                        f"job {job.id} ({name}) spec changed:\n{job.spec}\nacknowledged:\n{led.jobs[sub['id']]['spec']}"
                    assert same_sent(job, sub["sent"]), f"job {job.id} ({name}) is not what was submitted: {job.spec}"
                elif sub["state"] == "absent":
                    assert job is None, f"submission {name}, absent after an earlier restart, appeared as {job.id}"
                elif job is not None:  # unknown, and there
                    assert same_sent(job, sub["sent"]), f"unacknowledged job {job.id} ({name}) is not whole: {job.spec}"
                    assert job.id not in led.jobs, f"unacknowledged {name} got the id of {led.jobs[job.id]['name']}"
                    sub.update(state="appeared", id=job.id)
                    led.jobs[job.id] = job_record(name, job.spec)
                    led.stats["appeared"] += 1
                else:
                    sub["state"] = "absent"
                    led.stats["absent"] += 1
            extra = set(ids) - set(led.jobs)
            assert not extra, f"jobs nobody submitted: {sorted(extra)}"
            for jid, rec in led.jobs.items():
                job = by_id[jid]
                if rec["cancel"] == "ack":
                    assert job.state == t.JOB_STATE_CANCELLED, f"acknowledged cancel of {jid} lost: {job.state}"
                if rec["terminal"] is not None:
                    assert job.state == rec["terminal"], f"job {jid} left final state {rec['terminal']}: {job.state}"
                if job.state in TERMINAL:
                    rec["terminal"] = job.state
                    if job.state == t.JOB_STATE_CANCELLED:
                        rec["cancel"] = "ack"
                else:
                    if rec["cancel"] == "unknown":
                        rec["cancel"] = None
                    if rec["target"] is not None or rec["target_unknown"]:
                        ok = {rec["target"]} | rec["target_unknown"] if rec["target"] is not None else \
                            {0} | rec["target_unknown"]
                        assert job.target_workers in ok, \
                            f"job {jid}: target_workers {job.target_workers} after the restart, acknowledged {ok}"
                    rec["target"] = job.target_workers or None
                    rec["target_unknown"] = set()
            for w in ws:
                ok = {led.cordon[w.id]} | led.cordon_unknown[w.id]
                assert w.cordoned in ok, f"worker {w.id} cordoned={w.cordoned}, acknowledged {led.cordon[w.id]}"
                led.cordon[w.id] = w.cordoned
                led.cordon_unknown[w.id] = set()
            # GetJob for this round's jobs and a sample of older ones.
            recent = [j for j, r in led.jobs.items() if r["name"].startswith(f"soak-r{rnd:02d}-")]
            older = sorted(set(led.jobs) - set(recent))
            sample = recent + random.Random(SEED ^ rnd).sample(older, min(10, len(older)))
        for jid in sample:
            got = jobs.GetJob(js.GetJobRequest(id=jid), metadata=md, timeout=RPC_TIMEOUT)
            assert got.id == jid and got.spec == led.jobs[jid]["spec"], f"GetJob {jid}: {got}"
    finally:
        ch.close()


def final_check(c, led, runs):
    ch = grpc.insecure_channel(c.addr)
    md = [("authorization", f"Bearer {c.token}")]
    jobs, cluster = jsg.JobServiceStub(ch), csg.ClusterServiceStub(ch)
    try:
        for w in WORKERS:
            cluster.UncordonWorker(cs.WorkerRef(id=w), metadata=md, timeout=RPC_TIMEOUT)
        with led.lock:
            known = set(led.jobs)
        n = len(known)

        def settled():
            listed = {j.id: j for j in list_jobs(jobs, md)}
            left = [j for j in known if listed[j].state not in TERMINAL]
            return listed if not left else None
        listed = wait_for(settled, 150, f"all {n} jobs to end", interval=0.5)
        bad = [f"{j.id} {j.spec.name} {t.JobState.Name(j.state)}: {j.message}" for j in listed.values()
               if j.state != t.JOB_STATE_SUCCEEDED and not (j.state == t.JOB_STATE_CANCELLED and
                                                            led.jobs[j.id]["cancel"] == "ack")]
        assert not bad, "jobs that did not succeed:\n  " + "\n  ".join(bad)
        # Every rank start left one line in its (job, generation, rank) file.
        twice, stray, regen = [], [], 0
        starts = {}
        for f in os.listdir(runs):
            jid, gen, rank = f.split(".")
            lines = open(os.path.join(runs, f)).read().split()
            if len(lines) > 1:  # 0: killed (cancelled, resized) between the shell's open and its write
                twice.append(f"{f}: {len(lines)} starts")
            if jid not in listed:
                stray.append(f)
            starts.setdefault(jid, set()).add(int(gen[1:]))
        assert not twice, f"ranks started more than once at one generation: {twice}"
        assert not stray, f"ranks of jobs the scheduler does not know ran: {stray}"
        for j in listed.values():
            if j.state == t.JOB_STATE_SUCCEEDED:
                for r in range(len(j.worker_ids)):
                    f = os.path.join(runs, f"{j.id}.g{j.generation}.r{r}")
                    assert os.path.exists(f) and open(f).read().strip(), \
                        f"job {j.id} SUCCEEDED at generation {j.generation} but rank {r} never started"
            if len(starts.get(j.id, ())) > 1:
                regen += 1
                if os.environ.get("TIDE_SOAK_VERBOSE"):
                    print(f"     job {j.id} {j.spec.name} {t.JobState.Name(j.state)} gen {j.generation} resizes "
                          f"{j.resizes} target {j.target_workers} starts at {sorted(starts[j.id])}: {j.message}")
        return regen
    finally:
        ch.close()


def main():
    t0 = time.monotonic()
    print(f"seed {SEED} (TIDE_SOAK_SEED={SEED} replays it), {ROUNDS} rounds", flush=True)
    rng = random.Random(SEED)
    led = Ledger()
    with tidetest.Cluster("soak") as c:
        runs = os.path.join(c.tmp, "runs")
        os.makedirs(runs)
        c.start_scheduler()
        for w in WORKERS:
            node, gpu = w.split("/gpu")
            c.start_worker(node, int(gpu))
        c.wait_workers(len(WORKERS))
        for rnd in range(ROUNDS):
            r0 = time.monotonic()
            rd = Round(c, led, rnd, rng, runs)
            try:
                rd.run()
                c.start_scheduler()  # same port, same data dir
                assert not led.errors, "\n".join(led.errors)
                check_after_restart(c, led, rnd)
            except AssertionError as e:
                raise AssertionError(f"seed {SEED} round {rnd} (kill after {rd.delay:.2f}s): {e}") from None
            print(f"     round {rnd:2d}: killed after {rd.delay:.2f}s, {led.stats['acked']} acknowledged so far "
                  f"({time.monotonic() - r0:.1f}s)", flush=True)
        try:
            regen = final_check(c, led, runs)
        except AssertionError as e:
            raise AssertionError(f"seed {SEED} final check: {e}") from None
    s = led.stats
    print(f"ok   crash soak seed {SEED}: {ROUNDS} rounds, {s['acked']} jobs acknowledged, unknown submissions "
          f"{s['appeared']} appeared / {s['absent']} did not; acknowledged (+unknown) cancels {s['cancels']} "
          f"(+{s['cancels_unknown']}), cordons {s['cordons']} (+{s['cordons_unknown']}), scales {s['scales']} "
          f"(+{s['scales_unknown']}), {s['refused']} refused; in flight at the kills: {led.in_flight}; "
          f"{regen} jobs ran in >1 generation; workers back in <= {s['back_max']:.1f}s; "
          f"{time.monotonic() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()

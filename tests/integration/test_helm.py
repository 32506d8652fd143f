"""The Helm chart (helm/tide) with a real helm binary (tools/helm/helm, fetched by scripts/helm.sh): helm lint
--strict with the default values and each example, helm template with the defaults, HA and external etcd, then
checks on the rendered manifests: a liveness and a readiness probe on every container, nvidia.com/gpu only in
the workers' limits, the token wired from its Secret into scheduler and workers, the HA wiring (3 replicas,
--store etcd:// with the 3 members, --advertise per pod, workers given every scheduler), and refusals (several
replicas without etcd, values the schema rejects), and the built tide-scheduler and tide-worker accept every
flag the chart passes them. Each checker is also run on a broken copy of a rendering and must complain, so none
of them passes vacuously. No cluster and no Docker are needed.

Skips (exit 77) only when tools/helm/helm is missing. Run with /usr/bin/python3 (PyYAML: Debian python3-yaml)."""

import base64
import copy
import os
import shutil
import subprocess
import sys
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
HELM = os.path.join(SRC, "tools", "helm", "helm")
CHART = os.path.join(SRC, "helm", "tide")
HA_VALUES = os.path.join(SRC, "helm", "examples", "ha-values.yaml")
EXT_VALUES = os.path.join(SRC, "helm", "examples", "external-etcd-values.yaml")
NS = "tidens"
REL = "rel"
GPU = "nvidia.com/gpu"
SKIP = 77

if not os.access(HELM, os.X_OK):
    print(f"SKIP: {HELM} is missing (scripts/helm.sh fetches it; scripts/deps.sh runs it)")
    sys.exit(SKIP)
try:
    import yaml
except ImportError:
    print("FAIL: PyYAML is missing: install Debian's python3-yaml (scripts/deps.sh lists it)")
    sys.exit(1)

SCRATCH = tempfile.mkdtemp(prefix="tide-helm-")
ENV = dict(os.environ)
for k in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
    ENV[k] = SCRATCH
ENV.pop("KUBECONFIG", None)
ENV["KUBECONFIG"] = os.path.join(SCRATCH, "no-kubeconfig")  # never a real cluster
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
    return cond


def helm(*args):
    p = subprocess.run([HELM, *args], env=ENV, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def values_file(name, text):
    path = os.path.join(SCRATCH, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def render(*args):
    rc, out = helm("template", REL, CHART, "--namespace", NS, *args)
    if not check(rc == 0, f"helm template {' '.join(args) or '(defaults)'}"):
        print(out)
        return []
    return [d for d in yaml.safe_load_all(out) if d]


# --- helpers over rendered manifests ---

def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def component(d):
    return d["metadata"].get("labels", {}).get("app.kubernetes.io/component")


def workload(docs, comp):
    found = [d for d in docs if d.get("kind") in ("StatefulSet", "Deployment") and component(d) == comp]
    return found[0] if len(found) == 1 else None


def pod_spec(w):
    return w["spec"]["template"]["spec"]


def containers(w):
    return pod_spec(w).get("containers", [])


def env_source(c, name):
    for e in c.get("env", []):
        if e["name"] == name:
            return e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") or e.get("value")
    return None


def arg(c, flag):
    """The value of --flag=VALUE in a container's args (the chart always writes the = form)."""
    vals = [a.split("=", 1)[1] for a in c.get("args", []) if a.startswith(flag + "=")]
    return vals[0] if len(vals) == 1 else None


def pod_dns(sts, i, ns=NS):
    return f"{sts['metadata']['name']}-{i}.{sts['spec']['serviceName']}.{ns}.svc.cluster.local"


# --- checkers: each returns a list of problems (empty: fine) ---

HANDLERS = ("grpc", "httpGet", "tcpSocket", "exec")


def probe_problems(docs):
    """Every container of every pod template has a liveness and a readiness probe with one handler."""
    bad = []
    pods = [d for d in docs if d.get("kind") in ("StatefulSet", "Deployment", "DaemonSet", "Job")]
    if not pods:
        bad.append("no pod templates rendered")
    for w in pods:
        for c in containers(w) + pod_spec(w).get("initContainers", []):
            for kind in ("livenessProbe", "readinessProbe"):
                p = c.get(kind)
                if not p or sum(h in p for h in HANDLERS) != 1:
                    bad.append(f"{w['metadata']['name']}/{c['name']}: {kind} missing or without one handler")
    return bad


def scheduler_probe_problems(docs):
    bad = []
    s = workload(docs, "scheduler")
    if not s:
        return ["no scheduler StatefulSet"]
    c = containers(s)[0]
    port = int(arg(c, "--listen").rsplit(":", 1)[1])
    live, ready = c.get("livenessProbe", {}).get("grpc"), c.get("readinessProbe", {}).get("grpc")
    if not live or live.get("port") != port or live.get("service", "") != "":
        bad.append(f"scheduler liveness is not grpc.health.v1 service \"\" on {port}: {live}")
    if not ready or ready.get("port") != port or ready.get("service") != "tide.v1.JobService":
        bad.append(f"scheduler readiness is not grpc.health.v1 service tide.v1.JobService on {port}: {ready}")
    return bad


def gpu_problems(docs):
    """nvidia.com/gpu: 1 in each worker container's limits, nowhere in requests, nowhere outside workers."""
    bad = []
    pods = [d for d in docs if d.get("kind") in ("StatefulSet", "Deployment", "DaemonSet", "Job")]
    for w in pods:
        for c in containers(w) + pod_spec(w).get("initContainers", []):
            res = c.get("resources") or {}
            if GPU in (res.get("requests") or {}):
                bad.append(f"{w['metadata']['name']}/{c['name']}: {GPU} in requests")
            lim = (res.get("limits") or {}).get(GPU)
            if component(w) == "worker":
                if lim != 1:
                    bad.append(f"{w['metadata']['name']}/{c['name']}: limits {GPU} is {lim!r}, not 1")
            elif lim is not None:
                bad.append(f"{w['metadata']['name']}/{c['name']}: {GPU} on a {component(w)} container")
    if not workload(docs, "worker"):
        bad.append("no worker StatefulSet")
    return bad


def token_problems(docs, secret_in_render=True):
    """Scheduler and worker read --token-file from a mount of the token Secret, whose data has that key."""
    bad = []
    secrets = {d["metadata"]["name"]: d for d in by_kind(docs, "Secret")}
    for comp in ("scheduler", "worker"):
        w = workload(docs, comp)
        if not w:
            bad.append(f"no {comp} workload")
            continue
        c = containers(w)[0]
        tf = arg(c, "--token-file")
        if not tf:
            bad.append(f"{comp}: no --token-file")
            continue
        mdir, key = os.path.split(tf)
        mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == mdir]
        vols = {v["name"]: v for v in pod_spec(w).get("volumes", [])}
        vol = vols.get(mounts[0]["name"]) if len(mounts) == 1 else None
        sname = (vol or {}).get("secret", {}).get("secretName")
        if not sname:
            bad.append(f"{comp}: --token-file {tf} is not on a Secret volume")
            continue
        items = vol["secret"].get("items")
        if items and key not in [i["path"] for i in items]:
            bad.append(f"{comp}: the Secret volume has no file {key}")
        if secret_in_render:
            s = secrets.get(sname)
            if not s:
                bad.append(f"{comp}: Secret {sname} is not rendered")
            elif not base64.b64decode(s.get("data", {}).get(key, "")).strip():
                bad.append(f"{comp}: Secret {sname} has no token under {key}")
    return bad


def ha_problems(docs, replicas=3, etcd_members=3):
    """Scheduler replicas against the bundled etcd's members, each advertising its pod DNS name; workers given
    every scheduler's pod address."""
    bad = []
    s, e, w = workload(docs, "scheduler"), workload(docs, "etcd"), workload(docs, "worker")
    if not (s and e and w):
        return [f"missing workloads: scheduler={bool(s)} etcd={bool(e)} worker={bool(w)}"]
    if s["spec"]["replicas"] != replicas:
        bad.append(f"scheduler replicas {s['spec']['replicas']}, want {replicas}")
    if e["spec"]["replicas"] != etcd_members:
        bad.append(f"etcd replicas {e['spec']['replicas']}, want {etcd_members}")
    sc = containers(s)[0]
    store = arg(sc, "--store") or ""
    members = [f"{pod_dns(e, i)}:2379" for i in range(etcd_members)]
    if not store.startswith("etcd://") or store[len("etcd://"):].split("/", 1)[0].split(",") != members:
        bad.append(f"--store {store!r} is not etcd:// with the members {members}")
    ec = containers(e)[0]
    peers = (arg(ec, "--initial-cluster") or "").split(",")
    want_peers = [f"{e['metadata']['name']}-{i}=http://{pod_dns(e, i)}:2380" for i in range(etcd_members)]
    if peers != want_peers:
        bad.append(f"etcd --initial-cluster {peers} != {want_peers}")
    port = int(arg(sc, "--listen").rsplit(":", 1)[1])
    adv = arg(sc, "--advertise")
    want_adv = f"$(POD_NAME).{s['spec']['serviceName']}.$(POD_NAMESPACE).svc.cluster.local:{port}"
    if adv != want_adv or env_source(sc, "POD_NAME") != "metadata.name" or \
            env_source(sc, "POD_NAMESPACE") != "metadata.namespace":
        bad.append(f"scheduler --advertise {adv!r} is not the pod's DNS name from the downward API")
    if not arg(sc, "--lease-ttl"):
        bad.append("scheduler without --lease-ttl")
    if s["spec"].get("podManagementPolicy") != "Parallel":
        bad.append("scheduler podManagementPolicy is not Parallel (standbys are never Ready)")
    heads = {d["metadata"]["name"]: d for d in by_kind(docs, "Service")}
    h = heads.get(s["spec"]["serviceName"])
    if not h or h["spec"].get("clusterIP") != "None" or not h["spec"].get("publishNotReadyAddresses"):
        bad.append("scheduler headless Service missing, or not publishing not-Ready standbys")
    want = ",".join(f"{pod_dns(s, i)}:{port}" for i in range(replicas))
    got = arg(containers(w)[0], "--scheduler")
    if got != want:
        bad.append(f"workers' --scheduler {got!r}, want every replica: {want!r}")
    return bad


def label_problems(docs):
    bad = []
    need = ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
            "app.kubernetes.io/managed-by", "helm.sh/chart")
    for d in docs:
        labels = d["metadata"].get("labels", {})
        missing = [k for k in need if k not in labels]
        if missing:
            bad.append(f"{d['kind']} {d['metadata']['name']}: no {missing}")
        if d["kind"] in ("StatefulSet", "Deployment"):
            sel = d["spec"]["selector"]["matchLabels"]
            tmpl = d["spec"]["template"]["metadata"]["labels"]
            if "app.kubernetes.io/component" not in sel or any(tmpl.get(k) != v for k, v in sel.items()):
                bad.append(f"{d['metadata']['name']}: selector {sel} does not match its pods by component")
    return bad


def tls_problems(docs, secret):
    """tls.secretName: the Secret mounted read-only into scheduler and workers at one place, whose tls.crt, tls.key
    and ca.crt are passed as --tls-cert/--tls-key/--tls-ca, no --insecure, HTTPS probes on the scheduler.
    secret None: no TLS, and --insecure said explicitly."""
    bad = []
    for comp in ("scheduler", "worker"):
        wl = workload(docs, comp)
        if not wl:
            bad.append(f"no {comp}")
            continue
        c = containers(wl)[0]
        if secret is None:
            if "--insecure" not in c.get("args", []) or any(a.startswith("--tls-") for a in c.get("args", [])):
                bad.append(f"{comp}: without tls.secretName, --insecure and no --tls-* flags: {c.get('args')}")
            continue
        vols = [v for v in pod_spec(wl).get("volumes", []) if v.get("secret", {}).get("secretName") == secret]
        mounts = [m for m in c.get("volumeMounts", []) if vols and m["name"] == vols[0]["name"]]
        if len(vols) != 1 or len(mounts) != 1 or not mounts[0].get("readOnly"):
            bad.append(f"{comp}: Secret {secret} not mounted read-only once ({vols}, {mounts})")
            continue
        d = mounts[0]["mountPath"]
        for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"), ("--tls-ca", "ca.crt")):
            if arg(c, flag) != f"{d}/{key}":
                bad.append(f"{comp}: {flag} is {arg(c, flag)!r}, not {d}/{key}")
        if "--insecure" in c.get("args", []):
            bad.append(f"{comp}: --insecure with TLS")
        if comp == "scheduler":
            for kind in ("livenessProbe", "readinessProbe"):
                g = c.get(kind, {}).get("httpGet", {})
                if g.get("scheme") != "HTTPS" or g.get("path") != "/healthz":
                    bad.append(f"scheduler {kind} is not HTTPS GET /healthz: {c.get(kind)}")
    return bad


def expect_complaint(name, checker, docs, mutate):
    """A checker must report a broken rendering: proves it can fail."""
    broken = copy.deepcopy(docs)
    mutate(broken)
    check(bool(checker(broken)), f"self-test: {name} is caught")


def main():
    # 1. lint --strict: defaults and every example.
    for extra in ([], ["-f", HA_VALUES], ["-f", EXT_VALUES]):
        rc, out = helm("lint", "--strict", CHART, *extra)
        if not check(rc == 0, f"helm lint --strict {' '.join(extra) or '(defaults)'}"):
            print(out)

    # 2. Defaults: one scheduler on SQLite (a PVC), two GPU workers.
    d = render()
    for name, problems in (("probes", probe_problems(d)), ("scheduler grpc probes", scheduler_probe_problems(d)),
                           ("GPU resources", gpu_problems(d)), ("token wiring", token_problems(d)),
                           ("labels", label_problems(d))):
        check(not problems, f"defaults: {name}" + (f": {problems}" if problems else ""))
    s, w = workload(d, "scheduler"), workload(d, "worker")
    if s and w:
        sc, wc = containers(s)[0], containers(w)[0]
        check(s["spec"]["replicas"] == 1 and s["spec"].get("volumeClaimTemplates"),
              "defaults: one scheduler replica with a PVC for SQLite")
        check(arg(sc, "--store") is None and arg(sc, "--advertise") is None,
              "defaults: no --store etcd:// and no --advertise (they need etcd)")
        check(not workload(d, "etcd"), "defaults: no bundled etcd")
        check(arg(wc, "--id") == "$(POD_NAME)" and env_source(wc, "POD_NAME") == "metadata.name",
              "defaults: worker --id is the pod name")
        check(env_source(wc, "NODE_NAME") == "spec.nodeName" and "k8s.node=$(NODE_NAME)" in
              (arg(wc, "--labels") or ""), "defaults: the Kubernetes node name from spec.nodeName")
        check((arg(wc, "--advertise") or "").startswith(f"$(POD_NAME).{w['spec']['serviceName']}."),
              "defaults: worker --advertise is its pod DNS name")
        check(arg(wc, "--scheduler") == f"{s['metadata']['name']}.{NS}.svc.cluster.local:7070",
              "defaults: workers reach the scheduler Service")
        check(any(t.get("key") == GPU and t.get("effect") == "NoSchedule" for t in pod_spec(w).get("tolerations", [])),
              "defaults: workers tolerate nvidia.com/gpu:NoSchedule")
        check(all(pod_spec(x)["securityContext"].get("runAsNonRoot") for x in (s, w)), "defaults: non-root pods")
        svc = {x["metadata"]["name"]: x for x in by_kind(d, "Service")}
        check(svc.get(s["metadata"]["name"], {}).get("spec", {}).get("ports", [{}])[0].get("port") == 7070,
              "defaults: scheduler Service on 7070")
        check(svc.get(w["spec"]["serviceName"], {}).get("spec", {}).get("clusterIP") == "None",
              "defaults: worker headless Service")
        check(s["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/scrape") == "true",
              "defaults: Prometheus scrape annotations on the scheduler")

    # Self-tests on broken copies of the default rendering: every checker must complain.
    if s and w:
        def drop(comp, key):
            return lambda docs: containers(workload(docs, comp))[0].pop(key)

        def gpu_to_requests(docs):
            c = containers(workload(docs, "worker"))[0]
            c["resources"]["requests"][GPU] = 1

        def gpu_on_scheduler(docs):
            c = containers(workload(docs, "scheduler"))[0]
            c["resources"].setdefault("limits", {})[GPU] = 1

        def unmount_token(docs):
            c = containers(workload(docs, "worker"))[0]
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "token"]

        def no_secret(docs):
            docs[:] = [x for x in docs if x["kind"] != "Secret"]

        def standby_ready(docs):
            containers(workload(docs, "scheduler"))[0]["readinessProbe"]["grpc"]["service"] = ""

        def no_version_label(docs):
            docs[0]["metadata"]["labels"].pop("app.kubernetes.io/version")

        expect_complaint("a missing worker readinessProbe", probe_problems, d, drop("worker", "readinessProbe"))
        expect_complaint("a missing scheduler livenessProbe", probe_problems, d, drop("scheduler", "livenessProbe"))
        expect_complaint("readiness on service \"\"", scheduler_probe_problems, d, standby_ready)
        expect_complaint("a GPU in worker requests", gpu_problems, d, gpu_to_requests)
        expect_complaint("a GPU on the scheduler", gpu_problems, d, gpu_on_scheduler)
        expect_complaint("no GPU limit on workers", gpu_problems, d,
                         lambda docs: containers(workload(docs, "worker"))[0]["resources"]["limits"].pop(GPU))
        expect_complaint("a worker without the token mount", token_problems, d, unmount_token)
        expect_complaint("no token Secret", token_problems, d, no_secret)
        expect_complaint("a missing version label", label_problems, d, no_version_label)

    # 3. HA: 3 schedulers, the bundled 3-member etcd.
    ha = render("-f", HA_VALUES)
    for name, problems in (("probes", probe_problems(ha)), ("scheduler grpc probes", scheduler_probe_problems(ha)),
                           ("GPU resources", gpu_problems(ha)), ("token wiring", token_problems(ha)),
                           ("HA wiring", ha_problems(ha)), ("labels", label_problems(ha))):
        check(not problems, f"HA: {name}" + (f": {problems}" if problems else ""))
    e = workload(ha, "etcd")
    if e:
        ec = containers(e)[0]
        check(all(ec[p]["httpGet"]["path"].startswith("/health") for p in ("livenessProbe", "readinessProbe")),
              "HA: etcd probes on /health")
        check(e["spec"].get("podManagementPolicy") == "Parallel", "HA: etcd members start together")
        check(workload(ha, "scheduler")["spec"]["updateStrategy"]["type"] == "OnDelete",
              "HA: scheduler updates OnDelete (a standby is never Ready)")
    if workload(ha, "scheduler"):
        expect_complaint("a worker missing one scheduler address", ha_problems, ha,
                         lambda docs: containers(workload(docs, "worker"))[0]["args"].__setitem__(
                             0, "--scheduler=" + ",".join((arg(containers(workload(docs, "worker"))[0],
                                                                  "--scheduler") or "").split(",")[:2])))
        expect_complaint("an etcd member missing from --store", ha_problems, ha,
                         lambda docs: workload(docs, "etcd")["spec"].__setitem__("replicas", 2))
        expect_complaint("a fixed --advertise", ha_problems, ha,
                         lambda docs: containers(workload(docs, "scheduler"))[0]["args"].append(
                             "--advertise=sched:7070"))
        expect_complaint("2 scheduler replicas", ha_problems, ha,
                         lambda docs: workload(docs, "scheduler")["spec"].__setitem__("replicas", 2))
        expect_complaint("a missing etcd probe", probe_problems, ha, drop("etcd", "livenessProbe"))

    # 4. External etcd and an existing Secret: no bundled etcd, the listed members and prefix.
    ext = render("-f", EXT_VALUES)
    es = workload(ext, "scheduler")
    if es:
        ev = yaml.safe_load(open(EXT_VALUES))
        check(arg(containers(es)[0], "--store") ==
              "etcd://" + ",".join(ev["etcd"]["endpoints"]) + ev["etcd"]["prefix"],
              "external etcd: --store lists the endpoints and the prefix")
        check(not workload(ext, "etcd") and not by_kind(ext, "Secret"),
              "external etcd: no bundled etcd, no generated Secret")
        problems = token_problems(ext, secret_in_render=False)
        check(not problems and all(v.get("secret", {}).get("secretName") == ev["auth"]["existingSecret"]
                                   for v in pod_spec(es)["volumes"] if v["name"] == "token"),
              "external etcd: the existing Secret is mounted" + (f": {problems}" if problems else ""))
        check(not probe_problems(ext) and not gpu_problems(ext), "external etcd: probes and GPUs")

    # 4b. TLS: tls.secretName mounted and passed as the flags; without it, --insecure said explicitly.
    check(not tls_problems(d, None), f"defaults: --insecure, no TLS flags: {tls_problems(d, None)}")
    tls = render("--set", "tls.secretName=tide-tls")
    problems = tls_problems(tls, "tide-tls")
    check(not problems, "tls.secretName: Secret mounted, --tls-cert/--tls-key/--tls-ca, HTTPS probes"
          + (f": {problems}" if problems else ""))
    check(not probe_problems(tls), "tls.secretName: probes on every container")
    ts = workload(tls, "scheduler")
    if ts:
        check(ts["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/scheme") == "https",
              "tls.secretName: Prometheus scrapes https")
        def untls_worker(docs):
            c = containers(workload(docs, "worker"))[0]
            c["args"] = [a for a in c["args"] if not a.startswith("--tls-ca")]
        expect_complaint("a worker without --tls-ca", lambda x: tls_problems(x, "tide-tls"), tls, untls_worker)
        expect_complaint("a grpc probe under TLS", lambda x: tls_problems(x, "tide-tls"), tls,
                         lambda docs: containers(workload(docs, "scheduler"))[0].update(
                             readinessProbe={"grpc": {"port": 7070}}))
        expect_complaint("TLS flags without --insecure missing", lambda x: tls_problems(x, None), tls, lambda x: None)
    rc, out = helm("lint", "--strict", CHART, "--set", "tls.secretName=tide-tls")
    check(rc == 0, "helm lint --strict with tls.secretName")
    rc, out = helm("lint", "--strict", CHART, "--set", "tls.secretName=Not_A_Name")
    check(rc != 0 and "/tls/secretName" in out, "an invalid tls.secretName fails lint naming /tls/secretName")

    # 4c. The users file: auth.usersSecret mounted read-only into the scheduler and passed as --users.
    us = workload(render("--set", "auth.usersSecret=tide-users"), "scheduler")
    if us:
        c = containers(us)[0]
        mounts = {m["name"]: m for m in c.get("volumeMounts", [])}
        vols = {v["name"]: v for v in pod_spec(us)["volumes"]}
        check(arg(c, "--users") == "/etc/tide/users/users.json" and mounts.get("users", {}).get("readOnly")
              and mounts["users"]["mountPath"] == "/etc/tide/users"
              and vols.get("users", {}).get("secret", {}).get("secretName") == "tide-users",
              "auth.usersSecret: the Secret mounted read-only and passed as --users")
    check(arg(containers(workload(d, "scheduler"))[0], "--users") is None, "defaults: no --users")
    rc, out = helm("lint", "--strict", CHART, "--set", "auth.usersSecret=Bad_Name")
    check(rc != 0 and "/auth/usersSecret" in out, "an invalid auth.usersSecret fails lint naming /auth/usersSecret")

    # 5. Refusals. Several replicas without etcd: the schema (lint and template) and the template's own fail.
    rc, out = helm("template", REL, CHART, "--set", "scheduler.replicas=3")
    check(rc != 0 and "/scheduler/replicas" in out, "replicas=3 without etcd: helm template refuses (schema)")
    rc, out = helm("lint", "--strict", CHART, "--set", "scheduler.replicas=3")
    check(rc != 0 and "/scheduler/replicas" in out, "replicas=3 without etcd: helm lint refuses (schema)")
    rc, out = helm("template", REL, CHART, "--set", "scheduler.replicas=3", "--skip-schema-validation")
    check(rc != 0 and "needs etcd" in out, "replicas=3 without etcd: the template fails by itself too")
    rc, out = helm("template", REL, CHART, "--set", "scheduler.replicas=3", "--set", "etcd.enabled=true")
    check(rc == 0, "replicas=3 with the bundled etcd renders")

    bad_files = (
        ("neg.yaml", "workers:\n  replicas: -1\n", "/workers/replicas"),
        ("str.yaml", "scheduler:\n  port: seven\n", "/scheduler/port"),
        ("enum.yaml", "etcd:\n  enabled: true\n  replicas: 2\n", "/etcd/replicas"),
        ("gpu.yaml", "workers:\n  resources:\n    requests:\n      nvidia.com/gpu: 1\n", "nvidia.com/gpu"),
        ("typo.yaml", "scheduler:\n  replica: 3\n", "'replica'"),
        ("both.yaml", "etcd:\n  enabled: true\n  endpoints: [a:2379]\n", "/etcd/endpoints"),
    )
    for name, text, field in bad_files:
        rc, out = helm("lint", "--strict", CHART, "-f", values_file(name, text))
        if not check(rc != 0 and field in out, f"an invalid values file ({text.strip()!r}) fails lint naming {field}"):
            print(out)

    # 6. The binaries accept every flag the chart passes (each value is checked as it is parsed; --help last
    # stops before anything starts). The pod's $(VARS) get plausible values.
    build = os.environ.get("TIDE_BUILD_DIR") or os.path.join(SRC, "build")
    subst = {"$(POD_NAME)": "p-0", "$(POD_NAMESPACE)": NS, "$(POD_IP)": "10.0.0.7", "$(NODE_NAME)": "gpu-node-1"}
    for label, docs in (("defaults", d), ("HA", ha), ("external etcd", ext), ("TLS", tls)):
        for comp in ("scheduler", "worker"):
            wl = workload(docs, comp)
            if not wl:
                continue
            c = containers(wl)[0]
            binary = os.path.join(build, "bin", c["command"][0])
            if not os.access(binary, os.X_OK):
                print(f"skip {label}: {binary} is not built")
                continue
            args = []
            for a in c.get("args", []):
                for k, v in subst.items():
                    a = a.replace(k, v)
                args.append(a)
            p = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=30)
            check(p.returncode == 0, f"{label}: {c['command'][0]} accepts the chart's flags"
                  + ("" if p.returncode == 0 else f": {p.stderr.strip()}"))
    bad = subprocess.run([os.path.join(build, "bin", "tide-worker"), "--no-such-flag=1", "--help"],
                         capture_output=True, text=True, timeout=30) \
        if os.access(os.path.join(build, "bin", "tide-worker"), os.X_OK) else None
    if bad:
        check(bad.returncode != 0, "self-test: an unknown worker flag is refused before --help")

    # 7. NOTES.txt says how to reach the scheduler and submit (a client-side dry run; no cluster).
    rc, out = helm("install", REL, CHART, "--namespace", NS, "--dry-run=client", "-f", HA_VALUES)
    notes = out.split("NOTES:", 1)[-1] if rc == 0 else ""
    check("port-forward svc/" in notes and "tidectl submit" in notes and "get secret" in notes,
          "NOTES: port-forward, the token from the Secret, tidectl submit")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)
    sys.exit(rc)

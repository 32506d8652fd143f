"""A throwaway Slurm cluster for integration tests: its own munged (own key and socket), slurmctld and two
slurmd (gpunode1, gpunode2, 4 fake GPUs each) on 127.0.0.1 with free ports and every state, spool, log and
pid path under one scratch directory. Every daemon runs in the foreground as our child, so stopping it is
waiting on its PID. close() (the context manager's exit, also when the test fails or tidetest's SIGTERM/SIGINT
handler ends it) cancels what is still queued, stops the daemons and kills whatever job process is left;
the daemons also die with the test process (PR_SET_PDEATHSIG), so none outlives a ctest timeout.

Needs root (SlurmUser=root, munged's socket checks) and Debian's slurm-wlm + munge (Slurm 22.05)."""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import tidetest  # noqa: E402
from tidetest import wait_for, pid_alive  # noqa: E402

NODES = ("gpunode1", "gpunode2")
GPUS_PER_NODE = 4


def available():
    """'' when this machine can run the fixture, else why not (the test then says so and skips)."""
    if os.geteuid() != 0:
        return "not root"
    for prog in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scancel"):
        if not shutil.which(prog, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin"):
            return f"{prog} not installed (slurm-wlm, munge)"
    d = tempfile.mkdtemp(prefix="slurm-mknod-")
    try:
        os.mknod(os.path.join(d, "gpu0"), 0o600 | 0o020000, os.makedev(195, 0))
    except PermissionError:
        return "mknod is not allowed here (the fake GPUs are character devices)"
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return ""


def _free_ports(n):
    """n distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _die_with_parent():
    """In the child before exec: SIGKILL when the test process dies, even by SIGKILL (a ctest timeout),
    so no daemon outlives it."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _sbin(prog):
    return shutil.which(prog, path="/usr/sbin:/sbin:" + os.environ.get("PATH", "")) or prog


class Slurm:
    """slurmctld + slurmd x2 (+ munged) in self.dir. Use as a context manager; self.env() is the
    environment for Slurm clients (SLURM_CONF); self.run(...) runs a client command with it."""

    def __init__(self, name="slurm", extra_conf=()):
        # 0755 all the way down to munge's socket directory: munged insists that everyone can reach it.
        self.dir = tempfile.mkdtemp(prefix=f"{name}-")
        os.chmod(self.dir, 0o755)
        self.conf = os.path.join(self.dir, "etc", "slurm.conf")
        self.munge_socket = os.path.join(self.dir, "munge", "munge.socket")
        self.extra_conf = list(extra_conf)
        self.procs = {}  # name -> Popen
        self.failed = False  # close() had to kill something
        self.closed = False

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close(keep=True)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(keep=exc_type is not None)
        return False

    def env(self, extra=None):
        e = dict(os.environ)
        e["SLURM_CONF"] = self.conf
        e.update(extra or {})
        return e

    def run(self, *argv, check=True, timeout=30, env=None):
        r = subprocess.run(list(argv), capture_output=True, text=True, env=self.env(env), timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {r.returncode}: {r.stderr}{r.stdout}")
        return r

    # --- start ---

    def _spawn(self, name, argv, env=None):
        log = open(os.path.join(self.dir, "log", f"{name}.out"), "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(env),
                             start_new_session=True, preexec_fn=_die_with_parent)
        log.close()
        tidetest._live.append(p)  # killed (group and all) at exit should close() never run
        self.procs[name] = p
        return p

    def _write_conf(self):
        d = self.dir
        ctld_port, *node_ports = _free_ports(1 + len(NODES))
        os.makedirs(os.path.join(d, "dev"))
        for i in range(GPUS_PER_NODE):
            # Fake NVIDIA character devices (major 195) for gres.conf: slurmd takes a GPU's index from the
            # minor number (plain files would do for the count, but SLURM_STEP_GPUS would stay empty).
            os.mknod(os.path.join(d, "dev", f"gpu{i}"), 0o600 | 0o020000, os.makedev(195, i))
        lines = [
            "ClusterName=tidetest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "GresTypes=gpu",
            "ReturnToService=2",
            # Declared CPUs beyond the machine's (2 cores here) so the template's --cpus-per-task fits.
            "SlurmdParameters=config_overrides",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/run/slurmctld.pid",
            f"SlurmdPidFile={d}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log",
            f"SlurmdLogFile={d}/log/slurmd-%n.log",
            f"TmpFS={d}/jobtmp/%n",
            "MailProg=/bin/true",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            # Quick reactions: a cancelled job's tasks get SIGKILL 5 s after SIGTERM, a finished job is
            # forgotten soon after, and batch jobs start without the idle cluster's default delay.
            "KillWait=5",
            "MinJobAge=2",
            "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        lines += self.extra_conf
        for name, port in zip(NODES, node_ports):
            os.makedirs(os.path.join(d, "spool", name))
            os.makedirs(os.path.join(d, "jobtmp", name))
            lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs=32 "
                         f"RealMemory=4000 Gres=gpu:{GPUS_PER_NODE}")
        lines.append(f"PartitionName=gpu Nodes={NODES[0][:-1]}[1-{len(NODES)}] Default=YES MaxTime=INFINITE "
                     "State=UP")
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(d, "etc", "gres.conf"), "w") as f:
            f.write("AutoDetect=off\n")
            f.write(f"NodeName={NODES[0][:-1]}[1-{len(NODES)}] Name=gpu File={d}/dev/gpu[0-{GPUS_PER_NODE - 1}]\n")

    def _start_munge(self):
        m = os.path.join(self.dir, "munge")
        keydir = os.path.join(self.dir, "munge-key")
        os.makedirs(m, mode=0o755)
        os.chmod(m, 0o755)
        os.makedirs(keydir, mode=0o700)
        key = os.path.join(keydir, "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        self._spawn("munged", [_sbin("munged"), "--foreground", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={keydir}/munged.pid",
                               f"--log-file={self.dir}/log/munged.log", f"--seed-file={keydir}/munged.seed"])

        def munge_ok():
            assert self.procs["munged"].poll() is None, f"munged exited: {self._tail('munged.out')}"
            enc = subprocess.run(["munge", "-n", "-S", self.munge_socket], capture_output=True, timeout=10)
            return enc.returncode == 0 and subprocess.run(["unmunge", "-S", self.munge_socket], input=enc.stdout,
                                                          capture_output=True, timeout=10).returncode == 0
        wait_for(munge_ok, 10, "munged to answer", interval=0.05)

    def start(self):
        for sub in ("etc", "state", "run", "log"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        self._write_conf()
        self._start_munge()
        self._spawn("slurmctld", [_sbin("slurmctld"), "-D", "-i", "-f", self.conf])
        for name in NODES:
            self._spawn(f"slurmd-{name}", [_sbin("slurmd"), "-D", "-N", name, "-f", self.conf])

        def idle():
            for name, p in self.procs.items():
                assert p.poll() is None, f"{name} exited {p.returncode}: {self._tail(name + '.out')}"
            r = self.run("sinfo", "-h", "-t", "idle", "-o", "%D", check=False, timeout=10)
            return r.returncode == 0 and r.stdout.strip() == str(len(NODES))
        wait_for(idle, 30, f"{len(NODES)} Slurm nodes idle", interval=0.1)

    # --- use ---

    def sbatch(self, *args, env=None):
        """Submits a batch job (--parsable); returns its id."""
        r = self.run("sbatch", "--parsable", *args, env=env)
        return r.stdout.strip().split(";")[0]

    def squeue(self, *args):
        """The squeue lines (no header) for the given filters."""
        return [ln for ln in self.run("squeue", "-h", *args).stdout.splitlines() if ln.strip()]

    def job_state(self, jobid):
        """The job's state from squeue, '' once it has left the queue."""
        r = self.run("squeue", "-h", "-j", jobid, "-o", "%T", check=False)
        return r.stdout.strip() if r.returncode == 0 else ""

    # --- stop ---

    def _tail(self, name, n=3000):
        try:
            return open(os.path.join(self.dir, "log", name), errors="replace").read()[-n:]
        except FileNotFoundError:
            return ""

    def _stop(self, name, timeout=15):
        p = self.procs.pop(name, None)
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.failed = True
                print(f"(slurmtest: {name} ignored SIGTERM for {timeout}s: killed)", file=sys.stderr)
        tidetest._kill_tree(p)  # the group too: nothing it started survives it

    def close(self, keep=False):
        """Cancels every job still queued and waits for the queue to empty, stops slurmd, slurmctld and
        munged (waiting on each PID), kills whatever of this cluster is still running (job steps, their
        tasks: any process whose environment names our slurm.conf) and removes the scratch directory
        unless keep."""
        if self.closed:
            return
        self.closed = True
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            try:
                self.run("scancel", "--full", "--user=root", check=False, timeout=10)
                wait_for(lambda: not self.squeue(), 20, "the Slurm queue to empty", interval=0.1)
            except Exception as e:  # keep stopping: the daemons must go regardless
                print(f"(slurmtest: {e})", file=sys.stderr)
        for name in NODES:
            self._stop(f"slurmd-{name}")
        self._stop("slurmctld")
        self._stop("munged")
        self._kill_leftovers()
        if keep:
            print(f"(slurm logs kept in {self.dir})", file=sys.stderr)
            for f in ("slurmctld.log", *[f"slurmd-{n}.log" for n in NODES]):
                print(f"--- {f}\n{self._tail(f, 2500)}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def processes(self):
        """PIDs of live processes of this cluster other than us: slurmstepd and every job task, found by
        the SLURM_CONF in their environment (the daemons' children inherit it, sbatch/srun pass it on)."""
        want = f"SLURM_CONF={self.conf}".encode()
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if want in env and pid_alive(int(pid)):
                found.append(int(pid))
        return found

    def _kill_leftovers(self):
        left = self.processes()
        if not left:
            return
        self.failed = True
        print(f"(slurmtest: killing leftover processes {left})", file=sys.stderr)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not any(pid_alive(p) for p in left), 10, "leftover Slurm processes to die")

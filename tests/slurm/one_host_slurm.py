"""A real Slurm on this one host, for tests: munged, slurmctld and N slurmd, all private, all reaped.

Test infrastructure, not part of the harness: its one caller is the session fixture of tests/slurm (which
``nox -s slurm``, CI's ``tests`` session and ``.ci/run`` reach through pytest), and it installs system
packages as root, which nothing the harness's users install ever does.

Debian's packages (``slurmctld``, ``slurmd``, ``slurm-client``, ``munge``; 22.05 on bookworm) are installed
with apt-get when missing, which needs root (the packages' own services are held from starting). Beyond
that nothing of the system's is used or touched: the cluster lives in one folder (``slurm.conf`` written
from ``hostname -s`` and ``nproc``, its own munge key and socket, the daemons' state, spool and logs), on
ports claimed through chaos/supervise/ports.py, so two test sessions on one machine do not meet. Clients
find it through ``SLURM_CONF`` in :attr:`OneHostSlurm.env`.

Debian builds Slurm with multiple-slurmd support (``scontrol show config`` says ``MULTIPLE_SLURMD = Yes``),
so ``nodes: N`` runs N slurmd on the host, each with ``-N <host>-n<i>`` and its own port: N simulated nodes
that srun spreads a job over, as on a cluster.

Stopping is by pid, never by name: every job is cancelled, whatever is still alive of a job (the
slurmstepd processes, whose working folder is the cluster's, their descendants, and any process that
carries the cluster's marker variable in its environment, which every job inherits from sbatch) is
SIGKILLed, then the daemons get SIGTERM (and, after a grace, SIGKILL) one by one, slurmds first: slurmctld
hangs in its shutdown once munged is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from chaos.supervise.ports import Ports, reserve_ports
from chaos.supervise.procs import alive, parent, proc_environ

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
COMMANDS = ("slurmctld", "slurmd", "sbatch", "srun", "scontrol", "scancel", "sinfo", "squeue", "munged")
MARKER_VAR = "CHAOS_SLURM_HOME"
"""Set to the cluster's folder for every client command (not the daemons), so every job's process carries it."""
CRED_EXPIRE_S = 10
"""Job credential lifetime (AuthInfo cred_expire, at least 5). Slurm holds a requeued job for this + 1 s
(its default, 120 s, would make every requeue scenario wait two minutes)."""
MIN_JOB_AGE_S = 16
"""How long a finished job stays in slurmctld's records. `sbatch --wait` polls every 2, 8, then up to 32 s
while that is below min_job_age / 2: 16 keeps its polls at 8 s, and the record outlives them."""


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be installed or started here; the message says why (tests skip with it)."""


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None]


def install(log: Path) -> bool:
    """Install Debian's Slurm and munge packages when a command is missing (root only); whether it did."""
    if not missing_commands():
        return False
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"Slurm is not installed ({', '.join(missing_commands())} missing) and installing it needs root")
    if shutil.which("apt-get") is None:
        raise SlurmUnavailable("Slurm is not installed and this machine has no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    with open(log, "ab") as out, _services_held():
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env).returncode == 0
        if not done:  # a fresh machine may have no package lists yet
            subprocess.run(["apt-get", "update", "-q"], stdout=out, stderr=subprocess.STDOUT, env=env)
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env).returncode == 0
    if not done or missing_commands():
        raise SlurmUnavailable(f"apt-get could not install {' '.join(PACKAGES)}; see {log}")
    return True


@contextlib.contextmanager
def _services_held() -> Iterator[None]:
    """While the packages install, Debian's policy-rc.d says no to starting their services (the system's
    munged, slurmctld and slurmd), so that nothing of theirs runs; a policy the machine has is left alone."""
    policy = Path("/usr/sbin/policy-rc.d")
    if policy.exists():
        yield
        return
    policy.write_text("#!/bin/sh\n# chaos-harness: no service starts while Slurm's packages install\nexit 101\n")
    policy.chmod(0o755)
    try:
        yield
    finally:
        policy.unlink(missing_ok=True)


def slurm_conf(home: Path, host: str, cpus: int, ctld_port: int, node_ports: list[int]) -> str:
    """The cluster's slurm.conf: one controller and one slurmd per port, on loopback, no accounting."""
    nodes = [
        f"NodeName={host}-n{i} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} State=UNKNOWN"
        for i, port in enumerate(node_ports)
    ]
    lines = [
        "ClusterName=chaos",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={home / 'munge' / 'munge.socket'},cred_expire={CRED_EXPIRE_S}",
        f"StateSaveLocation={home / 'state'}",
        f"SlurmdSpoolDir={home / 'spool' / '%n'}",
        f"SlurmctldPidFile={home / 'slurmctld.pid'}",
        f"SlurmdPidFile={home / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={home / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={home / 'log' / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SchedulerType=sched/builtin",
        "SchedulerParameters=sched_interval=2",
        "KillWait=10",
        f"MinJobAge={MIN_JOB_AGE_S}",
        "InactiveLimit=0",
        *nodes,
        "PartitionName=chaos Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class OneHostSlurm:
    """A private Slurm cluster of `nodes` simulated nodes on this host; ``with`` starts and stops it."""

    nodes: int = 1
    keep_logs: Path | None = None
    """Where the daemons' logs are copied when the cluster stops (None: not kept)."""
    home: Path = field(init=False)
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict, init=False)
    ports: Ports | None = field(default=None, init=False)
    node_names: list[str] = field(default_factory=list, init=False)
    install_s: float | None = field(default=None, init=False)
    """Seconds apt-get took to install the packages; None when they were there already."""
    startup_s: float | None = field(default=None, init=False)
    """Seconds from start() to every node idle (the packages' install excluded)."""

    def __post_init__(self) -> None:
        # Under /tmp, not pytest's 0700 folders: munged wants every folder above its socket searchable by all.
        self.home = Path(tempfile.mkdtemp(prefix="chaos-slurm-"))

    @property
    def conf(self) -> Path:
        return self.home / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, srun, scontrol, python -m chaos) needs in its environment to use this cluster."""
        return {"SLURM_CONF": str(self.conf), MARKER_VAR: str(self.home)}

    def __enter__(self) -> OneHostSlurm:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 60.0) -> None:
        """Install when missing, write the config, start munged, slurmctld and the slurmds; wait until idle."""
        self.home.chmod(0o755)
        for sub in ("munge", "state", "spool", "log"):
            (self.home / sub).mkdir(mode=0o755)
        begin = time.monotonic()
        if install(self.home / "log" / "apt-get.log"):
            self.install_s = time.monotonic() - begin
        if os.geteuid() != 0:
            raise SlurmUnavailable("the one-host Slurm runs its daemons as root (slurmd starts jobs as their users)")
        begin = time.monotonic()
        self.ports = reserve_ports(1 + self.nodes)
        host = socket.gethostname().split(".")[0]
        self.node_names = [f"{host}-n{i}" for i in range(self.nodes)]
        ctld, *nodes = self.ports.ports
        self.conf.write_text(slurm_conf(self.home, host, len(os.sched_getaffinity(0)), ctld, nodes))
        self._start_munged()
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        for name in self.node_names:
            self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-f", str(self.conf), "-N", name])
        self._wait_idle(begin + timeout_s)
        self.startup_s = time.monotonic() - begin

    def _start_munged(self) -> None:
        key = self.home / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munge = self.home / "munge"
        self._spawn("munged", [
            "munged", "--foreground", f"--socket={munge / 'munge.socket'}", f"--key-file={key}",
            f"--pid-file={munge / 'munged.pid'}", f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}",
        ])
        self._wait(lambda: (munge / "munge.socket").exists(), time.monotonic() + 10, "munged made no socket")

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.home / "log" / f"{name}.out", "ab")  # noqa: SIM115 - the child holds it; closed below
        with log:
            self.daemons[name] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.home,
                env={**os.environ, "SLURM_CONF": str(self.conf)}, start_new_session=True,
            )

    def _wait_idle(self, deadline: float) -> None:
        def idle() -> bool:
            out = self.client(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout.split()
            return dict(zip(out[::2], out[1::2], strict=False)) == dict.fromkeys(self.node_names, "idle")

        self._wait(idle, deadline, f"the nodes did not become idle in sinfo; logs in {self.home / 'log'}")

    def _wait(self, ready, deadline: float, problem: str) -> None:  # noqa: ANN001 - a predicate
        while not ready():
            dead = [name for name, proc in self.daemons.items() if proc.poll() is not None]
            if dead or time.monotonic() > deadline:
                detail = f" ({', '.join(dead)} exited: {self._tail(dead[0])})" if dead else ""
                raise SlurmUnavailable(problem + detail)
            time.sleep(0.2)

    def _tail(self, name: str) -> str:
        with contextlib.suppress(OSError):
            return " | ".join((self.home / "log" / f"{name}.out").read_text(errors="replace").splitlines()[-3:])
        return ""

    def client(self, argv: list[str], check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout, env={**os.environ, **self.env})

    def jobs(self) -> list[str]:
        """Ids of the jobs slurmctld still holds as pending, running or completing."""
        if "slurmctld" not in self.daemons or self.daemons["slurmctld"].poll() is not None:
            return []
        return self.client(["squeue", "-h", "-o", "%i"], check=False).stdout.split()

    def cancel_jobs(self, timeout_s: float = 60.0) -> list[str]:
        """scancel every job and wait until slurmctld lists none; returns the ids that were there."""
        jobs = self.jobs()
        if jobs:
            self.client(["scancel", *jobs], check=False)
            end = time.monotonic() + timeout_s
            while self.jobs() and time.monotonic() < end:
                time.sleep(0.5)
        return jobs

    def stop(self) -> list[int]:
        """Cancel every job, SIGKILL what is left of them, stop the daemons by pid; returns the pids killed."""
        self.cancel_jobs()
        killed = self.kill_leftovers()
        # In the reverse of the start order, one at a time: slurmctld waits on munged to shut down.
        for proc in reversed(self.daemons.values()):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        killed += self.kill_leftovers()
        if self.ports is not None:
            self.ports.release()
            self.ports = None
        if self.keep_logs is not None:
            shutil.copytree(self.home / "log", self.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(self.home, ignore_errors=True)
        return killed

    def leftovers(self) -> list[int]:
        """Live processes of the cluster's jobs: its slurmstepds and their descendants, and the marked ones."""
        daemons = {p.pid for p in self.daemons.values()}
        found = set()
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in (os.getpid(), *daemons):
                continue
            pid = int(entry.name)
            up = parent(pid)
            if up is None or not alive(pid):
                continue
            parents[pid] = up
            if proc_environ(pid).get(MARKER_VAR) == str(self.home) or _is_stepd_of(pid, self.home):
                found.add(pid)
        grown = True
        while grown:  # and every descendant of those
            more = {pid for pid, parent in parents.items() if parent in found and pid not in found}
            found |= more
            grown = bool(more)
        return sorted(found)

    def kill_leftovers(self) -> list[int]:
        """SIGKILL every process of the cluster's jobs still alive; returns their pids."""
        left = self.leftovers()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return left


def _is_stepd_of(pid: int, home: Path) -> bool:
    """A slurmstepd of this cluster: slurmd starts them in its working folder, the cluster's."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"slurmstepd") and os.readlink(f"/proc/{pid}/cwd") == str(home)
    except OSError:
        return False

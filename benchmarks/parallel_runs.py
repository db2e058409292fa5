"""Many runs at once, and a process that takes their workers' master ports: does any run fail to start or
spend a restart on a port? (issue 30 §2)

    python -m benchmarks.parallel_runs [--runs 16] [--trainers 2] [--rounds 3] [--attack] [--network machine]

Each round starts ``--runs`` ``python -m chaos run`` processes at once, as parallel CI jobs or pytest-xdist
workers do: ``--trainers`` of them our trainer (world 2, 3 steps), the rest a foreign command under
ft_launcher that starts as Megatron does (rank 0 serves its store on MASTER_PORT,
tests/functional/standalone/master_port.py). ``--attack`` adds a thief of no run (a thread of this process,
without any run's marker): it watches /proc for each worker of the round as it appears and binds, in the
machine's network, the ports the worker will use (its MASTER_PORT and CHAOS_STORE_PORT), before the worker
can. ``--network machine`` runs without the
runs' network namespaces (CHAOS_NETWORK=machine: the fallback of a machine that refuses them), where the
attacker takes only ports of the machine's ephemeral range: those a ``bind(0)`` or an outgoing connection
of another job lands on. A port bound on purpose in a shared network is lost to whoever binds it first;
only a network of the run's own stops that. Counted per round: runs, collisions (a launcher or worker log
that says EADDRINUSE), restarts (the launchers' restart lines), failed runs, the ports the attacker took,
wall time and CPU. The functional test (tests/functional/test_parallel_runs.py) runs one round of each and
wants zero collisions and restarts; a control, where the thief takes every port in the machine's network,
wants the collision.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from chaos.supervise.isolation import NETWORK_VAR
from chaos.supervise.procs import proc_environ
from runlog.env import RUN_ID_VAR, STORE_PORT_VAR

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "functional" / "standalone" / "master_port.py"
COLLISION = ("EADDRINUSE", "Address already in use", "address already in use")


def scenario(name: str, trainer: bool) -> dict:
    """A three-step run of our trainer, or of the Megatron-style start-up command, under ft_launcher."""
    base = {"schema_version": 1, "name": name, "world_size": 2, "launcher": "ft_launcher", "deadline_s": 60}
    expect = {"exit_code": 0, "restarts": 0, "completed_steps": 3}
    if trainer:
        settings = {"train.train_iters": 3, "checkpoint.save_interval": 100, "ft.enable_ft_package": True}
        return {**base, "description": "our trainer, three steps", "trainer": settings, "expect": expect}
    return {
        **base, "description": "a Megatron-style start-up on MASTER_PORT", "command": ["python", str(SCRIPT), "--steps", "3"],
        "step_pattern": r"^step (?P<step>\d+) loss (?P<loss>\S+)", "expect": expect,
    }


@dataclass
class RunResult:
    name: str
    cli_exit: int
    restarts: int | None
    collided: bool
    network: str | None
    ports_taken: int = 0
    """Ports of this run's workers that the attacker bound before them."""


@dataclass
class Round:
    runs: int
    collisions: int
    restarts: int
    failed: int
    ports_taken: int
    wall_s: float
    cpu_s: float
    """User and system CPU of the round's process trees: over the machine's cores, the least wall time it can take."""
    networks: list[str] = field(default_factory=list)
    results: list[RunResult] = field(default_factory=list)


class Attacker(threading.Thread):
    """A thief of no run: binds each new worker's MASTER_PORT and CHAOS_STORE_PORT in the machine's
    network as soon as the worker shows in /proc (one scan of new pids every 5 ms), and holds them."""

    def __init__(self, tag: str, ephemeral_only: bool):
        super().__init__(daemon=True)
        self.tag, self.ephemeral_only = tag, ephemeral_only
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        self.ephemeral = range(low, high + 1)
        self.held: list[socket.socket] = []
        self.taken: dict[str, list[int]] = {}
        """By run id: the ports it bound."""
        self.settled: set[int] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for entry in os.scandir("/proc"):
                if entry.name.isdigit() and int(entry.name) not in self.settled:
                    self._look(int(entry.name))
            time.sleep(0.005)

    def _look(self, pid: int) -> None:
        env = proc_environ(pid)
        if not env.get(RUN_ID_VAR, "").startswith(self.tag):
            if env:
                self.settled.add(pid)  # not of a round's run (a launcher's fork is, once it execs a worker)
            return
        if "RANK" not in env:
            return
        self.settled.add(pid)
        for var in ("MASTER_PORT", STORE_PORT_VAR):
            if var in env and (not self.ephemeral_only or int(env[var]) in self.ephemeral):
                self._take(env[RUN_ID_VAR], int(env[var]))

    def _take(self, run_id: str, port: int) -> None:
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", port))
            s.listen()
        except OSError:  # bound already: by the worker (too late) or by this attacker for its peer
            s.close()
            return
        self.held.append(s)
        self.taken.setdefault(run_id, []).append(port)

    def close(self) -> None:
        self.stop.set()
        self.join()
        for s in self.held:
            s.close()


def run_round(out: Path, runs: int, trainers: int, attack: bool, network: str = "run", every_port: bool = False) -> Round:
    """Start `runs` runs at once (`trainers` of them our trainer), wait for all, count. `every_port`: the
    attacker takes every worker port in the machine's network too, not only those of the ephemeral range."""
    tag = f"par{uuid.uuid4().hex[:6]}"
    files = []
    for i in range(runs):
        path = out / f"{tag}-{i:02d}.yaml"
        path.write_text(yaml.safe_dump(scenario(f"{tag}-{i:02d}", trainer=i < trainers), sort_keys=False))
        files.append(path)
    env = {**os.environ, NETWORK_VAR: network}
    attacker = Attacker(tag, ephemeral_only=network == "machine" and not every_port) if attack else None
    if attacker:
        attacker.start()
    start, cpu = time.monotonic(), _children_cpu()
    procs = [
        subprocess.Popen([sys.executable, "-m", "chaos", "run", str(f), "--out", str(out), "--json"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env, cwd=ROOT, text=True)
        for f in files
    ]
    outputs = [p.communicate()[0] for p in procs]
    wall, cpu = time.monotonic() - start, _children_cpu() - cpu
    taken: dict[str, list[int]] = {}
    if attacker:
        taken = attacker.taken
        attacker.close()
    results = [_result(f.stem, p.returncode, o, taken) for f, p, o in zip(files, procs, outputs, strict=True)]
    return Round(
        runs=runs, collisions=sum(r.collided for r in results), restarts=sum(r.restarts or 0 for r in results),
        failed=sum(r.cli_exit != 0 for r in results), ports_taken=sum(r.ports_taken for r in results), wall_s=round(wall, 1), cpu_s=round(cpu, 1),
        networks=sorted({r.network or "?" for r in results}), results=results,
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _result(name: str, code: int, output: str, taken: dict[str, list[int]]) -> RunResult:
    """One run's counts, from its journal (the CLI's JSON names its folder) and its launcher logs."""
    try:
        run_dir = Path(json.loads(output)["run_dir"])
        journal = json.loads((run_dir / "journal.json").read_text())
    except (json.JSONDecodeError, KeyError, OSError):
        return RunResult(name, code, None, False, None)
    logs = [p.read_text(errors="replace") for p in run_dir.glob("launcher*.log")]
    launch = next((e for e in journal["timeline"] if e["event"] == "launch"), {})
    network = launch.get("info", {}).get("network")
    collided = any(c in log for log in logs for c in COLLISION)
    restarts = sum(1 for e in journal["timeline"] if e["event"] == "restart")  # the launcher's own lines
    return RunResult(name, code, restarts, collided, network, len(taken.get(run_dir.name, [])))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.parallel_runs", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=16)
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--attack", action="store_true")
    p.add_argument("--network", choices=("run", "machine"), default="run")
    p.add_argument("--every-port", action="store_true", help="with --network machine: the attacker takes every worker port")
    p.add_argument("--out", type=Path, default=ROOT / "chaos-runs" / "parallel")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rounds = []
    for _ in range(args.rounds):
        r = run_round(args.out.resolve(), args.runs, args.trainers, args.attack, args.network, args.every_port)
        rounds.append(r)
        print(f"round: {r.runs} runs ({', '.join(r.networks)}), {r.collisions} collisions, {r.restarts} restarts, "
              f"{r.failed} failed, attacker took {r.ports_taken} ports, {r.wall_s} s ({r.cpu_s} CPU-s)", flush=True)
    (args.out / "parallel_runs.json").write_text(json.dumps([asdict(r) for r in rounds], indent=1))
    return 0 if all(r.collisions == r.restarts == r.failed == 0 for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())

"""A run's own piece of the machine: a network no other run or process shares, private tmpfs mounts, and
for simulated nodes a network per node joined by virtual links. One owner, one teardown path.

    room = Isolation(network=True, tmpfs={run_dir / "checkpoints": 8 << 20}).start(env, tag=run_id)
    argv = deathsig.wrap(agent_argv, enter=room.holder_pid(node))   # the agent starts inside
    ...
    left = room.close()      # [] when nothing of the run's namespaces is left; else what is, by name

chaos/supervise/launch.py does exactly this for every agent when a ``LaunchSpec`` carries an ``Isolation``
(the runner's is ``Isolation(network=True)``); a fault that needs more asks for it there (``tmpfs``, or
``node_networks`` for network faults). Each namespace set is held by one small process
(chaos/supervise/nshold.py, started through the parent-death wrapper): the agents join its namespaces with
``setns`` before they exec, and everything they start inherits them. Nothing is named or bind-mounted, so
a namespace ends with its last process, whatever the run's end (SIGKILL of the runner included: the
holders die of their parent-death signal, the watchdog kills the run's processes); its links and mounts go
with it. ``close`` ends the holders, waits for the namespaces to be gone, and returns what is still there
(a process, open descriptor or mount that holds one, or a link of the run in the machine's namespace):
reported as a leftover, like a process.

- ``network``: the agents, workers and rank monitors run in one network namespace of the run (loopback up):
  no two runs' ports can collide, and no process outside the run can take a worker's master port. Where
  the machine refuses (not root, no network namespaces), the room falls back to the machine's network
  and the run's claimed ports (chaos/supervise/ports.py): ``mode`` is ``"ports"`` and ``reason`` says why.
- ``tmpfs``: ``{path: bytes}``, a tmpfs of that size on each path (an existing folder) in a private mount
  namespace that the agents join; the runner itself sees the plain folder, and the mounted files through
  ``/proc/<holder_pid(node)>/root/<path>`` while the room is open. No fallback: ``start`` raises
  ``IsolationUnavailable`` with the reason (``unavailable()`` says it before a run, for a skip).
- ``infiniband``: NIC names the launch's /sys/class/infiniband lists (a folder each), in its private mount
  namespace, on a host with no InfiniBand or in place of its own (chaos/supervise/nshold.py says how):
  what NVRx's NIC link state health check enumerates (the nic_link_down fault). No fallback.
- ``node_networks``: the simulated nodes' names; each gets a network namespace of its own (and the tmpfs
  mounts, as its local disk) with two links (``LINKS``): ``eth0`` at ``address(node)`` (10.77.0.<i+1>)
  for the rendezvous and stores, ``eth1`` (10.78.0.<i+1>) for the collectives, each a veth to a bridge in
  a hub namespace of the run. ``set_link(node, up)`` cuts a node's data link or brings it back,
  ``shape(node, ...)`` limits it (the kernel's token bucket, ``tc tbf``: this kernel has no netem).
  No fallback either.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from chaos.supervise import deathsig
from chaos.supervise.procs import proc_environ

HOLDER = Path(__file__).with_name("nshold.py")
NETWORK_VAR = "CHAOS_NETWORK"
"""``machine``: the runs of this process tree keep the machine's network and their claimed ports (the
fallback) even where namespaces work, e.g. to reach a worker's port from outside; ``run`` (the default):
each run its own."""
LINKS = ("control", "data")
"""A node's two links, as a cluster node has its Ethernet and its training fabric: ``control`` (eth0,
10.77.0.0/24) carries the rendezvous and the stores, ``data`` (eth1, 10.78.0.0/24) the collectives (gloo
binds it: GLOO_SOCKET_IFNAME). Each has its own bridge in the hub."""
SUBNETS = {"control": "10.77.0", "data": "10.78.0"}
NODE_IFS = {"control": "eth0", "data": "eth1"}
DATA_IF = NODE_IFS["data"]
KINDS = ("net", "mnt")
HOLDER_VAR = "CHAOS_NS_HOLDER"
"""Set on a run's holders to its link tag: a holder of another run that made its namespace just after ours
was freed holds one with our namespace's inode number, and is told apart by it (``still_held``)."""


class IsolationUnavailable(RuntimeError):
    """This machine cannot give a run the isolation it asked for (and that has no fallback)."""


@dataclass(frozen=True)
class Isolation:
    """What a run's agents start inside (the module docstring says what each part is and its fallback)."""

    network: bool = True
    tmpfs: Mapping[Path, int] = field(default_factory=dict)
    node_networks: tuple[str, ...] = ()
    infiniband: tuple[str, ...] = ()

    def start(self, env: Mapping[str, str], tag: str) -> Room:
        """The namespaces, set up; `env` is their holders' environment, `tag` names the run's links."""
        room = Room(tag=link_tag(tag))
        mounts = [(str(Path(p).resolve()), size) for p, size in self.tmpfs.items()]
        nics = self.infiniband
        try:
            if self.node_networks:
                room.mode = "node-networks"
                room.hub = _hold(True, [], (), env, room.tag)
                for i, node in enumerate(self.node_networks):
                    room.holders[node] = _hold(True, mounts, nics, env, room.tag)
                    _wire(room, node, i)
            elif self.network or mounts or nics:
                room.holders[None] = _hold(self.network, mounts, nics, env, room.tag)
                room.mode = "netns" if self.network else "ports"
        except IsolationUnavailable as e:
            room.close()
            if mounts or nics or self.node_networks:
                raise
            room.mode, room.reason = "ports", str(e)
        return room


def node_address(index: int) -> str:
    """Node `index`'s address on the run's bridge (node 0's is the rendezvous endpoint)."""
    return f"{SUBNETS['control']}.{index + 1}"


def link_tag(run_id: str) -> str:
    """The prefix of a run's link names (``cx`` and 6 hex digits of the run's id): 15 characters at most."""
    return "cx" + format(zlib.crc32(run_id.encode()) & 0xFFFFFF, "06x")


@dataclass
class Holder:
    """One holder process and the inodes of the namespaces it made (their identity while they exist)."""

    proc: subprocess.Popen
    namespaces: dict[str, int]

    @property
    def pid(self) -> int:
        return self.proc.pid


def _hold(net: bool, mounts: list[tuple[str, int]], nics: tuple[str, ...], env: Mapping[str, str], tag: str) -> Holder:
    listed = [f"--infiniband={','.join(nics)}"] if nics else []
    argv = [sys.executable, "-I", "-S", str(HOLDER), "1" if net else "0", *listed, *(f"{p}={s}" for p, s in mounts)]
    proc = subprocess.Popen(
        deathsig.wrap(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**env, HOLDER_VAR: tag}, start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    if proc.stdout.readline().strip() != b"ready":
        proc.wait()
        lines = proc.stderr.read().decode(errors="replace").strip().splitlines()
        raise IsolationUnavailable(lines[-1].removeprefix("nshold: ") if lines else f"holder exit {proc.returncode}")
    own = {kind: os.stat(f"/proc/self/ns/{kind}").st_ino for kind in KINDS}
    made = {kind: os.stat(f"/proc/{proc.pid}/ns/{kind}").st_ino for kind in KINDS}
    return Holder(proc, {kind: ino for kind, ino in made.items() if ino != own[kind]})


def _inside(holder: Holder | None, argv: list[str], stdin: str | None = None) -> None:
    """Run `argv` inside `holder`'s network namespace (None: the machine's); IsolationUnavailable if it fails."""
    enter = [] if holder is None else ["nsenter", f"--net=/proc/{holder.pid}/ns/net"]
    try:
        done = subprocess.run([*enter, *argv], input=stdin, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise IsolationUnavailable(f"{e.filename} is not installed") from None
    if done.returncode != 0:
        raise IsolationUnavailable(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")


def _ip(holder: Holder, *commands: str) -> None:
    """`ip` commands (batch lines) inside `holder`'s network namespace."""
    _inside(holder, ["ip", "-batch", "-"], "\n".join(commands) + "\n")


def _wire(room: Room, node: str, index: int) -> None:
    """Node `index`'s links: each a veth whose other end is a port of that link's bridge in the hub."""
    hub, inside = room.hub, room.holders[node]
    assert hub is not None
    for link in LINKS:
        bridge, port, dev = f"br-{link}", room.port(node, link), NODE_IFS[link]
        if index == 0:
            _ip(hub, f"link add {bridge} type bridge", f"link set {bridge} up")
        # made straight into the two namespaces: the machine's never has a link of the run
        _inside(None, ["ip", "link", "add", "name", port, "netns", str(hub.pid), "type", "veth", "peer", "name", dev, "netns", str(inside.pid)])
        _ip(hub, f"link set {port} master {bridge}", f"link set {port} up")
        _ip(inside, f"addr add {SUBNETS[link]}.{index + 1}/24 dev {dev}", f"link set {dev} up")


@dataclass
class Room:
    """The live isolation of one launch; ``close()`` is its one teardown."""

    tag: str
    mode: Literal["netns", "node-networks", "ports"] = "ports"
    """The run's network: its own, one per node, or the machine's with the run's claimed ports."""
    reason: str | None = None
    """Why the run fell back to the machine's network; None when it asked for no network of its own."""
    holders: dict[str | None, Holder] = field(default_factory=dict)
    hub: Holder | None = None

    def holder_pid(self, node: str | None) -> int | None:
        """The process whose namespaces `node`'s agent joins (None: the machine's, nothing to join)."""
        holder = self.holders.get(node if self.mode == "node-networks" else None)
        return None if holder is None else holder.pid

    def address(self, node: str) -> str:
        """`node`'s address in its own network (node-networks), else loopback."""
        return node_address(list(self.holders).index(node)) if self.mode == "node-networks" else "127.0.0.1"

    def port(self, node: str, link: str) -> str:
        """The name of `node`'s port on the hub's bridge of `link`."""
        return f"{self.tag}{link[0]}{list(self.holders).index(node)}"

    def describe(self) -> str:
        """What the launch event records."""
        if self.mode == "ports":
            return "claimed ports" + (f" (no network namespace: {self.reason})" if self.reason else "")
        return "netns" if self.mode == "netns" else f"netns per node ({len(self.holders)}), bridged"

    def set_link(self, node: str, up: bool, links: tuple[str, ...] = ("data",)) -> None:
        """Cut `node` off from the others on `links` (its bridge ports down) or connect it again."""
        assert self.hub is not None, "set_link needs node_networks"
        _ip(self.hub, *(f"link set {self.port(node, link)} {'up' if up else 'down'}" for link in links))

    def shape(self, node: str, rate_kbit: int | None, queue_ms: int = 0) -> None:
        """Limit `node`'s data link both ways to `rate_kbit` (a token bucket whose queue holds `queue_ms` of
        traffic: packets wait in it, the delay, and what overflows it is dropped, the loss); None lifts it."""
        assert self.hub is not None, "shape needs node_networks"
        ends = [(self.hub, self.port(node, "data")), (self.holders[node], DATA_IF)]
        for holder, dev in ends:
            if rate_kbit is None:
                _inside(holder, ["tc", "qdisc", "del", "dev", dev, "root"])
            else:
                _inside(holder, ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{rate_kbit}kbit",
                                 "burst", "16kb", "latency", f"{max(queue_ms, 1)}ms"])

    def close(self, timeout_s: float = 3.0) -> list[str]:
        """End the holders, wait for the namespaces to go, and name whatever of them (or of the run's
        links in the machine's namespace) is still there."""
        holders = [*self.holders.values(), *([self.hub] if self.hub else [])]
        closing = since_boot()
        for holder in holders:
            if holder.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    holder.proc.stdin.close()
        for holder in holders:
            try:
                holder.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                holder.proc.kill()
                holder.proc.wait()
        inodes = {ino: kind for h in holders for kind, ino in h.namespaces.items()}
        end = time.monotonic() + timeout_s
        while (left := still_held(inodes, closing, self.tag) + links_left(self.tag)) and time.monotonic() < end:
            time.sleep(0.05)
        self.holders, self.hub = {}, None
        return left


def still_held(inodes: Mapping[int, str], before: float | None = None, own: str | None = None) -> list[str]:
    """Which of these namespaces something still holds: a process inside, an open descriptor, a mount.

    ``before`` (seconds since boot, ``since_boot()``): only processes started before it count. The kernel
    hands a freed namespace's inode number to the next namespace made, another run's, a moment later; a
    process of ours still inside ours was started before we let it go (a child it forks later is listed
    through its older parent), so a younger one holds another namespace of the same number. ``own``: our
    holders' tag; a holder of another run (``HOLDER_VAR``) is older than that moment when it was started
    before it and made its namespace after, so it is told apart by its tag."""
    if not inodes:
        return []
    names = {f"{kind}:[{ino}]": ino for ino, kind in inodes.items()}
    held = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (before is not None and _started_after(entry, before)):
            continue
        links = [entry / "ns" / kind for kind in KINDS]
        with contextlib.suppress(OSError):
            links += list((entry / "fd").iterdir())
        for link in links:
            with contextlib.suppress(OSError):
                if (target := os.readlink(link)) in names and not _another_runs_holder(int(entry.name), own):
                    held.append(f"{target} held by pid {entry.name}")
    with contextlib.suppress(OSError):
        mounts = Path("/proc/self/mountinfo").read_text()
        held += [f"{name} bind-mounted" for name in names if name in mounts]
    return sorted(set(held))


def _another_runs_holder(pid: int, own: str | None) -> bool:
    tag = proc_environ(pid).get(HOLDER_VAR)
    return own is not None and tag is not None and tag != own


def since_boot() -> float:
    """Seconds since boot, the clock of a process's start time in /proc/<pid>/stat."""
    return float(Path("/proc/uptime").read_text().split()[0])


def _started_after(proc: Path, moment: float) -> bool:
    """Whether the process started after ``moment`` (seconds since boot); a process gone meanwhile: False."""
    try:
        stat = (proc / "stat").read_text()
    except OSError:
        return False
    start_ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after the command in parentheses
    return start_ticks / os.sysconf("SC_CLK_TCK") > moment


def links_left(tag: str) -> list[str]:
    """The run's links in the machine's network namespace (there should never be any)."""
    return sorted(f"link {p.name}" for p in Path("/sys/class/net").glob(f"{tag}*"))


@cache
def unavailable() -> str | None:
    """Why this machine cannot give a run namespaces of its own (network, mount), or None: a probe holder."""
    try:
        Isolation(network=True, node_networks=("probe",)).start(os.environ, "probe").close()
    except IsolationUnavailable as e:
        return str(e)
    return None

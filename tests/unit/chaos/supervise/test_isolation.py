"""A run's namespaces with real processes: its own network, bounded tmpfs mounts, node networks joined by a
bridge, cut and limited links, the fallback where namespaces are refused, and nothing left after close."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chaos.supervise import deathsig
from chaos.supervise.isolation import (
    HOLDER_VAR,
    Isolation,
    IsolationUnavailable,
    Room,
    links_left,
    since_boot,
    still_held,
    unavailable,
)
from chaos.supervise.storage import mount_points

needs_namespaces = pytest.mark.skipif(unavailable() is not None, reason=f"no namespaces here: {unavailable()}")


def inside(room: Room, node: str | None, code: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """`code` run by this interpreter inside `node`'s namespaces, as an agent is started."""
    argv = deathsig.wrap([sys.executable, "-c", textwrap.dedent(code)], enter=room.holder_pid(node))
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def _inside(pid: int, inodes: dict[int, str]) -> bool:
    """Whether `pid` has joined the network namespace of `inodes` (the room's)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino in inodes
    except FileNotFoundError:
        return False


def _inodes(room: Room) -> dict[int, str]:
    holders = [*room.holders.values(), *([room.hub] if room.hub else [])]
    return {ino: kind for h in holders for kind, ino in h.namespaces.items()}


@needs_namespaces
def test_a_port_taken_on_the_machine_is_free_inside_the_run_and_nothing_is_left(tmp_path: Path) -> None:
    import socket

    room = Isolation(network=True).start(os.environ, "test-netns")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        done = inside(room, None, f"""
            import os, socket
            s = socket.socket(); s.bind(("127.0.0.1", {port})); s.listen()
            print(sorted(name for _, name in socket.if_nameindex()))""")
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[0] == "['lo']"
        assert room.describe() == "netns" and room.reason is None
        inodes = _inodes(room)
        assert set(inodes.values()) == {"net"}
    finally:
        taken.close()
        closing = since_boot()
        assert room.close() == []
    assert still_held(inodes, closing) == []


@needs_namespaces
def test_a_tmpfs_of_the_run_fills_up_with_enospc_inside_and_the_machine_never_sees_it(tmp_path: Path) -> None:
    disk = tmp_path / "ckpt"
    disk.mkdir()
    room = Isolation(network=True, tmpfs={disk: 1 << 20}).start(os.environ, "test-tmpfs")
    try:
        done = inside(room, None, f"""
            import errno
            try:
                open("{disk}/big", "wb").write(bytes(2 << 20))
            except OSError as e:
                print(errno.errorcode[e.errno])""")
        assert done.stdout.strip() == "ENOSPC", done.stderr
        seen = Path(f"/proc/{room.holder_pid(None)}/root") / str(disk).lstrip("/") / "big"
        assert seen.stat().st_size == 1 << 20  # the runner reads the mounted files through the holder
        assert list(disk.iterdir()) == []
    finally:
        assert room.close() == []
    assert str(disk) not in Path("/proc/self/mountinfo").read_text()


@needs_namespaces
def test_a_launch_lists_its_own_infiniband_nics_beside_the_machines_classes_and_the_machine_never_sees_them() -> None:
    machine_classes = sorted(c for c in os.listdir("/sys/class") if c != "infiniband")
    before = mount_points("/sys/class")
    room = Isolation(network=True, infiniband=("chaos_ib0", "chaos_ib1")).start(os.environ, "test-nics")
    try:
        done = inside(room, None, """
            import errno, os
            print(sorted(os.listdir("/sys/class/infiniband")))
            print(sorted(c for c in os.listdir("/sys/class") if c != "infiniband"))
            print(open("/sys/class/net/lo/ifindex").read().strip())  # the machine's classes read as before
            try:
                os.mkdir("/sys/class/infiniband/another")
            except OSError as e:
                print(errno.errorcode[e.errno])""")
        assert done.returncode == 0, done.stderr
        nics, classes, lo, mkdir = done.stdout.splitlines()
        assert (nics, classes, lo, mkdir) == ("['chaos_ib0', 'chaos_ib1']", str(machine_classes), "1", "EROFS")
        assert mount_points("/sys/class") == before  # nothing of it in the machine's namespace
    finally:
        assert room.close() == []
    assert mount_points("/sys/class") == before


@needs_namespaces
def test_a_process_still_inside_after_close_is_named_as_a_leftover(tmp_path: Path) -> None:
    room = Isolation(network=True).start(os.environ, "test-left")
    stray = subprocess.Popen(deathsig.wrap(["sleep", "30"], enter=room.holder_pid(None)))
    try:
        inodes = _inodes(room)
        deadline = time.monotonic() + 30  # the wrapper's start is slow on a loaded machine: wait until it is inside
        while not _inside(stray.pid, inodes) and stray.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        left = room.close(timeout_s=0.5)
        assert left == [f"net:[{next(iter(inodes))}] held by pid {stray.pid}"]
    finally:
        killed = since_boot()
        stray.kill()
        stray.wait()
    deadline = time.monotonic() + 3
    while still_held(inodes, killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert still_held(inodes, killed) == []


SERVE = """
    import socket, sys, time
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 29400)); s.listen(); print("listening", flush=True)
    while True:
        c, _ = s.accept()
        while c.recv(1 << 16):
            pass
        c.sendall(b"k")  # everything arrived
        c.close()
"""


def _send(room: Room, nbytes: int, timeout_s: float, to: str = "10.78.0.1") -> subprocess.CompletedProcess:
    """`nbytes` from node 1 to node 0 (its data link's address, or `to`), timed until node 0 has them all."""
    return inside(room, "node1", f"""
        import socket, time
        t = time.monotonic()
        try:
            c = socket.create_connection(("{to}", 29400), timeout={timeout_s})
            c.sendall(bytes({nbytes})); c.shutdown(socket.SHUT_WR); c.settimeout({timeout_s}); c.recv(1)
            print(f"sent {{time.monotonic() - t:.3f}}")
        except OSError as e:
            print(f"failed {{type(e).__name__}}")""")


@needs_namespaces
def test_node_networks_are_bridged_and_a_link_is_cut_limited_and_restored() -> None:
    room = Isolation(network=True, node_networks=("node0", "node1")).start(os.environ, "test-nodes")
    tag = room.tag
    server = subprocess.Popen(
        deathsig.wrap([sys.executable, "-c", textwrap.dedent(SERVE)], enter=room.holder_pid("node0")),
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None and server.stdout.readline() == "listening\n"
        assert (room.address("node0"), room.address("node1")) == ("10.77.0.1", "10.77.0.2")
        assert _send(room, 1 << 20, 5).stdout.startswith("sent"), "the data bridge joins the nodes"
        assert _send(room, 1 << 20, 5, to=room.address("node0")).stdout.startswith("sent"), "and the control one"
        room.set_link("node1", up=False)
        assert _send(room, 1000, 1).stdout.strip() == "failed TimeoutError", "a cut data link carries nothing"
        assert _send(room, 1000, 5, to=room.address("node0")).stdout.startswith("sent"), "the control link lives on"
        room.set_link("node1", up=True)
        room.shape("node1", rate_kbit=4000, queue_ms=200)
        slow = float(_send(room, 1 << 20, 10).stdout.split()[1])
        assert slow > 1.5, f"1 MiB at 4 Mbit/s takes about 2 s, took {slow}"  # 8 Mbit / 4 Mbit/s
        room.shape("node1", rate_kbit=None)
        assert float(_send(room, 1 << 20, 5).stdout.split()[1]) < 1.0
    finally:
        server.kill()
        server.wait()
        inodes = _inodes(room)
        closing = since_boot()
        assert room.close() == []
    assert still_held(inodes, closing) == [] and links_left(tag) == []


@needs_namespaces
def test_without_iproute2_a_run_still_gets_its_network_but_node_networks_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU machines have no `ip`: the loopback comes up by ioctl; veths and bridges need `ip`."""
    bare = {**os.environ, "PATH": "/nonexistent"}
    room = Isolation(network=True).start(bare, "test-no-ip")
    try:
        assert room.mode == "netns"
        done = inside(room, None, "import socket; s = socket.create_server(('127.0.0.1', 0)); print('lo up')")
        assert done.stdout.strip() == "lo up", done.stderr
    finally:
        assert room.close() == []
    monkeypatch.setenv("PATH", "/nonexistent")  # where the runner looks for nsenter and ip
    with pytest.raises(IsolationUnavailable, match="is not installed"):
        Isolation(node_networks=("node0", "node1")).start(bare, "test-no-ip")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to drop to nobody")
def test_a_user_without_the_privilege_falls_back_and_a_tmpfs_is_refused(tmp_path: Path) -> None:
    code = f"""
        import os, sys
        sys.path.insert(0, {str(Path(deathsig.__file__).parents[2])!r})
        from chaos.supervise.isolation import Isolation, IsolationUnavailable
        room = Isolation(network=True).start(os.environ, "test-nobody")
        print(room.mode, "|", room.reason)
        try:
            Isolation(network=True, tmpfs={{"/tmp": 1 << 20}}).start(os.environ, "test-nobody")
        except IsolationUnavailable as e:
            print("refused |", e)
        try:
            Isolation(network=False, infiniband=("chaos_ib0",)).start(os.environ, "test-nobody")
        except IsolationUnavailable as e:
            print("refused |", e)"""
    done = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-c", textwrap.dedent(code)],
        capture_output=True, text=True, timeout=30, cwd="/",
    )
    assert done.stdout.splitlines() == ["ports | unshare: Operation not permitted", *["refused | unshare: Operation not permitted"] * 2], done.stderr



@needs_namespaces
def test_a_sigkilled_runner_leaves_no_namespace_behind(tmp_path: Path) -> None:
    """A stand-in runner opens a room with a tmpfs and node networks, starts an agent inside, and is
    SIGKILLed: the holders die of their parent-death signal, the agent too, and the kernel removes the
    namespaces, links and mounts with them."""
    disk = tmp_path / "disk"
    disk.mkdir()
    code = textwrap.dedent(f"""
        import os, subprocess, sys
        sys.path.insert(0, {str(Path(deathsig.__file__).parents[2])!r})
        from pathlib import Path
        from chaos.supervise import deathsig
        from chaos.supervise.isolation import Isolation
        room = Isolation(tmpfs={{Path({str(disk)!r}): 1 << 20}}, node_networks=("node0", "node1")).start(os.environ, "test-kill")
        agent = subprocess.Popen(deathsig.wrap(["sleep", "60"], enter=room.holder_pid("node1")), start_new_session=True)
        inodes = {{ino: kind for h in [*room.holders.values(), room.hub] for kind, ino in h.namespaces.items()}}
        print(agent.pid, room.tag, repr(inodes), flush=True)
        agent.wait()
    """)
    runner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert runner.stdout is not None
    pid, tag, shown = runner.stdout.readline().split(" ", 2)
    inodes = eval(shown)  # noqa: S307 - the dict this test's own child printed
    assert set(inodes.values()) == {"net", "mnt"} and len(inodes) == 5  # hub net; per node net and mnt
    killed = since_boot()  # a namespace made later (another test's, another run's) may reuse a number
    runner.kill()
    runner.wait()
    end = time.monotonic() + 3
    while (still_held(inodes, killed) or Path(f"/proc/{pid}").exists()) and time.monotonic() < end:
        time.sleep(0.05)
    assert still_held(inodes, killed) == [] and not Path(f"/proc/{pid}").exists()
    assert links_left(tag) == [] and str(disk) not in Path("/proc/self/mountinfo").read_text()


@needs_namespaces
def test_a_launch_runs_its_agents_in_the_runs_network_and_says_so(tmp_path: Path) -> None:
    """The stand-in launcher sees only loopback; the launch event names the network; nothing is left."""
    import uuid

    from chaos.supervise.attempts import AttemptTracker
    from chaos.supervise.launch import Launch, LaunchSpec
    from runlog.log import EventLog
    from runlog.reader import read_events

    show = "import socket; print('links', sorted(n for _, n in socket.if_nameindex()))"
    spec = LaunchSpec(
        [sys.executable, "-c", show, "--rdzv-backend=c10d"], env={"PATH": os.environ["PATH"]}, run_dir=tmp_path,
        deadline_s=30, run_id=f"test-iso-{uuid.uuid4().hex[:8]}", isolation=Isolation(network=True),
    )
    attempts = AttemptTracker()
    events = EventLog(tmp_path, "launcher", rank=-1, attempt=attempts.launcher)
    launch = Launch(spec, events, attempts)
    result = launch.wait()
    events.close()
    assert (result.exit_code, result.leftovers, result.isolation_left) == (0, [], [])
    assert "links ['lo']" in (tmp_path / "launcher.log").read_text()
    launched = next(e for e in read_events(tmp_path) if e["event"] == "launch")
    assert launched["network"] == "netns"


def test_a_namespace_left_by_a_run_fails_processes_reaped() -> None:
    from chaos.judge.verdicts import harness_verdicts

    left = {"event": "leftover", "pids": [], "isolation": ["net:[4026532000] held by pid 123"], "rank": -1, "attempt": 0}
    reaped = next(v for v in harness_verdicts([left], 60.0) if v.name == "processes_reaped")
    assert not reaped.passed and reaped.observed == ["net:[4026532000] held by pid 123"]


def test_a_holder_of_another_run_in_a_namespace_of_the_same_number_is_not_ours() -> None:
    """The kernel gives a freed namespace's number to the next one made: another run's holder, started before
    our close and unshared after, holds a namespace of our number. Its tag tells it apart; a process of
    ours, or one with no tag, still counts. (The machine's own namespace stands in: every process holds it.)"""
    inodes = {os.stat("/proc/self/ns/net").st_ino: "net"}
    tags = {"another run's holder": {HOLDER_VAR: "cxother"}, "our holder": {HOLDER_VAR: "cxours"}, "untagged": {}}
    procs = {who: subprocess.Popen(["sleep", "30"], env={**os.environ, **extra}) for who, extra in tags.items()}
    try:
        deadline = time.monotonic() + 5
        while any("sleep" not in Path(f"/proc/{p.pid}/cmdline").read_text() for p in procs.values()):
            assert time.monotonic() < deadline, "the children exec sleep"
            time.sleep(0.02)
        held = {int(x.rsplit(" ", 1)[1]) for x in still_held(inodes, None, "cxours")}
        assert procs["another run's holder"].pid not in held
        assert {procs["our holder"].pid, procs["untagged"].pid} <= held
        assert procs["another run's holder"].pid in {int(x.rsplit(" ", 1)[1]) for x in still_held(inodes)}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()

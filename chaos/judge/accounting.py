"""Every failure accounted for: each attempt that did not complete is matched to the injected fault that
caused it, and each planned fault that never fired is named with the reason.

A chaos run proves a recovery only when the failures it recovered from are the ones it injected. A first
attempt that died of a port clash before its planned kill, then a clean second attempt, looked like a
recovery ("restart counted"); here it is an *unexplained failure* and the fault is *never due*.

Pure functions of the run's events, its plan records and the text of its launcher logs, so a run folder is
accounted for again from its files alone; judging a folder (chaos/judge/run.py) writes the accounting into
the run's event log as its own events (``unexplained_failure``, ``fault_never_due`` in
events/accounting.jsonl, written anew at each judging), and reads them never.

The rules:
- An attempt *failed* when a worker of it exited non-zero or of a signal, a rank of it exited on an error,
  an in-process restart aborted it, the launcher restarted after it or exited non-zero in it, or the
  deadline killed it. The
  first such sign is its failure (the struck rank's own, when a fault explains it); its peers' reactions
  are part of it.
- A failure is *explained* by a fault injected in the same attempt no later than the failure, or by an
  earlier attempt's fault when the failed attempt had started training again (a rank of it wrote
  ``run_start``, or an observed event of a trainer that writes none of its own): a recovery that failed
  is the stack's failure, judged by the recovery verdicts. An attempt that died before any of its ranks
  started, with no fault of its own, failed of something else (a port, a package, a crash at start-up),
  unless the launcher refused to start it because a health check before its rendezvous failed (NVRx 0.7,
  HEALTH_CHECK_FAILED): that is its reaction to the earlier fault (the newest of those the check looks at,
  HEALTH_CHECKED); or unless what it lacked was held by processes of an earlier attempt still running when
  it started (``leftovers_at_start``: chaos/supervise/leftovers.py): a port its EADDRINUSE names, a file its cause
  names, GPU memory of its CUDA OOM. Then the earlier attempt's fault explains it, as a failed recovery, and
  its cause names the resource and the processes (``port 27267 held by 4 pt_data_worker processes of
  attempt 0 (left over 3.5 s after the kill): ...``).
  A host_oom fault explains only a death the kernel's OOM killer caused: an ``oom_kill`` of the run's
  cgroup naming its rank (any other SIGKILL of that rank is unexplained); the failure's cause then says so.
- A planned fault is *never due* when it neither struck (``fault_injected``) nor came due without a
  target (``fault_missed``): its attempt ended, or the run ended, before its trigger.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runlog import names
from runlog.judge_records import FaultNeverDue, UnexplainedFailure
from runlog.layout import RunFolder
from runlog.log import EventLog

Event = dict[str, Any]

FAULT_SLACK_S = 0.5
"""A fault fired from outside is stamped when its signal went out; the worker's death can be stamped first."""

_RANK_FAILURES = frozenset({names.EXIT, names.INPROCESS_ABORT})
_LAUNCHER_ERROR = re.compile(r"^\[\d{4}-\d\d-\d\d [^\]]*\] \[(?:ERROR|WARNING|CRITICAL)\] \[")
"""An error the launcher (ft_launcher, NVRx's rank monitor) logs of itself, with its traceback after it
(NVML missing on a CPU machine): not a worker's."""
_TORCH_LOG = re.compile(r"^(?:[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ |\[\d{4}-\d\d-\d\d [^\]]*\] \[[A-Z]+\] \[)")
"""A line a launcher logs of itself at any level: torchrun's agent (glog style, ``E1204 01:56:49.383000 9488
torch/...``), ft_launcher and NVRx's rank monitor (``[2026-12-04 01:03:49,589] [INFO] [ft_launcher...]``)."""
_RANK_PREFIX = re.compile(r"^\[rank\d+\]:")
"""How torch prefixes a worker's lines once its process group exists: surely the worker's own."""
_EXCEPTION = re.compile(r"^(?:\[[^\]]*\]:?\s*)*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Failure|Exit)\b(?::.*)?)$")
"""A Python exception's last line (``torch.distributed.DistNetworkError: ... EADDRINUSE``), with any
``[rank0]:`` prefix the launcher put before it."""
_TRACEBACK = ("  ", "Traceback", "^")
_CHAINED = ("During handling", "The above exception")
_NONE, _IN, _FIRST, _ENDING = "none", "in", "first", "ending"
"""Where a line stands against a traceback the launcher logged: outside one, inside, at its first frame (a
``Traceback`` line just came), or after its exception line (where only a chained exception continues it)."""
_LIBRARY_FRAME = re.compile(r'^  File "(?:<frozen |[^"]*/(?:site|dist)-packages/)')
"""A traceback frame in installed code (the launcher's: NVRx, torch, pynvml). A traceback whose first frame
is not is a worker's own, printed right after a launcher's error record (``gpu_ib_map is empty``)."""


@dataclass(frozen=True)
class Failure:
    """One attempt that did not complete: who failed first, how, and the fault that explains it (or None)."""

    attempt: int
    rank: int | None
    """The first failing rank (a worker's local rank on its node, from the launcher's line); None: the job."""
    exit_code: int | None
    signal: str | None
    how: str
    """What showed the failure: worker_failed, exit, inprocess_abort, restart, launcher_exit, deadline."""
    mono: float
    wall: float
    cause: str
    explained_by: str | None = None
    """The fault_id of the injected fault that explains it; None: an unexplained failure."""
    recovery_of: bool = False
    """Explained as a failed recovery from an earlier attempt's fault (not the fault's own strike)."""

    def describe(self) -> str:
        who = "the job" if self.rank is None else f"rank {self.rank}"
        code = f"signal {self.signal}" if self.signal else f"exit code {self.exit_code}"
        return f"attempt {self.attempt}, {who}, {code}: {self.cause}"


@dataclass(frozen=True)
class NeverDue:
    """A planned fault that never fired, and why."""

    fault_id: str
    fault: str
    attempt: int
    reason: str

    def describe(self) -> str:
        return f"{self.fault_id} {self.fault}: never came due ({self.reason})"


@dataclass(frozen=True)
class Accounting:
    failures: tuple[Failure, ...]
    never_due: tuple[NeverDue, ...]

    @property
    def unexplained(self) -> tuple[Failure, ...]:
        return tuple(f for f in self.failures if f.explained_by is None)


def account(events: Iterable[Event], planned: Iterable[Mapping[str, Any]], logs: Mapping[str, str]) -> Accounting:
    """The run's failures, each matched to its fault, and its planned faults that never came due.

    ``logs``: the launcher logs' text by node ("" for the one-node launcher.log), where a failure's cause
    line is quoted from when no event carries it."""
    ordered = sorted((e for e in events if e["event"] not in OWN_EVENTS), key=lambda e: e["mono"])
    faults = [e for e in ordered if _is_injection(e)]
    failures = [_explain(signs, faults, ordered) for signs in _failures(ordered, logs)]
    return Accounting(tuple(failures), tuple(_never_due(planned, ordered)))


OWN_EVENTS = frozenset({names.UNEXPLAINED_FAILURE, names.FAULT_NEVER_DUE})
"""What an earlier accounting wrote (record_accounting): never an input to this one."""


def _failures(events: list[Event], logs: Mapping[str, str]) -> list[list[Failure]]:
    """The signs of failure of each attempt that failed, in attempt order, each attempt's in time order."""
    signs: dict[int, list[Failure]] = {}
    for e in events:
        failure = _failure(e, logs)
        if failure is not None:
            signs.setdefault(failure.attempt, []).append(failure)
    return [signs[a] for a in sorted(signs)]


def _failure(e: Event, logs: Mapping[str, str]) -> Failure | None:
    name = e["event"]
    if e["rank"] >= 0:
        if name == names.EXIT and e.get("code") not in (0, None):
            return Failure(e["attempt"], e["rank"], e["code"], None, name, e["mono"], e.get("wall", 0.0), _rank_cause(e))
        if name == names.INPROCESS_ABORT:
            cause = "NVRx's in-process restart aborted the iteration"
            return Failure(e["attempt"], e["rank"], None, None, name, e["mono"], e.get("wall", 0.0), cause)
        return None
    if name == names.WORKER_FAILED:
        code = e.get("exitcode")
        sig = signal_name(code)
        # A worker killed by a signal printed nothing of it: what it printed last was a peer's reaction.
        cause = f"killed by {sig}" if sig else _log_cause(logs.get(e.get("node") or "", logs.get("", "")), e.get("line", ""))
        return Failure(e["attempt"], e.get("local_rank"), code, sig, name, e["mono"], e.get("wall", 0.0), cause or e.get("line", ""))
    if name == names.RESTART and e["attempt"] > 0:  # a launcher's restart into this attempt, unannounced before
        cause = f"the launcher restarted the worker group: {e.get('line', '')}".rstrip(": ")
        return Failure(e["attempt"] - 1, None, None, None, name, e["mono"], e.get("wall", 0.0), cause)
    if name == names.LAUNCHER_EXIT and e.get("code") not in (0, None):
        cause = f"the launcher exited {e['code']}"
        check = HEALTH_CHECK_FAILED.search(logs.get(e.get("node") or "", logs.get("", "")))
        cause += f": {check.group(0).strip()}" if check else ""
        return Failure(e["attempt"], None, e["code"], None, name, e["mono"], e.get("wall", 0.0), cause)
    if name == names.DEADLINE:
        cause = f"killed at the deadline ({e.get('seconds', 0):g} s)"
        return Failure(e["attempt"], None, None, None, name, e["mono"], e.get("wall", 0.0), cause)
    return None


def _explain(signs: list[Failure], faults: list[Event], events: list[Event]) -> Failure:
    """An attempt's failure (its first sign, or the struck rank's own when a fault explains it) with the
    fault that explains it, if any (the rules in the module's docstring)."""
    failure = signs[0]
    own = [f for f in faults if f["attempt"] == failure.attempt and f["mono"] <= failure.mono + FAULT_SLACK_S]
    own = [f for f in own if f.get("fault") != "host_oom" or _oom_kill(f, events)]
    if own:
        struck = next((s for s in signs if s.rank is not None and s.rank == own[-1].get("target_rank")), failure)
        if (kill := _oom_kill(own[-1], events)) is not None:
            struck = dataclasses.replace(struck, cause=f"OOM-killed by the kernel: pid {kill['target']} in {kill['cgroup']}")
        return _with(struck, _fault_id(own[-1]), recovery=False)
    earlier = [f for f in faults if f["attempt"] < failure.attempt and f["mono"] <= failure.mono]
    if earlier and (held := held_resource(failure, events)) is not None:
        return _with(dataclasses.replace(failure, cause=f"{held}: {failure.cause}"), _fault_id(earlier[-1]), recovery=True)
    refused = HEALTH_CHECK_FAILED.search(failure.cause) if failure.how == names.LAUNCHER_EXIT else None
    if earlier and (_started(failure.attempt, events) or refused):
        checked = HEALTH_CHECKED.get(refused["check"], ()) if refused else ()  # a NIC link down, then the kill
        culprit = next((f for f in reversed(earlier) if f.get("fault") in checked), earlier[-1])
        return _with(failure, _fault_id(culprit), recovery=True)
    return failure


HEALTH_CHECK_FAILED = re.compile(r"(?P<check>[A-Z][A-Za-z ]*?health check) failed for node[^\n]*")
"""ft_launcher's line (NVRx 0.7) when a health check before a rendezvous fails: it then exits 1 without
starting the attempt. After an injected fault that is the stack's reaction to the fault (it refused to
restart onto what the fault broke), so the earlier fault explains it, as a restart the fault broke."""
HEALTH_CHECKED = {"NIC link state health check": ("nic_link_down",), "Storage path health check": ("storage_stall", "disk_full"), "Node health check": ("node_unhealthy",)}
"""What each of those checks looks at, as the fault kinds that break it."""

_PORT_IN_USE = re.compile(r"EADDRINUSE|address already in use", re.IGNORECASE)
_PORT = re.compile(r"\bport:? (\d+)|:(\d+)\b")
_GPU_OOM = re.compile(r"out of memory", re.IGNORECASE)


def held_resource(failure: Failure, events: list[Event]) -> str | None:
    """What the failure's cause says it lacked, held by processes an earlier attempt left running when this
    one started (``leftovers_at_start``), said as `port 27267 held by 4 pt_data_worker processes of attempt 0
    (left over 3.5 s after the kill)`; None when its cause names nothing they held. A port: an EADDRINUSE
    (on the port held, when the cause names a port); a file: its path in the cause; GPU memory: a CUDA OOM."""
    at_start = [e for e in events if e["event"] == names.LEFTOVERS_AT_START and e["attempt"] == failure.attempt]
    processes = [p for e in at_start for p in e.get("processes") or ()]
    cause = failure.cause
    for resource, holders in _resources(processes).items():
        kind, _, what = resource.partition(" ")
        named = {int(a or b) for a, b in _PORT.findall(cause)}
        if (kind == "port" and _PORT_IN_USE.search(cause) and (not named or int(what) in named)) or \
                (kind == "file" and what in cause) or (kind == "GPU" and _GPU_OOM.search(cause)):
            return f"{resource} held by {_who(holders)} ({_how_long(holders, failure.attempt, events)})"
    return None


def _resources(processes: list[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The leftovers by what they held: ``port N``, ``file PATH``, ``GPU memory``."""
    held: dict[str, list[Mapping[str, Any]]] = {}
    for p in processes:
        for resource in [*(f"port {n}" for n in p.get("ports") or ()), *(f"file {f}" for f in p.get("files") or ())]:
            held.setdefault(resource, []).append(p)
        if p.get("gpu_mib"):
            held.setdefault("GPU memory", []).append(p)
    return held


def _who(holders: list[Mapping[str, Any]]) -> str:
    """`4 pt_data_worker processes of attempt 0`, or several names and attempts."""
    by_name: dict[str, int] = {}
    for p in holders:
        by_name[p.get("name", "?")] = by_name.get(p.get("name", "?"), 0) + 1
    names_ = " and ".join(f"{n} {name} process{'es' if n > 1 else ''}" for name, n in by_name.items())
    attempts = sorted({p.get("attempt") for p in holders if p.get("attempt") is not None})
    return f"{names_} of attempt {', '.join(map(str, attempts))}" if attempts else names_


def _how_long(holders: list[Mapping[str, Any]], attempt: int, events: list[Event]) -> str:
    """How long after the kill of their attempt (the launcher's first report of a worker of it dying) the
    last of `holders` was gone; or that it outlived the runner's watch."""
    of = {p.get("attempt") for p in holders}
    died = [e["mono"] for e in events if e["event"] == names.WORKER_FAILED and e["attempt"] in of]
    restart = [e["mono"] for e in events if e["event"] == names.RESTART and e["attempt"] == attempt]
    start = next((e["mono"] for e in events if e["event"] == names.LEFTOVERS_AT_START and e["attempt"] == attempt), None)
    kill = min(died or restart or [start or 0.0])
    pids = {p.get("pid") for p in holders}
    gone = [e["mono"] for e in events if e["event"] == names.LEFTOVER_GONE and e.get("target") in pids]
    if len(gone) < len(pids):
        return "still there when the runner stopped watching"
    return f"left over {max(gone) - kill:.1f} s after the kill"


def _oom_kill(fault: Event, events: list[Event]) -> Event | None:
    """The kernel's OOM kill of a host_oom fault's rank, after the fault (the runner's oom_kill event)."""
    if fault.get("fault") != "host_oom":
        return None
    kills = (e for e in events if e["event"] == names.OOM_KILL and e["mono"] >= fault["mono"])
    return next((e for e in kills if e.get("target_rank") == fault.get("target_rank")), None)


def _is_injection(e: Event) -> bool:
    """A fault struck: the harness's (``fault_injected``), or the trainer's own rerun error injection
    (rerun_state_machine.error_injection_rate, Megatron's RerunErrorInjector), which its ``rerun`` event
    names as the failed check."""
    return e["event"] == names.FAULT_INJECTED or (e["event"] == names.RERUN and e.get("check") == "injected")


def _fault_id(fault: Event) -> str:
    """A planned fault's id; a fault a trainer's own injector made (Megatron's, ours) has none: its kind."""
    if fault["event"] == names.RERUN:
        return "rerun_error_injection"
    return str(fault.get("fault_id") or fault["fault"])


def _with(failure: Failure, fault_id: str, recovery: bool) -> Failure:
    return dataclasses.replace(failure, explained_by=fault_id, recovery_of=recovery)


def _started(attempt: int, events: list[Event]) -> bool:
    """A rank of the attempt began training again: it wrote run_start (our trainer), or its steps were
    observed (a trainer that writes no events of its own is seen only through its output)."""
    own = [e for e in events if e["rank"] >= 0 and e["attempt"] == attempt]
    return any(e["event"] == names.RUN_START or e.get("observed") for e in own)


def _never_due(planned: Iterable[Mapping[str, Any]], events: list[Event]) -> list[NeverDue]:
    struck = {e.get("fault_id") for e in events if e["event"] in (names.FAULT_INJECTED, names.FAULT_MISSED)}
    return [
        NeverDue(str(p["fault_id"]), str(p["type"]), p.get("attempt") or 0, _why_not(p, events))
        for p in planned if p.get("fault_id") not in struck
    ]


def _why_not(planned: Mapping[str, Any], events: list[Event]) -> str:
    """Why a planned fault never came due: how far its attempt (or the run) got against its trigger."""
    attempt = planned.get("attempt") or 0
    steps = [e["iteration"] for e in events if e["event"] == names.STEP and e["attempt"] == attempt]
    attempts = [e["attempt"] for e in events if e["attempt"] is not None]
    last = max(attempts, default=0)
    trigger = _trigger(planned)
    if attempt > last:
        return f"the run ended in attempt {last}, before attempt {attempt} that {trigger} was planned for"
    reached = f"reached step {max(steps)}" if steps else "ran no step"
    return f"attempt {attempt} {reached} and ended before {trigger}"


def _trigger(planned: Mapping[str, Any]) -> str:
    if planned.get("at_step") is not None:
        return f"its trigger at step {planned['at_step']}"
    if planned.get("delay_s") is not None:
        return f"its trigger {planned['delay_s']:g} s in"
    return "its trigger"


def signal_name(code: int | None) -> str | None:
    """The signal a negative exit code stands for (-9: SIGKILL), as the launcher reports a worker's death."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _rank_cause(e: Event) -> str:
    """A rank's own account of its exit: the last line of its error, else its reason."""
    text = str(e.get("error") or e.get("reason") or "").strip()
    return text.splitlines()[-1] if text else f"exit code {e.get('code')}"


def _log_cause(text: str, line: str) -> str:
    """The last exception line a worker printed before the launcher's line ``line`` reported its death (and
    after the launcher's previous restart), skipping the tracebacks the launcher logs of itself; without
    one, the worker's last line (``python3: can't open file ...: [Errno 2] ...``)."""
    end = text.find(line) if line else -1
    segment = text[: end if end >= 0 else len(text)]
    restart = segment.rfind("will restart worker group")
    segment = segment[restart + 1 :] if restart >= 0 else segment
    prefixed, plain, last, block = "", "", "", _NONE
    for raw in segment.splitlines():
        block = _launcher_block(block, raw)
        if block != _NONE or _TORCH_LOG.match(raw) or not raw.strip():
            continue
        last = raw.strip()
        match = _EXCEPTION.match(last)
        if match and _RANK_PREFIX.match(raw):
            prefixed = match.group(1)
        elif match:
            plain = match.group(1)
    return prefixed or plain or last


def record_accounting(run_dir: Path, accounting: Accounting, events: list[Event]) -> list[Event]:
    """Write the accounting's findings as the run log's events (events/accounting.jsonl, replacing what an
    earlier judging wrote); returns them as written. Each failure is stamped when it happened, a fault never
    due when the run's last event was."""
    path = RunFolder(run_dir).event_file(ACCOUNTING_SOURCE)
    path.unlink(missing_ok=True)
    if not accounting.unexplained and not accounting.never_due:
        return []
    last = max(events, key=lambda e: e["mono"], default={"wall": 0.0, "mono": 0.0})
    log = EventLog(run_dir, ACCOUNTING_SOURCE, rank=-1, attempt=0)
    try:
        written = [
            log.write(UnexplainedFailure(f.rank, f.exit_code, f.signal, f.how, f.cause, attempt=f.attempt), at=(f.wall, f.mono))
            for f in accounting.unexplained
        ]
        at_end = (last.get("wall", 0.0), last["mono"])
        written += [log.write(FaultNeverDue(n.fault, n.fault_id, n.reason, attempt=n.attempt), at=at_end) for n in accounting.never_due]
    finally:
        log.close()
    return written


ACCOUNTING_SOURCE = "accounting"
"""The event file the accounting writes (events/accounting.jsonl)."""


def _launcher_block(block: str, line: str) -> str:
    """The state after ``line``: a launcher's error record opens a block, its traceback continues it, its
    exception line ends it unless a chained traceback follows (then a worker's own traceback is outside); a
    traceback whose first frame is not installed code is a worker's, also right after the record."""
    if _LAUNCHER_ERROR.match(line):
        return _IN
    if block == _NONE:
        return _NONE
    if block == _FIRST:
        return _IN if _LIBRARY_FRAME.match(line) else _NONE
    if line.startswith("Traceback"):
        return _FIRST
    if block == _ENDING and not (not line.strip() or line.startswith(_CHAINED)):
        return _NONE
    if _EXCEPTION.match(line.strip()):
        return _ENDING
    return _IN if (not line.strip() or line.startswith(_TRACEBACK + _CHAINED)) else _NONE

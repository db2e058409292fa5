"""A Megatron-LM or Megatron Bridge run, read from its stdout log and its checkpoint folder.

``MegatronLog`` turns the run's output lines, fed in order (live, as chaos/supervise/foreign.py feeds a
``command``'s lines for ``adapter: megatron``, or all at once afterwards), into ``Record``s: events named and shaped as in
docs/events.md, so a Megatron run is judged like ours without writing our events. ``final_losses`` is
the per-step loss curve the loss correlation compares; ``to_events`` gives full event dicts for the
timeline. ``read_checkpoint_folder`` reads the folder both frameworks save to.

Formats, read in megatron-core ``core_v0.19.0`` and Megatron-Bridge ``v0.6.0`` (the lent GPU ran 0.19.2 and
0.6.2); each pattern names the function that prints it:

- step: ``training_log`` (MLM ``megatron/training/training.py``; Bridge
  ``megatron/bridge/training/utils/train_utils.py``): `` [%Y-%m-%d %H:%M:%S.%f] iteration {:8d}/{:8d} |
  consumed samples: ... | elapsed time per iteration (ms): ... | learning rate: ... | global batch size: ... |
  lm loss: {:.6E} | loss scale: ... | grad norm: ... | number of skipped iterations: ... | number of nan
  iterations: ... |``; Bridge (and MLM before 2025) print the time without microseconds. A loss key is
  printed only ``if avg >= 0.0``: a NaN average (a step that went NaN) has no ``lm loss``, and neither has
  a step whose optimizer step was skipped before any step advanced; both become ``loss`` NaN here.
  The printed loss is the mean over ``log_interval`` steps; MLM's own first iteration of a process is not
  reset after printing, so with ``log_interval`` 1 its second printed loss is the mean of its first two
  (Megatron-LM issue #6237; TensorBoard's ``lm loss`` is per step).
- checkpoints: ``save_checkpoint`` / ``load_checkpoint`` (``megatron/training/checkpointing.py``,
  ``megatron/bridge/training/checkpointing.py``): ``saving checkpoint at iteration {:7d} to DIR in FMT
  format``, ``scheduled an async checkpoint save at iteration {:7d} to DIR``, ``successfully saved
  checkpoint from iteration {:7d} to DIR [ t 1/1, p 1/1 ]`` (sync: after the save; async: when it is
  finalized), `` loading [distributed ]checkpoint from DIR at iteration N``, ``successfully loaded
  checkpoint from DIR [ ... ] at iteration N``.
- faults: Bridge's ``maybe_setup_simulated_fault`` (``fault_tolerance.py``) and MLM's
  ``ft_integration.maybe_setup_simulated_fault`` print ``FT: Simulating fault: {type}; rank to fail: {r}``
  to stdout and to stderr (one fault, two lines); Megatron-Core's ``setup_fault_injection``
  (``megatron/core/fault_injector.py``) logs ``[ts] FAULT INJECTION: Rank {r} will inject fault {NAME} at
  {ts}``, the moment NVRx's ``dispatch_fault_injection`` fires it; NVRx's ``inject_fault`` then logs
  ``sending signal=<Signals.NAME: n> to pid=P`` as it sends it. The rerun state machine's own
  ``RerunErrorInjector`` (``--error-injection-rate``) logs ``Injecting error type {kind}`` as it corrupts
  a step's result: Megatron's fault, which the runner's accounting counts as injected.
- FT (``megatron/training/ft_integration.py``, Bridge's ``fault_tolerance.py``): ``FT: initialized.
  Timeouts={SectionTimeouts|HeartbeatTimeouts}(...)`` (NVRx's ``__str__``), the timeouts an attempt starts
  with, after ``FT: loaded timeouts from .../ft_state.json``.
- launcher: torchelastic's agent as ft_launcher and torchrun print it (``chaos.adapters.launcher.classify``): a
  worker's exit code, ``Worker group FAILED. k/N attempts left; will restart worker group``, NVRx's
  heartbeat and section timeouts.
- rerun state machine (``megatron/core/rerun_state_machine.py``): ``validate_result`` logs ``Unexpected
  result ... on rank r at iteration #N`` and the diagnoses; ``should_checkpoint_and_exit`` logs the exit it
  chose (16: resume to disambiguate, 17: failed validation) before the trainer's ``sys.exit``.
- signals: Bridge's ``sig_utils`` handler prints ``Received signal N, initiating graceful stop`` when the
  signal comes.
- exits: MLM's ``print_datetime`` / Bridge's ``barrier_and_log``: ``[exiting program after receiving
  SIGTERM.] datetime: ...``, ``[exiting program at iteration N]``, ``[exiting program after M minutes]``,
  ``[Exiting program due to straggler detection.]`` (Bridge), ``[after training is done]``, and
  ``[after megatron is initialized]`` (the attempt's start).
- stragglers: Bridge's ``NVRxStragglerDetectionManager`` (``nvrx_straggler.py``): ``STRAGGLER DETECTION
  WARNING: Some GPUs have worse relative performance. Affected ranks: {StragglerId(rank=1, ...)}`` (or
  ``performance dropped``), then ``GPU relative performance:`` / ``GPU individual performance:`` and one
  ``  Rank=R Node=N Score=S`` line per rank; NVRx's ``examples/straggler/example.py`` prints ``Rank r
  GPUs relative perf: {rank: score}``. The lines of one report become one ``straggler_report``.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from chaos.adapters import lineage
from chaos.adapters import megatron_lines as lines
from chaos.adapters.launcher import NEXT_ROUND, classify
from runlog.records import LauncherLine

LOSS_KEY = "lm loss"
"""The language-model loss, the key ``pretrain_gpt``'s and Bridge's ``gpt_step`` loss functions report."""

@dataclass(frozen=True)
class Record:
    """One event a log line stands for: its docs/events.md name and fields, and where it came from.

    ``rank`` is 0 for the trainer's lines (rank 0 and the last rank print the same values) and -1 for the
    launcher's; ``attempt`` counts the launcher's restarts before it (each from its agent's rendezvous line
    after the restart line: ``NEXT_ROUND``; a surviving rank prints on until then); ``line`` is where it stands in
    the log (a record a later line completes stands at its first line, an exit or an announced fault at
    the line that gives it out); ``wall`` is the time it happened as the log states it (epoch seconds of
    the writer's local time), None where the log states none.
    """

    event: str
    fields: dict[str, Any]
    rank: int
    attempt: int
    line: int
    wall: float | None


@dataclass
class _Report:
    """A straggler report being assembled from its lines."""

    line: int
    wall: float | None
    flagged: set[int] = field(default_factory=set)
    scores: dict[str, dict[int, float]] = field(default_factory=dict)
    kind: str | None = None
    """The score block whose ``Rank=`` lines come next."""


class MegatronLog:
    """Translates a Megatron run's output lines, fed in order, into records.

    State spans lines: the attempt (launcher restarts), the last step of the attempt, a save whose
    kind (sync or async) a later line tells, an exit announced before its checkpoint is written, a
    straggler report printed over several lines, and Bridge's fault line printed twice. A record that
    waits for a later line is given out when that line arrives, or by ``close()`` at the end of the log.
    """

    def __init__(self, attempt: int = 0):
        self.attempt = attempt
        self.line_no = 0
        self.last_wall: float | None = None
        self.last_step: int | None = None
        self._saving: Record | None = None
        self._async: set[int] = set()
        self._exit: Record | None = None
        self._report: _Report | None = None
        self._faults: set[tuple[int, str, int | None]] = set()
        self._planned: Record | None = None
        self._signalled: int | None = None
        """The attempt in which Bridge printed that a signal came (its exit line then repeats no signal)."""
        self.restarting = False
        """A restart line came and its agent's rendezvous line not yet: lines are still the last attempt's."""

    def feed(self, line: str) -> list[Record]:
        """The records this line completes (often none)."""
        self.line_no += 1
        wall = lines.line_time(line)
        if wall is not None:
            self.last_wall = wall
        launcher = classify(line)
        if self.restarting and NEXT_ROUND.search(line):
            self._next_attempt()
        out = self._fire_planned(wall) + self._straggler(line, wall)
        if launcher is not None:
            out += self._launcher(launcher, wall)
        else:
            out += self._trainer(line, wall)
        return out

    def close(self) -> list[Record]:
        """What the end of the log completes: a report, a save that never finished, an announced exit."""
        self._planned = None  # announced, but no line came at or after its time: it never fired
        out = self._flush_report()
        if self._saving is not None:
            out.append(self._saving)
            self._saving = None
        return out + self._flush_exit()

    def _record(self, event: str, wall: float | None, rank: int = 0, **fields: Any) -> Record:
        return Record(event, fields, rank, self.attempt, self.line_no, wall)

    def _launcher(self, seen: LauncherLine, wall: float | None) -> list[Record]:
        kind = seen.event
        fields = {k: v for k, v in seen.fields().items() if k not in ("line", "node")}
        out = self.close() if kind == "restart" else self._flush_exit()
        out.append(self._record(kind, wall, rank=-1, **fields))
        self.restarting = self.restarting or kind == "restart"
        return out

    def _next_attempt(self) -> None:
        self.attempt += 1
        self.restarting = False
        self.last_step = None
        self._async.clear()

    def _trainer(self, line: str, wall: float | None) -> list[Record]:
        m = lines.ITERATION.search(line)
        if m:
            return [self._step(m, wall)]
        for parse in (self._checkpoint, self._fault, self._rerun, self._mark, self._ft):
            records = parse(line, wall)
            if records is not None:
                return records
        return []

    def _step(self, m: re.Match[str], wall: float | None) -> Record:
        iteration = int(m["iteration"])
        values = lines.step_fields(m["fields"])
        losses = {k: v for k, v in values.items() if k.endswith("loss")}
        fields: dict[str, Any] = {
            "iteration": iteration,
            "loss": losses.get(LOSS_KEY, math.nan),
            "train_iters": int(m["train_iters"]),
            "losses": losses,
            **{ours: lines.count(ours, values[theirs]) for theirs, ours in lines.STEP_FIELDS.items() if theirs in values},
        }
        if "elapsed time per iteration (ms)" in values:
            fields["step_time"] = values["elapsed time per iteration (ms)"] / 1000.0
        self.last_step = iteration
        return self._record("step", wall, **fields)

    def _checkpoint(self, line: str, wall: float | None) -> list[Record] | None:
        if m := lines.SAVE_BEGIN.search(line):
            out = [self._saving] if self._saving is not None else []
            self._saving = self._record(
                "checkpoint_save_begin", wall, iteration=int(m["iteration"]), path=m["path"], format=m["format"]
            )
            self._saving.fields["async"] = False
            return out
        if m := lines.SAVE_ASYNC.search(line):
            iteration = int(m["iteration"])
            self._async.add(iteration)
            return [self._begin(iteration, m["path"], wall, is_async=True)]
        if m := lines.SAVE_END.search(line):
            iteration = int(m["iteration"])
            is_async = iteration in self._async
            self._async.discard(iteration)
            out = [] if is_async else [self._begin(iteration, m["path"], wall, is_async=False)]
            return out + [self._record("checkpoint_save_end", wall, iteration=iteration, path=m["path"], **{"async": is_async})]
        if m := lines.LOAD_BEGIN.search(line):
            return [self._record("resume", wall, iteration=int(m["iteration"]), path=m["path"])]
        if m := lines.LOAD_END.search(line):
            return [self._record("checkpoint_load", wall, iteration=int(m["iteration"]), path=m["path"])]
        return None

    def _begin(self, iteration: int, path: str, wall: float | None, is_async: bool) -> Record:
        """The save's begin, stamped by its ``saving checkpoint`` line when one announced it."""
        pending, self._saving = self._saving, None
        if pending is not None and pending.fields["iteration"] == iteration:
            return replace(pending, fields={**pending.fields, "async": is_async})
        return self._record("checkpoint_save_begin", wall, iteration=iteration, path=path, **{"async": is_async})

    def _fault(self, line: str, wall: float | None) -> list[Record] | None:
        if lines.INJECTED.search(line):  # NVRx's inject_fault sends the announced signal now
            planned, self._planned = self._planned, None
            return [] if planned is None else [replace(
                planned, line=self.line_no, wall=wall, fields={**planned.fields, "iteration": self.last_step})]
        if m := lines.RERUN_INJECTED.search(line):  # the rerun state machine's own injector: Megatron's fault
            return [self._record("fault_injected", wall, fault="rerun_error_injection", detail=m["kind"], iteration=self.last_step)]
        m = lines.SIMULATED.search(line) or lines.INJECTOR.search(line)
        if m is None:
            return None
        fault, rank = m["fault"], int(m["rank"])
        key = (self.attempt, fault, rank)
        if key in self._faults:
            return []
        self._faults.add(key)
        if m.re is lines.INJECTOR:  # announced ahead: it fires at the stated time, after the steps before that
            self._planned = self._record("fault_injected", lines.parse_time(m["at"]), fault=fault, target_rank=rank)
            return []
        return [self._record("fault_injected", wall, fault=fault, target_rank=rank, iteration=self.last_step)]

    def _fire_planned(self, wall: float | None) -> list[Record]:
        """The announced fault, stamped at its time once a line states that time or later (where no line
        of NVRx's ``inject_fault`` said it fired): its iteration is the last step before it."""
        planned = self._planned
        if planned is None or wall is None or wall < planned.wall:
            return []
        self._planned = None
        return [replace(planned, line=self.line_no, fields={**planned.fields, "iteration": self.last_step})]

    def _ft(self, line: str, wall: float | None) -> list[Record] | None:
        """The FT timeouts an attempt starts with (MLM's and Bridge's ``FT: initialized. Timeouts=...``)."""
        m = lines.FT_TIMEOUTS.search(line)
        return None if m is None else [self._record("ft_timeouts", wall, **lines.ft_timeouts(m["kind"], m["body"]))]

    def _rerun(self, line: str, wall: float | None) -> list[Record] | None:
        if m := lines.RERUN_FLAG.search(line):
            return [self._record(
                "rerun", wall, state="rerunning_in_place", diagnosis=None, iteration=int(m["iteration"]),
                flagged=[int(m["rank"])], initial=lines.number(m["value"]), message=m["message"],
            )]
        where = lines.RERUN_WHERE.search(line)
        context = {} if where is None else {"iteration": int(where["iteration"]), "flagged": [int(where["rank"])]}
        for text, diagnosis in lines.DIAGNOSES:
            if text in line:
                return [self._record("rerun", wall, diagnosis=diagnosis, message=line.strip(), **context)]
        if lines.SAME_GPU in line:
            return [self._record("rerun", wall, state="will_rerun_from_checkpoint", diagnosis=None, message=line.strip())]
        for text, code in lines.RERUN_EXITS:
            if text in line:
                return self._announce_exit(wall, reason="rerun", code=code, message=line.strip())
        return None

    def _mark(self, line: str, wall: float | None) -> list[Record] | None:
        if m := lines.SIGNAL_SEEN.search(line):
            self._signalled = self.attempt
            name = signal.Signals(int(m["signum"])).name
            return [self._record("signal_received", wall, signal=name, iteration=self.last_step)]
        m = lines.MARK.search(line)
        if m is None:
            return None
        what, at = m["what"], lines.parse_time(m["at"])
        if what == "after megatron is initialized":
            return [self._record("run_start", at)]
        if what == "after training is done":
            return self._announce_exit(at, reason="completed")
        if what == "exiting program after receiving SIGTERM.":
            seen = self._signalled == self.attempt  # Bridge said so when the signal came
            received = [] if seen else [self._record("signal_received", at, signal="SIGTERM", iteration=self.last_step)]
            return [*received, *self._announce_exit(at, reason="signal")]
        if what.startswith("exiting program at iteration"):
            return self._announce_exit(at, reason="exit_interval")
        if what.startswith("exiting program after"):
            return self._announce_exit(at, reason="exit_duration")
        if what == "Exiting program due to straggler detection.":
            return self._announce_exit(at, reason="straggler_detected")
        return []

    def _announce_exit(self, wall: float | None, **fields: Any) -> list[Record]:
        """Megatron announces an exit, then may still save: the exit is given out at the next launcher
        line or the end of the log, stamped no earlier than the last line before it."""
        out = self._flush_exit()
        self._exit = self._record("exit", wall, **fields)
        return out

    def _flush_exit(self) -> list[Record]:
        if self._exit is None:
            return []
        pending, self._exit = self._exit, None
        stamps = [t for t in (pending.wall, self.last_wall) if t is not None]
        fields = {**pending.fields, "iteration": self.last_step}
        return [replace(pending, wall=max(stamps, default=None), line=self.line_no, fields=fields)]

    def _straggler(self, line: str, wall: float | None) -> list[Record]:
        """Collect a report's lines; the first other line closes it."""
        report = self._report
        if m := lines.STRAGGLER_FLAGGED.search(line):
            out = [] if report is None or not report.scores else self._flush_report()
            self._report = report = self._report or _Report(self.line_no, wall)
            report.flagged.update(int(r) for r in re.findall(r"rank=(\d+)", m["ranks"]))
            return out
        if m := lines.STRAGGLER_HEAD.search(line):
            self._report = report = report or _Report(self.line_no, wall)
            report.kind = m["kind"]
            report.scores.setdefault(report.kind, {})
            return []
        if report is not None and report.kind and (m := lines.STRAGGLER_SCORE.search(line)):
            report.scores[report.kind][int(m["rank"])] = lines.number(m["score"])
            return []
        if report is not None and (not line.strip() or (report.kind and lines.STRAGGLER_SUBHEAD.search(line))):
            return []  # the score blocks end in an empty line; the next block belongs to the same report
        if m := lines.NVRX_EXAMPLE.search(line):
            self._report = report = report or _Report(self.line_no, wall)
            pairs = re.findall(r"(\d+):\s*([^,\s]+)", m["scores"])
            report.scores[m["kind"]] = {int(r): lines.number(s) for r, s in pairs}
            report.kind = None
            return []
        return self._flush_report()

    def _flush_report(self) -> list[Record]:
        report, self._report = self._report, None
        if report is None:
            return []
        return [Record(
            "straggler_report", {"iteration": self.last_step, "kind": "gpu", "scores": report.scores,
                                 "flagged": sorted(report.flagged)},
            0, self.attempt, report.line, report.wall,
        )]


def parse_lines(lines: Iterable[str], attempt: int = 0) -> list[Record]:
    """Every record of a whole log, in the order its lines complete them."""
    log = MegatronLog(attempt)
    records = [r for line in lines for r in log.feed(line)]
    return records + log.close()


def parse_text(text: str) -> list[Record]:
    return parse_lines(text.splitlines())


def final_losses(records: Iterable[Record], key: str = LOSS_KEY) -> dict[int, float]:
    """Loss by step of the run's final lineage (``chaos.adapters.lineage``); a step with no ``key``
    printed (it went NaN, or its optimizer step was skipped) is NaN."""
    return lineage((r.fields["iteration"], r.fields["losses"].get(key, math.nan)) for r in records if r.event == "step")


def to_events(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Records as runlog event dicts (``event``, ``rank``, ``attempt``, ``wall``, ``mono``, fields,
    ``observed: true``, ``line``), in time order.

    ``mono`` is the time the record's line states; a line that states none is placed 1 µs after the line
    before it (Bridge prints its checkpoint lines without a time), and lines before the first stated time
    just before it. ``timed`` says which records stated their own time: a duration between untimed lines
    measures nothing.
    """
    ordered = sorted(records, key=lambda r: r.line)
    clock = next((r.wall for r in ordered if r.wall is not None), 0.0) - 1e-6 * len(ordered)
    events = []
    for r in ordered:
        clock = r.wall if r.wall is not None else clock + 1e-6
        events.append({
            "event": r.event, "rank": r.rank, "attempt": r.attempt, "wall": clock, "mono": clock,
            **r.fields, "observed": True, "line": r.line, "timed": r.wall is not None,
        })
    events.sort(key=lambda e: e["mono"])
    return events

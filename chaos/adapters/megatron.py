"""A Megatron-LM or Megatron Bridge run, read from its stdout log and its checkpoint folder.

``MegatronLog`` turns the run's output lines, fed in order (live, as ``chaos.external.LogSteps`` reads a
``command``'s lines, or all at once afterwards), into ``Record``s: events named and shaped as in
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
  {ts}``, the moment NVRx's ``dispatch_fault_injection`` fires it.
- launcher: torchelastic's agent as ft_launcher and torchrun print it (``chaos.launch.classify``): a
  worker's exit code, ``Worker group FAILED. k/N attempts left; will restart worker group``, NVRx's
  heartbeat and section timeouts.
- rerun state machine (``megatron/core/rerun_state_machine.py``): ``validate_result`` logs ``Unexpected
  result ... on rank r at iteration #N`` and the diagnoses; ``should_checkpoint_and_exit`` logs the exit it
  chose (16: resume to disambiguate, 17: failed validation) before the trainer's ``sys.exit``.
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
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from chaos.adapters import lineage
from chaos.launch import classify

LOSS_KEY = "lm loss"
"""The language-model loss, the key ``pretrain_gpt``'s and Bridge's ``gpt_step`` loss functions report."""

TRACKER_FILE = "latest_checkpointed_iteration.txt"
"""Megatron-LM's tracker (``get_checkpoint_tracker_filename``); Bridge writes it too, beside its own
``latest_train_state.pt``."""

_STAMP = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
_BRACKET_TIME = re.compile(rf"\[({_STAMP})\]")
_ITERATION = re.compile(r"\biteration\s+(?P<iteration>\d+)\s*/\s*(?P<train_iters>\d+)\s*\|(?P<fields>.*)")
_SAVE_BEGIN = re.compile(r"saving checkpoint at iteration\s+(?P<iteration>\d+) to (?P<path>.+?) in (?P<format>\S+) format")
_SAVE_ASYNC = re.compile(r"scheduled an async checkpoint save at iteration\s+(?P<iteration>\d+) to (?P<path>\S+)")
_SAVE_END = re.compile(r"successfully saved checkpoint from iteration\s+(?P<iteration>\d+) to (?P<path>\S+)")
_LOAD_BEGIN = re.compile(r"loading (?:distributed )?checkpoint from (?P<path>\S+) at iteration (?P<iteration>\d+)")
_LOAD_END = re.compile(r"successfully loaded checkpoint from (?P<path>\S+) .*?at iteration (?P<iteration>\d+)")
_SIMULATED = re.compile(r"FT: Simulating fault: (?P<fault>\w+); rank to fail: (?P<rank>\d+)")
_INJECTOR = re.compile(rf"FAULT INJECTION: Rank (?P<rank>\d+) will inject fault (?P<fault>\w+) at (?P<at>{_STAMP})")
_MARK = re.compile(rf"\[(?P<what>[^\]]+)\] datetime: (?P<at>{_STAMP})")
_RERUN_FLAG = re.compile(
    r"Unexpected result (?P<value>\S+) on rank (?P<rank>\d+) at iteration #(?P<iteration>\d+) "
    r"invocation #\d+ \(message='(?P<message>.*)'\)"
)
_RERUN_WHERE = re.compile(r"Rank (?P<rank>\d+), node (?P<node>\S+), device \d+, iteration #(?P<iteration>\d+): (?P<what>.*)")
_STRAGGLER_FLAGGED = re.compile(r"STRAGGLER DETECTION WARNING: Some GPUs (?P<what>.*?)\. Affected ranks: (?P<ranks>.*)")
_STRAGGLER_HEAD = re.compile(r"GPU (?P<kind>relative|individual) performance:\s*$")
_STRAGGLER_SCORE = re.compile(r"^\s+Rank=(?P<rank>\d+) Node=\S+ Score=(?P<score>\S+)")
_STRAGGLER_SUBHEAD = re.compile(r"^\s+(?:Worst|Best) performing \d+/\d+ ranks:")
_NVRX_EXAMPLE = re.compile(r"Rank \d+ GPUs (?P<kind>relative|individual) perf: \{(?P<scores>.*)\}")

_DIAGNOSES = (
    ("Possible transient error!", "transient_error"),
    ("First rerun: unexpected result is reproducible within the tolerance", "reproducible"),
    ("Possible persistent error!", "persistent_error"),
    ("Correct result (but possible Application error)", "correct_result"),
)
_RERUN_EXITS = (
    ("Saving a checkpoint and exiting now. Please resume the job from the checkpoint", 16),
    ("Exiting now. Please resume the job from the same checkpoint", 16),
    ("Exiting now. The job can be resumed from a previous checkpoint", 17),
    ("Exiting now. A checkpoint at the last iteration already exists", 17),
)
_COUNTS = frozenset({"consumed_samples", "global_batch_size", "skipped_iterations", "nan_iterations"})
_SAME_GPU = "Got rescheduled on the same GPU. Need to resume again from the same checkpoint"
_STEP_FIELDS = {
    "consumed samples": "consumed_samples",
    "learning rate": "lr",
    "global batch size": "global_batch_size",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
    "number of skipped iterations": "skipped_iterations",
    "number of nan iterations": "nan_iterations",
}


@dataclass(frozen=True)
class Record:
    """One event a log line stands for: its docs/events.md name and fields, and where it came from.

    ``rank`` is 0 for the trainer's lines (rank 0 and the last rank print the same values) and -1 for the
    launcher's; ``attempt`` counts the launcher's restart lines before it; ``line`` is where it stands in
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

    State spans lines: the attempt (launcher restart lines), the last step of the attempt, a save whose
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

    def feed(self, line: str) -> list[Record]:
        """The records this line completes (often none)."""
        self.line_no += 1
        wall = line_time(line)
        if wall is not None:
            self.last_wall = wall
        launcher = classify(line)
        out = self._fire_planned(wall, launcher is not None) + self._straggler(line, wall)
        if launcher is not None:
            out += self._launcher(*launcher, wall)
        else:
            out += self._trainer(line, wall)
        return out

    def close(self) -> list[Record]:
        """What the end of the log completes: a report, a save that never finished, an announced exit."""
        out = self._fire_planned(None, True) + self._flush_report()
        if self._saving is not None:
            out.append(self._saving)
            self._saving = None
        return out + self._flush_exit()

    def _record(self, event: str, wall: float | None, rank: int = 0, **fields: Any) -> Record:
        return Record(event, fields, rank, self.attempt, self.line_no, wall)

    def _launcher(self, kind: str, groups: dict[str, str], wall: float | None) -> list[Record]:
        fields = {k: int(v) for k, v in groups.items()}
        out = self.close() if kind == "restart" else self._flush_exit()
        out.append(self._record(kind, wall, rank=-1, **fields))
        if kind == "restart":
            self.attempt += 1
            self.last_step = None
            self._async.clear()
        return out

    def _trainer(self, line: str, wall: float | None) -> list[Record]:
        m = _ITERATION.search(line)
        if m:
            return [self._step(m, wall)]
        for parse in (self._checkpoint, self._fault, self._rerun, self._mark):
            records = parse(line, wall)
            if records is not None:
                return records
        return []

    def _step(self, m: re.Match[str], wall: float | None) -> Record:
        iteration = int(m["iteration"])
        values = _fields(m["fields"])
        losses = {k: v for k, v in values.items() if k.endswith("loss")}
        fields: dict[str, Any] = {
            "iteration": iteration,
            "loss": losses.get(LOSS_KEY, math.nan),
            "train_iters": int(m["train_iters"]),
            "losses": losses,
            **{ours: _count(ours, values[theirs]) for theirs, ours in _STEP_FIELDS.items() if theirs in values},
        }
        if "elapsed time per iteration (ms)" in values:
            fields["step_time"] = values["elapsed time per iteration (ms)"] / 1000.0
        self.last_step = iteration
        return self._record("step", wall, **fields)

    def _checkpoint(self, line: str, wall: float | None) -> list[Record] | None:
        if m := _SAVE_BEGIN.search(line):
            out = [self._saving] if self._saving is not None else []
            self._saving = self._record(
                "checkpoint_save_begin", wall, iteration=int(m["iteration"]), path=m["path"], format=m["format"]
            )
            self._saving.fields["async"] = False
            return out
        if m := _SAVE_ASYNC.search(line):
            iteration = int(m["iteration"])
            self._async.add(iteration)
            return [self._begin(iteration, m["path"], wall, is_async=True)]
        if m := _SAVE_END.search(line):
            iteration = int(m["iteration"])
            is_async = iteration in self._async
            self._async.discard(iteration)
            out = [] if is_async else [self._begin(iteration, m["path"], wall, is_async=False)]
            return out + [self._record("checkpoint_save_end", wall, iteration=iteration, path=m["path"], **{"async": is_async})]
        if m := _LOAD_BEGIN.search(line):
            return [self._record("resume", wall, iteration=int(m["iteration"]), path=m["path"])]
        if m := _LOAD_END.search(line):
            return [self._record("checkpoint_load", wall, iteration=int(m["iteration"]), path=m["path"])]
        return None

    def _begin(self, iteration: int, path: str, wall: float | None, is_async: bool) -> Record:
        """The save's begin, stamped by its ``saving checkpoint`` line when one announced it."""
        pending, self._saving = self._saving, None
        if pending is not None and pending.fields["iteration"] == iteration:
            return replace(pending, fields={**pending.fields, "async": is_async})
        return self._record("checkpoint_save_begin", wall, iteration=iteration, path=path, **{"async": is_async})

    def _fault(self, line: str, wall: float | None) -> list[Record] | None:
        m = _SIMULATED.search(line) or _INJECTOR.search(line)
        if m is None:
            return None
        fault, rank = m["fault"], int(m["rank"])
        key = (self.attempt, fault, rank)
        if key in self._faults:
            return []
        self._faults.add(key)
        if m.re is _INJECTOR:  # announced ahead: it fires at the stated time, after the steps before that
            out = self._fire_planned(None, True)
            self._planned = self._record("fault_injected", parse_time(m["at"]), fault=fault, target_rank=rank)
            return out
        return [self._record("fault_injected", wall, fault=fault, target_rank=rank, iteration=self.last_step)]

    def _fire_planned(self, wall: float | None, now: bool) -> list[Record]:
        """The announced fault, once a line is stamped at or after its time (or ``now``): its iteration is
        the last step before it."""
        planned = self._planned
        if planned is None or not (now or (wall is not None and wall >= planned.wall)):
            return []
        self._planned = None
        return [replace(planned, line=self.line_no, fields={**planned.fields, "iteration": self.last_step})]

    def _rerun(self, line: str, wall: float | None) -> list[Record] | None:
        if m := _RERUN_FLAG.search(line):
            return [self._record(
                "rerun", wall, state="rerunning_in_place", diagnosis=None, iteration=int(m["iteration"]),
                flagged=[int(m["rank"])], initial=_number(m["value"]), message=m["message"],
            )]
        where = _RERUN_WHERE.search(line)
        context = {} if where is None else {"iteration": int(where["iteration"]), "flagged": [int(where["rank"])]}
        for text, diagnosis in _DIAGNOSES:
            if text in line:
                return [self._record("rerun", wall, diagnosis=diagnosis, message=line.strip(), **context)]
        if _SAME_GPU in line:
            return [self._record("rerun", wall, state="will_rerun_from_checkpoint", diagnosis=None, message=line.strip())]
        for text, code in _RERUN_EXITS:
            if text in line:
                return self._announce_exit(wall, reason="rerun", code=code, message=line.strip())
        return None

    def _mark(self, line: str, wall: float | None) -> list[Record] | None:
        m = _MARK.search(line)
        if m is None:
            return None
        what, at = m["what"], parse_time(m["at"])
        if what == "after megatron is initialized":
            return [self._record("run_start", at)]
        if what == "after training is done":
            return self._announce_exit(at, reason="completed")
        if what == "exiting program after receiving SIGTERM.":
            received = self._record("signal_received", at, signal="SIGTERM", iteration=self.last_step)
            return [received, *self._announce_exit(at, reason="signal")]
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
        if m := _STRAGGLER_FLAGGED.search(line):
            out = [] if report is None or not report.scores else self._flush_report()
            self._report = report = self._report or _Report(self.line_no, wall)
            report.flagged.update(int(r) for r in re.findall(r"rank=(\d+)", m["ranks"]))
            return out
        if m := _STRAGGLER_HEAD.search(line):
            self._report = report = report or _Report(self.line_no, wall)
            report.kind = m["kind"]
            report.scores.setdefault(report.kind, {})
            return []
        if report is not None and report.kind and (m := _STRAGGLER_SCORE.search(line)):
            report.scores[report.kind][int(m["rank"])] = _number(m["score"])
            return []
        if report is not None and (not line.strip() or (report.kind and _STRAGGLER_SUBHEAD.search(line))):
            return []  # the score blocks end in an empty line; the next block belongs to the same report
        if m := _NVRX_EXAMPLE.search(line):
            self._report = report = report or _Report(self.line_no, wall)
            pairs = re.findall(r"(\d+):\s*([^,\s]+)", m["scores"])
            report.scores[m["kind"]] = {int(r): _number(s) for r, s in pairs}
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


def line_time(line: str) -> float | None:
    """The time a line states in brackets (``[2025-05-09 06:11:17]``, ``[... .123456]``, the launcher's
    ``[2026-12-01 09:35:27,496]``), as epoch seconds."""
    m = _BRACKET_TIME.search(line)
    return None if m is None else parse_time(m[1])


def parse_time(stamp: str) -> float:
    text = stamp.replace(",", ".")
    layout = "%Y-%m-%d %H:%M:%S.%f" if "." in text else "%Y-%m-%d %H:%M:%S"
    return datetime.strptime(text, layout).timestamp()


def _fields(text: str) -> dict[str, float]:
    """The numeric ``name: value`` fields of an iteration line's ``|``-separated rest."""
    values = {}
    for part in text.split("|"):
        name, colon, value = part.rpartition(":")
        number = _number(value.strip()) if colon else None
        if number is not None:
            values[name.strip()] = number
    return values


def _count(name: str, value: float) -> float | int:
    """Counts as integers (samples, batch size, skipped and NaN iterations); rates and norms as floats."""
    return int(value) if name in _COUNTS and math.isfinite(value) else value


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


class CheckpointFolderError(ValueError):
    """A folder that is not a Megatron checkpoint folder, or a tracker that cannot be read."""


@dataclass(frozen=True)
class CheckpointFolder:
    """What a Megatron save folder holds: where a restart resumes, and which saves finished.

    ``latest`` is the tracker's iteration (0 for a ``release`` checkpoint, None without a tracker: a
    restart starts from scratch); ``iterations`` the ``iter_NNNNNNN`` folders; ``complete`` those whose
    save was finalized: ``metadata.json`` (torch_dist, written by ``dist_checkpointing.save``'s finalize
    function) or ``mp_rank_*/model_optim_rng.pt`` (the legacy torch format).
    """

    path: Path
    latest: int | None
    release: bool
    iterations: tuple[int, ...]
    complete: tuple[int, ...]


def read_checkpoint_folder(path: str | Path) -> CheckpointFolder:
    folder = Path(path)
    if not folder.is_dir():
        raise CheckpointFolderError(f"{folder}: no such checkpoint folder")
    saves = sorted((int(p.name[5:]), p) for p in folder.glob("iter_*") if p.is_dir() and p.name[5:].isdigit())
    tracker = folder / TRACKER_FILE
    if not saves and not tracker.exists():
        raise CheckpointFolderError(f"{folder}: not a Megatron checkpoint folder (no {TRACKER_FILE}, no iter_* folder)")
    latest, release = _read_tracker(tracker) if tracker.exists() else (None, False)
    complete = tuple(i for i, p in saves if _finished(p))
    return CheckpointFolder(folder, latest, release, tuple(i for i, _ in saves), complete)


def _read_tracker(tracker: Path) -> tuple[int, bool]:
    """The tracker's iteration, as ``read_metadata`` reads it: an integer, or ``release``."""
    try:
        text = tracker.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointFolderError(f"{tracker}: unreadable ({e})") from None
    if text == "release":
        return 0, True
    if not text.isdigit():
        raise CheckpointFolderError(f"{tracker}: {text[:40]!r} is neither an iteration nor 'release'")
    return int(text), False


def _finished(iter_dir: Path) -> bool:
    return (iter_dir / "metadata.json").is_file() or any(iter_dir.glob("mp_rank_*/model_optim_rng.pt"))

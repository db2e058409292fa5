"""A live, one-line-per-event view of a run, read from its event files as they grow."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from runlog import names
from runlog.reader import EventTail

SHOWN = {
    names.RUN_START, names.RESUME, names.CHECKPOINT_LOAD, names.CHECKPOINT_CORRUPT, names.CHECKPOINT_SAVE_END, names.STEP,
    names.FAULT_INJECTED, names.SIGNAL_RECEIVED, names.EXIT, names.LAUNCH, names.WORKER_FAILED, names.FT_TIMEOUT, names.RESTART,
    names.SIGNAL_SENT, names.DEADLINE, names.LAUNCHER_EXIT, names.LEFTOVER, names.STRAGGLER_REPORT, names.RERUN,
    names.CHECKPOINT_SAVE_FAILED, names.OOM_KILL,
}
RANK0_ONLY = {names.RUN_START, names.RESUME, names.CHECKPOINT_LOAD, names.CHECKPOINT_SAVE_END, names.STEP}
DETAIL = ("iteration", "loss", "fault", "target_rank", "reason", "code", "exitcode", "local_rank",
          "attempts_left", "signal", "path", "pids", "seconds", "state", "diagnosis")


def describe(e: dict[str, Any], t0: float) -> str:
    who = "runner" if e["rank"] < 0 else f"rank {e['rank']}"
    parts = []
    for key in DETAIL:
        if key in e and e[key] is not None:
            value = e[key]
            parts.append(f"{key}={value:.4f}" if isinstance(value, float) else f"{key}={value}")
    return f"[{e['mono'] - t0:7.2f}s] a{e['attempt']} {who:<7} {e['event']:<20} {' '.join(parts)}"


class ProgressView:
    """Tails <run_dir>/events/*.jsonl; `tick()` prints the complete lines that arrived since the last tick,
    and each line that is not an event (it goes on: the judge refuses the log at the end)."""

    def __init__(self, run_dir: Path, out: Callable[[str], None]):
        self.tail = EventTail(run_dir)
        self.out = out
        self.t0: float | None = None
        self.step_every = 1
        self.last_attempt: int | None = None
        self.reported = 0

    def tick(self) -> None:
        for e in sorted(self.tail.poll(), key=lambda e: e["mono"]):
            if self.t0 is None:
                self.t0 = e["mono"]
            if self._shown(e):
                self.out(describe(e, self.t0))
        for bad in self.tail.malformed[self.reported:]:
            self.out(f"chaos: not an event (skipped): {bad}")
        self.reported = len(self.tail.malformed)

    def _shown(self, e: dict[str, Any]) -> bool:
        """Every notable event; of long runs' steps, about twenty, plus the first of each attempt."""
        if e["event"] not in SHOWN or (e["event"] in RANK0_ONLY and e["rank"] != 0):
            return False
        if e["event"] == names.RUN_START and isinstance(e.get("train_iters"), int):
            self.step_every = max(1, e["train_iters"] // 20)
        if e["event"] != names.STEP:
            return True
        first = e["attempt"] != self.last_attempt
        self.last_attempt = e["attempt"]
        return first or e["iteration"] % self.step_every == 0

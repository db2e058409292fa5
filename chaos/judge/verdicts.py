"""Verdicts: each expectation of a scenario against what the run showed, with expected and observed side by side.

``judge`` is pure (expectations and metrics in, verdicts out), so a run folder can be judged again later.
``compare_runs`` is the one reader of files here: the baseline check of losses and final weights. torch is
imported only inside it, so judging a journal needs no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from chaos.judge.accounting import Accounting, Failure
from chaos.judge.correlate import EXACT, CorrelateError, Tolerance, correlate, read_losses
from chaos.judge.registry import EXPECTATIONS, Judged
from chaos.judge.timeline import Metrics
from chaos.schema.expect import HARNESS_VERDICTS, Baseline, Expect, ExpectedFailure, KnownFailure, Limit
from runlog import names, pitfalls
from runlog.layout import RunFolder

NOT_OBSERVED = "not observed"


@dataclass(frozen=True)
class Verdict:
    """One expectation checked. ``observed`` is "not observed" when the run never showed the number;
    ``bounds`` are a numeric expectation's ``min`` and ``max`` (either left out when open), for machines."""

    name: str
    expected: str
    observed: str | float | int | None
    passed: bool
    bounds: dict[str, float] | None = None

    def message(self) -> str:
        return f"{self.name}: expected {self.expected}, observed {_show(self.observed)}"


@dataclass(frozen=True)
class BaselineCheck:
    """A run against its fault-free baseline: per-step losses, then final weights."""

    passed: bool
    message: str
    first_divergence: int | None = None
    loss_run: float | None = None
    loss_baseline: float | None = None
    max_weight_diff: float | None = None


def harness_verdicts(
    events: list[dict[str, Any]], deadline_s: float, expect: Expect | None = None, accounting: Accounting | None = None
) -> list[Verdict]:
    """What every run must show whatever its scenario (chaos/judge/registry.py, HARNESS_CHECKS): it ended
    before its deadline (or, with ``expect.killed_at_deadline``, outlived it), it left nothing behind, every
    planned fault came due and found something to strike, every failed attempt is explained by an injected
    fault (or expected by name), and it fell into none of the resiliency card's pitfalls but those
    ``expect.pitfalls`` names. ``accounting``: the run's failures and faults never due (none when left out)."""
    expect = expect or Expect()
    accounting = accounting or Accounting((), ())
    killed = any(e["event"] == names.DEADLINE for e in events)
    left: list[int | str] = left_processes(events)
    left += [held for e in events if e["event"] == names.LEFTOVER for held in e.get("isolation") or ()]
    missed = [f"{e['fault_id']} {e['fault']}: {e['reason']}" for e in events if e["event"] == names.FAULT_MISSED]
    missed += [n.describe() for n in accounting.never_due]
    wanted = sorted(set(expect.pitfalls or ()))
    seen = sorted({e["name"] for e in events if e["event"] == names.PITFALL})
    deadline, reaped, found, unexplained, pitfall = HARNESS_VERDICTS
    on_time = Verdict(deadline, f"finished within {deadline_s:g} s", "killed at the deadline" if killed else "finished", not killed)
    if expect.killed_at_deadline:
        on_time = Verdict(deadline, f"killed at the deadline ({deadline_s:g} s)", on_time.observed, killed)
    fired = sum(1 for e in events if e["event"] == names.FAULT_INJECTED)
    return [
        on_time,
        Verdict(reaped, "no process, namespace or link of the run left", left or "none", not left),
        Verdict(found, "every planned fault came due and struck a real target", "; ".join(missed) or f"all did ({fired} fired)", not missed),
        _unexplained(unexplained, accounting, expect.failures_not_injected or []),
        Verdict(pitfall, ", ".join(wanted) or "none", _pitfalls(seen), wanted == seen),
    ]


def left_processes(events: list[dict[str, Any]]) -> list[int | str]:
    """The processes a run left, each its pid with its command line where the event has one (older logs have none)."""
    return [
        f"{pid} ({e['commands'][i]})" if i < len(e.get("commands") or ()) else pid
        for e in events if e["event"] == names.LEFTOVER for i, pid in enumerate(e["pids"])
    ]


def _unexplained(name: str, accounting: Accounting, expected: list[ExpectedFailure]) -> Verdict:
    """Every unexplained failure is one the scenario expects by name, and every expected one happened."""
    failures = accounting.unexplained
    matched = {i for f in failures for i, x in enumerate(expected) if _matches(x, f)}
    stray = [f for f in failures if not any(_matches(x, f) for x in expected)]
    absent = [x.name for i, x in enumerate(expected) if i not in matched]
    wanted = "none" if not expected else "exactly " + ", ".join(f"{x.name} (cause contains {x.cause!r})" for x in expected)
    observed = "; ".join(f.describe() for f in failures) or "none"
    if absent:
        observed += f"; expected but not seen: {', '.join(absent)}"
    return Verdict(name, wanted, observed, not stray and not absent)


def _matches(expected: ExpectedFailure, failure: Failure) -> bool:
    return expected.cause in failure.cause and expected.attempt in (None, failure.attempt)


def _pitfalls(found: list[str]) -> str:
    """Pitfalls by name, each with the card's warning."""
    return "; ".join(f"{name} ({pitfalls.CARD.get(name, 'not one of the card')})" for name in found) or "none"


def judge(expect: Expect, metrics: Metrics, baseline_check: BaselineCheck | None = None) -> list[Verdict]:
    """One verdict per expectation that is set, in the registry's order (chaos/judge/registry.py), each
    against the metric the registry names."""
    verdicts = []
    for name, check in EXPECTATIONS.items():
        wanted = getattr(expect, name)
        if wanted is None:
            continue
        expected = None
        if isinstance(wanted, Limit):
            stated = wanted
            wanted = stated.for_run(metrics.start_s, getattr(metrics, check.timeout) if check.timeout else None)
            expected = wanted.describe() if wanted is stated else f"{wanted.describe()} ({stated.describe()})"
        verdicts.append(_measured(name, wanted, getattr(metrics, check.metric), check.judged, expected))
    if expect.baseline is not None:
        verdicts.append(_baseline(expect.baseline, baseline_check))
    return verdicts


def known_failure_verdict(known: KnownFailure, verdicts: list[Verdict], output: str) -> Verdict:
    """Whether the run failed exactly as its known failure says: the named verdicts and no other, with the
    upstream error's signature in its output."""
    failed, wanted = sorted(v.name for v in verdicts if not v.passed), sorted(known.verdicts)
    shows = known.signature is None or known.signature in output
    expected = f"exactly {', '.join(wanted)} fail" + (f" (and maybe {', '.join(known.may_also_fail)})" if known.may_also_fail else "")
    expected += f", the output shows {known.signature!r}" if known.signature else ""
    observed = f"failed: {', '.join(failed) or 'none'}" + ("" if shows else f"; the output lacks {known.signature!r}")
    exact = [name for name in failed if name not in known.may_also_fail] == wanted
    return Verdict("known_failure", f"{expected} ({known.reason})", observed, exact and shows)


def compare_runs(run_dir: str | Path, baseline_dir: str | Path, mode: Literal["exact"] | float) -> BaselineCheck:
    """Same iterations with equal losses, and equal final weights: bit for bit ("exact") or within ``mode``."""
    tolerance = EXACT if mode == "exact" else Tolerance.absolute(float(mode))
    try:
        losses = correlate(read_losses(run_dir), read_losses(baseline_dir), tolerance)
    except CorrelateError as e:  # a run that never stepped, a damaged event log
        return BaselineCheck(passed=False, message=str(e))
    weights_ok, weight_diff, weights_msg = _compare_weights(
        RunFolder(Path(run_dir)).final_weights, RunFolder(Path(baseline_dir)).final_weights, None if mode == "exact" else float(mode)
    )
    return BaselineCheck(
        passed=losses.passed and weights_ok,
        message=f"{losses.summary()}; {weights_msg}",
        first_divergence=losses.first_divergence,
        loss_run=losses.value_a,
        loss_baseline=losses.value_b,
        max_weight_diff=weight_diff,
    )


def _measured(name: str, wanted: Any, observed: Any, judged: Judged, expected: str | None = None) -> Verdict:
    """``expected``: a limit's text in seconds with what the run made of it (start-up, timeout)."""
    expected = expected or (wanted.describe() if judged == "limit" else f"== {wanted}")
    bounds = _bounds(wanted)
    if observed is None:
        return Verdict(name, expected, NOT_OBSERVED, False, bounds)
    passed = wanted.holds(observed) if judged == "limit" else observed == wanted
    return Verdict(name, expected, observed, passed, bounds)


def _bounds(wanted: Any) -> dict[str, float] | None:
    """A numeric expectation as {min, max} (an exact number is both); None for any other kind."""
    if isinstance(wanted, Limit):
        return {k: v for k, v in (("min", wanted.min), ("max", wanted.max)) if v is not None}
    if isinstance(wanted, (int, float)) and not isinstance(wanted, bool):
        return {"min": wanted, "max": wanted}
    return None


def _baseline(wanted: str | Baseline, check: BaselineCheck | None) -> Verdict:
    if isinstance(wanted, Baseline):
        expected = f"losses and weights within {wanted.tolerance:g} of the baseline"
    else:
        expected = "bit-identical losses and weights to the baseline"
    if check is None:
        return Verdict("baseline", expected, NOT_OBSERVED, False)
    return Verdict("baseline", expected, check.message, check.passed)


def _compare_weights(run: Path, baseline: Path, tolerance: float | None) -> tuple[bool, float | None, str]:
    """(passed, max abs diff, message); ``tolerance`` None means torch.equal on every tensor.

    Files equal byte for byte hold equal tensors: they agree without loading torch (2 s in a `chaos run`
    that has not imported it)."""
    for path in (run, baseline):
        if not path.is_file():
            return False, None, f"no final weights at {path}"
    if _same_bytes(run, baseline):
        return True, 0.0, "weights agree, max abs diff 0 (the same bytes)"
    import torch

    loaded = []
    for path in (run, baseline):
        try:
            loaded.append(torch.load(path, weights_only=True))
        except Exception as e:  # torch's unpickler raises anything (KeyError, EOFError, ...) on a damaged file
            return False, None, f"final weights {path} cannot be read ({type(e).__name__}: {e})"
    a, b = loaded
    if a.keys() != b.keys():
        names = sorted(a.keys() ^ b.keys())
        return False, None, f"weights differ in tensor names: {', '.join(names[:3])}"
    diffs = {name: _max_abs_diff(a[name], b[name]) for name in a}
    worst = max(diffs, key=diffs.__getitem__, default="")
    diff = diffs.get(worst, 0.0)
    passed = all(torch.equal(a[n], b[n]) for n in a) if tolerance is None else diff <= tolerance
    if passed:
        return True, diff, f"weights agree, max abs diff {diff:.3g}"
    return False, diff, f"weights differ, max abs diff {diff:.3g} in {worst!r}"


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False  # the load below names the file that cannot be read


def _max_abs_diff(a: Any, b: Any) -> float:
    """Largest elementwise |a - b|; inf for a shape mismatch or a NaN, so the worst tensor is named."""
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    diff = (a.double() - b.double()).abs().max().item()
    return math.inf if math.isnan(diff) else diff


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)

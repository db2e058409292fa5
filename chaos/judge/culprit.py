"""What the stack said about a culprit: every claim its parts made, in the source's own words, as
``culprit_claim`` events (runlog/judge_records.py, docs/events.md).

The judge reads each source where it speaks (pure functions of the run's events, plus torch's analysis of the
Flight Recorder's dumps):

- ``rank_monitor``: NVRx's rank monitor logs the heartbeat or section timeout it kills a rank for
  (0.4.1: ``[RankMonServer<pid>@<host>:<global rank>] Did not get subsequent heartbeat``, 0.7: ``[workload:?(<local
  rank>) ...] rank_monitor_server.py:522 [Cycle 0] ...``; ``Section 'step' has been
  open ...``); the runner stamps the line as ``ft_timeout`` (chaos/adapters/launcher.py).
- ``flight_recorder``: torch's analyser names the ranks that never joined a collective
  (chaos/adapters/flight_recorder.py).
- ``straggler``: the ranks a straggler report flags, with their scores (``straggler_report``).
- ``rerun``: the ranks whose check failed in a ``rerun`` decision, the check (NaN, spike) and, once
  diagnosed, whether the fault was transient or persistent.

Megatron-LM's and Bridge's own lines reach the same events through chaos/adapters/megatron.py (a rerun
decision, a straggler report, a rank monitor line under ft_launcher), so their claims come the same way. Each
source's first claim of a (rank, node, cause, persistence) per attempt is kept: a straggler report every
second would otherwise repeat one claim a hundred times.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chaos.adapters import flight_recorder
from runlog import names
from runlog.judge_records import CulpritClaim
from runlog.layout import RunFolder
from runlog.log import EventLog

Event = dict[str, Any]

RANK_MONITOR, FLIGHT_RECORDER, STRAGGLER, RERUN = "rank_monitor", "flight_recorder", "straggler", "rerun"
SOURCES = (RANK_MONITOR, FLIGHT_RECORDER, STRAGGLER, RERUN)
"""Every source of claims, in the order reports list them."""
HANG, STRAGGLE, NAN, SPIKE = "hang", "straggler", "nan", "spike"
CAUSES = (HANG, STRAGGLE, NAN, SPIKE)
"""What a claim may say went wrong."""
CULPRIT_SOURCE = "culprit"
"""The event file the judge writes its claims to (events/culprit.jsonl), anew at each judging."""

_MONITOR = re.compile(r"RankMonServer\d+@[^\]:]+:(?P<rank>\d+)\]\s*(?P<what>.*)")
_MONITOR_07 = re.compile(
    r"\[workload:(?P<rank>\d+|\?)\((?P<local>\d+)\)[^\]]*\]\s*rank_monitor_server\.py:\d+\s*(?:\[Cycle \d+\]\s*)?(?P<what>.*)")
"""NVRx 0.7's rank monitor line: ``[workload:?(<local rank>) infra:...] rank_monitor_server.py:522 [Cycle 0] ...``
(its server knows the local rank, not the global one)."""
_SECTION = re.compile(r"Section '(?P<section>[^']+)' has been open")
_RERUN_CAUSE = {"nan": NAN, "spiky": SPIKE}
_PERSISTENCE = {"transient_error": "transient", "reproducible": "persistent", "persistent_error": "persistent",
                "same_node_loop": "persistent"}


def claims(events: list[Event], run_dir: Path | None = None, notes: list[str] | None = None) -> list[tuple[CulpritClaim, float, float]]:
    """Every claim the run's sources made, each with when it was made (wall, mono), in time order. ``notes``
    gets why a source could not be read (the Flight Recorder's analyser failing on the dumps)."""
    nodes = rank_nodes(events)
    found = [*_rank_monitor(events, nodes), *_straggler(events, nodes), *_rerun(events, nodes)]
    if run_dir is not None:
        found += _flight_recorder(run_dir, events, nodes, notes if notes is not None else [])
    seen, kept = set(), []
    for claim, wall, mono in sorted(found, key=lambda c: c[2]):
        key = (claim.source, claim.culprit_rank, claim.culprit_node, claim.cause, claim.persistence, claim.attempt)
        if key not in seen:
            seen.add(key)
            kept.append((claim, wall, mono))
    return kept


def record_claims(run_dir: Path, found: list[tuple[CulpritClaim, float, float]]) -> list[Event]:
    """Write the claims as the run's events (events/culprit.jsonl, replacing an earlier judging's); returns them."""
    path = RunFolder(run_dir).event_file(CULPRIT_SOURCE)
    path.unlink(missing_ok=True)
    if not found:
        return []
    log = EventLog(run_dir, CULPRIT_SOURCE, rank=-1, attempt=0)
    try:
        return [log.write(claim, at=(wall, mono)) for claim, wall, mono in found]
    finally:
        log.close()


def rank_nodes(events: Iterable[Event]) -> dict[tuple[int, int], str]:
    """(attempt, rank) -> the node its events came from."""
    return {(e["attempt"], e["rank"]): e["node"] for e in events if e["rank"] >= 0 and e.get("node") and not e.get("observed")}


def _node(nodes: dict[tuple[int, int], str], attempt: int, rank: int | None) -> str | None:
    return None if rank is None else nodes.get((attempt, rank))


def _at(e: Event) -> tuple[float, float]:
    return e.get("wall", 0.0), e["mono"]


def _rank_monitor(events: list[Event], nodes: dict[tuple[int, int], str]) -> Iterable[tuple[CulpritClaim, float, float]]:
    for e in events:
        if e["event"] != names.FT_TIMEOUT:
            continue
        line = e.get("line")
        said = _monitor_line(line, e, nodes) if isinstance(line, str) else None  # a log read afterwards keeps its line number
        if said is None:
            continue
        rank, what = said
        section = _SECTION.search(what)
        detail = f"section {section['section']!r} timed out: {what}" if section else what
        node = e.get("node") or _node(nodes, e["attempt"], rank)
        yield CulpritClaim(RANK_MONITOR, HANG, rank, node, detail, attempt=e["attempt"]), *_at(e)


def _monitor_line(line: str, e: Event, nodes: dict[tuple[int, int], str]) -> tuple[int, str] | None:
    """The global rank a rank monitor line names and what it says, in 0.4.1's form or 0.7's (a local rank,
    made global by the ranks the line's node ran in its attempt, or in the run when the run had one node)."""
    if (m := _MONITOR.search(line)) is not None:
        return int(m["rank"]), m["what"].strip()
    if (m := _MONITOR_07.search(line)) is None:
        return None
    if m["rank"] != "?":
        return int(m["rank"]), m["what"].strip()
    local, node = int(m["local"]), e.get("node")
    ranks = sorted({r for (a, r), n in nodes.items() if n == node and a == e["attempt"]})
    if not ranks and len(set(nodes.values())) <= 1:
        ranks = sorted({r for _, r in nodes})
    return (ranks[local], m["what"].strip()) if local < len(ranks) else None


def _straggler(events: list[Event], nodes: dict[tuple[int, int], str]) -> Iterable[tuple[CulpritClaim, float, float]]:
    for e in events:
        if e["event"] != names.STRAGGLER_REPORT:
            continue
        scores = e.get("scores") or {}
        for rank in e.get("flagged") or []:
            shown = ", ".join(f"{kind} {_score(by_rank, rank)}" for kind, by_rank in scores.items() if _score(by_rank, rank) != "-")
            detail = f"flagged by the {e.get('kind', '')} report of iteration {e.get('iteration')}: {shown or 'no score'}"
            yield CulpritClaim(STRAGGLER, STRAGGLE, int(rank), _node(nodes, e["attempt"], int(rank)), detail, attempt=e["attempt"]), *_at(e)


def _score(by_rank: Any, rank: int) -> str:
    value = by_rank.get(str(rank), by_rank.get(rank)) if isinstance(by_rank, dict) else None
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def _rerun(events: list[Event], nodes: dict[tuple[int, int], str]) -> Iterable[tuple[CulpritClaim, float, float]]:
    """A flagged rank is a claim when first flagged; a diagnosis names the flagged ranks again (those of the
    decision itself, else the last ones flagged: resumed elsewhere, nothing is flagged) with its persistence."""
    reruns = [e for e in events if e["event"] == names.RERUN]
    checks = {(e["attempt"], e.get("iteration")): _RERUN_CAUSE.get(e["check"], NAN) for e in reruns if e.get("check")}
    suspects: list[tuple[int, str | None, str]] = []
    for e in reruns:
        cause = checks.get((e["attempt"], e.get("iteration")), NAN)  # only the flagged rank knows its check
        flagged = [(int(r), _node(nodes, e["attempt"], int(r)), cause) for r in e.get("flagged") or []]
        persistence = _PERSISTENCE.get(e.get("diagnosis") or "")
        for rank, node, why in flagged or (suspects if persistence else []):
            detail = f"{e.get('state')}: {e.get('message') or ''}".strip(": ")
            yield CulpritClaim(RERUN, why, rank, node, detail, persistence=persistence, attempt=e["attempt"]), *_at(e)
        suspects = flagged or suspects


def _flight_recorder(run_dir: Path, events: list[Event], nodes: dict[tuple[int, int], str],
                     notes: list[str]) -> Iterable[tuple[CulpritClaim, float, float]]:
    """torch's analysis of the dumps, stamped when the newest dump was written (mono from the nearest event)."""
    analysis = flight_recorder.analyse(run_dir)
    if analysis is not None and analysis.error:
        notes.append(analysis.error)
    if analysis is None or not events:
        return
    for missing in analysis.missing:
        near = min(events, key=lambda e: abs(e.get("wall", 0.0) - missing.wall))
        mono = missing.wall - near.get("wall", 0.0) + near["mono"]
        attempt = near["attempt"]
        for rank in missing.missing_ranks:
            detail = f"never joined {missing.describe()}"
            yield CulpritClaim(FLIGHT_RECORDER, HANG, rank, _node(nodes, attempt, rank), detail, attempt=attempt), missing.wall, mono

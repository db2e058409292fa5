"""The fault-free reference run of a scenario's config, computed once and cached per config.

The cache lives in the user's cache folder, not in the current one: ``$CHAOS_CACHE_DIR`` when set, else
``$XDG_CACHE_HOME/chaos-harness/baselines`` (``~/.cache/chaos-harness/baselines``), so ``chaos judge`` run
from anywhere finds it. Since every checkout of the project shares it, the cache key covers everything that
changes the numbers: the trainer config digest, the world size, the device, the versions of torch, numpy and
faker (the corpus generator), and the source of the trainer and of the event-log contract it writes with.
Parallel pytest-xdist workers that need the same baseline wait on one file lock, so it is computed once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from functools import cache
from importlib.metadata import version
from pathlib import Path

from chaos.schema.scenario import Scenario
from runlog.layout import RunFolder

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The checkout the ranks import the trainer from (the runner runs them with it first on PYTHONPATH)."""

CACHE_VAR = "CHAOS_CACHE_DIR"
"""The environment variable naming the baseline cache folder."""
TRAINER_SOURCE = ("trainer", "runlog")
"""The packages whose code computes a baseline's numbers (beside the project root)."""
LOG_TAIL_LINES = 8
"""How much of a failed baseline's log its error shows."""


class BaselineFailed(RuntimeError):
    """The fault-free run of a config did not complete: nothing to compare with. The message says why and
    shows the last lines of its log (the folder is kept, not cached)."""


def default_cache_dir() -> Path:
    """The user's cache folder for baselines (XDG's, as pip's and torch's caches are)."""
    home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(home) / "chaos-harness" / "baselines"


def cache_dir() -> Path:
    """Where the baselines are cached: $CHAOS_CACHE_DIR, else the user's cache folder."""
    return Path(os.environ.get(CACHE_VAR) or default_cache_dir()).resolve()


@cache
def source_digest(root: Path = PROJECT_ROOT) -> str:
    """The sha256 of the trainer's and the contract's Python source under `root`: a baseline cached by another
    checkout, or before the trainer changed, is not this code's."""
    digest = hashlib.sha256()
    for package in TRAINER_SOURCE:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()


def baseline_key(scenario: Scenario) -> str:
    cfg = scenario.config
    parts = {
        "digest": cfg.digest(),
        "world_size": scenario.world_size,
        "device": cfg.dist.device,
        "versions": {p: version(p) for p in ("torch", "numpy", "faker")},
        "source": source_digest(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cached_baseline(scenario: Scenario) -> Path | None:
    """The cached baseline run folder of `scenario`'s config, or None when it must be run first."""
    folder = cache_dir() / baseline_key(scenario)
    return folder if RunFolder(folder).final_weights.is_file() else None


def fault_free(scenario: Scenario) -> Scenario:
    """The same run with every fault disarmed (chaos faults and Bridge's simulate_fault), under torchrun, on
    one node: the numbers depend on the world size, not on how its ranks are spread over nodes. It expects
    nothing (it is not judged: it only has to complete)."""
    trainer = {k: v for k, v in scenario.trainer.items() if not k.startswith("ft.simulate")}
    return scenario.replace(
        faults=[], trainer={**trainer, "ft.enable_ft_package": False}, launcher="torchrun", relaunch=False,
        relaunch_env={}, name=f"{scenario.name}-baseline", nodes=1, procs_per_node=None, spares=0, expect={}, known_failure=None,
        plugins={},
    )


def ensure_baseline(scenario: Scenario, run: Callable[[Scenario, Path], str | None]) -> Path:
    """The cached baseline run folder for `scenario`, running `run(fault_free_scenario, folder)` if absent.

    `run` returns None when the baseline run completed, else why not ("launcher exit 1"); a failed baseline
    is not cached, and raises BaselineFailed.
    """
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    key = baseline_key(scenario)
    folder = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if RunFolder(folder).final_weights.is_file():
            return folder
        for stale in root.glob(f"{key}.partial*"):  # a dead runner's, under the same lock
            shutil.rmtree(stale, ignore_errors=True)
        # A name of its own: the folder's name is the run's marker (CHAOS_RUN_ID), by which its leftovers are
        # found and killed, and two caches (two sessions, two suites on one GPU machine) hold the same key.
        work = root / f"{key}.partial-{uuid.uuid4().hex[:8]}"
        work.mkdir()
        failed = run(fault_free(scenario), work)
        if failed is not None:
            raise BaselineFailed(_failure(failed, RunFolder(work).launcher_log))
        shutil.rmtree(RunFolder(work).checkpoints, ignore_errors=True)
        os.replace(work, folder)
    return folder


def _failure(why: str, log: Path) -> str:
    """Why the baseline failed, and the last lines of its log."""
    try:
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError as e:
        return f"the fault-free baseline run failed ({why}); its log {log} cannot be read ({e.strerror})"
    shown = "".join(f"\n    | {line}" for line in lines) or " (empty)"
    return f"the fault-free baseline run failed ({why}); its log {log} ends:{shown}"

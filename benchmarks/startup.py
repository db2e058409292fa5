"""A worker's start-up and exit, beside the floor: a bare ``import torch`` (issue 18).

Every rank of every attempt of every run pays a worker's start (imports, process group, model, DDP) and, when
it completes, its exit; on a 2-core machine that is most of what a scenario costs. Three processes run side
by side, interleaved ``reps`` times, each a world of one on CPU:

- ``import torch``: ``python -c "import torch"``, the part of any worker that cannot be cut;
- ``worker``: ``python -m trainer`` as a launcher starts it (3 steps, a DCP checkpoint at step 2);
- ``worker, interpreter teardown``: the same run ending through ``sys.exit`` (how it ended before
  ``trainer.cli.exit_process``), so that what the fast exit buys is measured in the same benchmark run;
- with ``--before DIR``, ``worker, before (<commit>)``: the same ``python -m trainer`` run from a checkout
  of an earlier commit, on the same interpreter and torch.

A row splits the worker's time with its own events: process start to ``run_start`` (imports and the
process group), ``run_start`` to the first step (components, model, DDP), the last event to the process's
end (teardown); and gives each as a ratio to the bare import of the same benchmark run. One more run under
``-X importtime`` says what the start-up imports (cumulative seconds of the heaviest packages).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import jobs
from benchmarks.points import PROJECT_ROOT
from benchmarks.runs import BenchmarkFailed
from runlog.reader import read_events

Row = dict[str, Any]

TRAIN = ["--recipe", "tiny_cpu", "train.train_iters=3", "checkpoint.save_interval=2"]
TEARDOWN = "import sys; from trainer.cli import main; sys.exit(main(sys.argv[1:]))"
PACKAGES = ("torch", "torch.distributed.checkpoint", "torch._dynamo", "nvidia_resiliency_ext", "numpy", "trainer.session")
"""What ``-X importtime`` is read for: torch itself, DCP (with DTensor), dynamo (the optimizer and DDP import
it), NVRx, numpy and the trainer's session module (all it imports, cumulative)."""


def _env(root: Path = PROJECT_ROOT) -> dict[str, str]:
    launched = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "MASTER_ADDR", "TORCHELASTIC_", "FT_", "CHAOS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launched)}
    return {**env, "PYTHONPATH": str(root), "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}


def _worker(argv_head: list[str], folder: Path, root: Path = PROJECT_ROOT) -> dict[str, float]:
    """One world-of-one run of the trainer in checkout ``root``; its phases in seconds, from the parent's
    clock and the run's own events."""
    shutil.rmtree(folder, ignore_errors=True)
    argv = [*argv_head, *TRAIN, f"checkpoint.save={folder / 'ckpt'}", f"logger.run_dir={folder}"]
    start = time.time()
    proc = subprocess.run(argv, cwd=root, env=_env(root), capture_output=True, text=True, timeout=300)
    end = time.time()
    if proc.returncode != 0:
        raise BenchmarkFailed(f"benchmark worker exited {proc.returncode}: {proc.stderr[-500:]}")
    events = read_events(folder)
    first = {e["event"]: e["wall"] for e in reversed(events)}
    return {
        "start_to_run_start": first["run_start"] - start,
        "run_start_to_first_step": first["step"] - first["run_start"],
        "exit_to_end": end - events[-1]["wall"],
        "total": end - start,
    }


def _bare_import() -> float:
    start = time.time()
    subprocess.run([sys.executable, "-c", "import torch"], env=_env(), check=True, timeout=120)
    return time.time() - start


def import_seconds(folder: Path) -> dict[str, float]:
    """Cumulative import seconds of PACKAGES in one worker start under ``-X importtime``."""
    shutil.rmtree(folder, ignore_errors=True)
    argv = [sys.executable, "-X", "importtime", "-m", "trainer", *TRAIN, f"checkpoint.save={folder / 'ckpt'}"]
    proc = subprocess.run(argv, cwd=PROJECT_ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    return parse_importtime(proc.stderr)


def parse_importtime(stderr: str) -> dict[str, float]:
    """PACKAGES' cumulative seconds from ``-X importtime`` lines (``import time: self | cumulative | name``,
    the name indented by depth): a package's outermost line, or its biggest submodule's where the package
    came in through an attribute (torch._dynamo, through ``torch.__getattr__``, shows only its submodules);
    other lines (warnings, the trainer's log) are passed over."""
    own: dict[str, float] = {}
    biggest_submodule: dict[str, float] = {}
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$", line)
        for package in PACKAGES if m else ():
            seconds = int(m.group(1)) / 1e6
            if m.group(2) == package:
                own[package] = max(own.get(package, 0.0), seconds)
            elif m.group(2).startswith(package + "."):
                biggest_submodule[package] = max(biggest_submodule.get(package, 0.0), seconds)
    found = {**biggest_submodule, **own}
    return {name: round(found[name], 3) for name in PACKAGES if name in found}


def startup(out_dir: Path, reps: int, before: Path | None = None) -> list[Row]:
    """The rows: the bare import, then each worker variant with its phases and its ratios to the import."""
    work = out_dir / "startup"
    bare: list[float] = []
    worker = [sys.executable, "-m", "trainer"]
    variants = {"worker": (worker, PROJECT_ROOT), "worker, interpreter teardown": ([sys.executable, "-c", TEARDOWN], PROJECT_ROOT)}
    if before is not None:
        variants[f"worker, {jobs.label(before)}"] = (worker, before)
    runs: dict[str, list[dict[str, float]]] = {label: [] for label in variants}
    for _ in range(reps):
        bare.append(_bare_import())
        for label, (head, root) in variants.items():
            runs[label].append(_worker(head, work / "run", root))
    floor = statistics.median(bare)
    rows: list[Row] = [{"process": "import torch", "total": floor, "total_per_import": 1.0}]
    for label, samples in runs.items():
        row: Row = {"process": label}
        for key in samples[0]:
            row[key] = statistics.median(s[key] for s in samples)
        row["total_per_import"] = row["total"] / floor
        row["start_per_import"] = (row["start_to_run_start"] + row["run_start_to_first_step"]) / floor
        rows.append(row)
    if before is not None:
        rows[1]["start_per_before"] = rows[1]["start_per_import"] / rows[-1]["start_per_import"]
    rows.append({"process": "worker imports (-X importtime, s)", **import_seconds(work / "importtime")})
    shutil.rmtree(work, ignore_errors=True)
    return rows

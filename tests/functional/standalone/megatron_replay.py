"""A recorded real Megatron run, replayed as a live process: Megatron's own lines on a CPU machine.

Megatron needs a GPU; its output does not. This script prints the trainer lines of one attempt of a run
recorded on the lent GPU (tests/data/megatron), at the pace they were recorded (``--speed`` times faster),
with every time they state rewritten to the replay's own clock, and then exits with the attempt's code.
Run under ft_launcher or torchrun it is a foreign trainer whose real process the harness kills, stops or
signals, whose death the real launcher sees and restarts, and whose lines the harness's adapter reads live.

Each SEGMENT is ``LOG[:CODE[,CODE...]]``: the log's trainer lines (the recorded launcher's own lines are
left out: the real launcher prints its own), split into one attempt per recorded restart line, each
ending as its CODE says: an exit code (default 0), or ``killed``: the recorded process was killed there,
so the replay waits after its last line to be killed too (and exits 1 if nobody does within
``KILL_WAIT_S``). A process plays the attempt after the ones earlier processes of the run played (counted in
``--state``, as a trainer finds its place in its own checkpoint).

    python megatron_replay.py --state RUN/replay-state --speed 3 tests/data/megatron/mlm_ft_kill/output.log:killed,0
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime
from pathlib import Path

STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{6})?")
LAUNCHER_LINE = re.compile(
    r"^(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] \[|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ )"
)
"""ft_launcher 0.4's and 0.7's logging formats, torch's glog format (torchrun's agent)."""
RESTART = re.compile(r"Worker group (?:UNHEALTHY|FAILED)\. \d+/\d+ attempts left; will restart")
KILLED = "killed"
KILL_WAIT_S = 120.0


def attempts(segment: str) -> list[tuple[list[str], str]]:
    """The attempts of one SEGMENT: each one's trainer lines and how it ends (an exit code, or killed)."""
    path, _, codes = segment.partition(":")
    runs: list[list[str]] = [[]]
    for line in Path(path).read_text().splitlines():
        if RESTART.search(line):
            runs.append([])
        elif not LAUNCHER_LINE.match(line):
            runs[-1].append(line)
    ends = codes.split(",") if codes else []
    return [(lines, ends[i] if i < len(ends) else "0") for i, lines in enumerate(runs)]


def parse(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f" if "." in stamp else "%Y-%m-%d %H:%M:%S")


def play(lines: list[str], speed: float) -> None:
    """Print `lines` when their recorded time comes (relative to the first time stated), times rewritten."""
    first = next((parse(m[0]) for line in lines if (m := STAMP.search(line))), None)
    start = time.time()

    def now_for(m: re.Match[str]) -> str:
        moved = datetime.fromtimestamp(start + (parse(m[0]) - first).total_seconds() / speed)
        return moved.strftime("%Y-%m-%d %H:%M:%S.%f" if "." in m[0] else "%Y-%m-%d %H:%M:%S")

    for line in lines:
        m = STAMP.search(line)
        if m is not None:
            time.sleep(max(0.0, start + (parse(m[0]) - first).total_seconds() / speed - time.time()))
        print(STAMP.sub(now_for, line), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("segments", nargs="+", metavar="LOG[:CODE]")
    parser.add_argument("--state", type=Path, required=True, help="counts the attempts played so far")
    parser.add_argument("--speed", type=float, default=1.0)
    args = parser.parse_args()
    played = args.state.read_text().count("\n") if args.state.exists() else 0
    plan = [a for segment in args.segments for a in attempts(segment)]
    if played >= len(plan):
        print(f"megatron_replay: all {len(plan)} recorded attempts were played", file=sys.stderr)
        return 3
    with args.state.open("a") as state:
        state.write(f"attempt {played}\n")
    lines, end = plan[played]
    play(lines, args.speed)
    if end == KILLED:
        time.sleep(KILL_WAIT_S)
        print(f"megatron_replay: attempt {played} was killed in the recording, but not in {KILL_WAIT_S:g} s here", file=sys.stderr)
        return 1
    return int(end)


if __name__ == "__main__":
    sys.exit(main())

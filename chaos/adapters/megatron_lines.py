"""The lines Megatron-LM and Megatron Bridge print, as patterns, and the numbers and times in them.

Each pattern's source function is cited in chaos/adapters/megatron.py, which turns matched lines into
records.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

STAMP = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
BRACKET_TIME = re.compile(rf"\[({STAMP})\]")
LEADING_TIME = re.compile(rf"^({STAMP}) \[")
"""ft_launcher 0.7's logging format: ``2026-12-01 10:12:30,401 [INFO] [host] ...``."""
ITERATION = re.compile(r"\biteration\s+(?P<iteration>\d+)\s*/\s*(?P<train_iters>\d+)\s*\|(?P<fields>.*)")
SAVE_BEGIN = re.compile(r"saving checkpoint at iteration\s+(?P<iteration>\d+) to (?P<path>.+?) in (?P<format>\S+) format")
SAVE_ASYNC = re.compile(r"scheduled an async checkpoint save at iteration\s+(?P<iteration>\d+) to (?P<path>\S+)")
SAVE_END = re.compile(r"successfully saved checkpoint from iteration\s+(?P<iteration>\d+) to (?P<path>\S+)")
LOAD_BEGIN = re.compile(r"loading (?:distributed )?checkpoint from (?P<path>\S+) at iteration (?P<iteration>\d+)")
LOAD_END = re.compile(r"successfully loaded checkpoint from (?P<path>\S+) .*?at iteration (?P<iteration>\d+)")
SIMULATED = re.compile(r"FT: Simulating fault: (?P<fault>\w+); rank to fail: (?P<rank>\d+)")
INJECTOR = re.compile(rf"FAULT INJECTION: Rank (?P<rank>\d+) will inject fault (?P<fault>\w+) at (?P<at>{STAMP})")
RERUN_INJECTED = re.compile(r"rerun_state_machine:Injecting error type (?P<kind>.+?)\s*$")
"""Megatron-Core's RerunErrorInjector (--error-injection-rate/-type) corrupting this step's result."""
INJECTED = re.compile(r"inject_fault:sending signal=<Signals\.(?P<signal>\w+): \d+> to pid=\d+")
SIGNAL_SEEN = re.compile(r"Received signal (?P<signum>\d+), initiating graceful stop")
FT_TIMEOUTS = re.compile(r"FT: initialized\. Timeouts=(?P<kind>SectionTimeouts|HeartbeatTimeouts)\((?P<body>.*)\)\s*$")
FT_VALUE = re.compile(r"(?P<name>\w+)=(?P<value>-?[\d.]+|None)")
FT_SECTIONS = re.compile(r"sections=\[(?P<sections>[^\]]*)\]")
FT_CALCULATED = re.compile(r"calculated_sections=(?P<set>set\(\)|\{[^}]*\})|is_out_of_section_calculated=True|were_calculated=True")
MARK = re.compile(rf"\[(?P<what>[^\]]+)\] datetime: (?P<at>{STAMP})")
RERUN_FLAG = re.compile(
    r"Unexpected result (?P<value>\S+) on rank (?P<rank>\d+) at iteration #(?P<iteration>\d+) "
    r"invocation #\d+ \(message='(?P<message>.*)'\)"
)
RERUN_WHERE = re.compile(r"Rank (?P<rank>\d+), node (?P<node>\S+), device \d+, iteration #(?P<iteration>\d+): (?P<what>.*)")
STRAGGLER_FLAGGED = re.compile(r"STRAGGLER DETECTION WARNING: Some GPUs (?P<what>.*?)\. Affected ranks: (?P<ranks>.*)")
STRAGGLER_HEAD = re.compile(r"GPU (?P<kind>relative|individual) performance:\s*$")
STRAGGLER_SCORE = re.compile(r"^\s+Rank=(?P<rank>\d+) Node=\S+ Score=(?P<score>\S+)")
STRAGGLER_SUBHEAD = re.compile(r"^\s+(?:Worst|Best) performing \d+/\d+ ranks:")
NVRX_EXAMPLE = re.compile(r"Rank \d+ GPUs (?P<kind>relative|individual) perf: \{(?P<scores>.*)\}")

DIAGNOSES = (
    ("Possible transient error!", "transient_error"),
    ("First rerun: unexpected result is reproducible within the tolerance", "reproducible"),
    ("Possible persistent error!", "persistent_error"),
    ("Correct result (but possible Application error)", "correct_result"),
)
RERUN_EXITS = (
    ("Saving a checkpoint and exiting now. Please resume the job from the checkpoint", 16),
    ("Exiting now. Please resume the job from the same checkpoint", 16),
    ("Exiting now. The job can be resumed from a previous checkpoint", 17),
    ("Exiting now. A checkpoint at the last iteration already exists", 17),
)
COUNTS = frozenset({"consumed_samples", "global_batch_size", "skipped_iterations", "nan_iterations"})
SAME_GPU = "Got rescheduled on the same GPU. Need to resume again from the same checkpoint"
STEP_FIELDS = {
    "consumed samples": "consumed_samples",
    "learning rate": "lr",
    "global batch size": "global_batch_size",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
    "number of skipped iterations": "skipped_iterations",
    "number of nan iterations": "nan_iterations",
}



def line_time(line: str) -> float | None:
    """The time a line states in brackets (``[2025-05-09 06:11:17]``, ``[... .123456]``, ft_launcher 0.4's
    ``[2026-12-01 09:35:27,496]``) or at its start (ft_launcher 0.7's ``2026-12-01 10:12:30,401 [INFO]``),
    as epoch seconds."""
    m = BRACKET_TIME.search(line) or LEADING_TIME.search(line)
    return None if m is None else parse_time(m[1])


def ft_timeouts(kind: str, body: str) -> dict[str, object]:
    """NVRx's ``SectionTimeouts(...)`` / ``HeartbeatTimeouts(...)`` as printed (their ``__str__``): the
    ``ft_timeouts`` fields, ``calculated`` when any timeout was learned rather than configured."""
    values = {m["name"]: None if m["value"] == "None" else float(m["value"]) for m in FT_VALUE.finditer(body)}
    calculated = any(m["set"] != "set()" for m in FT_CALCULATED.finditer(body))
    if kind == "HeartbeatTimeouts":
        return {"heartbeat": {k: values.get(k) for k in ("initial", "subsequent")}, "sections": {}, "calculated": calculated}
    listed = FT_SECTIONS.search(body)
    sections = {m["name"]: None if m["value"] == "None" else float(m["value"])
                for m in FT_VALUE.finditer(listed["sections"] if listed else "")}
    return {"heartbeat": {}, "sections": {**sections, "out_of_section": values.get("out_of_section")}, "calculated": calculated}


def parse_time(stamp: str) -> float:
    text = stamp.replace(",", ".")
    layout = "%Y-%m-%d %H:%M:%S.%f" if "." in text else "%Y-%m-%d %H:%M:%S"
    return datetime.strptime(text, layout).timestamp()


def step_fields(text: str) -> dict[str, float]:
    """The numeric ``name: value`` fields of an iteration line's ``|``-separated rest."""
    values = {}
    for part in text.split("|"):
        name, colon, value = part.rpartition(":")
        found = number(value.strip()) if colon else None
        if found is not None:
            values[name.strip()] = found
    return values


def count(name: str, value: float) -> float | int:
    """Counts as integers (samples, batch size, skipped and NaN iterations); rates and norms as floats."""
    return int(value) if name in COUNTS and math.isfinite(value) else value


def number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None

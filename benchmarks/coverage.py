"""`python -m benchmarks coverage [--write]`: which resiliency settings of the trainer's config the catalogue's
scenarios and the explore bases exercise under a fault, generated from the code.

Rows are the settings of ``SETTINGS`` (every field of the trainer's config is a row, or has a stated reason in
``NOT_UNDER_FAULT`` or ``OTHER_SECTIONS``: tests/unit/benchmarks/test_coverage.py holds the config to it). For
each row, the values the scenarios that inject a fault run with (each scenario's config as the trainer builds
it), and the explore bases' values (with what their ``explore.settings`` draw), and the faults they meet. A
setting that no scenario sets away from its default under a fault is a gap; so is a value the resiliency card
recommends that none uses. ``--write`` puts the table into docs/coverage.md between its markers.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.schema.loader import load_scenario, scenario_files
from chaos.schema.scenario import Scenario
from trainer.config import TrainerConfig

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "scenarios"
EXPLORE_BASES = (ROOT / "scenarios" / "explore", ROOT / "benchmarks" / "mutants" / "bases")
DOC = ROOT / "docs" / "coverage.md"
BEGIN, END = "<!-- coverage:begin -->", "<!-- coverage:end -->"


@dataclass(frozen=True)
class Setting:
    """A row: a resiliency setting of the trainer's config (its dotted key)."""

    key: str
    card: tuple[Any, ...] = ()
    """The values the resiliency card (Megatron Bridge's resiliency guide) recommends, if it names any."""
    untested: str = ""
    """Why a gap (a value never used under a fault) cannot matter there or is not tested here; empty: none is left."""


_ONE_SCORE = 'which score a report computes: off, that score is missing from the report and flags nobody; the straggler scenarios flag by both'
"""Why neither straggler score's switch is a gap."""

SETTINGS = (
    Setting("checkpoint.save_interval"),
    Setting("checkpoint.async_save", card=(True,)),
    Setting("checkpoint.ckpt_format", card=("torch_dist",),
            untested="only torch_dist is implemented: any other format is refused before launch (async_save_format_pitfall)"),
    Setting("checkpoint.most_recent_k"),
    Setting("checkpoint.verify_on_load"),
    Setting("checkpoint.on_save_failure"),
    Setting("checkpoint.non_persistent_ckpt_type"),
    Setting("checkpoint.non_persistent_save_interval"),
    Setting("checkpoint.non_persistent_local_ckpt_algo", card=("fully_parallel",)),
    Setting("ft.enable_ft_package", card=(True,)),
    Setting("ft.calc_ft_timeouts", card=(True,)),
    Setting("ft.use_sections", card=(True,)),
    Setting("ft.simulate_fault"),
    Setting("ft.simulated_fault_type",
            untested="Bridge's simulated fault types rank_killed and rank_hung are the rank_killed and rank_hung faults the catalogue injects, and are run against Bridge itself (bridge_simulate_fault_rank_killed, bridge_simulate_fault_rank_hung)"),
    Setting("ft.simulated_fault_rank",
            untested="which rank Bridge's simulated fault strikes: every rank_killed scenario names its rank"),
    Setting("ft.simulated_fault_base_delay"),
    Setting("nvrx_straggler.enabled", card=(True,)),
    Setting("nvrx_straggler.stop_if_detected", card=(True,)),
    Setting("nvrx_straggler.report_time_interval"),
    Setting("nvrx_straggler.calc_relative_gpu_perf",
            untested=_ONE_SCORE),
    Setting("nvrx_straggler.calc_individual_gpu_perf",
            untested=_ONE_SCORE),
    Setting("nvrx_straggler.gpu_relative_perf_threshold"),
    Setting("nvrx_straggler.gpu_individual_perf_threshold"),
    Setting("nvrx_straggler.profiling_interval",
            untested='how often a step is timed for the scores: the straggler scenarios flag with every step timed; sparser timing only delays a report'),
    Setting("straggler.log_straggler", untested="Megatron's legacy detector is refused at config (two_straggler_detectors)"),
    Setting("rerun_state_machine.rerun_mode"),
    Setting("rerun_state_machine.check_for_nan_in_loss", card=(True,),
            untested='off, a NaN loss trains on unchecked and nothing recovers: the card says to rely on it, and the nan_* scenarios do'),
    Setting("rerun_state_machine.check_for_spiky_loss"),
    Setting("rerun_state_machine.spiky_loss_factor",
            untested='the threshold of check_for_spiky_loss: spiky_loss injects a spike past the default factor of 10'),
    Setting("rerun_state_machine.error_injection_rate",
            untested="Megatron's own injector of wrong results; the catalogue injects them with its nan_loss fault instead (the nan_* scenarios)"),
    Setting("rerun_state_machine.error_injection_type",
            untested="Megatron's own injector of wrong results; the catalogue injects them with its nan_loss fault instead (the nan_* scenarios)"),
    Setting("rerun_state_machine.max_same_node_reruns"),
    Setting("inprocess_restart.enabled"),
    Setting("inprocess_restart.granularity"),
    Setting("inprocess_restart.max_iterations",
            untested="not tested here: past it NVRx's Wrapper gives up and the launcher restarts, the escalation inprocess_hang_escalates shows by hard_timeout"),
    Setting("inprocess_restart.soft_timeout"),
    Setting("inprocess_restart.hard_timeout"),
    Setting("inprocess_restart.heartbeat_interval"),
    Setting("inprocess_restart.heartbeat_timeout"),
    Setting("inprocess_restart.barrier_timeout"),
    Setting("inprocess_restart.completion_timeout"),
    Setting("inprocess_restart.monitor_thread_interval",
            untested='a polling interval: it moves detection by at most its value, which the in-process scenarios bound with the default'),
    Setting("inprocess_restart.monitor_process_interval"),
    Setting("inprocess_restart.progress_watchdog_interval",
            untested='a polling interval: it moves detection by at most its value, which the in-process scenarios bound with the default'),
    Setting("inprocess_restart.last_call_wait",
            untested='a wait before the restart for late faults: it moves recovery by at most its value, which the in-process scenarios bound with the default'),
    Setting("inprocess_restart.termination_grace_time",
            untested='the grace between SIGTERM and SIGKILL of a hung rank: it moves recovery by at most its value, bounded with the default'),
    Setting("train.exit_signal_handler", card=(True,)),
    Setting("train.exit_signal", card=("SIGTERM",),
            untested='the handler is installed for the one signal named; the scenarios send SIGTERM, as Slurm and the card do'),
    Setting("train.exit_signal_handler_for_dataloader"),
    Setting("train.exit_interval",
            untested="a planned stop (Megatron's --exit-interval): it saves and exits 0, no fault's response"),
    Setting("dataset.num_workers", card=(2,)),
    Setting("dist.distributed_timeout_minutes"),
    Setting("dist.device"),
)
"""The rows, in the order of the table."""

NOT_UNDER_FAULT: dict[str, str] = {
    "checkpoint.save": "set by the runner (the run folder's checkpoints)",
    "checkpoint.load": "a folder to resume from: the same load as auto-resume from checkpoint.save, which every restart runs",
    "checkpoint.non_persistent_local_ckpt_dir": "set by the runner (the run folder's local checkpoints)",
    "nvrx_straggler.num_gpu_perf_scores_to_print": "how many scores a report prints: no decision rests on it",
    "nvrx_straggler.enable_logging": "whether reports are logged: no decision rests on it",
    "straggler.enable_straggler_on_startup": "the legacy detector is refused at config (straggler.log_straggler)",
    "straggler.straggler_ctrlr_port": "the legacy detector is refused at config (straggler.log_straggler)",
    "straggler.straggler_minmax_count": "the legacy detector is refused at config (straggler.log_straggler)",
    "fault_injection.component": "the harness's own injector, set by the runner",
    "fault_injection.plan": "the harness's own injector, set by the runner",
    "train.train_iters": "the run's length, not how it survives a fault",
    "train.micro_batch_size": "the numbers computed (every fault scenario checks them against its fault-free run)",
    "train.global_batch_size": "the numbers computed (every fault scenario checks them against its fault-free run)",
    "dataset.corpus_bytes": "the numbers computed (every fault scenario checks them against its fault-free run)",
    "dataset.seed": "the numbers computed (every fault scenario checks them against its fault-free run)",
    "dist.distributed_backend": "follows dist.device (gloo on CPU, NCCL on GPU)",
}
"""Settings of the resiliency-bearing sections that are no row, and why."""

OTHER_SECTIONS: dict[str, str] = {
    "model": "the model's shape and kernels: the numbers computed, which baseline: exact checks bit for bit",
    "optimizer": "the optimizer: the numbers computed, which baseline: exact checks bit for bit",
    "scheduler": "the LR schedule: the numbers computed, which baseline: exact checks bit for bit",
    "rng": "the seed: the numbers computed, which baseline: exact checks bit for bit",
    "logger": "where events go and how often: the harness reads them, no recovery rests on them",
}
"""Sections with no resiliency setting at all, and why."""


def config_keys() -> list[str]:
    """Every setting of the trainer's config, dotted (section.field)."""
    return [f"{section.name}.{f.name}" for section in dataclasses.fields(TrainerConfig)
            for f in dataclasses.fields(section.default_factory())]  # type: ignore[misc]


def unclassified(keys: list[str] | None = None) -> list[str]:
    """Settings of the config (`keys`, default all) with neither a row nor a stated reason, and rows or
    reasons naming no setting."""
    keys = config_keys() if keys is None else keys
    rows = {s.key for s in SETTINGS}
    missing = [k for k in keys if k not in rows and k not in NOT_UNDER_FAULT and k.split(".")[0] not in OTHER_SECTIONS]
    stale = [k for k in (*rows, *NOT_UNDER_FAULT) if k not in keys]
    return [f"{k}: no row in benchmarks/coverage.py SETTINGS and no reason in NOT_UNDER_FAULT" for k in missing] + [
        f"{k}: not a setting of the trainer's config" for k in stale]


def value_of(config: TrainerConfig, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(config, section), name)


DEFAULTS = TrainerConfig()


@dataclass(frozen=True)
class Source:
    """A scenario that injects faults, or an explore base (its faults drawn by explore)."""

    name: str
    faults: tuple[str, ...]
    values: dict[str, tuple[Any, ...]]
    """Per row, the values it runs with (an explore base: its own and those its settings ranges draw)."""
    explore: bool = False


def faults_of(s: Scenario) -> tuple[str, ...]:
    """The fault types a scenario injects: its faults, and those its settings inject."""
    out = [f.type for f in s.faults]
    if s.plugins.preemption is not None:
        out.append("sigterm (plugins.preemption)")
    if s.slurm.preempt_time_s is not None:
        out.append("sigterm (slurm preemption)")
    if s.command is None and s.config.ft.simulate_fault:
        out.append(f"ft.simulate_fault ({s.config.ft.simulated_fault_type})")
    if s.command is None and s.config.rerun_state_machine.error_injection_rate:
        out.append(f"rerun error injection ({s.config.rerun_state_machine.error_injection_type})")
    return tuple(dict.fromkeys(out))


def catalogue_sources() -> Iterator[Source]:
    for path in scenario_files(CATALOGUE):
        s = load_scenario(path)
        faults = faults_of(s)
        if s.command is None and faults:
            yield Source(s.name, faults, {row.key: (value_of(s.config, row.key),) for row in SETTINGS})


def explore_sources() -> Iterator[Source]:
    from chaos.explore.space import allowed_kinds, fault_registry

    registry = fault_registry()
    for folder in EXPLORE_BASES:
        for path in scenario_files(folder):
            s = load_scenario(path)
            if s.command is not None:
                continue
            kinds = tuple(dict.fromkeys(k.type for k in allowed_kinds(s, registry).kinds))
            ranges = s.explore.settings if s.explore is not None else {}
            values = {row.key: tuple(ranges.get(row.key, ())) or (value_of(s.config, row.key),) for row in SETTINGS}
            yield Source(f"explore:{s.name}", kinds, values, explore=True)


@dataclass
class Row:
    setting: Setting
    default: Any
    used: dict[Any, list[Source]] = field(default_factory=dict)
    """Each value set away from the default under a fault, and by whom."""

    @property
    def card_unused(self) -> list[Any]:
        return [v for v in self.setting.card if v != self.default and v not in self.used]

    @property
    def gap(self) -> str:
        if not self.used:
            return "never set away from its default under a fault"
        if self.card_unused:
            return f"the card's {', '.join(show(v) for v in self.card_unused)} never used under a fault"
        return ""


def rows(sources: list[Source]) -> list[Row]:
    out = []
    for setting in SETTINGS:
        row = Row(setting, value_of(DEFAULTS, setting.key))
        for source in sources:
            for value in source.values[setting.key]:
                if value != row.default:
                    row.used.setdefault(value, []).append(source)
        out.append(row)
    return out


def show(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _used_cell(row: Row) -> str:
    parts = []
    for value in sorted(row.used, key=show):
        sources = row.used[value]
        scenarios = [s for s in sources if not s.explore]
        bases = [s.name for s in sources if s.explore]
        who = [f"{len(scenarios)} scenario{'s' * (len(scenarios) != 1)}" if len(scenarios) > 3 else
               ", ".join(s.name for s in scenarios)] if scenarios else []
        faults = sorted({f for s in sources for f in s.faults})
        parts.append(f"`{show(value)}`: {'; '.join([*who, *bases])} ({', '.join(faults)})")
    return "<br>".join(parts) or "none"


def open_gaps(table: list[Row]) -> list[str]:
    """Gaps without a stated reason, one line each."""
    return [f"{r.setting.key}: {r.gap}, and no reason stated (Setting.untested)" for r in table if r.gap and not r.setting.untested]


def markdown(table: list[Row]) -> str:
    gaps = [r for r in table if r.gap]
    open_gaps = [r for r in gaps if not r.setting.untested]
    lines = [
        f"{len(table)} resiliency settings; {len(table) - len(gaps)} exercised away from their defaults under a fault; "
        f"{len(gaps)} gaps, {len(open_gaps)} of them without a stated reason.",
        "",
        "| setting | default | the card recommends | values used under a fault: by whom (faults) | gap |",
        "|---|---|---|---|---|",
    ]
    for r in table:
        gap = r.gap and (f"**gap**: {r.gap}" + (f"; {r.setting.untested}" if r.setting.untested else ""))
        card = ", ".join(f"`{show(v)}`" for v in r.setting.card)
        lines.append(f"| `{r.setting.key}` | `{show(r.default)}` | {card} | {_used_cell(r)} | {gap} |")
    return "\n".join(lines)


def generate() -> str:
    return markdown(rows([*catalogue_sources(), *explore_sources()]))


def spliced(doc: str, text: str) -> str:
    """`doc` with `text` between its markers."""
    head, rest = doc.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks coverage", description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"write the table into {DOC.relative_to(ROOT)} between its markers")
    args = p.parse_args(argv)
    problems = unclassified()
    if problems:
        for problem in problems:
            print(f"coverage: error: {problem}", file=sys.stderr)
        return 2
    text = generate()
    if args.write:
        DOC.write_text(spliced(DOC.read_text(), text))
        print(f"coverage: wrote {DOC}")
    else:
        print(text)
    return 0

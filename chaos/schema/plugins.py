"""NeMo-Run's plugins as Megatron Bridge's resiliency card writes them (``plugins:`` of a scenario), mapped to
what this harness runs the way Bridge's ``recipes/run_plugins.py`` maps them to NeMo-Run:

- ``FaultTolerancePlugin``: NeMo-Run's FaultTolerance launcher (ft_launcher) with ``max_restarts =
  num_in_job_restarts`` and the two heartbeat timeouts; ``executor.retries = num_job_retries_on_failure``
  (here: new launches of the job in the same run folder after a launch that failed); and the script's
  overrides ``ft.enable_ft_package``, ``ft.calc_ft_timeouts``.
- ``PreemptionPlugin``: the overrides ``train.exit_signal_handler``, ``train.exit_signal_handler_for_dataloader``
  (only when ``enable_exit_handler``, as Bridge adds them); on Slurm ``--signal=TERM@preempt_time``: SIGTERM
  ``preempt_time`` seconds before the job's time limit, to every process of the job. Here the time limit is
  ``deadline_s``: SIGTERM to every rank's process group (its data-loader workers too) at
  ``deadline_s - preempt_time`` into the first launch, SIGKILL to what is left at the deadline.

``apply_plugins`` rewrites a scenario's fields before they are validated; a field the author set to another
value than the plugin's is an error naming both.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError

from chaos.faults.signals.planned import Sigterm
from chaos.strict import Strict


class FaultTolerancePlugin(Strict):
    """Bridge's FaultTolerancePlugin: names and defaults as in run_plugins.py (timeouts in seconds)."""

    enable_ft_package: bool = True
    calc_ft_timeouts: bool = True
    num_in_job_restarts: int = Field(default=3, ge=0)
    num_job_retries_on_failure: int = Field(default=2, ge=0)
    initial_rank_heartbeat_timeout: float = Field(default=1800, gt=0)
    rank_heartbeat_timeout: float = Field(default=300, gt=0)


class PreemptionPlugin(Strict):
    """Bridge's PreemptionPlugin: names and defaults as in run_plugins.py (``preempt_time`` in seconds)."""

    preempt_time: float = Field(default=60, gt=0)
    enable_exit_handler: bool = True
    enable_exit_handler_for_data_loader: bool = False


class Plugins(Strict):
    fault_tolerance: FaultTolerancePlugin | None = None
    preemption: PreemptionPlugin | None = None


def plugin_fields(plugins: Plugins) -> dict[str, Any]:
    """The scenario fields the plugins set: top-level ones, and ``ft``'s and ``trainer``'s keys (nested)."""
    fields: dict[str, Any] = {"ft": {}, "trainer": {}}
    if (ft := plugins.fault_tolerance) is not None:
        fields.update(launcher="ft_launcher", max_restarts=ft.num_in_job_restarts, job_retries=ft.num_job_retries_on_failure)
        fields["ft"].update(
            initial_rank_heartbeat_timeout=ft.initial_rank_heartbeat_timeout, rank_heartbeat_timeout=ft.rank_heartbeat_timeout,
        )
        fields["trainer"].update({"ft.enable_ft_package": ft.enable_ft_package, "ft.calc_ft_timeouts": ft.calc_ft_timeouts})
    if (pre := plugins.preemption) is not None and pre.enable_exit_handler:
        fields["trainer"].update({
            "train.exit_signal_handler": True,
            "train.exit_signal_handler_for_dataloader": pre.enable_exit_handler_for_data_loader,
        })
    return fields


def apply_plugins(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a scenario as written) with the fields its ``plugins:`` set; raises ValueError on a conflict."""
    try:
        plugins = Plugins.model_validate(data.get("plugins") or {})
    except ValidationError:
        return data  # the plugins field's own validation names what is wrong, with its path
    out = dict(data)
    for key, value in plugin_fields(plugins).items():
        if isinstance(value, dict):
            given = out.get(key) or {}
            if not isinstance(given, dict):
                continue  # the field's own validation names it
            _no_conflict(key, given, value)
            out[key] = {**given, **value}
        else:
            _no_conflict("", {key: out[key]} if key in out else {}, {key: value})
            out[key] = value
    return out


def _no_conflict(section: str, given: dict[str, Any], wanted: dict[str, Any]) -> None:
    for key, value in wanted.items():
        if key in given and given[key] != value:
            where = f"{section}.{key}" if section else key
            raise ValueError(f"{where}: {given[key]!r} conflicts with plugins ({value!r}); leave it to the plugin")


def preemption_fault(plugins: Plugins, deadline_s: float, fault_id: str) -> Sigterm | None:
    """The preemption signal of a PreemptionPlugin: SIGTERM to every rank's process group `preempt_time` before
    the deadline (Slurm's --signal=TERM@preempt_time), SIGKILL to what is left at it."""
    pre = plugins.preemption
    if pre is None:
        return None
    return Sigterm(
        fault_id=fault_id, rank=None, attempt=0, at_step=None, delay_s=deadline_s - pre.preempt_time,
        ranks=None, target="all", process_group=True, grace_s=pre.preempt_time,
    )

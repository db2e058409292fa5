"""The resiliency card's pitfalls (Megatron Bridge's resiliency guide), named once: what a ``pitfall`` event's
``name`` may be, and what the card warns about each. The trainer writes the event when it sees a run fall
into one (or refuses the config that would); the judge names them in its ``pitfalls`` verdict.
"""

from __future__ import annotations

FT_WITHOUT_FT_LAUNCHER = "ft_without_ft_launcher"
ASYNC_SAVE_WITHOUT_TORCH_DIST = "async_save_without_torch_dist"
NCCL_TIMEOUT_NOT_ABOVE_HARD_TIMEOUT = "nccl_timeout_not_above_hard_timeout"
STRAGGLER_NOT_STOPPED = "straggler_not_stopped"
TWO_STRAGGLER_DETECTORS = "two_straggler_detectors"
RERUN_SAME_NODE_LOOP = "rerun_same_node_loop"

CARD: dict[str, str] = {
    FT_WITHOUT_FT_LAUNCHER: (
        "FT client active but no rank monitor: ft.enable_ft_package is set, but the job was not launched by "
        "ft_launcher, so no heartbeat is watched and a hang goes undetected until the job's time limit "
        "(launch with ft_launcher)"
    ),
    ASYNC_SAVE_WITHOUT_TORCH_DIST: (
        "async save needs ckpt_format torch_dist: with another format Megatron fails at the first checkpoint "
        "(and, without its persistent checkpoint worker, quietly saves synchronously); use torch_dist"
    ),
    NCCL_TIMEOUT_NOT_ABOVE_HARD_TIMEOUT: (
        "the NCCL watchdog timeout (dist.distributed_timeout_minutes) must exceed inprocess_restart.hard_timeout: "
        "else PyTorch's watchdog kills the process before the in-process restart can recover it"
    ),
    STRAGGLER_NOT_STOPPED: (
        "a straggler was flagged and training went on: nvrx_straggler.stop_if_detected is false by default "
        "(it logs, it does not stop); set it to save and stop"
    ),
    TWO_STRAGGLER_DETECTORS: (
        "two straggler detectors configured (the legacy straggler section and nvrx_straggler): use "
        "nvrx_straggler, never both"
    ),
    RERUN_SAME_NODE_LOOP: (
        "the rerun state machine's exit 16 under in-job restarts lands on the same node again and again "
        "(Megatron-LM issue #5281): the loop was stopped at rerun_state_machine.max_same_node_reruns; "
        "requeue the job on another node instead"
    ),
}
"""Each pitfall, in the card's words (condensed): what goes wrong and what to do instead."""

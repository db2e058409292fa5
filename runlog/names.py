"""The event names, in one place (docs/events.md describes each event and its fields)."""

from __future__ import annotations

# Written by the ranks (events/rank-<r>.jsonl).
RUN_START = "run_start"
RESUME = "resume"
CHECKPOINT_LOAD = "checkpoint_load"
CHECKPOINT_CORRUPT = "checkpoint_corrupt"
CHECKPOINT_SAVE_BEGIN = "checkpoint_save_begin"
CHECKPOINT_SAVE_END = "checkpoint_save_end"
CHECKPOINT_SAVE_FAILED = "checkpoint_save_failed"
STEP = "step"
FAULT_INJECTED = "fault_injected"
FAULT_MISSED = "fault_missed"
LINK_RESTORED = "link_restored"
SIGNAL_RECEIVED = "signal_received"
FT_TIMEOUTS = "ft_timeouts"
STRAGGLER_REPORT = "straggler_report"
INPROCESS_START = "inprocess_start"
INPROCESS_ABORT = "inprocess_abort"
RERUN = "rerun"
LOCAL_CHECKPOINT_SAVE = "local_checkpoint_save"
PITFALL = "pitfall"
EXIT = "exit"

# Written by the supervisor (rank -1: events/launcher.jsonl, watch-<node>.jsonl; steps it observes: observed.jsonl).
LAUNCH = "launch"
WORKER_FAILED = "worker_failed"
FT_TIMEOUT = "ft_timeout"
NCCL_WATCHDOG = "nccl_watchdog"
RESTART = "restart"
SIGNAL_SENT = "signal_sent"
DEADLINE = "deadline"
LAUNCHER_EXIT = "launcher_exit"
AGENT_START = "agent_start"
AGENT_EXIT = "agent_exit"
LEFTOVER = "leftover"
LEFTOVERS_AT_START = "leftovers_at_start"
LEFTOVER_GONE = "leftover_gone"
OOM_KILL = "oom_kill"
UNEXPLAINED_FAILURE = "unexplained_failure"
FAULT_NEVER_DUE = "fault_never_due"
CULPRIT_CLAIM = "culprit_claim"

# Written for a job submitted to Slurm (chaos/supervise/slurm*.py; docs/events.md, "A Slurm job's runner events").
SUBMIT = "submit"
SLURM_COMMAND = "slurm_command"
SLURM_JOB = "slurm_job"
REQUEUE_FAILED = "requeue_failed"

LAUNCHER_LINES = (WORKER_FAILED, RESTART, FT_TIMEOUT, NCCL_WATCHDOG)
"""Events the supervisor stamps when a launcher's output line shows it acting on a fault."""

"""Signals from outside: sigterm (preemption, SIGKILL after the grace), sigkill, sigstop, duty_cycle.

Acts: from outside, by the runner (chaos/supervise/signals.py), to real pids of the job.
Undone: a duty cycle ends with SIGCONT; stopped or surviving processes are reaped with the run.
Detected by: the trainer's preemption handling (a save, then exit), the launcher (a death), FT's rank monitor
  (a stopped rank).
"""

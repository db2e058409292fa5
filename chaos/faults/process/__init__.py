"""A rank ends or stops: rank_killed (SIGKILL), rank_hung (SIGSTOP), random (one of them, drawn from the
seed), exception (a Python exception in the step).

Acts: inside the rank (the injector), at its step or after its delay.
Undone: nothing is left behind; the process dies, or stays stopped until a detector kills it (the run's
  reaping kills whatever is left).
Detected by: the launcher (a worker's death), FT's rank monitor (a stopped rank's missed heartbeat or section
  timeout), in-process restart's monitor (an exception of the iteration).
"""

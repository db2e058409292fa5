"""A rank hung inside a collective: collective_hang (a real receive that no peer answers).

Acts: inside the rank, right before its gradient all-reduce of `at_step`.
Undone: the process is ended by what detects it (or the run's reaping).
Detected by: FT's heartbeat or section timeout (the rank monitor kills it), in-process restart's hang detector
  (NCCL's communicator abort), or the collective's own timeout.
"""

"""Memory faults: host_oom (a rank's host memory grows until the kernel's OOM killer ends it).

Acts: on the machine and inside the rank. The runner makes a memory cgroup of the run, limited to
  `limit_bytes` (chaos/supervise/cgroup.py); at its step the rank moves itself into it and allocates (and
  touches) memory until the kernel kills it: only the rank's own pages from then on are charged there, so
  nothing else on the machine is touched.
Undone: the cgroup is removed when the run ends (the runner; the watchdog when the runner is killed; the next
  run's sweep when both were), empty by then: its one process was killed.
Detected by: the launcher (a worker dead of SIGKILL); the runner reads the cgroup's own OOM-kill counter and
  writes `oom_kill` (the pid and rank the kernel killed), so the kill is told from any other SIGKILL.
"""

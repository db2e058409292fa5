"""Native faults: a rank crashes or deadlocks inside C code, where no Python handler runs.

segfault (SIGSEGV: a NULL read through ctypes), abort (SIGABRT: libc's abort()), gil_deadlock (the main thread
locks, through ctypes.PyDLL, a pthread mutex it already holds: a C call that keeps the GIL, so every Python
thread of the rank stops with it: heartbeats, signal handlers, in-process restart's monitor thread).

Acts: inside the rank (the injector), in C code, at its step (or after its delay: a crash, from its thread).
Undone: nothing is left behind: the crashed process is gone; the deadlocked one cannot leave its lock and is
  killed by what detects it, or by the run's reaping.
Detected by: the launcher (a worker's death of SIGSEGV or SIGABRT, exitcode -11 or -6); for the deadlock only
  a watcher outside the process: FT's rank monitor (a missed heartbeat or a section timeout, then SIGKILL) or
  in-process restart's monitor process (its hard timeout), which escalates to a process restart.
"""

"""Storage faults: disk_full (the checkpoint disk fills up before a save: the kernel's ENOSPC), storage_stall
(the checkpoint storage stops answering for `stall_s` seconds from the start of a save).

Acts: on the machine and from outside. disk_full: the run's checkpoint folder is a tmpfs of `disk_bytes` in
  the launch's private mount namespace (chaos/supervise/isolation.py); at its step the runner fills it up
  with a filler file, leaving half the newest checkpoint's size free, so the save runs out of space part-way.
  storage_stall: the checkpoint folder is served through a passthrough FUSE file system of the run
  (chaos/supervise/stallfs.py) over a tmpfs; as the save of its step begins the rank stops the server
  (SIGSTOP; a `command`'s is stopped by the runner once its step is seen), so every file system call on the
  folder blocks in the kernel, and the server's keeper resumes it (SIGCONT) `stall_s` seconds later.
Undone: the filler is removed `duration_s` after it was written; the stalled server is resumed by its
  keeper; the mounts, the filler and the servers end with the launch's namespace (the launcher's last
  process): nothing of them can outlive the run (chaos/supervise/storage.py checks none is seen outside).
Detected by: the trainer (its save fails on every rank with the errno; checkpoint.on_save_failure decides
  exit or skip; a resume never loads the failed save), ft_launcher's checkpointing section timeout or its
  heartbeat timeout for a stall longer than it.
"""

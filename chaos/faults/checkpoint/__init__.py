"""Checkpoint faults: fault_during_checkpoint (SIGKILL while a save or load is in flight), checkpoint_corrupt
(the newest checkpoint truncated or garbled), local_checkpoint_lost (a node's local checkpoint folder removed).

Acts: inside the rank, in the trainer's save and load phases.
Undone: the broken checkpoint stays in the run folder (it is the evidence); nothing else changes.
Detected by: the trainer's manifest check on load (it falls back to the previous good checkpoint), the launcher
  (the killed worker).
"""

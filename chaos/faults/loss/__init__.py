"""Loss faults: nan_loss, spiky_loss (the loss corrupted before its backward, transient or persistent).

Acts: inside the rank, in the trainer's on_loss hook.
Undone: nothing to undo; a persistent fault stays with the faulty node's identity.
Detected by: the rerun state machine's NaN or spiky-loss check (a rerun in place, or a relaunch elsewhere).
"""

"""GPU faults: gpu_oom (a real torch.cuda.OutOfMemoryError from the caching allocator, on one rank at a step).

Acts: inside the rank (the injector), right before its step: one allocation larger than the whole device.
Undone: nothing to undo: the allocation was refused, so no memory is held after it.
Detected by: the trainer's step fails with the error (the rank exits 1, its peers follow, the launcher restarts
  the group), or in-process restart's Wrapper catches it and restarts the rank in place.
"""

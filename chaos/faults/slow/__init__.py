"""A straggler: slow_rank (each forward pass stretched on CPU, a competing CUDA stream on GPU).

Acts: inside the rank, from `at_step` on.
Undone: the slowdown is closed with the injector (its stream stopped).
Detected by: NVRx's straggler detector (its report flags the rank).
"""

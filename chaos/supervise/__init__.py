"""The supervisor: runs a scenario from outside the ranks (launcher agents, signals, ports, Slurm, progress)."""

"""Slurm's faults: slurm_kill_step (scancel --signal=KILL of the running step), slurm_requeue (scontrol requeue).

Acts: from outside, by the submitting host (chaos/supervise/slurm.py), through Slurm.
Undone: Slurm ends the job's step; the job ends with the run.
Detected by: the batch script (srun's code, a self-requeue), Slurm's requeue.
"""

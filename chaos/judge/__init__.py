"""Judging a run from its files: timeline and metrics, verdicts, the fault-free baseline, loss correlation, reports."""

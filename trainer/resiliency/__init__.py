"""Resiliency components of the trainer, one module per feature (as NVRx packages them)."""

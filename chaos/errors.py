"""Bad input: what a user gave that cannot be used, one line per problem; ``chaos.cli.main`` prints each
line and exits 2, the one place that turns an error into output.

Each layer raises its own subclass for its own input: ``ScenarioError`` (a scenario file, chaos.schema),
``CorrelateError`` (a loss source, a tolerance: chaos.judge.correlate), ``RunError`` (a run that cannot
start here, chaos.supervise.runner). A damaged run folder is ``runlog.layout.RunFolderError``: the contract
imports nothing of chaos.
"""

from __future__ import annotations


class BadInput(ValueError):
    """One or more problems, each one line that names what is wrong (a file, a field, an argument)."""

    def __init__(self, *problems: str):
        super().__init__("\n".join(problems))
        self.problems = problems


NEVER_RAN_EXIT = 4
"""`chaos judge`'s exit code for a run folder whose job never ran."""


class NeverRan(Exception):
    """A run folder whose job never started (a Slurm job written and never submitted, or still queued): there
    is nothing to judge, and no baseline is trained for it. ``chaos.cli.main`` prints the one line and exits
    NEVER_RAN_EXIT."""

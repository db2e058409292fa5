"""What every section of the trainer's config shares: its error, and the rule of a seed. No torch here."""

from __future__ import annotations

SEED_MAX = 2**32 - 1
"""numpy's seeds are 32-bit."""


class ConfigError(ValueError):
    """Config keys or values are wrong: one line per problem, each naming the key and what was expected.
    ``pitfall``: the resiliency card's pitfall (runlog/pitfalls.py) the refused config falls into, when it is one."""

    def __init__(self, *problems: str, pitfall: str | None = None):
        super().__init__("\n".join(problems))
        self.problems = problems
        self.pitfall = pitfall


def check_seed(key: str, seed: int) -> None:
    if not 0 <= seed <= SEED_MAX:
        raise ConfigError(f"{key}: must be in [0, 2**32 - 1], got {seed}")

"""The settings a base's ``explore.settings`` lets explore draw with each schedule (docs/explore.md).

Each key's values are drawn with the base's own first, so hypothesis shrinks towards the base's settings; a
schedule names only the values drawn away from the base's own. Each drawn combination has its own space
(chaos/explore/space.py): its saves, its async seals, its retention and the kinds it allows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from chaos.explore.space import Schedule, Space, allowed_kinds, fault_registry, space_of
from chaos.schema.scenario import Scenario

Ranges = tuple[tuple[str, tuple[Any, ...]], ...]
"""A base's explore.settings: each key with its values, the base's own value first (what hypothesis shrinks to)."""


def settings_ranges(base: Scenario) -> Ranges:
    """The base's settings ranges, each with the base's own value first when listed."""
    if base.explore is None:
        return ()
    out = []
    for key, values in base.explore.settings.items():
        section, name = key.split(".", 1)
        own = getattr(getattr(base.config, section), name)
        out.append((key, tuple(sorted(values, key=lambda v: v != own))))  # stable: the rest in the order given
    return tuple(out)


def own_settings(base: Scenario, ranges: Ranges, drawn: tuple[Any, ...]) -> tuple[tuple[str, Any], ...]:
    """The drawn values that differ from the base's own (a schedule's ``settings``)."""
    out = []
    for (key, _), value in zip(ranges, drawn, strict=True):
        section, name = key.split(".", 1)
        if value != getattr(getattr(base.config, section), name):
            out.append((key, value))
    return tuple(out)


class Draws:
    """A base's settings ranges, and the base and space of each combination drawn (built once each)."""

    def __init__(self, base: Scenario, space: Space):
        self.base, self.space = base, space
        self.ranges: Ranges = settings_ranges(base) if base.command is None else ()
        self._drawn: dict[tuple[tuple[str, Any], ...], tuple[Scenario, Space]] = {(): (base, space)}

    def drawn(self, settings: tuple[tuple[str, Any], ...]) -> tuple[Scenario, Space]:
        """The base with drawn settings, and its space (its steps, saves and retention; the kinds it allows)."""
        if settings not in self._drawn:
            base = self.base.replace(trainer={**self.base.trainer, **dict(settings)})
            allowed = allowed_kinds(base, fault_registry()).kinds
            self._drawn[settings] = base, space_of(base, tuple(k for k in self.space.kinds if k in allowed))
        return self._drawn[settings]

    def strategy(self) -> st.SearchStrategy[Schedule]:
        """Schedules, each with settings drawn from the base's ranges first (shrunk towards the base's own)."""
        if not self.ranges:
            return self.space.strategy()

        def schedules(values: tuple[Any, ...]) -> st.SearchStrategy[Schedule]:
            settings = own_settings(self.base, self.ranges, values)
            space = self.drawn(settings)[1]
            if not space.kinds:
                return st.nothing()
            return space.strategy().map(lambda s: replace(s, settings=settings))

        return st.tuples(*(st.sampled_from(values) for _, values in self.ranges)).flatmap(schedules)

    def canonicals(self) -> list[Schedule]:
        """The canonical schedule on the base, then on the base with each drawn value of each setting in turn
        (one setting away from the base's own): what a person tries first when a setting is new to them."""
        out = [self.space.canonical()]
        for key, values in self.ranges:
            for value in values:
                settings = own_settings(self.base, ((key, values),), (value,))
                space = self.drawn(settings)[1] if settings else None
                if space is not None and space.kinds:
                    out.append(replace(space.canonical(), settings=settings))
        return out

"""Components installed from outside the trainer, found by name through Python entry points.

A package offers a component under the entry-point group ``trainer.components`` (in its pyproject.toml:
``[project.entry-points."trainer.components"] chaos = "chaos.hooks.injector:FaultInjector"``); a config
names it (``fault_injection.component: chaos``) and the session builds it as ``factory(plan, events)``. So
the trainer arms what its config names without importing any harness itself.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from runlog.log import EventLog
    from trainer.components import Component

GROUP = "trainer.components"


class ComponentFactory(Protocol):
    def __call__(self, plan: str, events: EventLog) -> Component:
        """The component that fires the faults of ``plan`` in this process, logging to ``events``."""


def installed_components() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=GROUP))


def load_component(name: str) -> ComponentFactory:
    (found,) = entry_points(group=GROUP, name=name)
    return found.load()

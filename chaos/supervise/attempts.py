"""The run's attempt as the supervisor knows it: the one place that combines what moves it.

Three things do: a launcher agent's restart line (its workers start a new round: the round the agent joined
plus its own restarts), a relaunch of the job (the next launch numbers its rounds on from the last one's),
and the ranks' own step events (an in-process restart is an attempt no launcher line announces). Launcher
output is read by one thread per agent, so every change holds a lock.

The lines an agent's output carries are its workers' as well as its own, and they move to the next round
later than the restart line: only at the agent's rendezvous line, once the last round's workers are stopped
(``printing``); a command's step lines and an adapter's records are credited by that.
"""

from __future__ import annotations

import threading


class AttemptTracker:
    def __init__(self, first: int = 0) -> None:
        self._lock = threading.Lock()
        self._announced = first
        """The largest round a launcher's restart line announced (or a relaunch began); from `first`, the round
        the first launch starts in (0; a requeued Slurm job's numbers on from its earlier launches')."""
        self._agents: dict[str, int] = {}
        """Each agent's round: the one it joined, plus its restarts."""
        self._ranks = 0
        """The largest attempt a rank's step carried."""
        self._printing: dict[str, int] = {}
        """The round whose workers write each agent's output: its round as of its last rendezvous line."""

    def launcher(self) -> int:
        """The rounds the launchers announced so far: the attempt the supervisor's own events carry."""
        with self._lock:
            return self._announced

    def running(self) -> int:
        """The attempt the ranks are in: the launchers' round, or a later one their steps carry."""
        with self._lock:
            return max(self._announced, self._ranks)

    def joined(self, agent: str, round_: int) -> None:
        """An agent starts in `round_` (a replacement node or a spare joins the rendezvous late)."""
        with self._lock:
            self._agents[agent] = self._printing[agent] = round_

    def restarted(self, agent: str) -> int:
        """The agent's restart line: its workers start its next round. Two agents restarting into the same
        round (both nodes of a hung one print the line) are one attempt, not two."""
        with self._lock:
            self._agents[agent] += 1
            self._announced = max(self._announced, self._agents[agent])
            return self._announced

    def next_round(self, agent: str) -> int:
        """The agent's rendezvous line (``NEXT_ROUND``): its last round's workers are gone, so its output is now
        its current round's. Returns that round."""
        with self._lock:
            self._printing[agent] = self._agents[agent]
            return self._printing[agent]

    def printing(self, agent: str) -> int:
        """The round of the workers whose lines `agent`'s output carries now: after a restart line, the round
        before until the agent's rendezvous line (a surviving worker prints on while it is being stopped)."""
        with self._lock:
            return self._printing[agent]

    def ranks_in(self, attempt: int) -> None:
        """A rank logged a step of `attempt`."""
        with self._lock:
            self._ranks = max(self._ranks, attempt)

    def relaunched(self) -> int:
        """The job is launched again: the round its agents start in (one past the last launch's)."""
        with self._lock:
            self._announced += 1
            self._agents.clear()
            self._printing.clear()
            return self._announced

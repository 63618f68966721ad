"""What the elastic allocator (`chalicelib.domain.elastic_allocation`) reads and answers: a running elastic
trial's run as it sees it (its size, rules, placement and speedup table), a request the pass could not
place, and a rescale it decides. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ElasticRun:
    """A running elastic trial's run, as the allocator sees it."""

    run_id: str
    replicas: int
    min_replicas: int
    max_replicas: int
    slots_per_replica: int
    priority: int
    #: agent id -> slots the run holds there.
    placements: Mapping[str, int]
    #: Seconds since the run started (its processes), or since it was granted its slots.
    age_s: float
    min_interval_s: float = 300.0
    threshold: float = 1.05
    #: replicas -> speedup over one replica (the trial's hints); empty: linear.
    speedup: Mapping[int, float] = field(default_factory=dict)
    #: Told to stop already (paused, preempted, being rescaled).
    stopping: bool = False
    #: What a restart costs it, in seconds without progress (its last one, or its first start, measured).
    restart_s: float = 0.0

    def speed(self, replicas: int) -> float:
        """The speedup at ``replicas``: the table's, linearly between its points, flat beyond its last
        (no gain is assumed where nothing was estimated); ``replicas`` when there is no table."""
        if replicas <= 0:
            return 0.0
        table = self.speedup
        if not table:
            return float(replicas)
        if replicas in table:
            return table[replicas]
        points = sorted(table.items())
        if replicas > points[-1][0]:
            return points[-1][1]
        lower = max(((r, s) for r, s in points if r < replicas), default=(0, 0.0))
        upper = min((r, s) for r, s in points if r > replicas)
        return lower[1] + (upper[1] - lower[1]) * (replicas - lower[0]) / (upper[0] - lower[0])

    @property
    def movable(self) -> bool:
        return not self.stopping and self.age_s >= self.min_interval_s

    def worth_growing(self, target: int) -> bool:
        """Whether restarting at ``target`` replicas pays: over the time the new size is expected to run
        (as long as the run has run since its last start, at least ``min_interval_s``), its progress less
        the restart's (``restart_s`` without any) beats staying by ``threshold``."""
        horizon = max(self.min_interval_s, self.age_s)
        now = self.speed(self.replicas)
        if horizon <= 0:
            return self.speed(target) >= self.threshold * now
        return self.speed(target) * max(horizon - self.restart_s, 0.0) >= self.threshold * now * horizon


@dataclass(frozen=True)
class Waiting:
    """A request the pass did not place."""

    run_id: str
    slots: int
    priority: int


@dataclass(frozen=True)
class Rescale:
    """Restart ``run_id`` at ``target`` replicas (it has ``replicas``), for ``reason``."""

    run_id: str
    replicas: int
    target: int
    reason: str
    #: The waiting request a shrink makes room for.
    for_run: str | None = None
    #: Where the run's slots are planned once it restarts (agent id -> slots): what is promised to it.
    placements: Mapping[str, int] = field(default_factory=dict)

"""How many machines a pool that scales needs, and which idle ones may go: pure functions the EC2
backend (`chalicelib.compute.ec2`) applies to an Auto Scaling group.

Scaling out: the requests the scheduling pass could not place (`blocked`, in slots) are packed onto new,
empty instances first-fit decreasing, as the scheduler would place them once the instances join: a request
up to one instance's slots shares an instance with others, a bigger one takes whole instances
(`size / slots_per_agent` of them, as `scheduling.multi_node_placement` places it). The group's target is
the instances alive now plus those; it only ever grows here: instances leave one by one, chosen idle
(`scale_in`), never by lowering the desired count (which lets AWS pick a busy instance).

Scaling in: an instance goes once it has held nothing for the pool's idle period, while no request waits
(a waiting request may be placed on it at the next pass) and never below the pool's minimum; the longest
idle go first. An instance whose agent never joined within the starting period, or stopped heartbeating,
is replaced the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def instances_needed(slots_per_agent: int, blocked: Sequence[int]) -> int:
    """New instances of `slots_per_agent` slots that would hold every blocked request of `blocked` slots."""
    if slots_per_agent < 1:
        raise ValueError(f"slots_per_agent {slots_per_agent} must be >= 1")
    whole = 0
    free: list[int] = []  # slots left on each shared new instance
    for size in sorted(blocked, reverse=True):
        if size <= 0:
            continue
        if size > slots_per_agent:
            whole += math.ceil(size / slots_per_agent)
            continue
        for i, left in enumerate(free):
            if left >= size:
                free[i] = left - size
                break
        else:
            free.append(slots_per_agent - size)
    return whole + len(free)


def scale_out_target(
    *, alive: int, blocked: Sequence[int], slots_per_agent: int, min_instances: int, max_instances: int
) -> int:
    """The group's desired size for the blocked requests, within the pool's bounds."""
    wanted = alive + instances_needed(slots_per_agent, blocked)
    return max(min_instances, min(max_instances, wanted))


@dataclass(frozen=True)
class Instance:
    """An instance of the group as the control plane sees it: its agent's record, where it has one."""

    instance_id: str
    launched_at: float  # epoch s
    #: The agent's first and last heartbeat, and when it last held a run (None: never).
    first_seen: float | None = None
    last_seen: float | None = None
    busy_at: float | None = None
    #: A run is placed on it now (the control plane's records).
    holds_runs: bool = False
    draining: bool = False


@dataclass(frozen=True)
class Periods:
    idle_s: float
    starting_s: float
    agent_timeout_s: float


def to_terminate(
    instances: Sequence[Instance], *, now: float, periods: Periods, min_instances: int, queue_waiting: bool
) -> list[tuple[str, str]]:
    """The instances to terminate now, each with the reason: those whose agent never joined or went
    silent, then the idle ones (not while requests wait, never below `min_instances`), longest idle first."""
    out: list[tuple[str, str]] = []
    healthy: list[Instance] = []
    for instance in instances:
        if instance.first_seen is None:
            if now - instance.launched_at > periods.starting_s:
                out.append(
                    (instance.instance_id, f"its agent did not join within {periods.starting_s:.0f} s")
                )
                continue
        elif instance.last_seen is not None and now - instance.last_seen > periods.agent_timeout_s:
            out.append(
                (instance.instance_id, f"its agent has been silent for {now - instance.last_seen:.0f} s")
            )
            continue
        healthy.append(instance)
    if queue_waiting:
        return out
    idle: list[tuple[float, Instance]] = []
    for instance in healthy:
        if instance.holds_runs or instance.draining or instance.first_seen is None:
            continue
        since = max(instance.busy_at or 0.0, instance.first_seen)
        if now - since > periods.idle_s:
            idle.append((since, instance))
    room = len(healthy) - min_instances
    for since, instance in sorted(idle, key=lambda pair: pair[0])[: max(room, 0)]:
        out.append((instance.instance_id, f"idle for {now - since:.0f} s"))
    return out

"""`det job update JOB --ahead-of J | --behind-of J`: a job's new queue position, as a pure function.

Jobs of equal priority are ordered by their queue position (a float: the submission time in epoch
seconds unless moved). Moving a job ahead of (behind) a target puts it at the midpoint between the
target and the job just before (after) it, so only the moved job changes; a job already there stays
put. As in Determined (its job queue's `FindAnchor`), moving ahead of or behind a job of another
priority takes that job's priority (the queue is ordered by priority first, so that is the only way to
stand next to it). When two neighbouring positions are so close that
no float lies between them, the jobs of that priority are respaced one second apart, in order, and the
move reports their new positions too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from chalicelib.errors import BadRequestError


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    priority: int
    position: float


@dataclass(frozen=True)
class QueueMove:
    """The moved job's new priority and position; ``respaced``: other jobs' new positions (rare)."""

    job_id: str
    priority: int
    position: float
    respaced: dict[str, float] = field(default_factory=dict)


def _order(jobs: Sequence[QueuedJob]) -> list[QueuedJob]:
    return sorted(jobs, key=lambda j: (j.priority, j.position, j.job_id))


def position_between(before: float | None, after: float | None) -> float | None:
    """A position strictly between ``before`` and ``after`` (either may be open), or None if no float
    lies between them."""
    if before is None and after is None:
        return 0.0
    if before is None:
        assert after is not None
        return after - 1.0
    if after is None:
        return before + 1.0
    middle = before + (after - before) / 2
    return middle if before < middle < after else None


def move_ahead_of(jobs: Sequence[QueuedJob], job_id: str, target_id: str) -> QueueMove:
    return _move(jobs, job_id, target_id, ahead=True)


def move_behind_of(jobs: Sequence[QueuedJob], job_id: str, target_id: str) -> QueueMove:
    return _move(jobs, job_id, target_id, ahead=False)


def _move(jobs: Sequence[QueuedJob], job_id: str, target_id: str, *, ahead: bool) -> QueueMove:
    if job_id == target_id:
        raise BadRequestError(f"job {job_id} cannot be moved relative to itself; name another job")
    known = {j.job_id for j in jobs}
    for name in (job_id, target_id):
        if name not in known:
            raise BadRequestError(f"job {name} is not in this pool's queue; see `det job list`")
    target = next(j for j in jobs if j.job_id == target_id)
    moved = next(j for j in jobs if j.job_id == job_id)
    ordered_all = [j.job_id for j in _order(jobs)]
    neighbour = ordered_all.index(target_id) + (-1 if ahead else 1)
    if (
        moved.priority == target.priority
        and 0 <= neighbour < len(ordered_all)
        and ordered_all[neighbour] == job_id
    ):
        return QueueMove(job_id, moved.priority, moved.position)  # already there: nothing changes
    # The target's priority level without the moved job, in queue order.
    level = [j for j in _order(jobs) if j.priority == target.priority and j.job_id != job_id]
    at = next(i for i, j in enumerate(level) if j.job_id == target_id)
    before, after = (
        (level[at - 1] if at > 0 else None, target)
        if ahead
        else (target, level[at + 1] if at + 1 < len(level) else None)
    )
    position = position_between(before.position if before else None, after.position if after else None)
    if position is not None:
        return QueueMove(job_id, target.priority, position)
    # No float between the neighbours: respace the level one second apart, the moved job included.
    slot = at if ahead else at + 1
    ordered = [j.job_id for j in level]
    ordered.insert(slot, job_id)
    start = level[0].position
    positions = {name: start + i for i, name in enumerate(ordered)}
    position = positions.pop(job_id)
    return QueueMove(job_id, target.priority, position, respaced=positions)

"""The job queue of a resource pool, as Determined's `det job list` shows it, from runs and experiments.

A job is one experiment's demand in a pool (Determined: one job per experiment), identified by the
experiment's id. Its slots acquired are those its assigned, launching and running runs hold; its slots
needed are those of its pending and held runs together. A job with slots acquired is SCHEDULED, one
that only waits is QUEUED. Jobs are listed in the scheduler's order (`scheduling.queue_key` at the job's
level): priority (the runs': the config's `resources.priority` unless `det job update` changed it; lower
first, default 42), then the job's queue position (the submission time in epoch seconds unless
`det job update --ahead-of/--behind-of` moved it), then its id compared as a string, as the scheduler
compares job ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from chalicelib.domain.records import Experiment
from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import submission_position
from chalicelib.domain.states import RunState

EXPERIMENT_JOB = "EXPERIMENT"

JobStatus = Literal["QUEUED", "SCHEDULED"]


@dataclass(frozen=True)
class Job:
    position: int  # 1-based, in scheduling order
    job_id: str
    type: str
    name: str
    priority: int
    submitted: str
    slots_acquired: int
    slots_needed: int
    user: str
    pool: str

    @property
    def status(self) -> JobStatus:
        return "SCHEDULED" if self.slots_acquired else "QUEUED"


def job_queue(runs: Iterable[Run], experiments: Mapping[int, Experiment]) -> list[Job]:
    """The jobs of the given pool's live runs (exited runs are ignored), in scheduling order."""
    acquired: dict[int, int] = {}
    needed: dict[int, int] = {}
    pools: dict[int, str] = {}
    priorities: dict[int, int] = {}
    first_queued: dict[int, str] = {}
    positions: dict[int, float] = {}
    for run in runs:
        if run.state is RunState.EXITED:
            continue
        key = run.experiment_id
        needed[key] = needed.get(key, 0) + run.slots
        if run.state is not RunState.PENDING:
            acquired[key] = acquired.get(key, 0) + run.slots
        pools.setdefault(key, run.pool)
        priorities[key] = min(priorities.get(key, run.priority), run.priority)
        first_queued[key] = min(first_queued.get(key, run.queued_at), run.queued_at)
        if run.queue_position is not None:
            positions[key] = min(positions.get(key, run.queue_position), run.queue_position)

    def submitted(key: int) -> str:
        experiment = experiments.get(key)
        return (experiment.start_time if experiment else None) or first_queued[key]

    def priority(key: int) -> int:
        return priorities[key]  # the scheduler's: the runs carry the config's resources.priority

    def queue_position(key: int) -> float:
        experiment = experiments.get(key)
        value = experiment.queue_position if experiment is not None else None
        value = value if value is not None else positions.get(key)
        # A record older than positions sits at its submission time, as a new one does.
        return value if value is not None else submission_position(submitted(key))

    order = sorted(needed, key=lambda key: (priority(key), queue_position(key), str(key)))
    jobs = []
    for position, key in enumerate(order, start=1):
        experiment = experiments.get(key)
        jobs.append(
            Job(
                position=position,
                job_id=str(key),
                type=EXPERIMENT_JOB,
                name=(experiment.name if experiment else "") or f"Experiment {key}",
                priority=priority(key),
                submitted=submitted(key),
                slots_acquired=acquired.get(key, 0),
                slots_needed=needed[key],
                user=experiment.owner if experiment else "",
                pool=pools[key],
            )
        )
    return jobs

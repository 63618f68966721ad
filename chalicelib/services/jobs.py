"""The job queue of a resource pool (`det job list`): its live runs grouped by experiment."""

from __future__ import annotations

from chalicelib.domain.jobs import Job, job_queue
from chalicelib.domain.records import Experiment
from chalicelib.services.ports import Ports


def list_jobs(ports: Ports, pool: str) -> list[Job]:
    live = ports.runs.allocated(pool) + ports.runs.pending(pool)
    experiments: dict[int, Experiment] = {}
    for experiment_id in {run.experiment_id for run in live}:
        experiment = ports.experiments.get(experiment_id)
        if experiment is not None:
            experiments[experiment_id] = experiment
    return job_queue(live, experiments)

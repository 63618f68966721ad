"""A record looked up by its id for a use case that needs it to exist: the record, or the 404 whose
message says where the ids are.

Kept apart from the use cases on those records (`experiments`: create, list, archive) so that any
service may look one up without importing them, and through them the searcher, stopping and runs:
`telemetry` (imported by `runs`) looking up an experiment through `experiments` closed an import cycle.
"""

from __future__ import annotations

from chalicelib.domain.records import Experiment
from chalicelib.errors import NotFoundError
from chalicelib.services.ports import Ports


def get_experiment(ports: Ports, experiment_id: int) -> Experiment:
    """The experiment, or NotFoundError naming it."""
    experiment = ports.experiments.get(experiment_id)
    if experiment is None:
        raise NotFoundError(f"experiment {experiment_id} not found; `det experiment list` shows the ids")
    return experiment

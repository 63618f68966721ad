"""Elastic trials (docs/architecture.md, "Elastic trials (AdaptDL)"): the AdaptDL hints a trial's launcher forwards
(`PUT /trials/{id}/adaptdl/hints`), and what the control plane adds to an elastic trial's run environment.

**Hints.** `stratus.contract.adaptdl.validate_hints` is the one check of the body; its error is a 400 naming the
field. They are stored whole on the trial (`Trial.elastic_hints`) with the time they were first stored as
they are (`Trial.hints_at`): a repeated PUT of the same hints (AdaptDL's rank 0 re-sends them every 30 s
when nothing changed, and the proxy retries) stores nothing, so the time says how old the *information*
is. Hints are kept for any trial that sends them; only an experiment with an `elastic` section uses them.

**A run's environment** (`run_environment`), for an experiment whose config has an `elastic` section:

- `STRATUS_ADAPTDL_RESTARTS`: this trial's earlier runs (the run id's attempt - 1). Every new run is a
  restart for AdaptDL, whether it follows a rescale, a preemption, a pause or a failure; the launcher takes
  max(it, the highest restored ``checkpoint-N`` + 1), so the counter only grows.
- `STRATUS_ADAPTDL_MAX_REPLICAS`: `elastic.replica_limit(the pool's max slots)`, how far the launcher's
  speedup table goes.
- `STRATUS_KILL_GRACE_S`: at least `stratus.contract.adaptdl.MIN_KILL_GRACE_S` (AdaptDL saves at its next batch
  after SIGTERM); the launcher waits that long for its replicas, and the agent for the run's processes.

- `STRATUS_ADAPTDL_SLOTS_PER_REPLICA`: `elastic.slots_per_replica`; `stratus.launchers.adaptdl` starts a node's
  slots / it replicas, so a run resized by the allocator (`chalicelib.services.elastic_scheduling`) needs
  no other change to its entrypoint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from chalicelib import config as cfg
from chalicelib.domain import keys
from chalicelib.domain.records import Trial
from chalicelib.domain.run_records import Run
from chalicelib.errors import BadRequestError, NotFoundError
from chalicelib.services.ports import Ports
from chalicelib.settings import Settings
from stratus.contract import adaptdl
from stratus.contract.env import KILL_GRACE_S
from stratus.contract.errors import InvalidHintsError


def record_hints(ports: Ports, run: Run, body: Mapping[str, Any]) -> Trial:
    """Store the hints the trial of `run` sent (validated); the trial as stored after."""
    try:
        hints = adaptdl.validate_hints(body)
    except InvalidHintsError as e:
        raise BadRequestError(
            f"{e} AdaptDL's rank 0 sends them through stratus.launchers.adaptdl's proxy."
        ) from e
    trial = ports.trials.get(run.trial_id)
    if trial is None:
        raise NotFoundError(f"trial {run.trial_id} not found")
    if trial.elastic_hints == hints and trial.hints_at is not None:
        return trial  # the same hints again: nothing to store
    ports.trials.record_hints(trial.id, hints, ports.clock.now_iso())
    stored = ports.trials.get(trial.id)
    if stored is None:
        raise NotFoundError(f"trial {run.trial_id} not found")
    return stored


def run_environment(
    settings: Settings, run: Run, config: cfg.ExperimentConfig, environment: Mapping[str, str]
) -> dict[str, str]:
    """What an elastic trial's run adds to its `environment` (the config's and the trial's variables);
    nothing for any other trial."""
    elastic = config.elastic
    if elastic is None:
        return {}
    pool = settings.pool(run.pool)
    _, attempt = keys.parse_run_id(run.run_id)
    grace = max(_seconds(environment.get(KILL_GRACE_S)), adaptdl.MIN_KILL_GRACE_S)
    return {
        adaptdl.RESTARTS_ENV: str(max(attempt - 1, 0)),
        adaptdl.MAX_REPLICAS_ENV: str(elastic.replica_limit(pool.max_slots if pool else None)),
        adaptdl.SLOTS_PER_REPLICA_ENV: str(elastic.slots_per_replica),
        KILL_GRACE_S: f"{grace:g}",
    }


def _seconds(raw: str | None) -> float:
    """A kill grace the experiment set itself (0 when unset or no number: the floor applies)."""
    try:
        value = float(raw or 0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0

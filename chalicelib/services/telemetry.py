"""Metrics and dashboards in CloudWatch, as use cases (what is charted, and why so little, is
`chalicelib.domain.telemetry`; how it is written, and why embedded metric format, `chalicelib.aws.metrics`).

- `trial_reports`: a trial's training and validation reports, as the API stores them;
- `pool_pass`: what a scheduling pass saw of its pool, once per pass (nothing read for it), unless the
  pool is at zero;
- `run_failed`: a run's non-zero exit, as a restart or an error of its pool;
- `experiment_dashboard`: `det experiment dashboard ID` (`POST /experiments/{id}/dashboard`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.domain import dashboards
from chalicelib.domain.records import Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.telemetry import (
    CHARTED_GROUPS,
    PoolPass,
    pool_datums,
    run_failure_datum,
    trial_datums,
)
from chalicelib.services import lookups
from chalicelib.services.ports import Ports


def trial_reports(ports: Ports, run: Run, reports: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """Chart a trial's reports, (group, metrics) in the order made (one read of the experiment, for
    its searcher's metric, when any report is of a charted group)."""
    if not any(group in CHARTED_GROUPS for group, _ in reports):
        return
    experiment = ports.experiments.get(run.experiment_id)
    searcher = (experiment.config.get("searcher") or {}) if experiment is not None else {}
    metric = searcher.get("metric") if isinstance(searcher, dict) else None
    data = trial_datums(run.experiment_id, run.trial_id, reports, metric if isinstance(metric, str) else None)
    if data:
        ports.telemetry.put(data, ports.clock.now())


def pool_pass(ports: Ports, seen: PoolPass) -> None:
    """Chart what a pass saw of its pool, unless the pool is at zero (`PoolPass.idle`)."""
    if not seen.idle:
        ports.telemetry.put(pool_datums(seen), ports.clock.now())


def run_failed(
    ports: Ports, run: Run, trial: Trial | None, exit_code: int, output: Mapping[str, Any]
) -> None:
    """Count a run's exit against its pool when it is a failure (non-zero, not paused, requeued or
    canceled): a restart while the trial has restarts left (the workflow's rule), else an error."""
    if exit_code == 0 or trial is None or any(output.get(k) for k in ("paused", "requeue", "canceled")):
        return
    experiment = ports.experiments.get(run.experiment_id)
    max_restarts = experiment.parsed_config.max_restarts if experiment is not None else 0
    datum = run_failure_datum(run.pool, restarted=trial.restarts < max_restarts)
    ports.telemetry.put([datum], ports.clock.now())


@dataclass(frozen=True)
class Dashboard:
    name: str
    url: str
    trials: int


def experiment_dashboard(ports: Ports, experiment_id: int) -> Dashboard:
    """Create or update the experiment's dashboard (NotFoundError when there is no such experiment)."""
    experiment = lookups.get_experiment(ports, experiment_id)
    settings = ports.settings
    searcher = experiment.parsed_config.searcher
    trial_ids = [t.id for t in ports.trials.for_experiment(experiment.id)]
    body = dashboards.experiment_dashboard(
        stack=settings.stack,
        region=settings.region,
        experiment_id=experiment.id,
        pool=experiment.job_pool,
        trial_ids=trial_ids,
        searcher_metric=searcher.metric,
        smaller_is_better=searcher.smaller_is_better,
    )
    name = dashboards.dashboard_name(settings.stack, experiment.id)
    ports.telemetry.put_dashboard(name, body)
    return Dashboard(name=name, url=dashboards.console_url(settings.region, name), trials=len(trial_ids))

"""An experiment's progress, as `det experiment list`, `describe` and `create -f` show it: the units its
trials trained over its searcher's total, where the searcher has one (single, grid, random, TPE, an NNI
tuner with `maxTrialNumber`), else the searcher's own measure (adaptive ASHA's and Hyperband's rung
results, PBT's rounds), and blank where no end is known (a search until stopped).

The searcher learns how far a trial got only from its validations; between them, the trial's training
reports (and Core API's `report_progress`) say more. So besides the searcher's events
(`searching.drive`), every report that moves a trial's own share past a whole percent raises its
experiment's progress (`after_report`): at most a hundred extra writes a trial, each a conditional
raise, so two reports that race keep the further value.
"""

from __future__ import annotations

from chalicelib.domain import searchers
from chalicelib.domain.records import Trial
from chalicelib.domain.searcher_outbox import SearcherRecord
from chalicelib.domain.states import TrialState
from chalicelib.services.ports import Ports
from chalicelib.services.search_specs import search_spec


def trial_share(trial: Trial, counts_batches: bool) -> float | None:
    """The share of its current target the trial trained, 0 to 1: what it reported (Core API's
    `report_progress`), else its batches over its target where the searcher counts batches; None
    when neither is known."""
    if trial.state == TrialState.COMPLETED:
        return 1.0
    if trial.progress is not None:
        return min(max(trial.progress, 0.0), 1.0)
    if counts_batches and trial.target_length:
        return min(trial.total_batches / trial.target_length, 1.0)
    return None


def after_report(ports: Ports, before: Trial, after: Trial) -> None:
    """A report moved the trial from `before` to `after`: raise its experiment's progress when the
    trial's own share passed a whole percent."""
    share = trial_share(after, counts_batches=True)
    if share is None:
        return
    earlier = trial_share(before, counts_batches=True) or 0.0
    if int(share * 100) <= int(earlier * 100):
        return
    experiment = ports.experiments.get(after.experiment_id)
    if experiment is None or experiment.searcher is None or experiment.state.terminal:
        return
    config = experiment.parsed_config
    length = config.searcher_length()
    if length is not None and length.unit != "batches" and after.progress is None:
        return  # its batches are not the searcher's unit: its validations tell the searcher
    record = SearcherRecord.load(experiment.searcher)
    searcher = searchers.restore_searcher(record.snapshot, search_spec(config))
    progress = searcher.progress({after.id: share})
    if progress is not None and (experiment.progress is None or progress > experiment.progress):
        ports.experiments.raise_progress(experiment.id, round(progress, 4))

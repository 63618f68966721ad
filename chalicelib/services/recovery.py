"""Recovery after the control plane lost what it keeps only in flight: the embedded stack restarted
(`det deploy local down`/`up`, or a kill -9 of the stack). Its records survived (`infra/local/persistence.py`),
but its queues' messages and its Step Functions executions did not, and its agents' processes were ended.

`recover` makes the records true again and restarts what should run, once, at the stack's start:
- every run that was in flight (queued, assigned, launching, running) is ended as lost, with the reason;
- a trial of an ACTIVE experiment that should be training resumes from its latest checkpoint in a new
  execution (a resume, like a preemption's: not a restart counted against `max_restarts`);
- a trial of a PAUSED experiment is PAUSED (`det experiment activate` resumes it);
- a trial the searcher had paused (PBT between rounds) is PAUSED and its searcher told again;
- a trial that was stopping ends as its stop meant (canceled, killed, completed, errored), and so does
  a trial of an experiment that was stopping;
- a trial that ended while its exit was still on its way to the searcher (the message was lost) is
  announced again; the searcher ignores an event it has seen, so a repeat changes nothing;
- an experiment being deleted goes on being deleted.
Nothing runs twice at once: the stack calls this before its agents start, and every lost run is EXITED,
so no agent can be told to run it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from chalicelib.domain import keys
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.states import ExperimentState, TrialState
from chalicelib.services import costs, searching
from chalicelib.services.ports import Ports
from stratus.contract import messages

log = logging.getLogger(__name__)

#: The exit code recorded for a run lost with its stack (no process exit code exists).
LOST_EXIT_CODE = -1
PAGE = 100

E = ExperimentState
T = TrialState

#: How a trial that was stopping ends when its process is gone.
_STOP_ENDS = {
    T.STOPPING_CANCELED: T.CANCELED,
    T.STOPPING_KILLED: T.CANCELED,
    T.STOPPING_COMPLETED: T.COMPLETED,
    T.STOPPING_ERROR: T.ERROR,
}
_EXPERIMENT_STOPPING = (E.STOPPING_CANCELED, E.STOPPING_KILLED, E.STOPPING_COMPLETED, E.STOPPING_ERROR)


@dataclass
class Recovery:
    """What `recover` did, by trial (the stack logs it)."""

    runs_ended: list[str] = field(default_factory=list)
    resumed: list[int] = field(default_factory=list)
    paused: list[int] = field(default_factory=list)
    ended: list[int] = field(default_factory=list)
    exits_announced: list[int] = field(default_factory=list)
    deletions: list[int] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{len(self.runs_ended)} runs lost, {len(self.resumed)} trials resumed from their latest "
            f"checkpoint, {len(self.paused)} paused, {len(self.ended)} ended, "
            f"{len(self.exits_announced)} exits announced again, {len(self.deletions)} deletions resumed"
        )


def recover(ports: Ports, reason: str) -> Recovery:
    report = Recovery()
    for experiment in _unfinished_experiments(ports):
        if experiment.state == E.DELETING:
            ports.queues.to_events(messages.DeleteExperiment(experiment_id=experiment.id).to_body())
            report.deletions.append(experiment.id)
            continue
        for trial in ports.trials.for_experiment(experiment.id):
            if trial.state.terminal:
                _announce_lost_exit(ports, experiment, trial, report)
            else:
                _end_lost_run(ports, trial, reason, report)
                _recover_trial(ports, experiment, trial, report)
    if report.runs_ended or report.resumed or report.ended or report.exits_announced or report.deletions:
        log.warning("recovered after a restart: %s", report.summary())
    return report


def _unfinished_experiments(ports: Ports) -> list[Experiment]:
    found: list[Experiment] = []
    before: int | None = None
    while True:
        page, before = ports.experiments.list(PAGE, before)
        found += [e for e in page if not e.state.terminal]
        if before is None:
            return found


def _end_lost_run(ports: Ports, trial: Trial, reason: str, report: Recovery) -> None:
    if trial.attempts < 1:
        return
    run = ports.runs.get(keys.run_id(trial.id, trial.attempts))
    if run is None or run.state.terminal:
        return
    ended = ports.runs.exit(run.run_id, LOST_EXIT_CODE, reason)
    for rank in range(len(run.nodes)):
        ports.runs.exit(keys.node_id(run.run_id, rank), LOST_EXIT_CODE, reason)
    if isinstance(ended, Run):  # this pass ended it: its usage is recorded once
        costs.record_run_usage(ports, ended, trial, LOST_EXIT_CODE)
    ports.trials.record_exit(trial.id, LOST_EXIT_CODE, reason, None)
    report.runs_ended.append(run.run_id)


def _recover_trial(ports: Ports, experiment: Experiment, trial: Trial, report: Recovery) -> None:
    end = _STOP_ENDS.get(trial.state)
    if end is None and experiment.state in _EXPERIMENT_STOPPING:
        end = T.CANCELED  # the experiment was stopping: the searcher starts nothing more
    if end is None and trial.searcher_action == "stop":
        end = T.COMPLETED  # the searcher had stopped it (early): its latest checkpoint is its result
    if end is not None:
        ended = ports.trials.transition(trial.id, end, end_time=ports.clock.now_iso())
        if ended is None and ports.trials.transition(trial.id, T.PAUSED) is not None:
            # QUEUED cannot end COMPLETED directly: through PAUSED, as a searcher closes a paused trial
            ended = ports.trials.transition(trial.id, end, end_time=ports.clock.now_iso())
        if ended is not None:
            _announce_exit(ports, trial, end, event_id=f"recovered-{trial.id}-{trial.attempts}")
            report.ended.append(trial.id)
        return
    if trial.state != T.PAUSED and ports.trials.transition(trial.id, T.PAUSED) is None:
        log.warning("trial %s changed state during recovery; left as it is", trial.id)
        return
    if experiment.state != E.ACTIVE:
        report.paused.append(trial.id)
        return
    if trial.searcher_action == "pause":
        # The searcher paused it (PBT's round ended): tell it again that the pause is done.
        ports.queues.to_events(
            messages.TrialPaused(
                event_id=f"paused-{keys.run_id(trial.id, trial.attempts)}",
                trial_id=trial.id,
                experiment_id=experiment.id,
                state=str(T.PAUSED),
            ).to_body()
        )
        report.paused.append(trial.id)
        return
    current = ports.trials.get(trial.id) or trial
    searching.restart_lost_trial(ports, experiment, current)
    report.resumed.append(trial.id)


def _announce_lost_exit(ports: Ports, experiment: Experiment, trial: Trial, report: Recovery) -> None:
    """A trial that ended but whose exit its searcher never saw: the message was in flight."""
    if experiment.searcher is None:
        return
    exited = experiment.searcher.get("exited")
    if not isinstance(exited, dict) or str(trial.id) in exited:
        return
    run_id = keys.run_id(trial.id, trial.attempts) if trial.attempts > 0 else f"trial-{trial.id}"
    _announce_exit(ports, trial, trial.state, event_id=f"exited-{run_id}")
    report.exits_announced.append(trial.id)


def _announce_exit(ports: Ports, trial: Trial, state: TrialState, *, event_id: str) -> None:
    ports.queues.to_events(
        messages.TrialExited(
            event_id=event_id, trial_id=trial.id, experiment_id=trial.experiment_id, state=str(state)
        ).to_body()
    )

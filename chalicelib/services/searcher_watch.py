"""The searcher sweep: no experiment hangs silently.

An ACTIVE experiment moves on only through events: a trial's validation, pause or exit, a create's or an
activation's first operations. If one is lost (a consumer's bug, a message in the dead-letter queue, a
hand-off that never ran), the experiment would wait forever with nothing running. So each moment after
which an experiment *could* be idle marks it for a look (`watchlist.mark`: a start, a run's end, a
searcher result), a later mark moving the look later, and the stack's one-minute sweep looks at those whose time
has come (`sweep`). A look (`check`):

- leaves an experiment that ended, is being deleted or is paused (its activation marks it again), and
  one with a trial running or queued (its run's end marks it again);
- starts a searcher that never started, and carries out an outbox left pending (for `searcher_check_s`
  at least: one saved just now is being carried out, most likely);
- ends an experiment waiting in STOPPING_* whose trials have all stopped;
- otherwise (ACTIVE, nothing running, nothing pending) tells the searcher again what it may have missed:
  the exit of each trial that ended without its searcher recording it (once it ended
  `REPLAY_AFTER_CHECKS` looks ago: its event may wait in a busy queue), and the pause of each paused
  trial (`_replay`, with the event ids the first tellings had, so a searcher that saw them ignores them);
- and if there is nothing to replay, the searcher waits for something that cannot come: the experiment is
  ended (COMPLETED if a trial completed, else ERROR), as Determined ends an experiment whose searcher
  has shut down.

Every look but the first kind is logged as a warning (or an error, for the last), naming the experiment
and what was done, and the experiment stays marked until a look finds it idle-free. Every step is one
that an event would have taken, and each is idempotent, so a look racing the event it replaces is safe.
"""

from __future__ import annotations

import logging

from chalicelib.domain import keys, searchers
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.searcher_outbox import SearcherRecord
from chalicelib.domain.states import ExperimentState, TrialState
from chalicelib.services import experiment_ending, search_specs, searching, stopping, watchlist
from chalicelib.services.clock import epoch_of
from chalicelib.services.ports import Ports
from stratus.contract import messages

log = logging.getLogger(__name__)

#: Experiments looked at per sweep at most (the rest wait for the next minute, earliest first).
SWEEP_LIMIT = 100
#: A trial's exit is told again only once it is this many `searcher_check_s` old: before, its event may
#: just wait in a busy events queue (five ASHA searches at once on a 2-core machine lagged minutes).
REPLAY_AFTER_CHECKS = 5

_STOPPING_TO_END = (ExperimentState.STOPPING_COMPLETED, ExperimentState.STOPPING_ERROR)


def sweep(ports: Ports, limit: int = SWEEP_LIMIT) -> list[int]:
    """Look at every marked experiment whose time has come; the ids looked at."""
    due = ports.experiments.due_for_check(ports.clock.now(), limit)
    for experiment_id, check_at in due:
        try:
            check(ports, experiment_id, check_at)
        except Exception:  # noqa: BLE001 - one experiment's failure must not stop the looks at the others
            log.exception("experiment %s: the sweep's look failed; it stays marked", experiment_id)
    return [experiment_id for experiment_id, _ in due]


def check(ports: Ports, experiment_id: int, check_at: int) -> None:
    """One look at an experiment marked for `check_at` (see the module docstring)."""
    experiment = ports.experiments.get(experiment_id)
    if experiment is None or experiment.state.terminal or experiment.state in _RESTING:
        ports.experiments.unwatch(experiment_id, check_at)
        return
    if not experiment.searcher_started:
        if experiment.state == ExperimentState.ACTIVE:
            log.warning("experiment %s is ACTIVE but its searcher never started; starting it", experiment_id)
            searching.start(ports, experiment)
        return
    record = SearcherRecord.load(experiment.searcher or {})
    patience = ports.settings.searcher_check_s
    if record.pending and ports.clock.now() - (record.pending_since or 0) < patience:
        watchlist.mark(ports, experiment_id)  # being carried out now, most likely: look again later
        return
    if record.pending:
        log.warning(
            "experiment %s: %d searcher operation(s) pending since %s; carrying them out",
            experiment_id,
            len(record.pending),
            record.pending_since,
        )
        watchlist.mark(ports, experiment_id)  # looked at again, until nothing is left
        searching.carry_on(ports, experiment_id)
        return
    trials = ports.trials.for_experiment(experiment_id, consistent=True)
    if any(_live(t) for t in trials):
        waiting = _unanswered_results(ports, experiment, record, trials)
        if waiting:
            log.warning(
                "experiment %s: trials %s wait for their searcher's answer to a result it never saw; "
                "telling it again",
                experiment_id,
                ", ".join(str(t) for t in waiting),
            )
            watchlist.mark(ports, experiment_id)
        else:
            ports.experiments.unwatch(experiment_id, check_at)  # its runs' ends mark it again
        return
    if experiment.state in _STOPPING_TO_END:
        log.warning("experiment %s is %s with no trial running; ending it", experiment_id, experiment.state)
        experiment_ending.finish_stopping(ports, experiment_id)
    elif experiment.state in stopping.STOPPING_TO_CANCELED:
        log.warning("experiment %s is %s with no trial running; ending it", experiment_id, experiment.state)
        stopping.on_trial_event(ports, experiment)
    else:
        _replay_or_end(ports, experiment, record, trials)
        return
    watchlist.mark(ports, experiment_id)


#: States in which an experiment waits for a user, not for an event.
_RESTING = (ExperimentState.PAUSED, ExperimentState.DELETING)


def _live(trial: Trial) -> bool:
    """Running, or queued to run: a trial whose run will end with an event."""
    return not trial.state.terminal and trial.state != TrialState.PAUSED


def _unanswered_results(
    ports: Ports, experiment: Experiment, record: SearcherRecord, trials: list[Trial]
) -> list[int]:
    """Send the searcher again the result of each live trial that waits for its answer (its result's
    event was lost: the trial would wait for ever); the trials told."""
    metric = experiment.parsed_config.searcher.metric
    told = []
    for trial in trials:
        if not (_live(trial) and trial.searcher_pending and trial.searcher_length is not None):
            continue
        event_id = f"validation-{trial.id}-{trial.searcher_length}"
        value = (trial.latest_validation or {}).get(metric)
        if event_id in record.seen_events or not isinstance(value, int | float):
            continue  # answered (its answer is in the outbox), or no value to tell
        event = messages.ValidationReported(
            event_id, experiment.id, trial.id, trial.searcher_length, float(value)
        )
        ports.queues.to_events(event.to_body())
        told.append(trial.id)
    return told


def _replay_or_end(ports: Ports, experiment: Experiment, record: SearcherRecord, trials: list[Trial]) -> None:
    watchlist.mark(ports, experiment.id)
    if _recent_unrecorded_exits(ports, record, trials):
        return  # their events may just wait in the queue: looked at again later
    replayed = _replay(ports, experiment, record, trials)
    if replayed:
        log.warning(
            "experiment %s is ACTIVE with no trial running or queued and nothing pending; telling its "
            "searcher again how trials %s ended",
            experiment.id,
            ", ".join(str(t) for t in replayed),
        )
        return
    log.error(
        "experiment %s is ACTIVE with no trial running or queued, nothing pending and nothing left to "
        "tell its searcher (trials %s); ending it",
        experiment.id,
        ", ".join(str(t.id) for t in trials) or "none",
    )
    experiment_ending.end_experiment(ports, experiment.id)


def _recent_unrecorded_exits(ports: Ports, record: SearcherRecord, trials: list[Trial]) -> bool:
    """Whether a trial ended less than `REPLAY_AFTER_CHECKS` looks ago without its searcher recording it."""
    exited = record.snapshot.get("exited")
    seen_exits = set(exited) if isinstance(exited, dict) else set()
    since = ports.clock.now() - REPLAY_AFTER_CHECKS * ports.settings.searcher_check_s
    return any(
        t.state.terminal and str(t.id) not in seen_exits and t.end_time and epoch_of(t.end_time) > since
        for t in trials
    )


def _replay(ports: Ports, experiment: Experiment, record: SearcherRecord, trials: list[Trial]) -> list[int]:
    """Tell the searcher again the end of each trial's last run it may have missed: the exit of a trial
    that ended without its searcher recording it, and the pause of a paused trial whose searcher decision
    was not carried out (continue or stop it) or whose searcher observes pauses and has not seen it. The
    trials told."""
    exited = record.snapshot.get("exited")
    seen_exits = set(exited) if isinstance(exited, dict) else set()
    seen_events = set(record.snapshot.get("seen_events") or ())
    observer = isinstance(
        searchers.restore_searcher(record.snapshot, search_specs.search_spec(experiment.parsed_config)),
        searchers.PauseObserver,
    )
    told = []
    for trial in trials:
        run_id = keys.run_id(trial.id, trial.attempts) if trial.attempts > 0 else f"trial-{trial.id}"
        body: messages.TrialExited | messages.TrialPaused
        if trial.state.terminal and str(trial.id) not in seen_exits:
            body = messages.TrialExited(f"exited-{run_id}", trial.id, experiment.id, str(trial.state))
        elif trial.state == TrialState.PAUSED and (
            trial.searcher_action in ("train", "stop") or (observer and f"paused-{run_id}" not in seen_events)
        ):
            body = messages.TrialPaused(f"paused-{run_id}", trial.id, experiment.id, str(trial.state))
        else:
            continue
        ports.queues.to_events(body.to_body())
        told.append(trial.id)
    return told

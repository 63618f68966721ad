"""Running an experiment's searcher: feed it events, persist its snapshot, carry out its operations.

A searcher's answer to an event is written into its stored snapshot (its outbox,
`chalicelib.domain.searcher_outbox`) by the same conditional write on `searcher_version` that records the
event, before any of it is carried out. A consumer that loses that write changes nothing and raises
`StaleSearcherError`: SQS delivers the event again, and the searcher then answers it from the winner's
snapshot (or, having seen it, ignores it). Once saved, the outbox is carried out entry by entry (`drive`),
each entry removed by another conditional save; a save lost to a concurrent consumer is retried on fresh
state, and work left after `DRIVE_ATTEMPTS` losses (or a failure) is handed to the events queue
(`SearcherWork`) and watched by the sweep (`searcher_watch`). Nothing the searcher decided is dropped,
and no request reports failure for work it handed on. Every entry is idempotent: a trial is created once
per searcher request id, executions are named, and entries that change a trial carry their sequence
number, so one carried out late changes nothing a later one set.

Per trial, the searcher's wishes live on the trial record: `target_length` (train until there),
`searcher_action` (`train`, `pause` or `stop`) and `searcher_pending` (a validation at the target has
been reported and the searcher has not answered yet). The trial reads them through
`GET /trials/{id}/searcher` (see `trial_reports.searcher_state`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from chalicelib.domain import keys, searchers
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.searcher_outbox import AnswerValidation, Pending, SearcherRecord, Work
from chalicelib.domain.states import ExperimentState, TrialState
from chalicelib.errors import ConflictError
from chalicelib.services import stopping, watchlist
from chalicelib.services.experiment_ending import finish_stopping, gone, on_searcher_shutdown, stops_early
from chalicelib.services.ports import Ports
from chalicelib.services.search_specs import search_spec
from stratus.contract import messages

log = logging.getLogger(__name__)

#: Saves lost in a row before `drive` hands the outbox to the queue (each loss means another consumer
#: saved the searcher meanwhile, so it made progress too).
DRIVE_ATTEMPTS = 8
#: How long a create or an activation carries out its searcher's first operations itself before it
#: hands the rest to the queue: it answers the user in time (API Gateway gives a request 29 s), whatever
#: the number of first trials.
START_BUDGET_S = 5.0


class StaleSearcherError(ConflictError):
    """Another consumer updated the searcher first; the event will be delivered again."""


def start(ports: Ports, experiment: Experiment) -> None:
    """Start the experiment's searcher: its first trials. Once: a searcher already started is kept, and
    what it left pending is carried on. Never raises once the experiment's record exists: what this call
    cannot finish (lost races, a failure) goes to the queue, so a create or an activation never reports
    failure for an experiment it made."""
    try:
        _start(ports, experiment)
    except Exception:  # noqa: BLE001 - handed on: SearcherWork's consumer starts it, or raises and is retried
        log.exception("experiment %s: starting its searcher failed; handed to the queue", experiment.id)
        _hand_off(ports, experiment.id)
        return
    carry_on(ports, experiment.id, deadline=ports.clock.now() + START_BUDGET_S)


def _start(ports: Ports, experiment: Experiment) -> None:
    watchlist.mark(ports, experiment.id)  # the sweep finishes what this call may not
    if experiment.searcher_started:
        return
    spec = search_spec(experiment.parsed_config)
    searcher = searchers.new_searcher(spec)
    first = searcher.initial_operations()  # before the snapshot: it records what it asked for
    record = SearcherRecord(snapshot={}).enqueue(searcher.snapshot(), first, ports.clock.now())
    # Lost: another start saved the searcher first (a redelivered activation); its outbox is carried on.
    ports.experiments.save_searcher(experiment.id, record.to_json(), expected_version=0)


def carry_on(ports: Ports, experiment_id: int, *, deadline: float | None = None) -> bool:
    """Carry out the experiment's outbox; where it cannot (lost races, a failure, `deadline` passed),
    hand it to the events queue. True when nothing is left pending. Never raises."""
    try:
        if drive(ports, experiment_id, deadline=deadline):
            return True
        log.info("experiment %s: the rest of its searcher's work goes to the queue", experiment_id)
    except Exception:  # noqa: BLE001 - handed on: SearcherWork's consumer raises, and is retried
        log.exception(
            "experiment %s: carrying out its searcher's work failed; handed to the queue", experiment_id
        )
    _hand_off(ports, experiment_id)
    return False


def _hand_off(ports: Ports, experiment_id: int) -> None:
    ports.queues.to_events(messages.SearcherWork(experiment_id=experiment_id).to_body())


def on_searcher_work(ports: Ports, message: messages.SearcherWork) -> None:
    """The events queue's `SearcherWork`: start the searcher of an active experiment whose start was cut
    short, and carry out its outbox; raises (the message comes again) while races or a failure keep it
    from finishing."""
    experiment = ports.experiments.get(message.experiment_id)
    if experiment is None or gone(experiment):
        return
    if not experiment.searcher_started:
        if experiment.state != ExperimentState.ACTIVE:
            return  # created paused: its activation starts it
        _start(ports, experiment)
    _drive_or_raise(ports, experiment.id)


def handle_event(ports: Ports, message: messages.TrialEvent) -> None:
    """A trial event for the searcher: its answer is saved into the outbox and carried out. A save lost
    to another consumer is tried again on fresh state; after `DRIVE_ATTEMPTS` losses it raises
    `StaleSearcherError` having changed nothing, and the event comes again."""
    for _ in range(DRIVE_ATTEMPTS):
        if _answer_event(ports, message):
            _drive_or_raise(ports, message.experiment_id)
            return
    raise StaleSearcherError(f"searcher of experiment {message.experiment_id} changed meanwhile; retrying")


def _answer_event(ports: Ports, message: messages.TrialEvent) -> bool:
    """Feed the event to the searcher as stored now and save its answer into the outbox. False when
    the save lost to another consumer (nothing changed); True otherwise (also when there was nothing to
    answer, or the event was carried out another way)."""
    experiment = ports.experiments.get(message.experiment_id)
    if experiment is None or experiment.searcher is None or gone(experiment):
        return True
    if isinstance(message, messages.TrialExited | messages.TrialPaused):
        watchlist.mark(ports, experiment.id)  # a trial ended a run: the experiment may have gone idle
    if experiment.state in stopping.STOPPING_TO_CANCELED:
        stopping.on_trial_event(ports, experiment)  # canceled: the searcher creates nothing more
        return True
    if experiment.state in (ExperimentState.STOPPING_COMPLETED, ExperimentState.STOPPING_ERROR):
        _drive_or_raise(ports, experiment.id)  # what the searcher decided before its shutdown first
        finish_stopping(ports, experiment.id, message)
        return True
    spec = search_spec(experiment.parsed_config)  # parsed once per event
    if experiment.parsed_config.past_time_limit(experiment.start_time, ports.clock.now()):
        on_searcher_shutdown(ports, experiment, spec, failure=False)  # NNI's maxExperimentDuration: no more
        return True
    record = SearcherRecord.load(experiment.searcher)
    if not isinstance(message, messages.TrialPaused) and message.event_id in record.seen_events:
        return True  # a redelivery: its answer was saved with the event (and is carried out)
    searcher = searchers.restore_searcher(record.snapshot, spec)
    work: list[Work]
    if isinstance(message, messages.TrialPaused):
        _carry_out_decision_on_paused_trial(ports, experiment, message.trial_id)
        work = list(_tell_pause(ports, searcher, message))
    else:
        event = _searcher_event(ports, message)
        work = list(searcher.on_event(event))
        if isinstance(event, searchers.ValidationReported):
            # Answered (possibly with nothing: the target stands, or the trial is done), after the rest.
            work.append(AnswerValidation(event.trial_id, event.length))
    saved = record.enqueue(searcher.snapshot(), work, ports.clock.now())
    return ports.experiments.save_searcher(experiment.id, saved.to_json(), experiment.searcher_version)


def _searcher_event(
    ports: Ports, message: messages.TrialExited | messages.ValidationReported
) -> searchers.TrialExited | searchers.ValidationReported:
    if isinstance(message, messages.TrialExited):
        trial = ports.trials.get(message.trial_id)
        failed = trial is None or trial.state != TrialState.COMPLETED
        invalid = trial is not None and trial.invalid_hp
        return searchers.TrialExited(
            event_id=message.event_id,
            trial_id=message.trial_id,
            failed=failed and not invalid,
            invalid_hp=invalid,
        )
    return searchers.ValidationReported(
        event_id=message.event_id,
        trial_id=message.trial_id,
        length=message.length,
        metric=message.metric,
    )


def _drive_or_raise(ports: Ports, experiment_id: int) -> bool:
    """`drive` for an event's consumer: work it cannot finish raises, so the event comes again (the
    searcher has seen it then: only the outbox is carried on). True when nothing is left pending."""
    if drive(ports, experiment_id):
        return True
    raise StaleSearcherError(f"searcher of experiment {experiment_id} changed meanwhile; retrying")


def _tell_pause(
    ports: Ports, searcher: searchers.Searcher, message: messages.TrialPaused
) -> list[searchers.Operation]:
    """Tell a searcher that observes pauses (PBT) that the trial's pause checkpoint is stored."""
    if not isinstance(searcher, searchers.PauseObserver):
        return []
    trial = ports.trials.get(message.trial_id)
    if trial is None or trial.state != TrialState.PAUSED:
        return []  # the pause was not recorded (the trial was canceled meanwhile)
    if trial.searcher_action != "pause":
        return []  # paused by the user (`det experiment pause`), not by the searcher: not a round's end
    return searcher.on_trial_paused(searchers.TrialPaused(message.event_id, message.trial_id))


@dataclass
class _Driving:
    """What `drive` knows between two entries: the experiment and its searcher as this call last read or
    saved them (read again after a lost save, or after a shutdown, which moves the experiment's state)."""

    experiment: Experiment
    record: SearcherRecord
    spec: searchers.SearchSpec
    searcher: searchers.Searcher

    @classmethod
    def read(cls, ports: Ports, experiment_id: int) -> _Driving | None:
        """As stored now; None when nothing more may happen to it (gone, ended, no searcher)."""
        experiment = ports.experiments.get(experiment_id)
        if experiment is None or experiment.searcher is None or gone(experiment):
            return None
        record = SearcherRecord.load(experiment.searcher)
        spec = search_spec(experiment.parsed_config)
        return cls(experiment, record, spec, searchers.restore_searcher(record.snapshot, spec))

    def saved(self, record: SearcherRecord) -> _Driving:
        """This state after its own save of `record` (its searcher object already is that snapshot)."""
        experiment = dataclasses.replace(
            self.experiment, searcher=record.to_json(), searcher_version=self.experiment.searcher_version + 1
        ).with_parsed_config(self.experiment.parsed_config)
        return _Driving(experiment, record, self.spec, self.searcher)


def drive(
    ports: Ports, experiment_id: int, *, attempts: int = DRIVE_ATTEMPTS, deadline: float | None = None
) -> bool:
    """Carry out the experiment's outbox, oldest entry first. True when nothing is left pending; False
    after `attempts` saves lost in a row to other consumers, or once the clock passes `deadline` (epoch
    seconds) with entries left: the caller hands them on."""
    lost = 0
    state = _Driving.read(ports, experiment_id)
    while state is not None:
        if not state.record.pending:
            _record_progress(ports, state.experiment, state.record, state.searcher)
            return True
        if deadline is not None and ports.clock.now() > deadline:
            return False
        entry = state.record.pending[0]
        followups = _carry_out(ports, state.experiment, state.spec, state.searcher, entry)
        done = state.record.done(entry.seq, state.searcher.snapshot(), ports.clock.now())
        if followups:
            done = done.enqueue(state.searcher.snapshot(), followups, ports.clock.now())
        version = state.experiment.searcher_version
        if ports.experiments.save_searcher(experiment_id, done.to_json(), version):
            lost = 0
            # A shutdown moved the experiment's state (it may have ended): read it again.
            shut = isinstance(entry.work, searchers.Shutdown)
            state = _Driving.read(ports, experiment_id) if shut else state.saved(done)
            continue
        lost += 1  # another consumer saved first: carry on from its state (the entry may be done)
        if lost >= attempts:
            return False
        state = _Driving.read(ports, experiment_id)
    return True  # nothing more may happen to an experiment that ended


def _carry_out(
    ports: Ports,
    experiment: Experiment,
    spec: searchers.SearchSpec,
    searcher: searchers.Searcher,
    entry: Pending,
) -> list[searchers.Operation]:
    """Carry out one outbox entry; the searcher operations it leads to (none, so far)."""
    work, seq = entry.work, entry.seq
    if isinstance(work, searchers.CreateTrial):
        trial_id = _create_trial(ports, experiment, work)
        # Tell the searcher the trial's id (a second time changes nothing: the event id is the same).
        return searcher.on_event(
            searchers.TrialCreated(f"created-{work.request_id}", work.request_id, trial_id)
        )
    if isinstance(work, searchers.ContinueTrial):
        _continue_trial(ports, experiment, work, seq=seq)
    elif isinstance(work, searchers.PauseTrial):
        ports.trials.set_searcher_action(work.trial_id, "pause", seq=seq)
    elif isinstance(work, searchers.StopTrial):
        _stop_trial(ports, work.trial_id, spec, seq=seq)
    elif isinstance(work, searchers.Shutdown):
        on_searcher_shutdown(ports, experiment, spec, failure=work.failure, seq=seq)
    elif isinstance(work, AnswerValidation):
        ports.trials.clear_searcher_pending(work.trial_id, work.length)
    return []


def _record_progress(
    ports: Ports, experiment: Experiment, record: SearcherRecord, searcher: searchers.Searcher
) -> None:
    """The experiment's progress, as its searcher sees it, raised only (the trials' reports raise it
    between events: `chalicelib.services.progress`); a searcher that shut down counts itself done, and
    the experiment's end records what was done."""
    if record.snapshot.get("shut_down"):
        return
    progress = searcher.progress()
    if progress is not None and (experiment.progress is None or round(progress, 4) > experiment.progress):
        ports.experiments.raise_progress(experiment.id, round(progress, 4))


def _create_trial(ports: Ports, experiment: Experiment, op: searchers.CreateTrial) -> int:
    # Claimed once per request id, so a redelivered event finds the trial it already created.
    trial_id = ports.ids.claim(keys.trial_request_claim(experiment.id, op.request_id), "trial")
    seed = experiment.parsed_config.reproducibility.experiment_seed or 0
    start_from = _warm_start_checkpoint(ports, experiment, op)
    # While the experiment is paused, a new trial waits PAUSED for `det experiment activate`.
    paused = experiment.state == ExperimentState.PAUSED
    ports.trials.create(
        Trial(
            id=trial_id,
            experiment_id=experiment.id,
            request_id=op.request_id,
            state=TrialState.PAUSED if paused else TrialState.QUEUED,
            hparams=op.hparams,
            start_time=ports.clock.now_iso(),
            trial_seed=(seed + trial_id) % 2**31,
            target_length=op.length,
            warm_start_trial_id=op.warm_start_trial_id,
            # The trial starts from it (its launch spec's latest_checkpoint) until it stores its own.
            latest_checkpoint=start_from,
            warm_start_checkpoint=start_from,
        )
    )
    ports.experiments.record_trial_count(experiment.id, len(ports.trials.for_experiment(experiment.id)))
    current = ports.experiments.get(experiment.id)
    if current is not None and (current.state in stopping.STOPPING_TO_CANCELED or current.state.terminal):
        # Canceled or killed while the searcher decided (the cancel listed the trials before this one
        # existed): it never starts, and the experiment ends once its other trials have.
        ports.trials.transition(trial_id, TrialState.CANCELED, end_time=ports.clock.now_iso())
        if not current.state.terminal:
            stopping.on_trial_event(ports, current)
        return trial_id
    if not paused:
        _start_run(ports, experiment, trial_id, generation=0)
    return trial_id


def _warm_start_checkpoint(ports: Ports, experiment: Experiment, op: searchers.CreateTrial) -> str | None:
    """The checkpoint a new trial starts from (None: from scratch): its PBT parent's latest, else the
    experiment's warm-start source (Determined's `source_checkpoint_uuid` / `source_trial_id`)."""
    if op.warm_start_trial_id is not None:
        parent = ports.trials.get(op.warm_start_trial_id)
        return parent.latest_checkpoint if parent is not None else None
    return experiment.warm_start_checkpoint


def _start_run(ports: Ports, experiment: Experiment, trial_id: int, generation: int) -> None:
    config = experiment.parsed_config
    ports.workflows.start(
        keys.execution_name(trial_id, generation),
        {
            "trial_id": trial_id,
            "experiment_id": experiment.id,
            "pool": experiment.job_pool,  # `det job update` may have moved or reprioritized the job
            "slots": config.resources.slots_per_trial or 1,
            "priority": experiment.job_priority,
            "max_restarts": config.max_restarts,
        },
    )


def _continue_trial(
    ports: Ports, experiment: Experiment, op: searchers.ContinueTrial, *, seq: int | None = None
) -> None:
    trial = ports.trials.get(op.trial_id)
    if trial is None:
        return
    if not ports.trials.set_searcher_action(op.trial_id, "train", target_length=op.length, seq=seq):
        return  # carried out late: a later entry was applied to the trial already
    if trial.state == TrialState.PAUSED:
        # A promotion: resume the paused trial from its latest checkpoint in a new execution. The
        # generation moves on only if the trial is still paused, so a redelivery starts it once.
        resume_paused_trial(ports, experiment, trial)


def resume_paused_trial(ports: Ports, experiment: Experiment, trial: Trial) -> None:
    """Start a paused trial's next execution, once per pause: a promotion and the pause's own event (or
    its redelivery) may both get here while the trial is still PAUSED. While the experiment is paused the
    trial stays PAUSED (`det experiment activate` resumes it)."""
    if experiment.state == ExperimentState.PAUSED:
        return
    if ports.trials.resume_paused(trial.id, trial.generation, trial.attempts):
        _start_run(ports, experiment, trial.id, trial.generation + 1)
        return
    fresh = ports.trials.get(trial.id)
    if fresh is not None and fresh.state == TrialState.PAUSED and fresh.generation > 0:
        # Claimed already, perhaps by a call that failed before its start: executions are started by
        # name, so this is a no-op when the claimed one runs or ran, and its start when it never did.
        _start_run(ports, experiment, trial.id, fresh.generation)


def restart_lost_trial(ports: Ports, experiment: Experiment, trial: Trial) -> None:
    """Start a paused trial's next execution after its own was lost with the stack (recovery): as a
    resume, also when a resume of this attempt was claimed by an execution lost before it enqueued."""
    if ports.trials.resume_paused(trial.id, trial.generation, trial.attempts, once=False):
        _start_run(ports, experiment, trial.id, trial.generation + 1)


def _stop_trial(ports: Ports, trial_id: int, spec: searchers.SearchSpec, *, seq: int | None = None) -> None:
    trial = ports.trials.get(trial_id)
    if trial is None:
        return
    if not ports.trials.set_searcher_action(
        trial_id, "stop", early_stopped=stops_early(trial, spec), seq=seq
    ):
        return  # carried out late: a later entry was applied to the trial already
    if trial.state == TrialState.PAUSED:
        _complete_stopped_paused_trial(ports, trial)


def _carry_out_decision_on_paused_trial(ports: Ports, experiment: Experiment, trial_id: int) -> None:
    """A trial finished pausing. The searcher may have promoted or stopped it meanwhile (its process
    had already been told to stop): carry that out now. Not a searcher event, so nothing is replayed."""
    trial = ports.trials.get(trial_id)
    if trial is None or trial.state != TrialState.PAUSED:
        return
    if trial.searcher_action == "train":
        resume_paused_trial(ports, experiment, trial)
    elif trial.searcher_action == "stop":
        _complete_stopped_paused_trial(ports, trial)


def _complete_stopped_paused_trial(ports: Ports, trial: Trial) -> None:
    """A paused trial the searcher stopped ends here (no process is running to exit); the searcher is
    told, as of any trial that exits."""
    ended = ports.trials.transition(trial.id, TrialState.COMPLETED, end_time=ports.clock.now_iso())
    if ended is not None:
        ports.queues.to_events(
            messages.TrialExited(
                event_id=f"closed-{trial.id}",
                trial_id=trial.id,
                experiment_id=trial.experiment_id,
                state=str(TrialState.COMPLETED),
            ).to_body()
        )

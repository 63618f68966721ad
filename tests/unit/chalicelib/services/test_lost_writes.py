"""Conditional writes that lose, and failures right after one that wins, on the in-memory twin: each
interleaving of the audit of chalicelib's conditional writes that dropped work (DW-3 ... DW-15) is
played here, and the work must be done in the end (by the call itself, or by the retry that its failure
leads to: a redelivered message, an agent's retried report, a user's repeated command).

A race or a failure is injected by wrapping one port (`_Hooked`, or a store sharing the twin's items):
the other party's call runs just before the write it races, or the call after the write raises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.domain import keys
from chalicelib.domain.records import Trial
from chalicelib.domain.states import ExperimentState, RunState, TrialState
from chalicelib.errors import ConflictError
from chalicelib.memory import MemoryRuns, MemoryTrials, memory_ports, memory_settings
from chalicelib.services import pausing, runs, scheduler, searching, stopping
from chalicelib.services.experiment_edits import ExperimentEdit, edit
from chalicelib.services.job_updates import JobUpdate, update_jobs
from stratus.contract import messages
from stratus.contract.pools import PoolSpec

Hook = Callable[..., Any]


class _Hooked:
    """Delegates to `inner`; `hooks[name](original, *args, **kwargs)` runs in place of its method `name`."""

    def __init__(self, inner: Any, **hooks: Hook) -> None:
        self._inner = inner
        self._hooks = hooks

    def __getattr__(self, name: str) -> Any:
        original = getattr(self._inner, name)
        hook = self._hooks.get(name)
        return original if hook is None else (lambda *a, **k: hook(original, *a, **k))


class _Failure(RuntimeError):
    """A failure in the middle of a handler: a throttle, a Lambda timeout, a 5xx of an AWS API."""


def _fail_once(when: Callable[..., bool] = lambda *a, **k: True) -> Hook:
    """A hook that raises `_Failure` the first time `when(*args)` holds, and calls through otherwise."""
    failed = []

    def hook(original: Hook, *args: Any, **kwargs: Any) -> Any:
        if not failed and when(*args, **kwargs):
            failed.append(args)
            raise _Failure("throttled (simulated)")
        return original(*args, **kwargs)

    return hook


def _before(write: Callable[..., bool], other: Callable[[], object]) -> Hook:
    """A hook that runs `other` (the other party) once, just before the first call for which `write`
    holds: the interleaving where that party gets between this call's read and its write."""
    done = []

    def hook(original: Hook, *args: Any, **kwargs: Any) -> Any:
        if not done and write(*args, **kwargs):
            done.append(True)
            other()
        return original(*args, **kwargs)

    return hook


def _one_trial(ports, flow, slots: int = 1, **config: Any) -> tuple[int, int]:
    """A single-trial experiment and a `slots`-slot agent: (experiment id, trial id)."""
    runs.heartbeat(ports, "agent-1", "default", slots, [])
    experiment = flow.submit(**config)
    (trial_id,) = flow.trial_ids(experiment.id)
    return experiment.id, trial_id


def _launch_message(ports, run_id: str) -> messages.Launch:
    trial_id, _ = keys.parse_run_id(run_id)
    trial = ports.trials.get(trial_id)
    agent = ports.workflows.answers[f"slots-{run_id}"]["agent_id"]
    return messages.Launch(f"launch-{run_id}", run_id, trial_id, trial.experiment_id, agent)


def test_dw3_a_cancel_that_loses_the_trials_canceled_to_its_launch_stops_it_as_it_now_is(ports, flow):
    """DW-3: cancel reads the trial QUEUED and its run ASSIGNED; the launch consumer then launches the run
    and writes PULLING; the cancel's CANCELED (QUEUED/PAUSED only) is refused. The trial must still be
    stopped: STOPPING_CANCELED, told to stop, its launched run kept (not exited unanswered)."""
    experiment_id, trial_id = _one_trial(ports, flow)
    run_id = flow.request_slots(trial_id)
    assert ports.runs.get(run_id).state == RunState.ASSIGNED  # granted; its launch message in flight

    def canceling(trial: int, target: TrialState, **_: Any) -> bool:
        return trial == trial_id and target == TrialState.CANCELED

    launch = _before(canceling, lambda: flow.launch(run_id))
    raced = dataclasses.replace(ports, trials=_Hooked(ports.trials, transition=launch))
    assert stopping.cancel_experiment(raced, experiment_id).state == ExperimentState.STOPPING_CANCELED

    trial, run = ports.trials.get(trial_id), ports.runs.get(run_id)
    assert (trial.state, trial.searcher_action) == (TrialState.STOPPING_CANCELED, "stop")
    assert run.state == RunState.LAUNCHING and run.preempt
    runs.started(ports, "agent-1", run_id, pid=7)
    runs.exited(ports, "agent-1", run_id, 0, "exited with code 0")
    assert flow.exit_answer(run_id)["canceled"] is True  # the workflow's Cancel ends it


def test_dw4_a_kill_between_the_runs_launch_and_the_trials_pulling_cancels_it(ports, flow):
    """DW-4: `compute.launch` moved the run to LAUNCHING; before the launch consumer writes PULLING the
    user kills the trial, still QUEUED. Its STOPPING_KILLED must be written, so the run's end answers
    `canceled` (not a restart)."""
    _, trial_id = _one_trial(ports, flow)
    run_id = flow.request_slots(trial_id)

    def pulling(trial: int, target: TrialState, **_: Any) -> bool:
        return trial == trial_id and target == TrialState.PULLING

    kill = _before(pulling, lambda: stopping.kill_trial(ports, trial_id))
    runs.handle_launch(
        dataclasses.replace(ports, trials=_Hooked(ports.trials, transition=kill)),
        _launch_message(ports, run_id),
    )

    answer = flow.exit_answer(run_id)
    assert answer["exit_code"] == stopping.KILLED_EXIT_CODE and answer["canceled"] is True
    assert ports.trials.get(trial_id).state == TrialState.STOPPING_KILLED
    assert ports.runs.get(run_id).state == RunState.EXITED


def test_dw5a_an_agent_that_reports_started_before_its_launchs_pulling_leaves_the_trial_running(ports, flow):
    """DW-5a: `compute.launch` rings the agent, whose `started` lands before the launch consumer writes
    PULLING (QUEUED -> RUNNING is refused). The trial must read RUNNING, not PULLING for its whole run."""
    _, trial_id = _one_trial(ports, flow)
    run_id = flow.request_slots(trial_id)

    def pulling(trial: int, target: TrialState, **_: Any) -> bool:
        return trial == trial_id and target == TrialState.PULLING

    started = _before(pulling, lambda: runs.started(ports, "agent-1", run_id, pid=7))
    runs.handle_launch(
        dataclasses.replace(ports, trials=_Hooked(ports.trials, transition=started)),
        _launch_message(ports, run_id),
    )

    assert ports.runs.get(run_id).state == RunState.RUNNING
    assert ports.trials.get(trial_id).state == TrialState.RUNNING


def test_dw5b_a_launch_that_failed_before_pulling_writes_it_when_delivered_again(ports, flow):
    """DW-5b: the launch consumer launched the run, then failed writing PULLING; the redelivered message
    finds the run LAUNCHING. The trial must not stay QUEUED while it runs (its Complete would be refused
    and the searcher would count it failed)."""
    _, trial_id = _one_trial(ports, flow)
    run_id = flow.request_slots(trial_id)
    message = _launch_message(ports, run_id)
    crash = _fail_once(lambda trial, target, **_: target == TrialState.PULLING)
    with pytest.raises(_Failure):
        runs.handle_launch(
            dataclasses.replace(ports, trials=_Hooked(ports.trials, transition=crash)), message
        )
    assert ports.runs.get(run_id).state == RunState.LAUNCHING

    runs.handle_launch(ports, message)  # delivered again
    assert ports.trials.get(trial_id).state == TrialState.PULLING
    runs.started(ports, "agent-1", run_id, pid=7)
    assert ports.trials.get(trial_id).state == TrialState.RUNNING


class _MovesThatConflict(MemoryRuns):
    """The twin's runs, but a move to another pool's queue keeps losing to other writes, as DynamoDB's can
    (`DynamoRuns._move_pool`: every enqueue and grant of either pool moves its summary): `conflicts` times."""

    def __init__(self, inner: MemoryRuns, clock: Any, conflicts: int = 1) -> None:
        super().__init__(clock)
        self.items = inner.items
        self.conflicts = conflicts

    def update_job(self, run_id: str, fields: Any, *, only_pending: bool = False) -> Any:
        if "pending_pool" in fields and self.conflicts > 0:
            self.conflicts -= 1
            raise ConflictError(
                f"run {run_id}: its pool's queue kept changing while it was moved; run the update again"
            )
        return super().update_job(run_id, fields, only_pending=only_pending)


def test_dw6_a_retried_pool_move_moves_the_run_whose_move_lost(flow_on):
    """DW-6: `det job update --resource-pool` writes the job's new pool, then its queued run's move keeps
    losing its transaction (DynamoDB only). The update must not answer 200 with the run left queued in
    the old pool; it answers 409, and the user's retry (the job's pool already written: nothing left to
    plan) moves the run."""
    ports = memory_ports(settings=memory_settings(pools=(PoolSpec("default"), PoolSpec("compute"))))
    flow = flow_on(ports)
    experiment = flow.submit()
    (trial_id,) = flow.trial_ids(experiment.id)
    run_id = flow.request_slots(trial_id)  # no agent: it waits in the default pool
    ports.queues.take_scheduler()
    move = [JobUpdate(str(experiment.id), resource_pool="compute")]
    raced = dataclasses.replace(ports, runs=_MovesThatConflict(ports.runs, ports.clock))
    with pytest.raises(ConflictError, match="run the update again"):
        update_jobs(raced, move)
    assert ports.experiments.get(experiment.id).job_pool == "compute"  # written before the runs
    assert [r.run_id for r in ports.runs.pending("default")] == [run_id]

    update_jobs(ports, move)  # the user's retry

    assert [r.run_id for r in ports.runs.pending("compute")] == [run_id]
    assert ports.runs.pending("default") == []
    assert sorted(m.pool for m in ports.queues.take_scheduler()) == ["compute", "default"]


def test_dw7_a_nodes_exit_whose_report_failed_after_the_nodes_exited_reaches_its_run(ports, flow):
    """DW-7: the last node's exit moves the node to EXITED, then fails before the run collects it
    (`record_node_exit`); the agent retries and finds the node EXITED. The run must still complete."""
    (trial_id,) = flow.trial_ids(flow.submit(resources={"slots_per_trial": 4}).id)
    for agent in ("agent-a", "agent-b"):
        runs.heartbeat(ports, agent, "default", 2, [])
    run_id = flow.request_slots(trial_id)
    flow.launch(run_id)
    chief, worker = keys.node_id(run_id, 0), keys.node_id(run_id, 1)
    runs.started(ports, "agent-a", chief, 11)
    runs.started(ports, "agent-b", worker, 22)
    runs.exited(ports, "agent-a", chief, 0, "exited with code 0")
    crash = _fail_once()
    with pytest.raises(_Failure):
        runs.exited(
            dataclasses.replace(ports, runs=_Hooked(ports.runs, record_node_exit=crash)),
            "agent-b",
            worker,
            0,
            "exited with code 0",
        )
    assert (
        ports.runs.held(worker).state == RunState.EXITED and ports.runs.get(run_id).state == RunState.RUNNING
    )

    runs.exited(ports, "agent-b", worker, 0, "exited with code 0")  # the agent's retry

    assert ports.runs.get(run_id).state == RunState.EXITED
    assert flow.exit_answer(run_id) == {
        "exit_code": 0,
        "reason": "all 2 nodes exited with code 0",
        "paused": False,
    }


def test_dw8_a_grant_whose_answer_failed_is_answered_once_its_launch_never_comes(ports, flow):
    """DW-8: the scheduler's pass assigns the run, then answering its slot token fails; the redelivered
    pass finds it ASSIGNED and grants nothing. Once its launch is overdue the run is ended, and its slot
    request must then be answered (it has no heartbeat and a years-long timeout) so the workflow moves on."""
    _, trial_id = _one_trial(ports, flow)
    throttled = _fail_once(lambda token, output: token.startswith("slots-"))
    with pytest.raises(_Failure):
        dataclasses.replace(
            flow, ports=dataclasses.replace(ports, workflows=_Hooked(ports.workflows, succeed=throttled))
        ).request_slots(trial_id)
    run_id = keys.run_id(trial_id, 1)
    scheduler.schedule_pool(ports, "default")  # the redelivered message's pass
    assert (
        ports.runs.get(run_id).state == RunState.ASSIGNED and f"slots-{run_id}" not in ports.workflows.answers
    )

    ports.clock.advance(700)
    runs.heartbeat(ports, "agent-1", "default", 1, [])
    scheduler.schedule_pool(ports, "default")  # a sweep once its launch is overdue

    assert ports.runs.get(run_id).state == RunState.EXITED
    assert ports.workflows.answers[f"slots-{run_id}"] == pausing.NO_GRANT
    runs.handle_launch(ports, _launch_message(ports, run_id))  # its Launch finds the run ended
    assert flow.exit_answer(run_id)["exit_code"] == -1  # restarted by the workflow, as a lost launch is


def test_dw9_an_exit_report_that_failed_after_the_runs_exited_is_answered_on_the_agents_retry(ports, flow):
    """DW-9: the agent's exit report wins the run's EXITED, then answering the launch token fails; the
    agent retries and finds the run EXITED. The exit must still be told (else the workflow times out the
    launch and trains a completed trial again)."""
    _, trial_id = _one_trial(ports, flow)
    run_id = flow.place(trial_id)["run_id"]
    runs.started(ports, "agent-1", run_id, pid=7)
    throttled = _fail_once(lambda token, output: token == f"launch-{run_id}")
    with pytest.raises(_Failure):
        runs.exited(
            dataclasses.replace(ports, workflows=_Hooked(ports.workflows, succeed=throttled)),
            "agent-1",
            run_id,
            0,
            "exited with code 0",
        )

    runs.exited(ports, "agent-1", run_id, 0, "exited with code 0")  # the agent's retry

    assert flow.exit_answer(run_id) == {"exit_code": 0, "reason": "exited with code 0", "paused": False}
    trial = ports.trials.get(trial_id)
    assert (trial.exit_code, trial.exit_reason) == (0, "exited with code 0")
    runs.exited(ports, "agent-1", run_id, 0, "exited with code 0")  # once more: changes nothing
    assert flow.exit_answer(run_id)["exit_code"] == 0


def test_dw10_a_kill_whose_compute_stop_fails_has_answered_the_runs_exit_first(ports, flow):
    """DW-10: `det trial kill` ends the run, then the backend's stop (Batch TerminateJob, SageMaker
    StopTrainingJob) fails; a repeated kill finds the run EXITED and the trial STOPPING_KILLED and does
    nothing. The exit must have been answered before the stop, so the workflow cancels the trial."""
    _, trial_id = _one_trial(ports, flow)
    run_id = flow.place(trial_id)["run_id"]
    runs.started(ports, "agent-1", run_id, pid=7)
    failing = dataclasses.replace(ports, compute=_Hooked(ports.compute, stop=_fail_once()))
    with pytest.raises(_Failure):
        stopping.kill_trial(failing, trial_id)

    assert stopping.kill_trial(ports, trial_id).state == TrialState.STOPPING_KILLED  # the user repeats it

    answer = flow.exit_answer(run_id)
    assert answer["exit_code"] == stopping.KILLED_EXIT_CODE and answer["canceled"] is True


def test_dw12_a_repeated_pause_answers_the_slot_request_the_first_left_unanswered(ports, flow):
    """DW-12 (pause): the pause exits a queued run, then answering its slot request fails; a repeated pause
    skipped the EXITED run. Its slot request must be answered (no agent) so its workflow pauses the trial."""
    experiment, _, second, _, second_run = flow.running_and_queued(flow.TWO_AT_ONCE)
    throttled = _fail_once(lambda token, output: token == f"slots-{second_run}")
    with pytest.raises(_Failure):
        pausing.pause_experiment(
            dataclasses.replace(ports, workflows=_Hooked(ports.workflows, succeed=throttled)), experiment.id
        )
    assert ports.runs.get(second_run).state == RunState.EXITED

    pausing.pause_experiment(ports, experiment.id)  # the user repeats it

    assert ports.workflows.answers[f"slots-{second_run}"] == pausing.NO_GRANT
    runs.handle_launch(ports, _launch_message(ports, second_run))  # its Launch finds the run ended, paused
    assert flow.exit_answer(second_run)["paused"] is True
    assert ports.trials.get(second).state == TrialState.QUEUED  # until the workflow's Pause writes PAUSED


def test_dw12_a_repeated_cancel_answers_the_slot_request_the_first_left_unanswered(ports, flow):
    """DW-12 (cancel): the cancel ends a queued trial CANCELED and exits its run, then answering the run's
    slot request fails; a repeated cancel found the trial ended and skipped it. The request must be
    answered, or its execution waits for slots for years."""
    experiment, _, second, _, second_run = flow.running_and_queued(flow.TWO_AT_ONCE)
    throttled = _fail_once(lambda token, output: token == f"slots-{second_run}")
    with pytest.raises(_Failure):
        stopping.cancel_experiment(
            dataclasses.replace(ports, workflows=_Hooked(ports.workflows, succeed=throttled)), experiment.id
        )
    assert ports.trials.get(second).state == TrialState.CANCELED

    stopping.cancel_experiment(ports, experiment.id)  # the user repeats it

    assert ports.workflows.answers[f"slots-{second_run}"] == pausing.NO_GRANT
    runs.handle_launch(ports, _launch_message(ports, second_run))
    assert flow.exit_answer(second_run)["canceled"] is True


def test_dw15_a_repeated_max_slots_edit_reaches_the_runs_the_first_did_not(flow_on):
    """DW-15: `det experiment set max-slots` writes the new limit, then copying it onto the job's live runs
    fails; the repeat finds nothing to write. The runs must get the limit from the repeat."""
    ports = memory_ports(settings=memory_settings(pools=(PoolSpec("default"),)))
    flow = flow_on(ports)
    experiment = flow.submit(resources={"max_slots": 2})
    (trial_id,) = flow.trial_ids(experiment.id)
    run_id = flow.request_slots(trial_id)  # waits: no agent
    assert ports.runs.get(run_id).max_slots == 2
    failing = dataclasses.replace(ports, runs=_Hooked(ports.runs, update_job=_fail_once()))
    with pytest.raises(_Failure):
        edit(failing, experiment.id, ExperimentEdit(max_slots=4))
    assert ports.experiments.get(experiment.id).job_max_slots == 4 and ports.runs.get(run_id).max_slots == 2

    edit(ports, experiment.id, ExperimentEdit(max_slots=4))  # the user repeats it

    assert ports.runs.get(run_id).max_slots == 4


class _StaleIndex(MemoryTrials):
    """The twin's trials, with DynamoDB's eventually consistent `by_experiment` index: `for_experiment`
    answers the trials as they were when `freeze` was called; `consistent=True` reads again from the
    table each trial the index shows not ended (as `DynamoTrials.for_experiment` does)."""

    def __init__(self, inner: MemoryTrials) -> None:
        super().__init__()
        self.items = inner.items
        self.index: dict[int, Trial] = {}

    def freeze(self) -> None:
        self.index = {trial_id: self.get(trial_id) for trial_id in self.items}

    def for_experiment(self, experiment_id: int, *, consistent: bool = False) -> list[Trial]:
        indexed = [t for _, t in sorted(self.index.items()) if t.experiment_id == experiment_id]
        if consistent:
            indexed = [t if t.state.terminal else self.get(t.id) for t in indexed]
        return [t for t in indexed if t is not None]


def test_gsi_the_last_trials_event_ends_a_canceled_experiment_though_the_index_shows_it_stopping(ports, flow):
    """Twin vs DynamoDB, 5.: the consumer of a canceled experiment's last trial event decides from the
    experiment's trial index whether every trial has ended; the index can still show that trial as it was
    before the write its event announces (STOPPING_CANCELED, not CANCELED). The experiment must end."""
    experiment_id, trial_id = _one_trial(ports, flow)
    run_id = flow.place(trial_id)["run_id"]
    runs.started(ports, "agent-1", run_id, pid=7)
    stopping.cancel_experiment(ports, experiment_id)
    stale = _StaleIndex(ports.trials)
    stale.freeze()  # the index as the cancel left it: the trial STOPPING_CANCELED
    runs.exited(ports, "agent-1", run_id, 0, "exited with code 0")
    assert flow.exit_answer(run_id)["canceled"] is True
    assert ports.trials.transition(trial_id, TrialState.CANCELED)  # the workflow's Cancel

    event = messages.TrialExited(
        event_id=f"canceled-{trial_id}",
        trial_id=trial_id,
        experiment_id=experiment_id,
        state=str(TrialState.CANCELED),
    )
    searching.handle_event(dataclasses.replace(ports, trials=stale), event)

    assert ports.experiments.get(experiment_id).state == ExperimentState.CANCELED


def test_a_repeated_kill_answers_the_exit_a_first_kill_failed_to_answer(ports, flow):
    """The first `det trial kill` ended the run, then failed answering its exit (a throttled Step Functions
    call); the trial sat in STOPPING_KILLED for ever, and a repeated kill found nothing to do. The repeat
    now answers the exit from the run's record."""
    _, trial_id = _one_trial(ports, flow)
    run_id = flow.place(trial_id)["run_id"]
    runs.started(ports, "agent-1", run_id, pid=7)
    throttled = _fail_once(lambda token, output: token == f"launch-{run_id}")
    with pytest.raises(_Failure):
        stopping.kill_trial(
            dataclasses.replace(ports, workflows=_Hooked(ports.workflows, succeed=throttled)), trial_id
        )
    assert f"launch-{run_id}" not in ports.workflows.answers

    assert stopping.kill_trial(ports, trial_id).state == TrialState.STOPPING_KILLED  # the user repeats it

    answer = flow.exit_answer(run_id)
    assert answer["exit_code"] == stopping.KILLED_EXIT_CODE and answer["canceled"] is True


def test_a_repeated_kill_of_a_canceled_trial_has_the_sweep_look_at_its_experiment(ports, flow):
    """The first kill canceled a queued trial and failed before telling the searcher: the repeat marks
    the experiment, so the sweep tells its searcher of the end if it missed it."""
    experiment, trial_id = _one_trial(ports, flow)
    sent = _fail_once()
    with pytest.raises(_Failure):
        stopping.kill_trial(
            dataclasses.replace(ports, queues=_Hooked(ports.queues, to_events=sent)), trial_id
        )
    assert ports.trials.get(trial_id).state == TrialState.CANCELED
    ports.experiments.items[experiment].pop("check_at")  # the sweep looked, and left it, meanwhile

    stopping.kill_trial(ports, trial_id)

    assert [e for e, _ in ports.experiments.due_for_check(ports.clock.now() + 10_000, 10)] == [experiment]

"""The services on the in-memory twin (`chalicelib.memory`): no IO, no moto, no threads.

The state machine is not here (its moto tests in tests/aws drive the real one); `Flow` plays its part by
hand, one step at a time, the way the compiled workflow does: Enqueue (attempts + 1, QUEUED), RequestSlots
(a `request` on the scheduler queue carrying a token), Launch (a `launch` message carrying another token),
and the exit answered on that token.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from chalicelib.domain import keys
from chalicelib.domain.records import Experiment
from chalicelib.domain.states import RunState, TrialState
from chalicelib.memory import MemoryPorts, memory_ports
from chalicelib.services import experiments, runs, scheduler, searching
from stratus.contract import messages

SHA = "b" * 64
SINGLE = {
    "name": "unit",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}
#: A random search of three trials, two at once: `Flow.running_and_queued` runs one and queues the other.
TWO_AT_ONCE: dict[str, Any] = {
    "name": "two-at-once",
    "entrypoint": "python3 train.py",
    "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    "searcher": {
        "name": "random",
        "metric": "loss",
        "max_trials": 3,
        "max_concurrent_trials": 2,
        "max_length": {"batches": 10},
    },
}


@pytest.fixture
def ports() -> MemoryPorts:
    return memory_ports()


@dataclass
class Flow:
    ports: MemoryPorts
    SHA: ClassVar[str] = SHA  # the context every submission uses
    SINGLE: ClassVar[dict[str, Any]] = SINGLE  # a single-searcher config
    TWO_AT_ONCE: ClassVar[dict[str, Any]] = TWO_AT_ONCE

    def submit(self, config: dict[str, Any] | None = None, **overrides: Any) -> Experiment:
        """A context in the bucket and an experiment created from `config` (the single searcher's)."""
        self.ports.blobs.put(keys.context_key(SHA), b"ctx")
        created = experiments.create(self.ports, {**(config or SINGLE), **overrides}, SHA)
        assert created.experiment is not None
        return created.experiment

    def trial_ids(self, experiment_id: int) -> list[int]:
        return [t.id for t in self.ports.trials.for_experiment(experiment_id)]

    def request_slots(self, trial_id: int, attempt: int = 1) -> str:
        """The workflow's Enqueue and RequestSlots for the trial's execution; the run id."""
        execution = self.execution(trial_id)
        trial = self.ports.trials.get(trial_id)
        assert trial is not None
        self.ports.trials.transition(trial_id, TrialState.QUEUED)
        self.ports.trials.items[trial_id]["attempts"] = trial.attempts + 1
        run_id = keys.run_id(trial_id, attempt)
        request = messages.RequestSlots(
            token=f"slots-{run_id}",
            run_id=run_id,
            trial_id=trial_id,
            experiment_id=execution["experiment_id"],
            pool=execution["pool"],
            slots=execution["slots"],
            priority=execution["priority"],
        )
        scheduler.handle_message(self.ports, request)
        return run_id

    def launch(self, run_id: str) -> None:
        """The workflow's Launch, once the scheduler answered the slot token."""
        grant = self.ports.workflows.answers.get(f"slots-{run_id}")
        assert grant is not None, f"run {run_id} holds no slots yet"
        trial_id, _ = keys.parse_run_id(run_id)
        trial = self.ports.trials.get(trial_id)
        assert trial is not None
        launch = messages.Launch(
            token=f"launch-{run_id}",
            run_id=run_id,
            trial_id=trial_id,
            experiment_id=trial.experiment_id,
            agent_id=grant["agent_id"],
        )
        runs.handle_launch(self.ports, launch)

    def place(
        self, trial_id: int, agent: str = "agent-1", slots: int = 1, attempt: int = 1
    ) -> dict[str, Any]:
        """An agent, a slot request, the grant, the launch: the launch spec the agent's heartbeat gets."""
        runs.heartbeat(self.ports, agent, "default", slots, [])
        run_id = self.request_slots(trial_id, attempt)
        self.launch(run_id)
        (spec,) = [s for s in runs.heartbeat(self.ports, agent, "default", slots, [])["launch"]]
        return spec

    def running_and_queued(self, config: dict[str, Any]) -> tuple[Experiment, int, int, str, str]:
        """An experiment of ``config`` (two trials at once) whose first trial runs on a one-slot agent and
        whose second waits for slots: the experiment, both trial ids and both run ids."""
        experiment = self.submit(config)
        first, second = self.trial_ids(experiment.id)
        self.place(first)
        first_run = keys.run_id(first, 1)
        runs.started(self.ports, "agent-1", first_run, pid=4242)
        second_run = self.request_slots(second)
        assert self.ports.runs.get(second_run).state == RunState.PENDING
        return experiment, first, second, first_run, second_run

    def exit_answer(self, run_id: str) -> dict[str, Any]:
        """What the run's exit told the workflow (the answer on its launch token)."""
        return self.ports.workflows.answers[f"launch-{run_id}"]

    def execution(self, trial_id: int, generation: int = 0) -> dict[str, Any]:
        return self.ports.workflows.executions[keys.execution_name(trial_id, generation)]

    def end_trial(self, trial_id: int, state: str) -> None:
        """The workflow's Complete or Errored, then its trial_exited event, delivered to the searcher."""
        trial = self.ports.trials.get(trial_id)
        if trial is not None and trial.state == TrialState.QUEUED and state == "COMPLETED":
            self.ports.trials.transition(trial_id, TrialState.PULLING)  # a trial completes only from a run
            self.ports.trials.transition(trial_id, TrialState.RUNNING)
        assert self.ports.trials.transition(trial_id, TrialState(state), end_time=self.ports.clock.now_iso())
        trial = self.ports.trials.get(trial_id)
        assert trial is not None
        event = {
            "type": "trial_exited",
            "event_id": f"{state.lower()}-{trial_id}",
            "trial_id": trial_id,
            "experiment_id": trial.experiment_id,
            "state": state,
        }
        searching.handle_event(self.ports, messages.parse_event(event))

    def deliver_events(self) -> int:
        """Hand the events queue's messages to the searcher consumer; how many there were."""
        events = self.ports.queues.take_events()
        for body in events:
            searching.handle_event(self.ports, messages.parse_event(body))
        return len(events)


@pytest.fixture
def flow(ports: MemoryPorts) -> Iterator[Flow]:
    yield Flow(ports)


@pytest.fixture
def flow_on() -> type[Flow]:
    """`flow_on(ports)`: a `Flow` on a stack of the test's own (other settings than the `ports` fixture's)."""
    return Flow

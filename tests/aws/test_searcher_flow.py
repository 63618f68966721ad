"""Searcher operations carried out on the real state machine in moto: pause a trial, resume it from a
promotion in a new execution, stop another early, close the experiment, and apply checkpoint retention.

A scripted searcher stands in for ASHA so the test states exactly which operation comes when."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from chalicelib.domain import searchers
from chalicelib.domain.searchers.base import SearcherBase
from chalicelib.services import runs, trial_reports

pytestmark = pytest.mark.aws


@dataclass
class Scripted(SearcherBase):
    """Two trials to 10; the first result pauses its trial, the second promotes the first to 20 and
    stops its own trial; shut down when both have exited."""

    spec: searchers.SearchSpec | None = None
    name: str = "random"
    results: list[int] = field(default_factory=list)

    def initial_operations(self) -> list[Any]:
        return (
            []
            if self.trials
            else [searchers.CreateTrial("a", {"x": 1}, 10), searchers.CreateTrial("b", {"x": 2}, 10)]
        )

    def on_event(self, event: Any) -> list[Any]:
        if not self._first_time(event.event_id):
            return []
        if isinstance(event, searchers.TrialCreated):
            self.trials[event.request_id] = event.trial_id
        elif isinstance(event, searchers.ValidationReported) and event.length == 10:
            self.results.append(event.trial_id)
            if len(self.results) == 1:
                return [searchers.PauseTrial(event.trial_id)]
            return [searchers.ContinueTrial(self.results[0], 20), searchers.StopTrial(event.trial_id)]
        elif isinstance(event, searchers.TrialExited):
            self.exited[event.trial_id] = event.failed
            if len(self.exited) == 2:
                return [searchers.Shutdown()]
        return []

    def progress(self) -> float:
        return len(self.exited) / 2

    def snapshot(self) -> dict[str, Any]:
        return {
            "name": "random",
            "seen": self.seen_events,
            "trials": self.trials,
            "exited": {str(k): v for k, v in self.exited.items()},
            "results": self.results,
        }

    @classmethod
    def restore(cls, snapshot: dict[str, Any], spec: searchers.SearchSpec) -> Scripted:
        return cls(
            spec=spec,
            seen_events=list(snapshot["seen"]),
            trials=dict(snapshot["trials"]),
            exited={int(k): v for k, v in snapshot["exited"].items()},
            results=list(snapshot["results"]),
        )


CONFIG = {
    "name": "scripted",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "random", "metric": "loss", "max_trials": 2, "max_length": {"batches": 20}},
    "hyperparameters": {"x": {"type": "int", "minval": 1, "maxval": 2}},
    "checkpoint_storage": {"save_trial_latest": 1, "save_trial_best": 1, "save_experiment_best": 0},
}


def _launched(stack, agent: str) -> dict[str, dict]:
    return {s["trial_id"]: s for s in runs.heartbeat(stack.ports, agent, "default", 2, [])["launch"]}


def _two_started_trials(stack) -> tuple[Any, tuple[int, int], tuple[Any, Any]]:
    """CONFIG's experiment with its two trials launched on one 2-slot agent and started: the experiment,
    the trial ids (A first) and their runs."""
    p = stack.ports
    experiment = stack.submit_experiment(CONFIG)
    runs.heartbeat(p, "agent", "default", 2, [])
    stack.pump_until(lambda: len([r for r in p.runs.for_agent("agent") if r.state == "LAUNCHING"]) == 2)
    specs = _launched(stack, "agent")
    first, second = sorted(specs)
    run_a, run_b = p.runs.get(specs[first]["run_id"]), p.runs.get(specs[second]["run_id"])
    for run in (run_a, run_b):
        runs.started(p, "agent", run.run_id, 1)
    return experiment, (first, second), (run_a, run_b)


def _checkpoint(stack, run, steps: int) -> str:
    import uuid as uuidlib

    uuid = str(uuidlib.uuid4())
    s3 = stack.client("s3")
    prefix = f"checkpoints/{run.experiment_id}/{run.trial_id}/{uuid}/"
    s3.put_object(Bucket=stack.names.bucket, Key=prefix + "model.pt", Body=b"w")
    s3.put_object(Bucket=stack.names.bucket, Key=prefix + "metadata.json", Body=b"{}")
    trial_reports.report_checkpoint(
        stack.ports, run, uuid, steps, {"model.pt": 1}, {"steps_completed": steps}
    )
    return uuid


def test_pause_promote_stop_and_retention(stack, monkeypatch):
    monkeypatch.setitem(searchers.SEARCHERS, "random", Scripted)
    p = stack.ports

    experiment, (first, second), (run_a, run_b) = _two_started_trials(stack)

    # Trial A reaches its rung first: the searcher pauses it; it is told to stop and exits cleanly.
    assert trial_reports.searcher_state(p, run_a) == {"action": "train", "length": 10, "unit": "batches"}
    trial_reports.report_metrics(p, run_a, "validation", 10, {"loss": 0.3})
    assert trial_reports.searcher_state(p, run_a)["action"] in ("wait", "stop")
    stack.pump_until(lambda: trial_reports.searcher_state(p, run_a)["action"] == "stop")
    assert trial_reports.heartbeat(p, run_a) == {"preempt": True}
    runs.exited(p, "agent", run_a.run_id, 0, "exited with code 0")
    stack.pump_until(lambda: p.trials.get(first).state == "PAUSED")

    # Trial B: three checkpoints, then its result promotes A (a new run of A) and stops B early.
    uuids = {steps: _checkpoint(stack, run_b, steps) for steps in (4, 8, 10)}
    trial_reports.report_metrics(p, run_b, "validation", 4, {"loss": 0.1})
    trial_reports.report_metrics(p, run_b, "validation", 10, {"loss": 0.4})
    stack.pump_until(lambda: trial_reports.searcher_state(p, run_b)["action"] == "stop")
    stack.pump_until(
        lambda: (
            any(r.state == "LAUNCHING" for r in p.runs.for_agent("agent"))
            or p.trials.get(first).state == "PULLING"
        ),
    )
    assert p.trials.get(second).early_stopped is True
    runs.exited(p, "agent", run_b.run_id, 0, "exited with code 0")

    resumed = _launched(stack, "agent")[first]
    assert resumed["run_id"] == f"{first}.2"  # the same trial, its second run
    run_a2 = p.runs.get(resumed["run_id"])
    runs.started(p, "agent", run_a2.run_id, 2)
    assert trial_reports.searcher_state(p, run_a2) == {"action": "train", "length": 20, "unit": "batches"}
    trial_reports.report_metrics(p, run_a2, "validation", 20, {"loss": 0.2})
    stack.pump_until(
        lambda: trial_reports.searcher_state(p, run_a2)["action"] == "stop"
    )  # last target reached
    runs.exited(p, "agent", run_a2.run_id, 0, "exited with code 0")
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED", timeout=60)
    assert p.trials.get(first).state == "COMPLETED" and not p.trials.get(first).early_stopped

    # Retention: B keeps its latest (10) and its best (4, loss 0.1); 8 is deleted from S3.
    states = {c.steps_completed: c.state for c in p.checkpoints.for_trial(second)}
    assert states == {4: "COMPLETED", 8: "DELETED", 10: "COMPLETED"}
    listed = stack.client("s3").list_objects_v2(Bucket=stack.names.bucket, Prefix="checkpoints/")["Contents"]
    assert not any(uuids[8] in o["Key"] for o in listed)
    assert any(uuids[4] in o["Key"] for o in listed)


def test_a_trial_is_created_once_per_request_id(stack):
    ids = stack.ports.ids
    first = ids.claim("trial-request:1:r-0", "trial")
    assert ids.claim("trial-request:1:r-0", "trial") == first
    assert ids.claim("trial-request:1:r-1", "trial") != first


def test_a_promotion_that_arrives_while_the_trial_is_pausing_resumes_it(stack, monkeypatch):
    monkeypatch.setitem(searchers.SEARCHERS, "random", Scripted)
    p = stack.ports

    _, (first, _), (run_a, run_b) = _two_started_trials(stack)

    trial_reports.report_metrics(p, run_a, "validation", 10, {"loss": 0.3})
    stack.pump_until(lambda: trial_reports.searcher_state(p, run_a)["action"] == "stop")  # A is told to pause
    trial_reports.report_metrics(
        p, run_b, "validation", 10, {"loss": 0.4}
    )  # ... and is promoted before it exits
    stack.pump_until(lambda: p.trials.get(first).target_length == 20)
    runs.exited(p, "agent", run_a.run_id, 0, "exited with code 0")
    stack.pump_until(lambda: any(r.run_id == f"{first}.2" for r in p.runs.for_agent("agent")))
    assert _launched(stack, "agent")[first]["run_id"] == f"{first}.2"


def test_an_invalid_hp_trial_is_replaced_by_the_random_searcher(stack):
    p = stack.ports

    config = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1, "max_concurrent_trials": 1}}
    experiment = stack.submit_experiment(config)
    runs.heartbeat(p, "agent", "default", 1, [])
    stack.pump_until(lambda: any(r.state == "LAUNCHING" for r in p.runs.for_agent("agent")))
    (spec,) = _launched(stack, "agent").values()
    first = p.runs.get(spec["run_id"])
    runs.started(p, "agent", first.run_id, 1)
    trial_reports.report_invalid_hp(p, first, "hidden_size too small")
    runs.exited(p, "agent", first.run_id, 0, "exited with code 0")
    stack.pump_until(lambda: len(p.trials.for_experiment(experiment.id)) == 2)
    assert p.trials.get(first.trial_id).exit_reason == "invalid hyperparameters: hidden_size too small"

    stack.pump_until(lambda: any(r.state == "LAUNCHING" for r in p.runs.for_agent("agent")))
    (spec,) = _launched(stack, "agent").values()
    assert spec["trial_id"] != first.trial_id
    runs.started(p, "agent", spec["run_id"], 2)
    runs.exited(p, "agent", spec["run_id"], 0, "exited with code 0")
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED")


HYPERBAND = {
    **CONFIG,
    "name": "hyperband",
    # R = 3, eta = 3, cut at 2 configurations: one bracket, both trials to 1, the better one on to 3.
    "searcher": {"name": "hyperband", "metric": "loss", "max_trials": 2, "max_length": {"batches": 3}},
}


def test_hyperband_resumes_the_better_trial_from_its_checkpoint_and_closes_the_other(stack):
    p = stack.ports
    experiment = stack.submit_experiment(HYPERBAND)
    runs.heartbeat(p, "agent", "default", 2, [])
    stack.pump_until(lambda: len([r for r in p.runs.for_agent("agent") if r.state == "LAUNCHING"]) == 2)
    specs = _launched(stack, "agent")
    first, second = sorted(specs)
    run_a, run_b = p.runs.get(specs[first]["run_id"]), p.runs.get(specs[second]["run_id"])
    for run in (run_a, run_b):
        runs.started(p, "agent", run.run_id, 1)
        assert trial_reports.searcher_state(p, run) == {"action": "train", "length": 1, "unit": "batches"}

    # A reaches rung 0 first: paused until the rung is complete; it checkpoints and exits.
    uuid = _checkpoint(stack, run_a, 1)
    trial_reports.report_metrics(p, run_a, "validation", 1, {"loss": 0.1})
    stack.pump_until(lambda: trial_reports.searcher_state(p, run_a)["action"] == "stop")
    runs.exited(p, "agent", run_a.run_id, 0, "exited with code 0")
    stack.pump_until(lambda: p.trials.get(first).state == "PAUSED")

    # B completes the rung and loses: B is stopped, A continues to 3 from its checkpoint in a new run.
    trial_reports.report_metrics(p, run_b, "validation", 1, {"loss": 0.5})
    stack.pump_until(lambda: trial_reports.searcher_state(p, run_b)["action"] == "stop")
    runs.exited(p, "agent", run_b.run_id, 0, "exited with code 0")
    stack.pump_until(lambda: any(r.run_id == f"{first}.2" for r in p.runs.for_agent("agent")))
    resumed = _launched(stack, "agent")[first]
    assert resumed["environment"]["STRATUS_LATEST_CHECKPOINT"] == uuid
    run_a2 = p.runs.get(resumed["run_id"])
    runs.started(p, "agent", run_a2.run_id, 2)
    assert trial_reports.searcher_state(p, run_a2) == {"action": "train", "length": 3, "unit": "batches"}
    trial_reports.report_metrics(p, run_a2, "validation", 3, {"loss": 0.05})
    stack.pump_until(lambda: trial_reports.searcher_state(p, run_a2)["action"] == "stop")
    runs.exited(p, "agent", run_a2.run_id, 0, "exited with code 0")
    stack.pump_until(lambda: p.experiments.get(experiment.id).state == "COMPLETED", timeout=60)
    assert p.trials.get(second).early_stopped is True and p.trials.get(first).early_stopped is False

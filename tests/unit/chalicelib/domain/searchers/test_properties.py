"""Every searcher, driven by a simulated cluster through random interleavings of events.

The cluster carries out the searcher's operations (creates trials, resumes, pauses and stops them) and
the test draws what happens next: a trial is created, reports a validation at some length, exits
(normally, failed, or with invalid_hp), an event is delivered twice, or the searcher is snapshotted and
restored. Whatever the order, a searcher must stay within max_trials (plus invalid_hp replacements) and
max_concurrent_trials, answer identically after a restore, and shut down once every trial has exited.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain import hparams, searchers
from chalicelib.domain.searchers.hyperband_plan import plan as hyperband_plan

RUNNING, PAUSED, STOPPING, EXITED = "running", "paused", "stopping", "exited"
CLOSING = "closing"  # stopped while paused: the service closes it, no slot held
METRICS = st.one_of(st.sampled_from([0.0, 0.5, 0.5, 1.0]), st.floats(-100, 100, allow_nan=False))


ALL_SEARCHERS = ("grid", "random", "tpe", "adaptive_asha", "adaptive_asha", "hyperband", "bohb")


@st.composite
def specs(draw: st.DrawFn, names: tuple[str, ...] = ALL_SEARCHERS) -> searchers.SearchSpec:
    name = draw(st.sampled_from(names))
    mct = draw(st.integers(0, 4))
    settings_: dict[str, Any] = {"name": name, "metric": "m", "max_concurrent_trials": mct}
    settings_["smaller_is_better"] = draw(st.booleans())
    space: dict[str, Any] = {
        "x": {"type": "double", "minval": -1, "maxval": 1},
        "c": {"type": "const", "val": 1},
    }
    max_length: int | None = draw(st.sampled_from([1, 8, 16, 100]))
    if name == "grid":
        space["x"]["count"] = draw(st.integers(1, 3))
        space["g"] = {"k": {"type": "int", "minval": 0, "maxval": 3, "count": draw(st.integers(1, 3))}}
        if draw(st.booleans()):
            max_length = None
    else:
        settings_["max_trials"] = draw(st.integers(1, 8 if name == "tpe" else 12))
    if name == "adaptive_asha":
        settings_["divisor"] = draw(st.sampled_from([2, 3, 4, 1.5]))
        settings_["max_rungs"] = draw(st.integers(1, 4))
        settings_["mode"] = draw(st.sampled_from(["aggressive", "standard", "conservative"]))
        settings_["stop_once"] = draw(st.booleans())
    if name in ("hyperband", "bohb"):
        settings_["divisor"] = draw(st.sampled_from([2, 3, 2.5]))
        if draw(st.booleans()):
            settings_.pop("max_trials")
            settings_["iterations"] = draw(st.integers(1, 2))
            max_length = draw(st.sampled_from([1, 4, 9]))
        if name == "bohb":
            settings_["random_fraction"] = draw(st.sampled_from([0.0, 0.3]))
            settings_["num_samples"] = 8
    return searchers.SearchSpec(
        space=space, settings=settings_, max_length=max_length, seed=draw(st.integers(0, 99))
    )


@dataclass
class SimTrial:
    trial_id: int
    request_id: str
    target: int
    status: str = RUNNING
    length: int = 0


class Cluster:
    """Carries out a searcher's operations and checks its promises after each answer."""

    def __init__(self, spec: searchers.SearchSpec) -> None:
        self.spec = spec
        self.searcher: searchers.Searcher = searchers.new_searcher(spec)
        self.shadow: searchers.Searcher | None = (
            None  # a restored copy that must answer the next event the same
        )
        self.pending: list[searchers.CreateTrial] = []
        self.trials: dict[int, SimTrial] = {}
        self.request_ids: set[str] = set()
        self.delivered: list[searchers.Event] = []
        self.invalid = 0
        self.shutdowns = 0
        self.events = 0
        if spec.settings["name"] == "grid":
            self.budget = len(hparams.grid_points(spec.space))
        elif spec.settings["name"] in ("hyperband", "bohb"):
            self.budget = sum(b.num_trials for b in hyperband_plan(spec))
        else:
            self.budget = int(spec.settings["max_trials"])
        self.apply(self.searcher.initial_operations())
        assert self.searcher.initial_operations() == []

    def active(self) -> int:
        return len(self.pending) + sum(1 for t in self.trials.values() if t.status in (RUNNING, STOPPING))

    def apply(self, ops: list[searchers.Operation]) -> None:
        for op in ops:
            assert self.shutdowns == 0, f"{op} after shutdown"
            if isinstance(op, searchers.CreateTrial):
                assert op.request_id not in self.request_ids
                self.request_ids.add(op.request_id)
                self.pending.append(op)
                continue
            if isinstance(op, searchers.Shutdown):
                self.shutdowns += 1
                assert self.active() == 0
                continue
            trial = self.trials[op.trial_id]
            if isinstance(op, searchers.ContinueTrial):
                assert trial.status in (RUNNING, PAUSED) and op.length > trial.length
                trial.status, trial.target = RUNNING, op.length
            elif isinstance(op, searchers.PauseTrial):
                assert trial.status == RUNNING
                trial.status = PAUSED
            elif isinstance(op, searchers.StopTrial):
                assert trial.status in (RUNNING, PAUSED)
                trial.status = STOPPING if trial.status == RUNNING else CLOSING
        assert len(self.request_ids) <= self.budget + self.invalid
        mct = int(self.spec.settings["max_concurrent_trials"])
        if mct > 0:
            assert self.active() <= mct

    def deliver(self, event: searchers.Event) -> list[searchers.Operation]:
        shadow_ops = self.shadow.on_event(event) if self.shadow is not None else None
        ops = self.searcher.on_event(event)
        if self.shadow is not None:
            assert shadow_ops == ops
            assert self.shadow.snapshot() == self.searcher.snapshot()
            assert self.shadow.progress() == self.searcher.progress()
            self.searcher, self.shadow = self.shadow, None  # carry on with the restored one
        self.delivered.append(event)
        assert 0.0 <= self.searcher.progress() <= 1.0
        self.apply(ops)
        return ops

    def event_id(self) -> str:
        self.events += 1
        return f"ev-{self.events}"

    # ---- what can happen ----------------------------------------------------------------------------

    def create(self, index: int) -> None:
        op = self.pending.pop(index % len(self.pending))
        trial_id = 1000 + len(self.trials)
        self.trials[trial_id] = SimTrial(trial_id, op.request_id, op.length or 10)
        self.deliver(searchers.TrialCreated(f"created-{op.request_id}", op.request_id, trial_id))

    def validate(self, trial: SimTrial, length: int, metric: float) -> None:
        trial.length = max(trial.length, length)
        ops = self.deliver(searchers.ValidationReported(self.event_id(), trial.trial_id, length, metric))
        answered = any(getattr(op, "trial_id", None) == trial.trial_id for op in ops)
        if trial.status == RUNNING and length >= trial.target and not answered:
            trial.status = STOPPING  # reached its target and no word: the service stops it

    def exit(self, trial: SimTrial, kind: str) -> None:
        trial.status = EXITED
        self.invalid += kind == "invalid"
        self.deliver(
            searchers.TrialExited(
                self.event_id(), trial.trial_id, failed=kind == "failed", invalid_hp=kind == "invalid"
            )
        )

    def duplicate(self, index: int) -> None:
        before = self.searcher.snapshot()
        assert self.searcher.on_event(self.delivered[index % len(self.delivered)]) == []
        assert self.searcher.snapshot() == before

    def restore(self) -> None:
        snapshot = json.loads(json.dumps(self.searcher.snapshot(), allow_nan=False))
        self.shadow = searchers.restore_searcher(snapshot, self.spec)
        assert self.shadow.snapshot() == snapshot == self.searcher.snapshot()
        assert self.shadow.initial_operations() == []

    def drain(self, rng: random.Random) -> None:
        """Every trial runs to the searcher's end: report at the target, exit when told to."""
        for _ in range(5000):
            running = [t for t in self.trials.values() if t.status == RUNNING]
            stopping = [t for t in self.trials.values() if t.status in (STOPPING, CLOSING)]
            if self.pending:
                self.create(0)
            elif running and running[0].length < running[0].target:
                self.validate(running[0], running[0].target, rng.choice([0.1, 0.2, 0.3, rng.random()]))
            elif running or stopping:
                self.exit((running or stopping)[0], "normal")
            else:
                break
        assert self.active() == 0
        assert self.shutdowns == 1, "the searcher did not shut down once every trial had exited"
        assert self.searcher.progress() == 1.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(), data=st.data())
def test_searchers_keep_their_promises_under_any_interleaving(
    spec: searchers.SearchSpec, data: st.DataObject
) -> None:
    run_interleaving(spec, data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs(names=("hyperband", "bohb")), data=st.data())
def test_hyperband_and_bohb_keep_their_promises_under_any_interleaving(
    spec: searchers.SearchSpec, data: st.DataObject
) -> None:
    run_interleaving(spec, data)


def run_interleaving(spec: searchers.SearchSpec, data: st.DataObject) -> None:
    cluster = Cluster(spec)
    for _ in range(data.draw(st.integers(0, 40), label="steps")):
        if cluster.shutdowns:
            break
        running = [t for t in cluster.trials.values() if t.status == RUNNING]
        choices = ["restore"]
        if cluster.pending:
            choices += ["create", "create", "create"]
        if running:
            choices += ["validate", "validate", "validate", "exit"]
        if any(t.status in (STOPPING, PAUSED, CLOSING) for t in cluster.trials.values()):
            choices += ["exit_other"]
        if cluster.delivered:
            choices += ["duplicate"]
        action = data.draw(st.sampled_from(choices), label="action")
        if action == "create":
            cluster.create(data.draw(st.integers(0, 100)))
        elif action == "validate":
            trial = data.draw(st.sampled_from(running))
            length = data.draw(st.one_of(st.just(trial.target), st.integers(1, 2 * trial.target)))
            cluster.validate(trial, length, data.draw(METRICS))
        elif action == "exit":
            kind = data.draw(st.sampled_from(["normal", "failed", "invalid"]))
            cluster.exit(data.draw(st.sampled_from(running)), kind)
        elif action == "exit_other":  # a stopped trial ends, or a paused one is killed
            others = [t for t in cluster.trials.values() if t.status in (STOPPING, PAUSED, CLOSING)]
            cluster.exit(data.draw(st.sampled_from(others)), data.draw(st.sampled_from(["normal", "failed"])))
        elif action == "duplicate":
            cluster.duplicate(data.draw(st.integers(0, 1000)))
        else:
            cluster.restore()
    cluster.shadow = None if cluster.shutdowns else cluster.shadow
    cluster.drain(random.Random(data.draw(st.integers(0, 1000), label="drain seed")))

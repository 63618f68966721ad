"""`hyperband` and `bohb` with `until_stopped` (an NNI Hyperband / BOHB config without
`maxTrialNumber`): Hyperband's iterations repeat, `max_concurrent_trials` trials at a time, and the
search never ends by itself. Under any interleaving of results, exits (normal, failed, invalid_hp),
duplicates and restores the searcher keeps its slots full, shows no progress, never shuts down and
answers identically after a restore; over many iterations its snapshot stays bounded (finished brackets
are forgotten, BOHB keeps a window of their results for its model).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.config import parse_experiment_config, translate_nni
from chalicelib.domain import searchers
from chalicelib.domain.searchers.base import DEFAULT_MAX_CONCURRENT_TRIALS
from chalicelib.domain.searchers.bohb import ARCHIVED_PER_LENGTH
from chalicelib.services.searching import search_spec

SPACE = {
    "x": {"type": "double", "minval": -1, "maxval": 1},
    "y": {"type": "log", "minval": -3, "maxval": 0, "base": 10},
    "n": {"type": "int", "minval": 1, "maxval": 8},
    "c": {"type": "categorical", "vals": ["a", "b", "c"]},
}
MAX_SNAPSHOT_BYTES = 400_000 // 4  # a quarter of a DynamoDB item


def until_stopped_spec(
    name: str, concurrency: int, max_length: int = 9, eta: float = 3
) -> searchers.SearchSpec:
    settings_: dict[str, Any] = {
        "name": name,
        "metric": "m",
        "smaller_is_better": True,
        "until_stopped": True,
        "max_trials": None,
        "iterations": None,
        "divisor": eta,
        "max_concurrent_trials": concurrency,
    }
    return searchers.SearchSpec(space=SPACE, settings=settings_, max_length=max_length, seed=3)


class Cluster:
    """Carries out a searcher's operations as the service does: a created or continued trial runs to its
    target, a paused one waits without a slot, a stopped running one exits when told to, a stopped
    paused one is closed at once (its exit is delivered)."""

    def __init__(self, searcher: searchers.HyperbandSearcher) -> None:
        self.searcher = searcher
        self.targets: dict[int, int] = {}
        self.running: list[int] = []  # holding a slot (stop-pending ones included)
        self.paused: set[int] = set()
        self.events = 0
        self.last_event: searchers.Event | None = None
        self.first_targets: list[int] = []  # each created trial's first target, in order
        self.carry_out(searcher.initial_operations())

    def deliver(self, event: searchers.Event) -> None:
        self.last_event = event
        self.carry_out(self.searcher.on_event(event))

    def carry_out(self, ops: list[searchers.Operation]) -> None:
        closed: deque[int] = deque()
        for op in ops:
            assert not isinstance(op, searchers.Shutdown), "an endless search shut down"
            if isinstance(op, searchers.CreateTrial):
                trial_id = 1000 + len(self.targets)
                self.targets[trial_id] = int(op.length or 0)
                self.first_targets.append(int(op.length or 0))
                self.running.append(trial_id)
                created = searchers.TrialCreated(f"created-{trial_id}", op.request_id, trial_id)
                assert self.searcher.on_event(created) == []
            elif isinstance(op, searchers.ContinueTrial):
                self.targets[op.trial_id] = op.length
                if op.trial_id in self.paused:
                    self.paused.remove(op.trial_id)
                    self.running.append(op.trial_id)
            elif isinstance(op, searchers.PauseTrial):
                self.running.remove(op.trial_id)
                self.paused.add(op.trial_id)
            elif isinstance(op, searchers.StopTrial) and op.trial_id in self.paused:
                self.paused.remove(op.trial_id)
                closed.append(op.trial_id)
        for trial_id in closed:
            self.exit(trial_id, failed=False, invalid_hp=False)

    def report(self, trial_id: int, metric: float) -> None:
        self.events += 1
        self.deliver(
            searchers.ValidationReported(f"v-{self.events}", trial_id, self.targets[trial_id], metric)
        )

    def exit(self, trial_id: int, *, failed: bool, invalid_hp: bool) -> None:
        if trial_id in self.running:
            self.running.remove(trial_id)
        self.events += 1
        self.deliver(searchers.TrialExited(f"x-{self.events}", trial_id, failed, invalid_hp))


def new_hyperband(spec: searchers.SearchSpec) -> searchers.HyperbandSearcher:
    searcher = searchers.new_searcher(spec)
    assert isinstance(searcher, searchers.HyperbandSearcher)  # BOHB's is one too
    return searcher


def restored(
    searcher: searchers.HyperbandSearcher, spec: searchers.SearchSpec
) -> searchers.HyperbandSearcher:
    snapshot = json.loads(json.dumps(searcher.snapshot(), allow_nan=False))
    copy = searchers.restore_searcher(snapshot, spec)
    assert isinstance(copy, type(searcher))
    assert copy.snapshot() == searcher.snapshot() and copy.initial_operations() == []
    return copy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["hyperband", "hyperband", "bohb"]),
    concurrency=st.integers(0, 4),
    steps=st.lists(
        st.tuples(
            st.sampled_from(["report", "report", "report", "exit", "again", "restore"]), st.integers(0, 99)
        ),
        max_size=60,
    ),
)
def test_an_endless_hyperband_keeps_its_slots_full_and_never_shuts_down(
    name: str, concurrency: int, steps: list[tuple[str, int]]
) -> None:
    spec = until_stopped_spec(name, concurrency)
    limit = concurrency or DEFAULT_MAX_CONCURRENT_TRIALS
    cluster = Cluster(new_hyperband(spec))
    assert len(cluster.running) == limit
    for action, pick in steps:
        trial_id = cluster.running[pick % len(cluster.running)]
        if action == "report":
            cluster.report(trial_id, pick / 10)
        elif action == "exit":
            cluster.exit(trial_id, failed=pick % 3 == 1, invalid_hp=pick % 3 == 2)
        elif action == "again" and cluster.last_event is not None:
            before = cluster.searcher.snapshot()
            assert cluster.searcher.on_event(cluster.last_event) == []
            assert cluster.searcher.snapshot() == before
        else:
            cluster.searcher = restored(cluster.searcher, spec)
        assert len(cluster.running) == limit
        assert cluster.searcher.progress() is None  # no end known: blank, not 0%
        assert not cluster.searcher.shut_down


def run_iterations(
    name: str, iterations: int, sizes: list[int] | None = None, max_length: int = 27
) -> Cluster:
    """Every running trial reports at its target in turn (a stopped one then exits), until `iterations`
    Hyperband iterations have opened; `sizes` gets the snapshot's size after each result."""
    spec = until_stopped_spec(name, 4, max_length=max_length)
    cluster = Cluster(new_hyperband(spec))
    per_iteration = len(cluster.searcher.brackets)
    step = 0
    while cluster.searcher.next_bracket <= iterations * per_iteration:
        step += 1
        trial_id = cluster.running[0]
        cluster.report(trial_id, ((step * 7919) % 1000) / 1000)
        if trial_id in cluster.running:  # stopped (top rung, or the rung decided against it): it exits
            cluster.exit(trial_id, failed=False, invalid_hp=False)
        if sizes is not None:
            sizes.append(len(json.dumps(cluster.searcher.snapshot())))
        if step % 500 == 0:
            cluster.searcher = restored(cluster.searcher, spec)
    return cluster


def test_the_iterations_repeat_the_brackets_of_li_et_al() -> None:
    cluster = run_iterations("hyperband", 3)
    brackets = cluster.searcher.brackets
    # R = 27, eta = 3: brackets s = 3..0 start 27 at 1, 12 at 3, 6 at 9 and 4 at 27, every iteration.
    assert sorted((b.num_trials, b.targets[0]) for b in brackets) == [(4, 27), (6, 9), (12, 3), (27, 1)]
    one_iteration = [b.targets[0] for b in brackets for _ in range(b.num_trials)]
    assert cluster.first_targets[: 3 * len(one_iteration)] == one_iteration * 3


# R = 27: 49 configurations an iteration; R = 9: 17, and BOHB's window of the 5 results at length 9
# of each iteration is full after 20 iterations, in the middle third of the run.
@pytest.mark.parametrize(
    ("name", "max_length", "iterations", "per_iteration"), [("hyperband", 27, 12, 49), ("bohb", 9, 40, 17)]
)
def test_the_snapshot_stays_bounded_over_many_iterations(
    name: str, max_length: int, iterations: int, per_iteration: int
) -> None:
    sizes: list[int] = []
    cluster = run_iterations(name, iterations, sizes, max_length)
    assert len(cluster.first_targets) > iterations * per_iteration  # every iteration's configurations
    settled = max(sizes[len(sizes) // 3 : 2 * len(sizes) // 3])
    assert max(sizes[2 * len(sizes) // 3 :]) <= settled * 1.05  # no growth with the iterations
    assert max(sizes) < MAX_SNAPSHOT_BYTES
    snapshot = cluster.searcher.snapshot()
    assert len(snapshot["requests"]) < 60 and len(snapshot["open_brackets"]) <= 6
    assert len(snapshot["seen_events"]) <= 512 and len(snapshot["trials"]) < 60
    if name == "bohb":  # the model still sees a window of the forgotten brackets' results
        assert all(len(rows) == ARCHIVED_PER_LENGTH for rows in snapshot["archive"].values())
        assert sorted(int(length) for length in snapshot["archive"]) == [1, 3, 9]


def test_a_duplicate_of_a_forgotten_trials_event_changes_nothing() -> None:
    spec = until_stopped_spec("hyperband", 2, max_length=3)
    cluster = Cluster(new_hyperband(spec))
    first = cluster.running[0]
    while cluster.searcher.next_bracket < 6:
        trial_id = cluster.running[0]
        cluster.report(trial_id, 0.5)
        if trial_id in cluster.running:
            cluster.exit(trial_id, failed=False, invalid_hp=False)
    assert all(t["trial_id"] != first for t in cluster.searcher.snapshot()["requests"])  # forgotten
    before = cluster.searcher.snapshot()
    for event in (
        searchers.ValidationReported("late-v", first, 3, 0.1),
        searchers.TrialExited("late-x", first, failed=True),
    ):
        assert cluster.searcher.on_event(event) == []
    assert {k: v for k, v in cluster.searcher.snapshot().items() if k != "seen_events"} == {
        k: v for k, v in before.items() if k != "seen_events"
    }


# ---- the config ------------------------------------------------------------------------------------


def hyperband_config(**searcher: Any) -> dict[str, Any]:
    return {
        "name": "hb",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "hyperband", "metric": "loss", "max_length": {"batches": 9}, **searcher},
        "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}},
    }


def test_until_stopped_excludes_a_trial_budget_and_needs_a_concurrency() -> None:
    built = search_spec(parse_experiment_config(hyperband_config(until_stopped=True)).config)
    searcher = searchers.new_searcher(built)
    assert built.settings["until_stopped"] is True and searcher.progress() is None
    for extra, where in (
        ({"max_trials": 10}, "set either max_trials or until_stopped"),
        ({"iterations": 2}, "set either iterations or until_stopped"),
        ({"max_concurrent_trials": 0}, "must be at least 1 with until_stopped"),
    ):
        with pytest.raises(Exception, match=where):
            parse_experiment_config(hyperband_config(until_stopped=True, **extra))


@pytest.mark.parametrize(
    ("tuner", "class_args"),
    [("Hyperband", {"R": 9, "eta": 3}), ("BOHB", {"min_budget": 1, "max_budget": 9, "eta": 3})],
)
def test_an_nni_hyperband_or_bohb_config_without_max_trial_number_runs_until_stopped(
    tuner: str, class_args: dict[str, Any]
) -> None:
    translated = translate_nni(
        {
            "searchSpace": {"lr": {"_type": "loguniform", "_value": [0.001, 0.1]}},
            "trialCommand": "python3 train.py",
            "trialConcurrency": 2,
            "tuner": {"name": tuner, "classArgs": {"optimize_mode": "maximize", **class_args}},
        }
    )
    searcher = translated.config["searcher"]
    assert searcher["until_stopped"] is True and "max_trials" not in searcher
    assert searcher["max_concurrent_trials"] == 2
    assert any("until the experiment is stopped" in w for w in map(str, translated.warnings))
    spec = search_spec(parse_experiment_config(translated.config).config)
    cluster = Cluster(new_hyperband(spec))
    assert len(cluster.running) == 2

from __future__ import annotations

import random

from chalicelib.domain import hparams, searchers

SPACE = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "layers": {"type": "int", "minval": 1, "maxval": 3},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
    "opt": {"beta": {"type": "double", "minval": 0.8, "maxval": 0.99}, "name": "adam"},
    "batch_size": 32,
    "const": {"type": "const", "val": 7},
}
SPEC = searchers.SearchSpec(
    space=SPACE, settings={"name": "single", "metric": "loss"}, max_length=100, seed=1
)


def test_sampling_follows_determineds_rules_and_is_reproducible():
    a = hparams.sample(SPACE, random.Random(5))
    assert a == hparams.sample(SPACE, random.Random(5))
    assert 1e-4 <= a["lr"] <= 1e-1
    assert a["layers"] in (1, 2, 3)
    assert a["act"] in ("relu", "tanh")
    assert 0.8 <= a["opt"]["beta"] <= 0.99 and a["opt"]["name"] == "adam"
    assert a["batch_size"] == 32 and a["const"] == 7
    ints = {
        hparams.sample_leaf({"type": "int", "minval": 1, "maxval": 3}, random.Random(s)) for s in range(60)
    }
    assert ints == {1, 2, 3}  # inclusive bounds


def test_single_creates_one_trial_to_max_length_then_shuts_down_once():
    searcher = searchers.new_searcher(SPEC)
    ops = searcher.initial_operations()
    assert len(ops) == 1 and isinstance(ops[0], searchers.CreateTrial) and ops[0].length == 100
    assert searcher.on_event(searchers.TrialCreated("created-single-0", "single-0", 11)) == []
    assert searcher.initial_operations() == []  # already created: a replayed start creates nothing
    assert searcher.on_event(searchers.ValidationReported("v-11-100", 11, 100, 0.5)) == []
    assert searcher.on_event(searchers.TrialExited("exit-11.1", 11, failed=False)) == [
        searchers.Shutdown(failure=False)
    ]
    assert searcher.on_event(searchers.TrialExited("exit-11.1", 11, failed=False)) == []  # duplicate delivery
    assert searcher.progress() == 1.0


def test_single_reports_failure_and_snapshot_round_trips():
    searcher = searchers.new_searcher(SPEC)
    searcher.initial_operations()
    searcher.on_event(searchers.TrialCreated("c", "single-0", 4))
    restored = searchers.restore_searcher(searcher.snapshot(), SPEC)
    assert restored.snapshot() == searcher.snapshot()
    assert restored.on_event(searchers.TrialExited("exit-4.2", 4, failed=True)) == [
        searchers.Shutdown(failure=True)
    ]

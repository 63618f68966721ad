"""`random` and `tpe` with `until_stopped` (an NNI config without `maxTrialNumber`): under any
interleaving of creations, validations, exits (normal, failed, invalid_hp) and restores, the searcher
keeps exactly `max_concurrent_trials` trials running (its default when 0), never shuts down by itself,
shows no progress (no end is known) and answers identically after a restore.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.domain import searchers
from chalicelib.domain.searchers.base import DEFAULT_MAX_CONCURRENT_TRIALS

SPACE = {"x": {"type": "double", "minval": -1, "maxval": 1}, "c": {"type": "const", "val": 1}}


def until_stopped_spec(name: str, concurrency: int, seed: int = 0) -> searchers.SearchSpec:
    settings_: dict[str, Any] = {
        "name": name,
        "metric": "m",
        "smaller_is_better": True,
        "until_stopped": True,
        "max_trials": None,
        "max_concurrent_trials": concurrency,
    }
    return searchers.SearchSpec(space=SPACE, settings=settings_, max_length=10, seed=seed)


def restored(searcher: searchers.Searcher, spec: searchers.SearchSpec) -> searchers.Searcher:
    snapshot = json.loads(json.dumps(searcher.snapshot(), allow_nan=False))
    copy = searchers.restore_searcher(snapshot, spec)
    assert copy.snapshot() == searcher.snapshot() and copy.initial_operations() == []
    return copy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(["random", "random", "tpe"]),
    concurrency=st.integers(0, 3),
    steps=st.lists(
        st.tuples(st.sampled_from(["validate", "exit", "restore"]), st.integers(0, 99)), max_size=25
    ),
)
def test_an_endless_search_keeps_its_concurrency_and_never_shuts_down(
    name: str, concurrency: int, steps: list[tuple[str, int]]
) -> None:
    spec = until_stopped_spec(name, concurrency)
    limit = concurrency or DEFAULT_MAX_CONCURRENT_TRIALS
    searcher = searchers.new_searcher(spec)
    running: list[int] = []
    created = 0

    def carry_out(ops: list[searchers.Operation]) -> None:
        nonlocal created
        for op in ops:
            assert isinstance(op, searchers.CreateTrial), f"{op} from an endless search"
            trial_id = 1000 + created
            created += 1
            assert (
                searcher.on_event(searchers.TrialCreated(f"created-{op.request_id}", op.request_id, trial_id))
                == []
            )
            running.append(trial_id)

    carry_out(searcher.initial_operations())
    assert len(running) == limit
    for event_number, (action, pick) in enumerate(steps):
        trial_id = running[pick % len(running)]
        if action == "validate":
            event: searchers.Event = searchers.ValidationReported(
                f"ev-{event_number}", trial_id, 10, pick / 10
            )
            assert searcher.on_event(event) == []
        elif action == "exit":
            running.remove(trial_id)
            kind = pick % 3
            event = searchers.TrialExited(
                f"ev-{event_number}", trial_id, failed=kind == 1, invalid_hp=kind == 2
            )
            carry_out(searcher.on_event(event))
        else:
            searcher = restored(searcher, spec)
        assert len(running) == limit
        assert searcher.progress() == 0.0
        assert not searcher.shut_down

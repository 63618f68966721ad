"""`det trial describe` of an elastic trial (an experiment with an `elastic` section, such as an NNI `adl`
config): the NNI status column, the replica range and the latest AdaptDL hints (`det._elastic`), against
the fake API of tests/unit/det/fakes.py."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

HINTS_AT = "2026-01-01T12:00:00.000Z"
#: Three minutes after the hints came.
NOW = datetime.fromisoformat("2026-01-01T12:03:10+00:00").timestamp()
HINTS: dict[str, Any] = {
    "initBatchSize": 32,
    "localBszBounds": [16, 128],
    "globalBatchSize": None,
    "maxBatchSize": 256,
    "maxProfiledReplicas": 1,
    "gradientAccumulation": True,
    "gradParams": {"norm": 0.0, "var": 0.457},
    "perfParams": {"alpha_c": 0.03, "beta_c": 0.001, "alpha_n": 1e-8, "beta_n": 1e-8},
    "speedup": {"1": 1.0, "2": 1.71, "10": 3.5},
}


def _seed(api, *, section: dict[str, Any] | None, **trial_fields: Any) -> None:
    """Experiment 1 with `section` as its config's `elastic` (None: a fixed-size one) and its trial 5."""
    config: dict[str, Any] = {"data": {}}
    if section is not None:
        config["elastic"] = section
    api.experiments[1] = api.experiment(1, config=config)
    api.trials[5] = api.trial(5, 1, **trial_fields)


def _describe(api, *argv: str):
    result = api.run("t", "describe", "5", *argv, now=lambda: NOW)
    assert result.code == 0, result.err
    return result


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("QUEUED", "WAITING"),
        ("RUNNING", "RUNNING"),
        ("COMPLETED", "SUCCEEDED"),
        ("ERROR", "FAILED"),
        ("CANCELED", "USER_CANCELED"),
    ],
)
def test_an_elastic_trial_shows_its_nni_status(api, table_rows, state: str, status: str) -> None:
    _seed(api, section={"min_replicas": 1, "max_replicas": 4}, state=state)

    rows = table_rows(_describe(api).out)

    assert rows[0][:4] == ["Trial ID", "Experiment ID", "State", "NNI Status"]
    assert rows[1][2:4] == [state, status]


def test_the_latest_hints_show_their_age_batch_sizes_and_speedup_table(api, table_rows) -> None:
    section = {"min_replicas": 1, "max_replicas": 4, "slots_per_replica": 2}
    _seed(api, section=section, elastic={"hints": HINTS, "hints_at": HINTS_AT})

    out = _describe(api).out

    assert "Elastic (AdaptDL): 1 to 4 replicas, 2 slots each\n" in out
    assert (
        "Latest hints: 3 min ago (" in out
        and "); profiled up to 1 replica; batch size 32 (local 16-128, max 256)\n" in out
    )
    table = out.split("Speedup (adaptdl.goodput, over 1 replica):\n")[1].split("\n\nCheckpoints:")[0]
    assert table_rows(table) == [["Replicas", "Speedup"], ["1", "1"], ["2", "1.71"], ["10", "3.5"]]


def test_an_elastic_trial_without_hints_says_none_came_yet(api) -> None:
    _seed(api, section={"min_replicas": 2}, elastic=None)

    out = _describe(api).out

    assert "Elastic (AdaptDL): 2 to as many replicas as the pool holds, 1 slot each\n" in out
    assert "Latest hints: none yet" in out and "Speedup" not in out


def test_the_json_of_an_elastic_trial_has_its_nni_status_and_hints(api) -> None:
    _seed(api, section={}, state="RUNNING", elastic={"hints": HINTS, "hints_at": HINTS_AT})

    answer = json.loads(_describe(api, "--json").out)

    assert answer["trial"]["nni_status"] == "RUNNING"
    assert answer["trial"]["elastic"]["hints"]["speedup"]["2"] == 1.71


def test_a_fixed_size_trial_shows_no_elastic_section(api) -> None:
    _seed(api, section=None, state="RUNNING")

    out = _describe(api).out

    assert "Elastic" not in out and "NNI Status" not in out


RUNS = {
    "5.1": {"at": "2026-01-01T12:00:00.000Z", "replicas": 1, "reason": "start"},
    "5.2": {
        "at": "2026-01-01T12:05:00.000Z",
        "replicas": 2,
        "reason": "grow: 1 slot idle and nothing queued",
    },
}


def test_the_replicas_over_time_show_each_run_with_the_reason_for_its_size(api, table_rows) -> None:
    _seed(api, section={"min_replicas": 1}, state="RUNNING", elastic={"runs": RUNS})

    out = _describe(api).out

    table = out.split("Replicas over time:\n")[1].split("\nLatest hints")[0]
    assert table_rows(table) == [
        ["Run", "Granted", "Replicas", "Reason"],
        ["5.1", "2026-01-01 12:00:00", "1", "start"],
        ["5.2", "2026-01-01 12:05:00", "2", "grow: 1 slot idle and nothing queued"],
    ]
    assert "Rescaling" not in out


def test_a_trial_requeued_for_a_rescale_is_running_for_nni_and_says_so(api, table_rows) -> None:
    rescale = {"run": "5.2", "replicas": 2, "target": 1, "reason": "shrink: run 9.1 waits for 1 slot"}
    _seed(api, section={"min_replicas": 1}, state="QUEUED", elastic={"runs": RUNS, "rescale": rescale})

    out = _describe(api).out

    assert table_rows(out)[1][2:4] == ["QUEUED", "RUNNING"]
    assert "Rescaling: run 5.2 stopped to restart at 1 replicas (shrink: run 9.1 waits for 1 slot)\n" in out
    # Once the next run got its slots, the rescale is history.
    runs = {**RUNS, "5.3": {"at": "2026-01-01T12:09:00.000Z", "replicas": 1, "reason": rescale["reason"]}}
    _seed(api, section={"min_replicas": 1}, state="QUEUED", elastic={"runs": runs, "rescale": rescale})
    assert table_rows(_describe(api).out)[1][2:4] == ["QUEUED", "WAITING"]

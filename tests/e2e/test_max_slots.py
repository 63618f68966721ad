"""`resources.max_slots` on the local stack (one agent of two slots), through the real CLI: a grid of two
one-slot trials limited to one slot runs one trial while the other waits, `det job list` says why, and
`det experiment set max-slots` raised to 2 starts the second beside the first at once. Then `det
experiment set`/`label` change what `describe` shows, and the experiment is canceled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

TRAIN = """
import time
import determined as det

with det.core.init() as core:
    for step in range(1, 3001):
        core.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        if core.preempt.should_preempt():
            break
        time.sleep(0.1)
"""
CONFIG = """
name: limited
entrypoint: python3 train.py
hyperparameters: {x: {type: categorical, vals: [1, 2]}}
searcher: {name: grid, metric: loss, max_length: 1}
resources: {max_slots: 1}
max_restarts: 0
"""


def test_max_slots_holds_a_trial_back_until_it_is_raised(det, tmp_path: Path, wait_for):
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "train.py").write_text(TRAIN)
    (tmp_path / "config.yaml").write_text(CONFIG)
    created = det("experiment", "create", str(tmp_path / "config.yaml"), str(context))
    assert created.code == 0, created.out + created.err
    eid = det.created_experiment_id(created.out)

    def states() -> list[str]:
        return sorted(t["state"] for t in det.describe_experiment(eid)["trials"])

    def job() -> dict:
        listed = det.read("job", "list", "--json")
        assert listed.code == 0, listed.err
        return next((j for j in json.loads(listed.out)["jobs"] if j["id"] == str(eid)), {})

    wait_for(lambda: states() == ["QUEUED", "RUNNING"], timeout=120, what="one trial running", seen=states)
    held = wait_for(
        lambda: (j := job()) and "max_slots" in (j.get("reason") or "") and j,
        timeout=60,
        what="the reason",
        seen=job,
    )
    assert (held["slots_acquired"], held["slots_needed"]) == (1, 2)
    assert "its experiment may hold 1 at once (resources.max_slots)" in held["reason"]
    assert states() == ["QUEUED", "RUNNING"]  # a free slot, and still only one trial: the limit
    table = det.read("job", "list")
    assert f"job {eid} waits: needs 1 slot; its experiment may hold 1 at once" in table.out, table.out

    raised = det("experiment", "set", "max-slots", str(eid), "2")
    assert raised.code == 0 and raised.out == f"Set `max_slots` of experiment {eid} to 2\n", raised.err
    wait_for(lambda: states() == ["RUNNING", "RUNNING"], timeout=120, what="both trials running", seen=states)

    assert det("experiment", "label", "add", str(eid), "limited-run").code == 0
    assert det("experiment", "set", "description", str(eid), "two at once now").code == 0
    shown = det.describe_experiment(eid)["experiment"]
    assert (shown["labels"], shown["description"], shown["max_slots"]) == (
        ["limited-run"],
        "two at once now",
        2,
    )

    assert det("experiment", "cancel", str(eid)).code == 0
    wait_for(
        lambda: det.describe_experiment(eid)["experiment"]["state"] == "CANCELED",
        timeout=120,
        what="canceled",
    )

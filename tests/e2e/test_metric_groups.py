"""Determined's generic metric groups end to end: a Core API script reports under the built-in groups and
under custom ones with odd names (spaces, `%`, `/`), and `det trial describe --metrics` lists each group's
metrics under its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

GROUPS = ["training", "validation", "group_b", "grou%p_c", "infer ence", "inf%er en/ce"]
CUSTOM = GROUPS[2:]
STEPS = 12

# Cycles through the groups one report a step; each metric's name carries its group and odd characters.
SCRIPT = f"""
import determined as det

GROUPS = {GROUPS!r}


def metric_name(group, i):
    return "z" + group + "/me.t r%i]\\\\c_" + str(i)


with det.core.init() as core:
    for step in range(1, {STEPS} + 1):
        group = GROUPS[(step - 1) % len(GROUPS)]
        metrics = {{metric_name(group, i): step * (i + 1) for i in range(2)}}
        metrics["x"] = float(step)
        core.train.report_metrics(group=group, steps_completed=step, metrics=metrics)
    try:
        core.train.report_metrics(group="bad.group", steps_completed=1, metrics={{"x": 1.0}})
    except ValueError as error:
        print("refused:", error)
"""

CONFIG = """
name: generic-metric-groups
entrypoint: python3 groups.py
searcher:
  name: single
  metric: x
  max_length: {batches: 12}
max_restarts: 0
"""


def _metric_name(group: str, i: int) -> str:
    return f"z{group}/me.t r%i]\\c_{i}"


def _steps_of(group: str) -> list[int]:
    return [s for s in range(1, STEPS + 1) if GROUPS[(s - 1) % len(GROUPS)] == group]


def test_custom_metric_groups_are_stored_and_listed_by_name(det, tmp_path: Path, table_rows) -> None:
    result, trial = det.follow_experiment(tmp_path, CONFIG, {"groups.py": SCRIPT})
    assert result.code == 0, result.out + result.err
    assert trial["state"] == "COMPLETED"
    # The built-in groups move the trial's batches (the last validation is at step 8); custom ones do not.
    assert trial["total_batches"] == max(_steps_of("training") + _steps_of("validation")) == 8
    assert trial["best_validation"] == 2.0  # the searcher's metric, from the validation group only

    raw = json.loads(det("trial", "describe", str(trial["id"]), "--metrics", "--json").out)
    assert list(raw["metrics"]) == ["training", "validation", *sorted(CUSTOM)]
    for group in GROUPS:
        reports = raw["metrics"][group]
        assert [r["steps_completed"] for r in reports] == _steps_of(group)
        assert all(r["group"] == group for r in reports)
        assert reports[0]["metrics"][_metric_name(group, 1)] == 2 * reports[0]["steps_completed"]

    shown = det("trial", "describe", str(trial["id"]), "--metrics")
    assert shown.code == 0, shown.err
    workloads = table_rows(shown.out, "Workloads:")
    assert f"Training Metric: {_metric_name('training', 0)}" in workloads[0]
    assert f"Validation Metric: {_metric_name('validation', 0)}" in workloads[0]
    for group in CUSTOM:
        header, *rows = table_rows(shown.out, f"Metric group: {group}")
        assert header == [
            "Trial ID",
            "# of Batches",
            "Report Time",
            *(f"Metric: {n}" for n in sorted([_metric_name(group, 0), _metric_name(group, 1), "x"])),
        ]
        assert [int(r[1]) for r in rows] == _steps_of(group)
        x, second = header.index("Metric: x"), header.index(f"Metric: {_metric_name(group, 1)}")
        assert [(float(r[x]), int(r[second])) for r in rows] == [(s, 2 * s) for s in _steps_of(group)]

    logs = det("trial", "logs", str(trial["id"])).out
    assert "refused: metric group 'bad.group' contains '.'" in logs

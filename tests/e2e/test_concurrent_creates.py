"""Issue 28: adaptive ASHA in the shape of Determined's Core API tutorial 3 (`3_hpsearch`), created three
times at once on an 8-slot stack while a busy process loads the machine. Each create must exit 0 once
for an experiment of its own, and every experiment must COMPLETE with its 10 trials: before the
searcher's outbox, a trial's event that saved the searcher while a create was still creating trials made
the create report "searcher of experiment N changed meanwhile" and the experiment hang at 80-86 %."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from det.deploy.background import BackgroundStack

pytestmark = pytest.mark.e2e

# What 3_hpsearch.py does, written here: count to max_time batches (the tutorial's 100, 40 here: a shorter
# run of the same rungs' shape) by the trial's `increment_by`, report
# training and validation (the searcher's `time_metric`, batches, among them) every 10 batches,
# checkpoint, and stop when told to; a resumed trial starts from its checkpoint.
HPSEARCH = """
import logging, pathlib, time
import determined as det

MAX_TIME = 40

def main(core, info):
    x, start = 0, 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            x, start, owner = (int(v) for v in (pathlib.Path(path) / "state").read_text().split(","))
            if owner != info.trial.trial_id:
                start = 0
    for batch in range(start, MAX_TIME):
        x += info.trial.hparams["increment_by"]
        time.sleep(0.01)
        steps = batch + 1
        if steps % 10 == 0:
            core.train.report_training_metrics(steps_completed=steps, metrics={"x": x})
            core.train.report_progress(steps / MAX_TIME)
            core.train.report_validation_metrics(steps_completed=steps, metrics={"x": x, "batches": steps})
            with core.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                (pathlib.Path(path) / "state").write_text(f"{x},{steps},{info.trial.trial_id}")
            if core.preempt.should_preempt():
                return

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    with det.core.init() as core:
        main(core, det.get_cluster_info())
"""

CONFIG = """name: core-api-stage-3
entrypoint: python3 3_hpsearch.py
hyperparameters:
  increment_by:
    type: int
    minval: 1
    maxval: 8
searcher:
   name: adaptive_asha
   metric: x
   max_trials: 10
   time_metric: batches
   max_time: 40
max_restarts: 0
"""

CREATES = 3


@pytest.fixture(scope="module")
def eight_slots(tmp_path_factory: pytest.TempPathFactory, det_runner: Any) -> Iterator[Any]:
    stack = BackgroundStack(tmp_path_factory.mktemp("eight-slots"), slots=8)
    try:
        yield det_runner(stack.state["api_url"])
    finally:
        stack.stop()


@pytest.fixture
def busy_machine() -> Iterator[None]:
    """A spinning process for every other core beside the stack, its trials and the tier's other
    workers, for the whole test."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(max(1, (os.cpu_count() or 2) // 2))
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.mark.timeout(1500)
def test_concurrent_asha_creates_each_complete_with_ten_trials(
    eight_slots: Any, tmp_path: Path, busy_machine: None, repo_root: Path, wait_for: Any
) -> None:
    context = tmp_path / "core_api"
    context.mkdir()
    (context / "3_hpsearch.py").write_text(HPSEARCH)
    (context / "3_hpsearch.yaml").write_text(CONFIG)
    det = eight_slots

    def create(_: int) -> Any:
        return det("experiment", "create", str(context / "3_hpsearch.yaml"), str(context), cwd=repo_root)

    with ThreadPoolExecutor(CREATES) as pool:
        results = list(pool.map(create, range(CREATES)))
    for result in results:
        assert result.code == 0, result.out + result.err
        assert result.out.count("Created experiment") == 1, result.out
        assert "changed meanwhile" not in result.err
    ids = sorted(det.created_experiment_id(result.out) for result in results)
    assert len(set(ids)) == CREATES, ids

    def states() -> dict[int, Any]:
        return {i: det.describe_experiment(i)["experiment"]["state"] for i in ids}

    wait_for(
        lambda: all(state == "COMPLETED" for state in states().values()),
        timeout=900,
        what="every experiment COMPLETED",
        interval=2,
        seen=states,
    )
    for experiment_id in ids:
        described = det.describe_experiment(experiment_id)
        trials = described["trials"]
        assert len(trials) == 10, (experiment_id, [t["id"] for t in trials])
        assert all(t["state"] == "COMPLETED" for t in trials), [(t["id"], t["state"]) for t in trials]
        assert described["experiment"]["progress"] == 1.0
    listed = det.read("experiment", "list", "--json")
    assert sorted(e["id"] for e in json.loads(listed.out)["experiments"]) == ids  # none duplicated

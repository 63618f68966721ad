"""PBT, cancel and kill on the local stack, with real trial processes.

A tiny PBT experiment completes and its replacement trial really starts from its parent's checkpoint
(the trial's state continues the parent's); an experiment too long to finish is canceled and ends
CANCELED, after one of its running trials was killed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# Determined Core API trial code: `x` grows by `lr` per batch; the loss is |3 - x|. A checkpoint holds x,
# the batch count and the trial that wrote it; another trial's checkpoint gives x, not the batch count.
PBT_TRAIN = """
import json
import pathlib

import determined as det


def main(core):
    info = det.get_cluster_info()
    lr = float(info.trial.hparams["lr"])
    x, steps = 0.0, 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            state = json.loads((pathlib.Path(path) / "state.json").read_text())
        x = state["x"]
        if state["trial_id"] == info.trial.trial_id:
            steps = state["steps"]
        else:
            print(f"warm start: trial {state['trial_id']} step {state['steps']} x {x!r}", flush=True)
    saved = steps
    for op in core.searcher.operations():
        while steps < op.length:
            steps += 1
            x += lr
        core.train.report_validation_metrics(steps_completed=steps, metrics={"loss": abs(3.0 - x), "x": x})
        op.report_completed(abs(3.0 - x))
        if saved != steps:
            with core.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                state = {"x": x, "steps": steps, "trial_id": info.trial.trial_id}
                (path / "state.json").write_text(json.dumps(state))
            saved = steps


with det.core.init() as core_context:
    main(core_context)
"""

PBT_CONFIG = """
name: pbt-e2e
entrypoint: python3 train.py
hyperparameters:
  lr: {type: double, minval: 0.05, maxval: 0.5}
searcher:
  name: pbt
  metric: loss
  smaller_is_better: true
  population_size: 2
  num_rounds: 2
  length_per_round: {batches: 5}
  replace_function: {truncate_fraction: 0.5}
  explore_function: {resample_probability: 0.0, perturb_factor: 0.2}
max_restarts: 0
"""


def test_pbt_replaces_the_worst_trial_by_one_starting_from_the_best_ones_checkpoint(det, tmp_path: Path):
    (tmp_path / "train.py").write_text(PBT_TRAIN)
    (tmp_path / "config.yaml").write_text(PBT_CONFIG)
    result = det("experiment", "create", str(tmp_path / "config.yaml"), str(tmp_path), "-f", timeout=400)
    assert result.code == 0, result.out + result.err
    described = det.describe_experiment(det.created_experiment_id(result.out))
    assert described["experiment"]["state"] == "COMPLETED"
    trials = {t["id"]: t for t in described["trials"]}
    assert len(trials) == 3  # the population of 2, and 1 replacement after the first round
    (child,) = [t for t in trials.values() if t["warm_start_trial_id"] is not None]
    parent = trials[child["warm_start_trial_id"]]
    assert parent["total_batches"] == 10  # the best went on a second round; the child ran one
    assert child["total_batches"] == 5  # its own batches count from 0 (Determined's warm start)

    logs = det("trial", "logs", str(child["id"])).out
    found = re.search(r"warm start: trial (\d+) step (\d+) x ([0-9.e-]+)", logs)
    assert found is not None, logs
    assert (int(found[1]), int(found[2])) == (parent["id"], 5)
    # Its state continues the parent's: x from the parent's round-end checkpoint, plus its own 5 batches.
    start_x = float(found[3])
    assert child["latest_validation"]["x"] == pytest.approx(start_x + 5 * child["hparams"]["lr"])
    assert start_x == pytest.approx(5 * parent["hparams"]["lr"])


# Trains until told to stop, then checkpoints; its experiment runs trials until stopped (no max_trials).
FOREVER_TRAIN = """
import json
import time

import determined as det

with det.core.init() as core:
    steps = 0
    while True:
        steps += 1
        time.sleep(0.05)
        if steps % 10 == 0:
            core.train.report_training_metrics(steps_completed=steps, metrics={"loss": 1.0 / steps})
            if core.preempt.should_preempt():
                with core.checkpoint.store_path({"steps_completed": steps}) as (path, _):
                    (path / "state.json").write_text(json.dumps({"steps": steps}))
                print(f"stopping at step {steps} as asked", flush=True)
                break
"""

FOREVER_CONFIG = """
name: cancel-e2e
entrypoint: python3 train.py
hyperparameters:
  x: {type: double, minval: 0, maxval: 1}
searcher: {name: random, metric: loss, until_stopped: true, max_concurrent_trials: 2}
max_restarts: 0
"""


def test_a_running_trial_is_killed_and_an_endless_experiment_is_canceled(det, tmp_path: Path, wait_for):
    (tmp_path / "train.py").write_text(FOREVER_TRAIN)
    (tmp_path / "config.yaml").write_text(FOREVER_CONFIG)
    created = det("experiment", "create", str(tmp_path / "config.yaml"), str(tmp_path))
    assert created.code == 0, created.out + created.err
    experiment_id = det.created_experiment_id(created.out)

    def running() -> list[dict]:
        trials = det.describe_experiment(experiment_id)["trials"]
        return [t for t in trials if t["state"] == "RUNNING" and t["total_batches"] > 0]

    victim = wait_for(running, 120, "a trial training")[0]
    killed = det("trial", "kill", str(victim["id"]))
    assert killed.code == 0, killed.err
    assert f"Killed trial {victim['id']}" in killed.out

    def trial(trial_id: int) -> dict:
        return next(t for t in det.describe_experiment(experiment_id)["trials"] if t["id"] == trial_id)

    wait_for(lambda: trial(victim["id"])["state"] == "CANCELED", 120, f"trial {victim['id']} CANCELED")
    assert det.describe_experiment(experiment_id)["experiment"]["state"] == "ACTIVE"  # it goes on

    survivor = wait_for(lambda: [t for t in running() if t["id"] != victim["id"]], 120, "another trial")[0]
    canceled = det("experiment", "cancel", str(experiment_id))
    assert canceled.code == 0, canceled.err
    assert f"Canceled experiment {experiment_id}" in canceled.out

    def ended() -> dict | None:
        described = det.describe_experiment(experiment_id)
        return described if described["experiment"]["state"] == "CANCELED" else None

    described = wait_for(ended, 180, f"experiment {experiment_id} CANCELED")
    states = {t["id"]: t["state"] for t in described["trials"]}
    assert set(states.values()) == {"CANCELED"}, states
    stopped = next(t for t in described["trials"] if t["id"] == survivor["id"])
    assert stopped["latest_checkpoint"] is not None  # canceled: it checkpointed as it stopped
    assert "stopping at step" in det("trial", "logs", str(survivor["id"])).out
    assert "stopping at step" not in det("trial", "logs", str(victim["id"])).out  # killed: no checkpoint
    again = det("experiment", "cancel", str(experiment_id))
    assert again.code == 0 and "CANCELED" in again.out  # a repeat is not an error

"""NNI's PBTTuner on the local stack: an NNI-style PBT trial script (ours, in the shape of NNI's
`load_checkpoint_dir` / `save_checkpoint_dir` examples) runs unchanged through the `nni` stand-in, as
Stratus' pbt searcher: a population of 2 for 2 rounds, where the replaced member's new trial loads the
model file its parent saved, and the continued member loads its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# The model is a number `x` that grows by `lr` per epoch; the result is -|3 - x| (maximized). Like NNI's
# example, it loads from load_checkpoint_dir if the file is there, and saves AFTER its final result.
NNI_PBT_TRIAL = """
import json
import os

import nni

EPOCHS = 2

params = nni.get_next_parameter()
lr = params["lr"]
x = 0.0
load_path = os.path.join(params["load_checkpoint_dir"], "model.json")
if os.path.isfile(load_path):
    with open(load_path) as f:
        saved = json.load(f)
    x = saved["x"]
    print(f"loaded the model of trial {saved['trial']}: x {x!r}", flush=True)
for epoch in range(1, EPOCHS + 1):
    x += lr
    if epoch < EPOCHS:
        nni.report_intermediate_result(-abs(3.0 - x))
    else:
        nni.report_final_result(-abs(3.0 - x))
os.makedirs(params["save_checkpoint_dir"], exist_ok=True)
with open(os.path.join(params["save_checkpoint_dir"], "model.json"), "w") as f:
    json.dump({"x": x, "trial": nni.get_trial_id()}, f)
"""

NNI_PBT_CONFIG = """
experimentName: nni-pbt-e2e
searchSpaceFile: search_space.json
trialCommand: python3 trial.py
trialGpuNumber: 0
trialConcurrency: 2
maxTrialNumber: 4
tuner:
  name: PBTTuner
  classArgs:
    optimize_mode: maximize
    population_size: 2
    all_checkpoint_dir: /tmp/nni-pbt-unused
trainingService:
  platform: local
"""

SEARCH_SPACE = {"lr": {"_type": "uniform", "_value": [0.05, 0.5]}}


def loaded_model(logs: str) -> tuple[int, float] | None:
    found = re.search(r"loaded the model of trial (\d+): x ([0-9.e-]+)", logs)
    return (int(found[1]), float(found[2])) if found else None


def test_nni_pbt_trial_code_runs_unchanged_and_a_replacement_loads_its_parents_model(det, tmp_path: Path):
    (tmp_path / "trial.py").write_text(NNI_PBT_TRIAL)
    (tmp_path / "search_space.json").write_text(json.dumps(SEARCH_SPACE))
    (tmp_path / "config.yml").write_text(NNI_PBT_CONFIG)
    result = det("experiment", "create", str(tmp_path / "config.yml"), str(tmp_path), "-f", timeout=400)
    assert result.code == 0, result.out + result.err
    described = det.describe_experiment(det.created_experiment_id(result.out))
    assert described["experiment"]["state"] == "COMPLETED"
    trials = {t["id"]: t for t in described["trials"]}
    assert len(trials) == 3  # the population of 2, and 1 replacement (NNI's ceil(0.2 * 2)) after round 1
    (child,) = [t for t in trials.values() if t["warm_start_trial_id"] is not None]
    parent = trials[child["warm_start_trial_id"]]
    (replaced,) = [t for t in trials.values() if t["id"] not in (child["id"], parent["id"])]
    assert all(t["state"] == "COMPLETED" for t in trials.values())

    # Round 1: the parent trained 2 epochs from scratch and saved x = 2 * lr; it beat the replaced one.
    round_1_x = 2 * parent["hparams"]["lr"]
    assert -abs(3.0 - round_1_x) >= -abs(3.0 - 2 * replaced["hparams"]["lr"])
    # The replacement loaded the file its parent saved (through the parent's checkpoint) ...
    child_loaded = loaded_model(det("trial", "logs", str(child["id"])).out)
    assert child_loaded is not None
    assert child_loaded[0] == parent["id"] and child_loaded[1] == pytest.approx(round_1_x)
    assert child["latest_validation"]["default"] == pytest.approx(
        -abs(3.0 - round_1_x - 2 * child["hparams"]["lr"])
    )
    # ... the continued parent loaded its own for round 2, and the replaced member never loaded anything.
    parent_loaded = loaded_model(det("trial", "logs", str(parent["id"])).out)
    assert parent_loaded is not None and parent_loaded == (parent["id"], pytest.approx(round_1_x))
    assert loaded_model(det("trial", "logs", str(replaced["id"])).out) is None
    assert parent["latest_validation"]["default"] == pytest.approx(-abs(3.0 - 4 * parent["hparams"]["lr"]))
    for trial in (parent, child, replaced):
        assert trial["latest_checkpoint"] is not None  # every round's save_checkpoint_dir was stored

"""NNI's Hyperband tuner on the local stack: an NNI-style trial script (ours, in the shape of NNI's
Hyperband examples: it trains `TRIAL_BUDGET` epochs, reports one intermediate result per epoch and a
final one) runs unchanged through the `nni` stand-in, as Stratus' hyperband searcher with `R: 4, eta: 2`.

Li et al.'s brackets for R = 4, eta = 2 (s_max = 2): s = 2 starts 4 configurations at budget 1, keeps 2
for budget 2 and 1 for budget 4; s = 1 starts 3 at budget 2 and keeps 1 for budget 4; s = 0 runs 3 at
budget 4. So the 10 trials run with the budgets [1], [1], [1, 2], [1, 2, 4], [2], [2], [2, 4], [4], [4],
[4]. The result grows with the trial's sequence number (maximized), so at every rung the trial that
reports last is the best: with one trial at a time its promotion finds the slot free, and the script
runs again in the same process (`os.execv`) with the larger `TRIAL_BUDGET`.

Without `maxTrialNumber` (`until_stopped`), NNI's Hyperband repeats its iterations until the experiment
is stopped: so does Stratus, until `det experiment cancel`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

NNI_HYPERBAND_TRIAL = """
import nni

params = nni.get_next_parameter()
budget = params["TRIAL_BUDGET"]
print(f"training with TRIAL_BUDGET {budget} and lr {params['lr']!r}", flush=True)
loss = 1.0
for epoch in range(1, budget + 1):
    loss *= 1.0 - params["lr"]
    nni.report_intermediate_result(-loss)
nni.report_final_result(nni.get_sequence_id() - loss)
"""

NNI_HYPERBAND_CONFIG = """
experimentName: nni-hyperband-e2e
searchSpaceFile: search_space.json
trialCommand: python3 trial.py
trialGpuNumber: 0
trialConcurrency: 1
maxTrialNumber: 10
tuner:
  name: Hyperband
  classArgs:
    optimize_mode: maximize
    R: 4
    eta: 2
trainingService:
  platform: local
"""

SEARCH_SPACE = {"lr": {"_type": "uniform", "_value": [0.1, 0.5]}}

NNI_ENDLESS_HYPERBAND_CONFIG = """
experimentName: nni-hyperband-until-stopped-e2e
searchSpaceFile: search_space.json
trialCommand: python3 trial.py
trialGpuNumber: 0
trialConcurrency: 1
tuner:
  name: Hyperband
  classArgs:
    optimize_mode: maximize
    R: 2
    eta: 2
trainingService:
  platform: local
"""

# Each bracket's chains of budgets, as Li et al.'s formulas give them for R = 4, eta = 2.
EXPECTED_BUDGETS = [[1], [1], [1, 2], [1, 2, 4], [2], [2], [2, 4], [4], [4], [4]]


def budgets_run(logs: str) -> list[int]:
    return [int(b) for b in re.findall(r"training with TRIAL_BUDGET (\d+)", logs)]


def test_nni_hyperband_runs_the_brackets_and_a_promoted_trial_runs_again_with_its_larger_budget(
    det, tmp_path: Path
):
    (tmp_path / "trial.py").write_text(NNI_HYPERBAND_TRIAL)
    (tmp_path / "search_space.json").write_text(json.dumps(SEARCH_SPACE))
    (tmp_path / "config.yml").write_text(NNI_HYPERBAND_CONFIG)
    result = det("experiment", "create", str(tmp_path / "config.yml"), str(tmp_path), "-f", timeout=500)
    assert result.code == 0, result.out + result.err
    described = det.describe_experiment(det.created_experiment_id(result.out))
    assert described["experiment"]["state"] == "COMPLETED"
    trials = sorted(described["trials"], key=lambda t: t["id"])
    assert all(t["state"] == "COMPLETED" for t in trials), [t["state"] for t in trials]

    logs = {t["id"]: det("trial", "logs", str(t["id"])).out for t in trials}
    budgets = {trial_id: budgets_run(text) for trial_id, text in logs.items()}
    print("budgets by trial:", budgets)
    assert sorted(budgets.values()) == EXPECTED_BUDGETS
    for trial in trials:  # its validations are its final results, at the budgets it ran with
        assert trial["latest_validation"]["default"] == pytest.approx(
            trial["id"] - (1.0 - trial["hparams"]["lr"]) ** budgets[trial["id"]][-1]
        )
    # In each bracket the latest trial (the best) goes furthest; bracket by its first budget.
    for first in (1, 2):
        bracket = [t["id"] for t in trials if budgets[t["id"]][0] == first]
        assert max(bracket, key=lambda i: len(budgets[i])) == max(bracket)
    # The promotions found the slot free: the script ran again in the same process (os.execv).
    promoted_in_place = {
        trial_id: [int(b) for b in re.findall(r"\[nni\] promoted to TRIAL_BUDGET=(\d+)", text)]
        for trial_id, text in logs.items()
    }
    assert any(promoted_in_place.values()), promoted_in_place
    for trial_id, larger in promoted_in_place.items():
        for budget in larger:
            assert budget in budgets[trial_id][1:]


def test_nni_hyperband_without_max_trial_number_repeats_its_iterations_until_canceled(
    det, tmp_path: Path, wait_for
):
    (tmp_path / "trial.py").write_text(NNI_HYPERBAND_TRIAL)
    (tmp_path / "search_space.json").write_text(json.dumps(SEARCH_SPACE))
    (tmp_path / "config.yml").write_text(NNI_ENDLESS_HYPERBAND_CONFIG)
    created = det("experiment", "create", str(tmp_path / "config.yml"), str(tmp_path))
    assert created.code == 0, created.out + created.err
    experiment_id = det.created_experiment_id(created.out)

    # R = 2, eta = 2: bracket s = 1 starts 2 configurations at budget 1 and keeps 1 for budget 2, bracket
    # s = 0 runs 2 at budget 2: 4 configurations an iteration. One trial at a time, so once a 7th trial
    # exists the second iteration's bracket s = 1 (trials 5 and 6) has run.
    def second_iteration_bracket_run() -> dict | None:
        described = det.describe_experiment(experiment_id)
        return described if len(described["trials"]) >= 7 else None

    wait_for(second_iteration_bracket_run, 300, "the second Hyperband iteration's first bracket")
    canceled = det("experiment", "cancel", str(experiment_id))
    assert canceled.code == 0, canceled.err

    def ended() -> dict | None:
        described = det.describe_experiment(experiment_id)
        return described if described["experiment"]["state"] == "CANCELED" else None

    described = wait_for(ended, 180, f"experiment {experiment_id} CANCELED")
    trials = sorted(described["trials"], key=lambda t: t["id"])
    budgets = {t["id"]: budgets_run(det("trial", "logs", str(t["id"])).out) for t in trials[:6]}
    print("budgets by trial:", budgets)
    first_iteration = [budgets[t["id"]] for t in trials[:4]]
    assert sorted(first_iteration) == [[1], [1, 2], [2], [2]]
    assert sorted(budgets[t["id"]] for t in trials[4:6]) == [[1], [1, 2]]  # bracket s = 1 again

"""Issue 28: our modules and the user's never shadow each other.

`det deploy local up` runs from a folder holding the user's own `app.py`, `infra/` and an `nni/` package
(each fails loudly when imported): the stack starts, and an NNI trial gets the `nni` stand-in (the
agent's check for installed packages once found that folder and every NNI trial died with
ModuleNotFoundError). Then a trial whose context holds its own `contract.py`, `harness.py`, `launchers/`,
`infra/`, `app.py` and `det/` imports its own modules while Stratus's (installed as `stratus.*`) report
its metrics, through Determined's launcher, and completes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

WAIT_S = 300.0  # a guard against hangs, not a timing assertion

BOOBY_TRAP = "raise SystemExit('imported the user\\'s {name} instead of Stratus\\'s')\n"

NNI_TRIAL = """
import nni

params = nni.get_next_parameter()
for epoch in range(3):
    nni.report_intermediate_result(params["x"] * epoch)
nni.report_final_result(params["x"] * 3)
print("reported through", nni.__file__)
"""

NNI_CONFIG = """
experimentName: user-names-nni
trialConcurrency: 1
maxTrialNumber: 1
searchSpace:
  x: {_type: choice, _value: [1, 2]}
trialCommand: python3 trial.py
trialCodeDirectory: .
tuner: {name: Random}
trainingService: {platform: local}
"""

# The user's own modules under the names our packages have (or had), each saying whose it is.
USER_MODULES = {
    "contract.py": "OWNER = 'user contract'\n",
    "harness.py": "OWNER = 'user harness'\n",
    "app.py": "OWNER = 'user app'\n",
    "launchers/__init__.py": "OWNER = 'user launchers'\n",
    "infra/__init__.py": "OWNER = 'user infra'\n",
    "det/__init__.py": "OWNER = 'user det'\n",
}

TRAIN = """
import app, contract, det, harness, infra, launchers
import determined

owners = [m.OWNER for m in (app, contract, det, harness, infra, launchers)]
assert owners == ["user app", "user contract", "user det", "user harness", "user infra", "user launchers"], owners
with determined.core.init() as core:
    core.train.report_training_metrics(steps_completed=1, metrics={"loss": 1.0})
    core.train.report_validation_metrics(steps_completed=1, metrics={"loss": 0.5})
print("own modules:", owners)
"""

CONFIG = """
name: user-names
entrypoint: python3 -m determined.launch.wrap_rank 0 -- python3 train.py
searcher: {name: single, metric: loss, max_length: 1}
max_restarts: 0
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(scope="module")
def stack_from_a_users_folder(
    tmp_path_factory: pytest.TempPathFactory, det_runner: Any
) -> Iterator[tuple[Any, Path]]:
    folder = tmp_path_factory.mktemp("users-folder")
    _write(
        folder,
        {
            "app.py": BOOBY_TRAP.format(name="app.py"),
            "infra/__init__.py": BOOBY_TRAP.format(name="infra/"),
            "nni/__init__.py": BOOBY_TRAP.format(name="nni/"),
        },
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STRATUS_", "DET_MASTER"))}
    env["STRATUS_HOME"] = str(folder / ".stratus-home")
    det_script = Path(sys.executable).with_name("det")  # the console script, as a user runs it

    def det_cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(det_script), *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=WAIT_S
        )

    port = _free_port()
    up = det_cli("deploy", "local", "up", "--port", str(port), "--slots", "1")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield det_runner(f"http://127.0.0.1:{port}"), folder
    finally:
        down = det_cli("deploy", "local", "down")
        assert down.returncode == 0, down.stdout + down.stderr


def test_an_nni_trial_gets_the_stand_in_though_the_stack_runs_beside_an_nni_folder(
    stack_from_a_users_folder: tuple[Any, Path], tmp_path: Path
) -> None:
    det, folder = stack_from_a_users_folder
    _write(tmp_path, {"trial.py": NNI_TRIAL, "config.yml": NNI_CONFIG})
    result = det(
        "experiment", "create", str(tmp_path / "config.yml"), str(tmp_path), "-f", cwd=folder, timeout=WAIT_S
    )
    assert result.code == 0, result.out + result.err
    (trial,) = det.describe_experiment(det.created_experiment_id(result.out))["trials"]
    assert trial["state"] == "COMPLETED"
    logs = det("trial", "logs", str(trial["id"])).out
    assert "reported through" in logs and "compat/nni/nni" in logs
    assert "ModuleNotFoundError" not in logs and "imported the user's" not in logs


def test_a_context_with_modules_named_like_ours_runs_its_own_and_ours(
    stack_from_a_users_folder: tuple[Any, Path], tmp_path: Path
) -> None:
    det, folder = stack_from_a_users_folder
    _write(tmp_path, {**USER_MODULES, "train.py": TRAIN, "config.yaml": CONFIG})
    result = det(
        "experiment", "create", str(tmp_path / "config.yaml"), str(tmp_path), "-f", cwd=folder, timeout=WAIT_S
    )
    assert result.code == 0, result.out + result.err
    (trial,) = det.describe_experiment(det.created_experiment_id(result.out))["trials"]
    assert trial["state"] == "COMPLETED", det("trial", "logs", str(trial["id"])).out
    logs = det("trial", "logs", str(trial["id"])).out
    assert "own modules: ['user app', 'user contract', 'user det', 'user harness', 'user infra'" in logs
    assert trial["best_validation"] == 0.5  # its report reached the API through stratus.harness

"""Issue 12, warm start end to end: a local stack started with `det deploy local up --warm-start`'s
setting runs the digits example (Core API) and the PyTorchTrial example forked from its agent's warm
interpreter to COMPLETED, and a trial whose context has a startup hook cold, each log saying which."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det.deploy.background import BackgroundStack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def warm_det(tmp_path_factory: pytest.TempPathFactory, det_runner: Any) -> Iterator[Any]:
    stack = BackgroundStack(tmp_path_factory.mktemp("warm-stack"), slots=2, env={"STRATUS_WARM_START": "1"})
    try:
        yield det_runner(stack.state["api_url"])
    finally:
        stack.stop()


def _trial_of(det: Any, result) -> dict:  # noqa: ANN001
    assert result.code == 0, result.out + result.err
    (trial,) = det.describe_experiment(det.created_experiment_id(result.out))["trials"]
    assert trial["state"] == "COMPLETED"
    return trial


def test_examples_run_warm_to_completed(warm_det: Any) -> None:
    digits = _trial_of(
        warm_det, warm_det("experiment", "create", "examples/digits/const.yaml", "examples/digits", "-f")
    )
    assert digits["latest_validation"]["validation_accuracy"] > 0.9
    logs = warm_det("trial", "logs", str(digits["id"])).out
    # The agent's warm interpreter may still be importing when the first trial comes: then it is cold,
    # and says so; every trial after it is warm.
    assert "warm start: pid" in logs or "cold start: the warm interpreter is not ready yet" in logs

    trial = _trial_of(
        warm_det,
        warm_det(
            "experiment",
            "create",
            "examples/determined_trial/const.yaml",
            "examples/determined_trial",
            "--config",
            "searcher.max_length.epochs=1",
            "-f",
            timeout=300,
        ),
    )
    assert trial["best_validation"] > 0.5  # it learned (one epoch: 0.7 to 0.9; chance is 0.1)
    assert "warm start: pid" in warm_det("trial", "logs", str(trial["id"])).out


def test_a_context_with_a_startup_hook_starts_cold_and_says_why(warm_det: Any, tmp_path: Path) -> None:
    (tmp_path / "startup-hook.sh").write_text("export FROM_HOOK=yes\n")
    config = (
        "name: hooked\nentrypoint: python3 main.py\n"
        "searcher: {name: single, metric: loss, max_length: 1}\nmax_restarts: 0\n"
    )
    result, trial = warm_det.follow_experiment(
        tmp_path, config, {"main.py": "import os\nprint('hook said', os.environ['FROM_HOOK'])\n"}
    )
    assert trial["state"] == "COMPLETED", result.out + result.err
    logs = warm_det("trial", "logs", str(trial["id"])).out
    assert "cold start: the context has a startup-hook.sh" in logs and "hook said yes" in logs

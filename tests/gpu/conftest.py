"""What the GPU tests share: `det` against a stack, and an experiment followed to COMPLETED whose trial's
log says where it trained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def det(api_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "det", *args],
        cwd=ROOT,
        env={**os.environ, "DET_MASTER": api_url},
        capture_output=True,
        text=True,
        timeout=480,
    )


def completed_trial(api_url: str, config: str, folder: str, *extra: str, says: str) -> dict[str, Any]:
    """`det experiment create config folder -f ...extra`: it completes, and its one trial's log holds
    ``says``; the trial as `det experiment describe --json` shows it."""
    created = det(api_url, "experiment", "create", config, folder, "-f", *extra)
    print(created.stdout[-3000:], created.stderr[-2000:])
    assert created.returncode == 0
    experiment_id = next(
        line for line in created.stdout.splitlines() if line.startswith("Created experiment")
    ).split()[-1]
    shown = det(api_url, "experiment", "describe", experiment_id, "--json")
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert detail["experiment"]["state"] == "COMPLETED"
    trial: dict[str, Any] = detail["trials"][0]
    logs = det(api_url, "trial", "logs", str(trial["id"]))
    assert says in logs.stdout, logs.stdout[-3000:]
    return trial


@pytest.fixture(name="det")
def _det() -> Callable[..., subprocess.CompletedProcess[str]]:
    """`det(api_url, *args)`: the CLI in a subprocess against that stack."""
    return det


@pytest.fixture(name="completed_trial")
def _completed_trial() -> Callable[..., dict[str, Any]]:
    return completed_trial

"""How a trial's process is started (`stratus.harness.trial_process`), and the local test mode's program that
becomes the trial (`stratus.harness.exec.local_test`), which the CLI runs. The start script run by a real bash is
tested in tests/integration/test_trial_process_script.py."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from stratus.harness.compat import compat_path
from stratus.harness.exec import local_test
from stratus.harness.trial_process import entrypoint_command


def no_compat_needed(env: Mapping[str, str], names: Sequence[str]) -> frozenset[str]:
    return frozenset()


def test_entrypoint_commands() -> None:
    assert entrypoint_command("python3 train.py --lr 0.1") == "exec sh -c 'python3 train.py --lr 0.1'"
    assert entrypoint_command(["python3", "a b.py"]) == "exec python3 'a b.py'"
    assert (
        entrypoint_command(local_test.trial_entrypoint("model_def:MNistTrial"))
        == "exec python3 -m stratus.harness.exec.run_trial model_def:MNistTrial"
    )
    assert entrypoint_command(local_test.trial_entrypoint("pkg.model:Trial ")) == (
        "exec python3 -m stratus.harness.exec.run_trial pkg.model:Trial"
    )
    assert entrypoint_command(local_test.trial_entrypoint("python3 -m x --trial a:B")).startswith(
        "exec sh -c "
    )


@pytest.mark.parametrize("entrypoint", [None, "", "  ", [], ["python3", ""], ["python3", 1], {"a": 1}])
def test_an_unusable_entrypoint_is_refused(entrypoint: object) -> None:
    with pytest.raises(local_test.LocalConfigError, match="set `entrypoint:` to a command"):
        local_test.trial_entrypoint(entrypoint)


def test_local_environment_drops_platform_variables(tmp_path: Path) -> None:
    env = local_test.local_environment(
        {"PATH": "/usr/bin", "STRATUS_RUN_TOKEN": "secret", "HOME": "/h"},
        {"environment": {"environment_variables": {"cpu": ["A=1", "B=x=y"], "gpu": ["A=2"]}}},
        tmp_path / "local.json",
        tmp_path / "events.jsonl",
        probe=no_compat_needed,
    )

    assert env["PATH"] == f"{os.path.dirname(sys.executable)}:/usr/bin"
    assert "STRATUS_RUN_TOKEN" not in env and env["HOME"] == "/h"
    assert (env["A"], env["B"]) == ("1", "x=y")
    assert env["STRATUS_LOCAL_CONFIG"] == str(tmp_path / "local.json")
    assert env["STRATUS_LOCAL_EVENTS"] == str(tmp_path / "events.jsonl")
    assert "PYTHONPATH" not in env


def test_local_environment_adds_the_compat_folders_as_the_agent_does(tmp_path: Path) -> None:
    def lacks_nni(env: Mapping[str, str], names: Sequence[str]) -> frozenset[str]:
        return frozenset({"nni"}) & frozenset(names)

    env = local_test.local_environment(
        {"PATH": "/usr/bin", "PYTHONPATH": "/mine"},
        {"environment": {"environment_variables": ["PYTHONPATH=/from/config"]}},
        tmp_path / "local.json",
        tmp_path / "events.jsonl",
        probe=lacks_nni,
    )

    assert env["PYTHONPATH"].split(os.pathsep) == ["/from/config", str(compat_path("nni"))]


def test_the_program_refuses_an_unreadable_local_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    local_config = tmp_path / "local.json"
    args = ["--context", str(tmp_path), "--local-config", str(local_config)]
    args += ["--events", str(tmp_path / "e"), "--hook-failed-marker", str(tmp_path / "m")]

    assert local_test.main(args) == 2
    assert f"cannot read the local config {local_config}" in capsys.readouterr().err

    local_config.write_text(json.dumps({"hparams": {}, "config": {"entrypoint": 3}, "length": 1}))
    assert local_test.main(args) == 2
    assert "the config's entrypoint 3 is not a command" in capsys.readouterr().err

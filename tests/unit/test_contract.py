"""The contract package on its own: each type round-trips, and a malformed value is refused with an error
that names it and says what to do."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import contract
from contract import env as trial_env
from contract.env import TrialEnv
from contract.errors import InvalidEnvironmentError

CONTRACT_DIR = Path(contract.__file__).resolve().parent

# --- the trial environment ---------------------------------------------------------------------------

FULL = TrialEnv(
    master="http://api.example:8000",
    trial_id=7,
    experiment_id=3,
    run_id="7.1",
    run_token="secret-token",
    hparams={"lr": 0.1, "layers": {"n": 2}},
    latest_checkpoint="0c4a9b8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f",
    trial_seed=42,
    slots=4,
    num_nodes=2,
    node_rank=1,
    node_addr="10.0.0.2",
    launcher_report="/runs/7.1/launcher.json",
)


@pytest.mark.parametrize(
    "value",
    [FULL, TrialEnv(master="http://m", trial_id=1, experiment_id=1)],
    ids=["every-field", "defaults"],
)
def test_the_trial_env_round_trips(value: TrialEnv) -> None:
    env = value.to_env()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    assert TrialEnv.from_env(env) == value


def test_the_trial_env_keeps_its_formats() -> None:
    env = FULL.to_env()
    assert env["STRATUS_HPARAMS"] == '{"layers": {"n": 2}, "lr": 0.1}'  # JSON, keys sorted
    assert env["STRATUS_TRIAL_ID"] == "7" and env["STRATUS_SLOTS"] == "4"
    assert env["STRATUS_NUM_NODES"] == "2" and env["STRATUS_NODE_RANK"] == "1"
    single = TrialEnv(master="http://m", trial_id=1, experiment_id=1).to_env()
    assert single["STRATUS_LATEST_CHECKPOINT"] == ""  # none
    assert not {"STRATUS_NUM_NODES", "STRATUS_NODE_RANK", "STRATUS_NODE_ADDR"} & set(single)
    assert "secret-token" not in repr(FULL)


def test_without_a_trial_id_the_process_is_off_the_platform() -> None:
    assert TrialEnv.from_env({}) is None
    assert TrialEnv.from_env({"STRATUS_MASTER": "http://m", "STRATUS_TRIAL_ID": ""}) is None
    assert not trial_env.is_on_platform({"STRATUS_LOCAL_CONFIG": "/tmp/x.json"})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"STRATUS_MASTER": ""}, "STRATUS_MASTER is not set; the agent sets it"),
        (
            {"STRATUS_TRIAL_ID": "seven"},
            "STRATUS_TRIAL_ID='seven' is not a whole number; unset it or give one",
        ),
        ({"STRATUS_EXPERIMENT_ID": ""}, "STRATUS_EXPERIMENT_ID is not set"),
        ({"STRATUS_SLOTS": "1.5"}, "STRATUS_SLOTS='1.5' is not a whole number"),
        ({"STRATUS_HPARAMS": "[1, 2]"}, "STRATUS_HPARAMS is list, not a JSON object"),
        ({"STRATUS_HPARAMS": "{lr: 1}"}, "STRATUS_HPARAMS is not valid JSON"),
    ],
)
def test_a_malformed_variable_is_named_with_the_fix(changes: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidEnvironmentError, match=message):
        TrialEnv.from_env({**FULL.to_env(), **changes})


def test_the_readers() -> None:
    environ = {"A": " 3 ", "B": "", "S": "2.5", "L": " a, ,b ,"}
    assert trial_env.read_int(environ, "A") == 3
    assert trial_env.read_int(environ, "B") is None and trial_env.read_int(environ, "B", 1) == 1
    assert trial_env.read_seconds(environ, "S", 10.0) == 2.5
    assert trial_env.read_seconds(environ, "missing", 10.0) == 10.0
    assert trial_env.read_list(environ, "L") == ("a", "b")
    with pytest.raises(InvalidEnvironmentError, match=r"S='soon' is not a number of seconds"):
        trial_env.read_seconds({"S": "soon"}, "S", 1.0)


def test_every_name_is_ours_or_aws_batchs() -> None:
    names = [v for k, v in vars(trial_env).items() if k.isupper() and isinstance(v, str) and k != "PREFIX"]
    assert len(names) == len(set(names))
    assert all(n.startswith(trial_env.PREFIX) or n.startswith("AWS_BATCH_JOB_") for n in names)


# --- the package itself ------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted(CONTRACT_DIR.glob("*.py")), ids=lambda p: p.name)
def test_every_module_imports_only_the_standard_library(path: Path) -> None:
    outside = _imports(path) - set(sys.stdlib_module_names) - {"__future__", "contract"}
    assert not outside, (
        f"{path.name} imports {sorted(outside)}; the contract package is standard library only"
    )

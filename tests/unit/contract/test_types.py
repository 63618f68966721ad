"""The contract package on its own: each type round-trips, and a malformed value is refused with an error
that names it and says what to do."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

from stratus import contract
from stratus.contract import env as trial_env
from stratus.contract import local_events, messages, metric_groups
from stratus.contract.actions import SearcherAction
from stratus.contract.entrypoint import is_legacy_trial_class, legacy_trial_argv
from stratus.contract.env import TrialEnv
from stratus.contract.errors import (
    InvalidEnvironmentError,
    InvalidLaunchSpecError,
    InvalidMessageError,
    InvalidMetricGroupError,
)
from stratus.contract.launch import LaunchSpec
from stratus.contract.nni import is_nni_config, nni_config_version

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


# --- the launch spec --------------------------------------------------------------------------------

SPEC = LaunchSpec(
    run_id="7.1",
    trial_id=7,
    experiment_id=3,
    slots=2,
    entrypoint=("python3", "train.py"),
    environment=FULL.to_env(),
    context_url="https://bucket.example/contexts/abc.tar.zst?X-Amz-Signature=x",
    api_url="http://api.example:8000",
)


@pytest.mark.parametrize("spec", [SPEC, LaunchSpec("r", 1, 2, 0, "echo hi")], ids=["argv", "shell"])
def test_the_launch_spec_round_trips_through_json(spec: LaunchSpec) -> None:
    assert LaunchSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_the_launch_spec_ids_are_whole_numbers() -> None:
    parsed = LaunchSpec.from_json({**SPEC.to_json(), "trial_id": "7", "environment": {"N": 1, "E": None}})
    assert parsed.trial_id == 7 and parsed.experiment_id == 3
    assert parsed.environment == {"N": "1", "E": ""}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"run_id": ""}, "run_id is missing"),
        ({"trial_id": None}, "trial_id is missing"),
        ({"trial_id": "seven"}, "trial_id must be a whole number, not 'seven'"),
        ({"experiment_id": True}, "experiment_id must be a whole number"),
        ({"entrypoint": []}, "entrypoint must be a non-empty list of words or a string"),
        ({"entrypoint": "  "}, "entrypoint must be"),
        ({"environment": ["A=1"]}, "environment must be an object"),
        ({"slots": -1}, "slots must be an integer >= 0"),
        ({"context_url": 5}, "context_url must be a string or null"),
    ],
)
def test_a_launch_spec_the_agent_cannot_run_is_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidLaunchSpecError, match=message):
        LaunchSpec.from_json({**SPEC.to_json(), **changes})
    with pytest.raises(InvalidLaunchSpecError, match="a launch spec is an object, not list"):
        LaunchSpec.from_json([])


def test_the_spec_gives_the_trial_ids_the_environment_may_leave_out() -> None:
    bare = LaunchSpec("r", 1, 2, 1, ("x",))
    assert bare.identity_env("http://agent-default") == {
        "STRATUS_MASTER": "http://agent-default",
        "STRATUS_TRIAL_ID": "1",
        "STRATUS_EXPERIMENT_ID": "2",
        "STRATUS_RUN_ID": "r",
        "STRATUS_SLOTS": "1",
    }
    assert SPEC.identity_env("http://ignored")["STRATUS_MASTER"] == SPEC.api_url


# --- queue messages ----------------------------------------------------------------------------------

EVERY_MESSAGE = [
    messages.RequestSlots("tok", "7.1", 7, 3, "default", 2, 0),
    messages.ReleaseSlots("7.1", "default"),
    messages.CapacityChanged("default"),
    messages.Sweep("default"),
    messages.Sweep("default", at="2026-01-01T00:00:00Z"),
    messages.Launch("tok", "7.1", 7, 3, "agent-1"),
    messages.TrialExited("exited-7.1", 7, 3, "COMPLETED"),
    messages.TrialPaused("paused-7.1", 7, 3, "PAUSED"),
    messages.DeleteExperiment(3),
    messages.ValidationReported("validation-7-100", 3, 7, 100, 0.25),
]


@pytest.mark.parametrize("message", EVERY_MESSAGE, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message: messages.Message) -> None:
    body = message.to_body()
    assert body["type"] == message.TYPE.value and type(body["type"]) is str
    assert messages.parse(body) == message
    assert messages.parse(json.dumps(body)) == message


def test_every_type_has_one_class_and_one_queue() -> None:
    assert set(messages.MESSAGE_CLASSES) == set(messages.MessageType)
    queues = [messages.SCHEDULER_TYPES, messages.LAUNCH_TYPES, messages.EVENT_TYPES]
    assert sum(len(q) for q in queues) == len(messages.MessageType)
    assert set().union(*queues) == set(messages.MessageType)


def test_the_per_queue_parsers_take_their_own_types() -> None:
    assert isinstance(messages.parse_scheduler({"type": "sweep", "pool": "p"}), messages.Sweep)
    assert isinstance(messages.parse_launch(EVERY_MESSAGE[5].to_body()), messages.Launch)
    assert isinstance(messages.parse_event(EVERY_MESSAGE[-1].to_body()), messages.ValidationReported)
    deletion = messages.DeleteExperiment(3).to_body()
    assert messages.parse_events_queue(deletion) == messages.DeleteExperiment(3)
    with pytest.raises(InvalidMessageError, match="'delete_experiment' message does not belong"):
        messages.parse_event(deletion)  # the searcher's parser takes trial events only
    with pytest.raises(InvalidMessageError, match="'launch' message does not belong on this queue"):
        messages.parse_scheduler(EVERY_MESSAGE[5].to_body())


def test_numbers_are_read_as_the_state_machine_sends_them() -> None:
    parsed = messages.parse(
        {
            "type": "request",
            "token": "t",
            "run_id": "1.0",
            "trial_id": "1",
            "experiment_id": 2,
            "pool": "p",
            "slots": 1,
            "priority": 0,
            "extra": True,
        }
    )
    assert parsed == messages.RequestSlots("t", "1.0", 1, 2, "p", 1, 0)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"type": "resize", "pool": "p"}, "unknown message type 'resize'"),
        ({"pool": "p"}, "unknown message type None"),
        ({"type": "capacity"}, "a 'capacity' message needs 'pool'"),
        (
            {
                "type": "validation",
                "event_id": "e",
                "experiment_id": 1,
                "trial_id": 1,
                "length": 1,
                "metric": "low",
            },
            "'metric' of a 'validation' message is 'low', not a number",
        ),
        ({"type": "release", "run_id": "r", "pool": ["p"]}, "'pool' of a 'release' message is \\['p'\\]"),
        ("not json", "a queue message is not JSON"),
        ("[1]", "a queue message is a JSON object with a 'type', not list"),
    ],
)
def test_a_message_that_can_never_succeed_is_refused(body: object, message: str) -> None:
    with pytest.raises(InvalidMessageError, match=message):
        messages.parse(body)  # type: ignore[arg-type]


# --- searcher actions, NNI configs, legacy entrypoints -----------------------------------------------


def test_searcher_actions_are_the_strings_of_the_api() -> None:
    assert [a.value for a in SearcherAction] == ["train", "wait", "stop"]
    assert SearcherAction("wait") is SearcherAction.WAIT and SearcherAction.STOP == "stop"


@pytest.mark.parametrize(
    ("config", "nni", "version"),
    [
        ({"trialCommand": "python3 t.py", "searchSpace": {}}, True, 2),
        ({"authorName": "a", "trial": {"command": "x"}}, True, 1),
        ({"trial": {"command": "x"}}, True, 1),
        ({"localConfig": {}}, True, 1),
        ({"trial": "x"}, False, None),
        ({"entrypoint": "x", "trialCommand": "y"}, False, None),
        ({"hyperparameters": {}, "tuner": {}}, False, None),
        ({}, False, None),
    ],
)
def test_nni_configs_are_told_from_determined_ones(
    config: dict[str, object], nni: bool, version: int | None
) -> None:
    assert is_nni_config(config) is nni
    if version is not None:
        assert nni_config_version(config) == version
    assert is_nni_config(["trialCommand"]) is False  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("entrypoint", "slots", "argv"),
    [
        ("model_def:MyTrial", 1, ["python3", "-m", "stratus.harness.exec.run_trial", "model_def:MyTrial"]),
        (
            " pkg.model_def:MyTrial\n",
            1,
            ["python3", "-m", "stratus.harness.exec.run_trial", "pkg.model_def:MyTrial"],
        ),
        (
            "model_def:MyTrial",
            4,
            ["python3", "-m", "stratus.launchers.torch_distributed", "--trial", "model_def:MyTrial"],
        ),
        ("python3 train.py", 1, None),
        ("python3 -m a:b", 1, None),
        ("1model:Trial", 1, None),
        (["model_def:MyTrial"], 1, None),
    ],
)
def test_the_legacy_entrypoint_rule(entrypoint: object, slots: int, argv: list[str] | None) -> None:
    assert legacy_trial_argv(entrypoint, slots) == argv
    assert is_legacy_trial_class(entrypoint) is (argv is not None)


# --- the package itself ------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    """The top-level packages a module imports; the contract package itself counts as `contract`."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_top(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(_top(node.module))
    return found


def _top(module: str) -> str:
    return (
        "contract"
        if module == "stratus.contract" or module.startswith("stratus.contract.")
        else module.split(".")[0]
    )


@pytest.mark.parametrize("path", sorted(CONTRACT_DIR.glob("*.py")), ids=lambda p: p.name)
def test_every_module_imports_only_the_standard_library(path: Path) -> None:
    outside = _imports(path) - set(sys.stdlib_module_names) - {"__future__", "contract"}
    assert not outside, (
        f"{path.name} imports {sorted(outside)}; the contract package is standard library only"
    )


def test_events_file_reads_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "training"}\nnot json\n{"type": "valid')
    events = local_events.EventsReader(path)

    assert events.read() == [{"type": "training"}]
    with path.open("a") as f:
        f.write('ation"}\n{"type": "checkpoint"}')
    assert events.read() == [{"type": "validation"}]
    assert events.read(final=True) == [{"type": "checkpoint"}]


def test_local_events_are_one_line_each_of_a_known_type() -> None:
    line = local_events.encode(local_events.LocalEventType.CHECKPOINT, 5, uuid="u")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"type": "checkpoint", "steps_completed": 5, "uuid": "u"}
    with pytest.raises(ValueError, match="unknown local event type 'trainig'"):
        local_events.encode("trainig", 1)


def test_a_metric_group_is_any_non_empty_name_without_a_dot() -> None:
    for group in ("training", "validation", "group_b", "grou%p_c", "infer ence", "inf%er en/ce", "#", "ü"):
        assert metric_groups.check_metric_group(group) == group
    for group, message in {
        "a.b": "metric group 'a.b' contains '.'.*use another character, e.g. 'a_b'",
        ".": "contains '.'",
        "": "the metric group is empty",
        None: "metric group None is a NoneType",
    }.items():
        with pytest.raises(InvalidMetricGroupError, match=message):
            metric_groups.check_metric_group(group)

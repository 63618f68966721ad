"""Both ends of what crosses to a trial: the launch spec the control plane builds is the one the agent
parses, and the variables the control plane and the agent write are the ones the harness and the
launchers read (docs/contracts.md §2). Built by the real service function, read by the real readers."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from chalicelib.api import agent_models, models
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.run_records import Node, Placement, Run
from chalicelib.domain.states import ExperimentState, RunState, TrialState
from chalicelib.memory import memory_ports, memory_settings
from chalicelib.services import runs, tokens
from chalicelib.services.ports import Ports
from chalicelib.settings import reset_settings
from stratus.contract.actions import SearcherAction
from stratus.contract.env import TrialEnv
from stratus.contract.launch import LaunchSpec
from stratus.harness._info import load_cluster_info
from stratus.harness.agent._settings import Settings as AgentSettings
from stratus.harness.agent._spawn import build_environment
from stratus.launchers._info import load_launch_info, rendezvous_env

API_URL = "http://api.example:8000"
SECRET = "contract-secret"
CHECKPOINT = "0c4a9b8e-1a2b-4c3d-8e9f-0a1b2c3d4e5f"
SHA = "c" * 64
CONFIG = {
    "name": "contract",
    "entrypoint": "model_def:MyTrial",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    "resources": {"slots_per_trial": 4},
    "environment": {"environment_variables": ["FROM_CONFIG=yes"]},
}


@pytest.fixture
def control_plane(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in (
        "STRATUS_BUCKET",
        "STRATUS_SCHEDULER_QUEUE_URL",
        "STRATUS_LAUNCH_QUEUE_URL",
        "STRATUS_EVENTS_QUEUE_URL",
        "STRATUS_STATE_MACHINE_ARN",
        "STRATUS_AGENT_TOKEN",
    ):
        monkeypatch.setenv(name, f"unused-{name.lower()}")
    monkeypatch.setenv("STRATUS_TOKEN_SECRET", SECRET)
    monkeypatch.setenv("STRATUS_API_URL", API_URL)
    reset_settings()
    yield
    reset_settings()


def _ports() -> tuple[Ports, Node]:
    """A two-node run of trial 7 (experiment 3) and its node 1, in the in-memory twin of the stores."""
    ports = memory_ports(settings=memory_settings(token_secret=SECRET, api_url=API_URL))
    ports.experiments.create(
        Experiment(id=3, state=ExperimentState.ACTIVE, config=CONFIG, context_sha256=SHA)
    )
    ports.trials.create(
        Trial(
            id=7,
            experiment_id=3,
            state=TrialState.PULLING,
            hparams={"lr": 0.1, "layers": 2},
            latest_checkpoint=CHECKPOINT,
            trial_seed=42,
        )
    )
    nodes = (Placement("agent-0", 2), Placement("agent-1", 2))
    run = Run(
        run_id="7.1",
        trial_id=7,
        experiment_id=3,
        pool="default",
        slots=4,
        priority=42,
        state=RunState.LAUNCHING,
        nodes=nodes,
    )
    node = Node.launched(run, 1)
    ports.runs.items.update({run.run_id: run.to_item(), node.node_id: node.to_item()})
    return ports, node


def test_the_launch_spec_the_control_plane_builds_is_the_one_the_agent_runs(control_plane: None) -> None:
    ports, node = _ports()
    built = runs.launch_spec(ports, node)
    wire = json.loads(json.dumps(built.to_json()))  # as the heartbeat answers it

    agent_models.LaunchSpec.model_validate(wire)  # the API's documented answer accepts it
    parsed = LaunchSpec.from_json(wire)
    assert parsed == built
    assert (parsed.run_id, parsed.trial_id, parsed.experiment_id, parsed.slots) == ("7.1-node1", 7, 3, 2)
    # Determined's legacy entrypoint on 4 slots: the trial class under the distributed launcher.
    assert parsed.entrypoint == (
        "python3",
        "-m",
        "stratus.launchers.torch_distributed",
        "--trial",
        "model_def:MyTrial",
    )
    assert parsed.context_url is not None and SHA in parsed.context_url
    assert parsed.api_url == API_URL


def test_the_variables_written_are_the_ones_the_harness_and_the_launchers_read(
    control_plane: None, tmp_path: Path
) -> None:
    ports, node = _ports()
    spec = LaunchSpec.from_json(json.loads(json.dumps(runs.launch_spec(ports, node).to_json())))
    agent = AgentSettings(
        api_url="http://agent-default", agent_id="agent-1", pool="default", slots=2, work_dir=tmp_path
    )
    agent = dataclasses.replace(agent, address="10.0.0.2")
    env = build_environment(
        spec, agent, None, base={"PATH": "/usr/bin"}, probe=lambda e, n: (), run_dir=tmp_path
    )

    assert env["FROM_CONFIG"] == "yes"
    run_token = tokens.run_token(SECRET, "7.1")  # the run's token, not the node's
    assert TrialEnv.from_env(env) == TrialEnv(
        master=API_URL,
        trial_id=7,
        experiment_id=3,
        run_id="7.1",
        run_token=run_token,
        hparams={"lr": 0.1, "layers": 2},
        latest_checkpoint=CHECKPOINT,
        trial_seed=42,
        slots=4,
        num_nodes=2,
        node_rank=1,
        node_addr="10.0.0.2",
        launcher_report=str(tmp_path / "launcher.json"),
    )

    info = load_cluster_info(env)  # the harness
    assert info is not None
    assert (info.trial.trial_id, info.trial.experiment_id, info.run_id) == (7, 3, "7.1")
    assert info.trial.hparams == {"lr": 0.1, "layers": 2} and info.trial.trial_seed == 42
    assert info.latest_checkpoint == CHECKPOINT and info.master_url == API_URL
    assert info.slots == 4 and info.run_token == run_token

    launch = load_launch_info(env)  # the launchers
    assert (launch.slots, launch.num_nodes, launch.node_rank, launch.slots_per_node) == (4, 2, 1, 2)
    assert launch.run_id == "7.1" and launch.report_path == str(tmp_path / "launcher.json")
    rendezvous = rendezvous_env(env)
    assert (rendezvous.master, rendezvous.trial_id, rendezvous.token) == (API_URL, "7", run_token)
    assert rendezvous.node_addr == "10.0.0.2"


def test_the_api_models_have_the_contracts_fields() -> None:
    assert list(agent_models.LaunchSpec.model_fields) == [f.name for f in dataclasses.fields(LaunchSpec)]
    for name in ("trial_id", "experiment_id", "slots"):
        assert agent_models.LaunchSpec.model_fields[name].annotation is int
    action = models.SearcherOp.model_fields["action"].annotation
    assert get_args(action) == tuple(a.value for a in SearcherAction)

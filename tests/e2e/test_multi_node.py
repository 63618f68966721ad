"""Multi-node trials on a local pool of two agents with one slot each (two nodes on this machine): the
nodes find each other through the control plane's rendezvous record, a 2-worker DDP training completes
across them, and a crash of rank 1 (on node 1) ends the workers of both nodes, naming rank 1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from infra.local_stack import BackgroundStack
from tests.e2e.conftest import det_runner, wait_for
from tests.e2e.test_distributed import CRASH_RANK_1
from tests.e2e.test_experiments import _created_id, _describe

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    stack = BackgroundStack(tmp_path_factory.mktemp("two-nodes"), slots=1, agents=2)
    try:
        yield {**stack.state, "state_dir": str(stack.log_path.parent)}
    finally:
        stack.stop()


def _run_record(state: dict[str, str], trial_id: int, attempt: int = 1) -> dict:
    dynamo = boto3.client(
        "dynamodb",
        endpoint_url=state["moto_url"],
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )
    item = dynamo.get_item(TableName="stratus-runs", Key={"run_id": {"S": f"{trial_id}.{attempt}"}})["Item"]
    return item


def test_ddp_training_across_two_agents_completes(two_nodes):
    det = det_runner(two_nodes["api_url"])
    result = det(
        "experiment",
        "create",
        "examples/determined_trial/const.yaml",
        "examples/determined_trial",
        "--config",
        "resources.slots_per_trial=2",
        "--config",
        "searcher.max_length.epochs=2",
        "-f",
        timeout=300,
    )
    assert result.code == 0, result.out + result.err
    (trial,) = _describe(det, _created_id(result.out))["trials"]
    assert trial["state"] == "COMPLETED" and trial["best_validation"] > 0.8
    run = _run_record(two_nodes, trial["id"])
    assert [n["M"]["agent_id"]["S"] for n in run["nodes"]["L"]] == ["local-0", "local-1"]
    # Both nodes registered in the rendezvous record, the chief with its port.
    rendezvous = run["rendezvous"]["M"]
    assert sorted(rendezvous) == ["0", "1"] and "N" in rendezvous["0"]["M"]["port"]
    logs = det("trial", "logs", str(trial["id"]), "--rank", "1")
    assert logs.code == 0 and logs.out.strip()
    assert all(line.startswith("[rank=1]") for line in logs.out.splitlines())


def test_a_crash_of_rank_1_on_node_1_stops_both_nodes_and_names_it(two_nodes, tmp_path: Path):
    det = det_runner(two_nodes["api_url"])
    (tmp_path / "crash.py").write_text(CRASH_RANK_1)
    (tmp_path / "crash.yaml").write_text(
        "name: crash-rank-1-two-nodes\n"
        "entrypoint: python3 -m launchers.torch_distributed -- crash.py\n"
        "searcher: {name: single, metric: loss, max_length: 10}\n"
        "resources: {slots_per_trial: 2}\n"
        "max_restarts: 0\n"
    )
    result = det("experiment", "create", str(tmp_path / "crash.yaml"), str(tmp_path), "-f", timeout=240)
    assert result.code != 0
    (trial,) = _describe(det, _created_id(result.out))["trials"]
    assert trial["state"] == "ERROR"
    assert trial["exit"]["code"] == 3 and trial["exit"]["failed_rank"] == 1
    assert trial["exit"]["reason"] == "node 1 of 2 (agent local-1): rank 1 failed first with exit code 3"
    shown = det("trial", "describe", str(trial["id"]))
    assert f"Failed first: rank 1 (its lines: det trial logs {trial['id']} --rank 1)" in shown.out
    # Node 1 ended by its crash; node 0 was killed by its agent (told by the control plane), workers and all.
    run = _run_record(two_nodes, trial["id"])
    assert run["state"]["S"] == "EXITED"
    agent_log = Path(two_nodes["state_dir"]) / "local-0.log"
    node0 = f"{run['run_id']['S']}-node0"
    wait_for(
        lambda: f"run {node0} ended" in agent_log.read_text(),
        timeout=60,
        what=f"the end of {node0} on local-0",
    )
    assert f"killing run {node0}" in agent_log.read_text()
    logs = det("trial", "logs", str(trial["id"])).out
    assert "[launcher] rank 1 exited with code 3" in logs
    assert "rank 1 crashing on purpose" in logs
    assert json.loads(det("trial", "describe", str(trial["id"]), "--json").out)["trial"]["state"] == "ERROR"

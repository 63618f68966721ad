"""Multi-node trials on a local pool of two agents with one slot each (two nodes on this machine): the
nodes find each other through the control plane's rendezvous record, a 2-worker DDP training completes
across them, and a crash of rank 1 (on node 1) ends the workers of both nodes, naming rank 1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory, two_agent_pool) -> Iterator[dict[str, str]]:
    with two_agent_pool(tmp_path_factory.mktemp("two-nodes")) as pool:
        yield pool


def test_ddp_training_across_two_agents_completes(two_nodes, det_runner, run_record):
    trial = det_runner(two_nodes["api_url"]).train_ddp(epochs=2)
    run = run_record(two_nodes["moto_url"], f"{trial['id']}.1")
    assert [n["M"]["agent_id"]["S"] for n in run["nodes"]] == ["local-0", "local-1"]
    # Both nodes registered in the rendezvous record, the chief with its port.
    rendezvous = run["rendezvous"]
    assert sorted(rendezvous) == ["0", "1"] and "N" in rendezvous["0"]["M"]["port"]


def test_a_crash_of_rank_1_on_node_1_stops_both_nodes_and_names_it(
    two_nodes, tmp_path: Path, det_runner, run_record, wait_for
):
    trial = det_runner(two_nodes["api_url"]).crash_rank_1(tmp_path)
    assert trial["exit"]["reason"] == "node 1 of 2 (agent local-1): rank 1 failed first with exit code 3"
    # Node 1 ended by its crash. Node 0 ends too: either its agent kills it (told by the control plane
    # at its next heartbeat) or, first, its rank 0 sees the dead peer in the collective and fails.
    run = run_record(two_nodes["moto_url"], f"{trial['id']}.1")
    assert run["state"] == "EXITED"
    agent_log = Path(two_nodes["state_dir"]) / "local-0.log"
    node0 = f"{run['run_id']}-node0"
    wait_for(
        lambda: f"run {node0} ended" in agent_log.read_text(),
        timeout=60,
        what=f"the end of {node0} on local-0",
    )

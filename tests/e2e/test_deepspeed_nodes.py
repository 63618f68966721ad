"""A trial under DeepSpeed's launcher on two nodes: a local pool of two agents with one slot each (two
nodes on this machine, both at 127.0.0.1). Each node's `stratus.launchers.deepspeed` runs its own `deepspeed
--no_ssh --node_rank R` with the hostfile built from the rendezvous record, and a gloo all-reduce across
the two nodes completes. DeepSpeed is not a dependency of Stratus, but `make` installs it for these tests
(on a CPU-only machine DS_ACCELERATOR=cpu, which the trial gets unless the environment says else)."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory, two_agent_pool) -> Iterator[dict[str, str]]:
    with two_agent_pool(tmp_path_factory.mktemp("deepspeed-nodes")) as pool:
        yield pool


def test_gloo_all_reduce_under_deepspeed_across_two_agents_completes(
    two_nodes, tmp_path: Path, all_reduce, det_runner
):
    det = det_runner(two_nodes["api_url"])
    accelerator = os.environ.get("DS_ACCELERATOR", "cpu")
    result, trial = det.follow_experiment(
        tmp_path,
        "name: deepspeed-two-nodes\n"
        "entrypoint: python3 -m stratus.launchers.deepspeed -- script.py\n"
        "searcher: {name: single, metric: loss, max_length: 1}\n"
        "resources: {slots_per_trial: 2}\n"
        "max_restarts: 0\n"
        f"environment: {{environment_variables: [DS_ACCELERATOR={accelerator}]}}\n",
        {"script.py": textwrap.dedent(all_reduce)},
        timeout=300,
    )
    logs = det("trial", "logs", str(trial["id"]))
    assert result.code == 0 and trial["state"] == "COMPLETED", logs.out[-4000:] + result.err
    assert trial["exit"]["reason"] == "all 2 nodes exited with code 0"
    # Each node ran DeepSpeed's own per-node launcher, node_rank 0 and 1, both with the chief's address.
    launches = [line for line in logs.out.splitlines() if "-m deepspeed.launcher.launch" in line]
    assert sorted(line.split("--node_rank=")[1].split()[0] for line in launches) == ["0", "1"]
    assert all("--master_addr=127.0.0.1" in line for line in launches)
    for rank in (0, 1):
        ranked = det("trial", "logs", str(trial["id"]), "--rank", str(rank))
        assert ranked.code == 0
        assert ranked.out.splitlines() == [f"[rank={rank}] sum=3 rank={rank}/2 local=0"]
    assert (
        json.loads(det("trial", "describe", str(trial["id"]), "--json").out)["trial"]["state"] == "COMPLETED"
    )

"""NNI's AdaptDL training service end to end (issue 15): `examples/nni_adaptdl` (an NNI v1 `adl` config
and AdaptDL trial code, unchanged) on a local stack of its own with one 2-slot agent, beside two fixed
1-slot experiments that each hold their slot until the test lets them finish (a file appears):

1. B holds one slot; A (elastic, `min_rescale_interval_s: 5`) starts on 1 replica in the other.
2. B finishes: the slot is idle and nothing waits, so the allocator grows A to 2 replicas (AdaptDL saves
   on SIGTERM, the run exits 0, the trial is requeued for 2 slots and resumes from the checkpoint).
3. C is submitted: its request does not fit, so A shrinks back to 1 replica and C gets the slot.
4. C finishes; A completes (growing again if it has time: allowed, not required).

Rank 0's `EPOCH e done restart=n replicas=r` lines over all of A's runs show every epoch exactly once
(AdaptDL resumed from its checkpoint each time), with the sizes 1, 2, 1 in that order, and `det trial
describe` shows the replicas over time with the reason of each size and NNI's SUCCEEDED.

On a stack of two 1-slot agents the same trial grows onto both (two nodes, one replica each) when nothing
else runs, gives up a whole agent when an experiment queues, and completes with every epoch once: each
node's launcher is told of the stop (AdaptDL's replicas save on every node) and the allocator takes a
whole agent back from a run on several.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local_stack import BackgroundStack

pytestmark = pytest.mark.e2e
pytest.importorskip("adaptdl.torch", reason="adaptdl (requirements-dev.txt) is not installed")

EPOCHS = 20
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nni_adaptdl"

#: A fixed trial that holds its slot until its gate file appears.
GATED = """
import os, sys, time
gate = sys.argv[1]
print(f"holding a slot until {gate} exists", flush=True)
while not os.path.exists(gate):
    time.sleep(0.2)
print("released", flush=True)
"""

EPOCH_LINE = re.compile(r"EPOCH (\d+) done restart=(\d+) replicas=(\d+) rank=0\b")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A stack of this module's own: one agent of 2 slots, shared with no other test."""
    stack = BackgroundStack(tmp_path_factory.mktemp("adaptdl-stack"), slots=2)
    try:
        yield stack.state
    finally:
        stack.stop()


@pytest.fixture
def det(stack, det_runner) -> Any:
    return det_runner(stack["api_url"])


def gated(det, folder: Path, name: str) -> tuple[int, Path]:
    """A fixed 1-slot experiment holding its slot until the returned gate file exists."""
    folder.mkdir()
    (folder / "gated.py").write_text(GATED)
    gate = folder / "gate"
    config = [
        f"name: {name}",
        f"entrypoint: python3 gated.py {gate}",
        "searcher: {name: single, metric: loss, max_length: 1}",
        "max_restarts: 0",
    ]
    (folder / "config.yaml").write_text("\n".join(config) + "\n")
    created = det("experiment", "create", str(folder / "config.yaml"), str(folder))
    assert created.code == 0, created.out + created.err
    return det.created_experiment_id(created.out), gate


def epochs(det, trial_id: int) -> list[tuple[int, int, int]]:
    """(epoch, restart, replicas) of rank 0's finished epochs, in log order."""
    logs = det.read("trial", "logs", str(trial_id)).out
    return [(int(e), int(n), int(r)) for e, n, r in EPOCH_LINE.findall(logs)]


def trial_of(det, experiment_id: int) -> dict:
    (trial,) = det.describe_experiment(experiment_id)["trials"]
    return trial


def submit_adl(det, folder: Path) -> int:
    """The example as experiment A (`min_rescale_interval_s: 5`, EPOCHS epochs); its id."""
    shutil.copytree(EXAMPLE, folder)
    created = det(
        "experiment",
        "create",
        str(folder / "config_adl.yml"),
        str(folder),
        "--config",
        "elastic.min_rescale_interval_s=5",
        "--config",
        f"environment.environment_variables=[EPOCHS={EPOCHS}, STEP_SLEEP=0.05]",
    )
    assert created.code == 0, created.out + created.err
    return det.created_experiment_id(created.out)


def assert_every_epoch_once_at_sizes(
    det, trial_id: int, sizes: list[int], *, by_epochs: bool = True
) -> list[tuple[str, dict]]:
    """Rank 0 finished every epoch once, in order, across restarts, and `det trial describe` says SUCCEEDED
    with runs of ``sizes`` replicas first; with ``by_epochs``, rank 0's epochs show those sizes too (only
    where each of those runs finished an epoch: a run may be rescaled before its first); the runs'
    entries in order."""
    done = epochs(det, trial_id)
    print("rank 0's epochs (epoch, restart, replicas):", done)
    assert [e for e, _, _ in done] == list(range(EPOCHS))  # every epoch once, in order, across restarts
    restarts = [n for _, n, _ in done]
    assert restarts == sorted(restarts)
    if by_epochs:
        began = [r for i, (_, _, r) in enumerate(done) if i == 0 or done[i - 1][1] != done[i][1]]
        assert began[: len(sizes)] == sizes, began
        assert restarts[0] == 0 and len(set(restarts)) >= len(sizes)
    shown = json.loads(det("trial", "describe", str(trial_id), "--json").out)["trial"]
    assert shown["nni_status"] == "SUCCEEDED"
    runs = sorted(shown["elastic"]["runs"].items(), key=lambda item: int(item[0].rpartition(".")[2]))
    assert [entry["replicas"] for _, entry in runs][: len(sizes)] == sizes
    return runs


def test_an_adl_trial_grows_into_a_freed_slot_shrinks_for_queued_work_and_completes_every_epoch_once(
    det, tmp_path: Path, wait_for
) -> None:
    exp_b, gate_b = gated(det, tmp_path / "b", "fixed-b")
    wait_for(lambda: trial_of(det, exp_b)["state"] == "RUNNING", 120, "B running")

    exp_a = submit_adl(det, tmp_path / "a")
    trial_a = wait_for(lambda: (t := trial_of(det, exp_a))["state"] == "RUNNING" and t, 120, "A running")
    wait_for(lambda: epochs(det, trial_a["id"]), 180, "A's first epoch on 1 replica")
    assert epochs(det, trial_a["id"])[0][1:] == (0, 1)

    gate_b.touch()  # B finishes: A grows into its slot
    wait_for(lambda: any(r == 2 for _, _, r in epochs(det, trial_a["id"])), 240, "A on 2 replicas")
    shown = json.loads(det("trial", "describe", str(trial_a["id"]), "--json").out)["trial"]
    assert shown["nni_status"] == "RUNNING"

    exp_c, gate_c = gated(det, tmp_path / "c", "fixed-c")  # C queues: A shrinks to let it in
    wait_for(lambda: trial_of(det, exp_c)["state"] == "RUNNING", 240, "C running")
    wait_for(lambda: [r for _, _, r in epochs(det, trial_a["id"])][-1:] == [1], 240, "A back on 1 replica")
    gate_c.touch()

    def ended() -> dict | None:
        described = det.describe_experiment(exp_a)
        return described if described["experiment"]["state"] in ("COMPLETED", "ERROR") else None

    described = wait_for(ended, 420, "A to end")
    assert described["experiment"]["state"] == "COMPLETED"
    assert wait_for(lambda: trial_of(det, exp_c)["state"] == "COMPLETED", 120, "C to complete")

    runs = assert_every_epoch_once_at_sizes(det, trial_a["id"], [1, 2, 1])
    reasons = [entry["reason"] for _, entry in runs]
    assert reasons[0] == "start"
    assert reasons[1].startswith("grow: 1 slot idle and nothing queued")
    assert reasons[2].startswith(f"shrink: run {trial_of(det, exp_c)['id']}.1 (priority 42) waits for 1 slot")
    table = det("trial", "describe", str(trial_a["id"])).out
    assert "Replicas over time:" in table and "SUCCEEDED" in table


def test_an_adl_trial_on_two_agents_gives_one_up_for_queued_work_and_completes_every_epoch_once(
    det_runner, tmp_path: Path, wait_for
) -> None:
    stack = BackgroundStack(tmp_path / "stack", slots=1, agents=2)
    try:
        det = det_runner(stack.state["api_url"])
        exp_a = submit_adl(det, tmp_path / "a")  # alone on the pool: it grows onto the second agent
        trial_a = wait_for(lambda: (t := trial_of(det, exp_a))["state"] == "RUNNING" and t, 120, "A running")
        wait_for(lambda: any(r == 2 for _, _, r in epochs(det, trial_a["id"])), 240, "A on 2 nodes")
        exp_c, gate_c = gated(det, tmp_path / "c", "fixed-c")  # C queues: A gives up an agent for it
        wait_for(lambda: trial_of(det, exp_c)["state"] == "RUNNING", 240, "C running")
        wait_for(lambda: [r for _, _, r in epochs(det, trial_a["id"])][-1:] == [1], 240, "A back on 1 node")
        gate_c.touch()

        def ended() -> dict | None:
            described = det.describe_experiment(exp_a)
            return described if described["experiment"]["state"] in ("COMPLETED", "ERROR") else None

        assert wait_for(ended, 420, "A to end")["experiment"]["state"] == "COMPLETED"
        # its first run may be grown before it finishes an epoch: the sizes are the runs' (describe)
        runs = assert_every_epoch_once_at_sizes(det, trial_a["id"], [1, 2, 1], by_epochs=False)
        assert runs[2][1]["reason"].startswith(
            f"shrink: run {trial_of(det, exp_c)['id']}.1 (priority 42) waits for 1 slot"
        )
    finally:
        stack.stop()

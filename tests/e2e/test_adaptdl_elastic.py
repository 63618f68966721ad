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

AdaptDL's defaults (issue 28): a trial written as AdaptDL's tutorial writes one,
``autoscale_batch_size(1024, local_bsz_bounds=(32, 256))`` with no ``gradient_accumulation`` (False),
grows from 1 to 2 replicas and trains on long enough (over 30 s in one run) for AdaptDL to fit its
goodput model and run ``GoodputFunction.optimize(accumulation=False)``, which uses ``np.int``; numpy 2 has
none, and only the launcher's numpy alias layer (`stratus.launchers._adaptdl_numpy`) lets it complete.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det.deploy.background import BackgroundStack

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

#: Digits as AdaptDL's tutorial (docs/adaptdl-pytorch.rst) writes a trial, reporting to NNI as an adl trial
#: does: `autoscale_batch_size` at AdaptDL's defaults (no gradient_accumulation: False).
DEFAULTS_TRIAL = """
import os, time
import adaptdl.env, adaptdl.torch, nni, torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

EPOCHS, STEP_SLEEP = int(os.environ["EPOCHS"]), float(os.environ["STEP_SLEEP"])
digits = load_digits()
x, y = torch.tensor(digits.data / 16.0, dtype=torch.float32), torch.tensor(digits.target)
order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))
train_set, valid_set = TensorDataset(x[order[360:]], y[order[360:]]), TensorDataset(x[order[:360]], y[order[:360]])

torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
adaptdl.torch.init_process_group("gloo")
model = adaptdl.torch.AdaptiveDataParallel(model, optimizer)
train_loader = adaptdl.torch.AdaptiveDataLoader(train_set, drop_last=True, batch_size=32, shuffle=True)
valid_loader = adaptdl.torch.AdaptiveDataLoader(valid_set, batch_size=100)
train_loader.autoscale_batch_size(1024, local_bsz_bounds=(32, 256))

rank, accuracy = adaptdl.env.replica_rank(), 0.0
for epoch in adaptdl.torch.remaining_epochs_until(EPOCHS):
    model.train()
    local_bsz = accumulation = None  # None: restarted after this epoch's training, in its validation
    for inputs, targets in train_loader:
        optimizer.zero_grad()
        F.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        local_bsz, accumulation = train_loader.current_local_bsz, train_loader.accumulation_steps
        time.sleep(STEP_SLEEP)
    model.eval()
    stats = adaptdl.torch.Accumulator()
    with torch.no_grad():
        for inputs, targets in valid_loader:
            stats["correct"] += (model(inputs).argmax(dim=1) == targets).sum().item()
            stats["total"] += targets.size(0)
    with stats.synchronized():
        accuracy = stats["correct"] / stats["total"]
    if rank == 0:
        nni.report_intermediate_result(accuracy)
    print(f"EPOCH {epoch} done restart={adaptdl.env.num_restarts()} replicas={adaptdl.env.num_replicas()} "
          f"rank={rank} local_bsz={local_bsz} accumulation={accumulation}",
          flush=True)
if rank == 0:
    nni.report_final_result(accuracy)
"""
#: Epochs of about 3 s at 1 replica: the allocator grows the trial once the growth pays for its restart
#: (by its start's length; later under load), and then it runs on 2 replicas past AdaptDL's first goodput
#: fit (30 s into a run) for several epochs before it ends. On 2 cores under the tier's load it grew after
#: epoch 7 and the fit came at epoch 20; no more than 14 epochs fit in 30 s at either size (44 steps of
#: STEP_SLEEP), so even a late grow leaves many epochs on 2 replicas past the fit (each of only a few
#: batches then).
DEFAULTS_EPOCHS = 50
BATCH_LINE = re.compile(
    r"EPOCH (\d+) done restart=\d+ replicas=(\d+) rank=0 local_bsz=(\d+|None) accumulation=(\d+|None)"
)


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


def submit_adl(
    det, folder: Path, *, epochs: int = EPOCHS, trial: str | None = None, interval_s: int = 5
) -> int:
    """The example as experiment A (`min_rescale_interval_s: interval_s`, ``epochs`` epochs), with ``trial``
    as its trial.py where given; its id."""
    shutil.copytree(EXAMPLE, folder)
    if trial is not None:
        (folder / "trial.py").write_text(trial)
    created = det(
        "experiment",
        "create",
        str(folder / "config_adl.yml"),
        str(folder),
        "--config",
        f"elastic.min_rescale_interval_s={interval_s}",
        "--config",
        f"environment.environment_variables=[EPOCHS={epochs}, STEP_SLEEP=0.05]",
    )
    assert created.code == 0, created.out + created.err
    return det.created_experiment_id(created.out)


def assert_every_epoch_once_at_sizes(
    det, trial_id: int, sizes: list[int], *, by_epochs: bool = True, total: int = EPOCHS
) -> list[tuple[str, dict]]:
    """Rank 0 finished every epoch once, in order, across restarts, and `det trial describe` says SUCCEEDED
    with runs of ``sizes`` replicas first; with ``by_epochs``, rank 0's epochs show those sizes too (only
    where each of those runs finished an epoch: a run may be rescaled before its first); the runs'
    entries in order."""
    done = epochs(det, trial_id)
    print("rank 0's epochs (epoch, restart, replicas):", done)
    assert [e for e, _, _ in done] == list(range(total))  # every epoch once, in order, across restarts
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


def test_an_adl_trial_at_adaptdls_autoscale_defaults_grows_to_2_replicas_and_completes_every_epoch_once(
    det, tmp_path: Path, wait_for
) -> None:
    # not rescaled in its first 30 s: a replica stopped while still importing torch (a loaded machine) dies
    # of the SIGTERM before AdaptDL can save, which ends the trial (AdaptDL saved nothing)
    exp = submit_adl(det, tmp_path / "a", epochs=DEFAULTS_EPOCHS, trial=DEFAULTS_TRIAL, interval_s=30)
    trial = wait_for(lambda: (t := trial_of(det, exp))["state"] == "RUNNING" and t, 120, "the trial running")

    def ended() -> str | None:
        found = det.describe_experiment(exp)["experiment"]["state"]
        return found if found in ("COMPLETED", "ERROR", "CANCELED") else None

    def grown_or_ended() -> str | None:
        return "grown" if any(r == 2 for _, _, r in epochs(det, trial["id"])) else ended()

    def logs() -> str:
        return det.read("trial", "logs", str(trial["id"])).out

    def errors() -> str:
        return "\n".join(line for line in logs().splitlines() if "Error" in line)[-3000:]

    grown = wait_for(grown_or_ended, 300, "the trial on 2 replicas", seen=lambda: epochs(det, trial["id"]))
    # without the layer, rank 0 dies 30 s into a run: "AttributeError: module 'numpy' has no attribute 'int'"
    assert grown == "grown", errors()
    assert wait_for(ended, 600, "the trial to end") == "COMPLETED", errors()
    # it was grown before or after its first epoch: the sizes are the runs' (describe)
    assert_every_epoch_once_at_sizes(det, trial["id"], [1, 2], by_epochs=False, total=DEFAULTS_EPOCHS)

    text = logs()
    found = BATCH_LINE.findall(text)
    print("rank 0's (epoch, replicas, local batch size, accumulation steps):", found)
    assert [int(e) for e, _, _, _ in found] == list(range(DEFAULTS_EPOCHS))
    batches = [(int(r), int(b), int(a)) for _, r, b, a in found if b != "None"]  # a run's training epochs
    assert {a for _, _, a in batches} == {0}  # no gradient accumulation: AdaptDL's default
    # AdaptDL fitted its goodput model and chose the 2 replicas' batch size with it (without it, a local
    # batch is 32 / 2): optimize(accumulation=False) ran in the replicas
    assert any(r == 2 and 32 <= b <= 256 for r, b, _ in batches), found
    hints = json.loads(det("trial", "describe", str(trial["id"]), "--json").out)["trial"]["elastic"]["hints"]
    assert hints["gradientAccumulation"] is False and hints["perfParams"] is not None
    assert set(hints["speedup"]) >= {"1", "2"}  # the launcher's goodput at accumulation=False, too
    assert "adaptdl.goodput uses np.int, gone from numpy" in text

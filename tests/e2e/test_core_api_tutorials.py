"""Scripts in the shapes of Determined's Core API tutorials and fixtures, run on the local stack through
the `det` CLI with the `determined` stand-in: a launcher of its own workers under
`determined.launch.wrap_rank` whose allgather sums every rank's value across 8 slots, a
`determined.experimental.core_v2` script, a script reporting in any order with `det.LOG_FORMAT`,
`determined.common.util` and `core_context.alert`, and a script using what the stand-in lacks, which
fails naming it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from det.deploy.background import BackgroundStack

pytestmark = pytest.mark.e2e

# The shape of 4_distributed.py: one script, started as the launcher, which starts one worker per slot.
ALLGATHER = """
import logging, subprocess, sys
import determined as det

def worker(info, rank, local_rank):
    slots = len(info.slot_ids)
    dist = det.core.DistributedContext(
        rank=rank, size=slots * len(info.container_addrs), local_rank=local_rank, local_size=slots,
        cross_rank=info.container_rank, cross_size=len(info.container_addrs), chief_ip=info.container_addrs[0],
    )
    with det.core.init(distributed=dist) as core:
        total = 0
        for step in range(1, 21):
            total += sum(core.distributed.allgather(rank + info.trial.hparams["base"]))
            if step % 10 == 0:
                core.train.report_validation_metrics(steps_completed=step, metrics={"total": total})
                if core.preempt.should_preempt():
                    return
        logging.info("rank %d sees total %d", rank, total)

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    if sys.argv[1] == "launcher":
        slots = len(info.slot_ids)
        ranks = [(info.container_rank * slots + local, local) for local in range(slots)]
        procs = [
            subprocess.Popen(["python3", "-m", "determined.launch.wrap_rank", str(rank), "--",
                              "python3", __file__, "worker", str(rank), str(local)])
            for rank, local in ranks
        ]
        sys.exit(max(p.wait() for p in procs))
    worker(info, int(sys.argv[2]), int(sys.argv[3]))
"""

CORE_V2 = """
from determined.experimental import core_v2

core_v2.init(config=core_v2.Config(name="ignored on the platform"))
for step in range(1, 6):
    core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
core_v2.train.report_validation_metrics(steps_completed=5, metrics={"loss": 0.2})
with core_v2.checkpoint.store_path({"steps_completed": 5}) as (path, _):
    (path / "state").write_text(str(core_v2.info.trial.hparams["base"]))
(core_v2.train.get_tensorboard_path() / "events.txt").write_text("x")
print("tensorboard folder written", flush=True)
core_v2.close()
"""

ANY_ORDER = """
import itertools, logging
import determined as det
from determined.common import util as det_util

logging.basicConfig(level=logging.DEBUG, format=det.LOG_FORMAT)
with det.core.init() as core_context:
    step = 0
    for actions in itertools.permutations(["train", "val", "ckpt"]):
        step += 1
        for action in actions:
            if action == "train":
                core_context.train.report_training_metrics(steps_completed=step, metrics={"x": step})
            elif action == "val":
                core_context.train.report_validation_metrics(steps_completed=step, metrics={"x": step})
            else:
                with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _):
                    (path / "state").write_text(f"step: {step}")
    logging.info("groups %s and %s", det_util._LEGACY_TRAINING, det_util._LEGACY_VALIDATION)
    core_context.alert(title="end of main", level="debug")
"""

UNSUPPORTED = """
import determined.keras
"""


def config(name: str, entrypoint: str, slots: int = 1) -> str:
    return (
        f"name: {name}\nentrypoint: {entrypoint}\n"
        f"resources: {{slots_per_trial: {slots}}}\n"
        "hyperparameters: {base: 1}\nsearcher: {name: single, metric: total}\nmax_restarts: 0\n"
    )


@pytest.fixture(scope="module")
def det_8_slots(tmp_path_factory: pytest.TempPathFactory, det_runner: Any) -> Iterator[Any]:
    """`det` against a local stack of one 8-slot agent (the tutorial's slots_per_trial: 8)."""
    stack = BackgroundStack(tmp_path_factory.mktemp("stack8"), slots=8)
    try:
        yield det_runner(stack.state["api_url"])
    finally:
        stack.stop()


def test_wrapped_workers_allgather_across_8_slots(det_8_slots: Any, tmp_path: Path) -> None:
    cfg = config("allgather-8", "python3 allgather.py launcher", slots=8)
    result, trial = det_8_slots.follow_experiment(tmp_path, cfg, {"allgather.py": ALLGATHER}, timeout=300)
    assert result.code == 0, result.out + result.err
    # each step adds every rank's value: (0+1) + (1+1) + ... + (7+1) = 36; 20 steps
    assert trial["state"] == "COMPLETED" and trial["latest_validation"]["total"] == 720
    for rank in (0, 7):
        logs = det_8_slots("trial", "logs", str(trial["id"]), "--rank", str(rank)).out.splitlines()
        assert any(f"rank {rank} sees total 720" in line for line in logs)
        assert all(line.startswith(f"[rank={rank}] ") for line in logs)


def test_wrapped_workers_on_two_nodes_find_the_chief_through_the_rendezvous(
    two_agent_pool: Any, det_runner: Any, tmp_path: Path
) -> None:
    with two_agent_pool(tmp_path / "stack") as stack:
        det = det_runner(stack["api_url"])
        (tmp_path / "ctx").mkdir()
        cfg = config("allgather-2-nodes", "python3 allgather.py launcher", slots=2)
        result, trial = det.follow_experiment(tmp_path / "ctx", cfg, {"allgather.py": ALLGATHER}, timeout=300)
        assert result.code == 0, result.out + result.err
        # (0+1) + (1+1) = 3 per step, 20 steps
        assert trial["state"] == "COMPLETED" and trial["latest_validation"]["total"] == 60
        logs = det("trial", "logs", str(trial["id"])).out
        assert "rank 1 sees total 60" in logs and "ready on 2 nodes" in logs


def test_core_v2_script_reports_through_the_trial(det: Any, tmp_path: Path) -> None:
    result, trial = det.follow_experiment(tmp_path, config("core-v2", "python3 v2.py"), {"v2.py": CORE_V2})
    assert result.code == 0, result.out + result.err
    assert trial["state"] == "COMPLETED" and trial["latest_validation"]["loss"] == 0.2
    shown = json.loads(det("trial", "describe", str(trial["id"]), "--json").out)
    assert [c["steps_completed"] for c in shown["checkpoints"]] == [5]
    logs = det("trial", "logs", str(trial["id"])).out
    assert "tensorboard folder written" in logs and "Stratus does not upload them" in logs


def test_any_order_script_with_common_util_and_alert(det: Any, tmp_path: Path) -> None:
    result, trial = det.follow_experiment(
        tmp_path, config("any-order", "python3 order.py"), {"order.py": ANY_ORDER}
    )
    assert result.code == 0, result.out + result.err
    assert trial["state"] == "COMPLETED" and trial["latest_validation"]["x"] == 6
    shown = json.loads(det("trial", "describe", str(trial["id"]), "--json").out)
    assert [c["steps_completed"] for c in shown["checkpoints"]] == [1, 2, 3, 4, 5, 6]
    logs = det("trial", "logs", str(trial["id"])).out
    assert "[alert] DEBUG: end of main" in logs and "groups training and validation" in logs


def test_what_the_stand_in_lacks_fails_the_trial_naming_it(det: Any, tmp_path: Path) -> None:
    result, trial = det.follow_experiment(tmp_path, config("keras", "python3 k.py"), {"k.py": UNSUPPORTED})
    assert result.code != 0 and trial["state"] == "ERROR"
    logs = det("trial", "logs", str(trial["id"])).out
    assert "determined.keras is not implemented by Stratus's determined stand-in" in logs

"""Pause, activate and an agent's stop, end to end on a local pool of two one-slot agents: the real CLI,
API, state machine, agents and trial processes.

- `det experiment pause` stops a running trial at its next check of `should_preempt()`: it checkpoints,
  exits and frees its slot (`det job list` shows the job gone); `det experiment activate` resumes it
  from its checkpoint, and it ends with exactly the metrics and weights of the same trial run
  uninterrupted beside it: no step lost, none repeated.
- An agent that is stopped (SIGTERM: a scale-in, a spot reclaim) SIGTERMs its trial, which checkpoints
  and exits 0: the trial is requeued (not completed), resumes on the other agent and completes, with no
  restart used.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local_stack import BackgroundStack

pytestmark = pytest.mark.e2e

STEPS = 100
# A Core API trial that saves everything its next step depends on (weights, optimizer, RNG states, step),
# so a resumed run continues exactly; each step stands for a heavier batch with a short pause.
SCRIPT = """
import pathlib, random, sys, time
import determined as det
import numpy as np
import torch

STEPS = int(sys.argv[1])

def save(core, model, opt, step):
    with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                    "torch": torch.get_rng_state(), "random": random.getstate(),
                    "numpy": np.random.get_state()}, pathlib.Path(path) / "state.pt")

with det.core.init() as core:
    info = det.get_cluster_info()
    torch.manual_seed(7); random.seed(7); np.random.seed(7)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step = 0
    if info.latest_checkpoint:
        with core.checkpoint.restore_path(info.latest_checkpoint) as path:
            state = torch.load(pathlib.Path(path) / "state.pt", weights_only=False)
        model.load_state_dict(state["model"]); opt.load_state_dict(state["opt"]); step = state["step"]
        torch.set_rng_state(state["torch"]); random.setstate(state["random"])
        np.random.set_state(state["numpy"])
        print("resumed at step", step, flush=True)
    while step < STEPS:
        x = torch.randn(8, 4)
        scale = 1.0 + random.random() + float(np.random.rand())
        loss = ((model(x) - scale * x.sum(dim=1, keepdim=True)) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        step += 1
        core.train.report_training_metrics(steps_completed=step, metrics={"loss": loss.item()})
        time.sleep(0.15)
        if core.preempt.should_preempt():
            save(core, model, opt, step)
            print("preempted at step", step, flush=True)
            sys.exit(0)
    save(core, model, opt, step)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    core.train.report_validation_metrics(
        steps_completed=step, metrics={"loss": loss.item(), **{f"w{i}": w for i, w in enumerate(weights)}}
    )
"""


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    stack = BackgroundStack(tmp_path_factory.mktemp("pause"), slots=1, agents=2)
    try:
        yield stack.state
    finally:
        stack.stop()


@pytest.fixture
def det(pool, det_runner) -> Any:
    return det_runner(pool["api_url"])


def _submit(det: Any, folder: Path, name: str) -> int:
    (folder / "steps.py").write_text(SCRIPT)
    (folder / f"{name}.yaml").write_text(
        f"name: {name}\n"
        f"entrypoint: python3 steps.py {STEPS}\n"
        "searcher: {name: single, metric: loss, max_length: 1}\n"
        "max_restarts: 0\n"
    )
    created = det("experiment", "create", str(folder / f"{name}.yaml"), str(folder))
    assert created.code == 0, created.out + created.err
    return int(det.created_experiment_id(created.out))


def _trial(det: Any, experiment_id: int) -> dict:
    (trial,) = det.describe_experiment(experiment_id)["trials"]
    return trial


def _metrics(det: Any, trial_id: int) -> dict[str, list[tuple[int, dict]]]:
    shown = det("trial", "describe", str(trial_id), "--metrics", "--json")
    assert shown.code == 0, shown.err
    metrics = json.loads(shown.out)["metrics"]
    return {
        group: [(m["steps_completed"], m["metrics"]) for m in metrics[group]]
        for group in ("training", "validation")
    }


def _reported_steps(det: Any, trial_id: int) -> int:
    training = _metrics(det, trial_id)["training"]
    return max((steps for steps, _ in training), default=0)


def test_a_paused_trial_frees_its_slot_and_resumes_to_exactly_the_uninterrupted_result(
    det, pool, tmp_path: Path, wait_for
):
    straight = _submit(det, tmp_path, "straight")
    paused = _submit(det, tmp_path, "paused")
    trial = wait_for(
        lambda: (t := _trial(det, paused))["state"] == "RUNNING" and t, timeout=120, what="the trial to run"
    )
    wait_for(lambda: _reported_steps(det, trial["id"]) >= 5, timeout=60, what="a few steps")

    result = det("experiment", "pause", str(paused))
    assert result.code == 0, result.err
    assert f"det experiment activate {paused}" in result.out
    wait_for(lambda: _trial(det, paused)["state"] == "PAUSED", timeout=60, what="the trial to pause")
    jobs = json.loads(det("job", "list", "--json").out)["jobs"]
    assert str(paused) not in [job["id"] for job in jobs]  # its slot is free
    stopped_at = _reported_steps(det, trial["id"])
    assert 5 <= stopped_at < STEPS
    assert f"preempted at step {stopped_at}" in det("trial", "logs", str(trial["id"])).out

    assert det("experiment", "activate", str(paused)).code == 0
    for experiment_id in (paused, straight):
        wait_for(
            lambda e=experiment_id: det.describe_experiment(e)["experiment"]["state"] == "COMPLETED",
            timeout=180,
            what=f"experiment {experiment_id} to complete",
        )
    logs = det("trial", "logs", str(trial["id"])).out
    assert f"resumed at step {stopped_at}" in logs

    resumed, uninterrupted = _metrics(det, trial["id"]), _metrics(det, _trial(det, straight)["id"])
    assert [steps for steps, _ in resumed["training"]] == list(range(1, STEPS + 1))  # none lost or repeated
    assert resumed == uninterrupted  # every loss and every final weight, exactly
    described = _trial(det, paused)
    assert described["restarts"] == 0


def _agent_pid(api_url: str, agent_id: str) -> int:
    pattern = f"harness.agent --api {api_url} --agent-id {agent_id} "
    pids = subprocess.run(
        ["pgrep", "-f", pattern], capture_output=True, text=True, check=False
    ).stdout.split()
    assert len(pids) == 1, f"agent {agent_id}: {pids}"
    return int(pids[0])


def test_a_stopped_agent_requeues_its_trial_which_resumes_on_another_and_completes(
    det, pool, tmp_path: Path, wait_for, run_record
):
    experiment_id = _submit(det, tmp_path, "agent-stop")
    trial = wait_for(
        lambda: (t := _trial(det, experiment_id))["state"] == "RUNNING" and t,
        timeout=120,
        what="the trial to run",
    )
    first_run = f"{trial['id']}.1"
    record = wait_for(
        lambda: (r := run_record(pool["moto_url"], first_run)) and r.get("agent_id") and r,
        timeout=30,
        what="the first run's agent",
    )
    wait_for(lambda: _reported_steps(det, trial["id"]) >= 5, timeout=60, what="a few steps")

    os.kill(_agent_pid(pool["api_url"], record["agent_id"]), signal.SIGTERM)  # a scale-in

    wait_for(
        lambda: det.describe_experiment(experiment_id)["experiment"]["state"] == "COMPLETED",
        timeout=180,
        what="the experiment to complete on the other agent",
    )
    second = run_record(pool["moto_url"], f"{trial['id']}.2")
    assert second is not None and second["agent_id"] != record["agent_id"]
    done = _trial(det, experiment_id)
    assert done["state"] == "COMPLETED" and done["restarts"] == 0
    training = _metrics(det, trial["id"])["training"]
    assert [steps for steps, _ in training] == list(range(1, STEPS + 1))
    assert "resumed at step" in det("trial", "logs", str(trial["id"])).out

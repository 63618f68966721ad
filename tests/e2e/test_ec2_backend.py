"""The `ec2` backend on the local stack (`det deploy local up --backend ec2`): the default pool is an Auto
Scaling group in the stack's moto, scaled by the control plane from zero instances, each instance an
agent process started as its user data would start it (`stratus.harness.agent --aws`, reading its identity from
a fake instance metadata service). A spot interruption is played the way EC2 does it: a notice in the
instance's metadata, the EventBridge warning on the events queue, the instance terminated two minutes
(here 20 s) later."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from det.deploy.background import BackgroundStack

pytestmark = pytest.mark.e2e

GROUP = "stratus-default"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    stack = BackgroundStack(
        tmp_path_factory.mktemp("ec2"),
        slots=1,
        pools=["default:backend=ec2:max=2:spot=on:idle=10"],
        env={"STRATUS_AGENT_TIMEOUT_S": "10"},
    )
    try:
        yield {**stack.state, "state_dir": str(stack.log_path.parent)}
    finally:
        stack.stop()


@pytest.fixture
def det(pool, det_runner):  # noqa: ANN001, ANN201
    return det_runner(pool["api_url"])


def _autoscaling(pool: dict[str, str]):  # noqa: ANN202
    return boto3.client(
        "autoscaling",
        endpoint_url=pool["moto_url"],
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )


def _instances(pool: dict[str, str]) -> list[str]:
    (group,) = _autoscaling(pool).describe_auto_scaling_groups(AutoScalingGroupNames=[GROUP])[
        "AutoScalingGroups"
    ]
    return [i["InstanceId"] for i in group["Instances"]]


def _agent_processes(pool: dict[str, str]) -> list[str]:
    pattern = f"stratus.harness.agent --api {pool['api_url']} --pool default"
    return subprocess.run(
        ["pgrep", "-f", pattern], capture_output=True, text=True, check=False
    ).stdout.split()


def test_digits_runs_on_an_instance_started_for_it_and_the_group_returns_to_zero(det, pool, wait_for):
    assert _instances(pool) == []  # nothing runs while nothing waits
    result = det("experiment", "create", "examples/digits/const.yaml", "examples/digits", "-f", timeout=300)
    assert result.code == 0, result.out + result.err
    (trial,) = det.describe_experiment(det.created_experiment_id(result.out))["trials"]
    assert trial["state"] == "COMPLETED" and trial["best_validation"] > 0.8
    wait_for(lambda: _instances(pool) == [], timeout=120, what="the idle instance to be scaled in")
    wait_for(lambda: _agent_processes(pool) == [], timeout=60, what="its agent to stop")


def test_a_spot_interruption_resumes_the_trial_from_its_checkpoint_on_a_replacement(
    det, probe, pool, tmp_path: Path, wait_for, run_record
):
    experiment_id = probe.submit(tmp_path, "spot")
    trial = wait_for(
        lambda: (t := probe.trial(experiment_id))["state"] == "RUNNING" and t,
        timeout=120,
        what="the trial to run",
    )
    first = wait_for(
        lambda: (r := run_record(pool["moto_url"], f"{trial['id']}.1")) and r.get("agent_id") and r,
        timeout=30,
        what="the first run's instance",
    )
    wait_for(lambda: probe.reported_steps(trial["id"]) >= 5, timeout=60, what="a few steps")
    requests = Path(pool["state_dir"]) / "compute" / "interrupt"
    (requests / first["agent_id"]).write_text("20")  # EC2 reclaims it in 20 s

    wait_for(
        lambda: probe.state(experiment_id) == "COMPLETED", timeout=240, what="the experiment to complete"
    )
    second = run_record(pool["moto_url"], f"{trial['id']}.2")
    assert second is not None and second["agent_id"] != first["agent_id"]  # on the replacement instance
    done = probe.trial(experiment_id)
    assert done["state"] == "COMPLETED" and done["restarts"] == 0  # a reclaim is not the trial's failure
    training = probe.metrics(trial["id"])["training"]
    assert [steps for steps, _ in training] == list(range(1, probe.steps + 1))  # none lost or repeated
    logs = det("trial", "logs", str(trial["id"])).out
    assert "preempted at step" in logs and "resumed at step" in logs
    assert first["agent_id"] not in _instances(pool)

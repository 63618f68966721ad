"""The `sagemaker` backend on the local stack (`det deploy local up --backend sagemaker`): each run is a
SageMaker training job in the stack's moto, whose instances' agents the local SageMaker runner starts from
the job's own entry point and arguments; killing the trial stops its job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from det.deploy.background import BackgroundStack

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    stack = BackgroundStack(
        tmp_path_factory.mktemp("sagemaker"), slots=1, pools=["default:backend=sagemaker:max=2"]
    )
    try:
        yield {**stack.state, "state_dir": str(stack.log_path.parent)}
    finally:
        stack.stop()


@pytest.fixture
def det(pool, det_runner):  # noqa: ANN001, ANN201
    return det_runner(pool["api_url"])


def _sagemaker(pool: dict[str, str]) -> Any:
    return boto3.client(
        "sagemaker",
        endpoint_url=pool["moto_url"],
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )


def _jobs(pool: dict[str, str]) -> dict[str, str]:
    sagemaker = _sagemaker(pool)
    listed = sagemaker.list_training_jobs(NameContains="stratus-", MaxResults=100)["TrainingJobSummaries"]
    return {job["TrainingJobName"]: job["TrainingJobStatus"] for job in listed}


def test_digits_runs_as_a_training_job_that_completes(det, pool, wait_for):
    result = det("experiment", "create", "examples/digits/const.yaml", "examples/digits", "-f", timeout=300)
    assert result.code == 0, result.out + result.err
    (trial,) = det.describe_experiment(det.created_experiment_id(result.out))["trials"]
    assert trial["state"] == "COMPLETED" and trial["best_validation"] > 0.8
    name = f"stratus-default-{trial['id']}-1"
    wait_for(
        lambda: _jobs(pool).get(name) == "Completed", timeout=60, what=f"training job {name} to complete"
    )
    # Tagged with the stack's cluster tag (and the user's tags, none here).
    arn = _sagemaker(pool).describe_training_job(TrainingJobName=name)["TrainingJobArn"]
    assert _sagemaker(pool).list_tags(ResourceArn=arn)["Tags"] == [
        {"Key": "stratus:cluster-id", "Value": "stratus"}
    ]


def test_killing_a_trial_stops_its_training_job(det, probe, pool, tmp_path: Path, wait_for):
    experiment_id = probe.submit(tmp_path, "killed")
    trial = wait_for(
        lambda: (t := probe.trial(experiment_id))["state"] == "RUNNING" and t,
        timeout=120,
        what="the trial to run",
    )
    name = f"stratus-default-{trial['id']}-1"
    assert _jobs(pool)[name] == "InProgress"
    assert det("experiment", "kill", str(experiment_id)).code == 0
    wait_for(lambda: _jobs(pool).get(name) == "Stopped", timeout=60, what=f"training job {name} to stop")
    wait_for(
        lambda: probe.state(experiment_id) == "CANCELED", timeout=120, what="the experiment to end canceled"
    )


def test_a_spot_interruption_requeues_the_trial_which_resumes_in_a_new_job(
    det, probe, pool, tmp_path: Path, wait_for
):
    experiment_id = probe.submit(tmp_path, "interrupted")
    trial = wait_for(
        lambda: (t := probe.trial(experiment_id))["state"] == "RUNNING" and t,
        timeout=120,
        what="the trial to run",
    )
    wait_for(lambda: probe.reported_steps(trial["id"]) >= 5, timeout=60, what="a few steps")
    first = f"stratus-default-{trial['id']}-1"
    (Path(pool["state_dir"]) / "compute" / "interrupt" / first).write_text("")  # the spot capacity goes

    wait_for(
        lambda: probe.state(experiment_id) == "COMPLETED", timeout=240, what="the experiment to complete"
    )
    second = f"stratus-default-{trial['id']}-2"
    wait_for(
        lambda: _jobs(pool).get(second) == "Completed", timeout=60, what=f"training job {second} to complete"
    )
    assert _jobs(pool)[first] == "Stopped"
    done = probe.trial(experiment_id)
    assert done["state"] == "COMPLETED" and done["restarts"] == 0
    training = probe.metrics(trial["id"])["training"]
    assert [steps for steps, _ in training] == list(range(1, probe.steps + 1))  # none lost or repeated
    assert "resumed at step" in det("trial", "logs", str(trial["id"])).out

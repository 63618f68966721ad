"""The `batch` backend on the local stack (`det deploy local up --backend batch`): the default pool is AWS
Batch's job queues in the stack's moto, each run a job (a multi-node parallel job for a run on several
lanes) whose agents the local Batch runner starts from the job definition's own command, one per node."""

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
    stack = BackgroundStack(tmp_path_factory.mktemp("batch"), slots=1, pools=["default:backend=batch:max=2"])
    try:
        yield {**stack.state, "state_dir": str(stack.log_path.parent)}
    finally:
        stack.stop()


@pytest.fixture
def det(pool, det_runner):  # noqa: ANN001, ANN201
    return det_runner(pool["api_url"])


def _batch(pool: dict[str, str]) -> Any:
    return boto3.client(
        "batch",
        endpoint_url=pool["moto_url"],
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )


def _jobs(pool: dict[str, str], status: str) -> list[dict]:
    batch = _batch(pool)
    return [
        job
        for queue in ("stratus-default", "stratus-default-mnp")
        for job in batch.list_jobs(jobQueue=queue, jobStatus=status)["jobSummaryList"]
    ]


def test_digits_runs_as_a_batch_job_and_no_job_stays_active(det, pool, wait_for):
    result = det("experiment", "create", "examples/digits/const.yaml", "examples/digits", "-f", timeout=300)
    assert result.code == 0, result.out + result.err
    (trial,) = det.describe_experiment(det.created_experiment_id(result.out))["trials"]
    assert trial["state"] == "COMPLETED" and trial["best_validation"] > 0.8
    wait_for(lambda: _jobs(pool, "RUNNING") == [], timeout=60, what="no job running")
    (job,) = _jobs(pool, "SUCCEEDED")
    assert job["jobName"] == f"stratus-run-{trial['id']}-1"
    # Tagged with the stack's cluster tag (and the user's tags, none here). moto shows no propagateTags.
    (described,) = _batch(pool).describe_jobs(jobs=[job["jobId"]])["jobs"]
    assert described["tags"] == {"stratus:cluster-id": "stratus"}


def test_a_two_node_trial_runs_as_one_multi_node_job(det, pool, wait_for):
    trial = det.train_ddp(epochs=2)  # as the local two-node test: enough to pass its accuracy check
    wait_for(lambda: _jobs(pool, "RUNNING") == [], timeout=60, what="no job running")
    names = [job["jobName"] for job in _jobs(pool, "SUCCEEDED")]
    assert f"stratus-run-{trial['id']}-1" in names


def test_a_reclaimed_host_requeues_the_trial_which_resumes_in_a_new_job(
    det, probe, pool, tmp_path: Path, wait_for, run_record
):
    experiment_id = probe.submit(tmp_path, "reclaimed")
    trial = wait_for(
        lambda: (t := probe.trial(experiment_id))["state"] == "RUNNING" and t,
        timeout=120,
        what="the trial to run",
    )
    first = wait_for(
        lambda: (r := run_record(pool["moto_url"], f"{trial['id']}.1")) and r.get("compute_ref") and r,
        timeout=30,
        what="the first run's job",
    )
    wait_for(lambda: probe.reported_steps(trial["id"]) >= 5, timeout=60, what="a few steps")
    (Path(pool["state_dir"]) / "compute" / "interrupt" / first["compute_ref"]).write_text("")  # its host goes

    wait_for(
        lambda: probe.state(experiment_id) == "COMPLETED", timeout=240, what="the experiment to complete"
    )
    second = run_record(pool["moto_url"], f"{trial['id']}.2")
    assert second is not None and second["compute_ref"] != first["compute_ref"]  # a new job
    done = probe.trial(experiment_id)
    assert done["state"] == "COMPLETED" and done["restarts"] == 0  # the host's fault, not the trial's
    training = probe.metrics(trial["id"])["training"]
    assert [steps for steps, _ in training] == list(range(1, probe.steps + 1))  # none lost or repeated
    assert "resumed at step" in det("trial", "logs", str(trial["id"])).out
    failed = {job["jobId"]: job.get("statusReason", "") for job in _jobs(pool, "FAILED")}
    assert failed[first["compute_ref"]].startswith("Host EC2")

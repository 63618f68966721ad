"""The jobs the control plane starts carry the user's tags (`STRATUS_TAGS`, `det deploy aws up --add-tag`)
and the stack's cluster tag: Batch's SubmitJob (`tags`, and `propagateTags` so its ECS tasks get them) and
SageMaker's CreateTrainingJob (`Tags`). The adapters' calls are checked with botocore's Stubber, which
also validates them against the services' models; the requests' builders are pure."""

from __future__ import annotations

import botocore.session
import pytest
from botocore.stub import Stubber
from botocore.validate import validate_parameters

from chalicelib import wiring
from chalicelib.aws import clients
from chalicelib.aws.batch import AwsBatch, submit_request
from chalicelib.aws.sagemaker import AwsSageMaker, training_request
from chalicelib.compute.cloud import JobRequest, TrainingJobRequest

TAGS = '{"team":"vision","cost-center":"4711"}'
JOB = JobRequest(
    name="lab-run-3-1",
    queue="lab-gpu-mnp",
    definition="lab-gpu-mnp",
    parameters={"runs": "3.1", "agents": "a,b", "credentials": "s3://b/credentials/lab-run-3-1/"},
    nodes=2,
    share="e3",
    priority=58,
)
TRAINING = TrainingJobRequest(
    name="lab-gpu-sm-3-1", image="763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5-gpu-py311",
    instance_type="ml.g5.xlarge", instances=1, arguments=("--only-runs", "3.1"), environment={"STRATUS_RUNS": "3.1"},
)  # fmt: skip


@pytest.fixture
def tagged(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stack `lab` in moto (us-west-2), deployed with two tags."""
    monkeypatch.setenv("STRATUS_STACK", "lab")
    monkeypatch.setenv("STRATUS_TAGS", TAGS)
    monkeypatch.setenv("STRATUS_SAGEMAKER_ROLE_ARN", "arn:aws:iam::123456789012:role/lab-sm")
    wiring.reset()


def test_a_batch_job_is_submitted_with_the_users_tags_and_the_cluster_tag_propagated_to_its_tasks(
    tagged: None,
) -> None:
    with Stubber(clients.client("batch")) as stub:
        stub.add_response(
            "submit_job",
            {"jobId": "j-1", "jobName": JOB.name, "jobArn": "arn:aws:batch:us-west-2:123456789012:job/j-1"},
            {
                "jobName": "lab-run-3-1",
                "jobQueue": "lab-gpu-mnp",
                "jobDefinition": "lab-gpu-mnp",
                "parameters": JOB.parameters,
                "propagateTags": True,
                "tags": {"cost-center": "4711", "stratus:cluster-id": "lab", "team": "vision"},
                "shareIdentifier": "e3",
                "schedulingPriorityOverride": 58,
                "nodeOverrides": {"numNodes": 2},
            },
        )
        assert AwsBatch().submit(JOB) == "j-1"
        stub.assert_no_pending_responses()


def test_a_training_job_is_created_with_the_users_tags_and_the_cluster_tag(tagged: None) -> None:
    expected = training_request(TRAINING, "prices-bucket", "arn:aws:iam::123456789012:role/lab-sm", "")
    assert "Tags" not in expected
    expected["Tags"] = [
        {"Key": "cost-center", "Value": "4711"},
        {"Key": "stratus:cluster-id", "Value": "lab"},
        {"Key": "team", "Value": "vision"},
    ]
    with Stubber(clients.client("sagemaker")) as stub:
        stub.add_response(
            "create_training_job",
            {"TrainingJobArn": "arn:aws:sagemaker:us-west-2:123456789012:training-job/lab-gpu-sm-3-1"},
            expected,
        )
        AwsSageMaker().create(TRAINING)
        stub.assert_no_pending_responses()


def test_the_submit_request_passes_batchs_own_parameter_rules_with_and_without_tags() -> None:
    model = botocore.session.get_session().get_service_model("batch").operation_model("SubmitJob")
    tags = {f"k{i:02}": "v" * 256 for i in range(40)} | {"stratus:cluster-id": "lab"}
    for request in (submit_request(JOB), submit_request(JOB, tags)):
        validate_parameters(request, model.input_shape)  # raises if not
    assert "tags" not in submit_request(JOB) and submit_request(JOB)["propagateTags"] is True
    assert list(submit_request(JOB, {"b": "1", "a": "2"})["tags"]) == ["a", "b"]
    single = submit_request(
        JobRequest(name="lab-run-4-1", queue="lab-gpu", definition="lab-gpu", parameters={})
    )
    assert single == {"jobName": "lab-run-4-1", "jobQueue": "lab-gpu", "jobDefinition": "lab-gpu",
                      "parameters": {}, "propagateTags": True}  # fmt: skip

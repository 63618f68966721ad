"""The container boot's command (`stratus.contract.container_boot`) as the control plane, the template and the
local runners read it, and the SageMaker `compute` channel that carries the package (its shell run:
tests/aws/test_container_boot.py)."""

from __future__ import annotations

import botocore.session
import pytest
from botocore.validate import validate_parameters

from chalicelib.aws.sagemaker import compute_channel, training_request
from chalicelib.compute.cloud import TrainingJobRequest
from stratus.contract.container_boot import (
    COMPUTE_CHANNEL,
    SAGEMAKER_MAX_STRING,
    agent_argv,
    boot_command,
    boot_entrypoint,
)


def test_the_agent_arguments_round_trip_through_the_boot_command() -> None:
    command = boot_command(["--only-runs", "3.1", "--api", "https://x/api"])
    assert command[:2] == ["/bin/sh", "-c"] and 'exec python -m stratus.harness.agent "$@"' in command[2]
    assert agent_argv(command) == [
        "-m",
        "stratus.harness.agent",
        "--only-runs",
        "3.1",
        "--api",
        "https://x/api",
    ]
    assert agent_argv([*boot_entrypoint(), "--pool", "gpu"]) == [
        "-m",
        "stratus.harness.agent",
        "--pool",
        "gpu",
    ]


def test_a_command_that_is_not_a_boot_is_refused_naming_its_start() -> None:
    with pytest.raises(ValueError, match=r"not a Stratus container command \(it starts \['python', '-m'\]\)"):
        agent_argv(["python", "-m", "stratus.harness.agent", "--pool", "gpu"])


def test_the_compute_channel_is_the_packages_folder_and_nothing_without_a_package() -> None:
    key = "compute/" + "a" * 64 + "/stratus_compute-0.1.0-py3-none-any.whl"
    (channel,) = compute_channel("lab-bucket", key)
    assert channel["ChannelName"] == COMPUTE_CHANNEL == "compute" and channel["InputMode"] == "File"
    assert channel["DataSource"]["S3DataSource"] == {
        "S3DataType": "S3Prefix",
        "S3Uri": f"s3://lab-bucket/compute/{'a' * 64}/",
        "S3DataDistributionType": "FullyReplicated",
    }
    assert compute_channel("lab-bucket", "") == []


def test_sagemakers_entry_point_fits_its_limit_of_256_characters_a_string() -> None:
    entrypoint = boot_entrypoint()
    assert all(len(part) <= SAGEMAKER_MAX_STRING for part in entrypoint)
    assert "/opt/ml/input/data/compute/*.whl" in entrypoint[2]


@pytest.mark.parametrize(
    "compute_key", ["compute/" + "b" * 64 + "/stratus_compute-0.1.0-py3-none-any.whl", ""]
)
def test_the_training_job_request_passes_sagemakers_own_parameter_rules(compute_key: str) -> None:
    """botocore's model of CreateTrainingJob (lengths, required members), checked here without AWS: an
    empty InputDataConfig is refused there, so a stack without a package sends none."""
    job = TrainingJobRequest(
        name="lab-default-3-1", image="763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-gpu-py311",
        instance_type="ml.g5.xlarge", instances=2, spot=True, environment={"STRATUS_RUNS": "3.1"},
        arguments=("--only-runs", "3.1", "--sagemaker-agents", "a,b", "--api", "https://x.execute-api.us-east-1.amazonaws.com/api"),
    )  # fmt: skip
    request = training_request(job, "lab-bucket", "arn:aws:iam::123456789012:role/lab-sm", compute_key)
    model = botocore.session.get_session().get_service_model("sagemaker")
    validate_parameters(request, model.operation_model("CreateTrainingJob").input_shape)  # raises if not
    assert ("InputDataConfig" in request) == bool(compute_key)
    assert request["AlgorithmSpecification"]["ContainerEntrypoint"] == boot_entrypoint()
    assert "Tags" not in request
    # The job's tags (the user's, at most 40 of AWS's longest, and the cluster's), sorted by key.
    tags = {f"k{i:02}-" + "k" * 124: "v" * 256 for i in range(40)} | {"stratus:cluster-id": "lab"}
    tagged = training_request(job, "lab-bucket", "arn:aws:iam::123456789012:role/lab-sm", compute_key, tags)
    validate_parameters(tagged, model.operation_model("CreateTrainingJob").input_shape)
    assert tagged["Tags"] == [{"Key": key, "Value": tags[key]} for key in sorted(tags)]
    assert {k: v for k, v in tagged.items() if k != "Tags"} == request

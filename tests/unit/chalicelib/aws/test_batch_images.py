"""An experiment's own image on a Batch pool (`chalicelib.aws.batch.image_definition`): Batch cannot
override a job's image, so the job runs a copy of its pool's job definition with the image, registered
once, in moto (`mock_aws`): command, role and resources as the pool's, every node's container for a
multi-node one."""

from __future__ import annotations

import botocore.session
import pytest
from botocore.validate import validate_parameters

from chalicelib.aws import clients
from chalicelib.aws.batch import image_definition, with_image

BOOT = ["/bin/sh", "-c", "boot", "stratus-boot", "--only-runs", "Ref::runs"]
CONTAINER = {
    "image": "example/train:1",
    "command": BOOT,
    "jobRoleArn": "arn:aws:iam::123456789012:role/lab-batch-job",
    "resourceRequirements": [{"type": "VCPU", "value": "4"}, {"type": "MEMORY", "value": "14336"}],
    "environment": [{"name": "STRATUS_COMPUTE_URI", "value": "s3://lab-bucket/compute/x.whl"}],
}


def _definitions(name: str) -> list[dict]:
    return clients.client("batch").describe_job_definitions(jobDefinitionName=name)["jobDefinitions"]


def test_the_image_definition_is_the_pools_with_the_image_and_is_registered_once(aws) -> None:
    batch = clients.client("batch")
    batch.register_job_definition(
        jobDefinitionName="lab-gpu", type="container", containerProperties=CONTAINER,
        parameters={"runs": "", "agents": ""}, retryStrategy={"attempts": 1}, platformCapabilities=["EC2"],
        tags={"stratus:cluster-id": "lab"},
    )  # fmt: skip

    name = image_definition("lab-gpu", "example/other:2")

    assert name.startswith("lab-gpu-image-") and len(name) == len("lab-gpu-image-") + 12
    (copied,) = _definitions(name)
    container = copied["containerProperties"]
    assert container["image"] == "example/other:2"
    assert (container["command"], container["jobRoleArn"]) == (BOOT, CONTAINER["jobRoleArn"])
    assert container["environment"] == CONTAINER["environment"]
    assert copied["parameters"] == {"runs": "", "agents": ""} and copied["retryStrategy"]["attempts"] == 1
    assert image_definition("lab-gpu", "example/other:2") == name  # known: nothing registered again
    assert len(_definitions(name)) == 1
    assert image_definition("lab-gpu", "example/third:1") != name


def test_a_multi_node_definitions_every_node_runs_the_image() -> None:
    """moto keeps no `nodeProperties` (it describes a multinode definition without them): the copy is
    checked as a request, against botocore's model of RegisterJobDefinition."""
    described = {
        "jobDefinitionName": "lab-gpu-mnp", "jobDefinitionArn": "arn:aws:batch:us-west-2:1:job-definition/lab-gpu-mnp:3",
        "revision": 3, "status": "ACTIVE", "type": "multinode", "parameters": {}, "tags": {"stratus:cluster-id": "lab"},
        "nodeProperties": {"numNodes": 2, "mainNode": 0,
                           "nodeRangeProperties": [{"targetNodes": "0:", "container": CONTAINER}]},
        "platformCapabilities": ["EC2"], "containerOrchestrationType": "ECS",
    }  # fmt: skip
    request = with_image(described, "lab-gpu-mnp-image-x", "example/other:2")
    (node,) = request["nodeProperties"]["nodeRangeProperties"]
    assert node["container"]["image"] == "example/other:2" and node["container"]["command"] == BOOT
    assert (
        "revision" not in request
        and "containerOrchestrationType" not in request
        and "parameters" not in request
    )
    model = botocore.session.get_session().get_service_model("batch")
    validate_parameters(request, model.operation_model("RegisterJobDefinition").input_shape)


def test_a_pool_definition_missing_from_batch_is_named(aws) -> None:
    with pytest.raises(LookupError, match="job definition 'lab-none' is not in Batch"):
        image_definition("lab-none", "example/other:2")

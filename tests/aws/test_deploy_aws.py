"""`det deploy aws` against moto's CloudFormation (real boto3 calls through AWS_ENDPOINT_URL): a dry run
changes nothing; up uploads the package and makes the functions, their event sources and the API; down
and up again keep the bucket and adopt it; bad names are refused. The package here is a small stand-in
(moto stores a function's code, never runs it): the real one is built and import-checked by
tests/integration/test_lambda_package.py. With an ec2 pool, up builds the agents' wheel from this checkout
(infra/aws/compute_package.py, tested by tests/integration/test_compute_package.py), uploads it once and names
it in the stack's ComputeKey."""

from __future__ import annotations

import hashlib
import io
import json
import re
import uuid
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from det._runtime import Runtime
from det.cli import build_parser, main
from det.deploy.aws import CLUSTER_TAG
from det.deploy.aws_calls import AwsCalls
from det.deploy.aws_compute import plan_compute
from det.deploy.quotas import QuotaError

# moto's CloudFormation skips the two resource types it lacks (the secrets, the queue policy), saying so.
pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS")


@pytest.fixture
def det(moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # noqa: ANN201
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    package = tmp_path / "stratus.zip"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("app.py", "app = None\n")

    def run(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        runtime = Runtime(environ={}, out=out, err=err, inp=io.StringIO(), sleep=lambda s: None)
        extra = ["--package", str(package)] if argv[0] == "up" and "--package" not in argv else []
        code = main(["deploy", "aws", *argv, *extra, "--region", "us-east-1"], runtime=runtime)
        return code, out.getvalue(), err.getvalue()

    return run


@pytest.fixture(autouse=True)
def tls(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """moto evaluates no condition of a bucket policy (it applies every statement whose action and resource
    match), so the stack's TLS-only statement (deny where `aws:SecureTransport` is false) would refuse
    every request for the bucket's objects. Here moto's S3 evaluates that key as AWS does, a request counting
    as made over TLS (AWS's endpoints, which moto stands in for, are HTTPS) until a test calls
    `tls(False)`; any other condition is left to moto."""
    from moto.iam.access_control import IAMPolicy, PermissionResult
    from moto.s3.models import FakeBucket

    secure = {"aws:SecureTransport": "true"}

    def holds(statement: dict[str, Any]) -> bool:
        for key, wanted in statement.get("Condition", {}).get("Bool", {}).items():
            values = wanted if isinstance(wanted, list) else [wanted]
            if key in secure and secure[key] not in [str(v).lower() for v in values]:
                return False
        return True

    def rest(statement: dict[str, Any]) -> dict[str, Any]:
        """The statement without the conditions evaluated here (met: it applies)."""
        condition = {
            operator: {k: v for k, v in keys.items() if not (operator == "Bool" and k in secure)}
            for operator, keys in statement.get("Condition", {}).items()
        }
        left = {operator: keys for operator, keys in condition.items() if keys}
        plain = {k: v for k, v in statement.items() if k != "Condition"}
        return {**plain, "Condition": left} if left else plain

    def get_permission(bucket: FakeBucket, action: str, resource: str) -> PermissionResult:
        if bucket.policy is None:
            return PermissionResult.NEUTRAL
        policy = json.loads(bucket.policy)
        found = policy["Statement"]
        statements = [found] if isinstance(found, dict) else found
        evaluated = {**policy, "Statement": [rest(s) for s in statements if holds(s)]}
        return IAMPolicy(json.dumps(evaluated)).is_action_permitted(action, resource)

    monkeypatch.setattr(FakeBucket, "get_permission", get_permission)
    return lambda on: secure.update({"aws:SecureTransport": "true" if on else "false"})


def _name() -> str:
    return "Lab-" + uuid.uuid4().hex[:8]


def _all(service: str, operation: str, key: str, **kwargs: object) -> list:
    """Every item of a listing, page by page (the moto server is shared with the other tests' stacks)."""
    pages = boto3.client(service).get_paginator(operation).paginate(**kwargs)
    return [item for page in pages for item in page[key]]


def _tables(stack: str) -> list[str]:
    return [t for t in _all("dynamodb", "list_tables", "TableNames") if t.startswith(stack + "-")]


def _buckets() -> set[str]:
    return {b["Name"] for b in boto3.client("s3").list_buckets()["Buckets"]}


def test_a_dry_run_shows_the_plan_and_changes_nothing(det, tmp_path: Path) -> None:
    stack = _name()
    code, out, _ = det(
        "up", "--cluster-id", stack, "--no-compute", "--dry-run", "--template-out", str(tmp_path / "t.json")
    )
    assert code == 0, out
    bucket = f"{stack.lower()}-123456789012-us-east-1"  # lower case: a bucket name cannot have capitals
    assert f"bucket {bucket}: made now, kept across stacks" in out and "dry run: the template" in out
    assert "tables: made now, kept across stacks" in out and "1 StepFunctions::StateMachine" in out
    assert (tmp_path / "t.json").read_text().startswith("{")
    assert bucket not in _buckets() and not _tables(stack)
    assert det("status", "--cluster-id", stack)[0] == 3


def test_up_down_and_up_again_keeps_the_bucket_and_adopts_it(det) -> None:
    stack = _name()
    code, out, err = det("up", "--cluster-id", stack, "--no-compute", "--add-tag", "team=vision")
    assert code == 0, err
    assert "CREATE_COMPLETE" in err and "BucketName" in out
    bucket = f"{stack.lower()}-123456789012-us-east-1"
    assert len(_tables(stack)) == 8 and bucket in _buckets()
    # The bucket `up` made has the stack's rules, which the template's conditional Bucket only declares.
    assert "bucket rules: lifecycle rules ExpireJobCredentials; policy statement DenyInsecureTransport" in out
    rules = _bucket_rules(bucket)
    assert rules == (_CREDENTIALS_EXPIRY, [_tls_only(bucket)])
    # The template is over CloudFormation's inline limit (51,200 bytes): the stack was made from the
    # copy `up` put in the bucket, by its URL.
    (stored,) = _all("s3", "list_objects_v2", "Contents", Bucket=bucket, Prefix="deploy/template-")
    body = boto3.client("s3").get_object(Bucket=bucket, Key=stored["Key"])["Body"].read()
    assert len(body) > 51_200
    used = boto3.client("cloudformation").get_template(StackName=stack)["TemplateBody"]
    assert json.loads(body) == (used if isinstance(used, dict) else json.loads(used))
    # The control plane: the API function and one function per queue, each fed by its queue, behind the API.
    functions = {
        f["FunctionName"]: f
        for f in _all("lambda", "list_functions", "Functions")
        if f["FunctionName"].startswith(stack)
    }
    assert set(functions) == {f"{stack}-api", f"{stack}-on-scheduler-message", f"{stack}-on-launch-message",
                              f"{stack}-on-trial-event", f"{stack}-on-submission"}  # fmt: skip
    api = functions[f"{stack}-api"]
    assert api["Handler"] == "app.app" and api["Runtime"] == "python3.12"
    variables = functions[f"{stack}-on-launch-message"]["Environment"]["Variables"]
    assert variables["STRATUS_BUCKET"] == bucket and variables["STRATUS_STACK"] == stack
    # The key is read from Secrets Manager (STRATUS_TOKEN_SECRET_ARN: moto's CloudFormation makes no
    # secrets, so it is empty here), never set in plain text.
    assert "STRATUS_TOKEN_SECRET" not in variables and "STRATUS_AGENT_TOKEN" not in variables
    api_url = next(line.split("=", 1)[1] for line in out.splitlines() if "export DET_MASTER=" in line)
    assert variables["STRATUS_API_URL"] == api_url and api_url.endswith("/api")
    sources = _all("lambda", "list_event_source_mappings", "EventSourceMappings")
    fed = {
        m["FunctionArn"].rsplit(":", 1)[1]: m["EventSourceArn"].rsplit(":", 1)[1]
        for m in sources
        if stack in m["FunctionArn"]
    }
    assert fed == {f"{stack}-on-scheduler-message": f"{stack}-scheduler.fifo",
                   f"{stack}-on-launch-message": f"{stack}-launch", f"{stack}-on-trial-event": f"{stack}-trial-events",
                   f"{stack}-on-submission": f"{stack}-submissions"}  # fmt: skip
    # The adopted bucket sends its submission markers to the submissions queue (set by `up`, not the template).
    (notified,) = boto3.client("s3").get_bucket_notification_configuration(Bucket=bucket)[
        "QueueConfigurations"
    ]
    assert notified["QueueArn"].endswith(f":{stack}-submissions")
    (rest_api,) = [a for a in _all("apigateway", "get_rest_apis", "items") if a["name"] == stack]
    resources = _all("apigateway", "get_resources", "items", restApiId=rest_api["id"], embed=["methods"])
    routes = {r["path"]: r.get("resourceMethods", {}) for r in resources}
    assert routes["/experiments"]["POST"]["authorizationType"] == "AWS_IAM"  # users sign (SigV4)
    assert (
        routes["/agents/{agent_id}/heartbeat"]["POST"]["authorizationType"] == "NONE"
    )  # agents: their token
    boto3.client("s3").put_object(Bucket=bucket, Key="checkpoints/1/weights", Body=b"w")
    code, out, _ = det("list")
    assert code == 0 and stack in out and bucket in out
    assert det("status", "--cluster-id", stack)[0] == 0

    assert det("down", "--cluster-id", stack)[0] == 2  # no terminal to confirm on, no --yes
    assert len(_tables(stack)) == 8
    code, out, err = det("down", "--cluster-id", stack, "--yes")
    assert code == 0, err
    assert "DELETE_COMPLETE" in err and f"kept bucket {bucket}" in out and "kept 8 tables" in out
    assert len(_tables(stack)) == 8 and bucket in _buckets()

    # The same name again: the bucket is ours. (The same tags: the same template, stored once.)
    code, out, err = det("up", "--cluster-id", stack, "--no-compute", "--add-tag", "team=vision")
    assert code == 0, err
    assert "kept from before, adopted" in out and "already uploaded" in err
    assert "bucket rules: in place already" in out and _bucket_rules(bucket) == rules
    assert len(_tables(stack)) == 8
    assert boto3.client("s3").get_object(Bucket=bucket, Key="checkpoints/1/weights")["Body"].read() == b"w"
    code, out, _ = det("down", "--cluster-id", stack, "--yes", "--delete-bucket")
    assert code == 0 and f"deleted bucket {bucket} (3 objects)" in out  # the checkpoint, package, template
    assert bucket not in _buckets() and len(_tables(stack)) == 8  # the records are kept unless --delete-data
    # With no stack left, --delete-data deletes what it kept.
    code, out, _ = det("down", "--cluster-id", stack, "--yes", "--delete-data")
    assert code == 0 and "deleted 8 tables" in out and not _tables(stack)


#: The job credentials' expiry, as S3 answers `GetBucketLifecycleConfiguration` (a list of one rule).
_CREDENTIALS_EXPIRY = [
    {
        "ID": "ExpireJobCredentials",
        "Status": "Enabled",
        "Filter": {"Prefix": "credentials/"},
        "Expiration": {"Days": 1},
    }
]


def _tls_only(bucket: str) -> dict[str, Any]:
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def _bucket_rules(bucket: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The bucket's lifecycle rules and its policy's statements."""
    s3 = boto3.client("s3")
    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    return rules, json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])["Statement"]


def test_up_gives_a_bucket_it_adopts_the_stacks_rules_and_keeps_the_users_own(det, tls) -> None:
    """A bucket made before the stack, with a rule and a statement of its owner's: `up` adds the stack's
    lifecycle rule and TLS-only statement beside them; a second `up` changes nothing."""
    stack = _name()
    bucket = f"{stack.lower()}-123456789012-us-east-1"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    own_rule = {
        "ID": "ExpireScratch",
        "Status": "Enabled",
        "Filter": {"Prefix": "scratch/"},
        "Expiration": {"Days": 30},
    }
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [own_rule]})
    own_statement = {
        "Sid": "AuditorsRead", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
        "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{bucket}/reports/*",
    }  # fmt: skip
    s3.put_bucket_policy(
        Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [own_statement]})
    )

    code, out, err = det("up", "--cluster-id", stack, "--no-compute")

    assert code == 0, err
    assert "kept from before, adopted" in out and "DenyInsecureTransport (TLS only) applied" in out
    rules = _bucket_rules(bucket)
    assert rules == ([own_rule, *_CREDENTIALS_EXPIRY], [own_statement, _tls_only(bucket)])
    # The statement at work (moto evaluating aws:SecureTransport, `tls`): served over TLS, refused without.
    s3.put_object(Bucket=bucket, Key="checkpoints/1/weights", Body=b"w")
    tls(False)
    with pytest.raises(ClientError) as refused:
        s3.get_object(Bucket=bucket, Key="checkpoints/1/weights")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    tls(True)
    assert s3.get_object(Bucket=bucket, Key="checkpoints/1/weights")["Body"].read() == b"w"

    code, out, err = det("up", "--cluster-id", stack, "--no-compute")

    assert code == 0, err
    assert "bucket rules: in place already" in out and _bucket_rules(bucket) == rules
    assert det("down", "--cluster-id", stack, "--yes", "--delete-bucket")[0] == 0


def _package(path: Path, version: int) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("app.py", f"app = None  # version {version}\n")
    return path


def _package_key(path: Path) -> str:
    return f"deploy/stratus-{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}.zip"


def test_updates_keep_the_package_in_use_and_the_one_before_and_down_deletes_the_experiments_dashboards(
    det, tmp_path: Path
) -> None:
    stack = _name()
    bucket = f"{stack.lower()}-123456789012-us-east-1"
    packages = [_package(tmp_path / f"v{version}.zip", version) for version in (1, 2, 3)]
    s3 = boto3.client("s3")
    for package in packages[:2]:
        code, out, err = det("up", "--cluster-id", stack, "--no-compute", "--package", str(package))
        assert code == 0, err
        assert "pruned" not in out  # version 2's update: version 1 is the one before it
    # Not put there by `up` (names `up` never gives): kept.
    for key in ("deploy/notes.txt", "deploy/stratus-latest.zip", "checkpoints/1/weights"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    earlier_template = "deploy/template-0123456789abcdef.json"  # an earlier version's (or a dry run's)
    s3.put_object(Bucket=bucket, Key=earlier_template, Body=b"{}")

    code, out, err = det("up", "--cluster-id", stack, "--no-compute", "--package", str(packages[2]))

    assert code == 0, err
    assert "UPDATE_COMPLETE" in err
    found = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    assert {p["ParameterKey"]: p["ParameterValue"] for p in found["Parameters"]}["CodeKey"] == _package_key(
        packages[2]
    )
    assert f"pruned 2 objects of earlier deploys from s3://{bucket}" in out
    assert f"{_package_key(packages[0])}, {earlier_template}" in out
    (template,) = [
        o["Key"] for o in _all("s3", "list_objects_v2", "Contents", Bucket=bucket, Prefix="deploy/template-")
    ]
    kept = sorted(o["Key"] for o in _all("s3", "list_objects_v2", "Contents", Bucket=bucket))
    assert kept == sorted([_package_key(packages[1]), _package_key(packages[2]), template, "deploy/notes.txt",
                           "deploy/stratus-latest.zip", "checkpoints/1/weights"])  # fmt: skip

    # The experiments' dashboards its control plane made (`det experiment dashboard`) go with the stack;
    # those of names it never gives stay.
    cloudwatch = boto3.client("cloudwatch")
    ours = [f"{stack}-experiment-1", f"{stack}-experiment-12"]
    others = [f"{stack}-experiment-1-copy", f"{stack}x-experiment-1", f"{stack}-experimental"]
    for name in ours + others:
        cloudwatch.put_dashboard(DashboardName=name, DashboardBody=json.dumps({"widgets": []}))

    code, out, err = det("down", "--cluster-id", stack, "--yes", "--delete-bucket")

    assert code == 0, err
    assert f"deleted 2 experiment dashboards: {', '.join(ours)}" in out
    left = {d["DashboardName"] for d in _all("cloudwatch", "list_dashboards", "DashboardEntries")}
    assert not set(ours) & left and set(others) <= left
    cloudwatch.delete_dashboards(DashboardNames=others)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["up", "--cluster-id", "my_lab"], "--cluster-id 'my_lab' is not a stack name"),
        (["up", "--cluster-id", "lab", "--add-tag", "novalue"], "--add-tag 'novalue' is not KEY=VALUE"),
        (["up", "--cluster-id", "L" + "a" * 60], "too long for its bucket name"),
        (["down", "--cluster-id", "NoSuchLab", "--yes"], "no stack 'NoSuchLab' in region us-east-1"),
    ],
)
def test_bad_input_is_refused_with_one_line_naming_it(det, argv: list[str], message: str) -> None:
    code, _, err = det(*argv)
    assert code != 0 and message in err


def test_an_aws_error_ends_the_command_with_one_line_naming_it(det, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens: botocore cannot connect
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    code, _, err = det("status", "--cluster-id", "Lab")
    assert code == 1 and err.startswith("Error: AWS call failed: Could not connect to the endpoint URL")
    assert "Traceback" not in err


# ---- the compute: Determined's flags, the AMI, the quota preflight, groups scaled to zero by down ----------


def _moto_ami() -> str:
    return boto3.client("ec2").describe_images(Owners=["amazon"])["Images"][0]["ImageId"]


def test_a_dry_run_with_determineds_compute_flags_shows_the_pool_the_ami_and_the_network(det) -> None:
    stack, ami = _name(), _moto_ami()
    code, out, err = det(
        "up", "--cluster-id", stack, "--dry-run", "--gpu-agent-instance-type", "p4d.24xlarge",
        "--max-dynamic-agents", "2", "--spot", "--max-idle-agent-period", "5m", "--agent-ami", ami,
    )  # fmt: skip

    assert code == 0, err
    rows = [line.split("|") for line in out.splitlines()]
    pool = next([c.strip() for c in row] for row in rows if row[0].strip() == "default")
    # moto's DescribeInstanceTypes: p4d.24xlarge has 8 GPUs.
    assert pool == ["default", "ec2", "p4d.24xlarge", "8", "0", "2", "yes", "5m", "priority, preemption"]
    parameters = {row[0].strip(): row[1].strip() for row in rows if len(row) == 2}
    assert parameters["AgentAmiId"] == f"{ami} (from --agent-ami)"
    (vpc,) = boto3.client("ec2").describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
    subnets = boto3.client("ec2").describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])
    assert parameters["AgentVpcId"] == vpc["VpcId"]
    assert parameters["AgentSubnetIds"] == ",".join(sorted(s["SubnetId"] for s in subnets["Subnets"]))
    assert parameters["InboundCidr"] == "0.0.0.0/0" and parameters["KeyName"] == ""
    assert "1 AutoScaling::AutoScalingGroup" in out and "dry run: the template" in out
    # moto's Service Quotas know no EC2 quota: a warning, and up goes on.
    assert "warning: could not read the quota L-7212CCBC (All P Spot Instance Requests); 192 vCPUs" in err
    # The agents' wheel is built (its key is its hash) but not uploaded: there is no bucket yet.
    bucket = f"{stack.lower()}-123456789012-us-east-1"
    assert re.search(rf"compute package: s3://{bucket}/{_COMPUTE_KEY}", out), out
    assert re.search(r"requires zstandard==\d+\.\d+", out), out  # the version infra/aws/compute.lock holds
    assert not _tables(stack) and bucket not in _buckets()


def test_a_dry_run_with_sagemaker_pools_only_validates_without_the_agents_network(
    det, tmp_path: Path
) -> None:
    """SageMaker runs its jobs in its own network: the template declares no subnet, VPC, key or CIDR
    parameter (CloudFormation refuses one no resource uses), and none is looked up or shown."""
    pools = tmp_path / "pools.yaml"
    pools.write_text(
        "resource_pools:\n"
        "  - pool_name: default\n"
        "    provider: {type: sagemaker, instance_type: ml.g5.xlarge, max_instances: 2, image: example/train:1}\n"
    )
    template_out = tmp_path / "t.json"
    stack = _name().lower()  # SageMaker pools need a lower-case cluster id
    code, out, err = det(
        "up", "--cluster-id", stack, "--dry-run", "--pools-file", str(pools), "--template-out", str(template_out)
    )  # fmt: skip
    assert code == 0, err
    assert "dry run: the template" in out and "AgentSubnetIds" not in out
    declared = json.loads(template_out.read_text())["Parameters"]
    assert not {"AgentSubnetIds", "AgentVpcId", "InboundCidr", "KeyName", "AgentAmiId"} & set(declared)


def test_without_agent_ami_the_deep_learning_ami_is_looked_up_in_ssm(det) -> None:
    # moto publishes no /aws/service/deeplearning parameter (and refuses to make one), so the lookup fails.
    code, _, err = det("up", "--cluster-id", _name(), "--dry-run")
    assert code == 2
    assert "no Deep Learning AMI is published in us-east-1 (/aws/service/deeplearning/ami/x86_64/" in err
    assert "pass --agent-ami" in err


def test_a_quota_too_low_refuses_up(det) -> None:
    """moto has no EC2 quota: a quota of 8 vCPUs comes from a subclass; the instance types from moto."""

    class EightVcpus(AwsCalls):
        def service_quota(self, code: str) -> float | None:
            return 8.0

    args = build_parser().parse_args(
        ["deploy", "aws", "up", "--max-dynamic-agents", "3", "--region", "us-east-1"]
    )
    with pytest.raises(QuotaError) as caught:
        plan_compute(args, EightVcpus(args))
    assert str(caught.value) == (
        "pool 'default' (3 x g5.xlarge of 4 vCPUs) needs 12 vCPUs at most, but the account's quota L-DB2E81BA "
        "(Running On-Demand G and VT instances) is 8 vCPUs; lower max_instances or ask for more at "
        "https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/L-DB2E81BA"
    )


def test_up_with_an_ec2_pool_passes_the_agents_parameters_and_down_scales_its_group_to_zero(det) -> None:
    stack, ami, key_pair = _name(), _moto_ami(), _key_pair()
    flags = ("--cluster-id", stack, "--agent-ami", ami, "--min-dynamic-agents", "1", "--keypair", key_pair,
             "--inbound-cidr", "203.0.113.0/24", "--add-tag", "team=vision")  # fmt: skip
    code, out, err = det("up", *flags)
    assert code == 0, err
    found = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in found["Parameters"]}
    assert parameters["AgentAmiId"] == ami and parameters["InboundCidr"] == "203.0.113.0/24"
    assert parameters["KeyName"].startswith("key-") and parameters["AgentVpcId"].startswith("vpc-")
    # The agents' wheel: uploaded under its hash, by its own name, and named by the stack's ComputeKey.
    bucket, compute_key = f"{stack.lower()}-123456789012-us-east-1", parameters["ComputeKey"]
    assert re.fullmatch(_COMPUTE_KEY, compute_key) and f"compute package: s3://{bucket}/{compute_key}" in out
    uploaded = (
        rf"uploaded stratus_compute-0\.1\.0-py3-none-any\.whl \([\d.]+ MiB\) as s3://{bucket}/{compute_key}"
    )
    assert re.search(uploaded, err), err
    body = boto3.client("s3").get_object(Bucket=bucket, Key=compute_key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == compute_key.split("/")[1]
    assert zipfile.ZipFile(io.BytesIO(body)).read("stratus/harness/agent/__main__.py")

    code, out, err = det("up", *flags)  # the same sources: the same wheel, not sent again

    assert code == 0, err
    assert f"package {compute_key} already uploaded" in err and "uploaded stratus_compute" not in err
    compute_objects = _all("s3", "list_objects_v2", "Contents", Bucket=bucket, Prefix="compute/")
    assert [o["Key"] for o in compute_objects] == [compute_key]
    autoscaling, ec2 = boto3.client("autoscaling"), boto3.client("ec2")
    (group,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[f"{stack}-default"])[
        "AutoScalingGroups"
    ]
    assert (group["MinSize"], group["MaxSize"]) == (1, 5)
    (instance,) = [i["InstanceId"] for i in group["Instances"]]  # moto launches the minimum at once
    # --add-tag reaches the group, which hands it to its instances, and the jobs' tags in the functions.
    assert {"Key": "team", "Value": "vision", "PropagateAtLaunch": True} in [
        {k: t[k] for k in ("Key", "Value", "PropagateAtLaunch")} for t in group["Tags"]
    ]
    (reservation,) = ec2.describe_instances(InstanceIds=[instance])["Reservations"]
    assert {"Key": "team", "Value": "vision"} in reservation["Instances"][0]["Tags"]
    function = boto3.client("lambda").get_function(FunctionName=f"{stack}-on-launch-message")
    assert function["Configuration"]["Environment"]["Variables"]["STRATUS_TAGS"] == '{"team":"vision"}'
    # A group of another cluster whose name starts with this stack's (`<stack>-big-default`): not ours.
    template = ec2.create_launch_template(
        LaunchTemplateName=f"{stack}-big", LaunchTemplateData={"ImageId": ami}
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=f"{stack}-big-default", MinSize=1, MaxSize=1, AvailabilityZones=["us-east-1a"],
        LaunchTemplate={"LaunchTemplateId": template["LaunchTemplate"]["LaunchTemplateId"]},
        Tags=[{"Key": CLUSTER_TAG, "Value": f"{stack}-big", "PropagateAtLaunch": True}],
    )  # fmt: skip

    code, out, err = det("down", "--cluster-id", stack, "--yes")

    assert code == 0, err
    assert "stopped the control plane (" in out  # first, so no sweep scales a group up again meanwhile
    assert f"group {stack}-default: min 0 / max 0 / desired 0; terminated {instance}" in out
    assert f"{stack}-big-default" not in out
    assert "DELETE_COMPLETE" in err
    (reservation,) = ec2.describe_instances(InstanceIds=[instance])["Reservations"]
    assert reservation["Instances"][0]["State"]["Name"] == "terminated"
    (kept,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[f"{stack}-big-default"])[
        "AutoScalingGroups"
    ]
    assert (kept["MinSize"], kept["MaxSize"], len(kept["Instances"])) == (1, 1, 1)


#: The agents' wheel in the bucket: under the wheel's sha256, by the wheel's own name (pip reads it).
_COMPUTE_KEY = r"compute/[0-9a-f]{64}/stratus_compute-0\.1\.0-py3-none-any\.whl"


def _key_pair() -> str:
    name = "key-" + uuid.uuid4().hex[:8]
    boto3.client("ec2").create_key_pair(KeyName=name)
    return name


def test_down_stops_the_stacks_batch_and_sagemaker_jobs(
    moto_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`det deploy aws down` ends the stack's work before deleting it: its active Batch jobs terminated,
    its InProgress training jobs stopped; those of a stack whose name starts with this one's (`<stack>-big`:
    its queue and its jobs are named `<stack>-big-...`) are left alone. What the stack owns is its
    CloudFormation resources (`AwsCalls.owned`; read from a real stack by the tests of `down` above)."""
    import argparse

    import httpx

    from det.deploy.aws_calls import AwsCalls
    from infra.local import moto_batch, moto_sagemaker

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    moto_batch.apply()
    moto_sagemaker.apply()
    httpx.post(f"{moto_url}/moto-api/config", json={"batch": {"use_docker": False}}).raise_for_status()
    try:
        stack = _name().lower()
        other = stack + "-big"
        batch, sagemaker = boto3.client("batch"), boto3.client("sagemaker")
        roles, queues, jobs = {}, {}, {}
        for name in (stack, other):
            roles[name] = boto3.client("iam").create_role(
                RoleName=f"{name}-role", AssumeRolePolicyDocument="{}"
            )["Role"]["Arn"]
        environment = batch.create_compute_environment(
            computeEnvironmentName=f"{stack}-ce", type="UNMANAGED", state="ENABLED", serviceRole=roles[stack]
        )["computeEnvironmentArn"]
        for name in (stack, other):
            queues[name] = batch.create_job_queue(
                jobQueueName=f"{name}-default", state="ENABLED", priority=1,
                computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
            )["jobQueueArn"]  # fmt: skip
            batch.register_job_definition(
                jobDefinitionName=f"{name}-default", type="container",
                containerProperties={"image": "example/train:1", "command": ["true"],
                                     "resourceRequirements": [{"type": "VCPU", "value": "1"},
                                                              {"type": "MEMORY", "value": "512"}]},
            )  # fmt: skip
            jobs[name] = batch.submit_job(
                jobName=f"{name}-run-1-1", jobQueue=f"{name}-default", jobDefinition=f"{name}-default"
            )["jobId"]
            sagemaker.create_training_job(
                TrainingJobName=f"{name}-sm-1-1", RoleArn=roles[name],
                AlgorithmSpecification={"TrainingImage": "example/train:1", "TrainingInputMode": "File"},
                OutputDataConfig={"S3OutputPath": "s3://nowhere/"},
                ResourceConfig={"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
                StoppingCondition={"MaxRuntimeInSeconds": 3600},
            )  # fmt: skip

        calls = AwsCalls(argparse.Namespace(region="us-east-1", profile=None))
        owned = {"AWS::Batch::JobQueue": [queues[stack]], "AWS::IAM::Role": [f"{stack}-role"]}
        monkeypatch.setattr(calls, "owned", lambda name, kind: owned.get(kind, []) if name == stack else [])
        assert calls.stop_jobs(stack) == (1, 1)

        statuses = {j["jobId"]: j["status"] for j in batch.describe_jobs(jobs=list(jobs.values()))["jobs"]}
        assert statuses == {jobs[stack]: "FAILED", jobs[other]: "RUNNING"}
        training = {
            n: sagemaker.describe_training_job(TrainingJobName=f"{n}-sm-1-1")["TrainingJobStatus"]
            for n in jobs
        }
        assert training == {stack: "Stopped", other: "InProgress"}
    finally:
        httpx.post(f"{moto_url}/moto-api/config", json={"batch": {"use_docker": True}}).raise_for_status()


def test_a_cluster_id_that_starts_with_another_stacks_is_refused_both_ways(det) -> None:
    """Stack `lab`'s roles reach `lab-*` and its resources are named `lab-...`: a stack `lab-big` beside
    it would share both. Either order is refused before anything is made; an untagged stack is not ours."""
    base = "Ovl" + uuid.uuid4().hex[:8]
    stack = f"{base}-core"
    template = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})
    cloudformation = boto3.client("cloudformation")
    cloudformation.create_stack(
        StackName=stack, TemplateBody=template, Tags=[{"Key": CLUSTER_TAG, "Value": stack}]
    )
    plain = "Un" + uuid.uuid4().hex[:8]
    cloudformation.create_stack(StackName=plain, TemplateBody=template)  # not a Stratus stack
    for wanted in (f"{stack.lower()}-big", base):
        code, _, err = det("up", "--cluster-id", wanted, "--no-compute", "--dry-run")
        assert code == 2, err
        assert f"--cluster-id {wanted}: Stratus stack {stack!r} is in this region" in err
        assert not _tables(wanted)
    for free in (f"{stack}x", f"{plain}-lab"):  # no `<stack>-` prefix shared; an untagged stack is not ours
        code, _, err = det("up", "--cluster-id", free, "--no-compute", "--dry-run")
        assert code == 0, err


def test_the_instance_types_shapes_come_from_ec2_with_their_memory(det) -> None:
    """What `det` reads of a type from moto's ec2:DescribeInstanceTypes (AWS's own data): vCPUs, GPUs,
    memory; the memory caps a Batch job's on a type with less than 4 GiB a vCPU."""
    import argparse

    shapes = AwsCalls(argparse.Namespace(region="us-east-1", profile=None)).instance_types(
        ["g5.xlarge", "c6i.large"]
    )
    assert (shapes["g5.xlarge"].vcpus, shapes["g5.xlarge"].gpus, shapes["g5.xlarge"].memory_mib) == (
        4,
        1,
        16384,
    )
    assert (shapes["c6i.large"].vcpus, shapes["c6i.large"].gpus, shapes["c6i.large"].memory_mib) == (
        2,
        0,
        4096,
    )


def test_an_upgrade_that_changes_the_api_moves_its_stage_to_a_new_deployment(det) -> None:
    """The REST API's deployment is named after what it deploys (infra/aws/template_app.py): `up` again
    with the same API leaves the stage on its deployment; the next version's template, with a route more,
    makes a new deployment and the `api` stage serves it. The stack records the version it was deployed
    with. (moto neither rebuilds an updated REST API from its body nor deletes a replaced deployment: the
    new route's resource and the old deployment's removal are API Gateway's and CloudFormation's part.)"""
    from infra.aws.template_app import app_resources
    from stratus.contract.versions import VERSION
    from tests.unit.infra.aws.test_template_upgrade import _project_app

    stack = _name()
    assert det("up", "--cluster-id", stack, "--no-compute")[0] == 0
    apigateway, cloudformation = boto3.client("apigateway"), boto3.client("cloudformation")
    (rest_api,) = [a["id"] for a in _all("apigateway", "get_rest_apis", "items") if a["name"] == stack]

    def served() -> str:
        """The description of the deployment the stage serves: `REST API <digest of its API>`."""
        deployment = apigateway.get_stage(restApiId=rest_api, stageName="api")["deploymentId"]
        return apigateway.get_deployment(restApiId=rest_api, deploymentId=deployment)["description"]

    def deployed_template() -> dict[str, Any]:
        body = cloudformation.get_template(StackName=stack)["TemplateBody"]
        return body if isinstance(body, dict) else json.loads(body)

    first = served()
    (named,) = [
        k for k, r in deployed_template()["Resources"].items() if r["Type"] == "AWS::ApiGateway::Deployment"
    ]
    assert first == "REST API " + named.removeprefix("RestApiDeployment")
    (described,) = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    assert {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}["StratusVersion"] == VERSION

    code, _, err = det("up", "--cluster-id", stack, "--no-compute")  # the same version again
    assert code == 0, err
    assert served() == first

    # The next version: one route more, rendered as `up` renders it, deployed as `up` deploys it.
    upgraded = deployed_template()
    resources, _ = app_resources(chalice_app=_project_app("/upgrade-probe"))
    (new,) = [k for k, r in resources.items() if r["Type"] == "AWS::ApiGateway::Deployment"]
    del upgraded["Resources"][named]
    upgraded["Resources"].update({"RestApi": resources["RestApi"], new: resources[new]})
    bucket = f"{stack.lower()}-123456789012-us-east-1"
    boto3.client("s3").put_object(
        Bucket=bucket, Key="deploy/upgraded.json", Body=json.dumps(upgraded).encode()
    )
    cloudformation.update_stack(
        StackName=stack,
        TemplateURL=f"https://{bucket}.s3.us-east-1.amazonaws.com/deploy/upgraded.json",
        Parameters=[
            {"ParameterKey": p["ParameterKey"], "ParameterValue": p["ParameterValue"]}
            for p in described["Parameters"]
        ],
        Capabilities=["CAPABILITY_IAM"],
    )
    assert cloudformation.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"] == "UPDATE_COMPLETE"
    assert new != named and served() == "REST API " + new.removeprefix("RestApiDeployment")
    assert det("down", "--cluster-id", stack, "--yes")[0] == 0


def _records(stack: str) -> dict[str, Any]:
    """An experiment with a trial and a checkpoint, as the control plane writes them (`infra.shape.TABLES`'
    keys), read back by key."""
    dynamodb = boto3.client("dynamodb")
    return {
        "experiment": dynamodb.get_item(TableName=f"{stack}-experiments", Key={"id": {"N": "1"}}).get("Item"),
        "trial": dynamodb.get_item(TableName=f"{stack}-trials", Key={"id": {"N": "7"}}).get("Item"),
        "checkpoints": dynamodb.query(
            TableName=f"{stack}-checkpoints",
            IndexName="by_trial",
            KeyConditionExpression="trial_id = :t",
            ExpressionAttributeValues={":t": {"N": "7"}},
        )["Items"],
    }


def _write_records(stack: str) -> None:
    dynamodb = boto3.client("dynamodb")
    dynamodb.put_item(TableName=f"{stack}-experiments",
                      Item={"id": {"N": "1"}, "listed": {"S": "all"}, "state": {"S": "COMPLETED"}})  # fmt: skip
    dynamodb.put_item(TableName=f"{stack}-trials", Item={"id": {"N": "7"}, "experiment_id": {"N": "1"}})
    dynamodb.put_item(TableName=f"{stack}-checkpoints",
                      Item={"uuid": {"S": "c-1"}, "trial_id": {"N": "7"}, "steps_completed": {"N": "100"}})  # fmt: skip


def test_the_records_survive_down_and_the_next_up_finds_them_until_down_delete_data(det) -> None:
    stack = _name()
    code, out, err = det("up", "--cluster-id", stack, "--no-compute")
    assert code == 0, err
    assert "8 tables made (point-in-time recovery on)" in out
    dynamodb = boto3.client("dynamodb")
    recovery = dynamodb.describe_continuous_backups(TableName=f"{stack}-trials")[
        "ContinuousBackupsDescription"
    ]
    assert recovery["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"] == "ENABLED"
    # Made by up, not by the stack: nothing of the stack is a table, and the stack names them by name.
    owned = boto3.client("cloudformation").list_stack_resources(StackName=stack)["StackResourceSummaries"]
    assert not [r for r in owned if r["ResourceType"] == "AWS::DynamoDB::Table"]
    tags = {t["Key"]: t["Value"] for t in dynamodb.list_tags_of_resource(
        ResourceArn=dynamodb.describe_table(TableName=f"{stack}-trials")["Table"]["TableArn"])["Tags"]}  # fmt: skip
    assert tags[CLUSTER_TAG] == stack
    _write_records(stack)
    written = _records(stack)
    assert written["experiment"] and written["trial"] and len(written["checkpoints"]) == 1

    code, out, err = det("down", "--cluster-id", stack, "--yes")
    assert code == 0, err
    assert "kept 8 tables" in out and len(_tables(stack)) == 8
    code, out, err = det("up", "--cluster-id", stack, "--no-compute")
    assert code == 0, err
    assert "tables: 8 kept from before, adopted" in out and "8 tables kept from before" in out
    assert _records(stack) == written

    assert det("down", "--cluster-id", stack, "--delete-data")[0] == 2  # no terminal to confirm on
    code, out, err = det("down", "--cluster-id", stack, "--yes", "--delete-data")
    assert code == 0, err
    bucket = f"{stack.lower()}-123456789012-us-east-1"
    assert "deleted 8 tables" in out and f"deleted bucket {bucket}" in out
    assert not _tables(stack) and bucket not in _buckets()


def test_up_keeps_the_tables_of_a_stack_that_made_them_itself(det) -> None:
    """A stack of an earlier version made its tables (DeletionPolicy Delete): up marks them Retain before
    the update that leaves them out of the stack, so its records stay."""
    from infra.aws.template import template

    stack = _name()
    assert det("up", "--cluster-id", stack, "--no-compute")[0] == 0
    assert det("down", "--cluster-id", stack, "--yes", "--delete-data")[0] == 0
    old = template()
    for resource in old["Resources"].values():
        if resource["Type"] == "AWS::DynamoDB::Table":
            resource.pop("Condition")
            resource["DeletionPolicy"] = "Delete"
    bucket = f"{stack.lower()}-123456789012-us-east-1"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="old.json", Body=json.dumps(old).encode())
    package = io.BytesIO()
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("app.py", "app = None\n")
    s3.put_object(Bucket=bucket, Key="old/stratus.zip", Body=package.getvalue())
    cfn = boto3.client("cloudformation")
    cfn.create_stack(
        StackName=stack,
        TemplateURL=f"https://{bucket}.s3.us-east-1.amazonaws.com/old.json",
        Parameters=[
            {"ParameterKey": "BucketName", "ParameterValue": bucket},
            {"ParameterKey": "CreateBucket", "ParameterValue": "false"},
            {"ParameterKey": "CodeKey", "ParameterValue": "old/stratus.zip"},
        ],  # fmt: skip
        Capabilities=["CAPABILITY_IAM"],
        Tags=[{"Key": CLUSTER_TAG, "Value": stack}],
    )
    owned = cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]
    assert len([r for r in owned if r["ResourceType"] == "AWS::DynamoDB::Table"]) == 8
    _write_records(stack)
    written = _records(stack)

    code, out, err = det("up", "--cluster-id", stack, "--no-compute")
    assert code == 0, err
    assert "keeping the stack's 8 tables when they leave it" in err
    owned = cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]
    assert not [r for r in owned if r["ResourceType"] == "AWS::DynamoDB::Table"]
    assert _records(stack) == written
    assert det("down", "--cluster-id", stack, "--yes", "--delete-data")[0] == 0
    assert not _tables(stack)

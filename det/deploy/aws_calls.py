"""The AWS calls of `det deploy aws` (`det/deploy/aws.py`, `det/deploy/aws_compute.py`), on one boto3 session:
the profile, the region (`--region`, `AWS_REGION`, the profile's), and `AWS_ENDPOINT_URL` where it is set.
Those on the stack's bucket are `det/deploy/aws_bucket.py`'s, on its tables `det/deploy/aws_tables.py`'s,
those that end a stack's work `det/deploy/aws_teardown.py`'s."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

from det.deploy.aws_bucket import BucketCalls, template_key
from det.deploy.aws_checks import CapacityCalls
from det.deploy.aws_tables import TableCalls
from det.deploy.aws_teardown import TeardownCalls
from det.deploy.quotas import InstanceShape
from det.errors import StackError, UsageError

#: The largest template CloudFormation takes inline (`TemplateBody`); a bigger one only from S3.
TEMPLATE_BODY_MAX = 51_200


class AwsCalls(BucketCalls, TableCalls, TeardownCalls, CapacityCalls):
    """The boto3 calls of these commands (one session: the profile, the region, AWS_ENDPOINT_URL)."""

    def __init__(self, args: argparse.Namespace) -> None:
        import boto3
        import botocore.exceptions

        self._errors = botocore.exceptions
        try:
            # AWS_REGION is what AWS CLI v2 and the SDKs of other languages read; boto3 reads only
            # AWS_DEFAULT_REGION (and the profile's).
            region = args.region or os.environ.get("AWS_REGION") or None
            self._session = boto3.session.Session(profile_name=args.profile, region_name=region)
        except botocore.exceptions.ProfileNotFound as e:
            raise UsageError(
                f"--profile {args.profile!r}: {e}; `aws configure list-profiles` lists them"
            ) from e
        if not self._session.region_name:
            raise UsageError("no AWS region: pass --region, set AWS_REGION, or give the profile a region")
        self.region: str = self._session.region_name
        self._cfn = self._session.client("cloudformation")
        self._shapes: dict[str, InstanceShape] = {}
        self._owned_cache = {}

    def identity(self) -> tuple[str, str]:
        try:
            account = self._session.client("sts").get_caller_identity()["Account"]
        except self._errors.NoCredentialsError as e:
            raise UsageError("no AWS credentials: configure them (`aws configure`) or pass --profile") from e
        return str(account), self.region

    def bucket_exists(self, bucket: str) -> bool:
        try:
            self._session.client("s3").head_bucket(Bucket=bucket)
        except self._errors.ClientError as e:
            code = str(e.response.get("Error", {}).get("Code"))
            if code in ("404", "NoSuchBucket", "NotFound"):
                return False
            raise StackError(
                f"bucket {bucket!r} exists and is not yours ({code}); choose another --cluster-id"
            ) from e
        return True

    def stack(self, name: str) -> dict[str, Any] | None:
        try:
            found = self._cfn.describe_stacks(StackName=name)["Stacks"]
        except self._errors.ClientError as e:
            if "does not exist" in str(e):
                return None
            raise
        live = [s for s in found if s["StackStatus"] != "DELETE_COMPLETE"]
        return live[0] if live else None

    def stacks(self) -> Iterator[dict[str, Any]]:
        for page in self._cfn.get_paginator("describe_stacks").paginate():
            yield from page["Stacks"]

    def template_source(self, bucket: str | None, body: str) -> dict[str, str] | None:
        """How CloudFormation gets the template: inline (`TemplateBody`) when it fits, else from the
        stack's bucket (`TemplateURL` of `deploy/template-<hash>.json`, put there now); None when it is too
        big to pass inline and there is no bucket yet."""
        data = body.encode()
        if len(data) <= TEMPLATE_BODY_MAX:
            return {"TemplateBody": body}
        if bucket is None:
            return None
        key = template_key(data)
        self._session.client("s3").put_object(
            Bucket=bucket, Key=key, Body=data, ContentType="application/json"
        )
        return {"TemplateURL": self.object_url(bucket, key)}

    def object_url(self, bucket: str, key: str) -> str:
        """The object's virtual-hosted URL in the bucket's region, in the region's partition."""
        partition = self._session.get_partition_for_region(self.region)
        suffix = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
        return f"https://{bucket}.s3.{self.region}.{suffix}/{key}"

    def validate(self, source: dict[str, str]) -> None:
        self._cfn.validate_template(**source)

    def deploy(
        self,
        name: str,
        source: dict[str, str],
        parameters: dict[str, str],
        tags: list[dict[str, str]],
        *,
        update: bool,
    ) -> bool:
        request = {
            "StackName": name,
            **source,
            "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
            "Capabilities": ["CAPABILITY_IAM"],
            "Tags": tags,
        }
        if not update:
            self._cfn.create_stack(**request)
            return True
        try:
            self._cfn.update_stack(**request)
        except self._errors.ClientError as e:
            if "No updates are to be performed" in str(e):
                return False
            raise
        return True

    def current_template(self, name: str) -> dict[str, Any]:
        """The template the stack runs now (as deployed: its conditions unresolved)."""
        body = self._cfn.get_template(StackName=name, TemplateStage="Original")["TemplateBody"]
        return dict(json.loads(body) if isinstance(body, str) else body)

    def update_template(self, name: str, source: dict[str, str], parameters: dict[str, str]) -> None:
        """Update the stack to another template with these parameters (its tags kept)."""
        self._cfn.update_stack(
            StackName=name,
            **source,
            Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in parameters.items()],
            Capabilities=["CAPABILITY_IAM"],
        )

    def delete(self, name: str, retain: Sequence[str] = ()) -> None:
        """Delete the stack; `retain`: the logical ids of resources to leave (only a DELETE_FAILED stack
        takes them)."""
        self._owned_cache.pop(name, None)  # what is left of it is read again
        if retain:
            self._cfn.delete_stack(StackName=name, RetainResources=list(retain))
        else:
            self._cfn.delete_stack(StackName=name)

    def events(self, name: str, since: Any) -> list[dict[str, Any]]:
        try:
            events = self._cfn.describe_stack_events(StackName=name)["StackEvents"]
        except self._errors.ClientError:
            return []  # a deleted stack's events are gone with it
        fresh = [e for e in events if since is None or e["Timestamp"] > since]
        return sorted(fresh, key=lambda e: e["Timestamp"])

    def failures(self, name: str) -> list[dict[str, Any]]:
        """The failed events of the stack's last operation (its create, update or delete, and the rollback
        that followed), oldest first: what `status` explains a failed stack with."""
        events = self.events(name, None)
        started = [
            i
            for i, e in enumerate(events)
            if e.get("ResourceType") == "AWS::CloudFormation::Stack"
            and e.get("ResourceStatus") in ("CREATE_IN_PROGRESS", "UPDATE_IN_PROGRESS", "DELETE_IN_PROGRESS")
            and e.get("ResourceStatusReason", "User Initiated") == "User Initiated"
        ]
        last = events[started[-1] :] if started else events
        return [e for e in last if str(e.get("ResourceStatus", "")).endswith("_FAILED")]

    def last_event_time(self, name: str) -> Any:
        events = self._cfn.describe_stack_events(StackName=name)["StackEvents"]
        return max((e["Timestamp"] for e in events), default=None)

    # ---- compute: instance types, network, AMI, quotas, Auto Scaling groups -----------------------------

    def instance_types(self, names: Sequence[str]) -> dict[str, InstanceShape]:
        """vCPUs and GPUs of each type (`ec2:DescribeInstanceTypes`); a UsageError naming unknown ones."""
        wanted = sorted(set(names) - set(self._shapes))
        if wanted:
            for item in self._describe_instance_types(wanted):
                gpus = sum(g.get("Count", 0) for g in item.get("GpuInfo", {}).get("Gpus", []))
                memory = int(item.get("MemoryInfo", {}).get("SizeInMiB", 0))
                shape = InstanceShape(vcpus=item["VCpuInfo"]["DefaultVCpus"], gpus=gpus, memory_mib=memory)
                self._shapes[item["InstanceType"]] = shape
            unknown = [name for name in wanted if name not in self._shapes]
            if unknown:
                raise UsageError(
                    f"instance type {', '.join(unknown)} is not offered in {self.region}; "
                    f"`aws ec2 describe-instance-types --region {self.region}` lists those that are"
                )
        return {name: self._shapes[name] for name in names}

    def _describe_instance_types(self, names: list[str]) -> list[dict[str, Any]]:
        pages = self._session.client("ec2").get_paginator("describe_instance_types")
        try:
            return [t for page in pages.paginate(InstanceTypes=names) for t in page["InstanceTypes"]]
        except self._errors.ClientError as e:
            if e.response.get("Error", {}).get("Code") != "InvalidInstanceType":
                raise
            if len(names) == 1:
                return []
            # EC2 refuses the whole request for one unknown type: ask one by one to name it.
            return [t for name in names for t in self._describe_instance_types([name])]

    def default_network(self) -> tuple[str, list[str]] | None:
        """The default VPC and its subnets, or None where the region has no default VPC."""
        ec2 = self._session.client("ec2")
        vpcs = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
        if not vpcs:
            return None
        vpc = vpcs[0]["VpcId"]
        subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
        return vpc, sorted(s["SubnetId"] for s in subnets)

    def subnets_vpc(self, subnets: Sequence[str]) -> str:
        """The VPC of the given subnets (all of them must be in one)."""
        ec2 = self._session.client("ec2")
        try:
            found = ec2.describe_subnets(SubnetIds=list(subnets))["Subnets"]
        except self._errors.ClientError as e:
            raise UsageError(
                f"--agent-subnet-id {','.join(subnets)}: {e.response.get('Error', {}).get('Message')}; "
                f"`aws ec2 describe-subnets --region {self.region}` lists the subnets"
            ) from e
        vpcs = sorted({s["VpcId"] for s in found})
        if len(vpcs) != 1:
            raise UsageError(
                f"--agent-subnet-id: the subnets are in VPCs {', '.join(vpcs)}; give subnets of one"
            )
        return str(vpcs[0])

    def check_key_pair(self, name: str) -> None:
        try:
            self._session.client("ec2").describe_key_pairs(KeyNames=[name])
        except self._errors.ClientError as e:
            raise UsageError(
                f"--keypair {name!r} is not a key pair of region {self.region}; create or import it first "
                "(`aws ec2 create-key-pair`), or leave --keypair out (no SSH to the agents)"
            ) from e

    def ssm_parameter(self, name: str) -> str | None:
        """A (public) SSM parameter's value, or None where there is no parameter of that name."""
        try:
            return str(self._session.client("ssm").get_parameter(Name=name)["Parameter"]["Value"])
        except self._errors.ClientError as e:
            if e.response.get("Error", {}).get("Code") == "ParameterNotFound":
                return None
            raise

    def ssm_parameters_under(self, path: str) -> dict[str, str]:
        """Every (public) SSM parameter under the path, by name."""
        pages = self._session.client("ssm").get_paginator("get_parameters_by_path")
        return {
            p["Name"]: p["Value"]
            for page in pages.paginate(Path=path, Recursive=True)
            for p in page["Parameters"]
        }

    def service_quota(self, code: str) -> float | None:
        """The account's value of an EC2 quota, or None where it cannot be read (no such quota here, no
        permission: moto knows no EC2 quota)."""
        try:
            quota = self._session.client("service-quotas").get_service_quota(
                ServiceCode="ec2", QuotaCode=code
            )
        except self._errors.ClientError:
            return None
        return float(quota["Quota"]["Value"])

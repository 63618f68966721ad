"""`det deploy aws up | down | list | status`: the stack in an AWS account, as one CloudFormation stack.

The stack's name is the cluster id (Determined's `--cluster-id`), its bucket
`<cluster id, lower case>-<account>-<region>`: kept when the stack is deleted (it holds the checkpoints and
contexts) and adopted by the next stack of that name. Credentials, profile and region come the way every
AWS tool takes them (`--profile`, `--region`, or the environment and `~/.aws`); `AWS_ENDPOINT_URL` points
every call at another endpoint (the tests' moto server).

What this command deploys today: the infrastructure of `infra/template.py` (tables, queues, bucket, state
machine, roles, secrets, sweep schedule). The control plane's Lambda functions and API are not in the
stack yet: `python -m infra.package` builds their package, and deploying it is the next step.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from det._render import table
from det._runtime import Runtime
from det.errors import StackError, UsageError

#: The tag every Stratus stack carries (how `list` finds them).
CLUSTER_TAG = "stratus:cluster-id"
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
_DONE = re.compile(r"_(COMPLETE|FAILED)$")
_FAILED = ("CREATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED", "UPDATE_ROLLBACK_COMPLETE",
           "UPDATE_ROLLBACK_FAILED", "UPDATE_FAILED")  # fmt: skip
POLL_S = 2.0


def add_parser(targets: argparse._SubParsersAction[argparse.ArgumentParser], needs: Any) -> None:
    aws = targets.add_parser("aws", help="the stack in an AWS account (CloudFormation)")
    sub = aws.add_subparsers(title="aws commands", metavar="COMMAND")
    aws.set_defaults(command=needs(aws))

    def common(parser: argparse.ArgumentParser, cluster: bool = True) -> None:
        parser.add_argument("--region", help="AWS region (default: the profile's or AWS_REGION)")
        parser.add_argument("--profile", help="AWS named profile (default: the environment's credentials)")
        if cluster:
            parser.add_argument("--cluster-id", default="stratus", help="the stack's name (default: stratus)")

    up_parser = sub.add_parser("up", help="create or update the stack")
    common(up_parser)
    up_parser.add_argument(
        "--add-tag", action="append", default=[], metavar="KEY=VALUE", help="tag the stack (repeatable)"
    )
    up_parser.add_argument(
        "--dry-run", action="store_true", help="show what would be deployed, change nothing"
    )
    up_parser.add_argument("--template-out", metavar="FILE", help="also write the rendered template there")
    up_parser.set_defaults(command=up)
    down_parser = sub.add_parser("down", help="stop every trial run of the stack and delete it")
    common(down_parser)
    down_parser.add_argument("--delete-bucket", action="store_true", help="also empty and delete the bucket")
    down_parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    down_parser.set_defaults(command=down)
    list_parser = sub.add_parser("list", help="the Stratus stacks of a region")
    common(list_parser, cluster=False)
    list_parser.set_defaults(command=list_stacks)
    status_parser = sub.add_parser("status", help="a stack's state, outputs and resources (exit 3 if none)")
    common(status_parser)
    status_parser.set_defaults(command=status)


# ---- commands -----------------------------------------------------------------------------------


def up(args: argparse.Namespace, rt: Runtime) -> int:
    from infra.template import template

    stack = _stack_name(args.cluster_id)
    tags = _tags(args.add_tag, stack)
    aws = _Aws(args)
    account, region = aws.identity()
    bucket = bucket_name(stack, account, region)
    adopt = aws.bucket_exists(bucket)
    body = json.dumps(template(), sort_keys=True)
    parameters = {"BucketName": bucket, "CreateBucket": "false" if adopt else "true"}
    existing = aws.stack(stack)
    if args.template_out:
        with open(args.template_out, "w") as out:
            out.write(body + "\n")
    action = "update" if existing is not None else "create"
    rt.say(f"Stratus stack {stack!r} in account {account}, region {region}: {action}")
    rt.say(f"  bucket {bucket}: " + ("kept from before, adopted" if adopt else "made by the stack"))
    resources = template()["Resources"]
    rt.say(
        "  resources: "
        + _resource_summary({k: r for k, r in resources.items() if not (adopt and "Condition" in r)})
    )
    rt.say("  tags: " + ", ".join(f"{t['Key']}={t['Value']}" for t in tags))
    if args.dry_run:
        aws.validate(body)
        rt.say(f"dry run: the template ({len(body):,} bytes) is valid; nothing was changed")
        return 0
    since = aws.last_event_time(stack) if existing is not None else None
    started = aws.deploy(stack, body, parameters, tags, update=existing is not None)
    if not started:
        rt.say("the stack is up to date: nothing to change")
        return 0
    final = _follow(rt, aws, stack, since)
    if final in _FAILED or not final.endswith("_COMPLETE"):
        raise StackError(f"stack {stack!r} ended {final}; the events above name the resource that failed")
    _print_outputs(rt, aws.stack(stack) or {})
    return 0


def down(args: argparse.Namespace, rt: Runtime) -> int:
    stack = _stack_name(args.cluster_id)
    aws = _Aws(args)
    found = aws.stack(stack)
    if found is None:
        raise StackError(
            f"no stack {stack!r} in region {aws.region}; `det deploy aws list` shows the ones there"
        )
    if not args.yes:
        if not rt.inp_is_tty():
            raise UsageError(f"deleting stack {stack!r} needs confirmation; pass --yes")
        if not rt.confirm(f"Delete stack {stack!r} (its trial runs stop; its tables are deleted)?"):
            rt.say("nothing deleted")
            return 1
    outputs = _outputs(found)
    stopped = aws.stop_executions(outputs.get("StateMachineArn"))
    if stopped:
        rt.say(f"stopped {stopped} running trial execution" + ("" if stopped == 1 else "s"))
    since = aws.last_event_time(stack)
    aws.delete(stack)
    final = _follow(rt, aws, stack, since)
    if final != "DELETE_COMPLETE":
        raise StackError(f"stack {stack!r} ended {final}; the events above name the resource that failed")
    bucket = outputs.get("BucketName")
    if bucket and args.delete_bucket:
        removed = aws.delete_bucket(bucket)
        rt.say(f"deleted bucket {bucket} ({removed} objects)")
    elif bucket:
        rt.say(f"kept bucket {bucket} (checkpoints and contexts); `up` adopts it, --delete-bucket deletes it")
    return 0


def list_stacks(args: argparse.Namespace, rt: Runtime) -> int:
    aws = _Aws(args)
    rows = []
    for found in aws.stacks():
        tags = {t["Key"]: t["Value"] for t in found.get("Tags", [])}
        if CLUSTER_TAG in tags:
            rows.append([found["StackName"], found["StackStatus"], _time(found.get("CreationTime")),
                         _outputs(found).get("BucketName", "")])  # fmt: skip
    rt.say(table(["Cluster ID", "State", "Created", "Bucket"], rows))
    return 0


def status(args: argparse.Namespace, rt: Runtime) -> int:
    stack = _stack_name(args.cluster_id)
    aws = _Aws(args)
    found = aws.stack(stack)
    if found is None:
        rt.say(f"no stack {stack!r} in region {aws.region}")
        return 3
    rt.say(f"Stratus stack {stack!r}: {found['StackStatus']} (created {_time(found.get('CreationTime'))})")
    resources = aws.resources(stack)
    rt.say(
        "  resources: "
        + _resource_summary({r["LogicalResourceId"]: {"Type": r["ResourceType"]} for r in resources})
    )
    _print_outputs(rt, found)
    return 0


# ---- helpers --------------------------------------------------------------------------------------


def bucket_name(stack: str, account: str, region: str) -> str:
    """The stack's bucket: lower case (a stack name may have capitals, a bucket name may not), at most 63."""
    name = f"{stack.lower()}-{account}-{region}"
    if len(name) > 63:
        raise UsageError(
            f"--cluster-id {stack!r} is too long for its bucket name {name!r}; use a shorter one"
        )
    return name


def _stack_name(value: str) -> str:
    if not _STACK_NAME.match(value or ""):
        raise UsageError(
            f"--cluster-id {value!r} is not a stack name: a letter, then letters, digits and hyphens (128 at most)"
        )
    return value


def _tags(pairs: list[str], stack: str) -> list[dict[str, str]]:
    tags = {CLUSTER_TAG: stack}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--add-tag {pair!r} is not KEY=VALUE")
        tags[key] = value
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def _resource_summary(resources: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for resource in resources.values():
        kind = resource["Type"].split("::", 1)[1]
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))


def _outputs(found: dict[str, Any]) -> dict[str, str]:
    return {o["OutputKey"]: o["OutputValue"] for o in found.get("Outputs", [])}


def _print_outputs(rt: Runtime, found: dict[str, Any]) -> None:
    outputs = _outputs(found)
    if outputs:
        rt.say(table(["Output", "Value"], sorted(outputs.items())))


def _time(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if hasattr(value, "strftime") else str(value or "")


def _follow(rt: Runtime, aws: _Aws, stack: str, since: Any) -> str:
    """Print the stack's events as they come until it settles; its final state."""
    seen: set[str] = set()
    while True:
        for event in aws.events(stack, since):
            if event["EventId"] in seen:
                continue
            seen.add(event["EventId"])
            reason = f"  {event['ResourceStatusReason']}" if event.get("ResourceStatusReason") else ""
            rt.note(
                f"  {event['ResourceStatus']:<20} {event['ResourceType']:<36} {event['LogicalResourceId']}{reason}"
            )
        found = aws.stack(stack)
        state = "DELETE_COMPLETE" if found is None else found["StackStatus"]
        if _DONE.search(state) and not state.endswith("_IN_PROGRESS"):
            rt.note(f"stack {stack}: {state}")
            return state
        rt.sleep(POLL_S)


class _Aws:
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

    def resources(self, name: str) -> list[dict[str, Any]]:
        return [
            r
            for r in self._cfn.describe_stack_resources(StackName=name)["StackResources"]
            if "ResourceType" in r
        ]

    def validate(self, body: str) -> None:
        self._cfn.validate_template(TemplateBody=body)

    def deploy(
        self, name: str, body: str, parameters: dict[str, str], tags: list[dict[str, str]], *, update: bool
    ) -> bool:
        request = {
            "StackName": name,
            "TemplateBody": body,
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

    def delete(self, name: str) -> None:
        self._cfn.delete_stack(StackName=name)

    def events(self, name: str, since: Any) -> list[dict[str, Any]]:
        try:
            events = self._cfn.describe_stack_events(StackName=name)["StackEvents"]
        except self._errors.ClientError:
            return []  # a deleted stack's events are gone with it
        fresh = [e for e in events if since is None or e["Timestamp"] > since]
        return sorted(fresh, key=lambda e: e["Timestamp"])

    def last_event_time(self, name: str) -> Any:
        events = self._cfn.describe_stack_events(StackName=name)["StackEvents"]
        return max((e["Timestamp"] for e in events), default=None)

    def stop_executions(self, machine: str | None) -> int:
        if not machine:
            return 0
        states = self._session.client("stepfunctions")
        stopped = 0
        pages = states.get_paginator("list_executions").paginate(
            stateMachineArn=machine, statusFilter="RUNNING"
        )
        try:
            for page in pages:
                for execution in page["executions"]:
                    states.stop_execution(executionArn=execution["executionArn"], cause="det deploy aws down")
                    stopped += 1
        except states.exceptions.StateMachineDoesNotExist:
            pass  # gone already (deleted by hand; or moto, whose executing backend does not see CloudFormation's)
        return stopped

    def delete_bucket(self, bucket: str) -> int:
        s3 = self._session.client("s3")
        removed = 0
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            keys = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            if keys:
                s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
                removed += len(keys)
        s3.delete_bucket(Bucket=bucket)
        return removed

"""`det deploy aws up | down | list | status`: the stack in an AWS account, as one CloudFormation stack.

The stack's name is the cluster id (Determined's `--cluster-id`), its bucket
`<cluster id, lower case>-<account>-<region>`: kept when the stack is deleted (it holds the checkpoints and
contexts) and adopted by the next stack of that name. Credentials, profile and region come the way every
AWS tool takes them (`--profile`, `--region`, or the environment and `~/.aws`); `AWS_ENDPOINT_URL` points
every call at another endpoint (the tests' moto server).

`up` builds the control plane's Lambda package (`infra/aws/package.py`, or `--package ZIP`), makes the
bucket if it is new, gives it the stack's bucket rules whatever made it (`infra/aws/bucket_rules.py`: the
lifecycle rules, TLS only; `det/deploy/aws_bucket.py`), uploads the package there (named by its hash: an
unchanged one is not sent again), with EC2 pools also the agents' wheel (`infra/aws/compute_package.py`, at
`compute/<sha256>/<wheel>`: the stack's `ComputeKey`), and creates or updates the stack of
`infra/aws/template.py`: the infrastructure, the Lambda functions (the API and one per queue, fed by it)
and the REST API with each route's authorization, wired together (the API's URL included) in one
deployment; it prints the `DET_MASTER` to use. Its resource pools and their agents' AMI and network come
from Determined's compute flags or a pools file (`det/deploy/aws_compute.py`), checked against the
account's vCPU quotas first. `--add-tag KEY=VALUE` tags the stack and, through the template, its pools'
instances, volumes, groups and Batch resources, and the Batch and SageMaker jobs its control plane starts
(`stratus.contract.tags`: AWS's rules, checked before anything is asked of AWS). Once the stack is created
or updated, what earlier `up`s put in the bucket is pruned: the packages and the wheel the stack used
before the update are kept with the new ones (a rollback needs them), older ones and earlier templates
are deleted.

The stack's tables are made (or adopted, as the bucket is) by `up` outside the stack
(`det/deploy/aws_tables.py`; the template gets `CreateTables=false`), so the experiments' records outlive
`down`; `down --delete-data` deletes the tables and the bucket too. The stack is tagged with the Stratus
version that deployed it (`stratus:version`; `list` and `status` print it, `up` warns of a downgrade).

`down` scales the stack's Auto Scaling groups to zero before deleting it, and once it is gone deletes the
experiments' dashboards its control plane made. `status` and `down` handle a stack in any state
(`docs/aws.md#stacks-that-failed`): a failed create, a delete that failed, an operation under way; `up`
deletes a ROLLBACK_COMPLETE stack before creating it again.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from det._commands import Subcommands, needs_subcommand
from det._render import plural, table
from det._runtime import Runtime
from det.deploy.aws_calls import AwsCalls
from det.deploy.aws_checks import bucket_name, dry_run, refuse_overlap, stack_name, user_tag_flags
from det.deploy.aws_compute import add_compute_arguments, describe, plan_compute, scale_groups_to_zero
from det.deploy.aws_tables import TablesKept
from det.errors import StackError, UsageError
from stratus.contract.errors import InvalidTagError
from stratus.contract.pools import traits
from stratus.contract.tags import CLUSTER_TAG
from stratus.contract.versions import VERSION, parse

if TYPE_CHECKING:
    from infra.aws.compute_package import Wheel

_DONE = re.compile(r"_(COMPLETE|FAILED)$")
#: The stack's tag naming the Stratus version that deployed it (also its `StratusVersion` output).
VERSION_TAG = "stratus:version"
#: How long `up` and `down` follow a stack before giving up on it (it goes on in CloudFormation).
FOLLOW_TIMEOUT_S = 3600.0
#: What to do about a stack in each state that is not a plain success (`det deploy aws status`).
ADVICE = {
    "CREATE_FAILED": "its create failed: `det deploy aws down` deletes what it made, then `up` again",
    "ROLLBACK_IN_PROGRESS": "its create failed and is being rolled back: `status` again, then `up` (which "
    "deletes the failed stack first) or `down`",
    "ROLLBACK_COMPLETE": "its create failed and was rolled back; such a stack cannot be updated: `up` deletes "
    "it and creates it again, `down` deletes it",
    "ROLLBACK_FAILED": "its create failed and so did its rollback: `down` deletes it (a resource it cannot "
    "delete is left, named, for you to delete)",
    "DELETE_FAILED": "its delete failed on the resources above: `down` again retries, and leaves those that "
    "fail again (named) while deleting the rest",
    "UPDATE_ROLLBACK_COMPLETE": "its last update failed and was rolled back: it runs its previous version; "
    "fix the cause above and `up` again",
    "UPDATE_ROLLBACK_FAILED": "its last update failed and so did the rollback: fix the resource above, then "
    "`aws cloudformation continue-update-rollback --stack-name {stack}`; or `down` deletes the stack",
}
_FAILED = ("CREATE_FAILED", "ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED", "UPDATE_ROLLBACK_COMPLETE",
           "UPDATE_ROLLBACK_FAILED", "UPDATE_FAILED")  # fmt: skip
POLL_S = 2.0


def add_parsers(targets: Subcommands) -> None:
    """`det deploy aws up | down | list | status`."""
    aws = targets.add_parser("aws", help="the stack in an AWS account (CloudFormation)")
    sub = aws.add_subparsers(title="aws commands", metavar="COMMAND")
    aws.set_defaults(command=needs_subcommand(aws))

    def common(parser: argparse.ArgumentParser, cluster: bool = True) -> None:
        parser.add_argument("--region", help="AWS region (default: the profile's or AWS_REGION)")
        parser.add_argument("--profile", help="AWS named profile (default: the environment's credentials)")
        if cluster:
            parser.add_argument("--cluster-id", default="stratus", help="the stack's name (default: stratus)")

    up_parser = sub.add_parser("up", help="create or update the stack")
    common(up_parser)
    up_parser.add_argument(
        "--add-tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="tag the stack, its pools' instances and the jobs it starts (repeatable)",
    )
    up_parser.add_argument(
        "--dry-run", action="store_true", help="show what would be deployed, change nothing"
    )
    up_parser.add_argument("--template-out", metavar="FILE", help="also write the rendered template there")
    up_parser.add_argument(
        "--package",
        metavar="ZIP",
        help="the Lambda package to deploy (default: built by python -m infra.aws.package)",
    )
    add_compute_arguments(up_parser)
    up_parser.set_defaults(command=up)
    down_parser = sub.add_parser("down", help="stop every trial run of the stack and delete it")
    common(down_parser)
    down_parser.add_argument(
        "--delete-data",
        action="store_true",
        help="also delete the experiments' records (the tables) and the bucket; by default both are kept "
        "and the next `up` of this cluster id finds them",
    )
    down_parser.add_argument(
        "--delete-bucket", action="store_true", help="also empty and delete the bucket (the tables are kept)"
    )
    down_parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    down_parser.set_defaults(command=down)
    list_parser = sub.add_parser("list", help="the Stratus stacks of a region")
    common(list_parser, cluster=False)
    list_parser.set_defaults(command=list_stacks)
    status_parser = sub.add_parser(
        "status", help="a stack's state (why it failed, what to do), outputs and resources (exit 3 if none)"
    )
    common(status_parser)
    status_parser.set_defaults(command=status)


# ---- commands -----------------------------------------------------------------------------------


def _aws_errors(
    command: Callable[[argparse.Namespace, Runtime], int],
) -> Callable[[argparse.Namespace, Runtime], int]:
    """An AWS error the command does not handle itself ends it with one line naming it, not a traceback."""

    @functools.wraps(command)
    def run(args: argparse.Namespace, rt: Runtime) -> int:
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.parsers import ResponseParserError

        try:
            return command(args, rt)
        except ClientError as e:
            error = e.response.get("Error", {})
            raise StackError(
                f"AWS refused {e.operation_name}: {error.get('Code')}: {error.get('Message')}"
            ) from e
        except (BotoCoreError, ResponseParserError) as e:  # the latter: an answer botocore cannot read
            raise StackError(f"AWS call failed: {e}") from e

    return run


@_aws_errors
def up(args: argparse.Namespace, rt: Runtime) -> int:
    stack = stack_name(args.cluster_id)
    added = user_tag_flags(args.add_tag)
    tags = [{"Key": key, "Value": value} for key, value in {CLUSTER_TAG: stack, **added}.items()]
    stack_tags = [*tags, {"Key": VERSION_TAG, "Value": VERSION}]  # the stack's own, not its resources'
    aws = AwsCalls(args)
    account, region = aws.identity()
    bucket = bucket_name(stack, account, region)
    kept = aws.bucket_exists(bucket)
    compute = plan_compute(args, aws)
    if stack != stack.lower() and any(traits(pool.backend).lowercase_arns for pool in compute.pools or ()):
        raise UsageError(
            f"--cluster-id {stack}: SageMaker writes its training jobs' ARNs in lower case, which IAM and the "
            f"stack's event rule match exactly; use a lower-case cluster id ({stack.lower()}) with sagemaker pools"
        )
    for warning in compute.warnings:
        rt.note(f"warning: {warning}")
    rendered = _render_template(compute.pools, compute.vcpus, added, compute.memory)
    body = json.dumps(rendered, sort_keys=True)
    refuse_overlap(aws, stack, CLUSTER_TAG)
    existing = aws.stack(stack)
    state = existing["StackStatus"] if existing is not None else None
    if state is not None and state.endswith("_IN_PROGRESS"):
        raise StackError(
            f"stack {stack!r} is {state}: wait for it to settle (`det deploy aws status --cluster-id {stack}`), "
            "then run up again"
        )
    if state in ("UPDATE_ROLLBACK_FAILED", "DELETE_FAILED", "ROLLBACK_FAILED"):
        raise StackError(f"stack {stack!r} is {state} and cannot be updated; {_advice(state, stack)}")
    if existing is not None:
        _warn_downgrade(rt, stack, existing)
    if args.template_out:
        Path(args.template_out).write_text(body + "\n")
    failed = state == "ROLLBACK_COMPLETE"  # a failed create: nothing to update, deleted first
    action = "create" if existing is None or failed else "update"
    rt.say(f"Stratus stack {stack!r} in account {account}, region {region}: {action}")
    if failed:
        rt.say(f"  the stack's earlier create failed (ROLLBACK_COMPLETE): {'it would be' if args.dry_run else 'it is'} "
               "deleted first (its data, kept outside it, stays)")  # fmt: skip
    tables = aws.stack_tables(stack)
    rt.say(
        f"  tables: {len(tables)} kept from before, adopted"
        if tables
        else "  tables: made now, kept across stacks"
    )
    rt.say(f"  bucket {bucket}: " + ("kept from before, adopted" if kept else "made now, kept across stacks"))
    # The bucket is made here, not by the stack: the package goes into it before the stack exists.
    # The template's bucket and its policy are made with CreateBucket=true only, which up never passes; its
    # tables with CreateTables=true only: up makes them outside the stack (det/deploy/aws_tables.py).
    made = {
        k: r
        for k, r in rendered["Resources"].items()
        if r.get("Condition") not in ("MakeBucket", "MakeTables")
    }
    rt.say("  resources: " + _resource_summary(made))
    rt.say("  tags: " + ", ".join(f"{t['Key']}={t['Value']}" for t in stack_tags))
    rt.say(describe(compute))
    declared = rendered.get("Parameters", {})
    # The template declares ComputeKey with its cloud pools: their instances and jobs install the agent from it.
    agents = _compute_package() if "ComputeKey" in declared else None
    if agents is not None:
        rt.say(
            f"  compute package: s3://{bucket}/{agents.key} ({agents.size / 1024:.0f} KiB, "
            f"{plural(agents.files, 'file')}; requires {', '.join(agents.requires)})"
        )
    if args.dry_run:
        dry_run(rt, aws, body, bucket if kept else None)
        return 0
    package = _package(rt, args.package)
    if failed:
        _delete_failed_create(rt, aws, stack)
        existing = None
    if not kept:
        aws.make_bucket(bucket, tags)
    applied = aws.apply_bucket_rules(bucket)
    rt.say("  bucket rules: " + ("; ".join(applied) + " applied" if applied else "in place already"))
    source = aws.template_source(bucket, body)
    if source is None:
        raise StackError(f"bucket {bucket!r} is missing; the template cannot be handed to CloudFormation")
    if existing is not None:
        _retain_stack_tables(rt, aws, stack, bucket)
    rt.say(f"  tables: {_tables_summary(aws.keep_tables(stack, tags, rt.sleep, POLL_S))}")
    key = aws.upload_package(rt, bucket, package)
    parameters = {"BucketName": bucket, "CreateBucket": "false", "CreateTables": "false", "CodeKey": key}
    parameters |= {name: value for name, value in compute.parameters.items() if name in declared}
    if agents is not None:
        aws.upload_once(rt, bucket, agents.path, agents.key)
        parameters["ComputeKey"] = agents.key
    since = aws.last_event_time(stack) if existing is not None else None
    started = aws.deploy(stack, source, parameters, stack_tags, update=existing is not None)
    if not started:
        rt.say("the stack is up to date: nothing to change")
        return 0
    final = _follow(rt, aws, stack, since)
    if final in _FAILED or not final.endswith("_COMPLETE"):
        raise StackError(f"stack {stack!r} ended {final}; the events above name the resource that failed")
    _prune(rt, aws, bucket, parameters, existing, body if "TemplateURL" in source else None)
    found = aws.stack(stack) or {}
    _print_outputs(rt, found)
    if queue_arn := _outputs(found).get("SubmissionsQueueArn"):
        aws.notify_submissions(bucket, queue_arn)  # S3-triggered submissions (docs/submissions.md)
    if url := _outputs(found).get("ApiUrl"):
        rt.say(f"Point det at it (requests are signed with your AWS credentials):\n  export DET_MASTER={url}")
    return 0


def _prune(
    rt: Runtime,
    aws: AwsCalls,
    bucket: str,
    parameters: dict[str, str],
    before: dict[str, Any] | None,
    stored: str | None,
) -> None:
    """After a create or update that succeeded: delete what earlier `up`s put in the bucket, but the packages
    the stack uses now and those it used before the update (`before`'s parameters: a rollback goes back to
    them) and the template just handed over from the bucket (`stored`: its body; CloudFormation keeps its
    own copy of every template, so older ones go)."""
    from botocore.exceptions import ClientError

    from det.deploy.aws_bucket import PACKAGE_PARAMETERS, template_key

    previous = {p["ParameterKey"]: p.get("ParameterValue", "") for p in (before or {}).get("Parameters", [])}
    keep = {found[name] for found in (parameters, previous) for name in PACKAGE_PARAMETERS if found.get(name)}
    if stored is not None:
        keep.add(template_key(stored.encode()))
    try:
        pruned = aws.prune(bucket, keep)
    except ClientError as e:  # the stack is up: what is left over waits for the next update
        rt.note(f"warning: older packages not pruned from s3://{bucket}: {e}")
        return
    if pruned.keys:
        rt.say(
            f"  pruned {plural(len(pruned.keys), 'object')} of earlier deploys from s3://{bucket} "
            f"({pruned.size / 2**20:.1f} MiB): {', '.join(pruned.keys)}"
        )


def _render_template(
    pools: tuple[Any, ...] | None,
    vcpus: dict[str, int] | None = None,
    tags: dict[str, str] | None = None,
    memory: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The stack's template for the pools (None: the template's default pools, all local) and the user's
    tags (checked already)."""
    from infra.aws.template import template

    try:
        return template(tags=tags) if pools is None else template(pools, vcpus, tags, memory)
    except InvalidTagError as e:  # tags the functions' environment has no room for
        raise UsageError(f"--add-tag: {e}") from e
    except ValueError as e:  # infra's ComputeTemplateError: a pool its resources cannot be made for
        raise UsageError(f"the pools cannot be deployed: {e}") from e


def _package(rt: Runtime, given: str | None) -> Path:
    """The Lambda package: the one given, or built now (`infra/aws/package.py`; its dependencies cached)."""
    if given:
        path = Path(given)
        if not path.is_file():
            raise UsageError(
                f"--package {given!r} is not a file; build one with `python -m infra.aws.package`"
            )
        return path
    from infra.aws.package import ROOT, build

    if not (ROOT / "app.py").is_file() or not (ROOT / "requirements.txt").is_file():
        raise UsageError(
            "the Lambda package is built from a Stratus checkout (app.py, requirements.txt); run det from "
            "one, or pass --package with a zip built by `python -m infra.aws.package`"
        )
    rt.note("building the control plane's Lambda package (python -m infra.aws.package)")
    built = build(ROOT / "build" / "lambda" / "stratus.zip")
    rt.note(built.summary())
    return built.path


def _compute_package() -> Wheel:
    """The EC2 agents' wheel (`infra/aws/compute_package.py`), built now from this checkout's sources: the
    same sources give the same bytes, hence the same key, which is not uploaded again."""
    from infra.aws.compute_package import ROOT, build

    if not (ROOT / "pyproject.toml").is_file() or not (ROOT / "harness").is_dir():
        raise UsageError(
            "the EC2 agents' package is built from a Stratus checkout (pyproject.toml, harness/); run det "
            "from one, or deploy without EC2 pools (--no-compute)"
        )
    return build(ROOT / "build" / "compute")


@_aws_errors
def down(args: argparse.Namespace, rt: Runtime) -> int:
    stack, aws, found = _lookup(args)
    delete_data = bool(args.delete_data)
    if found is None:
        if delete_data:
            return _delete_data(rt, aws, stack, None, confirmed=args.yes)
        raise StackError(
            f"no stack {stack!r} in region {aws.region}; `det deploy aws list` shows the ones there"
        )
    if not args.yes:
        if not rt.inp_is_tty():
            raise UsageError(f"deleting stack {stack!r} needs confirmation; pass --yes")
        what = "its tables and bucket are deleted" if delete_data else "its tables and bucket are kept"
        if not rt.confirm(f"Delete stack {stack!r} (its trial runs stop; {what})?"):
            rt.say("nothing deleted")
            return 1
    state = str(found["StackStatus"])
    if state.endswith("_IN_PROGRESS") and state not in ("CREATE_IN_PROGRESS", "DELETE_IN_PROGRESS"):
        # CloudFormation deletes a stack only once an update or rollback has settled (a create it cancels).
        rt.note(f"stack {stack} is {state}: waiting for it to settle before deleting it")
        state = _follow(rt, aws, stack, aws.last_event_time(stack))
    outputs = _outputs(found)
    frozen: list[str] = []
    if state != "DELETE_COMPLETE":
        frozen = _stop_work(rt, aws, stack, outputs)
        state = _delete(rt, aws, stack, retry=state == "DELETE_FAILED")
    if state != "DELETE_COMPLETE":
        aws.unfreeze(frozen)  # what is left of it works again
        raise StackError(
            f"stack {stack!r} ended {state}; the events above name the resource that failed (its "
            "remaining functions run again: `down` once more retries, and leaves what fails again)"
        )
    dashboards = aws.delete_dashboards(stack)
    if dashboards:
        rt.say(f"deleted {plural(len(dashboards), 'experiment dashboard')}: {', '.join(dashboards)}")
    bucket = outputs.get("BucketName")
    if delete_data:
        return _delete_data(rt, aws, stack, bucket, confirmed=True)
    tables = aws.stack_tables(stack)
    if tables:
        rt.say(
            f"kept {plural(len(tables), 'table')} (experiments, trials, metrics, checkpoints): the next `up` "
            f"of {stack} finds them; --delete-data deletes them"
        )
    if bucket and args.delete_bucket:
        removed = aws.delete_bucket(bucket)
        rt.say(f"deleted bucket {bucket} ({plural(removed, 'object')})")
    elif bucket:
        rt.say(f"kept bucket {bucket} (checkpoints and contexts); `up` adopts it, --delete-data deletes it")
    return 0


def _stop_work(rt: Runtime, aws: AwsCalls, stack: str, outputs: dict[str, str]) -> list[str]:
    """End the stack's work before deleting it; the functions frozen (to unfreeze should the delete fail)."""
    # The control plane first: a sweep or a queued message could otherwise start an instance or a job
    # after the ones below were stopped, which would outlive the stack.
    frozen = aws.freeze(stack)
    if frozen:
        rt.say(f"stopped the control plane ({len(frozen)} functions at concurrency 0)")
    scale_groups_to_zero(rt, aws, CLUSTER_TAG, stack)
    jobs, training_jobs = aws.stop_jobs(stack)
    if jobs or training_jobs:
        rt.say(f"terminated {jobs} Batch job(s), stopped {training_jobs} SageMaker training job(s)")
    stopped = aws.stop_executions(outputs.get("StateMachineArn"))
    if stopped:
        rt.say(f"stopped {stopped} running trial execution" + ("" if stopped == 1 else "s"))
    return frozen


def _delete(rt: Runtime, aws: AwsCalls, stack: str, *, retry: bool) -> str:
    """Delete the stack and follow it; its final state. `retry`: it failed to delete before, so what fails
    again is left (CloudFormation's RetainResources) and named, and the rest deleted."""
    since = aws.last_event_time(stack)
    aws.delete(stack)
    final = _follow(rt, aws, stack, since)
    if final == "DELETE_FAILED" and retry:
        stuck = [r for r in aws.resources(stack) if r.get("ResourceStatus") == "DELETE_FAILED"]
        if stuck:
            rt.note(
                "left in place, for you to delete (the stack no longer knows them): "
                + ", ".join(f"{r['ResourceType']} {r.get('PhysicalResourceId') or r['LogicalResourceId']}" for r in stuck)
            )  # fmt: skip
            since = aws.last_event_time(stack)
            aws.delete(stack, retain=[r["LogicalResourceId"] for r in stuck])
            final = _follow(rt, aws, stack, since)
    return final


def _delete_data(rt: Runtime, aws: AwsCalls, stack: str, bucket: str | None, *, confirmed: bool) -> int:
    """`down --delete-data`: the stack's tables and bucket (the one it named, else `<stack>-<account>-<region>`)."""
    if bucket is None:
        account, region = aws.identity()
        bucket = bucket_name(stack, account, region)
    tables = aws.stack_tables(stack)
    has_bucket = aws.bucket_exists(bucket)
    if not tables and not has_bucket:
        raise StackError(f"no stack {stack!r} in region {aws.region}, and no tables or bucket of it left")
    if not confirmed:
        if not rt.inp_is_tty():
            raise UsageError(f"deleting the data of {stack!r} needs confirmation; pass --yes")
        if not rt.confirm(
            f"Delete the tables and bucket of {stack!r} (every experiment's records and files)?"
        ):
            rt.say("nothing deleted")
            return 1
    deleted = aws.delete_tables(stack)
    if deleted:
        rt.say(f"deleted {plural(len(deleted), 'table')}: {', '.join(deleted)}")
    if has_bucket:
        removed = aws.delete_bucket(bucket)
        rt.say(f"deleted bucket {bucket} ({plural(removed, 'object')})")
    return 0


@_aws_errors
def list_stacks(args: argparse.Namespace, rt: Runtime) -> int:
    aws = AwsCalls(args)
    rows = []
    for found in aws.stacks():
        tags = {t["Key"]: t["Value"] for t in found.get("Tags", [])}
        if CLUSTER_TAG in tags:
            rows.append([found["StackName"], found["StackStatus"], _version(found),
                         _time(found.get("CreationTime")), _outputs(found).get("BucketName", "")])  # fmt: skip
    rt.say(table(["Cluster ID", "State", "Version", "Created", "Bucket"], rows))
    return 0


@_aws_errors
def status(args: argparse.Namespace, rt: Runtime) -> int:
    stack, aws, found = _lookup(args)
    if found is None:
        rt.say(f"no stack {stack!r} in region {aws.region}")
        return 3
    explain_state(rt, aws, stack, found)
    resources = aws.resources(stack)
    rt.say(
        "  resources: "
        + _resource_summary({r["LogicalResourceId"]: {"Type": r["ResourceType"]} for r in resources})
    )
    _print_outputs(rt, found)
    return 0


def explain_state(rt: Runtime, aws: AwsCalls, stack: str, found: dict[str, Any]) -> None:
    """The stack's state, and where it failed or is under way: why (its last operation's failed events)
    and what to do."""
    state = str(found["StackStatus"])
    version = _version(found)
    rt.say(
        f"Stratus stack {stack!r}: {state} (created {_time(found.get('CreationTime'))}"
        + (f", Stratus {version})" if version else ")")
    )
    if found.get("StackStatusReason"):
        rt.say(f"  reason: {found['StackStatusReason']}")
    if state in ADVICE or state.endswith(("_FAILED", "_IN_PROGRESS")):
        for event in aws.failures(stack):
            rt.say(
                f"  {event['ResourceStatus']:<20} {event.get('ResourceType', ''):<36} {event['LogicalResourceId']}"
                + (f"  {event['ResourceStatusReason']}" if event.get("ResourceStatusReason") else "")
            )
        rt.say(f"  what to do: {_advice(state, stack)}")


# ---- helpers --------------------------------------------------------------------------------------


def _lookup(args: argparse.Namespace) -> tuple[str, AwsCalls, dict[str, Any] | None]:
    """The cluster's stack name, the AWS calls, and the live stack of that name (None if there is none)."""
    stack = stack_name(args.cluster_id)
    aws = AwsCalls(args)
    return stack, aws, aws.stack(stack)


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


def _advice(state: str, stack: str) -> str:
    if state.endswith("_IN_PROGRESS"):
        return (
            "an operation is under way: `det deploy aws status` again later; `down` waits for it to settle, "
            "then deletes the stack"
        )
    return ADVICE.get(state, "see the events above").format(stack=stack)


def _version(found: dict[str, Any]) -> str:
    """The Stratus version that deployed the stack: its `StratusVersion` output, else its tag."""
    tags = {t["Key"]: t["Value"] for t in found.get("Tags", [])}
    return _outputs(found).get("StratusVersion") or tags.get(VERSION_TAG, "")


def _warn_downgrade(rt: Runtime, stack: str, existing: dict[str, Any]) -> None:
    recorded = _version(existing)
    theirs, ours = parse(recorded) if recorded else None, parse(VERSION)
    if theirs is not None and ours is not None and theirs > ours:
        rt.note(
            f"warning: stack {stack!r} was deployed by Stratus {recorded}, newer than this CLI ({VERSION}): "
            "this up downgrades it; upgrade the CLI first unless that is what you want"
        )


def _delete_failed_create(rt: Runtime, aws: AwsCalls, stack: str) -> None:
    """A ROLLBACK_COMPLETE stack (a create that failed) cannot be updated: delete it before creating it again."""
    rt.note(f"deleting stack {stack} (ROLLBACK_COMPLETE: its create failed earlier) before creating it again")
    since = aws.last_event_time(stack)
    aws.delete(stack)
    final = _follow(rt, aws, stack, since)
    if final != "DELETE_COMPLETE":
        raise StackError(
            f"stack {stack!r} ended {final}; `det deploy aws status --cluster-id {stack}` says why"
        )


def _retain_stack_tables(rt: Runtime, aws: AwsCalls, stack: str, bucket: str) -> None:
    """A stack deployed by an earlier version made its tables itself, to be deleted with it: before the
    update that leaves them out of the stack (CreateTables=false), mark them Retain, or leaving them out
    would delete them."""
    current = aws.current_template(stack)
    owned = {
        logical: resource
        for logical, resource in current.get("Resources", {}).items()
        if resource.get("Type") == "AWS::DynamoDB::Table" and resource.get("DeletionPolicy") != "Retain"
    }
    if not owned:
        return
    for resource in owned.values():
        resource["DeletionPolicy"] = resource["UpdateReplacePolicy"] = "Retain"
    # A change of DeletionPolicy alone is no update to CloudFormation: an output makes it one.
    current.setdefault("Outputs", {})["TablesRetained"] = {"Value": "true"}
    body = json.dumps(current, sort_keys=True)
    source = aws.template_source(bucket, body)
    if source is None:
        raise StackError(f"bucket {bucket!r} is missing; the template cannot be handed to CloudFormation")
    rt.note(f"keeping the stack's {len(owned)} tables when they leave it (DeletionPolicy Retain)")
    since = aws.last_event_time(stack)
    # The stack's parameters as they are (by value: moto takes UsePreviousValue only for those given).
    given = {
        p["ParameterKey"]: p.get("ParameterValue", "") for p in (aws.stack(stack) or {}).get("Parameters", [])
    }
    aws.update_template(stack, source, given)
    final = _follow(rt, aws, stack, since)
    if final != "UPDATE_COMPLETE":
        raise StackError(f"stack {stack!r} ended {final} keeping its tables; nothing else was changed")


def _tables_summary(tables: TablesKept) -> str:
    parts = []
    if tables.made:
        parts.append(f"{plural(len(tables.made), 'table')} made")
    if tables.kept:
        parts.append(f"{plural(len(tables.kept), 'table')} kept from before")
    if tables.indexes_added:
        parts.append(f"indexes added: {', '.join(tables.indexes_added)}")
    return "; ".join(parts) + " (point-in-time recovery on)"


def _follow(rt: Runtime, aws: AwsCalls, stack: str, since: Any, timeout_s: float = FOLLOW_TIMEOUT_S) -> str:
    """Print the stack's events as they come until it settles; its final state. A StackError after
    `timeout_s` (the operation goes on in CloudFormation)."""
    seen: set[str] = set()
    waited = 0.0
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
        if waited >= timeout_s:
            raise StackError(
                f"stack {stack!r} is still {state} after {timeout_s / 60:.0f} minutes; CloudFormation goes on: "
                f"`det deploy aws status --cluster-id {stack}` follows it, `down` again once it settles"
            )
        if waited and int(waited) % 60 == 0:  # a sign of life where no event comes for a while
            rt.note(f"  ... {stack}: {state} ({waited:.0f} s)")
        rt.sleep(POLL_S)
        waited += POLL_S

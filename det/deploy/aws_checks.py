"""Checks of `det deploy aws up` before it changes anything: the cluster id (a stack name, its bucket's
name, one that would share its resources' names with another stack's), the `--add-tag` pairs, and the
template's validation for `--dry-run`."""

from __future__ import annotations

import re

from det._runtime import Runtime
from det.deploy.aws_calls import AwsCalls
from det.errors import StackError, UsageError
from stratus.contract.errors import InvalidTagError
from stratus.contract.tags import user_tags

STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")


def bucket_name(stack: str, account: str, region: str) -> str:
    """The stack's bucket: lower case (a stack name may have capitals, a bucket name may not), at most 63."""
    name = f"{stack.lower()}-{account}-{region}"
    if len(name) > 63:
        raise UsageError(
            f"--cluster-id {stack!r} is too long for its bucket name {name!r}; use a shorter one"
        )
    return name


def stack_name(value: str) -> str:
    if not STACK_NAME.match(value or ""):
        raise UsageError(
            f"--cluster-id {value!r} is not a stack name: a letter, then letters, digits and hyphens (128 at most)"
        )
    return value


def user_tag_flags(pairs: list[str]) -> dict[str, str]:
    """The `--add-tag` pairs (a key given twice: its last value), checked by AWS's rules, sorted by key."""
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--add-tag {pair!r} is not KEY=VALUE")
        try:
            user_tags({key: value})
        except InvalidTagError as e:
            raise UsageError(f"--add-tag {pair!r}: {e}") from e
        tags[key] = value
    try:
        return user_tags(tags)
    except InvalidTagError as e:  # too many
        raise UsageError(f"--add-tag: {e}") from e


def refuse_overlap(aws: AwsCalls, stack: str, tag: str) -> None:
    """A stack's resources are named `<stack>-...` and its roles reach `<stack>-*`: stacks `lab` and
    `lab-big` would reach each other's jobs, groups and logs. One cluster id may not start another's."""
    mine = stack.lower()
    for found in aws.stacks():
        other = str(found["StackName"])
        tags = {t["Key"] for t in found.get("Tags", [])}
        theirs = other.lower()
        if (
            tag in tags
            and theirs != mine
            and (mine.startswith(theirs + "-") or theirs.startswith(mine + "-"))
        ):
            shorter = min(other, stack, key=len)
            raise UsageError(
                f"--cluster-id {stack}: Stratus stack {other!r} is in this region, and what one names "
                f"`{shorter}-...` (jobs, groups, logs, and the permissions over them) would take in the "
                "other's; choose a cluster id that does not start with the other's followed by '-'"
            )


def dry_run(rt: Runtime, aws: AwsCalls, body: str, bucket: str | None) -> None:
    """CloudFormation checks the template where it can read it: inline up to 51,200 bytes, else from the
    bucket if it exists (the one object a dry run writes); otherwise cfn-lint checks it here, if installed."""
    size = f"{len(body.encode()):,} bytes"
    source = aws.template_source(bucket, body)
    if source is not None:
        aws.validate(source)
        where = f" (read from {source['TemplateURL']})" if "TemplateURL" in source else ""
        rt.say(f"dry run: the template ({size}) is valid{where}; nothing else was uploaded or changed")
        return
    try:
        from cfnlint.api import lint
    except ImportError:
        rt.say(
            f"dry run: the template ({size}) is over CloudFormation's inline limit (51,200 bytes) and the "
            "bucket it is read from does not exist yet, so CloudFormation checks it at `up`; install "
            "cfn-lint to check it here; nothing was uploaded or changed"
        )
        return
    errors = [m for m in lint(body, regions=[aws.region]) if str(m.rule.id).startswith("E")]
    for match in errors:
        rt.say(f"  cfn-lint {match.rule.id}: {match.message} ({'/'.join(map(str, match.path))})")
    if errors:
        raise StackError(f"the template has {len(errors)} error(s) (cfn-lint, above); nothing was changed")
    rt.say(
        f"dry run: the template ({size}) passes cfn-lint (CloudFormation reads a template over 51,200 bytes "
        "from S3 only, and the bucket does not exist yet); nothing was uploaded or changed"
    )

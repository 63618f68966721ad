"""The stack's bucket as `det deploy aws up` keeps it (a part of `det.deploy.aws_calls.AwsCalls`): made when
new (private, encrypted, tagged); the stack's rules (`infra/aws/bucket_rules.py`: the lifecycle rules and
the TLS-only policy) applied to it whatever made it, the user's own rules and statements kept; the
packages uploaded once, under their hash, and those of older versions pruned; its submission markers sent
to the stack's queue; with `down --delete-bucket`, emptied and deleted.

The template's `Bucket` carries the same rules, but it is made only with `CreateBucket=true` (a template
deployed by hand): `up` makes or adopts the bucket itself, before the stack exists, to put the package in.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from det._runtime import Runtime

#: What `up` puts in the bucket and prunes: the Lambda packages (`deploy/stratus-<hash>.zip`), the
#: templates handed to CloudFormation by URL (`deploy/template-<hash>.json`) and the agents' wheels
#: (`compute/<sha256>/<wheel>`). Nothing else in the bucket is touched.
DEPLOYED = re.compile(
    r"^(deploy/stratus-[0-9a-f]{16}\.zip|deploy/template-[0-9a-f]{16}\.json|compute/[0-9a-f]{64}/[^/]+\.whl)$"
)
#: The stack parameters that name a package in the bucket: the one the stack used before an update is
#: kept for a rollback.
PACKAGE_PARAMETERS = ("CodeKey", "ComputeKey")
#: The fields of a lifecycle rule that say what it does (S3 may add others to what it answers).
_RULE_FIELDS = ("ID", "Status", "Filter", "Prefix", "Expiration", "Transitions", "NoncurrentVersionTransitions",
                "NoncurrentVersionExpiration", "AbortIncompleteMultipartUpload")  # fmt: skip


def package_key(digest: str) -> str:
    return f"deploy/stratus-{digest[:16]}.zip"


def template_key(body: bytes) -> str:
    return f"deploy/template-{hashlib.sha256(body).hexdigest()[:16]}.json"


def merged_lifecycle(
    current: Iterable[Mapping[str, Any]], ours: list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """The bucket's lifecycle rules with ours in place of any of the same ID (the others, the user's, kept
    in their order, ours after them); None when the bucket has ours already, as they are."""
    rules = [dict(rule) for rule in current]
    wanted = {rule["ID"] for rule in ours}
    kept = [rule for rule in rules if rule.get("ID") not in wanted]
    if any("Prefix" in rule and "Filter" not in rule for rule in kept):
        # S3 refuses a configuration that mixes the old form (`Prefix`) and the new (`Filter`).
        ours = [
            {**{k: v for k, v in r.items() if k != "Filter"}, "Prefix": r["Filter"]["Prefix"]} for r in ours
        ]
    by_id = {rule.get("ID"): rule for rule in rules}
    if all(_what(by_id.get(rule["ID"], {})) == _what(rule) for rule in ours):
        return None
    return kept + ours


def _what(rule: Mapping[str, Any]) -> dict[str, Any]:
    return {field: rule[field] for field in _RULE_FIELDS if field in rule}


def merged_policy(current: str | None, statement: dict[str, Any]) -> dict[str, Any] | None:
    """The bucket policy (its JSON text; None: the bucket has none) with our statement in place of the one
    of its Sid, or added; the others kept. None when the policy has it already, as it is."""
    policy: dict[str, Any] = json.loads(current) if current else {"Version": "2012-10-17", "Statement": []}
    found = policy.get("Statement", [])
    statements = [found] if isinstance(found, dict) else list(found)
    same = [i for i, s in enumerate(statements) if s.get("Sid") == statement["Sid"]]
    if same and statements[same[0]] == statement and len(same) == 1:
        return None
    kept = [s for s in statements if s.get("Sid") != statement["Sid"]]
    return {**policy, "Statement": [*kept, statement]}


def stale(keys: Iterable[str], keep: Collection[str]) -> list[str]:
    """The keys `up` put in the bucket (`DEPLOYED`) that are not to be kept."""
    return sorted(key for key in keys if DEPLOYED.match(key) and key not in keep)


@dataclass(frozen=True)
class Pruned:
    keys: tuple[str, ...]
    size: int  # bytes


class BucketCalls:
    """Needs the `AwsCalls` attributes below."""

    _session: Any
    _errors: Any
    region: str

    def make_bucket(self, bucket: str, tags: list[dict[str, str]]) -> None:
        """The stack's bucket, as the template would make it: private, encrypted, tagged (its rules:
        `apply_bucket_rules`)."""
        s3 = self._session.client("s3")
        where = (
            {}
            if self.region == "us-east-1"
            else {"CreateBucketConfiguration": {"LocationConstraint": self.region}}
        )
        s3.create_bucket(Bucket=bucket, **where)
        s3.put_public_access_block(
            Bucket=bucket,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True, "RestrictPublicBuckets": True,
            },
        )  # fmt: skip
        s3.put_bucket_encryption(
            Bucket=bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
        )
        s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tags})

    def apply_bucket_rules(self, bucket: str) -> list[str]:
        """Give the bucket the stack's lifecycle rules and TLS-only statement (`infra/aws/bucket_rules.py`),
        keeping its other rules and statements; what was changed (nothing when it has them already)."""
        from infra.aws.bucket_rules import s3_lifecycle_rules, tls_only_statement

        s3 = self._session.client("s3")
        changed = []
        try:
            answer = s3.get_bucket_lifecycle_configuration(Bucket=bucket)
        except self._errors.ClientError as e:
            if _code(e) != "NoSuchLifecycleConfiguration":
                raise
            answer = {"Rules": []}
        rules = merged_lifecycle(answer.get("Rules", []), s3_lifecycle_rules())
        if rules is not None:
            request: dict[str, Any] = {"Bucket": bucket, "LifecycleConfiguration": {"Rules": rules}}
            if answer.get("TransitionDefaultMinimumObjectSize"):  # the bucket's own, kept
                request["TransitionDefaultMinimumObjectSize"] = answer["TransitionDefaultMinimumObjectSize"]
            s3.put_bucket_lifecycle_configuration(**request)
            changed.append("lifecycle rules " + ", ".join(r["ID"] for r in s3_lifecycle_rules()))
        try:
            current: str | None = s3.get_bucket_policy(Bucket=bucket)["Policy"]
        except self._errors.ClientError as e:
            if _code(e) != "NoSuchBucketPolicy":
                raise
            current = None
        arn = f"arn:{self._session.get_partition_for_region(self.region)}:s3:::{bucket}"
        statement = tls_only_statement(arn, f"{arn}/*")
        policy = merged_policy(current, statement)
        if policy is not None:
            s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
            changed.append(f"policy statement {statement['Sid']} (TLS only)")
        return changed

    def notify_submissions(self, bucket: str, queue_arn: str) -> None:
        """Send the bucket's `submissions/<name>/submit` markers to the stack's submissions queue: the
        template cannot configure the bucket it adopts (`infra/aws/template_submissions.py`)."""
        from infra.shape import notification_configuration

        self._session.client("s3").put_bucket_notification_configuration(
            Bucket=bucket, NotificationConfiguration=notification_configuration(queue_arn)
        )

    def upload_package(self, rt: Runtime, bucket: str, package: Path) -> str:
        """The package's key in the bucket (named by its hash: an unchanged package is not sent again)."""
        key = package_key(hashlib.sha256(package.read_bytes()).hexdigest())
        self.upload_once(rt, bucket, package, key)
        return key

    def upload_once(self, rt: Runtime, bucket: str, path: Path, key: str) -> bool:
        """Send the file to `key` unless an object is there already (the keys name their content's hash);
        whether it was sent."""
        s3 = self._session.client("s3")
        try:
            s3.head_object(Bucket=bucket, Key=key)
            rt.note(f"package {key} already uploaded")
            return False
        except self._errors.ClientError:
            pass
        size = path.stat().st_size
        sent = [0]
        tty = rt.err_is_tty()

        def progress(count: int) -> None:
            sent[0] += count
            if tty:
                rt.err.write(f"\r  uploading {path.name}: {sent[0] / 2**20:.1f} / {size / 2**20:.1f} MiB")
                rt.err.flush()

        s3.upload_file(str(path), bucket, key, Callback=progress)
        rt.note(
            ("\n" if tty else "") + f"  uploaded {path.name} ({size / 2**20:.1f} MiB) as s3://{bucket}/{key}"
        )
        return True

    def prune(self, bucket: str, keep: Collection[str]) -> Pruned:
        """Delete what `up` put in the bucket (`DEPLOYED`: packages, templates, wheels) but the keys to keep."""
        s3 = self._session.client("s3")
        sizes: dict[str, int] = {}
        for prefix in ("deploy/", "compute/"):
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                sizes.update({o["Key"]: int(o.get("Size", 0)) for o in page.get("Contents", [])})
        doomed = stale(sizes, keep)
        for i in range(0, len(doomed), 1000):  # DeleteObjects takes 1,000 keys a request
            batch = [{"Key": key} for key in doomed[i : i + 1000]]
            s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        return Pruned(tuple(doomed), sum(sizes[key] for key in doomed))

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


def _code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code"))

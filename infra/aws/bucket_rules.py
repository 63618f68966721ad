"""The stack's bucket rules, declared once: its lifecycle rules and its TLS-only policy.

Two places make a bucket: the template's `Bucket` (only with `CreateBucket=true`, a template deployed by
hand) carries them as CloudFormation properties (`cfn_lifecycle`, `template_bucket_policy`), and
`det deploy aws up`, which makes or adopts the bucket itself before the stack exists, applies the same
rules to that bucket through S3's API (`s3_lifecycle_rules`, `tls_only_statement`; `det/deploy/aws_bucket.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chalicelib.domain.cloud_names import CREDENTIALS_PREFIX


@dataclass(frozen=True)
class ExpiryRule:
    """Objects under `prefix` are deleted `days` after they were written."""

    id: str
    prefix: str
    days: int


#: A job's credential object is deleted by the node that reads it; one never read (the job failed
#: first) goes a day later.
LIFECYCLE_RULES: tuple[ExpiryRule, ...] = (
    ExpiryRule(id="ExpireJobCredentials", prefix=CREDENTIALS_PREFIX, days=1),
)

#: The bucket policy's statement that refuses every request not made over TLS.
TLS_ONLY_SID = "DenyInsecureTransport"


def cfn_lifecycle(rules: tuple[ExpiryRule, ...] = LIFECYCLE_RULES) -> dict[str, Any]:
    """The rules as the template's `AWS::S3::Bucket` `LifecycleConfiguration`."""
    return {
        "Rules": [
            {"Id": r.id, "Status": "Enabled", "Prefix": r.prefix, "ExpirationInDays": r.days} for r in rules
        ]
    }


def s3_lifecycle_rules(rules: tuple[ExpiryRule, ...] = LIFECYCLE_RULES) -> list[dict[str, Any]]:
    """The rules as S3's `PutBucketLifecycleConfiguration` takes them (and `Get...` gives them back)."""
    return [
        {"ID": r.id, "Status": "Enabled", "Filter": {"Prefix": r.prefix}, "Expiration": {"Days": r.days}}
        for r in rules
    ]


def tls_only_statement(bucket_arn: Any, objects_arn: Any) -> dict[str, Any]:
    """Deny any request to the bucket or its objects that did not come over TLS (AWS's
    `aws:SecureTransport` key). The ARNs: strings, or CloudFormation expressions in the template."""
    return {
        "Sid": TLS_ONLY_SID,
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [bucket_arn, objects_arn],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def template_bucket_policy(bucket: str, condition: str) -> dict[str, Any]:
    """The template's `AWS::S3::BucketPolicy` of its bucket (logical id `bucket`), made with it (`condition`)."""
    return {
        "Type": "AWS::S3::BucketPolicy",
        "Condition": condition,
        "Properties": {
            "Bucket": {"Ref": bucket},
            "PolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    tls_only_statement(
                        {"Fn::GetAtt": [bucket, "Arn"]}, {"Fn::Sub": "${" + bucket + ".Arn}/*"}
                    )
                ],
            },
        },
    }

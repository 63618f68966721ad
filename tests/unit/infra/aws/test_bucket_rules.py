"""The bucket's rules, declared once (`infra/aws/bucket_rules.py`): the template's conditional `Bucket`
carries them as CloudFormation properties, with a TLS-only `BucketPolicy` made with it, and S3's form
(what `det deploy aws up` applies to the bucket it makes or adopts) says the same; the control plane may
delete its own dashboards and no other."""

from __future__ import annotations

from chalicelib.domain.cloud_names import CREDENTIALS_PREFIX
from infra.aws.bucket_rules import (
    LIFECYCLE_RULES,
    TLS_ONLY_SID,
    cfn_lifecycle,
    s3_lifecycle_rules,
    tls_only_statement,
)
from infra.aws.template import template
from infra.aws.template_iam import api_policy


def test_the_job_credentials_expire_a_day_after_they_were_written() -> None:
    (rule,) = [r for r in LIFECYCLE_RULES if r.prefix == CREDENTIALS_PREFIX]
    assert (rule.id, rule.days) == ("ExpireJobCredentials", 1)


def test_the_templates_bucket_and_s3s_form_carry_the_same_rules() -> None:
    resources = template()["Resources"]
    bucket = resources["Bucket"]
    assert bucket["Properties"]["LifecycleConfiguration"] == cfn_lifecycle()
    as_cfn = [(r["Id"], r["Status"], r["Prefix"], r["ExpirationInDays"]) for r in cfn_lifecycle()["Rules"]]
    as_s3 = [
        (r["ID"], r["Status"], r["Filter"]["Prefix"], r["Expiration"]["Days"]) for r in s3_lifecycle_rules()
    ]
    assert as_cfn == as_s3 == [(r.id, "Enabled", r.prefix, r.days) for r in LIFECYCLE_RULES]


def test_the_templates_bucket_is_tls_only_and_its_policy_is_made_with_it() -> None:
    resources = template()["Resources"]
    policy = resources["BucketPolicy"]
    assert policy["Type"] == "AWS::S3::BucketPolicy"
    assert policy["Condition"] == resources["Bucket"]["Condition"] == "MakeBucket"
    assert policy["Properties"]["Bucket"] == {"Ref": "Bucket"}
    (statement,) = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement == tls_only_statement({"Fn::GetAtt": ["Bucket", "Arn"]}, {"Fn::Sub": "${Bucket.Arn}/*"})
    assert (
        statement["Sid"] == TLS_ONLY_SID and statement["Effect"] == "Deny" and statement["Principal"] == "*"
    )
    assert statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_the_control_plane_deletes_its_own_dashboards_only() -> None:
    granting = [s for s in api_policy()["Statement"] if "cloudwatch:DeleteDashboards" in s["Action"]]
    (statement,) = granting
    assert statement["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:cloudwatch::${AWS::AccountId}:dashboard/${AWS::StackName}-*"
    }

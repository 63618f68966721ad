"""What `det deploy aws up` makes of the bucket's rules and objects, without AWS: the stack's lifecycle
rules and TLS-only statement merged into what the bucket has (the owner's own kept, nothing changed when
they are there already), the objects a successful update prunes, and the experiments' dashboards `down`
deletes (the names the control plane gives). On moto: tests/aws/test_deploy_aws.py."""

from __future__ import annotations

import json
import re

import pytest

from chalicelib.domain.dashboards import dashboard_name
from det.deploy.aws_bucket import merged_lifecycle, merged_policy, package_key, stale, template_key
from det.deploy.aws_teardown import EXPERIMENT_DASHBOARD
from infra.aws.bucket_rules import s3_lifecycle_rules, tls_only_statement

OURS = s3_lifecycle_rules()
OWN = {
    "ID": "ExpireScratch",
    "Status": "Enabled",
    "Filter": {"Prefix": "scratch/"},
    "Expiration": {"Days": 30},
}
TLS = tls_only_statement("arn:aws:s3:::b", "arn:aws:s3:::b/*")


def test_the_stacks_rules_join_the_owners_own_and_a_bucket_that_has_them_is_left_alone() -> None:
    assert merged_lifecycle([], OURS) == OURS
    assert merged_lifecycle([OWN], OURS) == [OWN, *OURS]
    assert merged_lifecycle([OWN, *OURS], OURS) is None
    assert merged_lifecycle([*OURS, OWN], OURS) is None  # in any order
    # S3 may answer more than a rule's own fields: they do not make it another rule.
    assert merged_lifecycle([{**OURS[0], "NewField": 1}], OURS) is None


def test_a_rule_of_the_stacks_id_changed_by_hand_is_put_back() -> None:
    changed = {**OURS[0], "Expiration": {"Days": 30}}
    assert merged_lifecycle([changed, OWN], OURS) == [OWN, *OURS]
    disabled = {**OURS[0], "Status": "Disabled"}
    assert merged_lifecycle([disabled], OURS) == OURS


def test_beside_rules_of_the_old_form_the_stacks_take_that_form() -> None:
    """S3 refuses a configuration that mixes rules with `Filter` and rules with a bare `Prefix`."""
    old = {"ID": "Old", "Status": "Enabled", "Prefix": "tmp/", "Expiration": {"Days": 7}}
    (ours,) = OURS
    legacy = {
        "ID": ours["ID"],
        "Status": "Enabled",
        "Prefix": ours["Filter"]["Prefix"],
        "Expiration": ours["Expiration"],
    }
    assert merged_lifecycle([old], OURS) == [old, legacy]
    assert merged_lifecycle([old, legacy], OURS) is None


def test_the_tls_statement_joins_the_owners_policy_once() -> None:
    own = {"Sid": "AuditorsRead", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::1:root"},
           "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/reports/*"}  # fmt: skip
    assert merged_policy(None, TLS) == {"Version": "2012-10-17", "Statement": [TLS]}
    policy = {"Version": "2012-10-17", "Id": "owners", "Statement": [own]}
    assert merged_policy(json.dumps(policy), TLS) == {**policy, "Statement": [own, TLS]}
    assert merged_policy(json.dumps({**policy, "Statement": [own, TLS]}), TLS) is None
    # One statement, not a list (IAM takes both); an older statement of the Sid replaced.
    older = {**TLS, "Action": "s3:GetObject"}
    assert merged_policy(json.dumps({"Version": "2012-10-17", "Statement": older}), TLS) == {
        "Version": "2012-10-17",
        "Statement": [TLS],
    }


def test_what_up_put_in_the_bucket_is_pruned_but_what_is_kept_and_anything_else() -> None:
    old, previous, current = (package_key(c * 64) for c in "abc")
    template, earlier = template_key(b"{}"), template_key(b"{ }")
    wheel = "compute/" + "d" * 64 + "/stratus_compute-0.1.0-py3-none-any.whl"
    old_wheel = "compute/" + "e" * 64 + "/stratus_compute-0.1.0-py3-none-any.whl"
    others = ["deploy/notes.txt", "deploy/stratus-latest.zip", "compute/local", "checkpoints/1/deploy/x.zip"]
    keys = [old, previous, current, template, earlier, wheel, old_wheel, *others]
    assert stale(keys, {previous, current, template, wheel}) == sorted([old, earlier, old_wheel])


@pytest.mark.parametrize("stack", ["lab", "Lab-3f2a", "a"])
def test_down_deletes_the_dashboards_of_the_names_the_control_plane_gives_and_no_other(stack: str) -> None:
    ours = re.compile(EXPERIMENT_DASHBOARD.format(stack=re.escape(stack)))
    assert all(ours.fullmatch(dashboard_name(stack, i)) for i in (1, 42, 123456))
    for other in (stack, f"{stack}-experiment-", f"{stack}-experiment-1-copy", f"{stack}x-experiment-1",
                  f"{stack}-big-experiment-1", dashboard_name(f"{stack}-experiment-1", 2)):  # fmt: skip
        assert not ours.fullmatch(other), other

"""Two labels the API reads off what the CLI and the trial send: an experiment's owner (the verified IAM
identity, else the user the CLI names in its header) and a log line's level (as Determined reads it)."""

from __future__ import annotations

import json

import pytest
from chalice.app import Blueprint, Chalice
from chalice.test import Client

from chalicelib.api import models
from chalicelib.api.auth import UserPrincipal, owner_from_arn
from chalicelib.api.routing import ROUTES, route
from stratus.contract.log_levels import LEVELS, at_or_above, line_level
from stratus.contract.owner import USER_HEADER, clean_user_name

pytestmark = pytest.mark.filterwarnings("ignore:IAMAuthorizer is not a supported in local mode")


@pytest.mark.parametrize(
    ("arn", "owner"),
    [
        ("arn:aws:iam::123456789012:user/alice", "alice"),
        ("arn:aws:iam::123456789012:user/team/bob", "bob"),
        (
            "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_1a/carol@example.com",
            "carol@example.com",
        ),
        ("arn:aws-cn:sts::123456789012:federated-user/dave", "dave"),
        ("arn:aws:iam::123456789012:root", "root"),
        ("arn:aws:iam::123456789012:role/Deployer", "arn:aws:iam::123456789012:role/Deployer"),
    ],
)
def test_the_owner_of_an_iam_identity_is_the_name_it_goes_by(arn: str, owner: str) -> None:
    assert owner_from_arn(arn) == owner
    assert UserPrincipal(arn, claimed_name="mallory").owner == owner  # the header cannot override it


def test_without_an_identity_the_owner_is_the_name_the_cli_claims() -> None:
    assert UserPrincipal(None, claimed_name="erin").owner == "erin"
    assert UserPrincipal(None).owner == "user"
    assert clean_user_name("  erin ") == "erin"
    assert [clean_user_name(v) for v in (None, "", "   ", "x" * 65, "a\nb")] == [None] * 5


def test_the_registration_hands_an_iam_view_the_claimed_name() -> None:
    saved = list(ROUTES)
    bp = Blueprint(__name__)
    seen: list[UserPrincipal] = []

    @route(bp, "/whoami", "GET", response=models.Empty, auth="iam")
    def whoami(user: UserPrincipal) -> models.Empty:
        seen.append(user)
        return models.Empty()

    app = Chalice(app_name="owner-test")
    app.register_blueprint(bp)
    try:
        with Client(app) as client:
            named = client.http.get("/whoami", headers={USER_HEADER: "frank"})
            client.http.get("/whoami", headers={USER_HEADER: "bad\tname"})
    finally:
        ROUTES[:] = saved
    assert (named.status_code, json.loads(named.body)) == (200, {})
    assert [(u.arn, u.owner) for u in seen] == [(None, "frank"), (None, "user")]


@pytest.mark.parametrize(
    ("message", "level"),
    [
        ("INFO: [42] root: loading", "INFO"),  # det.LOG_FORMAT
        ("WARNING:root:slow batch", "WARNING"),  # Python's default format
        ("[rank=3] ERROR: [42] torch: bad", "ERROR"),  # a launcher's prefix first
        ("2024-05-01 12:00:00,123 CRITICAL [42] harness: gone", "CRITICAL"),  # asctime first
        ("2024-05-01T12:00:00.123Z DEBUG detail", "DEBUG"),
        ("TRACE: deep", "TRACE"),
        ("WARN: aliased", "WARNING"),
        ("FATAL: aliased", "CRITICAL"),
        ("a print", "INFO"),  # no level: INFO, as Determined records it
        ("ERROR rate is 3%", "INFO"),  # a word, not a level prefix
        ("", "INFO"),
    ],
)
def test_a_line_level_is_read_as_determined_reads_it(message: str, level: str) -> None:
    assert line_level(message) == level


def test_at_or_above_keeps_the_level_and_the_higher_ones() -> None:
    assert [level for level in LEVELS if at_or_above(f"{level}: x", "WARNING")] == [
        "WARNING",
        "ERROR",
        "CRITICAL",
    ]
    assert at_or_above("a print", "INFO") and not at_or_above("a print", "WARNING")

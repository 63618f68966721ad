"""How a CLI's or an agent's version stands against the API's (`stratus.contract.versions`): ordered as
numbers, pre-releases first; a caller older than the oldest the API answers is refused with both versions
and the fix; nothing unreadable is guessed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from stratus.contract.versions import (
    DISTRIBUTION,
    OLDEST_AGENT,
    OLDEST_CLIENT,
    UNREPORTED,
    VERSION,
    Side,
    Standing,
    compare,
    parse,
)

ROOT = Path(__file__).resolve().parents[3]


def test_the_codes_version_is_the_distributions():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (project["version"], project["name"]) == (VERSION, DISTRIBUTION)
    assert parse(VERSION) is not None
    # The oldest callers answered are released versions, not newer than this one.
    for oldest in (OLDEST_CLIENT, OLDEST_AGENT, UNREPORTED):
        assert parse(oldest) is not None and parse(oldest) <= parse(VERSION)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("0.9.1", "0.10.0"),  # numbers, not text
        ("0.2.0rc1", "0.2.0"),  # a release candidate comes before its release
        ("0.2.0.dev3", "0.2.0"),
        ("0.1.9", "0.2.0a1"),
        ("1.0", "1.0.1"),
    ],
)
def test_versions_are_ordered_as_releases(older: str, newer: str):
    assert parse(older) < parse(newer)  # type: ignore[operator]


def test_trailing_zeros_and_a_leading_v_name_the_same_version():
    assert parse("1.0.0") == parse("1.0") == parse("v1") == parse("1.0.0+local.build")


@pytest.mark.parametrize("text", ["", "unknown", "latest", "1.x", "1..2"])
def test_text_that_is_no_version_is_not_parsed(text: str):
    assert parse(text) is None


def test_the_same_version_needs_no_word():
    same = compare(Side.CLI, "0.2.0", api_version="0.2.0", oldest="0.1.0")
    assert same.standing is Standing.SAME and same.behind == "" and same.message == ""


def test_a_cli_behind_the_api_is_told_to_upgrade_to_the_apis_version():
    behind = compare(Side.CLI, "0.1.0", api_version="0.2.0", oldest="0.1.0")
    assert behind.standing is Standing.BEHIND and behind.behind == "CLI"
    assert behind.message == (
        "the version of the CLI (0.1.0) is older than the API's (0.2.0): upgrade the CLI: "
        "pip install --upgrade 'stratus-dl==0.2.0'"
    )


def test_a_cli_older_than_the_oldest_answered_is_refused_with_both_versions_and_the_fix():
    refused = compare(Side.CLI, "0.1.0", api_version="0.3.0", oldest="0.2.0")
    assert refused.standing is Standing.TOO_OLD and refused.behind == "CLI"
    assert refused.message == (
        "the version of the CLI (0.1.0) is older than the API's (0.3.0), and older than the oldest it answers "
        "(0.2.0), so the API refuses it: upgrade the CLI: pip install --upgrade 'stratus-dl==0.3.0'"
    )


def test_a_caller_that_sends_no_version_is_taken_for_the_last_version_that_sent_none():
    answered = compare(Side.CLI, None, api_version="0.2.0", oldest=UNREPORTED)
    assert answered.standing is Standing.BEHIND and answered.version == UNREPORTED and not answered.reported
    assert f"(none sent, so {UNREPORTED} or older)" in answered.message
    refused = compare(Side.AGENT, None, api_version="0.3.0", oldest="0.2.0", name="agent i-0abc")
    assert refused.standing is Standing.TOO_OLD


def test_an_api_behind_the_cli_says_the_stack_is_behind_and_how_to_upgrade_it():
    ahead = compare(Side.CLI, "0.3.0", api_version="0.2.0", oldest="0.1.0")
    assert ahead.standing is Standing.AHEAD and ahead.behind == "API"
    assert ahead.message.startswith(
        "the API's version (0.2.0) is older than that of the CLI (0.3.0): upgrade the stack"
    )
    assert "`det deploy aws up` run by a CLI of version 0.3.0" in ahead.message


def test_an_old_agent_is_named_with_the_way_to_replace_its_machine():
    old = compare(Side.AGENT, "0.1.0", api_version="0.2.0", oldest="0.2.0", name="agents i-0abc, i-0def")
    assert old.standing is Standing.TOO_OLD and old.behind == "agent"
    assert old.message.startswith(
        "the version of agents i-0abc, i-0def (0.1.0) is older than the API's (0.2.0)"
    )
    assert "`det agent disable AGENT_ID`" in old.message and "`det deploy aws up`" in old.message


def test_an_unreadable_version_is_said_to_be_unknown_never_guessed():
    unknown = compare(Side.CLI, "unknown", api_version="0.2.0", oldest="0.1.0")
    assert unknown.standing is Standing.UNKNOWN and unknown.behind == ""
    assert unknown.message.startswith(
        "the version of the CLI (unknown) and the API's (0.2.0) cannot be compared"
    )
    no_api = compare(Side.CLI, "0.2.0", api_version="", oldest="0.1.0")
    assert no_api.standing is Standing.UNKNOWN and "pip install --upgrade 'stratus-dl'" in no_api.message
    # Older than the oldest answered is known whatever the API's own version says.
    assert compare(Side.CLI, "0.1.0", api_version="", oldest="0.2.0").standing is Standing.TOO_OLD

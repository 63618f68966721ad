"""The control plane's settings (`chalicelib.settings`): the heartbeat interval is set per backend, the
lost-agent timeout follows it unless set, and a nonsense interval is named; the user's tags come from
`STRATUS_TAGS` and tag every job with the stack's cluster tag."""

from __future__ import annotations

import pytest

from chalicelib.settings import AGENT_TIMEOUT_BEATS, DEFAULT_AGENT_TIMEOUT_S, get_settings, reset_settings


@pytest.fixture
def env(stack_settings: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch = stack_settings
    for name in (
        "STRATUS_AGENT_HEARTBEAT_S",
        "STRATUS_AGENT_TIMEOUT_S",
        "STRATUS_REPORT_INTERVAL_S",
        "STRATUS_TAGS",
    ):
        monkeypatch.delenv(name, raising=False)
    reset_settings()
    yield monkeypatch
    reset_settings()


@pytest.mark.parametrize(
    ("heartbeat", "timeout", "expected"),
    [
        (None, None, (120.0, AGENT_TIMEOUT_BEATS * 120.0)),  # AWS: a beat every 120 s, lost after 8 minutes
        ("5", None, (5.0, DEFAULT_AGENT_TIMEOUT_S)),  # the local stack: never under 30 s
        ("60", None, (60.0, AGENT_TIMEOUT_BEATS * 60.0)),
        ("60", "45", (60.0, 45.0)),  # set by hand: kept
    ],
)
def test_the_lost_agent_timeout_follows_the_heartbeat(env, heartbeat, timeout, expected) -> None:
    if heartbeat is not None:
        env.setenv("STRATUS_AGENT_HEARTBEAT_S", heartbeat)
    if timeout is not None:
        env.setenv("STRATUS_AGENT_TIMEOUT_S", timeout)
    settings = get_settings()
    assert (settings.agent_heartbeat_s, settings.agent_timeout_s) == expected


@pytest.mark.parametrize("value", ["0", "-1", "301"])
def test_a_heartbeat_interval_out_of_range_is_named(env, value: str) -> None:
    env.setenv("STRATUS_AGENT_HEARTBEAT_S", value)
    with pytest.raises(
        RuntimeError, match=f"STRATUS_AGENT_HEARTBEAT_S={float(value):g} must be between 0 and 300"
    ):
        get_settings()


def test_the_report_interval_is_120_s_unless_set(env) -> None:
    assert get_settings().report_interval_s == 120.0
    env.setenv("STRATUS_REPORT_INTERVAL_S", "5")
    reset_settings()
    assert get_settings().report_interval_s == 5.0
    env.setenv("STRATUS_REPORT_INTERVAL_S", "601")
    reset_settings()
    with pytest.raises(RuntimeError, match="STRATUS_REPORT_INTERVAL_S=601 must be between 0 and 600"):
        get_settings()


def test_without_stratus_tags_the_jobs_carry_the_cluster_tag_only(env) -> None:
    env.setenv("STRATUS_STACK", "lab")
    settings = get_settings()
    assert settings.tags == () and settings.job_tags() == {"stratus:cluster-id": "lab"}


def test_the_users_tags_come_from_stratus_tags_sorted_and_join_the_cluster_tag(env) -> None:
    env.setenv("STRATUS_STACK", "lab")
    env.setenv("STRATUS_TAGS", '{"team":"vision","cost-center":"4711"}')
    settings = get_settings()
    assert settings.tags == (("cost-center", "4711"), ("team", "vision"))
    assert settings.job_tags() == {"cost-center": "4711", "team": "vision", "stratus:cluster-id": "lab"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("team=vision", "STRATUS_TAGS: not JSON"),
        ('["team"]', "STRATUS_TAGS: .* is not an object of tag keys to string values"),
        (
            '{"stratus:cluster-id": "other"}',
            "STRATUS_TAGS: tag stratus:cluster-id=other: keys starting with 'stratus:'",
        ),
    ],
)
def test_tags_aws_would_refuse_are_named_when_the_settings_are_read(env, value: str, message: str) -> None:
    env.setenv("STRATUS_TAGS", value)
    with pytest.raises(RuntimeError, match=message):
        get_settings()

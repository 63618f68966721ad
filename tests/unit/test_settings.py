"""The control plane's agent timing settings (`chalicelib.settings`): the heartbeat interval is set per
backend, the lost-agent timeout follows it unless set, and a nonsense interval is named."""

from __future__ import annotations

import pytest

from chalicelib.settings import AGENT_TIMEOUT_BEATS, DEFAULT_AGENT_TIMEOUT_S, get_settings, reset_settings


@pytest.fixture
def env(stack_settings: pytest.MonkeyPatch):  # noqa: ANN201
    monkeypatch = stack_settings
    for name in ("STRATUS_AGENT_HEARTBEAT_S", "STRATUS_AGENT_TIMEOUT_S", "STRATUS_REPORT_INTERVAL_S"):
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

"""A clock that moves only when told to, and the settings of a stack that lives in memory."""

from __future__ import annotations

from chalicelib.services.clock import iso_utc
from chalicelib.settings import DEFAULT_AGENT_TIMEOUT_S, DEFAULT_PRESIGN_EXPIRY_S, Settings
from stratus.contract.pools import DEFAULT_POOLS

#: 2026-01-01T00:00:00Z: the twin's clock starts here unless told otherwise.
EPOCH_2026 = 1_767_225_600.0


class MemoryClock:
    """Time stands still until a test moves it (`advance`, `set`), so every recorded time is known."""

    def __init__(self, start: float = EPOCH_2026) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def now_iso(self) -> str:
        return iso_utc(self._now)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock moves forward only; advance({seconds}) would move it back")
        self._now += seconds

    def set(self, epoch: float) -> None:
        self._now = epoch


def memory_settings(**overrides: object) -> Settings:
    """Settings for a stack in memory: every name filled in, nothing read from the environment."""
    values: dict[str, object] = {
        "stack": "memory",
        "region": "us-east-1",
        "endpoint_url": None,
        "bucket": "memory-bucket",
        "table_prefix": "memory-",
        "scheduler_queue_url": "memory://queues/memory-scheduler.fifo",
        "launch_queue_url": "memory://queues/memory-launch",
        "events_queue_url": "memory://queues/memory-trial-events",
        "state_machine_arn": "arn:aws:states:us-east-1:000000000000:stateMachine:memory-trial",
        "log_group": "/memory/trials",
        "api_url": "http://stratus.memory.invalid",
        "token_secret": "memory-token-secret",
        "agent_token": "memory-agent-token",
        "agent_timeout_s": DEFAULT_AGENT_TIMEOUT_S,
        "presign_expiry_s": DEFAULT_PRESIGN_EXPIRY_S,
        "pools": DEFAULT_POOLS,
    }
    unknown = set(overrides) - set(values)
    if unknown:
        raise TypeError(
            f"memory_settings() got unknown settings {sorted(unknown)}; see chalicelib.settings.Settings"
        )
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]

"""The agent-facing half of the HTTP API (docs/contracts.md §1), and retrying calls to it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from harness.errors import ApiCallError

log = logging.getLogger("harness.agent")

T = TypeVar("T")


@dataclass(frozen=True)
class HeartbeatAnswer:
    launch: list[Any]  # raw LaunchSpec objects: each is parsed (and may be refused) on its own
    kill: list[str]


def is_permanent(err: ApiCallError) -> bool:
    """A refusal that asking again will not change (bad input, unknown id, wrong state)."""
    return 400 <= err.status < 500 and err.status not in (408, 425, 429)


class AgentApi:
    """Agent-facing calls, authenticated with the agent token. Thread-safe (one shared httpx client)."""

    def __init__(
        self,
        base_url: str,
        agent_id: str,
        token: str = "",
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._agent = quote(agent_id, safe="")
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._client.close()

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        what = f"POST {path}"
        try:
            resp = self._client.post(path, json=body)
        except (httpx.HTTPError, RuntimeError) as e:  # RuntimeError: the client is closed (agent stopping)
            raise ApiCallError(f"{what}: {type(e).__name__}: {e}") from e
        if resp.status_code >= 400:
            code, message = "", resp.text[:300]
            try:
                err = resp.json()
                if isinstance(err, dict):
                    code = str(err.get("error", ""))
                    message = str(err.get("message", message))
            except ValueError:
                pass
            raise ApiCallError(
                f"{what}: HTTP {resp.status_code} {code} {message}".strip(),
                status=resp.status_code,
                code=code,
            )
        if not resp.content:
            return {}
        try:
            data = resp.json()
        except ValueError as e:
            raise ApiCallError(f"{what}: the answer is not JSON", status=resp.status_code) from e
        return data if isinstance(data, dict) else {}

    def heartbeat(self, pool: str, slots: int, running: Sequence[str]) -> HeartbeatAnswer:
        data = self._post(
            f"/agents/{self._agent}/heartbeat", {"pool": pool, "slots": slots, "running": list(running)}
        )
        launch = data.get("launch") or []
        kill = data.get("kill") or []
        return HeartbeatAnswer(
            launch=list(launch) if isinstance(launch, list) else [],
            kill=[str(r) for r in kill] if isinstance(kill, list) else [],
        )

    def started(self, run_id: str, pid: int) -> None:
        self._post(f"/agents/{self._agent}/runs/{quote(run_id, safe='')}/started", {"pid": pid})

    def exited(self, run_id: str, exit_code: int, reason: str, failed_rank: int | None = None) -> None:
        body: dict[str, Any] = {"exit_code": exit_code, "reason": reason}
        if failed_rank is not None:
            body["failed_rank"] = failed_rank
        self._post(f"/agents/{self._agent}/runs/{quote(run_id, safe='')}/exit", body)

    def logs(self, trial_id: str, run_id: str, lines: Sequence[Mapping[str, Any]], seq: int) -> None:
        body = {"run_id": run_id, "seq": seq, "lines": list(lines)}
        self._post(f"/trials/{quote(trial_id, safe='')}/logs", body)


def call_with_retry(
    fn: Callable[[], T],
    *,
    what: str,
    give_up: threading.Event,
    deadline: Callable[[], bool] | None = None,
    max_backoff: float = 5.0,
) -> tuple[bool, T | None]:
    """Call ``fn`` until it succeeds, it is refused for good, ``give_up`` is set or ``deadline()`` says so.

    Waits between attempts on ``give_up`` (so setting it ends the wait at once). Returns (succeeded, value).
    """
    backoff = 0.1
    attempt = 0
    while True:
        attempt += 1
        try:
            return True, fn()
        except ApiCallError as e:
            if is_permanent(e):
                log.warning("%s refused, not retrying: %s", what, e)
                return False, None
            level = logging.WARNING if attempt in (1, 10) or attempt % 100 == 0 else logging.DEBUG
            log.log(level, "%s failed (attempt %d, retrying): %s", what, attempt, e)
        if (deadline is not None and deadline()) or give_up.wait(backoff):
            log.warning("%s: giving up after %d attempts", what, attempt)
            return False, None
        backoff = min(backoff * 2, max_backoff)


def monotonic_deadline(seconds: float) -> Callable[[], bool]:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end

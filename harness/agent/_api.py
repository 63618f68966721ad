"""The agent-facing half of the HTTP API (docs/contracts.md §1), and retrying calls to it under the one
retry policy of `contract.http`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from contract.errors import HttpCallError
from contract.http import RetryPolicy, Session, Transport
from harness.errors import ApiCallError

log = logging.getLogger("harness.agent")

T = TypeVar("T")

#: The agent's calls are tried once: the heartbeat loop and `call_with_retry` ask again.
ONE_ATTEMPT = RetryPolicy(max_attempts=1)


@dataclass(frozen=True)
class HeartbeatAnswer:
    launch: list[Any]  # raw LaunchSpec objects: each is parsed (and may be refused) on its own
    kill: list[str]
    preempt: list[str] = field(default_factory=list)
    #: The heartbeat interval the control plane expects (None: the agent's own setting).
    interval: float | None = None
    #: Its doorbell (`harness.agent._bell`), or None.
    bell: dict[str, Any] | None = None


class AgentApi:
    """Agent-facing calls, authenticated with the agent token: one attempt each (`call_with_retry` and the
    heartbeat loop decide about asking again), over the compute side's one HTTP session. Thread-safe."""

    def __init__(
        self,
        base_url: str,
        agent_id: str,
        token: str = "",
        *,
        timeout: float = 30.0,
        transport: Transport | None = None,
    ) -> None:
        self._agent = quote(agent_id, safe="")
        self._session = Session(
            base_url,
            token,
            transport=transport,
            retry=ONE_ATTEMPT,
            timeout_s=timeout,
            transfer_timeout_s=timeout,
        )

    def close(self) -> None:
        self._session.close()

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return self._session.call("POST", path, body)
        except HttpCallError as e:
            raise ApiCallError(str(e), status=e.status, code=e.code) from e

    def download(
        self,
        url: str,
        dest: Path,
        *,
        retry: RetryPolicy,
        wait: Callable[[float], object],
        on_chunk: Callable[[int], None] | None = None,
        on_retry: Callable[[int, Exception, float], None] | None = None,
    ) -> int:
        """GET a presigned URL (a context archive) into ``dest``, streamed and without the agent token,
        under ``retry``; see `contract.http.Session.download`."""
        try:
            return self._session.download(
                url, dest, retry=retry, wait=wait, on_chunk=on_chunk, on_retry=on_retry
            )
        except HttpCallError as e:
            raise ApiCallError(str(e), status=e.status, code=e.code) from e

    def heartbeat(
        self,
        pool: str,
        slots: int,
        running: Sequence[str],
        *,
        stopping: bool = False,
        draining: bool = False,
    ) -> HeartbeatAnswer:
        """One beat; ``stopping``: the last one (the agent takes nothing more; see docs/contracts.md);
        ``draining``: the agent's machine is going away (a spot interruption, a shutdown): it is granted
        nothing more and its runs are preempted, then it stops."""
        body: dict[str, Any] = {"pool": pool, "slots": slots, "running": list(running)}
        if stopping:
            body["stopping"] = True
        if draining:
            body["draining"] = True
        data = self._post(f"/agents/{self._agent}/heartbeat", body)
        launch = data.get("launch") or []
        kill = data.get("kill") or []
        preempt = data.get("preempt") or []
        return HeartbeatAnswer(
            launch=list(launch) if isinstance(launch, list) else [],
            kill=[str(r) for r in kill] if isinstance(kill, list) else [],
            preempt=[str(r) for r in preempt] if isinstance(preempt, list) else [],
            interval=_positive(data.get("heartbeat_interval_s")),
            bell=data.get("bell") if isinstance(data.get("bell"), dict) else None,
        )

    def started(self, run_id: str, pid: int) -> None:
        self._post(f"/agents/{self._agent}/runs/{quote(run_id, safe='')}/started", {"pid": pid})

    def exited(
        self,
        run_id: str,
        exit_code: int,
        reason: str,
        failed_rank: int | None = None,
        *,
        requeue: bool = False,
    ) -> None:
        """Report a run's exit; ``requeue``: the agent stopped it (it is stopping), so the control plane
        puts its trial back in the queue instead of ending it."""
        body: dict[str, Any] = {"exit_code": exit_code, "reason": reason}
        if failed_rank is not None:
            body["failed_rank"] = failed_rank
        if requeue:
            body["requeue"] = True
        self._post(f"/agents/{self._agent}/runs/{quote(run_id, safe='')}/exit", body)

    def logs(self, trial_id: str, run_id: str, lines: Sequence[Mapping[str, Any]], seq: int) -> None:
        body = {"run_id": run_id, "seq": seq, "lines": list(lines)}
        self._post(f"/trials/{quote(trial_id, safe='')}/logs", body)


def agent_retry(max_backoff: float = 5.0) -> RetryPolicy:
    """The agent's reports: waits from 0.1 s doubling up to ``max_backoff``, no limit on attempts (the
    caller's give-up event or deadline ends them)."""
    return RetryPolicy(first_delay_s=0.1, growth=2.0, max_delay_s=max_backoff, max_attempts=None)


def call_with_retry(
    fn: Callable[[], T],
    *,
    what: str,
    give_up: threading.Event,
    deadline: Callable[[], bool] | None = None,
    max_backoff: float = 5.0,
) -> tuple[bool, T | None]:
    """Call ``fn`` until it succeeds, it is refused for good, ``give_up`` is set or ``deadline()`` says so.

    Which failures are asked again is the one retry policy's (`RetryPolicy.retries`). Waits between
    attempts on ``give_up`` (so setting it ends the wait at once). Returns (succeeded, value).
    """
    attempts = 0

    def say(number: int, error: Exception, delay: float) -> None:
        nonlocal attempts
        attempts = number
        level = logging.WARNING if number in (1, 10) or number % 100 == 0 else logging.DEBUG
        log.log(level, "%s failed (attempt %d, retrying): %s", what, number, error)

    try:
        return True, agent_retry(max_backoff).call(
            fn, status_of=_status, wait=give_up.wait, stop=deadline, on_retry=say
        )
    except ApiCallError as e:
        if not RetryPolicy.retries(e.status):
            log.warning("%s refused, not retrying: %s", what, e)
        else:
            log.warning("%s: giving up after %d attempts (%s)", what, attempts + 1, e)
        return False, None


def _status(error: Exception) -> int | None:
    return error.status if isinstance(error, ApiCallError) else None


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)

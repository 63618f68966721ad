"""The agent-facing half of the HTTP API (docs/contracts.md §1), and retrying calls to it under the one
retry policy of `stratus.contract.http`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import quote

from stratus.contract.errors import HttpCallError
from stratus.contract.http import PooledTransport, RetryPolicy, Session, Transport
from stratus.harness.errors import ApiCallError

log = logging.getLogger("stratus.harness.agent")

T = TypeVar("T")

#: The agent's calls are tried once: the heartbeat loop and `call_with_retry` ask again.
ONE_ATTEMPT = RetryPolicy(max_attempts=1)
#: After a failed `CredentialSource.fetch`, calls fail at once with its error (without asking again)
#: for this long, doubling up to `RENEW_MAX_BACKOFF_S`: a refused agent must not hammer the API.
RENEW_BACKOFF_S = 1.0
RENEW_MAX_BACKOFF_S = 60.0


class CredentialSource(Protocol):
    """Where an agent without a credential given gets one (on EC2: `stratus.harness.agent._iam.IamCredential`)."""

    def fetch(self) -> str:
        """A fresh credential; raises `ApiCallError`."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class HeartbeatAnswer:
    launch: list[Any]  # raw LaunchSpec objects: each is parsed (and may be refused) on its own
    kill: list[str]
    preempt: list[str] = field(default_factory=list)
    #: The heartbeat interval the control plane expects (None: the agent's own setting).
    interval: float | None = None
    #: Its doorbell (`stratus.harness.agent._bell`), or None.
    bell: dict[str, Any] | None = None


class AgentApi:
    """Agent-facing calls, authenticated with the agent token: one attempt each (`call_with_retry` and the
    heartbeat loop decide about asking again), over the compute side's one HTTP session. Thread-safe.

    With ``credentials`` (an agent started without a token, on EC2) the token comes from there: fetched
    before the first call, and fetched again once when a call answers 401, then that call is made once
    more. Concurrent 401s share one fetch; a failed fetch fails the calls of the next seconds at once
    (`RENEW_BACKOFF_S`, growing), so a refused agent does not hammer the API."""

    def __init__(
        self,
        base_url: str,
        agent_id: str,
        token: str = "",
        *,
        timeout: float = 30.0,
        transport: Transport | None = None,
        credentials: CredentialSource | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._agent = quote(agent_id, safe="")
        self._base_url = base_url
        #: The instance this agent runs on (`stratus.harness.agent._instance.instance_report`), sent with each
        #: run's start: the control plane prices the run's time by it. None: the pool's provider says.
        self.instance: dict[str, Any] | None = None
        self._timeout = timeout
        # One transport for every session: a renewed token gets a new session on the same connections.
        self._transport = transport if transport is not None else PooledTransport()
        self._credentials = credentials
        self._clock = clock
        self._lock = threading.Lock()  # the session and its generation, read and replaced together
        self._renewing = threading.Lock()  # one fetch at a time
        self._session = self._session_with(token)
        #: How many tokens this client has had: a 401 renews only the token its call was made with.
        self._generation = 0 if credentials is not None and not token else 1
        self._closed = False
        self._failed: ApiCallError | None = None
        self._retry_at = 0.0
        self._backoff = RENEW_BACKOFF_S

    @property
    def renews_credential(self) -> bool:
        """Whether the token comes from a `CredentialSource` (not given at start)."""
        return self._credentials is not None

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._session.close()
        if self._credentials is not None:
            self._credentials.close()

    def _session_with(self, token: str) -> Session:
        return Session(
            self._base_url,
            token,
            transport=self._transport,
            retry=ONE_ATTEMPT,
            timeout_s=self._timeout,
            transfer_timeout_s=self._timeout,
        )

    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            session, generation = self._session, self._generation
        if generation == 0:
            session, generation = self._renewed(generation)
        try:
            return session.call("POST", path, body)
        except HttpCallError as e:
            if e.status != 401 or self._credentials is None:
                raise ApiCallError(str(e), status=e.status, code=e.code) from e
            log.warning("the API refused this agent's credential (%s): asking for a new one", e)
        session, _ = self._renewed(generation)
        try:
            return session.call("POST", path, body)
        except HttpCallError as e:
            raise ApiCallError(str(e), status=e.status, code=e.code) from e

    def _renewed(self, seen: int) -> tuple[Session, int]:
        """The session of a token newer than generation ``seen``: fetched now unless another call did."""
        assert self._credentials is not None
        with self._renewing:
            with self._lock:
                if self._generation != seen or self._closed:  # a closed session answers no call
                    return self._session, self._generation
            if self._failed is not None and self._clock() < self._retry_at:
                failed = self._failed
                raise ApiCallError(str(failed), status=failed.status, code=failed.code)
            try:
                token = self._credentials.fetch()
            except ApiCallError as e:
                self._failed, self._retry_at = e, self._clock() + self._backoff
                self._backoff = min(self._backoff * 2, RENEW_MAX_BACKOFF_S)
                raise
            self._failed, self._backoff = None, RENEW_BACKOFF_S
            log.info("this agent has a new credential from the control plane")
            with self._lock:  # the old session shares the transport: it is dropped, not closed
                self._session, self._generation = self._session_with(token), self._generation + 1
                return self._session, self._generation

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
        under ``retry``; see `stratus.contract.http.Session.download`."""
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
        """The run's process started; with what this agent runs on, where it knows (`instance`)."""
        body: dict[str, Any] = {"pid": pid}
        if self.instance:
            body["instance"] = dict(self.instance)
        self._post(f"/agents/{self._agent}/runs/{quote(run_id, safe='')}/started", body)

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

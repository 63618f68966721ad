"""The agent on EC2 (``--aws``): the instance metadata service, IMDSv2 only, and the spot watcher.

IMDSv2: ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` gives a session token,
which every ``GET`` carries in ``X-aws-ec2-metadata-token``. Stratus' launch template requires tokens
(``HttpTokens: required``), so the token-less IMDSv1 is never tried. The token is taken again shortly
before its TTL ends, and once more when the service answers 401 (it forgot the token).

A spot instance learns of its end two minutes ahead at ``meta-data/spot/instance-action``: 404 while
nothing is planned, then ``{"action": "terminate"|"stop"|"hibernate", "time": "2026-11-26T05:00:00Z"}``.
AWS advises polling it every 5 seconds. `SpotWatcher` does, and hands each new notice on (the agent
drains: `stratus.harness.agent._agent.Agent.drain`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from stratus.contract.errors import NoAnswerError
from stratus.contract.http import PooledTransport, Request, RetryPolicy, Transport
from stratus.harness.errors import HarnessError

log = logging.getLogger("stratus.harness.agent")

IMDS_URL = "http://169.254.169.254"
#: The token's life: six hours, the longest IMDS grants. It is taken again a minute before it ends.
TOKEN_TTL_S = 21600
#: AWS's advice for polling ``spot/instance-action``.
SPOT_POLL_S = 5.0
#: IMDS is on the instance itself: an answer that takes longer will not come.
TIMEOUT_S = 2.0
TTL_HEADER = "x-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "x-aws-ec2-metadata-token"
#: Reading the instance at start: three tries, a second apart (the service may be starting with it).
START_RETRY = RetryPolicy(first_delay_s=1.0, growth=1.0, max_delay_s=1.0, max_attempts=3)
_WARN_EVERY_S = 60.0


class ImdsError(HarnessError):
    """The instance metadata service did not answer, or refused a request (``status``; 0: no answer)."""

    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Instance:
    """What the agent reads about its instance at start."""

    instance_id: str
    local_ipv4: str
    #: "spot" or "on-demand" (IMDS also says "scheduled" for the old scheduled instances).
    life_cycle: str
    #: "g5.xlarge" ("" where the metadata service has no `instance-type`): what its hours cost.
    instance_type: str = ""


@dataclass(frozen=True)
class InstanceAction:
    """A planned interruption of a spot instance: ``action`` at ``time`` (UTC)."""

    action: str
    time: datetime

    @classmethod
    def parse(cls, text: str) -> InstanceAction:
        """From the ``spot/instance-action`` body; ValueError if it is not one."""
        try:
            body = json.loads(text)
            action, at = body["action"], body["time"]
            if not isinstance(action, str) or not isinstance(at, str):
                raise TypeError("action and time must be strings")
            when = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not an instance action: {text[:200]!r} ({e})") from e
        return cls(action, when if when.tzinfo is not None else when.replace(tzinfo=UTC))


class ImdsClient:
    """IMDSv2 at ``base_url`` (``--imds-url``). Thread-safe; ``clock`` paces the token's renewal and
    ``wait`` the retries of `instance`."""

    def __init__(
        self,
        base_url: str = IMDS_URL,
        *,
        transport: Transport | None = None,
        timeout_s: float = TIMEOUT_S,
        token_ttl_s: int = TOKEN_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], object] = time.sleep,
    ) -> None:
        if not 1 <= token_ttl_s <= TOKEN_TTL_S:
            raise ValueError(f"token TTL {token_ttl_s} s is outside IMDS's 1 to {TOKEN_TTL_S} s")
        self.base_url = base_url.rstrip("/")
        # The compute side's transport: an HTTP proxy in the environment is used for IMDS too unless
        # NO_PROXY names 169.254.169.254 (as the AWS CLI's docs ask of proxied instances).
        self._transport = transport if transport is not None else PooledTransport()
        self._timeout_s = timeout_s
        self._ttl_s = token_ttl_s
        self._clock = clock
        self._wait = wait
        self._lock = threading.Lock()
        self._token = ""
        self._renew_at = 0.0

    def close(self) -> None:
        self._transport.close()

    def get(self, path: str) -> str | None:
        """``GET /latest/<path>`` (``meta-data/instance-id``); None on 404. Raises `ImdsError`."""
        for fresh in (False, True):
            status, body = self._send("GET", f"/latest/{path}", {TOKEN_HEADER: self._session(fresh)})
            if status == 401 and not fresh:
                continue  # the service forgot the token (or it expired early): once more with a new one
            if status == 404:
                return None
            if status != 200:
                raise ImdsError(f"GET {self.base_url}/latest/{path} answered HTTP {status}", status=status)
            return body
        raise AssertionError("unreachable")  # the second pass returns or raises

    def instance(self, retry: RetryPolicy = START_RETRY) -> Instance:
        """The instance's id, private address and life cycle, retried under ``retry``."""

        def read() -> Instance:
            values = {}
            for name in ("instance-id", "local-ipv4", "instance-life-cycle"):
                value = self.get(f"meta-data/{name}")
                if not value:
                    raise ImdsError(f"{self.base_url} has no meta-data/{name}", status=404)
                values[name] = value.strip()
            kind = (self.get("meta-data/instance-type") or "").strip()
            return Instance(values["instance-id"], values["local-ipv4"], values["instance-life-cycle"], kind)

        return retry.call(read, status_of=_status, wait=self._wait)

    def instance_action(self) -> InstanceAction | None:
        """The planned interruption, or None. Raises `ImdsError`, or ValueError for a body not one."""
        body = self.get("meta-data/spot/instance-action")
        return None if body is None else InstanceAction.parse(body)

    def _session(self, fresh: bool) -> str:
        """The token, taken again when ``fresh`` or shortly before its TTL ends."""
        with self._lock:
            now = self._clock()
            if fresh or not self._token or now >= self._renew_at:
                status, body = self._send("PUT", "/latest/api/token", {TTL_HEADER: str(self._ttl_s)})
                if status != 200 or not body:
                    raise ImdsError(
                        f"PUT {self.base_url}/latest/api/token answered HTTP {status}: no IMDSv2 token",
                        status=status,
                    )
                self._token = body.strip()
                self._renew_at = now + self._ttl_s - min(60.0, self._ttl_s / 2)
            return self._token

    def _send(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, str]:
        request = Request(method, self.base_url + path, headers, b"" if method == "PUT" else None)
        try:
            with self._transport.send(request, timeout_s=self._timeout_s) as response:
                return response.status, response.text
        except NoAnswerError as e:
            raise ImdsError(f"{method} {self.base_url}{path}: no answer ({e.body.message})") from e


def _status(error: Exception) -> int | None:
    return error.status if isinstance(error, ImdsError) else None


class SpotWatcher:
    """Polls ``spot/instance-action`` every ``interval`` seconds in a daemon thread; each new notice
    becomes ``on_notice(deadline, reason)``, ``deadline`` on `time.monotonic` (the instance's end).
    A failed poll is logged and tried again at the next one."""

    def __init__(
        self,
        imds: ImdsClient,
        on_notice: Callable[[float, str], None],
        *,
        interval: float = SPOT_POLL_S,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"spot poll interval {interval} must be > 0 seconds")
        self._imds = imds
        self._on_notice = on_notice
        self._interval = interval
        self._now = now
        self._clock = clock
        self._stop = threading.Event()
        self._last: InstanceAction | None = None
        self._failing_since: float | None = None
        self._warned_at = 0.0
        self._thread = threading.Thread(target=self._run, name="agent-spot-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self._interval + TIMEOUT_S * 4)

    def poll_once(self) -> InstanceAction | None:
        """One look; the notice (new or seen before), or None."""
        try:
            action = self._imds.instance_action()
        except (ImdsError, ValueError) as e:
            self._failed(e)
            return None
        if self._failing_since is not None:
            log.info("the instance metadata service answers again")
            self._failing_since = None
        if action is not None and action != self._last:
            self._last = action
            left = (action.time - self._now()).total_seconds()
            reason = f"spot interruption: the instance is to {action.action} at {action.time.isoformat()}"
            log.warning("%s (in %.0f s): draining", reason, left)
            self._on_notice(self._clock() + max(0.0, left), reason)
        return action

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # the watcher must outlive surprises: it is the agent's two-minute warning
                log.exception("spot watcher: unexpected failure")
            self._stop.wait(self._interval)

    def _failed(self, error: Exception) -> None:
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = self._warned_at = now
            log.warning("spot watcher: cannot read spot/instance-action, will keep trying: %s", error)
        elif now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning("spot watcher: still failing after %.0f s: %s", now - self._failing_since, error)
        else:
            log.debug("spot watcher: %s", error)

"""The agent's doorbell (`chalicelib.aws.bells`): a thread long-polls the presigned SQS URL its heartbeat
answer gave it, and wakes the heartbeat loop when the control plane rings, so a launch, a kill or a stop
request reaches the agent within a round trip rather than at its next heartbeat.

Everything here is best effort: without a URL, or while SQS cannot be reached, the agent still heartbeats
on its interval and gets the same instructions, later."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from stratus.contract.errors import NoAnswerError
from stratus.contract.http import PooledTransport, Request, Transport

log = logging.getLogger("stratus.harness.agent")

#: Waits after a failed poll (then the last one, repeated).
BACKOFF_S = (1.0, 2.0, 5.0)
#: A URL this close to its expiry is not used: the next heartbeat brings a fresh one.
EXPIRY_MARGIN_S = 60
#: A poll waits up to 20 s at SQS: its answer is given this long.
POLL_TIMEOUT_S = 40.0


class BellListener:
    """`update(bell)` with each heartbeat answer's `bell`; `wake()` is called on each ring."""

    def __init__(
        self,
        wake: Callable[[], None],
        *,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._wake = wake
        self._transport = transport or PooledTransport()
        self._clock = clock
        self._lock = threading.Lock()
        self._bell: dict[str, Any] | None = None
        self._changed = threading.Event()
        self._stop = threading.Event()
        self.rings = 0
        self._thread = threading.Thread(target=self._run, name="agent-bell", daemon=True)
        self._thread.start()

    def update(self, bell: Any) -> None:
        fresh = bell if isinstance(bell, dict) and isinstance(bell.get("url"), str) else None
        with self._lock:
            if fresh != self._bell:
                self._bell = fresh
                self._changed.set()

    def close(self) -> None:
        self._stop.set()
        self._changed.set()
        self._thread.join(timeout=2.0)
        self._transport.close()

    def _current(self) -> str | None:
        with self._lock:
            bell = self._bell
        if bell is None:
            return None
        expires = bell.get("expires_at")
        if isinstance(expires, int | float) and expires - EXPIRY_MARGIN_S <= self._clock():
            return None
        return str(bell["url"])

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            url = self._current()
            if url is None:
                self._changed.wait()
                self._changed.clear()
                continue
            try:
                with self._transport.send(Request("GET", url), timeout_s=POLL_TIMEOUT_S) as answer:
                    status, text = answer.status, answer.text
            except NoAnswerError as e:
                failures += 1
                log.debug("doorbell poll failed: %s", e)
            else:
                if status == 200:
                    failures = 0
                    if _has_message(text):
                        self.rings += 1
                        self._wake()
                    continue
                failures += 1
                log.debug("doorbell poll answered %d: %s", status, text[:200])
                if status in (400, 403):  # expired or refused: wait for the next heartbeat's URL
                    with self._lock:
                        if self._bell is not None and self._bell.get("url") == url:
                            self._bell = None
                    continue
            self._stop.wait(BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])


def _has_message(text: str) -> bool:
    """SQS's answer holds a message: its query protocol answers XML; moto answers the same in JSON."""
    return "<ReceiptHandle>" in text or '"ReceiptHandle"' in text

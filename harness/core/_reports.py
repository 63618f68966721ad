"""The trial's reports leave the training loop at once: a background sender (contracts.md §1).

Metrics, progress and checkpoint registrations are queued in the order they are made and sent by one
daemon thread, so the training loop never waits on the network to report. Consecutive metric and
progress reports travel together in one `POST /trials/{id}/reports` (at most `MAX_BATCH` reports or
`MAX_BATCH_BYTES` of JSON); a checkpoint registration goes to its own route, in its place in the order.
Progress is coalesced: a newer value replaces one still waiting. Between sends the thread lingers up to
`STRATUS_REPORT_INTERVAL` seconds (default 5; the first report goes at once) to gather more, which also
bounds the requests a trial makes per hour (the control plane's cost: bench/results/control_plane_cost.md).

`flush()` waits until everything queued is delivered. The harness flushes where the semantics need the
control plane to be up to date: when a checkpoint is stored (its registration is durable before training
goes on), when `should_preempt()` says stop, before asking the searcher, and at `close()` (an `atexit`
hook catches scripts that never close). A report that cannot be delivered (the API refused it, or did
not answer for `GIVE_UP_AFTER_S`) is logged when it fails and raised as `ReportError` by the next flush:
never lost silently. When `MAX_PENDING` reports wait (the API unreachable for a long while), a report call
waits for room: backpressure rather than unbounded memory.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stratus.contract import env as trial_env
from stratus.harness._api import ApiClient
from stratus.harness.errors import ApiCallError, HarnessError

log = logging.getLogger("stratus.harness.reports")

REPORT_INTERVAL_S = 5.0
MAX_PENDING = 10_000
MAX_BATCH = 500
MAX_BATCH_BYTES = 1 << 20
#: How long unanswered or 5xx sends are retried (the API client's own retries are within each attempt).
GIVE_UP_AFTER_S = 300.0
RETRY_WAIT_S = (1.0, 2.0, 5.0, 10.0)
AT_EXIT_FLUSH_S = 60.0


class ReportError(HarnessError):
    """Reports the control plane did not take; raised by the flush after the failure."""


@dataclass
class _Item:
    body: dict[str, Any]
    what: str
    path: str | None = None  # None: a report for `POST /trials/{id}/reports`; else its own route
    size: int = 0


def report_interval() -> float:
    """`STRATUS_REPORT_INTERVAL` (0 to 600 s; `InvalidEnvironmentError` naming a value that is no number)."""
    return min(
        max(trial_env.read_seconds(os.environ, trial_env.REPORT_INTERVAL, REPORT_INTERVAL_S), 0.0), 600.0
    )


class ReportSender:
    """Queues the chief's reports and sends them from a daemon thread; see the module docstring.

    `interval_s` is the linger between sends; `wait(seconds)` sleeps between retries (tests pass one
    that returns at once); `clock` measures how long a send has been retried."""

    def __init__(
        self,
        api: ApiClient,
        trial_id: int,
        *,
        interval_s: float | None = None,
        max_pending: int = MAX_PENDING,
        give_up_after_s: float = GIVE_UP_AFTER_S,
        wait: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._path = f"/trials/{trial_id}/reports"
        self._interval = report_interval() if interval_s is None else interval_s
        self._max_pending = max_pending
        self._give_up_after = give_up_after_s
        self._clock = clock
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._retry_wait: Callable[[float], object] = wait or self._stopping.wait
        self._next_send = -float("inf")  # the linger: not before this clock reading, unless flushed
        self._pending: deque[_Item] = deque()
        self._in_flight = 0
        self._flushes = 0  # flushes waiting: send at once instead of lingering
        self._closing = False
        self._errors: list[str] = []
        self._full_logged = False
        self.sent = 0  # reports delivered
        self.requests = 0  # requests made
        self._thread = threading.Thread(target=self._run, name="stratus-reports", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    # ---- the training loop's side ----------------------------------------------------------------

    def report(self, body: dict[str, Any], what: str) -> None:
        """Queue a report for `POST /trials/{id}/reports` (`body` has its `kind`)."""
        self._put(_Item(body, what, size=len(json.dumps(body))))

    def progress(self, value: float) -> None:
        """Queue a progress report, replacing one still waiting at the end of the queue."""
        with self._cond:
            last = self._pending[-1] if self._pending else None
            if last is not None and last.path is None and last.body.get("kind") == "progress":
                last.body["progress"] = value
                return
        self.report({"kind": "progress", "progress": value}, f"progress {value:.3f}")

    def call(self, path: str, body: dict[str, Any], what: str) -> None:
        """Queue a POST to `path` (a checkpoint registration) in its place in the order."""
        self._put(_Item(body, what, path=path))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued report is delivered; `ReportError` for those that could not be."""
        with self._cond:
            self._flushes += 1
            self._cond.notify_all()
            try:
                done = self._cond.wait_for(
                    lambda: (not self._pending and not self._in_flight) or not self._thread.is_alive(),
                    timeout,
                )
            finally:
                self._flushes -= 1
            errors, self._errors = self._errors, []
            left = len(self._pending) + self._in_flight
        if errors:
            raise ReportError("reports did not reach the control plane: " + "; ".join(errors))
        if not done:
            raise ReportError(f"{left} reports were still waiting to be sent after {timeout:.0f} s")

    def close(self) -> None:
        """Flush, then stop the thread. Idempotent."""
        atexit.unregister(self._at_exit)
        try:
            if self._thread.is_alive():
                self.flush()
        finally:
            with self._cond:
                self._closing = True
                self._cond.notify_all()
            self._stopping.set()
            self._thread.join(timeout=5.0)

    def _put(self, item: _Item) -> None:
        with self._cond:
            if self._closing:
                raise ReportError(f"{item.what} was reported after the harness was closed")
            if len(self._pending) >= self._max_pending and not self._full_logged:
                self._full_logged = True
                log.warning("%d reports wait to be sent; reporting waits for room", len(self._pending))
            self._cond.wait_for(lambda: len(self._pending) < self._max_pending or not self._thread.is_alive())
            self._pending.append(item)
            self._cond.notify_all()

    def _at_exit(self) -> None:
        try:
            self.flush(timeout=AT_EXIT_FLUSH_S)
        except ReportError as e:
            log.error("%s", e)

    # ---- the sender thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closing)
                if not self._pending:
                    return
                self._cond.wait_for(
                    lambda: (
                        self._flushes > 0
                        or self._closing
                        or len(self._pending) >= MAX_BATCH
                        or self._clock() >= self._next_send
                    ),
                    timeout=max(0.0, self._next_send - self._clock()),
                )
                batch = self._take()
                self._in_flight = len(batch)
            failure = self._send(batch)
            self._next_send = self._clock() + self._interval
            with self._cond:
                self._in_flight = 0
                if failure is None:
                    self.sent += len(batch)
                else:
                    self._errors.append(failure)
                self._full_logged = False
                self._cond.notify_all()

    def _take(self) -> list[_Item]:
        first = self._pending.popleft()
        if first.path is not None:
            return [first]
        batch, size = [first], first.size
        while self._pending and len(batch) < MAX_BATCH:
            item = self._pending[0]
            if item.path is not None or size + item.size > MAX_BATCH_BYTES:
                break
            batch.append(self._pending.popleft())
            size += item.size
        return batch

    def _send(self, batch: list[_Item]) -> str | None:
        """Deliver `batch`, retrying unanswered and 5xx sends for a while; the failure's words, or None."""
        path, body = (
            (batch[0].path, batch[0].body)
            if batch[0].path
            else (self._path, {"reports": [i.body for i in batch]})
        )
        started = self._clock()
        attempt = 0
        while True:
            self.requests += 1
            try:
                self._api.post(path, body)
                return None
            except ApiCallError as e:
                retryable = e.status == 0 or e.status >= 500 or e.status in (408, 425, 429)
                if not retryable or self._clock() - started >= self._give_up_after or self._stopping.is_set():
                    what = (
                        batch[0].what
                        if len(batch) == 1
                        else f"{len(batch)} reports ({batch[0].what} and after)"
                    )
                    log.error("%s could not be delivered: %s", what, e)
                    return f"{what}: {e}"
                delay = RETRY_WAIT_S[min(attempt, len(RETRY_WAIT_S) - 1)]
                attempt += 1
                log.warning("reports not delivered yet (%s); trying again in %.0f s", e, delay)
                self._retry_wait(delay)
            except Exception as e:  # the thread must outlive surprises; the flush says what happened
                log.exception("sending reports failed unexpectedly")
                return f"{batch[0].what}: {type(e).__name__}: {e}"

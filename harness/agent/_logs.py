"""A run's output: split into lines, appended to ``output.log`` and shipped to the API in batches."""

from __future__ import annotations

import codecs
import functools
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from stratus.contract.log_frame import LOG_FRAME_MARK
from stratus.harness.agent._api import call_with_retry

log = logging.getLogger("stratus.harness.agent")

_EOL = re.compile(r"\r\n|\r|\n")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_RANK_PREFIX = re.compile(r"^\[rank=(\d{1,6})\] ")


def rank_line(timestamp_ms: int, message: str, frame: str = "") -> dict[str, Any]:
    """A log line for the API. A launcher of this run framed its lines with the run's secret `frame`
    (`stratus.contract.env.LOG_FRAME`): only such a line has a rank, its `[rank=N] ` prefix (kept in the message,
    so `det trial logs` without a filter still shows whose line it is). What a trial prints, a
    `[rank=7] ` of its own included, has none."""
    mark = LOG_FRAME_MARK + frame
    if not frame or not message.startswith(mark):
        return {"timestamp": timestamp_ms, "message": message, "rank": None}
    message = message[len(mark) :]
    match = _RANK_PREFIX.match(message)
    return {"timestamp": timestamp_ms, "message": message, "rank": int(match.group(1)) if match else None}


class LineSplitter:
    """Bytes in, lines out (without their end).

    ``\\n``, ``\\r\\n`` and a lone ``\\r`` (progress bars redrawing their line) all end a line; a ``\\r``
    that would end an empty line ends nothing. A line longer than ``max_bytes`` (UTF-8) is cut into
    pieces of at most that size. Invalid UTF-8 is replaced, never fatal.
    """

    def __init__(self, max_bytes: int = 16 * 1024) -> None:
        if max_bytes < 4:
            raise ValueError("max_bytes must be >= 4")
        self._max = max_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._after_cr = False

    def feed(self, data: bytes) -> list[str]:
        return self._split(self._decoder.decode(data))

    def finish(self) -> list[str]:
        """The last, unterminated line (if any) once the stream has ended."""
        out = self._split(self._decoder.decode(b"", final=True))
        if self._pending:
            out.extend(self._cap(self._pending, final=True))
            self._pending = ""
        return out

    def _split(self, text: str) -> list[str]:
        out: list[str] = []
        if not text:
            return out
        if self._after_cr and text.startswith("\n"):
            text = text[1:]  # the second half of a "\r\n" cut in two by the pipe
        self._after_cr = False
        pos = 0
        for m in _EOL.finditer(text):
            line = self._pending + text[pos : m.start()]
            self._pending = ""
            pos = m.end()
            if m.group() == "\r":
                self._after_cr = pos == len(text)
                if not line:
                    continue
            out.extend(self._cap(line, final=True))
        self._pending += text[pos:]
        if len(self._pending) * 4 > self._max:  # maybe over the cap (a char is at most 4 bytes)
            out.extend(self._cap(self._pending, final=False))
        return out

    def _cap(self, line: str, *, final: bool) -> list[str]:
        """Cut ``line`` into pieces of at most max bytes; unless ``final``, keep the short rest pending."""
        pieces: list[str] = []
        while len(line.encode("utf-8", "surrogatepass")) > self._max:
            head = line.encode("utf-8", "surrogatepass")[: self._max].decode("utf-8", "ignore")
            pieces.append(head)
            line = line[len(head) :]
        if final:
            pieces.append(line)
        else:
            self._pending = line
        return pieces


class LogShipper:
    """Collects a run's log lines; a thread ships them in batches and writes them to a file.

    A batch leaves when it holds ``batch_lines`` lines or its oldest line is ``flush_interval`` old.
    Failed sends are retried (the lines wait in memory, at most ``buffer_lines`` of them). ``close()``
    ships everything that is left, trying for at most ``flush_timeout`` seconds, then returns.
    """

    def __init__(
        self,
        send: Callable[[Sequence[dict[str, Any]], int], None],
        log_file: Path | None,
        *,
        what: str,
        give_up: threading.Event,
        flush_interval: float = 0.5,
        batch_lines: int = 200,
        buffer_lines: int = 100_000,
        flush_timeout: float = 30.0,
        max_backoff: float = 5.0,
        frame: str = "",
    ) -> None:
        self._send = send
        self._frame = frame
        self._what = what
        self._give_up = give_up
        self._interval = flush_interval
        self._batch = max(1, batch_lines)
        self._buffer = max(self._batch, buffer_lines)
        self._flush_timeout = flush_timeout
        self._max_backoff = max_backoff
        self._cond = threading.Condition()
        self._pending: deque[dict[str, Any]] = deque()
        self._oldest = 0.0  # monotonic time the oldest pending line arrived
        self._dropped = 0
        self._closing = False
        self._close_deadline = 0.0
        self._log_file = log_file
        self._file: IO[str] | None = None
        self._file_lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"logs-{what}", daemon=True)
        self.sent_lines = 0
        self.unshipped_lines = 0

    def start(self) -> None:
        """Open the log file (append) and start shipping."""
        if self._log_file is not None:
            self._file = self._log_file.open("a", encoding="utf-8", errors="replace")
        self._thread.start()

    def add(self, messages: Iterable[str], timestamp_ms: int | None = None) -> None:
        ts = now_ms() if timestamp_ms is None else timestamp_ms
        texts = list(messages)
        if not texts:
            return
        lines = [rank_line(ts, m, self._frame) for m in texts]
        with self._file_lock:
            if self._file is not None:
                self._file.write("".join(line["message"] + "\n" for line in lines))
                self._file.flush()
        with self._cond:
            was_empty = not self._pending
            if was_empty:
                self._oldest = time.monotonic()
            self._pending.extend(lines)
            over = len(self._pending) - self._buffer
            if over > 0:
                for _ in range(over):
                    self._pending.popleft()
                self._dropped += over
            if was_empty or len(self._pending) >= self._batch:  # start the clock, or ship a full batch
                self._cond.notify_all()

    def close(self) -> None:
        """Ship what is left (bounded by the flush timeout), stop the thread, close the file."""
        with self._cond:
            self._closing = True
            self._close_deadline = time.monotonic() + self._flush_timeout
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        if self._file is not None:
            with self._file_lock:
                self._file.close()
                self._file = None

    def _past_deadline(self) -> bool:
        with self._cond:
            return self._closing and time.monotonic() >= self._close_deadline

    def _next_batch(self) -> list[dict[str, Any]] | None:
        with self._cond:
            while True:
                if self._pending:
                    due = self._oldest + self._interval
                    if self._closing or len(self._pending) >= self._batch or time.monotonic() >= due:
                        break
                    self._cond.wait(due - time.monotonic())
                elif self._closing:
                    return None
                else:
                    self._cond.wait()
            batch = [self._pending.popleft() for _ in range(min(self._batch, len(self._pending)))]
            self._oldest = time.monotonic()
            if self._dropped:
                batch.insert(
                    0,
                    {
                        "timestamp": batch[0]["timestamp"],
                        "rank": None,
                        "message": f"[agent] {self._dropped} log lines were dropped "
                        "(the API could not be reached)",
                    },
                )
                self._dropped = 0
            return batch

    def _loop(self) -> None:
        try:
            self._ship_all()
        finally:
            if self.unshipped_lines:
                log.warning(
                    "%s: %d log lines not shipped (they are in output.log)", self._what, self.unshipped_lines
                )

    def _ship_all(self) -> None:
        # Each batch carries a sequence number that stays the same across its retries, so the API can
        # drop a batch it already stored (a retry after a lost answer would otherwise duplicate lines).
        seq = 0
        while (batch := self._next_batch()) is not None:
            if self._past_deadline() or self._give_up.is_set():
                self._drop(batch)
                continue
            seq += 1
            ok, _ = call_with_retry(
                functools.partial(self._send, batch, seq),
                what=f"shipping logs of {self._what}",
                give_up=self._give_up,
                deadline=self._past_deadline,
                max_backoff=self._max_backoff,
            )
            if ok:
                self.sent_lines += len(batch)
            else:
                self._drop(batch)

    def _drop(self, batch: list[dict[str, Any]]) -> None:
        self.unshipped_lines += len(batch)

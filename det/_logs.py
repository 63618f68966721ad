"""Reading a trial's logs page by page, and following them until the trial ends.

`GET /trials/{id}/logs` answers `{"logs", "next_token", "trial_state"}`. The stream is read with
`next_token` as a cursor (CloudWatch's nextForwardToken): a page with lines, or a cursor that moved,
means more may be ready at once; an empty page whose cursor did not move means we are caught up. A
null cursor before any line means the trial has no log yet. When following, an idle stream is
polled every POLL_INTERVAL seconds, and it ends once the trial is terminal and one more read finds
nothing new (lines written just before the trial ended are not lost).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from det._client import ApiClient
from det._render import format_log_time

POLL_INTERVAL = 0.5
PAGE_SIZE = 1000
#: Pages `log_ranks` reads at most (a log's first 20,000 lines).
RANK_SCAN_PAGES = 20
MAX_EMPTY_PAGES = 100
TERMINAL_STATES = frozenset({"COMPLETED", "ERROR", "CANCELED"})

LogLine = dict[str, Any]


def read_log_pages(
    client: ApiClient,
    trial_id: int,
    *,
    follow: bool = False,
    head: int | None = None,
    tail: int | None = None,
    rank: int | None = None,
    level: str | None = None,
    sleep: Callable[[float], None],
    on_idle: Callable[[str], None] | None = None,
) -> Iterator[list[LogLine]]:
    """Pages of log lines; `on_idle(trial_state)` is called whenever the stream is caught up."""
    token: str | None = None
    seen = 0
    skipped = 0
    terminal_seen = False
    first = True
    while True:
        sent = token
        limit = PAGE_SIZE if head is None else min(PAGE_SIZE, head - seen)
        page = client.trial_logs(
            trial_id, limit=limit, next_token=sent, tail=tail if first else None, rank=rank, level=level
        )
        lines: list[LogLine] = list(page.get("logs") or [])
        if first and tail is not None:
            lines = lines[len(lines) - tail :] if tail else []  # whatever the API sent, only the last N
        first = False
        if head is not None:
            lines = lines[: head - seen]
        if lines:
            seen += len(lines)
            yield lines
            if head is not None and seen >= head:
                return
        following = page.get("next_token")
        if following is None and lines:
            return  # no cursor to read on from: reading again would repeat these lines
        if following is not None:
            token = str(following)
        moved = following is not None and token != sent
        # A page the rank or level filter emptied still read lines (`lines_read`): not an empty page.
        skipped = 0 if lines or page.get("lines_read") else skipped + 1
        if moved and skipped < MAX_EMPTY_PAGES:
            # More may be ready now. CloudWatch may also answer an empty page with a new cursor
            # in the middle of a stream (and a rank or level filter empties pages): caught up only once
            # the cursor stops moving. A cursor that does not move is never re-read at once.
            continue
        skipped = 0
        state = str(page.get("trial_state") or "")
        if on_idle is not None:
            on_idle(state)
        if not follow:
            return
        if state in TERMINAL_STATES:
            if terminal_seen:
                return
            terminal_seen = True
            continue  # one more read: catch lines that landed just before the end
        sleep(POLL_INTERVAL)


def log_ranks(client: ApiClient, trial_id: int, max_pages: int = RANK_SCAN_PAGES) -> tuple[set[int], int]:
    """The ranks of a trial's log lines (none for a one-process trial) and how many lines were read, from
    its first `max_pages` pages (every rank of a launcher starts logging at once)."""
    ranks: set[int] = set()
    lines = 0
    for pages, page in enumerate(read_log_pages(client, trial_id, sleep=lambda s: None), start=1):
        lines += len(page)
        ranks |= {int(line["rank"]) for line in page if line.get("rank") is not None}
        if pages >= max_pages:
            break
    return ranks, lines


def format_line(line: LogLine, *, timestamps: bool = False) -> str:
    message = str(line.get("message", ""))
    rank = line.get("rank")
    if rank is not None and not message.startswith(prefix := f"[rank={rank}] "):
        # Lines from a launcher carry the prefix already (kept in the message for CloudWatch readers).
        message = prefix + message
    if timestamps and line.get("timestamp") is not None:
        message = f"[{format_log_time(line['timestamp'])}] {message}"
    return message


class StatusLine:
    """One line on a terminal's stderr, redrawn in place; it steps aside while log lines print."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self._stream = stream
        self.enabled = enabled
        self._text = ""

    def show(self, text: str) -> None:
        if not self.enabled:
            return
        width = shutil.get_terminal_size((100, 24)).columns
        self._text = text[: max(width - 1, 10)]
        self._stream.write("\r\x1b[2K" + self._text)
        self._stream.flush()

    def clear(self) -> None:
        if self.enabled and self._text:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()
            self._text = ""

    def print_lines(self, out: TextIO, lines: list[str]) -> None:
        """Print `lines` on `out` without mangling the status line, then redraw it."""
        text = self._text
        self.clear()
        for line in lines:
            out.write(line + "\n")
        out.flush()
        if text:
            self.show(text)

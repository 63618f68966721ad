"""A worker's output, cut into lines that each start with ``[rank=N] ``.

Bytes in, bytes out: the output is never decoded, so any encoding passes through unchanged. ``\\n``,
``\\r\\n`` and a lone ``\\r`` (a progress bar redrawing its line) each end a line, and every line comes out
ending with ``\\n``; a ``\\r`` that would end an empty line ends nothing. A line longer than the cap
(16 KiB by default, without the prefix) is cut into pieces, each on its own prefixed line, never inside
a UTF-8 character.
"""

from __future__ import annotations

import re

from stratus.contract.log_frame import LOG_FRAME_MARK

MAX_LINE_BYTES = 16 * 1024
_EOL = re.compile(rb"\r\n|\r|\n")


def rank_prefix(rank: int | str, frame: str = "") -> bytes:
    """``[rank=N] ``, led by the run's frame secret when the agent gave one (`stratus.contract.env.LOG_FRAME`):
    the agent takes a rank only from a line so framed, and removes the frame before shipping it."""
    mark = f"{LOG_FRAME_MARK}{frame}" if frame else ""
    return f"{mark}[rank={rank}] ".encode()


class RankLines:
    def __init__(self, rank: int | str, max_bytes: int = MAX_LINE_BYTES, frame: str = "") -> None:
        if max_bytes < 4:
            raise ValueError("max_bytes must be >= 4 (a UTF-8 character takes up to 4 bytes)")
        self._prefix = rank_prefix(rank, frame)
        self._max = max_bytes
        self._pending = bytearray()
        self._after_cr = False

    def feed(self, data: bytes) -> bytes:
        """The complete lines in ``data`` (and what came before it), prefixed; the rest waits."""
        out: list[bytes] = []
        if self._after_cr and data.startswith(b"\n"):
            data = data[1:]  # the second half of a "\r\n" the pipe cut in two
        self._after_cr = False
        pos = 0
        for m in _EOL.finditer(data):
            line = bytes(self._pending) + data[pos : m.start()]
            self._pending.clear()
            pos = m.end()
            if m.group() == b"\r":
                self._after_cr = pos == len(data)
                if not line:
                    continue
            self._emit(line, out)
        self._pending += data[pos:]
        while len(self._pending) > self._max:
            cut = _cut(self._pending, self._max)
            out.append(self._prefix + bytes(self._pending[:cut]) + b"\n")
            del self._pending[:cut]
        return b"".join(out)

    def finish(self) -> bytes:
        """The last line, when the stream ended without a line end."""
        out: list[bytes] = []
        if self._pending:
            self._emit(bytes(self._pending), out)
            self._pending.clear()
        return b"".join(out)

    def _emit(self, line: bytes, out: list[bytes]) -> None:
        while len(line) > self._max:
            cut = _cut(line, self._max)
            out.append(self._prefix + line[:cut] + b"\n")
            line = line[cut:]
        out.append(self._prefix + line + b"\n")


def _cut(data: bytes | bytearray, limit: int) -> int:
    """Where to cut ``data`` to keep at most ``limit`` bytes without splitting a UTF-8 character."""
    cut = limit
    # A continuation byte (0b10xxxxxx) at the cut means a character starts before it: cut before that.
    while cut > limit - 3 and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return cut if data[cut] & 0xC0 != 0x80 else limit

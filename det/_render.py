"""Tables and values printed the way `det` prints them.

Determined renders its tables with tabulate's "presto" format: no outer border, ` | ` between
columns, a dashed rule under the headers with `+` at the joints, every column at least two characters
wider than its header, numbers aligned right (floats on their decimal point), the rest left, and
cells of several lines (the H-Params JSON) spread over several lines. `table` draws the same thing;
`records_table` draws one row per API record, given its headers and how to read the cell under each.

With ``--csv`` (Determined's flag) the same headers and cells are written as CSV instead (`csv_table`):
a header row, then one row per record, values as the table shows them (a blank for none), a cell of
several lines quoted as the csv module does; lines end with ``\n``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

_MIN_PADDING = 2

Record = Mapping[str, Any]
Cell = Callable[[Record], Any]
"""How to read one cell of a table from a record."""


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    count = len(headers)
    grid = [[row[i] if i < len(row) else None for i in range(count)] for row in rows]
    numeric = [_is_numeric([row[i] for row in grid]) for i in range(count)]
    cells = [[_cell_lines(value) for value in row] for row in grid]
    for i in range(count):
        if numeric[i]:
            aligned = _align_numbers([row[i][0] for row in cells])
            for row, text in zip(cells, aligned, strict=True):
                row[i] = [text]
    widths = [
        max([len(h) + _MIN_PADDING] + [len(line) for row in cells for line in row[i]])
        for i, h in enumerate(headers)
    ]

    def draw(values: Sequence[list[str]]) -> list[str]:
        height = max((len(v) for v in values), default=1)
        lines = []
        for n in range(height):
            parts = []
            for i, value in enumerate(values):
                text = value[n] if n < len(value) else ""
                parts.append(text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i]))
            lines.append("|".join(f" {p} " for p in parts).rstrip())
        return lines

    out = draw([[h] for h in headers])
    out.append("+".join("-" * (w + 2) for w in widths))
    for row in cells:
        out.extend(draw(row))
    return "\n".join(out)


def csv_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """`table`'s headers and cells as CSV (without a last line end, like `table`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows([format_value(value) for value in row] for row in rows)
    return out.getvalue().removesuffix("\n")


def records_table(
    cells: Mapping[str, Cell], headers: Sequence[str], records: Iterable[Record], *, as_csv: bool = False
) -> str:
    """One row per record: under each of `headers`, what `cells[header]` reads from the record."""
    rows = [[cells[header](r) for header in headers] for r in records]
    return csv_table(headers, rows) if as_csv else table(headers, rows)


def field(key: str) -> Cell:
    """A cell that shows the record's `key` as it is (blank when absent)."""
    return lambda record: record.get(key)


def time_field(key: str) -> Callable[[Record], str | None]:
    """A cell that shows the record's time `key` in local time (see `format_time`)."""
    return lambda record: format_time(record.get(key))


def format_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return format(value, "g")
    return str(value)


def format_time(value: str | None) -> str | None:
    """ISO-8601 (naive means UTC) -> local time, `YYYY-MM-DD HH:MM:SS`."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def format_log_time(millis: int | float) -> str:
    """Milliseconds since the epoch -> `2024-05-01T12:00:00.123Z`."""
    moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def format_percent(value: float | None) -> str | None:
    return None if value is None else f"{value:.1%}"


def format_json(value: Any) -> str:
    return json.dumps(value, indent=4)


def format_metrics(metrics: dict[str, Any] | None) -> str | None:
    if not metrics:
        return None
    return ", ".join(f"{name}={format_value(v)}" for name, v in sorted(metrics.items()))


def plural(count: int, word: str, many: str | None = None) -> str:
    """A count and its noun in agreement: `1 agent`, `2 agents`, `0 files` (`many`: an irregular plural)."""
    return f"{count} {word if count == 1 else (many or word + 's')}"


def format_bytes(size: float) -> str:
    """Like Determined's sizeof_fmt: 2.3KB, 95.0MB."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1024.0:
            return f"{size:3.1f}{unit}"
        size /= 1024.0
    return f"{size:.1f}TB"


def _is_numeric(column: Sequence[Any]) -> bool:
    values = [v for v in column if v is not None]
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _cell_lines(value: Any) -> list[str]:
    return format_value(value).split("\n")


def _align_numbers(texts: list[str]) -> list[str]:
    """Pad on the right so that decimal points line up (tabulate's "decimal" alignment)."""
    after = [_after_point(t) for t in texts]
    most = max(after, default=-1)
    return [t + " " * (most - a) if t else t for t, a in zip(texts, after, strict=True)]


def _after_point(text: str) -> int:
    if not text:
        return -1
    point = text.rfind(".")
    if point < 0:
        point = text.lower().rfind("e")
    return len(text) - point - 1 if point >= 0 else -1

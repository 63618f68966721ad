"""Tables in Determined's look: tabulate's "presto" format (det/_render.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from det._render import format_bytes, format_log_time, format_percent, format_time, table


def test_table_matches_presto() -> None:
    text = table(
        ["ID", "Name", "Parent ID", "Loss"],
        [[1, "mnist", None, 0.5], [12, "cifar", None, 0.012345], [3, "x", None, 12]],
    )

    assert text.splitlines() == [
        "   ID | Name   | Parent ID   |      Loss",
        "------+--------+-------------+-----------",
        "    1 | mnist  |             |  0.5",
        "   12 | cifar  |             |  0.012345",
        "    3 | x      |             | 12",
    ]


def test_multiline_cells_spread_over_lines() -> None:
    text = table(["Trial ID", "H-Params"], [[5, '{\n    "lr": 0.1\n}']])

    assert text.splitlines() == [
        "   Trial ID | H-Params",
        "------------+---------------",
        "          5 | {",
        '            |     "lr": 0.1',
        "            | }",
    ]


def test_an_empty_table_keeps_its_header() -> None:
    assert table(["ID", "Name"], []).splitlines() == [" ID   | Name", "------+--------"]


def test_booleans_and_mixed_columns_are_text() -> None:
    lines = table(["Archived", "Value"], [[False, 1], [True, "n/a"]]).splitlines()
    assert lines[2] == " False      | 1"
    assert lines[3] == " True       | n/a"


@pytest.fixture
def berlin() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Berlin"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_times_are_local(berlin: None) -> None:
    assert format_time("2024-05-01T12:00:00Z") == "2024-05-01 14:00:00"
    assert format_time("2024-05-01T12:00:00+00:00") == "2024-05-01 14:00:00"
    assert format_time("2024-05-01T12:00:00") == "2024-05-01 14:00:00"  # naive means UTC
    assert format_time(None) is None


def test_small_formats() -> None:
    assert format_percent(0.5) == "50.0%"
    assert format_percent(None) is None
    assert format_bytes(1234) == "1.2KB"
    assert format_bytes(12) == "12.0B"
    assert format_log_time(1714564800123) == "2024-05-01T12:00:00.123Z"

"""RankLines: a worker's bytes cut into prefixed lines (no IO)."""

from __future__ import annotations

import pytest

from stratus.launchers._lines import MAX_LINE_BYTES, RankLines


def run(chunks: list[bytes], max_bytes: int = MAX_LINE_BYTES, rank: int | str = 2) -> bytes:
    lines = RankLines(rank, max_bytes)
    return b"".join(lines.feed(c) for c in chunks) + lines.finish()


@pytest.mark.parametrize(
    ("chunks", "out"),
    [
        ([b"a\nb\n"], b"[rank=2] a\n[rank=2] b\n"),
        ([b"a\r\nb\r\n"], b"[rank=2] a\n[rank=2] b\n"),
        ([b"10%\r20%\r100%\n"], b"[rank=2] 10%\n[rank=2] 20%\n[rank=2] 100%\n"),
        ([b"a\r", b"\nb\n"], b"[rank=2] a\n[rank=2] b\n"),  # a "\r\n" cut in two by the pipe
        ([b"a\r", b"b\n"], b"[rank=2] a\n[rank=2] b\n"),
        ([b"\n\n"], b"[rank=2] \n[rank=2] \n"),  # blank lines stay
        ([b"\r\r"], b""),  # a "\r" never ends an empty line
        ([b"par", b"tial"], b"[rank=2] partial\n"),  # the last line, without its end
        ([b"caf\xc3", b"\xa9\n"], "[rank=2] café\n".encode()),  # bytes pass through, never decoded
        ([b"\xff\xfe\n"], b"[rank=2] \xff\xfe\n"),
        ([], b""),
    ],
)
def test_lines(chunks: list[bytes], out: bytes) -> None:
    assert run(chunks) == out


def test_incomplete_line_waits() -> None:
    lines = RankLines(0)
    assert lines.feed(b"no end yet") == b""
    assert lines.feed(b"; now\nnext") == b"[rank=0] no end yet; now\n"
    assert lines.finish() == b"[rank=0] next\n"
    assert lines.finish() == b""


def test_long_line_is_split_at_the_cap() -> None:
    data = b"x" * (2 * MAX_LINE_BYTES + 100) + b"\n"
    out = run([data[i : i + 5000] for i in range(0, len(data), 5000)]).split(b"\n")[:-1]
    assert [len(line) for line in out] == [9 + MAX_LINE_BYTES, 9 + MAX_LINE_BYTES, 9 + 100]
    assert all(line.startswith(b"[rank=2] ") for line in out)


def test_long_line_is_never_cut_inside_a_character() -> None:
    text = "é" * 10  # 2 bytes each
    out = run([text.encode() + b"\n"], max_bytes=5).split(b"\n")[:-1]
    pieces = [line.removeprefix(b"[rank=2] ") for line in out]
    assert [len(p) for p in pieces] == [4, 4, 4, 4, 4]
    assert "".join(p.decode() for p in pieces) == text


def test_prefix_may_be_any_rank_label() -> None:
    assert run([b"x\n"], rank="chief") == b"[rank=chief] x\n"


def test_cap_must_hold_a_character() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        RankLines(0, 3)


def test_a_framed_prefix_leads_with_the_mark_and_the_runs_secret() -> None:
    lines = RankLines(3, frame="f00d")
    assert lines.feed(b"hello\n") == b"\x1ef00d[rank=3] hello\n"
    assert RankLines(3).feed(b"hello\n") == b"[rank=3] hello\n"  # outside an agent: the plain prefix

"""harness/_archive.py: crafted archives that try to write outside their folder are refused."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest
import zstandard

from stratus.harness import _archive
from stratus.harness._archive import extract
from stratus.harness.errors import UnsafeArchiveError

Member = tuple[str, str, bytes | str]  # (kind, name, contents or link target)


def make_archive(*members: Member, mode: int = 0o644) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, payload in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if kind == "file":
                assert isinstance(payload, bytes)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(payload)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(payload)
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "blk":
                info.type, info.devmajor, info.devminor = tarfile.BLKTYPE, 8, 0
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            else:
                raise AssertionError(kind)
            tar.addfile(info)
    return zstandard.ZstdCompressor().compress(raw.getvalue())


def everything_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A folder holding the destination: whatever lands in it outside `dest` escaped."""
    (tmp_path / "box").mkdir()
    return tmp_path / "box"


def assert_refused(archive: bytes, box: Path, why: str) -> None:
    dest = box / "dest"
    with pytest.raises(UnsafeArchiveError, match=why):
        extract(archive, dest)
    # nothing was written at all: not even the destination folder was created
    assert everything_under(box) == set()


MALICIOUS: dict[str, tuple[tuple[Member, ...], str]] = {
    "dotdot": ((("file", "../x", b"pwned"),), r"'\.\./x'.*'\.\.'"),
    "dotdot-nested": ((("file", "a/b/../../../x", b"pwned"),), r"'\.\.'"),
    "absolute": ((("file", "/etc/x", b"pwned"),), "absolute path"),
    "symlink-absolute": ((("symlink", "etc", "/etc"),), "absolute path '/etc'"),
    "symlink-relative-escape": ((("symlink", "up", "../../outside"),), "leads outside"),
    "symlink-then-write-through-it": (
        (("symlink", "d", "/tmp"), ("file", "d/evil", b"pwned")),
        "'/tmp'",
    ),
    "write-through-an-inside-link": (
        (("dir", "sub", ""), ("symlink", "d", "sub"), ("file", "d/f", b"x")),
        "below 'd', which is a symlink",
    ),
    "symlink-chain-escape": (
        # each link looks harmless on its own: l -> . and m -> l/.. ; together m is dest/..
        (("symlink", "l", "."), ("symlink", "m", "l/..")),
        "'m'.*leads outside",
    ),
    "symlink-chain-escape-nested": (
        (("dir", "a", ""), ("symlink", "a/l", "../.."), ("symlink", "m", "a/l/x")),
        "leads outside",
    ),
    "symlink-loop": ((("symlink", "a", "b"), ("symlink", "b", "a")), "loops"),
    "hardlink-outside": ((("hardlink", "h", "../../etc/passwd"),), "hard link.*outside"),
    "hardlink-absolute": ((("hardlink", "h", "/etc/passwd"),), "hard link.*outside"),
    "hardlink-to-nothing": ((("hardlink", "h", "missing"),), "not an earlier file"),
    "hardlink-to-a-symlink": (
        (("symlink", "s", "x"), ("hardlink", "h", "s")),
        "not an earlier file",
    ),
    "char-device": ((("chr", "null", b""),), "character device"),
    "block-device": ((("blk", "sda", b""),), "block device"),
    "fifo": ((("fifo", "pipe", b""),), "fifo"),
    "duplicate-file-then-link": (
        (("file", "x", b"ok"), ("symlink", "x", "/etc/passwd")),
        "absolute path|twice",
    ),
    "duplicate-name": ((("file", "x", b"1"), ("file", "./x", b"2")), "twice"),
    "file-below-a-file": ((("file", "f", b"1"), ("file", "f/g", b"2")), "below 'f'"),
}


@pytest.mark.parametrize("case", MALICIOUS, ids=list(MALICIOUS))
def test_malicious_archive_is_refused_before_anything_is_written(case: str, box: Path) -> None:
    members, why = MALICIOUS[case]
    assert_refused(make_archive(*members), box, why)


def test_one_bad_member_after_good_ones_refuses_the_whole_archive(box: Path) -> None:
    archive = make_archive(("file", "a.py", b"ok"), ("file", "b.py", b"ok"), ("file", "../x", b"pwned"))
    assert_refused(archive, box, r"\.\./x")


def test_setuid_and_group_write_bits_are_dropped(box: Path) -> None:
    dest = box / "dest"
    extract(make_archive(("file", "tool", b"#!/bin/sh\n"), mode=0o4777), dest)
    mode = stat.S_IMODE((dest / "tool").stat().st_mode)
    assert mode == 0o755


# --- defence in depth: each layer alone refuses an escape ------------------------------------------


def without_member_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_archive, "check_members", lambda members: [(m, m.name) for m in members])


def test_landing_check_alone_refuses_an_escape(box: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    without_member_checks(monkeypatch)
    monkeypatch.setattr(_archive.tarfile, "data_filter", lambda member, path: member)
    with pytest.raises(UnsafeArchiveError, match="outside"):
        extract(make_archive(("symlink", "d", ".."), ("file", "d/evil", b"pwned")), box / "dest")
    assert not (box / "evil").exists()


def test_data_filter_alone_refuses_an_escape(box: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not hasattr(__import__("tarfile"), "data_filter"):
        pytest.skip("tarfile has no data filter before Python 3.11.4")
    without_member_checks(monkeypatch)
    monkeypatch.setattr(_archive._Landing, "check", lambda self, member: None)
    with pytest.raises(UnsafeArchiveError):
        extract(make_archive(("file", "../evil", b"pwned")), box / "dest")
    assert not (box / "evil").exists()


def test_landing_check_alone_refuses_writing_through_a_link_already_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_archive.tarfile, "data_filter", lambda member, path: member)
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "evil").symlink_to(outside / "written")
    with pytest.raises(UnsafeArchiveError, match="outside"):
        extract(make_archive(("file", "evil", b"pwned")), dest)
    assert list(outside.iterdir()) == []


def test_a_link_already_in_the_destination_is_not_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "cache").symlink_to(outside)
    with pytest.raises(UnsafeArchiveError, match="outside"):
        extract(make_archive(("file", "cache/evil", b"pwned")), dest)
    assert list(outside.iterdir()) == []


# --- what is accepted -------------------------------------------------------------------------------


def test_a_normal_archive_is_extracted(box: Path) -> None:
    archive = make_archive(
        ("dir", "./", ""),
        ("dir", "./pkg", ""),
        ("file", "./pkg/mod.py", b"x = 1\n"),
        ("file", "./top.txt", b"top"),
        ("symlink", "./pkg/alias.py", "mod.py"),
        ("symlink", "./pkg/up.txt", "../top.txt"),
        ("symlink", "./self", "."),
        ("hardlink", "./twin.txt", "./top.txt"),
    )
    dest = box / "dest"
    names = extract(archive, dest)
    assert names == ["pkg/mod.py", "top.txt", "pkg/alias.py", "pkg/up.txt", "self", "twin.txt"]
    assert (dest / "pkg" / "alias.py").read_text() == "x = 1\n"
    assert (dest / "pkg" / "up.txt").read_text() == "top"
    assert os.readlink(dest / "self") == "."
    assert (dest / "twin.txt").stat().st_ino == (dest / "top.txt").stat().st_ino


def test_exec_bits_are_kept(box: Path) -> None:
    dest = box / "dest"
    extract(make_archive(("file", "run.sh", b"#!/bin/sh\n"), mode=0o755), dest)
    extract(make_archive(("file", "data.txt", b"x"), mode=0o644), dest)
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "data.txt").stat().st_mode) == 0o644


def test_archive_can_be_a_path(tmp_path: Path) -> None:
    path = tmp_path / "ctx.tar.zst"
    path.write_bytes(make_archive(("file", "a.txt", b"a")))
    assert extract(path, tmp_path / "dest") == ["a.txt"]
    assert (tmp_path / "dest" / "a.txt").read_bytes() == b"a"


# --- archives that are not what they claim ----------------------------------------------------------


def test_an_archive_that_is_not_zstd_is_refused(box: Path) -> None:
    assert_refused(b"PK\x03\x04 not a tar.zst", box, "not zstd")


@pytest.mark.parametrize("keep", [0.5, -1, -4])
def test_a_truncated_archive_is_refused(keep: float, box: Path) -> None:
    good = make_archive(("file", "a.txt", os.urandom(100_000)), ("file", "b.txt", b"b"))
    cut = int(len(good) * keep) if keep > 0 else len(good) + int(keep)
    assert_refused(good[:cut], box, "truncated")


def test_zstd_of_something_else_is_refused(box: Path) -> None:
    assert_refused(zstandard.ZstdCompressor().compress(b"not a tar " * 100), box, "not a tar archive")


def test_a_decompression_bomb_is_refused(box: Path) -> None:
    bomb = make_archive(("file", "zeros", bytes(8 << 20)))
    assert len(bomb) < 64 << 10
    with pytest.raises(UnsafeArchiveError, match="more than 1,048,576 bytes"):
        extract(bomb, box / "dest", max_bytes=1 << 20)
    assert everything_under(box) == set()

"""Issue 12: the context archive streams (files read a piece at a time, the archive hashed as it is written
to a temporary file and uploaded from it), and an unchanged folder is not packed again to learn its hash
(the manifest cache in the user's cache folder)."""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from det import _archive, _context
from det._context import ManifestCache, pack
from det._runtime import Runtime
from det._upload import pack_and_upload
from stratus.harness._archive import extract

HOUR_AGO = time.time() - 3600


def _settled(root: Path) -> Path:
    """Every file's times an hour back: nothing is "racily clean" (modified within the clock's grain)."""
    for folder, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(folder, name), (HOUR_AGO, HOUR_AGO))
    return root


def test_a_file_larger_than_a_piece_streams_and_round_trips(tmp_path: Path, monkeypatch, make_tree) -> None:
    monkeypatch.setattr(_archive, "_PIECE", 1000)
    big = os.urandom(10_500)
    root = make_tree(tmp_path / "ctx", {"big.bin": big, "small.txt": "hi"})
    reads: list[int] = []
    real_read = os.read

    def counting_read(fd: int, n: int) -> bytes:
        reads.append(n)
        return real_read(fd, n)

    monkeypatch.setattr(_archive.os, "read", counting_read)
    with pack(root) as packed:
        assert packed.path is not None and packed.path.stat().st_size == packed.size
        assert max(reads) <= 1001  # never more than a piece (and the byte past the end) at a time
        assert b"".join(packed.pieces()) == packed.path.read_bytes()
        extract(packed.data, tmp_path / "out")
        path = packed.path
    assert (tmp_path / "out" / "big.bin").read_bytes() == big
    assert not path.exists()  # the temporary archive is gone with the context


def test_the_archive_in_a_file_is_the_archive_in_memory(tmp_path: Path, context_tree) -> None:
    root = context_tree.build(tmp_path / "ctx")
    packed = pack(root)
    assert packed.data == _archive.archive_bytes(_context.collect(root))
    assert packed.sha256 == hashlib.sha256(packed.data).hexdigest()


def test_an_unchanged_folder_is_not_packed_again(tmp_path: Path, monkeypatch, make_tree) -> None:
    root = _settled(make_tree(tmp_path / "ctx", {"train.py": "print(1)\n", "lib/util.py": "x = 1\n"}))
    cache = ManifestCache(tmp_path / "cache")
    first = pack(root, (), cache)
    assert not first.reused and first.path is not None

    def no_reading(file: Any) -> Any:
        raise AssertionError(f"{file.name} was read")

    monkeypatch.setattr(_archive, "_file_pieces", no_reading)
    again = pack(root, (), cache)
    assert again.reused and again.path is None
    assert (again.sha256, again.size, again.num_files) == (first.sha256, first.size, first.num_files)
    monkeypatch.undo()

    # Same size, new content: the modification time (and change time) tell.
    (root / "train.py").write_text("print(2)\n")
    _settled(root)
    os.utime(root / "train.py", (HOUR_AGO + 60, HOUR_AGO + 60))
    changed = pack(root, (), cache)
    assert not changed.reused and changed.sha256 != first.sha256
    assert pack(root, (), cache).reused  # and that is cached in turn


def test_a_file_written_just_now_is_not_trusted_to_the_cache(tmp_path: Path, make_tree) -> None:
    root = make_tree(tmp_path / "ctx", {"train.py": "print(1)\n"})  # written now
    cache = ManifestCache(tmp_path / "cache")
    pack(root, (), cache)
    assert not pack(root, (), cache).reused  # it could still change within the clock's grain


def test_the_cache_folder_follows_the_environment(tmp_path: Path) -> None:
    assert _context.cache_folder({"STRATUS_HOME": "/s"}) == Path("/s/cache/contexts")
    assert _context.cache_folder({"XDG_CACHE_HOME": "/x", "HOME": "/h"}) == Path("/x/stratus/contexts")
    assert _context.cache_folder({"HOME": "/h"}) == Path("/h/.cache/stratus/contexts")
    assert Runtime(environ={}).context_cache() is None  # no home named: no cache
    assert Runtime(environ={"HOME": "/h", "STRATUS_CONTEXT_CACHE": "off"}).context_cache() is None


class _Store:
    """The API's context routes and S3, in memory."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.asked: list[str] = []

    def request_context_upload(self, sha256: str, size: int) -> dict[str, Any]:
        self.asked.append(sha256)
        if sha256 in self.objects:
            return {"exists": True}
        return {"exists": False, "upload": {"url": f"s3://{sha256}", "sha256": sha256}}

    def upload(self, upload: dict[str, Any], data: Any, size: int, on_chunk: Any = None) -> None:
        body = b"".join(data)
        assert len(body) == size
        self.objects[upload["sha256"]] = body


def test_a_resubmit_of_an_unchanged_folder_uploads_nothing_and_packs_nothing(
    tmp_path: Path, make_tree
) -> None:
    root = _settled(make_tree(tmp_path / "ctx", {"train.py": "print(1)\n"}))
    err = io.StringIO()
    rt = Runtime(environ={"STRATUS_HOME": str(tmp_path / "home")}, err=err)
    store = _Store()
    args = argparse.Namespace(model_def=root, include=[])

    sha = pack_and_upload(args, rt, store)  # type: ignore[arg-type]
    assert sha in store.objects and store.asked == [sha]
    assert not list(Path(tempfile.gettempdir()).glob("stratus-context-*"))  # removed once sent

    assert pack_and_upload(args, rt, store) == sha  # type: ignore[arg-type]
    assert "unchanged since it was packed, not packed again" in err.getvalue()

    # The store lost the archive: the folder is packed for real and sent again.
    del store.objects[sha]
    assert pack_and_upload(args, rt, store) == sha  # type: ignore[arg-type]
    assert sha in store.objects and store.asked == [sha, sha, sha, sha]


@pytest.mark.parametrize("mode", ["shorter", "longer"])
def test_a_file_changing_under_the_reader_is_an_error(
    tmp_path: Path, monkeypatch, make_tree, mode: str
) -> None:
    monkeypatch.setattr(_archive, "_PIECE", 4)
    root = make_tree(tmp_path / "ctx", {"log.txt": "0123456789"})
    real_collect = _context.collect

    def collect_then_change(root: Path, includes: tuple[Path, ...] = ()) -> list[_context.ContextFile]:
        files = real_collect(root, includes)
        (root / "log.txt").write_text("01234" if mode == "shorter" else "0123456789abc")
        return files

    monkeypatch.setattr(_context, "collect", collect_then_change)
    with pytest.raises(_context.ContextError, match="changed while"):
        pack(root)

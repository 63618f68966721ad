"""GNU tar reads the context archive det/_context.py packs (the archive itself is tested in
tests/unit/det/test_context_pack.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from det._context import pack


def test_gnu_tar_reads_the_archive(tmp_path: Path, context_tree) -> None:
    if not (shutil.which("tar") and shutil.which("zstd")):
        pytest.skip("needs GNU tar and zstd")
    archive = tmp_path / "ctx.tar.zst"
    archive.write_bytes(pack(context_tree.build(tmp_path / "ctx")).data)
    listing = subprocess.run(
        ["tar", "--zstd", "-tf", str(archive)], capture_output=True, text=True, check=True
    )
    assert sorted(listing.stdout.splitlines()) == sorted([*context_tree.files, "link.py"])

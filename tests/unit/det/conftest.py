"""Fixtures of the `det` CLI's unit tests: the fake API (`api`, a FakeApi of tests/unit/det/fakes.py whose
`api.run(*argv)` runs the CLI against it), a user's project (`project_config`) and the packer's stand-in
(`fake_pack`); `table_rows` comes from tests/conftest.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.unit.det.fakes import FakeApi, Packed, fake_pack


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def project_config(tmp_path: Path) -> Callable[[str, str], Path]:
    """`project_config(name, text)`: a user's project in tmp_path, the experiment config `name` holding
    `text` next to an empty context folder ctx/; the config's path."""

    def project_config(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text)
        (tmp_path / "ctx").mkdir()
        return path

    return project_config


@pytest.fixture(name="fake_pack")
def _fake_pack() -> Callable[[Path, Sequence[Path]], Packed]:
    """What the CLI's packer gives for a folder in these tests (to compute the sha256 the CLI sends)."""
    return fake_pack

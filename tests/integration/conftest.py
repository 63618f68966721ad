"""The integration tier: real processes (bash, python3 from this venv, git, tar), loopback sockets and
torch.distributed gloo groups on this machine, with no AWS and no local stack. Every test here carries the
``integration`` marker (``pytest -m integration``)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)

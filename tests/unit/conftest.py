"""What every unit test shares: the guard that keeps this tier free of IO (a unit test that starts a
process or connects/binds a socket fails, naming tests/integration as its place).

The fakes live next to the tests that use them (pytest finds each folder's conftest.py up the tree):
- the CLI's fake API (`api`, `project_config`, `fake_pack`): tests/unit/det/conftest.py, its classes
  in tests/unit/det/fakes.py;
- the trial's fake control plane (`plane_kit`, `no_trial_env`, `preempted_nni`):
  tests/unit/harness/conftest.py, its classes in tests/unit/harness/fakes.py;
- the control plane's settings and moto in process (`stack_settings`, `aws`):
  tests/unit/chalicelib/conftest.py;
- the services' in-memory ports and workflow (`ports`, `flow`, `flow_on`):
  tests/unit/chalicelib/services/conftest.py.

Tests reach these through fixtures only, never by importing a conftest.py or a fakes module.
"""

from __future__ import annotations

import socket
import subprocess
from typing import Any, NoReturn

import pytest

# ---- no IO in this tier ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_processes_or_sockets(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """A unit test that starts a process or connects/binds a socket fails, naming the tier it belongs to."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(
            f"{request.node.nodeid} starts a process or opens a socket: tests/unit is IO-free; "
            "move the test to tests/integration"
        )

    monkeypatch.setattr(subprocess, "Popen", refuse)
    for method in ("connect", "connect_ex", "bind"):
        monkeypatch.setattr(socket.socket, method, refuse)

"""Fixtures of the trial side's unit tests (the harness, its compatibility packages, PyTorchTrial): the
fake control plane (`plane_kit`, a PlaneKit of tests/unit/harness/fakes.py), a clean trial environment
(`no_trial_env`) and an NNI trial told to stop (`preempted_nni`); `compat` comes from tests/conftest.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.harness.fakes import ENV_NAMES, LOCAL_ENV, PlaneKit


@pytest.fixture
def no_trial_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the trial's environment variables (nor the local test mode's) leak in from outside."""
    for name in [*ENV_NAMES, *LOCAL_ENV]:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def plane_kit(monkeypatch: pytest.MonkeyPatch) -> PlaneKit:
    return PlaneKit(monkeypatch)


@pytest.fixture
def preempted_nni(plane_kit: PlaneKit, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """An NNI trial (`stratus.harness.compat._nni.NniTrial`, parameters fetched) of a platform that asks it to stop,
    once its heartbeat has seen that: the plane and the trial's NNI state."""
    from stratus.harness.compat._nni import NniTrial

    plane_kit.platform_env({"lr": 0.01})
    plane = plane_kit.SearcherPlane([None], config={"searcher": {"metric": "default"}})
    plane.preempt = True
    plane_kit.use(plane, heartbeat_interval_s=0.01)
    nni = NniTrial()
    request.addfinalizer(nni.close)
    nni.get_next_parameter()
    assert plane.wait_heartbeats(2)
    return plane, nni

"""The embedded local stack, started once for the end-to-end tests as a user would run it, and a `det`
runner that calls the real CLI in a subprocess against it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from det.deploy.background import BackgroundStack
from tests.e2e.support import (
    ROOT,
    Det,
    DetResult,
    LocalStackInfo,
    StepsProbe,
    agent_pid,
    run_record,
    two_agent_pool,
    wait_for,
)

HERE = Path(__file__).resolve().parent


#: The modules whose tests take longest, longest first (minutes on 2 cores, `--durations`): the tier starts
#: them first, so that the last minutes are the short tests spread over every worker, not one long test
#: on one while the others idle. Every other module follows in file order.
LONGEST_FIRST = (
    "test_adaptdl_elastic",
    "test_pause_and_requeue",
    "test_stack_restart",
    "test_concurrent_creates",
    "test_batch_backend",
    "test_job_queue",
    "test_ec2_backend",
    "test_searcher_warm_start",
    "test_sagemaker_backend",
    "test_experiments",
)

#: Session fixtures that run an experiment several tests look at: the tests that use one run on one worker
#: (grouped by the fixture's name), so it runs once.
SHARED_RUNS = ("digits_adaptive",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`make test` runs this tier with ``--dist loadgroup``: the tests of a module that share a
    module-scoped fixture (a stack of the module's own) stay together on one worker, so that stack starts
    once, and so do the tests that look at one of the `SHARED_RUNS`; every other test goes to whichever
    worker is free (each worker has its own session stack).

    The tests of the `LONGEST_FIRST` modules come first, in its order (xdist hands out the groups and the
    tests in the order they are collected: tests/conftest.py turns off its reordering by group size).

    First among the hooks: xdist's own reads the groups to name the tests after them, and a group marked
    after it is ignored (it was, until this ran first: every module was spread test by test)."""
    rank = {stem: i for i, stem in enumerate(LONGEST_FIRST)}
    items.sort(
        key=lambda item: rank.get(item.path.stem, len(rank)) if item.path.parent == HERE else len(rank)
    )
    for item in items:
        if item.path.parent != HERE:
            continue
        if _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
        elif shared := [name for name in SHARED_RUNS if name in getattr(item, "fixturenames", ())]:
            item.add_marker(pytest.mark.xdist_group(shared[0]))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup``, fail at once where xdist did not group the tests (it names each grouped
    test ``...@group``): with pytest 9.2 and xdist 3.8 it silently does not (pytest-xdist#1386), and the
    module-scoped stacks then start on several workers and their tests meet others' state."""
    if not session.config.getoption("loadgroup", default=False):
        return
    for item in session.items:
        if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid:
            raise pytest.UsageError(
                f"xdist did not group {item.nodeid} (pytest {pytest.__version__}): install the pytest "
                "version requirements-dev.txt pins"
            )


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(fixture.scope == "module" for defs in info.name2fixturedefs.values() for fixture in defs)


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackInfo]:
    stack = BackgroundStack(tmp_path_factory.mktemp("stack"), slots=2)
    try:
        yield LocalStackInfo(
            api_url=stack.state["api_url"], moto_url=stack.state["moto_url"], state_dir=stack.log_path.parent
        )
    finally:
        stack.stop()


@pytest.fixture
def det(local_stack: LocalStackInfo) -> Det:
    return Det(local_stack.api_url)


@pytest.fixture(scope="session")
def digits_adaptive(local_stack: LocalStackInfo) -> tuple[DetResult, int]:
    """The digits example under adaptive ASHA (`examples/digits/adaptive.yaml`: 6 trials) created with
    `det experiment create ... -f` on the session stack and followed to its end, once for the tests that
    look at it (one group: `SHARED_RUNS`): the CLI's result and the experiment's id."""
    det = Det(local_stack.api_url)
    result = det(
        "experiment", "create", "examples/digits/adaptive.yaml", "examples/digits", "-f", timeout=400
    )
    assert result.code == 0, result.out + result.err
    return result, det.created_experiment_id(result.out)


@pytest.fixture(scope="session", name="det_runner")
def _det_runner() -> type[Det]:
    """`det_runner(api_url)`: a `det` against another stack than `local_stack` (a two_agent_pool, say)."""
    return Det


@pytest.fixture(scope="session", name="two_agent_pool")
def _two_agent_pool() -> Callable[[Path], AbstractContextManager[dict[str, str]]]:
    return two_agent_pool


@pytest.fixture(scope="session", name="one_slot_agents")
def _one_slot_agents() -> Callable[..., AbstractContextManager[dict[str, str]]]:
    """`one_slot_agents(folder, agents=N)`: a stack whose pool has N agents of one slot each."""
    return two_agent_pool


@pytest.fixture(scope="session", name="agent_pid")
def _agent_pid() -> Callable[[str, str], int]:
    return agent_pid


@pytest.fixture(scope="session", name="run_record")
def _run_record() -> Callable[[str, str], dict | None]:
    return run_record


@pytest.fixture(scope="session", name="wait_for")
def _wait_for() -> Callable[..., Any]:
    return wait_for


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def probe(det: Det) -> StepsProbe:
    """A `StepsProbe` on the test's `det` (a module's own stack where it overrides `det`)."""
    return StepsProbe(det)

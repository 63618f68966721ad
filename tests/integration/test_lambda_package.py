"""The Lambda package, built for Lambda's platform (Python 3.12) with pip (from the package index, as
`make install` is): it holds no CLI package, fits Lambda's limits, is the same bytes when built again, and
(the smoke test) imports the app and answers a recorded event with every handler from itself alone, under
the runtime's Python where one is here, and for a package built for this Python."""

from __future__ import annotations

import fcntl
import os
import pickle
import sys
import zipfile
from pathlib import Path

import pytest

from infra.aws import package


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> package.Package:
    """The package, built once a run: under xdist (`--dist worksteal` spreads this module's tests over the
    workers) the first worker to need it builds it under a lock in a folder of this run's that every
    worker shares, and the others take what it built, rather than each spending its own minute of CPU
    on the same bytes."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return package.build(tmp_path_factory.mktemp("lambda") / "stratus.zip")
    shared = tmp_path_factory.getbasetemp().parent / "lambda-package"  # beside every worker's own folder
    shared.mkdir(exist_ok=True)
    record = shared / "built.pickle"
    with (shared / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            record.write_bytes(pickle.dumps(package.build(shared / "stratus.zip")))
        built: package.Package = pickle.loads(record.read_bytes())
    return built


def test_the_package_holds_the_runtime_code_and_no_cli_within_lambdas_limits(built: package.Package) -> None:
    names = zipfile.ZipFile(built.path).namelist()
    assert {"app.py", "chalice/app.py", "chalice/__init__.py", "stratus/contract/messages.py"} <= set(names)
    assert not any(n.startswith(("chalice/cli/", "click/", "moto/", "det/")) for n in names)
    assert any(n.startswith("numpy/") for n in names) and any(n.startswith("optuna/") for n in names)
    assert any(n.endswith("-cp312-cp312-linux_x86_64.so") or ".cpython-312-" in n for n in names)  # for 3.12
    assert built.zipped < package.ZIPPED_LIMIT and built.unzipped < package.UNZIPPED_LIMIT
    assert (built.compiled > 0) == (package.runtime_python() == sys.executable)  # bytecode only from 3.12


def test_the_package_answers_its_smoke_test_under_the_runtimes_python(built: package.Package) -> None:
    """Every handler imported from the package alone and answering a recorded event, in Python 3.12 (the
    runtime's); its compiled modules (pydantic_core, numpy, zstandard) load in no other version."""
    if package.runtime_python() is None:
        pytest.skip(
            f"no Python {package.LAMBDA_PYTHON} on this machine (it has {sys.version.split()[0]}): the smoke "
            "test runs where one is (a lent GPU machine has 3.12); the same test under this Python, on a "
            "package built for it, is test_the_smoke_test_and_the_bytecode_on_a_package_for_this_python"
        )
    printed = package.check(built.path)
    assert "handlers answered: app.app (200)" in printed and "on_launch_message" in printed


def test_the_smoke_test_and_the_bytecode_on_a_package_for_this_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package built for the Python running the tests (as a deploy from a 3.12 machine builds for 3.12):
    the packages a cold start imports go in as bytecode (and only those: TPE's optuna and numpy load
    later), and every handler answers its recorded event from the package alone."""
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    monkeypatch.setattr(package, "LAMBDA_PYTHON", this)
    built = package.build(tmp_path / "this.zip")
    names = set(zipfile.ZipFile(built.path).namelist())
    tag = sys.implementation.cache_tag
    assert (
        f"chalicelib/handlers/__pycache__/events.{tag}.pyc" in names and f"__pycache__/app.{tag}.pyc" in names
    )
    assert any(n.startswith("pydantic/") and n.endswith(f".{tag}.pyc") for n in names)
    assert not any(n.startswith("optuna/") and n.endswith(".pyc") for n in names)
    assert built.compiled > 100 and built.zipped < package.ZIPPED_LIMIT
    printed = package.check(built.path, sys.executable)
    print(printed)
    assert "handlers answered: app.app (200)" in printed
    assert "chalicelib.handlers.events.on_launch_message (no failed records)" in printed


def test_a_rebuild_gives_the_same_bytes(built: package.Package, tmp_path: Path) -> None:
    again = package.build(tmp_path / "again.zip", work=built.path.parent)  # dependencies from the cache
    assert again.path.read_bytes() == built.path.read_bytes()


def test_the_chalice_cli_cannot_creep_back_into_the_runtime_requirements(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("boto3>=1.40\nchalice==1.34.0  # the CLI\n")
    with pytest.raises(SystemExit, match="'chalice==1.34.0' is the Chalice CLI"):
        package.runtime_requirements(requirements)

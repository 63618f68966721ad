"""The Lambda package, built for Lambda's platform with pip (from the package index, as `make install` is):
it imports the app and the searchers' libraries alone, holds no CLI package, fits Lambda's limits, and is
the same bytes when built again."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from infra.aws import package


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> package.Package:
    return package.build(tmp_path_factory.mktemp("lambda") / "stratus.zip")


def test_the_package_imports_the_app_and_the_searchers_from_itself_alone(built: package.Package) -> None:
    package.check(built.path)  # raises on a failed import or a CLI-only package
    names = zipfile.ZipFile(built.path).namelist()
    assert {"app.py", "chalice/app.py", "chalice/__init__.py", "stratus/contract/messages.py"} <= set(names)
    assert not any(n.startswith(("chalice/cli/", "click/", "moto/", "det/")) for n in names)
    assert any(n.startswith("numpy/") for n in names) and any(n.startswith("optuna/") for n in names)
    assert built.zipped < package.ZIPPED_LIMIT and built.unzipped < package.UNZIPPED_LIMIT


def test_a_rebuild_gives_the_same_bytes(built: package.Package, tmp_path: Path) -> None:
    again = package.build(tmp_path / "again.zip", work=built.path.parent)  # dependencies from the cache
    assert again.path.read_bytes() == built.path.read_bytes()


def test_the_chalice_cli_cannot_creep_back_into_the_runtime_requirements(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("boto3>=1.40\nchalice==1.34.0  # the CLI\n")
    with pytest.raises(SystemExit, match="'chalice==1.34.0' is the Chalice CLI"):
        package.runtime_requirements(requirements)

"""A plain `pip install .` must give a working `det` and `det deploy local up`: every third-party module
that the installed packages import at their top level is provided by a distribution the project declares
in `pyproject.toml` (make's venv installs with `--no-deps`, so only this test notices a missing one)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Imported only inside functions, by code that runs where the user's own frameworks are installed.
LAZY_ONLY = {"torch", "numpy", "nni", "determined"}
FIRST_PARTY = {"app", "chalicelib", "det", "infra", "stratus"}


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported at a module's top level (not inside functions, not under TYPE_CHECKING)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _declared_distributions() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {_norm(re.split(r"[<>=\[; ]", spec, maxsplit=1)[0]) for spec in project["dependencies"]}


def _norm(distribution: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def test_every_top_level_third_party_import_is_a_declared_dependency() -> None:
    files = [REPO / "app.py"] + [
        path
        for package in ("chalicelib", "contract", "det", "harness", "infra", "launchers")
        for path in (REPO / package).rglob("*.py")
    ]
    imported = set().union(*(_top_level_imports(path) for path in files))
    third_party = imported - FIRST_PARTY - set(sys.stdlib_module_names) - LAZY_ONLY - {"__future__"}
    providers = packages_distributions()
    declared = _declared_distributions()
    # moto[server] brings flask and the rest the embedded stack needs: count its requirements as declared.
    undeclared = {
        module: providers.get(module, ["?"])
        for module in sorted(third_party)
        if not {_norm(d) for d in providers.get(module, [])} & (declared | _transitive(declared))
    }
    assert undeclared == {}, f"imported but not in pyproject.toml's dependencies: {undeclared}"
    assert {"chalice", "boto3", "httpx", "rich", "zstandard", "moto"} <= declared


def _transitive(declared: set[str]) -> set[str]:
    """The distributions the declared ones require (one level is enough for `botocore`, `pydantic_core`)."""
    from importlib.metadata import PackageNotFoundError, requires

    found: set[str] = set()
    for name in declared:
        try:
            needs = requires(name) or []
        except PackageNotFoundError:
            continue
        found |= {_norm(re.split(r"[<>=\[; (!~]", spec, maxsplit=1)[0]) for spec in needs}
    return found


def test_the_wheel_installs_the_packages_beside_user_code_under_the_stratus_namespace(tmp_path: Path) -> None:
    """Issue 28: a trial's context with its own `harness.py`, `contract.py` or `launchers/` must import its
    own, and ours ours: they are installed as stratus.harness, stratus.contract, stratus.launchers
    (setup.py), never under their folder names."""
    # From a copy: an in-tree build/ folder left by an older layout would leak into the wheel.
    source = tmp_path / "source"
    skip = shutil.ignore_patterns(
        ".venv",
        ".git",
        ".*_cache",
        ".hypothesis",
        ".typecheck",
        "build",
        "*.egg-info",
        "__pycache__",
        "bench",
    )
    shutil.copytree(REPO, source, ignore=skip)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
    )
    (wheel,) = tmp_path.glob("stratus_dl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names if ".dist-info/" not in name and ".data/" not in name}
    assert tops == {"stratus", "det", "chalicelib", "infra", "app.py"}
    assert {n.split("/")[1] for n in names if n.startswith("stratus/")} == {
        "contract",
        "harness",
        "launchers",
    }
    assert "stratus/__init__.py" not in names  # a namespace: nothing claims the name `stratus` itself
    assert "stratus/harness/compat/nni/nni/__init__.py" in names
    assert "stratus/launchers/adaptdl_numpy/sitecustomize.py" in names

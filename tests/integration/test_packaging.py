"""A plain `pip install .` must give a working `det` and `det deploy local up`: every third-party module
that the installed packages import at their top level is provided by a distribution the project declares
in `pyproject.toml` (make's venv installs with `--no-deps`, so only this test notices a missing one)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Imported only inside functions, by code that runs where the user's own frameworks are installed.
LAZY_ONLY = {"torch", "numpy", "nni", "determined"}
FIRST_PARTY = {"app", "chalicelib", "contract", "det", "harness", "infra", "launchers"}


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

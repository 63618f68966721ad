"""The compute package (`infra/aws/compute_package.py`): one wheel of harness, launchers and contract that an
EC2 instance pip-installs into the Deep Learning AMI's PyTorch environment. The same bytes when built
again; a RECORD whose hashes are its files'; installed by pip alone (`--no-deps --target`), the agent
imports from it in an interpreter that sees nothing else but the dependencies (installed from the lock,
with its hashes); zstandard, at the locked version, is its only dependency (torch is the AMI's); nothing of
the control plane, the CLI, infra or the tests is in it."""

from __future__ import annotations

import ast
import base64
import csv
import hashlib
import importlib.metadata
import io
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from infra.aws import compute_package
from infra.aws.compute_resources import PARAMETERS

pytestmark = pytest.mark.integration

DIST_INFO = "stratus_compute-0.1.0.dist-info"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> compute_package.Wheel:
    return compute_package.build(tmp_path_factory.mktemp("compute"))


@pytest.fixture(scope="module")
def installed(wheel: compute_package.Wheel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("target")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
         "--target", str(target), str(wheel.path)],
        check=True,
    )  # fmt: skip
    return target


def test_a_rebuild_gives_the_same_bytes_and_so_the_same_key(
    wheel: compute_package.Wheel, tmp_path: Path
) -> None:
    again = compute_package.build(tmp_path)

    assert again.path.read_bytes() == wheel.path.read_bytes()
    assert again.sha256 == wheel.sha256 == hashlib.sha256(wheel.path.read_bytes()).hexdigest()
    assert wheel.path.name == "stratus_compute-0.1.0-py3-none-any.whl"
    # pip reads the wheel's own file name, so the hash is the folder.
    assert wheel.key == f"compute/{wheel.sha256}/stratus_compute-0.1.0-py3-none-any.whl"


def test_the_record_lists_every_file_once_with_its_sha256_and_size(wheel: compute_package.Wheel) -> None:
    with zipfile.ZipFile(wheel.path) as archive:
        names = archive.namelist()
        rows = list(csv.reader(io.StringIO(archive.read(f"{DIST_INFO}/RECORD").decode())))
        contents = {name: archive.read(name) for name in names}

    assert names[-3:] == [f"{DIST_INFO}/METADATA", f"{DIST_INFO}/WHEEL", f"{DIST_INFO}/RECORD"]
    assert sorted(row[0] for row in rows) == sorted(names) and len(rows) == len(names) == wheel.files
    for path, digest, size in rows:
        if path == f"{DIST_INFO}/RECORD":
            assert (digest, size) == ("", "")
            continue
        expected = base64.urlsafe_b64encode(hashlib.sha256(contents[path]).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={expected}", len(contents[path])), path
    wheel_file = contents[f"{DIST_INFO}/WHEEL"].decode()
    assert "Root-Is-Purelib: true" in wheel_file and "Tag: py3-none-any" in wheel_file


def test_it_holds_the_compute_packages_only(wheel: compute_package.Wheel) -> None:
    names = zipfile.ZipFile(wheel.path).namelist()

    # Under the `stratus` namespace (setup.py): a trial's own harness.py or launchers/ never meets them.
    assert {name.split("/", 1)[0] for name in names} == {"stratus", DIST_INFO}
    assert {name.split("/")[1] for name in names if name.startswith("stratus/")} == {
        "contract",
        "harness",
        "launchers",
    }
    assert {
        "stratus/harness/agent/__main__.py",
        "stratus/launchers/torch_distributed.py",
        "stratus/contract/messages.py",
    } <= set(names)
    assert "stratus/__init__.py" not in names  # a namespace package, shared with any other stratus.* install
    # The determined and nni stand-ins go on a trial's PYTHONPATH from inside harness.
    assert (
        "stratus/harness/compat/determined/determined/__init__.py" in names
        and "stratus/harness/compat/nni/nni/__init__.py" in names
    )
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)


def test_pip_installs_it_alone_and_the_agent_imports_from_there(installed: Path) -> None:
    # Only the installed folder and the venv's site-packages (for zstandard): no checkout, no PYTHONPATH.
    site = sysconfig.get_paths()["purelib"]
    script = (
        f"import sys; sys.path[:0] = [{str(installed)!r}, {site!r}]\n"
        "import stratus.harness.agent, stratus.harness.agent._cli, stratus.harness.exec.run_trial\n"
        "import stratus.launchers.torch_distributed, stratus.contract\n"
        "print(stratus.harness.agent.__file__, stratus.launchers.__file__, stratus.contract.__file__, sep='\\n')"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", script],
        check=True,
        capture_output=True,
        text=True,
        env={},
        cwd=installed,
    )

    files = done.stdout.split()
    assert len(files) == 3 and all(f.startswith(str(installed)) for f in files), files
    assert not any((installed / name).exists() for name in ("chalicelib", "det", "infra", "tests", "app.py"))


def test_every_module_imports_from_the_installed_wheel_and_its_dependencies_alone(
    wheel: compute_package.Wheel,
) -> None:
    imported, skipped = compute_package.check(wheel.path)

    assert imported > 50  # every module of the three packages (torch is imported lazily by the harness)
    assert all(name.startswith("stratus.harness.") for name in skipped), skipped


def test_its_only_dependency_is_zstandard_at_the_locked_version_and_never_torch(installed: Path) -> None:
    (dist,) = importlib.metadata.distributions(path=[str(installed)])
    (zstandard,) = [pin for pin in compute_package.lock().pins() if pin.name == "zstandard"]

    assert dist.metadata["Name"] == "stratus-compute" and dist.version == "0.1.0"
    assert dist.requires == [f"zstandard=={zstandard.version}"]  # infra/aws/compute.lock's, within >=0.23
    assert dist.metadata["Requires-Python"] == ">=3.11"


def test_what_the_compute_side_imports_is_the_stdlib_itself_its_dependencies_or_the_amis() -> None:
    """A new third-party import in harness, launchers or contract must join DEPENDENCIES (or be the AMI's)."""
    stand_ins = {"determined", "nni"}  # harness/compat's folders, put on a trial's PYTHONPATH
    allowed = {
        *compute_package.PACKAGES,
        *compute_package.DEPENDENCIES,
        *compute_package.ON_THE_AMI,
        *stand_ins,
        "stratus",  # `from stratus import harness`: the namespace they are installed under
    }
    found: dict[str, str] = {}
    for package in compute_package.PACKAGES:
        for path in sorted((compute_package.ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_bytes())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0] if not name.startswith("stratus.") else name.split(".")[1]
                    if top not in sys.stdlib_module_names and top != "__future__" and top not in allowed:
                        found[top] = str(path)
    assert found == {}


def test_the_key_is_one_the_templates_compute_key_parameter_allows(wheel: compute_package.Wheel) -> None:
    assert re.fullmatch(PARAMETERS["ComputeKey"]["AllowedPattern"], wheel.key)

"""`det example list | copy`: the examples reach a user who has no checkout (`pip install` ships them as
data files of the distribution `stratus-dl`), and pyproject ships every file of every example."""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from det import _distribution, _examples, cli
from det._runtime import Runtime

REPO = Path(__file__).resolve().parents[3]


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), runtime=Runtime(environ={}, out=out, err=err))
    return code, out.getvalue(), err.getvalue()


def _example_files(name: str) -> dict[str, bytes]:
    folder = REPO / "examples" / name
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_list_names_each_example_with_the_config_that_runs_it() -> None:
    code, out, err = _run("example", "list")

    assert code == 0, err
    rows = {
        line.split("|")[0].strip(): [c.strip() for c in line.split("|")[1:]] for line in out.splitlines()[2:]
    }
    assert set(rows) == {p.name for p in (REPO / "examples").iterdir() if p.is_dir()}
    assert rows["digits"][0] == "const.yaml"
    assert rows["nni_digits"][0] == "config.yml"
    assert rows["digits"][1].startswith("A small MLP (PyTorch, CPU)")
    assert "det example copy NAME" in err


def test_copy_from_an_empty_folder_gives_every_file_and_the_command_that_runs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    code, out, err = _run("example", "copy", "digits")

    assert code == 0, err
    assert _tree(tmp_path / "digits") == _example_files("digits")  # .detignore included
    assert out.splitlines() == [
        "Copied example digits into digits/ (5 files)",
        "Run it on the local stack (`det deploy local up` starts one, unless it runs already):",
        "  det experiment create digits/const.yaml digits -f",
    ]


def test_copy_into_a_named_folder_and_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    assert _run("example", "cp", "nni_digits", "empty")[0] == 0
    assert _tree(tmp_path / "empty") == _example_files("nni_digits")

    again = _run("example", "copy", "nni_digits", "empty")
    assert again[0] == 2
    assert again[2] == (
        "Error: empty already exists and is not an empty folder; name another one: "
        "det example copy nni_digits DIR\n"
    )
    unknown = _run("example", "copy", "mnist")
    assert unknown[0] == 2 and unknown[2].startswith("Error: there is no example named 'mnist'; pass one of ")
    assert not (tmp_path / "mnist").exists()


def test_a_missing_framework_is_named_with_the_pip_command_that_installs_it(tmp_path: Path) -> None:
    folder = tmp_path / "ex" / "needs"
    folder.mkdir(parents=True)
    (folder / "const.yaml").write_text("name: x\n")
    (folder / "train.py").write_text(
        "import harness\nimport nni\nimport torch_that_is_not_here\nimport os\nfrom model import Net\n"
    )
    (folder / "model.py").write_text("class Net: ...\n")  # its own module: not a missing one
    files = {name: folder / name for name in ("const.yaml", "train.py", "model.py")}
    example = _examples.Example("needs", files)
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(name="needs", directory=tmp_path / "copy")

    code = _examples.copy_example(args, Runtime(out=out, err=err), find=lambda: {"needs": example})

    assert code == 0
    assert "Its trials import torch_that_is_not_here, which this Python" in err.getvalue()  # only it
    assert err.getvalue().rstrip().endswith("-m pip install torch_that_is_not_here")
    assert _examples._requirements(["torch", "sklearn"]) == ["torch==2.13.0", "scikit-learn>=1.5"]


def test_an_installed_distribution_finds_its_examples_wherever_the_installer_put_them(tmp_path: Path) -> None:
    """A wheel's data files land under the installer's prefix (`<venv>/share/stratus-dl/examples`), and
    its RECORD names them relative to site-packages: no checkout is needed."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    info = site / "stratus_dl-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stratus-dl\nVersion: 0.1.0\n")
    records = []
    for name, data in _example_files("digits").items():
        place = tmp_path / "venv" / "share" / "stratus-dl" / "examples" / "digits" / name
        place.parent.mkdir(parents=True, exist_ok=True)
        place.write_bytes(data)
        records.append(
            f"../../../share/stratus-dl/examples/digits/{name},sha256={hashlib.sha256(data).hexdigest()},"
        )
    records.append("det/cli.py,,")
    (info / "RECORD").write_text("\n".join(records) + "\n")
    dist = metadata.PathDistribution(info)

    found = _examples.find_examples(checkout=None, dist=dist)

    assert list(found) == ["digits"]
    assert {name: path.read_bytes() for name, path in found["digits"].files.items()} == _example_files(
        "digits"
    )
    assert found["digits"].config == "const.yaml"
    assert _examples.find_examples(checkout=tmp_path, dist=dist).keys() == {"digits"}  # not a checkout


def test_pyproject_ships_every_file_of_every_example_under_the_distributions_name() -> None:
    """A new example, or a new file in one, fails here until `[tool.setuptools.data-files]` ships it."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["name"] == _distribution.DISTRIBUTION == "stratus-dl"
    assert pyproject["project"]["optional-dependencies"]["plot"] == ["matplotlib>=3.9"]
    data_files = pyproject["tool"]["setuptools"]["data-files"]
    shipped = {
        f"{destination.removeprefix(_examples.INSTALLED + '/')}/{Path(path).name}"
        for destination, patterns in data_files.items()
        for pattern in patterns
        for path in glob.glob(str(REPO / pattern))
    }
    every = {
        f"{name}/{inside}"
        for name in sorted(p.name for p in (REPO / "examples").iterdir() if p.is_dir())
        for inside in _example_files(name)
    }
    assert every and every - shipped == set()
    assert all(d.startswith(_examples.INSTALLED + "/") for d in data_files)
    assert all("/" not in n.partition("/")[2] for n in every), "data-files ship flat folders: add an entry"

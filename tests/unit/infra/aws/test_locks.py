"""The locks of the deployment's dependencies (`infra/aws/lambda.lock`, `infra/aws/compute.lock`; `make lock`
writes them): each pins every requirement of its source at one exact version within the requirement's
range, with sha256 hashes, and was made from the requirements as they are now, so a changed
requirements.txt (or pyproject.toml) without `make lock` fails here and in every build."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from infra.aws import compute_package, lock, lockfile, package


def _assert_pins_every_requirement(locked: lockfile.Lock) -> list[lockfile.Pin]:
    problem = locked.problem()
    assert problem is None, problem  # says which lock, and to run `make lock`
    pins = locked.pins()
    for line in locked.requirements:
        requirement = Requirement(line)
        found = [pin for pin in pins if pin.name == canonicalize_name(requirement.name)]
        assert found, f"{locked.path.name} has no {requirement.name}; run `make lock`"
        for pin in found:
            assert requirement.specifier.contains(pin.version, prereleases=True), (pin, line)
    for pin in pins:
        assert pin.hashes and all(h.startswith("sha256:") and len(h) == 71 for h in pin.hashes), pin
    return pins


def test_the_lambda_lock_pins_every_requirement_of_requirements_txt_exactly_with_hashes() -> None:
    locked = package.lock()
    assert locked.path == package.LOCK and locked.requirements == tuple(package.runtime_requirements())
    pins = _assert_pins_every_requirement(locked)
    # One platform: one version of each package, and what the requirements pull in is there too.
    assert len({pin.name for pin in pins}) == len(pins) > len(locked.requirements)
    assert {"pydantic-core", "botocore", "sqlalchemy"} <= {pin.name for pin in pins}
    assert locked.options[:2] == ("--python-version", package.LAMBDA_PYTHON)


def test_the_compute_lock_pins_every_dependency_of_the_wheel_exactly_with_hashes() -> None:
    locked = compute_package.lock()
    _, _, requires = compute_package.project()
    assert locked.requirements == requires
    pins = _assert_pins_every_requirement(locked)
    assert "--universal" in locked.options  # x86_64 and arm64 instances, any Python from Requires-Python up
    assert {pin.name for pin in pins if not pin.marker} == set(compute_package.DEPENDENCIES)


def test_make_locks_check_finds_every_lock_up_to_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert lock.main(["--check"]) == 0
    printed = capsys.readouterr().out
    assert "infra/aws/lambda.lock: up to date" in printed and "infra/aws/compute.lock: up to date" in printed


@pytest.mark.parametrize(
    "change",
    [
        lambda lines: [*lines, "requests>=2.31"],  # a new requirement
        lambda lines: [line.replace("numpy>=2.2,<2.3", "numpy>=2.3") for line in lines],  # a new range
    ],
    ids=["added", "range"],
)
def test_a_build_refuses_a_lock_made_before_requirements_txt_changed(
    change: Callable[[list[str]], list[str]], tmp_path: Path
) -> None:
    changed = change(package.runtime_requirements())
    assert changed != package.runtime_requirements()

    with pytest.raises(
        SystemExit, match=r"lambda\.lock: made from other requirements than requirements\.txt"
    ):
        package.install_dependencies(changed, tmp_path)
    with pytest.raises(SystemExit, match=r"run `make lock` to update it"):
        package.install_dependencies(changed, tmp_path)
    assert list(tmp_path.iterdir()) == []  # refused before pip ran


def test_a_lock_for_another_platform_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(package, "LOCKED_FOR", ("--python-version", "3.13", *package.LOCKED_FOR[2:]))

    assert "(or for another platform); run `make lock`" in (package.lock().problem() or "")


def test_a_lock_edited_by_hand_or_missing_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = package.LOCK.read_text()
    edited = tmp_path / "lambda.lock"
    monkeypatch.setattr(package, "LOCK", edited)

    edited.write_text(text.replace("\nnumpy==", "\nnumpy>="))
    with pytest.raises(SystemExit, match=r"'numpy>=.*' is not one exact version.*run `make lock`"):
        package.lock().pins()
    edited.write_text(text.replace("\nsix==1.17.0 \\\n", "\nsix==1.17.0\n#"))  # its hashes cut off
    with pytest.raises(SystemExit, match=r"'six==1.17.0' has no sha256 hash"):
        package.lock().pins()
    edited.unlink()
    with pytest.raises(SystemExit, match=r"lambda\.lock: no such lock; run `make lock` to make it"):
        package.install_dependencies(package.runtime_requirements(), tmp_path)


def test_a_compute_wheel_is_refused_when_pyproject_changed_since_the_lock(tmp_path: Path) -> None:
    pyproject = (compute_package.ROOT / "pyproject.toml").read_text()
    assert '"zstandard>=0.23"' in pyproject
    (tmp_path / "pyproject.toml").write_text(pyproject.replace('"zstandard>=0.23"', '"zstandard>=0.24"'))
    (tmp_path / compute_package.LOCK).parent.mkdir(parents=True)
    shutil.copyfile(compute_package.ROOT / compute_package.LOCK, tmp_path / compute_package.LOCK)

    with pytest.raises(SystemExit, match=r"compute\.lock: made from other requirements than pyproject\.toml"):
        compute_package.build(tmp_path / "out", root=tmp_path)
    assert not (tmp_path / "out").exists()


def test_a_universal_locks_markers_and_continued_lines_are_read() -> None:
    text = (
        "# input-sha256: " + "0" * 64 + "\n"
        "cffi==2.0.0 ; platform_python_implementation == 'PyPy' \\\n"
        "    --hash=sha256:" + "a" * 64 + " \\\n"
        "    --hash=sha256:" + "b" * 64 + "\n"
        "    # via zstandard\n"
        "Zope.Interface==7.2 \\\n"
        "    --hash=sha256:" + "c" * 64 + "\n"
    )

    cffi, zope = lockfile.parse(text)

    assert cffi == lockfile.Pin(
        "cffi",
        "2.0.0",
        "platform_python_implementation == 'PyPy'",
        ("sha256:" + "a" * 64, "sha256:" + "b" * 64),
    )
    assert cffi.requirement == "cffi==2.0.0; platform_python_implementation == 'PyPy'"
    assert (zope.name, zope.requirement) == ("zope-interface", "zope-interface==7.2")

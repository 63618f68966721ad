"""The compute side's package: one wheel of `harness`, `launchers` and `contract`, which an EC2 pool's
instance installs into the Deep Learning AMI's PyTorch environment (`infra/boot.py`). Run from the
repository root:

    python -m infra.aws.compute_package [--out build/compute] [--check]

- The wheel, `stratus_compute-<version>-py3-none-any.whl`, is written with `zipfile` by the wheel spec
  (PEP 427/491: `.dist-info/` with METADATA, WHEEL and a RECORD of sha256 hashes, last), not `pip wheel`:
  no build backend or build isolation (which fetches setuptools), nothing that varies with setuptools,
  and the same bytes from the same sources (sorted entries, fixed times and modes), so an unchanged
  compute side keeps its sha256 and is not uploaded again. Sources only: `*.py` and `py.typed`.
- Its dependencies are what the agent and the harness import beyond the standard library: zstandard (the
  contexts' archives), required by `pyproject.toml`, at the exact versions of the lock
  `infra/aws/compute.lock`: the wheel's `Requires-Dist` is the lock's packages, `name==version`, so every
  instance and job installs those versions (its pip, installing the wheel alone, checks no hash; `--check`
  installs the lock with its hashes). `make lock` resolves the lock anew with uv, for every platform
  and Python from the wheel's Requires-Python up (a universal resolution: x86_64 and arm64, the AMIs' and
  images' Pythons), with the hashes of each version's files; a lock made from other requirements than
  pyproject.toml holds is refused. torch (and numpy, which the harness seeds where present) is the AMI's:
  never a dependency, so `pip install` leaves it alone.
- Its key in the stack's bucket is `compute/<sha256>/<wheel>` (`Wheel.key`): pip needs the wheel's own
  file name, so the hash is the folder.

`--check` installs the wheel with `pip install --no-deps --target`, and the lock's packages for this
Python with `--require-hashes --no-deps` (from the package index) beside it, and imports every module of
the wheel in an interpreter that sees only those two folders (`python -S`); torch's modules are skipped.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from infra.aws import lockfile

ROOT = Path(__file__).resolve().parents[2]
NAME = "stratus_compute"  # the distribution `stratus-compute`, as a wheel's file name spells it
PACKAGES = ("contract", "harness", "launchers")  # the repository's folders, imported as stratus.<name>
#: What the compute side imports beyond the standard library (their ranges: pyproject.toml's; their
#: versions: the lock's).
DEPENDENCIES = ("zstandard",)
#: The dependencies' lock (`make lock`), under the repository's root.
LOCK = Path("infra") / "aws" / "compute.lock"
#: Imported by the harness but provided by the Deep Learning AMI's PyTorch environment.
ON_THE_AMI = ("torch", "numpy")
TAG = "py3-none-any"
PREFIX = "compute/"
_EPOCH = (2020, 1, 1, 0, 0, 0)
_SUMMARY = (
    "Stratus's compute side: the agent (python -m stratus.harness.agent), the trial harness, the launchers"
)


@dataclass(frozen=True)
class Wheel:
    path: Path
    sha256: str
    size: int
    files: int  # entries of the wheel, its dist-info included
    unpacked: int  # bytes of those files
    requires: tuple[str, ...]

    @property
    def key(self) -> str:
        """The wheel's key in the stack's bucket: under its hash, by its own name (pip reads the name)."""
        return f"{PREFIX}{self.sha256}/{self.path.name}"

    def summary(self) -> str:
        return (
            f"{self.path}: {self.size / 1024:.0f} KiB ({self.unpacked / 1024:.0f} KiB unpacked), {self.files} files; "
            f"requires {', '.join(self.requires) or 'nothing'} (torch: the AMI's); sha256 {self.sha256}"
        )


def project(pyproject: Path = ROOT / "pyproject.toml") -> tuple[str, str, tuple[str, ...]]:
    """The project's version, Requires-Python, and its requirements of the compute side's dependencies."""
    table = tomllib.loads(pyproject.read_text())["project"]
    named = {re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower(): req for req in table["dependencies"]}
    missing = [name for name in DEPENDENCIES if name not in named]
    if missing:
        raise SystemExit(f"{pyproject}: no requirement of {missing[0]!r}, which the compute side imports")
    return table["version"], table["requires-python"], tuple(named[name] for name in DEPENDENCIES)


def lock(root: Path = ROOT) -> lockfile.Lock:
    """The lock of the compute side's requirements (pyproject.toml's), resolved for every platform from the
    wheel's Requires-Python up."""
    _, python, requires = project(root / "pyproject.toml")
    lowest = re.fullmatch(r">=\s*(\d+\.\d+)", python.strip())
    if lowest is None:
        raise SystemExit(f"Requires-Python {python!r}: the lock needs a lowest version, as '>=3.11'")
    return lockfile.Lock(
        root / LOCK,
        "pyproject.toml",
        requires,
        ("--universal", "--python-version", lowest[1]),
        f"The compute wheel's dependencies (infra/aws/compute_package.py): every platform, Python {python}.",
    )


def _sources(root: Path) -> list[tuple[str, bytes]]:
    found = []
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            wanted = path.suffix == ".py" or path.name == "py.typed"
            if wanted and path.is_file() and "__pycache__" not in path.parts:
                # installed as stratus.<package> (setup.py): under the wheel's `stratus/` folder
                found.append(("stratus/" + path.relative_to(root).as_posix(), path.read_bytes()))
    return sorted(found)


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _dist_info(version: str, python: str, requires: tuple[str, ...]) -> list[tuple[str, bytes]]:
    folder = f"{NAME}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {NAME.replace('_', '-')}",
        f"Version: {version}",
        f"Summary: {_SUMMARY}",
        f"Requires-Python: {python}",
        *(f"Requires-Dist: {req}" for req in requires),
    ]
    wheel = [
        "Wheel-Version: 1.0",
        "Generator: infra.aws.compute_package",
        "Root-Is-Purelib: true",
        f"Tag: {TAG}",
    ]
    return [(f"{folder}/METADATA", "\n".join(metadata).encode() + b"\n"),
            (f"{folder}/WHEEL", "\n".join(wheel).encode() + b"\n")]  # fmt: skip


def build(out: Path = ROOT / "build" / "compute", root: Path = ROOT) -> Wheel:
    """The wheel of `root`'s compute packages, written into the folder `out`, requiring the locked versions
    (SystemExit, naming the lock and `make lock`, where pyproject.toml changed since the lock was made)."""
    version, python, _ = project(root / "pyproject.toml")
    requires = tuple(pin.requirement for pin in lock(root).pins())
    entries = _sources(root) + _dist_info(version, python, requires)
    record_name = f"{NAME}-{version}.dist-info/RECORD"
    record = [f"{name},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}" for name, data in entries]
    record.append(f"{record_name},,")
    entries.append((record_name, "\n".join(record).encode() + b"\n"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{NAME}-{version}-{TAG}.whl"
    # A partial file of its own, then one rename: two builds at once never mix their bytes.
    with (
        tempfile.NamedTemporaryFile(dir=out, suffix=".partial", delete=False) as partial,
        zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive,
    ):
        for name, data in entries:  # sources sorted, then METADATA, WHEEL, RECORD
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.create_system = 3  # unix, wherever it is built: the same bytes everywhere
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data, compresslevel=9)
    os.replace(partial.name, path)
    data = path.read_bytes()
    unpacked = sum(len(content) for _, content in entries)
    return Wheel(path, hashlib.sha256(data).hexdigest(), len(data), len(entries), unpacked, requires)


_CHECK = """\
import importlib, pkgutil, sys
sys.path[:0] = {paths!r}
imported, skipped = 0, []
for package in {packages!r}:
    module = importlib.import_module(package)
    assert module.__file__.startswith({target!r}), f"{{package}} came from {{module.__file__}}"
    for info in pkgutil.walk_packages(module.__path__, package + ".", onerror=lambda name: None):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # running it is what `python -m` does
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in {on_the_ami!r}:
                raise
            skipped.append(info.name)
        else:
            imported += 1
print(imported, " ".join(sorted(skipped)))
"""


def check(wheel: Path) -> tuple[int, tuple[str, ...]]:
    """Install the wheel without its dependencies into a folder, and the lock's packages for this Python,
    checked against the lock's hashes, into another (from the package index), and import every module of
    the wheel in an interpreter that sees those two folders alone; the number of modules imported and
    those skipped for want of the AMI's torch."""
    locked, _ = lock().read()  # SystemExit where pyproject.toml changed since the lock was made
    with tempfile.TemporaryDirectory() as folder:
        target, deps, requirements = Path(folder) / "target", Path(folder) / "deps", Path(folder) / "lock.txt"
        requirements.write_text(locked)  # the text checked, whatever the file holds by now
        install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
                   "--disable-pip-version-check", "--target"]  # fmt: skip
        subprocess.run([*install, str(target), str(wheel)], check=True)
        subprocess.run([*install, str(deps), "--require-hashes", "-r", str(requirements)], check=True)
        script = _CHECK.format(paths=[str(target), str(deps)], packages=[f"stratus.{p}" for p in PACKAGES], target=str(target),
                               on_the_ami=ON_THE_AMI)  # fmt: skip
        env = {"PATH": os.environ.get("PATH", "")}
        done = subprocess.run([sys.executable, "-S", "-c", script], check=True, env=env, cwd=folder,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
        count, _, skipped = done.stdout.strip().partition(" ")
        return int(count), tuple(skipped.split())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "compute", help="the wheel's folder")
    parser.add_argument("--check", action="store_true", help="install the wheel alone and import it")
    args = parser.parse_args(argv)
    wheel = build(args.out)
    print(wheel.summary())
    print(f"key: {wheel.key}")
    if args.check:
        imported, skipped = check(wheel.path)
        print(f"check: {imported} modules imported from the installed wheel; needing the AMI's torch: "
              f"{', '.join(skipped) or 'none'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

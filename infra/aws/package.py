"""The control plane's Lambda package: the runtime's dependencies built for Lambda's platform, the app's
code and Chalice's runtime module, in one zip. Run from the repository root:

    python -m infra.aws.package [--out build/lambda/stratus.zip] [--check]

- Dependencies are `requirements.txt` (the runtime's list; the Chalice CLI, the local stack's moto and the
  `det` CLI's packages are in requirements-dev.txt), installed by pip for the Lambda runtime's platform:
  CPython 3.11 on Amazon Linux 2, glibc 2.26, so wheels tagged manylinux2014 / manylinux_2_17 (pip picks
  the newest version that has one; requirements.txt pins numpy to 2.2, the last minor that has one).
- Chalice is not a dependency of the package: like `chalice package`, only its runtime module
  (`chalice/app.py` and its `__init__`) goes in, not its CLI and the CLI's dependencies.
- Code: `app.py`, `chalicelib/` and `contract/` (the messages the API and the agents share), sources only.
- Left out: `__pycache__`, the packages' own `tests` folders, type stubs (`.pyi`) and zstandard's CFFI
  backend (`LEFT_OUT`).
- The zip is reproducible: sorted entries, fixed timestamps; the installed dependencies are cached by the
  hash of the requirements under `build/lambda/`.

`--check` imports the app and every searcher's library from the unzipped package in an interpreter that
sees nothing else (`python -S`), and fails on any CLI-only package found inside.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAMBDA_PYTHON = "3.11"
LAMBDA_RUNTIME = "python3.11"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64")
#: Lambda's limits: a zip uploaded directly, and the unzipped function (any way it is uploaded).
ZIPPED_LIMIT = 50 * 2**20
UNZIPPED_LIMIT = 250 * 2**20
#: Packages that belong to a command line, never to the function.
CLI_ONLY = ("click", "inquirer", "blessed", "chalice/cli", "chalice/deploy", "det", "moto", "rich", "httpx")
#: What `--check` imports: the app (every route and handler) and what the searchers need.
CHECK_IMPORTS = ("app", "optuna", "numpy", "yaml", "pydantic", "zstandard", "chalicelib.domain.searchers.tpe")
#: Files of the dependencies no import reaches: zstandard's CFFI backend (11.6 MiB), which it loads only where
#: its C extension, kept, cannot load (PyPy).
LEFT_OUT = ("zstandard/_cffi.*.so", "zstandard/backend_cffi.py")
#: The code, and where it goes in the package: contract/ is imported as stratus.contract (setup.py).
_CODE = {"app.py": "app.py", "chalicelib": "chalicelib", "contract": "stratus/contract"}
_EPOCH = (2020, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Package:
    path: Path
    zipped: int
    unzipped: int
    files: int
    largest: list[tuple[str, int]]  # top-level folders of the package by unzipped bytes

    def summary(self) -> str:
        mib = 2**20
        lines = [
            f"{self.path}: {self.zipped / mib:.1f} MiB zipped ({self.zipped / ZIPPED_LIMIT:.0%} of Lambda's "
            f"50 MiB direct upload), {self.unzipped / mib:.1f} MiB unzipped ({self.unzipped / UNZIPPED_LIMIT:.0%} "
            f"of its 250 MiB), {self.files} files",
            "largest: " + ", ".join(f"{name} {size / mib:.1f} MiB" for name, size in self.largest),
        ]
        return "\n".join(lines)


def runtime_requirements(path: Path = ROOT / "requirements.txt") -> list[str]:
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    wanted = [line for line in lines if line]
    if chalice := [line for line in wanted if line.lower().startswith("chalice")]:
        raise SystemExit(
            f"{path}: {chalice[0]!r} is the Chalice CLI; the package carries its runtime module only"
        )
    return wanted


def install_dependencies(requirements: list[str], work: Path) -> Path:
    """The dependencies installed for Lambda's platform into `work/site-<hash>` (reused when there)."""
    recipe = [LAMBDA_PYTHON, *PLATFORMS, *requirements, *LEFT_OUT]
    key = hashlib.sha256("\n".join(recipe).encode()).hexdigest()[:12]
    site = work / f"site-{key}"
    if site.is_dir():
        return site
    partial = work / f"partial-{key}"
    shutil.rmtree(partial, ignore_errors=True)
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(partial),
        *platforms, "--python-version", LAMBDA_PYTHON, "--implementation", "cp", "--only-binary=:all:",
        *requirements,
    ]  # fmt: skip
    print(f"installing {len(requirements)} requirements for {LAMBDA_RUNTIME} ({PLATFORMS[0]})", flush=True)
    subprocess.run(command, check=True)
    for folder in [*partial.rglob("__pycache__"), *partial.rglob("tests")]:  # no package imports its tests
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
    for stub in partial.rglob("*.pyi"):
        stub.unlink()
    for pattern in LEFT_OUT:
        for path in partial.glob(pattern):
            path.unlink()
    partial.rename(site)
    return site


def _code_files() -> list[tuple[Path, str]]:
    import chalice
    import chalice.app

    files = [
        (Path(inspect.getfile(chalice.app)), "chalice/app.py"),
        (Path(inspect.getfile(chalice)), "chalice/__init__.py"),
    ]
    for name, inside in _CODE.items():
        path = ROOT / name
        if path.is_file():
            files.append((path, inside))
            continue
        files += [
            (f, f"{inside}/{f.relative_to(path).as_posix()}")
            for f in sorted(path.rglob("*.py"))
            if "__pycache__" not in f.parts
        ]
    return files


def build(out: Path, work: Path | None = None) -> Package:
    work = work or out.parent
    work.mkdir(parents=True, exist_ok=True)
    site = install_dependencies(runtime_requirements(), work)
    entries = [(f, f.relative_to(site).as_posix()) for f in sorted(site.rglob("*")) if f.is_file()]
    entries += _code_files()
    sizes: dict[str, int] = {}
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for source, name in sorted(entries, key=lambda entry: entry[1]):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            data = source.read_bytes()
            archive.writestr(info, data, compresslevel=9)
            top = name.split("/", 1)[0]
            sizes[top] = sizes.get(top, 0) + len(data)
    partial.replace(out)
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:8]
    return Package(out, out.stat().st_size, sum(sizes.values()), len(entries), largest)


def check(package: Path) -> None:
    """Import the app and the searchers' libraries from the unzipped package alone; no CLI package in it."""
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        found = sorted({c for c in CLI_ONLY for n in names if n.startswith(c + "/") or n == c + ".py"})
        if found:
            raise SystemExit(f"{package}: holds CLI-only packages {found}; take them out of requirements.txt")
        with tempfile.TemporaryDirectory() as folder:
            archive.extractall(folder)
            script = (
                f"import sys; sys.path.insert(0, {folder!r}); import importlib\n"
                f"for name in {CHECK_IMPORTS!r}: importlib.import_module(name)\n"
                "import numpy, optuna; print('imports: numpy', numpy.__version__, 'optuna', optuna.__version__)"
            )
            env = {
                "PATH": os.environ.get("PATH", ""),
                "STRATUS_STACK": "stratus",
                "AWS_DEFAULT_REGION": "us-east-1",
            }
            subprocess.run([sys.executable, "-S", "-c", script], check=True, env=env, cwd=folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "lambda" / "stratus.zip")
    parser.add_argument("--check", action="store_true", help="import the app from the package alone")
    args = parser.parse_args(argv)
    package = build(args.out)
    print(package.summary())
    if args.check:
        check(package.path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

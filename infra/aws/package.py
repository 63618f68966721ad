"""The control plane's Lambda package: the runtime's dependencies built for Lambda's platform, the app's
code and Chalice's runtime module, in one zip. Run from the repository root:

    python -m infra.aws.package [--out build/lambda/stratus.zip] [--check]

- Dependencies are `requirements.txt` (the runtime's list; the Chalice CLI, the local stack's moto and the
  `det` CLI's packages are in requirements-dev.txt), at the exact versions of its lock,
  `infra/aws/lambda.lock` (`make lock` resolves it anew with uv for the Lambda runtime's platform:
  CPython 3.12 on Amazon Linux 2023, glibc 2.34, wheels only), installed by pip for that platform (wheels
  tagged manylinux_2_34 down to manylinux2014) with `--require-hashes --no-deps`: every file checked
  against the lock's sha256, nothing resolved at build time. A lock made from other requirements than
  `requirements.txt` holds is refused (`make lock` updates it), so two builds of one commit install the
  same files.
- Chalice is not a dependency of the package: like `chalice package`, only its runtime module
  (`chalice/app.py` and its `__init__`) goes in, not its CLI and the CLI's dependencies.
- Code: `app.py`, `chalicelib/` and `contract/` (the messages the API and the agents share), sources only.
- Left out: `__pycache__`, the packages' own `tests` folders, type stubs (`.pyi`) and zstandard's CFFI
  backend (`LEFT_OUT`).
- Bytecode: Lambda's code folder is read-only, so a function compiles every module it imports at each
  cold start (the app's import takes about 2.5 times the CPU from sources as from bytecode). Where the
  Python building the package is the runtime's version, the packages a cold start imports (found by
  importing the app from the package's files) go in compiled too (`__pycache__/*.cpython-312.pyc`,
  unchecked-hash: valid whatever the files' times); those imported later (optuna, numpy, for TPE) stay
  sources, keeping the zip under Lambda's direct-upload limit. Any other Python cannot write the
  runtime's bytecode, and the package says it carries sources only.
- The zip is reproducible: sorted entries, fixed timestamps; the installed dependencies are cached by the
  hash of the lock (and the platform) under `build/lambda/`.

`--check` imports the app and every searcher's library from the unzipped package in an interpreter that
sees nothing else (`python -S`), and fails on any CLI-only package found inside.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import inspect
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from infra.aws import lockfile

ROOT = Path(__file__).resolve().parents[2]
LAMBDA_PYTHON = "3.12"
LAMBDA_RUNTIME = f"python{LAMBDA_PYTHON}"  # Amazon Linux 2023; python3.11 is past its Lambda deprecation
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
#: The dependencies' lock (`make lock`), and what it is resolved for: the runtime's Python and platform (uv
#: takes a platform's newest glibc: manylinux_2_34 covers PLATFORMS), wheels only, as the build installs.
LOCK = ROOT / "infra" / "aws" / "lambda.lock"
LOCKED_FOR = (
    "--python-version", LAMBDA_PYTHON,
    "--python-platform", "x86_64-" + PLATFORMS[0].removesuffix("_x86_64"),
    "--only-binary", ":all:",
)  # fmt: skip
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
    compiled: int = 0  # modules with their bytecode in the package (0: sources only)

    def summary(self) -> str:
        mib = 2**20
        lines = [
            f"{self.path}: {self.zipped / mib:.1f} MiB zipped ({self.zipped / ZIPPED_LIMIT:.0%} of Lambda's "
            f"50 MiB direct upload), {self.unzipped / mib:.1f} MiB unzipped ({self.unzipped / UNZIPPED_LIMIT:.0%} "
            f"of its 250 MiB), {self.files} files",
            "largest: " + ", ".join(f"{name} {size / mib:.1f} MiB" for name, size in self.largest),
            f"bytecode: {self.compiled} modules compiled for Python {LAMBDA_PYTHON}"
            if self.compiled
            else f"bytecode: none (sources only: this is Python {_this_python()}, the runtime {LAMBDA_PYTHON}; "
            "each cold start compiles what it imports; build with Python "
            f"{LAMBDA_PYTHON} to carry bytecode)",
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


def lock(requirements: list[str] | None = None) -> lockfile.Lock:
    """The lock of `requirements` (by default requirements.txt's) for the Lambda runtime (`LOCK`)."""
    wanted = runtime_requirements() if requirements is None else requirements
    return lockfile.Lock(
        LOCK,
        "requirements.txt",
        tuple(wanted),
        LOCKED_FOR,
        f"The Lambda package's dependencies (infra/aws/package.py): CPython {LAMBDA_PYTHON}, {PLATFORMS[0]}, "
        "wheels only.",
    )


def install_dependencies(requirements: list[str], work: Path) -> Path:
    """The dependencies, at the versions and hashes of their lock, installed for Lambda's platform into
    `work/site-<hash>` (reused when there). SystemExit, naming the lock and `make lock`, when the lock was
    made from other requirements than `requirements`."""
    locked, pins = lock(requirements).read()
    recipe = [LAMBDA_PYTHON, *PLATFORMS, locked, *LEFT_OUT]
    key = hashlib.sha256("\n".join(recipe).encode()).hexdigest()[:12]
    site = work / f"site-{key}"
    if site.is_dir():
        return site
    partial = work / f"partial-{key}"
    shutil.rmtree(partial, ignore_errors=True)
    # The lock as hashed into the key, beside the install: pip reads exactly what the key names.
    work.mkdir(parents=True, exist_ok=True)
    copy = work / f"lock-{key}.txt"
    copy.write_text(locked)
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(partial),
        *platforms, "--python-version", LAMBDA_PYTHON, "--implementation", "cp", "--only-binary=:all:",
        "--require-hashes", "--no-deps", "-r", str(copy),
    ]  # fmt: skip
    print(
        f"installing the {len(pins)} packages of {LOCK.name} for {LAMBDA_RUNTIME} ({PLATFORMS[0]})",
        flush=True,
    )
    try:
        subprocess.run(command, check=True)
    finally:
        copy.unlink()
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
    compiled = []
    if _this_python() == LAMBDA_PYTHON:
        cold = _cold_start_packages(entries)
        compiled = _bytecode([e for e in entries if e[1].split("/", 1)[0].removesuffix(".py") in cold], work)
    entries += compiled
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
    return Package(out, out.stat().st_size, sum(sizes.values()), len(entries), largest, len(compiled))


def _this_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _cold_start_packages(entries: list[tuple[Path, str]]) -> set[str]:
    """The top-level packages and modules that importing the app loads (what a cold start compiles),
    found by importing it, in this Python (the runtime's version), from the package's files alone."""
    with tempfile.TemporaryDirectory() as folder:
        for source, name in entries:
            target = Path(folder, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
        script = (
            f"import sys; sys.path.insert(0, {folder!r}); import app\n"
            "for module in list(sys.modules.values()):\n"
            f"    if (getattr(module, '__file__', None) or '').startswith({folder + os.sep!r}):\n"
            f"        print(module.__file__[{len(folder) + 1}:].split('/', 1)[0].removesuffix('.py'))"
        )
        env = {
            "PATH": os.environ.get("PATH", ""),
            "STRATUS_STACK": "stratus",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        done = subprocess.run(
            [sys.executable, "-S", "-B", "-c", script], env=env, capture_output=True, text=True, check=True
        )
    return set(done.stdout.split())


def _bytecode(entries: list[tuple[Path, str]], work: Path) -> list[tuple[Path, str]]:
    """Each `.py` entry compiled by this Python (the runtime's version): the `.pyc` files, and where they go
    in the package. Unchecked-hash bytecode: the import system never compares it with the source's time
    or hash, so the zip's fixed timestamps do not make it stale; the package is rebuilt whole anyway."""
    folder = work / "bytecode"
    shutil.rmtree(folder, ignore_errors=True)
    compiled = []
    for source, name in entries:
        if not name.endswith(".py"):
            continue
        inside = importlib.util.cache_from_source(name)
        target = folder / inside
        try:
            py_compile.compile(
                str(source),
                cfile=str(target),
                dfile=name,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
        except py_compile.PyCompileError:  # a file no import can load either (another Python's syntax)
            continue
        compiled.append((target, inside))
    return compiled


#: The smoke test's recorded events: API Gateway's proxy event for a route that needs no AWS service, and
#: an empty SQS batch for every queue handler (its answer: no failed records).
_API_EVENT = {
    "resource": "/health",
    "path": "/health",
    "httpMethod": "GET",
    "headers": {"Accept": "application/json"},
    "multiValueHeaders": {"Accept": ["application/json"]},
    "queryStringParameters": None,
    "multiValueQueryStringParameters": None,
    "pathParameters": None,
    "stageVariables": None,
    "requestContext": {"resourcePath": "/health", "httpMethod": "GET", "path": "/api/health", "stage": "api"},
    "body": None,
    "isBase64Encoded": False,
}
_SMOKE = """
import importlib, json, sys, time
started = time.process_time()
import app
imported = time.process_time() - started
for name in {imports!r}:
    importlib.import_module(name)
handlers = ["app.app"] + [source.handler_string for source in app.app.event_sources]
answers = {{}}
for name in handlers:  # as Lambda finds a handler: the module, then the function in it
    module, function = name.rsplit(".", 1)
    handler = getattr(importlib.import_module(module), function)
    if name == "app.app":
        answer = handler({event!r}, None)
        assert answer["statusCode"] == 200 and json.loads(answer["body"])["status"] == "ok", answer
    else:
        answer = handler({{"Records": []}}, None)
        assert not (answer or {{}}).get("batchItemFailures"), answer
    answers[name] = answer.get("statusCode", "no failed records") if isinstance(answer, dict) else answer
import numpy, optuna
print("python", sys.version.split()[0], "| import app:", f"{{imported:.2f}} s CPU", "| numpy", numpy.__version__,
      "| optuna", optuna.__version__)
print("handlers answered:", ", ".join(f"{{name}} ({{answer}})" for name, answer in answers.items()))
"""


def runtime_python() -> str | None:
    """An interpreter of the runtime's version on this machine (this one, or `python3.12` on PATH)."""
    if _this_python() == LAMBDA_PYTHON:
        return sys.executable
    found = shutil.which(f"python{LAMBDA_PYTHON}")
    if found is None:
        return None
    # A version manager's shim is on PATH whether or not that version is installed: ask it.
    asked = subprocess.run(
        [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
    )
    return found if asked.returncode == 0 and asked.stdout.strip() == LAMBDA_PYTHON else None


def check(package: Path, python: str | None = None) -> str:
    """The package holds no CLI package, and (the smoke test) from the unzipped package alone, in an
    interpreter of the runtime's version that sees nothing else (`-S`), the app and the searchers'
    libraries import, and every handler answers a recorded event. What it printed; SystemExit on a failure
    or when no such interpreter is here (a 3.12 package's compiled modules load only in 3.12)."""
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        found = sorted({c for c in CLI_ONLY for n in names if n.startswith(c + "/") or n == c + ".py"})
        if found:
            raise SystemExit(f"{package}: holds CLI-only packages {found}; take them out of requirements.txt")
        python = python or runtime_python()
        if python is None:
            raise SystemExit(
                f"no Python {LAMBDA_PYTHON} on this machine (this is {_this_python()}): the package's "
                f"compiled modules load only in the runtime's version; run the check where python{LAMBDA_PYTHON} is"
            )
        with tempfile.TemporaryDirectory() as folder:
            archive.extractall(folder)
            script = f"import sys; sys.path.insert(0, {folder!r})\n" + _SMOKE.format(
                imports=CHECK_IMPORTS, event=_API_EVENT
            )
            env = {
                "PATH": os.environ.get("PATH", ""),
                "STRATUS_STACK": "stratus",
                "AWS_DEFAULT_REGION": "us-east-1",
            }
            done = subprocess.run(
                [python, "-S", "-B", "-c", script], env=env, cwd=folder, capture_output=True, text=True
            )
            if done.returncode != 0:
                raise SystemExit(f"the package's smoke test failed under {python}:\n{done.stderr[-3000:]}")
            return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "lambda" / "stratus.zip")
    parser.add_argument("--check", action="store_true", help="import the app from the package alone")
    args = parser.parse_args(argv)
    package = build(args.out)
    print(package.summary())
    if args.check:
        print(check(package.path), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

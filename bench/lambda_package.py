"""The control plane's Lambda package: its size, and what a cold start's import of the app costs, with and
without bytecode. Run from the repository root:

    .venv/bin/python bench/lambda_package.py [--runs 7] [--write]

Every function of the stack (the API and each queue's handler) has the same package and the same handler
module: Lambda imports `app`, which registers every route and handler, so the import is the same for each
function (`chalicelib.handlers.*` are among what it loads). The figures:

- the package for the runtime (Python 3.12; with bytecode only where this Python is 3.12, see
  infra/aws/package.py);
- the cold start's import (`import app`, CPU seconds in a fresh `python -S -B`, the package's files alone,
  as Lambda's read-only code folder forces: no bytecode written) from a package built for this Python,
  sources only and with the cold-start packages compiled. Lambda gives a function CPU in proportion to its
  memory (1,769 MB is one vCPU), so the wall clock there is this CPU time over that share.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe  # noqa: E402
from infra.aws import package  # noqa: E402
from infra.aws.template_app import MEMORY_MB  # noqa: E402

VCPU_MB = 1769  # Lambda: one vCPU's worth of memory


def import_cpu(built: Path, runs: int) -> list[float]:
    """CPU seconds of `import app` from the unzipped package, each in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as folder:
        zipfile.ZipFile(built).extractall(folder)
        script = (
            f"import sys, time; sys.path.insert(0, {folder!r}); started = time.process_time(); import app; "
            "print(time.process_time() - started)"
        )
        env = {
            "PATH": os.environ.get("PATH", ""),
            "STRATUS_STACK": "stratus",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        return [
            float(subprocess.run([sys.executable, "-S", "-B", "-c", script], env=env, capture_output=True,
                                 text=True, check=True).stdout)
            for _ in range(runs)
        ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--write", action="store_true", help="write bench/results/lambda_package.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lambda-bench-"))
    started = time.monotonic()
    runtime = package.build(work / "runtime" / "stratus.zip")
    runtime_summary = runtime.summary().replace(str(runtime.path), "stratus.zip")  # before the change below
    this = f"{sys.version_info.major}.{sys.version_info.minor}"
    package.LAMBDA_PYTHON = this  # the same package, built for this Python: with bytecode
    compiled = package.build(work / "this" / "stratus.zip")
    sources = work / "sources.zip"
    with zipfile.ZipFile(compiled.path) as whole, zipfile.ZipFile(sources, "w", zipfile.ZIP_DEFLATED) as kept:
        for info in whole.infolist():
            if "__pycache__/" not in info.filename:
                kept.writestr(info, whole.read(info))
    timed = {
        "sources only": import_cpu(sources, args.runs),
        "with bytecode": import_cpu(compiled.path, args.runs),
    }
    share = MEMORY_MB / VCPU_MB
    lines = [
        "# The Lambda package and a cold start's import",
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/lambda_package.py --runs {args.runs}"
        f"{' --write' if args.write else ''}` ({time.monotonic() - started:.0f} s).",
        "",
        "Every function (the API and each queue's handler) imports the same `app`, so one figure holds for each.",
        "",
        "## The package for the runtime",
        "",
        "```",
        runtime_summary,
        "```",
        "",
        f"## `import app`, CPU seconds, {args.runs} fresh interpreters each (Python {this}, a package built for it)",
        "",
        f"| package | median | min | max | at {MEMORY_MB} MB on Lambda ({share:.2f} vCPU), about |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in timed.items():
        median = statistics.median(values)
        lines.append(
            f"| {name} | {median:.2f} | {min(values):.2f} | {max(values):.2f} | {median / share:.1f} s |"
        )
    lines += ["", f"With bytecode the package is {compiled.zipped / 2**20:.1f} MiB zipped ({compiled.compiled} "
              f"modules compiled), sources only {Path(sources).stat().st_size / 2**20:.1f} MiB."]  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "lambda_package.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

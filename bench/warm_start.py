"""A trial's own start, cold against warm: from the agent asking for the process to the trial's first line
after importing what a Determined trial imports (torch, numpy, `determined`). Run from the repository
root:

    .venv/bin/python bench/warm_start.py [--rounds 10] [--write]

Cold is what the agent does without warm start: ``bash -c`` (the startup-hook wrapper) exec'ing
``python3 main.py`` in a new session. Warm is `stratus.harness.agent._warm_client.WarmServer.spawn`: a fork of
the agent's warm interpreter, which imported the same modules once when it started. Rounds alternate
cold and warm; the figures are medians. The warm interpreter's own start (paid once per agent, while it
already heartbeats) is printed apart.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe  # noqa: E402
from stratus.harness.agent._warm_client import WarmProcess, WarmServer  # noqa: E402
from stratus.harness.trial_process import build_script  # noqa: E402

TRIAL = """\
import time
import numpy
import torch
import determined
print(time.time(), flush=True)
"""


def cold(folder: Path, env: dict[str, str]) -> float:
    start = time.time()
    proc = subprocess.Popen(
        [
            shutil.which("bash") or "/bin/bash",
            "-c",
            build_script(["python3", "main.py"], folder / "hook.failed"),
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    first = float(proc.stdout.readline())
    proc.wait()
    return first - start


def warm(server: WarmServer, folder: Path) -> float:
    start = time.time()
    proc = server.spawn(["python3", "main.py"], folder, dict(server.env))
    assert isinstance(proc, WarmProcess), proc
    assert proc.stdout is not None
    first = float(proc.stdout.readline())
    proc.wait()
    return first - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--write", action="store_true", help="write bench/results/warm_start.md")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="warm-bench-"))
    (folder / "main.py").write_text(TRIAL)
    server = WarmServer()
    t0 = time.monotonic()
    assert server.start(), "the warm interpreter did not start"
    server_start = time.monotonic() - t0
    try:
        cold(folder, dict(server.env))  # page cache warm for both
        colds, warms = [], []
        for _ in range(args.rounds):
            colds.append(cold(folder, dict(server.env)))
            warms.append(warm(server, folder))
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    c, w = statistics.median(colds), statistics.median(warms)
    lines = [
        "# Warm start: a trial's own start, cold and warm",
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/warm_start.py --rounds "
        f"{args.rounds} --write`. Medians of {args.rounds} rounds, cold and warm alternating.",
        "",
        "From the agent asking for the run's process to the trial's first line, after `import numpy, torch, "
        "determined` (see the script's docstring).",
        "",
        "| start | median | min | max |",
        "|---|---:|---:|---:|",
        f"| cold (`bash -c` → `python3 main.py`) | {c:.3f} s | {min(colds):.3f} s | {max(colds):.3f} s |",
        f"| warm (fork of the agent's warm interpreter) | {w:.3f} s | {min(warms):.3f} s | {max(warms):.3f} s |",
        "",
        f"Warm start saves {c - w:.2f} s a trial ({c / w:.0f}× faster to the first line). The warm interpreter "
        f"itself took {server_start:.2f} s to start, once per agent, while the agent already heartbeats.",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "warm_start.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

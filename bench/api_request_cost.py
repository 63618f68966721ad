"""What one API request costs the embedded local stack, on a new connection (every `det` command opens
one: the stack's API serves each connection in a thread of its own) and on a kept-alive one (the agents'
and trials' sessions), and what a whole `det` command costs. Run from the repository root:

    .venv/bin/python bench/api_request_cost.py [--requests 30] [--write]

The stack's CPU is read from /proc (user + system time of the stack process, every thread: API, moto,
scheduler loops), so it counts the work a request causes there, not the client's. The stack is idle
otherwise (no experiment runs), so what its loops do between requests is measured alone first and taken
off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe  # noqa: E402
from det.deploy.background import BackgroundStack  # noqa: E402

PATHS = ["/experiments", "/agents", "/resource-pools"]
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _measure(pid: int, n: int, one: Callable[[], object], idle_cpu_per_s: float) -> tuple[float, float]:
    """(wall ms, stack CPU ms) per call of `one`, the stack's idle CPU taken off."""
    walls: list[float] = []
    cpu0, began = _cpu_s(pid), time.perf_counter()
    for _ in range(n):
        start = time.perf_counter()
        one()
        walls.append((time.perf_counter() - start) * 1000)
    elapsed = time.perf_counter() - began
    cpu = max(0.0, _cpu_s(pid) - cpu0 - idle_cpu_per_s * elapsed)
    return statistics.median(walls), cpu * 1000 / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    rows: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory() as folder:
        stack = BackgroundStack(Path(folder), slots=1)
        try:
            url, pid = stack.state["api_url"], stack.process.pid
            for path in PATHS:
                assert httpx.get(url + path).status_code == 200, path  # warm: first imports, first clients
            cpu0, t0 = _cpu_s(pid), time.perf_counter()
            time.sleep(5)
            idle = (_cpu_s(pid) - cpu0) / (time.perf_counter() - t0)
            for path in PATHS:
                wall, cpu = _measure(pid, args.requests, lambda p=path: httpx.get(url + p), idle)
                rows.append((f"GET {path}", "new connection", wall, cpu))
                with httpx.Client() as client:
                    wall, cpu = _measure(pid, args.requests, lambda p=path, c=client: c.get(url + p), idle)
                rows.append((f"GET {path}", "kept alive", wall, cpu))
            env = {**os.environ, "DET_MASTER": url}
            command = [sys.executable, "-m", "det", "experiment", "list"]
            wall, cpu = _measure(
                pid,
                max(5, args.requests // 3),
                lambda: subprocess.run(command, env=env, capture_output=True, check=True),
                idle,
            )
            rows.append(("`det experiment list`", "a process", wall, cpu))
        finally:
            stack.stop()
    lines = [
        "| request | connection | wall, median (ms) | stack CPU per request (ms) |",
        "|---|---|---:|---:|",
        *[f"| {what} | {how} | {wall:.0f} | {cpu:.0f} |" for what, how, wall, cpu in rows],
    ]
    print("\n".join(lines))
    if args.write:
        out = ROOT / "bench" / "results" / "api_request_cost.md"
        header = [
            "# What one API request costs the local stack",
            "",
            f"Machine: {describe()}.  ",
            f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/api_request_cost.py "
            f"--requests {args.requests} --write`. Load average when it started: {load:.2f}.",
            "",
        ]
        previous = out.read_text().split("<!-- notes -->", 1)[1] if out.exists() else "\n"
        out.write_text("\n".join([*header, *lines, "", "<!-- notes -->"]) + previous)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Teardown after a worker crash: `launchers.torch_distributed` next to bare torchrun, same workload.

    .venv/bin/python bench/launcher_teardown.py [--workers 2 4 8] [--runs 3] [--write]

Workload: N CPU workers join a gloo group and all-reduce once; then the last rank crashes (`os._exit(3)`)
while the others block in a second all-reduce that can never complete (a 600 s collective timeout, far
beyond what is measured). Each run, the benchmark holds a pidfd of every worker before the crash, so it
sees each one's end the moment it happens, whoever reaps it; the crashing worker reads its own clock
(CLOCK_MONOTONIC, shared by every process) just before it exits. Reported, per launcher and N (median,
min and max of the runs): crash → last worker gone, and crash → launcher exited. Two ways for the
survivors to take the news:

- `plain`: the survivors block in the all-reduce with default signal handling: gloo notices the dead
  peer and raises, or the launcher's SIGTERM ends them, whichever comes first.
- `hung`: the survivors catch SIGTERM in Python and carry on (as a trial whose harness latches SIGTERM
  to checkpoint) and wait on something that never returns and never fails, standing in for a collective
  with no failure detection (an NCCL all-reduce without a timeout). Only SIGKILL ends them: after the
  kill grace, 10 s for `launchers.torch_distributed` (`STRATUS_KILL_GRACE_S`), torchrun's shutdown
  timeout (30 s by default) for torchrun.

Bare torchrun runs as `python3 -m torch.distributed.run --nproc_per_node N --master_port P workload.py`.
"""

from __future__ import annotations

import argparse
import os
import re
import selectors
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import date
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe  # noqa: E402
from launchers._info import free_port  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "launcher_teardown.md"
READING = textwrap.dedent(
    """
    Reading: `plain` survivors go within a fraction of a second under both launchers (gloo raises on the
    dead peer, unless the launcher's SIGTERM lands first); what differs is the launcher's own exit
    (torchrun polls its workers every 0.1 s, then prints a traceback and its error summary) and its
    exit code (torchrun's is 1, not the worker's). With `hung` survivors the kill grace is everything:
    `STRATUS_KILL_GRACE_S` for `launchers.torch_distributed`, `--shutdown_timeout` for torchrun (both
    can be lowered). Workers here are CPU processes on the machine below, N of them sharing its cores.
    """
).strip()
RUN_TIMEOUT_S = 240.0
CRASH_CODE = 3

WORKLOAD = textwrap.dedent(
    """
    import datetime, os, signal, sys, threading, time
    import torch, torch.distributed as dist

    out, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, size = dist.get_rank(), dist.get_world_size()
    if mode == "hung" and rank != size - 1:
        signal.signal(signal.SIGTERM, lambda sig, frame: print("SIGTERM latched", flush=True))
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"ready pid={os.getpid()}", flush=True)
    dist.all_reduce(t)  # every "ready" line is out before anyone goes on
    if rank == size - 1:
        with open(os.path.join(out, "go")) as fifo:
            fifo.read()  # the benchmark holds every pidfd now
        crash = time.monotonic()
        with open(os.path.join(out, "crash"), "w") as f:
            f.write(repr(crash))
        os._exit(3)
    if mode == "hung":
        threading.Event().wait()  # a collective that never returns and never fails
    dist.all_reduce(t)  # never completes: the last rank is gone
    """
)


def launcher_argv(kind: str, n: int, workload: Path, out: Path, mode: str) -> list[str]:
    py = sys.executable
    if kind == "stratus":
        return [py, "-m", "launchers.torch_distributed", "--", str(workload), str(out), mode]
    return [
        py, "-m", "torch.distributed.run", "--nproc_per_node", str(n), "--master_port", str(free_port()),
        str(workload), str(out), mode,
    ]  # fmt: skip


def one_run(kind: str, n: int, mode: str, workdir: Path) -> dict[str, float | int | str]:
    out = Path(tempfile.mkdtemp(dir=workdir))
    os.mkfifo(out / "go")
    workload = workdir / "workload.py"
    env = dict(os.environ, STRATUS_SLOTS=str(n), PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    proc = subprocess.Popen(
        launcher_argv(kind, n, workload, out, mode),
        cwd=out,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    logs = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    for pipe in logs:
        sel.register(pipe, selectors.EVENT_READ, "log")
    sel.register(os.pidfd_open(proc.pid), selectors.EVENT_READ, "launcher")
    pids: set[int] = set()
    gone: dict[str, float] = {}
    deadline = time.monotonic() + RUN_TIMEOUT_S
    fired = False
    try:
        while "launcher" not in gone or any(not p.closed for p in logs):
            left = deadline - time.monotonic()
            events = sel.select(max(left, 0))
            if left <= 0 or not events:
                raise TimeoutError(
                    f"{kind} N={n} {mode}: no end after {RUN_TIMEOUT_S:g} s; {bytes(logs[proc.stderr])[-2000:]!r}"
                )
            for key, _ in events:
                if key.data == "log":
                    pipe = key.fileobj
                    data = os.read(pipe.fileno(), 65536)  # type: ignore[union-attr]
                    if data:
                        logs[pipe] += data  # type: ignore[index]
                    else:
                        sel.unregister(pipe)
                        pipe.close()  # type: ignore[union-attr]
                else:
                    gone.setdefault(str(key.data), time.monotonic())
                    sel.unregister(key.fileobj)
                    os.close(key.fd)
            pids |= {int(p) for p in re.findall(rb"ready pid=(\d+)", bytes(logs[proc.stdout]))}
            if not fired and len(pids) == n:
                for pid in pids:  # every worker is still there: the crash comes after "go"
                    sel.register(os.pidfd_open(pid), selectors.EVENT_READ, f"worker {pid}")
                with open(out / "go", "w") as fifo:
                    fifo.write("go")
                fired = True
    finally:
        sel.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    crash = float((out / "crash").read_text())
    last_worker = max(t for k, t in gone.items() if k.startswith("worker"))
    err = bytes(logs[proc.stderr]).decode(errors="replace")
    return {
        "last_worker_s": last_worker - crash,
        "launcher_s": gone["launcher"] - crash,
        "exit_code": proc.returncode,
        "names_rank": names_rank(err, n - 1),
    }


def names_rank(stderr: str, rank: int) -> str:
    """How the launcher's stderr tells which rank failed first."""
    if f"[launcher] rank {rank} exited with code {CRASH_CODE}; stopping the other workers" in stderr:
        return "one `[launcher]` line"
    root = stderr.partition("Root Cause (first observed failure)")[2]
    if re.search(rf"rank\s*:\s*{rank} ", root):
        return "torchrun's error summary (after a traceback)"
    return "no"


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"


def render(table: str, runs: int, command: str) -> str:
    """The results file: what was measured, the table, how to read it, the machine and the command."""
    about = (__doc__ or "").split("\n\n", 2)[2].split("\nBare torchrun")[0].strip()
    return (
        "# Launcher teardown after a worker crash\n\n"
        f"{about}\n\n"
        "Bare torchrun: `python3 -m torch.distributed.run --nproc_per_node N --master_port P workload.py`. "
        f"Median of {runs} runs (min–max in brackets); torch {version('torch')}.\n\n"
        f"{table}\n\n{READING}\n\nMachine: {describe()}.\n\nRun: {command} ({date.today().isoformat()}).\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["plain", "hung"], choices=["plain", "hung"])
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()

    rows: list[str] = []
    with tempfile.TemporaryDirectory(prefix="launcher-teardown-") as tmp:
        workdir = Path(tmp)
        (workdir / "workload.py").write_text(WORKLOAD)
        for mode in args.modes:
            for n in args.workers:
                for kind, label in (
                    ("stratus", "`launchers.torch_distributed`"),
                    ("torchrun", "bare torchrun"),
                ):
                    runs = []
                    for r in range(args.runs):
                        runs.append(one_run(kind, n, mode, workdir))
                        print(f"{mode} N={n} {kind} run {r + 1}: {runs[-1]}", file=sys.stderr)
                    codes = sorted({int(x["exit_code"]) for x in runs})
                    rows.append(
                        f"| {mode} | {n} | {label} | {fmt([float(x['last_worker_s']) for x in runs])} | "
                        f"{fmt([float(x['launcher_s']) for x in runs])} | {', '.join(map(str, codes))} | "
                        f"{' / '.join(sorted({str(x['names_rank']) for x in runs}))} |"
                    )
    command = "`.venv/bin/python bench/launcher_teardown.py " + " ".join(sys.argv[1:]) + "`"
    table = "\n".join(
        [
            "| survivors | N | launcher | crash → last worker gone | crash → launcher exited | exit code | "
            "first failing rank named in |",
            "|---|---:|---|---:|---:|---:|---|",
            *rows,
        ]
    )
    print(table)
    if args.write:
        RESULTS.write_text(render(table, args.runs, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())

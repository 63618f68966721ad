"""Teardown after a worker crash: `stratus.launchers.torch_distributed` next to bare torchrun, same workload.

    .venv/bin/python bench/launcher_teardown.py [--workers 2 4 8] [--runs 3] [--stack-runs 3] [--write]

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
  kill grace, 10 s for `stratus.launchers.torch_distributed` (`STRATUS_KILL_GRACE_S`), torchrun's shutdown
  timeout (30 s by default) for torchrun.

Then the same workload runs through the embedded local stack (`infra.local.stack`: moto, the Chalice
API, one local agent with 8 slots), one experiment at a time, submitted with `det experiment create`
(`slots_per_trial: N`, `max_restarts: 0`, `OMP_NUM_THREADS=1` in its environment, the launcher command as
entrypoint). The crashing worker also writes its wall-clock time (`time.time()`); reported are crash →
the agent's `run R ended` log line (the launcher has exited, the agent has killed what was left of its
process group and read its output to the end) and crash → the run's `exited_at` in DynamoDB: the exit
recorded by the control plane, after the agent shipped the run's last log lines and posted the exit;
also the log lines the agent gave up shipping (its log says how many).
The stack does not show the workers' end, only the launcher's. One more row, for the smallest N: bare
torchrun without `OMP_NUM_THREADS`, so it prints its banner, which starts with an empty line (see the
reading below). `--stack-runs` runs each (0: none), `--stack-modes` (default `plain`).

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

from bench._teardown_stack import StackBench  # noqa: E402
from bench.machine import describe  # noqa: E402
from stratus.launchers._info import free_port  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "launcher_teardown.md"
READING = textwrap.dedent(
    """
    Reading: `plain` survivors go within a fraction of a second under both launchers (gloo raises on the
    dead peer, unless the launcher's SIGTERM lands first); what differs is the launcher's own exit
    (torchrun polls its workers every 0.1 s, then prints a traceback and its error summary) and its
    exit code (torchrun's is 1, not the worker's). With `hung` survivors the kill grace is everything:
    `STRATUS_KILL_GRACE_S` for `stratus.launchers.torch_distributed`, `--shutdown_timeout` for torchrun (both
    can be lowered). Workers here are CPU processes on the machine below, N of them sharing its cores.

    Through the stack, the control plane records the exit tens of milliseconds after the agent saw the
    launcher end (the median; an outlier now and then takes up to a second): the agent first ships the
    run's last log lines (a POST: CloudWatch Logs and a DynamoDB write, in moto here), then posts the
    exit (its handler reads the run, stamps `exited_at` and writes it). So crash → exit recorded is the
    launcher's own teardown plus that, and the gap between the launchers is about the one measured
    directly: torchrun's 0.1 s polling and its error summary. The `OMP_NUM_THREADS` unset row checks
    the fix of a bug this benchmark found (commit ee748f3): the API answered HTTP 500 to a log batch
    holding an empty line (CloudWatch takes no empty message), the agent retried it until its 30 s log
    flush timeout, dropped it with every line after it, and only then reported the exit; before the
    fix that row read 34.92 s (31.04–35.44) with 47 to 57 log lines lost, on this machine. Under
    torchrun the workers share one output pipe, and two workers' `print`s at the same moment (text and
    newline are two writes when unbuffered, as trials run) leave an empty line too: that hit 3 of 9
    torchrun runs before the workload wrote each line in one `os.write`. `stratus.launchers.torch_distributed`
    reads each worker's pipe on its own and prefixes every line with `[rank=N] `: never empty.
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
        signal.signal(signal.SIGTERM, lambda sig, frame: os.write(1, b"SIGTERM latched\\n"))
    t = torch.ones(1)
    dist.all_reduce(t)
    os.write(1, f"ready pid={os.getpid()}\\n".encode())  # one write: no line of two workers interleaves
    dist.all_reduce(t)  # every "ready" line is out before anyone goes on
    if rank == size - 1:
        go = os.path.join(out, "go")
        if os.path.exists(go):  # run directly (not through the stack): wait for the benchmark's word
            with open(go) as fifo:
                fifo.read()  # the benchmark holds every pidfd now
        crash, wall = time.monotonic(), time.time()
        with open(os.path.join(out, "crash"), "w") as f:
            f.write(f"{crash!r} {wall!r}")
        os._exit(3)
    if mode == "hung":
        threading.Event().wait()  # a collective that never returns and never fails
    dist.all_reduce(t)  # never completes: the last rank is gone
    """
)


def launcher_argv(kind: str, n: int, workload: Path, out: Path, mode: str) -> list[str]:
    py = sys.executable
    if kind == "stratus":
        return [py, "-m", "stratus.launchers.torch_distributed", "--", str(workload), str(out), mode]
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
    crash = float((out / "crash").read_text().split()[0])
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


LAUNCHERS = (("stratus", "`stratus.launchers.torch_distributed`"), ("torchrun", "bare torchrun"))
BANNER = ("torchrun-banner", "bare torchrun, `OMP_NUM_THREADS` unset")


def direct_rows(args: argparse.Namespace, workdir: Path) -> list[str]:
    rows: list[str] = []
    for mode in args.modes:
        for n in args.workers:
            for kind, label in LAUNCHERS:
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
    return rows


def stack_rows(args: argparse.Namespace, workdir: Path) -> list[str]:
    rows: list[str] = []
    with StackBench(workdir / "on-stack", workdir / "workload.py") as stack:
        for mode in args.stack_modes:
            for n in args.workers:
                banner = (BANNER,) if mode == "plain" and n == min(args.workers) else ()
                for kind, label in (*LAUNCHERS, *banner):
                    runs = []
                    for r in range(args.stack_runs):
                        runs.append(stack.one_run(kind, n, mode))
                        print(f"stack {mode} N={n} {kind} run {r + 1}: {runs[-1]}", file=sys.stderr)
                    recorded = " / ".join(sorted({f"`{x['recorded']}`" for x in runs}))
                    rows.append(
                        f"| {mode} | {n} | {label} | {fmt([x['agent_s'] for x in runs])} | "
                        f"{fmt([x['recorded_s'] for x in runs])} | {recorded} | "
                        f"{', '.join(str(x['lost_lines']) for x in runs)} |"
                    )
    return rows


def render(tables: str, args: argparse.Namespace, command: str) -> str:
    """The results file: what was measured, the tables, how to read them, the machine and the command."""
    about = (__doc__ or "").split("\n\n", 2)[2].split("\nBare torchrun")[0].strip()
    stack_runs = f", {args.stack_runs} through the stack" if args.stack_runs != args.runs else ""
    return (
        "# Launcher teardown after a worker crash\n\n"
        f"{about}\n\n"
        "Bare torchrun: `python3 -m torch.distributed.run --nproc_per_node N --master_port P workload.py`. "
        f"Median of {args.runs} runs{stack_runs} (min–max in brackets); torch {version('torch')}.\n\n"
        f"{tables}\n\n{READING}\n\nMachine: {describe()}.\n\nRun: {command} ({date.today().isoformat()}).\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["plain", "hung"], choices=["plain", "hung"])
    parser.add_argument("--stack-runs", type=int, default=3, help="runs through the local stack (0: none)")
    parser.add_argument("--stack-modes", nargs="+", default=["plain"], choices=["plain", "hung"])
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="launcher-teardown-") as tmp:
        workdir = Path(tmp)
        (workdir / "workload.py").write_text(WORKLOAD)
        direct = direct_rows(args, workdir) if args.runs > 0 else []
        stacked = stack_rows(args, workdir) if args.stack_runs > 0 else []
    tables = []
    if direct:
        tables.append(
            "Run directly:\n\n"
            "| survivors | N | launcher | crash → last worker gone | crash → launcher exited | exit code | "
            "first failing rank named in |\n"
            "|---|---:|---|---:|---:|---:|---|\n" + "\n".join(direct)
        )
    if stacked:
        tables.append(
            "Through the local stack (`det experiment create`, one agent):\n\n"
            "| survivors | N | launcher | crash → agent saw the run end | crash → exit recorded "
            "(`exited_at`) | exit recorded as (code: reason) | log lines lost, each run |\n"
            "|---|---:|---|---:|---:|---|---:|\n" + "\n".join(stacked)
        )
    command = "`.venv/bin/python bench/launcher_teardown.py " + " ".join(sys.argv[1:]) + "`"
    print("\n\n".join(tables))
    if args.write:
        RESULTS.write_text(render("\n\n".join(tables), args, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())

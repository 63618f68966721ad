"""Harness overhead per batch on the embedded local stack: the same MLP trained as a plain loop, through
the Core API and by the PyTorchTrial `Trainer`, each in a trial of its own on the platform, rounds
interleaved (plain, core, trainer, plain, ...), medians over the rounds. Run from the repository root:

    .venv/bin/python bench/harness_overhead.py [--rounds 5] [--batches 4000] [--report-every 50] [--pin]
        [--report-interval S] [--write]

On a GPU machine, `--gpu` trains the probe's conv net (batch 128 of 32×32 images) on the stack's GPU
agent (one slot per GPU) and writes bench/results/harness_overhead_gpu.md; add the mode `trainer_pageable`
(`--modes plain,core,trainer,trainer_pageable`) to see what the trainer's pinned batches save, and
`trainer_blocking` to see the trainer's copies as they were (pageable, waited for).
`--from-log LOG` writes the report from a run's printed lines (`round N MODE: per batch ...`, the `machine:`
and `gpu:` lines) when the run ended before its report, e.g. with a GPU lease.

The probe is bench/contexts/overhead/probe.py; each trial prints the seconds per batch of its own
training steps (`BENCH <mode> <s>`), read back from the trial's logs. The overhead of a mode is its
median over the plain loop's median, minus one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


from bench._latency import upload_context  # noqa: E402
from bench.machine import describe  # noqa: E402
from det._client import ApiClient  # noqa: E402
from det.deploy.background import BackgroundStack  # noqa: E402

MODES = ("plain", "core", "trainer")
#: Modes the bench knows: the probe's three, the trainer with `pin_memory=False` in its DataLoader, and the
#: trainer with neither pinned batches nor non-blocking copies (as before issue 32).
KNOWN_MODES = (*MODES, "trainer_pageable", "trainer_blocking")
SCHEDULING_UNIT = 100  # Determined's default
POLL_S = 2.0


def config(mode: str, batches: int, every: int, model: str = "mlp") -> dict:
    base = {
        "name": f"overhead-{mode}",
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True, "max_length": batches},
        "max_restarts": 0,
    }
    if mode.startswith("trainer"):
        return {
            **base,
            "entrypoint": "probe:ProbeTrial",
            "hyperparameters": {
                "global_batch_size": 128 if model == "conv" else 32,
                "batches": batches,
                "model": model,
                "pin_memory": mode == "trainer",
                "blocking_copy": mode == "trainer_blocking",
            },
            "scheduling_unit": SCHEDULING_UNIT,
            "min_validation_period": {"batches": batches},
        }
    return {**base, "entrypoint": f"python3 probe.py {mode} {batches} {every} {model}"}


#: What each trial measures per batch (the probe's `BENCH` line): wall clock, the training thread's CPU, the
#: whole trial process's CPU (the harness's background threads included), the loader's time reading and
#: collating the batch, and the time outside the step (the fetch, the loop, the harness's calls).
MEASURES = (
    "wall clock",
    "training thread CPU",
    "trial process CPU",
    "fetching the batch",
    "wall clock outside the training step",
)


def one_trial(api: ApiClient, sha: str, mode: str, batches: int, every: int, model: str) -> tuple[float, ...]:
    created = api.create_experiment(
        config(mode, batches, every, model), context_sha256=sha, validate_only=False, activate=True
    )
    experiment_id = int(created["experiment"]["id"])

    def ended() -> dict | None:
        experiment = api.get_experiment(experiment_id)
        return experiment if experiment["experiment"]["state"] in ("COMPLETED", "ERROR", "CANCELED") else None

    # Polled slowly: on a small machine the bench's own requests would load the stack next to the trial.
    deadline = time.monotonic() + 600
    while (experiment := ended()) is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"experiment {experiment_id} ({mode}) did not end within 600 s")
        time.sleep(POLL_S)
    trial_id = int(experiment["trials"][0]["id"])
    for line in api.trial_logs(trial_id, limit=10_000)["logs"]:
        words = line["message"].split()
        if len(words) == 2 + len(MEASURES) and words[:2] == ["BENCH", mode.split("_")[0]]:
            if experiment["experiment"]["state"] != "COMPLETED":
                raise SystemExit(
                    f"experiment {experiment_id} ({mode}) ended {experiment['experiment']['state']}"
                )
            return tuple(float(word) for word in words[2:])
    raise SystemExit(f"experiment {experiment_id} ({mode}): no BENCH line in the trial's logs")


def _tree(pid: int) -> list[int]:
    """The process and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of the process onto `cpus` (threads and processes started later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(task.name), cpus)


def pin(stack: BackgroundStack) -> str:
    """The agent (and so every trial it starts) onto the last CPU, the stack and this script onto the
    others: separates what the harness costs the training loop from what the stack's work next to it costs
    a machine whose cores it shares."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    trial, rest = {cpus[-1]}, set(cpus[:-1])
    for pid in _tree(stack.process.pid):
        agent = b"stratus.harness.agent" in Path(f"/proc/{pid}/cmdline").read_bytes()
        _pin(pid, trial if agent else rest)
    os.sched_setaffinity(0, rest)
    return f"agent and trials on CPU {cpus[-1]}, the stack and this script on CPU {','.join(map(str, rest))}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=4000)
    parser.add_argument("--report-every", type=int, default=50)
    parser.add_argument("--pin", action="store_true", help="trials on one CPU, the stack on the others")
    parser.add_argument(
        "--report-interval",
        type=float,
        default=None,
        help="the harness's report interval (s), as a backend sets it",
    )
    parser.add_argument(
        "--gpu", action="store_true", help="the conv net on the GPU agent; writes harness_overhead_gpu.md"
    )
    parser.add_argument("--modes", default=",".join(MODES), help=f"a comma-separated choice of {KNOWN_MODES}")
    parser.add_argument("--write", action="store_true", help="write bench/results/harness_overhead.md")
    parser.add_argument("--label", default="", help="a note for the results' header (what code ran)")
    parser.add_argument("--from-log", type=Path, help="report the rounds printed in this log; run nothing")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if modes[0] != "plain" or not set(modes) <= set(KNOWN_MODES):
        parser.error(f"--modes {args.modes!r}: plain first, then any of {', '.join(KNOWN_MODES[1:])}")
    if args.from_log:
        return _write(args, _report(args, *_from_log(args, modes)))
    args.machine, args.gpu_name, args.pinned = describe(), _gpu_name() if args.gpu else "", ""
    print(f"machine: {args.machine}\ngpu: {args.gpu_name}", flush=True)
    model = "conv" if args.gpu else "mlp"
    work = Path(tempfile.mkdtemp(prefix="overhead-"))
    context = work / "context"
    context.mkdir()
    (context / "probe.py").write_text((ROOT / "bench" / "contexts" / "overhead" / "probe.py").read_text())
    env = {} if args.report_interval is None else {"STRATUS_REPORT_INTERVAL_S": str(args.report_interval)}
    # On a GPU machine the agent offers one slot per GPU (slots=None), and hands the trial its device.
    stack = BackgroundStack(work / "stack", slots=None if args.gpu else 1, env=env)
    if args.pin:
        args.pinned = pin(stack)
    results: dict[str, list[tuple[float, ...]]] = {mode: [] for mode in modes}
    started = time.monotonic()
    try:
        with ApiClient(stack.state["api_url"]) as api:
            sha = upload_context(api, context)
            for n in range(args.rounds):
                for mode in modes:
                    figures = one_trial(api, sha, mode, args.batches, args.report_every, model)
                    results[mode].append(figures)
                    shown = ", ".join(f"{m} {v * 1e6:.1f} µs" for m, v in zip(MEASURES, figures, strict=True))
                    print(f"round {n + 1} {mode}: per batch {shown}", flush=True)
    finally:
        stack.stop()
    return _write(args, _report(args, results, f"{time.monotonic() - started:.0f} s"))


def _write(args: argparse.Namespace, text: str) -> int:
    print(text)
    if args.write:
        name = "harness_overhead_gpu.md" if args.gpu else "harness_overhead.md"
        (ROOT / "bench" / "results" / name).write_text(text)
    return 0


def _from_log(args: argparse.Namespace, modes: list[str]) -> tuple[dict[str, list[tuple[float, ...]]], str]:
    """The rounds a run printed (whole rounds only: a round cut short by the run's end is left out), and
    the machine and GPU it printed it ran on."""
    found: dict[int, dict[str, tuple[float, ...]]] = {}
    args.machine, args.gpu_name, args.pinned = "not printed by the run", "not printed by the run", ""
    for line in args.from_log.read_text().splitlines():
        if line.startswith("machine: "):
            args.machine = line.removeprefix("machine: ")
        elif line.startswith("gpu: "):
            args.gpu_name = line.removeprefix("gpu: ")
        elif line.startswith("round ") and ": per batch " in line:
            head, figures = line.split(": per batch ", 1)
            _, number, mode = head.split()
            values = [float(part.split()[-2]) / 1e6 for part in figures.split(", ")]
            found.setdefault(int(number), {})[mode] = tuple(values)
    whole = [rounds for _, rounds in sorted(found.items()) if set(rounds) == set(modes)]
    if not whole:
        raise SystemExit(f"{args.from_log}: no whole round of the modes {', '.join(modes)}")
    args.rounds = len(whole)
    return {mode: [rounds[mode] for rounds in whole] for mode in modes}, f"from its log, {args.from_log.name}"


def _report(args: argparse.Namespace, results: dict[str, list[tuple[float, ...]]], elapsed: str) -> str:
    modes = list(results)
    what = (
        f"The same conv net (3→128→128→256→256→512 channels, BatchNorm, batch 128) on 32×32 synthetic images "
        f"held in a CPU dataset, trained on the GPU ({args.gpu_name}), {args.batches} batches per trial; the "
        "plain loop and the Core API mode pin their batches and copy them with `non_blocking=True`, the "
        "trainer gets Determined's `DataLoader` with its defaults"
        + (" (`trainer_pageable`: with `pin_memory=False`)" if "trainer_pageable" in modes else "")
        + (
            " (`trainer_blocking`: pageable batches copied with a blocking `.to()`)"
            if "trainer_blocking" in modes
            else ""
        )
        if args.gpu
        else f"The same MLP (64→128→10, batch 32, one thread) on scikit-learn's digits, {args.batches} batches "
        "per trial"
    )
    lines = [
        "# Harness overhead per batch on the embedded local stack" + (" (GPU)" if args.gpu else ""),
        "",
        f"Machine: {args.machine}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. {args.label}  ",
        f"Command: `.venv/bin/python bench/harness_overhead.py --rounds {args.rounds} --batches {args.batches} "
        f"--report-every {args.report_every}{' --pin' if args.pin else ''}{' --gpu' if args.gpu else ''}"
        f"{'' if args.modes == ','.join(MODES) else f' --modes {args.modes}'}"
        f"{'' if args.report_interval is None else f' --report-interval {args.report_interval:g}'}"
        f"{' --write' if args.write else ''}` ({elapsed})."
        + (f" Pinned: {args.pinned}." if args.pinned else ""),
        "",
        f"{what}; the Core API mode reports a training metric and progress every {args.report_every} batches "
        f"and asks `should_preempt()` after every batch; the trainer reports every {SCHEDULING_UNIT} "
        "(scheduling_unit). Rounds interleave the modes; each trial times its own steps three ways: "
        "wall clock, CPU of the training thread, CPU of the whole trial process (the harness's background "
        "sender included).",
    ]
    for index, measure in enumerate(MEASURES[:3]):  # the last two enter `_inside`
        lines += ["", f"## {measure[0].upper()}{measure[1:]} per batch", ""]
        lines += _table({mode: [figures[index] for figures in results[mode]] for mode in modes})
    return "\n".join(lines + _inside(results)) + "\n"


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU found by this script"


def _inside(results: dict[str, list[tuple[float, ...]]]) -> list[str]:
    """The harness's cost measured inside each trial, where the host's drift between trials cancels: the
    time outside the training step against the plain loop's (same round), and the CPU of the trial's
    other threads against the training thread's."""
    lines = [
        "",
        "## Measured inside each trial",
        "",
        "Loop and harness: the wall clock from the end of `optimizer.step()` to the next batch's start, "
        "less the time the loader spent reading and collating the samples (timed by the dataset and "
        "collate function): the loader's and the loop's own machinery, plus the harness's calls in the Core "
        "API mode or the trainer's bookkeeping. Harness per batch: that time minus the same round's plain "
        "loop's, over the plain loop's whole batch. Background: the trial process's CPU beyond its "
        "training thread (the report sender, the preemption watcher), over the training thread's.",
        "",
        "| mode | loop and harness, median µs per batch | harness per batch: median of the rounds' | "
        "background CPU, median µs per batch | of the training thread's |",
        "|---|---:|---:|---:|---:|",
    ]
    plain = results["plain"]
    for mode, rows in results.items():
        harness = (
            ""
            if mode == "plain"
            else f"{statistics.median((r[4] - r[3] - p[4] + p[3]) / p[0] for r, p in zip(rows, plain, strict=True)) * 100:+.2f}%"
        )
        background = [r[2] - r[1] for r in rows]
        share = statistics.median((r[2] - r[1]) / r[1] for r in rows)
        lines.append(
            f"| {mode} | {statistics.median(r[4] - r[3] for r in rows) * 1e6:.1f} | {harness} | "
            f"{statistics.median(background) * 1e6:.1f} | {share * 100:.2f}% |"
        )
    return lines


def _table(results: dict[str, list[float]]) -> list[str]:
    plain = statistics.median(results["plain"])
    lines = [
        "| mode | median µs | min | max | overhead: median of the rounds' | of the medians | of the minima |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, values in results.items():
        median = statistics.median(values)
        if mode == "plain":
            overheads = ["", "", ""]
        else:
            rounds = [v / p - 1 for v, p in zip(values, results["plain"], strict=True)]
            overheads = [
                f"{statistics.median(rounds) * 100:+.1f}%",
                f"{(median / plain - 1) * 100:+.1f}%",
                f"{(min(values) / min(results['plain']) - 1) * 100:+.1f}%",
            ]
        lines.append(
            f"| {mode} | {median * 1e6:.1f} | {min(values) * 1e6:.1f} | {max(values) * 1e6:.1f} | "
            + " | ".join(overheads)
            + " |"
        )
    per_round = [
        " · ".join(
            f"{mode} {(results[mode][i] / results['plain'][i] - 1) * 100:+.1f}%" for mode in list(results)[1:]
        )
        for i in range(len(results["plain"]))
    ]
    return [*lines, "", "Per round, against that round's plain loop: " + "; ".join(per_round) + "."]


if __name__ == "__main__":
    sys.exit(main())

"""Harness overhead per batch on the embedded local stack: the same MLP trained as a plain loop, through
the Core API and by the PyTorchTrial `Trainer`, each in a trial of its own on the platform, rounds
interleaved (plain, core, trainer, plain, ...), medians over the rounds. Run from the repository root:

    .venv/bin/python bench/harness_overhead.py [--rounds 5] [--batches 4000] [--report-every 50] [--pin]
        [--report-interval S] [--write]

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
SCHEDULING_UNIT = 100  # Determined's default
POLL_S = 2.0


def config(mode: str, batches: int, every: int) -> dict:
    base = {
        "name": f"overhead-{mode}",
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True, "max_length": batches},
        "max_restarts": 0,
    }
    if mode == "trainer":
        return {
            **base,
            "entrypoint": "probe:ProbeTrial",
            "hyperparameters": {"global_batch_size": 32, "batches": batches},
            "scheduling_unit": SCHEDULING_UNIT,
            "min_validation_period": {"batches": batches},
        }
    return {**base, "entrypoint": f"python3 probe.py {mode} {batches} {every}"}


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


def one_trial(api: ApiClient, sha: str, mode: str, batches: int, every: int) -> tuple[float, ...]:
    created = api.create_experiment(
        config(mode, batches, every), context_sha256=sha, validate_only=False, activate=True
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
        if len(words) == 2 + len(MEASURES) and words[:2] == ["BENCH", mode]:
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
    parser.add_argument("--write", action="store_true", help="write bench/results/harness_overhead.md")
    parser.add_argument("--label", default="", help="a note for the results' header (what code ran)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="overhead-"))
    context = work / "context"
    context.mkdir()
    (context / "probe.py").write_text((ROOT / "bench" / "contexts" / "overhead" / "probe.py").read_text())
    env = {} if args.report_interval is None else {"STRATUS_REPORT_INTERVAL_S": str(args.report_interval)}
    stack = BackgroundStack(work / "stack", slots=1, env=env)
    args.pinned = pin(stack) if args.pin else ""
    results: dict[str, list[tuple[float, ...]]] = {mode: [] for mode in MODES}
    started = time.monotonic()
    try:
        with ApiClient(stack.state["api_url"]) as api:
            sha = upload_context(api, context)
            for n in range(args.rounds):
                for mode in MODES:
                    figures = one_trial(api, sha, mode, args.batches, args.report_every)
                    results[mode].append(figures)
                    shown = ", ".join(f"{m} {v * 1e6:.1f} µs" for m, v in zip(MEASURES, figures, strict=True))
                    print(f"round {n + 1} {mode}: per batch {shown}", flush=True)
    finally:
        stack.stop()
    text = _report(args, results, time.monotonic() - started)
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "harness_overhead.md").write_text(text)
    return 0


def _report(args: argparse.Namespace, results: dict[str, list[tuple[float, ...]]], elapsed: float) -> str:
    lines = [
        "# Harness overhead per batch on the embedded local stack",
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. {args.label}  ",
        f"Command: `.venv/bin/python bench/harness_overhead.py --rounds {args.rounds} --batches {args.batches} "
        f"--report-every {args.report_every}{' --pin' if args.pin else ''}"
        f"{'' if args.report_interval is None else f' --report-interval {args.report_interval:g}'}"
        f"{' --write' if args.write else ''}` ({elapsed:.0f} s)."
        + (f" Pinned: {args.pinned}." if args.pinned else ""),
        "",
        f"The same MLP (64→128→10, batch 32, one thread) on scikit-learn's digits, {args.batches} batches per "
        f"trial; the Core API mode reports a training metric and progress every {args.report_every} batches "
        f"and asks `should_preempt()` after every batch; the trainer reports every {SCHEDULING_UNIT} "
        "(scheduling_unit). Rounds interleave the three modes; each trial times its own steps three ways: "
        "wall clock, CPU of the training thread, CPU of the whole trial process (the harness's background "
        "sender included).",
    ]
    for index, measure in enumerate(MEASURES[:3]):  # the last two enter `_inside`
        lines += ["", f"## {measure[0].upper()}{measure[1:]} per batch", ""]
        lines += _table({mode: [figures[index] for figures in results[mode]] for mode in MODES})
    return "\n".join(lines + _inside(results)) + "\n"


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
    for mode in MODES:
        rows = results[mode]
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
    for mode in MODES:
        values = results[mode]
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
        " · ".join(f"{mode} {(results[mode][i] / results['plain'][i] - 1) * 100:+.1f}%" for mode in MODES[1:])
        for i in range(len(results["plain"]))
    ]
    return [*lines, "", "Per round, against that round's plain loop: " + "; ".join(per_round) + "."]


if __name__ == "__main__":
    sys.exit(main())

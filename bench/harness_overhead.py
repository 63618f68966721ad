"""Harness overhead per batch on the embedded local stack: the same MLP trained as a plain loop, through
the Core API and by the PyTorchTrial `Trainer`, each in a trial of its own on the platform, rounds
interleaved (plain, core, trainer, plain, ...), medians over the rounds. Run from the repository root:

    .venv/bin/python bench/harness_overhead.py [--rounds 5] [--batches 4000] [--report-every 50] [--write]

The probe is bench/contexts/overhead/probe.py; each trial prints the seconds per batch of its own
training steps (`BENCH <mode> <s>`), read back from the trial's logs. The overhead of a mode is its
median over the plain loop's median, minus one.
"""

from __future__ import annotations

import argparse
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
from infra.local_stack import BackgroundStack  # noqa: E402

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


def one_trial(api: ApiClient, sha: str, mode: str, batches: int, every: int) -> float:
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
        if len(words) == 3 and words[:2] == ["BENCH", mode]:
            if experiment["experiment"]["state"] != "COMPLETED":
                raise SystemExit(
                    f"experiment {experiment_id} ({mode}) ended {experiment['experiment']['state']}"
                )
            return float(words[2])
    raise SystemExit(f"experiment {experiment_id} ({mode}): no BENCH line in the trial's logs")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=4000)
    parser.add_argument("--report-every", type=int, default=50)
    parser.add_argument("--write", action="store_true", help="write bench/results/harness_overhead.md")
    parser.add_argument("--label", default="", help="a note for the results' header (what code ran)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="overhead-"))
    context = work / "context"
    context.mkdir()
    (context / "probe.py").write_text((ROOT / "bench" / "contexts" / "overhead" / "probe.py").read_text())
    stack = BackgroundStack(work / "stack", slots=1)
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    started = time.monotonic()
    try:
        with ApiClient(stack.state["api_url"]) as api:
            sha = upload_context(api, context)
            for n in range(args.rounds):
                for mode in MODES:
                    seconds = one_trial(api, sha, mode, args.batches, args.report_every)
                    results[mode].append(seconds)
                    print(f"round {n + 1} {mode}: {seconds * 1e6:.1f} µs per batch", flush=True)
    finally:
        stack.stop()
    text = _report(args, results, time.monotonic() - started)
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "harness_overhead.md").write_text(text)
    return 0


def _report(args: argparse.Namespace, results: dict[str, list[float]], elapsed: float) -> str:
    plain = statistics.median(results["plain"])
    lines = [
        "# Harness overhead per batch on the embedded local stack",
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. {args.label}  ",
        f"Command: `.venv/bin/python bench/harness_overhead.py --rounds {args.rounds} --batches {args.batches} "
        f"--report-every {args.report_every}{' --write' if args.write else ''}` ({elapsed:.0f} s).",
        "",
        f"The same MLP (64→128→10, batch 32, one thread) on scikit-learn's digits, {args.batches} batches per "
        f"trial; the Core API mode reports a training metric and progress every {args.report_every} batches "
        f"and asks `should_preempt()` after every batch; the trainer reports every {SCHEDULING_UNIT} "
        "(scheduling_unit). Rounds interleave the three modes; each trial times its own steps.",
        "",
        "| mode | median µs per batch | min | max | overhead: median of the rounds' | of the medians | of the minima |",
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
    lines += ["", "Per round, against that round's plain loop: " + "; ".join(per_round) + ".", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

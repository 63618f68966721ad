"""Submit latency on the embedded local stack: `det experiment create` → first training metric, broken
down by stage. Run from the repository root:

    .venv/bin/python bench/submit_latency.py [--runs 5] [--write]

Each run changes one file of the probe's context, so every run packs and uploads for real. Stage
boundaries come from the CLI's own timings (pack, upload, API), the Step Functions execution history,
the run record's timestamps (queued, assigned, launched, started) and the probe's own clock readings
(process start, imports done, first batch). All clocks are this machine's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import boto3

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.machine import describe  # noqa: E402
from det._client import ApiClient  # noqa: E402
from det._context import pack  # noqa: E402
from det.deploy.background import BackgroundStack  # noqa: E402

STAGES = [
    ("pack", "pack the context (tar + zstd + sha256)"),
    ("upload", "POST /contexts + PUT to the presigned URL"),
    ("api", "POST /experiments (validate, record, start the execution)"),
    ("step_functions", "execution start → slot request consumed by the scheduler"),
    ("schedule", "scheduler pass: request queued → slots granted"),
    ("launch", "grant → launch message consumed (Launch state + queue)"),
    ("agent", "launch → process spawned (doorbell rung, heartbeat, download, extract)"),
    ("process_start", "spawn → Python, torch and harness imported"),
    ("init", "imports → stratus.harness.init() returned (GET /info)"),
    ("first_batch", "init → first batch done (model, data, forward, backward)"),
    ("report", "first batch → metric readable through the API"),
]


def _iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _wait_idle(api: ApiClient, experiment_id: int) -> None:
    """Until the run's experiment has ended and no job holds or waits for a slot: the next run starts on
    an idle stack, so no stage counts a wait behind this one."""
    deadline = time.monotonic() + 180
    while (
        api.get_experiment(experiment_id)["experiment"]["state"] not in ("COMPLETED", "ERROR", "CANCELED")
        or api.list_jobs()
    ):
        if time.monotonic() > deadline:
            raise SystemExit(f"experiment {experiment_id}: the stack was not idle within 180 s")
        time.sleep(0.2)


def one_run(api: ApiClient, moto_url: str, context: Path, n: int) -> dict[str, float]:
    (context / "nonce.txt").write_text(f"{n} {time.time()}\n")
    t0 = time.time()
    packed = pack(context)
    t_packed = time.time()
    answer = api.request_context_upload(packed.sha256, len(packed.data))
    if answer.get("upload"):
        api.upload(answer["upload"], packed.data)
    t_uploaded = time.time()
    import yaml

    config = yaml.safe_load((context / "probe.yaml").read_text())
    created = api.create_experiment(config, context_sha256=packed.sha256, validate_only=False, activate=True)
    t_created = time.time()
    experiment_id = int(created["experiment"]["id"])
    trial_id = None
    metric = None
    deadline = time.monotonic() + 180
    while metric is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"experiment {experiment_id}: no training metric within 180 s")
        if trial_id is None:
            trials = api.get_experiment(experiment_id).get("trials", [])
            trial_id = int(trials[0]["id"]) if trials else None
        if trial_id is not None:
            rows = api.trial_metrics(trial_id, "training")
            metric = rows[0]["metrics"] if rows else None
        if metric is None:
            time.sleep(0.02)
    t_visible = time.time()

    kwargs = {
        "endpoint_url": moto_url,
        "region_name": "us-east-1",
        "aws_access_key_id": "stratus-local",
        "aws_secret_access_key": "stratus-local",
    }
    run = (
        boto3.resource("dynamodb", **kwargs)
        .Table("stratus-runs")
        .get_item(Key={"run_id": f"{trial_id}.1"})["Item"]
    )
    sfn = boto3.client("stepfunctions", **kwargs)
    machine = sfn.list_state_machines()["stateMachines"][0]["stateMachineArn"]
    execution = machine.replace(":stateMachine:", ":execution:") + f":trial-{trial_id}-0"
    started_exec = sfn.describe_execution(executionArn=execution)["startDate"].timestamp()
    _wait_idle(api, experiment_id)
    return {
        "pack": t_packed - t0,
        "upload": t_uploaded - t_packed,
        "api": t_created - t_uploaded,
        "step_functions": _iso(run["queued_at"]) - started_exec,
        "schedule": _iso(run["assigned_at"]) - _iso(run["queued_at"]),
        "launch": _iso(run["launched_at"]) - _iso(run["assigned_at"]),
        "agent": _iso(run["started_at"]) - _iso(run["launched_at"]),
        "process_start": float(metric["t_imported"]) - _iso(run["started_at"]),
        "init": float(metric["t_init"]) - float(metric["t_imported"]),
        "first_batch": float(metric["t_first_batch"]) - float(metric["t_init"]),
        "report": t_visible - float(metric["t_first_batch"]),
        "total": t_visible - t0,
        "context_bytes": float(len(packed.data)),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--warm-start",
        action="store_true",
        help="the stack's agent forks trials from its warm interpreter (results: submit_latency_warm.md)",
    )
    parser.add_argument("--write", action="store_true", help="write bench/results/submit_latency[_warm].md")
    args = parser.parse_args()
    work = Path(
        tempfile.mkdtemp(
            prefix="latency-", dir=ROOT / "bench" / ".work" if (ROOT / "bench" / ".work").exists() else None
        )
    )
    context = work / "context"
    context.mkdir()
    for name in ("probe.py", "probe.yaml"):
        (context / name).write_text((ROOT / "bench" / "contexts" / "latency" / name).read_text())
    stack = BackgroundStack(
        work / "stack", slots=1, env={"STRATUS_WARM_START": "1"} if args.warm_start else None
    )
    state = stack.state
    results = []
    try:
        with ApiClient(state["api_url"]) as api:
            for n in range(args.runs):
                results.append(one_run(api, state["moto_url"], context, n))
                print(f"run {n + 1}: total {results[-1]['total']:.2f} s", flush=True)
    finally:
        stack.stop()

    warm = " --warm-start" if args.warm_start else ""
    lines = [
        "# Submit latency on the embedded local stack" + (", warm start" if args.warm_start else ""),
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. Runs: {args.runs} (the first includes the stack's warm-up), "
        "each on an idle stack (the previous run ended and its slot free). "
        "Command: `.venv/bin/python bench/submit_latency.py --runs "
        f"{args.runs}{warm} --write`."
        + (
            " The agent forks each trial from its warm interpreter (`det deploy local up --warm-start`): "
            "`process_start` is the fork, and the imports the trial still makes beyond the warm ones."
            if args.warm_start
            else ""
        ),
        "",
        "| stage | what | median s | min s | max s |",
        "|---|---|---:|---:|---:|",
    ]
    for key, what in [*STAGES, ("total", "`det experiment create` → first training metric")]:
        values = [r[key] for r in results]
        lines.append(
            f"| {key} | {what} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |"
        )
    lines += ["", f"Context archive: {results[0]['context_bytes']:.0f} bytes.", ""]
    text = "\n".join(lines)
    print(text)
    if args.write:
        name = "submit_latency_warm.md" if args.warm_start else "submit_latency.md"
        (ROOT / "bench" / "results" / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Control-plane requests per trial-hour on the embedded local stack, by service, priced at AWS list prices.
Run from the repository root:

    .venv/bin/python bench/control_plane_cost.py [--minutes 3] [--idle-minutes 2] [--step 0.05] [--write]

The stack runs with the AWS defaults (agents heartbeat every 120 s, `STRATUS_AGENT_HEARTBEAT_S`; trials
send their reports every 120 s, `STRATUS_REPORT_INTERVAL_S`; the local stack's own defaults are 5 s). It counts every request its API was asked
(each an API Gateway request and a Lambda invocation on AWS) and every request to the AWS services (moto),
by operation (`infra.local.moto_compat.RequestCounts`); Step Functions transitions are read from the trial's
execution history. Two phases: one agent idle (the cost of an agent-hour with nothing to run), then one
trial of bench/contexts/cost/trial.py (a GPU's pace: `--step` seconds a step, a metric every 100 steps, a
validation and a 1 MB checkpoint every 1,000). The bench's own polling is left out of the counts.

What the trial's code chooses is billed apart from the control plane (`split`): its checkpoints (the
`/checkpoints` routes, their S3 PUTs and GETs, the checkpoints table) and its metric rows (the metrics
table: one row per report it makes). Everything else (heartbeats, report batches, the searcher, the
workflow, the queue) is the control plane, and is what the $0.001 per trial-hour target is about.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import boto3
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._latency import upload_context  # noqa: E402
from bench.machine import describe  # noqa: E402
from chalicelib.settings import (  # noqa: E402
    AGENT_TIMEOUT_BEATS,
    DEFAULT_AGENT_HEARTBEAT_S,
    DEFAULT_REPORT_INTERVAL_S,
)
from det._client import ApiClient  # noqa: E402
from det.deploy.background import BackgroundStack  # noqa: E402
from infra.aws.template_app import MEMORY_MB  # noqa: E402
from infra.local.moto_compat import COUNTS_PATH  # noqa: E402

# AWS list prices, us-east-1, USD (2025): per request unless named.
API_GATEWAY_REST = 3.50e-6  # Chalice deploys a REST API
API_GATEWAY_HTTP = 1.00e-6
LAMBDA_REQUEST = 0.20e-6
LAMBDA_GB_S = 16.6667e-6
LAMBDA_GB = MEMORY_MB / 1024  # the functions' size in the template
LAMBDA_MS = 40  # assumed billed duration of one handler (a few DynamoDB calls)
DYNAMO_WRITE = 0.625e-6  # on-demand, per write request unit (an item under 1 KB)
DYNAMO_READ = 0.125e-6  # on-demand, per read request unit (strongly consistent, under 4 KB)
SQS_STANDARD = 0.40e-6
SQS_FIFO = 0.50e-6
SFN_TRANSITION = 25e-6
LOG_GB = 0.50  # CloudWatch Logs ingestion, per GB
EMF_BYTES = 700  # one embedded-metric-format document of a report batch or a pool's pass (telemetry)
S3_WRITE = 5e-6
S3_READ = 0.4e-6
LAMBDA_INVOCATION = LAMBDA_REQUEST + LAMBDA_GB_S * LAMBDA_GB * LAMBDA_MS / 1000

WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
QUEUES_OF_LAMBDAS = ("scheduler", "launch", "events")


def counts(moto_url: str, *, reset: bool = False) -> Counter[tuple[str, str]]:
    answer = (httpx.delete if reset else httpx.get)(moto_url + COUNTS_PATH, timeout=10).raise_for_status()
    return Counter({(row["service"], row["operation"]): row["count"] for row in answer.json()})


def priced(
    seen: Counter[tuple[str, str]], lambda_messages: int, transitions: int
) -> list[tuple[str, float, float]]:
    """(what, requests, USD) per line of the bill for `seen` requests."""
    api = sum(n for (service, _), n in seen.items() if service == "api")
    writes = sum(n for (s, o), n in seen.items() if s == "dynamodb" and o in WRITES)
    reads = sum(n for (s, o), n in seen.items() if s == "dynamodb" and o in READS)
    bells = sum(n for (s, o), n in seen.items() if s == "sqs" and o.endswith("(agent bell)"))
    s3_writes = sum(n for (s, o), n in seen.items() if s == "s3" and o in ("PUT", "POST", "DELETE"))
    s3_reads = sum(n for (s, o), n in seen.items() if s == "s3" and o in ("GET", "HEAD"))
    logs = sum(n for (s, o), n in seen.items() if s == "logs")
    metrics = sum(n for (_, o), n in seen.items() if o == "PutMetricData")
    return [
        ("API Gateway (REST) requests", api, api * API_GATEWAY_REST),
        ("Lambda invocations behind the API", api, api * LAMBDA_INVOCATION),
        ("Lambda invocations by queue messages", lambda_messages, lambda_messages * LAMBDA_INVOCATION),
        (
            "SQS for those messages (send, receive, delete)",
            3 * lambda_messages,
            3 * lambda_messages * SQS_FIFO,
        ),
        ("SQS agent bells (rings and long polls)", bells, bells * SQS_STANDARD),
        ("DynamoDB writes", writes, writes * DYNAMO_WRITE),
        ("DynamoDB reads", reads, reads * DYNAMO_READ),
        ("Step Functions transitions", transitions, transitions * SFN_TRANSITION),
        ("S3 writes (checkpoint and context PUTs)", s3_writes, s3_writes * S3_WRITE),
        ("S3 reads", s3_reads, s3_reads * S3_READ),
        ("CloudWatch Logs requests (ingestion priced by GB, not here)", logs, 0.0),
        (
            "CloudWatch metrics (embedded metric format documents)",
            metrics,
            metrics * EMF_BYTES * LOG_GB / 1e9,
        ),
    ]


#: The tables that hold what the trial's code chose to store (a row per metric report, per checkpoint).
TRIAL_TABLES = ("metrics", "checkpoints")


def split(seen: Counter[tuple[str, str]]) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """`seen` as (the control plane's requests, the trial's own: its checkpoints and metric rows), by the
    route, the service and the DynamoDB table each request named (`infra.local.moto_compat` counts by table)."""
    trial: Counter[tuple[str, str]] = Counter()
    for (service, operation), n in seen.items():
        if (service == "api" and "/checkpoints" in operation) or service == "s3":
            trial[(service, operation)] += n
        elif service == "dynamodb by table":
            op, _, table = operation.partition(" ")
            if table in TRIAL_TABLES:
                trial[("dynamodb", op)] += n
    control = Counter(
        {
            k: n - trial.get(k, 0)
            for k, n in seen.items()
            if not k[0].startswith("dynamodb by") and n - trial.get(k, 0)
        }
    )
    return control, trial


def lambda_messages(seen: Counter[tuple[str, str]]) -> int:
    """Messages sent to the control plane's own queues: each is one Lambda invocation on AWS."""
    return sum(n for (s, o), n in seen.items() if s == "sqs" and o == "SendMessage")


def transitions(moto_url: str, trial_id: int) -> int:
    sfn = boto3.client(
        "stepfunctions",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id="stratus-local",
        aws_secret_access_key="stratus-local",
    )
    total = 0
    for machine in sfn.list_state_machines()["stateMachines"]:
        for execution in sfn.list_executions(stateMachineArn=machine["stateMachineArn"])["executions"]:
            if f"trial-{trial_id}-" in execution["name"]:
                events = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)
                total += sum(1 for e in events["events"] if e["type"].endswith("StateEntered"))
    return total


@dataclass
class Measured:
    """One trial's requests: the whole of it and its steady state (between 10% and 80% of its steps)."""

    validate_every: int
    state: str
    busy: Counter[tuple[str, str]]
    busy_s: float
    steady: Counter[tuple[str, str]]
    steady_s: float
    sfn: int

    @property
    def hour(self) -> float:
        return 3600 / self.steady_s

    @property
    def validations(self) -> int:
        """Validations (each with its checkpoint) in the steady state."""
        return self.steady.get(("api", "POST /trials/{n}/checkpoints"), 0)


def run_trial(
    api: ApiClient, moto: str, sha: str, steps: int, step_s: float, validate_every: int
) -> Measured:
    counts(moto, reset=True)
    started = time.monotonic()
    config = {
        "name": f"cost-{validate_every}",
        "entrypoint": f"python3 trial.py {step_s} {validate_every}",
        "searcher": {"name": "single", "metric": "accuracy", "smaller_is_better": False, "max_length": steps},
        "max_restarts": 0,
    }
    created = api.create_experiment(config, context_sha256=sha, validate_only=False, activate=True)
    experiment_id = int(created["experiment"]["id"])
    polls = 0
    window: list[tuple[float, Counter[tuple[str, str]], int]] = []  # the steady state's ends
    while True:
        time.sleep(10)
        polls += 1
        experiment = api.get_experiment(experiment_id)
        if experiment["experiment"]["state"] in ("COMPLETED", "ERROR", "CANCELED"):
            break
        done = (experiment.get("trials") or [{}])[0].get("total_batches") or 0
        if (len(window) == 0 and done >= 0.1 * steps) or (len(window) == 1 and done >= 0.8 * steps):
            window.append((time.monotonic(), counts(moto), polls))
    busy = counts(moto)
    busy_s = time.monotonic() - started
    busy[("api", "GET /experiments/{n}")] -= polls  # the bench's own
    if len(window) < 2:
        raise SystemExit("the trial ended before a steady state was seen; give it more --minutes")
    (t1, c1, p1), (t2, c2, p2) = window
    steady = c2 - c1
    steady[("api", "GET /experiments/{n}")] -= p2 - p1
    trial_id = int(experiment["trials"][0]["id"])
    state = experiment["experiment"]["state"]
    print(f"trial validating every {validate_every} steps: {state}", flush=True)
    return Measured(validate_every, state, busy, busy_s, steady, t2 - t1, transitions(moto, trial_id))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=3.0, help="each trial's length")
    parser.add_argument("--idle-minutes", type=float, default=2.0)
    parser.add_argument("--step", type=float, default=0.05, help="seconds per training step")
    parser.add_argument(
        "--validate-every", type=int, default=1000, help="the busy trial's steps a validation"
    )
    parser.add_argument("--write", action="store_true", help="write bench/results/control_plane_cost.md")
    args = parser.parse_args()
    steps = int(args.minutes * 60 / args.step) // 1000 * 1000 or 1000
    work = Path(tempfile.mkdtemp(prefix="cost-"))
    context = work / "context"
    context.mkdir()
    (context / "trial.py").write_text((ROOT / "bench" / "contexts" / "cost" / "trial.py").read_text())
    aws_defaults = {
        "STRATUS_AGENT_HEARTBEAT_S": f"{DEFAULT_AGENT_HEARTBEAT_S:g}",
        "STRATUS_REPORT_INTERVAL_S": f"{DEFAULT_REPORT_INTERVAL_S:g}",
    }
    stack = BackgroundStack(work / "stack", slots=1, env=aws_defaults)
    moto = stack.state["moto_url"]
    try:
        with ApiClient(stack.state["api_url"]) as api:
            sha = upload_context(api, context)
            time.sleep(DEFAULT_AGENT_HEARTBEAT_S + 5)  # a whole heartbeat interval: the agent has its bell
            counts(moto, reset=True)
            idle_started = time.monotonic()
            time.sleep(args.idle_minutes * 60)
            idle = counts(moto)
            idle_s = time.monotonic() - idle_started
            print(f"idle {idle_s:.0f} s: {sum(idle.values())} requests", flush=True)
            quiet = run_trial(api, moto, sha, steps, args.step, steps)  # validates once, at its end
            busy = run_trial(api, moto, sha, steps, args.step, args.validate_every)
    finally:
        stack.stop()
    text = _report(args, steps, idle, idle_s, quiet, busy)
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "control_plane_cost.md").write_text(text)
    return 0


def _usd(seen: Counter[tuple[str, str]], sfn: int) -> float:
    return sum(usd for _, _, usd in priced(seen, lambda_messages(seen), sfn))


def _table(seen: Counter[tuple[str, str]], sfn: int, unit: str) -> list[str]:
    rows = priced(seen, lambda_messages(seen), sfn)
    lines = [f"| what | requests {unit} | USD {unit} |", "|---|---:|---:|"]
    for what, n, usd in rows:
        lines.append(f"| {what} | {n:,.1f} | {usd:.6f} |")
    lines.append(f"| **total** | | **{sum(usd for _, _, usd in rows):.6f}** |")
    return lines


def _scaled(seen: Counter[tuple[str, str]], factor: float) -> Counter[tuple[str, str]]:
    """`seen` times `factor` (request rates per hour or per event: fractions)."""
    scaled: Counter[tuple[str, str]] = Counter()
    for key, n in seen.items():
        scaled[key] = n * factor  # type: ignore[assignment]
    return scaled


def _less(a: Counter[tuple[str, str]], b: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    """a - b, key by key, never below 0 (Counter's `-` for fractional counts)."""
    less: Counter[tuple[str, str]] = Counter()
    for key in a:
        less[key] = max(0.0, a[key] - b.get(key, 0))  # type: ignore[assignment]
    return less


def _per_hour(trial: Measured) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    control, own = split(trial.steady)
    return _scaled(control, trial.hour), _scaled(own, trial.hour)


def _http(seen: Counter[tuple[str, str]]) -> float:
    """What `seen` costs with an HTTP API instead of the REST API Chalice deploys."""
    api = sum(n for (s, _), n in seen.items() if s == "api")
    return _usd(seen, 0) - api * (API_GATEWAY_REST - API_GATEWAY_HTTP)


def _report(args, steps, idle, idle_s, quiet: Measured, busy: Measured) -> str:  # noqa: ANN001
    control, own = _per_hour(quiet)
    busy_control, busy_own = _per_hour(busy)
    # One validation with its checkpoint: what the busy trial's steady hour has more than the quiet one's.
    n = busy.validations * busy.hour
    per_control = _scaled(_less(busy_control, control), 1 / n) if n else Counter()
    per_own = _scaled(_less(busy_own, own), 1 / n) if n else Counter()
    running = _usd(control, 0)
    control_whole, _ = split(quiet.busy)
    once = max(0.0, _usd(control_whole, quiet.sfn) - running * quiet.busy_s / 3600)
    every = busy.validate_every * args.step
    ops = ["| service | operation | quiet trial, per hour | busy trial, per hour |", "|---|---|---:|---:|"]
    for key in sorted(set(quiet.steady) | set(busy.steady), key=lambda k: -busy.steady.get(k, 0)):
        a, b = quiet.steady.get(key, 0) * quiet.hour, busy.steady.get(key, 0) * busy.hour
        if a or b:
            ops.append(f"| {key[0]} | {key[1]} | {a:,.0f} | {b:,.0f} |")
    return "\n".join(
        [
            "# Control-plane cost per trial-hour, counted on the embedded local stack",
            "",
            f"Machine: {describe()}.  ",
            f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/control_plane_cost.py "
            f"--minutes {args.minutes:g} --idle-minutes {args.idle_minutes:g} --step {args.step:g} "
            f"--validate-every {args.validate_every}{' --write' if args.write else ''}`.",
            "",
            f"AWS defaults: agents heartbeat every {DEFAULT_AGENT_HEARTBEAT_S:g} s (a lost agent is noticed "
            f"after {AGENT_TIMEOUT_BEATS} missed beats) and learn of work by their doorbell (an SQS long poll, "
            f"presigned); trials send their reports every {DEFAULT_REPORT_INTERVAL_S:g} s and, under an agent, "
            "heartbeat once a minute. "
            f"Prices: us-east-1 list prices; Lambda at {MEMORY_MB} MB and an assumed {LAMBDA_MS} ms per "
            "invocation; DynamoDB on demand, one request unit per call (items under 1 KB); SQS FIFO for the "
            f"control plane's queues; CloudWatch metrics as embedded metric format, {EMF_BYTES} bytes of log "
            "a document at the ingestion price (the local stack's PutMetricData calls stand for them). The "
            "stack's one-minute sweep is counted in full against the one trial (on AWS it runs per stack, "
            "whatever runs).",
            "",
            f"Two trials of bench/contexts/cost/trial.py, one after the other, {steps} steps of {args.step:g} s "
            "each and a training metric every 100 steps: a **quiet** one that validates and checkpoints once, "
            f"at its end ({quiet.busy_s / 60:.1f} min from submit to its end, {quiet.state}), and a **busy** "
            f"one that validates with a 1 MB checkpoint every {busy.validate_every} steps ({every:g} s; "
            f"{busy.busy_s / 60:.1f} min, {busy.state}). Each trial's steady state is counted between 10% and "
            "80% of its steps. What a trial's code chooses to store is billed apart from the control plane: "
            "its checkpoints (their routes, S3 requests and records) and its metric rows (a row per report). "
            "A validation's price is what the busy trial's hour has more than the quiet one's, per validation.",
            "",
            "| | USD |",
            "|---|---:|",
            f"| **control plane, a running trial, per trial-hour** (target: under 0.001) | **{running:.6f}** |",
            f"| the same with an HTTP API instead of the REST API | {_http(control):.6f} |",
            f"| control plane, once per trial (submit, queue, launch, transitions, its end) | {once:.6f} |",
            f"| control plane, each validation (its searcher event and records) | {_usd(per_control, 0):.6f} |",
            f"| the trial's own, each validation with its checkpoint (S3, records) | {_usd(per_own, 0):.6f} |",
            f"| the trial's own metric rows, per trial-hour (a report every 100 steps) | {_usd(own, 0):.6f} |",
            f"| control plane, the busy trial (a validation every {every:g} s), per trial-hour | "
            f"{_usd(busy_control, 0):.6f} |",
            f"| an idle agent with the stack's sweep, per hour | {_usd(idle, 0) * 3600 / idle_s:.6f} |",
            "",
            "## The control plane's steady state, a running trial, per trial-hour",
            "",
            *_table(control, 0, "per hour"),
            "",
            "## The control plane, each validation",
            "",
            *_table(per_control, 0, "each"),
            "",
            "## The trial's own, each validation with its 1 MB checkpoint",
            "",
            *_table(per_own, 0, "each"),
            "",
            "## The quiet trial, once (control plane)",
            "",
            *_table(control_whole, quiet.sfn, "in all"),
            "",
            f"## One idle agent ({idle_s / 60:.1f} min), per agent-hour",
            "",
            *_table(_scaled(idle, 3600 / idle_s), 0, "per hour"),
            "",
            "## Every request, steady state",
            "",
            *ops,
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())

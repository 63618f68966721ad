"""What a deployed stack costs per month with nothing running, and what a finished experiment leaves
behind, from the template and AWS list prices. Run from the repository root:

    .venv/bin/python bench/idle_cost.py [--sweep-ms 300] [--ec2-pools 1] [--checkpoint-gb 1] [--write]

An estimate, not a measurement (no AWS account here): it counts what the rendered template
(`infra/aws/template.py`) keeps running when idle and prices it. The sweep schedule sends a message to the
scheduler queue every minute and its function runs a scheduling pass (`--sweep-ms` long, reading the pool's
summary and holdings); Lambda's SQS event sources long-poll every queue they feed whether or not messages
come (AWS documents five concurrent pollers per queue, each a 20 s `ReceiveMessage`); the two secrets are
billed per month. DynamoDB on demand, SQS and API Gateway cost nothing idle beyond that. Each `ec2` pool (`--ec2-pools`) is an Auto Scaling group at zero instances, a launch template
and an EventBridge rule for AWS events, all free; it adds a sweep a minute (the schedule's one message is
fanned out into one per pool), whose pass also lists the group's instances (free API calls). The
monitoring: CloudWatch alarms and the stack's dashboard are billed per month at list price (an account's
free tier covers 10 alarms and 3 dashboards), log groups hold nothing idle, and a pool at zero puts no
metric (`PoolPass.idle`). What `det deploy aws up` keeps in the bucket: the Lambda package the stack runs
and the one before it (for a rollback; older ones are pruned after each successful update), with ec2
pools the agents' wheel in use and the one before, and the template it last handed over. The always-on
alternative: Determined's master on an m5.large with its database, as the issue compares (about 0.30 USD
an hour).

A finished experiment leaves behind, until `det experiment delete` removes them: its checkpoints in S3
(`--checkpoint-gb`), its trials' logs in CloudWatch Logs (`--log-mb`; the trial log group keeps them
90 days), its records in DynamoDB (`--record-mb`: trials, metrics, checkpoints, runs), and, if
`det experiment dashboard` made one, its CloudWatch dashboard (list price; an account's first 3, the
stack's own among them, are free). The dashboard is deleted with the experiment, and `det deploy aws
down` deletes those of the experiments still there. Its metrics cost nothing once it ended: CloudWatch
bills a custom metric only for the hours it receives data.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.control_plane_cost import DYNAMO_READ, LAMBDA_GB_S, LAMBDA_REQUEST, SQS_FIFO, SQS_STANDARD  # noqa: E402
from bench.machine import describe  # noqa: E402
from infra.aws.template import template  # noqa: E402
from infra.aws.template_app import MEMORY_MB  # noqa: E402
from stratus.contract.pools import DEFAULT_POOL, PoolSpec, Provider  # noqa: E402

MINUTES_A_MONTH = 30 * 24 * 60
SECRET_A_MONTH = 0.40  # Secrets Manager, per secret
S3_GB_A_MONTH = 0.023
POLLERS_PER_QUEUE = 5  # Lambda's SQS event source, documented starting concurrency
LONG_POLL_S = 20
SWEEP_READ_UNITS = (
    25  # the pool's summary, its holdings and a head page (bench/scheduling_reads.py: idle pool)
)
MASTER_AN_HOUR = 0.30
ALARM_A_MONTH = 0.10  # CloudWatch, a standard-resolution metric alarm (the first 10 of an account are free)
DASHBOARD_A_MONTH = 3.00  # CloudWatch, a dashboard (the first 3 of an account are free)
LOGS_GB_A_MONTH = 0.03  # CloudWatch Logs, stored (compressed; counted here uncompressed, an upper bound)
DYNAMO_GB_A_MONTH = 0.25  # DynamoDB on demand, table storage (the first 25 GB of an account are free)
KEPT_VERSIONS = 2  # the package (and wheel) in use and the one before it: det/deploy/aws.py's pruning


def pools(ec2_pools: int) -> tuple[PoolSpec, ...]:
    """The default pool, an ec2 one when any (`--ec2-pools`), and more ec2 pools up to that count."""
    return tuple(
        PoolSpec(
            DEFAULT_POOL if i == 0 else f"pool-{i}",
            backend="ec2",
            slots_per_agent=1,
            max_agents=5,
            provider=Provider(instance_types=("g5.xlarge",), max_instances=5),
        )
        for i in range(ec2_pools)
    ) or (PoolSpec(DEFAULT_POOL),)


def rows(
    sweep_ms: float, package_mb: float, ec2_pools: int = 0, wheel_kb: float = 0
) -> list[tuple[str, float, float]]:
    """(what, count a month, USD a month) of an idle stack."""
    configured = pools(ec2_pools)
    built = template(configured)
    template_mb = len(json.dumps(built, sort_keys=True).encode()) / 2**20
    resources = built["Resources"]
    sources = [r for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    fifo = sum(1 for s in sources if s["Properties"]["EventSourceArn"]["Fn::GetAtt"][0] == "SchedulerQueue")
    secrets = sum(1 for r in resources.values() if r["Type"] == "AWS::SecretsManager::Secret")
    alarms = sum(1 for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm")
    boards = sum(1 for r in resources.values() if r["Type"] == "AWS::CloudWatch::Dashboard")
    groups = [r for r in resources.values() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"]
    assert all(
        "DesiredCapacity" not in g["Properties"] and int(g["Properties"]["MinSize"]) == 0 for g in groups
    )
    ticks = MINUTES_A_MONTH  # rate(1 minute)
    sweeps = ticks * len(configured)  # one per pool, fanned out from each tick
    polls_per_queue = POLLERS_PER_QUEUE * MINUTES_A_MONTH * 60 / LONG_POLL_S
    gb_s = (ticks + sweeps) * (MEMORY_MB / 1024) * sweep_ms / 1000
    return [
        ("sweep messages sent to the scheduler queue (EventBridge schedule: free), one per pool", ticks + sweeps,
         (ticks + sweeps) * SQS_FIFO),
        ("sweep passes and fan-outs: Lambda invocations", ticks + sweeps, (ticks + sweeps) * LAMBDA_REQUEST),
        (f"sweep passes: Lambda GB-seconds ({MEMORY_MB} MB, {sweep_ms:g} ms)", gb_s, gb_s * LAMBDA_GB_S),
        ("sweep passes: DynamoDB read units", sweeps * SWEEP_READ_UNITS, sweeps * SWEEP_READ_UNITS * DYNAMO_READ),
        (f"ec2 pools' Auto Scaling groups at zero instances ({len(groups)})", len(groups), 0.0),
        ("empty long polls of the FIFO queue by its event source", polls_per_queue * fifo, polls_per_queue * fifo * SQS_FIFO),
        (
            "empty long polls of the standard queues by their event sources",
            polls_per_queue * (len(sources) - fifo),
            polls_per_queue * (len(sources) - fifo) * SQS_STANDARD,
        ),
        ("secrets (Secrets Manager)", secrets, secrets * SECRET_A_MONTH),
        ("CloudWatch alarms (list price; an account's first 10 are free)", alarms, alarms * ALARM_A_MONTH),
        ("the stack's CloudWatch dashboard (list price; an account's first 3 are free)", boards,
         boards * DASHBOARD_A_MONTH),
        ("custom metrics: none while idle (a pool at zero puts none)", 0, 0.0),
        (f"the Lambda packages kept in S3, GB ({KEPT_VERSIONS} x {package_mb:.0f} MB: in use, and the one before)",
         KEPT_VERSIONS * package_mb / 1024, KEPT_VERSIONS * package_mb / 1024 * S3_GB_A_MONTH),
        *([(f"the agents' wheels kept in S3, GB ({KEPT_VERSIONS} x {wheel_kb:.0f} KB)", KEPT_VERSIONS * wheel_kb / 2**20,
            KEPT_VERSIONS * wheel_kb / 2**20 * S3_GB_A_MONTH)] if groups else []),
        (f"the template last handed over, in S3, GB ({template_mb * 1024:.0f} KB)", template_mb / 1024,
         template_mb / 1024 * S3_GB_A_MONTH),
    ]  # fmt: skip


def experiment_rows(checkpoint_gb: float, log_mb: float, record_mb: float) -> list[tuple[str, float, float]]:
    """(what, count a month, USD a month) of a finished experiment, until it is deleted."""
    return [
        ("its checkpoints in S3, GB", checkpoint_gb, checkpoint_gb * S3_GB_A_MONTH),
        ("its trials' logs in CloudWatch Logs, GB (90 days, then expired)", log_mb / 1024,
         log_mb / 1024 * LOGS_GB_A_MONTH),
        ("its records in DynamoDB, GB", record_mb / 1024, record_mb / 1024 * DYNAMO_GB_A_MONTH),
        ("its metrics in CloudWatch: none billed once it ended (no data point arrives)", 0, 0.0),
        ("its dashboard, if `det experiment dashboard` made one (list price; deleted with the experiment)", 1,
         DASHBOARD_A_MONTH),
    ]  # fmt: skip


def _count(count: float) -> str:
    """Whole counts with thousands separators, fractions (GB) with three significant digits."""
    return f"{count:,.0f}" if count == int(count) or count >= 100 else f"{count:.3g}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep-ms", type=float, default=300)
    parser.add_argument(
        "--package-mb", type=float, default=45, help="the zipped package (python -m infra.aws.package)"
    )
    parser.add_argument("--ec2-pools", type=int, default=1, help="ec2 pools in the stack (0: none)")
    parser.add_argument(
        "--wheel-kb", type=float, default=265, help="the agents' wheel (python -m infra.aws.compute_package)"
    )
    parser.add_argument("--checkpoint-gb", type=float, default=1, help="a finished experiment's checkpoints")
    parser.add_argument("--log-mb", type=float, default=10, help="a finished experiment's trial logs")
    parser.add_argument("--record-mb", type=float, default=1, help="a finished experiment's records")
    parser.add_argument("--write", action="store_true", help="write bench/results/idle_cost.md")
    args = parser.parse_args()
    lines = rows(args.sweep_ms, args.package_mb, args.ec2_pools, args.wheel_kb)
    left = experiment_rows(args.checkpoint_gb, args.log_mb, args.record_mb)
    total = sum(usd for _, _, usd in lines)
    free = sum(
        usd for what, _, usd in lines if "SQS" in what or "long polls" in what or "sweep messages" in what
    )
    text = "\n".join(
        [
            "# An idle stack and what a finished experiment leaves, per month (estimate)",
            "",
            f"Machine: {describe()}.  ",
            f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/idle_cost.py --sweep-ms "
            f"{args.sweep_ms:g} --package-mb {args.package_mb:g} --ec2-pools {args.ec2_pools} --wheel-kb "
            f"{args.wheel_kb:g} --checkpoint-gb {args.checkpoint_gb:g} --log-mb {args.log_mb:g} --record-mb "
            f"{args.record_mb:g}{' --write' if args.write else ''}`.",
            "",
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            "",
            "| what | a month | USD a month |",
            "|---|---:|---:|",
            *[f"| {what} | {_count(count)} | {usd:.4f} |" for what, count, usd in lines],
            f"| **an idle stack** | | **{total:.2f}** |",
            f"| of which SQS (the first million requests a month are free) | | {free:.2f} |",
            f"| Determined's always-on master, for comparison | 720 h | {MASTER_AN_HOUR * 720:.2f} |",
            "",
            "## A finished experiment, per month until `det experiment delete`",
            "",
            "| what | a month | USD a month |",
            "|---|---:|---:|",
            *[f"| {what} | {_count(count)} | {usd:.4f} |" for what, count, usd in left],
            f"| **a finished experiment, with a dashboard** | | **{sum(usd for _, _, usd in left):.2f}** |",
            f"| without one | | {sum(usd for what, _, usd in left if 'dashboard' not in what):.2f} |",
            "",
        ]
    )
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "idle_cost.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

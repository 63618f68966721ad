"""What a deployed stack costs per month with nothing running, from the template and AWS list prices.
Run from the repository root:

    .venv/bin/python bench/idle_cost.py [--sweep-ms 300] [--ec2-pools 1] [--write]

An estimate, not a measurement (no AWS account here): it counts what the rendered template
(`infra/aws/template.py`) keeps running when idle and prices it. The sweep schedule sends a message to the
scheduler queue every minute and its function runs a scheduling pass (`--sweep-ms` long, reading the pool's
summary and holdings); Lambda's SQS event sources long-poll every queue they feed whether or not messages
come (AWS documents five concurrent pollers per queue, each a 20 s `ReceiveMessage`); the two secrets are
billed per month; the package sits in S3. DynamoDB on demand, SQS and API Gateway cost nothing idle
beyond that. Each `ec2` pool (`--ec2-pools`) is an Auto Scaling group at zero instances, a launch template
and an EventBridge rule for AWS events, all free; it adds a sweep a minute (the schedule's one message is
fanned out into one per pool), whose pass also lists the group's instances (free API calls). The
monitoring: CloudWatch alarms and the stack's dashboard are billed per month at list price (an account's
free tier covers 10 alarms and 3 dashboards), log groups hold nothing idle, and a pool at zero puts no
metric (`PoolPass.idle`). The always-on alternative: Determined's master on an m5.large with its database, as the
issue compares (about 0.30 USD an hour).
"""

from __future__ import annotations

import argparse
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


def rows(sweep_ms: float, package_mb: float, ec2_pools: int = 0) -> list[tuple[str, float, float]]:
    """(what, count a month, USD a month)."""
    configured = pools(ec2_pools)
    built = template(configured)
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
        (f"the Lambda package in S3 ({package_mb:.0f} MB)", package_mb / 1024, package_mb / 1024 * S3_GB_A_MONTH),
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep-ms", type=float, default=300)
    parser.add_argument(
        "--package-mb", type=float, default=45, help="the zipped package (python -m infra.aws.package)"
    )
    parser.add_argument("--ec2-pools", type=int, default=1, help="ec2 pools in the stack (0: none)")
    parser.add_argument("--write", action="store_true", help="write bench/results/idle_cost.md")
    args = parser.parse_args()
    lines = rows(args.sweep_ms, args.package_mb, args.ec2_pools)
    total = sum(usd for _, _, usd in lines)
    free = sum(
        usd for what, _, usd in lines if "SQS" in what or "long polls" in what or "sweep messages" in what
    )
    text = "\n".join(
        [
            "# An idle stack, per month (estimate)",
            "",
            f"Machine: {describe()}.  ",
            f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/idle_cost.py --sweep-ms "
            f"{args.sweep_ms:g} --package-mb {args.package_mb:g} --ec2-pools {args.ec2_pools}"
            f"{' --write' if args.write else ''}`.",
            "",
            (__doc__ or "").split("\n\n", 1)[1].strip(),
            "",
            "| what | a month | USD a month |",
            "|---|---:|---:|",
            *[f"| {what} | {count:,.0f} | {usd:.4f} |" for what, count, usd in lines],
            f"| **an idle stack** | | **{total:.2f}** |",
            f"| of which SQS (the first million requests a month are free) | | {free:.2f} |",
            f"| Determined's always-on master, for comparison | 720 h | {MASTER_AN_HOUR * 720:.2f} |",
            "",
        ]
    )
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "idle_cost.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""DynamoDB reads of one `schedule_pool` pass against the queue's length: 1,000 / 10,000 / 100,000
pending requests, on moto (in process), with the AWS adapters the Lambda uses. Run from the repository
root:

    .venv/bin/python bench/scheduling_reads.py [--sizes 1000,10000,100000] [--repeats 5] [--write]

The pool: 100 agents of 8 slots (the default pool: priority scheduler, preemption on), every slot held
by a running run of 2 slots at priority 10 (400 runs: nothing queued may preempt them, ties never
preempt), and N requests queued behind them (1-16 slots, priorities 10/42/60, 100 jobs, as
`bench/scheduling_pass.py`). Three passes are measured:

- **full pool**: a pass when nothing changed (a sweep, a request that cannot start): the common case
  while a long queue waits;
- **one run ends**: a run of 2 slots exits first, the pass grants what fits;
- **before**: what the pass of commit 7701148 read, every pending request and every holding
  (`runs.pending` + `runs.allocated`), and its placement over the whole queue: the cost this change
  removes.

Every DynamoDB call is counted through botocore's `after-call` events; read units are priced as
DynamoDB would: a query (the indexes are eventually consistent) costs 0.5 per 4 KB of the items it
returns, a consistent get 1 per 4 KB; an item's size is its attribute names plus values (DynamoDB's
rule, approximated for numbers). Times are medians of ``--repeats`` passes on this machine's moto, in
process (so a pass's time is mostly moto's, not the network's).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from bench.machine import describe  # noqa: E402
from chalicelib import wiring  # noqa: E402
from chalicelib.aws import clients, dynamo  # noqa: E402
from chalicelib.domain.queue_head import queue_fields  # noqa: E402
from chalicelib.domain.run_records import Run  # noqa: E402
from chalicelib.domain.scheduling_policies import PoolPolicy, plan_pass  # noqa: E402
from chalicelib.domain.states import RunState  # noqa: E402
from chalicelib.services import scheduler  # noqa: E402
from chalicelib.services.queue_reading import slot_request  # noqa: E402
from infra.local.resources import StackNames, create  # noqa: E402

SEED = 20261125
AGENTS = 100
SLOTS = 8
HELD_SLOTS = 2
JOBS = 100
POOL = "default"
BEAT_LATER = "2099-01-01T00:00:00Z"
READ_PRICE = 0.125e-6  # USD per read request unit, on-demand, us-east-1 (2025)


def _size(value: Any) -> int:
    """DynamoDB's size of a value (strings by UTF-8 bytes, numbers about 1 byte per 2 digits + 1)."""
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int | float | Decimal):
        return len(str(value).lstrip("-").replace(".", "")) // 2 + 2
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in ("S", "N", "BOOL", "NULL", "M", "L", "B"):
            kind, inner = next(iter(value.items()))
            if kind == "M":
                return 3 + sum(len(k.encode()) + _size(v) + 1 for k, v in inner.items())
            if kind == "L":
                return 3 + sum(_size(v) + 1 for v in inner)
            return _size(Decimal(inner) if kind == "N" else inner)
        return 3 + sum(len(k.encode()) + _size(v) + 1 for k, v in value.items())
    if isinstance(value, list | set | tuple):
        return 3 + sum(_size(v) + 1 for v in value)
    return len(str(value))


def item_size(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + _size(value) for name, value in item.items())


class Reads:
    """DynamoDB calls by operation, items returned and read units, from botocore's events."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.items = 0
        self.units = 0.0

    def __call__(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        op = model.name
        self.calls[op] += 1
        if op in ("Query", "Scan"):
            items = parsed.get("Items", [])
            self.items += len(items)
            self.units += 0.5 * max(1, math.ceil(sum(item_size(i) for i in items) / 4096))
        elif op == "GetItem":
            item = parsed.get("Item")
            self.items += 1 if item else 0
            self.units += max(1, math.ceil(item_size(item or {}) / 4096))

    def reset(self) -> None:
        self.calls.clear()
        self.items = 0
        self.units = 0.0

    @property
    def reads(self) -> int:
        return sum(n for op, n in self.calls.items() if op in ("Query", "Scan", "GetItem", "BatchGetItem"))

    @property
    def writes(self) -> int:
        return sum(
            n for op, n in self.calls.items() if op not in ("Query", "Scan", "GetItem", "BatchGetItem")
        )


@contextmanager
def stack() -> Iterator[Reads]:
    env = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "STRATUS_TOKEN_SECRET": "bench-only",
        # Populating 100,000 requests takes minutes: the agents must not be lost meanwhile.
        "STRATUS_AGENT_TIMEOUT_S": "86400",
        "STRATUS_AGENT_TOKEN": "bench-only",
    }
    saved = {k: os.environ.get(k) for k in [*env, "AWS_ENDPOINT_URL", "STRATUS_AGENT_HEARTBEAT_S"]}
    os.environ.pop("STRATUS_AGENT_HEARTBEAT_S", None)
    os.environ.update(env)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    with mock_aws():
        names = StackNames("bench")
        os.environ.update(create(boto3.Session(region_name="us-east-1"), names, endpoint_url=None))
        wiring.reset()
        reads = Reads()
        for client in (clients.client("dynamodb"), clients.resource("dynamodb").meta.client):
            client.meta.events.register("after-call.dynamodb", reads)
        try:
            yield reads
        finally:
            wiring.reset()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def populate(pending: int) -> None:
    """Agents, the runs holding every slot, and ``pending`` queued requests with their summary (written
    directly in batches: the setup is not what is measured)."""
    ports = wiring.ports()
    rng = random.Random(f"{SEED}-{pending}")
    now = ports.clock.now_iso()
    for a in range(AGENTS):
        ports.agents.heartbeat(f"agent-{a:03d}", POOL, SLOTS)
    table = dynamo.table("runs")
    summary: Counter[str] = Counter()
    with table.batch_writer() as batch:
        n = 0
        for a in range(AGENTS):
            for k in range(SLOTS // HELD_SLOTS):
                run = Run(
                    run_id=f"held.{n}",
                    trial_id=n,
                    experiment_id=n % JOBS,
                    pool=POOL,
                    slots=HELD_SLOTS,
                    state=RunState.RUNNING,
                    priority=10,
                    agent_id=f"agent-{a:03d}",
                    launch_token=f"launch-{n}",
                    queued_at=now,
                    assigned_at=now,
                    launched_at=now,
                )
                # Its launch wait's heartbeat not due during the bench (populating 100,000 requests takes
                # minutes): the beats are the pool's holdings' (400 per 2 minutes), not the queue's.
                item = {
                    **run.to_item(),
                    "alloc_pool": POOL,
                    "active_agent": run.agent_id,
                    "beat_at": BEAT_LATER,
                }
                batch.put_item(Item=dynamo.to_dynamo({k: v for k, v in item.items() if v is not None}))
                n += 1
        for i in range(pending):
            job = i % JOBS
            run = Run(
                run_id=f"{job}.{i}",
                trial_id=10_000_000 + i,
                experiment_id=job,
                pool=POOL,
                slots=rng.choices([1, 2, 4, 8, 16], weights=[70, 15, 10, 4, 1])[0],
                state=RunState.PENDING,
                priority=rng.choice([10, 42, 42, 42, 60]),
                slot_token=f"slots-{i}",
                queue_position=1_795_000_000.0 + job,
                queued_at=f"2026-11-25T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
            )
            item = {**run.to_item(), **queue_fields(run), "version": 0}
            batch.put_item(Item=dynamo.to_dynamo({k: v for k, v in item.items() if v is not None}))
            summary.update({"requests": 1, "slots": run.slots, f"size {run.slots}": 1})
            summary.update({f"job {job} n": 1, f"job {job} slots": run.slots})
    dynamo.table("pools").put_item(Item={"pool": POOL, **summary})


def measure(reads: Reads, repeats: int, action: Callable[[], object]) -> dict[str, Any]:
    times, counts = [], []
    for _ in range(repeats):
        reads.reset()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
        counts.append((reads.reads, reads.items, reads.units, reads.writes))
    reads_n, items, units, writes = counts[-1]
    return {"s": statistics.median(times), "reads": reads_n, "items": items, "units": units, "writes": writes}


def before_pass() -> None:
    """What the pass of commit 7701148 read and computed: every holding and every pending request."""
    ports = wiring.ports()
    holding = ports.runs.allocated(POOL)
    pending = ports.runs.pending(POOL)
    plan_pass(PoolPolicy(), [slot_request(r) for r in pending], [], [])
    assert holding


def run_size(pending: int, repeats: int) -> dict[str, dict[str, Any]]:
    with stack() as reads:
        populate(pending)
        ports = wiring.ports()
        scheduler.schedule_pool(ports, POOL)  # the first pass notes every read request's reason
        rows = {"full pool": measure(reads, repeats, lambda: scheduler.schedule_pool(ports, POOL))}
        victims = iter(ports.runs.allocated(POOL))

        def one_ends() -> None:
            ports.runs.exit(next(victims).run_id, 0, "done")
            scheduler.schedule_pool(ports, POOL)

        rows["one run ends"] = measure(reads, repeats, one_ends)
        rows["before (whole queue)"] = measure(
            reads, 1 if pending >= 100_000 else min(repeats, 3), before_pass
        )
        return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="write bench/results/scheduling_reads.md")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {}
    for size in sizes:
        results[size] = run_size(size, args.repeats)
        for name, row in results[size].items():
            print(
                f"{size:>7,} pending, {name}: {row['reads']} reads, {row['items']:,} items, "
                f"{row['units']:,.1f} RRU, {row['writes']} writes, {row['s'] * 1000:,.0f} ms",
                flush=True,
            )
    lines = [
        "# Scheduling pass: DynamoDB reads against the queue's length",
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/scheduling_reads.py "
        f"--sizes {args.sizes} --repeats {args.repeats} --write`.",
        "",
        f"A pool of {AGENTS} agents of {SLOTS} slots, every slot held by a run of {HELD_SLOTS} "
        f"({AGENTS * SLOTS // HELD_SLOTS} holdings), N requests queued (see the script's docstring). "
        "Read units (RRU) as DynamoDB prices them (query 0.5 per 4 KB returned, consistent get 1 per "
        f"4 KB); USD per pass at {READ_PRICE * 1e6:.3f} USD per million RRU (on-demand, us-east-1). Time: "
        f"median of {args.repeats} passes on moto in process (the `before` row: of "
        f"{min(args.repeats, 3)}, one at 100,000). moto answers a query on an index by scanning the whole "
        "table and serialises each item slowly, so its times grow with the table whatever is read; "
        "DynamoDB's grow with what a query returns: compare the read units, not the times, across sizes.",
        "",
        "| pending | pass | DynamoDB reads | items read | read units | USD per pass | writes | time (ms) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for size, rows in results.items():
        for name, row in rows.items():
            lines.append(
                f"| {size:,} | {name} | {row['reads']} | {row['items']:,} | {row['units']:,.1f} | "
                f"{row['units'] * READ_PRICE:.7f} | {row['writes']} | {row['s'] * 1000:,.0f} |"
            )
    lines += [
        "",
        f"Of each pass's reads, {AGENTS * SLOTS // HELD_SLOTS} items are the holdings (bounded by the pool's "
        "slots, not by the queue), one is the pool's summary, and the rest the head of the queue. The agents "
        "are read too (one query, 100 items).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        (ROOT / "bench" / "results" / "scheduling_reads.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What keeping the embedded stack's state costs (`infra/local/persistence.py`): the time a write takes with and
without the journal in front of moto, and how long a start takes to load a state folder back.

    .venv/bin/python bench/stack_state.py [--items 1000 10000] [--write]

For each size N it writes N DynamoDB items of ~600 bytes (a metrics report's size) through boto3, once to a
plain moto server and once through the journaling one, and 20 S3 objects of 1 MiB each way; then it
loads the folder back twice: from the journal alone (what a start after kill -9 replays) and from a
snapshot (what a start after a clean stop loads), and times the fold into a snapshot (`compact`).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import describe  # noqa: E402
from infra.local.persistence import StateClients, StateFolder, compact, journaling_moto_server, restore  # noqa: E402
from infra.local.resources import TABLES, StackNames, create  # noqa: E402
from infra.local.stack import free_port  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "stack_state.md"
OBJECTS = 20
OBJECT_BYTES = 1 << 20
_stacks = itertools.count()


def _server(state: StateFolder | None) -> tuple[Any, str]:
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = (
        journaling_moto_server(state, "127.0.0.1", port)
        if state is not None
        else ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    )
    server.start()
    return server, f"http://127.0.0.1:{port}"


def _stack(url: str) -> StackNames:
    names = StackNames(stack=f"bench{next(_stacks)}")
    create(boto3.session.Session(), names, endpoint_url=url, visibility_timeout=5)
    return names


def _writes(url: str, names: StackNames, n: int) -> tuple[float, float]:
    """ms per DynamoDB write (median of batches of 100) and ms per 1 MiB S3 PUT (median)."""
    dynamodb = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1")
    table = names.table("metrics")
    per_write: list[float] = []
    for start in range(0, n, 100):
        began = time.perf_counter()
        for i in range(start, min(n, start + 100)):
            dynamodb.put_item(
                TableName=table,
                Item={
                    "trial_id": {"N": str(i % 50)},
                    "key": {"S": f"validation#{i:08d}"},
                    "metrics": {"S": "x" * 550},
                },
            )
        per_write.append((time.perf_counter() - began) * 1000 / min(100, n - start))
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    body = os.urandom(OBJECT_BYTES)
    per_object: list[float] = []
    for i in range(OBJECTS):
        began = time.perf_counter()
        s3.put_object(Bucket=names.bucket, Key=f"checkpoints/1/1/{i}/state.pt", Body=body)
        per_object.append((time.perf_counter() - began) * 1000)
    return statistics.median(per_write), statistics.median(per_object)


def _delete(url: str, names: StackNames) -> None:
    dynamodb = boto3.client("dynamodb", endpoint_url=url, region_name="us-east-1")
    for spec in TABLES:
        dynamodb.delete_table(TableName=names.table(spec.name))
    s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=names.bucket):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=names.bucket, Key=item["Key"])


def _load(folder: Path, names: StackNames) -> tuple[float, dict[str, int]]:
    """Seconds for a new server to load `folder` (restore, then compact, as a start does)."""
    state = StateFolder(folder)
    server, url = _server(state)
    try:
        create(boto3.session.Session(), names, endpoint_url=url, visibility_timeout=5)
        clients = StateClients(boto3.session.Session(), url, "us-east-1", f"{names.stack}-", names.log_group)
        began = time.perf_counter()
        counts = restore(state, clients)
        compact(state, clients)
        seconds = time.perf_counter() - began
        _delete(url, names)
        _delete_rest(url, names)
        return seconds, counts
    finally:
        server.stop()
        state.close()


def _delete_rest(url: str, names: StackNames) -> None:
    client = boto3.client
    client("logs", endpoint_url=url, region_name="us-east-1").delete_log_group(logGroupName=names.log_group)
    sqs = client("sqs", endpoint_url=url, region_name="us-east-1")
    for queue in sqs.list_queues(QueueNamePrefix=names.stack).get("QueueUrls", []):
        sqs.delete_queue(QueueUrl=queue)
    client("iam", endpoint_url=url, region_name="us-east-1").delete_role(RoleName=f"{names.stack}-states")
    sfn = client("stepfunctions", endpoint_url=url, region_name="us-east-1")
    for machine in sfn.list_state_machines()["stateMachines"]:
        if machine["name"].startswith(names.stack):
            sfn.delete_state_machine(stateMachineArn=machine["stateMachineArn"])


def measure(n: int) -> dict[str, float]:
    plain, plain_url = _server(None)
    try:
        plain_write, plain_put = _writes(plain_url, _stack(plain_url), n)
    finally:
        plain.stop()
    with tempfile.TemporaryDirectory() as folder:
        state = StateFolder(Path(folder))
        server, url = _server(state)
        names = _stack(url)
        clients = StateClients(boto3.session.Session(), url, "us-east-1", f"{names.stack}-", names.log_group)
        compact(state, clients)  # starts the journal
        journaled_write, mirrored_put = _writes(url, names, n)
        _delete(url, names)
        _delete_rest(url, names)
        server.stop()
        state.close()
        from_journal, counts = _load(Path(folder), names)  # the journal only: a start after kill -9
        from_snapshot, _ = _load(Path(folder), names)  # the snapshot that load wrote: after a clean stop
    return {
        "n": n,
        "plain_write_ms": plain_write,
        "journaled_write_ms": journaled_write,
        "plain_put_ms": plain_put,
        "mirrored_put_ms": mirrored_put,
        "from_journal_s": from_journal,
        "from_snapshot_s": from_snapshot,
        "journaled_writes": counts["journaled_writes"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.relative_to(Path.cwd())}")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    load = os.getloadavg()[0]
    rows = []
    for n in args.items:
        row = measure(n)
        rows.append(row)
        print(row, flush=True)
    lines = [
        "# Keeping the local stack's state",
        "",
        f"Machine: {describe()}.  ",
        f"Date: {time.strftime('%Y-%m-%d')}. Command: `.venv/bin/python bench/stack_state.py "
        f"--items {' '.join(map(str, args.items))} --write`. Load average when it started: "
        f"{load:.2f} (the machine is shared; helpers' tests ran beside it).",
        "",
        "Per write: median over batches of 100 DynamoDB PutItems of ~600 bytes, and over "
        f"{OBJECTS} S3 PUTs of 1 MiB, to a plain moto server and through the journaling one. Load: "
        "restore + compact of the folder into fresh resources, as a start does, from the journal alone "
        "(after a kill -9) and from the snapshot (after a clean stop).",
        "",
        "| items | write, plain (ms) | write, journaled (ms) | 1 MiB PUT, plain (ms) | 1 MiB PUT, mirrored (ms) "
        "| start from journal (s) | start from snapshot (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {int(r['n']):,} | {r['plain_write_ms']:.2f} | {r['journaled_write_ms']:.2f} | "
            f"{r['plain_put_ms']:.1f} | {r['mirrored_put_ms']:.1f} | {r['from_journal_s']:.1f} | "
            f"{r['from_snapshot_s']:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

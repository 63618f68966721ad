"""`det job list`: a resource pool's job queue, in scheduling order, in Determined's columns;
`det job update` and `det job update-batch`: change a job's priority, weight, pool or place in the queue.

A job is an experiment's demand in the pool; its ID is the experiment's id. `Slots (acquired/needed)`
are the slots its running trials hold and those its running and queued trials need together.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from det._commands import Subcommands
from det._render import Cell, field, records_table, time_field
from det._runtime import Runtime
from det.errors import UsageError

Json = dict[str, Any]

_JOB_CELLS: dict[str, Cell] = {
    "#": field("position"),
    "ID": field("id"),
    "Type": field("type"),
    "Job Name": field("name"),
    "Priority": field("priority"),
    "Submitted": time_field("submitted"),
    "Slots (acquired/needed)": lambda j: f"{j['slots_acquired']}/{j['slots_needed']}",
    "State": field("status"),  # Determined's header; the API's field is `status`
    "User": field("user"),
}
_HEADERS = tuple(_JOB_CELLS)


def add_parsers(commands: Subcommands) -> None:
    job = commands.add_parser("job", aliases=["j"], help="inspect the job queue")
    sub = job.add_subparsers(title="job commands", metavar="COMMAND")
    # `det job` alone lists, as `det experiment` does.
    job.set_defaults(command=list_jobs, resource_pool=None, json=False, csv=False)
    listing = sub.add_parser("list", aliases=["ls"], help="list a resource pool's jobs in scheduling order")
    listing.add_argument(
        "-p",
        "--resource-pool",
        metavar="POOL",
        help="the pool whose queue to show (default: the default pool)",
    )
    output = listing.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print as JSON")
    output.add_argument("--csv", action="store_true", help="print as CSV")
    listing.set_defaults(command=list_jobs)

    update = sub.add_parser(
        "update",
        aliases=["u"],
        help="change a job's priority, weight or resource pool, or move it in its pool's queue",
        description="Exactly one change: --priority and --ahead-of/--behind-of need a pool with the "
        "priority scheduler (a job moved next to a job of another priority takes that priority), "
        "--weight a fair_share pool, --resource-pool a configured pool (queued trials move, running "
        "ones keep their slots until they end).",
    )
    update.add_argument("job_id", metavar="JOB_ID", help="the job's id (`det job list` shows them)")
    change = update.add_mutually_exclusive_group(required=True)
    change.add_argument("-p", "--priority", type=int, metavar="N", help="1-99, lower runs first")
    change.add_argument("-w", "--weight", type=float, metavar="W", help="fair-share weight, > 0")
    change.add_argument("--resource-pool", metavar="POOL", help="move the job to another pool")
    change.add_argument("--ahead-of", metavar="JOB_ID", help="place it just ahead of this job")
    change.add_argument("--behind-of", metavar="JOB_ID", help="place it just behind this job")
    update.set_defaults(command=update_job)

    batch = sub.add_parser(
        "update-batch",
        help="apply several job updates, all checked before any is applied",
        description="Each update is JOB_ID.KEY=VALUE with KEY one of priority, weight, "
        "resource-pool, ahead-of, behind-of; e.g. `det job update-batch 3.priority=1 "
        "4.resource-pool=compute 5.ahead-of=3`.",
    )
    batch.add_argument("updates", nargs="+", metavar="JOB_ID.KEY=VALUE", help="the updates, applied in order")
    batch.set_defaults(command=update_jobs)


def list_jobs(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        jobs = client.list_jobs(args.resource_pool)
    if args.json:
        rt.say(json.dumps({"jobs": jobs}, indent=4))
        return 0
    rt.say(jobs_table(jobs, as_csv=args.csv))
    if not args.csv:
        # Determined's table has no column for it: why a job's queued trials wait, under the table (a
        # scheduled job too, while it needs more slots than it holds: its max_slots, say).
        for job in jobs:
            if job.get("reason") and job.get("slots_acquired", 0) < job.get("slots_needed", 0):
                rt.say(f"job {job['id']} waits: {job['reason']}")
    return 0


def jobs_table(jobs: list[Json], *, as_csv: bool = False) -> str:
    return records_table(_JOB_CELLS, _HEADERS, jobs, as_csv=as_csv)


#: `update-batch` keys, as Determined spells them, and the API's field each sets with its type.
_BATCH_KEYS: dict[str, tuple[str, type]] = {
    "priority": ("priority", int),
    "weight": ("weight", float),
    "resource-pool": ("resource_pool", str),
    "ahead-of": ("ahead_of", str),
    "behind-of": ("behind_of", str),
}


def update_job(args: argparse.Namespace, rt: Runtime) -> int:
    fields = ("priority", "weight", "resource_pool", "ahead_of", "behind_of")
    change = {name: getattr(args, name) for name in fields if getattr(args, name) is not None}
    with rt.client() as client:
        answer = client.update_job(args.job_id, change)
    _say_updated(rt, answer)
    return 0


def update_jobs(args: argparse.Namespace, rt: Runtime) -> int:
    updates = [parse_batch_update(text) for text in args.updates]
    with rt.client() as client:
        answer = client.update_jobs(updates)
    _say_updated(rt, answer)
    return 0


def parse_batch_update(text: str) -> Json:
    """`3.priority=1` → `{"job_id": "3", "priority": 1}`; UsageError naming the part that is wrong."""
    target, sep, value = text.partition("=")
    job_id, dot, key = target.partition(".")
    if not sep or not dot or not job_id or not value:
        raise UsageError(f"update {text!r} is not JOB_ID.KEY=VALUE; e.g. 3.priority=10 or 3.ahead-of=2")
    if key not in _BATCH_KEYS:
        raise UsageError(f"update {text!r} changes {key!r}; use one of {', '.join(_BATCH_KEYS)}")
    name, kind = _BATCH_KEYS[key]
    try:
        typed = kind(value)
    except ValueError as error:
        raise UsageError(
            f"update {text!r}: {key} must be {'an integer' if kind is int else 'a number'}"
        ) from error
    return {"job_id": job_id, name: typed}


def _say_updated(rt: Runtime, answer: Json) -> None:
    for job in answer.get("jobs", []):
        rt.say(
            f"Updated job {job['id']} ({job['name']}): priority {job['priority']}, "
            f"weight {job['weight']:g}, resource pool {job['resource_pool']}"
        )
    for note in answer.get("notes", []):
        rt.say(f"Note: {note}")

"""`det job list`: a resource pool's job queue, in scheduling order, in Determined's columns.

A job is an experiment's demand in the pool; its ID is the experiment's id. `Slots (acquired/needed)`
are the slots its running trials hold and those its running and queued trials need together.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from det._render import Cell, field, records_table, time_field
from det._runtime import Runtime

Json = dict[str, Any]

_JOB_CELLS: dict[str, Cell] = {
    "#": field("position"),
    "ID": field("id"),
    "Type": field("type"),
    "Job Name": field("name"),
    "Priority": field("priority"),
    "Submitted": time_field("submitted"),
    "Slots (acquired/needed)": lambda j: f"{j['slots_acquired']}/{j['slots_needed']}",
    "Status": field("status"),
    "User": field("user"),
}
_HEADERS = tuple(_JOB_CELLS)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    job = commands.add_parser("job", aliases=["j"], help="inspect the job queue")
    sub = job.add_subparsers(title="job commands", metavar="COMMAND")
    # `det job` alone lists, as `det experiment` does.
    job.set_defaults(command=list_jobs, resource_pool=None, json=False, csv=False)
    listing = sub.add_parser("list", aliases=["ls"], help="list a resource pool's jobs in scheduling order")
    listing.add_argument(
        "--resource-pool", metavar="POOL", help="the pool whose queue to show (default: the default pool)"
    )
    output = listing.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print as JSON")
    output.add_argument("--csv", action="store_true", help="print as CSV")
    listing.set_defaults(command=list_jobs)


def list_jobs(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        jobs = client.list_jobs(args.resource_pool)
    if args.json:
        rt.say(json.dumps({"jobs": jobs}, indent=4))
        return 0
    rt.say(jobs_table(jobs, as_csv=args.csv))
    return 0


def jobs_table(jobs: list[Json], *, as_csv: bool = False) -> str:
    return records_table(_JOB_CELLS, _HEADERS, jobs, as_csv=as_csv)

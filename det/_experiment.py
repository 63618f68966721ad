"""`det experiment list`, `describe`, `archive` and `unarchive`.

Columns as Determined's CLI names them (`Started` / `Ended`); `--csv` writes the same columns as CSV. The
list hides archived experiments unless `--all` (the API filters, so `--limit` counts what is shown).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from det._client import ApiClient
from det._commands import Subcommands
from det._cost import cost_table, experiment_totals
from det._render import Cell, field, format_percent, records_table, time_field
from det._runtime import Runtime
from det._trial import TRIAL_CELLS, custom_group_tables, fetch_metrics, workloads_table
from det.errors import UsageError

Json = dict[str, Any]

LIST_PAGE_SIZE = 100

# Every column an experiments table shows, by header; each command picks its own, in `det`'s order.
_EXPERIMENT_CELLS: dict[str, Cell] = {
    "ID": lambda e: e["id"],
    "Experiment ID": lambda e: e["id"],
    "Owner": field("owner"),
    "Name": field("name"),
    "Parent ID": field("parent_id"),
    "State": field("state"),
    "Progress": lambda e: format_percent(e.get("progress")),
    "Started": time_field("start_time"),
    "Ended": time_field("end_time"),
    "Description": field("description"),
    "Archived": lambda e: bool(e.get("archived", False)),
    "Resource Pool": field("resource_pool"),
    "Labels": lambda e: ", ".join(sorted(e.get("labels") or [])),
}
# `det experiment list` (with --all, "Archived" last).
_LIST_HEADERS = (
    "ID",
    "Owner",
    "Name",
    "Parent ID",
    "State",
    "Progress",
    "Started",
    "Ended",
    "Resource Pool",
)
# `det experiment describe`: the experiments, then their trials.
_DESCRIBE_HEADERS = (
    "Experiment ID",
    "State",
    "Progress",
    "Started",
    "Ended",
    "Name",
    "Description",
    "Archived",
    "Resource Pool",
    "Labels",
)
_TRIALS_HEADERS = (
    "Trial ID",
    "Experiment ID",
    "State",
    "Started",
    "Ended",
    "H-Params",
    "Restarts",
    "# of Batches",
    "Best Validation",
    "Latest Checkpoint",
)


def add_listing_parsers(sub: Subcommands) -> None:
    """`det experiment list | describe`."""
    listing = sub.add_parser("list", aliases=["ls"], help="list experiments")
    listing.add_argument(
        "-a",
        "--all",
        action="store_true",
        help="show all experiments, the archived ones too, with an Archived column",
    )
    listing.add_argument("--limit", type=int, metavar="N", help="show at most the N newest experiments")
    listing.add_argument("--offset", type=int, metavar="N", help="skip the N newest experiments")
    listing.add_argument("--json", action="store_true", help="print the API's JSON")
    listing.add_argument("--csv", action="store_true", help="print as CSV")
    listing.set_defaults(command=list_experiments)

    describe_cmd = sub.add_parser("describe", help="describe experiments")
    describe_cmd.add_argument(
        "experiment_ids", metavar="ID[,ID...]", help="experiment id, or a comma-separated list"
    )
    describe_cmd.add_argument("--metrics", action="store_true", help="show the metrics of every workload")
    describe_cmd.add_argument("--json", action="store_true", help="print the API's JSON")
    describe_cmd.add_argument("--csv", action="store_true", help="print the tables as CSV")
    describe_cmd.set_defaults(command=describe)


def add_archive_parsers(sub: Subcommands) -> None:
    """`det experiment archive|unarchive ID`: hide an ended experiment from `det experiment list`."""
    archive_cmd = sub.add_parser("archive", help="archive an experiment that has ended")
    archive_cmd.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    archive_cmd.set_defaults(command=archive)
    unarchive_cmd = sub.add_parser("unarchive", help="unarchive an experiment")
    unarchive_cmd.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    unarchive_cmd.set_defaults(command=unarchive)


def list_experiments(args: argparse.Namespace, rt: Runtime) -> int:
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit {args.limit} must be at least 1")
    with rt.client() as client:
        experiments = _fetch_all(
            client, limit=args.limit, offset=args.offset or 0, archived=None if args.all else False
        )
    if args.json:
        rt.say(json.dumps({"experiments": experiments}, indent=4))
        return 0
    # The API answers newest first; like `det`, show them by id so the newest end up at the bottom.
    experiments.sort(key=lambda e: int(e["id"]))
    rt.say(experiments_table(experiments, show_archived=args.all, as_csv=args.csv))
    return 0


def experiments_table(
    experiments: Sequence[Json], *, show_archived: bool = False, as_csv: bool = False
) -> str:
    headers = (*_LIST_HEADERS, "Archived") if show_archived else _LIST_HEADERS
    return records_table(_EXPERIMENT_CELLS, headers, experiments, as_csv=as_csv)


def archive(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        client.archive_experiment(args.experiment_id)
    rt.say(f"Archived experiment {args.experiment_id}")
    return 0


def unarchive(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        client.unarchive_experiment(args.experiment_id)
    rt.say(f"Unarchived experiment {args.experiment_id}")
    return 0


def describe(args: argparse.Namespace, rt: Runtime) -> int:
    ids = parse_ids(args.experiment_ids)
    with rt.client() as client:
        answers = [client.get_experiment(i) for i in ids]
        if args.metrics:
            for answer in answers:
                for trial in answer.get("trials") or []:
                    trial["metrics"] = fetch_metrics(client, trial["id"])
                    trial["checkpoints"] = client.get_trial(trial["id"]).get("checkpoints") or []
    if args.json:
        rt.say(json.dumps(answers[0] if len(answers) == 1 else answers, indent=4))
        return 0

    experiments = [a["experiment"] for a in answers]
    trials = [t for a in answers for t in sorted(a.get("trials") or [], key=lambda t: int(t["id"]))]
    rt.say("Experiment:")
    rt.say(experiment_table(experiments, as_csv=args.csv))
    rt.say("\nTrials:")
    rt.say(trials_table(trials, as_csv=args.csv))
    rt.say("\nCost:")
    rt.say(cost_table(trials, experiment_totals(answers), as_csv=args.csv))
    if args.metrics:
        rt.say("\nWorkloads:")
        workloads = [(t["id"], t["metrics"], t["checkpoints"]) for t in trials]
        rt.say(workloads_table(workloads, as_csv=args.csv))
        if groups := custom_group_tables([(t["id"], t["metrics"]) for t in trials]):
            rt.say("\n" + groups)
    return 0


def experiment_table(experiments: Sequence[Json], *, as_csv: bool = False) -> str:
    return records_table(_EXPERIMENT_CELLS, _DESCRIBE_HEADERS, experiments, as_csv=as_csv)


def trials_table(trials: Sequence[Json], *, as_csv: bool = False) -> str:
    return records_table(TRIAL_CELLS, _TRIALS_HEADERS, trials, as_csv=as_csv)


def parse_ids(text: str) -> list[int]:
    """`3` or `3,4,7` (Determined takes a comma-separated list)."""
    ids = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise UsageError(
                f"experiment id {part!r} is not a number; pass ids like 3 or 3,4,7 "
                "(`det experiment list` shows them)"
            )
        ids.append(int(part))
    return ids


def _fetch_all(client: ApiClient, *, limit: int | None, offset: int, archived: bool | None) -> list[Json]:
    """Page through `GET /experiments` by its cursor until `offset` + `limit` experiments or the end, and
    skip the first `offset` (the cursor keeps the pages stable while experiments are created)."""
    wanted = None if limit is None else offset + limit
    found: list[Json] = []
    cursor: str | None = None
    while wanted is None or len(found) < wanted:
        size = LIST_PAGE_SIZE if wanted is None else min(LIST_PAGE_SIZE, wanted - len(found))
        page, cursor = client.list_experiments(limit=size, cursor=cursor, archived=archived)
        found.extend(page)
        if cursor is None:
            break
    return found[offset:wanted]

"""`det trial describe` and `det trial logs` (whose reading `det experiment logs` shares), and the workloads
table `det experiment describe` shares."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from det._client import ApiClient
from det._commands import Subcommands
from det._cost import cost_table, trial_totals
from det._elastic import elastic_config, elastic_section, rescaling
from det._logs import format_line, log_ranks, read_log_pages
from det._render import (
    Cell,
    Record,
    csv_table,
    field,
    format_json,
    format_metrics,
    format_time,
    format_value,
    records_table,
    table,
    time_field,
)
from det._runtime import Runtime
from det.errors import NotFoundError, UsageError
from stratus.contract.log_levels import LEVELS

Json = dict[str, Any]


def add_parsers(sub: Subcommands) -> None:
    """`det trial describe | logs`."""
    describe_cmd = sub.add_parser("describe", help="describe a trial")
    describe_cmd.add_argument("trial_id", type=int, metavar="ID", help="trial id")
    describe_cmd.add_argument("--metrics", action="store_true", help="show the metrics of every workload")
    describe_cmd.add_argument("--json", action="store_true", help="print the API's JSON")
    describe_cmd.add_argument("--csv", action="store_true", help="print the tables as CSV")
    describe_cmd.set_defaults(command=describe)

    logs_cmd = sub.add_parser("logs", help="print a trial's logs")
    logs_cmd.add_argument("trial_id", type=int, metavar="ID", help="trial id")
    add_log_arguments(logs_cmd)
    logs_cmd.set_defaults(command=logs)


def describe(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        answer = client.get_trial(args.trial_id)
        metrics = fetch_metrics(client, args.trial_id) if args.metrics else None
        config = _experiment_config(client, answer["trial"])
    nni = _from_nni(config) or elastic_config(config) is not None
    if nni:
        answer = {**answer, "trial": {**answer["trial"], "nni_status": nni_status(answer["trial"])}}
    if args.json:
        if metrics is not None:
            answer = {**answer, "metrics": metrics}
        rt.say(json.dumps(answer, indent=4))
        return 0

    trial: Json = answer["trial"]
    checkpoints: list[Json] = list(answer.get("checkpoints") or [])
    rt.say(trial_table([trial], nni=nni, as_csv=args.csv))
    if (elastic := elastic_config(config)) is not None:
        rt.say("\n" + elastic_section(trial, elastic, now=rt.now(), as_csv=args.csv))
    failed_rank = (trial.get("exit") or {}).get("failed_rank")
    if failed_rank is not None:
        rt.say(
            f"\nFailed first: rank {failed_rank} (its lines: det trial logs {trial['id']} --rank {failed_rank})"
        )
    rt.say("\nCheckpoints:")
    rt.say(checkpoints_table(checkpoints, as_csv=args.csv))
    rt.say("\nCost:")
    rt.say(cost_table([trial], trial_totals(trial), as_csv=args.csv))
    rt.say("")
    rt.say(validation_summary(trial))
    if metrics is not None:
        rt.say("\nWorkloads:")
        rt.say(workloads_table([(trial["id"], metrics, checkpoints)], as_csv=args.csv))
        if groups := custom_group_tables([(trial["id"], metrics)]):
            rt.say("\n" + groups)
    return 0


def logs(args: argparse.Namespace, rt: Runtime) -> int:
    check_log_window(args)
    with rt.client() as client:
        write_logs(rt, client, args.trial_id, args)
    return 0


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """The filters of `det trial logs` (after its id): -f, --head | --tail, --timestamps, --rank,
    --level; `write_logs` reads them."""
    parser.add_argument(
        "-f", "--follow", action="store_true", help="follow the logs of a running trial, like tail -f"
    )
    window = parser.add_mutually_exclusive_group()
    window.add_argument("--head", type=int, metavar="N", help="only the first N lines")
    window.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    parser.add_argument(
        "--timestamps", action="store_true", help="prefix each line with its time (UTC, ISO 8601)"
    )
    parser.add_argument(
        "--rank", "--rank-id", dest="rank_id", type=int, metavar="RANK", help="only the lines of this rank"
    )
    parser.add_argument(
        "--level",
        type=str.upper,
        choices=LEVELS,
        metavar="LEVEL",
        help=f"only the lines of this level or higher ({', '.join(LEVELS)}; a line that names no level "
        "is INFO)",
    )


def check_log_window(args: argparse.Namespace) -> None:
    for flag in ("head", "tail"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise UsageError(f"--{flag} {value} is negative; pass a number of lines (0 or more)")


def write_logs(rt: Runtime, client: ApiClient, trial_id: int, args: argparse.Namespace) -> None:
    """Print trial `trial_id`'s log lines on stdout, as the filters of `add_log_arguments` in `args`
    ask (checked by `check_log_window`), following them with --follow until the trial ends."""
    if args.head == 0 or (args.tail == 0 and not args.follow):
        return
    printed = 0
    for page in read_log_pages(
        client,
        trial_id,
        follow=args.follow,
        head=args.head,
        tail=args.tail,
        rank=args.rank_id,
        level=args.level,
        sleep=rt.sleep,
    ):
        rt.out.write("".join(format_line(line, timestamps=args.timestamps) + "\n" for line in page))
        rt.out.flush()
        printed += len(page)
    if not printed and args.rank_id is not None:
        check_rank(client, trial_id, args.rank_id)


def check_rank(client: ApiClient, trial_id: int, rank: int) -> None:
    """`--rank N` printed nothing: a UsageError when the trial's log has lines, none of rank N (a
    one-process trial's carry no rank), naming the ranks it has."""
    ranks, lines = log_ranks(client, trial_id)
    if not lines or rank in ranks:
        return  # nothing logged yet, or that rank's lines were filtered out (--level, --head, --tail)
    if not ranks:
        raise UsageError(
            f"trial {trial_id} has no rank {rank}: its lines carry no rank (one process, no launcher "
            f"spreading it over ranks); leave --rank out"
        )
    listed = ", ".join(str(r) for r in sorted(ranks))
    which = f"ranks {listed}; pass one of them" if len(ranks) > 1 else f"rank {listed}; pass --rank {listed}"
    raise UsageError(f"trial {trial_id} has no rank {rank}: its lines come from {which}")


# Stratus trial state -> the status NNI would show (NNI's TrialJobStatus). A trial stopping is still
# running; a paused one waits to be resumed; an elastic one requeued for a rescale runs (AdaptDL restarts it).
NNI_STATUSES: dict[str, str] = {
    "QUEUED": "WAITING",
    "PULLING": "WAITING",
    "PAUSED": "WAITING",
    "RUNNING": "RUNNING",
    "STOPPING_COMPLETED": "RUNNING",
    "STOPPING_ERROR": "RUNNING",
    "STOPPING_CANCELED": "RUNNING",
    "STOPPING_KILLED": "RUNNING",
    "COMPLETED": "SUCCEEDED",
    "ERROR": "FAILED",
    "CANCELED": "USER_CANCELED",
}


def nni_status(trial: Record) -> str:
    """The NNI status of a trial: EARLY_STOPPED when the searcher stopped it, else by state."""
    if trial.get("early_stopped") is True:
        return "EARLY_STOPPED"
    if rescaling(trial):
        return "RUNNING"
    return NNI_STATUSES.get(str(trial.get("state") or ""), "UNKNOWN")


def _experiment_config(client: ApiClient, trial: Json) -> Json:
    """The config of the trial's experiment ({} when the experiment is gone)."""
    experiment_id = trial.get("experiment_id")
    if experiment_id is None:
        return {}
    try:
        experiment = client.get_experiment(int(experiment_id)).get("experiment") or {}
    except NotFoundError:
        return {}
    config = experiment.get("config")
    return config if isinstance(config, dict) else {}


def _from_nni(config: Json) -> bool:
    """Whether the experiment was imported from an NNI config (its config has `data.nni`)."""
    data = config.get("data")
    return isinstance(data, dict) and data.get("nni") is not None


BUILT_IN_GROUPS = ("training", "validation")


def fetch_metrics(client: ApiClient, trial_id: int) -> Json:
    """The trial's metrics by group: training and validation always, then each custom group it reported
    (Determined's `report_metrics(group=...)`), by name."""
    groups = [*BUILT_IN_GROUPS]
    groups += [g for g in client.trial_metric_groups(trial_id) if g not in BUILT_IN_GROUPS]
    return {group: client.trial_metrics(trial_id, group) for group in groups}


# Every column a trials table shows, by header: `det trial describe` and `det experiment describe`
# each pick theirs, in `det`'s order.
TRIAL_CELLS: dict[str, Cell] = {
    "Trial ID": lambda t: t["id"],
    "Experiment ID": field("experiment_id"),
    "State": field("state"),
    "NNI Status": lambda t: t.get("nni_status") or nni_status(t),
    "H-Params": lambda t: format_json(t.get("hparams") or {}),
    "Started": time_field("start_time"),
    "Ended": time_field("end_time"),
    "Restarts": field("restarts"),
    "# of Batches": field("total_batches"),
    "Best Validation": field("best_validation"),
    # Its UUID, as Determined shows a checkpoint (`det checkpoint describe UUID` takes it).
    "Latest Checkpoint": lambda t: (t.get("latest_checkpoint") or {}).get("uuid"),
    "Exit": lambda t: _format_exit(t.get("exit")),
}
# `det trial describe` (with "NNI Status" after "State" for a trial imported from NNI).
_DESCRIBE_HEADERS = (
    "Trial ID",
    "Experiment ID",
    "State",
    "H-Params",
    "Started",
    "Ended",
    "Restarts",
    "# of Batches",
    "Exit",
)
# `det trial describe`'s checkpoints, every column in this order.
_CHECKPOINT_CELLS: dict[str, Cell] = {
    "UUID": field("uuid"),
    "Steps": field("steps_completed"),
    "State": field("state"),
    "Report Time": time_field("report_time"),
    "URI": field("uri"),
}


def trial_table(trials: Sequence[Json], *, nni: bool = False, as_csv: bool = False) -> str:
    """The trials' table; `nni` adds an "NNI Status" column after "State"."""
    headers = list(_DESCRIBE_HEADERS)
    if nni:
        headers.insert(headers.index("State") + 1, "NNI Status")
    return records_table(TRIAL_CELLS, headers, trials, as_csv=as_csv)


def checkpoints_table(checkpoints: Sequence[Json], *, as_csv: bool = False) -> str:
    ordered = sorted(checkpoints, key=lambda c: (c.get("steps_completed") or 0, str(c.get("uuid"))))
    return records_table(_CHECKPOINT_CELLS, list(_CHECKPOINT_CELLS), ordered, as_csv=as_csv)


def validation_summary(trial: Json) -> str:
    best = trial.get("best_validation")
    latest = format_metrics(trial.get("latest_validation"))
    return "\n".join(
        [
            f"Best validation:   {format_value(best) if best is not None else 'none'}",
            f"Latest validation: {latest or 'none'}",
        ]
    )


def workloads_table(trials: Sequence[tuple[int, Json, Sequence[Json]]], *, as_csv: bool = False) -> str:
    """One row per trial and `steps_completed`, like Determined's "Workloads:" section.

    `trials` holds (trial id, {"training": [Metric], "validation": [Metric]}, [Checkpoint]).
    """
    t_names = sorted({n for _, m, _ in trials for n in _scalar_names(m.get("training", []))})
    v_names = sorted({n for _, m, _ in trials for n in _scalar_names(m.get("validation", []))})
    headers = (
        ["Trial ID", "# of Batches", "State", "Report Time"]
        + [f"Training Metric: {n}" for n in t_names]
        + ["Checkpoint State", "Checkpoint Report Time", "Validation State", "Validation Report Time"]
        + [f"Validation Metric: {n}" for n in v_names]
    )
    rows: list[list[Any]] = []
    for trial_id, metrics, checkpoints in trials:
        training = {m["steps_completed"]: m for m in metrics.get("training", [])}
        validation = {m["steps_completed"]: m for m in metrics.get("validation", [])}
        saved = {c["steps_completed"]: c for c in checkpoints}
        for steps in sorted(set(training) | set(validation) | set(saved)):
            t, v, c = training.get(steps), validation.get(steps), saved.get(steps)
            times = [x["report_time"] for x in (t, v, c) if x and x.get("report_time")]
            rows.append(
                [trial_id, steps, "COMPLETED", format_time(max(times) if times else None)]
                + [_metric(t, n) for n in t_names]
                + [
                    c.get("state") if c else None,
                    format_time(c.get("report_time")) if c else None,
                    "COMPLETED" if v else None,
                    format_time(v.get("report_time")) if v else None,
                ]
                + [_metric(v, n) for n in v_names]
            )
    return csv_table(headers, rows) if as_csv else table(headers, rows)


def custom_group_tables(trials: Sequence[tuple[int, Json]]) -> str:
    """A table per custom metric group (any group but training and validation), titled with the group's
    name: one row per trial and `steps_completed`, a column per metric. "" when there is none.

    `trials` holds (trial id, {group: [Metric]}), as `fetch_metrics` gives them.
    """
    groups = sorted({g for _, metrics in trials for g in metrics if g not in BUILT_IN_GROUPS})
    sections = []
    for group in groups:
        reports = [(trial_id, m) for trial_id, metrics in trials for m in metrics.get(group) or []]
        names = sorted({n for _, m in reports for n in m.get("metrics") or {}})
        rows = [
            [trial_id, m.get("steps_completed"), format_time(m.get("report_time"))]
            + [_group_metric(m, n) for n in names]
            for trial_id, m in sorted(reports, key=lambda r: (r[0], r[1].get("steps_completed") or 0))
        ]
        headers = ["Trial ID", "# of Batches", "Report Time"] + [f"Metric: {n}" for n in names]
        sections.append(f"Metric group: {group}\n" + table(headers, rows))
    return "\n\n".join(sections)


def _group_metric(record: Json, name: str) -> Any:
    value = (record.get("metrics") or {}).get(name)
    return value if value is None or isinstance(value, int | float | str) else format_json(value)


def _scalar_names(metrics: Sequence[Json]) -> set[str]:
    return {
        name
        for m in metrics
        for name, value in (m.get("metrics") or {}).items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def _metric(record: Json | None, name: str) -> Any:
    if record is None:
        return None
    return (record.get("metrics") or {}).get(name)


def _format_exit(exit_info: Json | None) -> str | None:
    if not exit_info:
        return None
    reason = str(exit_info.get("reason") or "")
    code = exit_info.get("code")
    if code is None or str(code) in reason:
        return reason or None
    return f"{reason} (exit code {code})" if reason else f"exit code {code}"

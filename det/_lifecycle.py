"""`det experiment list-trials | list-checkpoints | delete | wait ID` (Determined's verbs and columns).

- `list-trials` (`lt`): Determined's table (Trial ID, State, H-Params, Started, Ended, # of Batches).
- `delete`: only an experiment that has ended; asks first unless `--yes`, and refuses to guess without a
  terminal to ask on. The API removes it in the request when it is small, else in the background.
- `wait`: polls every `--polling-interval` seconds (5 unless given, as Determined), printing each state it
  sees, until the experiment ends: exit 0 for COMPLETED, 1 otherwise (Determined's codes).
"""

from __future__ import annotations

import argparse
import json

from det import _checkpoint
from det._commands import Subcommands
from det._render import Cell, field, format_json, plural, records_table, time_field
from det._runtime import Runtime
from det.errors import UsageError

TERMINAL_STATES = frozenset({"COMPLETED", "CANCELED", "ERROR"})
EXIT_NOT_COMPLETED = 1
DEFAULT_POLLING_INTERVAL_S = 5.0

_TRIAL_CELLS: dict[str, Cell] = {
    "Trial ID": field("id"),
    "State": field("state"),
    "H-Params": lambda t: format_json(t.get("hparams") or {}),
    "Started": time_field("start_time"),
    "Ended": time_field("end_time"),
    "# of Batches": field("total_batches"),
}

_DELETE_WARNING = (
    "Deleting experiment {id} removes all of its checkpoints, metrics, logs and trials for good.\n"
    "For a recoverable alternative, see `det experiment archive`. Do you still wish to proceed?"
)


def add_parsers(sub: Subcommands) -> None:
    trials = sub.add_parser("list-trials", aliases=["lt"], help="list the trials of an experiment")
    trials.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    output = trials.add_mutually_exclusive_group()
    output.add_argument("--csv", action="store_true", help="print as CSV")
    output.add_argument("--json", action="store_true", help="print the API's JSON")
    trials.set_defaults(command=list_trials)

    checkpoints = sub.add_parser(
        "list-checkpoints", aliases=["lc"], help="list the checkpoints of an experiment"
    )
    _checkpoint.add_list_arguments(checkpoints)

    delete = sub.add_parser("delete", help="delete an experiment that has ended, with its data")
    delete.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(command=delete_experiment)

    wait = sub.add_parser("wait", help="wait until an experiment ends (exit 0 if it COMPLETED)")
    wait.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    wait.add_argument(
        "--polling-interval",
        type=float,
        default=DEFAULT_POLLING_INTERVAL_S,
        metavar="S",
        help=f"seconds between two looks (default: {DEFAULT_POLLING_INTERVAL_S:g})",
    )
    wait.set_defaults(command=wait_experiment)


def list_trials(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        trials = client.list_trials(args.experiment_id)
    if args.json:
        rt.say(json.dumps({"trials": trials}, indent=4))
        return 0
    rt.say(records_table(_TRIAL_CELLS, list(_TRIAL_CELLS), trials, as_csv=args.csv))
    return 0


def delete_experiment(args: argparse.Namespace, rt: Runtime) -> int:
    experiment_id = args.experiment_id
    with rt.client() as client:
        client.get_experiment(experiment_id)  # an unknown id is said before any question is asked
    if not args.yes:
        if not rt.inp_is_tty():
            raise UsageError(
                f"`det experiment delete {experiment_id}` asks for confirmation, and there is no terminal "
                "to ask on; pass --yes to delete without asking"
            )
        if not rt.confirm(_DELETE_WARNING.format(id=experiment_id)):
            rt.say("Aborting experiment deletion.")
            return 0
    with rt.client() as client:
        answer = client.delete_experiment(experiment_id)
    if answer.get("deleted"):
        rt.say(f"Successfully deleted experiment {experiment_id}")
    else:
        rt.say(
            f"Deleting experiment {experiment_id}: {_trials_left(answer.get('trials_left'))} left to "
            "remove in the background; it shows as DELETING until it is gone"
        )
    return 0


def _trials_left(count: object) -> str:
    if isinstance(count, int) and not isinstance(count, bool):
        return f"{plural(count, 'trial')} {'is' if count == 1 else 'are'}"
    return "some trials are"


def wait_experiment(args: argparse.Namespace, rt: Runtime) -> int:
    interval = args.polling_interval
    if not interval > 0:
        raise UsageError(f"--polling-interval {interval:g} must be more than 0 seconds")
    experiment_id = args.experiment_id
    seen: str | None = None
    with rt.client() as client:
        while True:
            state = str(client.get_experiment(experiment_id)["experiment"]["state"])
            if state != seen:
                rt.note(f"Experiment {experiment_id} is {state}")
                seen = state
            if state in TERMINAL_STATES:
                break
            rt.sleep(interval)
    rt.say(f"Experiment {experiment_id} terminated with state {state}")
    return 0 if state == "COMPLETED" else EXIT_NOT_COMPLETED

"""`det experiment set description|name|max-slots|priority|weight ID VALUE` and `det experiment label
add|remove ID LABEL`: Determined's verbs and lines.

`max-slots` is `resources.max_slots` (the most slots the experiment's trials hold at once; `none` clears
it); `priority` and `weight` are the job's (`det job update --priority/--weight`, with its rules: a
priority needs a pool with the priority scheduler, a weight a fair_share pool). Labels are added and
removed by name on the server, so two users labelling at once lose neither label.
"""

from __future__ import annotations

import argparse
from typing import Any

from det._commands import Subcommands
from det._runtime import Runtime

Json = dict[str, Any]


def add_parsers(sub: Subcommands) -> None:
    setter = sub.add_parser("set", help="change an experiment's description, name, slot limit or job")
    fields = setter.add_subparsers(title="fields", metavar="FIELD", required=True)
    _field(fields, "description", "set the description", "DESCRIPTION", str)
    _field(fields, "name", "set the name", "NAME", str)
    _field(fields, "max-slots", "set `resources.max_slots` (none: no limit)", "SLOTS", _none_or_int)
    _field(fields, "priority", "set the job's priority (1-99, lower runs first)", "PRIORITY", int)
    _field(fields, "weight", "set the job's fair-share weight (> 0)", "WEIGHT", float)

    label = sub.add_parser("label", help="add or remove an experiment's labels")
    verbs = label.add_subparsers(title="label commands", metavar="COMMAND", required=True)
    for verb, text in (("add", "add a label"), ("remove", "remove a label")):
        parser = verbs.add_parser(verb, help=text)
        parser.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
        parser.add_argument("label", metavar="LABEL")
        parser.set_defaults(command=add_label if verb == "add" else remove_label)


def _field(
    fields: Subcommands,
    name: str,
    text: str,
    metavar: str,
    kind: Any,
) -> None:
    parser = fields.add_parser(name, help=text)
    parser.add_argument("experiment_id", type=int, metavar="ID", help="experiment id")
    parser.add_argument("value", type=kind, metavar=metavar)
    parser.set_defaults(command=set_field, field=name)


def _none_or_int(text: str) -> int:
    """`none` (Determined's word) clears the limit: 0 for the API."""
    if text.lower() == "none":
        return 0
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a slot count: give 1 or more, or none")
    return value


def set_field(args: argparse.Namespace, rt: Runtime) -> int:
    experiment_id, value = args.experiment_id, args.value
    with rt.client() as client:
        if args.field in ("priority", "weight"):
            answer = client.update_job(str(experiment_id), {args.field: value})
            rt.say(f"Set `{args.field}` of experiment {experiment_id} to {value:g}")
            for note in answer.get("notes", []):
                rt.say(f"Note: {note}")
            return 0
        key = "max_slots" if args.field == "max-slots" else args.field
        client.edit_experiment(experiment_id, {key: value})
    if key == "max_slots":
        rt.say(f"Set `max_slots` of experiment {experiment_id} to {value or None}")
    else:
        rt.say(f"Set {key} of experiment {experiment_id} to '{value}'")
    return 0


def add_label(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        client.edit_experiment(args.experiment_id, {"add_labels": [args.label]})
    rt.say(f"Added label '{args.label}' to experiment {args.experiment_id}")
    return 0


def remove_label(args: argparse.Namespace, rt: Runtime) -> int:
    with rt.client() as client:
        client.edit_experiment(args.experiment_id, {"remove_labels": [args.label]})
    rt.say(f"Removed label '{args.label}' from experiment {args.experiment_id}")
    return 0

"""`det experiment` (alias `e`): the noun whose verbs live in several modules, joined here in the order
`det experiment --help` lists them. Each verb's parser sits next to its code (`det._commands`)."""

from __future__ import annotations

from det import _exp_downloads, _experiment, _experiment_set, _lifecycle, _monitoring, _stop, _submit
from det._commands import Subcommands


def add_parsers(commands: Subcommands) -> None:
    experiment = commands.add_parser("experiment", aliases=["e"], help="manage experiments")
    sub = experiment.add_subparsers(title="experiment commands", metavar="COMMAND")
    # `det e` alone lists, as in Determined.
    experiment.set_defaults(
        command=_experiment.list_experiments, all=False, limit=None, offset=None, json=False, csv=False
    )
    _submit.add_create_parser(sub)
    _experiment.add_listing_parsers(sub)
    _submit.add_activate_parser(sub)
    _experiment.add_archive_parsers(sub)
    _stop.add_experiment_parsers(sub)
    _lifecycle.add_parsers(sub)
    _experiment_set.add_parsers(sub)
    _monitoring.add_parsers(sub)
    _exp_downloads.add_experiment_parsers(sub)

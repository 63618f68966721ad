"""`det trial` (alias `t`): the noun whose verbs live in several modules, joined here in the order
`det trial --help` lists them. Each verb's parser sits next to its code (`det._commands`)."""

from __future__ import annotations

from det import _exp_downloads, _stop, _trial
from det._commands import Subcommands, needs_subcommand


def add_parsers(commands: Subcommands) -> None:
    trial = commands.add_parser("trial", aliases=["t"], help="manage trials")
    sub = trial.add_subparsers(title="trial commands", metavar="COMMAND")
    trial.set_defaults(command=needs_subcommand(trial))
    _trial.add_parsers(sub)
    _stop.add_trial_parsers(sub)
    _exp_downloads.add_trial_parsers(sub)

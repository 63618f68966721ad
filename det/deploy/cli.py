"""`det deploy` (alias `d`): the noun whose targets, `local` and `aws`, each declare their commands next to
their code (`det.deploy.local`, `det.deploy.aws`); this module joins them (`det._commands`)."""

from __future__ import annotations

from det._commands import Subcommands, needs_subcommand
from det.deploy import aws, local


def add_parsers(commands: Subcommands) -> None:
    deploy = commands.add_parser("deploy", aliases=["d"], help="run Stratus")
    targets = deploy.add_subparsers(title="targets", metavar="TARGET")
    deploy.set_defaults(command=needs_subcommand(deploy))
    local.add_parsers(targets)
    aws.add_parsers(targets)

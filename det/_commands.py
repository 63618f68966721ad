"""The one shape every part of the `det` command line has, so that `det.cli` only joins them.

A module that runs commands declares their parsers next to their code, in functions that take the
subcommands of the level above and add to them (`Subcommands`). A noun module (`CommandModule`: `job`,
`checkpoint`, the experiment's `_experiment_cli`, ...) exposes `add_parsers(commands)`, which adds its
noun to `det`'s commands and joins its verbs; `det.cli` lists the noun modules, in the order `det --help`
shows them. A verb module adds its verbs to its noun's subcommands the same way (`add_parsers(sub)`, or
one `add_<verbs>_parsers(sub)` per run of verbs where the help interleaves them with another module's).

Each parser's `command` default is the `Command` that `det.cli.main` calls with the parsed arguments.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Protocol, TypeAlias

from det._runtime import Runtime

# What `add_subparsers` returns (a string: argparse's class is not subscriptable at run time).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Command: TypeAlias = Callable[[argparse.Namespace, Runtime], int]


class CommandModule(Protocol):
    """A noun module: what `det.cli` needs of it (a module object satisfies this protocol)."""

    def add_parsers(self, commands: Subcommands) -> None: ...


def needs_subcommand(parser: argparse.ArgumentParser) -> Command:
    """The command of a noun given without its verb (`det trial`): its help on stderr, exit 2, as argparse
    answers a usage error."""

    def show_help(args: argparse.Namespace, rt: Runtime) -> int:
        parser.print_help(rt.err)
        return 2

    return show_help

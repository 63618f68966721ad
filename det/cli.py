"""The `det` command line (also installed as `stratus`), shaped like Determined's.

    det [-m MASTER] experiment|e  create | list|ls | describe | config | logs | activate|unpause
                                  | archive | unarchive | pause | cancel | kill | list-trials|lt
                                  | list-checkpoints|lc | download | delete | wait | dashboard | plot
                                  | set description|name|max-slots|priority|weight | label add|remove
    det [-m MASTER] checkpoint|c  list|ls | describe | download | delete|rm
    det [-m MASTER] trial|t       describe | logs | download | kill
    det [-m MASTER] job|j         list|ls | update|u | update-batch
    det example                   list|ls | copy|cp NAME [DIR]
    det deploy|d local            up|cluster-up | status | down|cluster-down
    det deploy|d aws              up | down | list | status

Every `DetError` ends the command with one line `Error: <message>` on stderr (plus one indented
line per config problem) and the error's exit code. Ctrl-C ends it with 130, SIGTERM and SIGHUP with
128+N, once what was being done has unwound (its temporary files removed, `det._signals`); a command
interrupted in a step it named says which and what it left (`Interrupted: ...`), else quietly.

Each noun module declares its own commands (`det._commands`): this module only lists the noun modules,
adds the global flags, runs the command and reports its error.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from det import _checkpoint, _cluster, _examples, _experiment_cli, _job, _master, _trial_cli
from det._commands import Command, CommandModule
from det._master_url import master_url
from det._runtime import DEFAULT_MASTER, Runtime
from det._signals import EXIT_INTERRUPTED, Terminated, on_termination
from det.deploy import cli as _deploy_cli
from det.errors import ApiError, DetError

# The noun modules, in the order `det --help` lists their commands; each adds its own (`det._commands`).
NOUNS: tuple[CommandModule, ...] = (
    _experiment_cli,
    _trial_cli,
    _job,
    _checkpoint,
    _cluster,  # resource-pool, agent, slot
    _master,  # version, master
    _examples,
    _deploy_cli,
)

EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None, *, runtime: Runtime | None = None) -> int:
    """Run one command; `runtime` replaces the outside world (API transport, clock, streams) in tests."""
    rt = runtime or Runtime(environ=os.environ)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    command: Command | None = getattr(args, "command", None)
    if command is None:
        parser.print_help(rt.err)
        return 2
    try:
        with on_termination():
            rt = dataclasses.replace(rt, master=master_url(args.master, rt.environ.get("DET_MASTER")))
            return command(args, rt)
    except DetError as e:
        report_error(e, rt.err)
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Terminated as e:  # SIGTERM or SIGHUP: what was being done unwound, its files removed
        return e.exit_code
    except BrokenPipeError:
        # `det trial logs 3 | head`: the reader left; say nothing more, on a stdout that is gone.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def report_error(error: DetError, stream: TextIO) -> None:
    """`Error: <message>`, then one indented line per problem the API listed. Where the message already
    lists them (the API's `config has 2 problems: a: x; b: y`), only its head is kept: each problem
    is printed once."""
    problems = error.problems if isinstance(error, ApiError) else []
    lines = [_problem_line(p) for p in problems]
    message = str(error)
    first = message.find(lines[0]) if lines else -1
    if lines and first > 0 and all(line in message for line in lines):
        message = message[:first].rstrip(" :;") + ":"
    print(f"{error.label}: {message}", file=stream)
    for line in lines:
        print(f"  {line}", file=stream)
    stream.flush()


def _problem_line(problem: dict[str, str]) -> str:
    where = problem.get("path") or ""
    return f"{where}: {problem.get('message', '')}" if where else str(problem.get("message", ""))


def build_parser() -> argparse.ArgumentParser:
    """The global flags, then every noun module's commands."""
    parser = argparse.ArgumentParser(
        prog="det", description="Stratus: Determined's CLI on a serverless control plane."
    )
    parser.add_argument(
        "-m",
        "--master",
        metavar="URL",
        help=f"the Stratus API (default: $DET_MASTER, else {DEFAULT_MASTER})",
    )
    parser.add_argument("-v", "--version", action="version", version=f"%(prog)s {_master.client_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for noun in NOUNS:
        noun.add_parsers(commands)
    return parser


if __name__ == "__main__":
    sys.exit(main())

"""Prefix a command's output with its rank: ``python3 -m stratus.launchers.wrap_rank RANK [--] CMD [ARGS...]``.

Every line the command writes comes out as ``[rank=N] line``, stdout on stdout and stderr on stderr
(``\\n``, ``\\r\\n`` and ``\\r`` end a line; a line over 16 KiB is split). SIGINT, SIGTERM, SIGHUP, SIGUSR1
and SIGUSR2 are passed on to the command; the exit code is the command's (128+N when a signal ended it).

RANK is a number, or names of environment variables tried in order, comma-separated
(``HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK``): the launchers that start one process per rank
themselves (torchrun on several nodes, horovodrun, deepspeed) put ``wrap_rank RANK`` before the command.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from stratus.launchers._info import kill_grace_from_env, rank_from_env
from stratus.launchers._monitor import Worker, run_workers
from stratus.launchers.errors import LaunchConfigError, LauncherError

USAGE = "python3 -m stratus.launchers.wrap_rank RANK [--] CMD [ARGS...]"


def resolve_rank(rank: str, environ: Mapping[str, str] | None = None) -> int:
    """The rank a RANK argument names: the number itself, or the first of the variables that is set."""
    if rank.isdigit():
        return int(rank)
    found = rank_from_env(rank, environ)
    if found is not None:
        return found
    raise LaunchConfigError(
        f"RANK {rank!r} is neither a number nor the name of a variable that is set; "
        f"give the rank, or the variables that hold it. Usage: {USAGE}"
    )


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> tuple[int, list[str]]:
    args = list(argv)
    if args[:1] in (["-h"], ["--help"]):
        raise LaunchConfigError(f"usage: {USAGE}")
    if not args:
        raise LaunchConfigError(f"no RANK and no command. Usage: {USAGE}")
    rank = resolve_rank(args[0], environ)
    cmd = args[2:] if args[1:2] == ["--"] else args[1:]
    if not cmd:
        raise LaunchConfigError(f"no command to run. Usage: {USAGE}")
    return rank, cmd


def main(argv: Sequence[str] | None = None) -> int:
    try:
        rank, cmd = parse_args(sys.argv[1:] if argv is None else argv)
        grace = kill_grace_from_env()
    except LauncherError as e:
        print(f"[launcher] wrap_rank: {e}", file=sys.stderr)
        return e.exit_code
    return run_workers([Worker(rank, cmd)], kill_grace=grace, announce=False, share_stdin=True)


if __name__ == "__main__":
    sys.exit(main())

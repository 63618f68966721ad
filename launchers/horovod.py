"""Launch a trial under horovodrun:

    python3 -m stratus.launchers.horovod [HOROVODRUN_OVERRIDES... --] (--trial module:Class | COMMAND [ARGS...])

``horovodrun -np <slots> -H <host>:<slots per node>,... --start-timeout 120`` runs the command once per
slot, behind ``stratus.launchers.wrap_rank HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK`` (the variable that holds
the rank depends on horovod's controller: Gloo, Open MPI or MPICH). On one node the host is
``localhost``, which horovod runs without ssh. On several nodes horovodrun, on the chief only, reaches
the other nodes over ssh (the rendezvous, or ``STRATUS_NODE_ADDRS`` in a static setup, gives their
addresses; ``-p`` overrides the ssh port); Stratus starts no ssh server on them, so the other nodes
refuse to run this launcher (before the rendezvous: the chief's then ends when their runs do).

horovodrun monitors its workers itself; this launcher only forwards signals and returns its exit code.
"""

from __future__ import annotations

import shutil
import signal
import sys
from collections.abc import Sequence

from stratus.launchers._argv import FlagSpec, Target, merge_flags, parse_launch_args, worker_command
from stratus.launchers._info import LaunchInfo, load_launch_info
from stratus.launchers._rendezvous import resolve_peers
from stratus.launchers._signals import run_command
from stratus.launchers.errors import LaunchConfigError, LauncherError, MissingProgramError

#: SIGUSR1/SIGUSR2 would end horovodrun (it does not handle them) and orphan its workers: they are ignored.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
NOTICE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)

USAGE = (
    "python3 -m stratus.launchers.horovod [HOROVODRUN_OVERRIDES... --] (--trial module:Class | COMMAND...)"
)
RANK_VARIABLES = "HOROVOD_RANK,OMPI_COMM_WORLD_RANK,PMI_RANK"
#: Seconds horovodrun waits for every worker to check in (its default, 30, is short for cold nodes).
START_TIMEOUT_S = 120

HOROVODRUN_FLAGS = FlagSpec(
    aliases={
        "-np": "--num-proc",
        "-H": "--hosts",
        "-hostfile": "--hostfile",
        "-p": "--ssh-port",
        "-i": "--ssh-identity-file",
        "-v": "--version",
        "-cb": "--check-build",
        "--network-interfaces": "--network-interface",
    },
    switches=frozenset(
        {
            "--version",
            "--check-build",
            "--verbose",
            "--disable-cache",
            "--gloo",
            "--mpi",
            "--jsrun",
            "--autotune",
            "--hierarchical-allreduce",
            "--no-hierarchical-allreduce",
            "--hierarchical-allgather",
            "--no-hierarchical-allgather",
            "--timeline-mark-cycles",
            "--no-stall-check",
            "--mpi-threads-disable",
            "--log-without-timestamp",
            "--log-hide-timestamp",
            "--tcp",
        }
    ),
    valued=frozenset({"--mpi-args", "--output-filename"}),
    replaces={"--hostfile": ("--hosts",), "--host-discovery-script": ("--hosts",)},
)


def hosts_arg(info: LaunchInfo) -> str:
    """``-H``'s value: every node with its slots, chief first."""
    return ",".join(f"{host}:{info.slots_per_node}" for host in info.hosts)


def build_argv(
    info: LaunchInfo, overrides: Sequence[str], target: Target, *, python: str = "python3"
) -> list[str]:
    base: list[tuple[str, str | None]] = [
        ("-np", str(info.world_size)),
        ("-H", hosts_arg(info)),
        ("--start-timeout", str(START_TIMEOUT_S)),
    ]
    return [
        "horovodrun",
        *merge_flags(base, overrides, HOROVODRUN_FLAGS),
        python,
        "-m",
        "stratus.launchers.wrap_rank",
        RANK_VARIABLES,
        "--",
        *worker_command(target, python),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        overrides, target = parse_launch_args(sys.argv[1:] if argv is None else argv, USAGE)
        info = load_launch_info()
        if info.node_rank != 0:
            raise LaunchConfigError(
                f"node {info.node_rank} of {info.num_nodes}: only the chief runs horovodrun, which starts "
                "the other nodes' workers over ssh, and Stratus runs no ssh server; use "
                "stratus.launchers.torch_distributed for trials on several nodes."
            )
        info = resolve_peers(info)  # the other nodes' addresses for -H
        cmd = build_argv(info, overrides, target, python=sys.executable)
        if shutil.which(cmd[0]) is None:
            raise MissingProgramError(
                "horovodrun is not installed (not on PATH); `pip install horovod` in the trial's image "
                "(it compiles against torch: needs cmake and a C++ compiler)."
            )
        return run_command(cmd, signals=STOP_SIGNALS, swallowed=NOTICE_SIGNALS)
    except LauncherError as e:
        print(f"[launcher] horovod: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())

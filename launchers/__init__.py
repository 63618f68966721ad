"""Launchers: start a trial's processes, one per slot, and watch them.

    python3 -m stratus.launchers.torch_distributed [TORCH_OVERRIDES... --] (--trial module:Class | COMMAND...)
    python3 -m stratus.launchers.horovod [HOROVODRUN_OVERRIDES... --] (--trial module:Class | COMMAND...)
    python3 -m stratus.launchers.deepspeed [DEEPSPEED_OVERRIDES... --] (--trial module:Class | COMMAND...)
    python3 -m stratus.launchers.adaptdl [--replicas-per-node N --] (--trial module:Class | COMMAND...)
    python3 -m stratus.launchers.wrap_rank RANK [--] CMD [ARGS...]

Each launcher module has pure builders (its command line, its workers' environment) and a ``main`` that
runs them, forwards signals and returns the exit code. ``run_workers`` is the contract they share on each
node: ``[rank=N]`` prefixes, the first failing rank named, the others stopped (SIGTERM, then SIGKILL after
``STRATUS_KILL_GRACE_S``). On several nodes, ``resolve_peers`` first finds the other nodes through the
control plane's rendezvous (``_rendezvous``) unless ``STRATUS_CHIEF_ADDR`` gives a static setup. The
environment is read in ``_info`` only. Compute side: the standard library, and torch only inside
functions; never ``chalicelib``.
"""

from __future__ import annotations

from stratus.launchers._argv import Script, Target, Trial, parse_launch_args, worker_command
from stratus.launchers._info import LaunchInfo, load_launch_info
from stratus.launchers._lines import RankLines
from stratus.launchers._monitor import Outcome, Worker, run_workers
from stratus.launchers._rendezvous import rendezvous, resolve_peers
from stratus.launchers.errors import LaunchConfigError, LauncherError, MissingProgramError, RendezvousError

__all__ = [
    "LaunchConfigError",
    "LaunchInfo",
    "LauncherError",
    "MissingProgramError",
    "Outcome",
    "RankLines",
    "RendezvousError",
    "Script",
    "Target",
    "Trial",
    "Worker",
    "load_launch_info",
    "parse_launch_args",
    "rendezvous",
    "resolve_peers",
    "run_workers",
    "worker_command",
]

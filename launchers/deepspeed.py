"""Launch a trial under DeepSpeed's launcher:

    python3 -m stratus.launchers.deepspeed [DEEPSPEED_OVERRIDES... --] (--trial module:Class | COMMAND [ARGS...])

``deepspeed ... --no_python --no_local_rank python3 -m stratus.launchers.wrap_rank RANK -- COMMAND``: DeepSpeed
starts one process per slot with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` set; ``--no_python`` because the command is a command (not a script DeepSpeed prefixes
with Python) and ``--no_local_rank`` because the workers read ``LOCAL_RANK`` from the environment
instead of a ``--local_rank`` argument their parser may not accept.

- One node: ``--num_gpus <slots>``, except when the agent has set ``CUDA_VISIBLE_DEVICES``: DeepSpeed
  then uses exactly those devices, and ``--num_gpus`` would make it drop them for devices 0..N-1.
- Several nodes: every node runs its own DeepSpeed launcher with ``--no_ssh --node_rank R`` and the same
  hostfile (``host slots=N`` per line, written to a temporary file, the addresses from the rendezvous or
  ``STRATUS_NODE_ADDRS``; the chief's port from the rendezvous), so no node needs an ssh server and
  nothing has to be exported through ``.deepspeed_env`` (each node's workers inherit that node's
  environment). ``--no_ssh`` needs a recent DeepSpeed (0.19.8 has it).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence

from stratus.launchers._argv import (
    FlagSpec,
    Target,
    merge_flags,
    parse_launch_args,
    worker_command,
)
from stratus.launchers._info import LaunchInfo, free_port, load_launch_info
from stratus.launchers._rendezvous import resolve_peers
from stratus.launchers._signals import run_command
from stratus.launchers.errors import LauncherError, MissingProgramError

#: SIGUSR1/SIGUSR2 would end deepspeed (it does not handle them) and orphan its workers: they are ignored.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
NOTICE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)

USAGE = (
    "python3 -m stratus.launchers.deepspeed [DEEPSPEED_OVERRIDES... --] (--trial module:Class | COMMAND...)"
)

DEEPSPEED_FLAGS = FlagSpec(
    aliases={"-H": "--hostfile", "-i": "--include", "-e": "--exclude", "--num-accelerators": "--num-gpus"},
    switches=frozenset(
        {
            "--module",
            "--no-python",
            "--no-local-rank",
            "--no-ssh",
            "--no-ssh-check",
            "--force-multi",
            "--save-pid",
            "--elastic-training",
            "--bind-cores-to-rank",
        }
    ),
    # DeepSpeed refuses --num_nodes/--num_gpus together with --include/--exclude.
    replaces={"--include": ("--num-gpus", "--num-nodes"), "--exclude": ("--num-gpus", "--num-nodes")},
    # The launcher runs the command as written: 'python3 -m my.module' after '--' runs a module.
    refused=frozenset({"--module"}),
)


def hostfile_text(info: LaunchInfo) -> str:
    """The hostfile of a trial on several nodes: ``<address> slots=<slots per node>``, chief first.

    DeepSpeed refuses a hostfile naming a host twice, which happens when two nodes share an address (two
    agents on one machine, as the local stack's pool). With ``--no_ssh`` the names are only keys (each
    node picks its line by ``--node_rank``; the master is ``--master_addr``), so a shared address gets
    ``-node<k>`` labels."""
    hosts = info.hosts
    labels = [host if hosts.count(host) == 1 else f"{host}-node{k}" for k, host in enumerate(hosts)]
    return "".join(f"{label} slots={info.slots_per_node}\n" for label in labels)


def build_argv(
    info: LaunchInfo,
    overrides: Sequence[str],
    target: Target,
    *,
    python: str = "python3",
    hostfile: str | None = None,
) -> list[str]:
    """DeepSpeed's command line for this node; ``hostfile`` (the path of hostfile_text) is needed on
    several nodes."""
    if info.chief_port is None:
        raise ValueError("pick the master port (LaunchInfo.chief_port) before building deepspeed's argv")
    info.require_chief()
    base: list[tuple[str, str | None]] = []
    if info.multi_node:
        if hostfile is None:
            raise ValueError("a launch on several nodes needs the hostfile's path")
        base += [
            ("--hostfile", hostfile),
            ("--no_ssh", None),
            ("--node_rank", str(info.node_rank)),
            ("--num_nodes", str(info.num_nodes)),
            ("--num_gpus", str(info.slots_per_node)),
        ]
    elif info.visible_devices is None:
        base.append(("--num_gpus", str(info.slots_per_node)))
    base += [
        ("--master_addr", info.chief_addr),
        ("--master_port", str(info.chief_port)),
        ("--no_python", None),
        ("--no_local_rank", None),
    ]
    return [
        "deepspeed",
        *merge_flags(base, overrides, DEEPSPEED_FLAGS),
        python,
        "-m",
        "stratus.launchers.wrap_rank",
        "RANK",
        "--",
        *worker_command(target, python),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    hostfile: str | None = None
    try:
        overrides, target = parse_launch_args(sys.argv[1:] if argv is None else argv, USAGE)
        info = resolve_peers(load_launch_info())  # the chief and the hostfile's addresses
        if info.chief_port is None:
            info = dataclasses.replace(info, chief_port=free_port())
        if shutil.which("deepspeed") is None:
            raise MissingProgramError(
                "deepspeed is not installed (not on PATH); `pip install deepspeed` in the trial's image."
            )
        if info.multi_node:
            fd, hostfile = tempfile.mkstemp(prefix="stratus-hostfile-", suffix=".txt")
            with os.fdopen(fd, "w") as f:
                f.write(hostfile_text(info))
        cmd = build_argv(info, overrides, target, python=sys.executable, hostfile=hostfile)
        return run_command(cmd, signals=STOP_SIGNALS, swallowed=NOTICE_SIGNALS)
    except LauncherError as e:
        print(f"[launcher] deepspeed: {e}", file=sys.stderr)
        return e.exit_code
    finally:
        if hostfile is not None:
            os.unlink(hostfile)


if __name__ == "__main__":
    sys.exit(main())

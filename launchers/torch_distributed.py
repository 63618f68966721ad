"""Launch a trial on ``torch.distributed``:

    python3 -m stratus.launchers.torch_distributed [TORCH_OVERRIDES... --] (--trial module:Class | COMMAND [ARGS...])

One process per slot of this node, with torchrun's environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_RUN_ID``…), so
``torch.distributed.init_process_group()`` and ``harness`` find their ranks. On several nodes, the chief's
address and port come from ``STRATUS_CHIEF_ADDR``/``STRATUS_CHIEF_PORT`` (a static setup) or else from
the control plane's rendezvous (``_rendezvous.resolve_peers``), before anything starts. Two ways on:

- **The launcher's own workers** (``_monitor.run_workers``), on one node or several: torchrun's elastic
  agent would add a process, poll its workers, name the failed rank only inside a long error summary,
  and wait up to 30 s (its shutdown timeout) before it SIGKILLs a survivor stuck in a collective. Here
  the first failing rank (its global rank) is named in one line and in the report, the survivors get
  SIGTERM at once and SIGKILL after ``STRATUS_KILL_GRACE_S`` (10 s), every line carries its ``[rank=N]``
  prefix, and no extra Python process runs per rank. Node R of N starts ranks R*nproc..R*nproc+nproc-1
  with torchrun's static multi-node environment (``GROUP_RANK`` R, ``GROUP_WORLD_SIZE`` N, global rank 0
  hosts the TCP store at ``MASTER_ADDR:MASTER_PORT``). The overrides honoured this way are
  ``--nproc_per_node N``, ``--master_addr``, ``--master_port``, ``--nnodes`` and ``--node_rank`` equal to
  this node's, ``--max_restarts 0`` and ``--start_method`` (meaningless for commands, so ignored). A
  failure on one node ends that node's launcher; the other nodes' workers see their collectives fail (or
  the control plane stops their runs) and end in turn.
- **Any other torchrun override** (``--rdzv_backend``, ``--max_restarts 3``, ``--redirects``…):
  ``python3 -m torch.distributed.run`` with ``build_argv``'s command line (static rendezvous on the
  chief's resolved address and port, ``--max_restarts 0``); each worker runs behind
  ``stratus.launchers.wrap_rank RANK`` for the prefixes. ``--start_method`` is left out: torchrun uses it only
  for Python functions, never for a script or module. torchrun's ``--module``, ``--no_python`` and
  ``--run_path`` are refused as overrides: the launcher decides how the command runs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import signal
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stratus.launchers._argv import (
    FlagSpec,
    Target,
    merge_flags,
    override_names,
    parse_launch_args,
    worker_command,
)
from stratus.launchers._info import REPORT_ENV, LaunchInfo, free_port, load_launch_info
from stratus.launchers._monitor import Outcome, Worker, run_workers, write_report
from stratus.launchers._rendezvous import resolve_peers
from stratus.launchers._signals import FORWARDED, run_command
from stratus.launchers.errors import LaunchConfigError, LauncherError, MissingProgramError

USAGE = "python3 -m stratus.launchers.torch_distributed [TORCH_OVERRIDES... --] (--trial module:Class | COMMAND...)"

TORCHRUN_FLAGS = FlagSpec(
    aliases={"-m": "--module", "-r": "--redirects", "-t": "--tee"},
    switches=frozenset({"--standalone", "--module", "--no-python", "--run-path", "--virtual-local-rank"}),
    refused=frozenset({"--module", "--no-python", "--run-path"}),
)
_HONOURED_LOCALLY = frozenset(
    {
        "--nproc-per-node",
        "--master-addr",
        "--master-port",
        "--nnodes",
        "--node-rank",
        "--max-restarts",
        "--start-method",
    }
)
#: torchrun's own default list, plus the two signals it forwards only when asked to.
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2"
#: Flags of recent torchruns (2.9 and later) that build_argv uses when the installed torch has them.
OPTIONAL_FEATURES = ("--signals-to-handle", "--shutdown-timeout")


@dataclass(frozen=True)
class LocalLaunch:
    """This node's share of a launch the launcher runs itself."""

    nproc: int  # workers on this node
    master_addr: str
    master_port: int | None  # None: a free port, picked just before the start (one node only)
    run_id: str = ""
    num_nodes: int = 1
    node_rank: int = 0

    @property
    def world_size(self) -> int:
        return self.nproc * self.num_nodes

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.nproc + local_rank


def local_launch(info: LaunchInfo, overrides: Sequence[str]) -> LocalLaunch | None:
    """This node's launch, or None when torchrun must run it (an override only torchrun knows)."""
    info.require_chief()
    values = override_names(overrides, TORCHRUN_FLAGS)
    if set(values) - _HONOURED_LOCALLY:
        return None
    nodes, node = str(info.num_nodes), str(info.node_rank)
    if values.get("--nnodes", nodes) not in (nodes, f"{nodes}:{nodes}"):
        return None
    if values.get("--node-rank", node) != node:
        return None
    if values.get("--max-restarts", "0") != "0":
        return None
    nproc = info.slots_per_node
    if "--nproc-per-node" in values:
        raw = values["--nproc-per-node"] or ""
        if not raw.isdigit() or int(raw) < 1:
            return None  # "gpu", "cpu", "auto": torchrun counts them
        nproc = int(raw)
    port = info.chief_port
    if "--master-port" in values:
        raw = values["--master-port"] or ""
        if not raw.isdigit():
            raise LaunchConfigError(f"--master_port {raw!r} is not a port number.")
        port = int(raw)
    return LocalLaunch(
        nproc,
        values.get("--master-addr") or info.chief_addr,
        port,
        info.run_id,
        num_nodes=info.num_nodes,
        node_rank=info.node_rank,
    )


def build_worker_env(launch: LocalLaunch, local_rank: int, base: Mapping[str, str]) -> dict[str, str]:
    """Worker ``local_rank``'s environment: ``base`` plus what torchrun gives its workers in a static launch
    (``RANK`` is the global rank, ``node_rank * nproc + local_rank``)."""
    if launch.master_port is None:
        raise ValueError("pick the master port (LocalLaunch.master_port) before building worker environments")
    if not 0 <= local_rank < launch.nproc:
        raise ValueError(f"local rank {local_rank} is outside 0..{launch.nproc - 1}")
    env = {k: v for k, v in base.items() if k != REPORT_ENV}  # the report is the launcher's, not a worker's
    rank, world = str(launch.global_rank(local_rank)), str(launch.world_size)
    env.update(
        RANK=rank,
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=world,
        LOCAL_WORLD_SIZE=str(launch.nproc),
        GROUP_RANK=str(launch.node_rank),
        GROUP_WORLD_SIZE=str(launch.num_nodes),
        ROLE_NAME="default",
        ROLE_RANK=rank,
        ROLE_WORLD_SIZE=world,
        MASTER_ADDR=launch.master_addr,
        MASTER_PORT=str(launch.master_port),
        TORCHELASTIC_RUN_ID=launch.run_id or "none",
        TORCHELASTIC_RESTART_COUNT="0",
        TORCHELASTIC_MAX_RESTARTS="0",
        # Global rank 0 hosts the TCP store itself (there is no agent store without torchrun's agent).
        TORCHELASTIC_USE_AGENT_STORE="False",
        TORCH_NCCL_ASYNC_ERROR_HANDLING=base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    )
    if launch.nproc > 1 and "OMP_NUM_THREADS" not in base:
        env["OMP_NUM_THREADS"] = "1"  # as torchrun does: N workers must not each take every core
    return env


def build_argv(
    info: LaunchInfo,
    overrides: Sequence[str],
    target: Target,
    *,
    python: str = "python3",
    features: Collection[str] = (),
) -> list[str]:
    """torchrun's command line for this node; ``features`` are the OPTIONAL_FEATURES the installed torchrun
    has (the launcher's signals and kill grace then reach torchrun too)."""
    if info.chief_port is None:
        raise ValueError("pick the master port (LaunchInfo.chief_port) before building torchrun's argv")
    info.require_chief()
    base: list[tuple[str, str | None]] = [
        ("--nnodes", str(info.num_nodes)),
        ("--nproc_per_node", str(info.slots_per_node)),
        ("--node_rank", str(info.node_rank)),
        ("--master_addr", info.chief_addr),
        ("--master_port", str(info.chief_port)),
        ("--max_restarts", "0"),
    ]
    if "--signals-to-handle" in features:
        base.append(("--signals_to_handle", TORCHRUN_SIGNALS))
    if "--shutdown-timeout" in features:
        base.append(("--shutdown_timeout", str(math.ceil(info.kill_grace))))
    return [
        python,
        "-m",
        "torch.distributed.run",
        *merge_flags(base, overrides, TORCHRUN_FLAGS),
        "--module",
        "stratus.launchers.wrap_rank",
        "RANK",
        "--",
        *worker_command(target, python),
    ]


def torchrun_features() -> frozenset[str]:
    """Which OPTIONAL_FEATURES the installed torchrun knows (imports torch: only on the torchrun path)."""
    from torch.distributed.run import get_args_parser

    parsed, _ = get_args_parser().parse_known_args(["train.py"])
    return frozenset(f for f in OPTIONAL_FEATURES if hasattr(parsed, f[2:].replace("-", "_")))


def run_local(launch: LocalLaunch, target: Target, info: LaunchInfo) -> int:
    if launch.master_port is None:
        launch = dataclasses.replace(launch, master_port=free_port())
    command = worker_command(target, sys.executable)
    workers = [
        Worker(launch.global_rank(r), command, build_worker_env(launch, r, os.environ))
        for r in range(launch.nproc)
    ]
    return run_workers(workers, kill_grace=info.kill_grace, report_path=info.report_path)


def run_torchrun(info: LaunchInfo, overrides: Sequence[str], target: Target) -> int:
    if importlib.util.find_spec("torch") is None:
        raise MissingProgramError(
            f"torchrun is not installed: {sys.executable} cannot import torch; install torch in the "
            "trial's environment."
        )
    if info.chief_port is None:
        info = dataclasses.replace(info, chief_port=free_port())
    features = torchrun_features()
    argv = build_argv(info, overrides, target, python=sys.executable, features=features)
    signals: tuple[signal.Signals, ...] = FORWARDED
    swallowed: tuple[signal.Signals, ...] = ()
    if (
        "--signals-to-handle" not in features
    ):  # an older torchrun would die of SIGUSR1/SIGUSR2 and leave its workers behind
        signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        swallowed = (signal.SIGUSR1, signal.SIGUSR2)
    code = run_command(argv, signals=signals, swallowed=swallowed)
    if info.report_path:
        # torchrun does not say which rank failed first in a form we can rely on.
        reason = "torchrun exited with code 0" if code == 0 else f"torchrun exited with code {code}"
        write_report(Path(info.report_path), Outcome(code, None, reason))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    try:
        overrides, target = parse_launch_args(sys.argv[1:] if argv is None else argv, USAGE)
        info = resolve_peers(load_launch_info())
        launch = local_launch(info, overrides)
        if launch is not None:
            return run_local(launch, target, info)
        return run_torchrun(info, overrides, target)
    except LauncherError as e:
        print(f"[launcher] torch_distributed: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())

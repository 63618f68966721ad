"""Launch an AdaptDL trial (NNI's ``adl`` training service, issue 15):

    python3 -m stratus.launchers.adaptdl [--replicas-per-node N --] (--trial module:Class | COMMAND [ARGS...])

Per node, N replicas (default: this node's slots / ``STRATUS_ADAPTDL_SLOTS_PER_REPLICA``, which the control
plane sets from the elastic section; 1 when unset) with AdaptDL's environment (`stratus.contract.adaptdl`): global
ranks across nodes, the three folders (local, created before start), ``ADAPTDL_NUM_RESTARTS`` = max(the
control plane's count, the highest ``checkpoint-N`` present + 1) so it goes up at every start, rank 0's
address from the rendezvous (``_rendezvous``, on several nodes; the chief picks ``ADAPTDL_MASTER_PORT``),
and ``ADAPTDL_SUPERVISOR_URL`` pointing at this launcher's proxy (``_adaptdl_proxy``). ``PYTHONPATH``
starts with ``launchers/adaptdl_numpy``, whose sitecustomize gives AdaptDL's modules, and only them, the
numpy aliases that numpy 1.24 and 2.0 removed (``_adaptdl_numpy``: adaptdl 0.2.11 uses ``np.int``).

Around the replicas (``_adaptdl_sync``): before start every node restores the latest AdaptDL checkpoint,
share and TensorBoard folders through the API; after exit node 0 stores the newest ``checkpoint-N`` it
holds with them, if this start saved one, and the folders once more when the trial completed with
TensorBoard files.

Signals: any signal the launcher gets, or ``STRATUS_PREEMPT_FILE`` appearing, becomes SIGTERM to every
replica (AdaptDL saves at its next batch and exits 143), and SIGKILL follows after the kill grace (at least
``stratus.contract.adaptdl.MIN_KILL_GRACE_S``: a replica outside its AdaptiveDataLoader loop notices late). Every
replica exiting 143 after *our* SIGTERM, with ``checkpoint-<NUM_RESTARTS>`` on node 0, is the preempt
path's clean exit: 0 (the control plane requeues the run). 143 without our SIGTERM is a failure, as is any
other code; 0 from every replica is completion.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stratus.contract import adaptdl
from stratus.contract.http import RetryPolicy, Session
from stratus.launchers._adaptdl_numpy import with_layer as with_numpy_aliases
from stratus.launchers._adaptdl_proxy import HintsForwarder, SupervisorProxy
from stratus.launchers._adaptdl_sync import (
    CheckpointSync,
    Folders,
    highest_checkpoint,
    num_restarts,
    tensorboard_files,
)
from stratus.launchers._argv import FlagSpec, Target, override_names, parse_launch_args, worker_command
from stratus.launchers._info import (
    REPORT_ENV,
    AdaptdlEnv,
    LaunchInfo,
    adaptdl_env,
    free_port,
    load_launch_info,
)
from stratus.launchers._monitor import Outcome, Worker, supervise, write_report
from stratus.launchers._rendezvous import resolve_peers
from stratus.launchers._signals import FORWARDED
from stratus.launchers.errors import LaunchConfigError, LauncherError, SyncError

USAGE = "python3 -m stratus.launchers.adaptdl [--replicas-per-node N --] (--trial module:Class | COMMAND...)"
FLAGS = FlagSpec(aliases={}, switches=frozenset())
#: How often the preempt file is looked for.
PREEMPT_POLL_S = 0.5


@dataclass(frozen=True)
class ReplicaLaunch:
    """This node's share of an AdaptDL start."""

    replicas_per_node: int
    master_addr: str
    master_port: int
    job_id: str
    restarts: int
    supervisor_url: str
    folders: Folders
    sched_version: str = adaptdl.DEFAULT_SCHED_VERSION
    num_nodes: int = 1
    node_rank: int = 0
    node_addrs: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.replicas_per_node * self.num_nodes

    def global_rank(self, local_rank: int) -> int:
        return self.node_rank * self.replicas_per_node + local_rank

    def addresses(self) -> list[str]:
        """Every replica's address by global rank (what the proxy's discover answers)."""
        nodes = self.node_addrs or (self.master_addr,) * self.num_nodes
        return [nodes[rank // self.replicas_per_node] for rank in range(self.world_size)]


def replicas_per_node(
    overrides: Sequence[str], info: LaunchInfo, environ: Mapping[str, str] = os.environ
) -> int:
    values = override_names(overrides, FLAGS)
    unknown = sorted(set(values) - {"--replicas-per-node"})
    if unknown:
        raise LaunchConfigError(
            f"the adaptdl launcher takes only --replicas-per-node before '--', not {unknown}."
        )
    raw = values.get("--replicas-per-node") or ""
    if not raw:
        return max(1, info.slots_per_node // slots_per_replica(environ))
    if not raw.isdigit() or int(raw) < 1:
        raise LaunchConfigError(f"--replicas-per-node {raw!r} is not a whole number >= 1.")
    return int(raw)


def slots_per_replica(env: Mapping[str, str]) -> int:
    """The slots one replica takes (`adaptdl.SLOTS_PER_REPLICA_ENV`; 1 when unset)."""
    raw = env.get(adaptdl.SLOTS_PER_REPLICA_ENV, "") or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise LaunchConfigError(f"{adaptdl.SLOTS_PER_REPLICA_ENV}={raw!r} is not a whole number >= 1.")
    return int(raw)


def build_replica_env(launch: ReplicaLaunch, local_rank: int, base: Mapping[str, str]) -> dict[str, str]:
    """Replica ``local_rank``'s environment: ``base`` plus AdaptDL's variables."""
    if not 0 <= local_rank < launch.replicas_per_node:
        raise ValueError(f"local rank {local_rank} is outside 0..{launch.replicas_per_node - 1}")
    env = {k: v for k, v in base.items() if k != REPORT_ENV}
    folders = launch.folders
    env.update(
        {
            adaptdl.CHECKPOINT_PATH: str(folders.checkpoint),
            adaptdl.SHARE_PATH: str(folders.share),
            adaptdl.TENSORBOARD_LOGDIR: str(folders.tensorboard),
            adaptdl.CTL_TENSORBOARD_LOGDIR: str(folders.tensorboard),
            adaptdl.JOB_ID: launch.job_id,
            adaptdl.NUM_REPLICAS: str(launch.world_size),
            adaptdl.REPLICA_RANK: str(launch.global_rank(local_rank)),
            adaptdl.NUM_NODES: str(launch.num_nodes),
            adaptdl.NUM_RESTARTS: str(launch.restarts),
            adaptdl.MASTER_ADDR: launch.master_addr,
            adaptdl.MASTER_PORT: str(launch.master_port),
            adaptdl.SUPERVISOR_URL: launch.supervisor_url,
            adaptdl.SCHED_VERSION: launch.sched_version,
            adaptdl.NO_WEIGHTS_ONLY_LOAD: "1",
            adaptdl.REPLICA_ENV: "1",
        }
    )
    if launch.replicas_per_node > 1 and "OMP_NUM_THREADS" not in base:
        env["OMP_NUM_THREADS"] = "1"  # N replicas must not each take every core
    return with_numpy_aliases(env)


def final_outcome(outcome: Outcome, *, stopped: bool, saved: bool) -> Outcome:
    """What the launcher exits with. ``stopped``: it sent the replicas SIGTERM itself; ``saved``: the
    checkpoint of this start is there (node 0), or cannot be seen here (the other nodes)."""
    codes = outcome.codes
    if outcome.exit_code == 0:
        return outcome
    if stopped and codes and set(codes.values()) <= {0, adaptdl.SAVED_AND_STOPPED}:
        if saved:
            return Outcome(0, None, "preempted: every replica saved its AdaptDL state and exited 143", codes)
        if _stopped_before_adaptdl_started(outcome):
            # Our SIGTERM reached replicas still starting (importing torch, under load): AdaptDL had not
            # set its handler, so it had trained nothing of this start. A preemption with nothing new to
            # keep: the next start restores the checkpoint of the start before.
            reason = "preempted while its replicas were starting, before AdaptDL trained or saved anything"
            return Outcome(0, None, reason, codes, outcome.signals)
        return dataclasses.replace(
            outcome, reason=f"{outcome.reason}, but AdaptDL saved no checkpoint for this start"
        )
    if outcome.exit_code == adaptdl.SAVED_AND_STOPPED and not stopped:
        return dataclasses.replace(
            outcome, reason=f"{outcome.reason} without a stop from the launcher (a signal from elsewhere)"
        )
    return outcome


def _stopped_before_adaptdl_started(outcome: Outcome) -> bool:
    """Every replica that did not exit 0 died of our SIGTERM itself (AdaptDL, once started, catches it,
    saves and exits 143)."""
    failed = [rank for rank, code in outcome.codes.items() if code != 0]
    return bool(failed) and all(outcome.signals.get(rank) == signal.SIGTERM for rank in failed)


def sched_version() -> str:
    """The trial's adaptdl version (AdaptDL compares majors when a supervisor is set)."""
    try:
        return importlib.metadata.version("adaptdl")
    except importlib.metadata.PackageNotFoundError:
        return adaptdl.DEFAULT_SCHED_VERSION


class _Stop:
    """Whether the launcher stopped the replicas, and the preempt file's watcher."""

    def __init__(self, preempt_file: str | None) -> None:
        self.stopped = threading.Event()
        self._done = threading.Event()
        self._file = preempt_file
        self._thread = threading.Thread(target=self._watch, name="adaptdl-preempt", daemon=True)

    def heard(self, sig: signal.Signals) -> None:
        self.stopped.set()

    def __enter__(self) -> _Stop:
        if self._file:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(timeout=PREEMPT_POLL_S * 4)

    def _watch(self) -> None:
        assert self._file is not None
        while not self._done.wait(PREEMPT_POLL_S):
            if Path(self._file).exists():
                _say(f"{self._file} appeared: stopping the replicas (AdaptDL saves, then exits)")
                os.kill(os.getpid(), signal.SIGTERM)  # through the monitor's handler, on the main thread
                return


def run(info: LaunchInfo, env: AdaptdlEnv, per_node: int, target: Target) -> Outcome:
    folders = Folders.prepare(env.root)
    session = Session(env.master, env.token, retry=RetryPolicy()) if env.on_platform else None
    sync = CheckpointSync(session, env.trial_id) if session is not None else None
    restored = None
    if sync is not None and env.latest_checkpoint:
        restored = sync.restore(env.latest_checkpoint, folders)
    restarts = num_restarts(env.restarts, highest_checkpoint(folders.checkpoint))
    if restored is not None and restored >= restarts:
        raise SyncError(f"checkpoint-{restored} was restored but NUM_RESTARTS is {restarts}; this is a bug.")
    info = resolve_peers(info)
    port = info.chief_port if info.chief_port is not None else free_port()
    launch = ReplicaLaunch(
        replicas_per_node=per_node,
        master_addr=info.chief_addr,
        master_port=port,
        job_id=adaptdl.job_id(env.experiment_id, env.trial_id or "local"),
        restarts=restarts,
        supervisor_url="",
        folders=folders,
        sched_version=sched_version(),
        num_nodes=info.num_nodes,
        node_rank=info.node_rank,
        node_addrs=info.node_addrs,
    )
    forwarder = HintsForwarder(session, env.trial_id) if session is not None else None
    proxy = SupervisorProxy(
        launch.job_id,
        restarts,
        launch.addresses(),
        send_hints=forwarder.send if forwarder is not None else None,
        max_replicas=env.max_replicas or launch.world_size,
        replicas_per_node=per_node,
    )
    launch = dataclasses.replace(launch, supervisor_url=proxy.url)
    _say(
        f"node {info.node_rank}: {per_node} replicas of {launch.world_size}, NUM_RESTARTS={restarts}, "
        f"job {launch.job_id}, folders under {folders.checkpoint.parent}"
    )
    command = worker_command(target, sys.executable)
    workers = [
        Worker(launch.global_rank(r), command, build_replica_env(launch, r, os.environ))
        for r in range(per_node)
    ]
    grace = max(info.kill_grace, adaptdl.MIN_KILL_GRACE_S)
    with proxy, _Stop(env.preempt_file) as stop:
        outcome = supervise(
            workers,
            kill_grace=grace,
            signal_map={sig: signal.SIGTERM for sig in FORWARDED},
            on_signal=stop.heard,
            stop_grace=grace,
        )
    newest = highest_checkpoint(folders.checkpoint)
    saved_now = newest is not None and newest >= restarts
    result = final_outcome(outcome, stopped=stop.stopped.is_set(), saved=saved_now or info.node_rank != 0)
    # Node 0 stores this start's AdaptDL save; a completed trial stores its TensorBoard files once more.
    completed = result.exit_code == 0 and not stop.stopped.is_set() and tensorboard_files(folders)
    if sync is not None and info.node_rank == 0 and (saved_now or completed):
        n = newest if newest is not None else restarts
        try:
            sync.save(folders, n)
        except SyncError as e:
            _say(str(e))
            if result.exit_code == 0:
                result = Outcome(1, None, f"AdaptDL's checkpoint-{n} could not be stored: {e}", result.codes)
    if session is not None:
        session.close()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    try:
        overrides, target = parse_launch_args(sys.argv[1:] if argv is None else argv, USAGE)
        info = load_launch_info()
        per_node = replicas_per_node(overrides, info)
        outcome = run(info, adaptdl_env(), per_node, target)
    except LauncherError as e:
        print(f"[launcher] adaptdl: {e}", file=sys.stderr)
        return e.exit_code
    _say(outcome.reason)
    if info.report_path:
        write_report(Path(info.report_path), outcome)
    return outcome.exit_code


def _say(message: str) -> None:
    print(f"[launcher] adaptdl: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())

"""Where the launch stands: the only module of `launchers` that reads the environment.

The agent (or a Batch multi-node job) starts the launcher with the trial's environment (contracts.md §2;
the names and their parsing are `stratus.contract.env`'s). The launchers read:

| variable | meaning | default |
|---|---|---|
| `STRATUS_SLOTS` | slots of the trial, all nodes together (0 counts as 1 process) | 1 |
| `STRATUS_NUM_NODES` | nodes the trial runs on | `AWS_BATCH_JOB_NUM_NODES`, else 1 |
| `STRATUS_NODE_RANK` | this node's index, 0 for the chief | `AWS_BATCH_JOB_NODE_INDEX`, else 0 |
| `STRATUS_CHIEF_ADDR` | address of the chief node (rank 0's store); set, it makes a static setup: no rendezvous | 127.0.0.1 on one node; on several, the rendezvous's |
| `STRATUS_CHIEF_PORT` | port of rank 0's store on the chief (the chief announces it at the rendezvous) | a free port; 29500 on several nodes with `STRATUS_CHIEF_ADDR` |
| `STRATUS_NODE_ADDRS` | every node's address, comma-separated, chief first (horovod's `-H`, DeepSpeed's hostfile); static setups only | the rendezvous's, or the chief alone |
| `STRATUS_RUN_ID` | the run, used as torch's run id (`TORCHELASTIC_RUN_ID`) | the rendezvous's, else `none` |
| `STRATUS_KILL_GRACE_S` | seconds between SIGTERM and SIGKILL when the other workers are stopped | 10 |
| `STRATUS_LAUNCHER_REPORT` | path of a JSON file the launcher writes its outcome to | unset: no file |
| `CUDA_VISIBLE_DEVICES` | the GPUs the agent gave this trial (DeepSpeed must not override them) | unset |

Only on several nodes without `STRATUS_CHIEF_ADDR`, for the rendezvous (``_rendezvous``: every node's
launcher registers its address with the control plane and waits until all nodes have):

| variable | meaning | default |
|---|---|---|
| `STRATUS_MASTER`, `STRATUS_TRIAL_ID`, `STRATUS_RUN_TOKEN` | the control plane's URL, the trial, the run's bearer token | required |
| `STRATUS_NODE_ADDR` | this node's address as the other nodes reach it (the agent sets it) | the local address of the route to `STRATUS_MASTER`'s host |
| `STRATUS_RENDEZVOUS_TIMEOUT_S` | seconds to wait for every node to register | 600 |

The adaptdl launcher also reads `STRATUS_EXPERIMENT_ID`, `STRATUS_LATEST_CHECKPOINT`, `STRATUS_PREEMPT_FILE`
and `stratus.contract.adaptdl`'s knobs (`adaptdl_env`).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import wraps
from typing import ParamSpec, TypeVar

from stratus.contract import adaptdl
from stratus.contract import env as names
from stratus.contract.errors import InvalidEnvironmentError
from stratus.contract.run_token import RunTokenError, run_token
from stratus.launchers.errors import LaunchConfigError

DEFAULT_KILL_GRACE_S = 10.0
DEFAULT_RENDEZVOUS_TIMEOUT_S = 600.0
#: torch's default rendezvous port: in a static setup, nodes must agree on the port without talking first.
MULTI_NODE_PORT = 29500
LOCAL_ADDR = "127.0.0.1"
REPORT_ENV = names.LAUNCHER_REPORT

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _launch_config_errors(read: Callable[_P, _T]) -> Callable[_P, _T]:
    """A variable the contract's readers refuse is the launchers' LaunchConfigError."""

    @wraps(read)
    def reader(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return read(*args, **kwargs)
        except InvalidEnvironmentError as e:
            raise LaunchConfigError(str(e)) from e

    return reader


@dataclass(frozen=True)
class LaunchInfo:
    """The trial's placement as the launchers see it; the defaults are one process on one node."""

    slots: int = 1
    num_nodes: int = 1
    node_rank: int = 0
    chief_addr: str = LOCAL_ADDR  # "": several nodes whose chief the rendezvous has not told yet
    chief_port: int | None = None  # None: pick a free port (one node, or the chief at the rendezvous)
    node_addrs: tuple[str, ...] = ()
    run_id: str = ""
    kill_grace: float = DEFAULT_KILL_GRACE_S
    report_path: str | None = None
    visible_devices: str | None = None

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise LaunchConfigError(f"STRATUS_NUM_NODES={self.num_nodes} is impossible; give 1 or more.")
        if not 0 <= self.node_rank < self.num_nodes:
            raise LaunchConfigError(
                f"STRATUS_NODE_RANK={self.node_rank} is outside 0..{self.num_nodes - 1} "
                f"(STRATUS_NUM_NODES={self.num_nodes})."
            )
        if self.slots < 0 or (self.slots > 0 and self.slots % self.num_nodes):
            raise LaunchConfigError(
                f"STRATUS_SLOTS={self.slots} cannot be split evenly over {self.num_nodes} nodes; "
                "give a multiple of STRATUS_NUM_NODES."
            )
        if self.chief_port is not None and not 0 < self.chief_port < 65536:
            raise LaunchConfigError(f"STRATUS_CHIEF_PORT={self.chief_port} is not a TCP port (1..65535).")
        if self.node_addrs and len(self.node_addrs) != self.num_nodes:
            raise LaunchConfigError(
                f"STRATUS_NODE_ADDRS names {len(self.node_addrs)} nodes but STRATUS_NUM_NODES is "
                f"{self.num_nodes}; give one address per node, chief first."
            )
        if not (math.isfinite(self.kill_grace) and self.kill_grace >= 0):
            raise LaunchConfigError(
                f"STRATUS_KILL_GRACE_S={self.kill_grace} is not a number of seconds >= 0."
            )

    @property
    def multi_node(self) -> bool:
        return self.num_nodes > 1

    @property
    def slots_per_node(self) -> int:
        """Processes to start on each node (a trial with 0 slots still runs one process)."""
        return max(self.slots // self.num_nodes, 1)

    @property
    def world_size(self) -> int:
        return self.slots_per_node * self.num_nodes

    @property
    def peers_known(self) -> bool:
        """Whether the chief's address is known: one node, a static setup, or after the rendezvous."""
        return not self.multi_node or bool(self.chief_addr)

    def require_chief(self) -> None:
        """Refuse to go on without the chief's address and port on several nodes."""
        if not self.peers_known or (self.multi_node and self.chief_port is None):
            raise LaunchConfigError(
                f"the chief's address and port are not known on node {self.node_rank} of {self.num_nodes}: "
                "the rendezvous (stratus.launchers._rendezvous.resolve_peers) fills them in, or set "
                "STRATUS_CHIEF_ADDR (and STRATUS_CHIEF_PORT) for a static setup."
            )

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every node's address, chief first; "localhost" on one node (horovod and DeepSpeed then start
        the workers themselves, without ssh)."""
        if not self.multi_node:
            return ("localhost",)
        if not self.node_addrs:
            raise LaunchConfigError(
                f"a trial on {self.num_nodes} nodes needs every node's address: the rendezvous gives them, "
                "or set STRATUS_NODE_ADDRS to the addresses, comma-separated, chief first."
            )
        return self.node_addrs


@_launch_config_errors
def load_launch_info(environ: Mapping[str, str] | None = None) -> LaunchInfo:
    """The placement as the environment gives it. On several nodes without ``STRATUS_CHIEF_ADDR`` the
    chief is not known yet (``chief_addr`` is ""): ``_rendezvous.resolve_peers`` fills it in."""
    env = os.environ if environ is None else environ
    # An AWS Batch multi-node parallel job says it in its own variables.
    num_nodes = _first_int(env, (names.NUM_NODES, names.BATCH_NUM_NODES), 1)
    node_rank = _first_int(env, (names.NODE_RANK, names.BATCH_NODE_INDEX), 0)
    chief_addr = env.get(names.CHIEF_ADDR, "").strip()
    port = names.read_int(env, names.CHIEF_PORT)
    if port is None and num_nodes > 1 and chief_addr:
        port = MULTI_NODE_PORT
    return LaunchInfo(
        slots=names.read_int(env, names.SLOTS, 1),
        num_nodes=num_nodes,
        node_rank=node_rank,
        chief_addr=chief_addr or ("" if num_nodes > 1 else LOCAL_ADDR),
        chief_port=port,
        node_addrs=names.read_list(env, names.NODE_ADDRS),
        run_id=env.get(names.RUN_ID, ""),
        kill_grace=names.read_seconds(env, names.KILL_GRACE_S, DEFAULT_KILL_GRACE_S),
        report_path=env.get(REPORT_ENV) or None,
        visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
    )


def free_port(host: str = "") -> int:
    """A TCP port free right now on ``host`` ("": every interface); rank 0's store binds it a moment later.
    An address this machine does not have (a NAT's, say) falls back to every interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, 0))
        except OSError:
            if not host:
                raise
            s.bind(("", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class RendezvousEnv:
    """What the rendezvous needs besides the placement (the second table above)."""

    master: str
    trial_id: str
    token: str
    node_addr: str | None = None  # None: detect it
    timeout_s: float = DEFAULT_RENDEZVOUS_TIMEOUT_S


def _run_token(env: Mapping[str, str]) -> str:
    """The run's token: from the environment, or from the agent (`stratus.contract.run_token`)."""
    try:
        return run_token(env)
    except RunTokenError as e:
        raise LaunchConfigError(str(e)) from e


@_launch_config_errors
def rendezvous_env(environ: Mapping[str, str] | None = None) -> RendezvousEnv:
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    for name in (names.MASTER, names.TRIAL_ID, names.RUN_TOKEN):
        values[name] = (env.get(name, "") if name != names.RUN_TOKEN else _run_token(env)).strip()
        if not values[name]:
            raise LaunchConfigError(
                f"{name} is not set; a trial on several nodes without STRATUS_CHIEF_ADDR finds its peers "
                "through the control plane's rendezvous, which needs STRATUS_MASTER, STRATUS_TRIAL_ID and "
                "STRATUS_RUN_TOKEN (the agent sets them)."
            )
    timeout = names.read_seconds(env, names.RENDEZVOUS_TIMEOUT_S, DEFAULT_RENDEZVOUS_TIMEOUT_S)
    if not (math.isfinite(timeout) and timeout > 0):
        raise LaunchConfigError(f"STRATUS_RENDEZVOUS_TIMEOUT_S={timeout} is not a number of seconds > 0.")
    return RendezvousEnv(
        master=values[names.MASTER].rstrip("/"),
        trial_id=values[names.TRIAL_ID],
        token=values[names.RUN_TOKEN],
        node_addr=env.get(names.NODE_ADDR, "").strip() or None,
        timeout_s=timeout,
    )


@_launch_config_errors
def kill_grace_from_env(environ: Mapping[str, str] | None = None) -> float:
    """`STRATUS_KILL_GRACE_S` alone (wrap_rank needs no placement)."""
    env = os.environ if environ is None else environ
    grace = names.read_seconds(env, names.KILL_GRACE_S, DEFAULT_KILL_GRACE_S)
    if not (math.isfinite(grace) and grace >= 0):
        raise LaunchConfigError(f"STRATUS_KILL_GRACE_S={grace} is not a number of seconds >= 0.")
    return grace


def rank_from_env(names: str, environ: Mapping[str, str] | None = None) -> int | None:
    """The rank held by the first of ``names`` (variables, comma-separated) that is set, or None."""
    env = os.environ if environ is None else environ
    for name in names.split(","):
        value = env.get(name.strip(), "").strip()
        if value:
            if not value.isdigit():
                raise LaunchConfigError(f"{name.strip()}={value!r} is not a rank (a whole number >= 0).")
            return int(value)
    return None


def _first_int(env: Mapping[str, str], names_in_order: tuple[str, ...], default: int) -> int:
    for name in names_in_order:
        value = names.read_int(env, name)
        if value is not None:
            return value
    return default


@dataclass(frozen=True)
class AdaptdlEnv:
    """What the adaptdl launcher reads besides the placement (`stratus.contract.adaptdl`'s knobs). ``trial_id`` is
    "" off the platform: no sync, and the hints stay local."""

    master: str = ""
    trial_id: str = ""
    experiment_id: str = "local"
    token: str = field(default="", repr=False)
    latest_checkpoint: str | None = None
    restarts: int = 0
    root: str = adaptdl.DEFAULT_ROOT
    max_replicas: int | None = None
    preempt_file: str | None = None

    @property
    def on_platform(self) -> bool:
        return bool(self.trial_id)


@_launch_config_errors
def adaptdl_env(environ: Mapping[str, str] | None = None) -> AdaptdlEnv:
    env = os.environ if environ is None else environ
    trial_id = env.get(names.TRIAL_ID, "").strip()
    restarts = names.read_int(env, adaptdl.RESTARTS_ENV, 0)
    max_replicas = names.read_int(env, adaptdl.MAX_REPLICAS_ENV)
    if restarts < 0 or (max_replicas is not None and max_replicas < 1):
        raise LaunchConfigError(
            f"{adaptdl.RESTARTS_ENV}={restarts} / {adaptdl.MAX_REPLICAS_ENV}={max_replicas} are out of range; "
            "give restarts >= 0 and max replicas >= 1."
        )
    master = env.get(names.MASTER, "").strip().rstrip("/")
    if trial_id and not master:
        raise LaunchConfigError(f"{names.TRIAL_ID} is set but {names.MASTER} is not; the agent sets both.")
    return AdaptdlEnv(
        master=master,
        trial_id=trial_id,
        experiment_id=env.get(names.EXPERIMENT_ID, "").strip() or "local",
        token=_run_token(env).strip() if trial_id else "",
        latest_checkpoint=env.get(names.LATEST_CHECKPOINT, "").strip() or None,
        restarts=restarts,
        root=env.get(adaptdl.ROOT_ENV, "").strip() or adaptdl.DEFAULT_ROOT,
        max_replicas=max_replicas,
        preempt_file=env.get(names.PREEMPT_FILE, "").strip() or None,
    )

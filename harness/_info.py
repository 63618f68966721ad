"""What a trial knows about itself: the only module that reads the environment of contracts.md §2
(its names and `TrialEnv.from_env` are the `stratus.contract.env`'s, shared with the control plane and the agent).

The agent starts every trial process with the `STRATUS_*` variables; launchers add `RANK`,
`LOCAL_RANK`, `WORLD_SIZE` (and torchrun's `LOCAL_WORLD_SIZE`, `GROUP_RANK`). Without
`STRATUS_TRIAL_ID` the process is off the platform and `load_cluster_info` returns None.

Off the platform, two more variables drive the local test mode (`det experiment create --local
--test-mode` sets them; they are ignored when `STRATUS_TRIAL_ID` is set):

- `STRATUS_LOCAL_CONFIG`: path of a JSON file `{"hparams": {...}, "config": {...}, "length": int}`.
  `load_local_cluster_info` builds a `ClusterInfo` from it (trial 0 of experiment 0, run "local"), and
  the local searcher twin yields one operation of `length` batches. Optional keys: `trial_seed` (int,
  default the config's `reproducibility.experiment_seed`, else 0) and `latest_checkpoint` (a uuid under
  the local checkpoint folder, to resume from).
- `STRATUS_LOCAL_EVENTS`: path of a JSON-lines file; the local twins append one line per event
  (`{"type": "training"|"validation"|"checkpoint"|"searcher_completed"|"invalid_hp",
  "steps_completed": int, ...}`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratus.contract import env as names
from stratus.contract.env import TrialEnv
from stratus.contract.errors import InvalidEnvironmentError
from stratus.contract.hardening import not_dumpable
from stratus.contract.run_token import RunTokenError, run_token
from stratus.harness.errors import HarnessError

LOCAL_RUN_ID = "local"
LOCAL_ADDR = "127.0.0.1"
#: Determined's documented default port for the chief's collectives (`INTER_TRAIN_PROCESS_COMM_PORT_1`).
DEFAULT_COLLECTIVE_PORT = 12360
CLUSTER_ID = "stratus"


@dataclass(frozen=True)
class TrialInfo:
    trial_id: int
    experiment_id: int
    hparams: dict[str, Any]
    trial_seed: int


@dataclass(frozen=True)
class ClusterInfo:
    """The trial's identity, as Determined's `det.get_cluster_info()` gives it.

    `config` is the experiment config with defaults filled in; it is not in the environment, so it is
    empty until `stratus.harness.init()` has fetched `GET /trials/{id}/info`.
    """

    trial: TrialInfo
    run_id: str
    latest_checkpoint: str | None
    master_url: str
    slots: int = 1
    config: dict[str, Any] = field(default_factory=dict)
    run_token: str = field(default="", repr=False)
    #: The trial's nodes (one per agent of a multi-node run) and this process's node among them.
    num_nodes: int = 1
    node_rank: int = 0
    #: Every node's address, chief first, when known (one node: its own; several: a static setup's
    #: `STRATUS_NODE_ADDRS`).
    node_addrs: tuple[str, ...] = (LOCAL_ADDR,)

    def with_remote(self, answer: Mapping[str, Any]) -> ClusterInfo:
        """This info completed with the `GET /trials/{id}/info` answer (only `config` is new)."""
        config = answer.get("config")
        return dataclasses.replace(self, config=dict(config) if isinstance(config, Mapping) else {})

    # Determined's names for the same facts (`det.get_cluster_info()`), so scripts written against
    # Determined read them unchanged.

    @property
    def is_local(self) -> bool:
        """True for the info of the local test mode (`STRATUS_LOCAL_CONFIG`), False on the platform."""
        return self.run_id == LOCAL_RUN_ID and not self.master_url

    @property
    def _trial_info(self) -> TrialInfo:
        """Determined's private name for `trial`, which its own core_v2 examples read."""
        return self.trial

    @property
    def cluster_id(self) -> str:
        return CLUSTER_ID

    @property
    def task_type(self) -> str:
        return "TRIAL"

    @property
    def task_id(self) -> str:
        return f"{self.trial.experiment_id}.{self.trial.trial_id}"

    @property
    def allocation_id(self) -> str:
        return self.run_id

    @property
    def session_token(self) -> str:
        return self.run_token

    @property
    def agent_id(self) -> str:
        return ""

    @property
    def slot_ids(self) -> list[int]:
        """This node's slots (Determined's per-container slot ids: `len()` is the slots per node)."""
        return list(range(max(self.slots // max(self.num_nodes, 1), 1)))

    @property
    def container_addrs(self) -> list[str]:
        """Every node's address, chief first (Determined's `info.container_addrs`). On several nodes
        without `STRATUS_NODE_ADDRS` the first call finds them at the rendezvous (`stratus.harness._peers`)."""
        if len(self.node_addrs) == self.num_nodes:
            return list(self.node_addrs)
        exported = names.read_list(os.environ, names.NODE_ADDRS)
        if len(exported) == self.num_nodes:
            return list(exported)
        if not self.master_url:
            raise HarnessError(
                f"this trial runs on {self.num_nodes} nodes and their addresses are not known; set "
                f"{names.NODE_ADDRS} to the addresses, comma-separated, chief first."
            )
        from stratus.harness._peers import resolve_node_addrs

        return list(resolve_node_addrs())

    @property
    def container_rank(self) -> int:
        """This node's index among the trial's nodes (the chief's is 0)."""
        return self.node_rank

    @property
    def gpu_uuids(self) -> list[str]:
        return []

    @property
    def user_data(self) -> dict[str, Any]:
        """The config's `data` section (Determined's `info.user_data`)."""
        data = self.config.get("data")
        return dict(data) if isinstance(data, Mapping) else {}


@dataclass(frozen=True)
class RankInfo:
    """This process's place among the trial's processes; a single process is rank 0 of 1."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    cross_rank: int = 0
    cross_size: int = 1


def load_cluster_info(environ: Mapping[str, str] | None = None) -> ClusterInfo | None:
    """The trial's info from the environment, or None off the platform (no `STRATUS_TRIAL_ID`)."""
    try:
        env = TrialEnv.from_env(os.environ if environ is None else environ)
    except InvalidEnvironmentError as e:
        raise HarnessError(str(e)) from e
    if env is None:
        return None
    not_dumpable()  # on the platform: its run token out of co-located trials' reach (`stratus.contract.hardening`)
    trial = TrialInfo(
        trial_id=env.trial_id,
        experiment_id=env.experiment_id,
        hparams=env.hparams,
        trial_seed=env.trial_seed,
    )
    num_nodes = env.num_nodes or 1
    if num_nodes > 1:
        node_addrs = names.read_list(os.environ if environ is None else environ, names.NODE_ADDRS)
    else:
        node_addrs = (env.node_addr or LOCAL_ADDR,)
    return ClusterInfo(
        trial=trial,
        run_id=env.run_id,
        latest_checkpoint=env.latest_checkpoint,
        master_url=env.master.rstrip("/"),
        slots=env.slots,
        run_token=env.run_token or _run_token(os.environ if environ is None else environ),
        num_nodes=num_nodes,
        node_rank=env.node_rank or 0,
        node_addrs=node_addrs,
    )


@dataclass(frozen=True)
class LocalConfig:
    """The local test mode's file (`STRATUS_LOCAL_CONFIG`), parsed."""

    hparams: dict[str, Any]
    config: dict[str, Any]
    length: int | None
    trial_seed: int = 0
    latest_checkpoint: str | None = None

    def cluster_info(self) -> ClusterInfo:
        """The trial's info in the local test mode: trial 0 of experiment 0, run "local"."""
        return ClusterInfo(
            trial=TrialInfo(trial_id=0, experiment_id=0, hparams=self.hparams, trial_seed=self.trial_seed),
            run_id=LOCAL_RUN_ID,
            latest_checkpoint=self.latest_checkpoint,
            master_url="",
            config=self.config,
        )


def _run_token(environ: Mapping[str, str]) -> str:
    """From the agent (`stratus.contract.run_token`) when the environment does not carry it."""
    try:
        return run_token(environ)
    except RunTokenError as e:
        raise HarnessError(str(e)) from e


def load_local_config(environ: Mapping[str, str] | None = None) -> LocalConfig | None:
    """The local test mode's config, or None when `STRATUS_LOCAL_CONFIG` is unset or the process is on
    the platform (`STRATUS_TRIAL_ID` set)."""
    env = os.environ if environ is None else environ
    path = env.get(names.LOCAL_CONFIG, "")
    if not path or names.is_on_platform(env):
        return None
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as e:
        raise HarnessError(
            f"{names.LOCAL_CONFIG}={path!r} cannot be read ({e.strerror}); point it at the JSON file "
            "the CLI wrote, or unset it."
        ) from e
    except json.JSONDecodeError as e:
        raise HarnessError(f"{names.LOCAL_CONFIG}={path!r} is not valid JSON ({e}).") from e
    if not isinstance(raw, dict):
        raise HarnessError(f"{names.LOCAL_CONFIG}={path!r} holds a {type(raw).__name__}, not a JSON object.")
    hparams = _object(raw, "hparams", path)
    config = _object(raw, "config", path)
    length = _optional_int(raw, "length", path, minimum=1)
    seed = _optional_int(raw, "trial_seed", path, minimum=0)
    if seed is None:
        experiment_seed = (config.get("reproducibility") or {}).get("experiment_seed")
        seed = experiment_seed if isinstance(experiment_seed, int) and experiment_seed >= 0 else 0
    latest = raw.get("latest_checkpoint")
    if latest is not None and not isinstance(latest, str):
        raise HarnessError(f"latest_checkpoint in {path} must be a checkpoint uuid (a string) or absent.")
    return LocalConfig(hparams, config, length, seed, latest or None)


def load_local_cluster_info(environ: Mapping[str, str] | None = None) -> ClusterInfo | None:
    """The `ClusterInfo` of the local test mode (trial 0, experiment 0, run "local"), or None."""
    local = load_local_config(environ)
    return None if local is None else local.cluster_info()


def local_events_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where the local twins append their events (`STRATUS_LOCAL_EVENTS`), or None; never on the
    platform."""
    env = os.environ if environ is None else environ
    path = env.get(names.LOCAL_EVENTS, "")
    if not path or names.is_on_platform(env):
        return None
    return Path(path)


def load_rank_info(environ: Mapping[str, str] | None = None) -> RankInfo:
    """Ranks from `RANK`/`WORLD_SIZE`/`LOCAL_RANK`/`LOCAL_WORLD_SIZE`/`GROUP_RANK` (torchrun's names)."""
    env = os.environ if environ is None else environ
    rank = _int(env, "RANK", default=0)
    size = _int(env, "WORLD_SIZE", default=1)
    local_rank = _int(env, "LOCAL_RANK", default=rank)
    local_size = _int(env, "LOCAL_WORLD_SIZE", default=size)
    cross_rank = _int(env, "GROUP_RANK", default=rank // max(local_size, 1))
    cross_size = max(size // max(local_size, 1), 1)
    return RankInfo(rank, size, local_rank, local_size, cross_rank, cross_size)


def load_collective_port(environ: Mapping[str, str] | None = None) -> int:
    """The port of the chief's socket collectives: `STRATUS_COLLECTIVE_PORT` (the agent's free port for
    the run), else Determined's default, `DEFAULT_COLLECTIVE_PORT`."""
    env = os.environ if environ is None else environ
    try:
        return names.read_int(env, names.COLLECTIVE_PORT, DEFAULT_COLLECTIVE_PORT)
    except InvalidEnvironmentError as e:
        raise HarnessError(str(e)) from e


def _int(env: Mapping[str, str], name: str, *, default: int | None = None) -> int:
    raw = env.get(name, "")
    if raw == "" and default is not None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise HarnessError(f"{name}={raw!r} is not an integer; unset it or give a whole number.") from None


def _object(raw: Mapping[str, Any], key: str, path: str) -> dict[str, Any]:
    value = raw.get(key, {})
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise HarnessError(f"{key} in {path} is a {type(value).__name__}; it must be a JSON object.")
    return value


def _optional_int(raw: Mapping[str, Any], key: str, path: str, *, minimum: int) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise HarnessError(f"{key} in {path} is {value!r}; it must be a whole number >= {minimum}.")
    return value

"""What a trial knows about itself: the only module that reads the environment of contracts.md §2.

The agent starts every trial process with the `STRATUS_*` variables; launchers add `RANK`,
`LOCAL_RANK`, `WORLD_SIZE` (and torchrun's `LOCAL_WORLD_SIZE`, `GROUP_RANK`). Without
`STRATUS_TRIAL_ID` the process is off the platform and `load_cluster_info` returns None.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError


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
    empty until `harness.init()` has fetched `GET /trials/{id}/info`.
    """

    trial: TrialInfo
    run_id: str
    latest_checkpoint: str | None
    master_url: str
    slots: int = 1
    config: dict[str, Any] = field(default_factory=dict)
    run_token: str = field(default="", repr=False)

    def with_remote(self, answer: Mapping[str, Any]) -> ClusterInfo:
        """This info completed with the `GET /trials/{id}/info` answer (only `config` is new)."""
        config = answer.get("config")
        return dataclasses.replace(self, config=dict(config) if isinstance(config, Mapping) else {})


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
    env = os.environ if environ is None else environ
    if not env.get("STRATUS_TRIAL_ID"):
        return None
    master = _required(env, "STRATUS_MASTER")
    trial = TrialInfo(
        trial_id=_int(env, "STRATUS_TRIAL_ID"),
        experiment_id=_int(env, "STRATUS_EXPERIMENT_ID"),
        hparams=_hparams(env.get("STRATUS_HPARAMS", "")),
        trial_seed=_int(env, "STRATUS_TRIAL_SEED", default=0),
    )
    return ClusterInfo(
        trial=trial,
        run_id=env.get("STRATUS_RUN_ID", ""),
        latest_checkpoint=env.get("STRATUS_LATEST_CHECKPOINT") or None,
        master_url=master.rstrip("/"),
        slots=_int(env, "STRATUS_SLOTS", default=1),
        run_token=env.get("STRATUS_RUN_TOKEN", ""),
    )


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


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise HarnessError(f"{name} is not set; the agent sets it on every trial process (contracts.md §2).")
    return value


def _int(env: Mapping[str, str], name: str, *, default: int | None = None) -> int:
    raw = env.get(name, "")
    if raw == "" and default is not None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise HarnessError(f"{name}={raw!r} is not an integer; unset it or give a whole number.") from None


def _hparams(raw: str) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise HarnessError(f"STRATUS_HPARAMS is not valid JSON ({e}); it must be a JSON object.") from e
    if not isinstance(value, dict):
        raise HarnessError(f"STRATUS_HPARAMS is {type(value).__name__}, not a JSON object.")
    return value

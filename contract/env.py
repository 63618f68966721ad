"""The trial's environment (docs/contracts.md §2): every variable a trial process is started with, named
once, and `TrialEnv`, the typed value the control plane writes and the harness reads.

Who sets what:

- the control plane, in the launch spec's ``environment`` (`TrialEnv.to_env`): ``STRATUS_MASTER``,
  ``STRATUS_TRIAL_ID``, ``STRATUS_EXPERIMENT_ID``, ``STRATUS_RUN_ID``, ``STRATUS_RUN_TOKEN``,
  ``STRATUS_HPARAMS`` (JSON, keys sorted), ``STRATUS_LATEST_CHECKPOINT`` (empty: none),
  ``STRATUS_TRIAL_SEED``, ``STRATUS_SLOTS`` (the trial's total), and for one node of a multi-node run
  ``STRATUS_NUM_NODES`` and ``STRATUS_NODE_RANK``;
- the agent: ``STRATUS_NODE_ADDR`` (its address as other nodes reach it), ``STRATUS_LAUNCHER_REPORT``
  (where a launcher writes its outcome), ``STRATUS_PREEMPT_FILE`` (a file the agent creates when the
  control plane asks the run to stop: `should_preempt()` turns true when it exists) and, for a run on one node, ``STRATUS_COLLECTIVE_PORT`` (a free
  port for the chief's socket collectives, so two trials on one host do not collide);
- by hand, for the launchers only: a static multi-node setup (``STRATUS_CHIEF_ADDR``,
  ``STRATUS_CHIEF_PORT``, ``STRATUS_NODE_ADDRS``) and the waits (``STRATUS_KILL_GRACE_S``,
  ``STRATUS_RENDEZVOUS_TIMEOUT_S``); for the harness, ``STRATUS_REPORT_INTERVAL``; AWS Batch's multi-node variables stand in for the node count and rank;
- local test mode (``det experiment create --local --test-mode``), off the platform:
  ``STRATUS_LOCAL_CONFIG`` and ``STRATUS_LOCAL_EVENTS``.

A process without ``STRATUS_TRIAL_ID`` is off the platform: `TrialEnv.from_env` gives None. The readers
(`read_int`, `read_seconds`, `read_list`) are the one way each side parses a variable; they raise
`InvalidEnvironmentError` naming the variable, its value and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from stratus.contract.errors import InvalidEnvironmentError

#: Every variable of ours starts with it; local test mode drops them all to run off the platform.
PREFIX = "STRATUS_"

# Set by the control plane (the launch spec's environment).
MASTER = "STRATUS_MASTER"
TRIAL_ID = "STRATUS_TRIAL_ID"
EXPERIMENT_ID = "STRATUS_EXPERIMENT_ID"
RUN_ID = "STRATUS_RUN_ID"
RUN_TOKEN = "STRATUS_RUN_TOKEN"
HPARAMS = "STRATUS_HPARAMS"
LATEST_CHECKPOINT = "STRATUS_LATEST_CHECKPOINT"
TRIAL_SEED = "STRATUS_TRIAL_SEED"
SLOTS = "STRATUS_SLOTS"
NUM_NODES = "STRATUS_NUM_NODES"
NODE_RANK = "STRATUS_NODE_RANK"

# Set by the agent.
NODE_ADDR = "STRATUS_NODE_ADDR"
LAUNCHER_REPORT = "STRATUS_LAUNCHER_REPORT"
COLLECTIVE_PORT = "STRATUS_COLLECTIVE_PORT"
PREEMPT_FILE = "STRATUS_PREEMPT_FILE"
#: A secret per run: a launcher marks the lines it frames with a rank by it (`stratus.contract.log_frame`), and
#: takes it out of its workers' environment, so what they print can never claim a rank.
LOG_FRAME = "STRATUS_LOG_FRAME"
#: Where a run's processes ask the agent for their run token (`stratus.contract.run_token`), which is then in
#: no environment block.
AGENT_SOCKET = "STRATUS_AGENT_SOCKET"

# Read by the launchers only; set by hand (a static multi-node setup, the waits).
CHIEF_ADDR = "STRATUS_CHIEF_ADDR"
CHIEF_PORT = "STRATUS_CHIEF_PORT"
NODE_ADDRS = "STRATUS_NODE_ADDRS"
KILL_GRACE_S = "STRATUS_KILL_GRACE_S"
RENDEZVOUS_TIMEOUT_S = "STRATUS_RENDEZVOUS_TIMEOUT_S"
#: Set by hand or in the experiment's environment: how long the harness's report sender gathers reports
#: before it sends them (seconds, default 5; `stratus.harness.core._reports`).
REPORT_INTERVAL = "STRATUS_REPORT_INTERVAL"
#: An AWS Batch multi-node parallel job's own names for the node count and this node's index.
BATCH_NUM_NODES = "AWS_BATCH_JOB_NUM_NODES"
BATCH_NODE_INDEX = "AWS_BATCH_JOB_NODE_INDEX"

# Local test mode, off the platform (ignored when STRATUS_TRIAL_ID is set).
LOCAL_CONFIG = "STRATUS_LOCAL_CONFIG"
LOCAL_EVENTS = "STRATUS_LOCAL_EVENTS"


@dataclass(frozen=True)
class TrialEnv:
    """What a trial process knows about itself from its environment.

    ``num_nodes`` and ``node_rank`` are set only for one node of a multi-node run; ``node_addr``
    and ``launcher_report`` only by the agent. ``master`` is written and read as given (a trailing slash
    is the reader's to strip).
    """

    master: str
    trial_id: int
    experiment_id: int
    run_id: str = ""
    run_token: str = field(default="", repr=False)
    hparams: dict[str, Any] = field(default_factory=dict)
    latest_checkpoint: str | None = None
    trial_seed: int = 0
    #: The trial's slots, all nodes together.
    slots: int = 1
    num_nodes: int | None = None
    node_rank: int | None = None
    node_addr: str | None = None
    launcher_report: str | None = None

    def to_env(self) -> dict[str, str]:
        """The variables, as strings; the optional ones only when set."""
        env = {
            MASTER: self.master,
            TRIAL_ID: str(self.trial_id),
            EXPERIMENT_ID: str(self.experiment_id),
            RUN_ID: self.run_id,
            RUN_TOKEN: self.run_token,
            HPARAMS: json.dumps(self.hparams, sort_keys=True),
            LATEST_CHECKPOINT: self.latest_checkpoint or "",
            TRIAL_SEED: str(self.trial_seed),
            SLOTS: str(self.slots),
        }
        if self.num_nodes is not None:
            env[NUM_NODES] = str(self.num_nodes)
        if self.node_rank is not None:
            env[NODE_RANK] = str(self.node_rank)
        if self.node_addr:
            env[NODE_ADDR] = self.node_addr
        if self.launcher_report:
            env[LAUNCHER_REPORT] = self.launcher_report
        return env

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TrialEnv | None:
        """The trial's environment, or None off the platform (no ``STRATUS_TRIAL_ID``)."""
        if not environ.get(TRIAL_ID):
            return None
        master = environ.get(MASTER, "")
        if not master:
            raise InvalidEnvironmentError(
                f"{MASTER} is not set; the agent sets it on every trial process (docs/contracts.md §2)."
            )
        return cls(
            master=master,
            trial_id=_required_int(environ, TRIAL_ID),
            experiment_id=_required_int(environ, EXPERIMENT_ID),
            run_id=environ.get(RUN_ID, ""),
            run_token=environ.get(RUN_TOKEN, ""),
            hparams=parse_hparams(environ.get(HPARAMS, "")),
            latest_checkpoint=environ.get(LATEST_CHECKPOINT) or None,
            trial_seed=read_int(environ, TRIAL_SEED, 0),
            slots=read_int(environ, SLOTS, 1),
            num_nodes=read_int(environ, NUM_NODES),
            node_rank=read_int(environ, NODE_RANK),
            node_addr=environ.get(NODE_ADDR, "").strip() or None,
            launcher_report=environ.get(LAUNCHER_REPORT) or None,
        )


def is_on_platform(environ: Mapping[str, str]) -> bool:
    """Whether the process runs as a trial of the platform (``STRATUS_TRIAL_ID`` set)."""
    return bool(environ.get(TRIAL_ID))


def parse_hparams(raw: str) -> dict[str, Any]:
    """``STRATUS_HPARAMS``: a JSON object; empty means none."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidEnvironmentError(f"{HPARAMS} is not valid JSON ({e}); it must be a JSON object.") from e
    if not isinstance(value, dict):
        raise InvalidEnvironmentError(f"{HPARAMS} is {type(value).__name__}, not a JSON object.")
    return value


@overload
def read_int(environ: Mapping[str, str], name: str, default: int) -> int: ...
@overload
def read_int(environ: Mapping[str, str], name: str, default: None = None) -> int | None: ...
def read_int(environ: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    """The whole number in ``name``, or ``default`` when it is unset or blank."""
    value = _read_number(environ, name, int, "a whole number")
    return default if value is None else value


def read_seconds(environ: Mapping[str, str], name: str, default: float) -> float:
    """The number of seconds in ``name``, or ``default`` when it is unset or blank (the range is the
    reader's to check)."""
    value = _read_number(environ, name, float, "a number of seconds")
    return default if value is None else value


N = TypeVar("N", int, float)


def _read_number(environ: Mapping[str, str], name: str, parse: Callable[[str], N], what: str) -> N | None:
    """``name`` read by ``parse``; None when it is unset or blank. ``what`` names the kind in the error."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return parse(raw)
    except ValueError:
        raise InvalidEnvironmentError(f"{name}={raw!r} is not {what}; unset it or give one.") from None


def read_list(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """The comma-separated entries of ``name``, blanks dropped."""
    return tuple(part.strip() for part in environ.get(name, "").split(",") if part.strip())


def _required_int(environ: Mapping[str, str], name: str) -> int:
    value = read_int(environ, name)
    if value is None:
        raise InvalidEnvironmentError(
            f"{name} is not set; the agent sets it on every trial process (docs/contracts.md §2)."
        )
    return value

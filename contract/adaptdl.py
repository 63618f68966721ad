"""AdaptDL elastic trials (docs/architecture.md, "Elastic trials (AdaptDL)"): what the adaptdl launcher gives its replicas,
what its local supervisor proxy forwards to the API, and how an AdaptDL checkpoint is kept as a Stratus
checkpoint. Standard library only; every side reads it (the launcher, the API's hints route, the config
translation, the allocator).

**Replica environment** (AdaptDL's own names; `adaptdl/env.py` reads them with ``os.getenv``): the three
folders (`CHECKPOINT_PATH`, `SHARE_PATH`, `TENSORBOARD_LOGDIR` and its `ADAPTDLCTL_` spelling, local and
created before start), the job id ``<experiment>/<trial>`` (adaptdl-sched's two segments), the replica
counts and global rank, the restart counter (it names the checkpoint folder and the discover group, and must
go up at every start: saving twice under one value fails), rank 0's address and port, the supervisor URL
(the launcher's proxy on 127.0.0.1), the scheduler version AdaptDL compares with its own (required when a
supervisor is set) and ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (torch >= 2.6 refuses AdaptDL's pickles).

**Hints** (``PUT /trials/{id}/adaptdl/hints``, run token): AdaptDL's ``SCHED_HINTS`` keys, as its rank 0
sends them every >= 30 s, plus ``speedup`` ``{"<replicas>": factor}`` that the launcher computes with
``adaptdl.goodput`` where it can (absent otherwise). `validate_hints` is the one check of that body.

**Checkpoint** (the sync, `stratus.launchers._adaptdl_sync`): the AdaptDL folders travel as an ordinary Stratus
checkpoint (presigned URLs from the API: a trial never holds S3 credentials) whose metadata carries
``{"adaptdl": {"format": 1, "restarts": N}}``; its files are ``checkpoint/checkpoint-N/...`` and
``share/...``. ``steps_completed`` is N, so the trial's latest checkpoint (``STRATUS_LATEST_CHECKPOINT``,
which only moves forward) is always the newest AdaptDL one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from stratus.contract.errors import InvalidHintsError

# ---- the replicas' environment (AdaptDL's names) ------------------------------------------------------

CHECKPOINT_PATH = "ADAPTDL_CHECKPOINT_PATH"
SHARE_PATH = "ADAPTDL_SHARE_PATH"
TENSORBOARD_LOGDIR = "ADAPTDL_TENSORBOARD_LOGDIR"
#: The issue's spelling (adaptdl-sched's CLI); NNI's template and trials read the one above. Both are set.
CTL_TENSORBOARD_LOGDIR = "ADAPTDLCTL_TENSORBOARD_LOGDIR"
JOB_ID = "ADAPTDL_JOB_ID"
NUM_REPLICAS = "ADAPTDL_NUM_REPLICAS"
REPLICA_RANK = "ADAPTDL_REPLICA_RANK"
NUM_NODES = "ADAPTDL_NUM_NODES"
NUM_RESTARTS = "ADAPTDL_NUM_RESTARTS"
MASTER_ADDR = "ADAPTDL_MASTER_ADDR"
MASTER_PORT = "ADAPTDL_MASTER_PORT"
SUPERVISOR_URL = "ADAPTDL_SUPERVISOR_URL"
SCHED_VERSION = "ADAPTDL_SCHED_VERSION"
NO_WEIGHTS_ONLY_LOAD = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"

REPLICA_VARIABLES = (
    CHECKPOINT_PATH,
    SHARE_PATH,
    TENSORBOARD_LOGDIR,
    CTL_TENSORBOARD_LOGDIR,
    JOB_ID,
    NUM_REPLICAS,
    REPLICA_RANK,
    NUM_NODES,
    NUM_RESTARTS,
    MASTER_ADDR,
    MASTER_PORT,
    SUPERVISOR_URL,
    SCHED_VERSION,
    NO_WEIGHTS_ONLY_LOAD,
)

# ---- the launcher's knobs (set by the control plane or by hand) -----------------------------------------

#: The control plane's count of this trial's AdaptDL starts (piece C sets it on each new run; unset: 0).
#: The launcher uses max(it, the highest restored ``checkpoint-N`` + 1).
RESTARTS_ENV = "STRATUS_ADAPTDL_RESTARTS"
#: The local folder holding ``checkpoint/``, ``share/`` and ``tensorboard/`` (default ``./adaptdl``).
ROOT_ENV = "STRATUS_ADAPTDL_ROOT"
#: The largest replica count the speedup table goes to (the elastic section's ``max_replicas``; unset:
#: the current world size).
MAX_REPLICAS_ENV = "STRATUS_ADAPTDL_MAX_REPLICAS"
#: Slots per replica (the elastic section's ``slots_per_replica``; unset: 1): the launcher starts this
#: node's slots / it replicas unless ``--replicas-per-node`` says otherwise.
SLOTS_PER_REPLICA_ENV = "STRATUS_ADAPTDL_SLOTS_PER_REPLICA"
#: Set (to 1) in every replica's environment by the launcher: the harness leaves stopping to AdaptDL (a
#: preempt is AdaptDL's SIGTERM: it saves at its next batch and exits 143), and the NNI shim keeps its
#: result count in AdaptDL's checkpoint (`stratus.harness.compat._nni_adaptdl`).
REPLICA_ENV = "STRATUS_ADAPTDL_REPLICA"
DEFAULT_ROOT = "adaptdl"
#: The kill grace floor: AdaptDL notices SIGTERM only at its next batch, and a replica outside its
#: AdaptiveDataLoader loop (downloading data, evaluating) only when it gets back to one.
MIN_KILL_GRACE_S = 120.0
#: What ``ADAPTDL_SCHED_VERSION`` says when the trial's adaptdl version cannot be read (only the major
#: version is compared).
DEFAULT_SCHED_VERSION = "0.2.11"
#: What a replica exits with after AdaptDL saved its state on SIGTERM/SIGINT (``exit(143)``).
SAVED_AND_STOPPED = 143

# ---- the API ----------------------------------------------------------------------------------------------

HINTS_ROUTE = "/trials/{trial_id}/adaptdl/hints"
#: The supervisor paths AdaptDL calls (on the proxy): ``GET /discover/<job>/<group>``, ``PUT /hints/<job>``.
DISCOVER_PREFIX = "/discover/"
HINTS_PREFIX = "/hints/"

# ---- the checkpoint ---------------------------------------------------------------------------------------

METADATA_KEY = "adaptdl"
CHECKPOINT_FORMAT = 1
CHECKPOINT_DIR = "checkpoint"
SHARE_DIR = "share"
TENSORBOARD_DIR = "tensorboard"


def job_id(experiment_id: int | str, trial_id: int | str) -> str:
    return f"{experiment_id}/{trial_id}"


def checkpoint_metadata(restarts: int) -> dict[str, Any]:
    """The Stratus checkpoint metadata of AdaptDL's ``checkpoint-<restarts>``."""
    return {"steps_completed": restarts, METADATA_KEY: {"format": CHECKPOINT_FORMAT, "restarts": restarts}}


def restarts_of(metadata: Mapping[str, Any]) -> int | None:
    """The ``N`` of an AdaptDL checkpoint's metadata; None when the checkpoint is not an AdaptDL one."""
    entry = metadata.get(METADATA_KEY)
    if not isinstance(entry, Mapping) or entry.get("format") != CHECKPOINT_FORMAT:
        return None
    restarts = entry.get("restarts")
    return (
        restarts if isinstance(restarts, int) and not isinstance(restarts, bool) and restarts >= 0 else None
    )


# ---- the hints --------------------------------------------------------------------------------------------

#: `adaptdl.goodput.PerfParams`'s fields.
PERF_PARAMS = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")
#: AdaptDL's ``gradParams`` (``GradParams(sqr, var)`` as ``norm``/``var``).
GRAD_PARAMS = ("norm", "var")
#: `adaptdl.sched_hints.SCHED_HINTS`'s keys and what each holds.
SCHED_HINTS = (
    "initBatchSize",
    "localBszBounds",
    "globalBatchSize",
    "maxBatchSize",
    "maxProfiledReplicas",
    "gradientAccumulation",
    "gradParams",
    "perfParams",
)
SPEEDUP = "speedup"


def validate_hints(body: Any) -> dict[str, Any]:
    """``body`` as a hints payload, or `InvalidHintsError` naming the first bad field. Keys may be missing
    (AdaptDL sends them all; a missing one is null); unknown keys are refused."""
    if not isinstance(body, Mapping):
        raise InvalidHintsError(f"hints must be a JSON object, got {type(body).__name__}.")
    unknown = sorted(set(body) - {*SCHED_HINTS, SPEEDUP})
    if unknown:
        raise InvalidHintsError(
            f"hints have unknown keys {unknown}; send only AdaptDL's SCHED_HINTS keys and 'speedup'."
        )
    hints = {key: body.get(key) for key in SCHED_HINTS}
    for key in ("initBatchSize", "globalBatchSize", "maxBatchSize", "maxProfiledReplicas"):
        _count(hints, key, allow_zero=key == "maxProfiledReplicas")
    bounds = hints["localBszBounds"]
    if bounds is not None:
        if not isinstance(bounds, list) or len(bounds) != 2 or not all(_opt_count(b) for b in bounds):
            raise InvalidHintsError(
                f"hints localBszBounds={bounds!r} is not [min, max] of batch sizes (or null)."
            )
        if None not in bounds and bounds[0] > bounds[1]:
            raise InvalidHintsError(f"hints localBszBounds={bounds!r} has min > max.")
    if hints["gradientAccumulation"] is not None and not isinstance(hints["gradientAccumulation"], bool):
        raise InvalidHintsError(
            f"hints gradientAccumulation={hints['gradientAccumulation']!r} is not a boolean."
        )
    for key, fields in (("gradParams", GRAD_PARAMS), ("perfParams", PERF_PARAMS)):
        _numbers(hints, key, fields)
    if body.get(SPEEDUP) is not None:
        hints[SPEEDUP] = _speedup(body[SPEEDUP])
    return hints


def _count(hints: Mapping[str, Any], key: str, *, allow_zero: bool) -> None:
    value = hints[key]
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        raise InvalidHintsError(
            f"hints {key}={value!r} is not a whole number >= {0 if allow_zero else 1} (or null)."
        )


def _opt_count(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _numbers(hints: dict[str, Any], key: str, fields: tuple[str, ...]) -> None:
    value = hints[key]
    if value is None or value == {}:  # AdaptDL sends {} for gradParams before it has any
        hints[key] = None
        return
    if (
        not isinstance(value, Mapping)
        or set(value) != set(fields)
        or not all(_finite(value[f]) for f in fields)
    ):
        raise InvalidHintsError(
            f"hints {key}={value!r} must have exactly the finite numbers {list(fields)} (or be null)."
        )
    hints[key] = {f: float(value[f]) for f in fields}


def _speedup(value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping) or not value:
        raise InvalidHintsError(f"hints speedup={value!r} is not a non-empty object {{replicas: factor}}.")
    table: dict[str, float] = {}
    for replicas, factor in value.items():
        if not str(replicas).isdigit() or int(replicas) < 1 or not _finite(factor) or factor < 0:
            raise InvalidHintsError(
                f"hints speedup entry {replicas!r}: {factor!r} is not replicas (>= 1) to a finite factor >= 0."
            )
        table[str(int(replicas))] = float(factor)
    return table

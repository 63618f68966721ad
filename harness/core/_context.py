"""`init()`: the one entry point, giving a `Context` made of small sub-contexts (Determined's
`det.core.init()`). On the platform they talk to the control plane; off it (no `STRATUS_TRIAL_ID`)
they are local twins, so the same training script runs on a laptop."""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

import httpx

from harness._api import ApiClient
from harness._info import ClusterInfo, load_cluster_info
from harness.core._checkpoint import CheckpointContext, LocalCheckpointContext, PlatformCheckpointContext
from harness.core._distributed import DistributedContext
from harness.core._preempt import (
    HEARTBEAT_INTERVAL_S,
    LocalPreemptContext,
    PlatformPreemptContext,
    PreemptContext,
)
from harness.core._train import LocalTrainContext, PlatformTrainContext, TrainContext

DEFAULT_CHECKPOINT_DIR = "checkpoints"

_lock = threading.Lock()
_active: Context | None = None
_cached_info: ClusterInfo | None = None


class Context:
    """What `init()` returns: `train`, `checkpoint`, `preempt`, `distributed`, and `info` (None off the
    platform). Use it as a context manager, or call `close()` when training is done."""

    def __init__(
        self,
        *,
        train: TrainContext,
        checkpoint: CheckpointContext,
        preempt: PreemptContext,
        distributed: DistributedContext,
        info: ClusterInfo | None = None,
        api: ApiClient | None = None,
    ) -> None:
        self.train = train
        self.checkpoint = checkpoint
        self.preempt = preempt
        self.distributed = distributed
        self.info = info
        self._api = api
        self._closed = False

    def close(self) -> None:
        """Stop the heartbeat thread, restore the SIGTERM handler, close connections. Idempotent."""
        global _active, _cached_info
        if self._closed:
            return
        self._closed = True
        try:
            self.preempt.close()
        finally:
            if self._api is not None:
                self._api.close()
            with _lock:
                if _active is self:
                    _active = None
                    _cached_info = self.info if self.info is not None else _cached_info

    def __enter__(self) -> Context:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_dir: str | Path | None = None,
    transport: httpx.BaseTransport | None = None,
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
) -> Context:
    """Start the trial's harness.

    distributed: ranks of this process; by default read from RANK, WORLD_SIZE, LOCAL_RANK, ...
    checkpoint_dir: where the local twin keeps checkpoints (default `./checkpoints`); unused on the
        platform, where checkpoints go to S3.
    transport: an httpx transport to reach the control plane through (tests pass `httpx.MockTransport`).
    heartbeat_interval_s: seconds between the chief's heartbeats on the platform.
    """
    global _active
    dist = distributed if distributed is not None else DistributedContext.from_env()
    info = load_cluster_info()
    if info is None:
        context = Context(
            train=LocalTrainContext(dist),
            checkpoint=LocalCheckpointContext(Path(checkpoint_dir or DEFAULT_CHECKPOINT_DIR), dist),
            preempt=LocalPreemptContext(dist),
            distributed=dist,
        )
    else:
        context = _platform_context(info, dist, transport, heartbeat_interval_s)
    with _lock:
        _active = context
    return context


def _platform_context(
    info: ClusterInfo,
    dist: DistributedContext,
    transport: httpx.BaseTransport | None,
    heartbeat_interval_s: float,
) -> Context:
    api = ApiClient(info.master_url, info.run_token, transport=transport)
    trial_id = info.trial.trial_id
    try:
        info = info.with_remote(api.get(f"/trials/{trial_id}/info"))
        preempt = PlatformPreemptContext(api, trial_id, dist, heartbeat_interval_s=heartbeat_interval_s)
    except BaseException:
        api.close()
        raise
    return Context(
        train=PlatformTrainContext(api, trial_id, dist),
        checkpoint=PlatformCheckpointContext(api, trial_id, dist),
        preempt=preempt,
        distributed=dist,
        info=info,
        api=api,
    )


def get_cluster_info() -> ClusterInfo | None:
    """The trial's info (Determined's `det.get_cluster_info()`), or None off the platform.

    Inside `init()` it is the context's `info`. Before `init()` it is read from the environment, and
    `config` is fetched once from `GET /trials/{id}/info`.
    """
    global _cached_info
    with _lock:
        if _active is not None:
            return _active.info
    info = load_cluster_info()
    if info is None:
        return None
    with _lock:
        cached = _cached_info
    if cached is not None and (cached.trial.trial_id, cached.run_id) == (info.trial.trial_id, info.run_id):
        return cached
    api = ApiClient(info.master_url, info.run_token)
    try:
        info = info.with_remote(api.get(f"/trials/{info.trial.trial_id}/info"))
    finally:
        api.close()
    with _lock:
        _cached_info = info
    return info

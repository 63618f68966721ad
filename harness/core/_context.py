"""`init()`: the one entry point, giving a `Context` made of small sub-contexts (Determined's
`det.core.init()`). On the platform they talk to the control plane; off it (no `STRATUS_TRIAL_ID`)
they are local twins, so the same training script runs on a laptop.

`harness.InvalidHP` leaving the context's `with` block is reported to the searcher
(`POST /trials/{id}/searcher/invalid_hp`, or an `invalid_hp` local event) and turned into
`SystemExit(0)`: the process exits with code 0 and the searcher replaces the trial, as in Determined.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from stratus.contract import env as trial_env
from stratus.contract.http import Transport
from stratus.harness._api import ApiClient
from stratus.harness._info import (
    ClusterInfo,
    load_cluster_info,
    load_local_cluster_info,
    load_local_config,
    local_events_path,
)
from stratus.harness.core._alert import alert
from stratus.harness.core._checkpoint import (
    CheckpointContext,
    LocalCheckpointContext,
    PlatformCheckpointContext,
)
from stratus.harness.core._distributed import DistributedContext
from stratus.harness.core._events import LocalEvents
from stratus.harness.core._preempt import (
    AGENT_WATCHED_HEARTBEAT_S,
    HEARTBEAT_INTERVAL_S,
    LocalPreemptContext,
    PlatformPreemptContext,
    PreemptContext,
)
from stratus.harness.core._reports import ReportSender
from stratus.harness.core._searcher import PlatformSearcherContext, SearcherContext
from stratus.harness.core._searcher_local import LocalSearcherContext
from stratus.harness.core._train import LocalTrainContext, PlatformTrainContext, TrainContext
from stratus.harness.errors import HarnessError, InvalidHP

log = logging.getLogger("stratus.harness.core")

DEFAULT_CHECKPOINT_DIR = "checkpoints"

_lock = threading.Lock()
_active: Context | None = None
_cached_info: ClusterInfo | None = None


class Context:
    """What `init()` returns: `train`, `checkpoint`, `preempt`, `searcher`, `distributed`, and `info`
    (None off the platform, unless the local test mode gives one). Use it as a context manager, or call
    `close()` when training is done."""

    def __init__(
        self,
        *,
        train: TrainContext,
        checkpoint: CheckpointContext,
        preempt: PreemptContext,
        distributed: DistributedContext,
        searcher: SearcherContext | None = None,
        info: ClusterInfo | None = None,
        api: ApiClient | None = None,
        sender: ReportSender | None = None,
    ) -> None:
        self.train = train
        self.checkpoint = checkpoint
        self.preempt = preempt
        self.distributed = distributed
        self.searcher = searcher if searcher is not None else LocalSearcherContext(distributed)
        self.info = info
        self._api = api
        self._sender = sender
        self._closed = False
        train._on_invalid_hp = self.searcher.report_invalid_hp

    def alert(
        self, title: str | None = None, description: str | None = None, level: str | None = "info"
    ) -> None:
        """Determined's workload alert: one line of the trial's output here (`stratus.harness.core._alert`)."""
        alert(title, description, level)

    def close(self) -> None:
        """Deliver the reports still queued, stop the heartbeat thread, restore the SIGTERM handler, close
        connections. Idempotent. `ReportError` if reports could not be delivered (after the rest)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._sender is not None:
                self._sender.close()
        finally:
            self._close_rest()

    def _close_rest(self) -> None:
        global _active, _cached_info
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
        try:
            if isinstance(exc, InvalidHP):
                self.searcher.report_invalid_hp(str(exc))
        finally:
            if exc is None or isinstance(exc, InvalidHP):
                self.close()
            else:  # the trial's own error is the one to see; a report that failed too is logged
                try:
                    self.close()
                except HarnessError as e:
                    log.error("%s", e)
        if isinstance(exc, InvalidHP):
            log.info("InvalidHP (%s): reported to the searcher; exiting with code 0", exc)
            raise SystemExit(0) from exc


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_dir: str | Path | None = None,
    transport: Transport | None = None,
    heartbeat_interval_s: float | None = None,
    handle_sigterm: bool = True,
    searcher_wait: Callable[[float], bool] | None = None,
) -> Context:
    """Start the trial's harness.

    distributed: ranks of this process; by default read from RANK, WORLD_SIZE, LOCAL_RANK, ...
    checkpoint_dir: where the local twin keeps checkpoints (default `./checkpoints`); unused on the
        platform, where checkpoints go to S3.
    transport: how requests reach the control plane (tests pass `stratus.contract.http.InMemoryTransport`).
    heartbeat_interval_s: seconds between the chief's heartbeats on the platform; by default 5, or 60
        when its agent passes stop requests on through `STRATUS_PREEMPT_FILE` (it hears of them by its
        doorbell at once, so the heartbeat is only the fallback and costs 60 API calls an hour, not 720).
    handle_sigterm: latch preemption on SIGTERM (default); False leaves SIGTERM's default action.
    searcher_wait: how the searcher pauses between polls (`wait(seconds) -> stop waiting?`); by default
        it sleeps, waking early on preemption. Tests pass one that returns at once.
    """
    global _active
    dist = distributed if distributed is not None else DistributedContext.from_env()
    info = load_cluster_info()
    if info is None:
        context = _local_context(dist, checkpoint_dir, handle_sigterm)
    else:
        context = _platform_context(
            info, dist, transport, _heartbeat_interval(heartbeat_interval_s), handle_sigterm, searcher_wait
        )
    with _lock:
        _active = context
    return context


def _heartbeat_interval(given: float | None) -> float:
    if given is not None:
        return given
    return AGENT_WATCHED_HEARTBEAT_S if os.environ.get(trial_env.PREEMPT_FILE) else HEARTBEAT_INTERVAL_S


def _local_context(
    dist: DistributedContext, checkpoint_dir: str | Path | None, handle_sigterm: bool
) -> Context:
    events = LocalEvents(local_events_path())
    local = load_local_config()
    info = None if local is None else local.cluster_info()
    train = LocalTrainContext(dist, events=events)
    if local is None:
        searcher = LocalSearcherContext(dist, events=events, report_progress=train.report_progress)
    else:
        searcher = LocalSearcherContext.from_config(
            dist,
            config=local.config,
            hparams=local.hparams,
            length=local.length,
            events=events,
            report_progress=train.report_progress,
        )
    return Context(
        train=train,
        checkpoint=LocalCheckpointContext(
            Path(checkpoint_dir or DEFAULT_CHECKPOINT_DIR), dist, events=events
        ),
        preempt=LocalPreemptContext(dist, handle_sigterm=handle_sigterm),
        searcher=searcher,
        distributed=dist,
        info=info,
    )


def _platform_context(
    info: ClusterInfo,
    dist: DistributedContext,
    transport: Transport | None,
    heartbeat_interval_s: float,
    handle_sigterm: bool,
    searcher_wait: Callable[[float], bool] | None,
) -> Context:
    api = ApiClient(info.master_url, info.run_token, transport=transport)
    trial_id = info.trial.trial_id
    sender: ReportSender | None = None
    try:
        info = info.with_remote(api.get(f"/trials/{trial_id}/info"))
        sender = ReportSender(api, trial_id)
        preempt = PlatformPreemptContext(
            api,
            trial_id,
            dist,
            heartbeat_interval_s=heartbeat_interval_s,
            handle_sigterm=handle_sigterm,
            before_stopping=sender.flush,
        )
    except BaseException:
        if sender is not None:
            sender.close()
        api.close()
        raise
    train = PlatformTrainContext(sender, dist)
    searcher = PlatformSearcherContext(
        api,
        trial_id,
        dist,
        sender,
        report_progress=train.report_progress,
        wait=searcher_wait or preempt.wait,
        on_stop=lambda: preempt.latch("the searcher has no more work for this trial"),
        config=info.config,
    )
    return Context(
        train=train,
        checkpoint=PlatformCheckpointContext(api, trial_id, dist, sender),
        preempt=preempt,
        searcher=searcher,
        distributed=dist,
        info=info,
        api=api,
        sender=sender,
    )


def get_cluster_info() -> ClusterInfo | None:
    """The trial's info (Determined's `det.get_cluster_info()`), or None off the platform.

    Inside `init()` it is the context's `info`. Before `init()` it is read from the environment, and
    `config` is fetched once from `GET /trials/{id}/info`. Off the platform with `STRATUS_LOCAL_CONFIG`
    it is built from that file (trial 0, experiment 0, run "local").
    """
    global _cached_info
    with _lock:
        if _active is not None:
            return _active.info
    info = load_cluster_info()
    if info is None:
        return load_local_cluster_info()
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

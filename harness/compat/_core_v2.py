"""Determined's singleton Core API, `determined.experimental.core_v2`, over `stratus.harness.core`.

    core_v2.init(config=core_v2.Config(name="x"))
    core_v2.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.5})
    core_v2.close()

On the platform (and in the local test mode) `init()` wraps the trial's core context exactly as
`det.core.init()` does; the config is ignored there, as in Determined's managed mode. Off the platform
Determined would create an "unmanaged" experiment on its master. Stratus has no unmanaged experiments:
the script runs with the local twins instead (metrics printed, checkpoints in a local folder, nothing
recorded by a cluster), as `det experiment create --local` would run it, and `init()` says so in one
warning. What cannot be honoured off the platform is refused: a `client=`, checkpoint storage that is
not a local folder, and resuming by `external_trial_id`.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stratus import harness
from stratus.harness._info import LocalConfig, load_cluster_info, load_local_config
from stratus.harness.compat._determined import (
    PreemptMode,
    TensorboardMode,
    UnsupportedApiError,
    unsupported,
)
from stratus.harness.compat._determined import init as det_core_init
from stratus.harness.core import Context

log = logging.getLogger("stratus.harness.compat")

#: The attributes `init()` fills and `close()` empties (`core_v2.train`, ...).
SINGLETONS = ("train", "checkpoint", "distributed", "preempt", "searcher", "info")

_context: Context | None = None
_atexit_registered = False


@dataclasses.dataclass
class Config:
    """Determined's `core_v2.Config`: used off the platform only (ignored in a managed trial)."""

    name: str | None = None
    hparams: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    description: str | None = None
    labels: list[str] | None = None
    workspace: str | None = None
    project: str | None = None
    checkpoint_storage: str | dict[str, Any] | None = None
    searcher: dict[str, Any] | None = None
    external_experiment_id: str | None = None
    external_trial_id: str | None = None


class DefaultConfig(Config):
    """Determined's deprecated name for `Config`."""


class UnmanagedConfig(Config):
    """Determined's deprecated unmanaged-only options; merged into the defaults as Determined does."""


def current() -> Context | None:
    """The context `init()` made, or None."""
    return _context


def singleton(name: str) -> Any:
    """`core_v2.<name>` for one of `SINGLETONS`: the current context's, or None before `init()`."""
    return None if _context is None else getattr(_context, name)


def init_context(
    *,
    config: Config | None = None,
    defaults: Config | None = None,
    unmanaged: Config | bool | None = None,
    client: Any = None,
    distributed: harness.core.DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode | str = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode | str = TensorboardMode.AUTO,
) -> Context:
    """Determined's `core_v2.init_context()`: a core context, to use as a context manager."""
    if client is not None:
        raise UnsupportedApiError(
            "core_v2.init(client=...) is not implemented by Stratus's determined stand-in: there is no "
            "Determined master to talk to. Leave client out.",
            name="client",
        )
    if load_cluster_info() is not None or load_local_config() is not None:
        return det_core_init(
            distributed=distributed, preempt_mode=preempt_mode, tensorboard_mode=tensorboard_mode
        )
    merged = merge_config(config, defaults, unmanaged)
    if merged is None:
        raise ValueError(
            "core_v2.init() off the platform needs config=core_v2.Config(...); or run the script as a "
            "Stratus trial (det experiment create)."
        )
    if merged.external_trial_id is not None:
        raise UnsupportedApiError(
            f"core_v2.Config(external_trial_id={merged.external_trial_id!r}) asks to resume an unmanaged "
            "trial, and Stratus has no unmanaged experiments; run the script as a Stratus trial "
            "(det experiment create), which resumes from its checkpoints, or leave the id out.",
            name="external_trial_id",
        )
    folder = checkpoint_folder(checkpoint_storage or merged.checkpoint_storage)
    log.warning(
        "core_v2 off the platform: Stratus has no unmanaged experiments, so %r runs with the local twins "
        "(metrics printed, checkpoints under %s); nothing is recorded by a Stratus cluster.",
        merged.name or "this script",
        folder or "./checkpoints",
    )
    context = harness.core.init(distributed=distributed, checkpoint_dir=folder)
    context.info = LocalConfig(
        hparams=dict(merged.hparams or {}),
        config={k: v for k, v in dataclasses.asdict(merged).items() if v is not None},
        length=None,
    ).cluster_info()
    return context


def init(
    *,
    config: Config | None = None,
    defaults: Config | None = None,
    unmanaged: Config | bool | None = None,
    client: Any = None,
    distributed: harness.core.DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode | str = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode | str = TensorboardMode.AUTO,
) -> None:
    """Determined's `core_v2.init()`: start the singleton context (`core_v2.train`, ...); a second call
    closes the first context."""
    global _context, _atexit_registered
    if _context is not None:
        _context.close()
        _context = None
    _context = init_context(
        config=config,
        defaults=defaults,
        unmanaged=unmanaged,
        client=client,
        distributed=distributed,
        checkpoint_storage=checkpoint_storage,
        preempt_mode=preempt_mode,
        tensorboard_mode=tensorboard_mode,
    )
    if not _atexit_registered:
        atexit.register(close)
        _atexit_registered = True


def close() -> None:
    """Determined's `core_v2.close()`: close the singleton context (idempotent)."""
    global _context
    if _context is not None:
        _context.close()
    _context = None


def merge_config(
    config: Config | None, defaults: Config | None, unmanaged: Config | bool | None
) -> Config | None:
    """Determined's rule: `config` wins; else `defaults`, completed by the deprecated `unmanaged`."""
    if config is not None:
        return config
    if defaults is not None and isinstance(unmanaged, Config):
        for name in ("project", "workspace", "external_experiment_id", "external_trial_id"):
            if getattr(defaults, name) is None:
                setattr(defaults, name, getattr(unmanaged, name))
    return defaults


def checkpoint_folder(storage: str | Mapping[str, Any] | None) -> Path | None:
    """The local folder for checkpoints off the platform: a path, or a `shared_fs` / `directory`
    storage; any other storage (s3, gcs, azure) is refused, since only the platform uploads."""
    if storage is None:
        return None
    if isinstance(storage, str):
        return Path(storage)
    kind = storage.get("type")
    if kind == "shared_fs" and isinstance(storage.get("host_path"), str):
        return Path(storage["host_path"]) / str(storage.get("storage_path") or "")
    if kind == "directory" and isinstance(storage.get("container_path"), str):
        return Path(storage["container_path"])
    raise UnsupportedApiError(
        f"checkpoint_storage of type {kind!r} off the platform is not implemented by Stratus's "
        "determined stand-in: give a local folder (a path, or shared_fs with host_path), or run the "
        "script as a Stratus trial, whose checkpoints go to the stack's bucket.",
        name="checkpoint_storage",
    )


#: `core_v2.<name>` for the rest of Determined's module: refused by name.
missing = unsupported(
    "determined.experimental.core_v2",
    {
        "url_reverse_webui_exp_view": "Stratus has no web UI; `det experiment describe ID` shows the experiment"
    },
)

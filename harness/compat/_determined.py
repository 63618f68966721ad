"""What `determined` and `determined.core` add to `harness`: Determined's enums and argument names.

Everything else in the compatibility package is a plain re-export of `harness`.
"""

from __future__ import annotations

import enum
import logging
from pathlib import Path
from typing import Any

import harness.core
from harness.core import Context

log = logging.getLogger("harness.compat")

#: Determined's log line format (`det.LOG_FORMAT`).
LOG_FORMAT = "%(levelname)s: [%(process)s] %(name)s: %(message)s"


class PreemptMode(enum.Enum):
    """Determined's `core.PreemptMode`: who polls for preemption (here the chief always does)."""

    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"


class TensorboardMode(enum.Enum):
    """Determined's `core.TensorboardMode` (no TensorBoard uploads on Stratus)."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class DistributedContext(harness.core.DistributedContext):
    """Determined's `core.DistributedContext` constructors on top of harness's."""

    @classmethod
    def from_deepspeed(cls) -> harness.core.DistributedContext:
        """DeepSpeed runs on a `torch.distributed` process group: same as `from_torch_distributed()`."""
        return cls.from_torch_distributed()

    @classmethod
    def from_horovod(cls, hvd: Any = None) -> harness.core.DistributedContext:
        raise NotImplementedError(
            "Horovod is not supported by Stratus's determined package; launch with torch.distributed "
            "(launchers.torch_distributed) and use DistributedContext.from_torch_distributed()."
        )


def init(
    *,
    distributed: harness.core.DistributedContext | None = None,
    checkpoint_storage: str | Path | None = None,
    preempt_mode: PreemptMode | str = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode | str = TensorboardMode.AUTO,
    **ignored: Any,
) -> Context:
    """Determined's `det.core.init()`: `harness.core.init()` with Determined's argument names.

    `checkpoint_storage` (a local folder off the platform) becomes the local checkpoint folder; the other
    Determined arguments are accepted and ignored.
    """
    if ignored:
        log.debug("det.core.init ignores %s", ", ".join(sorted(ignored)))
    local_dir = checkpoint_storage if isinstance(checkpoint_storage, str | Path) else None
    return harness.core.init(distributed=distributed, checkpoint_dir=local_dir)

"""What `determined` and `determined.core` add to `harness`: Determined's enums and argument names,
and the clear refusal of everything the stand-in does not implement (`unsupported`, `MissingModules`).

Everything else in the compatibility package is a plain re-export of `harness`.
"""

from __future__ import annotations

import enum
import importlib
import importlib.abc
import importlib.machinery
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from stratus import harness
from stratus.harness._info import RankInfo, load_collective_port
from stratus.harness.core import Context
from stratus.harness.core._collective import CollectiveError
from stratus.harness.errors import HarnessError

log = logging.getLogger("stratus.harness.compat")

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


class UnsupportedApiError(HarnessError, ImportError):
    """A part of Determined's API that Stratus's `determined` stand-in does not implement (an
    `ImportError` too, so `from determined import x` and optional-import guards see it as missing)."""


SUPPORTED = (
    "det.core (the Core API, DistributedContext(chief_ip=...) included), det.pytorch (PyTorchTrial, "
    "Trainer), det.experimental.core_v2, det.launch (torch_distributed, deepspeed, horovod, wrap_rank), "
    "det.common.util's metric group names, det.get_cluster_info(), det.InvalidHP, det.LOG_FORMAT"
)


def unsupported(module: str, hints: dict[str, str] | None = None) -> Callable[[str], Any]:
    """A module `__getattr__` for `module`: a submodule of the stand-in is imported (as Python's
    `from package import submodule` expects), anything else is refused by name."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        try:
            return importlib.import_module(f"{module}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{module}.{name}":
                raise
        hint = (hints or {}).get(name, "")
        raise UnsupportedApiError(
            f"{module}.{name} is not implemented by Stratus's determined stand-in"
            + (f": {hint}" if hint else "")
            + f". It covers {SUPPORTED}.",
            name=f"{module}.{name}",
        )

    return __getattr__


class MissingModules(importlib.abc.MetaPathFinder):
    """The last finder on `sys.meta_path`: a `determined.*` module that no other finder has is refused
    with a sentence naming it (instead of a bare "No module named ...")."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("determined."):
            return None
        raise ModuleNotFoundError(
            f"{fullname} is not implemented by Stratus's determined stand-in. It covers {SUPPORTED}.",
            name=fullname,
        )


def install_missing_modules_finder() -> None:
    """Add `MissingModules` at the end of `sys.meta_path`, once."""
    if not any(isinstance(finder, MissingModules) for finder in sys.meta_path):
        sys.meta_path.append(MissingModules())


class DistributedContext(harness.core.DistributedContext):
    """Determined's `core.DistributedContext`: its constructor (`chief_ip`, `pub_port`, ...) and its
    other constructors, on top of harness's.

    With several ranks its collectives go through the chief's sockets (`stratus.harness.core._collective`), as
    Determined's go through ZMQ: on one node (``local_size == size``) the chief is 127.0.0.1, on several
    ``chief_ip`` is required. The chief listens on ``pub_port`` + ``port_offset``; by default on
    ``STRATUS_COLLECTIVE_PORT`` (the agent's free port for the run), else Determined's 12360.
    ``pull_port`` and ``force_tcp`` are accepted and unused (one TCP port serves both ways).
    """

    def __init__(
        self,
        *,
        rank: int = 0,
        size: int = 1,
        local_rank: int | None = None,
        local_size: int | None = None,
        cross_rank: int | None = None,
        cross_size: int | None = None,
        chief_ip: str | None = None,
        pub_port: int | None = None,
        pull_port: int | None = None,
        port_offset: int = 0,
        force_tcp: bool = False,
        port: int | None = None,
    ) -> None:
        local = size if local_size is None else local_size
        if size > 1 and chief_ip is None:
            if local != size:
                raise CollectiveError(
                    f"this trial's {size} ranks span several nodes (local_size {local} != size {size}), so "
                    "DistributedContext needs chief_ip=, the chief's address (info.container_addrs[0])."
                )
            chief_ip = "127.0.0.1"  # Determined too reaches a chief on the same node through localhost
        if port is None:
            port = (load_collective_port() if pub_port is None else pub_port) + port_offset
        super().__init__(
            rank=rank,
            size=size,
            local_rank=local_rank,
            local_size=local_size,
            cross_rank=cross_rank,
            cross_size=cross_size,
            chief_ip=chief_ip,
            port=port,
        )

    # The other constructors give harness's context: their collectives are torch.distributed's.
    @classmethod
    def from_rank_info(cls, info: RankInfo) -> harness.core.DistributedContext:
        return harness.core.DistributedContext.from_rank_info(info)

    @classmethod
    def from_torch_distributed(cls) -> harness.core.DistributedContext:
        return harness.core.DistributedContext.from_torch_distributed()

    @classmethod
    def from_deepspeed(cls, chief_ip: str | None = None) -> harness.core.DistributedContext:
        """DeepSpeed runs on a `torch.distributed` process group: same as `from_torch_distributed()`."""
        return harness.core.DistributedContext.from_torch_distributed()

    @classmethod
    def from_horovod(cls, hvd: Any = None, chief_ip: str | None = None) -> harness.core.DistributedContext:
        raise NotImplementedError(
            "Horovod is not supported by Stratus's determined package; launch with torch.distributed "
            "(stratus.launchers.torch_distributed) and use DistributedContext.from_torch_distributed()."
        )


def init(
    *,
    distributed: harness.core.DistributedContext | None = None,
    checkpoint_storage: str | Path | None = None,
    preempt_mode: PreemptMode | str = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode | str = TensorboardMode.AUTO,
    **ignored: Any,
) -> Context:
    """Determined's `det.core.init()`: `stratus.harness.core.init()` with Determined's argument names.

    `checkpoint_storage` (a local folder off the platform) becomes the local checkpoint folder; the other
    Determined arguments are accepted and ignored.
    """
    if ignored:
        log.debug("det.core.init ignores %s", ", ".join(sorted(ignored)))
    local_dir = checkpoint_storage if isinstance(checkpoint_storage, str | Path) else None
    return harness.core.init(distributed=distributed, checkpoint_dir=local_dir)

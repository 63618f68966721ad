"""Determined's singleton Core API (`core_v2.init()`, `core_v2.train`, ...), served by
`stratus.harness.compat._core_v2` (see there what runs off the platform)."""

from typing import Any

from stratus.harness.compat import _core_v2
from stratus.harness.compat._core_v2 import (
    Config,
    DefaultConfig,
    UnmanagedConfig,
    close,
    init,
    init_context,
)
from stratus.harness.compat._determined import DistributedContext, PreemptMode, TensorboardMode

__all__ = [
    "Config",
    "DefaultConfig",
    "DistributedContext",
    "PreemptMode",
    "TensorboardMode",
    "UnmanagedConfig",
    "close",
    "init",
    "init_context",
]


def __getattr__(name: str) -> Any:
    # `core_v2.train`, `.checkpoint`, ... follow the context init() made (None before it and after close()).
    if name in _core_v2.SINGLETONS:
        return _core_v2.singleton(name)
    return _core_v2.missing(name)

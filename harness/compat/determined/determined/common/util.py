"""Determined's `determined.common.util`: the metric group names trial code uses
(`_LEGACY_TRAINING`, `_LEGACY_VALIDATION`, `_INFERENCE`) and its small pure helpers."""

from stratus.harness.compat._determined import unsupported
from stratus.harness.compat._util import (
    _INFERENCE,
    _LEGACY_TRAINING,
    _LEGACY_VALIDATION,
    chunks,
    sizeof_fmt,
    strtobool,
)

__all__ = ["_INFERENCE", "_LEGACY_TRAINING", "_LEGACY_VALIDATION", "chunks", "sizeof_fmt", "strtobool"]

__getattr__ = unsupported("determined.common.util")

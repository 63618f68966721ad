"""Determined's `determined.common`: the `util` helpers trial code imports."""

from stratus.harness.compat._determined import unsupported

from . import util

__all__ = ["util"]

__getattr__ = unsupported(
    "determined.common",
    {
        "api": "there is no Determined master; the trial talks to Stratus through det.core",
        "storage": "checkpoints go through det.core's checkpoint context",
    },
)

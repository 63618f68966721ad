"""Determined's `determined.experimental`: `core_v2` only (there is no Determined master for `client`)."""

from stratus.harness.compat._determined import unsupported

from . import core_v2

__all__ = ["core_v2"]

__getattr__ = unsupported(
    "determined.experimental",
    {
        "client": "there is no Determined master; use the det CLI (det experiment list/describe)",
        "Determined": "there is no Determined master; use the det CLI (det experiment list/describe)",
    },
)

"""Stratus's `determined` package: Determined's trial-facing API as a thin alias layer over `harness`.

It is on the trial's PYTHONPATH only when the real `determined` package is not installed. It covers
`det.get_cluster_info()`, `det.core` (the Core API), `det.pytorch` (PyTorchTrial, Trainer),
`det.InvalidHP` and `det.LOG_FORMAT`.
"""

from harness import InvalidHP
from harness._info import ClusterInfo, TrialInfo
from harness.compat._determined import LOG_FORMAT
from harness.core import get_cluster_info

from . import core

__version__ = "0.0.0+stratus"

__all__ = ["LOG_FORMAT", "ClusterInfo", "InvalidHP", "TrialInfo", "__version__", "core", "get_cluster_info"]

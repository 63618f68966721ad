"""Stratus's `determined` package: Determined's trial-facing API as a thin alias layer over `harness`.

It is on the trial's PYTHONPATH only when the real `determined` package is not installed. It covers
`det.get_cluster_info()`, `det.core` (the Core API), `det.pytorch` (PyTorchTrial, Trainer),
`det.experimental.core_v2`, `det.launch` (the launchers), `det.common.util`'s metric group names,
`det.InvalidHP` and `det.LOG_FORMAT`. Anything else of Determined's API raises
`UnsupportedApiError` (an ImportError) naming it; a missing `determined.*` module, ModuleNotFoundError
with the same sentence.
"""

from stratus.harness import InvalidHP
from stratus.harness._info import ClusterInfo, TrialInfo
from stratus.harness.compat._determined import LOG_FORMAT, install_missing_modules_finder, unsupported
from stratus.harness.core import get_cluster_info

install_missing_modules_finder()

from . import core  # noqa: E402

__version__ = "0.0.0+stratus"

__all__ = ["LOG_FORMAT", "ClusterInfo", "InvalidHP", "TrialInfo", "__version__", "core", "get_cluster_info"]

__getattr__ = unsupported("determined")

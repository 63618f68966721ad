"""Stratus's `nni` package: NNI's trial API as a thin alias layer over `harness`
(see `stratus.harness.compat._nni` for what each call does). On the trial's PYTHONPATH only when the real
`nni` package is not installed.

As in NNI, the calls are defined in `nni.trial` and re-exported here, so ``nni.trial.get_next_parameter
is nni.get_next_parameter``."""

from . import trial, utils
from .trial import *  # noqa: F403 - as NNI's own nni/__init__.py: the package is its trial API

__version__ = "0.0.0+stratus"

__all__ = ["__version__", *trial.__all__, "utils"]

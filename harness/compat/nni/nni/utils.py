"""NNI's `nni.utils` helpers that trial scripts use."""

from stratus.harness.compat._nni import merge_parameter

__all__ = ["merge_parameter"]

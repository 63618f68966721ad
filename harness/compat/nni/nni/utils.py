"""NNI's `nni.utils` helpers that trial scripts use."""

from harness.compat._nni import merge_parameter

__all__ = ["merge_parameter"]

"""Compatibility packages that let Determined and NNI trial code run unchanged on Stratus.

`harness/compat/determined/` holds a top-level `determined` package and `harness/compat/nni/` a
top-level `nni` package; each is a thin alias layer over `harness`. The agent puts a folder on the
trial's `PYTHONPATH` only when the real package is not importable by the trial's Python, so an
installed `determined` or `nni` always wins (see `stratus.harness.trial_process.compat_pythonpath`).
"""

from __future__ import annotations

from pathlib import Path

#: top-level package name -> the folder to put on PYTHONPATH for it
PACKAGES: tuple[str, ...] = ("determined", "nni")
ROOT = Path(__file__).resolve().parent


def compat_path(package: str) -> Path:
    """The folder holding the compatibility package `package` (`determined` or `nni`)."""
    if package not in PACKAGES:
        raise ValueError(f"no compatibility package {package!r}; there are {', '.join(PACKAGES)}.")
    return ROOT / package

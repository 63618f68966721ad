"""Loads `stratus.launchers._adaptdl_numpy` into every Python process an AdaptDL replica starts (issue 28).

`stratus.launchers.adaptdl` puts this folder first on each replica's ``PYTHONPATH``; Python imports the first
``sitecustomize`` on its path at startup, so this runs before the trial's code, in the replica and in
whatever Python it starts (DataLoader workers, ``--trial`` through ``stratus.harness.exec.run_trial``), whatever
the command is (``python3 trial.py``, a shell script that runs Python). Why a sitecustomize rather than
wrapping the command: the command is the user's and need not be Python's; rather than a ``.pth`` file:
those are read only from site-packages, which we never touch. The folder holds nothing else, so it
shadows no module.

The layer is loaded from its file, not imported as ``stratus.launchers._adaptdl_numpy``: the replica's Python
need not see our packages on its path, and importing the package would load all of ``launchers``. Then
the ``sitecustomize`` this one hides (the next on ``sys.path``: the image's, the distribution's, one on
the user's ``PYTHONPATH``) runs, as it would have without us. A layer that cannot load says so and the
trial goes on as it would have without it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_LAYER = os.path.join(os.path.dirname(_HERE), "_adaptdl_numpy.py")
_NAME = "_stratus_adaptdl_numpy"


def _load_layer() -> None:
    try:
        module = sys.modules.get(_NAME)
        if module is None:
            spec = importlib.util.spec_from_file_location(_NAME, _LAYER)
            if spec is None or spec.loader is None:
                raise ImportError(f"no module at {_LAYER}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[_NAME] = module
            spec.loader.exec_module(module)
        module.install()
    except Exception as e:  # never stop the trial: it runs as it would have without the layer
        sys.modules.pop(_NAME, None)
        print(
            f"[stratus] the numpy alias layer for AdaptDL ({_LAYER}) did not load: {type(e).__name__}: {e}; "
            "AdaptDL runs without it",
            file=sys.stderr,
            flush=True,
        )


def _is_boot_dir(path: str) -> bool:
    parts = os.path.abspath(path or os.curdir).split(os.sep)
    return parts[-2:] == ["launchers", os.path.basename(_HERE)]


def _chain() -> None:
    """Run the ``sitecustomize`` that the first one of ours on the path hides, under its own name."""
    path = [p for p in sys.path if not _is_boot_dir(p)]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_load_layer()
_chain()

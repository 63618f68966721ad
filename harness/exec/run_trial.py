"""Run a trial class: `python -m stratus.harness.exec.run_trial model_def:MyTrial`.

This is how the config's legacy `entrypoint: model_def:MyTrial` runs (Determined's trial-class
entrypoint): the module is imported from the current folder (the context), the class must be a
`stratus.harness.pytorch.PyTorchTrial` (or `determined.pytorch.PyTorchTrial`, the same class), and it is trained
by `stratus.harness.pytorch.Trainer` with the trial's hyperparameters, config and periods. The exit code is 0
when training ends, is preempted (resumed later from the checkpoint) or raises `InvalidHP`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from stratus.harness.errors import TrialDefinitionError
from stratus.harness.pytorch import PyTorchTrial, Trainer, init

LOG_FORMAT = "%(asctime)s %(levelname)s [%(process)s] %(name)s: %(message)s"


def load_trial_class(spec: str, search_path: str | None = None) -> type[PyTorchTrial]:
    """The class named by `module:Class` (`module` may be dotted), imported from `search_path`
    (default: the current folder)."""
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise TrialDefinitionError(
            f"entrypoint {spec!r} is not of the form module:Class; write e.g. model_def:MyTrial."
        )
    folder = search_path if search_path is not None else os.getcwd()
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name.split(".")[0] and e.name != module_name:
            raise
        raise TrialDefinitionError(
            f"module {module_name!r} of entrypoint {spec!r} is not in {folder}; check the context folder."
        ) from e
    target: object = module
    for part in class_name.split("."):
        if not hasattr(target, part):
            raise TrialDefinitionError(f"module {module_name!r} has no {class_name!r} (entrypoint {spec!r}).")
        target = getattr(target, part)
    if not (isinstance(target, type) and issubclass(target, PyTorchTrial)):
        raise TrialDefinitionError(
            f"{spec} is not a PyTorchTrial subclass; subclass determined.pytorch.PyTorchTrial "
            "(or stratus.harness.pytorch.PyTorchTrial), or make the entrypoint a command."
        )
    return target


def run(spec: str) -> int:
    trial_class = load_trial_class(spec)
    with init() as context:
        trial = trial_class(context)
        Trainer(trial, context).fit()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stratus.harness.exec.run_trial",
        description="Train a PyTorchTrial class from the context.",
    )
    parser.add_argument("trial", help="the trial class, as module:Class (the config's entrypoint)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    return run(args.trial)


if __name__ == "__main__":
    sys.exit(main())

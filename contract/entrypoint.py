"""Determined's legacy entrypoint rule: ``model_def:TrialClass`` (a module path, a colon, a class name)
names a trial class rather than a command.

Such a class runs under the harness's trial runner (``python3 -m stratus.harness.exec.run_trial model_def:Trial``),
one process per slot under the torch_distributed launcher when the trial has several slots. The control
plane builds the agent's argv with it; local test mode (one process) runs the same command.
"""

from __future__ import annotations

import re

RUN_TRIAL_MODULE = "stratus.harness.exec.run_trial"
DISTRIBUTED_LAUNCHER_MODULE = "stratus.launchers.torch_distributed"

_LEGACY_ENTRYPOINT = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def is_legacy_trial_class(entrypoint: object) -> bool:
    """Whether ``entrypoint`` (a config's ``entrypoint``: a string or a list of words) is the
    ``model_def:TrialClass`` form."""
    return isinstance(entrypoint, str) and _LEGACY_ENTRYPOINT.fullmatch(entrypoint.strip()) is not None


def legacy_trial_argv(entrypoint: object, slots_per_trial: int = 1) -> list[str] | None:
    """The argv that runs a legacy trial class, or None when ``entrypoint`` is not one (it then follows
    the config's own rules: argv, or a shell line)."""
    if not isinstance(entrypoint, str) or not is_legacy_trial_class(entrypoint):
        return None
    trial_class = entrypoint.strip()
    if slots_per_trial > 1:
        return ["python3", "-m", DISTRIBUTED_LAUNCHER_MODULE, "--trial", trial_class]
    return ["python3", "-m", RUN_TRIAL_MODULE, trial_class]

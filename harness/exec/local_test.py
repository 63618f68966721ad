"""Become the trial of `det experiment create --local --test-mode`:

    python -m stratus.harness.exec.local_test --context DIR --local-config FILE --events FILE \\
        --hook-failed-marker FILE

The CLI runs this program (it imports no harness module). The program builds the trial's environment and
script as an agent does (`stratus.harness.trial_process`), moves into the context folder ``DIR`` and execs
``bash -c SCRIPT`` in its own place: its pid, process group, output and exit code are the trial's.

* ``--local-config``: the local twins' file (``{"hparams": {...}, "config": {...}, "length": 1}``, see
  `stratus.harness._info`). The entrypoint is read from its config: a string runs through ``sh -c``, a list as
  argv, and Determined's legacy ``model_def:Trial`` form as ``python3 -m stratus.harness.exec.run_trial
  model_def:Trial``.
* The environment is this process's without the platform's ``STRATUS_*`` variables (so the harness gives
  its local twins), the config's ``environment.environment_variables`` (a list, or the CPU entries of the
  per-device form), ``STRATUS_LOCAL_CONFIG`` and ``STRATUS_LOCAL_EVENTS``.
* ``--events``: where the local twins append their events (``STRATUS_LOCAL_EVENTS``).
* ``--hook-failed-marker``: left behind, holding the sentence that says so, when ``startup-hook.sh``
  fails.

Exit code 2, with the reason on stderr, when the local config cannot be read or names no usable
entrypoint; otherwise the trial's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stratus.contract import env as trial_env
from stratus.contract.entrypoint import legacy_trial_argv
from stratus.harness.trial_process import Probe, build_script, missing_packages, trial_environment


class LocalConfigError(Exception):
    """The local config cannot be read or names no usable entrypoint."""


def trial_entrypoint(entrypoint: object) -> str | list[str]:
    """The config's entrypoint as the trial runs it: the legacy ``model_def:Trial`` form under the trial
    runner (one process: local test mode has no launcher), anything else as written."""
    legacy = legacy_trial_argv(entrypoint)
    if legacy is not None:
        return legacy
    if isinstance(entrypoint, str) and entrypoint.strip():
        return entrypoint
    if isinstance(entrypoint, list) and entrypoint and all(isinstance(w, str) and w for w in entrypoint):
        return [str(word) for word in entrypoint]
    raise LocalConfigError(
        f"the config's entrypoint {entrypoint!r} is not a command or a list of words; "
        "set `entrypoint:` to a command (e.g. python3 train.py) or a list of words"
    )


def config_variables(config: Mapping[str, Any]) -> dict[str, str]:
    """`environment.environment_variables` (a list, or the CPU entries of the per-device form)."""
    environment = config.get("environment")
    entries: object = environment.get("environment_variables") if isinstance(environment, Mapping) else None
    if isinstance(entries, Mapping):
        entries = entries.get("cpu")
    variables: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        name, _, value = str(entry).partition("=")
        if name:
            variables[name] = value
    return variables


def local_environment(
    base: Mapping[str, str],
    config: Mapping[str, Any],
    local_config: Path,
    events: Path,
    probe: Probe = missing_packages,
) -> dict[str, str]:
    """The trial's environment: ``base`` off the platform, with the config's variables and the local files."""
    variables = {
        **config_variables(config),
        trial_env.LOCAL_CONFIG: str(local_config),
        trial_env.LOCAL_EVENTS: str(events),
    }
    return trial_environment(
        base, variables, drop=lambda name: name.startswith(trial_env.PREFIX), probe=probe
    )


def read_config(local_config: Path) -> dict[str, Any]:
    """The experiment config held by the local config file."""
    try:
        local = json.loads(local_config.read_text())
    except (OSError, ValueError) as e:
        raise LocalConfigError(f"cannot read the local config {local_config} ({e})") from e
    config = local.get("config") if isinstance(local, dict) else None
    if not isinstance(config, dict):
        raise LocalConfigError(f"the local config {local_config} holds no `config` object")
    return config


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m stratus.harness.exec.local_test", description="Become the trial of a local test run."
    )
    parser.add_argument("--context", type=Path, required=True, help="the folder the trial runs in")
    parser.add_argument("--local-config", type=Path, required=True, help="the local twins' config file")
    parser.add_argument("--events", type=Path, required=True, help="the local twins' events file")
    parser.add_argument("--hook-failed-marker", type=Path, required=True, help="left when the hook fails")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    local_config, events = args.local_config.absolute(), args.events.absolute()
    try:
        config = read_config(local_config)
        entrypoint = trial_entrypoint(config.get("entrypoint"))
    except LocalConfigError as e:
        print(f"stratus.harness.exec.local_test: {e}", file=sys.stderr)
        return 2
    env = local_environment(os.environ, config, local_config, events)
    script = build_script(entrypoint, args.hook_failed_marker.absolute())
    shell = shutil.which("bash", path=env.get("PATH")) or "/bin/sh"
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.chdir(args.context)
        os.execve(shell, [shell, "-c", script], env)
    except OSError as e:
        print(
            f"stratus.harness.exec.local_test: cannot start the trial in {args.context} ({e})",
            file=sys.stderr,
        )
        return 127


if __name__ == "__main__":
    sys.exit(main())

"""How a trial's process is started, the same on an agent and in local test mode
(`stratus.harness.exec.local_test`): its environment (`trial_environment`) and its ``bash -c`` script
(`build_script`).

The environment is the starter's own without what must not reach the trial, ``PATH`` led by this
interpreter's bin folder (so ``python3`` is this interpreter), the trial's variables, and, at the end of
``PYTHONPATH``, the determined/nni stand-ins for the packages the trial's Python lacks
(`compat_pythonpath`).

The script sources ``startup-hook.sh`` when the context has one (its exports reach the entrypoint), then
execs the entrypoint. A hook that fails, or ends the shell (``exit``, ``set -e``), leaves a marker file
behind holding the sentence that says so, so the caller can tell the run's end apart from the
entrypoint's.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from stratus.harness.compat import PACKAGES as COMPAT_PACKAGES
from stratus.harness.compat import compat_path

log = logging.getLogger(__name__)

HOOK = "startup-hook.sh"
PROBE_TIMEOUT_S = 30.0
_PROBE_SCRIPT = (
    "import importlib.util, sys\n"
    "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))\n"
)

#: ``probe(env, names)`` -> the names the trial's Python cannot import
Probe = Callable[[Mapping[str, str], Sequence[str]], Collection[str]]


def missing_packages(env: Mapping[str, str], names: Sequence[str]) -> frozenset[str]:
    """The top-level packages among ``names`` that the trial's Python (``python3`` on the trial's ``PATH``)
    cannot import with the trial's environment. A Python that cannot be run reports nothing missing.

    It asks from an empty folder with Python's safe path on, so a folder of the same name where the agent
    happens to run (an ``nni/`` checkout beside the user's configs) is not mistaken for an installed package
    (``PYTHONSAFEPATH``, not ``-P``: a trial's Python older than 3.11 ignores the variable, but not the flag)."""
    python = shutil.which("python3", path=env.get("PATH")) or shutil.which("python", path=env.get("PATH"))
    if python is None:
        return frozenset()
    try:
        with tempfile.TemporaryDirectory(prefix="stratus-probe-") as empty:
            done = subprocess.run(
                [python, "-c", _PROBE_SCRIPT, *names],
                env={**env, "PYTHONSAFEPATH": "1"},
                cwd=empty,
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("could not ask %s which packages it has: %s", python, e)
        return frozenset()
    if done.returncode != 0:
        log.warning("could not ask %s which packages it has: %s", python, done.stderr.strip()[-300:])
        return frozenset()
    return frozenset(done.stdout.split()) & frozenset(names)


def compat_pythonpath(env: Mapping[str, str], probe: Probe = missing_packages) -> list[str]:
    """The compatibility folders (``harness/compat/determined``, ``harness/compat/nni``) for the packages
    the trial's Python lacks: an installed ``determined`` or ``nni`` is never shadowed.

    The probe runs before ``startup-hook.sh``: a hook that installs ``determined`` or ``nni`` should also
    drop the folder from ``PYTHONPATH`` (or install it into the image instead).
    """
    missing = probe(env, COMPAT_PACKAGES)
    return [str(compat_path(name)) for name in COMPAT_PACKAGES if name in missing]


def trial_environment(
    base: Mapping[str, str],
    variables: Mapping[str, str],
    *,
    drop: Callable[[str], bool],
    probe: Probe = missing_packages,
) -> dict[str, str]:
    """``base`` without the names ``drop`` refuses, ``PATH`` led by this interpreter's bin folder, then
    ``variables``; ``PYTHONPATH`` ends with the compatibility folders of the packages the trial's Python
    lacks."""
    # PYTHONSAFEPATH: our own processes may run with it; a trial's script must see its own folder first.
    env = {k: v for k, v in base.items() if not drop(k) and k != "PYTHONSAFEPATH"}
    bin_dir = os.path.dirname(sys.executable) if sys.executable else ""
    path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *path] if bin_dir else path)
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    env["PYTHONUNBUFFERED"] = "1"
    env.update(variables)
    extra = compat_pythonpath(env, probe)
    if extra:
        # After the user's entries (their modules win); PYTHONPATH precedes site-packages, which is why
        # a folder is added only for a package that is not installed.
        kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in extra]
        env["PYTHONPATH"] = os.pathsep.join([*kept, *extra])
    return env


def entrypoint_command(entrypoint: str | Sequence[str]) -> str:
    """The shell line that execs ``entrypoint``: a string through ``sh -c``, a list as argv."""
    if isinstance(entrypoint, str):
        return f"exec sh -c {shlex.quote(entrypoint)}"
    return f"exec {shlex.join(entrypoint)}"


def build_script(entrypoint: str | Sequence[str], hook_failed_marker: Path, *, who: str = "") -> str:
    """The ``bash -c`` script around ``entrypoint`` (see the module docstring); ``who`` prefixes the line
    said when the hook fails (e.g. ``"[agent] "``)."""
    on_exit = (
        '__stratus_rc=$?; [ "$__stratus_rc" -ne 0 ] || __stratus_rc=1; '
        f'__stratus_why="{HOOK} failed (exit code $__stratus_rc); the entrypoint was not started"; '
        f'echo "{who}$__stratus_why" >&2; '
        f'echo "$__stratus_why" > {shlex.quote(str(hook_failed_marker))}; exit "$__stratus_rc"'
    )
    return (
        f"if [ -f ./{HOOK} ]; then\n"
        f"  trap {shlex.quote(on_exit)} EXIT\n"
        f"  . ./{HOOK}\n"  # not `|| exit`: that would turn off a `set -e` inside the hook
        '  __stratus_rc=$?; [ "$__stratus_rc" -eq 0 ] || exit "$__stratus_rc"\n'
        "  trap - EXIT\n"
        "fi\n"
        f"{entrypoint_command(entrypoint)}\n"
    )

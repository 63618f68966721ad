"""The shell script that starts a trial: source ``startup-hook.sh`` when present, then exec the entrypoint.

One script for the agent and for ``det experiment create --local --test-mode``, so a hook behaves the
same in both: it is sourced (its exports reach the entrypoint), and a hook that fails, or ends the
shell (``exit``, ``set -e``), leaves a marker file behind so the caller can tell the run's end apart
from the entrypoint's.
"""

from __future__ import annotations

import shlex
from pathlib import Path

HOOK = "startup-hook.sh"


def hook_script(command: str, hook_failed_marker: Path, *, who: str = "") -> str:
    """The ``bash -c`` script around ``command`` (a shell line that execs the entrypoint); ``who`` prefixes
    the line said when the hook fails (e.g. ``"[agent] "``)."""
    on_exit = (
        '__stratus_rc=$?; [ "$__stratus_rc" -ne 0 ] || __stratus_rc=1; '
        f'echo "{who}{HOOK} failed (exit code $__stratus_rc); the entrypoint was not started" >&2; '
        f': > {shlex.quote(str(hook_failed_marker))}; exit "$__stratus_rc"'
    )
    return (
        f"if [ -f ./{HOOK} ]; then\n"
        f"  trap {shlex.quote(on_exit)} EXIT\n"
        f"  . ./{HOOK}\n"  # not `|| exit`: that would turn off a `set -e` inside the hook
        '  __stratus_rc=$?; [ "$__stratus_rc" -eq 0 ] || exit "$__stratus_rc"\n'
        "  trap - EXIT\n"
        "fi\n"
        f"{command}\n"
    )

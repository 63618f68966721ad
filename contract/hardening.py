"""Keeping secrets of one process from the trial code beside it on the same machine (Linux; elsewhere
these do nothing).

Trials run on the agent's machine, as the agent's user (root in most containers). What keeps a trial
from reading the agent's token or a co-located trial's run token out of `/proc/<pid>/environ` or
`/proc/<pid>/mem`:

- `not_dumpable()`: the agent, each launcher and each trial's harness mark themselves non-dumpable, so
  a process of the same user can no longer open their `/proc/<pid>/{environ,mem,fd}` (Linux's ptrace
  access check) unless it holds CAP_SYS_PTRACE;
- `confine_trial()`: a trial started by an agent that runs as root loses CAP_SYS_PTRACE (from its
  bounding set and its ambient set: it cannot come back on exec). Linux also refuses a process access to
  the /proc files of one whose capabilities are not a subset of its own, so even a dumpable agent stays
  out of reach.

Running each trial as a user of its own would be the stronger isolation; it needs the interpreter and
the trial's files readable by that user, which a root-owned install under /root is not. With these two,
a trial as root reads neither the agent's environment nor that of another trial's harness.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_SYS_PTRACE = 19


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


PR_SET_PDEATHSIG = 1
_PRCTL = _prctl()  # resolved once, so a forked child calls it without loading anything


def not_dumpable() -> bool:
    """Make this process non-dumpable; True when it took."""
    return _PRCTL is not None and _PRCTL(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0


def end_with_parent(sig: int) -> bool:
    """Have the kernel send this process ``sig`` when its parent dies (PR_SET_PDEATHSIG; a fork's child
    does not inherit it); True when it took."""
    return _PRCTL is not None and _PRCTL(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0


def confine_trial() -> None:
    """In a trial's process between fork and exec (`preexec_fn`): drop CAP_SYS_PTRACE for good when the
    agent runs as root. Calls nothing but prctl, safe in a child forked from a threaded agent."""
    if _PRCTL is None or os.geteuid() != 0:
        return
    _PRCTL(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _PRCTL(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0)

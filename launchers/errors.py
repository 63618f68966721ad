"""Errors raised by the launchers before any worker runs (a worker's failure is an exit code, not an error).

LauncherError
├── LaunchConfigError   the environment or the command line cannot describe a launch
│   └── RendezvousError the nodes could not find each other (run ended, token refused, timed out)
├── MissingProgramError the program a launcher wraps (torchrun, horovodrun, deepspeed) is not installed
└── SyncError           the adaptdl launcher could not restore or store its folders through the API
"""

from __future__ import annotations


class LauncherError(Exception):
    """Base of the launchers' errors; `main`s print it as one line and exit non-zero."""

    exit_code = 2


class LaunchConfigError(LauncherError):
    pass


class RendezvousError(LaunchConfigError):
    pass


class MissingProgramError(LauncherError):
    # The shell's "command not found".
    exit_code = 127


class SyncError(LauncherError):
    exit_code = 1

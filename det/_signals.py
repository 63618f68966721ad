"""Ctrl-C, SIGTERM and SIGHUP in the CLI: every temporary file is removed, and the user is told what
was stopped and what it left behind.

Python turns Ctrl-C into `KeyboardInterrupt`, but SIGTERM and SIGHUP (a closed terminal) end a process
at once, past every `finally`: a `det experiment create` stopped while packing left its 50-95 MB
`/tmp/stratus-context-*.tar.zst` behind. `on_termination` (around every command, `det.cli.main`) turns
them into `Terminated`, which unwinds like Ctrl-C, so the code that removes temporary files runs. A
command names its long steps with `step`: an interrupt there becomes `StepInterruptedError`, one line
saying what was interrupted and what was left (`nothing was created`), with Ctrl-C's exit code 130 or
128+N for signal N.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from det.errors import StepInterruptedError

#: The signals that end the CLI through `Terminated` (one that is ignored, as under nohup, stays so).
SIGNALS = (signal.SIGTERM, signal.SIGHUP)
EXIT_INTERRUPTED = 130


class Terminated(BaseException):  # noqa: N818  (a signal, like KeyboardInterrupt, not an error)
    """SIGTERM or SIGHUP arrived; a BaseException, so that no `except Exception` takes it for an error."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@contextlib.contextmanager
def on_termination() -> Iterator[None]:
    """While inside: SIGTERM and SIGHUP raise `Terminated` in the main thread (elsewhere, nothing
    changes: only the main thread may set handlers). The previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise Terminated(signum)

    previous: dict[signal.Signals, Any] = {}
    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, terminate)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def step(what: str, left: str) -> Iterator[None]:
    """An interrupt inside becomes `StepInterruptedError`: "`what` was interrupted (Ctrl-C); `left`"."""
    try:
        yield
    except KeyboardInterrupt:
        raise StepInterruptedError(f"{what} (Ctrl-C); {left}", exit_code=EXIT_INTERRUPTED) from None
    except Terminated as e:
        raise StepInterruptedError(f"{what} ({e.name}); {left}", exit_code=e.exit_code) from None

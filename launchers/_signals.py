"""Signals a launcher passes on to what it started, and exit codes the shell's way."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from types import FrameType

#: What a launcher forwards: the agent's stop (SIGTERM), Ctrl-C, a closed terminal, and the two signals
#: schedulers such as Slurm use to warn of a coming stop.
FORWARDED: tuple[signal.Signals, ...] = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def exit_code(returncode: int) -> int:
    """A process's exit code as a shell reports it: killed by signal N gives 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"


@contextlib.contextmanager
def forwarding(
    send: Callable[[signal.Signals], None],
    signals: Collection[signal.Signals] = FORWARDED,
    *,
    swallowed: Collection[signal.Signals] = (),
) -> Iterator[None]:
    """Calls ``send(sig)`` for each of ``signals`` this process receives, instead of their usual action;
    ``swallowed`` signals are ignored (rather than ending the launcher and orphaning its children).

    Handlers can only be installed from the main thread; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        send(signal.Signals(signum))

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    previous.update({sig: signal.signal(sig, signal.SIG_IGN) for sig in swallowed if sig not in previous})
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_command(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    signals: Collection[signal.Signals] = FORWARDED,
    swallowed: Collection[signal.Signals] = (),
) -> int:
    """Run ``argv`` with this process's stdio, forward ``signals`` to it, return its exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    started: list[subprocess.Popen[bytes]] = []
    early: list[signal.Signals] = []

    def send(sig: signal.Signals) -> None:
        if not started:
            early.append(sig)
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)

    # Handlers first: a signal that arrives while the child starts is passed on, not lost.
    with forwarding(send, signals, swallowed=swallowed):
        proc = subprocess.Popen(list(argv), env=None if env is None else dict(env))
        started.append(proc)
        for sig in early:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
        return exit_code(proc.wait())

"""The local stack's main thread waits for its stop signal in a way that sees a signal the kernel hands to
another thread: a process with the stack's handler and wait (`infra.local.stack.StopSignal`), whose main
thread blocks SIGTERM so that the kernel must deliver it to another thread."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import signal, sys, threading, time
    from infra.local.stack import StopSignal

    stop = StopSignal()
    quiet = threading.Event()
    threading.Thread(target=quiet.wait, daemon=True).start()  # a thread that can take the signal
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # not the main thread: the other one
    print("waiting", flush=True)
    {wait}
    print("stopped", flush=True)
    """
)


def _run(wait: str) -> subprocess.Popen[str]:
    """The script with `wait` as its main thread's wait, SIGTERMed once it waits. (With the stack's old
    handler setting a `threading.Event` and an untimed `Event.wait()`, it never ends: checked by hand
    when this was written.)"""
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT.replace("{wait}", wait)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "waiting\n"
    process.send_signal(signal.SIGTERM)
    return process


def test_a_sigterm_taken_by_another_thread_stops_the_stacks_wait() -> None:
    process = _run("stop.wait()")

    out, _ = process.communicate(timeout=30)

    assert process.returncode == 0 and out == "stopped\n"

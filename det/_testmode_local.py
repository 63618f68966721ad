"""`det experiment create --local --test-mode`: the one-batch test run on this machine.

No control plane, nothing packed or uploaded. `run_local` takes the test config that
`det._test_config.make_test_config` made; the steps are ticked on a `det._checklist.Checklist`.

The context's files (``.detignore`` and ``-i`` applied, by `det._context.collect`) are copied into
a temporary folder (`copy_context`), beside two files:

* ``local-config.json``: ``{"hparams": {...}, "config": {...}, "length": 1}`` (the test values, nested
  like the groups; the test config; the batches to train), the harness's ``STRATUS_LOCAL_CONFIG``;
* ``events.jsonl``: the file the harness's local twins append JSON lines to, one per report
  (`stratus.contract.local_events`: ``type`` is read here, and ``message`` of ``invalid_hp``).

The trial is started by the harness, as a program (the CLI imports no harness module):
``python -m stratus.harness.exec.local_test`` (`LOCAL_TEST_PROGRAM`) builds the trial's environment and script as
the agent does, and becomes the trial in the context's copy. It runs with this interpreter and this
environment (the program drops the platform's ``STRATUS_*`` variables).

Its output streams to stdout as it comes, while the events file is watched. scheduling ✓ once the
process started; training ✓ on a ``training`` or ``searcher_completed`` event (or when the process
exits 0 after a validation), validation ✓ on ``validation``, checkpointing ✓ on ``checkpoint``. Passed
(exit 0, ``Local test passed``) when the process exits 0 with validation ✓ (no checkpoint is a
``Warning:`` line on stderr, as in the remote test); otherwise exit 1 with ``Local test failed at STEP: why`` (an ``invalid_hp`` event fails the test too:
the test values were refused; a ``startup-hook.sh`` that fails leaves a marker file saying so).

The process runs in its own process group: leftovers are killed when it exits, Ctrl-C is forwarded to
it (and a second Ctrl-C or a lingering run kills it), and SIGTERM/SIGHUP end the CLI through
`SystemExit` so that the run is stopped. The temporary folder is removed afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from det._checklist import WARNED_STEPS, Checklist
from det._render import format_bytes
from det._runtime import Runtime
from det._test_config import hparam_values
from det.errors import UsageError
from stratus.contract.local_events import EventsReader, LocalEventType

Json = dict[str, Any]

LOCAL_TEST_PROGRAM = "stratus.harness.exec.local_test"
"""The harness's program that becomes the trial (``python -m``)."""
_EVENT_STEPS: dict[str, str] = {
    LocalEventType.TRAINING: "training",
    LocalEventType.SEARCHER_COMPLETED: "training",
    LocalEventType.VALIDATION: "validation",
    LocalEventType.CHECKPOINT: "checkpointing",
}
_OUTPUT_WAIT = 0.2
"""Seconds the local run waits for output before it looks at the events file again."""
_EXIT_GRACE = 5.0
"""Seconds after the process exits that its output pipe may stay open (a process that left its group)."""
_KILL_GRACE = 10.0
"""Seconds between forwarding Ctrl-C to the local run and killing it."""


def run_local(args: argparse.Namespace, rt: Runtime, test_config: Json) -> int:
    if args.model_def is None:
        raise UsageError(
            "--local --test-mode runs the code of a context folder: pass the CONTEXT folder after CONFIG"
        )
    entrypoint = test_config.get("entrypoint")
    if not _valid_entrypoint(entrypoint):
        raise UsageError(
            "the config has no usable entrypoint; set `entrypoint:` to a command "
            "(e.g. python3 train.py) or a list of words"
        )
    hyperparameters = test_config.get("hyperparameters") or {}
    if not isinstance(hyperparameters, Mapping):
        raise UsageError("hyperparameters must be a mapping of names to hyperparameters; fix the config")
    hparams = hparam_values(hyperparameters)

    from det import _context  # imported late: it pulls in zstandard

    files = _context.collect(args.model_def, list(args.include))
    with _exit_on_termination(), tempfile.TemporaryDirectory(prefix="stratus-test-") as tmp:
        workdir = Path(tmp) / "context"
        copy_context(files, workdir)
        events = Path(tmp) / "events.jsonl"
        events.touch()
        marker = Path(tmp) / "startup-hook.failed"
        local_config = Path(tmp) / "local-config.json"
        local_config.write_text(json.dumps({"hparams": hparams, "config": test_config, "length": 1}))
        command = local_test_command(workdir, local_config, events, marker)
        size = sum(f.size for f in files)
        rt.note(
            f"Testing {args.model_def} locally: {len(files)} file{'' if len(files) == 1 else 's'} "
            f"({format_bytes(size)}) copied to {workdir}"
        )
        return _LocalRun(rt, command, Path(tmp), events, marker).run()


def _valid_entrypoint(entrypoint: object) -> bool:
    if isinstance(entrypoint, str):
        return bool(entrypoint.strip())
    return (
        isinstance(entrypoint, list)
        and bool(entrypoint)
        and all(isinstance(word, str) and word for word in entrypoint)
    )


def copy_context(files: Sequence[Any], dest: Path) -> None:
    """Copy what `det._context.collect` found into `dest` (symlinks stay links, inside the copy)."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        target = dest / f.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if f.link_target is not None:
            os.symlink(f.link_target, target)
        else:
            shutil.copyfile(f.source, target)
            os.chmod(target, 0o755 if f.executable else 0o644)


def local_test_command(workdir: Path, local_config: Path, events: Path, marker: Path) -> list[str]:
    """The argv of the harness's program that becomes the trial (see the module docstring)."""
    return [
        sys.executable,
        "-P",  # safe path: the user's folder is never imported from in place of the harness's modules
        "-m",
        LOCAL_TEST_PROGRAM,
        "--context",
        str(workdir),
        "--local-config",
        str(local_config),
        "--events",
        str(events),
        "--hook-failed-marker",
        str(marker),
    ]


_EOF = object()


class _LocalRun:
    def __init__(self, rt: Runtime, command: list[str], cwd: Path, events: Path, marker: Path) -> None:
        self._rt = rt
        self._command = command
        self._cwd = cwd
        self._events = EventsReader(events)
        self._marker = marker
        self._checks = Checklist(rt)
        self._lines: queue.Queue[object] = queue.Queue()
        self._invalid_hp: str | None = None

    def run(self) -> int:
        try:
            proc = subprocess.Popen(
                self._command,
                cwd=self._cwd,  # not the context: `python -m` puts its folder first on sys.path
                env=dict(self._rt.environ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: leftovers can be cleaned up, Ctrl-C forwarded
                close_fds=True,
            )
        except OSError as e:
            self._rt.say(f"Local test failed at scheduling: the process could not be started ({e})")
            return 1
        try:
            returncode = self._follow(proc)
        except BaseException as e:  # Ctrl-C, SIGTERM (or a bug): never leave the run behind
            _stop(proc, signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM)
            raise
        finally:
            self._checks.status.clear()
        return self._report(returncode)

    def _follow(self, proc: subprocess.Popen[bytes]) -> int:
        assert proc.stdout is not None
        reader = threading.Thread(target=self._read_output, args=(proc.stdout,), daemon=True)
        reader.start()
        self._checks.tick(["scheduling"])
        exited_at: float | None = None
        while True:
            lines, eof = self._next_lines()
            if lines:
                self._checks.print_lines(lines)
            self._tick(self._events.read())
            self._checks.show()
            if eof:
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
                _kill_group(proc)  # background leftovers would hold the output open
            elif exited_at is not None and time.monotonic() - exited_at > _EXIT_GRACE:
                self._checks.print_lines(
                    ["[det] the output is held open by a process outside the run's group; not waiting for it"]
                )
                break
        returncode = proc.wait()
        _kill_group(proc)
        self._tick(self._events.read(final=True))
        return returncode

    def _next_lines(self) -> tuple[list[str], bool]:
        """The lines printed since the last call (waiting a moment for the first); True at the end."""
        lines: list[str] = []
        try:
            item = self._lines.get(timeout=_OUTPUT_WAIT)
        except queue.Empty:
            return lines, False
        while True:
            if item is _EOF:
                return lines, True
            lines.append(str(item))
            try:
                item = self._lines.get_nowait()
            except queue.Empty:
                return lines, False

    def _read_output(self, stream: IO[bytes]) -> None:
        partial = b""
        try:
            while data := os.read(stream.fileno(), 65536):
                *complete, partial = (partial + data).split(b"\n")
                for raw in complete:
                    self._lines.put(raw.decode("utf-8", "replace").rstrip("\r"))
        except OSError:
            pass
        finally:
            if partial:
                self._lines.put(partial.decode("utf-8", "replace"))
            self._lines.put(_EOF)
            stream.close()

    def _tick(self, events: list[Json]) -> None:
        self._checks.tick(_EVENT_STEPS[t] for e in events if (t := str(e.get("type"))) in _EVENT_STEPS)
        for event in events:
            if event.get("type") == LocalEventType.INVALID_HP and self._invalid_hp is None:
                self._invalid_hp = str(event.get("message") or "no message")

    def _report(self, returncode: int) -> int:
        checks = self._checks
        if returncode == 0 and checks.done["validation"]:
            checks.tick(["training"])  # a validation after the batch: it trained, metric or not
        checks.finish()
        missing = checks.missing()
        if returncode == 0 and not missing and self._invalid_hp is None:
            for step in checks.skipped():
                self._rt.note(f"Warning: the script {WARNED_STEPS[step]}")
            self._rt.say("Local test passed")
            return 0
        if self._invalid_hp is not None:
            why = f"the script refused the test hyperparameters (InvalidHP: {self._invalid_hp})"
        elif self._marker.exists():
            why = _read_text(self._marker) or f"the startup hook failed ({_exit_text(returncode)})"
        elif returncode != 0:
            why = f"the entrypoint {_exit_text(returncode)}"
        else:
            why = {
                "training": "the script reported no training metric",
                "validation": "the script reported no validation metric",
            }[missing[0]]
        where = f" at {missing[0]}" if missing else ""
        self._rt.say(f"Local test failed{where}: {why}")
        return 1


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
        return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Pass `sig` on to the run's group (it has its own), kill it if it lingers or on a second Ctrl-C."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
        proc.wait(timeout=_KILL_GRACE)
    _kill_group(proc)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_KILL_GRACE)


@contextlib.contextmanager
def _exit_on_termination() -> Iterator[None]:
    """SIGTERM and SIGHUP end the CLI through `SystemExit` (exit 128+N) while a local run lives, so that
    the run (in its own session, out of the terminal's reach) is stopped and the temporary folder removed.
    Signals that are ignored (nohup) stay ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, leave)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

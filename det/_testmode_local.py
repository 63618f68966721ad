"""`det experiment create --local --test-mode`: the one-batch test run on this machine.

No control plane, nothing packed or uploaded. `run_local` takes the test config that
`det._testmode.make_test_config` made; the steps are ticked on `det._testmode.Checklist`.

The context's files (``.detignore`` and ``-i`` applied, by `det._context.collect`) are copied into
a temporary folder (`copy_context`), and the entrypoint runs there as the agent runs it
(`build_script`): ``startup-hook.sh`` sourced first when present, then a string entrypoint through
``sh -c``, a list as argv, and the legacy ``model_def:Trial`` form as
``python3 -m harness.exec.run_trial model_def:Trial`` (`entrypoint_command`). The process's environment
(`local_environment`) is this one without the platform's ``STRATUS_*`` variables (so the harness gives
its local twins), ``PATH`` led by the folder of this CLI's interpreter (so ``python3`` is this
interpreter), the config's ``environment_variables``, the determined/nni stand-ins on ``PYTHONPATH``
for the packages this interpreter cannot import (`compat_pythonpath`), and

* ``STRATUS_LOCAL_CONFIG``: the path of a JSON file ``{"hparams": {...}, "config": {...},
  "length": 1}`` (the test values, nested like the groups; the test config; the batches to train);
* ``STRATUS_LOCAL_EVENTS``: the path of a file the harness's local twins append JSON lines to, one
  per report: ``{"type": "training" | "validation" | "checkpoint" | "searcher_completed" |
  "invalid_hp", ...}`` (``type`` is read here, and ``message`` of ``invalid_hp``).

Its output streams to stdout as it comes, while the events file is watched. scheduling ✓ once the
process started; training ✓ on a ``training`` or ``searcher_completed`` event (or when the process
exits 0 after a validation), validation ✓ on ``validation``, checkpointing ✓ on ``checkpoint``. Passed
(exit 0, ``Local test passed``) when the process exits 0 with validation and checkpointing ✓;
otherwise exit 1 with ``Local test failed at STEP: why`` (an ``invalid_hp`` event fails the test too:
the test values were refused).

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
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeGuard

from contract.entrypoint import legacy_trial_argv
from det._render import format_bytes
from det._runtime import Runtime
from det.errors import UsageError
from harness._hook import HOOK, hook_script

Json = dict[str, Any]

LOCAL_CONFIG_ENV = "STRATUS_LOCAL_CONFIG"
LOCAL_EVENTS_ENV = "STRATUS_LOCAL_EVENTS"

_EVENT_STEPS = {
    "training": "training",
    "searcher_completed": "training",
    "validation": "validation",
    "checkpoint": "checkpointing",
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
    from det._testmode import hparam_values  # late: det._testmode imports this module

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
        env = local_environment(rt.environ, test_config, local_config, events)
        script = build_script(entrypoint, marker)
        size = sum(f.size for f in files)
        rt.note(
            f"Testing {args.model_def} locally: {len(files)} file{'' if len(files) == 1 else 's'} "
            f"({format_bytes(size)}) copied to {workdir}"
        )
        return _LocalRun(rt, workdir, env, script, events, marker).run()


def _valid_entrypoint(entrypoint: object) -> TypeGuard[str | list[str]]:
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


def local_environment(
    base: Mapping[str, str], config: Mapping[str, Any], local_config: Path, events: Path
) -> dict[str, str]:
    """The process's environment: ours without STRATUS_* (off the platform), PATH led by our interpreter."""
    env = {k: v for k, v in base.items() if not k.startswith("STRATUS_")}
    bin_dir = os.path.dirname(sys.executable) if sys.executable else ""
    path = [p for p in env.get("PATH", os.defpath).split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *path] if bin_dir else path)
    if sys.prefix != sys.base_prefix:
        env["VIRTUAL_ENV"] = sys.prefix
    env["PYTHONUNBUFFERED"] = "1"
    env.update(config_variables(config))
    env[LOCAL_CONFIG_ENV] = str(local_config)
    env[LOCAL_EVENTS_ENV] = str(events)
    compat = compat_pythonpath()
    if compat:
        env["PYTHONPATH"] = os.pathsep.join([p for p in (env.get("PYTHONPATH"), *compat) if p])
    return env


_COMPAT_PROBE = (
    "import importlib.util as u\n"
    "try:\n    import harness.compat as c\nexcept ImportError:\n    raise SystemExit(0)\n"
    "print('\\n'.join(str(c.compat_path(p)) for p in c.PACKAGES if u.find_spec(p) is None))\n"
)


def compat_pythonpath() -> list[str]:
    """The determined/nni stand-ins to put on PYTHONPATH, as the agent does on the platform: only for the
    packages this interpreter cannot import. Asked of a child interpreter (the CLI never imports harness)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _COMPAT_PROBE], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


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


def entrypoint_command(entrypoint: str | Sequence[str]) -> str:
    """The shell line that execs `entrypoint` the way the agent does."""
    if isinstance(entrypoint, str):
        legacy = legacy_trial_argv(entrypoint)  # one process: local test mode runs no launcher
        if legacy is not None:
            return f"exec {shlex.join(legacy)}"
        return f"exec sh -c {shlex.quote(entrypoint)}"
    return f"exec {shlex.join(entrypoint)}"


def build_script(entrypoint: str | Sequence[str], hook_failed_marker: Path) -> str:
    """Source ``startup-hook.sh`` when present (its exports reach the entrypoint), then exec the entrypoint:
    the agent's script (`harness._hook.hook_script`). A hook that fails or ends the shell leaves
    `hook_failed_marker` behind, as on the agent."""
    return hook_script(entrypoint_command(entrypoint), hook_failed_marker)


class _EventsFile:
    """The JSON lines appended to the events file, read as they come."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = b""

    def read(self, *, final: bool = False) -> list[Json]:
        try:
            with self._path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = b"" if final else lines.pop()
        events: list[Json] = []
        for raw in lines:
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # a torn or foreign line: not an event
            if isinstance(event, dict):
                events.append(event)
        return events


_EOF = object()


class _LocalRun:
    def __init__(
        self, rt: Runtime, workdir: Path, env: dict[str, str], script: str, events: Path, marker: Path
    ) -> None:
        from det._testmode import Checklist  # late: det._testmode imports this module

        self._rt = rt
        self._workdir = workdir
        self._env = env
        self._script = script
        self._events = _EventsFile(events)
        self._marker = marker
        self._checks = Checklist(rt)
        self._lines: queue.Queue[object] = queue.Queue()
        self._invalid_hp: str | None = None

    def run(self) -> int:
        try:
            proc = subprocess.Popen(
                [shutil.which("bash", path=self._env.get("PATH")) or "/bin/sh", "-c", self._script],
                cwd=self._workdir,
                env=self._env,
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
            if event.get("type") == "invalid_hp" and self._invalid_hp is None:
                self._invalid_hp = str(event.get("message") or "no message")

    def _report(self, returncode: int) -> int:
        checks = self._checks
        if returncode == 0 and checks.done["validation"]:
            checks.tick(["training"])  # a validation after the batch: it trained, metric or not
        checks.finish()
        missing = checks.missing()
        if returncode == 0 and not missing and self._invalid_hp is None:
            self._rt.say("Local test passed")
            return 0
        if self._invalid_hp is not None:
            why = f"the script refused the test hyperparameters (InvalidHP: {self._invalid_hp})"
        elif self._marker.exists():
            why = f"{HOOK} failed (exit code {returncode}); the entrypoint was not started"
        elif returncode != 0:
            why = f"the entrypoint {_exit_text(returncode)}"
        else:
            why = {
                "training": "the script reported no training metric",
                "validation": "the script reported no validation metric",
                "checkpointing": "the script saved no checkpoint",
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

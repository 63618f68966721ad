"""The agent's side of warm start (`stratus.harness.agent._warm`): start the warm interpreter, ask it for a run's
process, and wait for that process as for a `subprocess.Popen`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from stratus.harness.agent._settings import SECRET_ENV_NAMES
from stratus.harness.agent._warm import cold_reason, plain_python
from stratus.harness.trial_process import trial_environment

log = logging.getLogger("stratus.harness.agent")

#: How long the warm interpreter may take to import what it preloads.
READY_TIMEOUT_S = 120.0
#: How long a fork request may take to be answered.
ANSWER_TIMEOUT_S = 30.0


class WarmProcess:
    """A run's process forked by the warm interpreter: `pid`, `stdout`, `wait()` and `poll()` as a
    `subprocess.Popen`'s. Its exit status comes from the warm interpreter, its parent."""

    def __init__(self, pid: int, lines: _Lines, stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None
        self._lines = lines
        self._lock = threading.Lock()

    def wait(self) -> int:
        with self._lock:
            if self.returncode is None:
                self.returncode = self._read_exit()
            return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None and self._lines.ready():
            return self.wait()
        return self.returncode

    def _read_exit(self) -> int:
        try:
            return int(self._lines.read(None)["exit"])
        except (OSError, ValueError, KeyError, TypeError):
            return self._wait_orphan()
        finally:
            self._lines.close()

    def _wait_orphan(self) -> int:
        """The warm interpreter died first: wait for the process to be gone; its status is lost."""
        log.warning("warm interpreter gone before run process %d ended: its exit status is lost", self.pid)
        try:
            fd = os.pidfd_open(self.pid)
        except OSError:
            return 1
        try:
            select.select([fd], [], [])
        finally:
            os.close(fd)
        return 1


class WarmServer:
    """One warm interpreter for this agent (`stratus.harness.agent._warm`), listening on a socket in a private
    temporary folder."""

    def __init__(self, base: Mapping[str, str] | None = None) -> None:
        # A short path: a Unix socket's name is limited to 107 bytes, a work folder's is not.
        self._folder = Path(tempfile.mkdtemp(prefix="stratus-warm-"))
        self.path = self._folder / "sock"
        #: The environment it started with: a trial's, less the trial's own variables.
        self.env = trial_environment(
            os.environ if base is None else base, {}, drop=SECRET_ENV_NAMES.__contains__
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()

    def start_in_background(self) -> None:
        """Start it without holding the agent up: runs launched meanwhile start cold. The thread that
        starts it stays with it until it ends: the kernel's parent-death signal (`end_with_parent`) follows
        the thread that forked it, not the agent's process."""
        threading.Thread(target=self._start_and_stay, name="warm-start", daemon=True).start()

    def _start_and_stay(self) -> None:
        if self.start() and self._proc is not None:
            code = self._proc.wait()
            if self._ready.is_set():
                log.warning("warm start off: the warm interpreter exited with code %s", code)
            self._ready.clear()

    def start(self) -> bool:
        """Start it and wait until it has imported what it preloads; False (logged) when it cannot."""
        self.path.unlink(missing_ok=True)
        try:
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-P",  # safe path; each forked trial sets its own sys.path[0], as Python would
                    "-c",
                    "from stratus.harness.agent._warm import main; main()",
                    str(self.path),
                ],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as error:
            log.warning("warm start off: cannot start the warm interpreter: %s", error)
            return False
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], READY_TIMEOUT_S)
        line = self._proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            log.warning("warm start off: the warm interpreter did not start (%r)", line[:200])
            self.stop()
            return False
        log.info("warm start on: warm interpreter %d at %s", self._proc.pid, self.path)
        self._ready.set()
        return True

    def spawn(self, argv: Sequence[str] | str, cwd: Path, env: Mapping[str, str]) -> WarmProcess | str:
        """The run's process, forked warm; or why it starts cold (a sentence for the run's log)."""
        if isinstance(argv, str):
            return "the entrypoint is a shell line"
        reason = cold_reason(argv, cwd, env, self.env, sys.executable)
        if reason is not None:
            return reason
        if not self._ready.is_set():
            return "the warm interpreter is not ready yet"
        if self._proc is None or self._proc.poll() is not None:
            return "the warm interpreter is not running"
        parsed = plain_python(argv, sys.executable)
        assert parsed is not None
        module, script, job_argv = parsed
        request = {"module": module, "script": script, "argv": job_argv, "cwd": str(cwd), "env": dict(env)}
        read_end, write_end = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lines = _Lines(conn)
        try:
            conn.connect(str(self.path))
            socket.send_fds(conn, [json.dumps(request).encode()], [write_end])
            os.close(write_end)
            write_end = -1
            answer = lines.read(ANSWER_TIMEOUT_S)
        except (OSError, ValueError) as error:
            lines.close()
            os.close(read_end)
            if write_end >= 0:
                os.close(write_end)
            return f"the warm interpreter did not answer ({type(error).__name__}: {error})"
        if "pid" not in answer:
            lines.close()
            os.close(read_end)
            return str(answer.get("cold") or answer.get("error") or "the warm interpreter refused")
        return WarmProcess(int(answer["pid"]), lines, os.fdopen(read_end, "rb", buffering=0))

    def stop(self) -> None:
        self._ready.clear()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        shutil.rmtree(self._folder, ignore_errors=True)


class _Lines:
    """JSON lines from the warm interpreter on one connection (an answer may arrive with the next)."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._buffer = b""

    def ready(self) -> bool:
        if b"\n" in self._buffer:
            return True
        readable, _, _ = select.select([self._conn], [], [], 0)
        return bool(readable)

    def read(self, timeout: float | None) -> dict[str, Any]:
        self._conn.settimeout(timeout)
        while b"\n" not in self._buffer:
            chunk = self._conn.recv(4096)
            if not chunk:
                raise ValueError("the connection closed")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise ValueError("not an object")
        return answer

    def close(self) -> None:
        self._conn.close()

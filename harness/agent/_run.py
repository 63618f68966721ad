"""One run of a trial on this agent.

fetch the context → source ``startup-hook.sh`` and exec the entrypoint in a new process group → ship its
output → on exit: kill the group's leftovers, flush the logs, then report the exit (in that order).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from stratus.contract import env as trial_env
from stratus.contract.env import AGENT_SOCKET
from stratus.contract.errors import HttpCallError
from stratus.contract.hardening import confine_trial
from stratus.contract.http import RetryPolicy, redact
from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._api import AgentApi, call_with_retry
from stratus.harness.agent._logs import LineSplitter, LogShipper
from stratus.harness.agent._settings import Settings
from stratus.harness.agent._spawn import (
    LAUNCHER_REPORT,
    PREEMPT_MARKER,
    build_environment,
    exit_status,
    first_failed_rank,
    free_port,
    record_process,
)
from stratus.harness.agent._tokens import TokenBroker
from stratus.harness.agent._warm_client import WarmProcess, WarmServer
from stratus.harness.errors import ApiCallError, UnsafeArchiveError
from stratus.harness.trial_process import HOOK, build_script

log = logging.getLogger("stratus.harness.agent")

REASON_AGENT_STOPPED = "agent stopped"
REASON_HOOK_FAILED = f"{HOOK} failed"
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_HOOK_FAILED_MARKER = "startup-hook.failed"


class ContextError(Exception):
    """The context could not be downloaded or extracted."""


class _Cancelled(Exception):
    """A kill arrived before the process was started."""


def run_dir_name(run_id: str) -> str:
    if _SAFE_NAME.fullmatch(run_id) and not run_id.startswith("."):
        return run_id
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:12]
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', run_id).lstrip('.')[:64]}-{digest}"


def _failure(error: Exception, url: str) -> str:
    """A failed context download in a line, the presigned query left out."""
    status = error.status if isinstance(error, ApiCallError | HttpCallError) else 0
    return f"HTTP {status} from GET {redact(url)}" if status else str(error)


class Run:
    """A run's life on this agent, driven by its own thread; ``kill()`` may come from any thread."""

    def __init__(
        self,
        spec: LaunchSpec,
        settings: Settings,
        api: AgentApi,
        *,
        give_up: threading.Event,
        gpus: tuple[str, ...] | None = None,
        on_done: Callable[[Run], None] | None = None,
        broker: TokenBroker | None = None,
        warm: WarmServer | None = None,
        requeue: threading.Event | None = None,
    ) -> None:
        """``requeue``: once set (its agent drains), the run's exit is reported with ``requeue``, unless
        the control plane killed it."""
        self.spec = spec
        self.gpus = gpus
        #: Hands the run token to the run's own processes only (`stratus.contract.run_token`); without one, the
        #: token is in the run's environment.
        self._broker = broker
        self._warm = warm
        self._settings = settings
        self._api = api
        self._give_up = give_up
        self._on_done = on_done
        self._requeue = requeue
        self.run_dir = settings.runs_dir / run_dir_name(spec.run_id)
        self.context_dir = self.run_dir / "context"
        self._marker = self.run_dir / _HOOK_FAILED_MARKER
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | WarmProcess | None = None
        self._kill_requested = threading.Event()
        self._reason_override: str | None = None
        self._killed_by_plane = False  # a kill without a reason: the control plane's, not the agent's
        self._exited = threading.Event()  # the process ended, or will never start
        self._done = threading.Event()  # the exit is reported (or given up on)
        self.exit_code: int | None = None
        self.reason: str | None = None
        #: The rank that failed first, from the launcher's report (a distributed run that failed).
        self.failed_rank: int | None = None
        self.exit_reported = False
        #: The run's frame secret (`stratus.contract.env.LOG_FRAME`): a rank is read only from a line a launcher
        #: of this run framed with it, never from what the trial prints.
        self._frame = secrets.token_hex(8)
        self._logs = LogShipper(
            lambda lines, seq: api.logs(str(spec.trial_id), spec.run_id, lines, seq),
            self.run_dir / "output.log",
            what=f"run {spec.run_id}",
            give_up=give_up,
            flush_interval=settings.log_flush_interval,
            batch_lines=settings.log_batch_lines,
            buffer_lines=settings.log_buffer_lines,
            flush_timeout=settings.log_flush_timeout,
            max_backoff=settings.retry_max_backoff,
            frame=self._frame,
        )
        self._thread = threading.Thread(target=self._main, name=f"run-{spec.run_id}", daemon=True)

    # ---- the outside's view -------------------------------------------------------------------------

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return None if proc is None else proc.pid

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def start(self) -> None:
        """Create the run folder and start the run's thread (raises OSError if the folder cannot be made)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._marker.unlink(missing_ok=True)
        self._logs.start()
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the exit is reported (or given up on); True if it was."""
        return self._done.wait(timeout)

    def request_preempt(self) -> None:
        """Pass on the control plane's stop request: the run's stop file (`STRATUS_PREEMPT_FILE`)."""
        with contextlib.suppress(OSError):
            (self.run_dir / PREEMPT_MARKER).touch()

    def kill(self, reason: str | None = None) -> None:
        """SIGTERM to the process group, SIGKILL after the kill grace. Idempotent; never blocks.

        ``reason`` replaces the reason the exit is reported with (the agent stopping).
        """
        with self._lock:
            if reason is not None and not self._exited.is_set():
                self._reason_override = reason
            self._killed_by_plane |= reason is None
            if self._kill_requested.is_set():
                return
            self._kill_requested.set()
            if self._proc is None or self._exited.is_set():
                return  # not started yet (the run's thread will not start it) or already gone
            self._signal_group(signal.SIGTERM)
        self._agent_line("kill requested: SIGTERM sent to the process group")
        threading.Thread(target=self._escalate, name=f"kill-{self.run_id}", daemon=True).start()

    # ---- the run's thread ---------------------------------------------------------------------------

    def _main(self) -> None:
        code, reason = 1, "agent error"
        try:
            code, reason = self._execute()
        except Exception as e:  # a bug in the agent: still report an exit rather than hang the trial
            log.exception("run %s failed inside the agent", self.run_id)
            reason = f"agent error: {type(e).__name__}: {e}"
            self._agent_line(reason)
        finally:
            self._exited.set()
            # The agent stops, or drains (its machine goes away): the trial goes back to the queue.
            requeued = self._reason_override == REASON_AGENT_STOPPED or (
                self._requeue is not None and self._requeue.is_set() and not self._killed_by_plane
            )
            reason = self._reason_override or reason
            self.exit_code, self.reason = code, reason
            log.info("run %s ended: exit code %d, %s", self.run_id, code, reason)
            self._logs.close()  # flush the logs FIRST, then report the exit
            self.exit_reported, _ = call_with_retry(
                lambda: self._api.exited(self.run_id, code, reason, self.failed_rank, requeue=requeued),
                what=f"reporting the exit of run {self.run_id}",
                give_up=self._give_up,
                max_backoff=self._settings.retry_max_backoff,
            )
            self._done.set()
            if self._on_done is not None:
                self._on_done(self)

    def _execute(self) -> tuple[int, str]:
        try:
            self._fetch_context()
        except ContextError as e:
            self._agent_line(f"context download failed: {e}")
            return 1, f"context download failed: {e}"
        except _Cancelled:
            return 128 + signal.SIGTERM, "killed before the process started"
        env = build_environment(
            self.spec, self._settings, self.gpus, run_dir=self.run_dir, collective_port=free_port()
        )
        env[trial_env.LOG_FRAME] = self._frame
        token = env.pop(trial_env.RUN_TOKEN, "") if self._broker is not None else ""
        if self._broker is not None:
            env[AGENT_SOCKET] = self._broker.address
        script = build_script(self.spec.entrypoint, self._marker, who="[agent] ")
        with self._lock:
            if self._kill_requested.is_set():
                return 128 + signal.SIGTERM, "killed before the process started"
            proc: subprocess.Popen[bytes] | WarmProcess | None = None
            if self._warm is not None:
                warm = self._warm.spawn(self.spec.entrypoint, self.context_dir, env)
                if isinstance(warm, str):
                    self._agent_line(f"cold start: {warm}")
                else:
                    proc = warm
                    self._agent_line(f"warm start: pid {warm.pid} forked from the agent's warm interpreter")
            try:
                proc = proc or subprocess.Popen(
                    [shutil.which("bash") or "/bin/bash", "-c", script],
                    cwd=self.context_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=confine_trial,  # noqa: PLW1509 - only prctl, resolved before the fork
                )
            except OSError as e:
                msg = f"could not start the process: {e}"
                self._agent_line(msg)
                return 1, msg
            self._proc = proc
            record_process(self.run_dir, proc.pid)
            if self._broker is not None:  # its session is its pid: start_new_session
                self._broker.register(env.get(trial_env.RUN_ID, self.run_id), token, proc.pid)
        assert proc.stdout is not None
        log.info("run %s started: pid %d, trial %s", self.run_id, proc.pid, self.spec.trial_id)
        reader = threading.Thread(
            target=self._read_output, args=(proc.stdout,), name=f"output-{self.run_id}", daemon=True
        )
        reader.start()
        started = threading.Thread(
            target=self._report_started, args=(proc.pid,), name=f"started-{self.run_id}", daemon=True
        )
        started.start()

        returncode = proc.wait()
        with self._lock:
            self._exited.set()
            self._signal_group(signal.SIGKILL)  # leftovers of the group (background children)
        if self._broker is not None:
            self._broker.forget(env.get(trial_env.RUN_ID, self.run_id))
        reader.join(timeout=5)
        if reader.is_alive():
            self._agent_line(
                "the output pipe is held open by a process outside the run's process group; "
                "later output is not captured"
            )
        started.join()
        code, reason = exit_status(returncode)
        if self._marker.exists():
            reason = REASON_HOOK_FAILED
        elif code != 0 and (failed := first_failed_rank(self.run_dir / LAUNCHER_REPORT)) is not None:
            self.failed_rank, reason = failed
        return code, reason

    def _fetch_context(self) -> None:
        if self.context_dir.exists():
            shutil.rmtree(self.context_dir)
        self.context_dir.mkdir(parents=True)
        url = self.spec.context_url
        if not url:
            return
        archive = self.run_dir / "context.tar.zst"
        try:
            self._download(url, archive)
            if self._kill_requested.is_set():
                raise _Cancelled
            try:
                from stratus.harness._archive import extract
            except ImportError as e:
                raise ContextError(f"the archive extractor is unavailable ({e})") from e
            try:
                extract(archive, self.context_dir)
            except UnsafeArchiveError as e:
                raise ContextError(f"unsafe archive: {e}") from e
            except Exception as e:
                raise ContextError(f"cannot extract the archive: {type(e).__name__}: {e}") from e
        finally:
            archive.unlink(missing_ok=True)

    def _download(self, url: str, dest: Path) -> None:
        """GET the context archive under the one retry policy; a kill ends the download and its waits."""
        attempts = max(1, self._settings.download_attempts)
        retry = RetryPolicy(
            first_delay_s=2.0, growth=2.0, max_delay_s=self._settings.retry_max_backoff, max_attempts=attempts
        )

        def cancel_on_kill(_: int) -> None:
            if self._kill_requested.is_set():
                raise _Cancelled

        def say(number: int, error: Exception, delay: float) -> None:
            self._agent_line(
                f"context download failed (attempt {number} of {attempts}, retrying): {_failure(error, url)}"
            )

        try:
            self._api.download(
                url, dest, retry=retry, wait=self._kill_requested.wait, on_chunk=cancel_on_kill, on_retry=say
            )
        except ApiCallError as e:
            if self._kill_requested.is_set():
                raise _Cancelled from e
            raise ContextError(_failure(e, url)) from e
        except OSError as e:
            raise ContextError(f"cannot write {dest.name}: {e}") from e

    def _read_output(self, stream: IO[bytes]) -> None:
        splitter = LineSplitter(self._settings.log_line_max_bytes)
        fd = stream.fileno()
        try:
            while data := os.read(fd, 65536):
                self._logs.add(splitter.feed(data))
        except OSError as e:
            log.warning("run %s: reading its output failed: %s", self.run_id, e)
        finally:
            self._logs.add(splitter.finish())
            stream.close()

    def _report_started(self, pid: int) -> None:
        call_with_retry(
            lambda: self._api.started(self.run_id, pid),
            what=f"reporting the start of run {self.run_id}",
            give_up=self._give_up,
            deadline=self._exited.is_set,
            max_backoff=self._settings.retry_max_backoff,
        )

    def _escalate(self) -> None:
        grace = self._settings.kill_grace
        if self._exited.wait(grace):
            return
        with self._lock:
            if self._exited.is_set():
                return
            # The line first: once killed, the run's exit (and its last logs) may be reported at once.
            self._agent_line(f"still running {grace:g} s after SIGTERM: SIGKILL sent to the process group")
            self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: signal.Signals) -> None:
        """Signal the process group (callers hold ``_lock``)."""
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def _agent_line(self, message: str) -> None:
        log.info("run %s: %s", self.run_id, message)
        self._logs.add([f"[agent] {message}"])

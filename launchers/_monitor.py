"""Start a trial's workers on this node and watch them until the last one is gone.

The contract every launcher shares:

- each worker runs with its own environment; its stdout and stderr are read by this process and written,
  line by line with a ``[rank=N] `` prefix, to this process's stdout and stderr (each on its own stream);
- the first worker to exit non-zero (a worker killed by signal N counts as failed, with 128+N) is named
  once, on stderr: ``[launcher] rank R exited with code C; stopping the other workers`` (``... with code C
  after SIGTERM was passed on; ...`` when the launcher had passed a terminating signal on); the others get
  SIGTERM, and SIGKILL when they are still there after the kill grace;
- SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent to the launcher go to every worker still running;
- the result is the first failing rank's exit code, or 0 when every worker exits 0; with a report path,
  ``{"exit_code", "failed_rank", "reason"}`` is also written there as JSON.

Waiting is event-driven: one selector over the workers' pipes and a wake-up pipe that a small waiter
thread per worker writes to when ``waitpid`` returns. The selector's only timeout is the kill grace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from stratus.contract.env import LOG_FRAME
from stratus.contract.hardening import not_dumpable
from stratus.launchers._info import DEFAULT_KILL_GRACE_S
from stratus.launchers._lines import RankLines
from stratus.launchers._signals import describe_exit, exit_code, forwarding

#: After the last worker is gone, how long its pipes may stay open (held by a process it left behind)
#: before the launcher stops reading them.
DRAIN_TIMEOUT_S = 2.0
_TERMINATING = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@dataclass(frozen=True)
class Worker:
    """One process to start: its rank (for the prefix and the messages), command and environment."""

    rank: int | str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None  # None: this process's environment


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    failed_rank: int | str | None = None
    reason: str = "every worker exited with code 0"
    #: Every worker's exit code by rank (`supervise` fills it in; not part of the report).
    codes: Mapping[int | str, int] = field(default_factory=dict, compare=False)
    #: The signal that ended a worker, by rank, for those a signal ended (its code is 128 + it): a worker
    #: that died of SIGTERM had no handler for it yet, unlike one that caught it and exited 143.
    signals: Mapping[int | str, int] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "failed_rank": self.failed_rank, "reason": self.reason}


def run_workers(
    workers: Sequence[Worker],
    *,
    kill_grace: float = DEFAULT_KILL_GRACE_S,
    report_path: str | os.PathLike[str] | None = None,
    announce: bool = True,
    share_stdin: bool = False,
    out_fd: int = 1,
    err_fd: int = 2,
) -> int:
    """Run ``workers`` under the contract above and return the exit code.

    ``announce=False`` leaves out the ``[launcher]`` line (``wrap_rank`` wraps a single command);
    ``share_stdin`` gives the workers this process's stdin instead of /dev/null.
    """
    outcome = supervise(
        workers,
        kill_grace=kill_grace,
        announce=announce,
        share_stdin=share_stdin,
        out_fd=out_fd,
        err_fd=err_fd,
    )
    if report_path is not None:
        write_report(Path(report_path), outcome, err_fd=err_fd)
    return outcome.exit_code


def supervise(
    workers: Sequence[Worker],
    *,
    kill_grace: float = DEFAULT_KILL_GRACE_S,
    announce: bool = True,
    share_stdin: bool = False,
    out_fd: int = 1,
    err_fd: int = 2,
    signal_map: Mapping[signal.Signals, signal.Signals] | None = None,
    on_signal: Callable[[signal.Signals], None] | None = None,
    stop_grace: float | None = None,
) -> Outcome:
    """`run_workers` without the report, answering the whole `Outcome` (every rank's code in ``codes``).

    A signal the launcher receives is first told to ``on_signal``, then sent to the workers as
    ``signal_map`` says (by default as is). With ``stop_grace``, a terminating signal sent on also arms
    SIGKILL for the workers still running that many seconds later (as a failing rank does)."""
    if not workers:
        raise ValueError("run_workers needs at least one worker")
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    monitor = _Monitor(workers, kill_grace=kill_grace, announce=announce, out_fd=out_fd, err_fd=err_fd)
    monitor.signal_map = dict(signal_map or {})
    monitor.on_signal = on_signal
    monitor.stop_grace = stop_grace
    with forwarding(monitor.forward):
        return monitor.run(stdin=None if share_stdin else subprocess.DEVNULL)


def write_report(path: Path, outcome: Outcome, *, err_fd: int = 2) -> None:
    """The outcome as JSON at ``path``, written whole (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(outcome.to_json()) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        _write_all(err_fd, f"[launcher] could not write the launcher report to {path}: {e}\n".encode())


@dataclass
class _Stream:
    lines: RankLines
    dest: int
    pipe: IO[bytes] = field(repr=False)


class _Monitor:
    def __init__(
        self, workers: Sequence[Worker], *, kill_grace: float, announce: bool, out_fd: int, err_fd: int
    ) -> None:
        self._workers = list(workers)
        self._grace = kill_grace
        self._announce = announce
        self._out, self._err = out_fd, err_fd
        self._live: dict[int, subprocess.Popen[bytes]] = {}
        self._termed: set[int] = set()
        self._exits: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._waiters: list[threading.Thread] = []
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._wake_lock = threading.Lock()
        self._closed = False
        self._streams = 0
        self._interrupt: signal.Signals | None = None
        self._outcome: Outcome | None = None
        self._codes: dict[int | str, int] = {}
        self._signals: dict[int | str, int] = {}
        self.signal_map: dict[signal.Signals, signal.Signals] = {}
        self.on_signal: Callable[[signal.Signals], None] | None = None
        self.stop_grace: float | None = None
        self._kill_at: float | None = None
        self._output_broken = False
        #: The agent's frame secret for this run (`stratus.contract.env.LOG_FRAME`): it marks our rank prefixes,
        #: and no worker gets it. This process is made non-dumpable so no worker can read it from
        #: /proc/<pid>/environ either (same user: that is the only other way).
        self._frame = os.environ.get(LOG_FRAME, "")
        if self._frame:
            not_dumpable()

    # ---- signals (the main thread, between two bytecodes of run()) -------------------------------------

    def forward(self, sig: signal.Signals) -> None:
        if self.on_signal is not None:
            self.on_signal(sig)
        sig = self.signal_map.get(sig, sig)
        if sig in _TERMINATING:
            self._interrupt = sig  # workers not started yet will not be
            if self.stop_grace is not None and self._live and self._kill_at is None:
                self._kill_at = time.monotonic() + self.stop_grace
                if not self._closed:  # same thread as run()'s close: no race
                    os.write(self._wake_w, b"\0")  # the loop's wait was computed without this deadline
        for i, proc in list(self._live.items()):
            self._send(i, proc, sig)

    # ---- the loop ---------------------------------------------------------------------------------------

    def run(self, *, stdin: int | None) -> Outcome:
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            self._start_all(stdin)
            self._loop()
        except BaseException:
            for i, proc in list(self._live.items()):  # never leave workers behind a broken launcher
                self._send(i, proc, signal.SIGKILL)
            raise
        finally:
            for t in self._waiters:
                t.join(timeout=1.0)
            with self._wake_lock:
                self._closed = True
                self._sel.close()
                os.close(self._wake_r)
                os.close(self._wake_w)
        return dataclasses.replace(
            self._outcome or Outcome(0), codes=dict(self._codes), signals=dict(self._signals)
        )

    def _start_all(self, stdin: int | None) -> None:
        for i, worker in enumerate(self._workers):
            if self._outcome is not None:
                break
            if self._interrupt is not None:  # stopped while starting: the rest never run
                sig = self._interrupt
                self._outcome = Outcome(
                    128 + sig, None, f"{sig.name} arrived before rank {worker.rank} started"
                )
                break
            env = dict(os.environ if worker.env is None else worker.env)
            env.pop(LOG_FRAME, None)  # a worker's output never carries our framing
            env.setdefault("PYTHONUNBUFFERED", "1")  # its output is read line by line, through a pipe
            try:
                proc = subprocess.Popen(
                    list(worker.argv), env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
            except OSError as e:
                self._line(f"rank {worker.rank} could not start {worker.argv[0]!r}: {e.strerror or e}")
                code = 127 if isinstance(e, FileNotFoundError) else 126  # the shell's codes
                self._fail(worker.rank, code, f"could not start: {e.strerror or e}")
                break
            self._live[i] = proc
            if self._interrupt is not None:
                self._send(i, proc, self._interrupt)
            assert proc.stdout is not None and proc.stderr is not None
            for pipe, dest in ((proc.stdout, self._out), (proc.stderr, self._err)):
                self._sel.register(
                    pipe, selectors.EVENT_READ, _Stream(RankLines(worker.rank, frame=self._frame), dest, pipe)
                )
                self._streams += 1
            waiter = threading.Thread(target=self._wait, args=(i, proc), name=f"wait-rank-{worker.rank}")
            waiter.daemon = True
            waiter.start()
            self._waiters.append(waiter)

    def _wait(self, i: int, proc: subprocess.Popen[bytes]) -> None:
        self._exits.put((i, proc.wait()))
        with self._wake_lock:
            if not self._closed:
                os.write(self._wake_w, b"\0")

    def _loop(self) -> None:
        drain_until: float | None = None
        while True:
            for key, _ in self._sel.select(self._timeout(drain_until)):
                if key.data is None:
                    os.read(self._wake_r, 4096)
                else:
                    self._read(key.data)
            self._reap()
            now = time.monotonic()
            if self._kill_at is not None and now >= self._kill_at:
                self._kill_remaining()
            if self._live:
                continue
            if not self._streams:
                return
            if drain_until is None:
                drain_until = now + DRAIN_TIMEOUT_S
            elif now >= drain_until:
                self._line("a worker's output is still held open by a process it left behind; not waiting")
                return

    def _timeout(self, drain_until: float | None) -> float | None:
        deadlines = [d for d in (self._kill_at, drain_until) if d is not None]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _read(self, stream: _Stream) -> None:
        data = os.read(stream.pipe.fileno(), 65536)
        if data:
            self._write(stream.dest, stream.lines.feed(data))
            return
        self._write(stream.dest, stream.lines.finish())
        self._sel.unregister(stream.pipe)
        stream.pipe.close()
        self._streams -= 1

    def _reap(self) -> None:
        while True:
            try:
                i, returncode = self._exits.get_nowait()
            except queue.Empty:
                return
            self._live.pop(i, None)
            code = exit_code(returncode)
            self._codes[self._workers[i].rank] = code
            if returncode < 0:
                self._signals[self._workers[i].rank] = -returncode
            if code != 0 and self._outcome is None:
                self._fail(self._workers[i].rank, code, describe_exit(returncode))

    def _fail(self, rank: int | str, code: int, reason: str) -> None:
        self._outcome = Outcome(code, rank, f"rank {rank} {reason}")
        if self._announce:
            # After a stop the launcher passed on (a pause, a preemption, a rescale), say so: the exit is
            # the answer to it, not a failure of the worker's own.
            after = f" after {self._interrupt.name} was passed on" if self._interrupt is not None else ""
            self._line(f"rank {rank} exited with code {code}{after}; stopping the other workers")
        for i, proc in list(self._live.items()):
            if i not in self._termed:
                self._send(i, proc, signal.SIGTERM)
        if self._live:
            self._kill_at = time.monotonic() + self._grace

    def _kill_remaining(self) -> None:
        self._kill_at = None
        for i, proc in list(self._live.items()):
            self._line(
                f"rank {self._workers[i].rank} still running {self._grace:g} s after SIGTERM; sending SIGKILL"
            )
            self._send(i, proc, signal.SIGKILL)

    def _send(self, i: int, proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        if sig == signal.SIGTERM:
            self._termed.add(i)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)

    # ---- output -----------------------------------------------------------------------------------------

    def _line(self, message: str) -> None:
        self._write(self._err, f"[launcher] {message}\n".encode())

    def _write(self, fd: int, data: bytes) -> None:
        if data and not self._output_broken:
            try:
                _write_all(fd, data)
            except OSError:
                self._output_broken = True  # nobody reads our output any more; keep supervising


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # an inherited non-blocking stdout that is full
            _wait_writable(fd)


def _wait_writable(fd: int) -> None:
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_WRITE)
        sel.select()

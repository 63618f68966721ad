"""Knowing when to stop (Determined's `core.PreemptContext`).

A trial is asked to stop (to checkpoint and exit, to be resumed later) in three ways: its agent creates
the file named by `STRATUS_PREEMPT_FILE` (the agent learns of a pause or a preemption at its own
heartbeat, every 0.5 s locally), the control plane answers `{"preempt": true}` to the trial's heartbeat,
or the process gets SIGTERM (the agent stopping it, a Batch job being terminated, a spot instance
reclaimed). Any one latches `should_preempt()` to true.

On the platform the chief runs a daemon thread that POSTs `/trials/{id}/heartbeat` every few seconds
and looks for the agent's file in between; that call is also the trial's heartbeat. Other ranks do not poll: with a `torch.distributed` process
group, `should_preempt()` is a collective that gives every rank the chief's answer (or any rank's
SIGTERM), so all ranks stop at the same step; without one, a rank only sees its own SIGTERM.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from stratus.contract import env as trial_env
from stratus.harness._api import ApiClient
from stratus.harness.core._distributed import DistributedContext
from stratus.harness.errors import HarnessError

log = logging.getLogger("stratus.harness.preempt")

HEARTBEAT_INTERVAL_S = 5.0
#: The heartbeat of a trial whose agent watches for stop requests (it has `STRATUS_PREEMPT_FILE`).
AGENT_WATCHED_HEARTBEAT_S = 60.0
#: How often the chief's thread looks for the agent's stop file between heartbeats (a stat call).
MARKER_POLL_S = 0.2
#: The least time between two looks for the stop file from `should_preempt()` itself: a loop that asks
#: after every batch pays a stat (3 µs on a small VM) every 20 ms at most, not every batch.
MARKER_CHECK_S = 0.02

_Handler = Any  # what signal.getsignal returns: a callable, SIG_DFL, SIG_IGN or None


class PreemptContext:
    """`should_preempt()` turns true, and stays true, once the trial has been asked to stop."""

    def __init__(self, distributed: DistributedContext, *, handle_sigterm: bool = True) -> None:
        """`handle_sigterm=False` leaves SIGTERM alone (it then ends the process as usual): for trial code
        that never asks `should_preempt()`, such as NNI scripts."""
        self._dist = distributed
        self._preempted = threading.Event()
        self._previous_handler: _Handler = None
        self._handler_installed = False
        if handle_sigterm:
            self._install_sigterm_handler()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True once the trial should checkpoint and exit. With several ranks and a process group, every
        rank must call it at the same step. (`auto_ack` is Determined's argument; nothing to acknowledge.)"""
        return self._dist.any_rank(self._preempted.is_set())

    def acknowledge_preemption_signal(self) -> None:
        """Determined's acknowledgement; nothing to do here."""

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, returning early (True) once preemption is latched on this rank."""
        return self._preempted.wait(seconds)

    def latch(self, why: str) -> None:
        """Ask the trial to stop (the searcher's `stop` uses it); stays true."""
        self._latch(why)

    def close(self) -> None:
        """Stop watching; restores the SIGTERM handler that was there before."""
        if not self._handler_installed:
            return
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._previous_handler)
            self._handler_installed = False

    def _latch(self, why: str) -> None:
        if not self._preempted.is_set():
            log.info("asked to stop: %s", why)
        self._preempted.set()

    def _install_sigterm_handler(self) -> None:
        # Python only lets the main thread install signal handlers; elsewhere SIGTERM keeps its handler.
        if threading.current_thread() is not threading.main_thread():
            log.debug("not in the main thread: SIGTERM will not latch preemption")
            return
        self._previous_handler = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        self._handler_installed = True

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._latch("SIGTERM received; checkpoint and exit at the next chance")
        previous = self._previous_handler
        # A handler someone else installed still runs. The default action (terminate) does not: the
        # point is to let the training loop checkpoint first. An ignored signal stays ignored.
        if callable(previous):
            previous(signum, frame)


class LocalPreemptContext(PreemptContext):
    """Off the platform: only SIGTERM asks the trial to stop."""


class PlatformPreemptContext(PreemptContext):
    """Adds the chief's heartbeat thread, which latches on `{"preempt": true}`."""

    def __init__(
        self,
        api: ApiClient,
        trial_id: int,
        distributed: DistributedContext,
        *,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        handle_sigterm: bool = True,
        before_stopping: Callable[[], None] | None = None,
    ) -> None:
        """`before_stopping` runs each time `should_preempt()` answers True (the report sender's flush:
        the control plane has every report before the trial checkpoints and exits)."""
        super().__init__(distributed, handle_sigterm=handle_sigterm)
        self._before_stopping = before_stopping
        self._api = api
        self._trial_id = trial_id
        self._interval = heartbeat_interval_s
        self._marker = os.environ.get(trial_env.PREEMPT_FILE) or None
        self._next_look = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if distributed.is_chief:
            self._thread = threading.Thread(target=self._watch, name="stratus-heartbeat", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self._interval + 35.0)  # at most one request in flight
        super().close()

    def should_preempt(self, auto_ack: bool = True) -> bool:
        now = time.monotonic()
        if now >= self._next_look:  # a stat: seen within 20 ms, not at the watcher's next look
            self._next_look = now + MARKER_CHECK_S
            self._check_marker()
        stop = super().should_preempt(auto_ack)
        if stop and self._before_stopping is not None:
            self._before_stopping()
        return stop

    def _check_marker(self) -> None:
        if self._marker is not None and not self._preempted.is_set() and os.path.exists(self._marker):
            self._latch("its agent asked this trial to checkpoint and exit")

    def _watch(self) -> None:
        next_beat = 0.0
        while not self._stop.is_set():
            self._check_marker()
            now = time.monotonic()
            if now < next_beat:
                self._stop.wait(min(MARKER_POLL_S, next_beat - now))
                continue
            next_beat = now + self._interval
            try:
                answer = self._api.post(f"/trials/{self._trial_id}/heartbeat", {})
            except HarnessError as e:
                log.warning("heartbeat failed: %s", e)
            except Exception:  # the thread must outlive surprises: it is the trial's heartbeat
                log.exception("heartbeat failed unexpectedly")
            else:
                if answer.get("preempt") is True:
                    self._latch("the control plane asked this trial to checkpoint and exit")

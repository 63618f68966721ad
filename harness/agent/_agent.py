"""The agent's loop: heartbeat, start what the answer launches, kill what it kills; stop cleanly."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections import OrderedDict, deque
from typing import Any

from stratus.contract.errors import InvalidLaunchSpecError
from stratus.contract.launch import LaunchSpec
from stratus.harness.agent._api import AgentApi, call_with_retry
from stratus.harness.agent._bell import BellListener
from stratus.harness.agent._iam import agent_api
from stratus.harness.agent._run import REASON_AGENT_STOPPED, Run
from stratus.harness.agent._settings import Settings
from stratus.harness.agent._tokens import TokenBroker
from stratus.harness.agent._warm_client import WarmServer
from stratus.harness.errors import ApiCallError

log = logging.getLogger("stratus.harness.agent")

_FINISHED_KEPT = 10_000
_HEARTBEAT_WARN_EVERY = 30.0


class Waker:
    """Ends the loop's wait early: from any thread, and from a signal handler (it only writes a byte)."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def wake(self) -> None:
        # OSError: the pipe is full (a wake-up is pending anyway) or closed
        with contextlib.suppress(OSError):
            os.write(self._w, b"\0")

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up; True if one came."""
        ready, _, _ = select.select([self._r], [], [], max(0.0, timeout))
        if not ready:
            return False
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


class Agent:
    def __init__(self, settings: Settings, api: AgentApi | None = None) -> None:
        self.settings = settings
        #: With `--aws` and no credential given, its credential comes from the instance's IAM identity.
        self.api = api or agent_api(settings)
        #: Set when the agent stops for good: every retry loop (log shipping, exit reports) gives up.
        self.give_up = threading.Event()
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._free_gpus: list[str] = list(settings.gpus)
        self._waker = Waker()
        self._stop_requested = False
        self._force = False
        #: Drain requests (deadline, reason) not yet seen by the loop: appended from any thread or a
        #: signal handler (a deque's append takes no lock the interrupted thread could hold).
        self._drain_requests: deque[tuple[float, str]] = deque()
        #: Set once the agent drains: heartbeats say so, and the runs' exits are reported `requeue`.
        self._draining = threading.Event()
        self._drain_deadline: float | None = None
        self._api_down_since: float | None = None
        self._api_warned_at = 0.0
        #: Hands each run's token to that run's processes only (`stratus.contract.run_token`).
        self.broker = TokenBroker()
        #: The control plane's heartbeat interval once it said one; the settings' until then.
        self.interval = settings.heartbeat_interval
        #: Rings when the control plane has something for this agent: it heartbeats at once.
        self.bell = BellListener(self._waker.wake)
        #: The warm interpreter runs are forked from where that is safe (`--warm-start`).
        self.warm = WarmServer() if settings.warm_start else None

    # ---- control ------------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop the agent (safe in a signal handler). A second request stops waiting for the runs' reports."""
        if self._stop_requested:
            self._force = True
        self._stop_requested = True
        self._waker.wake()

    def drain(self, deadline: float, reason: str) -> None:
        """The machine goes away at ``deadline`` (on `time.monotonic`): a spot interruption, a shutdown.

        From the loop's next turn (woken now): every heartbeat says ``draining`` (the control plane grants
        nothing more here), every run is asked to checkpoint and exit (`Run.request_preempt`) and its
        exit is reported with ``requeue`` (unless the control plane kills it), launches are refused
        (requeued); once no run is left, or at
        ``deadline - kill_grace``, the agent stops as on `request_stop` (what is left is killed). Idempotent,
        the earliest deadline wins; safe from any thread and in a signal handler (it only records the
        request and wakes the loop, which does the rest)."""
        self._drain_requests.append((deadline, reason))
        self._waker.wake()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def run(self) -> int:
        """Heartbeat until stopped, then kill every run, report their exits and return 0."""
        self.settings.runs_dir.mkdir(parents=True, exist_ok=True)
        if self.warm is not None:
            self.warm.start_in_background()
        try:
            while not self._stop_requested:
                self._start_draining()
                self.heartbeat_once()
                if self._stop_requested or self._drained() or self._only_run_done():
                    break
                if self._orphaned():
                    self.give_up.set()  # nobody to report to: end the runs without retrying reports
                    break
                self._waker.wait(self._until_next_beat())
        finally:
            self._shutdown()
        return 0

    def running_ids(self) -> list[str]:
        """The runs whose process is still running (a run reporting its exit is no longer one)."""
        with self._lock:
            return [run_id for run_id, run in self._runs.items() if run.exit_code is None]

    def get_run(self, run_id: str) -> Run | None:
        with self._lock:
            return self._runs.get(run_id)

    # ---- one beat -----------------------------------------------------------------------------------

    def heartbeat_once(self) -> bool:
        """One heartbeat and its answer; False if the API could not be reached or refused it."""
        try:
            answer = self.api.heartbeat(
                self.settings.pool, self.settings.slots, self.running_ids(), draining=self.draining
            )
        except ApiCallError as e:
            self._heartbeat_failed(e)
            return False
        if self._api_down_since is not None:
            log.info("the API answers again (after %.0f s)", time.monotonic() - self._api_down_since)
            self._api_down_since = None
        if answer.interval is not None and answer.interval != self.interval:
            log.info("heartbeat every %.1f s, as the control plane asks", answer.interval)
            self.interval = answer.interval
        self.bell.update(answer.bell)
        for raw in answer.launch:
            self.launch(raw)
        for run_id in answer.kill:
            self.kill(run_id)
        for run_id in answer.preempt:
            run = self.get_run(run_id)
            if run is not None:
                run.request_preempt()
        return True

    def _orphaned(self) -> bool:
        """The stack that started this agent is gone, or its API has not answered for `give_up_after`:
        nobody will record what the runs do, so they are ended and the agent stops."""
        parent = self.settings.parent_pid
        if parent is not None and os.getppid() != parent:
            log.error(
                "the stack that started this agent (pid %d) is gone: stopping and ending every run", parent
            )
            return True
        limit = self.settings.give_up_after
        down = self._api_down_since
        if limit is not None and down is not None and time.monotonic() - down >= limit:
            log.error("the API has not answered for %.0f s: stopping and ending every run", limit)
            return True
        return False

    # ---- draining -----------------------------------------------------------------------------------

    def _start_draining(self) -> None:
        """Take the drain requests made since the last turn (the loop's thread only)."""
        started = False
        while self._drain_requests:
            deadline, reason = self._drain_requests.popleft()
            if self._drain_deadline is not None and deadline >= self._drain_deadline:
                continue
            left = deadline - time.monotonic()
            if self._drain_deadline is None:
                started = True
                log.warning("draining (%s): the machine goes away in %.0f s", reason, left)
            else:
                log.warning("draining: the machine now goes away in %.0f s (%s)", left, reason)
            self._drain_deadline = deadline
        if not started:
            return
        self._draining.set()  # first: a run ending from now on is reported `requeue`
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            log.info("draining: run %s is asked to checkpoint and exit", run.run_id)
            run.request_preempt()

    def _drained(self) -> bool:
        """Draining, and every run has ended (its exit reported) or the time to stop them has come."""
        deadline = self._drain_deadline
        if deadline is None:
            return False
        with self._lock:
            left = len(self._runs)
        if not left:
            log.info("drained: every run has ended; stopping")
            return True
        if time.monotonic() >= deadline - self.settings.kill_grace:
            log.warning("drain time is up with %d runs still running: stopping them", left)
            return True
        return False

    def _only_run_done(self) -> bool:
        """A Batch job's agent whose one run has ended (its exit reported): the job is over."""
        only = self.settings.only_run
        if not only:
            return False
        with self._lock:
            done = only in self._finished and only not in self._runs
        if done:
            log.info("run %s has ended: this job's agent stops", only)
        return done

    def _until_next_beat(self) -> float:
        if self._drain_deadline is None:
            return self.interval
        stop_at = self._drain_deadline - self.settings.kill_grace
        return min(self.interval, max(0.0, stop_at - time.monotonic()))

    def _heartbeat_failed(self, err: ApiCallError) -> None:
        now = time.monotonic()
        hint = (
            " (check STRATUS_AGENT_TOKEN)"
            if err.status in (401, 403) and not self.api.renews_credential
            else ""
        )
        if self._api_down_since is None:
            self._api_down_since = now
            self._api_warned_at = now
            log.warning("heartbeat failed, will keep trying: %s%s", err, hint)
        elif now - self._api_warned_at >= _HEARTBEAT_WARN_EVERY:
            self._api_warned_at = now
            log.warning("heartbeat still failing after %.0f s: %s%s", now - self._api_down_since, err, hint)
        else:
            log.debug("heartbeat failed: %s", err)

    def launch(self, raw: Any) -> Run | None:
        """Start a run from a raw LaunchSpec; a run id already running or finished is ignored."""
        try:
            spec = LaunchSpec.from_json(raw)
        except InvalidLaunchSpecError as e:
            run_id = raw.get("run_id") if isinstance(raw, dict) else None
            log.error("refusing a launch spec (run %s): %s", run_id, e)
            if isinstance(run_id, str | int) and not isinstance(run_id, bool) and self._claim(str(run_id)):
                self._report_exit_async(str(run_id), 1, f"invalid launch spec: {e}")
            return None
        if self.settings.only_run and spec.run_id != self.settings.only_run:
            log.warning("run %s is not this job's (%s): not started", spec.run_id, self.settings.only_run)
            return None
        if self.draining:
            if self._claim(spec.run_id):  # granted before the control plane heard of the drain
                log.info("draining: run %s is not started; it goes back to the queue", spec.run_id)
                self._report_exit_async(spec.run_id, 0, "agent draining: not started", requeue=True)
            return None
        with self._lock:
            if spec.run_id in self._runs or spec.run_id in self._finished:
                log.debug("launch of run %s repeated: ignored", spec.run_id)
                return None
            run = Run(
                spec,
                self.settings,
                self.api,
                give_up=self.give_up,
                gpus=self._take_gpus(spec),
                on_done=self._run_done,
                broker=self.broker,
                warm=self.warm,
                requeue=self._draining,
            )
            self._runs[spec.run_id] = run
        log.info("launching run %s of trial %s (%d slots)", spec.run_id, spec.trial_id, spec.slots)
        try:
            run.start()
        except OSError as e:
            log.error("cannot start run %s: %s", spec.run_id, e)
            self._run_done(run)
            self._report_exit_async(spec.run_id, 1, f"agent error: cannot create the run folder: {e}")
            return None
        return run

    def kill(self, run_id: str) -> None:
        run = self.get_run(run_id)
        if run is None:
            log.debug("kill of run %s, which is not running here: ignored", run_id)
            return
        log.info("killing run %s", run_id)
        run.kill()

    # ---- bookkeeping --------------------------------------------------------------------------------

    def _claim(self, run_id: str) -> bool:
        """Mark a run id finished without running it; False if it is known already."""
        with self._lock:
            if run_id in self._runs or run_id in self._finished:
                return False
            self._remember_finished(run_id)
            return True

    def _remember_finished(self, run_id: str) -> None:
        self._finished[run_id] = None
        while len(self._finished) > _FINISHED_KEPT:
            self._finished.popitem(last=False)

    def _take_gpus(self, spec: LaunchSpec) -> tuple[str, ...] | None:
        """CUDA devices for a run (callers hold ``_lock``); None on a CPU agent."""
        if not self.settings.gpus:
            return None
        taken = tuple(self._free_gpus[: spec.slots])
        del self._free_gpus[: len(taken)]
        if len(taken) < spec.slots:
            log.warning(
                "run %s asks for %d slots but only %d GPUs are free", spec.run_id, spec.slots, len(taken)
            )
        return taken

    def _run_done(self, run: Run) -> None:
        with self._lock:
            if self._runs.get(run.run_id) is run:
                del self._runs[run.run_id]
            self._remember_finished(run.run_id)
            if run.gpus:
                order = {g: i for i, g in enumerate(self.settings.gpus)}
                self._free_gpus = sorted(
                    {*self._free_gpus, *run.gpus}, key=lambda g: order.get(g, len(order))
                )
        self._waker.wake()  # report the freed capacity now, not after the interval

    def _report_exit_async(self, run_id: str, code: int, reason: str, *, requeue: bool = False) -> None:
        def report() -> None:
            call_with_retry(
                lambda: self.api.exited(run_id, code, reason, requeue=requeue),
                what=f"reporting the exit of run {run_id}",
                give_up=self.give_up,
                max_backoff=self.settings.retry_max_backoff,
            )

        threading.Thread(target=report, name=f"exit-{run_id}", daemon=True).start()

    def _shutdown(self) -> None:
        try:  # the last beat: nothing more is granted here; what it holds unstarted is requeued now
            self.api.heartbeat(
                self.settings.pool, 0, self.running_ids(), stopping=True, draining=self.draining
            )
        except ApiCallError as e:
            log.warning("could not tell the API that this agent stops (%s); its runs are requeued", e)
        with self._lock:
            runs = list(self._runs.values())
        if runs:
            log.info("stopping: killing %d runs", len(runs))
        for run in runs:
            run.kill(reason=REASON_AGENT_STOPPED)
        deadline = time.monotonic() + self.settings.kill_grace + self.settings.shutdown_timeout
        # Wait on the waker (each run's end wakes it), so a second signal can cut the wait short.
        while (pending := [r for r in runs if not r.done]) and not self._force:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._waker.wait(left)
        if pending:
            log.warning("stopping without the exit reports of runs %s", ", ".join(r.run_id for r in pending))
        self.give_up.set()
        for run in pending:
            run.wait(5)
        self.bell.close()
        self.api.close()
        self.broker.close()
        if self.warm is not None:
            self.warm.stop()
        self._waker.close()
        log.info("agent stopped")

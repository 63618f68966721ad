"""A discrete-event simulation of a cluster running one experiment's searcher.

The simulator plays the part of `chalicelib.services.searching` and of the trials, on a simulated
clock, with a fixed number of workers (one trial each). It drives a searcher only through its pure
interface (`initial_operations`, `on_event`) and mirrors what the service does with each operation:

- `CreateTrial`: a trial is created with the next id, `TrialCreated` is fed back at once (as the service
  does before it carries out the next operation), and the trial queues for a worker;
- a running trial trains at one `max_length` per unit of simulated time, and reports
  `ValidationReported(length, metric)` when it reaches its target (and, with `report_lengths`, at each of
  those lengths on the way: stop-once ASHA decides at its rung lengths while the trial trains on);
- after a report at its target, the searcher's answer decides: `ContinueTrial` trains on to the new
  target, `PauseTrial` frees the worker (the trial keeps its length and no event is sent, as in the
  service), `StopTrial` or no answer ends it (`TrialExited`, delivered after the answer's operations);
- `ContinueTrial` on a paused trial queues it again; it resumes from the length it had reached;
- a searcher that observes pauses (`PauseObserver`: PBT) is told `TrialPaused` once a trial it paused
  has stopped training (at once here: the checkpoint is taken as the worker is freed); the others never
  see that event, as in the service;
- a `CreateTrial` with `warm_start_trial_id` starts from that trial's weights: it counts its own length
  from 0 (as Determined's warm start does, and as the searcher sees it), but its *effective* training
  length, the fidelity its metric is taken at, continues from the parent's effective length when it was
  created: `z = min(parent's effective length + own length, max_length) / max_length`. That is a
  simplification of weights carried across a change of hyperparameters: the new hyperparameters are
  scored as if they had been trained for the whole lineage's length (training beyond `max_length` stays
  at `z = 1`);
- `PauseTrial`/`StopTrial` on a trial that is training act at once (the trial is preempted where it is;
  the length trained so far counts as compute); `StopTrial` on a paused trial closes it with
  `TrialExited`, as the service's `_close_paused` does;
- `Shutdown` ends the run, and so does the compute budget (total length trained, in `max_length` units),
  whichever comes first. A run whose searcher neither shuts down nor has any trial left to run is
  recorded as stalled.

Metrics come from a multi-fidelity function at `z = length / max_length`, plus Gaussian observation
noise drawn from (seed, trial, length). Searchers see only the metric; the simulator keeps the
incumbent (the best *reported* metric among reports at an effective length of `max_length`) and records its noiseless
full-fidelity regret each time the incumbent changes, with the compute and simulated time at that
moment.
"""

from __future__ import annotations

import heapq
import json
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from bench.sim.functions import Function
from chalicelib.domain import searchers

QUEUED, STARTING, TRAINING, PAUSED, EXITED = "queued", "starting", "training", "paused", "exited"


@dataclass
class SimTrial:
    trial_id: int
    request_id: str
    x: tuple[float, ...]
    target: int | None
    state: str = QUEUED
    length: float = 0.0  # trained so far (exact at reports)
    since: float = 0.0  # when the current training segment began
    since_length: float = 0.0
    token: int = 0  # invalidates scheduled events of an earlier segment
    runs: int = 0  # runs started (a resume is a new run)
    worker: int | None = None
    next_at: int = 0  # the length of the report scheduled for the current segment
    inherited: float = 0.0  # effective length of the warm-start parent's lineage when it was created


@dataclass
class Point:
    compute: float  # total length trained so far, in max_length units
    time: float  # simulated time, in units of one max_length of training
    regret: float  # noiseless full-fidelity regret of the incumbent


@dataclass
class RunResult:
    searcher: str
    function: str
    seed: int
    budget: float
    end: str  # "budget", "shutdown" or "stalled"
    compute: float
    time: float
    trials: int
    full_length_reports: int
    reports: int
    runs_started: int
    searcher_calls: int = 0
    searcher_seconds: float = 0.0  # host time spent in initial_operations/on_event
    searcher_max_call: float = 0.0
    snapshot_bytes: int = 0  # JSON size of the searcher's snapshot at the end
    trajectory: list[Point] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def final_regret(self) -> float:
        return self.trajectory[-1].regret if self.trajectory else float("inf")

    def first_reaching(self, target: float) -> Point | None:
        return next((p for p in self.trajectory if p.regret <= target), None)

    def to_json(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in self.__dict__.items() if k != "trajectory"},
            "trajectory": [[p.compute, p.time, p.regret] for p in self.trajectory],
        }


class Simulator:
    def __init__(
        self,
        function: Function,
        settings: dict[str, Any],
        *,
        max_length: int,
        seed: int,
        workers: int,
        budget: float,
        report_lengths: tuple[int, ...] = (),
        start_overhead: float = 0.0,
        searcher_max_length: int | None = None,
    ) -> None:
        """`max_length` is the length of a full-fidelity result; `searcher_max_length` (default the same)
        is the searcher's own `SearchSpec.max_length`, e.g. PBT's `length_per_round`."""
        self.f = function
        self.spec = searchers.SearchSpec(
            function.space(),
            settings,
            max_length if searcher_max_length is None else searcher_max_length,
            seed,
        )
        self.searcher = searchers.new_searcher(self.spec)
        self.observes_pauses = isinstance(self.searcher, searchers.PauseObserver)
        self.max_length = max_length
        self.seed = seed
        self.workers = workers
        self.budget = budget
        self.report_lengths = tuple(sorted(set(report_lengths)))
        self.start_overhead = start_overhead
        self.now = 0.0
        self.compute = 0.0  # in max_length units
        self.trials: dict[int, SimTrial] = {}
        self.by_request: dict[str, int] = {}
        self.queue: deque[int] = deque()
        self.free = list(range(workers))
        self.holding: dict[int, SimTrial] = {}  # trials holding a worker
        self.heap: list[tuple[float, int, str, int, int]] = []
        self.seq = 0
        self.events: deque[searchers.Event | searchers.TrialPaused] = (
            deque()
        )  # searcher events waiting to be delivered
        self.shut_down = False
        self.best_metric: float | None = None
        self.result = RunResult(
            searcher=str(settings["name"]),
            function=function.name,
            seed=seed,
            budget=budget,
            end="",
            compute=0.0,
            time=0.0,
            trials=0,
            full_length_reports=0,
            reports=0,
            runs_started=0,
        )

    # ---- the loop -----------------------------------------------------------------------------------

    def _call(self, fn: Any, *args: Any) -> list[searchers.Operation]:
        start = time.perf_counter()
        ops: list[searchers.Operation] = fn(*args)
        spent = time.perf_counter() - start
        self.result.searcher_calls += 1
        self.result.searcher_seconds += spent
        self.result.searcher_max_call = max(self.result.searcher_max_call, spent)
        return ops

    def run(self) -> RunResult:
        self._apply(self._call(self.searcher.initial_operations))
        self._deliver()
        while not self.shut_down:
            self._dispatch()
            if not self.heap:
                self.result.end = "stalled"
                break
            when = self.heap[0][0]
            rate = self._training_count()
            if rate and self.compute + rate * (when - self.now) >= self.budget - 1e-12:
                self.now += (self.budget - self.compute) / rate
                self.compute = self.budget
                self.result.end = "budget"
                break
            self.compute += rate * (when - self.now)
            self.now = when
            _, _, kind, trial_id, token = heapq.heappop(self.heap)
            trial = self.trials[trial_id]
            if token != trial.token:
                continue  # superseded
            if kind == "begin":
                trial.state = TRAINING
                trial.since, trial.since_length = self.now, trial.length
                self._schedule_report(trial)
            else:
                self._report(trial)
            self._deliver()
        if self.shut_down:
            self.result.end = "shutdown"
        self.result.compute = self.compute
        self.result.time = self.now
        self.result.trials = len(self.trials)
        self.result.snapshot_bytes = len(json.dumps(self.searcher.snapshot()))
        return self.result

    def _training_count(self) -> int:
        return sum(1 for t in self.holding.values() if t.state == TRAINING)

    def _push(self, when: float, kind: str, trial: SimTrial) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, kind, trial.trial_id, trial.token))

    def _dispatch(self) -> None:
        while self.queue and self.free:
            trial = self.trials[self.queue.popleft()]
            if trial.state != QUEUED:
                continue
            trial.worker = self.free.pop()
            self.holding[trial.trial_id] = trial
            trial.runs += 1
            trial.token += 1
            self.result.runs_started += 1
            if self.start_overhead > 0:
                trial.state = STARTING
                self._push(self.now + self.start_overhead, "begin", trial)
            else:
                trial.state = TRAINING
                trial.since, trial.since_length = self.now, trial.length
                self._schedule_report(trial)

    def _next_report(self, trial: SimTrial) -> int | None:
        target = trial.target if trial.target is not None else self.max_length
        for length in self.report_lengths:
            if trial.length < length < target:
                return length
        return target if trial.length < target else None

    def _schedule_report(self, trial: SimTrial) -> None:
        length = self._next_report(trial)
        if length is None:  # nothing left to train: it reports where it stands
            length = round(trial.length)
        trial.next_at = length
        trial.token += 1  # one scheduled event per trial: any earlier one is void
        self._push(self.now + max(length - trial.length, 0.0) / self.max_length, "report", trial)

    def _sync_length(self, trial: SimTrial) -> None:
        if trial.state == TRAINING:
            trial.length = trial.since_length + (self.now - trial.since) * self.max_length

    def _free(self, trial: SimTrial) -> None:
        self._sync_length(trial)
        if trial.worker is not None:
            self.free.append(trial.worker)
            trial.worker = None
            del self.holding[trial.trial_id]
        trial.token += 1

    # ---- a report -----------------------------------------------------------------------------------

    def _report(self, trial: SimTrial) -> None:
        length = trial.next_at
        trial.length = float(length)
        trial.since, trial.since_length = self.now, trial.length
        noise = random.Random(f"noise:{self.seed}:{trial.trial_id}:{length}").gauss(0.0, self.f.noise_std)
        effective = min(trial.inherited + length, self.max_length)
        metric = self.f.value(trial.x, effective / self.max_length) + noise
        self.result.reports += 1
        if effective >= self.max_length:
            self.result.full_length_reports += 1
            if self.best_metric is None or metric < self.best_metric:
                self.best_metric = metric
                self.result.trajectory.append(Point(self.compute, self.now, self.f.regret(trial.x)))
        event = searchers.ValidationReported(
            f"validation-{trial.trial_id}-{length}", trial.trial_id, length, metric
        )
        self._apply(self._call(self.searcher.on_event, event))
        if trial.state != TRAINING or self.shut_down:
            return  # paused or stopped by the answer
        if self._next_report(trial) is not None:
            self._schedule_report(trial)  # train on (a new target, or the next report on the way)
            return
        # Its last target is reached and no new one came: the service treats it as done.
        self._exit_trial(trial, f"exit-{trial.trial_id}.{trial.runs}")

    def _exit_trial(self, trial: SimTrial, event_id: str) -> None:
        """The trial ends for good: its worker is freed and the searcher is told (`TrialExited`)."""
        self._free(trial)
        trial.state = EXITED
        self.events.append(searchers.TrialExited(event_id, trial.trial_id, failed=False))

    # ---- operations ---------------------------------------------------------------------------------

    def _deliver(self) -> None:
        while self.events and not self.shut_down:
            event = self.events.popleft()
            if isinstance(event, searchers.TrialPaused):
                observer: Any = self.searcher  # a PauseObserver (checked when the run began)
                self._apply(self._call(observer.on_trial_paused, event))
            else:
                self._apply(self._call(self.searcher.on_event, event))

    def _apply(self, ops: list[searchers.Operation]) -> None:
        for op in ops:
            if self.shut_down:
                return
            if isinstance(op, searchers.CreateTrial):
                self._create(op)
            elif isinstance(op, searchers.ContinueTrial):
                trial = self.trials.get(op.trial_id)
                if trial is None or trial.state == EXITED:
                    continue
                trial.target = op.length
                if trial.state == PAUSED:
                    trial.state = QUEUED
                    self.queue.append(trial.trial_id)
                elif trial.state == TRAINING:
                    self._sync_length(trial)
                    trial.since, trial.since_length = self.now, trial.length
                    self._schedule_report(trial)
            elif isinstance(op, searchers.PauseTrial):
                trial = self.trials.get(op.trial_id)
                if trial is None or trial.state in (EXITED, PAUSED):
                    continue
                self._free(trial)
                trial.state = PAUSED
                if self.observes_pauses:
                    self.events.append(
                        searchers.TrialPaused(f"paused-{trial.trial_id}.{trial.runs}", trial.trial_id)
                    )
            elif isinstance(op, searchers.StopTrial):
                trial = self.trials.get(op.trial_id)
                if trial is None or trial.state == EXITED:
                    continue
                if trial.state == PAUSED:
                    self._exit_trial(trial, f"closed-{trial.trial_id}")
                else:
                    self._exit_trial(trial, f"exit-{trial.trial_id}.{trial.runs}")
            elif isinstance(op, searchers.Shutdown):
                self.shut_down = True
                for trial in list(self.holding.values()):
                    self._free(trial)

    def _create(self, op: searchers.CreateTrial) -> None:
        if op.request_id in self.by_request:
            return  # created once per request id
        trial_id = len(self.trials) + 1
        trial = SimTrial(trial_id, op.request_id, self.f.point(op.hparams), op.length)
        parent = self.trials.get(op.warm_start_trial_id) if op.warm_start_trial_id is not None else None
        if parent is not None:  # its lineage's training carries over (see the module's docstring)
            self._sync_length(parent)
            trial.inherited = parent.inherited + parent.length
        self.trials[trial_id] = trial
        self.by_request[op.request_id] = trial_id
        self.queue.append(trial_id)
        extra = self._call(
            self.searcher.on_event,
            searchers.TrialCreated(f"created-{op.request_id}", op.request_id, trial_id),
        )
        if extra:  # the service drops these; say so if a searcher relies on them
            self.result.warnings.append(f"operations answered to TrialCreated were dropped: {extra!r}")

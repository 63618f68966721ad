"""Hyperband (Li et al. 2018; NNI's `Hyperband` advisor): synchronous successive halving in brackets.

The brackets, their rungs and lengths are `hyperband_plan.py`. Inside a bracket:

- its `n_0` configurations are created with the rung-0 length as their target; a trial that reaches its
  rung's target is paused (`PauseTrial`: it checkpoints and exits), and the rung decides once every one
  of its trials has a result: the best `floor(n_i / eta)` go up, the others are stopped (`StopTrial`;
  a paused trial is closed by the service). A trial that exits before its result counts there as the
  worst one (Determined's early exit); an `invalid_hp` trial at rung 0 is replaced by a new
  configuration without using the budget.
- A promoted trial CONTINUES from its checkpoint (`ContinueTrial` to the next rung's length, resuming it
  in a new run), where Li et al. and NNI train a promoted configuration again from scratch: the lengths
  are cumulative, so a promotion costs `r_(i+1) - r_i` more, not `r_(i+1)`. (An NNI trial script, which
  has no checkpoints, does start again, reading its new `TRIAL_BUDGET`: see `harness/compat/_nni.py`.)
- At the top rung a trial is stopped as soon as it reports.

Brackets run side by side: new trials fill the brackets in order, promotions waiting for a slot go
first, and `max_concurrent_trials` (0: no limit) caps the running trials across brackets. The search
shuts down once every bracket has finished and no trial runs.

`propose(index)` chooses the configuration of the `index`-th request: here at random, as in Hyperband
(the same draw as `random` and `adaptive_asha` for the same seed and request number); BOHB overrides it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from chalicelib.domain import hparams as hp
from chalicelib.domain.searchers.base import (
    DEFAULT_MAX_CONCURRENT_TRIALS,
    ContinueTrial,
    CreateTrial,
    Event,
    Operation,
    PauseTrial,
    SearcherBase,
    SearchSpec,
    Shutdown,
    StopTrial,
    TrialCreated,
    TrialExited,
    TrialRecord,
    ValidationReported,
    settings_int,
)
from chalicelib.domain.searchers.hyperband_plan import divisor, keep, plan, planned_results

WORST = sys.float_info.max  # the result of a trial that exited before reporting (JSON-safe)
RUNNING, PAUSED, PROMOTED, STOPPING, CLOSING, EXITED = (
    "running",  # training towards its rung's target
    "paused",  # reached its rung, waiting for the rung to decide
    "promoted",  # paused and promoted, waiting for a slot to continue
    "stopping",  # told to stop while running; its exit is coming
    "closing",  # stopped while paused: the service closes it (no run to wait for)
    "exited",
)
ACTIVE = (RUNNING, STOPPING)  # what holds a slot


@dataclass
class HyperbandTrial(TrialRecord):
    request_id: str
    bracket: int
    index: int  # the request number (what `propose` was given)
    rung: int = 0  # the rung it trains towards, or sits in
    trial_id: int | None = None
    status: str = RUNNING
    failed: bool = False
    invalid_hp: bool = False
    replaced: bool = False  # an invalid_hp exit before any result: a new configuration takes its place
    length: int = 0
    metric: float | None = None  # its latest result at a rung (smaller is better)
    extra: dict[str, Any] = field(default_factory=dict)  # what `propose` keeps (BOHB: its vector)


Entry = list[Any]  # [metric (smaller is better), request number, request_id]


@dataclass
class HyperbandSearcher(SearcherBase):
    spec: SearchSpec = field(default_factory=lambda: SearchSpec({}, {"name": "hyperband"}, 9, 0))
    name: str = "hyperband"
    next_index: int = 0
    requests: dict[str, HyperbandTrial] = field(default_factory=dict)
    rungs: list[list[list[Entry]]] = field(default_factory=list)  # bracket -> rung -> entries
    decided: list[int] = field(default_factory=list)  # bracket -> rungs decided so far
    waiting: list[str] = field(default_factory=list)  # promoted request ids waiting for a slot

    def __post_init__(self) -> None:
        self.brackets = plan(self.spec)
        self.eta = divisor(self.spec.settings)
        self.max_concurrent = settings_int(
            self.spec.settings, "max_concurrent_trials", DEFAULT_MAX_CONCURRENT_TRIALS
        )
        if not self.rungs:
            self.rungs = [[[] for _ in b.targets] for b in self.brackets]
            self.decided = [0] * len(self.brackets)
        if [len(r) for r in self.rungs] != [b.num_rungs for b in self.brackets]:
            raise ValueError(f"the {self.name} snapshot does not match its config's brackets")

    # ---- what BOHB changes --------------------------------------------------------------------------

    def propose(self, index: int, bracket: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """The hyperparameters of the `index`-th request (for `bracket`), and data to keep with it."""
        return hp.sample(self.spec.space, hp.request_rng(self.spec.seed, index)), {}

    # ---- the searcher interface ---------------------------------------------------------------------

    def initial_operations(self) -> list[Operation]:
        if self.requests or self.shut_down:
            return []
        return self._fill()

    def on_event(self, event: Event) -> list[Operation]:
        if not self._first_time(event.event_id):
            return []
        if isinstance(event, TrialCreated):
            self._record_created(self.requests.get(event.request_id), event)
            return []
        trial = next((t for t in self.requests.values() if t.trial_id == event.trial_id), None)
        if trial is None or trial.status == EXITED or self.shut_down:
            if trial is not None and isinstance(event, TrialExited) and trial.status != EXITED:
                trial.status = EXITED
                self._record_exit(trial, event)
            return []
        if isinstance(event, ValidationReported):
            if trial.status != RUNNING:
                return []
            trial.length = max(trial.length, event.length)
            if trial.length < self.brackets[trial.bracket].targets[trial.rung]:
                return []  # short of its target: the target stands
            metric = event.metric if self.spec.smaller_is_better else -event.metric
            ops = self._reached(trial, metric)
        else:
            ops = self._exited(trial, event)
        ops += self._fill()
        # A trial promoted as it paused (a slot was free) just trains on: drop the pause.
        continued = {op.trial_id for op in ops if isinstance(op, ContinueTrial)}
        ops = [op for op in ops if not (isinstance(op, PauseTrial) and op.trial_id in continued)]
        return ops + self._maybe_shutdown()

    def progress(self) -> float:
        """Rung results collected over those the plan collects."""
        if self.shut_down:
            return 1.0
        done = sum(len(rung) for bracket in self.rungs for rung in bracket)
        return min(done / planned_results(self.brackets), 1.0)

    def snapshot(self) -> dict[str, Any]:
        return {
            **self._snapshot_bookkeeping(),
            "next_index": self.next_index,
            "requests": [t.to_json() for t in self.requests.values()],
            "rungs": [[[list(e) for e in rung] for rung in bracket] for bracket in self.rungs],
            "decided": list(self.decided),
            "waiting": list(self.waiting),
        }

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], spec: SearchSpec) -> Self:
        requests = [HyperbandTrial.from_json(t) for t in snapshot.get("requests", [])]
        return cls(
            spec=spec,
            **cls._restore_bookkeeping(snapshot),
            next_index=int(snapshot.get("next_index", 0)),
            requests={t.request_id: t for t in requests},
            rungs=[
                [[[float(e[0]), int(e[1]), str(e[2])] for e in rung] for rung in bracket]
                for bracket in snapshot.get("rungs", [])
            ],
            decided=[int(d) for d in snapshot.get("decided", [])],
            waiting=[str(r) for r in snapshot.get("waiting", [])],
        )

    # ---- rungs --------------------------------------------------------------------------------------

    def _reached(self, trial: HyperbandTrial, metric: float) -> list[Operation]:
        """`trial` reported at (or past) its rung's target: record it, pause or stop it, maybe decide."""
        trial.metric = metric
        self._enter(trial, metric)
        if trial.rung == self.brackets[trial.bracket].num_rungs - 1:
            trial.status = STOPPING
            return [StopTrial(_tid(trial))]
        trial.status = PAUSED
        ops = self._decide(trial.bracket)
        if trial.status == CLOSING:  # the rung decided against it at once: it is still running
            trial.status = STOPPING
            return ops
        return [PauseTrial(_tid(trial)), *ops]

    def _enter(self, trial: HyperbandTrial, metric: float) -> None:
        self.rungs[trial.bracket][trial.rung].append([metric, trial.index, trial.request_id])

    def _rung_size(self, bracket: int, rung: int) -> int:
        """How many results rung `rung` of `bracket` waits for."""
        if rung == 0:
            return self.brackets[bracket].num_trials
        return keep(len(self.rungs[bracket][rung - 1]), self.eta)

    def _decide(self, bracket: int) -> list[Operation]:
        """Decide every rung of `bracket` that has all its results: promote the best, stop the rest."""
        ops: list[Operation] = []
        last = self.brackets[bracket].num_rungs - 1
        while self.decided[bracket] < last:
            rung = self.decided[bracket]
            entries = self.rungs[bracket][rung]
            if len(entries) < self._rung_size(bracket, rung):
                break
            self.decided[bracket] += 1
            ranked = sorted(entries, key=lambda e: (float(e[0]), int(e[1])))
            count = keep(len(entries), self.eta)
            for position, entry in enumerate(ranked):
                trial = self.requests[str(entry[2])]
                if position < count:
                    ops += self._promote(trial, rung + 1)
                elif trial.status == PAUSED:
                    trial.status = CLOSING
                    ops.append(StopTrial(_tid(trial)))
        return ops

    def _promote(self, trial: HyperbandTrial, rung: int) -> list[Operation]:
        trial.rung = rung
        target = self.brackets[trial.bracket].targets[rung]
        if trial.status == EXITED:  # as if it had run and reported the worst result
            self._enter(trial, WORST)
        elif trial.length >= target:  # it already trained that far: its latest result counts there
            self._enter(trial, WORST if trial.metric is None else trial.metric)
            if rung == self.brackets[trial.bracket].num_rungs - 1:
                trial.status = CLOSING
                return [StopTrial(_tid(trial))]
        else:
            trial.status = PROMOTED
            self.waiting.append(trial.request_id)
        return []

    # ---- exits, new trials, the end -----------------------------------------------------------------

    def _exited(self, trial: HyperbandTrial, event: TrialExited) -> list[Operation]:
        was = trial.status
        trial.status = EXITED
        self._record_exit(trial, event)
        if was == PROMOTED:
            self.waiting.remove(trial.request_id)
        if was not in (RUNNING, PROMOTED):
            return []  # stopped, closed, or paused (its result stands)
        if event.invalid_hp and trial.rung == 0:
            trial.replaced = True  # no result anywhere: `_fill` replaces it
            return []
        self._enter(trial, WORST)
        if trial.rung == self.brackets[trial.bracket].num_rungs - 1:
            return []
        return self._decide(trial.bracket)

    def _fill(self) -> list[Operation]:
        """Continue waiting promotions, then create new trials, while slots are free."""
        ops: list[Operation] = []
        active = sum(1 for t in self.requests.values() if t.status in ACTIVE)
        counted = [0] * len(self.brackets)
        for t in self.requests.values():
            if not t.replaced:
                counted[t.bracket] += 1
        while self.max_concurrent <= 0 or active < self.max_concurrent:
            if self.waiting:
                trial = self.requests[self.waiting.pop(0)]
                trial.status = RUNNING
                ops.append(ContinueTrial(_tid(trial), self.brackets[trial.bracket].targets[trial.rung]))
            else:
                bracket = next((i for i, b in enumerate(self.brackets) if counted[i] < b.num_trials), None)
                if bracket is None:
                    break
                counted[bracket] += 1
                ops.append(self._create(bracket))
            active += 1
        return ops

    def _create(self, bracket: int) -> CreateTrial:
        index = self.next_index
        self.next_index += 1
        request_id = f"{self.name}-{index}"
        hparams, extra = self.propose(index, bracket)
        self.requests[request_id] = HyperbandTrial(request_id, bracket, index, extra=extra)
        return CreateTrial(request_id, hparams, self.brackets[bracket].targets[0])

    def _maybe_shutdown(self) -> list[Operation]:
        if self.shut_down or self.waiting:
            return []
        if any(t.status in (RUNNING, STOPPING, PAUSED) for t in self.requests.values()):
            return []
        planned = sum(b.num_trials for b in self.brackets)
        if sum(1 for t in self.requests.values() if not t.replaced) < planned:
            return []
        self.shut_down = True
        succeeded = any(not t.invalid_hp and not t.failed for t in self.requests.values())
        return [Shutdown(failure=not succeeded)]


def _tid(trial: HyperbandTrial) -> int:
    if trial.trial_id is None:  # only trials that reported (so were created) get operations
        raise ValueError(f"request {trial.request_id} has no trial yet")
    return trial.trial_id

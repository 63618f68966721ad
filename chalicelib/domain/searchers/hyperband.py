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

With `until_stopped` (an NNI config without `maxTrialNumber`: NNI's Hyperband repeats its iterations)
the plan is one iteration, repeated: when no open bracket has a trial to create, the next bracket (of
the next iteration after the last) opens, `max_concurrent_trials` (its default when 0) trials at a time,
and the search never shuts down by itself: the experiment's cancel, kill or time limit ends it. Its
snapshot stays bounded: a finished bracket (every rung decided, every trial gone) is forgotten, its
trials with it (`_forget`; BOHB first keeps its results, see `bohb.py`), and only the latest
`SEEN_EVENTS_KEPT` event ids are remembered (a duplicate older than that changes nothing anyway: an
event for a trial already past it, or gone, is ignored).

`propose(index)` chooses the configuration of the `index`-th request: here at random, as in Hyperband
(the same draw as `random` and `adaptive_asha` for the same seed and request number); BOHB overrides it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Self

from chalicelib.domain import hparams as hp
from chalicelib.domain.searchers.base import (
    DEFAULT_MAX_CONCURRENT_TRIALS,
    ContinueTrial,
    CreateTrial,
    Operation,
    PauseTrial,
    SearcherBase,
    SearchSpec,
    Shutdown,
    StopTrial,
    TrialExited,
    TrialRecord,
    ValidationReported,
    settings_int,
)
from chalicelib.domain.searchers.hyperband_plan import HyperbandBracket, divisor, keep, plan, planned_results

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
SEEN_EVENTS_KEPT = 512  # with until_stopped: the event ids remembered for duplicates


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
    rungs: dict[int, list[list[Entry]]] = field(default_factory=dict)  # open bracket -> rung -> entries
    decided: dict[int, int] = field(default_factory=dict)  # open bracket -> rungs decided so far
    waiting: list[str] = field(default_factory=list)  # promoted request ids waiting for a slot
    next_bracket: int = 0  # the number of brackets opened so far

    def __post_init__(self) -> None:
        settings = self.spec.settings
        self.until_stopped = settings.get("until_stopped") is True
        # until_stopped: one iteration, repeated (`bracket`).
        endless = {**settings, "max_trials": None, "iterations": None}
        self.brackets = plan(replace(self.spec, settings=endless) if self.until_stopped else self.spec)
        self.eta = divisor(settings)
        self.max_concurrent = settings_int(settings, "max_concurrent_trials", DEFAULT_MAX_CONCURRENT_TRIALS)
        if self.until_stopped and self.max_concurrent <= 0:
            self.max_concurrent = DEFAULT_MAX_CONCURRENT_TRIALS  # an endless search bounds its trials
        if not self.until_stopped and self.next_bracket == 0:  # every bracket is open from the start
            for _ in self.brackets:
                self._open_bracket()
        if any(len(r) != self.bracket(b).num_rungs for b, r in self.rungs.items()) or (
            not self.until_stopped and self.next_bracket != len(self.brackets)
        ):
            raise ValueError(f"the {self.name} snapshot does not match its config's brackets")

    def bracket(self, index: int) -> HyperbandBracket:
        """The plan of the `index`-th bracket (with until_stopped, the iterations repeat)."""
        return self.brackets[index % len(self.brackets)] if self.until_stopped else self.brackets[index]

    # ---- what BOHB changes --------------------------------------------------------------------------

    def propose(self, index: int, bracket: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """The hyperparameters of the `index`-th request (for `bracket`), and data to keep with it."""
        return hp.sample(self.spec.space, hp.request_rng(self.spec.seed, index)), {}

    # ---- the searcher interface ---------------------------------------------------------------------

    def initial_operations(self) -> list[Operation]:
        if self.requests or self.shut_down:
            return []
        return self._fill()

    def _events_kept(self) -> int | None:
        return SEEN_EVENTS_KEPT if self.until_stopped else None

    def _record_of(self, request_id: str) -> HyperbandTrial | None:
        return self.requests.get(request_id)

    def _on_trial_event(self, event: ValidationReported | TrialExited) -> list[Operation]:
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
            if trial.length < self.bracket(trial.bracket).targets[trial.rung]:
                return []  # short of its target: the target stands
            metric = event.metric if self.spec.smaller_is_better else -event.metric
            ops = self._reached(trial, metric)
        else:
            ops = self._exited(trial, event)
        ops += self._fill()
        # A trial promoted as it paused (a slot was free) just trains on: drop the pause.
        continued = {op.trial_id for op in ops if isinstance(op, ContinueTrial)}
        ops = [op for op in ops if not (isinstance(op, PauseTrial) and op.trial_id in continued)]
        self._forget_finished_brackets()
        return ops + self._maybe_shutdown()

    def progress(self, trained: Mapping[int, float] | None = None) -> float | None:
        """Rung results collected over those the plan collects (until_stopped: no end known, None)."""
        if self.shut_down:
            return 1.0
        if self.until_stopped:
            return None
        done = sum(len(rung) for bracket in self.rungs.values() for rung in bracket)
        return min(done / planned_results(self.brackets), 1.0)

    def snapshot(self) -> dict[str, Any]:
        return {
            **self._snapshot_bookkeeping(),
            "next_index": self.next_index,
            "requests": [t.to_json() for t in self.requests.values()],
            "open_brackets": list(self.rungs),
            "rungs": [[[list(e) for e in rung] for rung in bracket] for bracket in self.rungs.values()],
            "decided": [self.decided[b] for b in self.rungs],
            "waiting": list(self.waiting),
            "next_bracket": self.next_bracket,
        }

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], spec: SearchSpec) -> Self:
        return cls(spec=spec, **cls._restored_fields(snapshot))

    @classmethod
    def _restored_fields(cls, snapshot: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor arguments read back from `snapshot` (one written before `open_brackets`
        existed has every bracket of its plan open)."""
        rungs = snapshot.get("rungs", [])
        opened = [int(b) for b in snapshot.get("open_brackets", range(len(rungs)))]
        return {
            **cls._restore_bookkeeping(snapshot),
            "next_index": int(snapshot.get("next_index", 0)),
            "requests": HyperbandTrial.by_request(snapshot),
            "rungs": {
                b: [[[float(e[0]), int(e[1]), str(e[2])] for e in rung] for rung in bracket]
                for b, bracket in zip(opened, rungs, strict=True)
            },
            "decided": {b: int(d) for b, d in zip(opened, snapshot.get("decided", []), strict=True)},
            "waiting": [str(r) for r in snapshot.get("waiting", [])],
            "next_bracket": int(snapshot.get("next_bracket", len(opened))),
        }

    # ---- rungs --------------------------------------------------------------------------------------

    def _reached(self, trial: HyperbandTrial, metric: float) -> list[Operation]:
        """`trial` reported at (or past) its rung's target: record it, pause or stop it, maybe decide."""
        trial.metric = metric
        self._enter(trial, metric)
        if trial.rung == self.bracket(trial.bracket).num_rungs - 1:
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
            return self.bracket(bracket).num_trials
        return keep(len(self.rungs[bracket][rung - 1]), self.eta)

    def _decide(self, bracket: int) -> list[Operation]:
        """Decide every rung of `bracket` that has all its results: promote the best, stop the rest."""
        ops: list[Operation] = []
        last = self.bracket(bracket).num_rungs - 1
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
        target = self.bracket(trial.bracket).targets[rung]
        if trial.status == EXITED:  # as if it had run and reported the worst result
            self._enter(trial, WORST)
        elif trial.length >= target:  # it already trained that far: its latest result counts there
            self._enter(trial, WORST if trial.metric is None else trial.metric)
            if rung == self.bracket(trial.bracket).num_rungs - 1:
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
        if trial.rung == self.bracket(trial.bracket).num_rungs - 1:
            return []
        return self._decide(trial.bracket)

    def _fill(self) -> list[Operation]:
        """Continue waiting promotions, then create new trials, while slots are free."""
        ops: list[Operation] = []
        active = sum(1 for t in self.requests.values() if t.status in ACTIVE)
        counted = dict.fromkeys(self.rungs, 0)
        for t in self.requests.values():
            if not t.replaced:
                counted[t.bracket] += 1
        while self.max_concurrent <= 0 or active < self.max_concurrent:
            if self.waiting:
                trial = self.requests[self.waiting.pop(0)]
                trial.status = RUNNING
                ops.append(ContinueTrial(_tid(trial), self.bracket(trial.bracket).targets[trial.rung]))
            else:
                bracket = next((b for b in self.rungs if counted[b] < self.bracket(b).num_trials), None)
                if bracket is None and not self.until_stopped:
                    break
                if bracket is None:  # the next bracket (of the next iteration after the last)
                    bracket = self._open_bracket()
                    counted[bracket] = 0
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
        return CreateTrial(request_id, hparams, self.bracket(bracket).targets[0])

    def _open_bracket(self) -> int:
        index = self.next_bracket
        self.next_bracket += 1
        self.rungs[index] = [[] for _ in self.bracket(index).targets]
        self.decided[index] = 0
        return index

    def _forget_finished_brackets(self) -> None:
        """With until_stopped: forget every bracket whose rungs are all decided and whose trials are all
        gone (exited, or closed by the service); the snapshot keeps only what is still going on."""
        if not self.until_stopped:
            return
        for index in list(self.rungs):
            last = self.bracket(index).num_rungs - 1
            members = [t for t in self.requests.values() if t.bracket == index]
            if (
                self.decided[index] == last
                and len(self.rungs[index][last]) >= self._rung_size(index, last)
                and all(t.status in (EXITED, CLOSING) for t in members)
            ):
                self._forget(index, members)

    def _forget(self, index: int, members: list[HyperbandTrial]) -> None:
        """Drop finished bracket `index` and its trials (a later event for one of them is ignored)."""
        for trial in members:
            del self.requests[trial.request_id]
            self.trials.pop(trial.request_id, None)
            if trial.trial_id is not None:
                self.exited.pop(trial.trial_id, None)
        del self.rungs[index], self.decided[index]

    def _maybe_shutdown(self) -> list[Operation]:
        if self.shut_down or self.waiting or self.until_stopped:
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

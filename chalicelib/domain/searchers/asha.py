"""Determined's `adaptive_asha`: asynchronous successive halving over brackets (`adaptive_asha.go`,
`asha.go`, `asha_stopping.go`).

The plan (brackets, rungs, their targets) is `asha_plan.py`.

Promotion (`stop_once: false`): a trial trains to its rung's target and reports; it is promoted at once
(`ContinueTrial`) or paused, and a later result can promote a paused trial (`ContinueTrial` resumes it),
following Determined's `promotionsAsync` (the top `1/divisor` of a rung go up as results arrive). At the
top rung a trial is stopped. Early stopping (`stop_once: true`): trials train to `max_length`; at each
rung target a trial outside the rung's top `1/divisor` (the best always continues) is stopped.

Both: new trials keep each bracket at its concurrency until its trials are created; a trial that exits
before reporting at its rung counts there as the worst result (Determined's early exit); an `invalid_hp`
exit is dropped from the rungs and replaced without using the budget. The search shuts down once no trial
runs and none is left to create; trials still paused then are final.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain import hparams as hp
from chalicelib.domain.searchers.asha_plan import plan
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

WORST = sys.float_info.max  # the metric of a trial that exited before reporting (JSON-safe)
RUNNING, PAUSED, STOPPING, EXITED = "running", "paused", "stopping", "exited"


# ---- state ----------------------------------------------------------------------------------------


@dataclass
class AshaTrial(TrialRecord):
    request_id: str
    bracket: int
    rung: int = 0  # the rung it trains towards (or, once paused, the rung it sits in)
    trial_id: int | None = None
    status: str = RUNNING
    failed: bool = False
    invalid_hp: bool = False
    length: int = 0
    metric: float | None = None  # its latest result (smaller is better)


Entry = list[Any]  # [metric (smaller is better), request_id, promoted]


@dataclass
class AdaptiveASHASearcher(SearcherBase):
    spec: SearchSpec = field(
        default_factory=lambda: SearchSpec({}, {"name": "adaptive_asha", "max_trials": 1}, 1, 0)
    )
    name: str = "adaptive_asha"
    next_index: int = 0
    requests: dict[str, AshaTrial] = field(default_factory=dict)
    rungs: list[list[list[Entry]]] = field(default_factory=list)  # bracket -> rung -> sorted entries

    def __post_init__(self) -> None:
        self.brackets = plan(self.spec)
        self.divisor = float(self.spec.settings.get("divisor") or 4.0)
        self.stop_once = bool(self.spec.settings.get("stop_once", False))
        self.max_concurrent = settings_int(
            self.spec.settings, "max_concurrent_trials", DEFAULT_MAX_CONCURRENT_TRIALS
        )
        if not self.rungs:
            self.rungs = [[[] for _ in range(b.num_rungs)] for b in self.brackets]
        if [len(r) for r in self.rungs] != [b.num_rungs for b in self.brackets]:
            raise ValueError("the adaptive_asha snapshot does not match its config's brackets")

    # ---- the searcher interface ---------------------------------------------------------------------

    def initial_operations(self) -> list[Operation]:
        if self.requests or self.shut_down:
            return []
        return self._fill()

    def _record_of(self, request_id: str) -> AshaTrial | None:
        return self.requests.get(request_id)

    def _on_trial_event(self, event: ValidationReported | TrialExited) -> list[Operation]:
        trial = next((t for t in self.requests.values() if t.trial_id == event.trial_id), None)
        if trial is None or trial.status == EXITED:
            return []
        if isinstance(event, ValidationReported):
            if trial.status != RUNNING or self.shut_down:
                return []
            trial.length = max(trial.length, event.length)
            metric = event.metric if self.spec.smaller_is_better else -event.metric
            trial.metric = metric
            if self.stop_once:
                ops = self._report_stopping(trial, metric)
            elif trial.length >= self.brackets[trial.bracket].targets[trial.rung]:
                ops = self._report_promoting(trial, metric)
            else:
                ops = []  # short of its target: the target stands
        else:
            ops = self._exited(trial, event)
        if self.shut_down:
            return []
        ops += self._fill()
        return ops + self._maybe_shutdown()

    def progress(self, trained: Mapping[int, float] | None = None) -> float | None:
        """Determined's, averaged over brackets: first-rung results with 20% overhead, then trials done."""
        if self.shut_down:
            return 1.0
        total = 0.0
        for index, bracket in enumerate(self.brackets):
            seen = len(self.rungs[index][0])
            value = seen / (1.2 * bracket.max_trials)
            if seen >= bracket.max_trials:
                done = sum(
                    1
                    for t in self.requests.values()
                    if t.bracket == index and t.status == EXITED and not t.invalid_hp
                )
                value = max(done / bracket.max_trials, value)
            total += min(value, 1.0)
        return total / len(self.brackets)

    def snapshot(self) -> dict[str, Any]:
        return {
            **self._snapshot_bookkeeping(),
            "next_index": self.next_index,
            "requests": [t.to_json() for t in self.requests.values()],
            "rungs": [[[list(e) for e in rung] for rung in bracket] for bracket in self.rungs],
        }

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], spec: SearchSpec) -> AdaptiveASHASearcher:
        return cls(
            spec=spec,
            **cls._restore_bookkeeping(snapshot),
            next_index=int(snapshot.get("next_index", 0)),
            requests=AshaTrial.by_request(snapshot),
            rungs=[
                [[[float(e[0]), str(e[1]), bool(e[2])] for e in rung] for rung in bracket]
                for bracket in snapshot.get("rungs", [])
            ],
        )

    # ---- promotion ----------------------------------------------------------------------------------

    def _report_promoting(self, trial: AshaTrial, metric: float) -> list[Operation]:
        """`trial` reached its rung with `metric`: record it there and decide what comes next.

        The trial is running (it just reported), paused (promoted, but it had already trained past the
        new target) or exited (as if it had reported the worst result). Only a running trial is paused
        or stopped; a paused one that goes up and needs more training is resumed.
        """
        bracket = self.brackets[trial.bracket]
        rungs = self.rungs[trial.bracket]
        others: list[Operation] = []
        while True:
            r = trial.rung
            if r == bracket.num_rungs - 1:
                bisect.insort_right(rungs[r], [metric, trial.request_id, False], key=_metric)
                if trial.status == RUNNING:
                    trial.status = STOPPING
                    return [StopTrial(_tid(trial)), *others]
                return others
            promoted = self._promotions(rungs[r], trial.request_id, metric)
            if promoted == trial.request_id:
                trial.rung = r + 1
                if trial.status != EXITED and trial.length < bracket.targets[r + 1]:
                    trial.status = RUNNING
                    return [ContinueTrial(_tid(trial), bracket.targets[r + 1]), *others]
                continue  # already past the next target too (or exited): record it there as well
            if promoted is not None:
                others += self._promote(self.requests[promoted], r + 1)
            if trial.status == RUNNING:
                trial.status = PAUSED
                return [PauseTrial(_tid(trial)), *others]
            return others

    def _promotions(self, entries: list[Entry], request_id: str, metric: float) -> str | None:
        """Determined's `promotionsAsync`: insert the result; return the request to promote, if any.

        With one more result the number of trials that should have been promoted, `int(n/divisor)`,
        grows by at most one: the new trial goes up if it ranks within it, else the trial at the new
        boundary does unless it already went.
        """
        old = int(len(entries) / self.divisor)
        new = int((len(entries) + 1) / self.divisor)
        index = bisect.bisect_right(entries, metric, key=_metric)
        promote_now = index < new
        entries.insert(index, [metric, request_id, promote_now])
        if promote_now:
            return request_id
        if new != old and not entries[old][2]:
            entries[old][2] = True
            return str(entries[old][1])
        return None

    def _promote(self, other: AshaTrial, rung: int) -> list[Operation]:
        other.rung = rung
        target = self.brackets[other.bracket].targets[rung]
        if other.status == PAUSED and other.length < target:
            other.status = RUNNING
            return [ContinueTrial(_tid(other), target)]
        if other.status == PAUSED:  # it already trained that far: its latest result counts there
            return self._report_promoting(other, WORST if other.metric is None else other.metric)
        if other.status == EXITED:  # as if it had run and reported the worst result
            return self._report_promoting(other, WORST)
        return []

    # ---- early stopping -----------------------------------------------------------------------------

    def _report_stopping(self, trial: AshaTrial, metric: float) -> list[Operation]:
        bracket = self.brackets[trial.bracket]
        for r in range(trial.rung, bracket.num_rungs):
            trial.rung = r
            if trial.length < bracket.targets[r]:
                return []
            rung = self.rungs[trial.bracket][r]
            index = bisect.bisect_left(rung, metric, key=_metric)
            rung.insert(index, [metric, trial.request_id, False])
            keep = max(int(len(rung) / self.divisor), 1)
            if r == bracket.num_rungs - 1 or index >= keep:
                trial.status = STOPPING
                return [StopTrial(_tid(trial))]
        return []

    # ---- exits, new trials, the end -----------------------------------------------------------------

    def _exited(self, trial: AshaTrial, event: TrialExited) -> list[Operation]:
        was = trial.status
        trial.status = EXITED
        self._record_exit(trial, event)
        if self.shut_down:
            return []
        if event.invalid_hp:  # forget its results; _fill replaces it
            for rung in self.rungs[trial.bracket][: trial.rung + 1]:
                rung[:] = [e for e in rung if e[1] != trial.request_id]
            return []
        if was != RUNNING:
            return []  # stopped, or paused (its result stands)
        if self.stop_once:  # counts at the rung it was training towards, as the worst
            bisect.insort_left(
                self.rungs[trial.bracket][trial.rung], [WORST, trial.request_id, False], key=_metric
            )
            return []
        return self._report_promoting(trial, WORST)

    def _fill(self) -> list[Operation]:
        ops: list[Operation] = []
        while True:
            active = [0] * len(self.brackets)
            counted = [0] * len(self.brackets)
            for t in self.requests.values():
                if t.status in (RUNNING, STOPPING):
                    active[t.bracket] += 1
                if not t.invalid_hp:
                    counted[t.bracket] += 1
            if 0 < self.max_concurrent <= sum(active):
                return ops
            open_brackets = [
                i
                for i, b in enumerate(self.brackets)
                if counted[i] < b.max_trials and active[i] < b.max_concurrent
            ]
            if not open_brackets:
                return ops
            index = min(open_brackets, key=lambda i: (active[i], i))
            ops.append(self._create(index))

    def _create(self, bracket: int) -> CreateTrial:
        number = self.next_index
        self.next_index += 1
        request_id = f"asha-{number}"
        self.requests[request_id] = AshaTrial(request_id, bracket)
        target = self.spec.max_length if self.stop_once else self.brackets[bracket].targets[0]
        return CreateTrial(
            request_id, hp.sample(self.spec.space, hp.request_rng(self.spec.seed, number)), target
        )

    def _maybe_shutdown(self) -> list[Operation]:
        if self.shut_down or any(t.status in (RUNNING, STOPPING) for t in self.requests.values()):
            return []
        self.shut_down = True
        succeeded = any(
            not t.invalid_hp and (t.status == PAUSED or not t.failed) for t in self.requests.values()
        )
        return [Shutdown(failure=not succeeded)]


def _metric(entry: Entry) -> float:
    return float(entry[0])


def _tid(trial: AshaTrial) -> int:
    if trial.trial_id is None:  # only trials that reported (so were created) get operations
        raise ValueError(f"request {trial.request_id} has no trial yet")
    return trial.trial_id

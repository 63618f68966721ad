"""Determined's `random` searcher, and the pool of fixed-length trials that grid and TPE share.

`PoolSearcher` keeps at most `max_concurrent_trials` trials running (0: no limit), each trained to
`spec.max_length`, and creates the next one whenever one exits, until its budget of trials is used.
Subclasses say what the budget is, how the `index`-th trial's hyperparameters are chosen, and whether
a trial that exits with `invalid_hp` is replaced (random and TPE: yes, without using the budget, as
in Determined; grid: no, the point counts as done).

Only the latest `SEEN_EVENTS_KEPT` event ids are remembered (validations add one each, so a long
search would outgrow its snapshot otherwise). A duplicate older than that changes nothing anyway: a
creation is only noted once, an event for an exited (or forgotten) trial is ignored, and a validation
never takes a trial back to a shorter length (the service only reports positions that advance, so a
legitimate one is never dropped). With `until_stopped` (no budget: trials are created until cancel,
kill or maxExperimentDuration) an exited trial is also forgotten at once (`_forget`; TPE first keeps
its result, see `tpe.py`), as nothing more can come from it; `next_index` numbers the requests,
forgotten ones included. A bounded search keeps every request, as before (its progress, budget and
outcome are counted from them). An endless search gives up (a failed shutdown: the experiment ends in
ERROR, its running trials told to stop) once `failed_in_a_row` trials in a row have failed, at least
`FAILED_IN_A_ROW_LIMIT` and twice the concurrency: broken code or data would otherwise burn compute until
someone noticed, where a bounded search would have ended by itself.

`RandomSearcher` samples each trial with `random.Random` seeded from the experiment seed and the
request number, so a replayed or restored search proposes the same hyperparameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from chalicelib.domain import hparams as hp
from chalicelib.domain.searchers.base import (
    DEFAULT_MAX_CONCURRENT_TRIALS,
    CreateTrial,
    Operation,
    SearcherBase,
    SearchSpec,
    Shutdown,
    TrialExited,
    TrialRecord,
    ValidationReported,
    settings_int,
)

_P = TypeVar("_P", bound="PoolSearcher")

SEEN_EVENTS_KEPT = 512  # the event ids remembered for duplicates (as hyperband's until_stopped)
FAILED_IN_A_ROW_LIMIT = 10  # an endless search gives up after this many failures in a row (or 2x concurrency)


@dataclass
class PoolTrial(TrialRecord):
    """One create request of a pool searcher and what became of it."""

    request_id: str
    index: int
    trial_id: int | None = None
    exited: bool = False
    failed: bool = False
    invalid_hp: bool = False
    length: int = 0  # the furthest validated length
    metric: float | None = None  # the latest reported searcher metric
    extra: dict[str, Any] = field(default_factory=dict)  # subclass data (TPE: its optuna params)


@dataclass
class PoolSearcher(SearcherBase):
    """Fixed-length trials, `max_concurrent_trials` at a time, until the budget is used."""

    spec: SearchSpec = field(default_factory=lambda: SearchSpec({}, {"name": "random"}, None, 0))
    name: str = "pool"
    requests: list[PoolTrial] = field(default_factory=list)  # until_stopped: only the trials not exited
    next_index: int = 0  # the number of the next request (every request made so far)
    failed_in_a_row: int = 0  # until_stopped: trials that failed since the last one that did not

    replaces_invalid: ClassVar[bool] = True

    # ---- what subclasses define ---------------------------------------------------------------------

    def budget(self) -> int | None:
        """How many trials the search runs (replacements of invalid_hp trials not counted); None with
        `until_stopped`: trials are created until the experiment is stopped."""
        if self.spec.settings.get("until_stopped") is True:
            return None
        return max(1, settings_int(self.spec.settings, "max_trials", 1))

    def propose(self, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """The hyperparameters of the `index`-th request, and extra data to keep with it."""
        raise NotImplementedError

    @property
    def until_stopped(self) -> bool:
        return self.budget() is None

    # ---- the searcher interface ---------------------------------------------------------------------

    def max_concurrent(self) -> int:
        return settings_int(self.spec.settings, "max_concurrent_trials", DEFAULT_MAX_CONCURRENT_TRIALS)

    def initial_operations(self) -> list[Operation]:
        if self.next_index or self.shut_down:
            return []  # already started: a replayed start creates nothing
        return self._fill()

    def _events_kept(self) -> int | None:
        return SEEN_EVENTS_KEPT

    def _record_of(self, request_id: str) -> PoolTrial | None:
        return next((r for r in self.requests if r.request_id == request_id), None)

    def _on_trial_event(self, event: ValidationReported | TrialExited) -> list[Operation]:
        request = self._by_trial(event.trial_id)
        if request is None or request.exited:
            return []
        if isinstance(event, ValidationReported):
            if event.length >= request.length:  # a late duplicate of an earlier position changes nothing
                request.length = event.length
                request.metric = event.metric
            return []  # the target stands; at max_length the trial ends by itself
        request.exited = True
        self._record_exit(request, event)
        if self.until_stopped:
            self._forget(request)
        if self.shut_down:
            return []
        if self.until_stopped and self._gives_up(request):
            self.shut_down = True
            return [Shutdown(failure=True)]
        ops = self._fill()
        if not ops and all(r.exited for r in self.requests):
            self.shut_down = True
            succeeded = any(not r.failed and not r.invalid_hp for r in self.requests)
            ops.append(Shutdown(failure=not succeeded))
        return ops

    def progress(self, trained: Mapping[int, float] | None = None) -> float | None:
        """The units trained over `budget() * max_length`: a trial that exited counts whole, a live one
        its furthest validated length or what it trained since (`trained`), whichever is further."""
        if self.shut_down:
            return 1.0
        budget = self.budget()
        if budget is None:
            return None  # until stopped: no end known, no progress to show
        max_length = self.spec.max_length
        done = 0.0
        for request in self.requests:
            if request.invalid_hp and self.replaces_invalid:
                continue  # replaced: it does not count towards the work planned
            if request.exited:
                done += 1.0
                continue
            share = (trained or {}).get(request.trial_id) if request.trial_id is not None else None
            validated = request.length / max_length if max_length else 0.0
            done += min(max(validated, share or 0.0), 1.0)
        return min(done / budget, 1.0)

    def snapshot(self) -> dict[str, Any]:
        return {
            **self._snapshot_bookkeeping(),
            "next_index": self.next_index,
            "failed_in_a_row": self.failed_in_a_row,
            "requests": [r.to_json() for r in self.requests],
        }

    @classmethod
    def restore(cls: type[_P], snapshot: Mapping[str, Any], spec: SearchSpec) -> _P:
        requests = [PoolTrial.from_json(r) for r in snapshot.get("requests", [])]
        searcher = cls(
            spec=spec,
            **cls._restore_bookkeeping(snapshot),
            requests=requests,
            next_index=int(snapshot.get("next_index", len(requests))),  # older snapshots kept every request
            failed_in_a_row=int(snapshot.get("failed_in_a_row", 0)),
        )
        searcher._restored(snapshot)
        return searcher

    def _restored(self, snapshot: Mapping[str, Any]) -> None:
        """Read back what a subclass adds to the snapshot (TPE: its history), and bring one written
        before event ids were windowed (and, with until_stopped, trials forgotten) down to what a new
        one holds."""
        del self.seen_events[:-SEEN_EVENTS_KEPT]
        if not self.until_stopped:
            return
        for request in [r for r in self.requests if r.exited]:
            self._forget(request)

    # ---- internals ----------------------------------------------------------------------------------

    def _counted(self) -> int:
        """Requests that use the budget (invalid_hp ones are replaced, where the searcher does so)."""
        if not self.replaces_invalid:
            return len(self.requests)
        return sum(1 for r in self.requests if not r.invalid_hp)

    def _gives_up(self, request: PoolTrial) -> bool:
        """Count `request`'s exit in the failures in a row; True once an endless search should stop."""
        if request.failed:
            self.failed_in_a_row += 1
        elif not request.invalid_hp:
            self.failed_in_a_row = 0
        limit = max(FAILED_IN_A_ROW_LIMIT, 2 * max(self.max_concurrent(), 1))
        return self.failed_in_a_row >= limit

    def _forget(self, request: PoolTrial) -> None:
        """Drop exited `request` (until_stopped): a later event for its trial is ignored."""
        self.requests.remove(request)
        self.trials.pop(request.request_id, None)
        if request.trial_id is not None:
            self.exited.pop(request.trial_id, None)

    def _fill(self) -> list[Operation]:
        ops: list[Operation] = []
        limit, budget = self.max_concurrent(), self.budget()
        if budget is None and limit <= 0:
            limit = DEFAULT_MAX_CONCURRENT_TRIALS  # an endless search always bounds its running trials
        while budget is None or self._counted() < budget:
            active = sum(1 for r in self.requests if not r.exited)
            if limit > 0 and active >= limit:
                break
            index = self.next_index
            params, extra = self.propose(index)
            request = PoolTrial(request_id=f"{self.name}-{index}", index=index, extra=extra)
            self.requests.append(request)
            self.next_index += 1
            ops.append(CreateTrial(request.request_id, params, self.spec.max_length))
        return ops

    def _by_trial(self, trial_id: int) -> PoolTrial | None:
        return next((r for r in self.requests if r.trial_id == trial_id), None)


@dataclass
class RandomSearcher(PoolSearcher):
    """`max_trials` trials with hyperparameters sampled independently (Determined's `random`)."""

    name: str = "random"

    def propose(self, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
        return hp.sample(self.spec.space, hp.request_rng(self.spec.seed, index)), {}

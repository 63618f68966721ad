"""Population based training (Jaderberg et al. 2017), shaped like Determined's `pbt` searcher.

`population_size` trials train `length_per_round` (`spec.max_length`, in batches) per round, for
`num_rounds` rounds. Each member pauses at the end of its round (checkpoint and exit, freeing its
slots). Once every member of the round has paused or exited, the round is decided:

- the worst `int(truncate_fraction * population_size)` members are stopped, and so is every member that
  exited (it cannot go on); each is replaced by a new trial whose parent is one of the best members
  (the best first, in turn): the new trial starts from the parent's latest checkpoint
  (`CreateTrial.warm_start_trial_id`) with explored hyperparameters;
- the others continue one more round (`ContinueTrial` resumes them from their pause checkpoint).

After the last round every member is stopped and the search shuts down. A member that exits before
reporting ranks worst; a round in which no member reported fails the search.

Exploring (Determined's `explore_function`): each searched hyperparameter is resampled from the space
with `resample_probability`; otherwise a number is multiplied by `1 + perturb_factor` or
`1 - perturb_factor` (equally likely), rounded for `int`, kept within its bounds; a categorical value,
a constant and a bare value are kept. The draws are seeded from the experiment seed and the request
number, so a replayed or restored search proposes the same trials.

Lengths follow Determined's warm start: a trial started from another trial's checkpoint takes its
weights but counts its own batches from 0, so a new member's first target is one round.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain import hparams as hp
from chalicelib.domain.searchers.base import (
    ContinueTrial,
    CreateTrial,
    Operation,
    PauseTrial,
    SearcherBase,
    SearcherSettingsError,
    SearchSpec,
    Shutdown,
    StopTrial,
    TrialExited,
    TrialPaused,
    TrialRecord,
    ValidationReported,
    settings_int,
)

TRAINING, PAUSING, PAUSED, STOPPING, EXITED = "training", "pausing", "paused", "stopping", "exited"


@dataclass
class PbtTrial(TrialRecord):
    """One member of the population (or a former one) and what became of it."""

    request_id: str
    index: int
    hparams: dict[str, Any]
    round: int  # the round it trains in (or trained in last)
    target: int  # its own length to reach this round
    parent: str | None = None  # the request it was warm-started from
    trial_id: int | None = None
    status: str = TRAINING
    failed: bool = False
    invalid_hp: bool = False
    length: int = 0
    metric: float | None = None  # its result this round (smaller is better), once it reached target


@dataclass
class PBTSearcher(SearcherBase):
    spec: SearchSpec = field(
        default_factory=lambda: SearchSpec(
            {},
            {
                "name": "pbt",
                "population_size": 1,
                "num_rounds": 1,
                "replace_function": {"truncate_fraction": 0.0},
                "explore_function": {"resample_probability": 0.0, "perturb_factor": 0.0},
            },
            1,
            0,
        )
    )
    name: str = "pbt"
    round: int = 0
    requests: dict[str, PbtTrial] = field(default_factory=dict)

    def __post_init__(self) -> None:
        settings = self.spec.settings
        if not self.spec.max_length:
            raise SearcherSettingsError(
                "pbt needs length_per_round in batches (or records/epochs with records_per_epoch and a "
                "constant global_batch_size); set searcher.length_per_round: {batches: N}"
            )
        self.length_per_round = int(self.spec.max_length)
        self.population_size = max(1, settings_int(settings, "population_size", 1))
        self.num_rounds = max(1, settings_int(settings, "num_rounds", 1))
        replace = settings.get("replace_function") or {}
        explore = settings.get("explore_function") or {}
        fraction = float(replace.get("truncate_fraction", 0.0))
        self.num_replaced = int(fraction * self.population_size)
        self.resample_probability = float(explore.get("resample_probability", 0.0))
        self.perturb_factor = float(explore.get("perturb_factor", 0.0))

    # ---- the searcher interface ---------------------------------------------------------------------

    def initial_operations(self) -> list[Operation]:
        if self.requests or self.shut_down:
            return []
        ops: list[Operation] = []
        for _ in range(self.population_size):
            index = len(self.requests)
            params = hp.sample(self.spec.space, hp.request_rng(self.spec.seed, index))
            ops.append(self._create(index, params, parent=None))
        return ops

    def _record_of(self, request_id: str) -> PbtTrial | None:
        return self.requests.get(request_id)

    def _on_trial_event(self, event: ValidationReported | TrialExited) -> list[Operation]:
        member = self._by_trial(event.trial_id)
        if member is None or member.status == EXITED:
            return []
        if isinstance(event, TrialExited):
            self._exit(member, event)
            return self._maybe_decide()
        if self.shut_down:
            return []
        return self._reported(member, event) + self._maybe_decide()

    def on_trial_paused(self, event: TrialPaused) -> list[Operation]:
        """The trial checkpointed and exited as it was told to: the round may be decided now."""
        if not self._first_time(event.event_id):
            return []
        member = self._by_trial(event.trial_id)
        if member is None or member.status != PAUSING:
            return []
        member.status = PAUSED
        return self._maybe_decide()

    def progress(self, trained: Mapping[int, float] | None = None) -> float | None:
        if self.shut_down:
            return 1.0
        done = self.round * self.population_size
        done += sum(1 for t in self._members() if t.metric is not None or t.status == EXITED)
        return min(done / (self.num_rounds * self.population_size), 1.0)

    def snapshot(self) -> dict[str, Any]:
        return {
            **self._snapshot_bookkeeping(),
            "round": self.round,
            "requests": [t.to_json() for t in self.requests.values()],
        }

    @classmethod
    def restore(cls, snapshot: Mapping[str, Any], spec: SearchSpec) -> PBTSearcher:
        return cls(
            spec=spec,
            **cls._restore_bookkeeping(snapshot),
            round=int(snapshot.get("round", 0)),
            requests=PbtTrial.by_request(snapshot),
        )

    # ---- events -------------------------------------------------------------------------------------

    def _by_trial(self, trial_id: int) -> PbtTrial | None:
        return next((t for t in self.requests.values() if t.trial_id == trial_id), None)

    def _reported(self, member: PbtTrial, event: ValidationReported) -> list[Operation]:
        if member.status != TRAINING:
            return []  # a late report from a trial already told to pause or stop
        member.length = max(member.length, event.length)
        if member.length < member.target:
            return []  # an intermediate validation: the round's target stands
        member.metric = event.metric if self.spec.smaller_is_better else -event.metric
        if self.round == self.num_rounds - 1:
            member.status = STOPPING  # its last round is done
            return [StopTrial(_tid(member))]
        member.status = PAUSING  # checkpoint and exit; the round decides what comes next
        return [PauseTrial(_tid(member))]

    def _exit(self, member: PbtTrial, event: TrialExited) -> None:
        member.status = EXITED
        self._record_exit(member, event)

    # ---- rounds -------------------------------------------------------------------------------------

    def _members(self) -> list[PbtTrial]:
        """The trials of the current round, in request order."""
        return [t for t in self.requests.values() if t.round == self.round]

    def _maybe_decide(self) -> list[Operation]:
        members = self._members()
        if self.shut_down or any(t.status in (TRAINING, PAUSING, STOPPING) for t in members):
            return []  # still training, or on its way to a pause or a stop
        ranked = sorted(
            (t for t in members if t.metric is not None), key=lambda t: (float(t.metric or 0.0), t.index)
        )
        if self.round == self.num_rounds - 1 or not ranked:
            self.shut_down = True
            succeeded = any(t.metric is not None and not t.failed for t in members)
            return [*self._stop_paused(members), Shutdown(failure=not succeeded)]
        worst = ranked[max(0, len(ranked) - self.num_replaced) :] if self.num_replaced else []
        truncated = {t.request_id for t in worst}
        replaced = [t for t in members if t.request_id in truncated or t.status != PAUSED]
        survivors = [t for t in members if t not in replaced]
        parents = [t for t in ranked if t.request_id not in truncated] or ranked[:1]
        self.round += 1
        ops: list[Operation] = []
        for number in range(len(replaced)):
            parent = parents[number % len(parents)]
            index = len(self.requests)
            params = self._explore(parent.hparams, hp.request_rng(self.spec.seed, index))
            ops.append(self._create(index, params, parent=parent))
        for member in survivors:
            member.round = self.round
            member.metric = None
            member.target += self.length_per_round
            member.status = TRAINING
            ops.append(ContinueTrial(_tid(member), member.target))
        ops += self._stop_paused(replaced)
        return ops

    def _stop_paused(self, members: list[PbtTrial]) -> list[Operation]:
        ops: list[Operation] = []
        for member in members:
            if member.status == PAUSED:
                member.status = STOPPING
                ops.append(StopTrial(_tid(member)))
        return ops

    def _create(self, index: int, params: dict[str, Any], parent: PbtTrial | None) -> CreateTrial:
        request_id = f"pbt-{index}"
        self.requests[request_id] = PbtTrial(
            request_id=request_id,
            index=index,
            hparams=params,
            round=self.round,
            target=self.length_per_round,
            parent=parent.request_id if parent else None,
        )
        warm_start = parent.trial_id if parent else None
        return CreateTrial(request_id, params, self.length_per_round, warm_start_trial_id=warm_start)

    # ---- exploring ----------------------------------------------------------------------------------

    def _explore(self, params: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
        return _explore_group(self.spec.space, params, rng, self.resample_probability, self.perturb_factor)


def _explore_group(
    space: Mapping[str, Any],
    params: Mapping[str, Any],
    rng: random.Random,
    resample_probability: float,
    perturb_factor: float,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(space):
        spec = space[name]
        value = params.get(name)
        if hp.is_leaf(spec):
            out[name] = _explore_leaf(spec, value, rng, resample_probability, perturb_factor)
        elif isinstance(spec, Mapping):
            nested = value if isinstance(value, Mapping) else {}
            out[name] = _explore_group(spec, nested, rng, resample_probability, perturb_factor)
        else:
            out[name] = spec
    return out


def _explore_leaf(
    spec: Mapping[str, Any], value: Any, rng: random.Random, resample_probability: float, factor: float
) -> Any:
    kind = spec["type"]
    if kind == "const":
        return spec["val"]
    resample = rng.random() < resample_probability
    up = rng.random() < 0.5
    if resample or value is None:
        return hp.sample_leaf(spec, rng)
    if kind == "categorical":
        return value
    scaled = float(value) * (1.0 + factor if up else 1.0 - factor)
    low, high = _bounds(spec)
    scaled = min(max(scaled, low), high)
    return int(round(scaled)) if kind == "int" else scaled


def _bounds(spec: Mapping[str, Any]) -> tuple[float, float]:
    if spec["type"] == "log":
        base = float(spec.get("base", 10.0))
        ends = sorted((base ** float(spec["minval"]), base ** float(spec["maxval"])))
        return float(ends[0]), float(ends[1])
    return float(spec["minval"]), float(spec["maxval"])


def _tid(member: PbtTrial) -> int:
    if member.trial_id is None:  # only created trials report, pause or get operations
        raise ValueError(f"request {member.request_id} has no trial yet")
    return member.trial_id

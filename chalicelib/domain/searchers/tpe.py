"""Tree-structured Parzen estimator (NNI's default tuner) through Optuna's `TPESampler`.

The search runs like `random` (`max_trials` trials, `max_concurrent_trials` at a time, each to
`spec.max_length`, invalid_hp trials replaced) but each new trial's hyperparameters are asked of an
in-memory Optuna study holding every earlier trial: finished ones with their final value (the last
metric they reported; a trial that never reported one counts as failed), running ones as running.

Determined's types map to Optuna distributions over flattened, dotted names: `int` to
`IntDistribution`, `double` to `FloatDistribution`, `log` to a log-scaled `FloatDistribution` over
`base**minval .. base**maxval`, `categorical` to a `CategoricalDistribution` over the indices of its
`vals` (so any JSON value can be a choice); `const` and bare values are not searched.

The state is plain JSON: each request keeps the Optuna params it was given, and each trial its last
metric. Every ask rebuilds the study from that record (`create_trial` + `add_trial`, in request order)
with a `TPESampler` seeded from the experiment seed and the request number, so a searcher restored from
a snapshot proposes exactly what the original would have.

With `until_stopped` an exited trial is forgotten (see `random.py`): a completed one first moves to
`history` as a row `[request number, metric, *params in sorted key order]` (a failed or invalid_hp one
carries nothing TPE uses: Optuna's TPE only models complete trials). `history` is a sliding window: the
latest `HISTORY_LATEST` results plus the best `HISTORY_BEST` ever seen. Optuna's TPE splits the results
into the best `min(ceil(n / 10), 25)` ("good") and the rest, so with the best 25 always kept and at
least 250 results in the window, the "good" density is exactly what the whole run would give, and the
"bad" density (and the weights, which favour the latest 25 anyway) comes from the recent past. The
study holds the rows and the running requests in request order, as a bounded search's does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chalicelib.domain import hparams as hp
from chalicelib.domain.searchers.random import PoolSearcher, PoolTrial

if TYPE_CHECKING:  # optuna is imported on first use: it adds ~0.3 s to every cold start otherwise
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

_TUNABLE = ("int", "double", "log", "categorical")
HISTORY_LATEST = 250  # until_stopped: the latest completed results the model keeps ...
HISTORY_BEST = 25  # ... and the best ones, whenever they came (Optuna's TPE's largest "good" set)


def distributions(space: Mapping[str, Any]) -> dict[str, BaseDistribution]:
    """The Optuna distribution of every searched hyperparameter, by dotted path."""
    out: dict[str, BaseDistribution] = {}
    _collect(space, (), out)
    return out


def _collect(space: Mapping[str, Any], prefix: tuple[str, ...], out: dict[str, BaseDistribution]) -> None:
    for name in sorted(space):
        spec = space[name]
        path = (*prefix, name)
        if hp.is_leaf(spec):
            if spec["type"] in _TUNABLE:
                key = ".".join(path)
                if key in out:
                    raise ValueError(f"hyperparameter {key!r} is named twice once flattened")
                out[key] = _distribution(spec)
        elif isinstance(spec, Mapping):
            _collect(spec, path, out)


def _distribution(spec: Mapping[str, Any]) -> BaseDistribution:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    kind = spec["type"]
    if kind == "int":
        return IntDistribution(int(spec["minval"]), int(spec["maxval"]))
    if kind == "double":
        return FloatDistribution(float(spec["minval"]), float(spec["maxval"]))
    if kind == "log":
        base = float(spec.get("base", 10.0))
        low, high = sorted((base ** float(spec["minval"]), base ** float(spec["maxval"])))
        return FloatDistribution(float(low), float(high), log=True)
    return CategoricalDistribution(list(range(len(spec["vals"]))))


def to_hparams(
    space: Mapping[str, Any], params: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Un-flatten Optuna params into a nested hyperparameter sample (constants filled in)."""
    out: dict[str, Any] = {}
    for name in sorted(space):
        spec = space[name]
        path = (*prefix, name)
        if hp.is_leaf(spec):
            kind = spec["type"]
            if kind not in _TUNABLE:
                out[name] = copy.deepcopy(spec["val"])  # const
                continue
            value = params[".".join(path)]
            if kind == "int":
                out[name] = int(value)
            elif kind == "categorical":
                out[name] = copy.deepcopy(list(spec["vals"])[int(value)])
            else:
                out[name] = float(value)
        elif isinstance(spec, Mapping):
            out[name] = to_hparams(spec, params, path)
        else:
            out[name] = spec
    return out


def _sampler_seed(seed: int, index: int) -> int:
    return (int(seed) * 1_000_003 + int(index)) % 2**31


@dataclass
class TPESearcher(PoolSearcher):
    name: str = "tpe"
    history: list[list[Any]] = field(default_factory=list)  # until_stopped: [index, metric, *params]

    def __post_init__(self) -> None:
        self._distributions: dict[str, BaseDistribution] | None = None

    def distributions(self) -> dict[str, BaseDistribution]:
        if self._distributions is None:
            self._distributions = distributions(self.spec.space)
        return self._distributions

    def propose(self, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
        study = self.study(index)
        trial = study.ask(self.distributions())
        params = {key: trial.params[key] for key in sorted(trial.params)}
        return to_hparams(self.spec.space, params), {"params": params}

    def study(self, index: int | None = None) -> optuna.Study:
        """An in-memory study holding every request so far (until_stopped: the `history` window and the
        running requests), its sampler seeded for request `index`."""
        import optuna
        from optuna.study import StudyDirection

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        index = len(self.requests) if index is None else index
        direction = StudyDirection.MINIMIZE if self.spec.smaller_is_better else StudyDirection.MAXIMIZE
        sampler = optuna.samplers.TPESampler(seed=_sampler_seed(self.spec.seed, index))
        study = optuna.create_study(direction=direction, sampler=sampler)
        trials = [(row[0], self._frozen_row(row)) for row in self.history]
        trials += [(request.index, self._frozen(request)) for request in self.requests]
        for _, trial in sorted(trials, key=lambda pair: int(pair[0])):
            study.add_trial(trial)
        return study

    def columns(self) -> list[str]:
        """The params' keys, in the order of a history row's values."""
        return sorted(self.distributions())

    def snapshot(self) -> dict[str, Any]:
        if not self.until_stopped:
            return super().snapshot()
        return {**super().snapshot(), "history": [list(row) for row in self.history]}

    def _restored(self, snapshot: Mapping[str, Any]) -> None:
        self.history = [list(row) for row in snapshot.get("history", [])]
        super()._restored(snapshot)

    def _forget(self, request: PoolTrial) -> None:
        """Keep a completed trial's result in `history` (the sliding window) before it is forgotten."""
        params = request.extra.get("params") or {}
        if request.metric is not None and not request.invalid_hp and set(params) == set(self.columns()):
            self.history.append([request.index, request.metric, *(params[key] for key in self.columns())])
            self._trim_history()
        super()._forget(request)

    def _trim_history(self) -> None:
        if len(self.history) <= HISTORY_LATEST + HISTORY_BEST:
            return
        sign = 1.0 if self.spec.smaller_is_better else -1.0
        ranked = sorted(range(len(self.history)), key=lambda i: (sign * float(self.history[i][1]), i))
        keep = set(ranked[:HISTORY_BEST]) | set(range(len(self.history) - HISTORY_LATEST, len(self.history)))
        self.history = [row for i, row in enumerate(self.history) if i in keep]

    def _frozen_row(self, row: list[Any]) -> FrozenTrial:
        from optuna.trial import TrialState, create_trial

        params = dict(zip(self.columns(), row[2:], strict=True))
        distributions = {key: self.distributions()[key] for key in params}
        return create_trial(
            state=TrialState.COMPLETE, value=float(row[1]), params=params, distributions=distributions
        )

    def _frozen(self, request: PoolTrial) -> FrozenTrial:
        from optuna.trial import TrialState, create_trial

        params = dict(request.extra.get("params") or {})
        distributions = {key: self.distributions()[key] for key in params}
        if not request.exited:
            return create_trial(state=TrialState.RUNNING, params=params, distributions=distributions)
        if request.invalid_hp or request.metric is None:
            return create_trial(state=TrialState.FAIL, params=params, distributions=distributions)
        return create_trial(
            state=TrialState.COMPLETE, value=request.metric, params=params, distributions=distributions
        )

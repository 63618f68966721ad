"""The `searcher` section, discriminated on `name`.

Determined's searchers as of its current reference: `single`, `grid`, `random`, `adaptive_asha`,
plus `tpe` (Stratus' own, shaped like `random`) for later work. Every searcher requires `metric`.

`max_length` is optional for `single`, `grid`, `random` and `tpe`: Determined has deprecated it in
favour of the training loop deciding its own length; when it is set, Stratus passes it to the trial.
`adaptive_asha` needs its rung unit: either the legacy `max_length`, or Determined's newer
`time_metric` + `max_time` (rungs measured in a reported metric such as `batches`) - exactly one form.

A `max_length` in records or epochs that the config cannot turn into batches is measured by the trial
in its own unit, as in Determined (`ExperimentConfig.searcher_length`).

`random` and `tpe` take `until_stopped: true` in place of `max_trials` (Stratus extension, what an NNI
config without `maxTrialNumber` becomes): trials keep coming until the experiment is stopped.

`hyperband` and `bohb` (Stratus' own, after NNI's advisors of those names) need `max_length`, Hyperband's
`R`: the brackets of Li et al. (2018) with `divisor` as `eta` (default 3, at least 2); `iterations`
Hyperband iterations (each runs every bracket once), or brackets in order until `max_trials`
configurations (iterations repeating as needed), or one iteration when neither is set; `max_rungs` caps
the rungs of a bracket (NNI's BOHB `min_budget`); `max_concurrent_trials` caps the running trials across
brackets. Promoted trials continue from their checkpoint. With `until_stopped: true` in place of
`max_trials` and `iterations` (an NNI config without `maxTrialNumber`), iterations repeat until the
experiment is stopped, `max_concurrent_trials` (then at least 1) at a time. `bohb` adds Falkner et al.'s model settings
(hpbandster's and NNI's defaults): `top_n_percent` (15), `num_samples` (64), `random_fraction` (1/3),
`bandwidth_factor` (3), `min_bandwidth` (0.001), `min_points_in_model` (unset: the number of searched
hyperparameters + 1). See `chalicelib/domain/searchers/hyperband.py` and `bohb.py`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, model_validator

from chalicelib.config._base import PositiveLength, StrictModel, custom_error, raise_problems

__all__ = [
    "SEARCHER_NAMES",
    "AdaptiveASHASearcher",
    "BOHBSearcher",
    "GridSearcher",
    "HyperbandSearcher",
    "PBTSearcher",
    "RandomSearcher",
    "SearcherConfig",
    "SingleSearcher",
    "TPESearcher",
]

SEARCHER_NAMES: tuple[str, ...] = (
    "single",
    "grid",
    "random",
    "adaptive_asha",
    "tpe",
    "pbt",
    "hyperband",
    "bohb",
)

DEFAULT_MAX_CONCURRENT_TRIALS = 16


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)


def _checkpoint_uuid(value: str) -> str:
    if not _UUID.match(value):
        raise custom_error(
            f'must be a checkpoint UUID like "0e5a9d51-…", got "{value}"; '
            "`det experiment list-checkpoints ID` shows them"
        )
    return value.lower()


class _Searcher(StrictModel):
    """What every searcher takes. `source_trial_id` / `source_checkpoint_uuid`: Determined's warm start,
    every trial starts from that trial's latest checkpoint (at the experiment's creation) or from that
    checkpoint (`chalicelib.services.warm_start`); at most one of them."""

    name: str
    metric: str = Field(min_length=1)
    smaller_is_better: bool = True
    source_trial_id: int | None = Field(default=None, ge=1)
    source_checkpoint_uuid: Annotated[str, AfterValidator(_checkpoint_uuid)] | None = None
    max_length: PositiveLength | None = None

    @model_validator(mode="after")
    def _one_warm_start_source(self) -> _Searcher:
        if self.source_trial_id is not None and self.source_checkpoint_uuid is not None:
            message = (
                "set either source_trial_id or source_checkpoint_uuid, not both (the source of every trial)"
            )
            raise_problems(self.name, [(("source_checkpoint_uuid",), message, self.source_checkpoint_uuid)])
        return self


class SingleSearcher(_Searcher):
    """One trial with the constant (or first) hyperparameter values."""

    name: Literal["single"] = "single"


class GridSearcher(_Searcher):
    """Every point of the grid (int/double/log hyperparameters need `count`)."""

    name: Literal["grid"] = "grid"
    max_concurrent_trials: int = Field(default=DEFAULT_MAX_CONCURRENT_TRIALS, ge=0)


class _TrialBudget(_Searcher):
    """`max_trials` trials, or with `until_stopped: true` (Stratus extension, what an NNI config
    without `maxTrialNumber` becomes) new trials until the experiment is stopped, keeping
    `max_concurrent_trials` (then at least 1) running; `max_concurrent_trials` 0 means unlimited."""

    max_trials: int | None = Field(default=None, ge=1)
    until_stopped: bool = False
    max_concurrent_trials: int = Field(default=DEFAULT_MAX_CONCURRENT_TRIALS, ge=0)

    @model_validator(mode="after")
    def _bounded_or_until_stopped(self) -> _TrialBudget:
        if self.until_stopped and self.max_trials is not None:
            message = "set either max_trials or until_stopped: true, not both"
            raise_problems(self.name, [(("until_stopped",), message, True)])
        if not self.until_stopped and self.max_trials is None:
            raise_problems(self.name, [(("max_trials",), "required", None)])
        if self.until_stopped and self.max_concurrent_trials == 0:
            message = "must be at least 1 with until_stopped: true (the number of trials kept running)"
            raise_problems(self.name, [(("max_concurrent_trials",), message, 0)])
        return self


class RandomSearcher(_TrialBudget):
    """`max_trials` random samples; `max_concurrent_trials` 0 means unlimited."""

    name: Literal["random"] = "random"


class TPESearcher(_TrialBudget):
    """Tree-structured Parzen estimator (Stratus extension; same fields as `random`)."""

    name: Literal["tpe"] = "tpe"


class AdaptiveASHASearcher(_Searcher):
    """Asynchronous successive halving over brackets (Determined's `adaptive_asha`)."""

    name: Literal["adaptive_asha"] = "adaptive_asha"
    max_trials: int = Field(ge=1)
    time_metric: str | None = Field(default=None, min_length=1)
    max_time: int | None = Field(default=None, ge=1)
    divisor: float = Field(default=4.0, gt=1)
    max_rungs: int = Field(default=5, ge=1)
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    bracket_rungs: list[Annotated[int, Field(ge=1)]] | None = None
    stop_once: bool = False
    max_concurrent_trials: int = Field(default=DEFAULT_MAX_CONCURRENT_TRIALS, ge=0)

    @model_validator(mode="after")
    def _one_length_form(self) -> AdaptiveASHASearcher:
        has_length = self.max_length is not None
        has_time = self.time_metric is not None or self.max_time is not None
        if has_length and has_time:
            raise_problems(
                "adaptive_asha",
                [((), "set either max_length, or time_metric and max_time, not both", None)],
            )
        if not has_length and not has_time:
            raise_problems(
                "adaptive_asha",
                [((), "adaptive_asha needs max_length, or time_metric and max_time", None)],
            )
        if self.time_metric is None and self.max_time is not None:
            raise_problems("adaptive_asha", [(("time_metric",), "required with max_time", None)])
        if self.max_time is None and self.time_metric is not None:
            raise_problems("adaptive_asha", [(("max_time",), "required with time_metric", None)])
        return self

    @property
    def uses_time_metric(self) -> bool:
        """True for the `time_metric` + `max_time` form, False for `max_length`."""
        return self.time_metric is not None


class PBTReplaceFunction(StrictModel):
    """Which trials a PBT round replaces: the worst `truncate_fraction` of the population."""

    truncate_fraction: float = Field(ge=0.0, le=0.5)


class PBTExploreFunction(StrictModel):
    """How a replacement's hyperparameters are drawn from its parent's: each one resampled from the
    space with `resample_probability`, else multiplied by `1 + perturb_factor` or `1 - perturb_factor`."""

    resample_probability: float = Field(ge=0.0, le=1.0)
    perturb_factor: float = Field(ge=0.0, le=1.0)


class PBTSearcher(_Searcher):
    """Population based training (Determined's `pbt`): `population_size` trials train `length_per_round`
    per round; after each round but the last, the worst are replaced by trials that start from the
    checkpoints of the best, with explored hyperparameters."""

    name: Literal["pbt"] = "pbt"
    population_size: int = Field(ge=1)
    num_rounds: int = Field(ge=1)
    length_per_round: PositiveLength
    replace_function: PBTReplaceFunction
    explore_function: PBTExploreFunction


class HyperbandSearcher(_Searcher):
    """Hyperband's brackets of synchronous successive halving (Li et al. 2018; NNI's `Hyperband`)."""

    name: Literal["hyperband"] = "hyperband"
    max_length: PositiveLength
    divisor: float = Field(default=3.0, ge=2)
    max_trials: int | None = Field(default=None, ge=1)
    iterations: int | None = Field(default=None, ge=1)
    max_rungs: int | None = Field(default=None, ge=1)
    until_stopped: bool = False
    max_concurrent_trials: int = Field(default=DEFAULT_MAX_CONCURRENT_TRIALS, ge=0)

    @model_validator(mode="after")
    def _until_stopped_alone(self) -> HyperbandSearcher:
        if not self.until_stopped:
            return self
        for key in ("max_trials", "iterations"):
            if getattr(self, key) is not None:
                message = f"set either {key} or until_stopped: true, not both"
                raise_problems(self.name, [(("until_stopped",), message, True)])
        if self.max_concurrent_trials == 0:
            message = "must be at least 1 with until_stopped: true (the number of trials kept running)"
            raise_problems(self.name, [(("max_concurrent_trials",), message, 0)])
        return self


class BOHBSearcher(HyperbandSearcher):
    """Hyperband with a TPE-style kernel density model proposing configurations (Falkner et al. 2018)."""

    name: Literal["bohb"] = "bohb"  # type: ignore[assignment]
    top_n_percent: int = Field(default=15, ge=1, le=99)
    num_samples: int = Field(default=64, ge=1)
    random_fraction: float = Field(default=1 / 3, ge=0, le=1)
    bandwidth_factor: float = Field(default=3.0, gt=0)
    min_bandwidth: float = Field(default=1e-3, gt=0)
    min_points_in_model: int | None = Field(default=None, ge=1)


def _searcher_name(value: Any) -> str | None:
    """The union tag of a raw (or already built) searcher: its `name`."""
    if isinstance(value, _Searcher):
        return value.name
    if isinstance(value, dict):
        name = value.get("name")
        return name if isinstance(name, str) else None
    return None


SearcherConfig = Annotated[
    Annotated[SingleSearcher, Tag("single")]
    | Annotated[GridSearcher, Tag("grid")]
    | Annotated[RandomSearcher, Tag("random")]
    | Annotated[AdaptiveASHASearcher, Tag("adaptive_asha")]
    | Annotated[TPESearcher, Tag("tpe")]
    | Annotated[PBTSearcher, Tag("pbt")]
    | Annotated[HyperbandSearcher, Tag("hyperband")]
    | Annotated[BOHBSearcher, Tag("bohb")],
    Discriminator(_searcher_name),
]
"""Any searcher config; `config.searcher.name` tells which."""

AnySearcher = (
    SingleSearcher
    | GridSearcher
    | RandomSearcher
    | AdaptiveASHASearcher
    | TPESearcher
    | HyperbandSearcher
    | BOHBSearcher
    | PBTSearcher
)

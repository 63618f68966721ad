"""An experiment's searcher inputs from its config: the search space, the searcher's settings, the total
length in the searcher's unit, the seed; and the unit its trials measure lengths in."""

from __future__ import annotations

from chalicelib import config as cfg
from chalicelib.domain import searchers


def time_metric(config: cfg.ExperimentConfig) -> str | None:
    """What the trial measures the searcher's lengths in when it is not batches (adaptive_asha's
    `time_metric`, or `records` / `epochs` that do not convert into batches), or None for batches."""
    length = config.searcher_length()
    return length.unit if length is not None and length.unit != "batches" else None


def search_spec(config: cfg.ExperimentConfig) -> searchers.SearchSpec:
    """The searcher's inputs from an experiment's config."""
    searcher = config.searcher
    length = config.searcher_length()
    return searchers.SearchSpec(
        space=config.model_dump(mode="json", include={"hyperparameters"})["hyperparameters"],
        settings=searcher.model_dump(mode="json"),
        max_length=length.value if length is not None else None,
        seed=config.reproducibility.experiment_seed or 0,
    )

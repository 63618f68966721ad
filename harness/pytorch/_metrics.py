"""The metrics the trainer reports: a batch's training metrics, their average across ranks, the
validation metrics (batch by batch on every rank, or the full dataset on the chief) and the searcher
metric picked from them."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from stratus.harness.errors import TrialDefinitionError
from stratus.harness.pytorch._context import PyTorchTrialContext
from stratus.harness.pytorch._data import validation_loader
from stratus.harness.pytorch._trial import (
    PyTorchTrial,
    Reducer,
    evaluate_batch_takes_index,
    overrides,
    reduce_metrics,
    scalar,
)


def training_metrics(out: Any) -> dict[str, Any]:
    """The metrics of one `train_batch` result (a mapping of scalars, a bare loss, or None), tensors kept
    and detached: reading a CUDA tensor's value waits for the GPU, so `metric_values` reads them once per
    reporting period, not after every batch. Called after every batch: the usual result, a dict of
    one-element tensors by name, takes the shortest path."""
    if out is None:
        return {}
    if type(out) is not dict:
        out = dict(out) if isinstance(out, Mapping) else {"loss": out}
    tensor = _tensor_type()
    kept = {}
    for name, value in out.items():
        if type(name) is not str:
            name = str(name)
        kept[name] = value.detach() if type(value) is tensor and value.numel() == 1 else _kept(name, value)
    return kept


@functools.cache
def _tensor_type() -> Any:
    import torch

    return torch.Tensor


def metric_values(per_batch: list[dict[str, Any]]) -> list[dict[str, float]]:
    """`training_metrics` of several batches as numbers. Where every value is a zero-dimensional
    floating-point tensor of one dtype on one device (a loss, an accuracy), they are read in one go:
    one copy from the GPU instead of one per value."""
    tensor = _tensor_type()
    values = [value for metrics in per_batch for value in metrics.values()]
    if len(values) > 1 and all(type(v) is tensor for v in values) and len({v.dtype for v in values}) == 1:
        import torch

        try:
            stacked = torch.stack(values)  # refuses tensors of other shapes or on other devices
        except RuntimeError:
            stacked = None
        if stacked is not None and stacked.dim() == 1 and stacked.is_floating_point():
            numbers = iter(stacked.tolist())
            return [{name: next(numbers) for name in metrics} for metrics in per_batch]
    return [{name: scalar(name, value) for name, value in metrics.items()} for metrics in per_batch]


def _kept(name: str, value: Any) -> Any:
    numel = getattr(value, "numel", None)
    if numel is None or not hasattr(value, "detach"):
        return scalar(name, value)
    if numel() != 1:
        raise TrialDefinitionError(
            f"metric {name!r} is not a scalar (a tensor of {numel()} elements); return one number per name."
        )
    return value.detach()


def average_across_ranks(context: PyTorchTrialContext, metrics: dict[str, Any]) -> dict[str, Any]:
    """`metrics` averaged over every rank that has some (this rank's alone on one rank)."""
    dist = context.distributed
    if dist.size == 1:
        return metrics
    every = [m for m in dist.allgather(metrics) if m]
    return reduce_metrics(every, Reducer.AVG) if every else metrics


def evaluate(trial: PyTorchTrial, context: PyTorchTrialContext, data: Any) -> dict[str, Any]:
    """The validation metrics of `trial` on `data`, the same on every rank."""
    dist = context.distributed
    seed = context.get_trial_seed()
    if overrides(trial, "evaluate_full_dataset"):
        metrics: dict[str, Any] | None = None
        if dist.is_chief:
            loader = validation_loader(data, num_replicas=1, rank=0, seed=seed)
            found = trial.evaluate_full_dataset(loader)
            metrics = {str(k): scalar(str(k), v) for k, v in dict(found).items()}
        shared = dist.broadcast(metrics)
        return dict(shared or {})
    loader = validation_loader(data, num_replicas=dist.size, rank=dist.rank, seed=seed)
    with_index = evaluate_batch_takes_index(trial)
    per_batch: list[dict[str, float]] = []
    for index, batch in enumerate(loader):
        moved = context.to_device(batch)
        found = trial.evaluate_batch(moved, index) if with_index else trial.evaluate_batch(moved)
        per_batch.append({str(k): scalar(str(k), v) for k, v in dict(found).items()})
    gathered = [m for rank_list in dist.allgather(per_batch) for m in rank_list]
    if not gathered:
        raise TrialDefinitionError("the validation data gave no batch; check build_validation_data_loader().")
    return reduce_metrics(gathered, trial.evaluation_reducer())


def searcher_metric(config: Mapping[str, Any], metrics: Mapping[str, Any]) -> Any:
    """The value of the config's `searcher.metric` in `metrics` (the first metric when none is named)."""
    name = (config.get("searcher") or {}).get("metric")
    if not name:
        return next(iter(metrics.values())) if metrics else 0.0
    if name not in metrics:
        raise TrialDefinitionError(
            f"the searcher metric {name!r} is not among the validation metrics ({', '.join(metrics)}); "
            "return it from evaluate_batch / evaluate_full_dataset or change searcher.metric."
        )
    return metrics[name]

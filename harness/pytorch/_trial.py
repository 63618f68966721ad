"""What a trial class implements (Determined's `PyTorchTrial`), its callbacks and metric reducers."""

from __future__ import annotations

import abc
import enum
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from stratus.harness.errors import TrialDefinitionError

if TYPE_CHECKING:
    from stratus.harness.pytorch._context import PyTorchTrialContext
    from stratus.harness.pytorch._data import DataLoader


class PyTorchTrial(abc.ABC):
    """Subclass it and implement the training and validation of one batch:

        class MyTrial(PyTorchTrial):
            def __init__(self, context: PyTorchTrialContext) -> None:
                self.context = context
                self.model = context.wrap_model(build_model(context.get_hparam("hidden_size")))
                self.opt = context.wrap_optimizer(torch.optim.Adam(self.model.parameters()))

            def build_training_data_loader(self) -> DataLoader: ...
            def build_validation_data_loader(self) -> DataLoader: ...

            def train_batch(self, batch, epoch_idx, batch_idx):
                loss = ...
                self.context.backward(loss)
                self.context.step_optimizer(self.opt)
                return {"loss": loss}

            def evaluate_batch(self, batch):              # or evaluate_full_dataset(self, data_loader)
                return {"validation_accuracy": ...}

    The trainer moves every batch to `context.device` before calling these.
    """

    trial_context_class: Any = None  # Determined sets its context class here; kept for compatibility

    @abc.abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None:
        """Build models, optimizers and schedulers here, wrapped with `context.wrap_*`."""

    @abc.abstractmethod
    def build_training_data_loader(self) -> DataLoader | Any:
        """A `stratus.harness.pytorch.DataLoader` or a `torch.utils.data.DataLoader`; both resume exactly (ours
        skips the batches already trained without reading them, torch's reads its epoch's again)."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> DataLoader | Any:
        """The validation data, like `build_training_data_loader`."""

    @abc.abstractmethod
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Mapping[str, Any] | Any:
        """Train on one batch; return a dict of metrics (or the loss tensor, reported as `loss`).

        `batch_idx` counts every batch trained so far (it does not restart with each epoch)."""

    def evaluate_batch(self, batch: Any, batch_idx: int = 0) -> Mapping[str, Any]:
        """Metrics of one validation batch, reduced over batches by `evaluation_reducer()` (mean)."""
        raise NotImplementedError

    def evaluate_full_dataset(self, data_loader: Any) -> Mapping[str, Any]:
        """Metrics of the whole validation set (instead of `evaluate_batch`; run on the chief only)."""
        raise NotImplementedError

    def evaluation_reducer(self) -> Reducer | Mapping[str, Reducer]:
        """How `evaluate_batch` metrics are combined: one reducer, or one per metric name."""
        return Reducer.AVG

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        """Named callbacks; their `state_dict()` is saved in checkpoints under their name."""
        return {}

    def get_batch_length(self, batch: Any) -> int:
        """Records in `batch` (the first dimension of its first tensor by default)."""
        from stratus.harness.pytorch._data import batch_length

        return batch_length(batch)


class PyTorchCallback:
    """Hooks the trainer calls; override the ones you need (Determined's `PyTorchCallback`)."""

    def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
        """Before training starts (after any checkpoint is restored)."""

    def on_trial_shutdown(self) -> None:
        """When the trainer is done, however it ends."""

    def on_training_start(self) -> None:
        """Before the first training batch of this process."""

    def on_training_epoch_start(self, epoch_idx: int) -> None:
        """Before the first batch of an epoch."""

    def on_training_epoch_end(self, epoch_idx: int) -> None:
        """After the last batch of an epoch."""

    def on_training_workload_end(self, avg_metrics: dict[str, Any], batch_metrics: Any) -> None:
        """After each chunk of training batches, with its averaged metrics."""

    def on_validation_start(self) -> None:
        """Before a validation."""

    def on_validation_end(self, metrics: dict[str, Any]) -> None:
        """After a validation, with its metrics."""

    def on_checkpoint_save_start(self, checkpoint: dict[str, Any]) -> None:
        """Before the checkpoint dict is written; add to it here."""

    def on_checkpoint_load_start(self, checkpoint: dict[str, Any]) -> None:
        """After the checkpoint dict is read, before the trainer restores from it."""

    def on_checkpoint_write_end(self, checkpoint_dir: str) -> None:
        """After the checkpoint files are written into `checkpoint_dir`."""

    def on_checkpoint_upload_end(self, uuid: str) -> None:
        """After the checkpoint is stored as `uuid`."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict()` gave."""


class Reducer(enum.Enum):
    """How per-batch validation metrics are combined (Determined's `Reducer`)."""

    AVG = "avg"
    SUM = "sum"
    MAX = "max"
    MIN = "min"


_REDUCE: dict[Reducer, Callable[[Sequence[float]], float]] = {
    Reducer.AVG: lambda xs: math.fsum(xs) / len(xs),
    Reducer.SUM: math.fsum,
    Reducer.MAX: max,
    Reducer.MIN: min,
}


def reduce_metrics(
    per_batch: Sequence[Mapping[str, Any]], reducer: Reducer | Mapping[str, Reducer]
) -> dict[str, Any]:
    """Combine per-batch metric dicts, name by name (names missing from some batches use the others)."""
    values: dict[str, list[float]] = {}
    for metrics in per_batch:
        for name, value in metrics.items():
            values.setdefault(name, []).append(scalar(name, value))
    out: dict[str, Any] = {}
    for name, xs in values.items():
        how = reducer.get(name, Reducer.AVG) if isinstance(reducer, Mapping) else reducer
        out[name] = _REDUCE[Reducer(how)](xs)
    return out


def scalar(name: str, value: Any) -> float:
    """A metric value as a float (tensors and numpy scalars unwrapped)."""
    if type(value) is float:
        return value
    if hasattr(value, "detach"):
        value = value.detach()
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError) as e:
            raise TrialDefinitionError(
                f"metric {name!r} is not a scalar ({e}); return one number per name."
            ) from e
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TrialDefinitionError(f"metric {name!r} is a {type(value).__name__}; return numbers.")
    return float(value)


def overrides(trial: PyTorchTrial, name: str) -> bool:
    """True when the trial's class implements `name` itself (not the base class's placeholder)."""
    return getattr(type(trial), name, None) is not getattr(PyTorchTrial, name)


def evaluate_batch_takes_index(trial: PyTorchTrial) -> bool:
    """Determined allows `evaluate_batch(self, batch)` and `evaluate_batch(self, batch, batch_idx)`."""
    params = inspect.signature(trial.evaluate_batch).parameters
    return len(params) >= 2 or any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values())

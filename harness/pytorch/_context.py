"""What a `PyTorchTrial` is given (Determined's `PyTorchTrialContext`): hyperparameters, the device, and
the wrappers that let the trainer checkpoint, restore and distribute the model."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from stratus.harness.core import Context
from stratus.harness.core._distributed import DistributedContext
from stratus.harness.errors import TrialDefinitionError
from stratus.harness.pytorch._data import to_device
from stratus.harness.pytorch._lr_scheduler import LRScheduler

if TYPE_CHECKING:
    import torch


class PyTorchTrialContext:
    """Made by `stratus.harness.pytorch.init()`; see the methods for what each does."""

    def __init__(
        self,
        core: Context,
        *,
        hparams: Mapping[str, Any],
        config: Mapping[str, Any],
        trial_seed: int = 0,
        trial_id: int = 0,
        experiment_id: int = 0,
        aggregation_frequency: int = 1,
        device: torch.device | None = None,
    ) -> None:
        self._core = core
        self._hparams = dict(hparams)
        self._config = dict(config)
        self._trial_seed = trial_seed
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        self._aggregation_frequency = max(1, int(aggregation_frequency))
        self.device: torch.device = device if device is not None else _default_device(core.distributed)
        self.models: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self.scalers: list[Any] = []
        self._stop_requested = False
        self._current_batch = 0
        self._batches_per_epoch = 0
        self._optimizer_steps = 0

    # ---- what the trial reads ------------------------------------------------------------------

    @property
    def distributed(self) -> DistributedContext:
        return self._core.distributed

    @property
    def core(self) -> Context:
        """The Core API context the trainer reports through."""
        return self._core

    def get_hparams(self) -> dict[str, Any]:
        return dict(self._hparams)

    def get_hparam(self, name: str) -> Any:
        if name not in self._hparams:
            known = ", ".join(sorted(self._hparams)) or "none"
            raise TrialDefinitionError(
                f"hyperparameter {name!r} is not defined (defined: {known}); add it to the config's "
                "hyperparameters."
            )
        return self._hparams[name]

    def get_experiment_config(self) -> dict[str, Any]:
        return dict(self._config)

    def get_data_config(self) -> dict[str, Any]:
        data = self._config.get("data")
        return dict(data) if isinstance(data, Mapping) else {}

    def get_trial_id(self) -> int:
        return self._trial_id

    def get_experiment_id(self) -> int:
        return self._experiment_id

    def get_trial_seed(self) -> int:
        return self._trial_seed

    def get_global_batch_size(self) -> int:
        """The `global_batch_size` hyperparameter (Determined requires it for PyTorchTrial)."""
        value = self._hparams.get("global_batch_size")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TrialDefinitionError(
                f"the global_batch_size hyperparameter is {value!r}; set it to a whole number >= 1 "
                "(PyTorchTrial needs it to size batches and convert records and epochs)."
            )
        return value

    def get_per_slot_batch_size(self) -> int:
        """`global_batch_size` divided by the number of processes (rounded down)."""
        per_slot = self.get_global_batch_size() // self.distributed.size
        if per_slot < 1:
            raise TrialDefinitionError(
                f"global_batch_size {self.get_global_batch_size()} is smaller than the "
                f"{self.distributed.size} processes of the trial; raise it."
            )
        return per_slot

    def get_enable_tensorboard_logging(self) -> bool:
        return False

    def to_device(self, data: Any) -> Any:
        """`data` with its tensors on this process's device. On a machine where the CPU is the only
        device a tensor can be on, every tensor is already there and `data` is returned as it is."""
        if self._on_cpu_only():
            return data
        return to_device(data, self.device)

    def _on_cpu_only(self) -> bool:
        """Whether this process's device is the CPU and no other device exists (nothing to move)."""
        return self.device.type == "cpu" and _cpu_only()

    def current_train_batch(self) -> int:
        """The index of the batch being trained (batches trained before it)."""
        return self._current_batch

    def current_train_epoch(self) -> int:
        return self._current_batch // self._batches_per_epoch if self._batches_per_epoch else 0

    def is_epoch_start(self) -> bool:
        return bool(self._batches_per_epoch) and self._current_batch % self._batches_per_epoch == 0

    def is_epoch_end(self) -> bool:
        return bool(self._batches_per_epoch) and (self._current_batch + 1) % self._batches_per_epoch == 0

    def get_stop_requested(self) -> bool:
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the trainer to stop after this chunk of batches: it checkpoints and exits with code 0."""
        self._stop_requested = bool(stop_requested)

    # ---- wrappers ------------------------------------------------------------------------------

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model on `device` (in DistributedDataParallel with several processes); saved in checkpoints."""
        model = model.to(self.device)
        if self.distributed.size > 1 and self.distributed.has_process_group:
            from torch.nn.parallel import DistributedDataParallel

            device_ids = [self.device.index] if self.device.type == "cuda" else None
            model = DistributedDataParallel(model, device_ids=device_ids)
        self.models.append(model)
        return model

    def wrap_optimizer(
        self, optimizer: torch.optim.Optimizer, backward_passes_per_step: int = 1, **_: Any
    ) -> torch.optim.Optimizer:
        """The optimizer, saved in checkpoints (`backward_passes_per_step` is accepted; gradients simply
        accumulate until `step_optimizer`)."""
        if backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step={backward_passes_per_step!r} must be >= 1.")
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self,
        lr_scheduler: Any,
        step_mode: LRScheduler.StepMode = LRScheduler.StepMode.STEP_EVERY_EPOCH,
        frequency: int = 1,
    ) -> Any:
        """The scheduler, unchanged; the trainer steps it per `step_mode` and saves it in checkpoints."""
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_scaler(self, scaler: Any) -> Any:
        """A `torch.amp.GradScaler`, saved in checkpoints; pass it to `step_optimizer(scaler=...)`."""
        self.scalers.append(scaler)
        return scaler

    def backward(
        self,
        loss: torch.Tensor,
        gradient: torch.Tensor | None = None,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> None:
        loss.backward(gradient=gradient, retain_graph=retain_graph, create_graph=create_graph)  # type: ignore[no-untyped-call]

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[Any], None] | None = None,
        auto_zero_grads: bool = True,
        scaler: Any = None,
    ) -> None:
        """Step `optimizer` (every `aggregation_frequency` batches): `clip_grads(params)` first, then
        zero the gradients after (with `auto_zero_grads`)."""
        if (self._current_batch + 1) % self._aggregation_frequency != 0:
            return
        if clip_grads is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            clip_grads([p for group in optimizer.param_groups for p in group["params"]])
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        self._optimizer_steps += 1
        for wrapped in self.lr_schedulers:
            if (
                wrapped.step_mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP
                and self._optimizer_steps % wrapped.frequency == 0
            ):
                wrapped.step()

    # ---- for the trainer -----------------------------------------------------------------------

    def _set_position(self, batch: int, batches_per_epoch: int) -> None:
        self._current_batch = batch
        self._batches_per_epoch = batches_per_epoch


@functools.cache
def _cpu_only() -> bool:
    """Whether no accelerator (CUDA or Apple's MPS) is available to hold a tensor."""
    import torch

    mps = getattr(torch.backends, "mps", None)
    return not torch.cuda.is_available() and not (mps is not None and mps.is_available())


def _default_device(distributed: DistributedContext) -> torch.device:
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", distributed.local_rank % max(torch.cuda.device_count(), 1))
    return torch.device("cpu")

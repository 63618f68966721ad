"""The trainer's checkpoint: what it saves (`state_dict.pth`) and how it is restored.

A checkpoint holds the state of every model, optimizer, LR scheduler, scaler and callback, every RNG
state (random, numpy, torch, CUDA) and the trainer's own progress (with a plain torch loader, where its
epoch started and the RNG states then: harness/pytorch/_plain_loader.py; stopped between two optimizer
steps of an `aggregation_frequency` > 1, the gradients accumulated so far); its metadata carries
`steps_completed` (batches trained). Only the chief writes the file; every rank learns its storage id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratus.harness.errors import CheckpointError
from stratus.harness.pytorch._context import PyTorchTrialContext
from stratus.harness.pytorch._rng import rng_state, set_rng_state
from stratus.harness.pytorch._trial import PyTorchCallback

if TYPE_CHECKING:
    import torch

STATE_FILE = "state_dict.pth"


@dataclass
class TrainerProgress:
    """Where the trainer stands: batches trained, the batch of the last validation and its metrics."""

    batches: int = 0
    validated_at: int = -1
    last_validation: dict[str, Any] = field(default_factory=dict)
    trial_id: int | None = None  # the trial that wrote the checkpoint (None: an older checkpoint)
    #: where a plain torch loader stands (`PlainLoaderStream.position()`); None for our DataLoader
    data_position: dict[str, Any] | None = None


def save_checkpoint(
    context: PyTorchTrialContext, callbacks: Mapping[str, PyTorchCallback], progress: TrainerProgress
) -> Any:
    """Write a checkpoint of everything the trial wraps at `progress`; the storage id, on every rank."""
    import torch

    state = _state(context, callbacks, progress)
    for callback in callbacks.values():
        callback.on_checkpoint_save_start(state)
    metadata = {
        "steps_completed": progress.batches,
        "framework": f"torch-{torch.__version__}",
        "format": "pickle",
    }
    dist = context.distributed
    with context.core.checkpoint.store_path(metadata) as (path, storage_id):
        if dist.is_chief:
            torch.save(state, path / STATE_FILE)
        for callback in callbacks.values():
            callback.on_checkpoint_write_end(str(path))
    storage_id = dist.broadcast(storage_id)
    for callback in callbacks.values():
        callback.on_checkpoint_upload_end(storage_id)
    return storage_id


def restore_checkpoint(
    context: PyTorchTrialContext, callbacks: Mapping[str, PyTorchCallback], storage_id: str
) -> TrainerProgress:
    """Load checkpoint `storage_id` into everything the trial wraps; the progress it was saved at."""
    import torch

    with context.core.checkpoint.restore_path(storage_id) as path:
        file = Path(path) / STATE_FILE
        if not file.is_file():
            raise CheckpointError(
                f"checkpoint {storage_id} has no {STATE_FILE}; it was not written by Trainer."
            )
        # Our own checkpoint, holding RNG states (numpy arrays, tuples): not weights only.
        state = torch.load(file, map_location=context.device, weights_only=False)
    for callback in callbacks.values():
        callback.on_checkpoint_load_start(state)
    _load_all("models", [_unwrap(m) for m in context.models], state.get("models_state_dict", []))
    _load_all("optimizers", context.optimizers, state.get("optimizers_state_dict", []))
    _load_all("lr_schedulers", context.lr_schedulers, state.get("lr_schedulers_state_dict", []))
    _load_all("scalers", context.scalers, state.get("scalers_state_dict", []))
    for name, callback in callbacks.items():
        if name in state.get("callbacks", {}):
            callback.load_state_dict(state["callbacks"][name])
    trainer = state.get("trainer_state", {})
    context._optimizer_steps = int(trainer.get("optimizer_steps", 0))
    if trainer.get("gradients"):
        _restore_gradients(context, trainer["gradients"])
    if "rng_state" in state:
        set_rng_state(state["rng_state"])
    writer = trainer.get("trial_id")
    return TrainerProgress(
        batches=int(trainer.get("batches_trained", 0)),
        validated_at=int(trainer.get("validated_at", -1)),
        last_validation=dict(trainer.get("last_validation") or {}),
        trial_id=int(writer) if writer is not None else None,
        data_position=trainer.get("data_position"),
    )


def _state(
    context: PyTorchTrialContext, callbacks: Mapping[str, PyTorchCallback], progress: TrainerProgress
) -> dict[str, Any]:
    return {
        "models_state_dict": [_unwrap(m).state_dict() for m in context.models],
        "optimizers_state_dict": [o.state_dict() for o in context.optimizers],
        "lr_schedulers_state_dict": [s.state_dict() for s in context.lr_schedulers],
        "scalers_state_dict": [s.state_dict() for s in context.scalers],
        "callbacks": {name: cb.state_dict() for name, cb in callbacks.items()},
        "rng_state": rng_state(),
        "trainer_state": {
            "batches_trained": progress.batches,
            "validated_at": progress.validated_at,
            "last_validation": progress.last_validation,
            "optimizer_steps": context._optimizer_steps,
            "trial_id": _trial_id(context),
            "data_position": progress.data_position,
            "gradients": _pending_gradients(context, progress.batches),
        },
    }


def _pending_gradients(context: PyTorchTrialContext, batches: int) -> list[dict[str, Any]] | None:
    """The gradients accumulated towards the next optimizer step (`aggregation_frequency` > 1, stopped
    between two steps), per model and parameter name; None when every step is done."""
    if context._aggregation_frequency <= 1 or batches % context._aggregation_frequency == 0:
        return None
    return [
        {name: p.grad for name, p in _unwrap(model).named_parameters() if p.grad is not None}
        for model in context.models
    ]


def _restore_gradients(context: PyTorchTrialContext, gradients: list[dict[str, Any]]) -> None:
    for model, saved in zip(context.models, gradients, strict=False):
        for name, parameter in _unwrap(model).named_parameters():
            if name in saved:
                parameter.grad = saved[name].to(parameter.device).clone()


def _trial_id(context: PyTorchTrialContext) -> int | None:
    info = context.core.info
    return info.trial.trial_id if info is not None else None


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def _load_all(what: str, targets: list[Any], states: list[Any]) -> None:
    if len(targets) != len(states):
        raise CheckpointError(
            f"the checkpoint holds {len(states)} {what} but the trial wraps {len(targets)}; restore it with the "
            "trial code that wrote it."
        )
    for target, state in zip(targets, states, strict=True):
        target.load_state_dict(state)

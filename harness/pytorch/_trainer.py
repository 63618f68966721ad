"""`Trainer`: runs a `PyTorchTrial` the way Determined does, and `init()`, which builds its context.

    with harness.pytorch.init() as context:
        Trainer(MyTrial(context), context).fit()

What `fit()` does:

1. restores the latest checkpoint if there is one (the trial's, or `fit(latest_checkpoint=...)`):
   models, optimizers, LR schedulers, scalers, callbacks, the batch count and every RNG state;
2. follows `core.searcher.operations()`: for each operation it trains up to the operation's length (in
   batches; records and epochs are converted), validates there, and reports the searcher metric with
   `op.report_completed()`;
3. trains in chunks that end at every multiple of `scheduling_unit` (config, default 100; or
   `fit(reporting_period=...)`), of the validation period and of the checkpoint period, and at the
   operation's length; after each chunk it reports the chunk's averaged training metrics, validates when
   the batch count is a multiple of `min_validation_period`, checkpoints when it is a multiple of
   `min_checkpoint_period`, then asks `should_preempt()` (and `context.get_stop_requested()`): if so it
   checkpoints and returns, and the process exits with code 0 to be resumed later;
4. checkpoints once more when the searcher has no more operations, unless it just did.

Periods come from `fit()` arguments (`Batch(n)`, `Epoch(n)`) or else from the config
(`min_validation_period`, `min_checkpoint_period`: `{batches|records|epochs: n}`, 0 = never). A
checkpoint holds `state_dict.pth`; its metadata carries `steps_completed` (batches trained).
Chunk ends depend only on the batch count, and batch *n* of the data depends only on (seed, n), so a
trial preempted and resumed ends with exactly the weights and metrics of an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import harness.core
from harness.core import DistributedContext, LocalSearcherContext, SearcherOperation
from harness.errors import CheckpointError, InvalidHP, TrialDefinitionError
from harness.pytorch._context import PyTorchTrialContext
from harness.pytorch._data import DataLoader
from harness.pytorch._lr_scheduler import LRScheduler
from harness.pytorch._trial import (
    PyTorchCallback,
    PyTorchTrial,
    Reducer,
    evaluate_batch_takes_index,
    overrides,
    reduce_metrics,
    scalar,
)
from harness.pytorch._units import Scale, TrainUnit, length_in_batches, parse_length

if TYPE_CHECKING:
    import torch

log = logging.getLogger("harness.pytorch")

STATE_FILE = "state_dict.pth"
DEFAULT_SCHEDULING_UNIT = 100


class Trainer:
    """Runs `trial` with `context`; see the module docstring."""

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self._trial = trial
        self._context = context

    def fit(
        self,
        checkpoint_period: TrainUnit | None = None,
        validation_period: TrainUnit | None = None,
        max_length: TrainUnit | None = None,
        reporting_period: TrainUnit | None = None,
        average_aggregated_gradients: bool | None = None,
        aggregation_frequency: int | None = None,
        checkpoint_policy: str | None = None,
        test_mode: bool | None = None,
        latest_checkpoint: str | None = None,
        step_zero_validation: bool | None = None,
        **ignored: Any,
    ) -> None:
        """Train until the searcher has no more operations, or until preempted.

        `max_length` is used where the searcher gives no length, and off the platform where nothing
        configures one (instead of the 100-batch default). `test_mode` trains one batch per operation.
        `average_aggregated_gradients` and `checkpoint_policy` are accepted for compatibility."""
        if ignored:
            log.debug("Trainer.fit ignores %s", ", ".join(sorted(ignored)))
        if aggregation_frequency is not None:
            self._context._aggregation_frequency = max(1, aggregation_frequency)
        loop = _TrainLoop(
            self._trial,
            self._context,
            checkpoint_period=checkpoint_period,
            validation_period=validation_period,
            max_length=max_length,
            reporting_period=reporting_period,
            test_mode=bool(test_mode),
            latest_checkpoint=latest_checkpoint,
            step_zero_validation=step_zero_validation,
        )
        try:
            loop.run()
        except InvalidHP as e:
            self._context.core.searcher.report_invalid_hp(str(e))
            log.info("InvalidHP (%s): reported to the searcher; exiting with code 0", e)
            raise SystemExit(0) from e


class _TrainLoop:
    def __init__(
        self,
        trial: PyTorchTrial,
        context: PyTorchTrialContext,
        *,
        checkpoint_period: TrainUnit | None,
        validation_period: TrainUnit | None,
        max_length: TrainUnit | None,
        reporting_period: TrainUnit | None,
        test_mode: bool,
        latest_checkpoint: str | None,
        step_zero_validation: bool | None,
    ) -> None:
        self.trial = trial
        self.ctx = context
        self.core = context.core
        self.dist: DistributedContext = context.distributed
        self.config = context.get_experiment_config()
        self.periods = (checkpoint_period, validation_period, reporting_period)
        self.max_length = max_length
        self.test_mode = test_mode
        self.latest = latest_checkpoint or (self.core.info.latest_checkpoint if self.core.info else None)
        self.step_zero = (
            step_zero_validation
            if step_zero_validation is not None
            else bool(self.config.get("perform_initial_validation"))
        )
        self.callbacks: dict[str, PyTorchCallback] = {}
        self.batches = 0
        self.validated_at = -1
        self.checkpointed_at = -1
        self.last_validation: dict[str, Any] = {}

    # ---- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        self.callbacks = dict(self.trial.build_callbacks())
        self._check_evaluation()
        self.train_data = self.trial.build_training_data_loader()
        self.val_data = self.trial.build_validation_data_loader()
        seed = self.ctx.get_trial_seed()
        self.per_epoch = _batches_per_epoch(self.train_data, self.dist, seed)
        self.scale = Scale(
            global_batch_size=self._global_batch_size(),
            batches_per_epoch=self.per_epoch,
            records_per_epoch=int(self.config.get("records_per_epoch") or 0),
        )
        checkpoint_period, validation_period, reporting_period = self.periods
        self.unit = length_in_batches(reporting_period, "reporting_period", self.scale) or int(
            self.config.get("scheduling_unit") or DEFAULT_SCHEDULING_UNIT
        )
        self.validation_every = length_in_batches(
            validation_period if validation_period is not None else self.config.get("min_validation_period"),
            "min_validation_period",
            self.scale,
        )
        self.checkpoint_every = length_in_batches(
            checkpoint_period if checkpoint_period is not None else self.config.get("min_checkpoint_period"),
            "min_checkpoint_period",
            self.scale,
        )
        if self.latest:
            self._restore(self.latest)
        searcher = self.core.searcher
        if self.max_length is not None and isinstance(searcher, LocalSearcherContext):
            searcher.use_length(self._max_length_batches())
        self.ctx._set_position(self.batches, self.per_epoch)
        for callback in self.callbacks.values():
            callback.on_trial_startup(self.batches, self.latest)
        try:
            self._follow_searcher(seed)
        finally:
            for callback in self.callbacks.values():
                callback.on_trial_shutdown()

    def _follow_searcher(self, seed: int) -> None:
        self.stream = _training_batches(self.train_data, self.batches, self.dist, seed)
        for model in self.ctx.models:
            model.train()
        for callback in self.callbacks.values():
            callback.on_training_start()
        if self.step_zero and self.batches == 0 and self.validated_at != 0:
            self._validate()
        for op in self.core.searcher.operations():
            target = self._target(op)
            if self.test_mode:
                target = min(target, self.batches + 1)
            log.info(
                "training to batch %d on %s (operation of length %s %s)",
                target,
                self.ctx.device,
                op.length,
                op.unit,
            )
            if self._train_to(target, op):
                self._checkpoint_if_needed()
                log.info("stopping at batch %d; the trial can be resumed from its checkpoint", self.batches)
                return
            if self.validated_at != self.batches:
                self._validate()
            op.report_completed(self._searcher_metric(), length=self.batches if op.length is None else None)
        self._checkpoint_if_needed()

    def _train_to(self, target: int, op: SearcherOperation) -> bool:
        """Train up to batch `target`; True when asked to stop on the way (preempted, or stop requested)."""
        while self.batches < target:
            end = min(
                target,
                _next_multiple(self.batches, self.unit),
                _next_multiple(self.batches, self.validation_every),
                _next_multiple(self.batches, self.checkpoint_every),
            )
            per_batch = [self._train_batch(i) for i in range(self.batches, end)]
            averaged = self._average_across_ranks(reduce_metrics(per_batch, Reducer.AVG))
            self.core.train.report_training_metrics(steps_completed=self.batches, metrics=averaged)
            for callback in self.callbacks.values():
                callback.on_training_workload_end(averaged, per_batch)
            if op.unit == "batches":
                op.report_progress(self.batches)
            if self.validation_every and self.batches % self.validation_every == 0:
                self._validate()
            if self.checkpoint_every and self.batches % self.checkpoint_every == 0:
                self._checkpoint()
            if self.dist.any_rank(self.ctx.get_stop_requested()) or self.core.preempt.should_preempt():
                return True
        return False

    def _train_batch(self, index: int) -> dict[str, float]:
        epoch = index // self.per_epoch if self.per_epoch else 0
        if self.per_epoch and index % self.per_epoch == 0:
            for callback in self.callbacks.values():
                callback.on_training_epoch_start(epoch)
        batch = self.ctx.to_device(next(self.stream))
        self.ctx._set_position(index, self.per_epoch)
        out = self.trial.train_batch(batch, epoch, index)
        self.batches = index + 1
        metrics = _training_metrics(out)
        for wrapped in self.ctx.lr_schedulers:
            if (
                wrapped.step_mode is LRScheduler.StepMode.STEP_EVERY_BATCH
                and self.batches % wrapped.frequency == 0
            ):
                wrapped.step()
        if self.per_epoch and self.batches % self.per_epoch == 0:
            done = self.batches // self.per_epoch
            for wrapped in self.ctx.lr_schedulers:
                if (
                    wrapped.step_mode is LRScheduler.StepMode.STEP_EVERY_EPOCH
                    and done % wrapped.frequency == 0
                ):
                    wrapped.step()
            for callback in self.callbacks.values():
                callback.on_training_epoch_end(epoch)
        return metrics

    # ---- validation ----------------------------------------------------------------------------

    def _validate(self) -> None:
        import torch

        for callback in self.callbacks.values():
            callback.on_validation_start()
        for model in self.ctx.models:
            model.eval()
        try:
            with torch.no_grad():
                metrics = self._evaluate()
        finally:
            for model in self.ctx.models:
                model.train()
        self.core.train.report_validation_metrics(steps_completed=self.batches, metrics=metrics)
        self.validated_at, self.last_validation = self.batches, metrics
        for callback in self.callbacks.values():
            callback.on_validation_end(dict(metrics))

    def _evaluate(self) -> dict[str, Any]:
        seed = self.ctx.get_trial_seed()
        if overrides(self.trial, "evaluate_full_dataset"):
            metrics: dict[str, Any] | None = None
            if self.dist.is_chief:
                loader = _validation_loader(self.val_data, num_replicas=1, rank=0, seed=seed)
                found = self.trial.evaluate_full_dataset(loader)
                metrics = {str(k): scalar(str(k), v) for k, v in dict(found).items()}
            shared = self.dist.broadcast(metrics)
            return dict(shared or {})
        loader = _validation_loader(
            self.val_data, num_replicas=self.dist.size, rank=self.dist.rank, seed=seed
        )
        with_index = evaluate_batch_takes_index(self.trial)
        per_batch: list[dict[str, float]] = []
        for index, batch in enumerate(loader):
            moved = self.ctx.to_device(batch)
            found = (
                self.trial.evaluate_batch(moved, index) if with_index else self.trial.evaluate_batch(moved)
            )
            per_batch.append({str(k): scalar(str(k), v) for k, v in dict(found).items()})
        gathered = [m for rank_list in self.dist.allgather(per_batch) for m in rank_list]
        if not gathered:
            raise TrialDefinitionError(
                "the validation data gave no batch; check build_validation_data_loader()."
            )
        return reduce_metrics(gathered, self.trial.evaluation_reducer())

    def _searcher_metric(self) -> Any:
        name = (self.config.get("searcher") or {}).get("metric")
        metrics = self.last_validation
        if not name:
            return next(iter(metrics.values())) if metrics else 0.0
        if name not in metrics:
            raise TrialDefinitionError(
                f"the searcher metric {name!r} is not among the validation metrics ({', '.join(metrics)}); "
                "return it from evaluate_batch / evaluate_full_dataset or change searcher.metric."
            )
        return metrics[name]

    # ---- checkpoints ---------------------------------------------------------------------------

    def _checkpoint_if_needed(self) -> None:
        if self.checkpointed_at != self.batches:
            self._checkpoint()

    def _checkpoint(self) -> None:
        import torch

        state = self._state()
        for callback in self.callbacks.values():
            callback.on_checkpoint_save_start(state)
        metadata = {
            "steps_completed": self.batches,
            "framework": f"torch-{torch.__version__}",
            "format": "pickle",
        }
        with self.core.checkpoint.store_path(metadata) as (path, storage_id):
            if self.dist.is_chief:
                torch.save(state, path / STATE_FILE)
            for callback in self.callbacks.values():
                callback.on_checkpoint_write_end(str(path))
        storage_id = self.dist.broadcast(storage_id)
        for callback in self.callbacks.values():
            callback.on_checkpoint_upload_end(storage_id)
        self.checkpointed_at = self.batches
        log.info("checkpoint %s at batch %d", storage_id or "(chief stores it)", self.batches)

    def _state(self) -> dict[str, Any]:
        return {
            "models_state_dict": [_unwrap(m).state_dict() for m in self.ctx.models],
            "optimizers_state_dict": [o.state_dict() for o in self.ctx.optimizers],
            "lr_schedulers_state_dict": [s.state_dict() for s in self.ctx.lr_schedulers],
            "scalers_state_dict": [s.state_dict() for s in self.ctx.scalers],
            "callbacks": {name: cb.state_dict() for name, cb in self.callbacks.items()},
            "rng_state": _rng_state(),
            "trainer_state": {
                "batches_trained": self.batches,
                "validated_at": self.validated_at,
                "last_validation": self.last_validation,
                "optimizer_steps": self.ctx._optimizer_steps,
            },
        }

    def _restore(self, storage_id: str) -> None:
        import torch

        with self.core.checkpoint.restore_path(storage_id) as path:
            file = Path(path) / STATE_FILE
            if not file.is_file():
                raise CheckpointError(
                    f"checkpoint {storage_id} has no {STATE_FILE}; it was not written by Trainer."
                )
            # Our own checkpoint, holding RNG states (numpy arrays, tuples): not weights only.
            state = torch.load(file, map_location=self.ctx.device, weights_only=False)
        for callback in self.callbacks.values():
            callback.on_checkpoint_load_start(state)
        _load_all("models", [_unwrap(m) for m in self.ctx.models], state.get("models_state_dict", []))
        _load_all("optimizers", self.ctx.optimizers, state.get("optimizers_state_dict", []))
        _load_all("lr_schedulers", self.ctx.lr_schedulers, state.get("lr_schedulers_state_dict", []))
        _load_all("scalers", self.ctx.scalers, state.get("scalers_state_dict", []))
        for name, callback in self.callbacks.items():
            if name in state.get("callbacks", {}):
                callback.load_state_dict(state["callbacks"][name])
        trainer = state.get("trainer_state", {})
        self.batches = int(trainer.get("batches_trained", 0))
        self.validated_at = int(trainer.get("validated_at", -1))
        self.last_validation = dict(trainer.get("last_validation") or {})
        self.ctx._optimizer_steps = int(trainer.get("optimizer_steps", 0))
        if "rng_state" in state:
            _set_rng_state(state["rng_state"])
        self.checkpointed_at = self.batches
        log.info("resumed from checkpoint %s at batch %d", storage_id, self.batches)

    # ---- lengths -------------------------------------------------------------------------------

    def _target(self, op: SearcherOperation) -> int:
        if op.length is None:
            if self.max_length is None:
                raise TrialDefinitionError(
                    "the searcher gives no length (searcher.max_length is not set); set it in the config, "
                    "or pass Trainer.fit(max_length=Batch(n))."
                )
            return self._max_length_batches()
        return self.scale.to_batches(op.unit, op.length)

    def _max_length_batches(self) -> int:
        parsed = parse_length(self.max_length, "max_length")
        return 0 if parsed is None else self.scale.to_batches(*parsed)

    def _global_batch_size(self) -> int | None:
        value = self.ctx.get_hparams().get("global_batch_size")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        size = getattr(self.train_data, "batch_size", None)
        return size * self.dist.size if isinstance(size, int) and size > 0 else None

    def _check_evaluation(self) -> None:
        by_batch = overrides(self.trial, "evaluate_batch")
        full = overrides(self.trial, "evaluate_full_dataset")
        if by_batch == full:
            raise TrialDefinitionError(
                f"{type(self.trial).__name__} must implement exactly one of evaluate_batch and "
                "evaluate_full_dataset."
            )

    def _average_across_ranks(self, metrics: dict[str, Any]) -> dict[str, Any]:
        if self.dist.size == 1:
            return metrics
        every = [m for m in self.dist.allgather(metrics) if m]
        return reduce_metrics(every, Reducer.AVG) if every else metrics


@contextlib.contextmanager
def init(
    *,
    hparams: Mapping[str, Any] | None = None,
    exp_conf: Mapping[str, Any] | None = None,
    distributed: DistributedContext | None = None,
    local_config: Mapping[str, Any] | None = None,
    aggregation_frequency: int = 1,
    enable_tensorboard_logging: bool = True,
    **core_options: Any,
) -> Iterator[PyTorchTrialContext]:
    """The `PyTorchTrialContext` for a script (Determined's `det.pytorch.init()`).

    On the platform (and in the local test mode) the hyperparameters, config and seed are the trial's;
    off it they are `hparams` and `exp_conf` (or Determined's older `local_config={"hparams": ...}`),
    with seed `reproducibility.experiment_seed` or 0. Every RNG (random, numpy, torch) is seeded before
    the context is yielded. With `WORLD_SIZE` > 1 and no process group yet, one is started (gloo on CPU,
    nccl on GPUs). `core_options` go to `harness.core.init()`. Leaving the block with
    `harness.InvalidHP` reports it and exits with code 0.
    """
    if distributed is None:
        distributed = _start_process_group()
    with harness.core.init(distributed=distributed, **core_options) as core:
        info = core.info
        if info is not None:
            hp, config = dict(info.trial.hparams), dict(info.config)
            seed, trial_id, experiment_id = (
                info.trial.trial_seed,
                info.trial.trial_id,
                info.trial.experiment_id,
            )
        else:
            local = dict(local_config or {})
            hp = dict(hparams if hparams is not None else local.get("hparams") or {})
            config = dict(
                exp_conf if exp_conf is not None else {k: v for k, v in local.items() if k != "hparams"}
            )
            seed = int((config.get("reproducibility") or {}).get("experiment_seed") or 0)
            trial_id = experiment_id = 0
        optimizations = config.get("optimizations") or {}
        frequency = int(optimizations.get("aggregation_frequency") or aggregation_frequency)
        seed_everything(seed)
        yield PyTorchTrialContext(
            core,
            hparams=hp,
            config=config,
            trial_seed=seed,
            trial_id=trial_id,
            experiment_id=experiment_id,
            aggregation_frequency=frequency,
        )


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's (when installed) and torch's RNGs."""
    import torch

    random.seed(seed)
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _start_process_group() -> DistributedContext | None:
    ranks = DistributedContext.from_env()
    if ranks.size <= 1:
        return None
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        if "MASTER_ADDR" not in os.environ:
            return ranks  # no rendezvous: every rank works on its own
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return DistributedContext.from_torch_distributed()


def _batches_per_epoch(data: Any, dist: DistributedContext, seed: int) -> int:
    if isinstance(data, DataLoader):
        return len(
            data._batch_sampler(seed=seed, repeat=True, skip=0, num_replicas=dist.size, rank=dist.rank)
        )
    try:
        return len(data)
    except TypeError:
        return 0


def _training_batches(data: Any, skip: int, dist: DistributedContext, seed: int) -> Iterator[Any]:
    """Training batches from batch number `skip` on, epoch after epoch."""
    if isinstance(data, DataLoader):
        yield from data.get_data_loader(
            repeat=True, skip=skip, num_replicas=dist.size, rank=dist.rank, seed=seed
        )
        return
    produced = 0
    while True:
        empty = True
        for batch in data:
            empty = False
            if produced >= skip:
                yield batch
            produced += 1
        if empty:
            raise TrialDefinitionError(
                "the training data loader gave no batch; check build_training_data_loader()."
            )


def _validation_loader(data: Any, *, num_replicas: int, rank: int, seed: int) -> Any:
    if isinstance(data, DataLoader):
        return data.get_data_loader(num_replicas=num_replicas, rank=rank, seed=seed)
    return data


def _training_metrics(out: Any) -> dict[str, float]:
    if out is None:
        return {}
    if isinstance(out, Mapping):
        return {str(k): scalar(str(k), v) for k, v in out.items()}
    return {"loss": scalar("loss", out)}


def _next_multiple(value: int, period: int) -> int:
    return (value // period + 1) * period if period > 0 else sys.maxsize


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


def _rng_state() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {
        "cpu_rng_state": torch.random.get_rng_state(),
        "random_rng_state": random.getstate(),
    }
    with contextlib.suppress(ImportError):
        import numpy as np

        state["np_rng_state"] = np.random.get_state()
    if torch.cuda.is_available():
        state["gpu_rng_state"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    import torch

    torch.random.set_rng_state(state["cpu_rng_state"].cpu())
    random.setstate(state["random_rng_state"])
    if "np_rng_state" in state:
        with contextlib.suppress(ImportError):
            import numpy as np

            np.random.set_state(state["np_rng_state"])
    if "gpu_rng_state" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["gpu_rng_state"]])

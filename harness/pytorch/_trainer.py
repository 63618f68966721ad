"""`Trainer`: runs a `PyTorchTrial` the way Determined does, following the searcher (`init()` builds its context).

    with stratus.harness.pytorch.init() as context:
        Trainer(MyTrial(context), context).fit()

What `fit()` does:

1. restores the latest checkpoint if there is one (the trial's, or `fit(latest_checkpoint=...)`):
   models, optimizers, LR schedulers, scalers, callbacks, the batch count and every RNG state (a
   checkpoint another trial wrote, a warm start such as PBT's, restores all but the batch count);
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
Chunk ends depend only on the batch count, and batch *n* of the data depends only on (seed, n) (or, for
a plain torch loader, is read again under the RNG states of its epoch's start: _plain_loader.py), so a
trial preempted and resumed ends with exactly the weights and metrics of an uninterrupted one. RNGs the
trial keeps itself (a `numpy.random.Generator`, a `torch.Generator` outside the loader) are not seen by the
trainer: keep their state in a callback's `state_dict()`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from typing import Any

from stratus.harness.core import DistributedContext, LocalSearcherContext, SearcherOperation
from stratus.harness.errors import InvalidHP, TrialDefinitionError
from stratus.harness.pytorch._checkpoint import TrainerProgress, restore_checkpoint, save_checkpoint
from stratus.harness.pytorch._context import PyTorchTrialContext
from stratus.harness.pytorch._data import batches_per_epoch, training_batches
from stratus.harness.pytorch._lr_scheduler import LRScheduler
from stratus.harness.pytorch._metrics import (
    average_across_ranks,
    evaluate,
    metric_values,
    searcher_metric,
    training_metrics,
)
from stratus.harness.pytorch._plain_loader import PlainLoaderStream
from stratus.harness.pytorch._trial import PyTorchCallback, PyTorchTrial, Reducer, overrides, reduce_metrics
from stratus.harness.pytorch._units import Scale, TrainUnit, length_in_batches, parse_length

log = logging.getLogger("stratus.harness.pytorch")

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
        self.data_position: dict[str, Any] | None = None
        self.stream: Iterator[Any] = iter(())
        self.batches_stay = False

    # ---- the run -------------------------------------------------------------------------------

    def run(self) -> None:
        self.callbacks = dict(self.trial.build_callbacks())
        self._check_evaluation()
        self.train_data = self.trial.build_training_data_loader()
        self.val_data = self.trial.build_validation_data_loader()
        seed = self.ctx.get_trial_seed()
        self.per_epoch = batches_per_epoch(
            self.train_data, num_replicas=self.dist.size, rank=self.dist.rank, seed=seed
        )
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
        self.stream = training_batches(
            self.train_data,
            self.batches,
            num_replicas=self.dist.size,
            rank=self.dist.rank,
            seed=seed,
            position=self.data_position,
        )
        for model in self.ctx.models:
            model.train()
        self.batches_stay = self.ctx._on_cpu_only()  # no device to move batches to
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
            op.report_completed(
                searcher_metric(self.config, self.last_validation),
                length=self.batches if op.length is None else None,
            )
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
            per_batch = metric_values([self._train_batch(i) for i in range(self.batches, end)])
            averaged = average_across_ranks(self.ctx, reduce_metrics(per_batch, Reducer.AVG))
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

    def _train_batch(self, index: int) -> dict[str, Any]:
        epoch = index // self.per_epoch if self.per_epoch else 0
        if self.per_epoch and index % self.per_epoch == 0:
            for callback in self.callbacks.values():
                callback.on_training_epoch_start(epoch)
        batch = next(self.stream) if self.batches_stay else self.ctx.to_device(next(self.stream))
        self.ctx._set_position(index, self.per_epoch)
        out = self.trial.train_batch(batch, epoch, index)
        self.batches = index + 1
        metrics = training_metrics(out)
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
                metrics = evaluate(self.trial, self.ctx, self.val_data)
        finally:
            for model in self.ctx.models:
                model.train()
        self.core.train.report_validation_metrics(steps_completed=self.batches, metrics=metrics)
        self.validated_at, self.last_validation = self.batches, metrics
        for callback in self.callbacks.values():
            callback.on_validation_end(dict(metrics))

    # ---- checkpoints ---------------------------------------------------------------------------

    def _checkpoint_if_needed(self) -> None:
        if self.checkpointed_at != self.batches:
            self._checkpoint()

    def _checkpoint(self) -> None:
        storage_id = save_checkpoint(self.ctx, self.callbacks, self._progress())
        self.checkpointed_at = self.batches
        log.info("checkpoint %s at batch %d", storage_id or "(chief stores it)", self.batches)

    def _restore(self, storage_id: str) -> None:
        restored = restore_checkpoint(self.ctx, self.callbacks, storage_id)
        info = self.core.info
        if restored.trial_id is not None and info is not None and restored.trial_id != info.trial.trial_id:
            # Another trial's checkpoint (a warm start, e.g. PBT's): its weights, but this trial's
            # batches count from 0, as Determined's do.
            log.info("warm-started from checkpoint %s of trial %d", storage_id, restored.trial_id)
            return
        self.batches, self.validated_at = restored.batches, restored.validated_at
        self.last_validation = restored.last_validation
        self.data_position = restored.data_position
        self.checkpointed_at = self.batches
        log.info("resumed from checkpoint %s at batch %d", storage_id, self.batches)

    def _progress(self) -> TrainerProgress:
        position = self.stream.position() if isinstance(self.stream, PlainLoaderStream) else None
        return TrainerProgress(self.batches, self.validated_at, self.last_validation, data_position=position)

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


def _next_multiple(value: int, period: int) -> int:
    return (value // period + 1) * period if period > 0 else sys.maxsize

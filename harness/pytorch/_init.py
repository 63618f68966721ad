"""`init()`: the `PyTorchTrialContext` for a script, with every RNG seeded and the process group started."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

from stratus import harness
from stratus.harness.core import DistributedContext
from stratus.harness.pytorch._context import PyTorchTrialContext


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
    nccl on GPUs). `core_options` go to `stratus.harness.core.init()`. Leaving the block with
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

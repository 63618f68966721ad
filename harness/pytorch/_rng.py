"""The RNG states a trial's results depend on: Python's `random`, numpy's legacy global RNG, torch's CPU
(and CUDA) generators, and the `torch.Generator` objects a data loader or sampler holds.

`rng_state` / `set_rng_state` save and restore the global ones (a checkpoint holds them);
`loader_generators`, `generator_states` and `set_generator_states` do the same for a loader's own
generators; `seeded_rngs` runs a block under RNGs seeded from one number and puts them back after, so
that what the block draws depends on that number alone and leaves the trial's RNGs untouched.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def rng_state(*, cuda: bool = True) -> dict[str, Any]:
    """The states of `random`, numpy's global RNG (when installed), torch's CPU RNG and, with `cuda` and
    a GPU, every CUDA device's."""
    import torch

    state: dict[str, Any] = {
        "cpu_rng_state": torch.random.get_rng_state(),
        "random_rng_state": random.getstate(),
    }
    with contextlib.suppress(ImportError):
        import numpy as np

        state["np_rng_state"] = np.random.get_state()
    if cuda and torch.cuda.is_available():
        state["gpu_rng_state"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what `rng_state` returned."""
    import torch

    torch.random.set_rng_state(state["cpu_rng_state"].cpu())
    random.setstate(state["random_rng_state"])
    if "np_rng_state" in state:
        with contextlib.suppress(ImportError):
            import numpy as np

            np.random.set_state(state["np_rng_state"])
    if "gpu_rng_state" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["gpu_rng_state"]])


def loader_generators(data: Any) -> list[torch.Generator]:
    """The `torch.Generator` objects a loader, its sampler and its batch sampler hold (each once)."""
    import torch

    holders = [data, getattr(data, "sampler", None), getattr(data, "batch_sampler", None)]
    holders.append(getattr(holders[-1], "sampler", None))
    found: dict[int, torch.Generator] = {}
    for holder in holders:
        generator = getattr(holder, "generator", None)
        if isinstance(generator, torch.Generator) and generator.device.type == "cpu":
            found.setdefault(id(generator), generator)
    return list(found.values())


def generator_states(generators: Sequence[torch.Generator]) -> list[torch.Tensor]:
    return [g.get_state() for g in generators]


def set_generator_states(generators: Sequence[torch.Generator], states: Sequence[torch.Tensor]) -> None:
    if len(generators) != len(states):
        return  # the loader changed shape since the checkpoint; its generators keep their own states
    for generator, state in zip(generators, states, strict=True):
        generator.set_state(state)


@contextlib.contextmanager
def seeded_rngs(seed: int, generators: Sequence[torch.Generator] = ()) -> Iterator[None]:
    """Run the block with `random`, numpy, torch's CPU RNG and `generators` seeded from `seed`; every one
    of them is put back as it was afterwards."""
    import torch

    saved, saved_generators = rng_state(cuda=False), generator_states(generators)
    random.seed(seed)
    with contextlib.suppress(ImportError):
        import numpy as np

        np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    for generator in generators:
        generator.manual_seed(seed)
    try:
        yield
    finally:
        set_rng_state(saved)
        set_generator_states(generators, saved_generators)

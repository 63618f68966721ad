"""Synthetic multi-fidelity test functions (no data to download).

The definitions are those of `mfhpo-benchmark-api` 2.2.2 (`benchmark_apis.MFBranin`, `MFHartmann`),
which take them from Kandasamy et al., "Multi-fidelity Bayesian Optimisation with Continuous
Approximations" (ICML 2017, p. 18) and the Dragonfly examples, with one fidelity dimension `z` in
(0, 1]:

- Branin (2-D, x0 in [-5, 10], x1 in [0, 15]): the usual Branin with `b`, `c`, `t` shifted by
  `delta * (1 - z)` (delta_b 1e-2, delta_c 0.1, delta_t 5e-3); min 0.397887 at z = 1;
  observation noise N(0, 0.05).
- Hartmann-3 / Hartmann-6 (x in [0, 1]^d): `-sum_i (alpha_i - bias * (1 - z)) exp(-sum_j A_ij (x_j -
  P_ij)^2)` with bias 0.1; minima -3.86278 / -3.32237 at z = 1; noise N(0, 0.01) / N(0, 0.05).
- Hartmann-6 with bias 2.0 (the package's `bias` argument): the same optimum, but low fidelities rank
  configurations poorly.

They are re-implemented here in plain Python so the benchmark needs nothing beyond the repository;
`check_against_package()` compares them with the package when it is installed.

`z` is the trial's trained length over `max_length`. Lower fidelity lowers the Hartmann weights
(a flatter, slightly higher surface) and tilts Branin's coefficients. With the package's defaults the
low-fidelity value ranks configurations almost exactly like the full-fidelity one, the regime
successive halving is made for; `hartmann6_bias2` is the stress case where it does not.
"""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_H3_A = ((3.0, 10.0, 30.0), (0.1, 10.0, 35.0), (3.0, 10.0, 30.0), (0.1, 10.0, 35.0))
_H3_P = (
    (0.3689, 0.1170, 0.2673),
    (0.4699, 0.4387, 0.7470),
    (0.1091, 0.8732, 0.5547),
    (0.0381, 0.5743, 0.8828),
)
_H6_A = (
    (10.0, 3.0, 17.0, 3.5, 1.7, 8.0),
    (0.05, 10.0, 17.0, 0.1, 8.0, 14.0),
    (3.0, 3.5, 1.7, 10.0, 17.0, 8.0),
    (17.0, 8.0, 0.05, 10.0, 0.1, 14.0),
)
_H6_P = (
    (0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886),
    (0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991),
    (0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650),
    (0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381),
)
_H_ALPHA = (1.0, 1.2, 3.0, 3.2)


def branin(x: tuple[float, ...], z: float) -> float:
    x1, x2 = x
    b = 5.1 / (4 * math.pi**2) - 1e-2 * (1 - z)
    c = 5 / math.pi - 0.1 * (1 - z)
    t = 1 / (8 * math.pi) + 5e-3 * (1 - z)
    return (x2 - b * x1**2 + c * x1 - 6.0) ** 2 + 10.0 * (1 - t) * math.cos(x1) + 10.0


def _hartmann(
    a: tuple[tuple[float, ...], ...], p: tuple[tuple[float, ...], ...], bias: float = 0.1
) -> Callable[..., float]:
    def f(x: tuple[float, ...], z: float) -> float:
        total = 0.0
        for alpha, row_a, row_p in zip(_H_ALPHA, a, p, strict=True):
            inner = sum(aj * (xj - pj) ** 2 for aj, xj, pj in zip(row_a, x, row_p, strict=True))
            total += (alpha - bias * (1 - z)) * math.exp(-inner)
        return -total

    return f


@dataclass(frozen=True)
class Function:
    name: str
    fn: Callable[[tuple[float, ...], float], float]
    bounds: tuple[tuple[float, float], ...]
    optimum: float  # the known minimum at full fidelity
    noise_std: float

    @property
    def dim(self) -> int:
        return len(self.bounds)

    def space(self) -> dict[str, Any]:
        """The Determined `hyperparameters` section (JSON form) matching the domain."""
        return {
            f"x{i}": {"type": "double", "minval": lo, "maxval": hi} for i, (lo, hi) in enumerate(self.bounds)
        }

    def point(self, hparams: Mapping[str, Any]) -> tuple[float, ...]:
        return tuple(float(hparams[f"x{i}"]) for i in range(self.dim))

    def value(self, x: tuple[float, ...], z: float) -> float:
        return self.fn(x, z)

    def regret(self, x: tuple[float, ...]) -> float:
        """The noiseless full-fidelity regret of a configuration."""
        return self.fn(x, 1.0) - self.optimum

    def random_point(self, rng: random.Random) -> tuple[float, ...]:
        return tuple(rng.uniform(lo, hi) for lo, hi in self.bounds)


FUNCTIONS: dict[str, Function] = {
    "branin": Function("branin", branin, ((-5.0, 10.0), (0.0, 15.0)), 0.397887, math.sqrt(0.05)),
    "hartmann3": Function("hartmann3", _hartmann(_H3_A, _H3_P), ((0.0, 1.0),) * 3, -3.86278, math.sqrt(0.01)),
    "hartmann6": Function("hartmann6", _hartmann(_H6_A, _H6_P), ((0.0, 1.0),) * 6, -3.32237, math.sqrt(0.05)),
    # The package's own `bias` knob raised from 0.1 to 2.0: low fidelities rank configurations poorly
    # (Spearman about 0.5 against full fidelity at z = 1/256), a stress case for early stopping.
    "hartmann6_bias2": Function(
        "hartmann6_bias2", _hartmann(_H6_A, _H6_P, bias=2.0), ((0.0, 1.0),) * 6, -3.32237, math.sqrt(0.05)
    ),
}


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=v.__getitem__)
        out = [0.0] * len(v)
        for rank, i in enumerate(order):
            out[i] = float(rank)
        return out

    ra, rb = ranks(a), ranks(b)
    n = len(a)
    mean = (n - 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb, strict=True))
    var = sum((x - mean) ** 2 for x in ra)
    return cov / var


def fidelity_correlation(f: Function, z: float, *, noisy: bool, n: int = 2000, seed: int = 0) -> float:
    """Spearman rank correlation over uniform random configurations between the value at fidelity
    `z` (with observation noise if `noisy`) and the noiseless full-fidelity value."""
    rng = random.Random(f"corr:{f.name}:{seed}")
    low, high = [], []
    for _ in range(n):
        x = f.random_point(rng)
        low.append(f.value(x, z) + (rng.gauss(0.0, f.noise_std) if noisy else 0.0))
        high.append(f.value(x, 1.0))
    return spearman(low, high)


def check_against_package(max_length: int, samples: int = 300) -> str:
    """Compare with `mfhpo-benchmark-api` (deterministic mode) if it is installed; a one-line verdict."""
    try:
        with warnings.catch_warnings():  # it warns about its optional tabular benchmarks
            warnings.simplefilter("ignore")
            import benchmark_apis  # type: ignore[import-not-found]
            from benchmark_apis import MFBranin, MFHartmann
    except ImportError:
        return "mfhpo-benchmark-api not installed: not cross-checked"
    rng = random.Random("check")
    worst = 0.0
    packages = {
        "branin": MFBranin(min_fidel=1, max_fidel=max_length, deterministic=True),
        "hartmann3": MFHartmann(dim=3, min_fidel=1, max_fidel=max_length, deterministic=True),
        "hartmann6": MFHartmann(dim=6, min_fidel=1, max_fidel=max_length, deterministic=True),
        "hartmann6_bias2": MFHartmann(dim=6, bias=2.0, min_fidel=1, max_fidel=max_length, deterministic=True),
    }
    for name, bench in packages.items():
        f = FUNCTIONS[name]
        for _ in range(samples):
            unit = [rng.random() for _ in range(f.dim)]
            x = tuple(lo + u * (hi - lo) for u, (lo, hi) in zip(unit, f.bounds, strict=True))
            length = rng.randint(1, max_length)
            theirs = bench({f"x{i}": u for i, u in enumerate(unit)}, fidels={"z0": length})["loss"]
            worst = max(worst, abs(theirs - f.value(x, length / max_length)))
    if worst > 1e-9:
        raise AssertionError(f"the functions differ from mfhpo-benchmark-api by up to {worst:g}")
    return (
        f"matches mfhpo-benchmark-api {benchmark_apis.__version__} (noiseless, {samples} points per "
        f"function, max abs difference {worst:.1e})"
    )


def low_fidelity_optimum_regret(f: Function, z: float, starts: int = 60) -> tuple[float, float] | None:
    """The full-fidelity regret of the minimisers of the noiseless function at fidelity `z` (multi-start
    L-BFGS-B), as (lowest, highest) over tied minimisers (Branin has three): where a search that trusted
    fidelity `z` completely would end up. None without scipy."""
    try:
        from scipy.optimize import minimize
    except ImportError:
        return None
    rng = random.Random(f"lowopt:{f.name}")
    found: list[tuple[float, tuple[float, ...]]] = []
    for _ in range(starts):
        res = minimize(
            lambda x: f.value(tuple(x), z),
            f.random_point(rng),
            bounds=f.bounds,
            method="L-BFGS-B",
            options={"ftol": 1e-15, "gtol": 1e-12},
        )
        found.append((float(res.fun), tuple(float(v) for v in res.x)))
    best = min(value for value, _ in found)
    regrets = [f.regret(x) for value, x in found if value <= best + 1e-7 * max(1.0, abs(best))]
    return min(regrets), max(regrets)

"""BOHB's model (Falkner et al. 2018, "BOHB: robust and efficient hyperparameter optimization at
scale", Algorithm 2; hpbandster's `BOHB` config generator, which NNI's `BOHB` advisor follows).

Configurations are vectors in `[0, 1]^d` (one entry per searched hyperparameter, in the order of
`tpe.distributions`): a `double` is scaled linearly, a `log` in its exponent, an `int` as a continuous
value over `[minval - 0.5, maxval + 0.5]`, a `categorical` is the index of its value.

For a new configuration: with probability `random_fraction`, or while no budget has a model, a uniform
random vector. Otherwise, the model of the largest budget (rung length) with enough results: its `N`
results sorted (smaller is better), the best `max(n_min, N * top_n_percent // 100)` are "good", the next
`max(n_min, N * (100 - top_n_percent) // 100)` "bad" (`n_min = min_points_in_model`, default `d + 1`;
a budget needs `N >= n_min` and more than `d` points in each set). Each set is a product-kernel KDE
(Gaussian for continuous entries, Aitchison-Aitken for categorical ones) with the normal-reference
bandwidth `1.06 * std * N**(-1 / (4 + d))`, at least `min_bandwidth`. `num_samples` candidates are
drawn around random good points (truncated normals with the bandwidth times `bandwidth_factor`; a
categorical keeps its value with probability `1 - bandwidth`), and the one minimising
`bad(x) / good(x)` (the TPE criterion) is proposed.

Pure Python on `random.Random`, seeded by the caller: the same results give the same proposal.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.searchers.tpe import distributions

Vector = list[float]
TINY = 1e-32
SQRT_2PI = math.sqrt(2 * math.pi)


@dataclass(frozen=True)
class BOHBSettings:
    top_n_percent: int = 15
    num_samples: int = 64
    random_fraction: float = 1 / 3
    bandwidth_factor: float = 3.0
    min_bandwidth: float = 1e-3
    min_points_in_model: int | None = None  # None: d + 1

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> BOHBSettings:
        defaults = cls()
        values = {
            name: settings.get(name)
            for name in (
                "top_n_percent",
                "num_samples",
                "random_fraction",
                "bandwidth_factor",
                "min_bandwidth",
                "min_points_in_model",
            )
        }
        return cls(
            top_n_percent=int(values["top_n_percent"] or defaults.top_n_percent),
            num_samples=int(values["num_samples"] or defaults.num_samples),
            random_fraction=float(
                defaults.random_fraction if values["random_fraction"] is None else values["random_fraction"]
            ),
            bandwidth_factor=float(values["bandwidth_factor"] or defaults.bandwidth_factor),
            min_bandwidth=float(values["min_bandwidth"] or defaults.min_bandwidth),
            min_points_in_model=(
                None if values["min_points_in_model"] is None else int(values["min_points_in_model"])
            ),
        )


@dataclass(frozen=True)
class Dimension:
    key: str  # the dotted hyperparameter path, as `tpe.distributions` names it
    kind: str  # "float", "int" or "categorical"
    low: float = 0.0
    high: float = 1.0
    log: bool = False
    choices: int = 0  # categorical: how many values

    def decode(self, x: float) -> Any:
        if self.kind == "categorical":
            return min(int(x), self.choices - 1)
        if self.kind == "int":
            value = round(self.low - 0.5 + x * (self.high - self.low + 1))
            return int(min(max(value, self.low), self.high))
        if self.log:
            return math.exp(math.log(self.low) + x * (math.log(self.high) - math.log(self.low)))
        return self.low + x * (self.high - self.low)


def dimensions(space: Mapping[str, Any]) -> list[Dimension]:
    """The searched hyperparameters of `space`, in a fixed order."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    out: list[Dimension] = []
    for key, dist in sorted(distributions(space).items()):
        if isinstance(dist, CategoricalDistribution):
            out.append(Dimension(key, "categorical", choices=len(dist.choices)))
        elif isinstance(dist, IntDistribution):
            out.append(Dimension(key, "int", float(dist.low), float(dist.high)))
        elif isinstance(dist, FloatDistribution):
            out.append(Dimension(key, "float", float(dist.low), float(dist.high), log=dist.log))
    return out


def to_params(dims: Sequence[Dimension], vector: Sequence[float]) -> dict[str, Any]:
    """Optuna-style params (dotted name -> value) for a vector; `tpe.to_hparams` nests them."""
    return {d.key: d.decode(x) for d, x in zip(dims, vector, strict=True)}


def random_vector(dims: Sequence[Dimension], rng: random.Random) -> Vector:
    return [float(rng.randrange(d.choices)) if d.kind == "categorical" else rng.random() for d in dims]


class KDE:
    """A product-kernel density over vectors (statsmodels' `KDEMultivariate` with `normal_reference`)."""

    def __init__(self, data: Sequence[Vector], dims: Sequence[Dimension], min_bandwidth: float) -> None:
        self.data = [list(v) for v in data]
        self.dims = list(dims)
        n, d = len(self.data), len(self.dims)
        self.bandwidth: list[float] = []
        for j in range(d):
            column = [v[j] for v in self.data]
            mean = sum(column) / n
            std = math.sqrt(sum((x - mean) ** 2 for x in column) / n)
            bw = max(1.06 * std * n ** (-1.0 / (4 + d)), min_bandwidth)
            self.bandwidth.append(min(bw, 1.0) if self.dims[j].kind == "categorical" else bw)

    def pdf(self, x: Sequence[float]) -> float:
        # The product kernel, with the per-dimension constants taken out of the loop over points.
        scale = 1.0
        terms: list[tuple[int, float, float, float]] = []  # (j, x_j, -0.5 / bw**2, or categorical odds)
        for j, dim in enumerate(self.dims):
            bw = self.bandwidth[j]
            if dim.kind == "categorical":
                other = bw / max(dim.choices - 1, 1)
                scale *= other
                terms.append((j, x[j], 0.0, (1 - bw) / other if other > 0 else 0.0))
            else:
                scale /= SQRT_2PI * bw
                terms.append((j, x[j], -0.5 / (bw * bw), 0.0))
        total = 0.0
        for point in self.data:
            exponent = 0.0
            factor = 1.0
            for j, xj, k, odds in terms:
                if k:
                    d = xj - point[j]
                    exponent += k * d * d
                elif int(xj) == int(point[j]):
                    factor *= odds
            total += factor * math.exp(exponent)
        return scale * total / len(self.data)


def model_for(
    observations: Mapping[int, Sequence[tuple[Vector, float]]],
    dims: Sequence[Dimension],
    settings: BOHBSettings,
) -> tuple[KDE, KDE] | None:
    """(good, bad) densities of the largest budget with enough results, or None while none has."""
    d = len(dims)
    n_min = settings.min_points_in_model or d + 1
    for budget in sorted(observations, reverse=True):
        results = sorted(observations[budget], key=lambda r: r[1])
        count = len(results)
        if count < n_min:
            continue
        n_good = max(n_min, settings.top_n_percent * count // 100)
        n_bad = max(n_min, (100 - settings.top_n_percent) * count // 100)
        good = [v for v, _ in results[:n_good]]
        bad = [v for v, _ in results[n_good : n_good + n_bad]]
        if len(good) <= d or len(bad) <= d:
            continue
        return KDE(good, dims, settings.min_bandwidth), KDE(bad, dims, settings.min_bandwidth)
    return None


def propose_vector(
    observations: Mapping[int, Sequence[tuple[Vector, float]]],
    dims: Sequence[Dimension],
    settings: BOHBSettings,
    rng: random.Random,
) -> tuple[Vector, bool]:
    """A new configuration's vector, and whether the model chose it (False: at random)."""
    if not dims or rng.random() < settings.random_fraction:
        return random_vector(dims, rng), False
    model = model_for(observations, dims, settings)
    if model is None:
        return random_vector(dims, rng), False
    good, bad = model
    best: Vector | None = None
    best_value = math.inf
    for _ in range(settings.num_samples):
        center = good.data[rng.randrange(len(good.data))]
        candidate: Vector = []
        for j, dim in enumerate(dims):
            bw = max(good.bandwidth[j], settings.min_bandwidth)
            if dim.kind == "categorical":
                keep_value = rng.random() < 1 - bw
                candidate.append(center[j] if keep_value else float(rng.randrange(dim.choices)))
            else:
                candidate.append(_truncated_normal(rng, center[j], bw * settings.bandwidth_factor))
        value = max(TINY, bad.pdf(candidate)) / max(good.pdf(candidate), TINY)
        if value < best_value:
            best, best_value = candidate, value
    if best is None or not math.isfinite(best_value):
        return random_vector(dims, rng), False
    return best, True


def _truncated_normal(rng: random.Random, mean: float, sd: float) -> float:
    """A normal draw restricted to [0, 1] (rejection; clipped after many misses)."""
    for _ in range(64):
        x = rng.gauss(mean, sd)
        if 0.0 <= x <= 1.0:
            return x
    return min(max(mean, 0.0), 1.0)

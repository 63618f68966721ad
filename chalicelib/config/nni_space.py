"""NNI's search space translated into Stratus hyperparameters, for `chalicelib.config.nni`.

Pure (standard library only). `SpaceTranslator(warnings, problems)` appends to the config
translator's own lists: `hyperparameters(space)` returns the Determined-style `hyperparameters`
mapping for NNI's search space (a warning for every approximation, a `ConfigProblem` for every
malformed entry, with paths like `searchSpace.lr._value`), and `grid_counts(hyperparameters)` sets
the grid searcher's `count` on each axis when NNI's GridSearch tuner becomes Stratus' grid searcher.

============================  ==============================================================
NNI `_type` and `_value`      Stratus hyperparameter
============================  ==============================================================
choice [v, ...]               categorical, vals [v, ...]
choice with `_name` options   categorical of the `_name`s; warning (the trial receives the
                              name, and the options' own parameters are not sampled)
randint [lower, upper]        int, minval lower, maxval upper - 1 (upper is exclusive since
                              NNI 1.x; the older one-value form [upper] means [0, upper))
uniform [low, high]           double, minval low, maxval high
loguniform [low, high]        log, base 10, minval log10(low), maxval log10(high)
quniform [low, high, q]       int [low, high] when low, high and q are integers and q is 1;
                              else categorical of its grid points when there are at most
                              `MAX_GRID_POINTS` (warning: unordered); else the unquantised
                              double (int when all three are integers) (warning)
qloguniform [low, high, q]    categorical of the grid points when at most `MAX_GRID_POINTS`
                              (warning), else the unquantised log (warning)
normal [mu, sigma]            double over mu ± 3 sigma (warning)
qnormal [mu, sigma, q]        as quniform over mu ± 3 sigma, snapped to multiples of q (warning)
lognormal [mu, sigma]         log, base 10, over exp(mu ± 3 sigma) (warning)
qlognormal [mu, sigma, q]     as qloguniform over exp(mu ± 3 sigma) (warning)
============================  ==============================================================

GridSearch: int axes of at most `GRID_INT_LIMIT` values are searched in full; larger int axes take
`GRID_INT_LIMIT` evenly spaced values, and double and log axes `GRID_COUNT` (each with a warning).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from chalicelib.config.errors import ConfigProblem

__all__ = [
    "GRID_COUNT",
    "GRID_INT_LIMIT",
    "MAX_GRID_POINTS",
    "NORMAL_SIGMAS",
    "SpaceTranslator",
    "TranslationNotes",
    "is_int",
]

MAX_GRID_POINTS = 32
"""A quantised axis with at most this many grid points becomes a categorical of them."""
GRID_COUNT = 5
"""Values per continuous axis when NNI's GridSearch becomes Stratus' grid searcher."""
GRID_INT_LIMIT = 10
"""An int axis with at most this many values is searched in full by the grid searcher."""

NORMAL_SIGMAS = 3.0
"""normal / lognormal become a bounded range of mu ± this many sigmas."""

_SPACE_TYPES = (
    "choice",
    "randint",
    "uniform",
    "quniform",
    "loguniform",
    "qloguniform",
    "normal",
    "qnormal",
    "lognormal",
    "qlognormal",
)


def _fmt(value: float) -> str:
    return f"{value:g}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_int(value: Any) -> bool:
    return _is_number(value) and float(value).is_integer()


class TranslationNotes:
    """Where one part of an NNI config's translation (the config, its tuner, its search space) writes
    its warnings and problems: lists shared by every part, so they keep the order of translation."""

    def __init__(self, warnings: list[str], problems: list[ConfigProblem]) -> None:
        self.warnings = warnings
        self.problems = problems

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{path}: {message}")

    def problem(self, path: str, message: str) -> None:
        self.problems.append(ConfigProblem(path, message))


class SpaceTranslator(TranslationNotes):
    """Translates NNI's search space; warnings and problems go to the lists it is given."""

    def hyperparameters(self, space: Mapping[str, Any]) -> dict[str, Any]:
        """The `hyperparameters` mapping for NNI's search space (its valid entries)."""
        if not isinstance(space, Mapping):
            self.problem("searchSpace", "must be a mapping of names to {_type, _value}")
            return {}
        out: dict[str, Any] = {}
        for name, spec in space.items():
            where = f"searchSpace.{name}"
            if not isinstance(name, str) or not name:
                self.problem(where, "names must be non-empty strings")
                continue
            hp = self._hyperparameter(where, spec)
            if hp is not None:
                out[name] = hp
        return out

    def _hyperparameter(self, where: str, spec: Any) -> dict[str, Any] | None:
        if not isinstance(spec, Mapping) or "_type" not in spec:
            self.problem(
                where, "must be a mapping with _type and _value, e.g. {_type: uniform, _value: [0, 1]}"
            )
            return None
        kind = spec["_type"]
        value = spec.get("_value")
        if kind not in _SPACE_TYPES:
            shown = kind if isinstance(kind, str) else repr(kind)
            self.problem(
                f"{where}._type", f'unknown type "{shown}"; expected one of {", ".join(_SPACE_TYPES)}'
            )
            return None
        if not isinstance(value, list):
            self.problem(f"{where}._value", "required: a list of the type's arguments")
            return None
        handler: Callable[[str, list[Any]], dict[str, Any] | None] = getattr(self, f"_hp_{kind}")
        return handler(where, value)

    def _numbers(self, where: str, value: list[Any], names: Sequence[str]) -> list[float] | None:
        if len(value) != len(names) or not all(_is_number(v) for v in value):
            self.problem(f"{where}._value", f"must be [{', '.join(names)}] (numbers)")
            return None
        return list(value)

    def _hp_choice(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        if not value:
            self.problem(f"{where}._value", "must list at least one option")
            return None
        nested = [v for v in value if isinstance(v, Mapping) and "_name" in v]
        if not nested:
            return {"type": "categorical", "vals": list(value)}
        names: list[Any] = []
        conditional: list[str] = []
        for index, option in enumerate(value):
            if isinstance(option, Mapping) and "_name" in option:
                names.append(option["_name"])
                conditional += [f"{option['_name']}.{k}" for k in option if k != "_name"]
            else:
                names.append(option)
                if isinstance(option, Mapping):
                    self.problem(f"{where}._value[{index}]", "a nested option needs _name, like the others")
        message = "nested search space: each trial receives the chosen option's _name, not NNI's {_name: ...} mapping"
        if conditional:
            message += f"; the options' own parameters ({', '.join(conditional)}) are not sampled"
        self.warn(where, message)
        return {"type": "categorical", "vals": names}

    def _hp_randint(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        if len(value) == 1:  # NNI before 1.x: [upper] meant [0, upper)
            value = [0, *value]
        if len(value) != 2 or not all(is_int(v) for v in value):
            self.problem(f"{where}._value", "must be [lower, upper] (whole numbers; upper is exclusive)")
            return None
        lower, upper = int(value[0]), int(value[1])
        if upper <= lower:
            self.problem(
                f"{where}._value", f"upper ({upper}) is exclusive, so it must be greater than lower ({lower})"
            )
            return None
        return {"type": "int", "minval": lower, "maxval": upper - 1}

    def _bounds(self, where: str, low: float, high: float) -> bool:
        if low > high:
            self.problem(f"{where}._value", f"low ({_fmt(low)}) must be ≤ high ({_fmt(high)})")
            return False
        return True

    def _uniform(
        self, where: str, value: list[Any], names: Sequence[str], *, log: bool
    ) -> list[float] | None:
        """`[low, high]` (or `[low, high, q]`) checked: low ≤ high, q > 0, and low > 0 for a log range."""
        numbers = self._numbers(where, value, names)
        if numbers is None or not self._bounds(where, numbers[0], numbers[1]):
            return None
        if len(numbers) == 3 and not self._q(where, numbers[2]):
            return None
        if log and numbers[0] <= 0:
            self.problem(f"{where}._value", "low must be > 0 for a log-uniform range")
            return None
        return numbers

    def _hp_uniform(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._uniform(where, value, ("low", "high"), log=False)
        if numbers is None:
            return None
        return {"type": "double", "minval": float(numbers[0]), "maxval": float(numbers[1])}

    def _hp_loguniform(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._uniform(where, value, ("low", "high"), log=True)
        if numbers is None:
            return None
        return _log_hp(numbers[0], numbers[1])

    def _hp_quniform(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        return self._quantised_uniform(where, value, "quniform", log=False)

    def _hp_qloguniform(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        return self._quantised_uniform(where, value, "qloguniform", log=True)

    def _quantised_uniform(
        self, where: str, value: list[Any], kind: str, *, log: bool
    ) -> dict[str, Any] | None:
        numbers = self._uniform(where, value, ("low", "high", "q"), log=log)
        if numbers is None:
            return None
        low, high, q = numbers
        return self._quantised(where, kind, low, high, q, log=log, clip=True, note="")

    def _normal(self, where: str, value: list[Any], names: Sequence[str]) -> list[float] | None:
        numbers = self._numbers(where, value, names)
        if numbers is None:
            return None
        if numbers[1] <= 0:
            self.problem(f"{where}._value", "sigma must be > 0")
            return None
        if len(numbers) == 3 and not self._q(where, numbers[2]):
            return None
        return numbers

    def _hp_normal(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._normal(where, value, ("mu", "sigma"))
        if numbers is None:
            return None
        low, high = _sigma_range(numbers[0], numbers[1])
        self.warn(where, f"normal: {_approximation(low, high, log=False)}")
        return {"type": "double", "minval": low, "maxval": high}

    def _hp_qnormal(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._normal(where, value, ("mu", "sigma", "q"))
        if numbers is None:
            return None
        mu, sigma, q = numbers
        low, high = _sigma_range(mu, sigma)
        low, high = _tidy(round(low / q) * q), _tidy(round(high / q) * q)
        note = _approximation(low, high, log=False)
        return self._quantised(where, "qnormal", low, high, q, log=False, clip=False, note=note)

    def _hp_lognormal(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._normal(where, value, ("mu", "sigma"))
        if numbers is None:
            return None
        low, high = _sigma_range(numbers[0], numbers[1])
        self.warn(where, f"lognormal: {_approximation(math.exp(low), math.exp(high), log=True)}")
        return {"type": "log", "base": 10.0, "minval": low / math.log(10), "maxval": high / math.log(10)}

    def _hp_qlognormal(self, where: str, value: list[Any]) -> dict[str, Any] | None:
        numbers = self._normal(where, value, ("mu", "sigma", "q"))
        if numbers is None:
            return None
        mu, sigma, q = numbers
        low, high = (math.exp(x) for x in _sigma_range(mu, sigma))
        note = _approximation(low, high, log=True)
        return self._quantised(where, "qlognormal", low, high, q, log=True, clip=False, note=note)

    def _q(self, where: str, q: float) -> bool:
        if q <= 0:
            self.problem(f"{where}._value", "q must be > 0")
            return False
        return True

    def _quantised(
        self, where: str, kind: str, low: float, high: float, q: float, *, log: bool, clip: bool, note: str
    ) -> dict[str, Any]:
        """A quantised axis: an exact int, a categorical of its grid points, or the unquantised range.

        `note` says how an unbounded (normal) distribution became [low, high]; empty for quniform
        and qloguniform.
        """
        prefix = f"{kind}: {note}, " if note else f"{kind}: "
        # Without clipping every point is a multiple of q; with it, low and high are points too.
        integral = all(float(x).is_integer() for x in ((low, high, q) if clip else (q,)))
        if not log and integral and q == 1:
            if note:
                self.warn(where, f"{prefix}as an int")
            return {"type": "int", "minval": int(low), "maxval": int(high)}
        points = _grid_points(low, high, q, clip=clip, integral=integral)
        if points is not None and len(points) <= MAX_GRID_POINTS:
            lost = " and the log-scale weighting is lost" if log else ""
            self.warn(
                where,
                f"{prefix}sampled as one of its {len(points)} grid points (a categorical: the "
                f"searcher treats them as unordered{lost})",
            )
            return {"type": "categorical", "vals": points}
        self.warn(where, f"{prefix}values are not rounded to multiples of q={_fmt(q)}")
        if log:
            return _log_hp(low, high)
        if integral:
            return {"type": "int", "minval": int(low), "maxval": int(high)}
        return {"type": "double", "minval": float(low), "maxval": float(high)}

    # -- grid search ----------------------------------------------------------------------------

    def grid_counts(self, hyperparameters: dict[str, Any]) -> None:
        """Sets the grid searcher's `count` on each int, double and log axis (warning when not exact)."""
        for name, hp in hyperparameters.items():
            kind = hp.get("type")
            where = f"searchSpace.{name}"
            if kind == "int":
                size = hp["maxval"] - hp["minval"] + 1
                if size <= GRID_INT_LIMIT:
                    hp["count"] = size
                else:
                    hp["count"] = GRID_INT_LIMIT
                    self.warn(
                        where,
                        f"GridSearch: {size} integers; the grid takes {GRID_INT_LIMIT} evenly spaced ones "
                        "(use choice for an exact grid)",
                    )
            elif kind in ("double", "log"):
                hp["count"] = GRID_COUNT
                self.warn(
                    where,
                    f"GridSearch: a continuous range; the grid takes {GRID_COUNT} evenly spaced values "
                    "(use choice or quniform for an exact grid)",
                )


def _approximation(low: float, high: float, *, log: bool) -> str:
    if log:
        return f"sampled log-uniformly over exp(mu ± 3·sigma) = [{_fmt(low)}, {_fmt(high)}], not log-normally"
    return f"sampled uniformly over mu ± 3·sigma = [{_fmt(low)}, {_fmt(high)}], not normally"


def _sigma_range(mu: float, sigma: float) -> tuple[float, float]:
    return mu - NORMAL_SIGMAS * sigma, mu + NORMAL_SIGMAS * sigma


def _log_hp(low: float, high: float) -> dict[str, Any]:
    return {"type": "log", "base": 10.0, "minval": math.log10(low), "maxval": math.log10(high)}


def _tidy(value: float) -> float:
    """A multiple of q without the float noise of `k * q` (0.30000000000000004 -> 0.3)."""
    return float(f"{value:.12g}")


def _grid_points(low: float, high: float, q: float, *, clip: bool, integral: bool) -> list[Any] | None:
    """The values `clip(round(x / q) * q, low, high)` takes for x in [low, high]; None if too many."""
    first, last = round(low / q), round(high / q)
    if last - first + 1 > MAX_GRID_POINTS:
        return None
    points: list[Any] = []
    for k in range(first, last + 1):
        value = _tidy(k * q)
        if clip:
            value = min(max(value, low), high)
        shown: Any = int(value) if integral else value
        if shown not in points:
            points.append(shown)
    return points

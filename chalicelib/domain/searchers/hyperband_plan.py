"""The brackets of Hyperband (Li et al. 2018, "Hyperband: a novel bandit-based approach to
hyperparameter optimization", Algorithm 1), as NNI's Hyperband and BOHB advisors define them.

With `R` the maximum length (`spec.max_length`) and `eta` the divisor:

- `s_max = floor(log_eta(R))`, capped at `max_rungs - 1` when `max_rungs` is set (NNI's BOHB:
  `floor(log_eta(max_budget / min_budget))`);
- one Hyperband iteration runs the brackets `s = s_max, s_max - 1, ..., 0`; bracket `s` starts
  `n = ceil((s_max + 1) / (s + 1) * eta**s)` configurations at `r = R * eta**-s`;
- its rung `i` (`0 <= i <= s`) holds `n_i` trials trained to `r_i = floor(R * eta**(i - s))` (at
  least 1); successive halving keeps the best `n_(i+1) = floor(n_i / eta)` (at least 1) for the next
  rung, which is `floor(n * eta**-i)` for a whole `eta`.

Iterations: `iterations` of them when set; with `max_trials`, brackets are taken in order until that
many configurations are planned (iterations repeat as needed, as NNI does until its trial budget runs
out), the last bracket cut to what is left; with neither, one iteration. `divisor` is at least 2, so
the rung lengths of a bracket always grow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.searchers.base import SearcherSettingsError, SearchSpec

EPSILON = 1e-9  # floors and ceilings of products of floats that should be whole numbers
DEFAULT_DIVISOR = 3.0  # Li et al.'s and NNI's eta
MAX_PLANNED_TRIALS = 100_000  # a guard for `iterations` alone


@dataclass(frozen=True)
class HyperbandBracket:
    s: int  # Li et al.'s s: the bracket has s + 1 rungs
    sizes: tuple[int, ...]  # n_i: the trials of each rung
    targets: tuple[int, ...]  # r_i: the length of each rung

    @property
    def num_rungs(self) -> int:
        return len(self.targets)

    @property
    def num_trials(self) -> int:
        return self.sizes[0]


def divisor(settings: Mapping[str, Any]) -> float:
    value = float(settings.get("divisor") or DEFAULT_DIVISOR)
    if value < 2:
        raise SearcherSettingsError(f"hyperband needs divisor >= 2, got {value}; set searcher.divisor: 3")
    return value


def max_bracket(max_length: int, eta: float, max_rungs: int | None = None) -> int:
    """`s_max = floor(log_eta(max_length))`, capped at `max_rungs - 1`."""
    s = 0
    while eta ** (s + 1) <= max_length * (1 + EPSILON):
        s += 1
    return s if max_rungs is None else max(0, min(s, max_rungs - 1))


def bracket_size(s: int, s_max: int, eta: float) -> int:
    """`n = ceil((s_max + 1) / (s + 1) * eta**s)`."""
    return math.ceil((s_max + 1) / (s + 1) * eta**s - EPSILON)


def keep(rung_size: int, eta: float) -> int:
    """How many of a rung of `rung_size` go up: `floor(n_i / eta)`, at least 1."""
    return max(1, math.floor(rung_size / eta + EPSILON))


def bracket(s: int, n: int, eta: float, max_length: int) -> HyperbandBracket:
    """Bracket `s` starting `n` configurations (fewer than the formula's when the budget cuts it)."""
    targets = tuple(max(1, math.floor(max_length * eta ** (i - s) + EPSILON)) for i in range(s + 1))
    sizes = [n]
    for _ in range(s):
        sizes.append(keep(sizes[-1], eta))  # floor(n * eta**-i) for a whole eta
    return HyperbandBracket(s, tuple(sizes), targets)


def plan(spec: SearchSpec) -> list[HyperbandBracket]:
    """Every bracket of the search, in the order they start."""
    if spec.max_length is None or spec.max_length < 1:
        raise SearcherSettingsError(
            "hyperband and bohb need searcher.max_length (the maximum length R a trial trains to)"
        )
    settings = spec.settings
    eta = divisor(settings)
    rungs = settings.get("max_rungs")
    s_max = max_bracket(spec.max_length, eta, None if rungs is None else int(rungs))
    max_trials = settings.get("max_trials")
    iterations = settings.get("iterations")
    if max_trials is None and iterations is None:
        iterations = 1
    budget = MAX_PLANNED_TRIALS if max_trials is None else max(1, int(max_trials))
    out: list[HyperbandBracket] = []
    planned = 0
    iteration = 0
    while planned < budget and (iterations is None or iteration < int(iterations)):
        for s in range(s_max, -1, -1):
            n = min(bracket_size(s, s_max, eta), budget - planned)
            if n < 1:
                break
            out.append(bracket(s, n, eta, spec.max_length))
            planned += n
        iteration += 1
    return out


def planned_results(brackets: list[HyperbandBracket]) -> int:
    """Results the whole plan collects (every rung of every bracket): what progress counts."""
    return sum(sum(b.sizes) for b in brackets)

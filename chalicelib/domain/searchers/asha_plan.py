"""The plan of Determined's `adaptive_asha` (`adaptive_asha.go`): its brackets, their rungs and trials.

Rungs per bracket: `bracket_rungs` if given, else `mode` over `max_rungs` clamped to
`int(log(max_length)/log(divisor))+1` and `int(log(max_trials)/log(divisor))+1` (aggressive `[R]`, standard `(R-1)//2+1 .. R`, conservative
`1 .. R`), most rungs first. Trials per bracket in proportion to `divisor**(rungs-1)/rungs` (truncated,
at least 1, remainder to the first); concurrency split evenly (remainder to the first ones), or with
`max_concurrent_trials: 0`, `max(last bracket's trials, int(divisor))` each. Rung `i` of `n` ends at
`max(int(max_length / divisor**(n-i-1)), 1)`. Two guards keep the split within the config: brackets
that would push the total past `max_trials` are dropped (least aggressive first), and
`max_concurrent_trials` also caps the running trials across brackets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from chalicelib.domain.searchers.base import DEFAULT_MAX_CONCURRENT_TRIALS, SearchSpec, settings_int


@dataclass(frozen=True)
class Bracket:
    num_rungs: int
    max_trials: int
    max_concurrent: int
    targets: tuple[int, ...]


def bracket_rungs(mode: str, max_rungs: int, max_length: int, max_trials: int, divisor: float) -> list[int]:
    """The number of rungs of each bracket, most first (no `bracket_rungs` given)."""
    max_rungs = min(max_rungs, int(math.log(max_length) / math.log(divisor)) + 1)
    max_rungs = min(max_rungs, int(math.log(max_trials) / math.log(divisor)) + 1)
    if mode == "aggressive":
        return [max_rungs]
    if mode == "standard":
        return list(range(max_rungs, (max_rungs - 1) // 2, -1))
    if mode == "conservative":
        return list(range(max_rungs, 0, -1))
    raise ValueError(f"unknown adaptive_asha mode {mode!r}")


def bracket_max_trials(max_trials: int, divisor: float, brackets: Sequence[int]) -> list[int]:
    """Determined's split: roughly the same total length budget for every bracket."""
    weights = [divisor ** (rungs - 1) / rungs for rungs in brackets]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_max_concurrent(max_concurrent: int, divisor: float, trials: Sequence[int]) -> list[int]:
    count = len(trials)
    if max_concurrent == 0:
        return [max(trials[-1], int(divisor))] * count
    max_concurrent = max(max_concurrent, count)
    share, remainder = divmod(max_concurrent, count)
    return [share + (1 if i < remainder else 0) for i in range(count)]


def rung_targets(num_rungs: int, divisor: float, max_length: int) -> tuple[int, ...]:
    return tuple(max(int(max_length / divisor ** (num_rungs - i - 1)), 1) for i in range(num_rungs))


def plan(spec: SearchSpec) -> list[Bracket]:
    settings = spec.settings
    if spec.max_length is None or spec.max_length < 1:
        raise ValueError("adaptive_asha needs max_length (or time_metric and max_time)")
    max_trials = max(1, settings_int(settings, "max_trials", 1))
    divisor = float(settings.get("divisor") or 4.0)
    explicit = settings.get("bracket_rungs")
    if explicit:
        rungs = sorted((int(r) for r in explicit), reverse=True)
    else:
        mode = str(settings.get("mode") or "standard")
        max_rungs = settings_int(settings, "max_rungs", 5)
        rungs = bracket_rungs(mode, max_rungs, spec.max_length, max_trials, divisor)
    trials = bracket_max_trials(max_trials, divisor, rungs)
    while len(rungs) > 1 and sum(trials) > max_trials:  # guard: never more than max_trials
        rungs, trials = rungs[:-1], trials[:-1]
    max_concurrent = settings_int(settings, "max_concurrent_trials", DEFAULT_MAX_CONCURRENT_TRIALS)
    concurrent = bracket_max_concurrent(max_concurrent, divisor, trials)
    return [
        Bracket(r, t, c, rung_targets(r, divisor, spec.max_length))
        for r, t, c in zip(rungs, trials, concurrent, strict=True)
    ]

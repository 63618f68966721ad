"""Determined's `grid` searcher: one trial per point of the hyperparameter grid.

The grid is `hparams.grid_points(spec.space)` (the cartesian product of every hyperparameter's grid
values, in sorted name order). Trials are created in grid order, at most `max_concurrent_trials` at a
time (0: all at once), each trained to `spec.max_length`. As in Determined, a trial that exits with
`invalid_hp` is not replaced: its point counts as done. The search shuts down once every point's trial
has exited.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

from chalicelib.domain import hparams as hp
from chalicelib.domain.searchers.random import PoolSearcher


@dataclass
class GridSearcher(PoolSearcher):
    name: str = "grid"

    replaces_invalid: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self._points = hp.grid_points(self.spec.space)

    def budget(self) -> int:
        return len(self._points)

    def propose(self, index: int) -> tuple[dict[str, Any], dict[str, Any]]:
        return copy.deepcopy(self._points[index]), {}

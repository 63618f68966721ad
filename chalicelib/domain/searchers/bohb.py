"""BOHB (Falkner et al. 2018; NNI's `BOHB` advisor): Hyperband's brackets, with each new configuration
drawn from a model of the results so far instead of at random.

Everything but `propose` is `HyperbandSearcher` (brackets, synchronous halving, promoted trials
continuing from their checkpoint). The model is `bohb_model.py`: a TPE-style ratio of two kernel
densities, fitted on the results of the largest rung length that has enough of them. Every rung result
of every bracket is an observation at that rung's length (a trial that exited early counts as the worst).

Each request keeps its vector in the snapshot, and a proposal draws from `random.Random` seeded by the
experiment seed and the request number, so a restored searcher proposes exactly what the original would.

With `until_stopped`, a finished bracket is forgotten (see `hyperband.py`): its results move first to
`archive`, by rung length, where only the latest `ARCHIVED_PER_LENGTH` of each length are kept (the
model then sees a sliding window of the past results, so the snapshot stays bounded).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain.searchers.bohb_model import (
    BOHBSettings,
    Dimension,
    Vector,
    dimensions,
    propose_vector,
    to_params,
)
from chalicelib.domain.searchers.hyperband import HyperbandSearcher, HyperbandTrial
from chalicelib.domain.searchers.tpe import to_hparams

ARCHIVED_PER_LENGTH = 100  # results of forgotten brackets kept per rung length (until_stopped)


@dataclass
class BOHBSearcher(HyperbandSearcher):
    name: str = "bohb"
    archive: dict[int, list[list[float]]] = field(default_factory=dict)  # length -> [*vector, metric]

    def __post_init__(self) -> None:
        super().__post_init__()
        self.model_settings = BOHBSettings.from_settings(self.spec.settings)
        self._dims: list[Dimension] | None = None

    def dims(self) -> list[Dimension]:
        if self._dims is None:
            self._dims = dimensions(self.spec.space)
        return self._dims

    def propose(self, index: int, bracket: int) -> tuple[dict[str, Any], dict[str, Any]]:
        rng = random.Random(f"stratus-bohb:{int(self.spec.seed)}:{int(index)}")
        vector, modelled = propose_vector(self.observations(), self.dims(), self.model_settings, rng)
        hparams = to_hparams(self.spec.space, to_params(self.dims(), vector))
        return hparams, {"vector": vector, "modelled": modelled}

    def observations(self) -> dict[int, list[tuple[Vector, float]]]:
        """Every rung result so far by rung length: (the configuration's vector, its metric)."""
        out: dict[int, list[tuple[Vector, float]]] = {
            length: [(row[:-1], row[-1]) for row in rows] for length, rows in self.archive.items()
        }
        for b, bracket in self.rungs.items():
            for r, entries in enumerate(bracket):
                length = self.bracket(b).targets[r]
                for metric, _, request_id in entries:
                    vector = self.requests[str(request_id)].extra.get("vector")
                    if vector is not None:
                        out.setdefault(length, []).append(([float(x) for x in vector], float(metric)))
        return out

    def _forget(self, index: int, members: list[HyperbandTrial]) -> None:
        """Keep the forgotten bracket's results in `archive` (the latest `ARCHIVED_PER_LENGTH` per length)."""
        for r, entries in enumerate(self.rungs[index]):
            length = self.bracket(index).targets[r]
            rows = self.archive.setdefault(length, [])
            for metric, _, request_id in entries:
                vector = self.requests[str(request_id)].extra.get("vector")
                if vector is not None:
                    rows.append([*(float(x) for x in vector), float(metric)])
            del rows[:-ARCHIVED_PER_LENGTH]
        super()._forget(index, members)

    def snapshot(self) -> dict[str, Any]:
        archive = {str(length): [list(row) for row in rows] for length, rows in self.archive.items()}
        return {**super().snapshot(), "archive": archive}

    @classmethod
    def _restored_fields(cls, snapshot: Mapping[str, Any]) -> dict[str, Any]:
        archive = {
            int(length): [[float(x) for x in row] for row in rows]
            for length, rows in snapshot.get("archive", {}).items()
        }
        return {**super()._restored_fields(snapshot), "archive": archive}

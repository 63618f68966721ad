"""The searcher's actions as a trial sees them: ``GET /trials/{id}/searcher`` answers
``{"action": "train" | "wait" | "stop", "length": int | null, "unit": str}`` (docs/contracts.md §1).

- ``train``: train on until ``length`` (null: no target yet; train on and report), then report it;
- ``wait``: a validation at the target is with the searcher; ask again shortly;
- ``stop``: the trial is done (its last target reached, or the searcher paused or stopped it).
"""

from __future__ import annotations

from enum import StrEnum


class SearcherAction(StrEnum):
    TRAIN = "train"
    WAIT = "wait"
    STOP = "stop"

"""Marks for the searcher sweep (`chalicelib.services.searcher_watch`): each moment after which an
experiment could be left with nothing to move it on marks it, and the sweep looks at it once
`searcher_check_s` pass; a later mark moves the look later. Marked: a searcher's start, every run's end
(where its exit is recorded, and where its event is handled), a searcher result (its event may be lost
while the trial waits for the answer), and a kill that ends a trial here."""

from __future__ import annotations

from chalicelib.services.ports import Ports


def mark(ports: Ports, experiment_id: int) -> None:
    """Have the sweep look at the experiment once `searcher_check_s` pass with nothing happening to it."""
    ports.experiments.watch(experiment_id, int(ports.clock.now() + ports.settings.searcher_check_s))

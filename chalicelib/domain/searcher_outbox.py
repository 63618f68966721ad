"""The searcher's outbox: the work a searcher decided, saved with its snapshot before any of it is done.

A searcher's answer to an event is a list of operations (create a trial, continue, pause or stop one,
shut down). Carrying them out takes several writes, any of which may lose a race or fail half-way, so
the answer is first written *into the stored snapshot*, under the same conditional write that records
the event (`ExperimentStore.save_searcher`), and only then carried out, one entry at a time, each entry
removed by another conditional save once done. Whoever finds entries left (the consumer that wrote
them, the next event of the experiment, a create's hand-off through the queue, or the sweep) carries
them on from fresh state; nothing the searcher decided can be dropped.

Carrying out an entry twice is harmless: a trial is created once per request id, executions are named,
and every entry that changes a trial carries its sequence number (`Pending.seq`, increasing per
experiment), which the trial keeps, so an entry older than the last one applied to that trial changes
nothing (`TrialStore.set_searcher_action`'s `seq`).

Besides the searcher's own operations, the outbox holds `AnswerValidation`: the searcher has answered
a trial's result at `length` (its `searcher_pending` flag is cleared). It is queued after the
operations of the same answer, so a trial never sees its result answered before its new target is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain.searchers.base import (
    ContinueTrial,
    CreateTrial,
    Operation,
    PauseTrial,
    Shutdown,
    StopTrial,
)

#: The snapshot's key that holds the outbox (a searcher's own `restore` never sees it).
OUTBOX_KEY = "outbox"


@dataclass(frozen=True)
class AnswerValidation:
    """The searcher answered the trial's result at `length`: clear its pending flag (only while the
    trial's latest result is still that one)."""

    trial_id: int
    length: int


Work = Operation | AnswerValidation


@dataclass(frozen=True)
class Pending:
    """One entry of the outbox: its sequence number (increasing per experiment) and the work."""

    seq: int
    work: Work


@dataclass(frozen=True)
class SearcherRecord:
    """What is stored as the experiment's `searcher`: the searcher's own snapshot and its outbox."""

    snapshot: dict[str, Any]
    pending: tuple[Pending, ...] = ()
    next_seq: int = 1
    #: When the oldest entry was queued (epoch seconds; None with nothing pending): the sweep's clue.
    pending_since: float | None = field(default=None, compare=False)

    @property
    def seen_events(self) -> frozenset[str]:
        """The ids of the events the searcher has answered (every searcher keeps them)."""
        return frozenset(str(e) for e in self.snapshot.get("seen_events") or ())

    @classmethod
    def load(cls, stored: Mapping[str, Any]) -> SearcherRecord:
        """Read a stored `searcher`; one saved before outboxes existed has none."""
        snapshot = {k: v for k, v in stored.items() if k != OUTBOX_KEY}
        outbox = stored.get(OUTBOX_KEY) or {}
        pending = tuple(Pending(int(p["seq"]), decode_work(p["work"])) for p in outbox.get("pending", []))
        since = outbox.get("since")
        return cls(
            snapshot=snapshot,
            pending=pending,
            next_seq=int(outbox.get("next", 1)),
            pending_since=float(since) if since is not None else None,
        )

    def to_json(self) -> dict[str, Any]:
        outbox: dict[str, Any] = {
            "next": self.next_seq,
            "pending": [{"seq": p.seq, "work": encode_work(p.work)} for p in self.pending],
        }
        if self.pending_since is not None and self.pending:
            outbox["since"] = self.pending_since
        return {**self.snapshot, OUTBOX_KEY: outbox}

    def enqueue(self, snapshot: Mapping[str, Any], work: Iterable[Work], now: float) -> SearcherRecord:
        """The searcher's new snapshot, with `work` queued after what was pending."""
        added = tuple(Pending(self.next_seq + i, w) for i, w in enumerate(work))
        since = self.pending_since if self.pending else (now if added else None)
        return SearcherRecord(
            snapshot=dict(snapshot),
            pending=self.pending + added,
            next_seq=self.next_seq + len(added),
            pending_since=since,
        )

    def done(self, seq: int, snapshot: Mapping[str, Any], now: float) -> SearcherRecord:
        """Entry `seq` carried out, and the searcher's snapshot after it."""
        left = tuple(p for p in self.pending if p.seq != seq)
        return SearcherRecord(
            snapshot=dict(snapshot),
            pending=left,
            next_seq=self.next_seq,
            pending_since=(self.pending_since or now) if left else None,
        )


def encode_work(work: Work) -> dict[str, Any]:
    if isinstance(work, CreateTrial):
        return {
            "op": "create",
            "request_id": work.request_id,
            "hparams": work.hparams,
            "length": work.length,
            "warm_start_trial_id": work.warm_start_trial_id,
        }
    if isinstance(work, ContinueTrial):
        return {"op": "continue", "trial_id": work.trial_id, "length": work.length}
    if isinstance(work, PauseTrial):
        return {"op": "pause", "trial_id": work.trial_id}
    if isinstance(work, StopTrial):
        return {"op": "stop", "trial_id": work.trial_id}
    if isinstance(work, Shutdown):
        return {"op": "shutdown", "failure": work.failure}
    return {"op": "answer", "trial_id": work.trial_id, "length": work.length}


def decode_work(data: Mapping[str, Any]) -> Work:
    op = data.get("op")
    if op == "create":
        warm = data.get("warm_start_trial_id")
        length = data.get("length")
        return CreateTrial(
            request_id=str(data["request_id"]),
            hparams=dict(data.get("hparams") or {}),
            length=int(length) if length is not None else None,
            warm_start_trial_id=int(warm) if warm is not None else None,
        )
    if op == "continue":
        return ContinueTrial(trial_id=int(data["trial_id"]), length=int(data["length"]))
    if op == "pause":
        return PauseTrial(trial_id=int(data["trial_id"]))
    if op == "stop":
        return StopTrial(trial_id=int(data["trial_id"]))
    if op == "shutdown":
        return Shutdown(failure=bool(data.get("failure", False)))
    if op == "answer":
        return AnswerValidation(trial_id=int(data["trial_id"]), length=int(data["length"]))
    raise ValueError(f"unknown searcher outbox entry {op!r}")

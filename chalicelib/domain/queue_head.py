"""Reading a pool's queue in bounded work: the sort key its index keeps requests in, the running summary
kept beside it, and the rule that says when a pass has read enough of the queue's head.

**The sort key** (`queue_sort_key`) is the scheduling order (`scheduling.queue_key`: priority, the job's
queue position, the job, the request's submission time, its run id) as one string that sorts the same
way, so the store's index returns the head of the queue first. A float sorts as its IEEE-754 bits
(sign flipped, negative numbers inverted); the fields are joined by a space, which sorts below every
character of a job id, a timestamp or a run id, so a shorter field sorts first as in a tuple.

**The summary** (`QueueSummary`) counts what waits: requests, slots, requests by size and by job. The
store keeps it with conditional writes in the same transaction as the request's own record (entering
the queue, leaving it, moving pools), so a redelivered message never counts twice. The pass takes from
it what a prefix of the queue cannot tell: the slots to ask the backend for, each job's demand for fair
shares, and the sizes of the requests it has not read.

**Enough read** (`Room.could_place`): after planning on the part of the queue read so far, the pass
reads more only while a request it has not read could still be placed (an agent with as many free
slots, or enough idle agents, so the rule errs towards reading), could claim slots that stopping runs
will free, or could preempt (a holding of strictly lower priority is left that is not already
stopping). Once blocked heads protect every agent size, only requests of lower priority than the last
head may use anything (with preemption on): the reader seeks past the rest of the heads' priorities
(`seek_past`) instead of reading them. Each index read is a `QueueStream`: the pool's queue (the priority
scheduler), or each waiting job's requests (fair share). The placement of every request read is the same as if the whole
queue had been read: each decision depends only on the requests ahead of it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import submission_position

#: Requests read in the first page of a stream; each further page doubles, up to `PAGE_MAX`.
PAGE_FIRST = 64
PAGE_MAX = 1024
#: At most this many requests are read in one pass, whatever the queue holds (see `scheduler`).
READ_MAX = 4096

#: A holding priority that every request may preempt (the fair-share scheduler's over-share runs).
ANY_PRIORITY = 1 << 30


def _sortable_float(value: float) -> str:
    (bits,) = struct.unpack(">Q", struct.pack(">d", float(value) + 0.0))  # -0.0 sorts as 0.0
    bits = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 1 << 63
    return f"{bits:016x}"


def queue_sort_key(priority: int, position: float, job_id: str, queued_at: str, run_id: str) -> str:
    """The scheduling order as one string (see the module docstring); priorities 0-99,999."""
    return " ".join(
        (f"{min(max(priority, 0), 99_999):05d}", _sortable_float(position), job_id, queued_at, run_id)
    )


def sort_key(run: Run) -> str:
    """A waiting run's `queue_sort_key` (its job's queue position, else its submission time)."""
    position = run.queue_position if run.queue_position is not None else submission_position(run.queued_at)
    return queue_sort_key(run.priority, position, str(run.experiment_id), run.queued_at, run.run_id)


def queue_fields(run: Run) -> dict[str, str]:
    """The attributes that put a run in its pool's queue indexes (`pending` and `pending_job`), which
    it has only while it waits."""
    return {
        "pending_pool": run.pool,
        "pending_job": f"{run.pool} {run.experiment_id}",
        "queue_key": sort_key(run),
    }


@dataclass(frozen=True)
class QueueSummary:
    """What waits in a pool's queue, as the store keeps it incrementally."""

    requests: int = 0
    slots: int = 0
    #: Requests by the slots they ask for.
    sizes: Mapping[int, int] = field(default_factory=dict)
    #: Job id -> (requests, slots) waiting.
    jobs: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def job_slots(self) -> dict[str, int]:
        return {job: slots for job, (count, slots) in self.jobs.items() if count > 0}


@dataclass
class QueueStream:
    """One index a pass reads page by page: the pool's queue (``job`` None) or one job's requests. The
    policy's head pass sizes the first page (`limit`); the reader moves it on page after page."""

    job: str | None
    #: The requests the summary counts in it.
    expected: int
    #: Where the next page starts (the index's key of the last request read, or one to seek past).
    after: str | None = None
    #: The next page's size.
    limit: int = PAGE_FIRST
    read: int = 0
    done: bool = False
    #: The priority of the last request read (or sought past).
    last_priority: int = 0


@dataclass(frozen=True)
class Room:
    """What a pass left that a request it has not read might still use."""

    #: The most free slots left on one agent.
    most_free: int = 0
    #: Idle agents left, by size.
    idle: Mapping[int, int] = field(default_factory=dict)
    largest: int = 0
    #: Slots of stopping runs that no request has claimed.
    freeing: int = 0
    #: The lowest priority (highest number) of a running holding that could still be preempted; None
    #: when none could (or preemption is off).
    preemptible: int | None = None
    #: Every agent size is protected for a blocked head: only a request allowed past the heads may
    #: use anything, one of priority strictly lower (a higher number) than ``bypass_above`` (None:
    #: none is allowed).
    all_protected: bool = False
    bypass_above: int | None = None

    def could_place(self, slots: int, priority: int) -> bool:
        """Whether a request of ``slots`` at ``priority`` might be placed, claim freeing slots or
        preempt (erring towards yes)."""
        if self.all_protected and (self.bypass_above is None or priority <= self.bypass_above):
            return False
        if self.freeing > 0:
            return True
        if self.preemptible is not None and self.preemptible > priority:
            return True
        if slots <= self.largest:
            return slots <= self.most_free
        return any(slots % size == 0 and count >= slots // size for size, count in self.idle.items())


def seek_past(room: Room, next_priority: int) -> str | None:
    """Where to go on reading a stream whose next request has ``next_priority``: past every request of
    a priority that can use nothing (`Room.all_protected`), to the first that may; None: go on."""
    if room.all_protected and room.bypass_above is not None and next_priority <= room.bypass_above:
        return f"{min(max(room.bypass_above, 0), 99_999):05d}!"  # "!" sorts just above the key's " "
    return None


def unread_sizes(summary: QueueSummary, read_sizes: Mapping[int, int]) -> list[int]:
    """The request sizes the summary counts beyond those read (at least one of each left unread)."""
    return sorted(size for size, count in summary.sizes.items() if count > read_sizes.get(size, 0))


def wants_more(room: Room, sizes: list[int], next_priority: int) -> bool:
    """Whether a pass should read more of a stream whose unread requests have priority ``next_priority``
    or lower and sizes among ``sizes``."""
    return any(room.could_place(size, next_priority) for size in sizes)

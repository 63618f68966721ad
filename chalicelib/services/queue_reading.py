"""A scheduling pass over the head of a pool's queue: read a page, plan, read more only while a request
not yet read could still be placed, never the whole queue.

The pool's policy says what to read (`SchedulingPolicy.head_pass`): the priority scheduler reads one
stream, the pool's queue in order; the fair-share scheduler one stream per job with requests waiting.
The reader reads each stream's pages, feeds them to the policy's head pass (`HeadPass.feed`), and reads
more of a stream only where the head pass asks for it (`HeadPass.wants_more`). The first page holds as
many requests as the free slots could take (each takes one at least) plus `PAGE_FIRST` (shared among the
jobs for fair share), so a full pool reads one small page and a pool with room usually plans once;
further pages grow fourfold up to `PAGE_MAX`, each followed by planning again. A pass reads at most
`READ_MAX` requests: a request further back that could have been placed now (a small request behind more
than that many blocked ones) waits for a later pass, when fewer are ahead of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from chalicelib.domain.queue_head import (
    PAGE_FIRST,
    PAGE_MAX,
    READ_MAX,
    QueueStream,
    QueueSummary,
    unread_sizes,
)
from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest, submission_position
from chalicelib.domain.scheduling_policies import PassPlan, SchedulingPolicy
from chalicelib.services.ports import Ports


@dataclass
class HeadPlan:
    plan: PassPlan
    #: The requests read, in the order read (the plan decided for each of them, or held it back).
    read: list[Run]
    #: Queries made.
    pages: int
    #: Run id -> why it waits, for the requests read that their job's slot limit held back before the
    #: plan (`job_limits`): not in the plan's `blocked`, since no slot the pool could add would help.
    held_back: dict[str, str] = field(default_factory=dict)


def plan_head(
    ports: Ports,
    pool: str,
    policy: SchedulingPolicy,
    summary: QueueSummary,
    holdings: Sequence[Holding],
    agents: Sequence[AgentCapacity],
) -> HeadPlan:
    head = policy.head_pass(summary, holdings, agents)
    read: list[Run] = []
    sizes: Counter[int] = Counter()
    pages = 0
    wanted = head.streams
    while True:
        fresh: list[Run] = []
        for stream in wanted:
            runs = _read_page(ports, pool, stream)
            pages += 1
            fresh.extend(runs)
            sizes.update(run.slots for run in runs)
        read.extend(fresh)
        step = head.feed([slot_request(run) for run in fresh])
        left = unread_sizes(summary, sizes)
        if len(read) >= READ_MAX or not left:
            return HeadPlan(step.plan, read, pages, step.held_back)
        wanted = [s for s in head.streams if not s.done and head.wants_more(s, step.plan, left)]
        if not wanted:
            return HeadPlan(step.plan, read, pages, step.held_back)


def _read_page(ports: Ports, pool: str, stream: QueueStream) -> list[Run]:
    limit = max(1, min(stream.limit, READ_MAX, stream.expected - stream.read or 1))
    if stream.job is None:
        runs, after = ports.runs.queue_page(pool, stream.after, limit)
    else:
        runs, after = ports.runs.job_queue_page(pool, stream.job, stream.after, limit)
    stream.read += len(runs)
    stream.after = after
    stream.limit = min(max(stream.limit, PAGE_FIRST) * 4, PAGE_MAX)
    stream.done = after is None or stream.read >= stream.expected
    if runs:
        stream.last_priority = runs[-1].priority
    return runs


def queue_position(run: Run) -> float:
    """The job's queue position (moved by `det job update`), else its submission time."""
    return run.queue_position if run.queue_position is not None else submission_position(run.queued_at)


def slot_request(run: Run) -> SlotRequest:
    return SlotRequest(
        run_id=run.run_id,
        slots=run.slots,
        priority=run.priority,
        queued_at=run.queued_at,
        job_id=str(run.experiment_id),
        weight=run.weight,
        queue_position=queue_position(run),
        max_slots=run.max_slots,
    )

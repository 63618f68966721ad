"""A scheduling pass over the head of a pool's queue: read a page, plan, read more only while a request
not yet read could still be placed (`queue_head`), never the whole queue.

The priority scheduler reads one stream, the pool's queue in order. The fair-share scheduler reads one
stream per job with requests waiting (the summary names them), since every job below its share may
place its next request; each job's whole demand comes from the summary. The priority pass is fed page
after page and goes on where it stopped (`PriorityPass`); the fair-share pass plans again over every
job's head, and reads more of a job only when it used every request of it that it was given. The first page holds as many
requests as the free slots could take (each takes one at least) plus `PAGE_FIRST` (shared among the
jobs for fair share), so a full pool reads one small page and a pool with room usually plans once;
further pages grow fourfold up to `PAGE_MAX`, each followed by planning again. A pass reads at most `READ_MAX`
requests: a request further back that could have been placed now (a small request behind more than
that many blocked ones) waits for a later pass, when fewer are ahead of it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from chalicelib.domain.job_limits import JobLimits, capped_demand
from chalicelib.domain.queue_head import (
    PAGE_FIRST,
    PAGE_MAX,
    READ_MAX,
    QueueSummary,
    Room,
    seek_past,
    unread_sizes,
    wants_more,
)
from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest, submission_position
from chalicelib.domain.scheduling_policies import PassPlan, PoolPolicy, PriorityPass, plan_pass
from chalicelib.services.ports import Ports


@dataclass
class _Stream:
    """One index read page by page: the pool's queue (``job`` None) or one job's requests."""

    job: str | None
    expected: int
    after: str | None = None
    limit: int = PAGE_FIRST
    read: int = 0
    done: bool = False
    last_priority: int = 0


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
    policy: PoolPolicy,
    summary: QueueSummary,
    holdings: Sequence[Holding],
    agents: Sequence[AgentCapacity],
) -> HeadPlan:
    # The first page: as many requests as the free slots could take (each takes one at least), so that a
    # pool with room plans once; a full pool reads one small page.
    room = sum(a.free for a in agents)
    if policy.preemption:
        room += sum(h.slots for h in holdings if h.stopping)
    if policy.kind == "fair_share":
        jobs = summary.jobs
        share = max(1, READ_MAX // max(1, len(jobs)))
        first = min(share, max(1, room // max(1, len(jobs)) + PAGE_FIRST // 8))
        streams = [_Stream(job, count, limit=first) for job, (count, _) in sorted(jobs.items())]
        waiting_slots: dict[str, int] | None = summary.job_slots()
    else:
        streams = [_Stream(None, summary.requests, limit=min(READ_MAX, room + PAGE_FIRST))]
        waiting_slots = None
    read: list[Run] = []
    sizes: Counter[int] = Counter()
    pages = 0
    wanted = streams
    planner = PriorityPass(policy, holdings, agents) if policy.kind != "fair_share" else None
    limits = JobLimits(holdings)
    held_back: dict[str, str] = {}
    while True:
        fresh: list[Run] = []
        for stream in wanted:
            runs = _read_page(ports, pool, stream)
            pages += 1
            fresh.extend(runs)
            sizes.update(run.slots for run in runs)
        read.extend(fresh)
        if planner is not None:  # the priority pass goes on where it stopped
            admitted, held = limits.split([slot_request(run) for run in fresh])
            held_back.update(held)
            plan = planner.feed(admitted)
        else:  # the fair-share pass plans again over every job's head
            requests = [slot_request(run) for run in read]
            admitted, held_back = JobLimits(holdings).split(requests)
            demand = None if waiting_slots is None else capped_demand(waiting_slots, requests, holdings)
            plan = plan_pass(policy, admitted, holdings, agents, waiting_slots=demand)
        left = unread_sizes(summary, sizes)
        if len(read) >= READ_MAX or not left:
            return HeadPlan(plan, read, pages, held_back)
        if planner is None:
            wanted = [s for s in streams if not s.done and s.job in plan.exhausted]
        else:
            wanted = [s for s in streams if not s.done and _wants_more(s, plan.room, left)]
        if not wanted:
            return HeadPlan(plan, read, pages, held_back)


def _wants_more(stream: _Stream, room: Room, sizes: list[int]) -> bool:
    seek = seek_past(room, stream.last_priority)
    if seek is not None and (stream.after is None or seek > stream.after):
        stream.after = seek  # every request up to there could use nothing: do not read them
        stream.last_priority = (
            room.bypass_above + 1 if room.bypass_above is not None else stream.last_priority
        )
    return wants_more(room, sizes, stream.last_priority)


def _read_page(ports: Ports, pool: str, stream: _Stream) -> list[Run]:
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

"""The fair-share scheduler (Determined's `fair_share`), a `SchedulingPolicy`: a pool's slots divided
among its active jobs by weight.

**Shares.** The active jobs are those with requests or holdings. Each job's demand is the slots it holds
(runs not already stopping) plus the slots it asks for; the pool's slots are divided by weighted max-min
fairness (water filling): every job gets ``weight × level`` slots but never more than its demand, and
what a job leaves goes to the others.

**Assignment**, in rounds: the job furthest below its share (held + assigned, per unit of weight; ties in
job order, a job's requests in queue order) places its next request, while that request is within its
share, or while the job holds nothing at all (so a job whose every request is bigger than its share
still runs one). A request within its share that cannot fit blocks: the agent sizes it could use are
protected, as a blocked head's under the priority scheduler, from every request after it, so it is
never starved by jobs taking the slots it waits for one by one. Then, work conserving, the slots left
idle go to any job (again the one furthest below its share first), on unprotected agents only.

**Preemption** (when the pool has it on): a request within its share (or of a job holding nothing)
that cannot fit, after waiting on slots being freed, preempts runs of jobs *over* their share, and only
runs that leave their job at or above its share (so two jobs never preempt each other back and forth);
the fewest victims, from the job most over its share, then the most recently started.

**Over the head of the queue** (`FairShareHeadPass`) it reads one stream per job with requests waiting
(the queue summary names them), since every job below its share may place its next request; each job's
whole demand comes from the summary. It plans again over every job's head after each round of pages,
and reads more of a job only when it used every request of it that it was given.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from chalicelib.domain.job_limits import JobLimits, capped_demand
from chalicelib.domain.queue_head import ANY_PRIORITY, PAGE_FIRST, READ_MAX, QueueStream, QueueSummary
from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest, queue_order
from chalicelib.domain.scheduling_pass import PassPlan, PassState, PoolShape
from chalicelib.domain.scheduling_policy import HeadStep, JobRanking, PoolPolicy, free_room
from chalicelib.domain.scheduling_victims import VictimFilter

_EPSILON = 1e-9


@dataclass(frozen=True)
class FairSharePolicy:
    """The fair-share scheduler of a pool configured as ``config``."""

    config: PoolPolicy
    ranks_jobs_by: ClassVar[JobRanking] = "weight"

    def plan(
        self,
        requests: Sequence[SlotRequest],
        holdings: Sequence[Holding],
        agents: Sequence[AgentCapacity],
        waiting_slots: Mapping[str, int] | None = None,
    ) -> PassPlan:
        config = self.config
        return fair_share_pass(
            config.preemption, config.shape, requests, holdings, agents, waiting_slots=waiting_slots
        )

    def head_pass(
        self, summary: QueueSummary, holdings: Sequence[Holding], agents: Sequence[AgentCapacity]
    ) -> FairShareHeadPass:
        return FairShareHeadPass(self.config, summary, holdings, agents)


class FairShareHeadPass:
    """The fair-share pass over the head of the queue (see the module docstring). The first pages share
    the free slots and `PAGE_FIRST // 8` among the jobs, at most `READ_MAX` in all."""

    def __init__(
        self,
        config: PoolPolicy,
        summary: QueueSummary,
        holdings: Sequence[Holding],
        agents: Sequence[AgentCapacity],
    ) -> None:
        jobs = summary.jobs
        share = max(1, READ_MAX // max(1, len(jobs)))
        room = free_room(config, holdings, agents)
        first = min(share, max(1, room // max(1, len(jobs)) + PAGE_FIRST // 8))
        self.streams = [QueueStream(job, count, limit=first) for job, (count, _) in sorted(jobs.items())]
        self._config = config
        self._holdings = holdings
        self._agents = agents
        self._waiting_slots = summary.job_slots()
        self._read: list[SlotRequest] = []

    def feed(self, fresh: Sequence[SlotRequest]) -> HeadStep:
        """Plan again over every request read (each job's head), its demand capped by its slot limit."""
        self._read.extend(fresh)
        requests, holdings = self._read, self._holdings
        admitted, held_back = JobLimits(holdings).split(requests)
        demand = capped_demand(self._waiting_slots, requests, holdings)
        config = self._config
        plan = fair_share_pass(
            config.preemption, config.shape, admitted, holdings, self._agents, waiting_slots=demand
        )
        return HeadStep(plan, held_back)

    def wants_more(self, stream: QueueStream, plan: PassPlan, unread_sizes: list[int]) -> bool:
        # A job whose every request given was placed, made room for or can never fit.
        return stream.job in plan.exhausted


def water_fill(capacity: float, demand: Mapping[str, float], weight: Mapping[str, float]) -> dict[str, float]:
    """Weighted max-min shares of ``capacity``: each job ``weight × level``, capped at its demand."""
    order = sorted(demand, key=lambda job: demand[job] / weight[job])
    left, left_weight = float(capacity), sum(weight[job] for job in demand)
    shares: dict[str, float] = {}
    for job in order:
        level = left / left_weight if left_weight > 0 else 0.0
        share = max(0.0, min(float(demand[job]), weight[job] * level))
        shares[job] = share
        left -= share
        left_weight -= weight[job]
    return shares


def fair_share_pass(
    preemption: bool,
    shape: PoolShape,
    requests: Sequence[SlotRequest],
    holdings: Sequence[Holding],
    agents: Sequence[AgentCapacity],
    *,
    waiting_slots: Mapping[str, int] | None = None,
) -> PassPlan:
    held: dict[str, int] = {}
    weight: dict[str, float] = {}
    rank: dict[str, tuple[object, ...]] = {}
    for holding in holdings:
        weight.setdefault(holding.job_id, max(holding.weight, _EPSILON))
        rank.setdefault(holding.job_id, (1, holding.job_id))
        if not holding.stopping:
            held[holding.job_id] = held.get(holding.job_id, 0) + holding.slots
    state = PassState(agents, holdings, shape)
    blocked = state.plan.blocked
    pending: dict[str, list[SlotRequest]] = {}
    never_fits: dict[int, str | None] = {}
    for request in queue_order(requests):
        slots = request.slots
        if slots not in never_fits:
            never_fits[slots] = state.never_fits(slots)
        never = never_fits[slots]
        if never is not None:
            blocked[request.run_id] = never
            continue
        job = request.job_id
        queue = pending.get(job)
        if queue is None:
            # Jobs in the order of their queue position (all of a job's requests share it).
            pending[job] = queue = []
            weight.setdefault(job, max(request.weight, _EPSILON))
            rank[job] = (0, request.queue_position, job)
        queue.append(request)
    asked = {job: sum(r.slots for r in queue) for job, queue in pending.items()}
    if waiting_slots is not None:  # only each job's head was read: its whole demand is known apart
        asked = {job: max(n, waiting_slots.get(job, 0)) for job, n in asked.items()}
    demand = {job: held.get(job, 0) + asked.get(job, 0) for job in weight}
    shares = water_fill(state.capacity.total_slots, demand, weight)
    state.plan.shares = shares
    alloc = {job: float(held.get(job, 0)) for job in weight}

    def over(holding: Holding) -> tuple[object, ...]:
        job = holding.job_id
        return (
            (alloc[job] - shares[job]) / weight[job],
            holding.started_at,
            holding.queue_position,
            holding.run_id,
        )

    state.rank_victims(over)
    job_order = sorted(pending, key=rank.__getitem__)
    position = {job: i for i, job in enumerate(job_order)}
    nxt = dict.fromkeys(pending, 0)
    capacity = state.capacity

    def entitled(job: str, request: SlotRequest) -> bool:
        return alloc[job] == 0 or alloc[job] + request.slots <= shares[job] + _EPSILON

    # Round one: within shares, the job furthest below its share first.
    later: list[str] = []
    heap = [(alloc[job] / weight[job], position[job], job) for job in job_order]
    heapq.heapify(heap)
    while heap:
        _, _, job = heapq.heappop(heap)
        request = pending[job][nxt[job]]
        if not entitled(job, request):
            later.append(job)
            continue
        if state.place(request, capacity.protected) is None and not (
            preemption and _preempt_over_share(state, request, alloc, shares)
        ):
            blocked[request.run_id] = state.waiting_reason(request.slots)
            capacity.protect_for(request.slots)
            _rest_wait(state, pending[job][nxt[job] + 1 :], job, alloc[job], shares[job])
            continue
        alloc[job] += request.slots
        nxt[job] += 1
        if nxt[job] < len(pending[job]):
            heapq.heappush(heap, (alloc[job] / weight[job], position[job], job))
    # Round two, work conserving: idle slots to anyone, on agents no blocked request waits for.
    heap = [(alloc[job] / weight[job], position[job], job) for job in later]
    heapq.heapify(heap)
    while heap:
        if capacity.total_free == 0:
            for _, _, job in heap:
                _rest_wait(state, pending[job][nxt[job] :], job, alloc[job], shares[job])
            break
        _, _, job = heapq.heappop(heap)
        request = pending[job][nxt[job]]
        if state.place(request, capacity.protected) is None:
            _rest_wait(state, pending[job][nxt[job] :], job, alloc[job], shares[job])
            continue
        alloc[job] += request.slots
        nxt[job] += 1
        if nxt[job] < len(pending[job]):
            heapq.heappush(heap, (alloc[job] / weight[job], position[job], job))
    plan = state.leave_room(
        preemption, lambda holding: alloc[holding.job_id] > shares[holding.job_id] + _EPSILON
    )
    # Every job whose requests given were all placed, made room for or can never fit: the pass would
    # have gone on to its next request.
    given = {request.job_id for request in requests}
    plan.exhausted = {job for job in given if job not in pending or nxt[job] >= len(pending[job])}
    if plan.room.preemptible is not None:  # any request of a job below its share may preempt them
        plan.room = replace(plan.room, preemptible=ANY_PRIORITY)
    return plan


def _rest_wait(state: PassState, rest: Sequence[SlotRequest], job: str, alloc: float, share: float) -> None:
    reason = f"job {job} has {alloc:g} slots, its fair share is {share:.3g}; no free slot is left for more"
    for request in rest:
        state.plan.blocked.setdefault(request.run_id, reason)


def _preempt_over_share(
    state: PassState, request: SlotRequest, alloc: dict[str, float], shares: Mapping[str, float]
) -> bool:
    if state.wait_for_freeing(request, state.capacity.protected):
        return True
    job = request.job_id

    def eligible(holding: Holding) -> bool:
        other = holding.job_id
        return other != job and alloc[other] - holding.slots >= shares[other] - _EPSILON

    choice = state.choose_victims(request, VictimFilter(eligible, state.capacity.protected))
    if choice is None:
        return False
    left = dict(alloc)
    for victim in choice.victims:
        left[victim.job_id] -= victim.slots
    if any(left[v.job_id] < shares[v.job_id] - _EPSILON for v in choice.victims):
        return False  # together they would leave a job below its share
    state.commit_preemption(request, choice)
    alloc.update(left)
    return True

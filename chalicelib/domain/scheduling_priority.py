"""The priority scheduler (Determined's `priority`), a `SchedulingPolicy`.

Requests are served in queue order (`queue_order`).

- A request that can *never* fit (more slots than the pool's agents could give even all idle, or than a
  pool of known shape could ever hold) is skipped with the reason, and blocks nobody.
- A request that cannot fit *now* is a blocked head. Behind it, a later request may take only:
  (1) slots on agents of a size the head could never use (smaller than it needs on one agent, or, for a
  multi-node head, of a size that does not divide it); taking those can never delay the head; and
  (2) with preemption on, any slots, when its priority is strictly lower than that of every blocked
  head ahead of it: the head can take them back by preemption.
  Why this cannot starve a head: the agents it could use are never given to anyone behind it except runs
  it may preempt, so their slots only come free (runs end) until it fits; only requests ahead of it in
  the queue (higher priority, or moved ahead) go first, which is the order users asked for. With
  preemption off this is stricter than Determined, which backfills requests of the head's own priority:
  there a stream of small trials can starve a big one forever.
- With preemption on, a request that cannot fit first waits for slots that stopping runs will free (and
  reserves them); else it preempts running holdings of *strictly* lower priority (ties never preempt):
  the fewest victims, then the lowest priority, then the most recently started (`scheduling_victims`),
  whose freed slots (on one agent, or whole agents for a multi-node request) make it fit. It is not
  assigned in the same pass (the victims must checkpoint and exit first); the slots it waits for are
  reserved, so no request behind it takes them. Victims already stopping count as freeing but are never
  picked again.

Over the head of the queue (`PriorityHeadPass`) it reads one stream, the pool's queue in order, and the
pass is fed page after page, going on where it stopped (`PriorityPass.feed`). Once blocked heads protect
every agent size, it seeks past the requests of their priorities (`queue_head.seek_past`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from chalicelib.domain.job_limits import JobLimits
from chalicelib.domain.queue_head import (
    PAGE_FIRST,
    READ_MAX,
    QueueStream,
    QueueSummary,
    seek_past,
    wants_more,
)
from chalicelib.domain.scheduling import AgentCapacity, Holding, SlotRequest, queue_order
from chalicelib.domain.scheduling_pass import PassPlan, PassState
from chalicelib.domain.scheduling_policy import HeadStep, JobRanking, PoolPolicy, free_room
from chalicelib.domain.scheduling_victims import VictimFilter


@dataclass(frozen=True)
class PriorityPolicy:
    """The priority scheduler of a pool configured as ``config``."""

    config: PoolPolicy
    ranks_jobs_by: ClassVar[JobRanking] = "priority"

    def plan(
        self,
        requests: Sequence[SlotRequest],
        holdings: Sequence[Holding],
        agents: Sequence[AgentCapacity],
        waiting_slots: Mapping[str, int] | None = None,
    ) -> PassPlan:
        return PriorityPass(self.config, holdings, agents).feed(queue_order(requests))

    def head_pass(
        self, summary: QueueSummary, holdings: Sequence[Holding], agents: Sequence[AgentCapacity]
    ) -> PriorityHeadPass:
        return PriorityHeadPass(self.config, summary, holdings, agents)


class PriorityHeadPass:
    """The priority pass over the head of the queue: one stream, the pool's queue in order, whose first
    page holds as many requests as the free slots could take plus `PAGE_FIRST`; each page fed goes
    through the jobs' slot limits (`JobLimits`, in queue order) into the same `PriorityPass`."""

    def __init__(
        self,
        config: PoolPolicy,
        summary: QueueSummary,
        holdings: Sequence[Holding],
        agents: Sequence[AgentCapacity],
    ) -> None:
        first = min(READ_MAX, free_room(config, holdings, agents) + PAGE_FIRST)
        self.streams = [QueueStream(None, summary.requests, limit=first)]
        self._pass = PriorityPass(config, holdings, agents)
        self._limits = JobLimits(holdings)
        self._held_back: dict[str, str] = {}

    def feed(self, fresh: Sequence[SlotRequest]) -> HeadStep:
        admitted, held = self._limits.split(fresh)
        self._held_back.update(held)
        return HeadStep(self._pass.feed(admitted), self._held_back)

    def wants_more(self, stream: QueueStream, plan: PassPlan, unread_sizes: list[int]) -> bool:
        room = plan.room
        seek = seek_past(room, stream.last_priority)
        if seek is not None and (stream.after is None or seek > stream.after):
            stream.after = seek  # every request up to there could use nothing: do not read them
            stream.last_priority = (
                room.bypass_above + 1 if room.bypass_above is not None else stream.last_priority
            )
        return wants_more(room, unread_sizes, stream.last_priority)


def _priority_worthiness(holding: Holding) -> tuple[object, ...]:
    # The best victim first: the highest priority number, then the most recently started.
    return (holding.priority, holding.started_at, holding.queue_position, holding.run_id)


class PriorityPass:
    """The priority pass, fed the queue a part at a time (`feed`, in queue order): each decision depends
    only on the requests ahead, so a pass over the head of the queue goes on where it stopped when the
    reader brings the next page, instead of planning again from the first request."""

    def __init__(
        self, policy: PoolPolicy, holdings: Sequence[Holding], agents: Sequence[AgentCapacity]
    ) -> None:
        self.policy = policy
        self.state = PassState(agents, holdings, policy.shape, _priority_worthiness, monotone_victims=True)
        self.heads: list[SlotRequest] = []
        self.failed = _Failures(self.state.capacity.largest)
        self.settled: dict[tuple[int, int], str] = {}  # (slots, capacity version) -> why it waits
        #: Nothing after this point can be placed or preempt: every later request only waits.
        self.closed = False

    def feed(self, order: Sequence[SlotRequest]) -> PassPlan:
        """Decide ``order`` (sorted, after every request fed before); the plan so far."""
        policy, state, heads = self.policy, self.state, self.heads
        capacity = state.capacity
        blocked = state.plan.blocked
        for i, request in enumerate(order):
            if self.closed or (capacity.total_free == 0 and not _may_preempt(policy, state, request)):
                self.closed = True
                _all_wait(state, order[i:])
                break
            bypass = policy.preemption and bool(heads) and request.priority > heads[-1].priority
            if not bypass and capacity.all_protected:  # nothing is left for it: only say why
                key = (request.slots, capacity.version)
                reason = self.settled.get(key)
                if reason is None:
                    reason = self.settled[key] = state.never_fits(request.slots) or _reason(
                        state, request, heads
                    )
                blocked[request.run_id] = reason
                continue
            never = state.never_fits(request.slots)
            if never is not None:
                blocked[request.run_id] = never
                continue
            avoid: set[int] | tuple[()] = () if bypass else capacity.protected
            if state.place(request, avoid) is not None:
                continue
            if policy.preemption and not self.failed.known(request.slots, avoid):
                if state.wait_for_freeing(request, avoid):
                    continue
                table_key = (request.slots, request.priority, frozenset(avoid))
                among = VictimFilter(_lower_than(request.priority), avoid, table_key)
                if state.preempt_for(request, among) is not None:
                    continue
                self.failed.add(request.slots, avoid)
            blocked[request.run_id] = _reason(state, request, heads)
            capacity.protect_for(request.slots)
            heads.append(request)
        bypass_above = heads[-1].priority if policy.preemption and heads else None
        return state.leave_room(policy.preemption, lambda holding: True, bypass_above)


class _Failures:
    """Requests that could neither wait for freeing slots nor preempt. Within a pass the slots that
    could come free only shrink, the requests that follow have no higher priority (fewer victims), and
    the protected sizes only grow: so a later request that is no smaller (on one agent), or of the same
    size (on several), fails too, unless it may ignore protection and the failed one could not."""

    def __init__(self, largest: int) -> None:
        self.largest = largest
        self.one_agent: dict[bool, int] = {}  # protected? -> smallest failed slots
        self.multi_node: dict[bool, set[int]] = {True: set(), False: set()}

    def known(self, slots: int, avoid: Collection[int]) -> bool:
        for protected in (False, True) if avoid else (False,):
            if slots <= self.largest:
                if slots >= self.one_agent.get(protected, slots + 1):
                    return True
            elif slots in self.multi_node[protected]:
                return True
        return False

    def add(self, slots: int, avoid: Collection[int]) -> None:
        protected = bool(avoid)
        if slots <= self.largest:
            self.one_agent[protected] = min(self.one_agent.get(protected, slots), slots)
        else:
            self.multi_node[protected].add(slots)


def _lower_than(priority: int) -> Callable[[Holding], bool]:
    """Only holdings of strictly lower priority (a higher number) may be preempted: ties never are."""
    return lambda holding: holding.priority > priority


def _may_preempt(policy: PoolPolicy, state: PassState, request: SlotRequest) -> bool:
    """Whether ``request`` (or any after it: they have no higher priority) could still preempt or claim
    slots being freed. False lets the pass stop placing once the pool is full."""
    if not policy.preemption:
        return False
    if state.capacity.freeing_total > 0:
        return True
    lowest = state.victims.first()
    return lowest is not None and lowest.priority > request.priority


def _all_wait(state: PassState, rest: Sequence[SlotRequest]) -> None:
    blocked = state.plan.blocked
    for request in rest:
        never = state.never_fits(request.slots)
        blocked[request.run_id] = never if never is not None else state.waiting_reason(request.slots)


def _reason(state: PassState, request: SlotRequest, heads: Sequence[SlotRequest]) -> str:
    """Why a request that could not be placed waits: behind the first blocked head when it would fit
    but for that head's protection, else for lack of slots."""
    capacity = state.capacity
    if heads and capacity.protected and state.fits_ignoring_protection(request.slots):
        return state.behind_reason(request.slots, heads[0])
    return state.waiting_reason(request.slots)

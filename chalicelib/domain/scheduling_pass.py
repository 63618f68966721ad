"""One scheduling pass's working state and result, shared by the policies: placing a request now,
waiting for slots being freed, preempting, and the user-facing reason a request waits."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from chalicelib.domain.queue_head import Room
from chalicelib.domain.scheduling import AgentCapacity, Assignment, Holding, SlotRequest
from chalicelib.domain.scheduling_capacity import PassCapacity
from chalicelib.domain.scheduling_victims import (
    VictimChoice,
    VictimFilter,
    VictimIndex,
    claim_for,
    victims_on_one_agent,
    victims_on_whole_agents,
)
from chalicelib.domain.words import plural


@dataclass
class PassPlan:
    """What one pass decided.

    ``assignments``: runs to launch now. ``preempt``: run ids of holdings to stop through the pause path
    (checkpoint, exit, requeue) so that a waiting request fits; their slots are reserved for it.
    ``preempted_for``: victim run id -> the request it makes room for. ``blocked``: run id -> why it waits
    (every request not assigned). ``shares``: the fair-share scheduler's slots per job (empty for the
    priority scheduler). ``room``: what is left for requests the pass was not given (`queue_head`)."""

    assignments: list[Assignment] = field(default_factory=list)
    preempt: list[str] = field(default_factory=list)
    preempted_for: dict[str, str] = field(default_factory=dict)
    blocked: dict[str, str] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)
    room: Room = field(default_factory=Room)
    #: Fair share: the jobs whose every request given was placed or made room for (the pass would have
    #: gone on with their next one).
    exhausted: set[str] = field(default_factory=set)
    #: The requests that wait for slots stopping runs free, reserved for them.
    reserved: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class PoolShape:
    """What the pool could ever offer, where known (from its `PoolSpec`)."""

    slots_per_agent: int | None = None
    max_agents: int | None = None


def shape_refusal(slots: int, shape: PoolShape) -> str | None:
    """Why a request of ``slots`` can never fit a pool of this shape, or None (it can, or the shape is
    not known well enough to say)."""
    per_agent = shape.slots_per_agent
    if per_agent is None or per_agent <= 0 or slots <= per_agent:
        return None
    if slots % per_agent:
        return (
            f"can never fit: needs {slots} slots, more than one agent of the pool has ({per_agent}), "
            f"and {per_agent} does not divide {slots} into whole agents"
        )
    if shape.max_agents is not None and slots // per_agent > shape.max_agents:
        return (
            f"can never fit: needs {slots} slots, the pool has {shape.max_agents * per_agent} at most "
            f"({plural(shape.max_agents, 'agent')} of {per_agent})"
        )
    return None


class PassState:
    def __init__(
        self,
        agents: Sequence[AgentCapacity],
        holdings: Sequence[Holding],
        shape: PoolShape,
        worthiness: Callable[[Holding], tuple[object, ...]] = lambda holding: (),
        *,
        monotone_victims: bool = False,
    ) -> None:
        self.capacity = PassCapacity(agents)
        self.holdings = holdings
        self.shape = shape
        self.plan = PassPlan()
        for holding in holdings:
            if holding.stopping:
                for agent, held in holding.placements.items():
                    self.capacity.add_freeing(agent, held)
        self._worthiness = worthiness
        self._monotone_victims = monotone_victims
        self._victims: VictimIndex | None = None
        self._never: dict[int, str | None] = {}
        self._waits: dict[tuple[int, int], str] = {}
        self._fits: dict[tuple[int, int], bool] = {}
        self._behind: dict[tuple[int, str], str] = {}

    # -- placing -------------------------------------------------------------------------------------

    def place(self, request: SlotRequest, avoid: Collection[int] = ()) -> Assignment | None:
        capacity = self.capacity
        slots = request.slots
        if capacity.total_free < slots:
            return None
        if slots <= 0:
            if not capacity.free:
                return None
            fullest = min(capacity.free, key=lambda a: (capacity.free[a], a))
            return self._assign(Assignment(run_id=request.run_id, agent_id=fullest))
        if slots <= capacity.largest:
            agent = capacity.best_fit(slots, avoid)
            if agent is None:
                return None
            capacity.take(agent, slots)
            return self._assign(Assignment(run_id=request.run_id, agent_id=agent))
        nodes = capacity.idle_nodes(slots, avoid)
        if nodes is None:
            return None
        for agent in nodes:
            capacity.take(agent, capacity.size[agent])
        return self._assign(Assignment(run_id=request.run_id, agent_id=nodes[0], nodes=nodes))

    def _assign(self, assignment: Assignment) -> Assignment:
        self.plan.assignments.append(assignment)
        return assignment

    def wait_for_freeing(self, request: SlotRequest, avoid: Collection[int] = ()) -> bool:
        """Claim slots that stopping runs will free, when they are enough for ``request``."""
        nodes = self.capacity.fit_with_freeing(request.slots, avoid)
        if nodes is None:
            return False
        if len(nodes) == 1 and request.slots <= self.capacity.size[nodes[0]]:
            self.capacity.claim(nodes[0], request.slots)
        else:
            for agent in nodes:
                self.capacity.claim_whole(agent)
        self.plan.reserved.add(request.run_id)
        self.plan.blocked[request.run_id] = (
            f"waits for the runs stopping on {', '.join(nodes)} to checkpoint and exit; their slots are reserved for it"
        )
        return True

    @property
    def victims(self) -> VictimIndex:
        """The candidate victims, indexed on first use (a pass that preempts nobody never needs them)."""
        if self._victims is None:
            self._victims = VictimIndex(self.holdings, self._worthiness, monotone=self._monotone_victims)
        return self._victims

    def rank_victims(self, worthiness: Callable[[Holding], tuple[object, ...]]) -> None:
        """Order the candidate victims anew (best victim: the greatest ``worthiness``)."""
        self._worthiness = worthiness
        self._victims = None

    def choose_victims(self, request: SlotRequest, among: VictimFilter) -> VictimChoice | None:
        """The victims, among the holdings and agents ``among`` allows, whose slots make ``request`` fit."""
        choose = victims_on_one_agent if request.slots <= self.capacity.largest else victims_on_whole_agents
        return choose(request.slots, self.capacity, self.victims, among)

    def preempt_for(self, request: SlotRequest, among: VictimFilter) -> VictimChoice | None:
        """Choose victims for ``request`` (`choose_victims`); reserve the slots they free."""
        choice = self.choose_victims(request, among)
        if choice is not None:
            self.commit_preemption(request, choice)
        return choice

    def commit_preemption(self, request: SlotRequest, choice: VictimChoice) -> None:
        claim_for(choice, request.slots, self.capacity, self.victims)
        for victim in choice.victims:
            self.plan.preempt.append(victim.run_id)
            self.plan.preempted_for[victim.run_id] = request.run_id
        runs = ", ".join(v.run_id for v in choice.victims)
        self.plan.blocked[request.run_id] = (
            f"preempting {runs} to make room; it starts once they checkpoint and exit"
        )

    def leave_room(
        self, preemption: bool, preemptible: Callable[[Holding], bool], bypass_above: int | None = None
    ) -> PassPlan:
        """The plan, with what is left for requests it was not given (``preemptible``: a holding that
        some request could still preempt; ``bypass_above``: requests of a lower priority than this may
        ignore the blocked heads' protection)."""
        capacity = self.capacity
        preempted = set(self.plan.preempt)
        lowest = None
        if preemption:
            for holding in self.holdings:
                if not holding.stopping and holding.run_id not in preempted and preemptible(holding):
                    lowest = holding.priority if lowest is None else max(lowest, holding.priority)
        self.plan.room = Room(
            most_free=capacity.most_free(),
            idle={size: n for size, n in capacity.idle_count.items() if n > 0},
            largest=capacity.largest,
            freeing=capacity.freeing_total if preemption else 0,
            preemptible=lowest,
            all_protected=capacity.all_protected,
            bypass_above=bypass_above,
        )
        return self.plan

    # -- reasons -------------------------------------------------------------------------------------

    def never_fits(self, slots: int) -> str | None:
        """Why ``slots`` can never fit this pool, or None. A pool of known shape that could hold it once
        grown makes it wait (and hold its place) rather than be skipped."""
        if slots not in self._never:
            self._never[slots] = self._never_fits(slots)
        return self._never[slots]

    def _never_fits(self, slots: int) -> str | None:
        capacity = self.capacity
        if capacity.fits_on_current_agents(slots):
            return None
        refusal = shape_refusal(slots, self.shape)
        if refusal is not None:
            return refusal
        if self.shape.slots_per_agent is not None and self.shape.max_agents is not None:
            return None  # the pool can grow to hold it
        if capacity.total_slots < slots:
            return f"can never fit: needs {slots} slots, the pool has {capacity.total_slots}"
        return (
            f"can never fit: needs {slots} slots, more than one agent has ({capacity.largest}), and the "
            f"pool has no agents of one size that divides {slots} enough to hold it"
        )

    def waiting_reason(self, slots: int) -> str:
        key = (slots, self.capacity.version)
        reason = self._waits.get(key)
        if reason is None:
            reason = self._waiting_reason(slots)
            if len(self._waits) > 256:
                self._waits.clear()
            self._waits[key] = reason
        return reason

    def _waiting_reason(self, slots: int) -> str:
        capacity = self.capacity
        if slots <= capacity.largest:
            return f"needs {_slots(slots)} on one agent; the most free on an agent is {capacity.most_free()}"
        sizes = [d for d in reversed(capacity.sizes) if slots % d == 0]
        if not sizes:  # only a pool that can grow gets here
            return (
                f"needs {slots} slots; waits for the pool to grow (its largest agent has {capacity.largest})"
            )
        size = sizes[0]
        return (
            f"needs {slots} slots; the largest agent has {capacity.largest} and there are no "
            f"{plural(slots // size, 'idle agent')} of {size}"
        )

    def fits_ignoring_protection(self, slots: int) -> bool:
        key = (slots, self.capacity.version)
        if key not in self._fits:
            capacity = self.capacity
            if slots <= capacity.largest:
                fits = capacity.best_fit(slots) is not None
            else:
                fits = capacity.idle_nodes(slots) is not None
            if len(self._fits) > 256:
                self._fits.clear()
            self._fits[key] = fits
        return self._fits[key]

    def behind_reason(self, slots: int, head: SlotRequest) -> str:
        key = (slots, head.run_id)
        reason = self._behind.get(key)
        if reason is not None:
            return reason
        reason = (
            f"needs {_slots(slots)} and waits behind run {head.run_id} (priority {head.priority}, "
            f"{_slots(head.slots)}), which goes first"
        )
        self._behind[key] = reason
        return reason


def _slots(n: int) -> str:
    return "1 slot" if n == 1 else f"{n} slots"

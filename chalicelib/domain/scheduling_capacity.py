"""The free slots of a pool during one scheduling pass, indexed for fast placement.

Within a pass slots are only ever taken, never given back, so an agent's free count only falls. That
lets each (agent size, free count) bucket be a heap of agent ids with lazy deletion: an entry is current
when the agent still has that many free slots. Best fit (the fullest agent that still fits, lowest id
first) then costs a few heap peeks per distinct agent size, not a scan of every agent.

Besides the slots free now, an agent may have slots *being freed*: those of runs already told to stop
(paused or preempted). A request that waits for them claims them, so that no one else counts on the
same slots in this pass.

*Protected* agent sizes are those a blocked request ahead in the queue could use: a request behind it
may not take slots there (see `scheduling_priority` for the rule and why it cannot starve anyone).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence

from chalicelib.domain.scheduling import AgentCapacity


class PassCapacity:
    def __init__(self, agents: Sequence[AgentCapacity]) -> None:
        self.size = {a.agent_id: a.slots for a in agents}
        self.free = {a.agent_id: a.free for a in agents}
        #: Slots of stopping runs, not yet claimed by a waiting request (agents with none are left out).
        self.freeing: dict[str, int] = {}
        self.freeing_total = 0
        self.sizes = sorted({a.slots for a in agents if a.slots > 0})
        self.count_by_size: dict[int, int] = {}
        self.idle_count: dict[int, int] = {}
        self.total_slots = sum(max(0, a.slots) for a in agents)
        self.total_free = 0
        self._buckets: dict[tuple[int, int], list[str]] = {}
        self._idle: dict[int, list[str]] = {}
        for agent_id in sorted(self.size):
            size, free = self.size[agent_id], self.free[agent_id]
            if size <= 0:
                continue
            self.count_by_size[size] = self.count_by_size.get(size, 0) + 1
            self.total_free += free
            if free > 0:
                self._buckets.setdefault((size, free), []).append(agent_id)  # sorted: a heap
            if free == size:
                self._idle.setdefault(size, []).append(agent_id)
                self.idle_count[size] = self.idle_count.get(size, 0) + 1
        self.largest = self.sizes[-1] if self.sizes else 0
        #: Agent sizes a blocked request ahead could use (see the module docstring).
        self.protected: set[int] = set()
        #: Every agent size is protected: only requests allowed to ignore protection can be placed.
        self.all_protected = not self.sizes
        #: Counts changes, so that messages computed from the free slots can be cached between them.
        self.version = 0

    # -- what could ever fit -------------------------------------------------------------------------

    def fits_on_current_agents(self, slots: int) -> bool:
        """Whether the pool's agents, all idle, could hold ``slots`` (one agent, or whole agents)."""
        if slots <= self.largest:
            return True
        return any(slots % d == 0 and self.count_by_size[d] >= slots // d for d in self.sizes)

    def usable_sizes(self, slots: int) -> list[int]:
        """The agent sizes a request of ``slots`` could ever be placed on."""
        if slots <= self.largest:
            return [d for d in self.sizes if d >= slots]
        return [d for d in self.sizes if slots % d == 0]

    def protect_for(self, slots: int) -> None:
        if not self.all_protected:
            self.protected.update(self.usable_sizes(slots))
            self.all_protected = len(self.protected) == len(self.sizes)

    # -- placing now ---------------------------------------------------------------------------------

    def _top(self, size: int, free: int) -> str | None:
        heap = self._buckets.get((size, free))
        while heap:
            agent = heap[0]
            if self.free[agent] == free:
                return agent
            heapq.heappop(heap)
        return None

    def best_fit(self, slots: int, avoid: Collection[int] = ()) -> str | None:
        """The fullest agent with ``slots`` free (lowest id among equals), skipping sizes in ``avoid``."""
        best: tuple[int, str] | None = None
        for size in self.sizes:
            if size < slots or size in avoid:
                continue
            for free in range(slots, size + 1):
                if best is not None and free > best[0]:
                    break
                agent = self._top(size, free)
                if agent is not None:
                    if best is None or (free, agent) < best:
                        best = (free, agent)
                    break
        return best[1] if best else None

    def idle_nodes(self, slots: int, avoid: Collection[int] = ()) -> tuple[str, ...] | None:
        """Whole idle agents of one size that hold exactly ``slots``, as `multi_node_placement` picks them
        (the largest size that divides ``slots``, lowest ids), without taking them."""
        for size in reversed(self.sizes):
            if slots % size or size in avoid:
                continue
            count = slots // size
            if self.idle_count.get(size, 0) < count:
                continue
            heap = self._idle[size]
            picked: list[str] = []
            while len(picked) < count:
                agent = heapq.heappop(heap)
                if self.free[agent] == size:
                    picked.append(agent)
            for agent in picked:
                heapq.heappush(heap, agent)
            return tuple(picked)
        return None

    def take(self, agent: str, slots: int) -> None:
        free = self.free[agent]
        size = self.size[agent]
        slots = min(slots, free)
        if slots <= 0:
            return
        if free == size:
            self.idle_count[size] -= 1
        self.version += 1
        self.free[agent] = free - slots
        self.total_free -= slots
        if free - slots > 0:
            heapq.heappush(self._buckets.setdefault((size, free - slots), []), agent)

    def most_free(self) -> int:
        """The most free slots on any one agent (for messages)."""
        best = 0
        for size in self.sizes:
            for free in range(size, best, -1):
                if self._top(size, free) is not None:
                    best = free
                    break
        return best

    # -- slots being freed ---------------------------------------------------------------------------

    def add_freeing(self, agent: str, slots: int) -> None:
        if agent in self.size and slots > 0:
            self.freeing[agent] = self.freeing.get(agent, 0) + slots
            self.freeing_total += slots

    def claim(self, agent: str, slots: int) -> None:
        """Reserve ``slots`` on ``agent`` for a request that waits: free slots first, then slots being
        freed there."""
        from_free = min(slots, self.free[agent])
        self.take(agent, from_free)
        rest = slots - from_free
        if rest > 0:
            before = self.freeing.pop(agent, 0)
            if before > rest:
                self.freeing[agent] = before - rest
            self.freeing_total -= min(before, rest)

    def claim_whole(self, agent: str) -> None:
        self.take(agent, self.free[agent])
        self.freeing_total -= self.freeing.pop(agent, 0)

    def soon_free(self, agent: str) -> int:
        return self.free[agent] + self.freeing.get(agent, 0)

    def fit_with_freeing(self, slots: int, avoid: Collection[int] = ()) -> tuple[str, ...] | None:
        """Agents that will hold ``slots`` once the stopping runs exit (unclaimed slots only): one agent
        (fullest first) when ``slots`` fits on one, else whole agents of one size."""
        waiting = [a for a in self.freeing if self.size[a] not in avoid] if avoid else list(self.freeing)
        if not waiting:
            return None
        if slots <= self.largest:
            fitting = [a for a in waiting if self.size[a] >= slots and self.soon_free(a) >= slots]
            if not fitting:
                return None
            return (min(fitting, key=lambda a: (self.soon_free(a), a)),)
        for size in reversed(self.sizes):
            if slots % size or size in avoid:
                continue
            count = slots // size
            ready = sorted(a for a in waiting if self.size[a] == size and self.soon_free(a) == size)
            idle = self.idle_count.get(size, 0)
            if idle + len(ready) < count:
                continue
            nodes = list(ready[:count])
            if len(nodes) < count:
                idle_now = self.idle_nodes(
                    (count - len(nodes)) * size, avoid=[s for s in self.sizes if s != size]
                )
                if idle_now is None:
                    continue
                nodes = sorted([*idle_now, *nodes])
            return tuple(nodes)
        return None

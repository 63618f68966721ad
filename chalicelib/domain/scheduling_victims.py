"""Choosing which running runs to preempt so that a waiting request fits.

The choice: the fewest victims; among sets of that size, the most preferable ones, compared as the sorted
list of their preference ranks (the policy ranks victims: the priority scheduler prefers the lowest
priority, then the most recently started). For a request that fits on one agent, the victims' slots
on that one agent must make it fit; for a multi-node request, whole agents of one size must become idle.

One agent: exact. Each agent's fewest victims is the smallest k whose k largest candidates free enough;
the preferred k-set is built greedily in rank order, taking a candidate whenever the largest of the
candidates ranked after it can still complete the set. Multi-node: greedy by marginal victims (exact when
every victim holds slots on one agent; a victim spanning agents makes the choice a set cover, where the
greedy is a good, not always minimal, answer).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.scheduling import Holding
from chalicelib.domain.scheduling_capacity import PassCapacity

#: How many best candidates are tried as single victims before a table is built.
_FAST_TRIES = 32


@dataclass(frozen=True)
class VictimChoice:
    agents: tuple[str, ...]
    victims: tuple[Holding, ...]

    def key(self, rank: Mapping[str, int]) -> tuple[int, list[int], tuple[str, ...]]:
        if len(self.victims) == 1:
            return (1, [rank[self.victims[0].run_id]], self.agents)
        return (len(self.victims), sorted(rank[v.run_id] for v in self.victims), self.agents)


@dataclass(frozen=True)
class VictimFilter:
    """Which holdings a request may preempt, and where: those ``eligible`` accepts, for slots on agents
    of no size in ``avoid`` (the sizes blocked heads protect). ``table_key``: equal for requests of
    equal size, eligibility and ``avoid``, whose choices are then kept in tables across the pass (see
    `victims_on_one_agent`); None: nothing is kept."""

    eligible: Callable[[Holding], bool]
    avoid: Collection[int] = ()
    table_key: Hashable | None = None


class VictimIndex:
    """The holdings a pass may preempt, best victim first (``ranked``): those with the greatest
    ``worthiness`` key (the priority scheduler's: priority number, then start time, both highest first)."""

    def __init__(
        self,
        holdings: Sequence[Holding],
        worthiness: Callable[[Holding], tuple[Any, ...]],
        *,
        monotone: bool = False,
    ) -> None:
        self.ranked = sorted((h for h in holdings if not h.stopping), key=worthiness, reverse=True)
        self.rank = {h.run_id: i for i, h in enumerate(self.ranked)}
        self.gone: set[str] = set()  # preempted earlier in this pass
        #: Whether a holding ineligible for a request makes every holding after it in ``ranked``
        #: ineligible too (the priority scheduler's: ranked by priority, eligible above a threshold).
        self.monotone = monotone
        self._start = 0  # ranked[:_start] are all gone
        #: Each agent's holdings that may be preempted, best victim first.
        self.on_agent: dict[str, list[Holding]] = {}
        for holding in self.ranked:
            for agent in holding.placements:
                self.on_agent.setdefault(agent, []).append(holding)
        #: Per (request size, eligibility, protected sizes): a heap of (choice key, agent) whose keys
        #: are never better than the agents' current best (see `victims_on_one_agent`).
        self.tables: dict[Hashable, list[tuple[tuple[int, list[int], tuple[str, ...]], str]]] = {}

    def first(self) -> Holding | None:
        """The best victim still in place (for the priority scheduler: the lowest priority)."""
        ranked, gone = self.ranked, self.gone
        while self._start < len(ranked) and ranked[self._start].run_id in gone:
            self._start += 1
        return ranked[self._start] if self._start < len(ranked) else None

    def candidates(self, eligible: Callable[[Holding], bool]) -> Iterator[Holding]:
        """The holdings still in place that ``eligible`` accepts, best victim first."""
        ranked, gone = self.ranked, self.gone
        while self._start < len(ranked) and ranked[self._start].run_id in gone:
            self._start += 1
        for holding in ranked[self._start :] if self._start else ranked:
            if holding.run_id in gone:
                continue
            if eligible(holding):
                yield holding
            elif self.monotone:
                return


def _fewest_on_one_agent(need: int, cands: list[tuple[int, int, Holding]]) -> list[Holding] | None:
    """The preferred smallest set of (slots, rank, holding) candidates, given best rank first, that
    frees at least ``need``."""
    for slots, _, holding in cands:  # one victim is enough: the best ranked that is
        if slots >= need:
            return [holding]
    by_size = sorted((c[0] for c in cands), reverse=True)
    total, k = 0, 0
    for n in by_size:
        if total >= need:
            break
        total += n
        k += 1
    if total < need:
        return None
    chosen: list[Holding] = []
    freed = 0
    for i, (slots, _, holding) in enumerate(cands):
        left = k - len(chosen) - 1
        if left < 0:
            break
        rest = sorted((c[0] for c in cands[i + 1 :]), reverse=True)[:left]
        if freed + slots + sum(rest) >= need:
            chosen.append(holding)
            freed += slots
            if freed >= need and len(chosen) == k:
                break
    return chosen if freed >= need else None


def _best_on_agent(
    agent: str, slots: int, capacity: PassCapacity, index: VictimIndex, eligible: Callable[[Holding], bool]
) -> VictimChoice | None:
    need = slots - capacity.soon_free(agent)
    if need <= 0:
        return None
    gone, rank = index.gone, index.rank
    cands = [
        (h.placements[agent], rank[h.run_id], h)
        for h in index.on_agent.get(agent, ())
        if h.run_id not in gone and eligible(h)
    ]
    chosen = _fewest_on_one_agent(need, cands) if cands else None
    return VictimChoice((agent,), tuple(chosen)) if chosen else None


def victims_on_one_agent(
    slots: int, capacity: PassCapacity, index: VictimIndex, among: VictimFilter
) -> VictimChoice | None:
    """The best victims on one agent for a request of ``slots``. With a ``table_key`` (equal keys: equal
    size, eligibility and protected sizes) each agent's best choice is computed once per key and kept
    in a heap: within a pass an agent's options only get worse (its slots are taken, its candidates
    preempted), so the heap's top, recomputed and found unchanged, is the best."""
    eligible, avoid, table_key = among.eligible, among.avoid, among.table_key
    if all(size in avoid for size in capacity.sizes if size >= slots):
        return None
    cands: list[Holding] = []
    # In preference order, the first candidate that alone makes the request fit is the best choice
    # (with a table, only the first few are tried this way: the table finds the rest).
    for holding in index.candidates(eligible):
        cands.append(holding)
        for agent, held in holding.placements.items():
            size = capacity.size.get(agent, 0)
            if size >= slots and size not in avoid and capacity.soon_free(agent) + held >= slots:
                return VictimChoice((agent,), (holding,))
        if table_key is not None and len(cands) >= _FAST_TRIES:
            break
    if table_key is not None:
        return _from_table(slots, capacity, index, among) if cands else None
    if not cands:
        return None
    per_agent: dict[str, list[tuple[int, int, Holding]]] = {}
    for holding in cands:  # best rank first, so each agent's list is too
        for agent, held in holding.placements.items():
            size = capacity.size.get(agent, 0)
            if size >= slots and size not in avoid:
                per_agent.setdefault(agent, []).append((held, index.rank[holding.run_id], holding))
    best: VictimChoice | None = None
    for agent in sorted(per_agent):
        need = slots - capacity.soon_free(agent)
        if need <= 0:
            continue
        chosen = _fewest_on_one_agent(need, per_agent[agent])
        if chosen is None:
            continue
        choice = VictimChoice((agent,), tuple(chosen))
        if best is None or choice.key(index.rank) < best.key(index.rank):
            best = choice
    return best


def _from_table(
    slots: int, capacity: PassCapacity, index: VictimIndex, among: VictimFilter
) -> VictimChoice | None:
    eligible, avoid, table_key = among.eligible, among.avoid, among.table_key
    heap = index.tables.get(table_key)
    if heap is None:
        agents = {agent for holding in index.candidates(eligible) for agent in holding.placements}
        heap = []
        for agent in agents:
            size = capacity.size.get(agent, 0)
            if size >= slots and size not in avoid:
                choice = _best_on_agent(agent, slots, capacity, index, eligible)
                if choice is not None:
                    heap.append((choice.key(index.rank), agent))
        heapq.heapify(heap)
        index.tables[table_key] = heap
    while heap:
        key, agent = heap[0]
        choice = _best_on_agent(agent, slots, capacity, index, eligible)
        if choice is None:
            heapq.heappop(heap)
            continue
        current = choice.key(index.rank)
        if current == key:
            return choice
        heapq.heapreplace(heap, (current, agent))
    return None


def victims_on_whole_agents(
    slots: int, capacity: PassCapacity, index: VictimIndex, among: VictimFilter
) -> VictimChoice | None:
    """Victims that leave ``slots // d`` whole agents of one size ``d`` idle (or freeing). With a
    ``table_key``, each agent's cost is kept in a heap as `victims_on_one_agent` does, and the agents
    are taken cheapest first (victims shared by several agents are then counted once per agent)."""
    if among.table_key is not None:
        return _whole_from_table(slots, capacity, index, among)
    eligible, avoid, gone = among.eligible, among.avoid, index.gone
    best: VictimChoice | None = None
    for size in capacity.sizes:
        if slots % size or size in avoid:
            continue
        count = slots // size
        viable: dict[str, set[str]] = {}
        by_id: dict[str, Holding] = {}
        for agent, agent_size in capacity.size.items():
            if agent_size != size:
                continue
            here = [h for h in index.on_agent.get(agent, ()) if h.run_id not in gone]
            if any(not eligible(h) for h in here):
                continue
            if capacity.soon_free(agent) + sum(h.placements[agent] for h in here) != size:
                continue
            viable[agent] = {h.run_id for h in here}
            by_id.update({h.run_id: h for h in here})
        if len(viable) < count:
            continue
        picked: list[str] = []
        victims: set[str] = set()
        for _ in range(count):
            agent = min(
                (a for a in viable if a not in picked),
                key=lambda a: (
                    len(viable[a] - victims),
                    sorted(index.rank[r] for r in viable[a] - victims),
                    a,
                ),
            )
            picked.append(agent)
            victims |= viable[agent]
        choice = VictimChoice(
            tuple(sorted(picked)), tuple(by_id[r] for r in sorted(victims, key=index.rank.__getitem__))
        )
        if best is None or choice.key(index.rank) < best.key(index.rank):
            best = choice
    return best


def claim_for(choice: VictimChoice, slots: int, capacity: PassCapacity, index: VictimIndex) -> None:
    """Mark the victims preempted and reserve the request's slots on the chosen agents."""
    for victim in choice.victims:
        index.gone.add(victim.run_id)
        for agent, held in victim.placements.items():
            capacity.add_freeing(agent, held)
        if len(victim.placements) > 1:
            index.tables.clear()  # its other agents gain slots being freed: their options improve
    if len(choice.agents) == 1 and slots <= capacity.size[choice.agents[0]]:
        capacity.claim(choice.agents[0], slots)
    else:
        for agent in choice.agents:
            capacity.claim_whole(agent)


def _whole_cost(
    agent: str, capacity: PassCapacity, index: VictimIndex, eligible: Callable[[Holding], bool]
) -> tuple[Holding, ...] | None:
    """The holdings to preempt for ``agent`` to be wholly free, or None if it cannot be."""
    here = tuple(h for h in index.on_agent.get(agent, ()) if h.run_id not in index.gone)
    if any(not eligible(h) for h in here):
        return None
    if capacity.soon_free(agent) + sum(h.placements[agent] for h in here) != capacity.size[agent]:
        return None
    return here


def _whole_from_table(
    slots: int, capacity: PassCapacity, index: VictimIndex, among: VictimFilter
) -> VictimChoice | None:
    eligible, avoid, table_key = among.eligible, among.avoid, among.table_key
    best: VictimChoice | None = None
    for size in capacity.sizes:
        if slots % size or size in avoid:
            continue
        count = slots // size
        heap = index.tables.get((table_key, size))
        if heap is None:
            heap = []
            for agent, agent_size in capacity.size.items():
                if agent_size == size:
                    cost = _whole_cost(agent, capacity, index, eligible)
                    if cost is not None:
                        heap.append((VictimChoice((agent,), cost).key(index.rank), agent))
            heapq.heapify(heap)
            index.tables[(table_key, size)] = heap
        picked: list[tuple[tuple[int, list[int], tuple[str, ...]], str, tuple[Holding, ...]]] = []
        while heap and len(picked) < count:
            key, agent = heapq.heappop(heap)
            cost = _whole_cost(agent, capacity, index, eligible)
            if cost is None:
                continue
            current = VictimChoice((agent,), cost).key(index.rank)
            if current != key:
                heapq.heappush(heap, (current, agent))
                continue
            picked.append((key, agent, cost))
        for key, agent, _ in picked:
            heapq.heappush(heap, (key, agent))
        if len(picked) < count:
            continue
        victims = {h.run_id: h for _, _, cost in picked for h in cost}
        choice = VictimChoice(
            tuple(sorted(agent for _, agent, _ in picked)),
            tuple(sorted(victims.values(), key=lambda h: index.rank[h.run_id])),
        )
        if best is None or choice.key(index.rank) < best.key(index.rank):
            best = choice
    return best

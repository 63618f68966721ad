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

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.scheduling import Holding
from chalicelib.domain.scheduling_capacity import PassCapacity


@dataclass(frozen=True)
class VictimChoice:
    agents: tuple[str, ...]
    victims: tuple[Holding, ...]

    def key(self, rank: Mapping[str, int]) -> tuple[int, list[int], tuple[str, ...]]:
        return (len(self.victims), sorted(rank[v.run_id] for v in self.victims), self.agents)


class VictimIndex:
    """The holdings a pass may preempt, best victim first (``ranked``): those with the greatest
    ``worthiness`` key (the priority scheduler's: priority number, then start time, both highest first)."""

    def __init__(self, holdings: Sequence[Holding], worthiness: Callable[[Holding], tuple[Any, ...]]) -> None:
        self.ranked = sorted((h for h in holdings if not h.stopping), key=worthiness, reverse=True)
        self.rank = {h.run_id: i for i, h in enumerate(self.ranked)}
        self.gone: set[str] = set()  # preempted earlier in this pass

    def candidates(self, eligible: Callable[[Holding], bool]) -> list[Holding]:
        return [h for h in self.ranked if h.run_id not in self.gone and eligible(h)]


def _fewest_on_one_agent(need: int, cands: list[tuple[int, int, Holding]]) -> list[Holding] | None:
    """The preferred smallest set of (slots, rank, holding) candidates freeing at least ``need``."""
    by_size = sorted((c[0] for c in cands), reverse=True)
    total, k = 0, 0
    for n in by_size:
        if total >= need:
            break
        total += n
        k += 1
    if total < need:
        return None
    ordered = sorted(cands, key=lambda c: c[1])
    chosen: list[Holding] = []
    freed = 0
    for i, (slots, _, holding) in enumerate(ordered):
        left = k - len(chosen) - 1
        if left < 0:
            break
        rest = sorted((c[0] for c in ordered[i + 1 :]), reverse=True)[:left]
        if freed + slots + sum(rest) >= need:
            chosen.append(holding)
            freed += slots
            if freed >= need and len(chosen) == k:
                break
    return chosen if freed >= need else None


def victims_on_one_agent(
    slots: int,
    capacity: PassCapacity,
    index: VictimIndex,
    eligible: Callable[[Holding], bool],
    avoid: Collection[int] = (),
) -> VictimChoice | None:
    cands = index.candidates(eligible)
    if not cands:
        return None
    # Fast path: in preference order, the first candidate that alone makes the request fit is optimal.
    for holding in cands:
        for agent, held in holding.placements.items():
            size = capacity.size.get(agent, 0)
            if size >= slots and size not in avoid and capacity.soon_free(agent) + held >= slots:
                return VictimChoice((agent,), (holding,))
    per_agent: dict[str, list[tuple[int, int, Holding]]] = {}
    for holding in cands:
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


def victims_on_whole_agents(
    slots: int,
    capacity: PassCapacity,
    holdings: Sequence[Holding],
    index: VictimIndex,
    eligible: Callable[[Holding], bool],
    avoid: Collection[int] = (),
) -> VictimChoice | None:
    """Victims that leave ``slots // d`` whole agents of one size ``d`` idle (or freeing)."""
    on_agent: dict[str, list[Holding]] = {}
    ok = {h.run_id: (h.run_id not in index.gone and eligible(h)) for h in holdings if not h.stopping}
    for holding in holdings:
        if holding.stopping:
            continue
        for agent in holding.placements:
            on_agent.setdefault(agent, []).append(holding)
    best: VictimChoice | None = None
    for size in capacity.sizes:
        if slots % size or size in avoid:
            continue
        count = slots // size
        viable: dict[str, set[str]] = {}
        by_id = {}
        for agent, agent_size in capacity.size.items():
            if agent_size != size:
                continue
            here = on_agent.get(agent, [])
            if any(not ok[h.run_id] for h in here):
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
    if len(choice.agents) == 1 and slots <= capacity.size[choice.agents[0]]:
        capacity.claim(choice.agents[0], slots)
    else:
        for agent in choice.agents:
            capacity.claim_whole(agent)

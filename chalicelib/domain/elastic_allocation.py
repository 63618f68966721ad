"""The elastic allocator (docs/architecture.md, "Elastic trials (AdaptDL)"): how many replicas each running elastic trial
should have, decided in the scheduling pass of its pool from what the pass read anyway (the agents' free
slots, the runs holding slots, the requests it could not place) and each trial's speedup table (its AdaptDL
hints, `stratus.contract.adaptdl`: ``speedup(r)`` is the goodput at ``r`` replicas over the goodput at 1, computed
by the trial's launcher with `adaptdl.goodput`; none yet: linear, ``speedup(r) = r``, as optimistic as
AdaptDL's own model is before it has profiled a second batch size).

Pure: no store, no clock. A rescale is a restart (the run is stopped through the pause path, AdaptDL saves
its checkpoint, the trial is requeued with the new size and resumes from it), so the allocator is
conservative about *when*:

- **Shrink first.** For each request the pass could not place, in queue order, it looks for slots that
  elastic runs above their ``min_replicas`` could give up on one agent: among the agents where shrinking
  makes the request fit, the one costing the least speedup (one replica at a time, the smallest loss per
  slot first); or a run on several agents gives up a whole one of them (its replicas on the others stay),
  where that costs less and the queue takes the whole agent (``DROP_USED``). Only runs that are not more
  important than the request (priority number at least the request's) give up slots; a request that cannot be made to fit stops the search (queue order is kept:
  a later, smaller request does not overtake it here). Shrinking is preferred to preempting a fixed trial:
  the elastic trial keeps running, smaller.
- **Grow** only when nothing waits: idle slots go, one step at a time, to the run whose speedup gains the
  most per slot added: within its agent, or by whole idle agents for a run that is alone on its agents
  (AdaptDL's replicas on several nodes, like a multi-node trial). A grow is kept only when it pays for
  its restart: over the time the new size is expected to run (as long as the run has already run since
  its last start, at least the interval), the progress at the new speedup less the restart's
  (``restart_s``, the trial's last one) is at least ``threshold`` times the progress of staying.
- **Never too soon.** A run younger than its ``min_interval_s`` (since its last start) is neither shrunk
  nor grown, so every restart pays off; a run already told to stop is left alone.
- **One promise at a time.** While runs told to stop have not restarted, the slots they will free or take
  back (``in_flight``, from each rescale's ``placements``) count for shrinking, and nothing grows while a
  run is being grown (`plan_rescales`).

Requests that need several agents are not made room for by shrinking (they wait, or preempt, as any
request does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from chalicelib.domain.elastic_runs import ElasticRun, Rescale, Waiting
from chalicelib.domain.scheduling import AgentCapacity

__all__ = ["DROP_USED", "ElasticRun", "Rescale", "Waiting", "grow_into", "plan_rescales", "shrink_for"]

#: The part of an agent given up by a run on several agents that the waiting requests must take
#: (`_cheapest_drop`): all of it. Less (any request that fits, or half the agent used) made mean completion
#: times worse under heavy load in bench/elastic_allocation.py: a run restarted at a fraction of its speed
#: for a request much smaller than the agent.
DROP_USED = 1.0

#: A way to make room for a request: (speedup lost, the agent it frees, {run: target replicas},
#: {run: agent -> the slots it keeps}).
_Cut = tuple[float, str, dict[str, int], dict[str, dict[str, int]]]


def plan_rescales(
    runs: Sequence[ElasticRun],
    agents: Sequence[AgentCapacity],
    waiting: Sequence[Waiting],
    in_flight: Mapping[str, int] | None = None,
) -> list[Rescale]:
    """The rescales of one pass: shrinks for the waiting requests, else grows into idle slots.

    ``in_flight``: agent id -> the slots that runs told to stop will hold there once they restart, less
    what they hold now (a run being grown: more; being shrunk: fewer; stopping for good: minus all it
    holds). A shrink counts the slots coming free, so one request is not made room for twice; nothing
    grows while a run is being grown (a positive entry), so slots promised to one run are not promised to
    another (a run stopping for good does not hold growth back)."""
    if waiting:
        return shrink_for(runs, agents, waiting, in_flight or {})
    if any(change > 0 for change in (in_flight or {}).values()):
        return []
    return grow_into(runs, agents)


# -- shrinking ---------------------------------------------------------------------------------------


def shrink_for(
    runs: Sequence[ElasticRun],
    agents: Sequence[AgentCapacity],
    waiting: Sequence[Waiting],
    in_flight: Mapping[str, int] | None = None,
) -> list[Rescale]:
    change = in_flight or {}
    free = {a.agent_id: min(a.slots, max(0, a.free - change.get(a.agent_id, 0))) for a in agents}
    size = {agent.agent_id: agent.slots for agent in agents}
    targets: dict[str, int] = {}
    by_id = {run.run_id: run for run in runs}
    reasons: dict[str, str] = {}
    made_for: dict[str, str] = {}
    promised: dict[str, dict[str, int]] = {}
    for index, request in enumerate(waiting):
        if request.slots > max(size.values(), default=0):
            break  # several agents: not made room for by shrinking (module docstring)
        if any(f >= request.slots for f in free.values()):
            break  # it fits already: the pass will place it (it waits for something else)
        best = _cheapest_drop(runs, targets, free, waiting[index:])
        for agent in sorted(free):
            if size[agent] < request.slots:
                continue
            on_agent = [
                run
                for run in runs
                if run.movable
                and set(run.placements) == {agent}
                and run.priority >= request.priority
                and targets.get(run.run_id, run.replicas) > run.min_replicas
            ]
            cut = _cheapest_cut(on_agent, targets, request.slots - free[agent])
            if cut is not None and (best is None or cut[0] < best[0]):
                promises = {
                    run_id: {agent: n * by_id[run_id].slots_per_replica} for run_id, n in cut[1].items()
                }
                best = (cut[0], agent, cut[1], promises)
        if best is None:
            break
        _, agent, cut_targets, promises = best
        freed = 0
        for run_id, target in cut_targets.items():
            run = by_id[run_id]
            freed += (targets.get(run_id, run.replicas) - target) * run.slots_per_replica
            targets[run_id] = target
            promised[run_id] = promises[run_id]
            made_for[run_id] = request.run_id
            reasons[run_id] = (
                f"shrink: run {request.run_id} (priority {request.priority}) waits for "
                f"{_slots(request.slots)}; speedup {run.speed(run.replicas):.2f} -> {run.speed(target):.2f}"
            )
        free[agent] += freed - request.slots
    return [
        Rescale(
            run_id,
            by_id[run_id].replicas,
            target,
            reasons[run_id],
            made_for[run_id],
            promised[run_id],
        )
        for run_id, target in targets.items()
        if target != by_id[run_id].replicas
    ]


def _cheapest_drop(
    runs: Sequence[ElasticRun], targets: Mapping[str, int], free: Mapping[str, int], queue: Sequence[Waiting]
) -> _Cut | None:
    """A run on several agents giving up the whole of one of them, where that makes ``queue[0]`` fit and
    the queue (in order, from it) takes at least ``DROP_USED`` of the slots given up: the one losing the
    least speedup, as (loss, agent, {run: target}, {run: where its slots stay}); None if none. AdaptDL's
    replicas are the same number on every node, so a run on several agents shrinks by whole agents, and
    an agent given up for a request much smaller than it would mostly idle (or go to a grow) while the
    run pays a restart at a fraction of its speed."""
    request = queue[0]
    best: _Cut | None = None
    for run in runs:
        if (
            not run.movable
            or len(run.placements) < 2
            or run.priority < request.priority
            or run.run_id in targets
        ):
            continue
        for agent, held in sorted(run.placements.items()):
            if agent not in free or held % run.slots_per_replica or free[agent] + held < request.slots:
                continue
            target = run.replicas - held // run.slots_per_replica
            if (
                target < run.min_replicas
                or _taken(queue, free[agent] + held) - free[agent] < DROP_USED * held
            ):
                continue
            loss = run.speed(run.replicas) - run.speed(target)
            if best is None or (loss, agent) < best[:2]:
                stay = {a: slots for a, slots in run.placements.items() if a != agent}
                best = (loss, agent, {run.run_id: target}, {run.run_id: stay})
    return best


def _taken(queue: Sequence[Waiting], slots: int) -> int:
    """The slots the queue, in order, takes of ``slots`` on one agent (up to the first that does not fit)."""
    taken = 0
    for request in queue:
        if taken + request.slots > slots:
            break
        taken += request.slots
    return taken


def _cheapest_cut(
    runs: Sequence[ElasticRun], targets: Mapping[str, int], need: int
) -> tuple[float, dict[str, int]] | None:
    """Replica counts for ``runs`` freeing at least ``need`` slots with the least speedup lost (one
    replica at a time, the least loss per slot first), with that loss; None when they cannot."""
    current = {run.run_id: targets.get(run.run_id, run.replicas) for run in runs}
    cut: dict[str, int] = {}
    lost = 0.0
    freed = 0
    while freed < need:
        steps = [
            (
                (run.speed(current[run.run_id]) - run.speed(current[run.run_id] - 1)) / run.slots_per_replica,
                run.run_id,
                run,
            )
            for run in runs
            if current[run.run_id] > run.min_replicas
        ]
        if not steps:
            return None
        loss, run_id, run = min(steps, key=lambda s: (s[0], s[1]))
        current[run_id] -= 1
        cut[run_id] = current[run_id]
        lost += loss * run.slots_per_replica
        freed += run.slots_per_replica
    return lost, cut


# -- growing -----------------------------------------------------------------------------------------


@dataclass
class _Pool:
    free: dict[str, int]
    size: dict[str, int]

    def idle(self, slots_each: int, besides: Sequence[str]) -> list[str]:
        return sorted(a for a, f in self.free.items() if a not in besides and f == self.size[a] == slots_each)


def grow_into(runs: Sequence[ElasticRun], agents: Sequence[AgentCapacity]) -> list[Rescale]:
    if not any(a.free for a in agents):
        return []
    candidates = [run for run in runs if run.movable and run.replicas < run.max_replicas]
    while True:  # a run whose share does not pay for its restart leaves it to the others, one at a time
        targets, held = _divide(candidates, agents)
        unpaid = [
            run
            for run in candidates
            if targets[run.run_id] != run.replicas and not run.worth_growing(targets[run.run_id])
        ]
        if not unpaid:
            break
        # first a run that would not pay even with every idle slot to itself, else the least gaining one
        least = min(
            unpaid,
            key=lambda r: (
                _pays_alone(r, agents),
                r.speed(targets[r.run_id]) / r.speed(r.replicas),
                r.run_id,
            ),
        )
        candidates = [run for run in candidates if run is not least]
    idle = sum(a.free for a in agents)
    return [
        Rescale(
            run.run_id,
            run.replicas,
            targets[run.run_id],
            f"grow: {_slots(idle)} idle and nothing queued; speedup {run.speed(run.replicas):.2f} -> "
            f"{run.speed(targets[run.run_id]):.2f}",
            placements=dict(held[run.run_id]),
        )
        for run in candidates
        if targets[run.run_id] != run.replicas
    ]


def _pays_alone(run: ElasticRun, agents: Sequence[AgentCapacity]) -> bool:
    target = _divide([run], agents)[0][run.run_id]
    return target != run.replicas and run.worth_growing(target)


def _divide(
    candidates: Sequence[ElasticRun], agents: Sequence[AgentCapacity]
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The idle slots divided among ``candidates``, one step at a time to the best gain per slot: each
    run's target replicas and where its slots would be."""
    pool = _Pool({a.agent_id: a.free for a in agents}, {a.agent_id: a.slots for a in agents})
    held = {run.run_id: dict(run.placements) for run in candidates}
    targets = {run.run_id: run.replicas for run in candidates}
    while True:
        options = []
        for run in candidates:
            step = _next_step(run, targets[run.run_id], held[run.run_id], pool)
            if step is None:
                continue
            target, taken = step
            gain = (run.speed(target) - run.speed(targets[run.run_id])) / sum(taken.values())
            if gain > 0:
                options.append((-gain, run.priority, run.run_id, target, taken))
        if not options:
            return targets, held
        _, _, run_id, target, taken = min(options, key=lambda o: o[:3])
        targets[run_id] = target
        for agent, slots in taken.items():
            pool.free[agent] -= slots
            held[run_id][agent] = held[run_id].get(agent, 0) + slots


def _next_step(
    run: ElasticRun, current: int, held: Mapping[str, int], pool: _Pool
) -> tuple[int, dict[str, int]] | None:
    """The smallest growth of ``run`` beyond ``current`` replicas that the pool can hold: one more replica
    on its one agent, or, for a run alone on whole agents, enough replicas for one more idle agent."""
    per = run.slots_per_replica
    if current >= run.max_replicas:
        return None
    agents = list(held)
    if len(agents) == 1:
        agent = agents[0]
        if pool.free[agent] >= per and (current + 1) * per <= pool.size[agent]:
            return current + 1, {agent: per}
    sizes = {pool.size[a] for a in agents}
    whole = all(held[a] + pool.free[a] == pool.size[a] for a in agents) and len(sizes) == 1
    if not whole:
        return None
    each = sizes.pop()
    if each % per:
        return None
    target = (len(agents) + 1) * each // per
    idle = pool.idle(each, agents)
    if not idle or target > run.max_replicas:
        return None
    taken = {a: pool.free[a] for a in agents if pool.free[a]}
    taken[idle[0]] = each
    return target, taken


def _slots(n: int) -> str:
    return "1 slot" if n == 1 else f"{n} slots"

"""Elastic trials in the scheduler (docs/architecture.md, "Elastic trials (AdaptDL)"): their size when they are queued,
the elastic allocator's rescales in each scheduling pass, and the record of each run's replicas.

**Queued** (`queued_elastic`): a slot request of an experiment with an `elastic` section asks for the
trial's target replicas (the allocator's last rescale; `min_replicas` at first), clamped to the range the
pool allows, times `slots_per_replica`, whatever size its workflow's input says; the run carries its
rules (`RunElastic`) and why it has that size, so a pass needs no other read to decide about it.

**Each pass** (`rescale`): `chalicelib.domain.elastic_allocation.plan_rescales` over the pool's running
elastic runs old enough to move (`min_rescale_interval_s` since their start), the agents' free slots after
the pass's grants, and the requests it could not place. A rescale writes the trial's new target and the
rescale (`Trial.elastic_target`, `elastic_rescale`), then stops the run through the pause path
(`pausing.preempt_run`): AdaptDL checkpoints on SIGTERM, the launcher exits 0, the workflow requeues the
trial (not a restart) and its new request asks for the new size, at its job's place in the queue. A pass
counts a run released for a rescale as in flight until its new request is queued: the slots it gave back
are promised to it.

**Restart cost**: a grow must pay for its restart (`ElasticRun.worth_growing`); what the trial's last
rescale took, from the decision to the next run's process start, is the estimate (before any rescale: the
run's own start, from its grant to its process).

**In flight** (`in_flight`, `reserve`): until a rescaled run restarts, the slots it will free or take
back are known from its trial's rescale: a shrink counts them (one request is not made room for twice),
nothing grows, and the pass's planner sees the slots promised to a growing run as taken.

**Granted** (`note_granted`): the trial's `elastic_runs` gets the run's replicas and the reason, keyed by
run id (only the pass that wins the run's assignment writes it), for `det trial describe`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from chalicelib.domain import keys
from chalicelib.domain.elastic_allocation import ElasticRun, Waiting, plan_rescales
from chalicelib.domain.records import Experiment, Trial
from chalicelib.domain.run_records import Run
from chalicelib.domain.scheduling import AgentCapacity
from chalicelib.domain.states import RunState
from chalicelib.services import pausing
from chalicelib.services.clock import epoch_of
from chalicelib.services.ports import Ports
from stratus.contract import adaptdl

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunElastic:
    """An elastic run's rules (from the experiment's `elastic` section and its pool) and the reason for
    its size, stored on the run as `Run.elastic`."""

    min_replicas: int
    max_replicas: int
    slots_per_replica: int
    min_interval_s: float
    threshold: float
    reason: str = "start"

    @classmethod
    def of(cls, run: Run) -> RunElastic | None:
        item = run.elastic
        if not item:
            return None
        return cls(
            min_replicas=int(item["min_replicas"]),
            max_replicas=int(item["max_replicas"]),
            slots_per_replica=int(item["slots_per_replica"]),
            min_interval_s=float(item["min_interval_s"]),
            threshold=float(item["threshold"]),
            reason=str(item.get("reason") or "start"),
        )

    def replicas(self, slots: int) -> int:
        return max(1, slots // self.slots_per_replica)


def queued_elastic(ports: Ports, request: Run, experiment: Experiment | None, trial: Trial | None) -> Run:
    """A new slot request, sized and ruled as its elastic trial's (unchanged for any other trial)."""
    if experiment is None or trial is None or (section := experiment.parsed_config.elastic) is None:
        return request
    pool = ports.settings.pool(request.pool)
    limits = [n for n in (pool.max_slots if pool else None, experiment.job_max_slots) if n is not None]
    most = section.replica_limit(min(limits, default=None))
    wanted = trial.elastic_target or section.min_replicas
    replicas = min(max(wanted, section.min_replicas), most)
    rules = RunElastic(
        min_replicas=section.min_replicas,
        max_replicas=most,
        slots_per_replica=section.slots_per_replica,
        min_interval_s=float(section.min_rescale_interval_s),
        threshold=section.speedup_threshold,
        reason=_why(request.run_id, trial),
    )
    return replace(request, slots=replicas * section.slots_per_replica, elastic=asdict(rules))


def _why(run_id: str, trial: Trial) -> str:
    trial_id, attempt = keys.parse_run_id(run_id)
    previous = keys.run_id(trial_id, attempt - 1) if attempt > 1 else None
    rescale = trial.elastic_rescale or {}
    if previous is not None and rescale.get("run") == previous:
        return str(rescale.get("reason") or "rescale")
    if previous is None:
        return "start"
    return f"restart after run {previous} ended"


@dataclass
class InFlight:
    """The rescales not done yet: ``change``, agent id -> the slots the runs told to stop will hold there
    once they restart, less what they hold now (a rescaled elastic run: its new size; anything else:
    nothing); ``shrinking_for``, a waiting request -> the run shrinking for it."""

    change: dict[str, int] = field(default_factory=dict)
    shrinking_for: dict[str, str] = field(default_factory=dict)

    def note_waits(self, blocked: dict[str, str], reserved: set[str]) -> None:
        """Say why a request a shrink makes room for waits (where the plan has no better reason)."""
        for request, run_id in self.shrinking_for.items():
            if request in blocked and request not in reserved:
                blocked[request] = (
                    f"waits for elastic run {run_id} to checkpoint and restart with fewer replicas; "
                    "the slots it gives up are for it"
                )


def in_flight(ports: Ports, holding: Sequence[Run], released: str | None = None) -> InFlight:
    """The pool's rescales in flight (`InFlight`): the runs told to stop, and ``released``, the run whose
    release asked for this pass, if it was stopped for a rescale (it holds nothing any more, and its
    trial's new request is on its way: its promise stands). A rescaled run's trial is read, no other."""
    flight = InFlight()
    change = flight.change
    for run in holding:
        if (run.preempt or run.pausing) and run.placements:
            for placement in run.placements:
                change[placement.agent_id] = change.get(placement.agent_id, 0) - placement.slots
            _promise(ports, run, flight)
    gone = ports.runs.get(released) if released else None
    if gone is not None and gone.state == RunState.EXITED and gone.elastic:
        _promise(ports, gone, flight)
    return flight


def _promise(ports: Ports, run: Run, flight: InFlight) -> None:
    """Add what the run's rescale promised it (the slots it will hold where, once it restarts)."""
    if RunElastic.of(run) is None or not run.requeue:
        return
    trial = ports.trials.get(run.trial_id)
    rescale = (trial.elastic_rescale if trial is not None else None) or {}
    if rescale.get("run") != run.run_id:
        return
    for agent, slots in (rescale.get("agents") or {}).items():
        flight.change[str(agent)] = flight.change.get(str(agent), 0) + int(slots)
    if rescale.get("for"):
        flight.shrinking_for[str(rescale["for"])] = run.run_id


def reserve(agents: Sequence[AgentCapacity], change: Mapping[str, int]) -> list[AgentCapacity]:
    """The agents with the slots promised to rescaled runs taken (so a new request does not take them
    while the run checkpoints)."""
    return [replace(a, used=min(a.slots, a.used + max(change.get(a.agent_id, 0), 0))) for a in agents]


def rescale(
    ports: Ports,
    holding: Sequence[Run],
    agents: Sequence[AgentCapacity],
    waiting: Sequence[Run],
    now: float,
    *,
    change: Mapping[str, int] | None = None,
) -> list[tuple[Run, str | None]]:
    """Plan and start this pass's rescales (module docstring): the runs told to stop for them, each with
    the waiting request it shrinks for (None for a grow). ``waiting``: the requests the pass could not
    place, or none when it placed every request there is (only then may a run grow); ``change``: the
    rescales in flight (`in_flight`)."""
    movable: list[tuple[Run, RunElastic, float]] = []
    for run in holding:
        rules = RunElastic.of(run)
        if rules is None or run.state != RunState.RUNNING or run.preempt or run.pausing:
            continue
        age = now - epoch_of(run.started_at or run.launched_at or run.assigned_at or "")
        if age >= rules.min_interval_s:
            movable.append((run, rules, age))
    if not movable:
        return []
    if not waiting and not any(agent.free for agent in agents):
        return []
    views = _within_job_limits([_view(ports, run, rules, age) for run, rules, age in movable], holding)
    asks = [Waiting(r.run_id, r.slots, r.priority) for r in waiting]
    rescales = plan_rescales(views, agents, asks, change)
    by_id = {run.run_id: run for run, _, _ in movable}
    stopped: list[tuple[Run, str | None]] = []
    for planned in rescales:
        run = by_id[planned.run_id]
        record: dict[str, Any] = {
            "run": run.run_id,
            "from": planned.replicas,
            "to": planned.target,
            "reason": planned.reason,
            "at": ports.clock.now_iso(),
        }
        if planned.for_run is not None:
            record["for"] = planned.for_run
        if planned.placements:
            record["agents"] = dict(planned.placements)
        ports.trials.record_rescale(run.trial_id, planned.target, record)
        pausing.preempt_run(ports, run)
        log.info(
            "run %s: rescaling %d -> %d replicas (%s)",
            run.run_id,
            planned.replicas,
            planned.target,
            planned.reason,
        )
        stopped.append((run, planned.for_run))
    return stopped


def _within_job_limits(views: list[ElasticRun], holding: Sequence[Run]) -> list[ElasticRun]:
    """Each view's `max_replicas` kept within its job's `resources.max_slots` (`job_limits`): the slots the
    job's runs hold, plus a growth, stay within it. One run of a job may grow in a pass (into the job's whole
    headroom); its others keep their size, so two growths together cannot pass the limit."""
    held: dict[int, int] = {}
    limit: dict[int, int] = {}
    for run in holding:
        held[run.experiment_id] = held.get(run.experiment_id, 0) + run.slots
        if run.max_slots > 0:
            limit[run.experiment_id] = run.max_slots
    by_run = {run.run_id: run for run in holding}
    grown: set[int] = set()
    out = []
    for view in views:
        job = by_run[view.run_id].experiment_id
        if job in limit:
            room = max(0, limit[job] - held[job]) // view.slots_per_replica if job not in grown else 0
            grown.add(job)
            most = max(view.min_replicas, min(view.max_replicas, view.replicas + room))
            view = replace(view, max_replicas=most)
        out.append(view)
    return out


def _view(ports: Ports, run: Run, rules: RunElastic, age: float) -> ElasticRun:
    trial = ports.trials.get(run.trial_id)
    hints = (trial.elastic_hints if trial is not None else None) or {}
    restart_s = _restart_s(trial, run) if trial is not None else 0.0
    placements: dict[str, int] = {}
    for placement in run.placements:
        placements[placement.agent_id] = placements.get(placement.agent_id, 0) + placement.slots
    return ElasticRun(
        run_id=run.run_id,
        replicas=rules.replicas(run.slots),
        min_replicas=rules.min_replicas,
        max_replicas=rules.max_replicas,
        slots_per_replica=rules.slots_per_replica,
        priority=run.priority,
        placements=placements,
        age_s=age,
        min_interval_s=rules.min_interval_s,
        threshold=rules.threshold,
        speedup=_speedup(hints.get(adaptdl.SPEEDUP)),
        restart_s=restart_s,
    )


def _restart_s(trial: Trial, run: Run) -> float:
    """What a restart costs the trial: its last rescale, from the decision to the next run's process start,
    if this run follows it; else this run's own start, from its grant to its process (AdaptDL's own start
    after that is not counted)."""
    rescale = trial.elastic_rescale or {}
    trial_id, attempt = keys.parse_run_id(run.run_id)
    started, decided = run.started_at or run.launched_at, rescale.get("at")
    if not started:
        return 0.0
    if attempt > 1 and rescale.get("run") == keys.run_id(trial_id, attempt - 1) and decided:
        return max(0.0, epoch_of(started) - epoch_of(str(decided)))
    return max(0.0, epoch_of(started) - epoch_of(run.assigned_at)) if run.assigned_at else 0.0


def _speedup(table: Mapping[str, Any] | None) -> dict[int, float]:
    """The hints' ``{"<replicas>": factor}`` (validated when stored) with whole-number keys."""
    return {int(r): float(f) for r, f in (table or {}).items()}


def note_granted(ports: Ports, run: Run) -> None:
    """Keep the granted elastic run's replicas and reason on its trial (`Trial.elastic_runs`)."""
    rules = RunElastic.of(run)
    if rules is None:
        return
    trial = ports.trials.get(run.trial_id)
    if trial is None:
        return
    entry: dict[str, Any] = {
        "at": ports.clock.now_iso(),
        "replicas": rules.replicas(run.slots),
        "reason": rules.reason,
    }
    ports.trials.record_replicas(trial.id, {**trial.elastic_runs, run.run_id: entry})

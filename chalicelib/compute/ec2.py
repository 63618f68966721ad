"""The `ec2` backend's scaling: one Auto Scaling group per pool, sized by the control plane.

Instances run the same agent as the local backend (`stratus.harness.agent --aws`, the instance id as agent id),
so launching, stopping and nudging runs is `LocalAgents`' work; this module only decides how many
instances a pool has (`chalicelib.domain.capacity`):

- `set_demand` (each scheduling pass that could not place everything) raises the group's desired size
  to the instances alive plus those the blocked requests need, within the pool's bounds. It never lowers
  it, and calls AWS only when the target is above the instances alive (one Describe, and a Set when the
  desired size must grow), so a pass that places everything costs no AWS call.
- Before raising it, the account's EC2 vCPU quota of the pool's instance family (Service Quotas, the
  table in `stratus.contract.ec2_quotas`) caps it: a group is never asked for more instances than the quota holds
  (counting this group's instances only; other use of the quota is AWS's to refuse), and the log and the
  waiting requests' reasons (`det job list`) say which quota and where to raise it. A quota that cannot
  be read does not hold scaling back.
- `sweep` (the pool's periodic sweep) terminates, one by one and lowering the desired size, the instances
  idle past the pool's idle period (none while requests wait, never below the minimum), and replaces
  those whose agent never joined or went silent; the instance is marked draining first, so that no pass
  places anything on it meanwhile (a pool's passes and sweeps are serialised by its message group). A
  desired size that no longer has a request behind it (instances that never came) is brought back down.
"""

from __future__ import annotations

import logging
import math

from chalicelib.compute.cloud import AutoScalingApi, Group
from chalicelib.compute.pool_compute import BackendParts, PoolComputeDefaults, QuotaApi
from chalicelib.domain.capacity import Instance, Periods, scale_out_target, to_terminate
from chalicelib.services.agent_store import AgentStore
from chalicelib.services.ports import Clock, Demand, RunStore
from stratus.contract.ec2_quotas import CONSOLE_URL, quota_for
from stratus.contract.pools import PoolSpec, Provider

log = logging.getLogger(__name__)


class Ec2Scaler(PoolComputeDefaults):
    def __init__(
        self,
        api: AutoScalingApi,
        agents: AgentStore,
        runs: RunStore,
        clock: Clock,
        agent_timeout_s: float,
        quotas: QuotaApi | None = None,
    ) -> None:
        self._api = api
        self._quotas = quotas
        self._agents = agents
        self._runs = runs
        self._clock = clock
        self._timeout_s = agent_timeout_s

    def set_demand(self, spec: PoolSpec, demand: Demand) -> str | None:
        """Raise the group for what waits; why it cannot grow enough where the account's quota holds it."""
        provider = _provider(spec)
        per_agent = spec.slots_per_agent or 1
        hosts = self._agents.alive(spec.name, self._timeout_s)
        alive = [h for h in hosts if h.accepting]
        drained = {h.host_id for h in hosts if h.draining}
        # Disabled by an operator (`det agent disable`): not capacity, and not terminated early as a draining
        # one is (the sweep's idle scale-in still applies); the group holds them on top of what the
        # accepting ones need.
        disabled = sum(1 for h in hosts if not h.accepting and not h.draining)
        blocked = [*demand.blocked, *[per_agent] * math.ceil(demand.unread_slots / per_agent)]
        target = scale_out_target(
            alive=len(alive),
            blocked=blocked,
            slots_per_agent=per_agent,
            min_instances=provider.min_instances,
            max_instances=max(0, provider.max_instances - disabled),
        )
        if target <= len(alive) and not drained:
            return None
        target = min(target + disabled, provider.max_instances)
        group = self._group(provider)
        if group is None:
            return None
        if drained:
            # Draining instances (about to be reclaimed) that hold nothing any more: replaced now rather
            # than at the reclaim, so that what they ran (requeued, waiting here) resumes sooner.
            holding = {p.agent_id for run in self._runs.allocated(spec.name) for p in run.placements}
            members = {i.instance_id for i in group.live()}
            for instance_id in sorted((drained & members) - holding):
                log.info("pool %s: replacing drained instance %s", spec.name, instance_id)
                self._api.terminate(instance_id, decrement=False)
        capped, held = self._within_quota(spec, target, group.desired)
        if capped > group.desired:
            log.info("pool %s: %d instance(s) wanted (%d alive); group %s desired %d -> %d", spec.name,
                     capped, len(alive), group.name, group.desired, capped)  # fmt: skip
            self._api.set_desired(group.name, capped)
        return held

    def sweep(self, spec: PoolSpec) -> None:
        provider = _provider(spec)
        group = self._group(provider)
        if group is None:
            return
        records = {record.agent_id: record for record in self._agents.in_pool(spec.name)}
        holding = {p.agent_id for run in self._runs.allocated(spec.name) for p in run.placements}
        live = group.live()
        instances = []
        for member in live:
            record = records.get(member.instance_id)
            instances.append(
                Instance(
                    instance_id=member.instance_id,
                    launched_at=member.launched_at,
                    first_seen=record.first_seen if record else None,
                    last_seen=record.last_seen if record else None,
                    busy_at=record.busy_at if record else None,
                    holds_runs=member.instance_id in holding,
                    draining=bool(record and record.draining),
                )
            )
        waiting = self._runs.queue_summary(spec.name).requests > 0
        periods = Periods(
            idle_s=provider.max_idle_agent_period_s,
            starting_s=provider.max_agent_starting_period_s,
            agent_timeout_s=self._timeout_s,
        )
        victims = to_terminate(
            instances, now=self._clock.now(), periods=periods, min_instances=provider.min_instances,
            queue_waiting=waiting,
        )  # fmt: skip
        chosen = {instance_id for instance_id, _ in victims}
        for instance in instances:
            if instance.draining and not instance.holds_runs and instance.instance_id not in chosen:
                victims.append((instance.instance_id, "drained: its machine is being reclaimed"))
        for instance_id, reason in victims:
            if instance_id in records:
                self._agents.set_draining(instance_id)
            log.info("pool %s: terminating instance %s: %s", spec.name, instance_id, reason)
            self._api.terminate(instance_id, decrement=not waiting)
        left = len(live) - len(victims)
        if not waiting and group.desired - len(victims) > max(left, provider.min_instances):
            # Instances asked for and never come, with nothing waiting for them any more.
            log.info(
                "pool %s: group %s desired back to %d",
                spec.name,
                group.name,
                max(left, provider.min_instances),
            )
            self._api.set_desired(group.name, max(left, provider.min_instances))

    def _within_quota(self, spec: PoolSpec, target: int, desired: int) -> tuple[int, str | None]:
        """`target`, or fewer instances where the account's vCPU quota of the family holds no more (never
        below what the group has now), and then why, for the waiting requests."""
        provider = _provider(spec)
        kind = (provider.instance_types or ("",))[0]
        quota = quota_for(kind, provider.spot) if self._quotas is not None else None
        if quota is None or self._quotas is None:
            return target, None
        code, name = quota
        vcpus, value = self._quotas.vcpus(kind), self._quotas.quota(code)
        if not vcpus or value is None:
            return target, None
        most = int(value // vcpus)
        if target <= most:
            return target, None
        log.warning(
            "pool %s: %d x %s (%d vCPUs each) wanted, but the account's quota %s (%s) of %g vCPUs holds %d; "
            "ask for more at %s", spec.name, target, kind, vcpus, code, name, value, most, CONSOLE_URL.format(code=code),
        )  # fmt: skip
        held = (
            f"pool {spec.name} stays at {max(desired, most)} instance(s) of {kind}: the account's quota {code} "
            f"({name}) of {value:g} vCPUs holds no more; ask for more at {CONSOLE_URL.format(code=code)}"
        )
        return max(desired, most), held

    def _group(self, provider: Provider) -> Group | None:
        group = self._api.group(provider.group)
        if group is None:
            log.error(
                "the Auto Scaling group %r of a pool does not exist; redeploy the stack", provider.group
            )
        return group


def _provider(spec: PoolSpec) -> Provider:
    if spec.provider is None or not spec.provider.group:
        raise ValueError(f"pool {spec.name!r} is an ec2 pool without an Auto Scaling group in its provider")
    return spec.provider


def for_pools(parts: BackendParts) -> Ec2Scaler:
    """The `ec2` backend (`chalicelib.compute.backends`): its pools' hosts are their agents."""
    clients = parts.clients
    return Ec2Scaler(
        clients.autoscaling(), parts.agents, parts.runs, parts.clock, parts.agent_timeout_s, clients.quotas()
    )

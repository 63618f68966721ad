"""The `batch` backend: each run is an AWS Batch job, placed by Stratus' scheduler on the pool's lanes.

Batch starts machines for jobs and gives them back; there is no agent to heartbeat before a job runs. So
the pool offers the scheduler `max_agents` *lanes* (`batch-<pool>-<i>`, `slots_per_agent` slots each):
Stratus' priority, fair-share and preemption decide what runs on them, as on any pool, and Batch only
finds the machines. A granted run is launched as usual (its record LAUNCHING, its lanes' agent records to
come), and one job is submitted for it: on the pool's queue (`provider.group`), or, for a run on several
lanes, as a multi-node parallel job on the pool's multi-node queue. The job's container runs the same
agent as everywhere (`harness.agent --only-runs <runs> --batch-agents <lanes>`): each node takes its lane
by its node index, heartbeats as that lane, runs its part and exits once it has ended.

A lane is alive (its run not presumed lost) while it holds nothing, while its job is starting (within the
pool's starting period from the launch), and while its agent heartbeats; a job that never started or
whose agent went silent makes the scheduler end the run (requeued when it never started), and stopping
the run terminates its job. A job that fails without its agent's word (its instance reclaimed, the image
not pulled) comes back as a `Batch Job State Change` event (`chalicelib.services.compute_events`).
"""

from __future__ import annotations

import logging

from chalicelib.compute.cloud import BatchApi, JobRequest
from chalicelib.domain import keys
from chalicelib.domain.pools import PoolSpec
from chalicelib.domain.run_records import Run
from chalicelib.domain.states import RunState
from chalicelib.services.clock import epoch_of
from chalicelib.services.ports import AgentStore, Clock, Host, RunStore

log = logging.getLogger(__name__)

#: Multi-node parallel jobs go to the pool's on-demand queue and job definition of this suffix (AWS Batch
#: runs no multi-node job on spot capacity).
MULTI_NODE_SUFFIX = "-mnp"


def lanes(spec: PoolSpec) -> list[str]:
    count = spec.max_agents or (spec.provider.max_instances if spec.provider else 0)
    return [f"batch-{spec.name}-{i}" for i in range(count)]


class BatchJobs:
    def __init__(
        self,
        api: BatchApi,
        agents: AgentStore,
        runs: RunStore,
        clock: Clock,
        agent_timeout_s: float,
        stack: str,
    ) -> None:
        self._api = api
        self._agents = agents
        self._runs = runs
        self._clock = clock
        self._timeout_s = agent_timeout_s
        self._stack = stack

    def hosts(self, spec: PoolSpec) -> list[Host]:
        slots = spec.slots_per_agent or 1
        starting_s = spec.provider.max_agent_starting_period_s if spec.provider else 1200.0
        heard = {record.agent_id: record.last_seen for record in self._agents.in_pool(spec.name)}
        holding = {p.agent_id: run for run in self._runs.allocated(spec.name) for p in run.placements}
        now = self._clock.now()
        alive = []
        for lane in lanes(spec):
            run = holding.get(lane)
            if run is not None and run.state in (RunState.LAUNCHING, RunState.RUNNING) and run.launched_at:
                launched = epoch_of(run.launched_at)
                last = heard.get(lane)
                since_launch = last if last is not None and last >= launched else None
                if since_launch is None and now - launched > starting_s:
                    continue  # its job never started an agent: lost
                if since_launch is not None and now - since_launch > self._timeout_s:
                    continue  # its agent went silent: lost
            alive.append(Host(lane, slots))
        return alive

    def submit(self, spec: PoolSpec, run: Run) -> None:
        """Submit the job of a launched run (once: a run that has a job keeps it)."""
        if run.compute_ref or spec.provider is None:
            return
        placements = run.placements
        multi = len(placements) > 1
        held = [keys.node_id(run.run_id, rank) for rank in range(len(placements))] if multi else [run.run_id]
        suffix = MULTI_NODE_SUFFIX if multi else ""
        job = JobRequest(
            name=f"{self._stack}-run-{run.run_id}".replace(".", "-")[:128],
            queue=spec.provider.group + suffix,
            definition=spec.provider.group + suffix,
            parameters={"runs": ",".join(held), "agents": ",".join(p.agent_id for p in placements)},
            nodes=len(placements),
            share=f"e{run.experiment_id}",
            priority=max(0, 100 - run.priority),  # Batch: higher first; Determined: lower first
        )
        job_id = self._api.submit(job)
        self._runs.note_compute_ref(run.run_id, job_id)
        log.info("run %s: Batch job %s on %s (%d node(s))", run.run_id, job_id, job.queue, job.nodes)

    def terminate(self, run: Run, reason: str) -> None:
        if run.compute_ref:
            self._api.terminate(run.compute_ref, reason)
